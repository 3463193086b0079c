#!/usr/bin/env bash
# fault_test: the fault campaign of issue 21, kept as a suite. It starts the real
# training job and benchmark as a user would, injects a fault at a random moment
# (SIGKILL, SIGTERM, SIGINT or SIGSTOP of one rank, or of the parent), and checks:
#   - every process of the job is gone within the case's bound;
#   - the launcher's first line names the failing rank and its pid, and the ranks'
#     errors name it by world rank and pid;
#   - the exit code follows the rule (128+n for a rank killed by signal n, 1 for a rank
#     that stopped responding, 128+n for the parent itself);
#   - nothing is left: the job directory, /dev/shm segments, offload directories.
# Usage: fault_test.sh TRAIN COLLECTIVE_BENCH. Sharded: each shard runs every
# TEST_TOTAL_SHARDS-th case. FAULT_CASES=REGEX runs only the cases whose names match.
set -uo pipefail
# Job control: without it bash starts background commands with SIGINT ignored, and
# the job would inherit that (a user's Ctrl-C does reach a job started in a terminal).
set -m

TRAIN="$(realpath "$1")"
BENCH="$(realpath "$2")"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
export TMPDIR="$TMP"
SHARDS="${TEST_TOTAL_SHARDS:-1}"
SHARD="${TEST_SHARD_INDEX:-0}"
[[ -n "${TEST_SHARD_STATUS_FILE:-}" ]] && touch "$TEST_SHARD_STATUS_FILE"
RANDOM=$(( $$ ^ $(date +%s) ))
FAILURES=0
CASE=0
HOST="$(hostname)"

now() { date +%s.%N; }
elapsed() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
fail() { echo "FAIL [$NAME]: $*"; FAILURES=$((FAILURES + 1)); }

# has_env PID NAME=VALUE: whether PID's environment holds NAME=VALUE. One grep on the
# file, no pipe: under pipefail, `tr | grep -q` fails when grep matches and exits before
# tr's second 4 KiB write (an environment over 4 KiB, as under Bazel), and tr dies of
# SIGPIPE: a live rank then reads as "not found" (3 looks in 200 in a loop here).
has_env() { grep -qsxzF -- "$2" "/proc/$1/environ"; }

# rank_pid PARENT RANK: the pid of the child of PARENT whose environment holds
# LOOM_RANK=RANK (the janitor, also a child, holds none).
rank_pid() {
  local child
  for child in $(pgrep -P "$1"); do
    if has_env "$child" "LOOM_RANK=$2"; then
      echo "$child"; return 0
    fi
  done
  return 1
}

# job_processes JOB: pids of live processes whose environment holds LOOM_JOB_ID=JOB.
job_processes() {
  grep -lsx --null -z "LOOM_JOB_ID=$1" /proc/[0-9]*/environ 2>/dev/null |
    tr '\0' '\n' | sed -E 's|/proc/([0-9]+)/environ|\1|'
}

# wait_until SECONDS COMMAND...: polls COMMAND every 50 ms; false at the deadline.
# COMMAND's arguments are expanded once, by the caller: to look again at each poll,
# pass a function.
wait_until() {
  local deadline; deadline=$(awk -v n="$(now)" -v s="$1" 'BEGIN { printf "%.3f", n + s }'); shift
  until "$@"; do
    awk -v n="$(now)" -v d="$deadline" 'BEGIN { exit !(n > d) }' && return 1
    sleep 0.05
  done
}

parent_gone() {  # PID: gone or a zombie
  [[ ! -e "/proc/$1" ]] || [[ "$(awk '{ print $3 }' "/proc/$1/stat" 2>/dev/null)" == Z ]]
}

all_ranks_up() {  # PARENT
  local r
  for ((r = 0; r < RANKS; ++r)); do rank_pid "$1" "$r" >/dev/null || return 1; done
}

leftovers() {  # JOB [NVME_DIR]
  local job="$1" nvme="${2:-}" left=""
  [[ -e "$TMP/loom.$job" ]] && left+=" $TMP/loom.$job"
  compgen -G "/dev/shm/loom.$job.*" >/dev/null && left+=" $(echo /dev/shm/loom."$job".*)"
  [[ -n "$nvme" ]] && [[ -n "$(ls -A "$nvme" 2>/dev/null)" ]] && left+=" $nvme/$(ls -A "$nvme")"
  local procs="" pid
  for pid in $(job_processes "$job"); do
    procs+=" $pid($(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null),$(cat "/proc/$pid/wchan" 2>/dev/null))"
  done
  [[ -n "${procs// /}" ]] && left+=" processes:$procs"
  echo "$left"
}

