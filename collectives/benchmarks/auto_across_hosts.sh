#!/bin/bash
# `--algo=auto` across emulated hosts with no flag or file, against every algorithm
# (tools/cluster, RANKS_PER_HOST ranks per host (1), links at RATE): auto twice (the first run
# measures the cost model, collectives/auto_calibration.h, the second reads the
# cache), then every Loom algorithm and Open MPI's own once, all-reduce f32 at 4 KiB
# .. 64 MiB (and hierarchical with several ranks per host). Prints each run's rows,
# then per size auto's choice, its two times, the best single run and best / auto.
# Needs root.
#
#   collectives/benchmarks/auto_across_hosts.sh [HOSTS] (default 2)
#   RATE=2gbit ITERS=10 collectives/benchmarks/auto_across_hosts.sh 3
#   RANKS_PER_HOST=2 collectives/benchmarks/auto_across_hosts.sh 2
#   DELAY=2ms collectives/benchmarks/auto_across_hosts.sh 2   # a long link (delay line)
set -euo pipefail
cd "$(dirname "$0")/../.."
HOSTS="${1:-2}"
RATE="${RATE:-2gbit}"
ITERS="${ITERS:-10}"
RANKS_PER_HOST="${RANKS_PER_HOST:-1}"
DELAY="${DELAY:-}"  # one-way delay of the link (cluster.sh --delay); empty: none
RANKS=$((HOSTS * RANKS_PER_HOST))
ALGOS="ring direct halving_doubling dbtree tree native"
if ((RANKS_PER_HOST > 1)); then ALGOS="$ALGOS hierarchical"; fi
CLUSTER="$PWD/tools/cluster/cluster.sh --name=xauto"
# The cache and the rows live outside /tmp, which each emulated host has its own of.
WORK="$(mktemp -d "$PWD/.auto_across_hosts.XXXXXX")"
trap '$CLUSTER down >/dev/null 2>&1; rm -rf "$WORK"' EXIT

./bazelw build --config=opt //tools:collective_bench //tools/cluster:delay_line >&2
BIN="$(./bazelw info --config=opt bazel-bin 2>/dev/null)"
BENCH="$BIN/tools/collective_bench"
LOOM_DELAY_LINE="$BIN/tools/cluster/delay_line" $CLUSTER up "$HOSTS" --rate="$RATE" \
  ${DELAY:+--delay="$DELAY"} --subnet=10.197.0 --ranks_per_host="$RANKS_PER_HOST" >&2
run() {  # ROUND ALGO -> "round algo bytes chosen time_us"; the calibration line on stderr
  # shellcheck disable=SC2046  # mpirun-args is a list of words
  $CLUSTER exec h1 -- mpirun $($CLUSTER mpirun-args) -np "$RANKS" "$BENCH" --transport=mpi \
    --op=all_reduce --algo="$2" --min_bytes=4K --max_bytes=64M --step_factor=4 \
    --iters="$ITERS" --warmup=2 --timeout=5m --check --cost_model_cache="$WORK" |
    awk -v r="$1" -v a="$2" '/cost model/ { print > "/dev/stderr" }
      $1 ~ /^[0-9]+$/ && NF >= 9 { if ($9 != 0) { print "wrong elements:", $0 > "/dev/stderr"; exit 1 }
                                   print r, a, $1, $5, $6 }'
}
{
  run 1 auto
  run 2 auto
  for algo in $ALGOS; do run 0 "$algo"; done
} | tee "$WORK/rows"
python3 - "$WORK/rows" <<'PY'
import sys
best, auto = {}, {}
for line in open(sys.argv[1]):
    rnd, algo, size, chosen, us = line.split()
    size, us = int(size), float(us)
    if rnd == "0":
        if size not in best or us < best[size][1]:
            best[size] = (algo, us)
    else:
        auto.setdefault(size, []).append((chosen, us))
print("# size  auto's choice  auto us (runs)  best  best/auto")
for size in sorted(best):
    runs = auto[size]
    print(size, runs[0][0], " / ".join(f"{u:.1f}" for _, u in runs), best[size][0],
          f"{best[size][1]:.1f}", " / ".join(f"{best[size][1] / u:.2f}" for _, u in runs))
PY
