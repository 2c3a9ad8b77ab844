"""How fast is it? Median times, GB/s, and the share of the card's copy bandwidth, from one run.

    t = bench.time(lambda: ext.forward(x, coeffs))          # Timing(median, p20, p80) in ms
    rows = bench.compare({"ours": f, "native": g, "torch.compile": h}, nbytes=2 * x.nbytes,
                         op="poly fwd", shape=x.shape, dtype=x.dtype)
    print(bench.table(rows, baseline="native"))

The timers are the libraries', not copies of them:
* on CUDA, `time` is triton.testing.do_bench: CUDA events around each call, warm-up first, the L2 cache
  flushed before every call, the median and the 20th/80th percentiles (the GPU's time only);
* `wall` is torch.utils.benchmark.Timer.blocked_autorange: the wall clock per call, Python, dispatcher
  and launches included (it synchronizes the GPU); on the CPU `time` is the same thing.
Memory-bound kernels are judged against `copy_gbps(nbytes)`: a device-to-device copy moving the same
number of bytes, timed the same way, in the same process, on the same card. Never time a kernel on zeros
(compressible, and not your data).

A 30 us kernel timed twice in one process can differ by a few percent (clocks, what ran just before), and
so can the copy it is compared with. `compare(..., repeat=3)` times the copy and every implementation in
turn, three times over, and reports the medians: the benchmark suite does that for its headline numbers.

A kernel of a few microseconds is another matter: the events around it also see the launch latency and,
where fn's Python takes longer than the flush before it, the CPU (a Triton op's launch hides behind the flush
in one round and not in the next). `kernel_time` reads the kernels' own durations from torch.profiler
instead (`kernels` lists them one by one, each a median over several calls); on the H100, unchanged 3-5 us
kernels repeat within 0.1 us there, where their event times move by +-11 %.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics

import torch

QUANTILES = (0.5, 0.2, 0.8)  # Timing's ms, lo, hi


@dataclasses.dataclass(frozen=True)
class Timing:
    ms: float  # median
    lo: float  # 20th percentile
    hi: float  # 80th percentile

    def gbps(self, nbytes: int) -> float:
        return nbytes / (self.ms * 1e-3) / 1e9


def _default_device(device) -> str:
    return str(device or ("cuda" if torch.cuda.is_available() else "cpu"))


def graphed(fn):
    """fn captured in a CUDA graph; returns the graph's replay (no arguments). Replaying runs the same
    kernels on the same tensors with no Python, dispatcher or autograd-engine time between them, which is
    how torch.compile(mode="reduce-overhead") and torch.cuda.make_graphed_callables run a training step.
    Time a replay to see the GPU time of a sequence whose CPU time is longer than its GPU time (eager
    forward+backward of a mid-size tensor: the GPU would wait for the CPU, and events would time that)."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):  # warm up off the capture: allocator, cuBLAS and compile caches
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def time(fn, *, device: str | torch.device | None = None, rep_ms: int = 100) -> Timing:
    """Time fn() (no arguments): on CUDA the GPU time by triton.testing.do_bench (L2 flushed before each
    call, about `rep_ms` of calls), elsewhere the wall clock (`wall`). `device` defaults to CUDA when available."""
    if torch.device(_default_device(device)).type != "cuda":
        return wall(fn)
    from triton.testing import do_bench  # torch's CUDA wheels on Linux depend on triton

    return Timing(*do_bench(fn, warmup=25, rep=rep_ms, quantiles=list(QUANTILES)))


