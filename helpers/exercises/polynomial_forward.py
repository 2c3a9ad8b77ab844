"""Self-check for lesson 01's first exercise: kernels/exercises/polynomial_forward.cuh, forward version 1 of
y = a*x^3 + b*x^2 + c*x + d (Part 1: the CPU loop; Part 2: the CUDA kernel, one thread per element; Part 3:
the kernel's launcher: the grid, the stream, the launch check).

Every part is compared with the reference on awkward sizes and random shapes, in all four dtypes, with new
coefficients every run; the output is written into a view inside a larger buffer whose bytes around it must
stay as they were (a write past element n - 1 shows there, and the input sits in a larger buffer too, so a
read past the end stays inside memory the check owns). On a GPU, also: a tensor of more than 2^31 elements
(where the card has the memory), the launch captured in a CUDA graph on PyTorch's current stream and
replayed, and the launch check (a CUDA error left pending before the launch must come out of it)."""

from __future__ import annotations

import re
import warnings

import torch

from .. import check as _check
from .. import env, loader, selfcheck
from . import EXERCISES, SOLUTIONS, Wrong, index_in_32_bits, index_without_block, loop_one_short

OP = "polynomial"
NAME = "polynomial_forward"
FILE = "kernels/exercises/polynomial_forward.cuh"
HINT = (
    "Parts 1 and 2: Horner's rule with a, b, c, d read from coeffs (the check draws new ones every run), for "
    "every i < n and no further; the kernel's index in 64 bits. Part 3: enough blocks to cover n (rounded up, "
    f"in int64_t), launched on the stream argument, then the course's launch check. See {FILE}"
)
GUARD = 1024  # elements on each side of the output: more than one block of threads can write past its end
SENTINEL = 1232.0  # what the guard holds: exact in all four dtypes, so any change of it shows


def coeffs(g: torch.Generator, device) -> torch.Tensor:
    """[a, b, c, d], each uniform in [-2, 2), drawn from `g`: new coefficients in every case and every run."""
    return (torch.rand(4, generator=g, device=g.device) * 4 - 2).to(device)


