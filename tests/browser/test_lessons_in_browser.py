"""The lessons in a real browser: JupyterLab from the course's environment, driven in headless Chromium by
Playwright, as a learner uses them. For each lesson: open it, run all cells (CPU mode, learner mode: the generated
stubs), wait for the kernel, save, and check

* no cell has an error output but the self-checks' intended failures (AssertionError "... not yet"), and every
  code cell ran (tests/lessons/ proves the same headless with nbclient; here it is JupyterLab's run-all);
* every plot renders as an image the browser decoded (nbclient never renders one);
* every widget renders (no "Error displaying widget") and reacts: the kernel playground's version (or rows)
  is changed in the page and its report and bar chart must change (nbclient never renders a widget).

Learner mode, not the solutions: the stubs are what a learner opens first, their self-checks fail at once and
the cells that time the learner's kernel then skip, so the run is the shorter of the two; the playground, plots
and every other cell run the same either way.

What runs: in `make test` (CI) lessons 00 and 01 whole, and the widget cells of every other lesson that has one
(03, 05, 08: with their bootstrap and import cells), as every lesson already runs whole headless in tests/lessons/
and CI's time is best spent on what only a browser shows; `make test-browser` (COURSE_BROWSER_LESSONS=all) runs
every lesson whole, COURSE_BROWSER_LESSONS=03,05 those lessons whole.

Screenshots of each lesson's key plot (its largest image) and of its playground before and after the change are
written to $COURSE_BROWSER_OUT (default: a folder under pytest's tmp dir) and listed at the end of the run.
Chromium is the system's (Debian's `chromium`, or COURSE_CHROMIUM); Playwright's own browser download is never
used. Without either the test skips, saying why."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("[0-9]*.ipynb"))
LESSON_TIMEOUT_S = float(os.environ.get("COURSE_BROWSER_TIMEOUT", "1800"))  # one lesson's run-all
WIDGET_TIMEOUT_S = 300  # a playground's update: a torch.compile on the CPU takes tens of seconds on 2 busy cores
# Chromium on a closed network: no background connections (they are refused many at a time there), no QUIC, a
# fresh profile (launch_persistent_context below).
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
# JupyterLab's settings for a test: no news or update checks (requests to the internet), no autosave (the test
# saves when the run is done), every cell attached to the page (windowing would leave off-screen outputs out).
LAB_SETTINGS = {
    "@jupyterlab/apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/docmanager-extension/plugin": {"autosave": False},
    "@jupyterlab/notebook-extension/tracker": {"windowingMode": "none"},
}


FULL_IN_CI = ("00", "01")  # the first two lessons a learner opens, one with a playground
RUN_IDS = {"all cells": "all", "widget cells": "widgets"}


def _widget_cells(nb: dict) -> list[int]:
    return [
        i
        for i, c in enumerate(nb["cells"])
        if c["cell_type"] == "code" and re.search(r"widgets\.(playground|interact)\(", "".join(c["source"]))
    ]


def _runs() -> list[tuple[Path, str]]:
    """(lesson, "all cells" or "widget cells"). By default (make test, CI) lessons 00 and 01 run whole, and every
    other lesson with a widget runs its widget cells only (with the bootstrap and the cells that import what they
    use): every lesson already runs whole headless (tests/lessons/), so CI spends its time here on what only a
    browser shows. COURSE_BROWSER_LESSONS=all (make test-browser) runs every lesson whole; =03,05 those whole."""
    wanted = os.environ.get("COURSE_BROWSER_LESSONS", "").strip()
    if wanted:
        prefixes = [w.strip() for w in wanted.split(",") if w.strip() and w.strip() != "all"]
        return [(p, "all cells") for p in NOTEBOOKS if not prefixes or any(p.stem.startswith(w) for w in prefixes)]
    runs = []
    for path in NOTEBOOKS:
        if path.stem.startswith(FULL_IN_CI):
            runs.append((path, "all cells"))
        elif _widget_cells(json.loads(path.read_text())):
            runs.append((path, "widget cells"))
    return runs


def _chromium() -> str | None:
    for candidate in (os.environ.get("COURSE_CHROMIUM"), "chromium", "chromium-browser", "google-chrome"):
        if candidate and shutil.which(candidate):
            return shutil.which(candidate)
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _selfcheck_cells(nb: dict) -> set[int]:
    return {i for i, c in enumerate(nb["cells"]) if "selfcheck" in c.get("metadata", {}).get("tags", [])}


class Lab:
    """JupyterLab on a free port with a token, serving copies of the lessons in a tree that links to the
    course (its kernels/, helpers/, ...): the lessons find the course from their folder as usual, and saving a
    run's outputs never touches the committed notebooks."""

    def __init__(self, work: Path):
        self.work = work
        self.course = work / "course"
        self.notebooks = self.course / "notebooks"
        self.notebooks.mkdir(parents=True)
        for entry in ROOT.iterdir():
            if entry.name not in ("notebooks", ".git"):
                (self.course / entry.name).symlink_to(entry)
        for name, values in LAB_SETTINGS.items():
            path = work / "settings" / f"{name}.jupyterlab-settings"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(json.dumps(values))
        self.port, self.token = _free_port(), secrets.token_hex(16)
        self.base = f"http://127.0.0.1:{self.port}"
        environ = {
            **os.environ,
            "COURSE_SOLUTIONS": "0",  # learner mode (the module docstring says why)
            "COURSE_DEVICE": os.environ.get("COURSE_DEVICE", "cpu"),  # CPU mode, on a GPU machine too (=cuda: not)
            "JUPYTER_RUNTIME_DIR": str(work / "runtime"),
            "JUPYTER_CONFIG_DIR": str(work / "config"),
            "PYTHONUNBUFFERED": "1",
        }
        environ.pop("COURSE_NO_WIDGETS", None)  # the widgets are what this test is for
        cmd = [
            sys.executable,
            "-m",
            "jupyter",
            "lab",
            "--no-browser",
            "--ip=127.0.0.1",
            f"--port={self.port}",
            f"--IdentityProvider.token={self.token}",
            f"--ServerApp.root_dir={self.notebooks}",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            f"--LabApp.user_settings_dir={work / 'settings'}",
            f"--LabApp.workspaces_dir={work / 'workspaces'}",
        ]
        if os.getuid() == 0:
            cmd.append("--allow-root")
        self.log = work / "jupyterlab.log"
        self._log = self.log.open("w")
        self.proc = subprocess.Popen(cmd, stdout=self._log, stderr=subprocess.STDOUT, env=environ, cwd=self.notebooks)
        deadline = time.monotonic() + 180
        while True:
            try:
                self.api("status")
                break
            except OSError:
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"JupyterLab did not start:\n{self.log.read_text()[-3000:]}") from None
                time.sleep(0.5)

    def api(self, path: str, method: str = "GET"):
        req = urllib.request.Request(f"{self.base}/api/{path}?token={self.token}", method=method)
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
        return json.loads(body) if body else None

    def copy(self, path: Path, run: str) -> Path:
        """The lesson into the served folder, its self-check cells tagged "raises-exception" (JupyterLab's run-all
        then goes on past their intended failure, as nbclient's allow_errors does in tests/lessons/). For a run of
        its "widget cells": those, the bootstrap cell, and the cells that import helpers before them."""
        nb = json.loads(path.read_text())
        for i in _selfcheck_cells(nb):
            tags = nb["cells"][i].setdefault("metadata", {}).setdefault("tags", [])
            tags.append("raises-exception")
        if run == "widget cells":
            widgets = _widget_cells(nb)
            code = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"]
            imports = [
                i for i in code[1:] if i < max(widgets) and "from helpers import" in "".join(nb["cells"][i]["source"])
            ]
            keep = sorted({code[0], *imports[:1], *widgets})
            nb["cells"] = [nb["cells"][i] for i in keep]
        dest = self.notebooks / (path.name if run == "all cells" else f"{path.stem}_widgets.ipynb")
        dest.write_text(json.dumps(nb, indent=1))
        return dest

    def shut_down_kernels(self) -> None:
        for session in self.api("sessions"):
            self.api(f"sessions/{session['id']}", method="DELETE")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        self._log.close()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    pytest.importorskip(
        "playwright.sync_api",
        reason="Playwright is not installed: `pip install playwright` (its own browser download is not needed: "
        "the test drives the system's Chromium)",
    )
    if _chromium() is None:
        pytest.skip(
            "no Chromium: the browser test drives the system's (Debian: `apt-get install chromium`, as .ci/run does; "
            "or COURSE_CHROMIUM=/path/to/chrome)"
        )
    lab = Lab(tmp_path_factory.mktemp("jupyterlab"))
    yield lab
    lab.stop()


