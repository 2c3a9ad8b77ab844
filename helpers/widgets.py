"""ipywidgets controls for trying a kernel at other sizes, dtypes or versions, using only the API that
ipywidgets 7.7 (Colab) and 8 share. Without ipywidgets, or with COURSE_NO_WIDGETS=1, each runs once with its
defaults, its output in the cell.

    widgets.interact(run, size=[1 << 20, 1 << 24], dtype=["float32", "bfloat16"], version=[2, 1])
    widgets.playground("layernorm forward", "polynomial")   # the kernel playground (below)

The kernel playground times the course's kernels against native PyTorch and torch.compile at the op, version,
dtype, rows and columns the learner picks: time, GB/s, % of a copy of the same bytes (bench.compare), the ratios
(bench.table) and a bar chart (plot.bars), redrawn at every change. `Playground` is its core, plain Python: a
test changes a control's value (as the browser does, through the widget's model) and reads `text`, `rows` and
`figure`. On the GPU it times the CUDA kernels with CUDA events; in CPU mode the wall time of the C++ CPU loops
on small shapes, and says so.
"""

from __future__ import annotations

import dataclasses
import os
import textwrap
from collections.abc import Callable


def _widgets_off() -> str | None:
    """Why no widget is shown (COURSE_NO_WIDGETS=1, or no ipywidgets), or None when widgets are on."""
    if os.environ.get("COURSE_NO_WIDGETS") == "1":
        return "COURSE_NO_WIDGETS=1"
    try:
        import ipywidgets  # noqa: F401
    except ImportError:
        return "ipywidgets is not installed"
    return None


def interact(fn, **choices):
    """Dropdowns for each keyword (the first option is the default); fn runs now and on every change.
    COURSE_NO_WIDGETS=1 runs it once instead, its output in the cell: the notebook tests set it, as nobody
    clicks there and nbclient can wait for a widget cell's reply until its timeout (jupyter/nbclient#312:
    in CI, 20 minutes on lesson 03's interact cell)."""
    defaults = {k: v[0] for k, v in choices.items()}
    off = _widgets_off()
    if off:
        print(f"({off}: running once with the first option of each control)")
        return fn(**defaults)
    import ipywidgets as w

    controls = {k: w.Dropdown(options=list(v), value=v[0], description=k) for k, v in choices.items()}
    return w.interact(fn, **controls)


# ------------------------------------------------------------------------------------------------------------
# The kernel playground: the ops it times, as data
# ------------------------------------------------------------------------------------------------------------

EVERY_VERSION = "every version"
MAX_NUMEL = 1 << 27  # per tensor: 512 MiB in float32, so that a backward's four tensors fit a 16 GB T4
LN_EPS, RMS_EPS = 1e-5, 1e-6


def _done(exercise: str) -> bool:
    """Whether a version that runs the learner's exercise can be timed: its self-check passed in this session,
    or the solutions are loaded."""
    from . import env, selfcheck

    return selfcheck.passed(exercise) or env.solutions_enabled()


def _ext(name: str):
    """The lesson's pybind module of kernels/NAME, as the loader has it now (an edit rebuilds it)."""
    from . import loader

    return loader.load(name)


@dataclasses.dataclass(frozen=True)
class Op:
    """One op of the playground. `setup(rows, cols, dtype, device)` makes the inputs (a dict of tensors) that
    every implementation shares; `native(t)` is eager PyTorch (torch.compile compiles it); `versions(t)` returns
    {label: fn()} for the course's kernels, the learner's among them once their self-check passes; `tensors` is
    how many rows x cols tensors the op must read or write at least (the bytes of bench.compare)."""

    name: str
    tensors: int
    setup: Callable
    native: Callable
    versions: Callable
    cpu: str  # what CPU mode times, in a sentence
    note: str = ""  # what a learner must know to read its numbers
    pending: tuple[tuple[str, str], ...] = ()  # (self-check, version) that joins once the self-check passes
    native_on_cpu: bool = True  # False: native has no CPU kernel for this op alone


def _randn(rows, cols, dtype, device, seed=0, scale=1.0, shift=0.0):
    import torch

    g = torch.Generator().manual_seed(seed)
    return (torch.randn(rows, cols, generator=g) * scale + shift).to(device=device, dtype=dtype)


def _poly_setup(rows, cols, dtype, device):
    import torch

    return {"x": _randn(rows, cols, dtype, device), "c": torch.tensor([1.5, 0.5, -2.0, 0.25], device=device)}


def _poly_native(t):
    from .ops.polynomial import reference

    return reference(t["x"], t["c"])


