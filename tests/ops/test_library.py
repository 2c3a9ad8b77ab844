"""Every course op is a real PyTorch op (lesson 04): for each op in torch.ops.course (tests/op_samples.py's
LIBRARY_OPS, with its samples: small, non-contiguous, 3-d, empty, mixed dtypes), on the CPU and on a GPU:

* torch.library.opcheck's four default tests in every dtype, on every sample, with and without inputs
  that require grad (on the CPU the traced-and-compiled one in float32 only);
* torch.compile(fullgraph=True) around the public helpers.ops call: no graph break, the same output and
  gradients as eager;
* autocast and mixed dtypes: the output dtype and values of the native PyTorch the op replaces;
* a second derivative is an error naming the op, never a silent zero;
* CUDA graph capture of forward and backward, replayed on new data (GPU);
* editing a kernel and rebuilding in the same process replaces the op's kernel without killing the
  process, and registering twice is harmless (in a subprocess: it loads ops into its process);
* benchmarks/autograd.py runs (smoke, CPU).

Values, gradients, gradcheck, empty and non-contiguous inputs and bad arguments through torch.ops are
the contract tests' (tests/ops/test_ops_contract.py, variant "torch_ops")."""

import os
import re
import shutil
import subprocess
import sys
import textwrap

import pytest
import torch

from helpers import check, env, library, loader
from helpers.ops import op_modules
from tests import op_samples
from tests.conftest import CUDA, needs_gpu

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]
OPS = op_samples.LIBRARY_OPS
PUBLIC = [name for name, op in OPS.items() if op.public]  # the ops a learner calls through helpers.ops
FUNCTIONAL = [name for name in PUBLIC if OPS[name].differentiable and not OPS[name].mutated]  # out of place


@pytest.fixture(autouse=True, scope="module")
def solutions():
    """The ops built with the exercises' solutions (the registered ops never call an exercise, but one build
    for the whole file keeps a second .so out of the process)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("COURSE_SOLUTIONS", "1")
        yield


def describe(args) -> str:
    """A sample's arguments in a line: shapes, dtypes, non-contiguous ones marked."""

    def one(a):
        if isinstance(a, torch.Tensor):
            nc = "" if a.is_contiguous() else " non-contiguous"
            return f"{str(a.dtype).replace('torch.', '')}{list(a.shape)}{nc}{' grad' if a.requires_grad else ''}"
        return repr(a)

    return "(" + ", ".join(one(a) for a in args) + ")"


def kind(args) -> str:
    """What a sample is for: "empty", "non-contiguous" or "plain"."""
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if tensors and tensors[0].numel() == 0:
        return "empty"
    if any(not t.is_contiguous() for t in tensors):
        return "non-contiguous"
    return "plain"


def wants_grad(args):
    return [a for a in args if isinstance(a, torch.Tensor) and a.requires_grad]


def run_samples(name, samples, body):
    """body(args) for every sample; a failure names the op and the sample."""
    for i, args in enumerate(samples):
        try:
            body(args)
        except Exception as e:
            raise AssertionError(f"{OPS[name].qualname}, sample {i} {describe(args)}:\n{e}") from e


# --------------------------------------------------------------------------------------------------
# Every op has its samples
# --------------------------------------------------------------------------------------------------


def test_every_op_a_finished_op_defines_has_library_samples():
    """A schema that a finished op's kernels/<op>/<op>.cpp defines (define(m, "name(...") or m.def("name(...");
    the finished ops are helpers/ops/<op>.py) gets its entry in tests/op_samples.py's LIBRARY_OPS, so that
    opcheck and the tests below cover it; and every entry there is defined."""
    finished = op_modules()
    defined = set()
    for name in finished:
        src = env.KERNELS / name / f"{name}.cpp"
        defined |= set(re.findall(r'(?:define\(\s*m\s*,|\.def\()\s*"(\w+)\(', src.read_text()))
    assert defined == set(OPS), (
        f"defined in kernels/ without LIBRARY_OPS samples: {sorted(defined - set(OPS))}; "
        f"in LIBRARY_OPS but not defined: {sorted(set(OPS) - defined)}"
    )


# --------------------------------------------------------------------------------------------------
# opcheck
# --------------------------------------------------------------------------------------------------

