"""Before/after for the norm kernels, in one process: the ops built from another checkout's kernels/ ("before",
loaded under other module names) against this checkout's ("after"), at every point of the norm sweep
(benchmarks/rmsnorm.py's grid: N = 256 ... 65536 at M N = 2^22, 2^24, 2^26, and M = 1, 16, 64 at N = 4096),
float32 and bfloat16, for LayerNorm, RMSNorm, add + RMSNorm, add + LayerNorm and RMSNorm + dropout, forward
and backward. For checking that a change of the code's shape left the speed alone.

    python -m benchmarks.norm_ab --before /path/to/other/kernels [--out DIR] [--quick] [--ops add_norm]
        [--private] [--after-first]     (with python -X faulthandler: where a load crashes)
        [--separate]                    (each side in processes of its own, taking turns)

Each point: the two sides timed in turn, three rounds (triton's do_bench each: CUDA events, L2 flushed),
medians; printed as after / before time (1.00: the same; > 1: after is slower). Directions reached through
the pybind modules' forward/backward (their own kernels) call each side's module directly; LayerNorm (the
op's choice of kernels, engine or ladder, which only the registered op makes) and the ones only the
registered ops reach (add + norm backward, add + LayerNorm forward) call torch.ops.course.*, with the side's
torch.library kernels registered again before its timings (helpers.loader._reregister: the last registered
wins). The "before" tree may be in the per-op-folder layout or the flat one (kernels/NAME.cpp, NAME.*.cu).
"""

from __future__ import annotations

import argparse
import json
import statistics
from pathlib import Path

import torch

from benchmarks.rmsnorm import NS, SWEEP_SIZES
from helpers import bench, env, loader

OPS = ("layernorm", "rmsnorm", "add_norm", "norm_dropout")
# Ops an op calls through the dispatcher (their schemas must be defined, their side's kernels registered):
# norm_dropout's backward calls course::dropout_backward and course::rms_norm_backward.
USES = {"norm_dropout": ("dropout", "rmsnorm")}


def before_sources(root: Path, name: str) -> list[Path]:
    folder = root / name
    if folder.is_dir():
        return sorted(p for ext in ("cpp", "cu") for p in folder.glob(f"*.{ext}"))
    return [root / f"{name}.cpp", root / f"{name}.cu"] + sorted(
        p for ext in ("cpp", "cu") for p in root.glob(f"{name}.*.{ext}")
    )


def load_side(before: Path, side: str) -> dict:
    """{op: (module, .so)} of one side only (--separate: the other side is in another process)."""
    mods = {}
    for op in ("dropout", *OPS):
        if side == "before":
            mod = loader.load(f"{op}_before", before_sources(before, op), include_dirs=[before / "solutions", before])
        else:
            mod = loader.load(op)
        mods[op] = (mod, loader.last_build.path)
    return mods


def load_sides(before: Path, private: bool = False) -> dict[str, dict]:
    """{"before": {op: (module, .so)}, "after": ...}: after is this checkout's build (solutions), before the
    other tree's under the name OP_before, with its own solutions and headers first on the include path.
    private: the before side's function-local statics stay its own (g++ shares them between libraries by
    default, as STB_GNU_UNIQUE symbols, whatever the two trees declare)."""
    sides = {"before": {}, "after": {}}
    flags = ["-fno-gnu-unique"] if private else []
    for op in ("dropout", *OPS):
        mod = loader.load(
            f"{op}_before",
            before_sources(before, op),
            include_dirs=[before / "solutions", before],
            extra_cflags=flags,
            extra_cuda_cflags=[f"-Xcompiler={f}" for f in flags],
        )
        sides["before"][op] = (mod, loader.last_build.path)
        mod = loader.load(op)
        sides["after"][op] = (mod, loader.last_build.path)
    return sides


