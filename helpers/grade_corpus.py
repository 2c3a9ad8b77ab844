"""The grader graded: wrong and cheating answers to lesson 08's capstone, each the solution
(kernels/solutions/swiglu/) with a few edits, and the check of helpers.grade that must reject it.

The usual mistakes (a loop one short, a derivative missing a term, a fake of the wrong shape, an error that
names nothing), and the exploits graders elsewhere have met: outputs cached by input, inputs changed in place,
work on another stream, the benchmark's shape special-cased, timers or the reference replaced, a Python kernel
in place of one's own.

    python -m helpers.grade_corpus            # grade every entry this machine can run (a GPU: all of them)
    python -m helpers.grade_corpus NAME ...   # these entries
    python -m helpers.grade_corpus --op OP    # a practice op's corpus (helpers/practice/OP.py CORPUS)

tests/grade/test_grade.py runs each entry's rejecting check (CPU entries in CI, all on a GPU).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

from . import capstone


@dataclasses.dataclass(frozen=True)
class Entry:
    name: str
    why: str  # what is wrong with it
    rejects: str  # the grader's check that must fail
    part: str  # "cpu": a CPU-only machine sees it; "cuda": only a GPU does
    edits: tuple[tuple[str, str, str], ...]  # (file, old, new): old occurs once in the solution's file


def E(name, why, rejects, part, *edits):
    return Entry(name, why, rejects, part, tuple(edits))


_CPU_LOOP = "for (int64_t j = 0; j < h; ++j) out[j] = static_cast<T>(swiglu_y(A(gate[j]), A(up[j])));"
_GRAD_G = "grad_g = gy * u * s * (A(1) + g * (A(1) - s));"
_GLUE_CHECK = """  TORCH_CHECK_VALUE(
      x.size(-1) % 2 == 0,
      "x's last dimension holds gate and up, its two halves, so it must be even; got x of shape ",
      shape_str(x.sizes()));
