"""Seeded inputs and references for loom_torch's tests.

Every rank can make every rank's input of a case (make_input: seeded by the run's
seed, the rank and the case), so a rank checks a collective's result against
references computed locally:
  - fold: the rank-order fold ((x0 op x1) op x2) ..., which Loom's deterministic
    mode must equal bit for bit (16-bit floats folded in float32 and rounded once);
  - exact: the float64 result and a bound on a float result's error (bound), for
    results whose reduction order the algorithm picks.

Example:
    xs = [make_input(seed, r, "all_reduce/sum", torch.float32, 1000, "sum") for r in range(3)]
    fold(xs, "sum", torch.float32)      # what deterministic mode returns, bitwise
    exact, tol = exact_and_bound(xs, "sum", torch.float32)
"""

import zlib

import torch

FLOATS = (torch.float32, torch.float64, torch.float16, torch.bfloat16)
INTS = (torch.int8, torch.uint8, torch.int32, torch.int64)
DTYPES = FLOATS + INTS
OPS = ("sum", "avg", "prod", "min", "max")

_EPS = {torch.float32: 2.0 ** -24, torch.float64: 2.0 ** -53,
        torch.float16: 2.0 ** -11, torch.bfloat16: 2.0 ** -8}


def dist_op(op):
    import torch.distributed as dist
    return {"sum": dist.ReduceOp.SUM, "avg": dist.ReduceOp.AVG, "prod": dist.ReduceOp.PRODUCT,
            "min": dist.ReduceOp.MIN, "max": dist.ReduceOp.MAX}[op]


def _int_range(dtype, op, world):
    if op in ("sum", "avg"):
        return {torch.int8: (-120 // world, 120 // world), torch.uint8: (0, 255 // world),
                torch.int32: (-10 ** 6, 10 ** 6), torch.int64: (-10 ** 12, 10 ** 12)}[dtype]
    if op == "prod":
        return {torch.int8: (-2, 3), torch.uint8: (0, 3), torch.int32: (-3, 4),
                torch.int64: (-3, 4)}[dtype]
    info = torch.iinfo(dtype)
    return (max(info.min, -10 ** 12), min(info.max, 10 ** 12))


def make_input(seed, rank, case, dtype, n, op="sum", world=4):
    """Rank `rank`'s seeded input of `case`: n elements of `dtype`, distinct for every
    (seed, rank, case), in a range where `op` over `world` ranks cannot overflow."""
    key = (seed * 1000003 + rank * 7919 + zlib.crc32(f"{case}/{dtype}/{n}/{op}".encode())) % (1 << 62)
    g = torch.Generator().manual_seed(key)
    if dtype == torch.bool:
        return torch.randint(0, 2, (n,), generator=g).to(torch.bool)
    if dtype.is_floating_point:
        x = torch.rand(n, generator=g, dtype=torch.float64)
        x = 0.5 + x if op == "prod" else 2 * x - 1
        return x.to(dtype)
    if dtype == torch.int16:
        return torch.randint(-30000, 30000, (n,), generator=g).to(dtype)
    lo, hi = _int_range(dtype, op, world)
    return torch.randint(lo, hi + 1, (n,), generator=g, dtype=torch.int64).to(dtype)


def _combine(a, b, op):
    if op in ("sum", "avg"):
        return a + b
    if op == "prod":
        return a * b
    if op == "min":
        return torch.minimum(a, b)
    return torch.maximum(a, b)


def fold(xs, op, dtype):
    """The rank-order fold of `xs`, as Loom's deterministic mode computes it."""
    acc_dtype = torch.float32 if dtype in (torch.float16, torch.bfloat16) else dtype
    acc = xs[0].to(acc_dtype).clone()
    for x in xs[1:]:
        acc = _combine(acc, x.to(acc_dtype), op)
    if op == "avg":
        if acc_dtype.is_floating_point:
            acc = acc / len(xs)
        else:
            acc = torch.div(acc, len(xs), rounding_mode="trunc")
    return acc.to(dtype)


def exact_and_bound(xs, op, dtype):
    """The float64 result and the largest error a correctly rounded, any-order float
    reduction of `xs` in `dtype` may have (Loom reduces 16-bit floats in float32)."""
    n = len(xs)
    wide = [x.to(torch.float64) for x in xs]
    exact = wide[0].clone()
    for x in wide[1:]:
        exact = _combine(exact, x, op)
    if op in ("sum", "avg"):
        magnitude = sum(x.abs() for x in wide)
    else:
        magnitude = exact.abs()
    if op == "avg":
        exact = exact / n
        magnitude = magnitude / n
    if op in ("min", "max"):
        return exact, torch.zeros_like(exact)
    tiny = torch.finfo(dtype).tiny
    if dtype in (torch.float16, torch.bfloat16):
        bound = _EPS[dtype] * exact.abs() + n * _EPS[torch.float32] * magnitude + tiny
    else:
        bound = n * _EPS[dtype] * magnitude + tiny
    return exact, bound


def gloo_bound(xs, op, dtype):
    """The error bound of Gloo's result: it reduces 16-bit floats in 16 bits."""
    exact, bound = exact_and_bound(xs, op, dtype)
    if dtype == torch.float16 and op in ("sum", "prod"):
        magnitude = sum(x.to(torch.float64).abs() for x in xs) if op == "sum" else exact.abs()
        bound = len(xs) * _EPS[dtype] * magnitude + torch.finfo(dtype).tiny
    return exact, bound


def within(got, exact, bound):
    """Indices where float result `got` is off `exact` by more than `bound` (a message)."""
    err = (got.to(torch.float64) - exact).abs()
    bad = (err > bound).nonzero().flatten()
    if bad.numel() == 0:
        return None
    i = int(bad[0])
    return (f"{bad.numel()} of {got.numel()} elements out of bound; element {i}: got "
            f"{got[i].item()!r}, exact {exact[i].item()!r}, error {err[i].item():.3g} > bound "
            f"{bound[i].item():.3g}")


def bitwise_equal(a, b):
    """True when a and b hold the same bits (so -0.0 differs from 0.0, NaNs compare)."""
    if a.dtype != b.dtype or a.shape != b.shape:
        return False
    if a.dtype.is_floating_point:
        width = {2: torch.int16, 4: torch.int32, 8: torch.int64}[a.element_size()]
        return torch.equal(a.contiguous().view(width), b.contiguous().view(width))
    return torch.equal(a, b)
