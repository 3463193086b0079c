"""The cost model Loom's `auto` chooses by, from a file (Options.cost_model,
LOOM_TORCH_COST_MODEL): every rank reads it, describe() names it, explain() shows the
choice it makes and that it was measured; calls still give the right sums. Without
one, a group on one host keeps the formulas, and a group across hosts measures one
and caches it: the first LOOM_TORCH_COST_MODEL_CALIBRATIONS groups on the same hosts
measure (the cache keeps their median), later ones read it. A file that cannot be
read, or a count below 1, fails the group's creation, naming it. Two ranks, on one
host or given two host ids (two emulated hosts, gloo between them over loopback).
"""

import os
import sys
import tempfile
import time
import unittest
from datetime import timedelta

import torch_testing

# Constants as Loom's defaults, and a measured curve that makes the direct all-reduce
# the cheapest at 1 MiB on two ranks (1 us where every formula says tens of us).
MODEL = """# a test's cost model
alpha_s 2e-06
beta_s_per_byte 2e-10
gamma_s_per_byte 1e-10
inter_node_alpha_s 2e-05
inter_node_beta_s_per_byte 1e-09
curve all_reduce direct 2 0 4096:1e-06,1048576:1e-06
"""


def worker(argv):
    case = argv[0]
    if case.startswith("two_hosts"):
        os.environ["LOOM_TORCH_HOST_ID"] = f"emulated-host-{os.environ['RANK']}"
    import torch
    import torch.distributed as dist
    import loom_torch
    print(f"pid {os.getpid()}", flush=True)
    if case in ("missing", "two_hosts_refused"):
        try:
            dist.init_process_group("loom", timeout=timedelta(seconds=60))
        except RuntimeError as e:
            print(f"refused: {e}", flush=True)
            # Rank 0 hosts torch's store: it stays until every rank has been refused,
            # or a peer still connecting would lose the store instead.
            done = os.environ["COST_MODEL_TEST_DONE"]
            open(os.path.join(done, os.environ["RANK"]), "w").close()
            deadline = time.monotonic() + 60
            while (os.environ["RANK"] == "0" and len(os.listdir(done)) < int(os.environ["WORLD_SIZE"])
                   and time.monotonic() < deadline):
                time.sleep(0.05)
            return
        raise AssertionError(f"case {case}: the group was created")
    dist.init_process_group("loom", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    described = loom_torch.describe()
    explained = loom_torch.explain("all_reduce", 1 << 20)
    print(f"describe: {described}", flush=True)
    print(f"explain: {explained}", flush=True)
    # The choice runs and sums right: 1 MiB of float32, rank r adds r + 1.
    t = torch.full((1 << 18,), float(rank + 1))
    dist.all_reduce(t)
    want = float(sum(range(1, world + 1)))
    assert bool((t == want).all()), f"rank {rank}: sum {t[:4].tolist()}..., want {want}"
    print(f"rank {rank}: sum ok", flush=True)
    dist.destroy_process_group()


class CostModelTest(unittest.TestCase):
    def test_a_file_chooses_and_is_named(self):
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "model.txt")
            with open(path, "w") as f:
                f.write(MODEL)
            result = torch_testing.run_ranks(__file__, 2, ["file"], timeout=90,
                                             env={"LOOM_TORCH_COST_MODEL": path})
        result.check_ok(self)
        for r in result.ranks:
            self.assertIn(f"; cost model from {path}", r.stdout, result.describe())
            self.assertIn("explain: all_reduce 1 MiB on 2 ranks: direct (predicted 1.0 us, measured)",
                          r.stdout, result.describe())
            self.assertIn("sum ok", r.stdout, result.describe())
        torch_testing.check_nothing_left(self, result)

    def test_one_host_keeps_the_formulas(self):
        result = torch_testing.run_ranks(__file__, 2, ["default"], timeout=90)
        result.check_ok(self)
        for r in result.ranks:
            self.assertNotIn("cost model", r.stdout, result.describe())
            self.assertRegex(r.stdout, r"explain: all_reduce 1 MiB on 2 ranks: \w+ \(predicted [^,]+, formula\)",
                             result.describe())
            self.assertIn("sum ok", r.stdout, result.describe())
        torch_testing.check_nothing_left(self, result)

    def test_a_missing_file_is_named(self):
        path = "/nonexistent/loom_cost_model.txt"
        with tempfile.TemporaryDirectory() as done:
            result = torch_testing.run_ranks(__file__, 2, ["missing"], timeout=90,
                                             env={"LOOM_TORCH_COST_MODEL": path,
                                                  "COST_MODEL_TEST_DONE": done})
        result.check_ok(self)
        for r in result.ranks:
            self.assertIn("refused: ", r.stdout, result.describe())
            self.assertIn(path, r.stdout, result.describe())
            self.assertIn("cost_model", r.stdout, result.describe())
        torch_testing.check_nothing_left(self, result)

    def run_two_hosts(self, cache, calibrations=None):
        env = {"LOOM_CACHE_DIR": cache}
        if calibrations is not None:
            env["LOOM_TORCH_COST_MODEL_CALIBRATIONS"] = str(calibrations)
        result = torch_testing.run_ranks(__file__, 2, ["two_hosts"], timeout=120, env=env)
        result.check_ok(self)
        for r in result.ranks:
            self.assertIn("sum ok", r.stdout, result.describe())
            self.assertRegex(r.stdout, r"explain: all_reduce 1 MiB on 2 ranks: \w+ \(predicted [^,]+, measured\)",
                             result.describe())
        torch_testing.check_nothing_left(self, result)
        return result

    def test_across_hosts_the_cache_merges_the_set_number_of_calibrations(self):
        with tempfile.TemporaryDirectory() as cache:
            # The first group measures; so does the second (default: 3 are merged),
            # and the cache then holds the median of both.
            first = self.run_two_hosts(cache)
            for r in first.ranks:
                self.assertRegex(r.stdout, r"describe: .*; cost model measured on 2 hosts \(.*\) in [\d.]+ s.*, saved to ",
                                 first.describe())
                self.assertNotIn("the median of", r.stdout, first.describe())
            second = self.run_two_hosts(cache)
            for r in second.ranks:
                self.assertRegex(r.stdout, r"cost model measured on 2 hosts .*\(the median of 2 calibrations\)",
                                 second.describe())
            # Two are enough for a group that asks for 2: it reads the cache.
            third = self.run_two_hosts(cache, calibrations=2)
            for r in third.ranks:
                self.assertRegex(r.stdout, r"cost model from cache, measured \S+ ago on 2 hosts .*\(the median of 2 calibrations\)",
                                 third.describe())
            self.assertEqual(len(os.listdir(cache)), 1, os.listdir(cache))

    def test_the_count_from_the_environment(self):
        import loom_torch
        self.assertEqual(loom_torch.options_from_environment({}).cost_model_calibrations, 3)
        options = loom_torch.options_from_environment({"LOOM_TORCH_COST_MODEL_CALIBRATIONS": "2"})
        self.assertEqual(options.cost_model_calibrations, 2)
        with self.assertRaisesRegex(ValueError, "LOOM_TORCH_COST_MODEL_CALIBRATIONS='abc'"):
            loom_torch.options_from_environment({"LOOM_TORCH_COST_MODEL_CALIBRATIONS": "abc"})

    def test_across_hosts_a_count_below_one_is_named(self):
        with tempfile.TemporaryDirectory() as cache, tempfile.TemporaryDirectory() as done:
            result = torch_testing.run_ranks(
                __file__, 2, ["two_hosts_refused"], timeout=90,
                env={"LOOM_CACHE_DIR": cache, "LOOM_TORCH_COST_MODEL_CALIBRATIONS": "0",
                     "COST_MODEL_TEST_DONE": done})
            self.assertEqual(os.listdir(cache), [])
        result.check_ok(self)
        for r in result.ranks:
            self.assertIn("refused: ", r.stdout, result.describe())
            self.assertIn("cost_model_calibrations 0 must be 1 or more", r.stdout, result.describe())
        torch_testing.check_nothing_left(self, result)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2:])
    else:
        unittest.main()
