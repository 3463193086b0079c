# loom_torch across tools/cluster hosts under mpirun (across_hosts.sh starts it): how
# long creating the world group took (its cost model measured, or read from the
# cache), and per size the all-reduce's time, its share of a 2 Gbit/s link, and
# `explain`: the algorithm auto chose, every candidate's price, measured or formula.
import os
import sys
import time

os.environ["RANK"] = os.environ["OMPI_COMM_WORLD_RANK"]
os.environ["WORLD_SIZE"] = os.environ["OMPI_COMM_WORLD_SIZE"]
import torch
import torch.distributed as dist
import loom_torch
t0 = time.time()
dist.init_process_group("loom")
created = time.time() - t0
rank = dist.get_rank()
out = []
if rank == 0:
    out.append(f"created in {created:.2f} s; {loom_torch.layout()}")
for nbytes in (4 << 10, 1 << 20, 16 << 20):
    x = torch.full((nbytes // 4,), float(rank + 1))
    for _ in range(2):
        dist.all_reduce(x)
    dist.barrier()
    iters = 5
    t = time.time()
    for _ in range(iters):
        dist.all_reduce(x)
    dist.barrier()
    dt = (time.time() - t) / iters
    n = dist.get_world_size()
    if rank == 0:
        out.append(f"{nbytes} B: {dt*1e3:.2f} ms ({2*(n-1)/n*nbytes/dt/250e6:.2f} of 2gbit); "
                   + loom_torch.explain("all_reduce", nbytes))
if rank == 0:
    sys.stdout.write("\n".join(out) + "\n")
    sys.stdout.flush()
dist.destroy_process_group()
