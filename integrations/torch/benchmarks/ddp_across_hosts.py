# One DDP job across tools/cluster hosts under mpirun (ddp_across_hosts.sh starts it):
# loom_torch with the transport LOOM_TORCH_TRANSPORT names (the script sets gloo),
# the median DDP step (forward, backward with DDP's bucketed all-reduce overlapping
# it, SGD) of an MLP, and the median all-reduce of 4 KiB on idle CPUs beside it.
# Prints "RESULT <label> step_ms <ms> allreduce_4k_us <us>" on rank 0; every result
# is checked.
import os
import statistics
import sys
import time

os.environ["RANK"] = os.environ["OMPI_COMM_WORLD_RANK"]
os.environ["WORLD_SIZE"] = os.environ["OMPI_COMM_WORLD_SIZE"]
import torch
import torch.distributed as dist
import loom_torch  # noqa: F401  (registers the "loom" backend)
from ddp_steps import median_ddp_step  # this directory (the script's own)

LABEL = sys.argv[1] if len(sys.argv) > 1 else "loom"
WIDTH, LAYERS, BATCH = 1024, 4, 64
WARMUP, STEPS = 3, 15

dist.init_process_group("loom")
rank, n = dist.get_rank(), dist.get_world_size()

small = torch.empty(1024)
samples = []
for i in range(220):
    small.fill_(rank + 1.0)
    start = time.perf_counter()
    dist.all_reduce(small)
    if i >= 20:
        samples.append(time.perf_counter() - start)
    expected = n * (n + 1) / 2
    assert small[0].item() == expected and small[-1].item() == expected, "4 KiB all_reduce is wrong"

ddp, step_seconds, _ = median_ddp_step(LAYERS, WIDTH, BATCH, WARMUP, STEPS)
# DDP keeps the replicas equal: every rank's weights must match rank 0's.
first = next(ddp.parameters()).detach().clone()
reference = first.clone()
dist.broadcast(reference, 0)
assert torch.equal(first, reference), f"rank {rank}'s weights differ from rank 0's"
if rank == 0:
    print(f"RESULT {LABEL} step_ms {step_seconds * 1e3:.1f} "
          f"allreduce_4k_us {statistics.median(samples) * 1e6:.1f} "
          f"({loom_torch.explain('all_reduce', 4096).split(';')[0]})", flush=True)
dist.destroy_process_group()
