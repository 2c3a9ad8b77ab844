"""The figures of docs/norm-tuning.md, from the benchmark tables kept in results/h100/.

    python docs/figures/make_figures.py          # writes docs/figures/*.png

Reads results/h100/layernorm.csv (lesson 03's headline), results/h100/layernorm_grid.csv and
results/h100/rmsnorm.csv (issue 16's sweep of both norms), and docs/figures/ab_steps.csv (the before/after
of each tuning step, copied from the A/B notes that git keeps; its `source` column names each one).
Needs matplotlib only.
"""

from __future__ import annotations

import csv
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

HERE = Path(__file__).resolve().parent
RESULTS = HERE.parent.parent / "results" / "h100"
COLORS = {"ours": "#1f77b4", "native": "#7f7f7f", "torch.compile": "#ff7f0e", "Liger": "#2ca02c"}
NS = [256, 1024, 4096, 8192, 16384, 32768, 65536]
SHORT = {"bfloat16": "bf16", "float32": "fp32"}


def rows(name: str) -> list[dict]:
    with open(RESULTS / name, newline="") as f:
        return list(csv.DictReader(f))


def mn(shape: str) -> tuple[int, int]:
    m, n = shape.split("x")
    return int(m), int(n)


def index(rs: list[dict]) -> dict:
    return {(r["op"], r["shape"], r["dtype"], r["impl"]): r for r in rs}


def machine_note(rs: list[dict]) -> str:
    r = rs[0]
    return f"{r['gpu']}, torch {r['torch']}, CUDA {r['cuda']}, {r['date'][:10]}; do_bench medians, L2 flushed"


def save(fig, name: str, note: str) -> None:
    """The machine and source under the figure, then docs/figures/NAME.png."""
    fig.text(0.5, 0.005, note, ha="center", fontsize=7)
    fig.tight_layout(rect=(0, 0.03, 1, 1))
    fig.savefig(HERE / f"{name}.png", dpi=130)
    plt.close(fig)


def ladder() -> None:
    """LayerNorm at 4096x4096: lesson 03's versions against native and torch.compile, % of a copy."""
    rs = rows("layernorm.csv")
    d = index(rs)
    impls = [
        ("ours v1", "v1: a thread per row"),
        ("ours v2", "v2: a warp per row"),
        ("native", "native"),
        ("torch.compile", "torch.compile"),
        ("ours", "ours (auto)"),
    ]
    fig, axes = plt.subplots(1, 2, figsize=(10, 3.6), sharey=True)
    for ax, op in zip(axes, ["ln fwd", "ln bwd"]):
        for k, dtype in enumerate(["bfloat16", "float32"]):
            xs, ys = [], []
            for i, (impl, _) in enumerate(impls):
                r = d.get((op, "4096x4096", dtype, impl))
                if r:
                    xs.append(i + (k - 0.5) * 0.38)
                    ys.append(float(r["pct_copy"]))
            ax.bar(xs, ys, width=0.38, label=dtype, color=["#9ecae1", "#3182bd"][k])
            for x, y in zip(xs, ys):
                ax.text(x, y + 1.5, f"{y:.0f}", ha="center", fontsize=7)
        if op == "ln bwd":
            ax.text(1, 3, "(forward only)", ha="center", fontsize=7)
        ax.set_xticks(range(len(impls)))
        ax.set_xticklabels([label for _, label in impls], rotation=20, ha="right", fontsize=8)
        ax.axhline(100, color="k", lw=0.8, ls="--")
        ax.set_title({"ln fwd": "forward (2 M N bytes)", "ln bwd": "backward (3 M N bytes)"}[op], fontsize=10)
        ax.set_ylim(0, 112)
    axes[0].set_ylabel("% of a same-size copy")
    axes[0].legend(fontsize=8, loc="upper left")
    fig.suptitle("LayerNorm 4096x4096: where the simple kernels stand", fontsize=11)
    save(fig, "ladder", machine_note(rs) + " (results/h100/layernorm.csv)")


