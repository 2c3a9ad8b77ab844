"""Every course op on any GPU of the machine, not just the current one (needs 2 GPUs; skips otherwise).

The usual bug: a kernel launched on the *current* device (or its stream) instead of the device of its
tensors. With one GPU the two are always the same, so only a second GPU shows it. For every op, forward
and backward, every dtype, with the tensors on one GPU while the other is current:
  * the results equal those computed with the tensors' GPU current (same kernels: bit for bit);
  * nothing is allocated on the other GPU;
  * the work goes on PyTorch's current stream *of the tensors' device*: a side stream made current there
    first writes the input (after a delay), so a launch on any other stream reads the old input;
and tensors on two different GPUs get a clear error naming the argument.
The DDP run (two processes, NCCL) is benchmarks/ddp_train.py, run from here.
"""

from __future__ import annotations

import gc
import json
import subprocess
import sys

import pytest
import torch

from helpers import multigpu
from helpers.ops import add_norm as an
from helpers.ops import dropout as dr
from helpers.ops import fused_bias_relu as fbr
from helpers.ops import layernorm as ln
from helpers.ops import norm_dropout as ndr
from helpers.ops import polynomial as poly
from helpers.ops import rmsnorm as rms
from tests.conftest import load_solutions

GPUS = torch.cuda.device_count() if torch.cuda.is_available() else 0
two_gpus = pytest.mark.skipif(GPUS < 2, reason=f"needs 2 GPUs (this machine has {GPUS})")

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


def _poly(x, c):
    return poly.polynomial(x, c)


def _fbr(x, b):
    return fbr.fused_bias_relu(x, b, 1.5)


def _ln(x, w, b):
    return ln.layer_norm(x, w, b, 1e-5)


def _rms(x, w):
    return rms.rms_norm(x, x.shape[-1:], w, 1e-6)


def _add_rms(x, r, w):  # (y, h): both outputs in one tensor, so _run's gradient reaches x and r through both
    return torch.cat([t.flatten() for t in an.add_rms_norm(x, r, x.shape[-1:], w, 1e-6)])


def _add_ln(x, r, w, b):
    return torch.cat([t.flatten() for t in an.add_layer_norm(x, r, x.shape[-1:], w, b, 1e-5)])


def _dropout(x):  # the mask comes from the generator of x's device, seeded alike for both runs
    torch.manual_seed(0)
    return dr.dropout(x, 0.25)


def _rms_dropout(x, w):
    torch.manual_seed(0)
    return ndr.rms_norm_dropout(x, x.shape[-1:], w, 1e-6, 0.25)


# op name -> (shapes of its tensor arguments, the call)
OPS = {
    "polynomial": ([(4099,), (4,)], _poly),
    "fused_bias_relu": ([(67, 129), (129,)], _fbr),
    "layernorm": ([(37, 1000), (1000,), (1000,)], _ln),
    "rmsnorm": ([(37, 1000), (1000,)], _rms),
    "add_norm": ([(37, 1000), (37, 1000), (1000,)], _add_rms),
    "add_layer_norm": ([(37, 1000), (37, 1000), (1000,), (1000,)], _add_ln),
    "dropout": ([(67, 129)], _dropout),
    "norm_dropout": ([(37, 1000), (1000,)], _rms_dropout),
}
BUILDS = {"add_layer_norm": "add_norm"}  # the kernels/ op a call's build is named after, where it differs
SECOND = {  # the argument named in the error for tensors on two GPUs (x is the first)
    "polynomial": "coeffs",
    "fused_bias_relu": "bias",
    "layernorm": "weight",
    "rmsnorm": "weight",
    "add_norm": "residual",
    "add_layer_norm": "residual",
    "norm_dropout": "weight",
}


@pytest.fixture(scope="module")
def _built():
    for name in OPS:  # build once, with the solutions, before any test times or counts memory
        load_solutions(BUILDS.get(name, name))


def _inputs(name, device, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=torch.float64).to(device=device, dtype=dtype) for s in OPS[name][0]]


def _run(name, args):
    """Forward and backward: the output and every input's gradient, on the CPU."""
    args = [a.detach().requires_grad_() for a in args]
    y = OPS[name][1](*args)
    grad_y = torch.linspace(-1, 1, y.numel(), device=y.device, dtype=torch.float64).reshape(y.shape).to(y.dtype)
    grads = torch.autograd.grad(y, args, grad_y)
    return [t.detach().cpu() for t in (y, *grads)]