def _kernels(fn, calls: int, flush=None) -> dict[str, list[float]]:
    """Durations (us) of the CUDA kernels and memsets of `calls` calls of fn() under torch.profiler, by name,
    flush() run before each call."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA], acc_events=True) as prof:
        for _ in range(calls):
            if flush is not None:
                flush()
            fn()
        torch.cuda.synchronize()
    seen: dict[str, list[float]] = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            seen.setdefault(event.name, []).append(event.device_time)
    return seen


def kernel_time(fn, *, calls: int = 40, flush: bool = True) -> float:
    """The GPU time (ms) of the kernels one call of fn() runs, summed over them: the mean over `calls` calls of
    the durations torch.profiler records for each kernel (CUPTI's, from the kernel's start to its end on
    the GPU), with L2 flushed before every call as `time` does (flush=False: L2 warm). It leaves out what
    `time`'s events also see (the launch latency, gaps between kernels, CPU time the GPU waits for), so use
    it to compare kernels of a few microseconds, and `time` for what a caller waits. The flush's own kernels
    are found by profiling the flush alone and left out by name; a kernel of fn's with the same name would be
    left out too. CUDA only."""
    if not torch.cuda.is_available():
        raise RuntimeError(
            "bench.kernel_time reads CUDA kernel records: it needs a CUDA GPU (use bench.wall on the CPU)"
        )
    cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda") if flush else None
    clear = cache.zero_ if flush else None
    for _ in range(3):  # warm-up: first-call set-up, allocator, autotuning
        fn()
    flush_names = set(_kernels(lambda: None, 2, clear)) if flush else set()
    seen = _kernels(fn, calls, clear)
    total_us = sum(sum(ts) for name, ts in seen.items() if name not in flush_names)
    return total_us / calls / 1e3


def kernels(fn, *, calls: int = 7, flush: bool = True) -> list[tuple[str, float]]:
    """The kernels one call of fn() runs, in launch order: (name, duration in us), each duration the median
    over `calls` calls profiled one at a time (torch.profiler's CUPTI records), L2 flushed before every call
    as `time` does. One profiled call can catch a kernel at a bad moment (a clock change, a first use); the
    median of several does not. Calls whose kernel list differs from the most common one are left out. CUDA
    only."""
    if not torch.cuda.is_available():
        raise RuntimeError("bench.kernels reads CUDA kernel records: it needs a CUDA GPU (use bench.wall on the CPU)")
    cache = torch.empty(256 << 20, dtype=torch.int8, device="cuda") if flush else None
    fn()  # warm-up: first-call set-up, allocator
    runs = []
    for _ in range(calls):
        if cache is not None:
            cache.zero_()
        torch.cuda.synchronize()
        runs.append(_launches(fn))
    names = statistics.mode(tuple(name for name, _ in run) for run in runs)
    kept = [run for run in runs if tuple(name for name, _ in run) == names]
    return [(name, statistics.median(run[i][1] for run in kept)) for i, name in enumerate(names)]


def _launches(fn) -> list[tuple[str, float]]:
    """(name, us) of the CUDA kernels and memsets of one call of fn(), in the order they started on the GPU."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CUDA], acc_events=True) as prof:
        fn()
        torch.cuda.synchronize()
    events = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    events.sort(key=lambda e: e.time_range.start)
    return [(e.name, e.device_time) for e in events]


def wall(fn, *, min_run_time: float = 0.2) -> Timing:
    """Wall-clock time per call of fn() by torch.utils.benchmark.Timer.blocked_autorange (at least
    `min_run_time` seconds of calls, in blocks; the GPU is synchronized around each block), in ms: the
    CPU time around the kernels (Python, autograd, launches) that GPU events do not see."""
    import torch.utils.benchmark as tb

    timer = tb.Timer(stmt="fn()", globals={"fn": fn})
    m = timer.blocked_autorange(min_run_time=min_run_time)
    times = list(m.times)
    while len(times) < 5:  # a slow fn fills min_run_time in one block: a spread needs a few
        times += timer.timeit(m.number_per_run).times
    q = torch.tensor(times, dtype=torch.float64).quantile(torch.tensor(QUANTILES, dtype=torch.float64))
    return Timing(*(float(v) * 1e3 for v in q))


@functools.cache
def _copy_gbps(nbytes: int, device: str) -> float:
    n = max(1, nbytes // 2 // 4)  # a copy reads and writes: bytes moved = 2 * buffer size
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    return time(lambda: dst.copy_(src), device=device).gbps(2 * 4 * n)


def copy_gbps(nbytes: int, device: str | torch.device | None = None) -> float:
    """GB/s of a device-to-device copy that moves `nbytes` (reads + writes) on this card, this run."""
    return _copy_gbps(int(nbytes), _default_device(device))


def compare(fns: dict, *, nbytes: int, device=None, graph: bool = False, repeat: int = 1, **labels) -> list[dict]:
    """Time each fn and return one row per implementation: ms, GB/s, % of copy, and the labels given
    (op=..., shape=..., dtype=...). `nbytes` is the fewest bytes the op must move. graph=True times each
    fn as a CUDA graph replay (see `graphed`; CUDA only, ignored on the CPU). repeat > 1 times the copy
    and then each fn in turn, `repeat` times over, and reports the median of each (ms_lo and ms_hi: the
    lowest 20th and highest 80th percentile of the repeats)."""
    device = _default_device(device)
    if graph and torch.device(device).type == "cuda":
        fns = {impl: graphed(fn) for impl, fn in fns.items()}
    copies, runs = [], {impl: [] for impl in fns}
    for _ in range(max(1, repeat)):
        if repeat > 1:
            _copy_gbps.cache_clear()  # time the copy again in every round
        copies.append(copy_gbps(nbytes, device))
        for impl, fn in fns.items():
            runs[impl].append(time(fn, device=device))
    copy = statistics.median(copies)
    rows = []
    for impl, ts in runs.items():
        t = Timing(statistics.median(t.ms for t in ts), min(t.lo for t in ts), max(t.hi for t in ts))
        rows.append(
            dict(
                labels,
                impl=impl,
                device=device,
                ms=t.ms,
                ms_lo=t.lo,
                ms_hi=t.hi,
                nbytes=int(nbytes),
                gbps=t.gbps(nbytes),
                copy_gbps=copy,
                pct_copy=100 * t.gbps(nbytes) / copy,
            )
        )
    return rows


def _text(value) -> str:
    if isinstance(value, (tuple, list, torch.Size)):
        return "x".join(map(str, value))
    return str(value if value is not None else "").replace("torch.", "")


def table(
    rows: list[dict],
    baseline: str | tuple[str, ...] | None = None,
    impls: tuple[str, ...] | None = None,
    spread: bool = False,
) -> str:
    """A plain-text table of `compare` rows, one line per row: op, shape, dtype, impl, ms, GB/s, % of copy.
    With `baseline` (an impl, or several), a column of speed-ups over each: its ms / this row's ms for
    the same op, shape and dtype. With `impls`, only the rows of those impls are listed (the baselines are
    still looked up among all rows): table(rows, ("native", "torch.compile"), impls=("ours",)). With
    `spread`, the range of the timings (ms_lo to ms_hi) after the median."""
    baselines = (baseline,) if isinstance(baseline, str) else tuple(baseline or ())

    def key(r):
        return tuple(_text(r.get(k)) for k in ("op", "shape", "dtype"))

    def speedup(b):
        return lambda r: f"{base[key(r), b] / r['ms']:.2f}x" if (key(r), b) in base else ""

    base = {(key(r), r["impl"]): r["ms"] for r in rows if r["impl"] in baselines}
    columns = [  # (header, cell, alignment)
        ("op", lambda r: key(r)[0], "<"),
        ("shape", lambda r: key(r)[1], "<"),
        ("dtype", lambda r: key(r)[2], "<"),
        ("impl", lambda r: str(r["impl"]), "<"),
        ("ms", lambda r: f"{r['ms']:.4f}", ">"),
    ]
    if spread:
        columns.append(("(range)", lambda r: f"({r['ms_lo']:.4f}-{r['ms_hi']:.4f})", ">"))
    columns += [("GB/s", lambda r: f"{r['gbps']:.0f}", ">"), ("% copy", lambda r: f"{r['pct_copy']:.1f}%", ">")]
    columns += [(f"x {b}", speedup(b), ">") for b in baselines]
    cells = [[cell(r) for _, cell, _ in columns] for r in rows if impls is None or r["impl"] in impls]
    widths = [max([len(head), *(len(c[i]) for c in cells)]) for i, (head, _, _) in enumerate(columns)]

    def line(values):
        return "  ".join(f"{v:{align}{w}}" for v, (_, _, align), w in zip(values, columns, widths)).rstrip()

    return "\n".join([line([head for head, _, _ in columns])] + [line(c) for c in cells])
