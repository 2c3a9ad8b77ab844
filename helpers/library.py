"""Lesson 04's helpers around torch.library: what the notebook needs that is not the lesson's subject.

A Python registration (register_fake, register_autograd, ...) made with lib=... lasts as long as the Library:

    lib = library.fresh("square fake kernels")  # a Library fragment of the namespace `course`; asking again for
                                                # the same key destroys the earlier one and its registrations
                                                # first, so a re-run cell registers again instead of raising

For the notebook:

    library.explain(fn, x)                      # torch._dynamo.explain, summed up: graphs, their ops, breaks, why
    library.try_fullgraph(fn, x)                # torch.compile(fn, fullgraph=True)(x), or the error's first lines
    library.kernels("course::polynomial")       # the dispatcher's table for an op: keys with a kernel, and where
    library.opcheck(op, samples)                # torch.library.opcheck on each sample, one line per sample
    library.first_lines(error)                  # a caught exception's first lines (a failure the notebook expects)
    with library.calls("course::square_backward") as n: ...   # how often an op ran inside (n.count)
    replay, out = library.captured(step)        # step() captured in a CUDA graph
    mod = library.import_kernel("polynomial_triton")   # kernels/polynomial/polynomial_triton.py, executed afresh
    library.rerun_demo()                        # pytorch#80865 in child processes: a C++ op's library loaded twice
    library.show(fn)                            # a Python function's source, with its file and line numbers
    op = library.polynomial_custom_op(ext)      # lesson 04's Python route (sections 3-5) in one call, for 04b
    library.head("common/library.h")                   # the comment block a kernels/ file opens with
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import dataclasses
import importlib.util
import inspect
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import torch

from . import env, loader

NAMESPACE = "course"
# torch.library.opcheck's four tests; the last (traced and compiled with dynamic shapes, forward and backward) is
# most of its time, so the checks that run many samples run it on the one that matters and the other three on all.
OPCHECK_TESTS = ("test_schema", "test_autograd_registration", "test_faketensor", "test_aot_dispatch_dynamic")
_LIBRARIES: dict[str, torch.library.Library] = {}


def fresh(key: str, namespace: str = NAMESPACE) -> torch.library.Library:
    """A new torch.library.Library(namespace, "FRAGMENT") for Python registrations (register_fake,
    register_autograd, register_autocast with lib=...). A registration made with lib=... lasts as long as the
    Library: this one is kept under `key` until fresh(key) is called again, which destroys it first, so the
    same registrations can be made again (a second register_fake for one op raises otherwise)."""
    old = _LIBRARIES.pop(key, None)
    if old is not None:
        old._destroy()  # what dropping the last reference does, now rather than at garbage collection
    _forget_dispatch_caches()
    _LIBRARIES[key] = torch.library.Library(namespace, "FRAGMENT")
    return _LIBRARIES[key]


def _forget_dispatch_caches() -> None:
    """PyTorch's Python dispatcher (which torch.compile and opcheck trace through) caches, per op, which kernel
    serves each dispatch key, and does not notice kernels registered or removed later: an Autograd kernel
    registered after an op was first traced would be skipped there. Empty those caches (they refill lazily),
    as torch.export does after it changes an op's kernels."""
    for op in list(torch._ops.get_cached_ops()):
        op._dispatch_cache.clear()
    torch._ops.reset_cached_ops()


def first_lines(error: BaseException, n: int = 2, width: int = 200) -> str:
    """`TypeName: first line` and up to n-1 more non-empty lines of the message, each cut at `width`."""
    # torch's OpCheckError ends with "(scroll up for stack trace)": a caught error has no trace to scroll to
    text = str(error).replace(" (scroll up for stack trace)", "")
    lines = [line.strip() for line in text.splitlines() if line.strip()] or [""]
    lines = [line if len(line) <= width else line[: width - 3] + "..." for line in lines[:n]]
    return f"{type(error).__name__}: " + "\n    ".join(lines)


