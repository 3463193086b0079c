"""The cross-host layout, on one machine: ranks given different host ids
(LOOM_TORCH_HOST_ID) are connected as hosts are, by Loom's gloo transport (TCP,
over loopback here) between them with Loom's shm transport inside each, and the
collectives match the seeded references. The same with ranks alternating between
the hosts (the communicator numbers them host by host: the same node level and shm
between two ranks of a host), under mpirun, where
MPI connects the hosts, and with transport=gloo (Gloo alone, no shm).

This is an emulation: the "hosts" share one kernel, so it tests the rendezvous, the
layout and the two transports together, not a network between machines (see
README.md, "Across hosts").
"""

import os
import shutil
import sys
import tempfile
import unittest
from datetime import timedelta

import torch_testing


def worker(argv):
    mode, seed = argv[0], int(argv[1])
    if mode == "mpi_exception":
        mpi_exception_worker()
        return
    if mode == "mpi_two_hosts":
        os.environ["RANK"] = os.environ["OMPI_COMM_WORLD_RANK"]
        os.environ["LOCAL_RANK"] = os.environ["OMPI_COMM_WORLD_LOCAL_RANK"]
    rank = int(os.environ["RANK"])
    if mode in ("two_hosts", "mpi_two_hosts"):
        os.environ["LOOM_TORCH_HOST_ID"] = f"emulated-host-{rank // 2}"
    elif mode == "alternating_hosts":
        os.environ["LOOM_TORCH_HOST_ID"] = f"emulated-host-{rank % 2}"
    else:
        os.environ["LOOM_TORCH_TRANSPORT"] = "gloo"
    import torch
    import torch.distributed as dist
    import loom_torch
    import reference as ref
    print(f"pid {os.getpid()}", flush=True)
    dist.init_process_group("loom", timeout=timedelta(seconds=60))
    world = dist.get_world_size()
    want = {"two_hosts": "gloo between 2 hosts, shm inside each (2 ranks per host, every algorithm)",
            "mpi_two_hosts": "mpi between 2 hosts, shm inside each (2 ranks per host)",
            "alternating_hosts":
                "gloo between 2 hosts, shm inside each (2 ranks per host, numbered by host, every algorithm)",
            "gloo_only": "gloo among all ranks (1 host, no shm level)"}[mode]
    assert loom_torch.layout() == want, loom_torch.layout()
    checks = 0
    for dtype in (torch.float32, torch.bfloat16, torch.int64):
        for op in ("sum", "max"):
            for size in (1, 1001, 300001):
                xs = [ref.make_input(seed, r, "2l/all_reduce", dtype, size, op, world)
                      for r in range(world)]
                got = xs[rank].clone()
                dist.all_reduce(got, ref.dist_op(op))
                if dtype.is_floating_point and op == "sum":
                    exact, bound = ref.exact_and_bound(xs, op, dtype)
                    message = ref.within(got, exact, bound)
                    assert message is None, f"seed {seed}: all_reduce {dtype} {op} x{size}: {message}"
                else:
                    assert ref.bitwise_equal(got, ref.fold(xs, op, dtype)), f"seed {seed}: {dtype} {op}"
                checks += 1
    xs = [ref.make_input(seed, r, "2l/gather", torch.float16, 4097) for r in range(world)]
    out = torch.empty(4097 * world, dtype=torch.float16)
    dist.all_gather_into_tensor(out, xs[rank])
    assert ref.bitwise_equal(out, torch.cat(xs)), f"seed {seed}: all_gather_into_tensor"
    xs = [ref.make_input(seed, r, "2l/rs", torch.int32, 1000 * world) for r in range(world)]
    got = torch.empty(1000, dtype=torch.int32)
    dist.reduce_scatter_tensor(got, xs[rank].clone())
    assert ref.bitwise_equal(got, ref.fold([x[rank * 1000:(rank + 1) * 1000] for x in xs], "sum",
                                           torch.int32)), f"seed {seed}: reduce_scatter_tensor"
    got = xs[rank].clone()
    dist.broadcast(got, world - 1)
    assert ref.bitwise_equal(got, xs[world - 1]), f"seed {seed}: broadcast"
    xs = [ref.make_input(seed, r, "2l/a2a", torch.float64, 8 * world) for r in range(world)]
    got = torch.empty(8 * world, dtype=torch.float64)
    dist.all_to_all_single(got, xs[rank])
    assert ref.bitwise_equal(got, torch.cat([x[rank * 8:(rank + 1) * 8] for x in xs])), "all_to_all"
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    mine = ref.make_input(seed, rank, "2l/ring", torch.float32, 70001)
    got = torch.empty(70001)
    if rank % 2 == 0:
        dist.send(mine, nxt)
        dist.recv(got, prv)
    else:
        dist.recv(got, prv)
        dist.send(mine, nxt)
    assert ref.bitwise_equal(got, ref.make_input(seed, prv, "2l/ring", torch.float32, 70001)), "ring"
    checks += 5
    members = [1, 2] if world == 4 else [0, 1]  # with two hosts: one rank of each
    sub = dist.new_group(members)
    if rank in members:
        t = torch.full((5,), float(rank))
        dist.all_reduce(t, group=sub)
        assert t.tolist() == [float(sum(members))] * 5, t
        checks += 1
    dist.barrier()
    # One write with its newline: with PYTHONUNBUFFERED, print writes the text and the
    # newline apart, and mpirun forwarded another rank's line between the two (1 run in
    # about 10 of the mpirun case joined two ranks' lines into one).
    sys.stdout.write(f"rank {rank}: {loom_torch.layout()}: {checks} checks passed\n")
    sys.stdout.flush()
    dist.destroy_process_group()