def _poly_versions(t):
    ext, x, c = _ext("polynomial"), t["x"], t["c"]
    fns = {"ours v2": lambda: ext.forward(x, c, 2)}
    if _done("polynomial_forward"):
        fns["ours v1 (yours)"] = lambda: ext.forward(x, c, 1)
    return fns


def _ln_setup(rows, cols, dtype, device, grad=False):
    import torch

    t = {
        "x": _randn(rows, cols, dtype, device, scale=2.0, shift=0.5),
        "w": _randn(1, cols, dtype, device, seed=1).view(cols),
        "b": _randn(1, cols, dtype, device, seed=2).view(cols),
    }
    if grad:
        t["gy"] = _randn(rows, cols, dtype, device, seed=3)
        _, t["native_mean"], t["native_rstd"] = torch.native_layer_norm(t["x"], [cols], t["w"], t["b"], LN_EPS)
    return t


def _ln_forward_native(t):
    import torch.nn.functional as F

    return F.layer_norm(t["x"], t["x"].shape[-1:], t["w"], t["b"], LN_EPS)


def _ln_forward_versions(t):
    ext, x, w, b = _ext("layernorm"), t["x"], t["w"], t["b"]
    fns = {
        "ours v3": lambda: ext.forward(x, w, b, LN_EPS, 3, "registers"),
        "course::layer_norm": lambda: ext.layer_norm(x, [x.shape[-1]], w, b, LN_EPS),
        "ours v1": lambda: ext.forward(x, w, b, LN_EPS, 1),
    }
    if _done("layernorm_warp_reduce"):
        fns["ours v2 (yours)"] = lambda: ext.forward(x, w, b, LN_EPS, 2)
    return fns


def _ln_backward_native(t):
    import torch

    x = t["x"]
    return torch.ops.aten.native_layer_norm_backward(
        t["gy"], x, [x.shape[-1]], t["native_mean"], t["native_rstd"], t["w"], t["b"], [True] * 3
    )


def _ln_backward_versions(t):
    ext, x, w, gy = _ext("layernorm"), t["x"], t["w"], t["gy"]
    _, mean, rstd = ext.forward(x, w, t["b"], LN_EPS)
    fns = {"ours v2": lambda: ext.backward(gy, x, mean, rstd, w, 2, "two_kernels")}
    if _done("layernorm_backward_row"):
        fns["ours v1 (yours)"] = lambda: ext.backward(gy, x, mean, rstd, w, 1)
    return fns


def _rms_setup(rows, cols, dtype, device, grad=False):
    t = {
        "x": _randn(rows, cols, dtype, device, scale=2.0, shift=0.3),
        "w": _randn(1, cols, dtype, device, 1).view(cols),
    }
    if grad:
        import torch

        t["gy"] = _randn(rows, cols, dtype, device, seed=3)
        if t["x"].is_cuda:  # the rstd native's backward takes (aten._fused_rms_norm_backward: CUDA only)
            t["native_rstd"] = torch.ops.aten._fused_rms_norm(t["x"], [cols], t["w"], RMS_EPS)[1]
    return t


def _rms_forward_native(t):
    import torch.nn.functional as F

    return F.rms_norm(t["x"], t["x"].shape[-1:], t["w"], RMS_EPS)


def _rms_forward_versions(t):
    ext, x, w = _ext("rmsnorm"), t["x"], t["w"]
    return {
        "ours v2 (norm engine)": lambda: ext.forward(x, w, RMS_EPS, 2),
        "ours v1": lambda: ext.forward(x, w, RMS_EPS, 1),
    }


def _rms_backward_native(t):
    import torch

    x = t["x"]
    return torch.ops.aten._fused_rms_norm_backward(t["gy"], x, [x.shape[-1]], t["native_rstd"], t["w"], [True, True])


def _rms_backward_versions(t):
    ext, x, w, gy = _ext("rmsnorm"), t["x"], t["w"], t["gy"]
    _, rstd = ext.forward(x, w, RMS_EPS)
    return {
        "ours v2 (norm engine)": lambda: ext.backward(gy, x, rstd, w, 2),
        "ours v1": lambda: ext.backward(gy, x, rstd, w, 1),
    }


def _swiglu_setup(rows, cols, dtype, device):
    return {"x": _randn(rows, 2 * cols, dtype, device)}  # [tokens, 2h]: gate and up side by side


def _swiglu_native(t):
    import torch.nn.functional as F

    gate, up = t["x"].chunk(2, dim=-1)
    return F.silu(gate) * up


def _swiglu_versions(t):
    if not _done("capstone kernels"):
        return {}
    import torch

    from . import capstone

    capstone.build()  # your folder's library: its TORCH_LIBRARY block defines course::swiglu
    x = t["x"]
    return {"yours": lambda: torch.ops.course.swiglu(x)}