def explain(fn, *args, label: str | None = None) -> int:
    """Run torch._dynamo.explain(fn)(*args) and print how many graphs Dynamo captured, the operations in each,
    how many graph breaks there were and the first line of each reason. Returns the number of graph breaks."""
    torch._dynamo.reset()
    with _quiet_warnings():
        result = torch._dynamo.explain(fn)(*args)
    name = label or getattr(fn, "__name__", "fn")
    print(f"{name}: {result.graph_count} graph(s), {result.graph_break_count} graph break(s)")
    for i, graph in enumerate(result.graphs, 1):
        ops = [_target_name(n.target) for n in graph.graph.nodes if n.op in ("call_function", "call_method")]
        print(f"  graph {i}: {', '.join(ops) or '(no operations)'}")
    for i, b in enumerate(result.break_reasons, 1):
        reason = str(b.reason).splitlines()
        detail = next((r.strip() for r in reason[1:] if "Explanation" in r), "")
        print(f"  break {i}: {reason[0].strip()}" + (f"\n    {detail[:220]}" if detail else ""))
    return result.graph_break_count


def try_fullgraph(fn, *args) -> None:
    """torch.compile(fn, fullgraph=True)(*args): prints "compiled", or the first lines of the error it raises
    (any graph break is one)."""
    torch._dynamo.reset()
    try:
        with _quiet_warnings():
            torch.compile(fn, fullgraph=True)(*args)
    except Exception as e:
        print("torch.compile(fullgraph=True):", first_lines(e, 2, width=330))
        return
    print("torch.compile(fullgraph=True): compiled")


def _target_name(target) -> str:
    if isinstance(target, str):
        return target
    if isinstance(target, torch._ops.OpOverload):
        return f"torch.ops.{target.namespace}.{target._opname}"
    return getattr(target, "__name__", str(target))


@contextlib.contextmanager
def _quiet_warnings():
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def kernels(qualname: str) -> None:
    """Print an op's schema and the dispatcher's table: one line per dispatch key with a kernel, and where it
    was registered (a C++ file and line, or "Python, torch.library")."""
    from torch._library.custom_ops import _maybe_get_opdef
    from torch._library.simple_registry import singleton

    opdef = _maybe_get_opdef(qualname)  # an op made by custom_op keeps its fake kernel there
    has_fake = (opdef._abstract_fn if opdef is not None else singleton.find(qualname).fake_impl.kernel) is not None
    namespace, name = qualname.split("::")
    print(getattr(getattr(torch.ops, namespace), name).default._schema)
    root = str(env.REPO_ROOT) + "/"
    for line in torch._C._dispatch_dump(qualname).splitlines():
        if ": registered at " not in line or line.startswith(("schema", "debug")):
            continue
        key, where = line.split(": registered at ", 1)
        key = key.replace(" (inactive)", " (replaced)")  # an earlier build's kernel, overridden by a later one
        where = where.split(" :: ")[0].replace(root, "")
        if "torch/library.py" in where or "torch/_library/" in where:
            where = "Python, torch.library"
            if key == "Meta":
                where += " (the fake kernel)" if has_fake else " (raises: no fake kernel registered yet)"
        print(f"  {key:<34} {where}")
    if not has_fake:
        print("  (no fake kernel yet: torch.compile cannot trace it)")


def _describe(args) -> str:
    def one(a):
        if isinstance(a, torch.Tensor):
            layout = "" if a.is_contiguous() else ", not contiguous"
            grad = ", requires_grad" if a.requires_grad else ""
            return f"{'x'.join(map(str, a.shape)) or 'scalar'} {str(a.dtype)[6:]}{layout}{grad}"
        return repr(a)

    return "(" + "; ".join(one(a) for a in args) + ")"


def opcheck(op, samples, test_utils=None) -> None:
    """torch.library.opcheck(op, args) for each argument tuple in `samples`, printing one line per sample
    with each test's result. Raises the first failure (torch's OpCheckError, which names the test)."""
    tests = test_utils or torch.library._OPCHECK_DEFAULT_UTILS
    name = getattr(op, "_qualname", None) or getattr(op, "_name", None) or str(op)
    print(f"opcheck {name}: {', '.join(tests)}")
    for args in samples:
        with _quiet_warnings():
            results = torch.library.opcheck(op, args, test_utils=tests)
        status = "all passed" if set(results.values()) == {"SUCCESS"} else str(results)
        print(f"  {_describe(args)}: {status}")


class _Counter(torch.utils._python_dispatch.TorchDispatchMode):
    def __init__(self, qualname: str):
        super().__init__()
        self.name = qualname
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func._schema.name == self.name:
            self.count += 1
        return func(*args, **(kwargs or {}))


