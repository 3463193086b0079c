#!/usr/bin/env bash
# `--algo=auto` across two emulated hosts joined by a 2 Gbit/s link (tools/cluster,
# one rank per host, collective_bench over MPI), with no flag or file: the first three
# runs each measure the cost model (collectives/auto_calibration.h) and save the
# median of the calibrations so far, the fourth reads it back; then every algorithm,
# and MPI's own, runs the same 16 MiB all-reduce. Fails if a calibration took over its
# bound, if the second and third runs did not merge theirs, if the fourth did not use
# the cache, or if auto's choice is more than 1.25x slower than the best.
# Needs root (CI runs as root).
#   cross_host_auto_test.sh CLUSTER_SH COLLECTIVE_BENCH
set -euo pipefail
source "$(dirname "$1")/cluster_testing.sh"
cluster_test_start "$1" xauto
BENCH="$(realpath "$2")"
# Rank 0 runs on h1, whose /tmp is its own: the cache lives beside the test's files.
CACHE="$(mktemp -d "${TEST_TMPDIR:-$PWD}/cost-model-cache.XXXXXX")"
trap 'cluster down; rm -rf "$CACHE"' EXIT
BYTES=$((16 << 20))
BOUND=1.25

# bench ALGO: prints "<algorithm run> <mean us>" of a 16 MiB all-reduce, and the
# bench's comment lines (the calibration's among them) on stderr.
bench() {
  local log
  log="$(mktemp)"
  if ! on h1 timeout --kill-after=10 240 mpirun $(cluster mpirun-args) -np 2 "$BENCH" \
      --transport=mpi --op=all_reduce --algo="$1" --min_bytes="$BYTES" --max_bytes="$BYTES" \
      --iters=5 --warmup=2 --check --cost_model_cache="$CACHE" >"$log" 2>&1; then
    tail -20 "$log" >&2
    fail "collective_bench --algo=$1"
  fi
  grep '^#' "$log" >&2 || true
  # Columns: size count type redop algo time_us algbw busbw wrong.
  awk '$1 ~ /^[0-9]+$/ && NF >= 9 {
         if ($9 != 0) { print "wrong", $9; exit }
         print $5, $6 }' "$log"
  rm -f "$log"
}

cluster up 2 --rate=2gbit --ranks_per_host=1

runs=()
for job in 1 2 3; do
  runs+=("$(bench auto 2>"$CACHE/run$job.err")")
  cat "$CACHE/run$job.err"
  took="$(sed -n 's/.*cost model measured on 2 hosts .* in \([0-9.]*\) s\( ([0-9]* points measured again)\)\{0,1\}, saved to.*/\1/p' \
    "$CACHE/run$job.err")"
  [[ -n "$took" ]] || fail "auto run $job did not measure and save a cost model"
  # The bound is the issue's 2 s with room for a loaded 2-core machine.
  awk -v t="$took" 'BEGIN { exit !(t <= 4) }' || fail "calibration $job took $took s (bound 4 s)"
  if ((job > 1)); then
    grep -q "(the median of $job calibrations)" "$CACHE/run$job.err" ||
      fail "auto run $job did not merge its calibration with the cache's"
  fi
done
runs+=("$(bench auto 2>"$CACHE/run4.err")")
cat "$CACHE/run4.err"
grep -q "cost model from cache.*(the median of 3 calibrations)" "$CACHE/run4.err" ||
  fail "the fourth auto run measured again instead of reading the cache"

best_algo=""
best_us=""
for algo in ring double_binary_tree direct halving_doubling binomial_tree native; do
  row="$(bench "$algo" 2>/dev/null)"
  [[ "$row" != wrong* ]] || fail "$algo: $row elements wrong"
  us="${row##* }"
  echo "$algo: $us us"
  if [[ -z "$best_us" ]] || awk -v a="$us" -v b="$best_us" 'BEGIN { exit !(a < b) }'; then
    best_us="$us"
    best_algo="$algo"
  fi
done
for run in "${runs[@]}"; do
  [[ "$run" != wrong* ]] || fail "auto: $run elements wrong"
  chosen="${run%% *}"
  us="${run##* }"
  ratio="$(awk -v a="$us" -v b="$best_us" 'BEGIN { printf "%.2f", a / b }')"
  echo "auto chose $chosen: $us us, ${ratio}x the best ($best_algo, $best_us us)"
  awk -v r="$ratio" -v bound="$BOUND" 'BEGIN { exit !(r <= bound) }' ||
    fail "auto chose $chosen at 16 MiB: ${ratio}x the best ($best_algo), bound ${BOUND}x"
done
expect_no_leftovers
echo PASS
