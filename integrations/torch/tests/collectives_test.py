"""Every collective of PyTorch 1.13's process-group interface on Loom's backend,
against Gloo's result and against references computed from the seeded inputs, at 2,
3 and 4 processes and on subgroups made by new_group.

Each rank runs every case three times: on the world group of backend "loom" (the
default group), on a Gloo group of the same ranks, and on a Loom group in
deterministic mode. Loom's result must be:
  - bitwise Gloo's where the reduction order is fixed (2 ranks; integers; min, max;
    data that only moves), and within the dtype's error bound of it otherwise;
  - within the bound of the exact (float64) result, and exact for integers;
  - in deterministic mode, bitwise the rank-order fold (reference.fold).
Where Gloo 1.13 cannot run a case (bfloat16, AVG, reduce_scatter,
all_gather_into_tensor, reduce_scatter_tensor, all_to_all of lists) only the
references apply. Inputs are seeded per rank and case; the seed is printed.
"""

import sys
import unittest

import torch_testing

WORLDS = (2, 3, 4)


def worker(argv):
    seed = int(argv[0])
    import torch
    import torch.distributed as dist
    import loom_torch
    import reference as ref

    dist.init_process_group("loom")
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"pid {__import__('os').getpid()}", flush=True)
    gloo = dist.new_group(backend="gloo")
    det = dist.new_group(backend="loom", pg_options=loom_torch.Options(deterministic=True))
    assert loom_torch.layout() == f"shm among {world} ranks on one host", loom_torch.layout()
    checks = [0]

    def fail(what, message):
        raise AssertionError(f"seed {seed}, world {world}, rank {rank}: {what}: {message}")

    def expect_bitwise(what, got, want):
        checks[0] += 1
        if not ref.bitwise_equal(got, want):
            diff = (got.to(torch.float64) - want.to(torch.float64)).abs()
            fail(what, f"not bitwise equal (max difference {diff.max().item() if diff.numel() else 0})"
                       f"\n got {got[:8].tolist()}\nwant {want[:8].tolist()}")

    def expect_close(what, got, exact, bound):
        checks[0] += 1
        message = ref.within(got, exact, bound)
        if message:
            fail(what, message)

    def check_reduction(what, got, xs, op, dtype, gloo_got=None, det_got=None):
        """`got` (Loom), `gloo_got` and `det_got` against each other and the references."""
        n = len(xs)
        if dtype.is_floating_point and op not in ("min", "max"):
            exact, bound = ref.exact_and_bound(xs, op, dtype)
            expect_close(f"{what} vs exact", got, exact, bound)
            if gloo_got is not None:
                if n == 2:
                    expect_bitwise(f"{what} vs gloo (2 ranks: one order)", got, gloo_got)
                else:
                    _, gloo_bound = ref.gloo_bound(xs, op, dtype)
                    expect_close(f"{what} vs gloo", got, gloo_got.to(torch.float64), bound + gloo_bound)
        else:
            expect_bitwise(f"{what} vs reference", got, ref.fold(xs, op, dtype))
            if gloo_got is not None:
                expect_bitwise(f"{what} vs gloo", got, gloo_got)
        if det_got is not None:
            expect_bitwise(f"{what} deterministic vs rank-order fold", det_got, ref.fold(xs, op, dtype))

    def gloo_can(dtype, op=None):
        return dtype != torch.bfloat16 and op != "avg"

    def all_reduce_cases(group_ranks, loom_group, gloo_group, det_group, sizes, dtypes, ops):
        me = group_ranks.index(rank)
        n_ranks = len(group_ranks)
        for dtype in dtypes:
            for op in ops:
                for size in sizes:
                    case = f"all_reduce/{group_ranks}"
                    xs = [ref.make_input(seed, r, case, dtype, size, op, n_ranks) for r in range(n_ranks)]
                    got = xs[me].clone()
                    dist.all_reduce(got, ref.dist_op(op), group=loom_group)
                    gloo_got = None
                    if gloo_group is not None and gloo_can(dtype, op):
                        gloo_got = xs[me].clone()
                        dist.all_reduce(gloo_got, ref.dist_op(op), group=gloo_group)
                    det_got = None
                    if det_group is not None:
                        det_got = xs[me].clone()
                        dist.all_reduce(det_got, ref.dist_op(op), group=det_group)
                    check_reduction(f"all_reduce {dtype} {op} x{size} on {group_ranks}", got, xs, op,
                                    dtype, gloo_got, det_got)

    everyone = list(range(world))

    # all_reduce: every dtype and op; sizes 0, 1, odd, and past the shm eager size.
    all_reduce_cases(everyone, None, gloo, det, (0, 1, 1001), ref.DTYPES, ref.OPS)
    all_reduce_cases(everyone, None, gloo, det, (70001,), (torch.float32, torch.bfloat16, torch.int64),
                     ("sum", "max"))

    # Tensors in Loom's shared memory (loom_torch.empty): peers map them and copy
    # directly; the results are the same.
    for dtype, size in ((torch.float32, 300001), (torch.bfloat16, 70001)):
        xs = [ref.make_input(seed, r, "shared", dtype, size) for r in range(world)]
        got = loom_torch.empty(size, dtype=dtype)
        got.copy_(xs[rank])
        dist.all_reduce(got)
        check_reduction(f"all_reduce of a shared-memory {dtype} x{size}", got, xs, "sum", dtype)
        out = loom_torch.empty(world * size, dtype=dtype)
        dist.all_gather_into_tensor(out, got)
        expect_bitwise(f"all_gather_into_tensor into shared memory {dtype}", out, got.repeat(world))

    # all_reduce_coalesced.
    sizes = (5, 0, 300)
    for dtype in (torch.float32, torch.int32):
        xs = [[ref.make_input(seed, r, f"coalesced/{i}", dtype, s) for i, s in enumerate(sizes)]
              for r in range(world)]
        got = [x.clone() for x in xs[rank]]
        dist.all_reduce_coalesced(got)
        gloo_got = [x.clone() for x in xs[rank]]
        dist.all_reduce_coalesced(gloo_got, group=gloo)
        for i in range(len(sizes)):
            check_reduction(f"all_reduce_coalesced {dtype} tensor {i}", got[i],
                            [xs[r][i] for r in range(world)], "sum", dtype, gloo_got[i])

    # broadcast: any dtype travels (bool and int16 as bytes).
    for dtype in ref.DTYPES + (torch.bool, torch.int16):
        root = world - 1
        want = ref.make_input(seed, root, "broadcast", dtype, 1001)
        got = ref.make_input(seed, rank, "broadcast", dtype, 1001)
        dist.broadcast(got, root)
        expect_bitwise(f"broadcast {dtype}", got, want)
        if gloo_can(dtype) and dtype not in (torch.bool, torch.int16):
            gloo_got = ref.make_input(seed, rank, "broadcast", dtype, 1001)
            dist.broadcast(gloo_got, root, group=gloo)
            expect_bitwise(f"broadcast {dtype} vs gloo", got, gloo_got)

    # reduce: the root gets the reduction; the others keep their tensors.
    for dtype, op in ((torch.float32, "sum"), (torch.int64, "max"), (torch.float16, "prod")):
        root = 1 % world
        xs = [ref.make_input(seed, r, "reduce", dtype, 777, op) for r in range(world)]
        got = xs[rank].clone()
        dist.reduce(got, root, ref.dist_op(op))
        gloo_got = xs[rank].clone()
        dist.reduce(gloo_got, root, ref.dist_op(op), group=gloo)
        if rank == root:
            check_reduction(f"reduce {dtype} {op}", got, xs, op, dtype, gloo_got)
        else:
            expect_bitwise(f"reduce {dtype} off the root leaves the tensor", got, xs[rank])

    # all_gather (lists) and all_gather_into_tensor.
    for dtype in ref.DTYPES + (torch.bool,):
        xs = [ref.make_input(seed, r, "all_gather", dtype, 333) for r in range(world)]
        outs = [torch.empty_like(xs[rank]) for _ in range(world)]
        dist.all_gather(outs, xs[rank])
        for r in range(world):
            expect_bitwise(f"all_gather {dtype} block {r}", outs[r], xs[r])
        if gloo_can(dtype) and dtype != torch.bool:
            gloo_outs = [torch.empty_like(xs[rank]) for _ in range(world)]
            dist.all_gather(gloo_outs, xs[rank], group=gloo)
            for r in range(world):
                expect_bitwise(f"all_gather {dtype} block {r} vs gloo", outs[r], gloo_outs[r])
    for dtype in (torch.float32, torch.bfloat16, torch.int32):
        for size in (0, 257):
            xs = [ref.make_input(seed, r, "all_gather_into_tensor", dtype, size) for r in range(world)]
            out = torch.empty(world * size, dtype=dtype)
            dist.all_gather_into_tensor(out, xs[rank])
            expect_bitwise(f"all_gather_into_tensor {dtype} x{size}", out, torch.cat(xs))

    # gather to rank 0, scatter from the last rank.
    for dtype in (torch.float64, torch.uint8):
        xs = [ref.make_input(seed, r, "gather", dtype, 500) for r in range(world)]
        outs = [torch.empty_like(xs[rank]) for _ in range(world)] if rank == 0 else None
        dist.gather(xs[rank], outs, dst=0)
        gloo_outs = [torch.empty_like(xs[rank]) for _ in range(world)] if rank == 0 else None
        dist.gather(xs[rank], gloo_outs, dst=0, group=gloo)
        if rank == 0:
            for r in range(world):
                expect_bitwise(f"gather {dtype} block {r}", outs[r], xs[r])
                expect_bitwise(f"gather {dtype} block {r} vs gloo", outs[r], gloo_outs[r])
    for dtype in (torch.float32, torch.int64):
        root = world - 1
        xs = [ref.make_input(seed, r, "scatter", dtype, 400) for r in range(world)]
        got = torch.empty_like(xs[0])
        dist.scatter(got, xs if rank == root else None, src=root)
        expect_bitwise(f"scatter {dtype}", got, xs[rank])
        gloo_got = torch.empty_like(xs[0])
        dist.scatter(gloo_got, xs if rank == root else None, src=root, group=gloo)
        expect_bitwise(f"scatter {dtype} vs gloo", got, gloo_got)

    # reduce_scatter (lists) and reduce_scatter_tensor: references only (Gloo has neither).
    for dtype, op in ((torch.float32, "sum"), (torch.int32, "max"), (torch.bfloat16, "sum"),
                      (torch.float16, "avg"), (torch.int64, "sum")):
        block = 129
        xs = [ref.make_input(seed, r, "reduce_scatter", dtype, world * block, op, world)
              for r in range(world)]
        mine = [x[rank * block:(rank + 1) * block] for x in xs]
        got = torch.empty(block, dtype=dtype)
        dist.reduce_scatter(got, list(xs[rank].chunk(world)), ref.dist_op(op))
        det_got = torch.empty(block, dtype=dtype)
        dist.reduce_scatter(det_got, list(xs[rank].chunk(world)), ref.dist_op(op), group=det)
        check_reduction(f"reduce_scatter {dtype} {op}", got, mine, op, dtype, None, det_got)
        got = torch.empty(block, dtype=dtype)
        dist.reduce_scatter_tensor(got, xs[rank].clone(), ref.dist_op(op))
        det_got = torch.empty(block, dtype=dtype)
        dist.reduce_scatter_tensor(det_got, xs[rank].clone(), ref.dist_op(op), group=det)
        check_reduction(f"reduce_scatter_tensor {dtype} {op}", got, mine, op, dtype, None, det_got)

    # all_to_all_single, equal and with split sizes (some zero), against Gloo too.
    import random
    rows = [[random.Random(seed * 31 + src * 7 + dst).randrange(0, 4) for dst in range(world)]
            for src in range(world)]
    for dtype in (torch.float32, torch.int64, torch.bool):
        width = 3
        for split in (False, True):
            in_rows = sum(rows[rank]) if split else 2 * world
            xs = [ref.make_input(seed, r, f"a2a/{split}", dtype,
                                 (sum(rows[r]) if split else 2 * world) * width).view(-1, width)
                  for r in range(world)]
            out_rows = [rows[src][rank] for src in range(world)] if split else [2] * world
            want = torch.cat([xs[src].split(rows[src] if split else [2] * world)[rank]
                              for src in range(world)])
            got = torch.empty(sum(out_rows), width, dtype=dtype)
            dist.all_to_all_single(got, xs[rank], out_rows if split else None,
                                   rows[rank] if split else None)
            expect_bitwise(f"all_to_all_single {dtype} split={split}", got, want)
            assert xs[rank].shape[0] == in_rows
            if dtype != torch.bool:
                gloo_got = torch.empty_like(got)
                dist.all_to_all_single(gloo_got, xs[rank], out_rows if split else None,
                                       rows[rank] if split else None, group=gloo)
                expect_bitwise(f"all_to_all_single {dtype} split={split} vs gloo", got, gloo_got)
    # all_to_all of lists, pieces of different sizes.
    pieces = [[ref.make_input(seed, src, f"a2a-list/{dst}", torch.float32, 10 * src + dst + 1)
               for dst in range(world)] for src in range(world)]
    outs = [torch.empty(10 * src + rank + 1) for src in range(world)]
    dist.all_to_all(outs, pieces[rank])
    for src in range(world):
        expect_bitwise(f"all_to_all from {src}", outs[src], pieces[src][rank])

    # send/recv around the ring (even ranks send first: a large send waits for its
    # receive), with tags; small isend/irecv posted together; recv from any source.
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    mine = ref.make_input(seed, rank, "ring", torch.float32, 70001)
    got = torch.empty(70001)
    if rank % 2 == 0:
        dist.send(mine, nxt, tag=3)
        dist.recv(got, prv, tag=3)
    else:
        dist.recv(got, prv, tag=3)
        dist.send(mine, nxt, tag=3)
    expect_bitwise("send/recv ring", got, ref.make_input(seed, prv, "ring", torch.float32, 70001))
    small = ref.make_input(seed, rank, "small", torch.int64, 100)
    got_small = torch.empty(100, dtype=torch.int64)
    got_other_tag = torch.empty(3, dtype=torch.int64)
    requests = [dist.isend(small, nxt, tag=9), dist.isend(small[:3].clone(), nxt, tag=8),
                dist.irecv(got_other_tag, prv, tag=8), dist.irecv(got_small, prv, tag=9)]
    for request in requests:
        request.wait()
    expect_bitwise("isend/irecv tag 9", got_small, ref.make_input(seed, prv, "small", torch.int64, 100))
    expect_bitwise("isend/irecv tag 8", got_other_tag,
                   ref.make_input(seed, prv, "small", torch.int64, 100)[:3])
    if rank == 0:
        seen = set()
        for _ in range(world - 1):
            buf = torch.empty(50, dtype=torch.float64)
            source = dist.recv(buf, tag=5)
            seen.add(source)
            expect_bitwise(f"recv from any source ({source})", buf,
                           ref.make_input(seed, source, "any", torch.float64, 50))
        checks[0] += 1
        if seen != set(range(1, world)):
            fail("recv from any source", f"sources {sorted(seen)}")
    else:
        dist.send(ref.make_input(seed, rank, "any", torch.float64, 50), 0, tag=5)
    dist.barrier()

    # Subgroups made by new_group: every rank creates every group (torch's rule);
    # members run the cases.
    subgroups = [[0, 2]] if world == 3 else ([[0, 2], [1, 2, 3]] if world == 4 else [[1]])
    for members in subgroups:
        loom_sub = dist.new_group(members)
        gloo_sub = dist.new_group(members, backend="gloo")
        det_sub = dist.new_group(members, pg_options=loom_torch.Options(deterministic=True))
        if rank not in members:
            continue
        assert loom_torch.layout(loom_sub) == f"shm among {len(members)} ranks on one host"
        all_reduce_cases(members, loom_sub, gloo_sub, det_sub, (1001,),
                         (torch.float32, torch.bfloat16, torch.int32), ("sum", "max", "avg"))
        me, k = members.index(rank), len(members)
        xs = [ref.make_input(seed, r, f"sub-gather/{members}", torch.float16, 99) for r in range(k)]
        out = torch.empty(99 * k, dtype=torch.float16)
        dist.all_gather_into_tensor(out, xs[me], group=loom_sub)
        expect_bitwise(f"all_gather_into_tensor on {members}", out, torch.cat(xs))
        got = xs[me].clone()
        dist.broadcast(got, members[-1], group=loom_sub)
        expect_bitwise(f"broadcast on {members}", got, xs[-1])
        xs = [ref.make_input(seed, r, f"sub-rs/{members}", torch.float32, 50 * k) for r in range(k)]
        got = torch.empty(50)
        dist.reduce_scatter_tensor(got, xs[me].clone(), group=loom_sub)
        check_reduction(f"reduce_scatter_tensor on {members}", got,
                        [x[me * 50:(me + 1) * 50] for x in xs], "sum", torch.float32)
        dist.barrier(group=loom_sub)

    dist.barrier()
    # One write with its newline (see two_level_test.py: mpirun interleaves the halves
    # of an unbuffered print).
    sys.stdout.write(f"rank {rank}: {checks[0]} checks passed\n")
    sys.stdout.flush()
    dist.destroy_process_group()


class CollectivesTest(unittest.TestCase):
    def test_every_collective_against_gloo_and_references(self):
        seed = torch_testing.test_seed()
        for world in WORLDS:
            with self.subTest(world=world):
                result = torch_testing.run_ranks(__file__, world, [str(seed)], timeout=150)
                result.check_ok(self)
                for r in result.ranks:
                    self.assertRegex(r.stdout, rf"rank {r.rank}: [1-9]\d* checks passed")
                print(f"world {world}: {result.seconds:.1f} s; "
                      + "; ".join(line for r in result.ranks for line in r.stdout.splitlines()
                                  if "checks passed" in line), flush=True)
                torch_testing.check_nothing_left(self, result)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "worker":
        worker(sys.argv[2:])
    else:
        unittest.main()
