"""Failures on Loom's backend end in named errors, never in a hang or a crash, and leave
no process and no /dev/shm segment behind:
  - a rank SIGKILLed mid all-reduce: the others' calls raise RuntimeError naming world
    rank 1 ("died") within seconds, far inside the 60 s timeout, and later calls say
    the group is broken and why;
  - a mismatched call (ranks all-reduce 64 and 32 elements): both ranks' calls raise
    at once, naming both calls, through wait() and through the Work's future;
  - a rank that never makes its call: the other's call raises at the group's 3 s
    timeout naming the call, and Work.wait(timeout) gives up on its own, earlier;
  - a rank that ends with an uncaught exception: loom_torch's sys.excepthook aborts
    its groups, so the other's call raises at once, naming the rank and the
    exception, instead of waiting out its timeout for a rank that closed.
"""

import os
import signal
import sys
import time
import unittest
from datetime import timedelta

import torch_testing

# Far below the calls' timeout of 60 s: the failure is found by the transport, not by
# waiting out the deadline. Generous for a loaded 2-core machine.
PROMPT_SECONDS = 15


def worker(argv):
    case = argv[0]
    import torch
    import torch.distributed as dist
    import loom_torch  # noqa: F401  (registers "loom")
    print(f"pid {os.getpid()}", flush=True)
    dist.init_process_group("loom", timeout=timedelta(seconds=60))
    rank = dist.get_rank()
    big = torch.ones(4 << 20)  # 16 MiB: a ring all-reduce of many chunks
    if case == "kill":
        for _ in range(3):
            dist.all_reduce(big)
        dist.barrier()
        if rank == 1:
            dist.all_reduce(big, async_op=True)
            time.sleep(0.005)  # inside the call: the progress thread is moving chunks
            os.kill(os.getpid(), signal.SIGKILL)
        start = time.monotonic()
        try:
            for _ in range(1000):
                dist.all_reduce(big)
            raise AssertionError("all-reduces with a dead rank succeeded")
        except RuntimeError as e:
            elapsed = time.monotonic() - start
            print(f"error after {elapsed:.2f} s: {e}", flush=True)
        start = time.monotonic()
        try:
            dist.all_reduce(torch.ones(3))
            raise AssertionError("a call on a broken group succeeded")
        except RuntimeError as e:
            print(f"next call: {e}", flush=True)
            assert time.monotonic() - start < PROMPT_SECONDS
    elif case == "mismatch":
        mine = torch.ones(64 if rank == 0 else 32)
        start = time.monotonic()
        work = dist.all_reduce(mine, async_op=True)
        try:
            work.wait()
            raise AssertionError("a mismatched all-reduce succeeded")
        except RuntimeError as e:
            print(f"error after {time.monotonic() - start:.2f} s: {e}", flush=True)
        assert work.is_completed() and not work.is_success()
        try:
            work.get_future().wait()
            raise AssertionError("the future of a failed call succeeded")
        except RuntimeError as e:
            print(f"future: {e}", flush=True)
    elif case == "exception":
        dist.barrier()
        if rank == 0:
            raise ValueError("boom in rank 0's training step")
        start = time.monotonic()
        try:
            dist.all_reduce(big)
            raise AssertionError("an all-reduce with a rank that raised succeeded")
        except RuntimeError as e:
            print(f"error after {time.monotonic() - start:.2f} s: {e}", flush=True)
    elif case == "timeout":
        short = dist.new_group(timeout=timedelta(seconds=3))
        if rank == 0:
            work = dist.all_reduce(torch.ones(1000), group=short, async_op=True)
            start = time.monotonic()
            try:
                work.wait(timeout=timedelta(milliseconds=300))
                raise AssertionError("wait(300 ms) returned for a call that cannot finish")
            except RuntimeError as e:
                print(f"wait(timeout) after {time.monotonic() - start:.2f} s: {e}", flush=True)
            try:
                work.wait()
                raise AssertionError("an all-reduce without its peer succeeded")
            except RuntimeError as e:
                print(f"error after {time.monotonic() - start:.2f} s: {e}", flush=True)
        else:
            time.sleep(6)  # never makes the call; rank 0's deadline passes meanwhile
        dist.barrier()
    dist.destroy_process_group()
    print("exiting", flush=True)


