"""The DDP step both benchmarks time (torch_vs_gloo.py, ddp_across_hosts.py).

An MLP of `layers` Linear+ReLU blocks `width` wide, wrapped in DistributedDataParallel
over the process group already initialized, trained with SGD on a batch of `batch`
rows seeded by the rank (so the replicas see different data and DDP's all-reduce
matters). Each step is forward, backward (DDP's bucketed all-reduce overlapping it)
and the optimizer step, behind a barrier so the ranks start together.

    ddp, step_seconds, params = median_ddp_step(layers=4, width=1024, batch=64,
                                                warmup=3, steps=15)
"""

import statistics
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def median_ddp_step(layers, width, batch, warmup, steps):
    """Returns the DDP module, the median step time in seconds over `steps` steps
    after `warmup`, and the model's parameter count."""
    torch.manual_seed(0)
    blocks = []
    for _ in range(layers):
        blocks += [torch.nn.Linear(width, width), torch.nn.ReLU()]
    model = torch.nn.Sequential(*blocks)
    params = sum(p.numel() for p in model.parameters())
    ddp = DDP(model)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=1e-3)
    g = torch.Generator().manual_seed(dist.get_rank())
    x = torch.randn(batch, width, generator=g)
    y = torch.randn(batch, width, generator=g)
    times = []
    for step in range(warmup + steps):
        dist.barrier()
        start = time.perf_counter()
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(ddp(x), y).backward()
        optimizer.step()
        if step >= warmup:
            times.append(time.perf_counter() - start)
    return ddp, statistics.median(times), params
