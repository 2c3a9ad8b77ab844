"""Lesson 04's pieces: the ops course::square and course::square_backward (exercise 1's registration,
kernels/solutions/square_library.h, compiled by kernels/square/square.library.cpp), the wrong registrations its
self-check must reject without loading them here, the helpers of helpers/library.py (re-run-safe registrations,
explain, kernels, calls, the pytorch#80865 demo), Python exercises (stubs, modules), and the Triton kernel of
kernels/polynomial/polynomial_triton.py (under Triton's interpreter on the CPU; as an op on the GPU)."""

import os
import re
import signal
import subprocess
import sys
import textwrap
import warnings

import pytest
import torch

from helpers import check, exercises, library, loader
from helpers.exercises import square_fake, square_library
from tests.conftest import load_solutions, needs_gpu

DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]


@pytest.fixture(scope="module")
def square_ext():
    return load_solutions("square")


# --------------------------------------------------------------------------------------------------
# course::square and course::square_backward (exercise 1's registration of square.cpp's kernels)
# --------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_square_ops_match_plain_pytorch_on_odd_and_non_contiguous_inputs(square_ext, device, dtype):
    for x in [
        torch.randn(1, device=device),
        torch.randn(1151, device=device),
        torch.randn(33, 64, device=device).t(),
        torch.randn(3, 8, device=device)[:, ::2],
        torch.randn(0, 4, device=device),
        torch.randn((), device=device),
    ]:
        x = x.to(dtype)
        g = torch.randn(x.shape, device=device).to(dtype)
        with check.poisoned():
            y, gx = torch.ops.course.square(x), torch.ops.course.square_backward(g, x)
        xd = x.double()
        check.assert_close(y, (xd * xd).to(dtype), name="square")
        check.assert_close(gx, (2 * xd * g.double()).to(dtype), name="square_backward")
        assert y.is_contiguous() and gx.is_contiguous() and y.shape == x.shape


def test_square_ops_run_the_courses_kernels_whatever_lesson_02s_exercise_holds(monkeypatch, tmp_path):
    """Built with lesson 02b's stub (kernels/exercises/square_glue.h: no glue, no binding) and exercise 1's
    registration, the registered ops still compute x * x: their kernels are the course's, in square.cpp and
    square.cu, not the learner's glue."""
    monkeypatch.setenv("COURSE_SOLUTIONS", "0")
    (tmp_path / "square_library.h").write_text((exercises.SOLUTIONS / "square_library.h").read_text())
    loader.load("square", include_dirs=[tmp_path])
    x = torch.randn(100)
    with check.poisoned():
        check.assert_close(torch.ops.course.square(x), x * x)


def test_square_ops_refuse_bad_arguments_in_the_kernels_words(square_ext):
    with pytest.raises(TypeError, match="x must be float32"):
        torch.ops.course.square(torch.ones(3, dtype=torch.int32))
    with pytest.raises(ValueError, match=re.escape("grad_y must have shape [3], got [4]")):
        torch.ops.course.square_backward(torch.ones(4), torch.ones(3))


def test_the_square_registration_has_only_cpu_and_cuda_kernels(square_ext):
    """The later exercises register the fake kernels and autograd; the C++ registration must not (or there is
    nothing to do)."""
    for name in ("course::square", "course::square_backward"):
        assert torch._C._dispatch_has_kernel_for_dispatch_key(name, "CPU")
        lines = [line for line in torch._C._dispatch_dump(name).splitlines() if "square_library.h" in line]
        keys = {line.split(":")[0].split(" ")[0] for line in lines}  # "CPU (inactive)": an earlier build's
        assert keys and keys - {"debug", "schema"} <= {"CPU", "CUDA"}, keys


