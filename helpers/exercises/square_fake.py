"""Self-check for lesson 04's second exercise: kernels/exercises/square_fake.py, the fake kernels of
course::square and course::square_backward (exercise 1, kernels/exercises/square_library.h, registers both ops
with CPU and CUDA kernels: until it does, this check says so and stops).

It registers your functions (your file's `register(lib)`), then, on inputs drawn afresh each run, runs each op
on fake tensors, as torch.compile does, and compares what your fake kernel says with what the real kernel
returns: shape, dtype, device and strides. Then the rules, each with its own explanation: inputs that are not
contiguous (x, grad_y or both), a grad_y whose shape only broadcasts against x (the kernel refuses it, so must
the fake), CUDA inputs (fake CUDA tensors, so on any machine), a new tensor rather than an input, and no
computation on the inputs. Last, torch.library.opcheck on both ops."""

from __future__ import annotations

import torch
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

from .. import library, selfcheck
from . import Wrong, python_module, square_library

OP = "square"
NAME = "square_fake"
LIB = "square fake kernels"  # the library.fresh key of the ops' fake kernels (exercise 2's check uses it too)
FILE = "kernels/exercises/square_fake.py"
HINT = (
    "the C++ kernels allocate their output with at::empty_like(x.contiguous()): a new contiguous tensor of x's "
    "shape, dtype and device. Which of torch.empty_like(x), x.new_empty(...), torch.empty(...) gives exactly that "
    "for every x? And what the kernel refuses (backward's check_like: grad_y of x's shape), the fake refuses too: "
    f"torch._check states a condition on fake tensors. See {FILE}"
)

# aten ops that allocate or only look at metadata: a fake kernel may call these on its inputs.
_METADATA_OPS = {
    "empty_like",
    "new_empty",
    "new_empty_strided",
    "new_zeros",
    "new_ones",
    "new_full",
    "zeros_like",
    "ones_like",
    "full_like",
    "detach",
    "alias",
    "view",
    "_unsafe_view",
    "reshape",
    "as_strided",
    "expand",
    "t",
    "transpose",
    "permute",
    "unsqueeze",
    "squeeze",
    "sym_size",
    "sym_stride",
    "sym_numel",
    "sym_storage_offset",
    "is_contiguous",
    "is_non_overlapping_and_dense",
}


class _Reads(TorchDispatchMode):
    """Records each op, other than allocation and metadata, that receives one of `inputs`."""

    def __init__(self, inputs):
        super().__init__()
        self.ids = {id(t) for t in inputs}
        self.reads: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        name = func._schema.name.split("::")[-1]
        if name not in _METADATA_OPS and any(id(a) in self.ids for a in pytree.tree_leaves((args, kwargs))):
            self.reads.append(func._schema.name)
        return func(*args, **(kwargs or {}))


def _significant_strides(t: torch.Tensor):
    """The strides that matter: those of dimensions of size > 1 (None for an empty tensor)."""
    if t.numel() == 0:
        return None
    return tuple(s if n > 1 else None for n, s in zip(t.shape, t.stride()))


def _looks(t: torch.Tensor) -> str:
    return f"shape {list(t.shape)}, {str(t.dtype)[6:]}, on {t.device}, strides {list(t.stride())}"


def _differences(fake: torch.Tensor, real: torch.Tensor, real_device: torch.device) -> list[str]:
    out = []
    if tuple(fake.shape) != tuple(real.shape):
        out.append(f"shape {list(fake.shape)} where the kernel returns {list(real.shape)}")
    if fake.dtype != real.dtype:
        out.append(f"dtype {str(fake.dtype)[6:]} where the kernel returns {str(real.dtype)[6:]}")
    if fake.device != real_device:
        out.append(f"device {fake.device} where the kernel returns {real_device}")
    if not out and _significant_strides(fake) != _significant_strides(real):
        out.append(
            f"strides {list(fake.stride())} where the kernel returns {list(real.stride())} (a contiguous tensor): "
            "torch.compile's generated code would read the kernel's output with the wrong layout (Inductor checks "
            "this at run time and stops with an AssertionError)"
        )
    return out


def _ops():
    return {
        "course::square": torch.ops.course.square.default,
        "course::square_backward": torch.ops.course.square_backward.default,
    }


def _args(qualname: str, x: torch.Tensor, grad_y: torch.Tensor) -> tuple:
    return (x,) if qualname == "course::square" else (grad_y, x)


def _function(qualname: str) -> str:
    return "square_fake" if qualname == "course::square" else "square_backward_fake"


