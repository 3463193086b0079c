#!/bin/bash
# Selection across hosts: all-reduce f32 on emulated hosts (tools/cluster, network
# namespaces, links rate-limited with tc), one rank per host, every Loom algorithm,
# Open MPI's own (native), Loom's auto with a cost model calibrated once on that
# cluster (collective_bench --calibrate: each level's link, and every candidate's
# measured curve, native's too), and Loom over gloo's TCP pairs. Prints a markdown
# table per host count: auto against the best of {every Loom algorithm, native},
# the ratio, and the rest. Needs root; about 12 minutes per host count.
#
#   collectives/benchmarks/cross_host_selection.sh [HOSTS...] (default: 2 3)
#   RATE=2gbit ITERS=20 ROUNDS=2 MAX=64M collectives/benchmarks/cross_host_selection.sh 2
#
# Each column is collective_bench's own timing (warm-up, then the mean of the timed
# iterations), the best of ROUNDS rounds run in alternating order; auto uses a model
# calibrated once, before the rounds, on the same cluster.
set -euo pipefail
cd "$(dirname "$0")/../.."
HOSTS=("$@")
[[ $# -gt 0 ]] || HOSTS=(2 3)
RATE="${RATE:-2gbit}"
ITERS="${ITERS:-20}"
ROUNDS="${ROUNDS:-2}"
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
  $CLUSTER up "$hosts" --rate="$RATE" --ranks_per_host=1 >&2
  mpi() { $CLUSTER exec h1 -- mpirun $($CLUSTER mpirun-args) -np "$hosts" "$BENCH" --transport=mpi "$@"; }
  # The cost model, calibrated once on this job's layout and links (its own run).
  echo "hosts $hosts: calibrating" >&2
  calibration_start=$SECONDS
  mpi --calibrate --save_cost_model="$WORK/model" --min_bytes=4K --max_bytes="$MAX" --iters=1 \
    --warmup=0 >/dev/null
  calibration_seconds=$((SECONDS - calibration_start))
  : >"$WORK/all"
  # Rounds in alternating order; each (size, algorithm) keeps its best round, so a
  # run slowed by the machine's other work does not decide a ratio.
  for ((round = 1; round <= ROUNDS; ++round)); do
    order=("${ALGOS[@]}" auto gloo)
    ((round % 2 == 0)) && order=(gloo auto $(printf '%s\n' "${ALGOS[@]}" | tac))
    for algo in "${order[@]}"; do
      echo "hosts $hosts, round $round: $algo" >&2
      case "$algo" in
        auto)
          mpi "${COMMON[@]}" --algo=auto --cost_model="$WORK/model" >"$WORK/out"
          rows "$WORK/out" | awk '{ print $1, "auto", $3, $2 }' >>"$WORK/all"
          ;;
        gloo)
          mkdir -p "$WORK/gloo"
          $CLUSTER exec h1 -- mpirun $($CLUSTER mpirun-args) -np "$hosts" sh -c \
            'LOOM_JOB_ID=xsel LOOM_WORLD_SIZE=$OMPI_COMM_WORLD_SIZE LOOM_RANK=$OMPI_COMM_WORLD_RANK exec "$0" "$@"' \
            "$BENCH" --transport=gloo --gloo_interface=eth0 --gloo_store_dir="$WORK/gloo" \
            "${COMMON[@]}" --algo=auto >"$WORK/out"
          rm -rf "$WORK/gloo"
          rows "$WORK/out" | awk '{ print $1, "gloo", $3 }' >>"$WORK/all"
          ;;
        *)
          mpi "${COMMON[@]}" --algo="$algo" >"$WORK/out"
          rows "$WORK/out" | awk -v a="$algo" '{ print $1, a, $3 }' >>"$WORK/all"
          ;;
      esac
    done
  done
  $CLUSTER down

  echo
  echo "### $hosts hosts, one rank each, links at $RATE (all-reduce f32, time per call, best of $ROUNDS rounds)"
  echo
  echo "| size | auto (its choice) | best Loom algorithm | native (Open MPI) | best of Loom and native | auto / best | Loom over gloo (auto) |"
  echo "|---:|---:|---|---:|---:|---:|---:|"
  awk '
    function fmt(us) { return us >= 1000 ? sprintf("%.2f ms", us / 1000) : sprintf("%.0f us", us) }
    function size(b) { return b >= 1048576 ? (b / 1048576) " MiB" : (b / 1024) " KiB" }
    { if (!(($1, $2) in t) || $3 < t[$1, $2]) { t[$1, $2] = $3; if ($2 == "auto") chose[$1] = $4 }
      sizes[$1] = 1 }
    END {
      for (key in t) { split(key, k, SUBSEP)
        if (k[2] != "auto" && k[2] != "native" && k[2] != "gloo" && (!((k[1]) in loom) || t[key] < loom[k[1]])) {
          loom[k[1]] = t[key]; loom_name[k[1]] = k[2] } }
      n = 0; for (s in sizes) order[++n] = s + 0
      for (i = 1; i <= n; ++i) for (j = i + 1; j <= n; ++j) if (order[j] < order[i]) { x = order[i]; order[i] = order[j]; order[j] = x }
      for (i = 1; i <= n; ++i) {
        s = order[i]; best = loom[s]; if (t[s, "native"] < best) best = t[s, "native"]
        printf "| %s | %s (%s) | %s %s | %s | %s | %.2f | %s |\n", size(s), fmt(t[s, "auto"]), chose[s],
          loom_name[s], fmt(loom[s]), fmt(t[s, "native"]), fmt(best), best / t[s, "auto"], fmt(t[s, "gloo"])
      }
    }' "$WORK/all"
  echo
  echo "Cost model calibrated for that cluster (collective_bench --calibrate, ${calibration_seconds} s):"
  echo
  sed 's/^/    /' "$WORK/model"
done