def _same(got, want):
    for g, w in zip(got, want):
        torch.testing.assert_close(g, w, rtol=0, atol=0)  # the same kernels on the same data: bit for bit


@two_gpus
@pytest.mark.usefixtures("_built")
@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name", OPS)
@pytest.mark.parametrize("where,current", [(1, 0), (0, 1)])
def test_op_runs_on_its_tensors_gpu_not_the_current_one(name, dtype, where, current):
    with torch.cuda.device(where):
        want = _run(name, _inputs(name, f"cuda:{where}", dtype))
    torch.cuda.synchronize(where)
    gc.collect()  # an earlier test's tensor freed during the call would hide an allocation of the same size
    gc.disable()
    try:
        with torch.cuda.device(current):
            before = torch.cuda.memory_allocated(current)
            torch.cuda.reset_peak_memory_stats(current)
            args = _inputs(name, f"cuda:{where}", dtype)
            got = _run(name, args)
            torch.cuda.synchronize(current)
            peak = torch.cuda.max_memory_allocated(current)
    finally:
        gc.enable()
    _same(got, want)
    assert peak == before, f"{name} allocated {peak - before} bytes on cuda:{current}, the current device"


@two_gpus
@pytest.mark.usefixtures("_built")
@pytest.mark.parametrize("name", OPS)
def test_op_uses_the_current_stream_of_its_tensors_device(name):
    where, current = 1, 0
    dtype = torch.float32
    fresh = _inputs(name, f"cuda:{where}", dtype, seed=1)
    with torch.cuda.device(where):
        want = _run(name, fresh)
    side = torch.cuda.Stream(device=where)
    old_device = torch.cuda.current_device()
    try:
        torch.cuda.set_device(where)
        torch.cuda.set_stream(side)  # the current stream of cuda:1 is now `side` ...
        torch.cuda.set_device(current)  # ... while cuda:0 is the current device
        assert torch.cuda.current_stream(where) == side
        args = _inputs(name, f"cuda:{where}", dtype, seed=0)
        torch.cuda.synchronize(where)
        with torch.cuda.stream(side):
            torch.cuda._sleep(50_000_000)  # ~25 ms of GPU time on `side`, then the new input
            for a, f in zip(args, fresh):
                a.copy_(f)
        got = _run(name, args)  # must queue behind the copy on `side`; another stream reads the old input
        side.synchronize()
        torch.cuda.synchronize(where)
    finally:
        torch.cuda.set_device(where)
        torch.cuda.set_stream(torch.cuda.default_stream(where))
        torch.cuda.set_device(old_device)
    _same(got, want)


@two_gpus
@pytest.mark.usefixtures("_built")
@pytest.mark.parametrize("name", SECOND)
def test_tensors_on_two_gpus_get_a_clear_error(name):
    args = _inputs(name, "cuda:0", torch.float32)
    args[1] = args[1].to("cuda:1")
    second = SECOND[name]
    with pytest.raises(RuntimeError, match=rf"{second} must be on the same device as x \(cuda:0\), got cuda:1"):
        OPS[name][1](*args)


@two_gpus
def test_ddp_training_with_the_course_ops_matches_native(tmp_path):
    """benchmarks/ddp_train.py: two processes, NCCL, the lesson 02 and 03 models with the course's ops in place
    of the native layers: the loss curves match the native models' on both ranks."""
    out = tmp_path / "ddp.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.ddp_train", "--out", str(out)], capture_output=True, text=True, timeout=900
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(out.read_text())
    print(json.dumps(result["summary"], indent=1))
    for model, r in result["summary"].items():
        assert r["largest_relative_gap"] < 1e-2, f"{model}: {r}"
        assert r["ranks_agree"], f"{model}: the ranks' parameters differ after training"


@two_gpus
def test_missing_guard_demo_shows_the_kernel_going_to_the_wrong_gpu():
    msg = multigpu.missing_guard_demo()
    assert not msg.startswith("skipped") and "child process died" not in msg, msg


@pytest.mark.skipif(GPUS >= 2, reason="the explanation is for machines with fewer than 2 GPUs")
def test_missing_guard_demo_explains_itself_with_fewer_than_two_gpus():
    assert multigpu.missing_guard_demo().startswith(f"skipped: this machine has {GPUS} GPU(s)")