@pytest.mark.usefixtures("square_ext")  # course::square defined in this process, as a learner's would be
@pytest.mark.parametrize(
    "wrong",
    square_library.ENDS_THE_PROCESS + [w for w in square_library.WRONG if w.part == "cuda"],
    ids=lambda w: w.why[:40],
)
def test_square_library_rejects_registrations_that_would_end_the_process_without_loading_them(
    wrong, monkeypatch, tmp_path
):
    """Kernels swapped, or a raw m.def, end a process where course::square is defined already (as it is here):
    the self-check builds and loads such an answer in its child process only, and says why. (And the CPU-only
    registration, which a CPU build can only read from the file.)"""
    monkeypatch.setenv("COURSE_SOLUTIONS", "1")
    (tmp_path / "square_library.h").write_text(exercises.apply_wrong("square_library", wrong))
    with pytest.raises(AssertionError, match="square_library: not yet"):
        square_library.check(answer_dir=tmp_path)
    assert torch.ops.course.square(torch.ones(2)).tolist() == [1.0, 1.0]  # this process is alive and unchanged


def test_the_later_exercises_say_exercise_1_comes_first(monkeypatch):
    """With exercise 1's stub (no registration), the fake kernels' check stops at once with the reason."""
    monkeypatch.setenv("COURSE_SOLUTIONS", "0")
    with pytest.raises(
        AssertionError, match=re.escape("square_fake: not yet: exercise 1 (kernels/exercises/square_library.h)")
    ):
        square_fake.check()


# --------------------------------------------------------------------------------------------------
# helpers/library.py
# --------------------------------------------------------------------------------------------------


def test_fresh_replaces_the_registrations_of_the_same_key():
    """A second register_fake for an op raises; made into library.fresh(key) it replaces the first."""
    lib = library.fresh("test define", namespace="lesson04_test")
    lib.define("double(Tensor x) -> Tensor")
    lib.impl("double", lambda x: x * 2, "CompositeExplicitAutograd")
    for dtype in (torch.float32, torch.float64):
        fakes = library.fresh("test fake", namespace="lesson04_test")
        torch.library.register_fake(
            "lesson04_test::double", lambda x, dtype=dtype: x.new_empty(x.shape, dtype=dtype), lib=fakes
        )
        from torch._subclasses.fake_tensor import FakeTensorMode

        with FakeTensorMode():
            assert torch.ops.lesson04_test.double(torch.empty(3)).dtype == dtype
    with pytest.raises(RuntimeError, match="already has an fake impl"):
        torch.library.register_fake("lesson04_test::double", lambda x: x.new_empty(x.shape))
    library.fresh("test fake", namespace="lesson04_test")
    library.fresh("test define", namespace="lesson04_test")  # the op goes with its Library
    with pytest.raises(RuntimeError, match="does not exist"):
        torch._C._dispatch_has_kernel_for_dispatch_key("lesson04_test::double", "CompositeExplicitAutograd")


def test_an_autograd_registered_after_the_op_was_traced_is_the_one_traced(square_ext):
    """PyTorch's Python dispatcher caches which kernel serves a key: fresh() empties that cache, so an Autograd
    kernel registered after opcheck traced the op without one is used by the next trace (and opcheck passes)."""
    fakes = library.fresh("square fake kernels")
    exercises.python_module("square_fake", solution=True).register(fakes)
    torch.library.opcheck(torch.ops.course.square.default, (torch.randn(4, 3),))
    exercises.python_module("square_autograd", solution=True).register(library.fresh("square autograd"))
    torch.library.opcheck(torch.ops.course.square.default, (torch.randn(4, 3, requires_grad=True),))
    library.fresh("square autograd")


def test_explain_counts_graph_breaks_and_try_fullgraph_reports_them(capsys):
    def breaks(x):
        y = x.sin()
        torch._dynamo.graph_break()
        return y * 2

    assert library.explain(breaks, torch.randn(4)) == 1
    assert library.explain(lambda x: x.sin() * 2, torch.randn(4)) == 0
    out = capsys.readouterr().out
    assert "2 graph(s), 1 graph break(s)" in out and "graph 1: sin, mul" in out
    library.try_fullgraph(breaks, torch.randn(4))
    library.try_fullgraph(lambda x: x.sin() * 2, torch.randn(4))
    out = capsys.readouterr().out
    assert "torch.compile(fullgraph=True): Unsupported" in out and "torch.compile(fullgraph=True): compiled" in out