def forward_over_n() -> None:
    """Forward % of a copy over the row length N at M N = 2^24, both norms, both dtypes."""
    fig, axes = plt.subplots(2, 2, figsize=(10, 6.4), sharex=True, sharey=True)
    for i, (name, op, title) in enumerate(
        [("layernorm_grid.csv", "ln fwd", "LayerNorm"), ("rmsnorm.csv", "rms fwd", "RMSNorm")]
    ):
        rs = rows(name)
        d = index(rs)
        for j, dtype in enumerate(["bfloat16", "float32"]):
            ax = axes[i][j]
            for impl, color in COLORS.items():
                pts = [
                    (n, float(d[(op, f"{2**24 // n}x{n}", dtype, impl)]["pct_copy"]))
                    for n in NS
                    if (op, f"{2**24 // n}x{n}", dtype, impl) in d
                ]
                if pts:
                    ax.plot(*zip(*pts), marker="o", ms=3.5, color=color, label=impl, lw=2.2 if impl == "ours" else 1.2)
            ax.axhline(100, color="k", lw=0.8, ls="--")
            ax.axhline(90, color="r", lw=0.6, ls=":")
            ax.set_xscale("log", base=2)
            ax.set_xticks(NS)
            ax.set_xticklabels([str(n) for n in NS], fontsize=7)
            ax.set_ylim(0, 115)
            ax.set_title(f"{title} forward, {dtype}", fontsize=10)
            if i == 1:
                ax.set_xlabel("N (row length), M = 2^24 / N")
            if j == 0:
                ax.set_ylabel("% of a same-size copy")
    axes[0][0].legend(fontsize=8, loc="lower center", ncol=2)
    fig.suptitle("Forward over N at 2^24 elements (dashed: a copy; dotted: the 90 % target)", fontsize=11)
    save(fig, "forward_n", machine_note(rows("rmsnorm.csv")) + " (results/h100/layernorm_grid.csv, rmsnorm.csv)")


def backward_sizes() -> None:
    """Left: time against bytes moved (the fixed cost per call and the streaming rate); right: the backward's
    % of a copy over N at M N = 2^22, 2^24 and 2^26."""
    fig, axes = plt.subplots(1, 3, figsize=(13, 4.0))
    # The performance model per call, T = F + bytes / BW, fitted through the 2^24 and 2^26 points of each N
    # (medians over N): F is the fixed cost of a call (launch, ramp-up, tail, the end of a reduction), BW the
    # streaming rate. The copy's own F and BW come from the same rows (nbytes / copy_gbps).
    ax = axes[0]
    bars = []
    for name, pre, title in [("layernorm_grid.csv", "ln", "LN"), ("rmsnorm.csv", "rms", "RMS")]:
        d = index(rows(name))
        for dtype in ["bfloat16", "float32"]:
            for op in ["fwd", "bwd"]:
                fits = {"ours": [], "copy": []}
                for n in NS:
                    a = d.get((f"{pre} {op}", f"{2**24 // n}x{n}", dtype, "ours"))
                    b = d.get((f"{pre} {op}", f"{2**26 // n}x{n}", dtype, "ours"))
                    if not (a and b):
                        continue
                    for key, ta, tb in [
                        ("ours", float(a["ms"]) * 1e3, float(b["ms"]) * 1e3),
                        (
                            "copy",
                            float(a["nbytes"]) / float(a["copy_gbps"]) / 1e3,
                            float(b["nbytes"]) / float(b["copy_gbps"]) / 1e3,
                        ),
                    ]:
                        bw = (float(b["nbytes"]) - float(a["nbytes"])) / (tb - ta) / 1e3  # GB/s
                        fits[key].append((ta - float(a["nbytes"]) / bw / 1e3, bw))
                med = {k: sorted(v)[len(v) // 2] for k, v in fits.items()}
                bars.append((f"{title} {op}\n{SHORT[dtype]}", med["ours"], med["copy"]))
    xs = range(len(bars))
    ax.bar([x - 0.2 for x in xs], [b[1][0] for b in bars], width=0.4, color="#d62728", label="ours")
    ax.bar([x + 0.2 for x in xs], [b[2][0] for b in bars], width=0.4, color="#7f7f7f", label="copy, same bytes")
    for x, b in zip(xs, bars):
        ax.text(x - 0.2, b[1][0] + 0.3, f"{b[1][1] / 1e3:.2f}", ha="center", fontsize=6, rotation=90)
        ax.text(x + 0.2, b[2][0] + 0.3, f"{b[2][1] / 1e3:.2f}", ha="center", fontsize=6, rotation=90)
    ax.set_xticks(list(xs))
    ax.set_xticklabels([b[0] for b in bars], fontsize=7)
    ax.set_ylabel("fixed cost per call F (us)")
    ax.set_ylim(0, 20)
    ax.set_title("T = F + bytes / BW (BW in TB/s on the bars)", fontsize=10)
    ax.legend(fontsize=7, loc="upper left")
    sizes = [(2**22, ":", "2^22"), (2**24, "-", "2^24"), (2**26, "--", "2^26")]
    for ax, (name, op, title) in zip(
        axes[1:], [("layernorm_grid.csv", "ln bwd", "LayerNorm"), ("rmsnorm.csv", "rms bwd", "RMSNorm")]
    ):
        d = index(rows(name))
        for dtype, color in [("bfloat16", "#d62728"), ("float32", "#9467bd")]:
            for size, ls, label in sizes:
                pts = [
                    (n, float(d[(op, f"{size // n}x{n}", dtype, "ours")]["pct_copy"]))
                    for n in NS
                    if (op, f"{size // n}x{n}", dtype, "ours") in d
                ]
                ax.plot(*zip(*pts), ls=ls, marker="o", ms=3, color=color, label=f"{dtype} {label}")
        ax.axhline(100, color="k", lw=0.8, ls="--")
        ax.axhline(80, color="r", lw=0.6, ls=":")
        ax.set_xscale("log", base=2)
        ax.set_xticks(NS)
        ax.set_xticklabels([str(n) for n in NS], fontsize=7)
        ax.set_ylim(0, 102)
        ax.set_xlabel("N (row length)")
        ax.set_title(f"{title} backward, ours, by size", fontsize=10)
    axes[1].set_ylabel("% of a same-size copy")
    axes[2].legend(fontsize=7, loc="lower right", ncol=2)
    save(
        fig,
        "backward_size",
        machine_note(rows("layernorm_grid.csv")) + " (results/h100/layernorm_grid.csv, rmsnorm.csv)",
    )


def small_batches() -> None:
    """M = 1, 16, 64 rows of 4096: the call's time (do_bench, us) forward and backward."""
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.4), sharey=True)
    k = 0
    for name, pre, title in [("layernorm_grid.csv", "ln", "LayerNorm"), ("rmsnorm.csv", "rms", "RMSNorm")]:
        d = index(rows(name))
        for op in ["fwd", "bwd"]:
            ax = axes[k]
            k += 1
            impls = [i for i in COLORS if any((f"{pre} {op}", f"{m}x4096", "bfloat16", i) in d for m in (1, 16, 64))]
            w = 0.8 / len(impls)
            for i, impl in enumerate(impls):
                xs, ys = [], []
                for x, m in enumerate((1, 16, 64)):
                    r = d.get((f"{pre} {op}", f"{m}x4096", "bfloat16", impl))
                    if r:
                        xs.append(x + (i - (len(impls) - 1) / 2) * w)
                        ys.append(float(r["ms"]) * 1e3)
                ax.bar(xs, ys, width=w, color=COLORS[impl], label=impl)
            ax.set_xticks(range(3))
            ax.set_xticklabels(["1x4096", "16x4096", "64x4096"], fontsize=8)
            ax.set_title(f"{title} {op}, bf16", fontsize=10)
    axes[0].set_ylabel("us per call (events around the call)")
    axes[0].legend(fontsize=7)
    save(fig, "small_batches", machine_note(rows("rmsnorm.csv")) + " (results/h100/layernorm_grid.csv, rmsnorm.csv)")