# job_errors ERR_FILE: what a job printed that tells why it ended early: sanitizer
# reports, aborts and failures first, then its last lines.
job_errors() {
  grep -m5 -E "Sanitizer|ERROR|abort|stopped responding|failed|terminate" "$1"
  echo "... last lines:"
  tail -n 5 "$1"
}

# selected: counts case $NAME and tells whether this shard (and FAULT_CASES) runs it.
selected() {
  CASE=$((CASE + 1))
  (( (CASE - 1) % SHARDS == SHARD )) && [[ "$NAME" =~ ${FAULT_CASES:-.} ]]
}

# check_end TOOK BOUND STATUS EXPECTED ERR_FILE LAST_LEFTOVERS: the checks every case
# makes of how its job ended.
check_end() {
  local took="$1" bound="$2" status="$3" expected="$4" err="$5" last="$6"
  if awk -v t="$took" -v b="$bound" 'BEGIN { exit !(t > b) }'; then
    fail "took ${took}s, bound ${bound}s; there until then:$last"
  fi
  [[ "$status" == "$expected" ]] || fail "exit $status, expected $expected"
  grep -qE "terminate called|Sanitizer|core dumped" "$err" &&
    fail "a crash: $(grep -m3 -E 'terminate|Sanitizer|core' "$err")"
  return 0
}

# run_case NAME TARGET SIGNAL EXPECTED_EXIT BOUND_S COMMAND...
#   TARGET: rank (a random rank) or parent. The job must print a line matching
#   READY (global) before the fault.
run_case() {
  NAME="$1"; local target="$2" sig="$3" expected="$4" bound="$5"; shift 5
  selected || return 0
  local out="$TMP/$NAME.out" err="$TMP/$NAME.err"
  "$@" >"$out" 2>"$err" &
  local parent=$!
  # Ready: every rank is running, and (for the training job) step 2 was printed.
  if ! wait_until 60 all_ranks_up "$parent" ||
     { [[ -n "$READY" ]] && ! wait_until 60 grep -qE "$READY" "$out"; }; then
    fail "the job never got going: $(tail -5 "$err")"; kill -9 "$parent"; wait "$parent"; return
  fi
  [[ -z "$READY" ]] && sleep 1
  sleep "0.$((RANDOM % 8))"  # a random moment after it got going
  local victim="$parent" rank=""
  if [[ "$target" == rank ]]; then
    rank=$((RANDOM % RANKS))
    victim="$(rank_pid "$parent" "$rank")" ||
      { fail "rank $rank not found; the job's errors: $(job_errors "$err")"; kill -9 "$parent"; wait "$parent"; return; }
  fi
  local job; job="$(tr '\0' '\n' < "/proc/$(rank_pid "$parent" 0)/environ" | sed -n 's/^LOOM_JOB_ID=//p')"
  local start; start="$(now)"
  kill -s "$sig" "$victim"
  local status=0
  if ! wait_until "$bound" parent_gone "$parent"; then
    fail "the parent still runs after ${bound}s"
    kill -9 "$parent"
  fi
  wait "$parent" || status=$?
  # The parent is gone; its ranks and janitor may take a moment more.
  # (A function, so that the leftovers are looked at again at each poll.)
  local last=""
  nothing_left() { last="$(leftovers "$job" "${NVME:-}")"; [[ -z "$last" ]]; }
  wait_until "$bound" nothing_left
  local took; took="$(elapsed "$start" "$(now)")"
  check_end "$took" "$bound" "$status" "$expected" "$err" "$last"
  local left; left="$(leftovers "$job" "${NVME:-}")"
  [[ -z "$left" ]] || fail "left behind:$left"
  if [[ -n "$rank" ]]; then
    local first; first="$(grep -m1 '^launch: ' "$err")"
    [[ "$first" == "launch: rank $rank (pid $victim) "* ]] ||
      fail "first launch line does not name rank $rank (pid $victim): $first"
    # A killed rank is named by the launcher (it saw the death); a stopped one also by
    # the peers that noticed its silence.
    if [[ "$sig" == STOP ]]; then
      grep -q "world rank $rank (pid $victim on $HOST)" "$err" ||
        fail "no rank error names world rank $rank (pid $victim on $HOST): $(head -3 "$err")"
    fi
    if [[ "$sig" == STOP ]]; then
      grep -q "^launch: rank $rank (pid $victim) stopped responding" "$err" ||
        fail "the stopped rank is not reported as unresponsive: $first"
    fi
  fi
  echo "case $NAME: ${target}${rank:+ $rank} SIG$sig -> exit $status in ${took}s"
}

