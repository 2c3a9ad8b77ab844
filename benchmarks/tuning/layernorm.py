"""Lesson 03 LayerNorm, the tuning candidates side by side (run from the repo root: python3 -m benchmarks.tuning.layernorm).

For 4096x4096, 32768x1024 and 8192x8192 in bfloat16 and float32: our forward v3 and backward v2 under the
`kernel`s worth comparing (kernels/layernorm/layernorm_choices.h), native PyTorch, torch.compile, and the % of a
same-size device copy (CUDA events, L2 flushed). Forward counts 2*M*N elements, backward 3*M*N.
- forward: "auto" (the default), "pipelined" (rows through shared memory by cp.async wherever that applies,
  half/bf16), "registers" (never; float32 always runs that kernel). All give the same bits.
- backward: "auto" (half/bf16 on sm_90+: "bulk_copy_split_barrier"; float32: "cooperative"), "two_kernels"
  (the lesson's backward v2), "cooperative", "bulk_copy", and for float32 "bulk_copy_split_barrier". Every
  kernel gives the same gradients up to rounding, and the same bits on repeated calls.
Candidates measured slower than these at every shape are not in the tree: "auto" would never pick them.
Every measurement, the copy's included, is repeated (--repeat, default 3) in turn with the others
(bench.compare(repeat=...)); the table gives the medians and the range of the timings (the lowest 20th to
the highest 80th percentile), so the spread on one machine is visible next to the differences."""

import argparse
import json
import os
import sys
import time

sys.path.insert(0, ".")
os.environ["COURSE_SOLUTIONS"] = "1"

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.layernorm import EPS, HEADLINE, native_backward  # noqa: E402
from helpers import bench, loader  # noqa: E402

SHAPES = HEADLINE


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--dtypes", default="bfloat16,float32")
    ap.add_argument("--out", default="", help="also write every measurement (JSON) here")
    args = ap.parse_args(argv)
    start = time.time()
    ext = loader.load("layernorm")
    rows = []
    for dtype in (getattr(torch, d) for d in args.dtypes.split(",")):
        for m, n in SHAPES:
            torch._dynamo.reset()
            cfwd = torch.compile(lambda x, w, b: F.layer_norm(x, (n,), w, b, EPS), dynamic=False)
            cbwd = torch.compile(native_backward, dynamic=False)
            x = torch.randn(m, n, device="cuda", dtype=dtype)
            w = torch.randn(n, device="cuda", dtype=dtype)
            b = torch.randn(n, device="cuda", dtype=dtype)
            g = torch.randn_like(x)
            es = x.element_size()
            labels = dict(op="ln fwd", shape=f"{m}x{n}", dtype=str(dtype).replace("torch.", ""))
            fkernels = ("auto", "pipelined", "registers") if es == 2 else ("auto", "registers")
            want_f = ext.forward(x, w, b, EPS, 3)
            for k in fkernels[1:]:
                assert all(torch.equal(p, q) for p, q in zip(ext.forward(x, w, b, EPS, 3, k), want_f)), k
            fwd = {f"ours {k}": (lambda k=k: ext.forward(x, w, b, EPS, 3, k)) for k in fkernels}
            fwd["native"] = lambda: F.layer_norm(x, (n,), w, b, EPS)
            fwd["torch.compile"] = lambda: cfwd(x, w, b)
            _, mean, rstd = want_f
            _, nmean, nrstd = torch.native_layer_norm(x, [n], w, b, EPS)
            want = ext.backward(g, x, mean, rstd, w, 2)
            bkernels = ("auto", "bulk_copy", "cooperative", "two_kernels")
            if es == 4:
                bkernels += ("bulk_copy_split_barrier",)
            for k in bkernels[1:]:  # every kernel gives the same gradients up to rounding
                got = ext.backward(g, x, mean, rstd, w, 2, k)
                for a, e in zip(got, want):
                    torch.testing.assert_close(a.float(), e.float(), rtol=2e-2, atol=2e-2)
                again = ext.backward(g, x, mean, rstd, w, 2, k)  # fixed-order column sums: the same bits
                assert all(torch.equal(p, q) for p, q in zip(got, again)), f"{k} is not deterministic"
            bwd = {f"ours {k}": (lambda k=k: ext.backward(g, x, mean, rstd, w, 2, k)) for k in bkernels}
            bwd["native"] = lambda: native_backward(g, x, nmean, nrstd, w, b)
            bwd["torch.compile"] = lambda: cbwd(g, x, nmean, nrstd, w, b)
            rows += bench.compare(fwd, nbytes=2 * m * n * es, repeat=args.repeat, **labels)
            rows += bench.compare(bwd, nbytes=3 * m * n * es, repeat=args.repeat, **dict(labels, op="ln bwd"))
            print(f"  {m}x{n} {labels['dtype']} done ({time.time() - start:.0f} s)", flush=True)
    if args.out:
        keys = ("op", "shape", "dtype", "impl", "ms", "ms_lo", "ms_hi", "pct_copy", "copy_gbps")
        with open(args.out, "w") as f:
            json.dump([{k: r[k] for k in keys} for r in rows], f, indent=0)
    ref = {(r["op"], r["shape"], r["dtype"], r["impl"]): r["ms"] for r in rows}
    print(
        f"{'op':<8}{'shape':<12}{'dtype':<10}{'impl':<30}{'us':>8}{'(range)':>15}{'% copy':>8}{'x native':>10}{'x compile':>11}"
    )
    for r in rows:
        k = (r["op"], r["shape"], r["dtype"])
        spread = f"({r['ms_lo'] * 1000:.1f}-{r['ms_hi'] * 1000:.1f})"
        print(
            f"{r['op']:<8}{r['shape']:<12}{r['dtype']:<10}{r['impl']:<30}{r['ms'] * 1000:>8.1f}{spread:>15}"
            f"{r['pct_copy']:>7.1f}%{ref[(*k, 'native')] / r['ms']:>9.2f}x{ref[(*k, 'torch.compile')] / r['ms']:>10.2f}x"
        )
    print(f"total {time.time() - start:.0f} s")


if __name__ == "__main__":
    main()
