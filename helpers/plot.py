"""Figures that read at a glance: one colour per implementation in every panel of every lesson, y from 0
(or log where values span decades), legends outside the data.

    plot.grid(rows, [("forward, float32", lambda r: r["op"] == "forward" and r["dtype"] == "float32"), ...])
    plot.sweep(rows, x="numel", y="pct_copy", title="polynomial forward, float32")
    plot.latency(rows, x="rows", title="small batches")         # microseconds on a log axis
    plot.bars({"CUDA": 41.0, "Triton": 44.2}, unit="us", title="forward, 4096 x 4096")
    plot.bars({"naive": 14316.0, "native": 86.8}, unit="µs", log=True)  # values decades apart

`rows` are `bench.compare` rows (impl, ms, gbps, pct_copy, copy_gbps and the labels given). y="pct_copy"
(the default) is the number the lessons quote: % of a device-to-device copy of the same bytes, timed in the
same run, drawn as a dashed line at 100 %. A point above it is possible where the data fits in the L2 cache
(the copy's own bytes do not), so the line is a reference, not a ceiling.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import matplotlib

if not os.environ.get("DISPLAY") and "ipykernel" not in __import__("sys").modules:
    matplotlib.use("Agg")  # headless scripts and tests
import matplotlib.pyplot as plt  # noqa: E402
import matplotlib.ticker as mticker  # noqa: E402

LABELS = {
    "gbps": "GB/s (higher is better)",
    "ms": "time, ms (lower is better)",
    "us": "time, µs (lower is better, log)",
    "pct_copy": "% of a copy of the same bytes",
    "numel": "elements",
    "rows": "rows (M)",
    "cols": "row length (N)",
}

# One colour per implementation, the same in every lesson. A name not listed gets a FALLBACK colour chosen
# by the name itself (a stable hash), so it has that colour in every figure, lesson and run, unless another
# line or bar of the same figure already has it (then the next free FALLBACK colour: see `_colors`).
# " (yours)" after a name is the learner's version of it and has its colour ("ours v1 (yours)" is "ours v1").
COLORS = {
    "ours": "tab:blue",
    # the ladder's rungs and the ways to call the same kernels, named alike in every lesson
    "v1": "teal",
    "ours v1": "teal",
    "ours v2": "navy",
    "ours, Python Function": "tab:brown",
    "ours (Python Function)": "tab:brown",
    "ours, saves y": "tab:pink",
    "CUDA": "tab:blue",
    "op": "tab:blue",
    "native": "tab:orange",
    "PyTorch": "tab:orange",
    "eager": "tab:orange",
    "torch.compile": "tab:green",
    "compile": "tab:green",
    "liger": "tab:purple",
    "Liger": "tab:purple",
    "triton": "tab:red",
    "Triton": "tab:red",
    "copy": "black",
}
FALLBACK = ["tab:cyan", "tab:brown", "tab:pink", "tab:olive", "tab:gray", "navy", "teal", "gold", "crimson"]


def _name(impl: str) -> str:
    return impl.removesuffix(" (yours)")


def color(impl: str) -> str:
    """The colour of `impl` in every figure (where no other name of the same figure has it: `_colors`)."""
    name = _name(impl)
    if name in COLORS:
        return COLORS[name]
    import zlib

    return FALLBACK[zlib.crc32(name.encode()) % len(FALLBACK)]


def _colors(fig, impls: Iterable[str]) -> dict[str, str]:
    """The colour of each of `impls` in `fig`: `color(impl)`, except that an unlisted name whose hashed colour
    another name of the same figure already has (in any panel, listed names first) gets the next free
    FALLBACK colour. Kept on the figure, so every panel of one figure agrees."""
    seen: dict[str, str] = fig.__dict__.setdefault("_course_colors", {})
    impls = list(dict.fromkeys(impls))
    for impl in sorted(impls, key=lambda i: _name(i) not in COLORS):  # listed names keep their colour
        if impl in seen:
            continue
        c = color(impl)
        if _name(impl) not in COLORS:
            taken = set(seen.values()) | {color(i) for i in impls if _name(i) in COLORS}
            if c in taken:
                c = next((f for f in FALLBACK if f not in taken), c)
        seen[impl] = c
    return {impl: seen[impl] for impl in impls}


def _value(r: dict, y: str) -> float:
    return r["ms"] * 1e3 if y == "us" else r[y]


def sweep(
    rows: list[dict],
    *,
    x: str = "numel",
    y: str = "pct_copy",
    title: str = "",
    ax=None,
    logx: bool = True,
    legend: bool = True,
):
    """y against x, one line per impl in rows. y="pct_copy" draws the copy at 100 %; y="gbps" draws the
    copy's GB/s measured at each size; y="us" is time on a log axis. Returns the Figure."""
    if ax is None:
        fig, ax = plt.subplots(figsize=(8, 4), layout="constrained")
    else:
        fig = ax.figure
    colors = _colors(fig, (r["impl"] for r in rows))
    for impl, c in colors.items():
        pts = sorted((r[x], _value(r, y)) for r in rows if r["impl"] == impl)
        # the Python Function runs the same kernels as "ours": dashed and hollow, so "ours" shows beneath it
        style = dict(linestyle="--", markerfacecolor="none") if "Python Function" in impl else {}
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=impl, color=c, **style)
    xs = sorted({r[x] for r in rows})
    if y == "pct_copy" and xs:
        ax.plot(xs, [100] * len(xs), "--", color=color("copy"), label="copy of the same bytes")
    elif y == "gbps" and rows and "copy_gbps" in rows[0]:
        pts = sorted({(r[x], r["copy_gbps"]) for r in rows})
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "--", color=color("copy"), label="copy of the same bytes")
    if logx:
        ax.set_xscale("log", base=2)
        if 1 < len(xs) <= 8 and all(v > 0 and float(v).is_integer() and int(v) & (int(v) - 1) == 0 for v in xs):
            ax.xaxis.set_major_locator(mticker.FixedLocator(xs))  # a few powers of 2: a tick at each point
            ax.xaxis.set_minor_locator(mticker.NullLocator())
    if y == "us":
        _plain_log_y(ax)
    else:
        ax.set_ylim(bottom=0)
    ax.set_xlabel(LABELS.get(x, x))
    ax.set_ylabel(LABELS.get(y, y))
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if legend:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    return fig