OPCHECK = [(name, rg) for name, op in OPS.items() for rg in ((False, True) if op.differentiable else (False,))]


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("name, requires_grad", OPCHECK, ids=[f"{n}{'-grad' if g else ''}" for n, g in OPCHECK])
def test_opcheck(device, name, requires_grad, dtype):
    """torch.library.opcheck's four default tests on every sample: test_schema (the op does what its schema
    says: no undeclared mutation or aliasing), test_autograd_registration (inputs that require grad reach an
    Autograd kernel), test_faketensor (the fake kernel gives the real output's shapes, dtypes and strides),
    test_aot_dispatch_dynamic (traced and compiled with dynamic shapes, forward and backward, equals eager).
    On the CPU the last, which is most of opcheck's time, runs in float32 only: the dtype rules it would meet
    again are the fake kernel's, which test_faketensor compares with the real kernel in every dtype."""
    op = OPS[name].overload()
    samples = op_samples.library_samples(name, device, dtype, requires_grad=requires_grad)
    tests = library.OPCHECK_TESTS if device.type == "cuda" or dtype == torch.float32 else library.OPCHECK_TESTS[:-1]
    run_samples(name, samples, lambda args: torch.library.opcheck(op, tuple(args), test_utils=tests))


# --------------------------------------------------------------------------------------------------
# torch.compile
# --------------------------------------------------------------------------------------------------


def in_a_function(name):
    """A small function around the public call, as a model would use it: x * 1 first (so an in-place op
    writes a copy), * 2 after."""
    public = OPS[name].public

    def fn(x, *rest):
        y = public(x * 1, *rest)
        return y * 2

    return fn


def grad_samples(name, device, dtype):
    """library_samples with requires_grad, and also the arguments the op writes in place: in_a_function
    writes a copy of them."""
    samples = op_samples.library_samples(name, device, dtype, requires_grad=True)
    for args in samples:
        for i in set(OPS[name].differentiable) & set(OPS[name].mutated):
            args[i].requires_grad_()
    return samples


def run_and_grad(fn, args, grad_seed=1):
    y = fn(*args)
    wrt = wants_grad(args)
    if not wrt:
        return y, []
    g = torch.randn(y.shape, generator=torch.Generator().manual_seed(grad_seed)).to(y.device, y.dtype)
    return y, list(torch.autograd.grad(y, wrt, g, allow_unused=True))


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", PUBLIC)
@torch._dynamo.config.patch(recompile_limit=32)  # None weights, empty x: more guards than the default 8
def test_compile_fullgraph_matches_eager_with_no_graph_break(device, name, dtype):
    """fullgraph=True fails on any graph break; explain() counts them; every sample (shapes change: the
    later ones run with dynamic shapes, through the fake kernels' SymInts) against eager."""
    OPS[name].overload()  # registered (a clear failure here if not)
    torch._dynamo.reset()
    fn = in_a_function(name)
    samples = grad_samples(name, device, dtype)
    explained = torch._dynamo.explain(fn)(*samples[0])
    assert explained.graph_break_count == 0, f"graph breaks: {explained.break_reasons}"
    compiled = torch.compile(fn, fullgraph=True)

    def same(args):
        want_y, want_grads = run_and_grad(fn, args)
        got_y, got_grads = run_and_grad(compiled, args)
        assert got_y.dtype == want_y.dtype and got_y.shape == want_y.shape
        check.assert_close(got_y, want_y, name="compiled output")
        for i, (got, want) in enumerate(zip(got_grads, want_grads)):
            check.assert_close(got, want, name=f"compiled gradient of differentiable argument {i}")

    run_samples(name, samples, same)


# --------------------------------------------------------------------------------------------------
# Autocast and mixed dtypes
# --------------------------------------------------------------------------------------------------

# (autocast's device, its dtype, the inputs' dtypes); without autocast only mixed dtypes: one dtype
# throughout is the contract tests' (every dtype).
AMP = [pytest.param(None, None, "mixed", id="no-autocast-mixed")] + [
    pytest.param(
        device, dtype, inputs, id=f"{device}-{str(dtype)[6:]}-{inputs}", marks=[needs_gpu] * (device == "cuda")
    )
    for device, dtype in (("cpu", torch.bfloat16), ("cuda", torch.bfloat16), ("cuda", torch.float16))
    for inputs in ("float32", "low", "mixed")
]


