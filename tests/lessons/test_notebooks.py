"""Every lesson runs top to bottom headless on whatever this machine has (CPU mode in CI, the GPU in
`make test-gpu`), twice: with the exercise solutions, where every cell must run, and in learner mode (the
generated stubs: tests/lessons/test_notebooks_learner.py, a file of its own so that a parallel test run can give it
its own worker), where every self-check cell (tagged "selfcheck") must fail with the friendly
AssertionError and every other cell must still run: cells after a self-check that need the answer ask
`selfcheck.passed(...)` and say so. A third run, with the solutions, executes every cell that loads or
registers an op (tagged "registers") twice in a row, as a learner re-running it does: the Jupyter kernel
must survive, and every later cell must still run. Executed copies go to $COURSE_NB_OUT when it is set."""

import copy
import json
import os
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))


def test_there_are_lessons():
    assert NOTEBOOKS


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_committed_without_outputs(path):
    nb = json.loads(path.read_text())
    for cell in nb["cells"]:
        if cell["cell_type"] == "code":
            assert cell.get("outputs") == [] and cell.get("execution_count") is None, (
                f"{path.name} has outputs: run `make strip`"
            )


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_cell_has_a_unique_id(path):
    """nbformat 4.5 cell ids: a cell without one makes nbformat warn ("will become a hard error") on every
    execution; a cell pasted in by hand often lacks it."""
    cells = json.loads(path.read_text())["cells"]
    ids = [cell.get("id") for cell in cells]
    missing = [i for i, cell_id in enumerate(ids) if not cell_id]
    assert not missing, f"{path.name}: cells {missing} have no id"
    assert len(set(ids)) == len(ids), f"{path.name}: cell ids repeat"


def test_every_lesson_starts_with_the_same_bootstrap_cell():
    firsts = {}
    for path in NOTEBOOKS:
        code = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
        firsts[path.name] = "".join(code[0]["source"])
    assert len(set(firsts.values())) == 1, "bootstrap cells differ: " + ", ".join(firsts)
    assert "env.bootstrap(" in next(iter(firsts.values()))


def _selfcheck_cells(nb) -> list[int]:
    return [i for i, c in enumerate(nb["cells"]) if "selfcheck" in c.get("metadata", {}).get("tags", [])]


def _registration_cells(nb) -> list[int]:
    return [i for i, c in enumerate(nb["cells"]) if "registers" in c.get("metadata", {}).get("tags", [])]


# Code that loads a C++ op's library or registers an op (or a kernel, fake kernel, autograd formula) with torch.library.
_LOADS_OR_REGISTERS = re.compile(
    r"loader\.load\(|load_inline\(|(?<![\w.])load\(|torch\.library\.|custom_op\(|triton_op\(|\.register\(\)|"
    r"\.register_fake|\.register_autograd|library\.fresh\(|import_kernel\("
)


def _outside_strings(cell) -> str:
    """A cell's code without its triple-quoted strings: a script that a child process runs (lesson 07) loads
    nothing into the notebook's kernel."""
    return re.sub(r'"""[\s\S]*?"""', "", "".join(cell["source"]))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_cells_that_load_or_register_ops_are_tagged_registers(path):
    nb = json.loads(path.read_text())
    tagged = set(_registration_cells(nb))
    untagged = [
        i
        for i, c in enumerate(nb["cells"])
        if c["cell_type"] == "code" and _LOADS_OR_REGISTERS.search(_outside_strings(c)) and i not in tagged
    ]
    assert not untagged, f"{path.name}: tag cells {untagged} 'registers' (they load or register an op)"


def _is_appendix(path: Path) -> bool:
    """An optional appendix (metadata "course": {"appendix": true}, e.g. 03b's Hopper tuning) has no exercises."""
    return bool(json.loads(path.read_text())["metadata"].get("course", {}).get("appendix"))


def _lesson(path: Path) -> str:
    """A lesson's number: "02" for 02_fused_bias_relu and its second sitting 02b_fused_bias_relu_training."""
    return re.match(r"\d+", path.stem).group(0)


_SITTINGS = [p for p in NOTEBOOKS if not p.stem.startswith("00") and not _is_appendix(p)]


@pytest.mark.parametrize("lesson", sorted({_lesson(p) for p in _SITTINGS}))
def test_every_lesson_has_at_least_two_selfchecks(lesson):
    counts = {p.name: len(_selfcheck_cells(json.loads(p.read_text()))) for p in _SITTINGS if _lesson(p) == lesson}
    assert sum(counts.values()) >= 2, (
        f"lesson {lesson}: tag each exercise's self-check cell with 'selfcheck' ({counts})"
    )


