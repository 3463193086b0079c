#!/usr/bin/env bash
# Failures across emulated hosts (tools/cluster): an MPI job of collective_bench, 2
# ranks on each of 2 hosts (mpirun on h1, a 2 s heartbeat), gets one fault at a
# random moment mid-collective:
#   host-KILL   every process of h2 (its ranks and Open MPI's daemon) SIGKILLed, as
#               when a machine dies;
#   link-down   h2's link cut (ip link set eth0 down): a network partition;
#   rank-STOP   one rank on h2 stopped (SIGSTOP): alive, silent.
# Each case checks that mpirun and every surviving process on both hosts exit within
# the case's bound with a failing status, that nothing is left on either host
# (processes, /tmp, /dev/shm; on the surviving host only, when h2 died), and, where Loom's ranks see the failure first (a cut
# link, a silent rank), that the first abort names the world rank, pid and host of
# the rank it lost. Needs root (CI runs as root).
#   cross_host_fault_test.sh CLUSTER_SH COLLECTIVE_BENCH
set -euo pipefail
source "$(dirname "$1")/cluster_testing.sh"
cluster_test_start "$1" xfault
BENCH="$(realpath "$2")"
OUT="$(mktemp -d "${TEST_TMPDIR:-/tmp}/xfault.XXXXXX")"
trap 'cluster down; rm -rf "$OUT"' EXIT
RANDOM=$(($$ ^ $(date +%s)))

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }

# wait_until SECONDS FUNCTION...: polls every 50 ms; false at the deadline.
wait_until() {
  local deadline
  deadline=$(awk -v n="$(now)" -v s="$1" 'BEGIN { printf "%.3f", n + s }')
  shift
  until "$@"; do
    awk -v n="$(now)" -v d="$deadline" 'BEGIN { exit !(n > d) }' && return 1
    sleep 0.05
  done
}

# bench_ranks hN: the pids of the benchmark's ranks on host hN.
bench_ranks() {
  local pid
  for pid in $(cluster pids "$1"); do
    [[ "$(cat "/proc/$pid/comm" 2>/dev/null)" == collective_benc* ]] && echo "$pid"
  done
  return 0
}
both_hosts_running() { [[ "$(bench_ranks h1 | wc -l)" == 2 && "$(bench_ranks h2 | wc -l)" == 2 ]]; }
gone() { ! kill -0 "$1" 2>/dev/null; }
hosts_empty() { [[ -z "$(cluster pids h1)$(cluster pids h2)" ]]; }

# fault_case NAME BOUND_S: starts the job, injects NAME's fault, checks the end.
fault_case() {
  local name="$1" bound="$2"
  local err="$OUT/$name.err"
  cluster up 2 --ranks_per_host=2
  on h1 mpirun $(cluster mpirun-args) -np 4 "$BENCH" --transport=mpi --ranks_per_node=2 \
    --algo=ring --op=all_reduce --min_bytes=1M --max_bytes=1M --iters=1000000 \
    --heartbeat_timeout=2s >"$OUT/$name.out" 2>"$err" &
  local job=$!
  wait_until 60 both_hosts_running || fail "$name: the job's 4 ranks never ran: $(tail -5 "$err")"
  # Past MPI's start and the transports' connect, at a random point in the stream.
  sleep "1.$((RANDOM % 10))"
  local victim="" world_rank=""
  local start
  start="$(now)"
  case "$name" in
    host-KILL) cluster kill h2 KILL ;;
    link-down) cluster link h2 down ;;
    rank-STOP)
      victim="$(bench_ranks h2 | shuf -n 1)"
      world_rank="$(tr '\0' '\n' <"/proc/$victim/environ" | sed -n 's/^OMPI_COMM_WORLD_RANK=//p')"
      kill -STOP "$victim"
      ;;
  esac
  wait_until "$bound" gone "$job" || fail "$name: mpirun still runs ${bound}s after the fault"
  local status=0
  wait "$job" || status=$?
  # Killed by its job by now, normally; a stopped survivor would never exit.
  if [[ -n "$victim" ]]; then kill -CONT "$victim" 2>/dev/null || true; fi
  wait_until "$bound" hosts_empty ||
    fail "$name: processes left ${bound}s after the fault: h1: $(cluster pids h1 | tr '\n' ' ') h2: $(cluster pids h2 | tr '\n' ' ')"
  local took
  took="$(elapsed "$start" "$(now)")"
  ((status != 0)) || fail "$name: mpirun exited 0"
  if [[ "$name" == host-KILL ]]; then
    # What the dead host's processes left in its /tmp and /dev/shm (Open MPI's
    # session directory and segments) goes with the host, as a reboot clears tmpfs.
    [[ -z "$(cluster pids h2)" ]] || fail "$name: processes run on the killed host"
    expect_no_leftovers h1
  else
    expect_no_leftovers
  fi
  local first
  first="$(grep -m1 'aborts the MPI job' "$err" || true)"
  case "$name" in
    link-down)
      [[ "$first" =~ "world rank "[23]" (pid "[0-9]+" on h2) stopped responding" ]] ||
        fail "$name: the first abort does not name a rank on h2 as silent: $first"
      ;;
    rank-STOP)
      [[ "$first" == *"world rank $world_rank (pid $victim on h2)"*"stopped responding"* ]] ||
        fail "$name: the first abort does not name world rank $world_rank (pid $victim on h2): $first"
      ;;
  esac
  echo "case $name: exit $status, every process on both hosts gone in ${took}s (bound ${bound}s)${first:+; first: ${first:0:160}}"
  cluster down
}

fault_case host-KILL 15
fault_case link-down 20
fault_case rank-STOP 15
echo PASS