def _describe(x: torch.Tensor) -> str:
    layout = "" if x.is_contiguous() else f", strides {list(x.stride())}"
    return f"x of shape {list(x.shape)}, {str(x.dtype)[6:]}{layout}"


class _Check(selfcheck.Verdicts):
    def __init__(self, mine, seed: int):
        super().__init__(NAME, FILE, HINT, seed)
        self.mine = mine

    def run_fake(self, qualname: str, where: str, fn, why: str = ""):
        try:
            return fn()
        except Exception as e:  # whatever the learner's code raises is a verdict, not a crash
            if isinstance(e, NotImplementedError) and "exercise" in str(e):
                self.fail(where, f"{_function(qualname)} in {FILE} is not written yet (it raises NotImplementedError)")
            self.fail(
                where,
                f"the fake kernel of {qualname} ({_function(qualname)}) raised {library.first_lines(e, 3)}\n"
                "Fake tensors have no values: a fake kernel can only use their shape, dtype, strides and device "
                "(no .item(), .tolist(), data_ptr(), no call of the real kernel).",
                why,
            )

    def compare(self, qualname: str, args: tuple, why: str = "") -> None:
        """The op on fake copies of `args` (your fake kernel) against the op on `args` (the C++ kernel)."""
        op = _ops()[qualname]
        real = op(*args)
        where = f"{qualname}, {_describe(args[-1])} on {args[-1].device}"

        def fake_run():
            with FakeTensorMode() as mode:
                fakes = [mode.from_tensor(a) for a in args]
                return op(*fakes)

        fake = self.run_fake(qualname, where, fake_run, why)
        if not isinstance(fake, torch.Tensor):
            self.fail(where, f"the fake kernel returned {type(fake).__name__}, not a tensor", why)
        wrong = _differences(fake, real, real.device)
        if wrong:
            self.fail(
                where, f"your fake kernel says {'; '.join(wrong)}.\n  fake: {_looks(fake)}\n  real: {_looks(real)}", why
            )
        self.cases += 1

    def refuses_broadcast(self, g: torch.Generator, device) -> None:
        """grad_y of a shape that broadcasts against x's: the kernel refuses it, so must the fake (or a compiled
        program traces on and fails, or computes with a shape the op does not take, only when it runs)."""
        why = (
            "a grad_y whose shape broadcasts against x's but is not x's: square_backward's kernel refuses it "
            "(check_like), and a fake kernel must refuse what the kernel refuses, or torch.compile accepts a "
            "program that fails when it runs"
        )
        m, n = _draw(g, 2, 30), _draw(g, 2, 30)
        x = torch.randn(m, n, generator=g).to(device)
        for shape in ((1, n), (n,), (m, 1)):
            grad_y = torch.randn(shape, generator=g).to(device)
            where = f"course::square_backward, grad_y of shape {list(shape)} with x of shape {[m, n]} on {device}"
            try:
                _ops()["course::square_backward"](grad_y, x)
            except Exception as e:
                refused = library.first_lines(e, 1)
            else:
                raise RuntimeError(f"the kernel accepted {where}: the check expects it to refuse")
            with FakeTensorMode() as mode:
                fakes = [mode.from_tensor(grad_y), mode.from_tensor(x)]
                try:
                    out = _ops()["course::square_backward"](*fakes)
                except Exception as e:
                    if isinstance(e, NotImplementedError) and "exercise" in str(e):
                        self.fail(where, f"square_backward_fake in {FILE} is not written yet", why)
                    self.cases += 1
                    continue
            self.fail(
                where,
                f"your fake kernel returned {_looks(out)} where the kernel refuses ({refused}).",
                why,
            )

    def on_fake_cuda(self, qualname: str, shape, dtype) -> None:
        """A fake CUDA input (no GPU needed): the output must be a contiguous CUDA tensor like x."""
        why = "a CUDA input (a fake one, so this runs on any machine): the kernel's output is on x's device"
        where = f"{qualname}, x of shape {list(shape)}, {str(dtype)[6:]} on cuda (fake)"

        def fake_run():
            with FakeTensorMode():
                x = torch.empty(shape, dtype=dtype, device="cuda")
                return _ops()[qualname](*_args(qualname, x, torch.empty_like(x))), x

        fake, x = self.run_fake(qualname, where, fake_run, why)
        expected = torch.empty(shape, dtype=dtype, device="meta")
        wrong = _differences(fake, expected, x.device)
        if wrong:
            self.fail(where, f"your fake kernel says {'; '.join(wrong)}.", why)
        self.cases += 1

    def computes_nothing(self, qualname: str, args: tuple) -> None:
        """Your function called directly on fake tensors, watching what it does with its inputs."""
        why = (
            "that a fake kernel computes nothing: it runs while torch.compile traces, on tensors without values, "
            "and only describes the output (allocate it; do not compute it)"
        )
        where = f"{qualname}, {_describe(args[-1])}"
        fn = getattr(self.mine, _function(qualname))

        def fake_run():
            with FakeTensorMode() as mode:
                fakes = [mode.from_tensor(a) for a in args]
                with _Reads(fakes) as reads:
                    out = fn(*fakes)
                return out, fakes, reads.reads

        out, fakes, reads = self.run_fake(qualname, where, fake_run, why)
        if reads:
            self.fail(where, f"{_function(qualname)} ran {', '.join(dict.fromkeys(reads))} on its inputs.", why)
        if any(out is a or getattr(out, "_base", None) is a for a in fakes):
            self.fail(
                where,
                f"{_function(qualname)} returned one of its inputs (or a view of it): the kernel returns a new tensor.",
                "that the output is a new tensor, as the kernel's is (a fake that returns an input tells the compiler "
                "the two share memory)",
            )
        self.cases += 1