_SAME_LOOP = "every version runs the same C++ loop on the CPU"
OPS: dict[str, Op] = {
    op.name: op
    for op in (
        Op(
            "polynomial",
            2,
            _poly_setup,
            _poly_native,
            _poly_versions,
            cpu="v1 is your CPU loop (exercise 1, part 1), v2 the course's",
            pending=(("polynomial_forward", "ours v1 (yours)"),),
        ),
        Op(
            "layernorm forward",
            2,
            _ln_setup,
            _ln_forward_native,
            _ln_forward_versions,
            cpu=f"{_SAME_LOOP}, except v2 (your exercise's CPU part)",
            pending=(("layernorm_warp_reduce", "ours v2 (yours)"),),
        ),
        Op(
            "layernorm backward",
            3,
            lambda *a: _ln_setup(*a, grad=True),
            _ln_backward_native,
            _ln_backward_versions,
            cpu=f"{_SAME_LOOP}, except v1's grad_x (your exercise's CPU part)",
            pending=(("layernorm_backward_row", "ours v1 (yours)"),),
        ),
        Op("rmsnorm forward", 2, _rms_setup, _rms_forward_native, _rms_forward_versions, cpu=_SAME_LOOP),
        Op(
            "rmsnorm backward",
            3,
            lambda *a: _rms_setup(*a, grad=True),
            _rms_backward_native,
            _rms_backward_versions,
            cpu=f"{_SAME_LOOP}; native's RMSNorm backward kernel (aten._fused_rms_norm_backward) is CUDA only",
            native_on_cpu=False,
        ),
        Op(
            "swiglu",
            3,
            _swiglu_setup,
            _swiglu_native,
            _swiglu_versions,
            cpu="yours is your CPU loop",
            note="cols is h: x has 2h columns, gate and up side by side",
            pending=(("capstone kernels", "yours"),),
        ),
    )
}


def _sizes(cuda: bool) -> dict[str, tuple[int, tuple[int, ...]]]:
    """Each size control's default and options: GPU shapes a card streams from memory, small ones on the CPU."""
    if cuda:
        return {"rows": (4096, (1, 16, 256, 1024, 4096, 16384)), "cols": (4096, (1024, 2048, 4096, 8192, 16384, 65536))}
    return {"rows": (256, (1, 16, 256, 1024)), "cols": (1024, (256, 1024, 4096))}


# ------------------------------------------------------------------------------------------------------------
# The playground's core (plain Python) and its widget
# ------------------------------------------------------------------------------------------------------------


