"""Self-check for lesson 06's second exercise: kernels/exercises/export_model.py, a model that uses a course op,
exported with torch.export, saved, and run where only the wheel is installed.

It calls your export_and_save on a fresh PolynomialMLP (Linear -> torch.ops.course.polynomial -> Dropout ->
Linear, in training mode, as training leaves a model; the op comes from the course's build in this process), then
builds the course's polynomial wheel (CPU only; its build folder is shared with the lesson's, so a second build
relinks and zips), installs it into an empty folder, and in a new Python process that sees only that folder
imports course_ops, loads your file with torch.export.load and runs it on batches of several sizes, drawn afresh
each run. Its outputs must match the model's in inference mode, and its graph must still call
course.polynomial. The exported program runs on the CPU on every machine: what is checked is the file."""

from __future__ import annotations

import copy
import functools
import json
import random
import tempfile
from pathlib import Path

import torch

from .. import env, selfcheck, wheel
from . import Wrong, python_module

OP = "polynomial"
NAME = "export_model"
FILE = "kernels/exercises/export_model.py"
HINT = (
    "torch.export.export takes the example inputs as a tuple, and its dynamic_shapes argument says which "
    "dimension of which input may vary (torch.export.Dim); torch.export.save writes what torch.export.load "
    "reads; the graph records dropout as it runs in the mode the model is in. See " + FILE
)


class PolynomialMLP(torch.nn.Module):
    """A small model whose activation is a course op: Linear -> course::polynomial -> Dropout -> Linear."""

    def __init__(self, features: int = 16, hidden: int = 32, out: int = 4, p: float = 0.25):
        super().__init__()
        self.fc1 = torch.nn.Linear(features, hidden)
        self.coeffs = torch.nn.Parameter(torch.tensor([0.0, 1.0, 0.5, 0.1]))  # the activation's coefficients
        self.dropout = torch.nn.Dropout(p)
        self.fc2 = torch.nn.Linear(hidden, out)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fc2(self.dropout(torch.ops.course.polynomial(self.fc1(x), self.coeffs)))


# The fresh process: argv = program file, inputs file, outputs file. Prints one JSON line.
_FRESH = r"""
import json, sys
out = {"stage": "import course_ops"}
try:
    import torch
    import course_ops  # registers torch.ops.course.*: the program names the op, the wheel defines it
    out["stage"] = "torch.export.load"
    program = torch.export.load(sys.argv[1])
    out["course_calls"] = sorted(
        str(n.target) for n in program.graph.nodes if n.op == "call_function" and str(n.target).startswith("course.")
    )
    run = program.module()
    results = []
    for x in torch.load(sys.argv[2]):
        out["stage"] = f"running it on a batch of {x.shape[0]}"
        with torch.no_grad():
            results.append(run(x))
    torch.save(results, sys.argv[3])
    out["stage"] = "done"
except BaseException as e:
    out["error"] = f"{type(e).__name__}: {e}"
print(json.dumps(out))
"""


def installed_wheel() -> Path:
    """The course's polynomial as a CPU-only wheel, installed into an empty folder: built once per process while
    the op's sources are unchanged (a re-run of the check goes straight to your file)."""
    sources = tuple((str(p), p.stat().st_mtime_ns) for p in sorted((env.KERNELS / "polynomial").iterdir()))
    return _installed(sources)


@functools.cache
def _installed(sources: tuple) -> Path:
    folder = Path(tempfile.mkdtemp(prefix="course-06-polynomial-wheel-"))
    built = wheel.build(folder / "dist", ops=["polynomial"], cuda=False)
    return wheel.install(built.path, folder / "site")


def check(device=None, ext=None, seed=None) -> int:
    """Your export_and_save (kernels/exercises/export_model.py, or `ext`, a module with it): its file loaded and run
    in a fresh process with only the wheel. `device` is not used: the program runs on the CPU."""
    from ..ops import polynomial

    seed = selfcheck.new_seed(seed)
    mod = ext or python_module(NAME)
    polynomial.register()  # course::polynomial and its fake kernel in this process, for export
    rng = random.Random(seed)
    torch.manual_seed(seed)
    model = PolynomialMLP().train()
    reference = copy.deepcopy(model).eval()
    example = torch.randn(rng.randint(4, 12), 16)
    batches = [2, example.shape[0], rng.randint(13, 40), rng.randint(41, 300)]
    inputs = [torch.randn(b, 16) for b in batches]

    def fail(where: str, message: str) -> None:
        selfcheck.fail(NAME, where, message, hint=HINT, seed=seed)

    with selfcheck.exercise(NAME), tempfile.TemporaryDirectory(prefix="course-06-export-") as tmp:
        tmp = Path(tmp)
        path = tmp / "model.pt2"
        try:
            mod.export_and_save(model, example, path)
        except NotImplementedError:
            fail("your export_and_save", f"export_and_save in {FILE} is not written yet")
        except Exception as e:  # whatever it raises is a verdict, not a crash
            fail("your export_and_save", f"raised {type(e).__name__}: {str(e).strip().splitlines()[0]}")
        if not path.is_file():
            fail("your export_and_save", f"nothing was saved at {path.name}")
        torch.save(inputs, tmp / "inputs.pt")
        site = installed_wheel()
        out = wheel.run_fresh(site, _FRESH, path, tmp / "inputs.pt", tmp / "outputs.pt")
        report = json.loads(out.strip().splitlines()[-1])
        if "error" in report:
            error = "\n  ".join(report["error"].strip().splitlines()[:4])
            fail(f"a fresh process with only the wheel ({report['stage']})", error)
        if "course.polynomial.default" not in report["course_calls"]:
            fail(
                "the exported graph",
                f"it does not call torch.ops.course.polynomial (its course ops: {report['course_calls'] or 'none'})",
            )
        got = torch.load(tmp / "outputs.pt")
        with torch.no_grad():
            for x, y in zip(inputs, got):
                try:
                    torch.testing.assert_close(y, reference(x), rtol=1e-4, atol=1e-5)
                except AssertionError as e:
                    fail(
                        f"the loaded program on a batch of {x.shape[0]}",
                        f"its output differs from the model's in inference mode:\n{e}",
                    )
    selfcheck.passed_now(
        NAME,
        f"the saved program runs in a fresh process with only the wheel, on batches of {batches}, and matches "
        "the model in inference mode",
    )
    return len(batches)


_EXPORT = "    program = torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim.DYNAMIC},))\n"
_SAVE = "    torch.export.save(program, path)\n"

WRONG = [
    Wrong(
        "no dynamic shape: the program is specialized to the example's batch size and refuses any other",
        [(_EXPORT, "    program = torch.export.export(model, (x,))\n")],
        "cpu",
    ),
    Wrong(
        "exported in training mode: the graph keeps dropout, so the deployed model drops activations at random",
        [("    model.eval()  # dropout off: the exported graph records the mode the model is in\n", "")],
        "cpu",
    ),
    Wrong(
        "the batch bounded by the example's size: a larger batch is refused",
        [(_EXPORT, _EXPORT.replace("torch.export.Dim.DYNAMIC", 'torch.export.Dim("batch", max=16)'))],
        "cpu",
    ),
    Wrong(
        "torch.save of the model: a pickle that needs the model's class, which the deployed process does not have",
        [(_SAVE, "    torch.save(model, path)\n")],
        "cpu",
    ),
    Wrong(
        "torch.save of the program: a pickle, not the archive torch.export.load reads",
        [(_SAVE, "    torch.save(program, path)\n")],
        "cpu",
    ),
]