def ab_steps() -> None:
    """Each tuning step's before -> after (% of a copy), kept and not kept, from docs/figures/ab_steps.csv."""
    with open(HERE / "ab_steps.csv", newline="") as f:
        steps = list(csv.DictReader(f))
    steps = [s for s in steps if s["kept"] == "yes"] + [s for s in steps if s["kept"] != "yes"]
    fig, ax = plt.subplots(figsize=(10, 0.3 * len(steps) + 1.2))
    for y, s in enumerate(steps):
        b, a = float(s["before"]), float(s["after"])
        color = "#2ca02c" if s["kept"] == "yes" else "#d62728"
        ax.annotate("", xy=(a, y), xytext=(b, y), arrowprops=dict(arrowstyle="->", color=color, lw=1.6))
        ax.plot([b], [y], "o", color="#7f7f7f", ms=3)
        ax.text(max(a, b) + 2.0, y, f"{b:g} -> {a:g}", va="center", fontsize=7)
    ax.set_yticks(range(len(steps)))
    ax.set_yticklabels([f"{s['mechanism']}  [{s['case']}]" for s in steps], fontsize=7)
    ax.invert_yaxis()
    ax.set_xlim(35, 118)
    ax.axvline(100, color="k", lw=0.8, ls="--")
    ax.set_xlabel("% of a same-size copy (green: kept, red: not kept)")
    fig.suptitle(
        "What each step gave on an H100: before -> after (the sources: docs/figures/ab_steps.csv)", fontsize=10
    )
    fig.tight_layout()
    fig.savefig(HERE / "ab_steps.png", dpi=130)
    plt.close(fig)


if __name__ == "__main__":
    ladder()
    forward_over_n()
    backward_sizes()
    small_batches()
    ab_steps()
    print("wrote", ", ".join(sorted(p.name for p in HERE.glob("*.png"))))
