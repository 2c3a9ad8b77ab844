"""Self-check for lesson 04's third exercise: kernels/exercises/test_square_op.py, a pytest file of tests for
course::square. A test is only worth what it catches, so this check runs your file with pytest, in a child
process (helpers/exercises/square_op.py), on the real op, where every test must pass, and then on broken
versions of it (square_op.MUTANTS: a wrong value in one dtype, wrong values for inputs that are not contiguous,
a fake kernel with the wrong shape, no autograd registration, a wrong gradient), each of which some test of
yours must fail. A test that cannot fail (assert True, x * x compared with itself, the op compared with
itself) catches none of them.

course::square is exercise 1's registration (kernels/exercises/square_library.h): until it is done, this check
says so and stops."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import tempfile
import types
from pathlib import Path

from .. import env, selfcheck
from . import EXERCISES, SOLUTIONS, Wrong, apply_wrong, square_library, square_op

OP = "square"
NAME = "test_square_op"
FILE = "kernels/exercises/test_square_op.py"
HINT = (
    "each broken op differs from the real one in one thing a user would meet: which inputs (dtypes, layouts) do "
    "your tests give it, and does each of opcheck, the values and the gradient get checked? Compare with an "
    "independent reference (x * x in float64), never with the op itself; lesson 04's section 6 lists what each "
    f"of opcheck's tests catches. See {FILE}"
)


def _run(path: Path, solution: bool) -> dict[str, tuple[int, str]]:
    """pytest on `path` in a child process, for the real op and each mutant: {mode: (exit code, output)}."""
    repo = str(env.REPO_ROOT)
    child_env = dict(
        os.environ, PYTHONPATH=os.pathsep.join([repo, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    )
    child_env["COURSE_SOLUTIONS"] = "1" if solution else "0"
    p = subprocess.run(
        [sys.executable, "-m", square_op.__name__, str(path)],
        env=child_env,
        cwd=repo,
        capture_output=True,
        text=True,
        timeout=1800,
    )
    runs: dict[str, tuple[int, str]] = {}
    mode, lines = None, []
    for line in p.stdout.splitlines():
        if line.startswith("=== MODE "):
            mode, lines = line.split()[-1], []
        elif line.startswith("=== RC ") and mode:
            runs[mode] = (int(line.split()[-1]), "\n".join(lines))
            mode = None
        elif mode:
            lines.append(line)
    if "real" not in runs:
        runs["real"] = (-1, (p.stdout + "\n" + p.stderr)[-4000:])
    return runs


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(env.REPO_ROOT))
    except ValueError:
        return FILE + " (a wrong answer's copy)"


def _first_failure(output: str) -> str:
    output = re.sub(r"\x1b\[[0-9;]*m", "", output)  # pytest colours its output where the terminal may show it
    m = re.search(r"^FAILED (\S+)", output, re.M)
    return m.group(1).split("::", 1)[-1] if m else "a test"


def _fingerprint(namespace: dict) -> list:
    """What a module's functions do (their code), to tell which text a module was executed from."""

    def code_key(code):
        consts = tuple(code_key(c) if isinstance(c, types.CodeType) else repr(c) for c in code.co_consts)
        return (code.co_name, code.co_code, code.co_names, consts)

    out = []
    for name, value in namespace.items():
        for obj in (value, getattr(value, "__wrapped__", None), getattr(value, "_fixture_function", None)):
            if isinstance(getattr(obj, "__code__", None), types.CodeType):
                out.append((name, code_key(obj.__code__)))
                break
    return sorted(out)


def _source_of(ext) -> str:
    """The text a module passed as `ext` was executed from (python_module keeps none): the solution's or one of
    the committed wrong answers', whichever defines the same functions."""
    texts = [(SOLUTIONS / f"{NAME}.py").read_text()] + [apply_wrong(NAME, w) for w in WRONG]
    want = _fingerprint(vars(ext))
    for text in texts:
        namespace: dict = {}
        exec(compile(text, getattr(ext, "__file__", NAME), "exec"), namespace)
        if _fingerprint(namespace) == want:
            return text
    raise ValueError(f"{NAME}.check(ext=...) takes the solution or a committed wrong answer as a module")


