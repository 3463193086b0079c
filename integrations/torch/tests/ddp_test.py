"""DistributedDataParallel on Loom's backend: 20 steps of a small model end at Gloo's
parameters (within 1e-6 relative, float32) on 3 processes, and two runs in
deterministic mode (LOOM_TORCH_DETERMINISTIC=1), started by torchrun, end bitwise
equal.

DDP's reducer chains its gradient averaging on every all-reduce's Work future
(Work::getFuture); it broadcasts the model from rank 0 and all-gathers the parameter
shapes at construction. Data and the initial model are seeded; the seed is printed.
"""

import hashlib
import os
import shutil
import sys
import tempfile
import unittest

import torch_testing

STEPS = 20
WORLD = 3


def make_model(seed):
    import torch
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 64),
                               torch.nn.Tanh(), torch.nn.Linear(64, 10))


def train(seed, rank, process_group):
    import torch
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = make_model(seed)
    ddp = DDP(model, process_group=process_group)
    optimizer = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    g = torch.Generator().manual_seed(seed * 101 + rank)
    for _ in range(STEPS):
        x = torch.randn(16, 32, generator=g)
        y = torch.randint(0, 10, (16,), generator=g)
        optimizer.zero_grad()
        loss = torch.nn.functional.cross_entropy(ddp(x), y)
        loss.backward()
        optimizer.step()
    return [p.detach().clone() for p in model.parameters()]


def digest(params):
    h = hashlib.sha256()
    for p in params:
        h.update(p.numpy().tobytes())
    return h.hexdigest()


def worker(argv):
    mode, seed = argv[0], int(argv[1])
    import torch
    import torch.distributed as dist
    import loom_torch
    print(f"pid {os.getpid()}", flush=True)
    dist.init_process_group("loom")
    rank = dist.get_rank()
    if mode == "versus_gloo":
        gloo = dist.new_group(backend="gloo")
        with_gloo = train(seed, rank, gloo)
        with_loom = train(seed, rank, None)
        worst = 0.0
        for i, (a, b) in enumerate(zip(with_loom, with_gloo)):
            rel = ((a - b).abs().max() / b.abs().max()).item()
            worst = max(worst, rel)
            assert rel <= 1e-6, f"seed {seed} rank {rank}: parameter {i} differs from Gloo's by {rel:.3g} relative"
        # The two must also have moved: 20 steps from the same start.
        start = [p.detach() for p in make_model(seed).parameters()]
        moved = max(((a - s).abs().max() / s.abs().max()).item() for a, s in zip(with_loom, start))
        assert moved > 1e-3, f"parameters barely moved ({moved:.3g}): the test would prove nothing"
        print(f"rank {rank}: loom vs gloo after {STEPS} steps: max relative difference {worst:.3g}; "
              f"moved {moved:.3g}", flush=True)
    else:
        assert loom_torch.describe().endswith("; deterministic"), loom_torch.describe()
        params = train(seed, rank, None)
        print(f"rank {rank} digest {digest(params)}", flush=True)
    dist.destroy_process_group()


class DdpTest(unittest.TestCase):
    def test_ddp_matches_gloo(self):
        seed = torch_testing.test_seed()
        result = torch_testing.run_ranks(__file__, WORLD, ["versus_gloo", str(seed)], timeout=120)
        result.check_ok(self)
        for r in result.ranks:
            self.assertIn("loom vs gloo after 20 steps", r.stdout)
            print(r.stdout.strip().splitlines()[-1], flush=True)
        torch_testing.check_nothing_left(self, result)

    def test_deterministic_runs_are_bitwise_equal_under_torchrun(self):
        seed = torch_testing.test_seed()
        # Debian 12's torchrun (torch 1.13 under Python 3.11) fails before starting a
        # worker unless --redirects and --tee name a single stream: its
        # Std.from_str("0") returns None there (README.md, "Debian's torchrun").
        log_dir = tempfile.mkdtemp(prefix="torchrun-logs-")
        self.addCleanup(shutil.rmtree, log_dir, ignore_errors=True)
        torchrun = [sys.executable, "-m", "torch.distributed.run", f"--nproc_per_node={WORLD}",
                    "--nnodes=1", "--master_addr=127.0.0.1", "--redirects=1", "--tee=1",
                    f"--log_dir={log_dir}"]
        digests = []
        for run in range(2):
            result = torch_testing.run_ranks(__file__, WORLD, ["deterministic", str(seed)],
                                             timeout=120, env={"LOOM_TORCH_DETERMINISTIC": "1"},
                                             launcher=torchrun)
            result.check_ok(self)
            lines = [line for line in result.ranks[0].stdout.splitlines() if " digest " in line]
            self.assertEqual(len(lines), WORLD, result.describe())
            run_digests = {line.split()[-1] for line in lines}
            self.assertEqual(len(run_digests), 1, f"ranks disagree in run {run}: {lines}")
            digests.append(run_digests.pop())
            torch_testing.check_nothing_left(self, result)
        print(f"deterministic runs: {digests}", flush=True)
        self.assertEqual(digests[0], digests[1])


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2:])
    else:
        unittest.main()
