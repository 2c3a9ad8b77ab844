"""Self-check for lesson 02b's exercise 3: kernels/exercises/square_glue.h, the PyTorch side of y = x * x (the
glue square_forward / square_backward, the C++ autograd Function SquareFunction, square(x), and the binding
ext.forward / ext.backward / ext.square, ext = loader.load("square")) over the course's kernels
(kernels/square/square.h). On every part (the CPU, and in CUDA mode the GPU) it checks:

* the binding: the module has forward, backward and square;
* good inputs: values on every dtype, transposed, strided and offset views, empty and 0-d tensors, with
  poisoned outputs, through forward, backward and square's autograd;
* bad inputs: each raises an error whose message names the argument (x or grad_y);
* the autograd Function: one gradient, saves x itself and nothing more (saved-tensor hooks), no graph when x
  needs no gradient, gradcheck in float64;
* the course's kernels do the arithmetic: no ATen math op runs (a TorchDispatchMode watches);
* on the GPU: the launches go on PyTorch's current stream (a CUDA graph captured on a side stream and replayed
  on new inputs), tensors on two devices are refused, and the glue passes element counts past 2^31 where the
  card has the memory.
"""

from __future__ import annotations

import re

import torch
from torch.utils._python_dispatch import TorchDispatchMode

from .. import check as _check
from .. import env, loader, selfcheck
from . import Wrong

OP = "square"
NAME = "square_glue"
TITLE = "square (your glue, SquareFunction and binding)"

HINT = (
    "see the task at the top of kernels/exercises/square_glue.h; kernels/common/checks.h lists the checks that "
    "name an argument (check_floating, check_like, check_same_dtype, check_cuda_built), cuda_ptr and OnDevice; "
    "kernels/square/square.h lists the course's functions; part 1's FusedBiasReluFunction is a C++ Function"
)


def reference(x, grad_y):
    xd = x.double()
    y, gx = (xd * xd).to(x.dtype), (2 * xd * grad_y.double()).to(x.dtype)
    return y, gx, y, gx


# --------------------------------------------------------------------------------------------------
# Inputs: every layout a caller can pass
# --------------------------------------------------------------------------------------------------


def _layout(t: torch.Tensor, kind: str) -> torch.Tensor:
    """The same values as `t`, laid out as `kind`: "contiguous", "transposed" (last two dimensions swapped in
    memory), "strided" (every other element of a wider last dimension: not dense), "offset" (a view one
    element into its storage: not 16-byte aligned)."""
    if kind == "transposed" and t.dim() >= 2:
        return t.transpose(-1, -2).contiguous().transpose(-1, -2)
    if kind == "strided" and t.dim() >= 1:
        wide = torch.full((*t.shape[:-1], 2 * t.shape[-1]), float("nan"), dtype=t.dtype, device=t.device)
        wide[..., ::2] = t
        return wide[..., ::2]
    if kind == "offset":
        flat = torch.full((t.numel() + 1,), float("nan"), dtype=t.dtype, device=t.device)
        flat[1:] = t.reshape(-1)
        return flat[1:].view(t.shape)
    return t


_LAYOUTS = ("contiguous", "transposed", "strided", "offset")