@pytest.fixture(scope="module")
def browser(lab, tmp_path_factory):
    from playwright.sync_api import sync_playwright

    pw = sync_playwright().start()
    context = pw.chromium.launch_persistent_context(
        str(tmp_path_factory.mktemp("chromium-profile")),
        executable_path=_chromium(),
        headless=True,
        args=CHROMIUM_ARGS,
        viewport={"width": 1400, "height": 1300},
    )
    yield context
    context.close()
    pw.stop()


@pytest.fixture(scope="module")
def shots(tmp_path_factory) -> Path:
    out = os.environ.get("COURSE_BROWSER_OUT")
    folder = Path(out) if out else tmp_path_factory.mktemp("browser-screenshots")
    folder.mkdir(parents=True, exist_ok=True)
    return folder


# ----------------------------------------------------------------------------------------------------------------
# The page: JupyterLab's DOM, read with small scripts
# ----------------------------------------------------------------------------------------------------------------

PROMPTS = "() => Array.from(document.querySelectorAll('.jp-Notebook .jp-CodeCell .jp-InputPrompt'), e => e.textContent)"
KERNEL_IDLE = ".jp-Notebook-ExecutionIndicator[data-status='idle']"
# Every image in an output area, outside the widgets, and whether the browser decoded it.
IMAGES_JS = """Array.from(document.querySelectorAll('.jp-Notebook .jp-OutputArea-output img'))
    .filter(img => !img.closest('.jupyter-widgets'))"""