def mpi_exception_worker():
    # Two ranks as two hosts, so the world group runs over MPI; rank 0 then raises.
    rank = int(os.environ["OMPI_COMM_WORLD_RANK"])
    os.environ["RANK"] = str(rank)
    os.environ["LOOM_TORCH_HOST_ID"] = f"emulated-host-{rank}"
    import time
    import torch
    import torch.distributed as dist
    import loom_torch
    print(f"pid {os.getpid()}", flush=True)
    dist.init_process_group("loom", timeout=timedelta(seconds=60))
    assert loom_torch.layout() == "mpi among all ranks (2 hosts, no shm level)", loom_torch.layout()
    dist.barrier()
    if rank == 0:
        raise ValueError("boom in rank 0 under mpirun")
    start = time.monotonic()
    try:
        dist.all_reduce(torch.ones(1 << 20))
    except RuntimeError as e:
        print(f"rank 1 error after {time.monotonic() - start:.2f} s: {e}", flush=True)
    time.sleep(30)  # mpirun ends the job before this


def mpirun_command(ranks):
    """mpirun for this test, and the directories it leaves (removed by the caller)."""
    session = tempfile.mkdtemp(prefix="loom-mpirun-")
    segments = tempfile.mkdtemp(prefix="loom-mpirun-", dir="/dev/shm")
    command = ["mpirun", "--allow-run-as-root", "--oversubscribe", "--bind-to", "none",
               "--mca", "btl", "self,vader", "--mca", "orte_tmpdir_base", session,
               "--mca", "btl_vader_backing_directory", segments, "-np", str(ranks), sys.executable]
    return command, [session, segments]


class TwoLevelTest(unittest.TestCase):
    def run_mode(self, mode, world):
        seed = torch_testing.test_seed()
        result = torch_testing.run_ranks(__file__, world, [mode, str(seed)], timeout=150)
        result.check_ok(self)
        for r in result.ranks:
            self.assertRegex(r.stdout, rf"rank {r.rank}: .*: [1-9]\d* checks passed")
            print(r.stdout.strip().splitlines()[-1], flush=True)
        torch_testing.check_nothing_left(self, result)

    def test_two_emulated_hosts_gloo_between_shm_inside(self):
        self.run_mode("two_hosts", 4)

    def test_ranks_alternating_between_emulated_hosts_numbered_by_host(self):
        self.run_mode("alternating_hosts", 4)

    def test_gloo_transport_alone(self):
        self.run_mode("gloo_only", 2)

    def test_two_emulated_hosts_under_mpirun_mpi_between(self):
        if shutil.which("mpirun") is None:
            self.skipTest("no mpirun (Debian's openmpi-bin, which ./bazelw installs)")
        seed = torch_testing.test_seed()
        # Open MPI's session directory and shared-memory segments in directories of
        # this test's own, removed after it (as collectives/transport/mpi/mpirun.h does).
        mpirun, dirs = mpirun_command(4)
        for d in dirs:
            self.addCleanup(shutil.rmtree, d, ignore_errors=True)
        result = torch_testing.run_ranks(__file__, 4, ["mpi_two_hosts", str(seed)], timeout=150,
                                         launcher=mpirun, launcher_takes_port=False)
        result.check_ok(self)
        lines = [line for line in result.ranks[0].stdout.splitlines() if "checks passed" in line]
        self.assertEqual(len(lines), 4, result.describe())
        for line in lines:
            self.assertIn("mpi between 2 hosts, shm inside each", line)
            print(line, flush=True)
        torch_testing.check_nothing_left(self, result)

    def test_uncaught_exception_under_mpirun_ends_the_job_naming_the_rank(self):
        if shutil.which("mpirun") is None:
            self.skipTest("no mpirun (Debian's openmpi-bin, which ./bazelw installs)")
        mpirun, dirs = mpirun_command(2)
        for d in dirs:
            self.addCleanup(shutil.rmtree, d, ignore_errors=True)
        result = torch_testing.run_ranks(__file__, 2, ["mpi_exception", "0"], timeout=120,
                                         launcher=mpirun, launcher_takes_port=False)
        job = result.ranks[0]
        print(f"mpirun exit {job.returncode} after {result.seconds:.1f} s", flush=True)
        self.assertFalse(result.timed_out, result.describe())
        self.assertNotEqual(job.returncode, 0, result.describe())
        self.assertRegex(job.stderr, r"loom_torch: world rank 0 of 2 \(pid \d+ on host [^)]+\) aborts "
                                     r"the MPI job: it ended with an uncaught ValueError: boom in "
                                     r"rank 0 under mpirun", result.describe())
        self.assertLess(result.seconds, 60, result.describe())
        torch_testing.check_nothing_left(self, result)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2:])
    else:
        unittest.main()
