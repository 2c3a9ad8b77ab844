"""Self-check for lesson 01's second exercise: kernels/exercises/polynomial_autograd.py, a torch.autograd.Function
over the course's polynomial kernels (Part 1) and a torch.autograd.gradcheck call (Part 2).

Part 1, on the CPU and in CUDA mode on the GPU too, in every dtype, with shapes, values and coefficients drawn
afresh each run (incoming gradients with zeros among them): y, grad_x and grad_coeffs against formulas computed
here in float64 (not the course's reference, which your code could call); forward calls ext.forward once and
backward ext.backward once (a wrapper counts them: the kernels, not Python, must do the work); what forward
saved (torch.autograd.graph.saved_tensors_hooks): x and coeffs, nothing more; and, calling your backward
directly, one value per input of forward, None where ctx.needs_input_grad says no gradient is needed, and the
coefficient sums asked of the kernel only when coeffs needs a gradient.
Part 2: your gradcheck_polynomial passes a correct Function and fails two broken ones (grad_x 1 % off; the
gradient of d wrong), with float64 inputs that all require grad."""

from __future__ import annotations

import torch
from torch.autograd.gradcheck import GradcheckError

from .. import library, loader, selfcheck
from . import Wrong, python_module

OP = "polynomial"
NAME = "polynomial_autograd"
FILE = "kernels/exercises/polynomial_autograd.py"
HINT = (
    "Part 1: forward returns ext.forward's y and saves the tensors backward needs, the inputs dy/dx depends on; "
    "backward reads them back, lets ext.backward compute the coefficient sums only when ctx.needs_input_grad "
    "asks for them, and returns one value per input of forward (x, coeffs, ext). Part 2: finite differences "
    f"need float64, and gradcheck checks only the inputs that require grad. See {FILE}"
)
PART1, PART2 = "Part 1 (Polynomial)", "Part 2 (gradcheck_polynomial)"
INPUTS = ("x", "coeffs", "ext")


class _Counting:
    """The course's module, counting the calls to its kernels: forwards, and need_coeffs_grad of each backward."""

    def __init__(self, ext):
        self._ext, self.forwards, self.backwards = ext, 0, []

    def forward(self, x, coeffs, version=2):
        self.forwards += 1
        return self._ext.forward(x, coeffs, version)

    def backward(self, grad_y, x, coeffs, need_coeffs_grad=True, version=2):
        self.backwards.append(bool(need_coeffs_grad))
        return self._ext.backward(grad_y, x, coeffs, need_coeffs_grad, version)

    def __getattr__(self, name):
        return getattr(self._ext, name)


def _expected(x: torch.Tensor, c: torch.Tensor, gy: torch.Tensor):
    """y, grad_x (in x's dtype) and grad_coeffs (float64), written out here in float64."""
    xd, gd = x.double(), gy.double()
    a, b, cc, d = c.double().unbind()
    y = ((a * xd + b) * xd + cc) * xd + d
    gx = gd * ((3 * a * xd + 2 * b) * xd + cc)
    gc = torch.stack([(gd * xd**3).sum(), (gd * xd**2).sum(), (gd * xd).sum(), gd.sum()])
    return y.to(x.dtype), gx.to(x.dtype), gc


def _where(part: str, x: torch.Tensor) -> str:
    return f"{part}, x of shape {list(x.shape)}, {str(x.dtype)[6:]} on {x.device}"


