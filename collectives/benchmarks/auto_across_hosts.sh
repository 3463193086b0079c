#!/bin/bash
# `--algo=auto` across emulated hosts with no flag or file, against every algorithm
# (tools/cluster, RANKS_PER_HOST ranks per host (1), links at RATE): auto once to measure
# the cost model (collectives/auto_calibration.h), then ROUNDS rounds of auto (the first
# two measure again and cache the median of the three calibrations, as a user's first
# three jobs do; the rest read the cache) and every Loom algorithm and Open MPI's own
# in turn, all-reduce f32 at
# 4 KiB .. 64 MiB (and hierarchical with several ranks per host), each size at least
# MIN_TIME. Prints each run's rows, then per size auto's choice, the calibrating run's
# time and the cached runs' median, the algorithm with the best median, and best / auto
# (medians, and the lowest..highest of the rounds). With CALIBRATIONS=C, C cost models
# are measured, each into a cache of its own, and every round runs auto once from each:
# auto's choice is the calibration's luck at the small sizes, so one calibration
# judges one draw of it. Then per size, each calibration's choice and best / auto.
# Needs root.
#
#   collectives/benchmarks/auto_across_hosts.sh [HOSTS] (default 2)
#   RATE=2gbit ITERS=10 collectives/benchmarks/auto_across_hosts.sh 3
#   RANKS_PER_HOST=2 collectives/benchmarks/auto_across_hosts.sh 2
#   DELAY=2ms collectives/benchmarks/auto_across_hosts.sh 2   # a long link (delay line)
#   TRANSPORT=gloo collectives/benchmarks/auto_across_hosts.sh 2  # Loom over gloo (no native)
#   CALIBRATIONS=4 ROUNDS=5 MAX_BYTES=1M collectives/benchmarks/auto_across_hosts.sh 3
#   BENCH=/path/to/collective_bench ...   # a built binary (an A/B), not //tools:collective_bench
#   OWN_CPUS=1 ...   # each host on its own share of the CPUs (cluster.sh up --own_cpus)
#   CONGESTION=bbr ...   # the hosts' TCP congestion control (cluster.sh up --congestion)
#   MPI_EXTRA="--map-by node" ...   # more mpirun flags (ranks dealt round-robin over hosts)
set -euo pipefail
cd "$(dirname "$0")/../.."
HOSTS="${1:-2}"
RATE="${RATE:-2gbit}"
ITERS="${ITERS:-10}"
ROUNDS="${ROUNDS:-3}"      # rounds of auto (from the cache) and every algorithm, in turn; 0: calibrate only
MIN_TIME="${MIN_TIME:-0.2s}"  # each size runs at least this long (collective_bench --min_time)
RANKS_PER_HOST="${RANKS_PER_HOST:-1}"
DELAY="${DELAY:-}"  # one-way delay of the link (cluster.sh --delay); empty: none
MIN_BYTES="${MIN_BYTES:-4K}"
MAX_BYTES="${MAX_BYTES:-64M}"
CALIBRATIONS="${CALIBRATIONS:-1}"  # independent cost models, each auto's own run per round
OWN_CPUS="${OWN_CPUS:-0}"  # 1: cluster.sh up --own_cpus
CONGESTION="${CONGESTION:-}"  # cluster.sh up --congestion; empty: its default
TRANSPORT="${TRANSPORT:-mpi}"  # mpi, or gloo (its own TCP pairs; Open MPI only starts the ranks)
[[ "$TRANSPORT" == mpi || "$TRANSPORT" == gloo ]] || { echo "TRANSPORT=$TRANSPORT: mpi or gloo" >&2; exit 2; }
RANKS=$((HOSTS * RANKS_PER_HOST))
ALGOS="ring direct halving_doubling dbtree tree"
if [[ "$TRANSPORT" == mpi ]]; then ALGOS="$ALGOS native"; fi
if ((RANKS_PER_HOST > 1)); then ALGOS="$ALGOS hierarchical"; fi
CLUSTER="$PWD/tools/cluster/cluster.sh --name=xauto"
# The cache and the rows live outside /tmp, which each emulated host has its own of.
WORK="$(mktemp -d "$PWD/.auto_across_hosts.XXXXXX")"
trap '$CLUSTER down >/dev/null 2>&1; rm -rf "$WORK"' EXIT

