"""How results/h100/norm_backward_timeline_2026-11-26.txt was taken: each block's timeline in backward_bulk_kernel.

Apply the probes first (they are not kept in the tree: the diagnostic build overwrites the first rows of
grad_x with the blocks' %globaltimer readings), then run this on an sm_90 GPU from the repository root:

    git apply results/h100/norm_backward_timeline_probes.patch
    PYTHONPATH=. python results/h100/norm_backward_timeline.py
    git apply -R results/h100/norm_backward_timeline_probes.patch

Per block (thread 0): entry, after the ring's start, each row's stage ready (up to 64 rows), each row done,
and the end; printed relative to the earliest entry, in microseconds."""

import statistics as st

import torch

from helpers import loader

# (the 2026-11-26 txt: commit 8f78399's kernels, "C4 default" and "packs4" = -DRMSNORM_BULK_NARROW_PACKS=4
# -DRMSNORM_BULK_FROM=16384; the probes apply to the tree after it, where those settings changed)
CONFIGS = [
    ("rmsnorm", "default", ["-DRMSNORM_BULK_TRACE"], [(1024, 16384), (512, 32768), (2048, 32768), (256, 65536)]),
    ("layernorm", "default", ["-DRMSNORM_BULK_TRACE"], [(1024, 16384), (512, 32768)]),
]
W = 4 + 2 * 64
for op, name, flags, shapes in CONFIGS:
    e = loader.load(op, extra_cuda_cflags=flags)
    for m, n in shapes:
        x = torch.randn(m, n, device="cuda", dtype=torch.bfloat16)
        w = torch.randn(n, device="cuda", dtype=torch.bfloat16)
        g = torch.randn_like(x)
        if op == "rmsnorm":
            rstd = e.forward(x, w, 1e-5)[1]
            f = lambda: e.backward(g, x, rstd, w)
        else:
            _, mean, rstd = e.forward(x, w, w, 1e-5, 3)
            f = lambda: e.backward(g, x, mean, rstd, w, 2)
        for _ in range(10):
            f()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        a.record()
        dx = f()[0]
        b.record()
        torch.cuda.synchronize()
        total = a.elapsed_time(b) * 1000
        raw = dx.view(-1).view(torch.int64)[: 2000 * W].cpu().tolist()
        blocks = []
        for i in range(2000):
            r = raw[i * W : (i + 1) * W]
            if r[0] <= 0 or r[3] <= 0 or r[3] > 10000 or r[2] < r[0]:
                break
            blocks.append(r)
        t0 = min(r[0] for r in blocks)
        us = lambda t: (t - t0) / 1000
        ends = [us(r[2]) for r in blocks]
        rows = [r[3] for r in blocks]
        first_ready = [us(r[4]) for r in blocks]
        last_done = [us(r[68 + min(r[3], 64) - 1]) for r in blocks]
        steady = [(r[68 + k] - r[68 + k - 1]) / 1000 for r in blocks for k in range(2, min(r[3], 64) - 2)]
        waits = [(r[4 + k] - r[68 + k - 1]) / 1000 for r in blocks for k in range(1, min(r[3], 64))]
        print(
            f"\n{op} {name} bf16 {m}x{n}: {len(blocks)} blocks, rows/block {min(rows)}-{max(rows)}, event total {total:.1f} us, kernel span {max(ends):.1f} us"
        )
        print(
            f"  entry spread {max(us(r[0]) for r in blocks):.2f} us; ring started {st.median(us(r[1]) for r in blocks):.2f}; first row ready med {st.median(first_ready):.2f} max {max(first_ready):.2f}"
        )
        print(
            f"  per row (done-done) med {st.median(steady):.2f} us p10 {sorted(steady)[len(steady) // 10]:.2f} p90 {sorted(steady)[9 * len(steady) // 10]:.2f}; ready-after-prev-done med {st.median(waits):.3f} (>0.05 us in {sum(w > 0.05 for w in waits)}/{len(waits)})"
        )
        print(
            f"  last row done: min {min(last_done):.1f} med {st.median(last_done):.1f} max {max(last_done):.1f}; end (partials written) min {min(ends):.1f} max {max(ends):.1f}"
        )
        c0 = blocks[0]
        k = min(c0[3], 64)
        print("  block 0 ready:", " ".join(f"{us(c0[4 + i]):.1f}" for i in range(k)))
        print("  block 0 done: ", " ".join(f"{us(c0[68 + i]):.1f}" for i in range(k)))