IMAGES = f"() => {IMAGES_JS}.map(img => ({{ok: img.complete && img.naturalWidth > 0, w: img.naturalWidth, h: img.naturalHeight}}))"
# Before a screenshot: the element's top at the top of the notebook (all of it on screen), its images decoded, two
# frames painted.
SHOWN = """async el => {
    el.scrollIntoView({block: 'start'});
    const imgs = el.tagName === 'IMG' ? [el] : Array.from(el.querySelectorAll('img'));
    await Promise.all(imgs.map(img => img.decode().catch(() => null)));
    await new Promise(done => requestAnimationFrame(() => requestAnimationFrame(done)));
}"""
WIDGET_PROBLEMS = """() => Array.from(document.querySelectorAll('.jp-Notebook .jp-OutputArea-output'))
    .map(e => e.textContent).filter(t => /Error displaying widget|Loading widget|model not found/.test(t))"""
WIDGET_VIEWS = "() => document.querySelectorAll('.jp-Notebook .jp-OutputArea-output > .jupyter-widgets').length"


def _run_all(page, name: str) -> list[str]:
    """Run > Run All Cells, then wait until every code cell has run (or the run stopped: the kernel idle, no cell
    queued, and cells not run). Returns the prompts."""
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).click()
    page.locator(".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")).click()
    deadline = time.monotonic() + LESSON_TIMEOUT_S
    started, quiet = False, 0
    while time.monotonic() < deadline:
        prompts = page.evaluate(PROMPTS)
        running = any("*" in p for p in prompts)
        done = all(re.search(r"\[\d+\]", p) for p in prompts)
        started = started or running or done
        if done and page.locator(KERNEL_IDLE).count():
            return prompts
        quiet = quiet + 1 if started and not running and page.locator(KERNEL_IDLE).count() else 0
        if quiet >= 5:  # idle for 5 polls with cells not run: the run stopped at an error
            return prompts
        time.sleep(1)
    pytest.fail(f"{name}: run-all did not finish in {LESSON_TIMEOUT_S:.0f} s")


