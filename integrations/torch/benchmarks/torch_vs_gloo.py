"""PyTorch's Gloo backend against Loom's ("loom"), in one run, on this machine.

For each round it starts the same 2-process job twice, once per backend, alternating
which goes first, and each job measures:
  - all_reduce (float32, sum) of 4 KiB .. 64 MiB: the median time of one call over
    many calls (each result checked), and the bus bandwidth that gives
    (nccl-tests' busbw: 2 * (n - 1) / n * bytes / time); for Loom also on tensors
    in its shared memory (loom_torch.empty), which peers map rather than read
    through the kernel;
  - DistributedDataParallel steps (forward, backward with DDP's all-reduce, SGD) of
    a 16.8 M-parameter MLP: the median step time.
The table shows each figure's median over the rounds, and Loom's bandwidth and step
time against Gloo's. Run it through compare_gloo.sh (builds loom_torch optimized and
adds the machine's name and memory bandwidth).

    python3 torch_vs_gloo.py [--rounds N] [--json FILE]
"""

import argparse
import json
import os
import socket
import statistics
import subprocess
import sys
import time

SIZES = [4096 << i for i in range(15)]  # 4 KiB .. 64 MiB
WORLD = 2
LAYERS, WIDTH, BATCH = 4, 2048, 16
DDP_WARMUP, DDP_STEPS = 3, 15


def iterations(size):
    # About 0.15 s of Gloo per size, at least 5 calls: short rounds, so that more of
    # them fit between the other loads of a shared machine.
    return max(5, min(1000, int(150e6 / (size * 1.0 + 150e3))))


def worker(backend):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    if backend == "loom":
        import loom_torch  # noqa: F401
    dist.init_process_group(backend)
    rank = dist.get_rank()
    result = {"backend": backend, "all_reduce_us": {}, "shared_all_reduce_us": {},
              "ddp_step_ms": None}
    kinds = [("all_reduce_us", torch.ones)]
    if backend == "loom":
        kinds.append(("shared_all_reduce_us", lambda n: loom_torch.empty(n).fill_(1.0)))
    for key, make in kinds:
        for size in SIZES:
            x = make(size // 4)
            for _ in range(3):
                dist.all_reduce(x)
            samples = []
            dist.barrier()
            for _ in range(iterations(size)):
                x.fill_(rank + 1.0)
                start = time.perf_counter()
                dist.all_reduce(x)
                samples.append(time.perf_counter() - start)
            assert x[0].item() == 3.0 and x[-1].item() == 3.0, f"{backend} all_reduce of {size} B is wrong"
            result[key][size] = statistics.median(samples) * 1e6

    from ddp_steps import median_ddp_step  # this directory (the script's own)
    _, step_seconds, params = median_ddp_step(LAYERS, WIDTH, BATCH, DDP_WARMUP, DDP_STEPS)
    result["ddp_step_ms"] = step_seconds * 1e3
    result["ddp_params"] = params
    if rank == 0:
        print("RESULT " + json.dumps(result), flush=True)
    dist.destroy_process_group()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(backend):
    env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()),
               WORLD_SIZE=str(WORLD), OMP_NUM_THREADS="1")
    procs = [subprocess.Popen([sys.executable, __file__, "--worker", backend],
                              env=dict(env, RANK=str(r), LOCAL_RANK=str(r)),
                              stdout=subprocess.PIPE, text=True) for r in range(WORLD)]
    outs = [p.communicate(timeout=600)[0] for p in procs]
    if any(p.returncode != 0 for p in procs):
        raise SystemExit(f"{backend} job failed: exit codes {[p.returncode for p in procs]}")
    line = next(l for l in outs[0].splitlines() if l.startswith("RESULT "))
    return json.loads(line[len("RESULT "):])


def busbw(size, us):
    return 2 * (WORLD - 1) / WORLD * size / (us * 1e-6) / 1e9


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--json", default="")
    parser.add_argument("--worker", default="")
    args = parser.parse_args()
    if args.worker:
        worker(args.worker)
        return
    import loom_torch
    if loom_torch.BUILD_MODE != "optimized":
        print("warning: loom_torch was built without optimization; build it with "
              "./bazelw build --config=opt //integrations/torch:loom_torch", file=sys.stderr)
    runs = {"gloo": [], "loom": []}
    for round_ in range(args.rounds):
        order = ("gloo", "loom") if round_ % 2 == 0 else ("loom", "gloo")
        for backend in order:
            runs[backend].append(launch(backend))
        print(f"round {round_ + 1}/{args.rounds}: DDP step gloo "
              f"{runs['gloo'][-1]['ddp_step_ms']:.1f} ms, loom {runs['loom'][-1]['ddp_step_ms']:.1f} ms",
              file=sys.stderr, flush=True)

    def med(backend, key, size=None):
        values = [r[key][str(size)] if size is not None else r[key] for r in runs[backend]]
        return statistics.median(values)

    import torch
    print(f"## all_reduce f32 sum, {WORLD} processes, median of {args.rounds} alternated runs "
          f"(PyTorch {torch.__version__}, loom_torch {loom_torch.BUILD_MODE})")
    print(f"{'size(B)':>10} {'gloo_us':>10} {'loom_us':>10} {'gloo_busbw':>11} {'loom_busbw':>11} "
          f"{'loom/gloo bw':>13} {'loom/gloo time':>15} {'shared_us':>10} {'shared_busbw':>13} "
          f"{'shared/gloo bw':>15}")
    table = []
    for size in SIZES:
        g, l = med("gloo", "all_reduce_us", size), med("loom", "all_reduce_us", size)
        s = med("loom", "shared_all_reduce_us", size)
        print(f"{size:>10} {g:>10.1f} {l:>10.1f} {busbw(size, g):>11.2f} {busbw(size, l):>11.2f} "
              f"{g / l:>12.2f}x {l / g:>15.3f} {s:>10.1f} {busbw(size, s):>13.2f} {g / s:>14.2f}x")
        table.append({"bytes": size, "gloo_us": g, "loom_us": l, "loom_shared_us": s})
    g, l = med("gloo", "ddp_step_ms"), med("loom", "ddp_step_ms")
    params = runs["loom"][0]["ddp_params"]
    print(f"## DDP step ({params / 1e6:.1f} M parameters, {LAYERS} x Linear({WIDTH}, {WIDTH}), batch "
          f"{BATCH}, SGD), median of {DDP_STEPS} steps, median of {args.rounds} runs")
    print(f"gloo {g:.1f} ms, loom {l:.1f} ms, loom/gloo {l / g:.3f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"all_reduce": table, "ddp_step_ms": {"gloo": g, "loom": l}, "runs": runs}, f,
                      indent=1)


if __name__ == "__main__":
    main()
