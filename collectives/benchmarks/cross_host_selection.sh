#!/bin/bash
# Selection across hosts: all-reduce f32 on emulated hosts (tools/cluster, network
# namespaces, links rate-limited with tc), one rank per host, every Loom algorithm,
# Open MPI's own (native), Loom's auto with a cost model calibrated on that very job
# (collective_bench --calibrate: each level's link, and native curves), and Loom
# over gloo's TCP pairs. Prints a markdown table per host count: auto against the
# best of {every Loom algorithm, native}, the ratio, and the rest. Needs root.
#
#   collectives/benchmarks/cross_host_selection.sh [HOSTS...] (default: 2 3)
#   RATE=2gbit ITERS=10 MAX=64M collectives/benchmarks/cross_host_selection.sh 2
#
# Each column is collective_bench's own timing (warm-up, timed iterations, the
# slowest rank's mean); the runs of one size are minutes apart, so compare ratios
# near 1 with care: run it twice.
set -euo pipefail
cd "$(dirname "$0")/../.."
HOSTS=("${@:-2}")
[[ $# -gt 0 ]] || HOSTS=(2 3)
RATE="${RATE:-2gbit}"
ITERS="${ITERS:-10}"
MAX="${MAX:-64M}"
CLUSTER="$PWD/tools/cluster/cluster.sh --name=xsel"
WORK="$(mktemp -d "$PWD/.xsel.XXXXXX")"  # outside /tmp: every host sees it
trap '$CLUSTER down; rm -rf "$WORK"' EXIT

./bazelw build -c opt //tools:collective_bench >&2
BENCH="$(./bazelw info -c opt bazel-bin 2>/dev/null)/tools/collective_bench"
ALGOS=(ring tree dbtree halving_doubling direct native)
COMMON=(--op=all_reduce --dtype=f32 --min_bytes=4K --max_bytes="$MAX" --step_factor=4
        --iters="$ITERS" --warmup=2 --timeout=5m)

# rows FILE: "size algo time_us" per row of a collective_bench table.
rows() { awk '/^ *[0-9]+ +[0-9]+ +f32/ { print $1, $5, $6 }' "$1"; }

for hosts in "${HOSTS[@]}"; do
  $CLUSTER up "$hosts" --rate="$RATE" --slots=1 >&2
  mpi() { $CLUSTER exec h1 -- mpirun $($CLUSTER mpirun-args) -np "$hosts" "$BENCH" --transport=mpi "$@"; }
  : >"$WORK/all"
  for algo in "${ALGOS[@]}"; do
    echo "hosts $hosts: $algo" >&2
    mpi "${COMMON[@]}" --algo="$algo" >"$WORK/$algo"
    rows "$WORK/$algo" >>"$WORK/all"
  done
  echo "hosts $hosts: auto (calibrated)" >&2
  mpi "${COMMON[@]}" --algo=auto --calibrate --save_cost_model="$WORK/model" >"$WORK/auto"
  rows "$WORK/auto" | awk '{ print $1, "auto", $3 }' >>"$WORK/all"
  grep '^# ' "$WORK/auto" | grep -v '^# transport' >"$WORK/model.printed" || true
  # What auto chose at each size (the model's own explanation is in the saved file).
  echo "hosts $hosts: loom over gloo (auto)" >&2
  mkdir -p "$WORK/gloo"
  $CLUSTER exec h1 -- mpirun $($CLUSTER mpirun-args) -np "$hosts" sh -c \
    'LOOM_JOB_ID=xsel LOOM_WORLD_SIZE=$OMPI_COMM_WORLD_SIZE LOOM_RANK=$OMPI_COMM_WORLD_RANK exec "$0" "$@"' \
    "$BENCH" --transport=gloo --gloo_interface=eth0 --gloo_store_dir="$WORK/gloo" \
    "${COMMON[@]}" --algo=auto >"$WORK/gloo.out"
  rows "$WORK/gloo.out" | awk '{ print $1, "gloo", $3 }' >>"$WORK/all"
  rm -rf "$WORK/gloo"
  $CLUSTER down

  echo
  echo "### $hosts hosts, one rank each, links at $RATE (all-reduce f32, time per call)"
  echo
  echo "| size | auto | best Loom algorithm | native (Open MPI) | best of Loom and native | auto / best | Loom over gloo (auto) |"
  echo "|---:|---:|---|---:|---:|---:|---:|"
  awk '
    function fmt(us) { return us >= 1000 ? sprintf("%.2f ms", us / 1000) : sprintf("%.0f us", us) }
    function size(b) { return b >= 1048576 ? (b / 1048576) " MiB" : (b / 1024) " KiB" }
    { t[$1, $2] = $3; sizes[$1] = 1
      if ($2 != "auto" && $2 != "native" && $2 != "gloo" && (!(($1) in loom) || $3 < loom[$1])) {
        loom[$1] = $3; loom_name[$1] = $2 } }
    END {
      n = 0; for (s in sizes) order[++n] = s + 0
      for (i = 1; i <= n; ++i) for (j = i + 1; j <= n; ++j) if (order[j] < order[i]) { x = order[i]; order[i] = order[j]; order[j] = x }
      for (i = 1; i <= n; ++i) {
        s = order[i]; best = loom[s]; if (t[s, "native"] < best) best = t[s, "native"]
        printf "| %s | %s | %s %s | %s | %s | %.2f | %s |\n", size(s), fmt(t[s, "auto"]), loom_name[s],
          fmt(loom[s]), fmt(t[s, "native"]), fmt(best), best / t[s, "auto"], fmt(t[s, "gloo"])
      }
    }' "$WORK/all"
  echo
  echo "Cost model calibrated by that run:"
  echo
  sed 's/^# /    /' "$WORK/model.printed"
done
