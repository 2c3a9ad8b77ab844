"""What a missing device guard does, shown on a machine with two GPUs (lesson 04; tests/ops/test_multi_gpu.py
checks every op the right way round).

    multigpu.missing_guard_demo()   # builds fused_bias_relu without its guard in a fresh process, calls it
                                    # with its tensors on cuda:1 while cuda:0 is current, reports what happened

Every CUDA launch goes to the *current* device. A tensor on cuda:1 while cuda:0 is current (the default in
a process that never called set_device) sends the kernel to cuda:0 with pointers into cuda:1's memory: an
illegal memory access that poisons the whole process's CUDA context, or, where the GPUs can reach each
other's memory (NVLink, with peer access on), a right answer read across the link, slower, on the wrong
GPU's stream, racing whatever runs on cuda:1. kernels/common/checks.h's OnDevice (a c10::cuda::CUDAGuard and the
tensor's device's current stream) is the fix. The demonstration runs in a child process, since an illegal
access cannot be recovered from in the process where it happened.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import torch

from . import env

_CHILD = textwrap.dedent(
    """
    import time, torch
    from helpers import loader
    from helpers.ops import fused_bias_relu as fbr
    ext = loader.load("fused_bias_relu", extra_cflags=["-DCOURSE_NO_DEVICE_GUARD"])
    torch.cuda.set_device(0)
    x = torch.randn(4096, 4096, device="cuda:1")
    b = torch.randn(4096, device="cuda:1")
    want = fbr.reference(x, b, 2.0)
    torch.cuda.synchronize(1)
    try:
        y = ext.forward(x, b, 2.0)
        torch.cuda.synchronize(0)
        torch.cuda.synchronize(1)
        ok = torch.equal(y, want)
        print(f"RESULT no error; the answer is {'right' if ok else 'WRONG'} (a kernel ran on cuda:0 reading cuda:1's memory)")
    except Exception as e:
        print(f"RESULT {type(e).__name__}: {str(e).splitlines()[0]}")
    """
)


def missing_guard_demo(timeout: float = 600) -> str:
    """Run the unguarded op in a child process (see the module doc); return and print what happened."""
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if gpus < 2:
        msg = (
            f"skipped: this machine has {gpus} GPU(s); the demonstration needs 2. With one GPU the current device "
            "is always the tensors' device, so a missing guard cannot show; on two it sends the kernel to the "
            "wrong GPU (see helpers/multigpu.py)."
        )
        print(msg)
        return msg
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD], capture_output=True, text=True, timeout=timeout, cwd=env.REPO_ROOT
    )
    lines = [line for line in (proc.stdout + proc.stderr).splitlines() if line.startswith("RESULT")]
    msg = lines[-1][len("RESULT ") :] if lines else f"the child process died (exit code {proc.returncode})"
    print(f"fused_bias_relu without its device guard, tensors on cuda:1, cuda:0 current: {msg}")
    return msg