# --- the training job over shm: 4 ranks, offload on disk, a 2 s heartbeat --------
RANKS=4
READY='^step +2 '
for fault in rank:KILL:137 rank:TERM:143 rank:INT:130 rank:STOP:1 parent:KILL:137 \
             parent:TERM:143 parent:INT:130; do
  IFS=: read -r target sig code <<<"$fault"
  NVME="$TMP/nvme.train.$target.$sig"; mkdir -p "$NVME"
  run_case "train-shm-$target-$sig" "$target" "$sig" "$code" 15 \
    "$TRAIN" --transport=shm --dp=2 --tp=1 --pp=2 --steps=100000 --nocompare_reference \
    --offload=nvme --nvme_dir="$NVME" --heartbeat_timeout=2s
done

# --- the benchmark over shm and gloo: 3 ranks, sizes looping until stopped ---------
# (The bench's table is buffered into a file: readiness is the ranks being up, then
# a second of running.)
RANKS=3
READY=''
NVME=""
for fault in rank:KILL:137 rank:STOP:1 parent:TERM:143; do
  IFS=: read -r target sig code <<<"$fault"
  run_case "bench-shm-$target-$sig" "$target" "$sig" "$code" 15 \
    "$BENCH" --transport=shm --ranks=3 --min_bytes=1K --max_bytes=1M --iters=100000 \
    --heartbeat_timeout=2s
done
for fault in rank:KILL:137 rank:STOP:1; do
  IFS=: read -r target sig code <<<"$fault"
  run_case "bench-gloo-$target-$sig" "$target" "$sig" "$code" 15 \
    "$BENCH" --transport=gloo --ranks=3 --min_bytes=1K --max_bytes=1M --iters=100000 \
    --heartbeat_timeout=2s
done

# --- MPI jobs (RunUnderMpirun starts mpirun): 4 ranks, a 2 s heartbeat ------------
# The ranks are mpirun's children; each case's processes carry LOOM_FAULT_CASE in
# their environment, which is how they are found, and how leftovers are looked for.
case_processes() {  # TAG: pids of live processes whose environment holds LOOM_FAULT_CASE=TAG
  grep -lsx --null -z "LOOM_FAULT_CASE=$1" /proc/[0-9]*/environ 2>/dev/null |
    tr '\0' '\n' | sed -E 's|/proc/([0-9]+)/environ|\1|'
}
mpi_rank_pid() {  # TAG RANK
  local pid
  for pid in $(case_processes "$1"); do
    has_env "$pid" "OMPI_COMM_WORLD_RANK=$2" &&
      { echo "$pid"; return 0; }
  done
  return 1
}
mpi_ranks_up() {  # TAG
  local r
  for ((r = 0; r < RANKS; ++r)); do mpi_rank_pid "$1" "$r" >/dev/null || return 1; done
}
mpi_leftovers() {  # TAG PIDS...: the case's processes, and Open MPI's files of its job
  local tag="$1" left="" pid; shift
  for pid in $(case_processes "$tag"); do
    left+=" process $pid($(awk '{ print $3 }' "/proc/$pid/stat" 2>/dev/null))"
  done
  compgen -G "$TMP/loom-mpirun-*" >/dev/null && left+=" $(echo "$TMP"/loom-mpirun-*)"
  compgen -G "$TMP/ompi.*" >/dev/null && left+=" $(echo "$TMP"/ompi.*)"
  for pid in "$@"; do
    compgen -G "/dev/shm/loom-mpirun-$pid-*" >/dev/null && left+=" $(echo /dev/shm/loom-mpirun-"$pid"-*)"
    compgen -G "/tmp/ompi.*/pid.$pid" >/dev/null && left+=" $(echo /tmp/ompi.*/pid."$pid")"
  done
  echo "$left"
}

# mpi_clean PARENT: after a case gave up and SIGKILLed its processes, removes the
# files their handlers would have removed, so that the next case does not count them.
mpi_clean() {
  rm -rf "$TMP"/loom-mpirun-"$1"-* /dev/shm/loom-mpirun-"$1"-*
}

