"""Figures that read at a glance: one colour per implementation in every panel of every lesson, y from 0
(or log where values span decades), legends outside the data.

    plot.grid(rows, [("forward, float32", lambda r: r["op"] == "forward" and r["dtype"] == "float32"), ...])
    plot.sweep(rows, x="numel", y="pct_copy", title="polynomial forward, float32")
    plot.latency(rows, x="rows", title="small batches")         # microseconds on a log axis
    plot.bars({"CUDA": 41.0, "Triton": 44.2}, unit="us", title="forward, 4096 x 4096")

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
# by the name itself (a stable hash), so it has that colour in every figure, lesson and run.
COLORS = {
    "ours": "tab:blue",
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


def color(impl: str) -> str:
    """The colour of `impl` in every figure."""
    if impl in COLORS:
        return COLORS[impl]
    import zlib

    return FALLBACK[zlib.crc32(impl.encode()) % len(FALLBACK)]


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
    for impl in dict.fromkeys(r["impl"] for r in rows):
        pts = sorted((r[x], _value(r, y)) for r in rows if r["impl"] == impl)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=impl, color=color(impl))
    xs = sorted({r[x] for r in rows})
    if y == "pct_copy" and xs:
        ax.plot(xs, [100] * len(xs), "--", color=color("copy"), label="copy of the same bytes")
    elif y == "gbps" and rows and "copy_gbps" in rows[0]:
        pts = sorted({(r[x], r["copy_gbps"]) for r in rows})
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "--", color=color("copy"), label="copy of the same bytes")
    if logx:
        ax.set_xscale("log", base=2)
    if y == "us":
        ax.set_yscale("log")
        # plain numbers (2, 5, 10, 20 µs), not 5x10^0: the few values of a latency plot read at a glance
        ax.yaxis.set_major_formatter(mticker.FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(mticker.FuncFormatter(lambda v, _: f"{v:g}" if f"{v:g}"[0] in "25" else ""))
    else:
        ax.set_ylim(bottom=0)
    ax.set_xlabel(LABELS.get(x, x))
    ax.set_ylabel(LABELS.get(y, y))
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    if legend:
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), frameon=False)
    return fig


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


def bars(values: dict[str, float], *, unit: str = "", title: str = "", ax=None, fmt: str = "{:.3g}"):
    """A handful of numbers side by side: one bar per label (coloured by `color`), its value written on it."""
    if ax is None:
        fig, ax = plt.subplots(figsize=(1.4 * len(values) + 2.5, 3.2), layout="constrained")
    else:
        fig = ax.figure
    labels = list(values)
    colors: list[str] = []
    for label in labels:  # two unlisted names whose hashes collide still get two colours in one chart
        c = color(label)
        if label not in COLORS and c in colors:
            c = next((f for f in FALLBACK if f not in colors), c)
        colors.append(c)
    bars_ = ax.bar(labels, list(values.values()), color=colors)
    ax.bar_label(bars_, labels=[fmt.format(v) + (f" {unit}" if unit else "") for v in values.values()])
    ax.set_ylim(0, max(values.values(), default=1) * 1.18)
    if max((len(label) for label in labels), default=0) * len(labels) > 60:  # long labels: slant them, no overlap
        ax.tick_params(axis="x", labelrotation=25)
        for label in ax.get_xticklabels():
            label.set_horizontalalignment("right")
    ax.set_ylabel(unit)
    ax.set_title(title)
    ax.grid(True, axis="y", alpha=0.3)
    return fig