def _draw(g: torch.Generator, lo: int, hi: int) -> int:
    return int(torch.randint(lo, hi, (1,), generator=g))


def _not_contiguous(g: torch.Generator, device, dtype) -> list[torch.Tensor]:
    """A transposed matrix, every other column, a channels_last image and a broadcast row, of drawn sizes."""
    m, n = _draw(g, 2, 60), _draw(g, 2, 60)
    base = torch.randn(m, 2 * n, generator=g).to(device=device, dtype=dtype)
    image = torch.randn(_draw(g, 1, 4), _draw(g, 2, 9), _draw(g, 2, 9), _draw(g, 2, 9), generator=g)
    return [
        base.t(),
        base[:, ::2],
        image.to(device=device, dtype=dtype).contiguous(memory_format=torch.channels_last),
        torch.randn(n, generator=g).to(device=device, dtype=dtype).expand(m, n),
    ]


def check(device=None, ext=None, seed=None) -> int:
    """Your fake kernels against the C++ kernels' outputs (shape, dtype, device, strides) on the CPU, and in CUDA
    mode on the GPU, then the rules and torch.library.opcheck. `ext`: your file as a module (default: executed
    afresh from kernels/exercises/square_fake.py, or the solution with COURSE_SOLUTIONS=1)."""
    seed = selfcheck.new_seed(seed)
    g = torch.Generator().manual_seed(seed)
    with selfcheck.exercise(NAME):
        # course::square and course::square_backward: exercise 1's registration (the solution's when a test passes
        # a wrong answer to this exercise, as build_wrong builds the other exercises).
        square_library.require(NAME, solution=True if ext is not None else None)
        checker = _Check(None, seed)
        try:
            checker.mine = ext or python_module(NAME)
            checker.mine.register(library.fresh(LIB))
            torch._dynamo.reset()  # compiled code traced with the earlier registrations goes too
        except Exception as e:
            checker.fail(f"loading and registering {FILE}", library.first_lines(e, 3))
        for dev in selfcheck.parts(device):
            for dtype in selfcheck.DTYPES:
                for shape in selfcheck.shapes(seed, random_cases=3) + [(), (0, 3)]:
                    x = torch.randn(shape, generator=g).to(device=dev, dtype=dtype)
                    grad_y = torch.randn(shape, generator=g).to(device=dev, dtype=dtype)
                    for qualname in _ops():
                        checker.compare(qualname, _args(qualname, x, grad_y))
            why = (
                "inputs that are not contiguous (transposed, every other column, channels_last, broadcast): the "
                "kernel makes x contiguous first, so its output is contiguous whatever x's strides"
            )
            for dtype in (torch.float32, torch.bfloat16):
                for x in _not_contiguous(g, dev, dtype):
                    grad_y = torch.randn(x.shape, generator=g).to(device=dev, dtype=dtype)
                    for qualname in _ops():
                        checker.compare(qualname, _args(qualname, x, grad_y), why)
                    # grad_y not contiguous too (randn_like keeps a dense layout): backward's output is still
                    # contiguous, whichever input a fake takes its layout from.
                    checker.compare("course::square_backward", (torch.randn_like(x), x.contiguous()), why)
                    checker.compare("course::square_backward", (torch.randn_like(x), x), why)
            checker.refuses_broadcast(g, dev)
        for qualname in _ops():
            checker.on_fake_cuda(qualname, (_draw(g, 1, 50), _draw(g, 1, 50)), torch.bfloat16)
            for x in _not_contiguous(g, "cpu", torch.float32)[:2]:
                checker.computes_nothing(qualname, _args(qualname, x, torch.randn(x.shape, generator=g)))
        for dev in selfcheck.parts(device):
            for qualname, op in _ops().items():
                x = torch.randn(_draw(g, 2, 40), _draw(g, 2, 40), generator=g).to(dev)
                samples = [_args(qualname, x, torch.randn_like(x)), _args(qualname, x.t(), torch.randn_like(x.t()))]
                for args in samples:
                    try:
                        torch.library.opcheck(op, args)
                    except Exception as e:
                        checker.fail(
                            f"torch.library.opcheck({qualname}), {_describe(args[-1])} on {dev}",
                            library.first_lines(e, 4),
                        )
                    checker.cases += 1
        selfcheck.passed_now(
            NAME,
            f"your fake kernels describe both ops' outputs in all {checker.cases} cases (shape, dtype, device and "
            "strides; new tensors; nothing computed), and opcheck passes.",
        )
    return checker.cases