class _PlainLogLocator(mticker.Locator):
    """Ticks of a log axis that a reader can read values off: 1-2-5 in each decade where the view spans
    decades; where it spans too little for three of those (5.3 to 11 µs has only 10), evenly spaced round
    numbers (6, 8, 10)."""

    def __call__(self):
        return self.tick_values(*self.axis.get_view_interval())

    def tick_values(self, vmin, vmax):
        lo, hi = sorted((vmin, vmax))
        if hi <= 0:
            return []
        lo = lo if lo > 0 else hi / 10

        def inside(ticks):
            return [t for t in ticks if lo <= t <= hi]

        for subs in ((1.0, 2.0, 5.0), (1.0,)):
            ticks = inside(mticker.LogLocator(base=10, subs=subs, numticks=99).tick_values(lo, hi))
            if 3 <= len(ticks) <= 6:
                return ticks
        if len(ticks) > 6:  # many decades: one tick per decade, thinned
            return ticks[:: (len(ticks) + 5) // 6]
        return [t for t in mticker.MaxNLocator(nbins=7, steps=[1, 2, 2.5, 5, 10]).tick_values(lo, hi) if t > 0]


def _plain_log_y(ax) -> None:
    """A log y axis labelled in plain numbers (5, 10, 20 µs, not 5x10^0), with several labelled ticks."""
    ax.set_yscale("log")
    ax.yaxis.set_major_locator(_PlainLogLocator())
    ax.yaxis.set_major_formatter(mticker.FuncFormatter(lambda v, _: f"{v:g}"))
    ax.yaxis.set_minor_formatter(mticker.NullFormatter())


def latency(rows: list[dict], *, x: str = "rows", title: str = "", ax=None, legend: bool = True):
    """Small batches, where a launch's fixed cost dominates: time in µs on a log axis."""
    return sweep(rows, x=x, y="us", title=title, ax=ax, legend=legend)


def grid(
    rows: list[dict],
    panels: Iterable[tuple],
    *,
    x: str = "numel",
    y: str = "pct_copy",
    cols: int = 2,
    logx: bool = True,
):
    """One panel per (title, row filter) or (title, row filter, {"x": ..., "y": ...}) (that panel's own axes,
    e.g. {"x": "rows", "y": "us"} for a latency panel), one legend for the figure, below the panels."""
    panels = list(panels)
    nrows = (len(panels) + cols - 1) // cols
    fig, axes = plt.subplots(nrows, cols, figsize=(6.5 * cols, 3.6 * nrows), layout="constrained", squeeze=False)
    _colors(fig, (r["impl"] for r in rows))  # every panel's colours chosen at once: one per impl in the figure
    for ax, (title, keep, *own) in zip(axes.flat, panels):
        axes_ = {"x": x, "y": y, **(own[0] if own else {})}
        sweep([r for r in rows if keep(r)], title=title, ax=ax, logx=logx, legend=False, **axes_)
    for ax in list(axes.flat)[len(panels) :]:
        ax.set_visible(False)
    handles = {}
    for ax in axes.flat:
        for h, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, h)
    fig.legend(handles.values(), handles.keys(), loc="outside lower center", ncol=min(6, len(handles)), frameon=False)
    return fig