def test_kernels_lists_the_dispatch_table_and_a_missing_fake(capsys, square_ext):
    from helpers.ops import polynomial as poly

    load_solutions("polynomial")
    poly.register()  # its fake kernels
    library.fresh("square fake kernels")  # no fake kernel for square now
    library.kernels("course::polynomial")
    library.kernels("course::square")
    out = capsys.readouterr().out
    assert re.search(r"CPU +kernels/polynomial/polynomial\.cpp:\d+", out)
    assert re.search(r"Autograd\[alias\] +kernels/polynomial/polynomial\.cpp:\d+", out)
    assert out.count("no fake kernel yet") == 1 and out.index("no fake kernel yet") > out.index("course::square(")


def test_calls_counts_an_op_also_inside_backward(square_ext):
    exercises.python_module("square_autograd", solution=True).register(library.fresh("square autograd"))
    x = torch.randn(5, requires_grad=True)
    with library.calls("course::square_backward") as n:
        torch.ops.course.square(x).sum().backward()
    assert n.count == 1
    library.fresh("square autograd")


def test_polynomial_custom_op_is_lesson_04s_python_route_and_can_be_made_again():
    """What 04b's setup cell calls (twice, as a re-run does): the op matches the reference, has its fake
    kernel and autograd (opcheck, gradcheck), and a second call replaces it with a working one."""
    from helpers.ops import polynomial as poly

    ext = load_solutions("polynomial")
    for _ in range(2):
        op = library.polynomial_custom_op(ext)
    c = torch.tensor([1.5, 0.5, -2.0, 0.25], dtype=torch.float64, requires_grad=True)
    x = torch.randn(33, 5, dtype=torch.float64, requires_grad=True)
    check.assert_close(op(x, c), poly.reference(x, c))
    assert check.gradcheck(op, x, c)
    torch.library.opcheck(op, (torch.randn(7, 3, requires_grad=True).t(), c.detach().float()))
    assert (
        str(torch.ops.lesson04.polynomial.default._schema) == "lesson04::polynomial(Tensor x, Tensor coeffs) -> Tensor"
    )


def test_first_lines_keeps_the_type_and_cuts_long_lines():
    text = library.first_lines(ValueError("a" * 300 + "\n\nsecond\nthird"), n=2, width=50)
    assert text == "ValueError: " + "a" * 47 + "...\n    second"


def test_rerun_demo_a_second_torch_library_kills_the_process_and_define_survives():
    """pytorch#80865, the reason for kernels/common/library.h's define(): builds the demo library (about 5 s each of three
    builds, cached), loads it twice in child processes."""
    naive, course = library.rerun_demo()
    assert naive.returncode == -signal.SIGABRT, naive.stderr[-2000:]
    assert "Only a single TORCH_LIBRARY" in naive.stderr and "first build loaded: rerun_demo(0) = 1.0" in naive.stdout
    assert course.returncode == 0, course.stderr[-2000:]
    assert "first build loaded: rerun_demo(0) = 1.0" in course.stdout
    assert "second build loaded: rerun_demo(0) = 2.0" in course.stdout  # the edited kernel is the one called
    assert "died (SIGABRT)" in naive.summary() and "survived" in course.summary()


def test_show_prints_the_real_file_of_a_wrapped_function(capsys):
    from helpers.ops import polynomial as poly

    library.show(poly.register)  # wrapped by helpers.ops.once
    first = capsys.readouterr().out.splitlines()[0]
    assert re.fullmatch(r"# helpers/ops/polynomial\.py, lines \d+-\d+", first)


# --------------------------------------------------------------------------------------------------
# Python exercises
# --------------------------------------------------------------------------------------------------


def test_a_python_stub_raises_not_implemented_and_keeps_the_rest():
    solution = textwrap.dedent(
        """\
        def f(x):
            y = x + 1
            # BEGIN SOLUTION
            # a comment is not a line of the answer
            return y * 2
            # END SOLUTION


        def g():
            return 1
        """
    )
    stub = exercises.make_stub(solution)
    assert "# TODO(exercise): your code here (the solution is 1 lines).\n" in stub
    assert 'raise NotImplementedError("exercise: your code here")' in stub and "return y * 2" not in stub
    namespace = {}
    exec(stub, namespace)
    assert namespace["g"]() == 1
    with pytest.raises(NotImplementedError):
        namespace["f"](1)