@pytest.mark.parametrize("path", _SITTINGS, ids=lambda p: p.stem)
def test_every_sitting_has_an_exercise(path):
    assert _selfcheck_cells(json.loads(path.read_text())), f"{path.name}: a sitting without an exercise only watches"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_sitting_states_its_time_and_ends_with_questions(path):
    """One sitting each: the first markdown cell says how long it takes ("about 1.5 h", "about 40 min"); the
    lesson ends with the questions it answers, each a <details> the learner opens."""
    cells = json.loads(path.read_text())["cells"]
    first = "".join(next(c for c in cells if c["cell_type"] == "markdown")["source"])
    assert re.search(r"about \d+(\.\d+)? ?(h|hours?|min|minutes)\b", first), f"{path.name}: state the time at the top"
    md = "".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    assert "Questions this lesson answers" in md and "<details>" in md, f"{path.name}: end with its questions"


def _execute(path: Path, monkeypatch, solutions: bool, prepare=None, suffix: str | None = None):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("COURSE_SOLUTIONS", "1" if solutions else "0")
    monkeypatch.setenv("COURSE_NO_WIDGETS", "1")  # helpers/widgets.py: interact cells run once, no widget
    nb = nbformat.read(path, as_version=4)
    if prepare:
        prepare(nb)
    client = nbclient.NotebookClient(
        nb,
        timeout=1200,
        kernel_name="python3",
        allow_errors=not solutions,
        resources={"metadata": {"path": str(path.parent)}},
    )
    try:
        client.execute()
    finally:
        out = os.environ.get("COURSE_NB_OUT")
        if out:
            Path(out).mkdir(parents=True, exist_ok=True)
            name = path.stem + (suffix if suffix is not None else ("" if solutions else "_learner"))
            nbformat.write(nb, Path(out) / (name + ".ipynb"))
    return nb


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom_with_its_registration_cells_run_twice(path, monkeypatch):
    """With the solutions, every cell runs, and every cell that loads or registers an op (tagged "registers")
    runs twice in a row, as a learner re-running it does: a cell that errors on its second run, or a kernel
    that dies (a second TORCH_LIBRARY of a namespace aborts the process), stops the run here (nbclient
    raises), and so does any later cell that the second run broke."""
    nb = _execute(path, monkeypatch, solutions=True, prepare=_registration_cells_twice)
    again = [c for c in nb.cells if "registers-again" in c.metadata.get("tags", [])]
    assert all(c.get("execution_count") for c in again), "a repeated cell did not run"
    assert bool(again) == bool(_registration_cells(json.loads(path.read_text()))), "no cell was repeated"
    assert all(c.get("execution_count") for c in nb.cells if c.cell_type == "code"), "the run stopped early"


def _registration_cells_twice(nb) -> None:
    """Each cell tagged "registers" followed by a copy of itself (tagged "registers-again")."""
    cells = []
    for cell in nb.cells:
        cells.append(cell)
        if "registers" in cell.metadata.get("tags", []):
            again = copy.deepcopy(cell)
            again.id = f"{cell.id}-again"[:64]
            again.metadata["tags"] = [*cell.metadata["tags"], "registers-again"]
            cells.append(again)
    nb.cells = cells


def test_interact_runs_once_with_the_defaults_when_widgets_are_off(monkeypatch, capsys):
    """What the notebook tests rely on: with COURSE_NO_WIDGETS=1 an interact cell calls its function once, with
    the first option of each control, and says so, instead of making widgets nobody can click."""
    from helpers import widgets

    monkeypatch.setenv("COURSE_NO_WIDGETS", "1")
    seen = []
    widgets.interact(lambda n, dtype: seen.append((n, dtype)), n=[4096, 1024], dtype=["float32", "bfloat16"])
    assert seen == [(4096, "float32")]
    assert "COURSE_NO_WIDGETS=1" in capsys.readouterr().out


_SHOW = re.compile(r"loader\.show\(\s*\"([^\"]+)\",\s*\"([^\"]+)\"")


def _shown():
    for path in NOTEBOOKS:
        for cell in json.loads(path.read_text())["cells"]:
            if cell["cell_type"] == "code":
                for file, name in _SHOW.findall("".join(cell["source"])):
                    yield pytest.param(file, name, id=f"{path.stem}:{name}")


@pytest.mark.parametrize("file, name", list(_shown()))
def test_every_loader_show_prints_the_definition_it_names(file, name, capsys):
    """loader.show(file, name) prints the definition of `name`: the line that names it starts a declaration
    (not a comment, a call or a use inside another body: it is not indented, or it opens the body of what it
    names, as a lambda does) and the block closes its brace."""
    from helpers import loader

    loader.show(file, name)
    printed = capsys.readouterr().out.splitlines()[1:]
    code = [line[6:] for line in printed]
    uses = [line for line in code if name in line.split("//")[0] and not line.lstrip().startswith(("*", "/*"))]
    assert uses, f"loader.show({file!r}, {name!r}) prints no code that names it (a comment matched?)"
    named = uses[0]
    opens = named.split("//")[0].rstrip().endswith("{")
    assert named == named.lstrip() or opens, (
        f"loader.show({file!r}, {name!r}) starts at a use, not a definition: {named!r}"
    )
    last = code[-1].split("//")[0].rstrip()
    assert last.endswith(("}", "};", ")", ");")), f"loader.show({file!r}, {name!r}) ends mid-block: {code[-1]!r}"