@contextlib.contextmanager
def calls(qualname: str):
    """with calls("course::square_backward") as n: ... then n.count is how many times that op ran inside the
    block (through the dispatcher: also inside autograd's backward, on any device)."""
    counter = _Counter(qualname)
    with counter:
        yield counter


def show(fn) -> None:
    """Print a Python function's (or class's, or Triton kernel's) source with its file and line numbers."""
    fn = inspect.unwrap(getattr(fn, "fn", fn))  # a @triton.jit kernel keeps the Python function it was made from
    lines, start = inspect.getsourcelines(fn)
    path = Path(inspect.getsourcefile(fn)).resolve()
    try:
        path = path.relative_to(env.REPO_ROOT)
    except ValueError:
        pass
    print(f"# {path}, lines {start}-{start + len(lines) - 1}")
    for i, line in enumerate(lines):
        print(f"{start + i:4d}  {line.rstrip()}")


def import_kernel(name: str):
    """kernels/OP/NAME.py (a kernel written in Python, e.g. Triton, in the folder of the op it implements)
    executed afresh as the module NAME: re-running the cell picks up an edit."""
    found = sorted(loader.KERNELS.glob(f"*/{name}.py"))
    if len(found) != 1:
        raise FileNotFoundError(f"kernels/*/{name}.py: found {[str(p) for p in found] or 'none'}")
    path = found[0]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # as an import would (Triton looks a kernel's module up)
    spec.loader.exec_module(module)
    return module


def captured(fn):
    """fn() (no arguments; it returns tensors) captured in a CUDA graph, after a few warm-up calls on a side
    stream, as torch.cuda.graph's documentation does. Returns (replay, outputs): replay() runs the captured
    kernels again, on the same input tensors, writing the same output tensors."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        outputs = fn()
    return graph.replay, outputs


def polynomial_custom_op(ext, name: str = "lesson04::polynomial"):
    """Lesson 04's Python route, its sections 3-5 in one call (the second sitting, 04b, starts from it):
    lesson 01's pybind forward `ext.forward` made the op `name` by torch.library.custom_op, with its fake
    kernel (register_fake) and its autograd formula (register_autograd, backward through
    course::polynomial_backward). Calling it again makes the op afresh: custom_op replaces an op of the same
    name, and the new one gets its registrations again. Returns the op."""
    from .ops import polynomial as poly

    poly.register()  # course::polynomial_backward and its fake kernel, which the backward calls

    # The schema is written out: this module's annotations are strings (from __future__ import annotations).
    @torch.library.custom_op(name, mutates_args=(), schema="(Tensor x, Tensor coeffs) -> Tensor")
    def polynomial(x, coeffs):
        return ext.forward(x, coeffs)

    @polynomial.register_fake
    def _(x, coeffs):
        torch._check(coeffs.shape == (4,), lambda: f"coeffs must have shape [4], got {list(coeffs.shape)}")
        return x.new_empty(x.shape)  # new, contiguous, of x's dtype and device: what ext.forward returns

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(*inputs)

    def backward(ctx, grad_y):
        x, coeffs = ctx.saved_tensors
        need_x, need_coeffs = ctx.needs_input_grad
        grad_x, grad_coeffs = torch.ops.course.polynomial_backward(grad_y, x, coeffs, need_coeffs)
        return (grad_x if need_x else None), (grad_coeffs if need_coeffs else None)

    polynomial.register_autograd(backward, setup_context=setup_context)
    return polynomial


def head(file: str) -> None:
    """Print the comment block a kernels/ file opens with (what it is, and why)."""
    lines = (loader.KERNELS / file).read_text().splitlines()
    end = next((i for i, line in enumerate(lines) if not line.startswith("//")), len(lines))
    print(f"// kernels/{file}, lines 1-{end}")
    print("\n".join(lines[:end]))


# --------------------------------------------------------------------------------------------------
# pytorch#80865: what re-running a cell that loads a rebuilt C++ op does, in a subprocess
# --------------------------------------------------------------------------------------------------

RERUN_SOURCE = """\
// One op and its CPU kernel, x + VALUE, registered two ways (lesson 04b, section 6).
#include <ATen/ATen.h>

at::Tensor rerun_demo(const at::Tensor& x) { return x + VALUE; }