# mpi_case NAME TARGET SIGNAL EXPECTED_EXIT BOUND_S COMMAND...
#   TARGET: rank (a random rank) or parent (the process the user started).
mpi_case() {
  NAME="$1"; local target="$2" sig="$3" expected="$4" bound="$5"; shift 5
  selected || return 0
  local out="$TMP/$NAME.out" err="$TMP/$NAME.err" tag="$NAME.$$"
  LOOM_FAULT_CASE="$tag" "$@" >"$out" 2>"$err" &
  local parent=$!
  if ! wait_until 60 mpi_ranks_up "$tag" ||
     { [[ -n "$READY" ]] && ! wait_until 60 grep -qE "$READY" "$out" "$err"; }; then
    fail "the job never got going: $(tail -5 "$err")"
    kill -9 $(case_processes "$tag"); wait "$parent"; mpi_clean "$parent"; return
  fi
  [[ -z "$READY" ]] && sleep 1
  sleep "0.$((RANDOM % 8))"
  local pids; pids="$(case_processes "$tag" | tr '\n' ' ')"
  local victim="$parent" rank=""
  if [[ "$target" == rank ]]; then
    rank=$((RANDOM % RANKS))
    victim="$(mpi_rank_pid "$tag" "$rank")" ||
      { fail "rank $rank not found; the job's errors: $(job_errors "$err")"; kill -9 $pids; wait "$parent"; mpi_clean "$parent"; return; }
  fi
  local start; start="$(now)"
  kill -s "$sig" "$victim"
  local status=0
  if ! wait_until "$bound" parent_gone "$parent"; then
    fail "the parent still runs after ${bound}s"
    kill -9 $(case_processes "$tag")
  fi
  wait "$parent" || status=$?
  [[ "$sig" == STOP ]] && kill -CONT "$victim" 2>/dev/null
  local last=""
  mpi_nothing_left() { last="$(mpi_leftovers "$tag" $pids)"; [[ -z "$last" ]]; }
  wait_until "$bound" mpi_nothing_left
  local took; took="$(elapsed "$start" "$(now)")"
  check_end "$took" "$bound" "$status" "$expected" "$err" "$last"
  local left; left="$(mpi_leftovers "$tag" $pids)"
  [[ -z "$left" ]] || fail "left behind:$left"
  kill -9 $(case_processes "$tag") 2>/dev/null  # what outlived the bound, if anything
  if [[ "$sig" == STOP ]]; then
    # The first rank to abort names the silent rank: world rank, pid and host.
    local first; first="$(grep -m1 'aborts the MPI job' "$err")"
    [[ "$first" == *"world rank $rank (pid $victim on $HOST)"*"stopped responding"* ]] ||
      fail "the first abort does not name world rank $rank (pid $victim on $HOST) as silent: $first"
  elif [[ "$target" == rank ]]; then
    # Open MPI 4.1 names the killed rank (its "PID" is printed as 0).
    grep -q "process rank $rank with PID [0-9]* on node .* exited on signal" "$err" ||
      fail "mpirun does not name rank $rank: $(grep -m2 -E 'rank|signal' "$err")"
  fi
  echo "case $NAME: ${target}${rank:+ $rank} SIG$sig -> exit $status in ${took}s"
}

RANKS=4
READY='^step +2 '
for fault in rank:KILL:137 rank:STOP:1 parent:TERM:143 parent:INT:130 parent:KILL:137; do
  IFS=: read -r target sig code <<<"$fault"
  mpi_case "train-mpi-$target-$sig" "$target" "$sig" "$code" 15 \
    "$TRAIN" --transport=mpi --dp=2 --tp=1 --pp=2 --steps=100000 --nocompare_reference \
    --heartbeat_timeout=2s
done
READY=''
mpi_case "bench-mpi-rank-STOP" rank STOP 1 15 \
  "$BENCH" --transport=mpi --ranks=4 --min_bytes=1K --max_bytes=1M --iters=100000 \
  --heartbeat_timeout=2s

# --- the training job on threads: its offload directory goes with it ---------------
threads_case() {
  NAME="$1"; local sig="$2" expected="$3"
  selected || return 0
  local out="$TMP/$NAME.out" err="$TMP/$NAME.err" nvme="$TMP/nvme.$NAME"
  mkdir -p "$nvme"
  "$TRAIN" --dp=2 --tp=1 --pp=1 --steps=100000 --nocompare_reference --offload=nvme \
    --nvme_dir="$nvme" >"$out" 2>"$err" &
  local pid=$!
  wait_until 120 grep -qE '^step +2 ' "$out" || { fail "never got going"; kill -9 $pid; wait $pid; return; }
  local start; start="$(now)"
  kill -s "$sig" $pid
  local status=0
  wait_until 15 parent_gone $pid || { fail "still running after 15s"; kill -9 $pid; }
  wait $pid || status=$?
  # A function, so that it looks again at each poll.
  all_removed() { [[ -z "$(ls -A "$1")" ]] && ! compgen -G "$TMP/loom.*" >/dev/null; }
  wait_until 10 all_removed "$nvme" ||
    fail "left behind: $(ls -A "$nvme") $(compgen -G "$TMP/loom.*")"
  [[ "$status" == "$expected" ]] || fail "exit $status, expected $expected"
  echo "case $NAME: SIG$sig -> exit $status in $(elapsed "$start" "$(now)")s"
}
threads_case train-threads-KILL KILL 137
threads_case train-threads-TERM TERM 143

echo "shard $SHARD of $SHARDS: $FAILURES failure(s)"
((FAILURES == 0))