def _save(page, path: Path) -> dict:
    """Save in JupyterLab (Ctrl+S) and read the notebook back from disk once its outputs are there."""
    before = path.stat().st_mtime_ns
    page.locator(".jp-Notebook").first.click(position={"x": 5, "y": 5})
    page.keyboard.press("Escape")
    page.keyboard.press("Control+s")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if path.stat().st_mtime_ns != before:
            try:
                return json.loads(path.read_text())
            except json.JSONDecodeError:  # caught mid-write
                pass
        time.sleep(0.5)
    pytest.fail(f"{path.name}: saving from JupyterLab did not write the file")


def _errors(nb: dict) -> list[tuple[int, dict]]:
    return [
        (i, o)
        for i, c in enumerate(nb["cells"])
        if c["cell_type"] == "code"
        for o in c.get("outputs", [])
        if o.get("output_type") == "error"
    ]


def _count(nb: dict, mime: str) -> int:
    return sum(mime in o.get("data", {}) for c in nb["cells"] if c["cell_type"] == "code" for o in c.get("outputs", []))


def _wait(condition, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.5)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}")


def _playground_state(box) -> dict:
    """The playground's report (the text of its output area) and its chart (decoded or not)."""
    return box.evaluate(
        """el => {
            const out = el.querySelector('.widget-output');
            const img = out ? out.querySelector('img') : null;
            return {text: out ? out.innerText : '', img: !!img && img.complete && img.naturalWidth > 0,
                    src: img ? img.src.slice(-64) : ''};
        }"""
    )


def _exercise_playgrounds(page, stem: str, shots: Path, shot) -> int:
    """Each playground: rendered with its report and chart; then its version (or, with one version, its rows)
    changed in the page, and its report and chart must change. Returns how many there were."""
    boxes = page.locator(".course-playground")
    for k in range(boxes.count()):
        box = boxes.nth(k)
        box.scroll_into_view_if_needed()
        first = _wait(
            lambda box=box: (s := _playground_state(box))["img"] and "% copy" in s["text"] and s,
            WIDGET_TIMEOUT_S,
            f"{stem}: the playground's first report and chart",
        )
        shot(box, f"{stem}_playground")
        selects = box.locator("select")  # op, version, dtype, rows, cols (widgets.Playground.build_widget)
        chosen, name = (1, "version") if selects.nth(1).locator("option").count() > 1 else (3, "rows")
        select = selects.nth(chosen)
        current = select.input_value()
        values = [o.get_attribute("value") for o in select.locator("option").all()]
        other = next(v for v in values if v != current)
        select.select_option(other)
        changed = _wait(
            lambda box=box: (
                (s := _playground_state(box))["img"]
                and "% copy" in s["text"]
                and s["text"] != first["text"]
                and s["src"] != first["src"]
                and s
            ),
            WIDGET_TIMEOUT_S,
            f"{stem}: the playground's report and chart after changing its {name}",
        )
        assert "could not time" not in changed["text"], changed["text"]
        shot(box, f"{stem}_playground_changed")
    return boxes.count()