class Playground:
    """The playground's state: `settings` (op, version, dtype, rows, cols), `rows` (bench.compare rows of the
    last update), `text` (the printed report), `figure` (its bar chart) and `updates` (how many updates ran).
    `update(**changes)` times what the settings name (each implementation once per shape and dtype: a timing is
    kept, so changing the version times only that version) and redraws. `widget` is the ipywidgets box, or
    None with widgets off; its controls are in `controls`."""

    def __init__(self, ops, *, device=None, rows=None, cols=None):
        import torch

        from . import env

        unknown = [name for name in ops if name not in OPS]
        if unknown:
            raise ValueError(f"playground ops are {list(OPS)}, got {unknown}")
        self.ops = [OPS[name] for name in ops]
        self.device = env.default_device(device)
        self.cuda = self.device.type == "cuda"
        sizes = _sizes(self.cuda)
        self.choices = {
            "op": [op.name for op in self.ops],
            "version": [],
            "dtype": ["float32", "bfloat16", "float16"],
            "rows": sorted(rows or sizes["rows"][1]),
            "cols": sorted(cols or sizes["cols"][1]),
        }
        self.settings = {
            "op": self.ops[0].name,
            "version": None,
            "dtype": "float32",
            "rows": (rows or [sizes["rows"][0]])[0],
            "cols": (cols or [sizes["cols"][0]])[0],
        }
        self.rows: list[dict] = []
        self.text = ""
        self.figure = None
        self.updates = 0
        self.widget = self.controls = self.output = None
        self._timed: dict[tuple, dict] = {}  # (op, dtype, rows, cols, impl) -> bench.compare row
        self.failed: dict[str, str] = {}  # impl -> why it could not be timed at the last update
        self._torch = torch
        self._versions_for(self.ops[0])

    # -- the core --------------------------------------------------------------------------------------------

    def _op(self) -> Op:
        return OPS[self.settings["op"]]

    def _versions_for(self, op: Op) -> list[str]:
        """The version choices of `op` (its versions at a tiny shape, to read their labels), the first one chosen."""
        t = op.setup(1, 8, self._torch.float32, self.device)
        labels = list(op.versions(t))
        self.choices["version"] = [*labels, EVERY_VERSION] if len(labels) > 1 else labels or ["(none yet)"]
        self.settings["version"] = self.choices["version"][0]
        return self.choices["version"]

    def notes(self) -> list[str]:
        op, s = self._op(), self.settings
        notes = [op.note] if op.note else []
        if not self.cuda:
            notes.append(
                "CPU mode: wall time per call (torch.utils.benchmark) of the C++ CPU loops, PyTorch's CPU kernels and "
                "torch.compile's generated C++, on small shapes; % of a copy is against a CPU memory copy of the same "
                f"bytes. The CUDA kernels, where the versions differ, need a GPU to time: here {op.cpu}."
            )
        for check, version in op.pending:
            if version not in self.choices["version"]:
                notes.append(f"{version} joins once the self-check {check!r} passes (then re-run this cell).")
        if not self.cuda and not op.native_on_cpu:
            notes.append("native and torch.compile are timed on a GPU only for this op.")
        if s["rows"] * s["cols"] > MAX_NUMEL:
            notes.append(f"{s['rows']} x {s['cols']} is more than {MAX_NUMEL:,} elements per tensor: pick fewer rows.")
        notes += [f"{impl} could not be timed: {why}" for impl, why in self.failed.items()]
        return notes

    def measure(self) -> list[dict]:
        """Time what the settings name: the chosen version (or every version), native and torch.compile; one
        bench.compare row each (timings already taken at this op, dtype and shape are reused)."""
        from . import bench

        torch, op, s = self._torch, self._op(), self.settings
        self.failed = {}
        if s["rows"] * s["cols"] > MAX_NUMEL:
            return []
        dtype = getattr(torch, s["dtype"])
        t = op.setup(s["rows"], s["cols"], dtype, self.device)
        versions = op.versions(t)
        chosen = versions if s["version"] == EVERY_VERSION else {k: v for k, v in versions.items() if k == s["version"]}
        fns = dict(chosen)
        if self.cuda or op.native_on_cpu:
            fns["native"] = lambda: op.native(t)
            if (op.name, s["dtype"], s["rows"], s["cols"], "torch.compile") in self._timed:
                fns["torch.compile"] = None  # timed before: its row is kept
            else:
                try:
                    fns["torch.compile"] = self._compiled(op, t)
                except Exception as e:  # no C++ compiler for inductor on the CPU, an op Dynamo cannot trace
                    self.failed["torch.compile"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
        key = (op.name, s["dtype"], s["rows"], s["cols"])
        todo = {impl: fn for impl, fn in fns.items() if fn is not None and (*key, impl) not in self._timed}
        if todo:
            es = t["x"].element_size()
            nbytes = op.tensors * s["rows"] * s["cols"] * es
            for r in bench.compare(todo, nbytes=nbytes, device=self.device, op=op.name, shape=key[2:], dtype=key[1]):
                self._timed[(*key, r["impl"])] = r
        return [self._timed[(*key, impl)] for impl in fns]

    def _compiled(self, op: Op, t: dict):
        """torch.compile of native for this op, dtype and shape, compiled here, before it is timed. As the lessons
        do: static shapes, and the compile cache reset first (so that earlier shapes do not count towards
        Dynamo's recompile limit; a function compiled earlier in the notebook recompiles on its next call)."""
        torch = self._torch
        torch._dynamo.reset()
        fn = torch.compile(op.native, dynamic=False)
        fn(t)
        return lambda: fn(t)

    def report(self, rows: list[dict]) -> str:
        from . import bench

        s = self.settings
        timer = "GPU time (CUDA events, L2 flushed)" if self.cuda else "wall time per call"
        head = f"{s['op']}, {s['rows']} x {s['cols']}, {s['dtype']}, {self.device.type}: {timer}"
        lines = [head, *(textwrap.fill(note, 110, subsequent_indent="  ") for note in self.notes())]
        if rows:
            baselines = tuple(b for b in ("native", "torch.compile") if any(r["impl"] == b for r in rows))
            lines += ["", bench.table(rows, baseline=baselines)]
        return "\n".join(lines)

    def plot(self, rows: list[dict]):
        """% of a copy of the same bytes, one bar per implementation, the copy at 100 % (dashed)."""
        from . import plot

        s = self.settings
        title = f"{s['op']}, {s['rows']} x {s['cols']}, {s['dtype']} ({'GPU' if self.cuda else 'CPU, wall time'})"
        values = {r["impl"]: r["pct_copy"] for r in rows}
        # the spread of the timings (20th to 80th percentile) as a spread of % of a copy, which is 1 / time
        spread = {r["impl"]: (r["pct_copy"] * r["ms"] / r["ms_hi"], r["pct_copy"] * r["ms"] / r["ms_lo"]) for r in rows}
        fig = plot.bars(values, unit="%", title=title, ylabel=plot.LABELS["pct_copy"], ranges=spread)
        ax = fig.axes[0]
        ax.axhline(100, linestyle="--", color=plot.color("copy"), label="copy of the same bytes")
        ax.set_ylim(0, max(ax.get_ylim()[1], 118))
        return fig

    def update(self, **changes) -> None:
        """Apply `changes` to the settings (a new op chooses its first version unless `version` is given), time,
        and redraw (into the widget's output where there is one)."""
        self.settings.update(changes)
        if "op" in changes and "version" not in changes:
            self._versions_for(self._op())
        import matplotlib.pyplot as plt

        self.rows = self.measure()
        self.text = self.report(self.rows)
        self.figure = self.plot(self.rows) if self.rows else None
        self.updates += 1
        self._show()
        if self.figure is not None:
            plt.close(self.figure)  # shown once: pyplot forgets it (the inline backend would show it again)

    # -- showing it ------------------------------------------------------------------------------------------

    def _show(self) -> None:
        if self.output is None:
            print(self.text)
            _display(self.figure)
            return
        with self.output:
            self.output.clear_output(wait=True)
            print(self.text)
            _display(self.figure)

    def build_widget(self) -> None:
        """The controls and the output area (the API ipywidgets 7.7 and 8 share); every change calls update."""
        import ipywidgets as w

        style = {"description_width": "initial"}
        self.controls = {
            name: w.Dropdown(options=self.choices[name], value=self.settings[name], description=name, style=style)
            for name in ("op", "version", "dtype", "rows", "cols")
        }
        self.status = w.HTML(value="")
        self.output = w.Output()
        c = self.controls
        self.widget = w.VBox(
            [w.HBox([c["op"], c["version"], c["dtype"]]), w.HBox([c["rows"], c["cols"], self.status]), self.output]
        )
        self.widget.add_class("course-playground")  # what the browser test finds it by
        self._quiet = False
        for name, control in c.items():
            control.observe(lambda change, name=name: self._changed(name, change["new"]), names="value")

    def _changed(self, name: str, value) -> None:
        if self._quiet or self.settings.get(name) == value:
            return
        self.status.value = "<i>timing…</i>"
        try:
            if name == "op":  # the new op's versions, in the version control, before timing
                self.settings["op"] = value
                self._versions_for(self._op())
                self._quiet = True
                try:
                    self.controls["version"].options = self.choices["version"]
                    self.controls["version"].value = self.settings["version"]
                finally:
                    self._quiet = False
                self.update(op=value, version=self.settings["version"])
            else:
                self.update(**{name: value})
        except Exception as e:  # shown, not raised: a callback's exception would reach the browser's log only
            self.text = f"could not time {self.settings}: {type(e).__name__}: {e}"
            with self.output:
                self.output.clear_output(wait=True)
                print(self.text)
        finally:
            self.status.value = ""

    def _ipython_display_(self):
        if self.widget is not None:
            _display(self.widget)

    def __repr__(self) -> str:
        return f"Playground({self.settings}, updates={self.updates})"


def _display(obj) -> None:
    """Show obj (a figure, a widget) where IPython runs; elsewhere (a test) nothing: the caller keeps it."""
    if obj is None:
        return
    try:
        from IPython import get_ipython
    except ImportError:
        return
    if get_ipython() is not None:
        from IPython.display import display

        display(obj)


def playground(*ops: str, device=None, rows=None, cols=None) -> Playground:
    """The kernel playground: dropdowns for the op (`ops`, names in OPS; the first is shown first), the version
    (the course's ladder, yours once its self-check passes, or every version), the dtype, rows and columns.
    Every change times the chosen kernels against native PyTorch and torch.compile (bench.compare: time,
    GB/s, % of a copy of the same bytes, and their ratios) and redraws the bar chart. `rows`/`cols` replace
    the size choices (the first is the default). With COURSE_NO_WIDGETS=1 or without ipywidgets it times the
    defaults once and prints the same report."""
    pg = Playground(ops or list(OPS), device=device, rows=rows, cols=cols)
    off = _widgets_off()
    if off:
        print(f"({off}: the playground times its first settings once; change them with update(...))")
        pg.update()
        return pg
    pg.build_widget()
    pg.update()
    return pg
