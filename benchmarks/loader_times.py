"""How long a learner waits for the loader, against the course's targets for it (`targets`):

    (a) exercise edit -> self-check verdict   (EXERCISES: a kernel exercise and a glue exercise, whose file has
                                              torch headers: edit it, rebuild, run its check())
    (b) kernel edit -> reload                 (kernels/polynomial/polynomial.cu)
    (c) cold first build of the first op (which precompiles torch's headers) and of each further op
    (d) a cached re-load (same process, and after a kernel restart)

plus where a kernel edit's seconds go on the nvcc side (`nvcc --time`: front end, device compile, host
compile) for the loader's flags and for -O3 host code (what GLUE_OPT's -O1 saves).

    python -m benchmarks.loader_times --out results/<gpu>/loader_times.json

Everything runs on a temporary copy of kernels/ (COURSE_KERNELS) with a private build cache (COURSE_CACHE),
so neither the tracked files nor your cache are touched. Without a GPU the CUDA files are still compiled
(for sm_75, a T4) when nvcc is present; the self-check then runs its CPU part.
"""

from __future__ import annotations

import argparse
import csv
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The exercises whose loop is timed: a kernel exercise (a torch-free header) and a glue exercise (a
# registration, compiled with torch's headers in a file of its own).
EXERCISES = {"exercise": "polynomial_forward", "glue": "square_library"}
FIRST, FURTHER = "polynomial", ["fused_bias_relu", "layernorm"]


def targets(cores: int) -> dict[str, float | None]:
    """The targets, in seconds (None: no target for this many cores)."""
    big = cores >= 16
    return {
        "exercise_edit_to_verdict_s": 5.0 if big else 10.0,
        "glue_edit_to_verdict_s": 10.0 if big else 20.0,
        "kernel_edit_to_reload_s": 5.0 if big else None,
        "further_op_first_build_s": 10.0 if big else None,
    }


def _append(path: Path, i: int) -> None:
    with open(path, "a") as f:
        f.write(f"\n// loader_times edit {i}\n")  # changes the content hash, not the code


def _timed(fn):
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def _child_cpu() -> float:
    t = os.times()
    return t.children_user + t.children_system


def nvcc_phases(src: Path, archs: list[str], host_opt: str | None = None) -> dict:
    """`nvcc --time` for the loader's command on `src` (host_opt replaces its -O level): ms per phase,
    summed over architectures, and the wall and CPU seconds of the whole compile."""
    from helpers import loader

    cmd, _ = loader._nvcc_command(archs, loader._include_dirs([]), [], False)
    if host_opt:
        cmd = [host_opt if a.startswith("-O") else a for a in cmd]
    with tempfile.TemporaryDirectory() as tmp:
        csv_path, obj = Path(tmp, "t.csv"), Path(tmp, "x.o")
        before = os.times()
        t0 = time.perf_counter()
        subprocess.run([*cmd, "--time", str(csv_path), "-c", str(src), "-o", str(obj)], check=True)
        wall = time.perf_counter() - t0
        after = os.times()
        phases: dict[str, float] = {}
        for row in csv.reader(io.StringIO(csv_path.read_text())):
            if len(row) >= 8 and row[6].strip().replace(".", "").isdigit():
                name = row[1].strip()
                phases[name] = round(phases.get(name, 0.0) + float(row[6]), 1)
    cpu = (after.children_user - before.children_user) + (after.children_system - before.children_system)
    return {"flags": " ".join(a for a in cmd if a.startswith("-O")), "wall_s": round(wall, 2),
            "cpu_s": round(cpu, 2), "phases_ms": phases}  # fmt: skip


def nvcc_header_costs(archs: list[str]) -> dict[str, float]:
    """CPU seconds nvcc spends on a one-line .cu that includes only each header common.h and the kernels use
    (nvcc includes cuda_runtime.h in every .cu anyway): what each costs every kernel edit."""
    from helpers import loader

    cmd, _ = loader._nvcc_command(archs, [], [], False)
    costs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for header in ("", "cuda_fp16.h", "cuda_bf16.h", "cooperative_groups.h"):
            src = Path(tmp, "h.cu")
            src.write_text((f"#include <{header}>\n" if header else "") + "int f() { return 1; }\n")
            before = _child_cpu()
            subprocess.run([*cmd, "-c", str(src), "-o", str(Path(tmp, "h.o"))], check=True)
            costs[header or "(nothing)"] = round(_child_cpu() - before, 2)
    return costs


def measure(args) -> dict:
    """Runs with COURSE_KERNELS / COURSE_CACHE already pointing at the temporary copies."""
    from helpers import env, loader

    machine = env.bootstrap(quiet=True)
    kernels, cache = env.KERNELS, Path(os.environ["COURSE_CACHE"])
    cuda = machine.toolkit is not None  # a learner's build: CUDA for this GPU, else for a T4
    archs = loader.default_archs() if machine.cuda else ["7.5"]
    result: dict = dict(
        machine=machine.gpu or "cpu",
        cores=os.cpu_count(),
        mode=machine.mode,
        built_for=("cuda sm_" + "/".join(a.replace(".", "") for a in archs)) if cuda else "cpu",
        torch=machine.torch,
        nvcc=machine.toolkit.version if machine.toolkit else None,
        cxx=loader._compiler_id(loader._cxx()),
        date=time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        load_average_at_start=os.getloadavg()[0],  # other work on the machine stretches wall times
    )

    def build(op, **kw):
        cpu = _child_cpu()
        try:
            seconds, _ = _timed(lambda: loader.load(op, cuda=cuda, archs=archs, **kw))
        except loader.BuildError as e:  # a tree in the middle of an edit: say so, time the rest
            print(f"{op} did not build:\n{e}", file=sys.stderr)
            return dict(s=None, error=str(e).splitlines()[:3])
        b = loader.last_build
        return dict(s=round(seconds, 2), compiler_cpu_s=round(_child_cpu() - cpu, 2), link_s=round(b.link_seconds, 2),
                    compiled=b.compiled, pch_built=b.pch_built, pch=b.pch is not None,
                    tu_s={k: round(v, 2) for k, v in b.tu_seconds.items()})  # fmt: skip

    # (c) cold builds. Without the PCH first (its own cache), then with it: the first op pays for it.
    ops = [FIRST] + [op for op in FURTHER if (kernels / op / f"{op}.cpp").exists()][: args.further]
    if not args.skip_no_pch:
        os.environ.update(COURSE_PCH="0", COURSE_CACHE=str(cache.with_name("cache-no-pch")))
        result["cold_without_pch"] = {op: build(op) for op in ops[:2]}
        os.environ.update(COURSE_PCH="1", COURSE_CACHE=str(cache))
    result["cold_with_pch"] = {op: build(op) for op in ops}
    result["first_op_cold_build_s"] = result["cold_with_pch"][FIRST]["s"]
    further = [result["cold_with_pch"][op]["s"] for op in ops[1:]]
    if further and None not in further:
        result["further_op_first_build_s"] = max(further)

    # (d) cached loads: in this process, and in a new one (a kernel restart: bootstrap cell, then load)
    result["cached_load_same_process_s"] = round(_timed(lambda: loader.load(FIRST, cuda=cuda, archs=archs))[0], 4)
    probe = (
        "import time; t0 = time.perf_counter(); import torch; from helpers import env, loader;"
        "env.bootstrap(quiet=True); t1 = time.perf_counter();"
        f"loader.load({FIRST!r}, cuda={cuda}, archs={archs}); print(t1 - t0, time.perf_counter() - t1)"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    boot, load = map(float, out.stdout.strip().splitlines()[-1].split())
    result.update(cached_load_after_restart_s=round(load, 3), restart_bootstrap_cell_s=round(boot, 2))

    # (b) kernel edit -> reload
    cu = kernels / FIRST / f"{FIRST}.cu"
    if cuda and cu.exists():
        edits = []
        for i in range(args.edits):
            _append(cu, i)
            edits.append(build(FIRST))
        result["kernel_edit_to_reload"] = edits
        result["kernel_edit_to_reload_s"] = statistics.median(e["s"] for e in edits)

    # (a) exercise edit -> verdict, as the learner's self-check cell does it (all parts, this machine's mode),
    # with the loader's defaults for this machine (the precompiled header only where it is on by default)
    import importlib

    if os.environ.pop("COURSE_PCH_DEFAULT", None) == "1":
        os.environ.pop("COURSE_PCH", None)
    for kind, name in EXERCISES.items():
        # COURSE_SOLUTIONS=1: the answer passes, so the whole check runs (the slowest verdict)
        header = next((p for p in (kernels / "solutions").glob(f"{name}.*") if p.is_file()), None)
        if header is None:
            continue
        ex = importlib.import_module(f"helpers.exercises.{name}")
        loader.load(ex.OP)  # the learner has built the op before editing
        runs = []
        for i in range(args.edits):
            _append(header, i)
            t0 = time.perf_counter()
            ext = loader.load(ex.OP)
            b = loader.last_build
            t1 = time.perf_counter()
            try:
                ex.check(ext=ext)
                verdict = "passed"
            except AssertionError:
                verdict = "not yet"
            t2 = time.perf_counter()
            runs.append(dict(s=round(t2 - t0, 2), build_s=round(t1 - t0, 2), link_s=round(b.link_seconds, 2),
                             check_s=round(t2 - t1, 2), compiled=b.compiled, pch=b.pch is not None,
                             verdict=verdict))  # fmt: skip
        result[kind] = f"{name} ({header.name} edited, {ex.OP} rebuilt in {machine.mode} mode)"
        result[f"{kind}_edit_to_verdict"] = runs
        result[f"{kind}_edit_to_verdict_s"] = statistics.median(r["s"] for r in runs)

    result["load_average_at_end"] = os.getloadavg()[0]
    # Where a kernel edit's nvcc seconds go: the loader's flags ("now"), and -O3 host code ("before")
    if cuda and cu.exists():
        result["nvcc_phases"] = {
            "now": nvcc_phases(cu, archs),
            "before (-O3 host code)": nvcc_phases(cu, archs, "-O3"),
        }
        result["nvcc_cpu_s_by_header"] = nvcc_header_costs(archs)
    return result


def table(result: dict) -> str:
    goal = targets(result["cores"])
    lines = [f"{'measure':34} {'seconds':>8} {'target':>8}  verdict", "-" * 64]
    for key in ("first_op_cold_build_s", "further_op_first_build_s", "cached_load_same_process_s",
                "cached_load_after_restart_s", "kernel_edit_to_reload_s", "exercise_edit_to_verdict_s",
                "glue_edit_to_verdict_s"):  # fmt: skip
        if key not in result:
            continue
        t = goal.get(key)
        verdict = "-" if t is None else ("pass" if result[key] <= t else "FAIL")
        target = f"<= {t:g}" if t is not None else "-"
        lines.append(f"{key[:-2]:34} {result[key]:8.3g} {target:>8}  {verdict}")
    for op, b in result.get("cold_with_pch", {}).items():  # where a cold build's seconds go, per source
        parts = ", ".join(f"{k} {v:.1f}" for k, v in sorted(b.get("tu_s", {}).items(), key=lambda kv: -kv[1]))
        lines.append(f"  {op} cold: {b.get('s')} s = compiles ({parts}) + link {b.get('link_s')}")
    lines.append(f"({result['cores']} cores, {result['machine']}, built for {result['built_for']})")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", default="", help="write the JSON here")
    ap.add_argument("--edits", type=int, default=3, help="edits timed per loop (the median is reported)")
    ap.add_argument("--further", type=int, default=2, help="further ops built cold after the first")
    ap.add_argument("--skip-no-pch", action="store_true", help="skip the cold builds without the PCH")
    ap.add_argument("--ref", default="", help="time kernels/ as in this git commit (default: the working tree)")
    ap.add_argument("--inner", default="", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.inner:  # the child: kernels/ and the cache are private copies
        Path(args.inner).write_text(json.dumps(measure(args)))
        return 0
    work = Path(tempfile.mkdtemp(prefix="loader-times-"))
    try:
        if args.ref:
            tar = subprocess.run(["git", "archive", args.ref, "kernels"], cwd=ROOT, capture_output=True, check=True)
            subprocess.run(["tar", "-x", "-C", str(work)], input=tar.stdout, check=True)
        else:
            shutil.copytree(ROOT / "kernels", work / "kernels")
        env = {**os.environ, "COURSE_KERNELS": str(work / "kernels"), "COURSE_CACHE": str(work / "cache"),
               "COURSE_SOLUTIONS": "1", "COURSE_PCH": "1", "COURSE_PCH_DEFAULT": "1"}  # fmt: skip
        inner = [sys.executable, "-m", "benchmarks.loader_times", "--inner", str(work / "out.json")]
        inner += [f"--edits={args.edits}", f"--further={args.further}"] + ["--skip-no-pch"] * args.skip_no_pch
        subprocess.run(inner, cwd=ROOT, env=env, check=True)
        result = json.loads((work / "out.json").read_text())
    finally:
        shutil.rmtree(work, ignore_errors=True)
    result["targets"] = targets(result["cores"])
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text + "\n")
    print(text)
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
