"""Bad arguments to Loom's backend raise RuntimeError naming the call and the values,
on the caller's thread, before anything is sent, so the group stays usable; zero-size
tensors work. Two ranks, each making the same bad calls.
"""

import os
import sys
import unittest
from datetime import timedelta

import torch_testing


def worker(argv):
    del argv
    import torch
    import torch.distributed as dist
    import loom_torch  # noqa: F401  (registers "loom")
    print(f"pid {os.getpid()}", flush=True)
    dist.init_process_group("loom", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    checks = 0

    def refused(what, call, text):
        nonlocal checks
        try:
            call()
        except RuntimeError as e:
            assert text in str(e), f"{what}: expected {text!r} in the error, got {str(e)!r}"
            checks += 1
            return
        raise AssertionError(f"{what}: no error")

    refused("non-contiguous", lambda: dist.all_reduce(torch.ones(4, 6).t()),
            "loom all_reduce: tensor is not contiguous (sizes [6, 4], strides [1, 6])")
    refused("sparse", lambda: dist.all_reduce(torch.ones(4).to_sparse()),
            "loom all_reduce: tensor has layout Sparse")
    refused("bool reduction", lambda: dist.all_reduce(torch.ones(4, dtype=torch.bool)),
            "loom all_reduce: dtype Bool cannot be reduced")
    refused("int16 reduction", lambda: dist.reduce_scatter_tensor(
        torch.ones(2, dtype=torch.int16), torch.ones(2 * world, dtype=torch.int16)),
            "loom reduce_scatter_tensor: dtype Short cannot be reduced")
    refused("BAND", lambda: dist.all_reduce(torch.ones(4, dtype=torch.int32), op=dist.ReduceOp.BAND),
            "loom all_reduce: reduce op BAND is not supported")
    refused("root out of range", lambda: dist.broadcast(torch.ones(4), world + 3),
            f"loom broadcast: root {world + 3} is outside the group's ranks [0, {world})")
    refused("all_gather list", lambda: dist.all_gather([torch.ones(3)] * (world + 1), torch.ones(3)),
            f"loom all_gather: expected {world} output tensors (one per rank), got {world + 1}")
    refused("all_gather sizes", lambda: dist.all_gather([torch.ones(3)] * (world - 1) + [torch.ones(2)],
                                                        torch.ones(3)),
            f"loom all_gather: output tensor {world - 1} has 2 elements, expected 3")
    refused("all_gather_into_tensor size", lambda: dist.all_gather_into_tensor(torch.ones(5), torch.ones(3)),
            f"loom all_gather_into_tensor: output has 5 elements, expected {world} ranks x 3")
    refused("reduce_scatter_tensor dtypes", lambda: dist.reduce_scatter_tensor(
        torch.ones(3), torch.ones(3 * world, dtype=torch.float64)),
            "loom reduce_scatter_tensor: input has dtype Double but output has dtype Float")
    refused("all_to_all_single splits", lambda: dist.all_to_all_single(
        torch.ones(3, 2), torch.ones(3, 2), [1] * world, [2] + [0] * (world - 1)),
            "loom all_to_all_single: input split sizes [2, 0] add up to 2 rows, but the input has 3")
    refused("all_to_all_single equal split", lambda: dist.all_to_all_single(torch.ones(3), torch.ones(3)),
            "loom all_to_all_single: input has 3 rows (dimension 0), not divisible into 2 equal parts")
    refused("negative tag", lambda: dist.send(torch.ones(3), 1 - rank, tag=-1),
            "loom send: tag -1 is negative")
    refused("source out of range", lambda: dist.recv(torch.ones(3), src=world + 1),
            f"loom recv: source {world + 1} is outside the group's ranks [0, {world})")

    # The group is still whole: nothing was sent for the refused calls.
    t = torch.full((10,), float(rank + 1))
    dist.all_reduce(t)
    assert t.tolist() == [float(sum(range(1, world + 1)))] * 10, t
    # Zero-size tensors are ordinary calls.
    empty = torch.empty(0)
    dist.all_reduce(empty)
    dist.broadcast(empty, 0)
    out = torch.empty(0)
    dist.all_gather_into_tensor(out, empty)
    dist.reduce_scatter_tensor(empty.clone(), out)
    dist.all_to_all_single(torch.empty(0), torch.empty(0))
    dist.barrier()
    print(f"rank {rank}: {checks} refusals checked, group still usable", flush=True)
    dist.destroy_process_group()


class ErrorsTest(unittest.TestCase):
    def test_bad_arguments_are_refused_by_name(self):
        result = torch_testing.run_ranks(__file__, 2, [], timeout=90)
        result.check_ok(self)
        for r in result.ranks:
            self.assertIn("14 refusals checked, group still usable", r.stdout, result.describe())
        torch_testing.check_nothing_left(self, result)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2:])
    else:
        unittest.main()
