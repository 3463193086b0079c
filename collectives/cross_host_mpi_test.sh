#!/usr/bin/env bash
# MPI and gloo across emulated hosts (tools/cluster): the transport conformance suite
# over each, and the Communicator suite over MPI, MPI with shm inside hosts, and gloo,
# on 2 and 3 hosts of 2 ranks each, and the Communicator suite again on 2 hosts with
# the ranks dealt round-robin (mpirun --map-by node: h1,h2,h1,h2, numbered host by
# host); then no process, segment or temporary file left on any host. mpirun starts every job; gloo's ranks connect from eth0 and meet in a
# directory outside the hosts' private /tmp (a shared filesystem, as NFS would be).
# Needs root (CI runs as root).
#   cross_host_mpi_test.sh CLUSTER_SH MPI_CONFORMANCE GLOO_CONFORMANCE COMMUNICATOR
set -euo pipefail
source "$(dirname "$1")/cluster_testing.sh"
cluster_test_start "$1" xmpi
MPI_CONFORMANCE="$(realpath "$2")"
GLOO_CONFORMANCE="$(realpath "$3")"
COMMUNICATOR="$(realpath "$4")"
STORE_BASE="$(mktemp -d "${TEST_TMPDIR:-$PWD}/gloo-stores.XXXXXX")"
trap 'cluster down; rm -rf "$STORE_BASE"' EXIT

# job HOSTS TEST [MAX_COUNT [MPIRUN_ARGS...]]: runs TEST as an mpirun job of 2 ranks per
# host (mpirun on h1), within a deadline, with LOOM_TEST_MAX_COUNT=MAX_COUNT (default
# 1M); prints its summary; fails naming the test.
job() {
  local hosts="$1" test="$2" max_count="${3:-1048576}"
  shift $(($# < 3 ? $# : 3))
  local start=$SECONDS
  local log
  log="$(mktemp)"
  if ! on h1 timeout --kill-after=10 300 mpirun $(cluster mpirun-args) "$@" -np $((2 * hosts)) \
      -x LOOM_TEST_GLOO_INTERFACE=eth0 -x LOOM_TEST_STORE_BASE="$STORE_BASE" \
      -x LOOM_TEST_MAX_COUNT="$max_count" \
      "$test" >"$log" 2>&1; then
    grep -E "Failure|FAILED|Expected|Which is|rank [0-9]|timeout|ERROR|rror" "$log" | head -40 >&2
    tail -20 "$log" >&2
    fail "$(basename "$test") on $hosts hosts"
  fi
  echo "$(basename "$test") on $hosts hosts $*: $(grep -E 'PASSED' "$log" | tail -1 | sed 's/\x1b\[[0-9;]*m//g') ($((SECONDS - start)) s)"
  rm -f "$log"
}

for hosts in 2 3; do
  cluster up "$hosts" --ranks_per_host=2
  job "$hosts" "$MPI_CONFORMANCE"
  job "$hosts" "$GLOO_CONFORMANCE"
  # 1M elements on 2 hosts; 3 hosts (an odd host count) up to 65537.
  job "$hosts" "$COMMUNICATOR" $((hosts == 2 ? 1048576 : 65537))
  # Dealt round-robin: the same suite, numbered host by host (up to 65537, as on 3).
  ((hosts == 2)) && job "$hosts" "$COMMUNICATOR" 65537 --map-by node -x LOOM_TEST_LAYOUT=dealt
  expect_no_leftovers
  cluster down
done
echo PASS