./bazelw build --config=opt //tools:collective_bench //tools/cluster:delay_line >&2
BIN="$(./bazelw info --config=opt bazel-bin 2>/dev/null)"
BENCH="${BENCH:-$BIN/tools/collective_bench}"
LOOM_DELAY_LINE="$BIN/tools/cluster/delay_line" $CLUSTER up "$HOSTS" --rate="$RATE" \
  ${DELAY:+--delay="$DELAY"} --subnet=10.197.0 --ranks_per_host="$RANKS_PER_HOST" \
  $( ((OWN_CPUS)) && echo --own_cpus) ${CONGESTION:+--congestion="$CONGESTION"} >&2
echo "# hosts' TCP congestion control: $($CLUSTER congestion)"
run() {  # ROUND ALGO [LABEL CACHE] -> "round label bytes chosen time_us"; the calibration line on stderr
  local transport=(--transport=mpi) launched=()
  if [[ "$TRANSPORT" == gloo ]]; then
    # mpirun only starts the processes: each is told it is a rank of a launched job
    # (tools/launcher.h) and meets the others in a fresh directory.
    transport=(--transport=gloo --gloo_interface=eth0 --gloo_store_dir="$(mktemp -d "$WORK/store.XXXXXX")")
    launched=(sh -c 'LOOM_JOB_ID=xauto LOOM_WORLD_SIZE=$OMPI_COMM_WORLD_SIZE LOOM_RANK=$OMPI_COMM_WORLD_RANK exec "$0" "$@"')
  fi
  # shellcheck disable=SC2046  # mpirun-args is a list of words
  $CLUSTER exec h1 -- mpirun $($CLUSTER mpirun-args) -np "$RANKS" ${MPI_EXTRA:-} "${launched[@]}" "$BENCH" "${transport[@]}" \
    --op=all_reduce --algo="$2" --min_bytes="$MIN_BYTES" --max_bytes="$MAX_BYTES" --step_factor=4 \
    --iters="$ITERS" --min_time="$MIN_TIME" --warmup=2 --timeout=5m --check --cost_model_cache="${4:-$WORK/cache1}" |
    awk -v r="$1" -v a="${3:-$2}" '/cost model/ { print > "/dev/stderr" }
      $1 ~ /^[0-9]+$/ && NF >= 9 { if ($9 != 0) { print "wrong elements:", $0 > "/dev/stderr"; exit 1 }
                                   print r, a, $1, $5, $6 }'
}
{
  for ((c = 1; c <= CALIBRATIONS; ++c)); do
    mkdir -p "$WORK/cache$c"
    run 0 auto "auto$c" "$WORK/cache$c"  # measures a cost model and caches it
  done
  for ((round = 1; round <= ROUNDS; ++round)); do
    for ((c = 1; c <= CALIBRATIONS; ++c)); do run "$round" auto "auto$c" "$WORK/cache$c"; done  # from the caches
    for algo in $ALGOS; do run "$round" "$algo"; done
  done
} | tee "$WORK/rows"
# ROUNDS=0: the calibrations' choices (round 0's rows) and their models only.
((ROUNDS > 0)) && python3 - "$WORK/rows" <<'PY'
import statistics, sys
times = {}  # (label, size) -> [us per round]; round 0 is each calibration's measuring run
chosen, calibrating = {}, {}  # (autoC, size) -> choices; -> us
for line in open(sys.argv[1]):
    rnd, label, size, choice, us = line.split()
    size, us = int(size), float(us)
    if rnd == "0":
        calibrating[(label, size)] = us
        continue
    times.setdefault((label, size), []).append(us)
    if label.startswith("auto"):
        chosen.setdefault((label, size), set()).add(choice)
autos = sorted({label for label, _ in calibrating}, key=lambda l: int(l[4:]))
print("# size  best (median us)  then per calibration: auto's choice, auto us (calibrating run; "
      "median of the cached runs), best/auto (medians; lowest..highest round)")
for size in sorted({s for _, s in calibrating}):
    medians = {a: statistics.median(t) for (a, s), t in times.items()
               if s == size and not a.startswith("auto")}
    best = min(medians, key=medians.get)
    row = [str(size), best, f"{medians[best]:.1f}"]
    for label in autos:
        auto = times[(label, size)]
        ratios = [b / a for a, b in zip(auto, times[(best, size)])]
        row += ["|", "/".join(sorted(chosen[(label, size)])),
                f"{calibrating[(label, size)]:.1f}; {statistics.median(auto):.1f}",
                f"{medians[best] / statistics.median(auto):.2f}", f"({min(ratios):.2f}..{max(ratios):.2f})"]
    print(" ".join(row))
PY
echo "# the cost models the calibrating runs measured (and the cached runs read):"
for cache in "$WORK"/cache*; do echo "## $cache"; cat "$cache"/cost_model-*.txt; done
