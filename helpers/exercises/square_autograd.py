"""Self-check for lesson 04b's exercise: kernels/exercises/square_autograd.py, register_autograd for
course::square (Part 1) and for course::square_backward (Part 2, so that second derivatives work). Both ops
are lesson 04's exercise 1 (kernels/exercises/square_library.h): until it registers them, this check says so.

It registers your functions (your file's `register(lib)`), then checks on the CPU, and in CUDA mode on the
GPU, with shapes and values drawn afresh each run: first derivatives against 2 * x * grad_y in every dtype,
gradcheck in float64; second derivatives against their formulas, gradgradcheck; then the rules: each backward
computes its gradients with the course op course::square_backward (it counts the calls: a formula in plain
torch ops gives the right numbers, but not the C++ kernel the exercise is about), a gradient nobody asked for
is not computed (ctx.needs_input_grad), and tensors are saved with ctx.save_for_backward (an
input changed in place after the forward makes backward refuse, instead of silently using the new values).
Last, torch.library.opcheck on both ops, which also compiles them (their fake kernels: yours from exercise
2 if its self-check passed in this session, else the given ones from kernels/solutions/square_fake.py)."""

from __future__ import annotations

import torch

from .. import check as _check
from .. import library, selfcheck
from . import Wrong, python_module, square_fake, square_library

OP = "square"
NAME = "square_autograd"
LIB = "square autograd"
FILE = "kernels/exercises/square_autograd.py"
HINT = (
    "Part 1: which tensor does the derivative 2*x*grad_y need from the forward? Save it the way lesson 04's "
    "section 5 saves polynomial's inputs, and compute the gradient with the course's op that already computes "
    "2*x*grad_y (torch.compile traces an op, not a pybind call). Part 2: d(2*x*grad_y)/d(grad_y) = 2*x and "
    "d/dx = 2*grad_y, each times grad_grad_x: the same op again, with other arguments; None for an input whose "
    f"ctx.needs_input_grad is False. See {FILE}"
)
PART1, PART2 = "Part 1 (course::square)", "Part 2 (course::square_backward)"


def _given_fakes() -> None:
    """The ops' fake kernels, which opcheck's compile test needs: exercise 1's, if its self-check passed in this
    session and they are still registered, else the given ones."""
    from torch._library.simple_registry import singleton

    registered = all(
        singleton.find(f"course::{op}").fake_impl.kernel is not None for op in ("square", "square_backward")
    )
    if not (registered and selfcheck.passed(square_fake.NAME)):
        python_module(square_fake.NAME, solution=True).register(library.fresh(square_fake.LIB))


def _where(part: str, x: torch.Tensor) -> str:
    return f"{part}, x of shape {list(x.shape)}, {str(x.dtype)[6:]} on {x.device}"


def _first_derivative(c: selfcheck.Verdicts, x: torch.Tensor, gy: torch.Tensor) -> None:
    where = _where(PART1, x)

    def run():
        xr = x.detach().requires_grad_()
        y = torch.ops.course.square(xr)
        with library.calls("course::square_backward") as n:
            grad = torch.autograd.grad(y, xr, gy)[0]
        return grad, n.count

    with _check.poisoned():
        got, count = c.run(where, run)
    want = (2 * x.double() * gy.double()).to(x.dtype)
    c.close(got, want, "the gradient of x", where)
    if count != 1:
        c.fail(
            where,
            f"backward_square ran course::square_backward {count} times; the gradient takes it once.",
            "that the backward uses the course's op: torch.ops.course.square_backward is the C++ kernel the "
            "exercise is about (and what torch.compile and CUDA graphs see); a formula in plain torch ops gives "
            "the same numbers without it",
        )
    c.cases += 1


def _second_derivative(c: selfcheck.Verdicts, x: torch.Tensor, gy: torch.Tensor, u: torch.Tensor) -> None:
    """grad_x = square_backward(gy, x), built with create_graph=True, differentiated again with respect to gy and x."""
    where = _where(PART2, x)

    def run():
        xr, gr = x.detach().requires_grad_(), gy.detach().requires_grad_()
        (grad_x,) = torch.autograd.grad(torch.ops.course.square(xr), xr, gr, create_graph=True)
        return torch.autograd.grad(grad_x, (gr, xr), u)

    with _check.poisoned():
        got = c.run(where, run)
    xd, gd, ud = x.double(), gy.double(), u.double()
    c.close(got[0], (2 * xd * ud).to(x.dtype), "the second derivative with respect to grad_y (2 * x * u)", where)
    c.close(got[1], (2 * gd * ud).to(x.dtype), "the second derivative with respect to x (2 * grad_y * u)", where)
    c.cases += 1