def _plain(v: float) -> str:
    """3 significant digits, and whole numbers with a thousands separator from 1000 on (14,316, not 1.43e+04)."""
    return f"{v:,.0f}" if abs(v) >= 1000 else f"{v:.3g}"


def bars(
    values: dict[str, float],
    *,
    unit: str = "",
    title: str = "",
    ax=None,
    fmt: str | None = None,
    log: bool = False,
    ylabel: str | None = None,
    ranges: dict[str, tuple[float, float]] | None = None,
):
    """A handful of numbers side by side: one bar per label (coloured by `color`), its value written on it
    (`fmt`, or 3 significant digits). log=True: a log y axis, for values decades apart (a bar 200x the others
    would hide them on a linear one). `ranges`: {label: (low, high)} drawn as an error bar on that bar (the
    spread of the timings). `ylabel` defaults to `unit`."""
    if ax is None:
        fig, ax = plt.subplots(figsize=(1.4 * len(values) + 2.5, 3.2), layout="constrained")
    else:
        fig = ax.figure
    labels = list(values)
    colors = _colors(fig, labels)  # two unlisted names whose hashes collide still get two colours
    heights = list(values.values())
    err = None
    if ranges:  # below and above each bar; 0 where a label has no range
        lo = [v - ranges[k][0] if k in ranges else 0.0 for k, v in values.items()]
        hi = [ranges[k][1] - v if k in ranges else 0.0 for k, v in values.items()]
        err = [[max(0.0, e) for e in lo], [max(0.0, e) for e in hi]]
    bars_ = ax.bar(labels, heights, color=[colors[k] for k in labels], yerr=err, capsize=4 if err else 0)
    ends = [v + (err[1][i] if err else 0.0) for i, v in enumerate(heights)]  # above the error bar, if any
    for rect, v, end in zip(bars_, heights, ends):
        text = (fmt.format(v) if fmt else _plain(v)) + (f" {unit}" if unit else "")
        x = rect.get_x() + rect.get_width() / 2
        ax.annotate(text, (x, end), xytext=(0, 2), textcoords="offset points", ha="center", va="bottom")
    top = max(ends, default=1)
    if log:
        _plain_log_y(ax)
        positive = [v for v in heights if v > 0] or [1.0]
        ax.set_ylim(min(positive) / 2, top * 3)  # room for the labels above the bars
    else:
        ax.set_ylim(0, top * 1.18)
    if max((len(label) for label in labels), default=0) * len(labels) > 60:  # long labels: slant them, no overlap
        ax.tick_params(axis="x", labelrotation=25)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
    ax.set_ylabel(unit if ylabel is None else ylabel)
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    return fig
