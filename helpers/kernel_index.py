"""The kernel index: every version a kernels/ file's header lists, as one table (kernels/README.md).

    python -m helpers.kernel_index            # rewrites kernels/README.md from the headers
    python -m helpers.kernel_index --check    # exits 1 if it is stale or a header names what does not exist

A kernel file opens with a comment block whose index lines read

    //   forward v2   forward_v2_kernel / poly_forward_v2: one 16-byte Pack per thread ...
    //   LABEL        KERNELS / LAUNCHER: why it is faster (continued on lines indented further)

LABEL is the version ("v2", "forward v3", "backward v2, bulk copy"), then two or more spaces, then the
kernels (names ending in _kernel) and the launcher that runs them, up to the first ": ". Every name there must
exist in kernels/ (a kernel as a __global__ function, a launcher as a function); `problems()` lists what does
not, and tests/infrastructure/test_kernel_index.py fails on it.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from pathlib import Path

from . import env

KERNELS = env.KERNELS
OUT = KERNELS / "README.md"

_LABEL = re.compile(r"^//\s{2,}((?:[a-z][a-z ]*\s)?v\d+(?:,[a-z0-9 +-]+)?)\s{2,}(\S.*)$")
_IDENT = re.compile(r"\b[a-z_][a-z0-9_]*\b")
_NOT_LAUNCHERS = {"and", "or", "in", "with", "then", "the", "its", "of", "by", "on", "for", "a", "yours", "from"}


@dataclasses.dataclass
class Entry:
    file: str  # relative to kernels/
    label: str  # "forward v2"
    kernels: list[str]
    launchers: list[str]
    why: str  # the first sentence of the description


def _split_head(text: str) -> tuple[str, str]:
    """text split at its first ": " outside parentheses: (the names, the description)."""
    depth = 0
    for i, c in enumerate(text):
        depth += (c == "(") - (c == ")")
        if c == ":" and depth == 0 and text[i + 1 : i + 2] in (" ", ""):
            return text[:i], text[i + 1 :]
    return text, ""


def _header(path: Path) -> list[str]:
    lines = path.read_text(errors="replace").splitlines()
    return lines[: next((i for i, line in enumerate(lines) if not line.startswith("//")), len(lines))]


def entries(root: Path = KERNELS) -> list[Entry]:
    """The index lines of every .cu/.cuh/.h header under root's op folders (not exercises/ or solutions/)."""
    out = []
    for path in sorted(p for ext in ("cu", "cuh", "h") for p in root.glob(f"*/*.{ext}")):
        if path.parent.name in ("exercises", "solutions"):
            continue
        lines = _header(path)
        for i, line in enumerate(lines):
            m = _LABEL.match(line)
            if not m:
                continue
            indent = len(line[2:]) - len(line[2:].lstrip())  # the label's; continuation lines go deeper
            text = m.group(2)
            for more in lines[i + 1 :]:  # continuation lines: indented past the label
                body = more[2:]
                if not body.strip() or _LABEL.match(more) or len(body) - len(body.lstrip()) <= indent:
                    break
                text += " " + body.strip()
            head, why = _split_head(text)
            names = [n for n in _IDENT.findall(re.sub(r"\([^)]*\)|<[^>]*>", " ", head)) if "_" in n]
            kernels = [n for n in names if n.endswith("_kernel")]
            launchers = [n for n in names if not n.endswith("_kernel") and n not in _NOT_LAUNCHERS]
            first = re.split(r"(?<=\.)\s", why.strip(), maxsplit=1)[0]
            first = first if len(first) <= 140 else first[:139].rsplit(" ", 1)[0] + " …"
            out.append(Entry(str(path.relative_to(root)), m.group(1).strip(), kernels, launchers, first))
    return out


def _sources(root: Path) -> str:
    files = [p for ext in ("cu", "cuh", "h", "cpp") for p in root.rglob(f"*.{ext}")]
    return "\n".join(re.sub(r"//.*", "", p.read_text(errors="replace")) for p in sorted(files))


def problems(root: Path = KERNELS) -> list[str]:
    """Every name an index line gives that kernels/ lacks: a kernel must be a __global__ function, a launcher
    a function name in some source (outside comments)."""
    text = _sources(root)
    found = []
    for e in entries(root):
        for k in e.kernels:
            if not re.search(rf"__global__[^;{{}}]*?\bvoid\b[^;{{}}]*?\b{k}\s*\(", text):
                found.append(f"{e.file}: '{e.label}' names the kernel {k}, which no __global__ function is")
        for f in e.launchers:
            if not re.search(rf"\b{f}\s*\(", text):  # a launcher: any function of that name (declared, defined)
                found.append(f"{e.file}: '{e.label}' names {f}, which kernels/ does not define")
    return found


def table(root: Path = KERNELS) -> str:
    rows = [
        "# Kernel index",
        "",
        "Every version the kernel files' headers list: op (its folder), version, the kernels that run, the launcher",
        "that runs them, and the first clause of why. Written by `python -m helpers.kernel_index` from the headers;",
        "a test fails when it is stale or a header names a kernel or launcher that does not exist.",
        "",
        "| op | file | version | kernels | launcher | why |",
        "|---|---|---|---|---|---|",
    ]
    for e in entries(root):
        op, file = e.file.split("/", 1)
        kernels = ", ".join(f"`{k}`" for k in dict.fromkeys(e.kernels)) or "-"
        launchers = ", ".join(f"`{f}`" for f in dict.fromkeys(e.launchers)) or "-"
        why = e.why.replace("|", "\\|")
        rows.append(f"| {op} | {file} | {e.label} | {kernels} | {launchers} | {why} |")
    return "\n".join(rows) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    text, bad = table(), problems()
    for line in bad:
        print(line, file=sys.stderr)
    if "--check" in argv:
        stale = not OUT.is_file() or OUT.read_text() != text
        if stale:
            print(f"{OUT} is stale: run python -m helpers.kernel_index", file=sys.stderr)
        return int(stale or bool(bad))
    OUT.write_text(text)
    print(f"wrote {OUT} ({len(entries())} versions)")
    return int(bool(bad))


if __name__ == "__main__":
    sys.exit(main())