def _only_what_is_needed(c: selfcheck.Verdicts, x: torch.Tensor, gy: torch.Tensor, u: torch.Tensor) -> None:
    """square_backward(grad_y, x) called with only one input requiring grad: its backward runs square_backward once."""
    why = (
        "that backward computes only the gradients autograd needs: ctx.needs_input_grad[i] is False for an input "
        "that does not require grad, and computing its gradient anyway costs a kernel for nothing"
    )
    for wanted in ("grad_y", "x"):
        where = f"{_where(PART2, x)}, only {wanted} requires grad"

        def run(wanted=wanted):
            gr = gy.detach().requires_grad_(wanted == "grad_y")
            xr = x.detach().requires_grad_(wanted == "x")
            out = torch.ops.course.square_backward(gr, xr)
            with library.calls("course::square_backward") as n:
                (grad,) = torch.autograd.grad(out, gr if wanted == "grad_y" else xr, u)
            return grad, n.count

        grad, count = c.run(where, run, why)
        want = 2 * (x.double() if wanted == "grad_y" else gy.double()) * u.double()
        c.close(grad, want.to(x.dtype), f"the gradient of {wanted}", where, why)
        if count == 0:
            c.fail(
                where,
                "backward_square_backward never ran course::square_backward: compute each gradient with the course's "
                "op (2*x*grad_grad_x is square_backward(grad_grad_x, x)), not with plain torch ops.",
                why,
            )
        if count != 1:
            c.fail(where, f"backward ran course::square_backward {count} times; the one gradient needed takes 1.", why)
        c.cases += 1


def _saved_properly(c: selfcheck.Verdicts, x: torch.Tensor, gy: torch.Tensor) -> None:
    why = (
        "that tensors are saved with ctx.save_for_backward: then autograd notices when an input is changed in place "
        "between forward and backward, and refuses, instead of computing the gradient from the new values"
    )
    for part in (PART1, PART2):
        where = f"{_where(part, x)}, an input changed in place after the forward"

        def run(part=part):
            leaf = x.detach().requires_grad_()
            xr = leaf * 1  # not a leaf, so it may be changed in place
            if part == PART1:
                out = torch.ops.course.square(xr)
            else:
                out = torch.ops.course.square_backward(gy.detach().requires_grad_(), xr)
            xr.add_(1)
            try:
                torch.autograd.grad(out, leaf, torch.ones_like(out))
            except RuntimeError as e:
                if "modified by an inplace operation" in str(e):
                    return True
                raise
            return False

        if not c.run(where, run, why):
            c.fail(where, "backward ran with the changed input (and got a wrong gradient) instead of raising.", why)
        c.cases += 1


def _draw_shape(g: torch.Generator) -> tuple[int, ...]:
    dims = int(torch.randint(1, 4, (1,), generator=g))
    return tuple(int(v) for v in torch.randint(1, 12, (dims,), generator=g))