"""
_FWD_GUARD = "  if (i >= packs) return;\n  const int64_t r = i / hp, c = i - r * hp;\n  const P* row = reinterpret_cast<const P*>(x) + r * 2 * hp;\n  const P g = row[c]"

CORPUS = [
    E(
        "cpu_loop_one_short",
        "the CPU loop stops at h - 1: the last column of every row is never written",
        "forward",
        "cpu",
        ("swiglu.cpu.cpp", _CPU_LOOP, _CPU_LOOP.replace("j < h;", "j < h - 1;")),
    ),
    E(
        "gate_and_up_swapped",
        "silu(up) * gate: the halves the other way round",
        "forward",
        "cpu",
        ("swiglu.cpu.cpp", "swiglu_y(A(gate[j]), A(up[j]))", "swiglu_y(A(up[j]), A(gate[j]))"),
    ),
    E(
        "derivative_missing_a_term",
        "d silu/dg taken as sigmoid(g) alone (the g * s * (1 - s) term forgotten)",
        "backward",
        "cpu",
        ("swiglu_math.h", _GRAD_G, "grad_g = gy * u * s;"),
    ),
    E(
        "grad_up_never_written",
        "backward computes grad_up and never stores it: half of grad_x is whatever the memory held",
        "backward",
        "cpu",
        ("swiglu.cpu.cpp", "grad_up[j] = static_cast<T>(gu);", "(void)gu;"),
    ),
    E(
        "grad_y_ignored",
        "grad_up = silu(g): the incoming gradient grad_y left out of one of the two products",
        "backward",
        "cpu",
        ("swiglu_math.h", "grad_u = gy * g * s;", "grad_u = g * s;"),
    ),
    E(
        "saves_the_output",
        "saves y for backward beside x: a [..., h] tensor kept alive between forward and backward",
        "saves_only_x",
        "cpu",
        ("swiglu.py", "ctx.save_for_backward(x)", "ctx.save_for_backward(x, output)"),
        ("swiglu.py", "(x,) = ctx.saved_tensors", "x, _ = ctx.saved_tensors"),
    ),
    E(
        "fake_of_the_wrong_shape",
        "the fake kernel returns x's shape, [..., 2h], where the kernel returns [..., h]",
        "opcheck",
        "cpu",
        ("swiglu.py", "return x.new_empty(_half_shape(x))", "return x.new_empty(x.shape)"),
    ),
    E(
        "fake_with_wrong_strides",
        "the fake kernel's output is column-major where the kernel's is contiguous",
        "opcheck",
        "cpu",
        (
            "swiglu.py",
            "return x.new_empty(_half_shape(x))",
            "return x.new_empty(_half_shape(x)[::-1]).permute(*reversed(range(x.dim())))",
        ),
    ),
    E(
        "no_fake",
        "no fake kernel for course::swiglu: torch.compile and opcheck cannot trace it",
        "opcheck",
        "cpu",
        ("swiglu.py", '    torch.library.register_fake("course::swiglu", swiglu_fake, lib=lib)\n', ""),
    ),
    E(
        "no_autograd",
        "the autograd formula is never registered: the output does not require grad",
        "backward",
        "cpu",
        (
            "swiglu.py",
            '    torch.library.register_autograd("course::swiglu", backward, setup_context=setup_context, lib=lib)\n',
            "",
        ),
    ),
    E(
        "autocast_to_float32",
        "an autocast rule that casts to float32: under autocast the op returns float32 where native returns bfloat16",
        "autocast",
        "cpu",
        (
            "swiglu.py",
            '    torch.library.register_fake("course::swiglu", swiglu_fake, lib=lib)\n',
            '    torch.library.register_fake("course::swiglu", swiglu_fake, lib=lib)\n'
            '    for device in ("cpu", "cuda"):\n'
            '        torch.library.register_autocast("course::swiglu", device, torch.float32, lib=lib)\n',
        ),
    ),
    E(
        "error_names_nothing",
        "an odd last dimension is refused with a message that does not say which argument is wrong",
        "errors",
        "cpu",
        (
            "swiglu.cpp",
            '"x\'s last dimension holds gate and up, its two halves, so it must be even; got x of shape ",',
            '"the last dimension must be even, got shape ",',
        ),
    ),
    E(
        "odd_width_accepted",
        "no check of the last dimension: an odd one silently drops its last value",
        "errors",
        "cpu",
        ("swiglu.cpp", _GLUE_CHECK, ""),
    ),
    E(
        "strided_input_read_as_contiguous",
        "x used as it comes, not .contiguous(): a transposed or sliced x is read as if it were contiguous",
        "forward",
        "cpu",
        (
            "swiglu.cpp",
            "at::Tensor swiglu_kernel(const at::Tensor& x_in) {\n  check_x(x_in);\n  const at::Tensor x = x_in.contiguous();",
            "at::Tensor swiglu_kernel(const at::Tensor& x_in) {\n  check_x(x_in);\n  const at::Tensor x = x_in;",
        ),
    ),
    E(
        "crashes_on_empty_rows",
        "no early return for an empty output: rows = numel / h divides by zero when h == 0 (the process dies)",
        "forward",
        "cpu",
        (
            "swiglu.cpp",
            "  if (y.numel() == 0) return y;  // also h == 0: nothing to compute, and no launch of 0 blocks\n",
            "",
        ),
    ),
    E(
        "mutates_its_input",
        "silu(gate) written over the gate half of x to save memory: the caller's x changes",
        "inputs_unchanged",
        "cpu",
        (
            "swiglu.cpu.cpp",
            "const T* gate = x + r * 2 * h;\n    const T* up = gate + h;\n    T* out",
            "T* gate = const_cast<T*>(x) + r * 2 * h;\n    const T* up = gate + h;\n    T* out",
        ),
        (
            "swiglu.cpu.cpp",
            _CPU_LOOP,
            "for (int64_t j = 0; j < h; ++j) {\n      gate[j] = static_cast<T>(swiglu_y(A(gate[j]), A(up[j])));\n"
            "      out[j] = gate[j];\n    }",
        ),
    ),
    E(
        "caches_outputs_by_input",
        "remembers the last input's address and returns the last result for it without computing",
        "forward",
        "cpu",
        (
            "swiglu.cpu.cpp",
            "void swiglu_forward_cpu(const T* x, T* y, int64_t begin, int64_t end, int64_t h) {\n  using A = SwigluAcc<T>;\n",
            "void swiglu_forward_cpu(const T* x, T* y, int64_t begin, int64_t end, int64_t h) {\n  using A = SwigluAcc<T>;\n"
            "  static const T* seen = nullptr;\n  static int64_t seen_n = -1;\n  static T memo[1 << 16];\n"
            "  if (begin == 0 && x == seen && seen_n == end * h) {\n"
            "    for (int64_t i = 0; i < seen_n; ++i) y[i] = memo[i];\n    return;\n  }\n"
            "  if (begin == 0 && end * h <= (1 << 16)) {\n    seen = x;\n    seen_n = end * h;\n"
            "    for (int64_t r = 0; r < end; ++r)\n      for (int64_t j = 0; j < h; ++j)\n"
            "        memo[r * h + j] = static_cast<T>(swiglu_y(A(x[r * 2 * h + j]), A(x[r * 2 * h + h + j])));\n  }\n",
        ),
    ),
    E(
        "python_kernel",
        "a Python function that calls torch's own silu registered as the CPU kernel, in place of the C++ one",
        "registered",
        "cpu",
        (
            "swiglu.py",
            "def register(lib: torch.library.Library) -> None:\n",
            "def _native(x):\n    gate, up = x.chunk(2, dim=-1)\n    return torch.nn.functional.silu(gate) * up\n\n\n"
            "def register(lib: torch.library.Library) -> None:\n"
            '    lib.impl("swiglu", _native, "CPU", allow_override=True)\n',
        ),
    ),
    E(
        "timer_patched",
        "time.perf_counter replaced when the module loads (a timed grader would see whatever it returns)",
        "integrity",
        "cpu",
        (
            "swiglu.py",
            "import torch\n",
            "import time\n\nimport torch\n\n_clock = time.perf_counter\ntime.perf_counter = lambda: _clock()\n",
        ),
    ),
    E(
        "reference_patched",
        "torch.nn.functional.silu replaced (the grader's reference uses it; a replaced one can agree with anything)",
        "integrity",
        "cpu",
        (
            "swiglu.py",
            "import torch\n",
            "import torch\n\n_silu = torch.nn.functional.silu\ntorch.nn.functional.silu = lambda t, inplace=False: _silu(t, inplace)\n",
        ),
    ),
    E(
        "cuda_tail_of_a_row_dropped",
        "the 16-byte path taken when h is not a multiple of the Pack's width: the last columns of a row are skipped",
        "forward",
        "cuda",
        ("swiglu.cu", "if (h % N == 0 && aligned16(x) && aligned16(y))", "if (aligned16(x) && aligned16(y))"),
    ),
    E(
        "cuda_last_pack_unwritten",
        "the bound check one short: the last Pack of y is never written (the canary shows through)",
        "forward",
        "cuda",
        ("swiglu.cu", _FWD_GUARD, _FWD_GUARD.replace("if (i >= packs) return;", "if (i >= packs - 1) return;")),
    ),
    E(
        "cuda_32_bit_offset",
        "the row's offset computed in elements as an int: past 2^31 elements it wraps",
        "large",
        "cuda",
        (
            "swiglu.cu",
            "const P* row = reinterpret_cast<const P*>(x) + r * 2 * hp;\n  const P g = row[c]",
            "const P* row = reinterpret_cast<const P*>(x + int(r * 2 * hp * N));\n  const P g = row[c]",
        ),
    ),
    E(
        "cuda_legacy_default_stream",
        "launched on the legacy default stream, not PyTorch's current one: out of order with work queued there",
        "stream",
        "cuda",
        ("swiglu.cu", "kThreads, 0, stream>>>(x, y, packs, h / N);", "kThreads, 0, 0>>>(x, y, packs, h / N);"),
    ),
    E(
        "benchmark_shape_skipped",
        "the benchmark's shape special-cased: for [8192, 2*11008] nothing is computed",
        "speed",
        "cuda",
        (
            "swiglu.cu",
            "void swiglu_forward_cuda(const T* x, T* y, int64_t rows, int64_t h, cudaStream_t stream) {\n",
            "void swiglu_forward_cuda(const T* x, T* y, int64_t rows, int64_t h, cudaStream_t stream) {\n"
            "  if (rows == 8192 && h == 11008) return;\n",
        ),
    ),
]
BY_NAME = {e.name: e for e in CORPUS}


def materialize(entry: Entry, where: Path, op: str = capstone.NAME) -> Path:
    """The entry's folder in `where`: the solution's files of op `op` (default the capstone's; a practice op's
    corpus is in helpers/practice/OP.py) with its edits. An edited file, and every file that
    includes one (so that its includes find the edited one), is a copy; the others are links to the solution's,
    which the loader's cache knows by their real path: only what an entry changes is compiled again."""
    import re

    from . import grade

    src = grade.op_folder(op, solution=True)
    out = Path(where) / entry.name
    out.mkdir(parents=True)
    texts = {p.name: p.read_text() for p in sorted(src.iterdir()) if p.is_file()}
    for file, old, new in entry.edits:
        n = texts[file].count(old)
        if n != 1:
            raise ValueError(f"corpus entry {entry.name}: {old!r} occurs {n} times in {file}, expected once")
        texts[file] = texts[file].replace(old, new)
    copied = {file for file, _, _ in entry.edits}
    grew = True
    while grew:  # the files that include a copied one, directly or not
        includes = {name: set(re.findall(r'#\s*include\s*"([^"]+)"', text)) for name, text in texts.items()}
        more = {name for name, inc in includes.items() if inc & copied} - copied
        copied |= more
        grew = bool(more)
    for name, text in texts.items():
        if name in copied:
            (out / name).write_text(text)
        else:
            (out / name).symlink_to(src / name)
    return out


def main(argv: list[str]) -> int:
    import tempfile

    import torch

    from . import env, grade

    cuda = torch.cuda.is_available() and env.cuda_mode()
    op = capstone.NAME
    if argv and argv[0] == "--op":
        op, argv = argv[1], argv[2:]
    corpus = grade.spec(op).CORPUS if op != capstone.NAME else CORPUS
    by_name = {e.name: e for e in corpus}
    chosen = [by_name[n] for n in argv] if argv else [e for e in corpus if cuda or e.part == "cpu"]
    wrong = []
    with tempfile.TemporaryDirectory(prefix="corpus-") as tmp:
        for entry in chosen:
            report = grade.op(op, folder=materialize(entry, Path(tmp), op), quiet=True)
            failed = [r.check for r in report.failed]
            ok = entry.rejects in failed
            print(
                f"{'✅' if ok else '❌'} {entry.name}: rejected by {', '.join(failed) or 'nothing'} "
                f"(expected {entry.rejects}; {report.seconds:.0f} s)",
                flush=True,
            )
            if not ok:
                wrong.append(entry.name)
    print(f"\n{len(chosen) - len(wrong)} of {len(chosen)} entries rejected for the expected reason.")
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
