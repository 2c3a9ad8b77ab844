"""The library-conformance table: per course op, what tests/ops/test_library.py found on this machine.

    python -m benchmarks.library_table --out results/<gpu>/library.md   # runs the tests, writes and prints the table

Each cell is "passed/total" for that op's tests of that kind on that device ("-" where the op has none,
e.g. graph capture without a GPU); a failure names the test ids under the table.
"""

from __future__ import annotations

import argparse
import collections
import re
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

import torch

KINDS = {  # test function -> column
    "test_opcheck": "opcheck",
    "test_compile_fullgraph_matches_eager_with_no_graph_break": "compile fullgraph",
    "test_autocast_and_mixed_dtypes_give_what_native_gives": "autocast / mixed dtypes",
    "test_cuda_graph_replays_forward_and_backward_on_new_data": "CUDA graph capture",
    "test_a_second_derivative_is_an_error_naming_the_op": "double backward: clear error",
}
OPS = {"polynomial", "fused_bias_relu", "fused_bias_relu_", "layer_norm"} | {
    "polynomial_backward",
    "fused_bias_relu_bits",
    "fused_bias_relu_backward_bits",
    "layer_norm_forward",
    "layer_norm_backward",
}


def run(junit: Path, workers: int = 0) -> int:
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/ops/test_library.py"]
    cmd += ["-n", str(workers)] if workers else []  # pytest-xdist
    return subprocess.run([*cmd, f"--junitxml={junit}"], env=None).returncode


def table(junit: Path) -> str:
    cells = collections.defaultdict(lambda: [0, 0])  # (device, op, kind) -> [passed, run]
    failed = []
    for case in ET.parse(junit).getroot().iter("testcase"):
        m = re.match(r"(\w+)\[(.*)\]$", case.get("name", ""))
        if not m or m.group(1) not in KINDS:
            continue
        func, tokens = m.group(1), m.group(2).split("-")
        op = next((t for t in tokens if t in OPS), None)
        if op is None:
            continue
        device = "cuda" if "cuda" in tokens or KINDS[func] == "CUDA graph capture" else "cpu"
        if case.find("skipped") is not None:
            continue
        key = (device, op, KINDS[func])
        cells[key][1] += 1
        if case.find("failure") is None and case.find("error") is None:
            cells[key][0] += 1
        else:
            failed.append(case.get("name"))
    devices = sorted({k[0] for k in cells})
    ops = sorted({k[1] for k in cells})
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    lines = [f"tests/ops/test_library.py on {gpu}, torch {torch.__version__} (passed/run per op and check)", ""]
    for device in devices:
        lines += [f"| {device} op | " + " | ".join(KINDS.values()) + " |", "|---" * (len(KINDS) + 1) + "|"]
        for op in ops:
            row = []
            for kind in KINDS.values():
                p, n = cells.get((device, op, kind), (0, 0))
                row.append(f"{p}/{n}" if n else "-")
            lines.append(f"| {op} | " + " | ".join(row) + " |")
        lines.append("")
    if failed:
        lines += ["failed:", *[f"  {f}" for f in failed]]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("-n", type=int, default=0, help="pytest-xdist workers (0: none)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as d:
        junit = Path(d) / "library.xml"
        rc = run(junit, args.n)
        text = table(junit)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    sys.exit(rc)


if __name__ == "__main__":
    main()
