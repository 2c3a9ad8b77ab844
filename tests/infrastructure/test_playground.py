"""The kernel playground (helpers/widgets.py): its core times real kernels against native and torch.compile in CPU
mode, and its widget reacts to a control changed through the widget's model, as the browser changes it, with
ipywidgets 8 (this environment) and 7.7 (Colab's, installed on first use into the build cache and imported by a
child process). tests/browser/ drives the same widget in JupyterLab."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from helpers import env, selfcheck, widgets

ROOT = Path(__file__).resolve().parents[2]
COLAB_IPYWIDGETS = "7.7.1"  # what Colab runs


def test_playground_times_the_chosen_version_against_native_and_torch_compile(monkeypatch, solutions):
    monkeypatch.setenv("COURSE_NO_WIDGETS", "1")
    pg = widgets.playground("polynomial", device="cpu", rows=[16], cols=[256])
    assert pg.widget is None and pg.updates == 1
    assert [r["impl"] for r in pg.rows] == ["ours v2", "native", "torch.compile"]
    assert all(r["ms"] > 0 and r["gbps"] > 0 and r["pct_copy"] > 0 for r in pg.rows)
    assert all(r["nbytes"] == 2 * 16 * 256 * 4 for r in pg.rows)  # reads x, writes y
    assert "x native" in pg.text and "x torch.compile" in pg.text
    assert "CPU mode: wall time" in pg.text and "need a GPU" in pg.text, "CPU mode says what it times and what not"
    assert [p.get_height() for p in pg.figure.axes[0].patches] == pytest.approx([r["pct_copy"] for r in pg.rows])

    native = pg.rows[1]
    pg.update(version=widgets.EVERY_VERSION)  # the solutions' v1 joins; native and compile are not timed again
    assert [r["impl"] for r in pg.rows] == ["ours v2", "ours v1 (yours)", "native", "torch.compile"]
    assert pg.rows[2] is native
    assert len(pg.figure.axes[0].patches) == 4


def test_playground_says_which_version_waits_for_its_exercise(monkeypatch):
    monkeypatch.setenv("COURSE_NO_WIDGETS", "1")
    monkeypatch.setenv("COURSE_SOLUTIONS", "0")
    monkeypatch.setattr(selfcheck, "_results", {})  # no self-check passed in this process
    pg = widgets.Playground(["polynomial"], device="cpu")
    assert pg.choices["version"] == ["ours v2"]
    assert any("'polynomial_forward' passes" in note for note in pg.notes())


def test_playground_refuses_unknown_ops_and_shapes_too_large(monkeypatch):
    monkeypatch.setenv("COURSE_NO_WIDGETS", "1")
    monkeypatch.setattr(widgets, "OPS", dict(widgets.OPS))
    with pytest.raises(ValueError, match="playground ops are"):
        widgets.Playground(["no such op"])
    pg = widgets.playground(_test_ops()[0], device="cpu", rows=[1 << 20], cols=[1 << 10])
    assert pg.rows == [] and pg.figure is None
    assert "pick fewer rows" in pg.text


# Two ops of plain torch calls, so that the widget's own logic (controls, a new op's versions, redraws) is tested
# in seconds with either ipywidgets; native is left out (native_on_cpu=False): no torch.compile to wait for.
def _test_ops() -> list[str]:
    def setup(rows, cols, dtype, device):
        return {"x": torch.randn(rows, cols, dtype=dtype, device=device)}

    ops = [
        widgets.Op(
            "scale (test)",
            2,
            setup,
            lambda t: t["x"] * 2,
            lambda t: {"mul": lambda: t["x"].mul(2), "add": lambda: t["x"].add(t["x"])},
            cpu="torch's own kernels",
            native_on_cpu=False,
        ),
        widgets.Op(
            "negate (test)",
            2,
            setup,
            lambda t: -t["x"],
            lambda t: {"neg": lambda: t["x"].neg()},
            cpu="torch's own kernels",
            native_on_cpu=False,
        ),
    ]
    for op in ops:
        widgets.OPS[op.name] = op
    return [op.name for op in ops]


def _from_the_front_end(control, index: int) -> None:
    """What a browser sends when the learner picks option `index` of a dropdown: an update of the model's state
    (a Dropdown syncs its index, in ipywidgets 7.7 and 8)."""
    control._handle_msg(
        {"content": {"data": {"method": "update", "state": {"index": index}, "buffer_paths": []}}, "buffers": []}
    )


def drive_widget() -> dict:
    """Build the playground's widget on the test ops, change each kind of control through the widget model, and
    return what happened (run in this process and in a child with ipywidgets 7.7)."""
    import ipywidgets

    os.environ.pop("COURSE_NO_WIDGETS", None)
    pg = widgets.playground(*_test_ops(), device="cpu", rows=[16, 64], cols=[128, 256])
    seen = {"ipywidgets": ipywidgets.__version__, "class": list(pg.widget._dom_classes)}
    c = pg.controls
    seen["controls"] = {name: list(control.options) for name, control in c.items()}
    texts, heights = [pg.text], [[p.get_height() for p in pg.figure.axes[0].patches]]

    _from_the_front_end(c["version"], c["version"].options.index(widgets.EVERY_VERSION))
    seen["every version"] = [r["impl"] for r in pg.rows]
    _from_the_front_end(c["rows"], 1)
    seen["rows"] = pg.settings["rows"], pg.rows[0]["shape"]
    texts.append(pg.text)
    heights.append([p.get_height() for p in pg.figure.axes[0].patches])
    _from_the_front_end(c["op"], 1)  # a new op: its versions in the version control, its first one timed
    seen["op"] = pg.settings["op"], list(c["version"].options), c["version"].value, [r["impl"] for r in pg.rows]
    texts.append(pg.text)
    seen["updates"] = pg.updates
    seen["texts differ"] = len(set(texts)) == len(texts)
    seen["bars"] = [len(h) for h in heights]
    return seen


def _check_driven(seen: dict) -> None:
    assert seen["class"] == ["course-playground"]
    assert seen["controls"]["op"] == ["scale (test)", "negate (test)"]
    assert seen["controls"]["version"] == ["mul", "add", widgets.EVERY_VERSION]
    assert seen["every version"] == ["mul", "add"]
    assert seen["rows"] == (64, (64, 128))
    assert seen["op"] == ("negate (test)", ["neg"], "neg", ["neg"])
    assert seen["updates"] == 4, "one update for the first draw and one per change, none twice"
    assert seen["texts differ"], "every change redraws the report"
    assert seen["bars"] == [1, 2]


def test_playground_widget_reacts_to_its_controls_with_ipywidgets_8(monkeypatch):
    ipywidgets = pytest.importorskip("ipywidgets")
    assert ipywidgets.__version__.startswith("8.")
    monkeypatch.setattr(widgets, "OPS", dict(widgets.OPS))
    monkeypatch.delenv("COURSE_NO_WIDGETS", raising=False)
    seen = drive_widget()
    _check_driven(seen)


def _colab_ipywidgets() -> Path:
    """ipywidgets 7.7 (and ipython_genutils, which it imports) in a folder of the build cache, installed once."""
    target = env.cache_root() / f"ipywidgets-{COLAB_IPYWIDGETS}"
    if not (target / "ipywidgets" / "__init__.py").is_file():
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--upgrade", "--target", str(target)]
        pkgs = [f"ipywidgets=={COLAB_IPYWIDGETS}", "ipython_genutils==0.2.0"]
        done = subprocess.run(pip + pkgs, capture_output=True, text=True, timeout=300)
        if done.returncode != 0:
            pytest.skip(f"could not install ipywidgets {COLAB_IPYWIDGETS} (no network?): {done.stderr[-500:]}")
    return target


def test_playground_widget_reacts_to_its_controls_with_colabs_ipywidgets_7_7():
    target = _colab_ipywidgets()
    script = (
        "import json, sys; sys.path.insert(0, sys.argv[1]); "
        "from tests.infrastructure.test_playground import drive_widget; print(json.dumps(drive_widget()))"
    )
    environ = {**os.environ, "PYTHONPATH": str(target)}
    environ.pop("COURSE_NO_WIDGETS", None)
    done = subprocess.run(
        [sys.executable, "-c", script, str(ROOT)], capture_output=True, text=True, env=environ, timeout=600, cwd=ROOT
    )
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen["ipywidgets"] == COLAB_IPYWIDGETS
    seen["rows"], seen["op"] = tuple(seen["rows"]), tuple(seen["op"])
    seen["rows"] = (seen["rows"][0], tuple(seen["rows"][1]))
    _check_driven(seen)