_FWD = "    return x.new_empty(x.shape)  # the kernel's output is contiguous, whatever x's strides\n"
_SHAPE_CHECK = (
    '    torch._check(grad_y.shape == x.shape, lambda: f"grad_y must have shape {list(x.shape)}, got '
    '{list(grad_y.shape)}")\n'
)
_BWD = "    return x.new_empty(x.shape)\n    # END SOLUTION\n\n\ndef register"

WRONG = [
    Wrong(
        "a flat output: the kernel loops over x.numel() elements, but returns x's shape",
        [(_FWD, "    return x.new_empty(x.numel())\n")],
        "cpu",
    ),
    Wrong(
        "float32, the dtype the kernel computes in, instead of the dtype it returns (x's)",
        [(_FWD, "    return x.new_empty(x.shape, dtype=torch.float32)\n")],
        "cpu",
    ),
    Wrong(
        "torch.empty_like(x): it keeps a transposed x's strides, but the kernel returns a contiguous tensor",
        [(_FWD, "    return torch.empty_like(x)\n")],
        "cpu",
    ),
    Wrong(
        "torch.empty(x.shape, dtype=x.dtype): on the default device (the CPU), not x's",
        [(_FWD, "    return torch.empty(x.shape, dtype=x.dtype)\n")],
        "cpu",
    ),
    Wrong(
        "computes the answer (x * x) instead of describing it",
        [(_FWD, "    return x * x\n")],
        "cpu",
    ),
    Wrong(
        "the backward's fake returns grad_y itself: the kernel returns a new tensor",
        [(_BWD, _BWD.replace("return x.new_empty(x.shape)", "return grad_y"))],
        "cpu",
    ),
    Wrong(
        "the backward's fake contiguous and of x's shape, but in float32 (the math dtype)",
        [
            (
                _BWD,
                _BWD.replace(
                    "return x.new_empty(x.shape)", "return torch.empty(x.shape, dtype=torch.float32, device=x.device)"
                ),
            )
        ],
        "cpu",
    ),
    Wrong(
        "the backward's fake takes grad_y's layout (torch.empty_like(grad_y)): a transposed grad_y gives transposed "
        "strides, the kernel a contiguous tensor",
        [(_BWD, _BWD.replace("return x.new_empty(x.shape)", "return torch.empty_like(grad_y)"))],
        "cpu",
    ),
    Wrong(
        "the backward's fake checks nothing: it accepts a grad_y that only broadcasts against x, which the kernel "
        "refuses",
        [(_SHAPE_CHECK, "")],
        "cpu",
    ),
    Wrong(
        "the backward's fake returns the shape grad_y and x broadcast to, instead of refusing what is not x's shape",
        [
            (_SHAPE_CHECK, ""),
            (
                _BWD,
                _BWD.replace(
                    "return x.new_empty(x.shape)", "return x.new_empty(torch.broadcast_shapes(grad_y.shape, x.shape))"
                ),
            ),
        ],
        "cpu",
    ),
    Wrong(
        "the fake calls the op itself on a tensor of x's shape, to learn what it returns (on fake tensors that is "
        "the fake again)",
        [(_FWD, "    return torch.ops.course.square(torch.empty(x.shape, dtype=x.dtype, device=x.device))\n")],
        "cpu",
    ),
]