def as_inputs(args, inputs: str, low: torch.dtype):
    """The sample's floating tensors as a model under autocast has them: "float32" all float32, "low" all in
    autocast's dtype, "mixed" the first (the activations, a matmul's output) in autocast's dtype and the
    parameters in float32."""
    out = []
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and a.is_floating_point():
            dtype = {"float32": torch.float32, "low": low, "mixed": low if i == 0 else torch.float32}[inputs]
            a = a.detach().to(dtype).requires_grad_(a.requires_grad)
        out.append(a)
    return out


def wide(args):
    return [a.detach().double() if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]


@pytest.mark.parametrize("amp_device, amp_dtype, inputs", AMP)
@pytest.mark.parametrize("name", FUNCTIONAL)
def test_autocast_and_mixed_dtypes_give_what_native_gives(name, amp_device, amp_dtype, inputs):
    """Under torch.autocast (and without, for mixed dtypes) the public call returns the dtype native PyTorch
    returns for the op it replaces, with values that the math in that dtype gives: native's formula in
    float64 on the same inputs, rounded to that dtype (native itself may round in between). Backward runs
    and gives each input its own dtype."""
    device = amp_device or "cpu"
    low = amp_dtype or torch.bfloat16
    op = OPS[name]
    op.overload()
    samples = [s for s in op_samples.library_samples(name, device, requires_grad=True) if kind(s) != "empty"]

    def same(args):
        args = as_inputs(args, inputs, low)
        with torch.autocast(device, dtype=amp_dtype, enabled=amp_device is not None):
            native = op.native(*args)
            y = op.public(*args)
        assert y.dtype == native.dtype, f"output dtype {y.dtype}, native gives {native.dtype}"
        want = op.native(*wide(args)).to(native.dtype)
        tol = check.tolerances(native.dtype)
        if not torch.allclose(native.float(), want.float(), **tol) and torch.allclose(y.float(), native.float(), **tol):
            # native rounds in between (add_layer_norm: h = x + residual in the inputs' dtype, then LayerNorm in
            # float32), and the op gives what native gives, rounding included: that is right too
            want = native.detach()
        check.assert_close(y, want, name=f"output under autocast({amp_device}, {amp_dtype}), {inputs} inputs")
        grads = torch.autograd.grad(y, wants_grad(args), torch.ones_like(y))
        for g, a in zip(grads, wants_grad(args)):
            assert g.dtype == a.dtype and g.shape == a.shape and bool(g.isfinite().all())

    run_samples(name, samples, same)


# --------------------------------------------------------------------------------------------------
# Double backward
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", FUNCTIONAL)
def test_a_second_derivative_is_an_error_naming_the_op(device, name):
    """Our backward kernels are not differentiable: gradgradcheck must raise an error that names the op
    (a silent zero would pass wrong second derivatives into a training run)."""
    op = OPS[name]
    op.overload()
    args = op_samples.library_samples(name, device, torch.float64, requires_grad=True)[0]
    with pytest.raises(RuntimeError, match=re.escape(f"{op.qualname} has no double backward")):
        torch.autograd.gradgradcheck(op.public, tuple(args))
    x = args[0]  # also when only x requires grad, the way a penalty on the input gradient asks for it
    rest = [a.detach() if isinstance(a, torch.Tensor) else a for a in args[1:]]
    (gx,) = torch.autograd.grad(op.public(x, *rest).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match=re.escape(f"{op.qualname} has no double backward")):
        torch.autograd.grad(gx.pow(2).sum(), x)


# --------------------------------------------------------------------------------------------------
# CUDA graphs
# --------------------------------------------------------------------------------------------------


@needs_gpu
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("name", PUBLIC)
def test_cuda_graph_replays_forward_and_backward_on_new_data(name, dtype):
    """Forward and backward captured in one CUDA graph (warm-up on a side stream first, as
    torch.cuda.graphs' docs do), new values copied into the captured inputs, replayed: the same results
    as eager on those values. Fails if the op synchronizes, allocates outside PyTorch's allocator or
    bakes a value into its launch."""
    OPS[name].overload()
    fn = in_a_function(name)

    def one(args):
        g_out = torch.randn_like(fn(*args).detach())
        out = {}

        def step():
            y = fn(*args)
            wrt = wants_grad(args)
            out["y"] = y.detach()
            out["grads"] = list(torch.autograd.grad(y, wrt, g_out)) if wrt else []

        replay, _ = library.captured(step)  # warm-up on a side stream, then the capture
        captured = {"y": out["y"], "grads": out["grads"]}
        with torch.no_grad():  # new data in the captured inputs
            for a in [*args, g_out]:
                if isinstance(a, torch.Tensor) and a.is_floating_point():
                    a.copy_(torch.randn_like(a))
        replay()
        torch.cuda.synchronize()
        step()  # eager, on the same new data
        check.assert_close(captured["y"], out["y"], name="replayed output")
        for i, (got, want) in enumerate(zip(captured["grads"], out["grads"])):
            check.assert_close(got, want, name=f"replayed gradient of differentiable argument {i}")

    run_samples(name, grad_samples(name, "cuda", dtype), one)


