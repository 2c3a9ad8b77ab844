"""How long a learner waits for the loader: cold build, cached load (same process and after a kernel
restart), and edit -> rebuild -> reload of one .cu file. Uses lesson 01's op with a fresh cache.

    python -m benchmarks.loader_times --out loader_times.json
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from helpers import env, loader

ROOT = Path(__file__).resolve().parent.parent


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default="")
    ap.add_argument("--edits", type=int, default=3)
    args = ap.parse_args(argv)
    machine = env.bootstrap(quiet=True)
    work = Path(tempfile.mkdtemp(prefix="loader-times-"))
    os.environ["COURSE_CACHE"] = str(work / "cache")
    cu = work / "polynomial.cu"
    shutil.copy(env.KERNELS / "polynomial.cu", cu)
    sources = [env.KERNELS / "polynomial.cpp", cu]
    # A learner's build: CUDA for this GPU; on a machine without one, CUDA for one architecture (a T4's).
    cuda = machine.toolkit is not None
    archs = loader.default_archs() if machine.cuda else ["7.5"]

    def timed_load():
        t0 = time.perf_counter()
        loader.load("polynomial", sources, cuda=cuda, archs=archs)
        return time.perf_counter() - t0

    cold = timed_load()
    cached = timed_load()
    # After a kernel restart: the bootstrap cell (imports torch, reports the machine), then the load cell.
    probe = (
        "import time; t0 = time.perf_counter(); import torch; from helpers import env, loader;"
        "env.bootstrap(quiet=True); t1 = time.perf_counter();"
        f"loader.load('polynomial', [{str(sources[0])!r}, {str(cu)!r}], cuda={cuda}, archs={archs});"
        "print(t1 - t0, time.perf_counter() - t1)"
    )
    out = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True)
    restart_boot, restart_load = map(float, out.stdout.strip().splitlines()[-1].split())
    edits = []
    for i in range(args.edits):
        with open(cu, "a") as f:
            f.write(f"// edit {i}\n")
        edits.append(timed_load())
        assert loader.last_build.compiled == [cu.name], loader.last_build.compiled
    result = dict(
        machine=machine.gpu or "cpu",
        cores=os.cpu_count(),
        mode=machine.mode,
        built_for=("cuda sm_" + "/".join(a.replace(".", "") for a in archs)) if cuda else "cpu",
        torch=machine.torch,
        nvcc=machine.toolkit.version if machine.toolkit else None,
        cold_build_s=round(cold, 2),
        cached_load_same_process_s=round(cached, 4),
        cached_load_after_restart_s=round(restart_load, 3),
        restart_bootstrap_cell_s=round(restart_boot, 2),
        edit_rebuild_reload_s=[round(e, 2) for e in edits],
        edit_rebuild_reload_median_s=round(statistics.median(edits), 2),
    )
    shutil.rmtree(work, ignore_errors=True)
    text = json.dumps(result, indent=1)
    if args.out:
        Path(args.out).write_text(text)
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