def test_python_module_runs_the_file_afresh_and_a_wrong_answer_text_in_its_place():
    a = exercises.python_module("square_fake", solution=True)
    b = exercises.python_module("square_fake", solution=True)
    assert a is not b and callable(a.square_fake)
    wrong = exercises.module("square_fake").WRONG[0]
    mod = exercises.build_wrong("square_fake", wrong)
    assert mod.square_fake(torch.ones(2, 3)).shape == (6,)  # the flat-output wrong answer


# --------------------------------------------------------------------------------------------------
# kernels/polynomial/polynomial_triton.py
# --------------------------------------------------------------------------------------------------

_INTERPRETED = """
import torch
from helpers import check, library
from helpers.ops import polynomial as poly

mod = library.import_kernel("polynomial_triton")
c = torch.tensor([1.5, 0.5, -2.0, 0.25])
for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16):
    for x in (torch.randn(1), torch.randn(1025), torch.randn(3000), torch.randn(40, 33).t(), torch.randn(0, 3)):
        x = x.to(dtype)
        y = mod.launch(x, c, run=lambda kernel: kernel)
        assert y.shape == x.shape and y.dtype == dtype and y.is_contiguous()
        check.assert_close(y, poly.reference(x.double(), c.double()).to(dtype), name=f"triton {dtype} {tuple(x.shape)}")
print("interpreted: ok")
"""


def test_the_triton_kernel_matches_the_reference_under_the_interpreter():
    """TRITON_INTERPRET=1 runs the kernel on the CPU (in a child process: the variable is read at import)."""
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(loader.KERNELS.parent))
    p = subprocess.run([sys.executable, "-c", _INTERPRETED], env=env, capture_output=True, text=True, timeout=600)
    assert p.returncode == 0 and "interpreted: ok" in p.stdout, p.stdout[-2000:] + p.stderr[-4000:]


@needs_gpu
def test_the_triton_op_matches_the_reference_passes_opcheck_and_compiles_without_a_break():
    from helpers.ops import polynomial as poly

    mod = library.import_kernel("polynomial_triton")
    c = torch.tensor([1.5, 0.5, -2.0, 0.25], device="cuda")
    for dtype in DTYPES:
        for x in (
            torch.randn(1, device="cuda"),
            torch.randn(65539, device="cuda"),
            torch.randn(40, 33, device="cuda").t(),
        ):
            x = x.to(dtype)
            with check.poisoned():
                y = mod.polynomial(x, c)
            check.assert_close(y, poly.reference(x.double(), c.double()).to(dtype))
            torch.library.opcheck(mod.polynomial, (x, c))
    assert library.explain(lambda t: mod.polynomial(t.sin(), c) * 2, torch.randn(100, device="cuda")) == 0


@needs_gpu
def test_the_triton_op_indexes_past_2_to_the_31():
    free, _ = torch.cuda.mem_get_info()
    n = (1 << 31) + 4099
    if 2 * n * 2 > 0.8 * free:
        pytest.skip("needs about 9 GiB of free GPU memory")
    mod = library.import_kernel("polynomial_triton")
    c = torch.tensor([1.5, 0.5, -2.0, 0.25], device="cuda")
    x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y = mod.polynomial(x, c)
    tail = x[-5000:].double()
    want = (((1.5 * tail + 0.5) * tail - 2.0) * tail + 0.25).to(torch.bfloat16)
    check.assert_close(y[-5000:], want)


@needs_gpu
def test_square_with_the_exercises_registrations_captures_in_a_cuda_graph(square_ext):
    exercises.python_module("square_fake", solution=True).register(library.fresh("square fake kernels"))
    exercises.python_module("square_autograd", solution=True).register(library.fresh("square autograd"))
    x = torch.randn(1 << 20, device="cuda", requires_grad=True)
    g = torch.randn_like(x)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        replay, grad = library.captured(lambda: torch.autograd.grad(torch.ops.course.square(x), x, g)[0])
    assert not [w for w in caught if "autograd kernel was not registered" in str(w.message)]
    with torch.no_grad():
        x.copy_(torch.randn_like(x))
    replay()
    check.assert_close(grad, 2 * x.detach() * g)
    library.fresh("square autograd")