def check(device=None, ext=None, seed=None) -> int:
    """pytest on your test file with the real course::square (all must pass) and each mutant (some test must
    fail). `ext`: a wrong answer's file as a module (a test passes one); default: kernels/exercises/
    test_square_op.py, or the solution with COURSE_SOLUTIONS=1. `device` and `seed` are your tests' to choose."""
    seed = selfcheck.new_seed(seed)
    solution = True if ext is not None else env.solutions_enabled()
    with selfcheck.exercise(NAME):
        square_library.require(NAME, solution=solution)
        with tempfile.TemporaryDirectory(prefix="test-square-op-") as tmp:
            if ext is None:
                path = (SOLUTIONS if solution else EXERCISES) / f"{NAME}.py"
            else:
                path = Path(tmp) / f"{NAME}.py"
                path.write_text(_source_of(ext))
            runs = _run(path, solution)
        rc, output = runs["real"]
        print(f"$ python -m pytest -q {_shown(path)}        (course::square as it is)")
        print(output.strip())
        if rc != 0:
            if "NotImplementedError: exercise" in output:
                message = f"{FILE} is not written yet (it raises NotImplementedError): pytest cannot even import it."
            elif rc == 5:
                message = "pytest found no tests in your file: name each test function test_..."
            else:
                message = (
                    f"your tests fail on the real op (pytest's exit code {rc}, output above): a test must pass on a "
                    "right op, or its failures mean nothing."
                )
            selfcheck.fail(NAME, "pytest on the real course::square", message, hint=HINT, seed=seed)
        print("\nThe same tests on broken versions of course::square:")
        missed = []
        for mode, what in square_op.MUTANTS.items():
            code, out = runs.get(mode, (-1, ""))
            if code == 1:
                print(f"  caught by {_first_failure(out)}: {what}")
            else:
                print(f"  not caught (every test passed): {what}")
                missed.append(what)
        if missed:
            selfcheck.fail(
                NAME,
                "pytest on broken versions of course::square",
                f"your tests pass on {len(missed)} of the {len(square_op.MUTANTS)} broken ops:\n  - "
                + "\n  - ".join(missed)
                + "\nA test that passes on a broken op cannot tell it from a working one.",
                hint=HINT,
                seed=seed,
            )
        selfcheck.passed_now(
            NAME,
            f"your tests pass on course::square and catch all {len(square_op.MUTANTS)} broken versions of it.",
        )
    return 1 + len(square_op.MUTANTS)


_OPCHECK = """@pytest.mark.parametrize("device", DEVICES)
def test_opcheck(square, device):
    for x in sample_inputs(device, torch.float32, requires_grad=True)[:3]:  # the layouts: opcheck is about them
        torch.library.opcheck(torch.ops.course.square.default, (x,))


"""
_WANT = "        want = (x.double() * x.double()).to(dtype)\n"
_SAMPLES = "    xs = [make(1151), make(7, 33).t(), make(5, 8)[:, ::2], make(0, 3)]\n"

WRONG = [
    Wrong("no opcheck test: values and gradient only (a wrong fake kernel goes unseen)", [(_OPCHECK, "")], "cpu"),
    Wrong(
        "the values compared with the op itself: square(x) == square(x) passes whatever the op computes",
        [(_WANT, "        want = square(x)\n")],
        "cpu",
    ),
    Wrong(
        "x * x compared with itself: the op is never called in the value test",
        [
            (
                _WANT,
                "        want = (x.double() * x.double()).to(dtype)\n        got = (x.double() * x.double()).to(dtype)\n",
            ),
            (
                "        torch.testing.assert_close(square(x), want)\n",
                "        torch.testing.assert_close(got, want)\n",
            ),
        ],
        "cpu",
    ),
    Wrong(
        "one contiguous float32 input only: a wrong float16 or a wrong read of a transposed x goes unseen",
        [
            ("DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16]\n", "DTYPES = [torch.float32]\n"),
            (_SAMPLES, "    xs = [make(7, 33)]\n"),
        ],
        "cpu",
    ),
    Wrong(
        "no gradient test: opcheck compares compiled gradients with eager ones, both from the same wrong formula",
        [("    assert torch.autograd.gradcheck(square, (x.t(),))\n", "    assert square(x.t()).requires_grad\n")],
        "cpu",
    ),
    Wrong(
        "a test that cannot fail: assert True",
        [
            (
                "    for x in sample_inputs(device, dtype):\n        want",
                "    assert True\n    return\n    for x in sample_inputs(device, dtype):\n        want",
            ),
            (_OPCHECK, ""),
            ("    assert torch.autograd.gradcheck(square, (x.t(),))\n", "    assert True\n"),
        ],
        "cpu",
    ),
]
