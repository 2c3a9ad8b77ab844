"""One figure per sweep, one line per implementation.

    fig = plot.sweep(rows, x="numel", y="gbps", title="polynomial forward, float32")

`rows` are bench.compare rows with the label named by `x`. For y="gbps" the copy bandwidth measured in
the same run is drawn as a dashed line: the ceiling for a memory-bound kernel.
"""

from __future__ import annotations

import os

import matplotlib

if not os.environ.get("DISPLAY") and "ipykernel" not in __import__("sys").modules:
    matplotlib.use("Agg")  # headless scripts and tests
import matplotlib.pyplot as plt  # noqa: E402

LABELS = {
    "gbps": "GB/s (higher is better)",
    "ms": "time, ms (lower is better)",
    "pct_copy": "% of copy bandwidth",
    "numel": "elements",
    "rows": "rows",
    "cols": "columns",
}


def sweep(rows: list[dict], *, x: str = "numel", y: str = "gbps", title: str = "", ax=None, logx: bool = True):
    """Plot y against x for each impl in rows. Returns the matplotlib Figure."""
    if ax is None:
        fig, ax = plt.subplots(figsize=(7, 4))
    else:
        fig = ax.figure
    impls = list(dict.fromkeys(r["impl"] for r in rows))
    for impl in impls:
        pts = sorted((r[x], r[y]) for r in rows if r["impl"] == impl)
        ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=impl)
    if y == "gbps" and rows and "copy_gbps" in rows[0]:
        pts = sorted({(r[x], r["copy_gbps"]) for r in rows})
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "k--", label="copy (ceiling)")
    if logx:
        ax.set_xscale("log", base=2)
    ax.set_xlabel(LABELS.get(x, x))
    ax.set_ylabel(LABELS.get(y, y))
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    return fig
