"""Every lesson runs top to bottom headless, with exercise solutions, on whatever this machine has
(CPU mode in CI, the GPU in `make test-gpu`). Executed copies go to $COURSE_NB_OUT when it is set."""

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
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


def test_every_lesson_starts_with_the_same_bootstrap_cell():
    firsts = {}
    for path in NOTEBOOKS:
        code = [c for c in json.loads(path.read_text())["cells"] if c["cell_type"] == "code"]
        firsts[path.name] = "".join(code[0]["source"])
    assert len(set(firsts.values())) == 1, "bootstrap cells differ: " + ", ".join(firsts)
    assert "env.bootstrap(" in next(iter(firsts.values()))


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom(path, monkeypatch):
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    monkeypatch.setenv("COURSE_SOLUTIONS", "1")
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(
        nb, timeout=1200, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}}
    )
    try:
        client.execute()
    finally:
        out = os.environ.get("COURSE_NB_OUT")
        if out:
            Path(out).mkdir(parents=True, exist_ok=True)
            nbformat.write(nb, Path(out) / path.name)