# --------------------------------------------------------------------------------------------------
# Rebuilding in the same process
# --------------------------------------------------------------------------------------------------

# The edit that changes the result by +1: the constant term of the v2 kernel the registered op runs. On the
# CPU it is in the torch glue (polynomial.cpp: a full glue compile); on a GPU in polynomial.cu, which
# rebuilds in seconds (the .cu includes no torch header).
EDITS = {
    "cpu": ("polynomial/polynomial.cpp", "* v + c[3]);", "* v + c[3] + 1);"),
    "cuda": ("polynomial/polynomial.cu", "* x + d; }", "* x + d + 1; }"),
}

REBUILD = textwrap.dedent(
    """
    import os, sys
    from pathlib import Path
    import torch
    from helpers import loader
    from helpers.ops import polynomial as poly

    device, file, old, new = sys.argv[1:5]
    x = torch.linspace(-2, 2, 4099, device=device)  # not a multiple of any vector width: the tails too
    c = torch.tensor([1.5, 0.5, -2.0, 0.25], device=device)
    want = poly.reference(x.double(), c.double()).float()

    poly.register()
    poly.register()  # a re-run cell: nothing registered twice
    first = loader.load("polynomial")
    assert loader.load("polynomial") is first, "loading an unchanged op again must return the loaded module"
    before = torch.ops.course.polynomial(x, c)
    torch.testing.assert_close(before, want, msg=lambda m: "before the edit: " + m)

    src = Path(os.environ["COURSE_KERNELS"], file)
    text = src.read_text()
    assert text.count(old) == 1, f"the line this test edits ({old!r}) is not once in {file}: update EDITS"
    src.write_text(text.replace(old, new))
    rebuilt = loader.load("polynomial")  # builds the edited op and loads the new .so into this process
    assert rebuilt is not first, "the edited op was not rebuilt"
    poly.register()
    after = torch.ops.course.polynomial(x, c)
    torch.testing.assert_close(after, want + 1, msg=lambda m: "torch.ops after the rebuild: " + m)
    torch.testing.assert_close(rebuilt.polynomial(x, c), want + 1, msg=lambda m: "pybind after the rebuild: " + m)
    torch.testing.assert_close(first.polynomial(x, c), want + 1, msg=lambda m: "the old module's op: " + m)

    xg = x.clone().requires_grad_()  # autograd and the fake kernels still work, with the new kernel
    (g,) = torch.autograd.grad(torch.ops.course.polynomial(xg, c).sum(), xg)
    torch.testing.assert_close(g, ((3 * c[0] * x + 2 * c[1]) * x + c[2]), msg=lambda m: "gradient: " + m)
    torch.library.opcheck(torch.ops.course.polynomial.default, (x, c), test_utils=("test_schema", "test_faketensor"))

    src.write_text(text)  # the edit undone: the first build comes back from the cache, already opened
    assert loader.load("polynomial") is first, "undoing the edit must find the first build again"
    torch.testing.assert_close(torch.ops.course.polynomial(x, c), want, msg=lambda m: "after the undo: " + m)
    print("survived")
    """
)