def _values(shape, dtype, device, g, x_layout=None, g_layout=None):
    spread = float(torch.empty(()).uniform_(0.5, 4.0, generator=g))
    x = (torch.randn(shape, generator=g) * spread).to(dtype)
    grad_y = torch.randn(shape, generator=g).to(dtype)
    grad_y.view(-1)[:: max(1, grad_y.numel() // 5)] = 0  # zero gradients: their elements are computed too
    pick = lambda: _LAYOUTS[int(torch.randint(len(_LAYOUTS), (1,), generator=g))]  # noqa: E731
    x_layout, g_layout = x_layout or pick(), g_layout or pick()
    return _layout(x.to(device), x_layout), _layout(grad_y.to(device), g_layout)


def _fixed(x_layout, g_layout):
    return lambda shape, dtype, device, g: _values(shape, dtype, device, g, x_layout, g_layout)


SPECIAL = [
    selfcheck.Case(
        "x as every other column of a wider tensor (x_in.data_ptr() does not hold x's elements one after the "
        "other: take x_in.contiguous() first)",
        (33, 65),
        torch.float32,
        _fixed("strided", "contiguous"),
    ),
    selfcheck.Case(
        "grad_y transposed, x not: their elements are in different orders in memory, so grad_y needs .contiguous() too",
        (31, 67),
        torch.float32,
        _fixed("contiguous", "transposed"),
    ),
    selfcheck.Case(
        "x transposed: allocate the output like the contiguous copy you pass to the kernel, not like the input",
        (65, 33),
        torch.float64,
        _fixed("transposed", "transposed"),
    ),
    selfcheck.Case("x and grad_y one element into their storage", (1151,), torch.bfloat16, _fixed("offset", "offset")),
    selfcheck.Case("an empty tensor", (0, 5), torch.float16, _fixed("contiguous", "contiguous")),
    selfcheck.Case("a 0-d tensor", (), torch.float32, _fixed("contiguous", "contiguous")),
]


# --------------------------------------------------------------------------------------------------
# The parts of the check
# --------------------------------------------------------------------------------------------------


def _where(x, grad_y=None) -> str:
    what = f"x of shape {list(x.shape)} {str(x.dtype)[6:]} on {x.device} (strides {list(x.stride())})"
    if grad_y is not None:
        what += f", grad_y of shape {list(grad_y.shape)} {str(grad_y.dtype)[6:]} on {grad_y.device}"
    return what


def _binding(ext, seed):
    missing = [n for n in ("forward", "backward", "square") if not hasattr(ext, n)]
    if missing:
        selfcheck.fail(
            TITLE,
            "The module",
            f"ext has no {', '.join(missing)}: bind forward, backward and square in PYBIND11_MODULE (m.def)",
            hint=HINT,
            seed=seed,
        )


def _run_values(ext, dev, seed) -> int:
    def yours(x, grad_y):
        where = f"Case {_where(x, grad_y)}"
        try:
            y, gx = ext.forward(x), ext.backward(grad_y, x)
            leaf = x.detach().requires_grad_()
            ys = ext.square(leaf)
        except Exception as e:  # the learner's error, shown as a verdict
            msg = f"a good input was rejected: {type(e).__name__}: {str(e).splitlines()[0]}"
            selfcheck.fail(TITLE, where, msg, hint=HINT, seed=seed)
        if not ys.requires_grad:
            selfcheck.fail(
                TITLE,
                where,
                "square(x) of an x that requires grad returned a tensor without a graph: call "
                "SquareFunction::apply, so that autograd records the node",
                hint=HINT,
                seed=seed,
            )
        try:  # the node alone first: its error (a wrong count of gradients) without the engine around it
            ys.grad_fn(grad_y)
            (ga,) = torch.autograd.grad(ys, leaf, grad_y)
        except Exception as e:  # autograd's error about the Function's backward
            msg = f"backward through square(x) failed: {type(e).__name__}: {str(e).splitlines()[0]}"
            selfcheck.fail(TITLE, where, msg, hint=HINT, seed=seed)
        return y, gx, ys.detach(), ga

    hint = (
        "output 0 is ext.forward(x), 1 ext.backward(grad_y, x), 2 ext.square(x), 3 the gradient autograd gets "
        "through ext.square(x); " + HINT
    )
    return selfcheck.run(
        f"{TITLE}, values", yours, reference, _values, device=dev, seed=seed, special=SPECIAL, hint=hint
    )


def _bad_inputs(dev):
    """(what, call, names any of which the message must contain, why)."""
    x = torch.randn(3, 4, device=dev)
    ints = torch.ones(3, 4, dtype=torch.int32, device=dev)
    cases = [
        ("forward(x) with x int32", lambda e: e.forward(ints), ("x",), "the kernels take floating-point x only"),
        (
            "backward(grad_y, x) with x int64",
            lambda e: e.backward(ints.long(), ints.long()),
            ("x", "grad_y"),
            "the kernels take floating-point x only",
        ),
        (
            "backward(grad_y, x), grad_y int32, x float32",
            lambda e: e.backward(ints, x),
            ("grad_y",),
            "grad_y must have x's dtype: the kernel reads both as the same type",
        ),
        (
            "backward(grad_y, x), grad_y float64, x float32",
            lambda e: e.backward(x.double(), x),
            ("grad_y",),
            "grad_y must have x's dtype: the kernel reads both as the same type",
        ),
        (
            "backward(grad_y, x), grad_y of shape [4], x of shape [3, 4]",
            lambda e: e.backward(torch.randn(4, device=dev), x),
            ("grad_y",),
            "a grad_y that broadcasts to x is not what this op takes: the gradient of y has y's shape",
        ),
        (
            "backward(grad_y, x), grad_y of shape [1, 4], x of shape [3, 4]",
            lambda e: e.backward(torch.randn(1, 4, device=dev), x),
            ("grad_y",),
            "a grad_y that broadcasts to x is not what this op takes: the gradient of y has y's shape",
        ),
        (
            "backward(grad_y, x), grad_y of shape [4, 3], x of shape [3, 4]",
            lambda e: e.backward(torch.randn(4, 3, device=dev), x),
            ("grad_y",),
            "the same number of elements in another shape is another tensor",
        ),
    ]
    if dev.type == "cuda":
        cases += [
            (
                "backward(grad_y, x), grad_y on the CPU, x on the GPU",
                lambda e: e.backward(torch.randn(3, 4), x),
                ("grad_y",),
                "a kernel reads only its own device's memory",
            ),
            (
                "backward(grad_y, x), grad_y on the GPU, x on the CPU",
                lambda e: e.backward(x, x.cpu()),
                ("grad_y", "x"),
                "a kernel reads only its own device's memory",
            ),
        ]
    return cases


def _run_bad_inputs(ext, dev, seed) -> int:
    cases = _bad_inputs(dev)
    for what, call, names, why in cases:
        try:
            call(ext)
        except Exception as e:  # any error type, as long as it names the argument
            msg = str(e).splitlines()[0] if str(e) else type(e).__name__
            if not any(re.search(rf"(?<![\w.]){n}(?![\w(])", msg) for n in names):
                selfcheck.fail(
                    TITLE,
                    f"{what} on {dev}",
                    f"the error says {msg!r}, which does not name {' or '.join(names)}: check the argument "
                    "yourself before the kernel runs, with a message that names it",
                    hint=HINT,
                    seed=seed,
                    why=why,
                )
        else:
            if dev.type == "cuda":
                torch.cuda.synchronize()
            selfcheck.fail(TITLE, f"{what} on {dev}", "no error: it was accepted", hint=HINT, seed=seed, why=why)
    return len(cases)


def _run_autograd(ext, dev, seed) -> int:
    where = f"SquareFunction on {dev}"
    x = torch.randn(8, 16, device=dev).t().requires_grad_()  # transposed: a copy of x would not be x
    saved = []
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        y = ext.square(x)
    if y.grad_fn is None:
        selfcheck.fail(TITLE, where, "square(x) has no grad_fn: call SquareFunction::apply", hint=HINT, seed=seed)
    if len(saved) != 1:
        selfcheck.fail(
            TITLE,
            where,
            f"forward saved {len(saved)} tensors ({', '.join(str(list(t.shape)) for t in saved)}): backward "
            "needs x only, and each saved tensor stays in memory until backward runs",
            hint=HINT,
            seed=seed,
        )
    s = saved[0]
    if s.untyped_storage().data_ptr() != x.untyped_storage().data_ptr() or s.shape != x.shape:
        selfcheck.fail(
            TITLE,
            where,
            "forward saved a tensor that is not x (a copy, or y): save x itself, which costs no memory",
            hint=HINT,
            seed=seed,
        )
    try:
        y.backward(torch.ones_like(y))
    except RuntimeError as e:
        first = str(e).splitlines()[0]
        extra = " (backward returns one gradient per input of forward: here x only)" if "number" in first else ""
        selfcheck.fail(TITLE, where, f"backward failed: {first}{extra}", hint=HINT, seed=seed)
    saved.clear()
    quiet = torch.randn(5, device=dev)  # needs no gradient: no node, nothing kept
    with torch.autograd.graph.saved_tensors_hooks(lambda t: saved.append(t) or t, lambda t: t):
        y = ext.square(quiet)
    if y.requires_grad or saved:
        selfcheck.fail(
            TITLE,
            f"{where}, x without requires_grad",
            "square(x) of an x that needs no gradient must keep nothing and build no graph",
            hint=HINT,
            seed=seed,
        )
    try:
        _check.gradcheck(ext.square, torch.randn(3, 7, device=dev, dtype=torch.float64, requires_grad=True))
    except Exception as e:  # gradcheck's own error (GradcheckError is a RuntimeError)
        selfcheck.fail(TITLE, f"{where}, gradcheck in float64", str(e).splitlines()[0], hint=HINT, seed=seed)
    return 4


# ATen ops that compute: x * x or 2 * x * grad_y written with them never reaches the course's kernels.
_MATH = {"mul", "mul_", "pow", "pow_", "square", "add", "add_", "sub", "rsub", "addcmul", "addcmul_", "multiply"}


class _Ops(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.names = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.names.add(func.overloadpacket.__name__)
        return func(*args, **(kwargs or {}))


def _run_no_aten_math(ext, dev, seed) -> int:
    x = torch.randn(257, device=dev, requires_grad=True)
    g = torch.randn(257, device=dev)
    for what, call in [
        ("forward(x)", lambda: ext.forward(x.detach())),
        ("backward(grad_y, x)", lambda: ext.backward(g, x.detach())),
        ("square(x) and its backward", lambda: torch.autograd.grad(ext.square(x), x, g)),
    ]:
        with _Ops() as ops:
            call()
        math = sorted(ops.names & _MATH)
        if math:
            selfcheck.fail(
                TITLE,
                f"{what} on {dev}",
                f"it ran torch's {', '.join('aten::' + m for m in math)}: the arithmetic belongs to the course's "
                "kernels (kernels/square/square.h), called with the tensors' data pointers",
                hint=HINT,
                seed=seed,
            )
    return 3


def _run_stream(ext, seed) -> int:
    """forward and backward captured into a CUDA graph on a side stream, then replayed on new inputs: a launch on
    any stream but PyTorch's current one (the legacy default stream 0, say) is either an error during capture or
    a kernel that ran once, outside the graph, so that the replay leaves its output stale."""
    x, g = torch.randn(4099, device="cuda"), torch.randn(4099, device="cuda")
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm-up off the default stream, as torch.cuda.graph asks
        ext.forward(x), ext.backward(g, x)
    torch.cuda.current_stream().wait_stream(side)
    graph, failed = torch.cuda.CUDAGraph(), None
    with torch.cuda.stream(side):  # restores the current stream even where a failed capture leaves it changed
        try:
            with torch.cuda.graph(graph, stream=side):
                y, gx = ext.forward(x), ext.backward(g, x)
        except RuntimeError as e:
            failed = str(e).splitlines()[0]
    if failed:
        torch.cuda.synchronize()
        selfcheck.fail(
            TITLE,
            "forward and backward captured in a CUDA graph on a side stream",
            f"the capture failed ({failed}): launch on PyTorch's current stream (the one OnDevice gives), not on "
            "stream 0",
            hint=HINT,
            seed=seed,
        )
    x.copy_(torch.randn_like(x)), g.copy_(torch.randn_like(g))  # new inputs: only the graph's kernels see them
    graph.replay()
    torch.cuda.synchronize()
    want = reference(x, g)
    try:
        _check.assert_close(y, want[0], name="y (graph replay)")
        _check.assert_close(gx, want[1], name="grad_x (graph replay)")
    except AssertionError as e:
        selfcheck.fail(
            TITLE,
            "a CUDA graph captured on a side stream, replayed on new inputs",
            f"{e}\nThe replay did not recompute it: the kernel ran outside the graph, on a stream other than "
            "PyTorch's current one (stream 0?), once, at capture time",
            hint=HINT,
            seed=seed,
        )
    return 1


def check(device=None, ext=None, seed=None) -> int:
    """The binding, good and bad inputs, the autograd Function and where the arithmetic runs, on every part:
    the CPU, and in CUDA mode the GPU too (there also the stream and a tensor past 2^31 elements)."""
    ext = ext or loader.load(OP)
    seed = selfcheck.new_seed(seed)
    cases = 0
    with selfcheck.exercise(NAME):
        _binding(ext, seed)
        for dev in selfcheck.parts(device):
            cases += _run_values(ext, dev, seed)
            cases += _run_bad_inputs(ext, dev, seed)
            cases += _run_autograd(ext, dev, seed)
            cases += _run_no_aten_math(ext, dev, seed)
            if dev.type == "cuda":
                cases += _run_stream(ext, seed)
                selfcheck.large_case(
                    f"{TITLE}, forward",
                    ext.forward,
                    lambda x: reference(x, x)[0],
                    lambda n, dtype, device, g: (torch.randn(n, device=device, dtype=dtype, generator=g),),
                    numel=(1 << 31) + 4099,
                    buffers=2,
                    hint="pass x.numel() (an int64_t) to the launcher as it is, never through an int",
                    seed=seed,
                )
        devices = " and ".join(str(d) for d in selfcheck.parts(device))
        selfcheck.passed_now(TITLE, f"all {cases} checks pass on {devices}.")
    if not env.cuda_mode() and device is None:
        print("ℹ️  The GPU parts (stream, devices, > 2^31 elements) run where there is a GPU.")
    return cases


# --------------------------------------------------------------------------------------------------
# Mistakes learners make (tests/exercises/test_exercises.py proves check() rejects each)
# --------------------------------------------------------------------------------------------------

_FWD = 'at::Tensor square_forward(const at::Tensor& x_in) {\n  check_floating(x_in, "x");\n'
_CUDA_FWD = "square_forward_v2(cuda_ptr<scalar_t>(x), cuda_ptr<scalar_t>(y), x.numel(), on.stream);"

WRONG = [
    Wrong(
        "forward checks no dtype: an int32 x fails inside AT_DISPATCH with a message that does not name x",
        [(_FWD, "at::Tensor square_forward(const at::Tensor& x_in) {\n")],
        "cpu",
    ),
    Wrong(
        "backward checks no dtype of grad_y: a float64 grad_y beside a float32 x fails in data_ptr<float>, "
        "without naming grad_y",
        [('  check_same_dtype(grad_y_in, "grad_y", x_in, "x");\n', "")],
        "cpu",
    ),
    Wrong(
        "backward accepts a grad_y that broadcasts to x (expand_as) instead of x's shape only",
        [
            ('check_like(grad_y_in, "grad_y", x_in, "x");', 'check_same_device(grad_y_in, "grad_y", x_in, "x");'),
            ("grad_y = grad_y_in.contiguous();", "grad_y = grad_y_in.expand_as(x_in).contiguous();"),
        ],
        "cpu",
    ),
    Wrong(
        "forward passes x_in's data_ptr without .contiguous(): a strided view's elements are not one after the other",
        [("const at::Tensor x = x_in.contiguous();", "const at::Tensor x = x_in;")],
        "cpu",
    ),
    Wrong(
        "backward makes x contiguous but not grad_y",
        [("grad_y = grad_y_in.contiguous();", "grad_y = grad_y_in;")],
        "cpu",
    ),
    Wrong(
        "forward allocates y like the input as given (transposed strides) while the kernel writes it in the "
        "contiguous copy's order",
        [("at::Tensor y = at::empty_like(x);", "at::Tensor y = at::empty_like(x_in);")],
        "cpu",
    ),
    Wrong(
        "forward allocates y as float32 whatever x's dtype",
        [("at::Tensor y = at::empty_like(x);", "at::Tensor y = at::empty(x.sizes(), x.options().dtype(at::kFloat));")],
        "cpu",
    ),
    Wrong(
        "forward computes with ATen (at::mul) instead of the course's kernels",
        [("at::Tensor y = at::empty_like(x);", "at::Tensor y = at::mul(x, x);\n  return y;")],
        "cpu",
    ),
    Wrong(
        "SquareFunction's backward computes 2 * x * grad_y with ATen, as the seed does, instead of square_backward",
        [("return {square_backward(grad_outputs[0], x)};", "return {2 * x * grad_outputs[0]};")],
        "cpu",
    ),
    Wrong(
        "backward returns two gradients (one for x, and grad_y passed on as if for y) for forward's one input",
        [
            (
                "return {square_backward(grad_outputs[0], x)};",
                "return {square_backward(grad_outputs[0], x), grad_outputs[0]};",
            )
        ],
        "cpu",
    ),
    Wrong(
        "forward saves y beside x",
        [
            (
                "    ctx->save_for_backward({x});\n    return square_forward(x);",
                "    at::Tensor y = square_forward(x);\n    ctx->save_for_backward({x, y});\n    return y;",
            )
        ],
        "cpu",
    ),
    Wrong(
        "square(x) calls square_forward directly: no autograd node, so no gradient reaches x",
        [("return SquareFunction::apply(x);", "return square_forward(x);")],
        "cpu",
    ),
    Wrong(
        "forward launches on stream 0 (the legacy default stream) instead of PyTorch's current stream",
        [(_CUDA_FWD, _CUDA_FWD.replace("on.stream", "nullptr"))],
        "cuda",
    ),
    Wrong(
        "forward passes the element count through an int: past 2^31 elements it is negative and nothing is written",
        [(_CUDA_FWD, _CUDA_FWD.replace("x.numel()", "static_cast<int>(x.numel())"))],
        "cuda",
        min_free_gib=2 * ((1 << 31) + 4099) * 2 / 0.8 / 2**30,
    ),
]