@pytest.mark.parametrize("path, run", _runs(), ids=lambda v: v.stem if isinstance(v, Path) else RUN_IDS[v])
def test_lesson_runs_in_jupyterlab_with_its_plots_and_widgets(path, run, lab, browser, shots, record_property):
    copy = lab.copy(path, run)
    source = json.loads(copy.read_text())
    page = browser.new_page()
    problems: list[str] = []
    page.on("pageerror", lambda e: problems.append(f"page error: {e}"))
    written: list[str] = []

    def shot(locator, name: str) -> None:
        file = shots / f"{name}.png"
        locator.evaluate(SHOWN)
        page.wait_for_timeout(1000)  # Chromium rasterizes a large image in tiles after it is decoded
        locator.screenshot(path=str(file))
        written.append(file.name)
        record_property("screenshot", str(file))

    try:
        # a workspace of its own, reset: only this notebook open (not the tabs an earlier lesson left)
        page.goto(f"{lab.base}/lab/workspaces/{copy.stem}/tree/{copy.name}?reset&token={lab.token}")
        page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=120_000)
        page.wait_for_selector(KERNEL_IDLE, timeout=120_000)
        _wait(lambda: "Idle" in page.locator(".jp-StatusBar-Widget").all_inner_texts().__str__(), 120, "the kernel")

        prompts = _run_all(page, path.stem)
        nb = _save(page, copy)

        # Every code cell ran; errors only where a self-check fails as intended.
        checks = _selfcheck_cells(source)
        code = [i for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"]
        not_run = [i for i in code if nb["cells"][i].get("execution_count") is None]
        unexpected = [
            f"cell {i}: {o['ename']}: {o['evalue'][:300]}"
            for i, o in _errors(nb)
            if i not in checks or not (o["ename"] == "AssertionError" and "not yet" in o["evalue"])
        ]
        assert not unexpected, f"{path.name}: errors outside the self-checks' intended failures:\n" + "\n".join(
            unexpected
        )
        assert not not_run, f"{path.name}: cells {not_run} did not run (prompts {prompts})"

        # Every plot renders as an image the browser decoded.
        saved_images = _count(nb, "image/png")

        def decoded():
            imgs = page.evaluate(IMAGES)
            return imgs if len(imgs) >= saved_images and all(i["ok"] for i in imgs) else None

        images = _wait(decoded, 60, f"{path.name}: {saved_images} plots decoded") if saved_images else []
        assert len(images) == saved_images, f"{path.name}: {saved_images} image outputs, {len(images)} rendered"

        # Every widget renders, and the playgrounds react.
        views = _count(nb, "application/vnd.jupyter.widget-view+json")
        assert page.evaluate(WIDGET_VIEWS) == views, f"{path.name}: {views} widget outputs, not all rendered"
        assert not page.evaluate(WIDGET_PROBLEMS), f"{path.name}: a widget did not render"
        playgrounds = _exercise_playgrounds(page, path.stem, shots, shot)
        expected = "".join("".join(c["source"]) for c in source["cells"]).count("widgets.playground(")
        assert playgrounds == expected, f"{path.name}: {expected} playground cells, {playgrounds} rendered"
        assert views == playgrounds, (
            f"{path.name}: {views - playgrounds} widgets besides the playgrounds: teach this test how they react"
        )

        # The key plot: the lesson's largest image.
        if images:
            sizes = [i["w"] * i["h"] for i in images]
            page.evaluate(f"() => ({IMAGES_JS})[{sizes.index(max(sizes))}].dataset.courseKeyPlot = '1'")
            key = page.locator("img[data-course-key-plot]")
            shot(key, f"{path.stem}_plot")
        print(
            f"{path.name}: {len(code)} code cells ran, {len(checks)} self-checks failed as intended, "
            f"{len(images)} plots rendered, {views} widgets ({playgrounds} playgrounds reacted); screenshots: {written}"
        )
    finally:
        if problems:
            (shots / f"{path.stem}_page_errors.txt").write_text("\n".join(problems))
        page.close()
        lab.shut_down_kernels()