def _same(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.dtype == b.dtype


def _acc(dtype: torch.dtype) -> torch.dtype:
    return torch.float64 if dtype == torch.float64 else torch.float32


def _draw_shape(g: torch.Generator) -> tuple[int, ...]:
    dims = int(torch.randint(1, 4, (1,), generator=g))
    return tuple(int(v) for v in torch.randint(1, 40, (dims,), generator=g))


def _draw(shape, dtype, dev, g):
    """x, coeffs (float64 for float64 x, else float32) and grad_y with about a quarter of its elements 0."""
    x = torch.randn(shape, generator=g).to(device=dev, dtype=dtype)
    c = (torch.rand(4, generator=g) * 4 - 2).to(device=dev, dtype=_acc(dtype))
    gy = torch.randn(shape, generator=g) * (torch.rand(shape, generator=g) > 0.25)
    return x, c, gy.to(device=dev, dtype=dtype)


def _saved(c: selfcheck.Verdicts, where: str, packed: list, x, coeffs, y) -> None:
    why = "that forward saves what backward needs, with ctx.save_for_backward, and no more (it stays in memory)"
    names = ["y (the output)" if _same(t, y) else "x" if _same(t, x) else "coeffs" if _same(t, coeffs) else
             f"a tensor of shape {list(t.shape)}" for t in packed]  # fmt: skip
    if "x" not in names and any(n.startswith("y") for n in names):
        c.fail(where, "forward saved the output y. dy/dx = 3ax^2 + 2bx + c is a function of x: save x.", why)
    for name in ("x", "coeffs"):
        if name not in names:
            c.fail(
                where,
                f"{name} was not saved with ctx.save_for_backward (saved: {', '.join(names) or 'nothing'}); an "
                "attribute of ctx is not protected against changes in place between forward and backward.",
                why,
            )
    if len(packed) != 2:
        extra = sum(t.nbytes for t in packed) - x.nbytes - coeffs.nbytes
        c.fail(
            where, f"forward saved {', '.join(names)}: {extra} bytes more than x and coeffs, all backward needs.", why
        )


def _sum_tolerance(x: torch.Tensor) -> dict:
    """For the coefficient sums: float32 accumulates an error that grows with the number of elements."""
    return {} if x.dtype == torch.float64 else dict(rtol=1e-4, atol=1e-5 * (x.numel() + 1))


def _values_and_gradients(c: selfcheck.Verdicts, mine, ext, x, coeffs, gy) -> None:
    where = _where(PART1, x)
    counting = _Counting(ext)
    xr, cr = x.detach().clone().requires_grad_(), coeffs.detach().clone().requires_grad_()
    packed = []

    def pack(t):
        packed.append(t)
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        y = c.run(where, lambda: mine.Polynomial.apply(xr, cr, counting))
    if counting.forwards != 1:
        c.fail(where, f"forward called ext.forward {counting.forwards} times: y comes from the kernel, once.")
    want_y, want_gx, want_gc = _expected(x, coeffs, gy)
    c.close(y, want_y, "y", where)
    _saved(c, where, packed, xr, cr, y)
    grads = c.run(where, lambda: torch.autograd.grad(y, (xr, cr), gy))
    if counting.backwards != [True]:
        c.fail(
            where,
            f"backward called ext.backward {len(counting.backwards)} times"
            + (" with need_coeffs_grad=False" if counting.backwards == [False] else "")
            + ": here both x and coeffs need a gradient, and the kernel computes both in one call.",
        )
    c.close(grads[0], want_gx, "the gradient of x", where)
    c.close(grads[1].double(), want_gc, "the gradient of coeffs", where, **_sum_tolerance(x))
    c.cases += 1


def _only_what_is_needed(c: selfcheck.Verdicts, mine, ext, x, coeffs, gy) -> None:
    """Your backward called directly (its ctx is y.grad_fn), once with only x and once with only coeffs requiring
    grad: what it returns in each position, and what it asked of the kernel."""
    why = (
        "that backward returns one value per input of forward (x, coeffs, ext), None where ctx.needs_input_grad "
        "is False, and asks the kernel for the coefficient sums (a reduction over every element) only when needed"
    )
    for wanted in ("x", "coeffs"):
        where = f"{_where(PART1, x)}, only {wanted} requires grad"
        counting = _Counting(ext)
        xr = x.detach().clone().requires_grad_(wanted == "x")
        cr = coeffs.detach().clone().requires_grad_(wanted == "coeffs")
        y = c.run(where, lambda: mine.Polynomial.apply(xr, cr, counting), why)
        out = c.run(where, lambda y=y: mine.Polynomial.backward(y.grad_fn, gy), why)
        out = tuple(out) if isinstance(out, (tuple, list)) else (out,)
        if len(out) != 3:
            c.fail(where, f"backward returned {len(out)} values; forward has 3 inputs (x, coeffs, ext).", why)
        for i, name in enumerate(INPUTS):
            needed = name == wanted
            if needed and out[i] is None:
                c.fail(where, f"backward returned None for {name}, which needs a gradient.", why)
            if not needed and out[i] is not None:
                c.fail(where, f"backward returned a value for {name}, which needs no gradient here: return None.", why)
        if counting.backwards != [wanted == "coeffs"]:
            asked = ", ".join(f"need_coeffs_grad={b}" for b in counting.backwards) or "never called"
            c.fail(
                where, f"ext.backward: {asked}; once, with need_coeffs_grad={wanted == 'coeffs'}, is all it takes.", why
            )
        _, want_gx, want_gc = _expected(x, coeffs, gy)
        if wanted == "x":
            c.close(out[0], want_gx, "the gradient of x", where)
        else:
            c.close(out[1].double(), want_gc, "the gradient of coeffs", where, **_sum_tolerance(x))
        c.cases += 1


class _Given(torch.autograd.Function):
    """A correct Function over the kernels, for testing your gradcheck_polynomial (not yours: Part 2 is
    checked on its own)."""

    @staticmethod
    def forward(ctx, x, coeffs, ext):
        ctx.save_for_backward(x, coeffs)
        ctx.ext = ext
        return ext.forward(x, coeffs)

    @staticmethod
    def backward(ctx, grad_y):
        x, coeffs = ctx.saved_tensors
        grad_x, grad_coeffs = ctx.ext.backward(grad_y, x, coeffs, ctx.needs_input_grad[1])
        return grad_x, grad_coeffs, None


class _WrongGradX(_Given):
    @staticmethod
    def backward(ctx, grad_y):
        grad_x, grad_coeffs, _ = _Given.backward(ctx, grad_y)
        return grad_x * 1.01, grad_coeffs, None  # 1 % off


class _WrongGradD(_Given):
    @staticmethod
    def backward(ctx, grad_y):
        grad_x, grad_coeffs, _ = _Given.backward(ctx, grad_y)
        if grad_coeffs is not None:
            grad_coeffs = grad_coeffs * grad_coeffs.new_tensor([1.0, 1.0, 1.0, 0.0])  # the gradient of d lost
        return grad_x, grad_coeffs, None


def _gradcheck_part(c: selfcheck.Verdicts, mine, ext, dev) -> None:
    where = f"{PART2} on {dev}"
    why = "that your gradcheck passes a correct backward and fails a wrong one"

    def verdict(cls):
        """(passed, the inputs it was called with): passed is False where gradcheck failed (raised or False)."""
        calls = []

        def apply(*args):
            calls.append(args)
            return cls.apply(*args)

        try:
            ok = mine.gradcheck_polynomial(apply, ext, dev)
        except GradcheckError:
            ok = False
        except Exception as e:
            if isinstance(e, NotImplementedError) and "exercise" in str(e):
                c.fail(where, f"gradcheck_polynomial in {FILE} is not written yet (it raises NotImplementedError)")
            c.fail(where, f"raised {library.first_lines(e, 3)}", why)
        if not calls:
            c.fail(where, "gradcheck_polynomial never called the `apply` it is given: check that function.", why)
        return ok is not False, calls[0]

    ok, args = verdict(_Given)
    x, coeffs = args[0], args[1]
    if not (isinstance(x, torch.Tensor) and isinstance(coeffs, torch.Tensor) and args[2] is ext):
        c.fail(where, "gradcheck_polynomial should call apply(x, coeffs, ext), with the ext it is given.", why)
    if x.dtype != torch.float64 or coeffs.dtype != torch.float64:
        c.fail(
            where,
            f"x is {str(x.dtype)[6:]} and coeffs {str(coeffs.dtype)[6:]}: gradcheck's finite differences "
            "(f(x + eps) - f(x - eps)) / 2eps, with eps = 1e-6, are noise in float32. Use float64.",
            why,
        )
    if x.device.type != torch.device(dev).type:
        c.fail(where, f"x is on {x.device}; gradcheck_polynomial is asked to check on {dev}.", why)
    for name, t in (("x", x), ("coeffs", coeffs)):
        if not t.requires_grad:
            c.fail(where, f"{name} does not require grad: gradcheck checks nothing of its gradient.", why)
    if not ok:
        c.fail(where, "gradcheck_polynomial failed on a correct backward (the course's).", why)
    for cls, what in ((_WrongGradX, "a grad_x 1 % off"), (_WrongGradD, "the gradient of d set to 0")):
        if verdict(cls)[0]:
            c.fail(where, f"gradcheck_polynomial passed a backward with {what}: it must fail there.", why)
    c.cases += 3


def check(device=None, ext=None, seed=None) -> int:
    """Your Polynomial Function (Part 1) and gradcheck_polynomial (Part 2), on the CPU and in CUDA mode on the
    GPU too. `ext`: your file as a module (default: executed afresh from kernels/exercises/polynomial_autograd.py,
    or the solution with COURSE_SOLUTIONS=1)."""
    kernels = loader.load(OP)
    seed = selfcheck.new_seed(seed)
    g = torch.Generator().manual_seed(seed)
    c = selfcheck.Verdicts(NAME, FILE, HINT, seed)
    with selfcheck.exercise(NAME):
        try:
            mine = ext or python_module(NAME)
        except Exception as e:
            c.fail(f"loading {FILE}", library.first_lines(e, 3))
        for dev in selfcheck.parts(device):
            shapes = [(1,), (257,), (7, 129), _draw_shape(g), _draw_shape(g)]
            for dtype in selfcheck.DTYPES:
                for shape in shapes:
                    _values_and_gradients(c, mine, kernels, *_draw(shape, dtype, dev, g))
            _only_what_is_needed(c, mine, kernels, *_draw((3, 41), torch.float32, dev, g))
            _gradcheck_part(c, mine, kernels, dev)
        selfcheck.passed_now(
            NAME,
            f"all {c.cases} cases pass: values and gradients, one kernel call each way, x and coeffs saved, "
            "None where no gradient is needed, and your gradcheck tells a right backward from wrong ones.",
        )
    return c.cases


_FORWARD = "        ctx.save_for_backward(x, coeffs)\n        ctx.ext = ext\n        return ext.forward(x, coeffs)\n"
_SAVED = "        x, coeffs = ctx.saved_tensors\n"
_BACKWARD_CALL = "        grad_x, grad_coeffs = ctx.ext.backward(grad_y, x, coeffs, need_coeffs)\n"
_RETURN = "        return (grad_x if need_x else None), grad_coeffs, None\n"
_X64 = "    x = torch.randn(20, dtype=torch.float64, device=device, requires_grad=True)\n"
_C64 = "    coeffs = torch.randn(4, dtype=torch.float64, device=device, requires_grad=True)\n"
_GRADCHECK = "    return torch.autograd.gradcheck(apply, (x, coeffs, ext))\n"

WRONG = [
    Wrong(
        "backward returns two gradients, one per tensor input, forgetting the None for ext",
        [(_RETURN, "        return (grad_x if need_x else None), grad_coeffs\n")],
        "cpu",
    ),
    Wrong(
        "forward saves the output y instead of x (backward then evaluates dy/dx at y)",
        [
            (
                _FORWARD,
                "        y = ext.forward(x, coeffs)\n        ctx.save_for_backward(y, coeffs)\n"
                "        ctx.ext = ext\n        return y\n",
            )
        ],
        "cpu",
    ),
    Wrong(
        "forward saves y as well, just in case (a tensor of x's size kept for nothing)",
        [
            (
                _FORWARD,
                "        y = ext.forward(x, coeffs)\n        ctx.save_for_backward(x, coeffs, y)\n"
                "        ctx.ext = ext\n        return y\n",
            ),
            (_SAVED, "        x, coeffs, _ = ctx.saved_tensors\n"),
        ],
        "cpu",
    ),
    Wrong(
        "x kept as an attribute of ctx, not with save_for_backward",
        [
            (
                _FORWARD,
                "        ctx.save_for_backward(coeffs)\n        ctx.x, ctx.ext = x, ext\n        return ext.forward(x, coeffs)\n",
            ),
            (_SAVED, "        (coeffs,) = ctx.saved_tensors\n        x = ctx.x\n"),
        ],
        "cpu",
    ),
    Wrong(
        "ctx.needs_input_grad ignored: the coefficient sums always computed, grad_x always returned",
        [
            (_BACKWARD_CALL, "        grad_x, grad_coeffs = ctx.ext.backward(grad_y, x, coeffs, True)\n"),
            (_RETURN, "        return grad_x, grad_coeffs, None\n"),
        ],
        "cpu",
    ),
    Wrong(
        "the coefficient gradient never asked for (need_coeffs_grad=False): coeffs cannot learn",
        [(_BACKWARD_CALL, "        grad_x, grad_coeffs = ctx.ext.backward(grad_y, x, coeffs, False)\n")],
        "cpu",
    ),
    Wrong(
        "forward computed in Python (seven PyTorch kernels) instead of calling the course's kernel",
        [
            (
                "        return ext.forward(x, coeffs)\n",
                "        a, b, c, d = coeffs.unbind()\n        return a * x**3 + b * x**2 + c * x + d\n",
            )
        ],
        "cpu",
    ),
    Wrong(
        "backward computed in Python instead of calling the course's backward kernel",
        [
            (
                _BACKWARD_CALL,
                "        a, b, c, _ = coeffs.unbind()\n"
                "        grad_x = grad_y * (3 * a * x**2 + 2 * b * x + c)\n"
                "        grad_coeffs = torch.stack([(grad_y * x**p).sum() for p in (3, 2, 1, 0)]) if need_coeffs else None\n",
            )
        ],
        "cpu",
    ),
    Wrong(
        "gradcheck in float32",
        [(_X64, _X64.replace("float64", "float32")), (_C64, _C64.replace("float64", "float32"))],
        "cpu",
    ),
    Wrong(
        "gradcheck with coeffs that do not require grad: a wrong coefficient gradient goes unnoticed",
        [(_C64, _C64.replace(", requires_grad=True", ""))],
        "cpu",
    ),
    Wrong(
        "gradcheck's verdict thrown away (raise_exception=False, then True returned)",
        [
            (
                _GRADCHECK,
                "    torch.autograd.gradcheck(apply, (x, coeffs, ext), raise_exception=False)\n    return True\n",
            )
        ],
        "cpu",
    ),
    Wrong(
        "gradcheck run on this file's Polynomial instead of the function it is given",
        [(_GRADCHECK, "    return torch.autograd.gradcheck(Polynomial.apply, (x, coeffs, ext))\n")],
        "cpu",
    ),
]