#ifdef COURSE_DEFINE  // the course's way: kernels/common/library.h
#include "common/library.h"
COURSE_LIBRARY(m) { define(m, "rerun_demo(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(course, CPU, m) { m.impl("rerun_demo", &rerun_demo); }
#else  // the usual way
#include <torch/library.h>
TORCH_LIBRARY(lesson04_rerun, m) { m.def("rerun_demo(Tensor x) -> Tensor"); }
TORCH_LIBRARY_IMPL(lesson04_rerun, CPU, m) { m.impl("rerun_demo", &rerun_demo); }
#endif
"""

_LOAD_TWICE = """\
import sys, torch
namespace, first, second = sys.argv[1:]
op = lambda: getattr(getattr(torch.ops, namespace), "rerun_demo")(torch.zeros(1)).item()
torch.ops.load_library(first)
print(f"first build loaded: rerun_demo(0) = {op()}", flush=True)
torch.ops.load_library(second)
print(f"second build loaded: rerun_demo(0) = {op()}", flush=True)
"""


@dataclasses.dataclass
class RerunResult:
    label: str
    returncode: int
    stdout: str
    stderr: str

    @property
    def died(self) -> bool:
        return self.returncode != 0

    def summary(self) -> str:
        if self.returncode < 0:
            how = f"the process died ({signal.Signals(-self.returncode).name})"
        elif self.returncode:
            how = f"the process exited with status {self.returncode}"
        else:
            how = "the process survived"
        out = [f"{self.label}: {how}"] + [f"  {line}" for line in self.stdout.splitlines()]
        why = [line.strip() for line in self.stderr.splitlines() if "what()" in line or "Overriding" in line]
        out += [f"  stderr: {line[:230]}" for line in why[:1]]
        return "\n".join(out)


def _build_demo(out: Path, value: int, course_define: bool) -> Path:
    so = out / f"rerun_demo_{'define' if course_define else 'naive'}_{value}.so"
    if so.exists():
        return so
    src = out / "rerun_demo.cpp"
    flags = loader._torch_flags(False, [], False)  # the glue's flags (-O1)
    lib_dirs = loader._torch_paths(False)[1]
    cmd = [*flags, f"-DVALUE={value}", f"-I{loader.KERNELS}", *(["-DCOURSE_DEFINE"] if course_define else [])]
    libs = [*[f"-L{p}" for p in lib_dirs], f"-Wl,-rpath,{lib_dirs[0]}", "-lc10", "-ltorch", "-ltorch_cpu"]
    # written under a name of this process's and renamed: several processes (parallel tests) may build it at once
    loader._atomic(
        so, lambda tmp: loader._run([*cmd, "-shared", str(src), "-o", str(tmp), *libs], "compiling the re-run demo")
    )
    return so


def rerun_demo() -> list[RerunResult]:
    """Build RERUN_SOURCE three times (the usual TORCH_LIBRARY; the course's define() with VALUE 1 and with
    VALUE 2: an edit), about 5 s each the first time, cached afterwards, then in a fresh Python process
    each: load a build of the op and then another, as re-running a cell after an edit and a rebuild does.
    Returns what happened to each process (the notebook's own process loads nothing)."""
    out = env.cache_root() / "rerun_demo" / loader._digest(RERUN_SOURCE, torch.__version__)[:16]
    out.mkdir(parents=True, exist_ok=True)
    src = out / "rerun_demo.cpp"
    if not src.exists() or src.read_text() != RERUN_SOURCE:
        loader._atomic(src, lambda tmp: tmp.write_text(RERUN_SOURCE))
    jobs = [(1, False), (1, True), (2, True)]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        naive, define1, define2 = pool.map(lambda j: _build_demo(out, *j), jobs)
    copy = out / "rerun_demo_naive_1_rebuilt.so"  # the same library, rebuilt: a new file, loaded again
    if not copy.exists():
        loader._atomic(copy, lambda tmp: shutil.copy(naive, tmp))
    results = []
    for label, ns, first, second in [
        ("TORCH_LIBRARY, loaded twice", "lesson04_rerun", naive, copy),
        ("kernels/common/library.h's define(), then an edited build", "course", define1, define2),
    ]:
        p = subprocess.run(
            [sys.executable, "-c", _LOAD_TWICE, ns, str(first), str(second)],
            capture_output=True,
            text=True,
            timeout=300,
        )
        results.append(RerunResult(label, p.returncode, p.stdout, p.stderr))
    return results
