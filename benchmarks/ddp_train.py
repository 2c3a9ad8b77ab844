"""Lesson 02's and 03's models trained with DistributedDataParallel on 2 GPUs (NCCL, one process per GPU,
no network beyond this machine), once with native layers and once with the course's ops in their place.

    python -m benchmarks.ddp_train --out ddp.json      # needs 2 GPUs; tests/ops/test_multi_gpu.py runs it

Each rank trains on its half of every batch; DDP averages the gradients, so both ranks hold the same
parameters. The loss each step is averaged over the ranks. The course model starts from the native one's
weights, so the two curves differ only by rounding: the largest relative gap must stay within lesson 02's
tolerance (1e-2). Writes per model: both curves, the largest gap, whether the ranks' parameters agree, and
each rank's peak GPU memory.
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import socket

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel as DDP

from helpers.ops import fused_bias_relu as fbr
from helpers.ops import layernorm as ln

STEPS, BATCH, WIDTH = 60, 256, 512


def models(d_in: int, classes: int) -> dict[str, tuple[nn.Module, nn.Module]]:
    """name -> (native model, the same with the course's ops), same weights."""
    torch.manual_seed(0)
    mlp = nn.Sequential(
        nn.Linear(d_in, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, classes)
    )
    norm = nn.Sequential(nn.Linear(d_in, WIDTH), nn.LayerNorm(WIDTH), nn.ReLU(), nn.Linear(WIDTH, classes))
    with torch.no_grad():  # a LayerNorm that starts away from weight 1, bias 0
        norm[1].weight.uniform_(0.5, 1.5)
        norm[1].bias.uniform_(-0.2, 0.2)
    ours_norm = copy.deepcopy(norm)
    course_ln = ln.LayerNorm(WIDTH)
    course_ln.load_state_dict(norm[1].state_dict())
    ours_norm[1] = course_ln
    return {"lesson02_linear_relu": (mlp, fbr.fuse(mlp)), "lesson03_layernorm": (norm, ours_norm)}


def train(model: nn.Module, rank: int, world: int, x, y) -> list[float]:
    ddp = DDP(model, device_ids=[rank])
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(1)
    losses = []
    for _ in range(STEPS):
        idx = torch.randint(0, len(x), (BATCH,), generator=g)
        mine = idx[rank::world].to(x.device)  # this rank's half of the batch
        loss = F.cross_entropy(ddp(x[mine]), y[mine])
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append(float(mean) / world)
    return losses


def params_agree(model: nn.Module, world: int) -> bool:
    flat = torch.cat([p.detach().flatten().float() for p in model.parameters()])
    copies = [torch.empty_like(flat) for _ in range(world)]
    dist.all_gather(copies, flat)
    return all(torch.equal(copies[0], c) for c in copies[1:])


def worker(rank: int, world: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", rank=rank, world_size=world, device_id=torch.device("cuda", rank))
    try:
        device = torch.device("cuda", rank)
        x, y = fbr.synthetic_task(n=4096, d_in=32, device=device)
        result = {}
        for name, (native, ours) in models(32, 10).items():
            torch.cuda.reset_peak_memory_stats(device)
            curves = {}
            agree = True
            for which, model in (("native", native), ("course", ours)):
                model = copy.deepcopy(model).to(device)
                curves[which] = train(model, rank, world, x, y)
                agree = agree and params_agree(model, world)
            gap = max(abs(a - b) / abs(a) for a, b in zip(curves["native"], curves["course"]))
            result[name] = {
                **curves,
                "largest_relative_gap": gap,
                "ranks_agree": agree,
                "peak_memory_mb": torch.cuda.max_memory_allocated(device) / 2**20,
            }
        gathered = [None] * world
        dist.all_gather_object(gathered, result)
        if rank == 0:
            summary = {
                name: {
                    "largest_relative_gap": max(r[name]["largest_relative_gap"] for r in gathered),
                    "ranks_agree": all(r[name]["ranks_agree"] for r in gathered),
                    "same_curve_on_every_rank": all(r[name]["course"] == gathered[0][name]["course"] for r in gathered),
                    "final_loss_native": gathered[0][name]["native"][-1],
                    "final_loss_course": gathered[0][name]["course"][-1],
                    "peak_memory_mb_per_rank": [round(r[name]["peak_memory_mb"], 1) for r in gathered],
                }
                for name in result
            }
            gpus = [torch.cuda.get_device_name(i) for i in range(world)]
            with open(out, "w") as f:
                json.dump({"gpus": gpus, "torch": torch.__version__, "summary": summary, "ranks": gathered}, f)
    finally:
        dist.destroy_process_group()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="ddp.json")
    args = parser.parse_args()
    world = torch.cuda.device_count()
    if world < 2:
        raise SystemExit(f"needs 2 GPUs, found {world}")
    world = 2
    fbr.extension("fused_bias_relu")  # build once here, not in both workers at the same time
    ln.extension("layernorm")
    with socket.socket() as s:  # a free local port for the rendezvous
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(world, port, args.out), nprocs=world, join=True)
    summary = json.load(open(args.out))["summary"]
    for name, r in summary.items():
        print(
            f"{name}: largest relative gap {r['largest_relative_gap']:.2e}, ranks agree {r['ranks_agree']}, "
            f"final loss native {r['final_loss_native']:.4f} course {r['final_loss_course']:.4f}, "
            f"peak MB per rank {r['peak_memory_mb_per_rank']}"
        )


if __name__ == "__main__":
    main()