def check(device=None, ext=None, seed=None) -> int:
    """Your autograd registrations for course::square (Part 1) and course::square_backward (Part 2), on the CPU
    and in CUDA mode on the GPU too. `ext`: your file as a module (default: executed afresh from
    kernels/exercises/square_autograd.py, or the solution with COURSE_SOLUTIONS=1)."""
    seed = selfcheck.new_seed(seed)
    g = torch.Generator().manual_seed(seed)
    c = selfcheck.Verdicts(NAME, FILE, HINT, seed)
    with selfcheck.exercise(NAME):
        # course::square and course::square_backward: exercise 1's registration (the solution's when a test passes
        # a wrong answer to this exercise, as build_wrong builds the other exercises).
        square_library.require(NAME, solution=True if ext is not None else None)
        _given_fakes()
        try:
            mine = ext or python_module(NAME)
            mine.register(library.fresh(LIB))
            torch._dynamo.reset()  # compiled code traced with the earlier registrations goes too
        except Exception as e:
            c.fail(f"loading and registering {FILE}", library.first_lines(e, 3))
        for dev in selfcheck.parts(device):

            def draw(shape, dtype, dev=dev):
                return tuple(torch.randn(shape, generator=g).to(device=dev, dtype=dtype) for _ in range(3))

            shapes = selfcheck.shapes(seed, random_cases=3)[2:]
            for dtype in selfcheck.DTYPES:
                for shape in shapes:
                    x, gy, _ = draw(shape, dtype)
                    _first_derivative(c, x, gy)
            x64 = torch.randn(_draw_shape(g), generator=g, dtype=torch.float64).to(dev)
            c.run(
                f"{_where(PART1, x64)}, torch.autograd.gradcheck",
                lambda x64=x64: torch.autograd.gradcheck(torch.ops.course.square, (x64.requires_grad_(),)),
            )
            for dtype in selfcheck.DTYPES:
                for shape in shapes[-4:]:
                    _second_derivative(c, *draw(shape, dtype))
            x64 = torch.randn(_draw_shape(g), generator=g, dtype=torch.float64).to(dev)
            c.run(
                f"{_where(PART2, x64)}, torch.autograd.gradgradcheck",
                lambda x64=x64: torch.autograd.gradgradcheck(torch.ops.course.square, (x64.requires_grad_(),)),
            )
            c.cases += 2
            _only_what_is_needed(c, *draw(_draw_shape(g), torch.float32))
            _saved_properly(c, *draw(_draw_shape(g), torch.float32)[:2])
            for part, op, n_inputs in (
                (PART1, torch.ops.course.square.default, 1),
                (PART2, torch.ops.course.square_backward.default, 2),
            ):
                args = tuple(t.requires_grad_() for t in draw(_draw_shape(g), torch.float32)[:n_inputs])
                c.run(
                    f"{_where(part, args[-1])}, torch.library.opcheck",
                    lambda op=op, args=args: torch.library.opcheck(op, args),
                )
                c.cases += 1
        selfcheck.passed_now(
            NAME,
            f"first and second derivatives match in all {c.cases} cases (gradcheck, gradgradcheck, opcheck pass); "
            "only the gradients needed are computed, and saved inputs are protected.",
        )
    return c.cases


_SETUP = "    ctx.save_for_backward(x)\n"
_BACKWARD = "    (x,) = ctx.saved_tensors\n    return torch.ops.course.square_backward(grad_y, x)\n"
_RETURN2 = "    return for_grad_y, for_x\n"

WRONG = [
    Wrong(
        "backward returns d(x^2)/dx = 2x, forgetting the chain rule's grad_y",
        [(_BACKWARD, "    (x,) = ctx.saved_tensors\n    return 2 * x\n")],
        "cpu",
    ),
    Wrong(
        "setup_context saves the output y instead of the input x: backward computes 2 * y * grad_y",
        [(_SETUP, "    ctx.save_for_backward(output)\n")],
        "cpu",
    ),
    Wrong(
        "x kept as an attribute of ctx, not with save_for_backward: an in-place change of x goes unnoticed",
        [(_SETUP, "    ctx.x = x\n"), (_BACKWARD, "    return torch.ops.course.square_backward(grad_y, ctx.x)\n")],
        "cpu",
    ),
    Wrong(
        "Part 1's backward computes 2 * x * grad_y with torch ops: the right numbers, but never the course's op",
        [(_BACKWARD, "    (x,) = ctx.saved_tensors\n    return 2 * x * grad_y\n")],
        "cpu",
    ),
    Wrong(
        "Part 2's gradients computed with torch ops (2 * x * grad_grad_x, 2 * grad_y * grad_grad_x): no course op, "
        "and a second derivative that autograd builds from aten instead of the kernel",
        [
            (
                "torch.ops.course.square_backward(grad_grad_x, x) if need_grad_y",
                "2 * x * grad_grad_x if need_grad_y",
            ),
            (
                "torch.ops.course.square_backward(grad_grad_x, grad_y) if need_x",
                "2 * grad_y * grad_grad_x if need_x",
            ),
        ],
        "cpu",
    ),
    Wrong(
        "Part 2's gradients swapped: the one for x returned in grad_y's place",
        [(_RETURN2, "    return for_x, for_grad_y\n")],
        "cpu",
    ),
    Wrong(
        "Part 2 ignores ctx.needs_input_grad: both gradients computed every time",
        [
            ("x) if need_grad_y else None\n", "x)\n"),
            ("grad_y) if need_x else None\n", "grad_y)\n"),
        ],
        "cpu",
    ),
    Wrong(
        "Part 2 returns only the gradient of x, the input that seems to matter",
        [(_RETURN2, "    return for_x\n")],
        "cpu",
    ),
    Wrong(
        "Part 2 saves only x, and uses the gradient it is given in place of grad_y",
        [
            ("    ctx.save_for_backward(grad_y, x)\n", "    ctx.save_for_backward(x)\n"),
            ("    grad_y, x = ctx.saved_tensors\n", "    (x,) = ctx.saved_tensors\n    grad_y = grad_grad_x\n"),
        ],
        "cpu",
    ),
]