def error_line(rank, prefix):
    for line in rank.stdout.splitlines():
        if line.startswith(prefix):
            return line
    return ""


class FaultTest(unittest.TestCase):
    def run_case(self, case, world):
        result = torch_testing.run_ranks(__file__, world, [case], timeout=120)
        print(f"--- {case}: {result.seconds:.1f} s", flush=True)
        for r in result.ranks:
            for line in r.stdout.splitlines():
                if not line.startswith("pid "):
                    print(f"rank {r.rank}: {line}", flush=True)
        self.assertFalse(result.timed_out, result.describe())
        torch_testing.check_nothing_left(self, result)
        return result

    def seconds_of(self, line):
        return float(line.split(" after ")[1].split(" s")[0])

    def test_rank_killed_mid_allreduce_is_named(self):
        result = self.run_case("kill", 3)
        self.assertEqual(result.ranks[1].returncode, -signal.SIGKILL, result.describe())
        for r in (result.ranks[0], result.ranks[2]):
            self.assertEqual(r.returncode, 0, result.describe())
            line = error_line(r, "error after ")
            self.assertRegex(line, r"world rank 1 \(pid \d+ on [^)]+\) died", result.describe())
            self.assertIn(f"(rank {r.rank} of 3 in group", line)
            self.assertRegex(line, r"all_reduce #\d+ \(f32, 4194304 elements, sum\) failed")
            self.assertLess(self.seconds_of(line), PROMPT_SECONDS)
            self.assertIn("not run: the process group is broken since all_reduce #",
                          error_line(r, "next call: "))

    def test_mismatched_sizes_are_named_at_once(self):
        result = self.run_case("mismatch", 2)
        for r in result.ranks:
            self.assertEqual(r.returncode, 0, result.describe())
            line = error_line(r, "error after ")
            self.assertIn("mismatched collective calls", line, result.describe())
            self.assertIn("count=64", line)
            self.assertIn("count=32", line)
            self.assertLess(self.seconds_of(line), PROMPT_SECONDS)
            self.assertIn("mismatched collective calls", error_line(r, "future: "))

    def test_uncaught_exception_aborts_the_peers_calls(self):
        result = self.run_case("exception", 2)
        self.assertEqual(result.ranks[0].returncode, 1, result.describe())
        self.assertIn("ValueError: boom in rank 0's training step", result.ranks[0].stderr)
        r1 = result.ranks[1]
        self.assertEqual(r1.returncode, 0, result.describe())
        line = error_line(r1, "error after ")
        self.assertRegex(line, r"world rank 0 \(pid \d+ on [^)]+\) aborted: it ended with an uncaught "
                               r"ValueError: boom in rank 0's training step", result.describe())
        self.assertLess(self.seconds_of(line), PROMPT_SECONDS)

    def test_call_without_its_peer_ends_at_the_timeout(self):
        result = self.run_case("timeout", 2)
        for r in result.ranks:
            self.assertEqual(r.returncode, 0, result.describe())
        r0 = result.ranks[0]
        wait_line = error_line(r0, "wait(timeout) after ")
        self.assertIn("wait timed out after 300 ms", wait_line, result.describe())
        self.assertLess(self.seconds_of(wait_line), 2.5)
        line = error_line(r0, "error after ")
        self.assertIn("DEADLINE_EXCEEDED", line, result.describe())
        self.assertRegex(line, r"all_reduce #0 \(f32, 1000 elements, sum\) failed")
        self.assertGreaterEqual(self.seconds_of(line), 2.9)
        self.assertLess(self.seconds_of(line), PROMPT_SECONDS)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2:])
    else:
        unittest.main()