def points(quick: bool) -> list[tuple[int, int]]:
    sizes = SWEEP_SIZES[1:2] if quick else SWEEP_SIZES
    return [(total // n, n) for total in sizes for n in NS] + [(m, 4096) for m in (1, 16, 64)]


def cases(m: int, n: int, dtype: torch.dtype) -> dict:
    """Per op, a function of a side's module returning {what: a call to time} at M x N; a name ending in *
    goes through torch.ops (its side's registrations must be active)."""
    g = torch.Generator(device="cuda").manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, device="cuda", dtype=dtype, generator=g)

    x, r, dy, w, b = randn(m, n), randn(m, n), randn(m, n), randn(n), randn(n)
    shape = [n]

    def layernorm(mod):  # the op (its route: engine or ladder), the same thing in a tree of either layout
        _, mean, rstd = torch.ops.course.layer_norm_forward(x, shape, w, b, 1e-5)
        mask = [True, True, True]
        return {
            "layernorm fwd*": lambda: torch.ops.course.layer_norm_forward(x, shape, w, b, 1e-5),
            "layernorm bwd*": lambda: torch.ops.course.layer_norm_backward(dy, x, shape, mean, rstd, w, b, mask),
        }

    def rmsnorm(mod):
        y, rstd = mod.forward(x, w, None, 2)
        return {
            "rmsnorm fwd": lambda: mod.forward(x, w, None, 2),
            "rmsnorm bwd": lambda: mod.backward(dy, x, rstd, w, 2),
        }

    def add_norm(mod):  # the pybind forward is add + RMSNorm's; the rest through the registered ops
        y, h, rstd = mod.forward(x, r, w, None)
        _, hl, mean, rstd_l = torch.ops.course.add_layer_norm_forward(x, r, shape, w, b, 1e-5)
        mask = [True, True]
        return {
            "add_rms_norm fwd": lambda: mod.forward(x, r, w, None),
            "add_rms_norm bwd*": lambda: torch.ops.course.add_rms_norm_backward(dy, dy, h, shape, rstd, w, mask),
            "add_layer_norm fwd*": lambda: torch.ops.course.add_layer_norm_forward(x, r, shape, w, b, 1e-5),
            "add_layer_norm bwd*": lambda: torch.ops.course.add_layer_norm_backward(
                dy, dy, hl, shape, mean, rstd_l, w, b, [True, True, True]
            ),
        }

    def norm_dropout(mod):
        y, rstd, state = mod.forward(x, w, None, 0.1, True, 1)
        return {
            "rms_norm_dropout fwd": lambda: mod.forward(x, w, None, 0.1, True, 1),
            "rms_norm_dropout bwd": lambda: mod.backward(dy, x, rstd, w, state, 0.1, 2),
        }

    return {"layernorm": layernorm, "rmsnorm": rmsnorm, "add_norm": add_norm, "norm_dropout": norm_dropout}


def measure(sides: dict, quick: bool, rounds: int = 3, rep_ms: int = 50) -> list[dict]:
    rows = []
    active = {}  # op -> the side whose torch.library kernels are registered now

    def activate(side: str, op: str) -> None:
        for name in (*USES.get(op, ()), op):
            if active.get(name) != side:
                loader._reregister(sides[side][name][1])
                active[name] = side

    for dtype in (torch.float32, torch.bfloat16):
        for m, n in points(quick):
            makers = cases(m, n, dtype)
            for op in OPS:
                fns = {}
                for side in ("before", "after"):
                    activate(side, op)
                    fns[side] = makers[op](sides[side][op][0])
                for what in fns["after"]:
                    times = {"before": [], "after": []}
                    for i in range(rounds):
                        for side in ("before", "after") if i % 2 == 0 else ("after", "before"):
                            if what.endswith("*"):
                                activate(side, op)
                            times[side].append(bench.time(fns[side][what], rep_ms=rep_ms).ms)
                    before, after = (statistics.median(times[s]) for s in ("before", "after"))
                    rows.append(
                        dict(
                            what=what.rstrip("*"),
                            shape=f"{m}x{n}",
                            dtype=str(dtype).replace("torch.", ""),
                            before_ms=before,
                            after_ms=after,
                            ratio=after / before,
                        )  # fmt: skip
                    )
            print(f"  {m}x{n} {dtype}", flush=True)
    return rows


def measure_one(mods: dict, quick: bool, rep_ms: int = 50) -> dict[str, float]:
    """One side alone in this process (its registrations are the only ones): {"what|shape|dtype": ms}."""
    times = {}
    for dtype in (torch.float32, torch.bfloat16):
        for m, n in points(quick):
            makers = cases(m, n, dtype)
            for op in OPS:
                for what, fn in makers[op](mods[op][0]).items():
                    key = f"{what.rstrip('*')}|{m}x{n}|{str(dtype).replace('torch.', '')}"
                    times[key] = bench.time(fn, rep_ms=rep_ms).ms
    return times


def measure_separate(argv: list[str], rounds: int = 3) -> list[dict]:
    """The two sides in turns of one process each (before, after, after, before, ...): for a pair of trees
    that cannot share a process. Medians over the rounds, as measure()'s."""
    import subprocess
    import sys

    times = {"before": [], "after": []}
    for i in range(rounds):
        for side in ("before", "after") if i % 2 == 0 else ("after", "before"):
            cmd = [sys.executable, "-m", "benchmarks.norm_ab", *argv, "--side", side]
            out = subprocess.run(cmd, check=True, capture_output=True, text=True).stdout
            times[side].append(json.loads(out.strip().splitlines()[-1]))
            print(f"  round {i + 1} {side}", flush=True)
    rows = []
    for key in times["after"][0]:
        what, shape, dtype = key.split("|")
        before, after = (statistics.median(t[key] for t in times[s]) for s in ("before", "after"))
        rows.append(dict(what=what, shape=shape, dtype=dtype, before_ms=before, after_ms=after, ratio=after / before))
    return rows


def main(argv=None) -> list[dict]:
    global OPS
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--before", type=Path, required=True, help="another checkout's kernels/ folder")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--quick", action="store_true", help="M N = 2^24 and the small batches only")
    ap.add_argument("--private", action="store_true", help="build the before side with -fno-gnu-unique")
    ap.add_argument("--ops", default=",".join(OPS), help="a comma-separated subset of " + ", ".join(OPS))
    ap.add_argument("--after-first", action="store_true", help="load this checkout's ops before the other's")
    ap.add_argument("--separate", action="store_true", help="each side in processes of its own, taking turns")
    ap.add_argument("--side", choices=("before", "after"), help=argparse.SUPPRESS)  # internal: one side, JSON
    args = ap.parse_args(argv)
    ops = tuple(op for op in args.ops.split(",") if op)
    # the ops they call through the dispatcher come along (norm_dropout's backward: rmsnorm's)
    OPS = tuple(dict.fromkeys(u for op in ops for u in (*USES.get(op, ()), op) if u != "dropout"))
    env.bootstrap(solutions=True, quiet=True)
    if args.side:
        print(json.dumps(measure_one(load_side(args.before.resolve(), args.side), args.quick)))
        return []
    if args.separate:
        passed = ["--before", str(args.before.resolve()), "--ops", args.ops] + (["--quick"] if args.quick else [])
        rows = measure_separate(passed)
        return report(rows, args)
    if args.after_first:  # to tell a load-order effect from a clash between the two trees
        for op in ("dropout", *OPS):
            loader.load(op)
    sides = load_sides(args.before.resolve(), args.private)
    rows = measure(sides, args.quick)
    return report(rows, args)


def report(rows: list[dict], args) -> list[dict]:
    worst = sorted(rows, key=lambda r: abs(r["ratio"] - 1), reverse=True)
    outside = [r for r in rows if abs(r["ratio"] - 1) > 0.02]
    print(
        f"{len(rows)} points, after/before: {min(r['ratio'] for r in rows):.3f} - {max(r['ratio'] for r in rows):.3f}"
    )
    print(f"median {statistics.median(r['ratio'] for r in rows):.3f}; outside +-2 %: {len(outside)}")
    for r in worst[:15]:
        print(f"  {r['what']:22} {r['shape']:>11} {r['dtype']:9} {r['before_ms'] * 1e3:9.1f} {r['after_ms'] * 1e3:9.1f} us"
              f"  {r['ratio']:.3f}")  # fmt: skip
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        meta = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "before": str(args.before)}
        (args.out / "norm_ab.json").write_text(json.dumps({"machine": meta, "rows": rows}, indent=1) + "\n")
    return rows


if __name__ == "__main__":
    main()