def test_rebuilding_an_edited_op_in_the_same_process_replaces_its_kernel():
    """As a notebook does: load polynomial, call torch.ops.course.polynomial, edit the kernel the op runs
    (a copy of kernels/, COURSE_KERNELS), rebuild with loader.load in the same process: the process lives
    (no second definition of the schema: kernels/common/library.h's define()), and torch.ops, the new module and
    the old module's binding all run the new kernel. register() and load() again are harmless. Undoing the
    edit brings the first build back from the cache, and torch.ops runs it again.

    The copy lives at a fixed place in the build cache, so a second run finds both builds cached and checks
    that case too: the new .so is still loaded into a process that has the old one, the load most likely to
    kill the process."""
    device = "cuda" if CUDA else "cpu"
    file, old, new = EDITS[device]
    copy = env.cache_root() / "rebuild-test" / "kernels"
    copy.parent.mkdir(parents=True, exist_ok=True)
    with loader._Lock(copy.parent / "lock"):  # another test session on this machine waits for this one
        shutil.rmtree(copy, ignore_errors=True)
        shutil.copytree(env.KERNELS, copy)
        run_python(REBUILD, [device, file, old, new], "survived", COURSE_KERNELS=str(copy))


def run_python(code: str, args: list[str], says: str, **environ) -> None:
    """`code` in a new Python process (with the exercises' solutions, and `environ`), which must exit
    normally and print `says`; else the assertion shows the end of its output."""
    run = subprocess.run(
        [sys.executable, "-c", code, *args],
        cwd=env.REPO_ROOT,
        env={**os.environ, "COURSE_SOLUTIONS": "1", "PYTHONPATH": str(env.REPO_ROOT), **environ},
        capture_output=True,
        text=True,
        timeout=900,
    )
    tail = "\n".join((run.stdout + run.stderr).strip().splitlines()[-25:])
    assert run.returncode == 0, f"the process exited with {run.returncode}:\n{tail}"
    assert says in run.stdout, tail


FIRST_CALL_COMPILED = textwrap.dedent(
    """
    import sys

    import torch

    from tests import op_samples
    from tests.ops.test_library import PUBLIC, in_a_function

    device, backend = sys.argv[1:3]
    torch._dynamo.config.recompile_limit = 64
    for name in PUBLIC:  # each helpers/ops module's register() first runs while Dynamo traces
        fn = in_a_function(name)
        args = op_samples.library_samples(name, device)[0]
        got = torch.compile(fn, fullgraph=True, backend=backend)(*args)
        torch.testing.assert_close(got, fn(*args), msg=lambda m: f"{name}: " + m)
    print("compiled first:", device, backend, " ".join(PUBLIC))
    """
)


# On the CPU Dynamo alone (backend "eager": the failure it guards against is in tracing, and CI stays quick);
# on the GPU inductor, as a model would compile.
@pytest.mark.parametrize(
    "device, backend", [("cpu", "eager"), pytest.param("cuda", "inductor", marks=needs_gpu)], ids=["cpu", "cuda"]
)
def test_an_ops_first_call_in_a_process_may_be_a_compiled_one(device, backend):
    """A fresh process whose first call of each op is inside torch.compile(fullgraph=True): the op's
    register() (building or loading its extension) then runs while Dynamo traces, and must not break the
    graph. Without helpers.ops.once, which makes register() a constant to Dynamo, it does: Dynamo traces into
    the loader and stops at `time.time` ("Attempted to call function marked as skipped"), so fullgraph fails.
    A process that has called the op before (every other test here) never shows it."""
    run_python(FIRST_CALL_COMPILED, [device, backend], "compiled first:")


# --------------------------------------------------------------------------------------------------
# The benchmark (benchmarks/autograd.py) runs
# --------------------------------------------------------------------------------------------------


def test_autograd_benchmark_runs_in_smoke_mode(tmp_path, capsys):
    """The eager forward+backward benchmark on the CPU at a tiny size: a row per op and implementation,
    the CPU time per step measured, files written, the targets reported. Its numbers mean something on
    a GPU only."""
    from benchmarks import autograd

    rows = autograd.main(["--smoke", "--backend", "aot_eager", "--out", str(tmp_path)])
    ops = {r["op"] for r in rows}
    assert {"poly fwd+bwd autograd", "fbr fwd+bwd autograd", "ln fwd+bwd autograd"} <= ops
    impls = {r["impl"] for r in rows}
    assert {"ours", "native", "torch.compile"} <= impls
    cpu = [r for r in rows if r.get("kind") == "cpu per step"]
    assert cpu and all(r["cpu_us"] > 0 for r in cpu)
    assert (tmp_path / "autograd.csv").exists() and (tmp_path / "autograd.json").exists()
    out = capsys.readouterr().out
    assert "ours" in out and "autograd targets: " in out  # the targets' report; met or missed depends on the machine
