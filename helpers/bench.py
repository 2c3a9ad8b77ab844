"""How fast is it? Median times, GB/s, and the share of the card's copy bandwidth, from one run.

    t = bench.time(lambda: ext.forward(x, coeffs))          # Timing(median, p20, p80) in ms
    rows = bench.compare({"ours": f, "native": g, "torch.compile": h}, nbytes=2 * x.nbytes,
                         op="poly fwd", shape=x.shape, dtype=x.dtype)

On CUDA, `time` is triton.testing.do_bench: CUDA events around each call, warm-up first, the L2 cache
flushed before every call, medians and 20th/80th percentiles. Without triton the same loop is done here.
On the CPU it is torch.utils.benchmark's blocked_autorange. Memory-bound kernels are judged against
`copy_gbps(nbytes)`: a device-to-device copy moving the same number of bytes, timed the same way, in
the same process, on the same card. Never time a kernel on zeros (compressible, and not your data).

A 30 us kernel timed twice in one process can differ by a few percent (clocks, what ran just before), and
so can the copy it is compared with. `compare(..., repeat=3)` times the copy and every implementation in
turn, three times over, and reports the medians: the benchmark suite does that for its headline numbers.
"""

from __future__ import annotations

import dataclasses
import functools
import statistics

import torch


@dataclasses.dataclass(frozen=True)
class Timing:
    ms: float  # median
    lo: float  # 20th percentile
    hi: float  # 80th percentile

    def gbps(self, nbytes: int) -> float:
        return nbytes / (self.ms * 1e-3) / 1e9


def _cuda_events(fn, warmup_ms=25, rep_ms=100) -> list[float]:
    flush = torch.empty(256 * 1024 * 1024 // 4, dtype=torch.int32, device="cuda")
    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(5):
        flush.zero_()
        fn()
    end.record()
    torch.cuda.synchronize()
    est = max(start.elapsed_time(end) / 5, 1e-3)
    for _ in range(max(1, int(warmup_ms / est))):
        fn()
    n = max(1, int(rep_ms / est))
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(n)]
    for s, e in zip(starts, ends):
        flush.zero_()
        s.record()
        fn()
        e.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) for s, e in zip(starts, ends)]


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
    """Time fn() (no arguments). `device` defaults to CUDA when available."""
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if torch.device(device).type == "cuda":
        try:
            from triton.testing import do_bench
        except ImportError:
            return _summary(_cuda_events(fn, rep_ms=rep_ms))
        med, lo, hi = do_bench(fn, warmup=25, rep=rep_ms, quantiles=[0.5, 0.2, 0.8])
        return Timing(med, lo, hi)
    import torch.utils.benchmark as tb

    m = tb.Timer(stmt="fn()", globals={"fn": fn}).blocked_autorange(min_run_time=0.2)
    return _summary([t * 1e3 for t in m.times])


def _summary(times_ms: list[float]) -> Timing:
    """Median and 20th/80th percentiles (linear interpolation, so lo <= median <= hi always)."""
    import numpy as np

    lo, med, hi = np.percentile(np.asarray(times_ms, dtype=float), [20, 50, 80])
    return Timing(float(med), float(lo), float(hi))


@functools.cache
def _copy_gbps(nbytes: int, device: str) -> float:
    n = max(1, nbytes // 2 // 4)  # a copy reads and writes: bytes moved = 2 * buffer size
    src = torch.randn(n, device=device)
    dst = torch.empty_like(src)
    return time(lambda: dst.copy_(src), device=device).gbps(2 * 4 * n)


def copy_gbps(nbytes: int, device: str | torch.device | None = None) -> float:
    """GB/s of a device-to-device copy that moves `nbytes` (reads + writes) on this card, this run."""
    device = str(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    return _copy_gbps(int(nbytes), device)


def compare(fns: dict, *, nbytes: int, device=None, graph: bool = False, repeat: int = 1, **labels) -> list[dict]:
    """Time each fn and return one row per implementation: ms, GB/s, % of copy, and the labels given
    (op=..., shape=..., dtype=...). `nbytes` is the fewest bytes the op must move. graph=True times each
    fn as a CUDA graph replay (see `graphed`; CUDA only, ignored on the CPU). repeat > 1 times the copy
    and then each fn in turn, `repeat` times over, and reports the median of each (ms_lo and ms_hi: the
    lowest 20th and highest 80th percentile of the repeats)."""
    device = str(device or ("cuda" if torch.cuda.is_available() else "cpu"))
    if graph and torch.device(device).type == "cuda":
        fns = {impl: graphed(fn) for impl, fn in fns.items()}
    if repeat <= 1:
        copy = copy_gbps(nbytes, device)
        timings = {impl: time(fn, device=device) for impl, fn in fns.items()}
    else:
        copies, runs = [], {impl: [] for impl in fns}
        for _ in range(repeat):
            _copy_gbps.cache_clear()
            copies.append(copy_gbps(nbytes, device))
            for impl, fn in fns.items():
                runs[impl].append(time(fn, device=device))
        copy = statistics.median(copies)
        timings = {
            impl: Timing(statistics.median(t.ms for t in ts), min(t.lo for t in ts), max(t.hi for t in ts))
            for impl, ts in runs.items()
        }
    rows = []
    for impl, t in timings.items():
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


def table(rows: list[dict], baseline: str | None = None) -> str:
    """A plain-text table of `compare` rows; with `baseline`, a column of speed-ups over that impl."""

    def key(r):
        return tuple(str(r.get(k)) for k in ("op", "shape", "dtype"))

    base = {key(r): r["ms"] for r in rows if r["impl"] == baseline}
    head = f"{'op':<18}{'shape':<16}{'dtype':<10}{'impl':<16}{'ms':>9}{'GB/s':>9}{'% copy':>8}"
    out = [head + (f"{'x ' + baseline:>14}" if baseline else "")]
    for r in rows:
        shape = (
            "x".join(map(str, r.get("shape", ())))
            if isinstance(r.get("shape"), (tuple, list, torch.Size))
            else str(r.get("shape", ""))
        )
        dtype = str(r.get("dtype", "")).replace("torch.", "")
        line = f"{str(r.get('op', '')):<18}{shape:<16}{dtype:<10}{r['impl']:<16}{r['ms']:>9.4f}{r['gbps']:>9.0f}{r['pct_copy']:>7.0f}%"
        if baseline and key(r) in base:
            line += f"{base[key(r)] / r['ms']:>13.2f}x"
        out.append(line)
    return "\n".join(out)