def reference(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    a, b, cc, d = c.double().unbind()
    xd = x.double()
    return (((a * xd + b) * xd + cc) * xd + d).to(x.dtype)


def _inputs(shape, dtype, device, g):
    x = torch.randn(shape, generator=g).to(device=device, dtype=dtype)
    return x, coeffs(g, device)


def _large_inputs(numel, dtype, device, g):
    return torch.randn(numel, generator=g, device=device, dtype=dtype), coeffs(g, device)


def _where(x: torch.Tensor) -> str:
    return f"Case {'x'.join(map(str, x.shape))} {str(x.dtype)[6:]} on {x.device}"


def _guarded(ext, name: str, seed: int):
    """forward v1 into a view inside a buffer of GUARD sentinel elements on each side; fails if one changed."""

    def run(x: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
        xg = selfcheck.guarded(x, GUARD, 0.0)  # reads past the end stay in this buffer
        out = selfcheck.guarded(torch.full_like(x, float("nan")), GUARD, SENTINEL)  # never written: stays NaN
        try:
            ext.forward_out(xg.view, c, out.view, 1)
            if x.is_cuda:
                torch.cuda.synchronize()
        except RuntimeError as e:
            selfcheck.fail(name, _where(x), f"forward raised {str(e).splitlines()[0]}", hint=HINT, seed=seed)
        outside = out.outside(f"y[0..{x.numel() - 1}]")
        if outside:
            why = (
                "that nothing is written outside the output (in a kernel, the last block of threads runs partly past n)"
            )
            selfcheck.fail(name, _where(x), outside, why=why, hint=HINT, seed=seed)
        return out.view

    return run


def _on_the_stream(ext, name: str, seed: int) -> None:
    """The launch captured in a CUDA graph (torch.cuda.graph captures on a side stream it makes current), then
    replayed on new input values: a kernel launched on another stream is not in the graph."""
    g = torch.Generator().manual_seed(seed)
    x, c = _inputs((4097,), torch.float32, "cuda", g)
    why = (
        "that your launcher launches on the `stream` it is given (PyTorch's current stream): here PyTorch "
        "captures a CUDA graph on its current stream, a side stream, and replays it on new inputs"
    )
    where = "Case 4097 float32 on cuda, captured in a CUDA graph and replayed"
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # an empty graph warns; the verdict below says what happened
            with torch.cuda.graph(graph):
                y = ext.forward(x, c, 1)
    except RuntimeError as e:
        selfcheck.fail(
            name,
            where,
            f"the capture failed: {str(e).splitlines()[0]}\nA launch on the legacy default stream (no stream "
            "argument, or 0) is not allowed while PyTorch captures a graph: launch on `stream`.",
            hint=HINT,
            seed=seed,
            why=why,
        )
    x.copy_(_inputs((4097,), torch.float32, "cuda", g)[0])
    y.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    if torch.isnan(y).any():
        selfcheck.fail(
            name,
            where,
            "the replayed graph did not run your kernel: it was launched on another stream than the `stream` "
            "argument (the legacy default stream?), so the capture on PyTorch's current stream never saw it. "
            "Outside a graph the same launch runs out of order with PyTorch's work on its stream.",
            hint=HINT,
            seed=seed,
            why=why,
        )
    try:
        _check.assert_close(y, reference(x, c))
    except AssertionError as e:
        selfcheck.fail(name, where, str(e), hint=HINT, seed=seed, why=why)
    del graph, y


def _plant_error() -> bool:
    """Leave a CUDA error pending, as a failed launch does: unregister host memory that was never registered
    (a non-sticky error, which the next cudaGetLastError returns and clears). True if it is pending."""
    host = torch.empty(64, dtype=torch.uint8)
    try:
        return int(torch.cuda.cudart().cudaHostUnregister(host.data_ptr())) != 0
    except (AttributeError, RuntimeError):  # a torch without the binding, or one that raises the error itself
        return False


def _launcher_text() -> str:
    """Your launcher's body, comments removed (the file the lesson builds: yours, or the solution)."""
    folder = SOLUTIONS if env.solutions_enabled() else EXERCISES
    text = (folder / "polynomial_forward.cuh").read_text()
    body = text.split("void poly_forward_v1(", 1)[-1]
    return re.sub(r"//[^\n]*", "", body)


def _launch_checked(ext, name: str, seed: int) -> None:
    """A launch returns no error: the launcher must ask (cudaGetLastError, in COURSE_LAUNCH_CHECK). Here an
    error is left pending just before the launch; the launch check must raise it."""
    x, c = _inputs((4097,), torch.float32, "cuda", torch.Generator().manual_seed(seed))
    torch.cuda.synchronize()
    why = "that your launcher checks its launch (a bad grid or a missing kernel image is reported only when asked)"

    def raises(version: int) -> str | None:
        """The message of the error forward raised with an error pending, "" if none; None if none was pending."""
        if not _plant_error():
            return None
        try:
            ext.forward(x, c, version)
        except RuntimeError as e:
            return str(e) or "error"
        return ""

    # The course's launcher (polynomial.cu) raising the pending error shows that nothing before the launcher
    # clears it, so the test works on this machine.
    if "polynomial.cu" in (raises(2) or ""):
        if raises(1):
            return
        try:
            ext.forward(x, c, 2)  # clears the error your launcher left pending
        except RuntimeError:
            pass
        message = "a CUDA error was pending when your kernel launched, and your launcher returned without raising it"
    else:  # no way to leave an error pending here: read the launcher instead
        body = _launcher_text()
        if re.search(r"COURSE_LAUNCH_CHECK\s*\(\s*\)|cuda(Get|PeekAt)LastError\s*\(", body):
            return
        message = f"the launcher in {FILE} has no launch check after the launch"
    selfcheck.fail(
        name, "Case 4097 float32 on cuda, with a CUDA error pending", message + ".", hint=HINT, seed=seed, why=why
    )


@selfcheck.sanitizable
def check(device=None, ext=None, seed=None) -> int:
    """Forward version 1 against the reference on every part you wrote: the CPU loop (Part 1), and on a GPU
    machine also the CUDA kernel and its launcher (Parts 2 and 3): a tensor of more than 2^31 elements, the
    launch inside a CUDA graph capture, and the launch check."""
    ext = ext or loader.load(OP)
    seed = selfcheck.new_seed(seed)
    cases = 0
    with selfcheck.exercise(NAME):
        for dev in selfcheck.parts(device):
            part = "the CUDA kernel and launcher (Parts 2, 3)" if dev.type == "cuda" else "the CPU loop (Part 1)"
            name = f"polynomial forward v1, {part}"
            cases += selfcheck.run(
                name, _guarded(ext, name, seed), reference, _inputs, device=dev, seed=seed, hint=HINT
            )
            if dev.type == "cuda":
                yours = lambda x, c: ext.forward(x, c, 1)  # noqa: E731
                selfcheck.large_case(name, yours, reference, _large_inputs, buffers=2, hint=HINT, seed=seed)
                _on_the_stream(ext, name, seed)
                _launch_checked(ext, name, seed)
                selfcheck.passed_now(name, "launched on PyTorch's stream (a CUDA graph replays it), launch checked.")
                cases += 2
        if not env.cuda_mode():
            part = "the CUDA kernel and launcher (Parts 2, 3)"
            selfcheck.large_case(f"polynomial forward v1, {part}", None, reference, _large_inputs, buffers=2)
    return cases


_CPU_COEFFS = "const T a = coeffs[0], b = coeffs[1], c = coeffs[2], d = coeffs[3];"
_CPU_LOOP = "for (int64_t i = 0; i < n; ++i) {"
_CUDA_INDEX = "const int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x;"
_CUDA_HORNER = "((coeffs[0] * v + coeffs[1]) * v + coeffs[2]) * v + coeffs[3]"
_GRID = "const int64_t blocks = ceil_div<int64_t>(n, kV1Threads);"
_LAUNCH = "poly_forward_v1_kernel<T><<<blocks, kV1Threads, 0, stream>>>(x, coeffs, y, n);"

WRONG = [
    loop_one_short(_CPU_LOOP),
    Wrong(
        "the CPU loop runs to i <= n: it writes one element past the end of y",
        [(_CPU_LOOP, "for (int64_t i = 0; i <= n; ++i) {")],
        "cpu",
    ),
    Wrong(
        "the lesson's example coefficients typed in (1.5, 0.5, -2, 0.25) instead of read from coeffs",
        [(_CPU_COEFFS, "const T a = 1.5, b = 0.5, c = -2, d = 0.25;")],
        "cpu",
    ),
    Wrong(
        "Horner's rule without the constant term d",
        [("y[i] = ((a * x[i] + b) * x[i] + c) * x[i] + d;", "y[i] = ((a * x[i] + b) * x[i] + c) * x[i];")],
        "cpu",
    ),
    index_without_block(_CUDA_INDEX),
    index_in_32_bits(_CUDA_INDEX, buffers=2),
    Wrong(
        "no tail guard: the threads of the last block past n write y[i] too (past the end of the output)",
        [("  if (i >= n) return;\n", "")],
        "cuda",
    ),
    Wrong(
        "the coefficients read in reverse order (coeffs = [a, b, c, d]: a multiplies x^3)",
        [(_CUDA_HORNER, "((coeffs[3] * v + coeffs[2]) * v + coeffs[1]) * v + coeffs[0]")],
        "cuda",
    ),
    Wrong(
        "the grid rounded down (n / kV1Threads): the last partial block is never launched (and n < 256 gives "
        "an empty grid, which the launch check reports)",
        [(_GRID, "const int64_t blocks = n / kV1Threads;")],
        "cuda",
    ),
    Wrong(
        "n cast to int for the block count (to match kV1Threads' type): past 2^31 elements the grid is wrong "
        "(selfcheck.large_case catches it where the GPU has the memory)",
        [(_GRID, "const int blocks = ceil_div(int(n), kV1Threads);")],
        "cuda",
        min_free_gib=2 * ((1 << 31) + 4099) * 2 / 0.8 / 2**30,
    ),
    Wrong(
        "launched without the stream argument: the kernel runs on the legacy default stream",
        [(_LAUNCH, "poly_forward_v1_kernel<T><<<blocks, kV1Threads>>>(x, coeffs, y, n);")],
        "cuda",
    ),
    Wrong(
        "no launch check after the launch",
        [("  COURSE_LAUNCH_CHECK();\n", "")],
        "cuda",
    ),
]
