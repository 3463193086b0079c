#!/bin/bash
# A job started with RunUnderMpirun ends within seconds and leaves nothing behind
# (mpi_abort_probe.cc, 3 ranks):
#   1. one rank fails (a receive past its 5 s deadline; MpiSession::AbortJob) while
#      the others wait in a receive from it (60 s): the job ends within 10 s of the
#      error, non-zero, and the failing rank names itself and its cause;
#   2. SIGTERM to the program that started mpirun: the job ends within 10 s, non-zero;
#   3. SIGKILL to it: its supervisor still ends mpirun and removes the directories.
# While the job runs, its Open MPI session directory and vader segments must lie in
# the two directories of its own (loom-mpirun-<pid>-*, in $TMPDIR and /dev/shm);
# after it, those are gone, and nothing of the job (its session directory named
# after mpirun's pid, segments named after its job id) is in /tmp or /dev/shm.
set -u
probe="$1"
export TMPDIR="$TEST_TMPDIR/tmp"
mkdir -p "$TMPDIR"
fail() { echo "FAIL: $*"; exit 1; }

# wait_for PID SECONDS: waits until PID has ended, at most SECONDS; 124 past that.
wait_for() { timeout "$2" tail --pid="$1" -f /dev/null; }

# Records the running job's processes and files (after its ranks are up).
inspect_job() {
  supervisor="$(pgrep -P "$pid")"
  [ -n "$supervisor" ] || fail "no supervisor process under $pid"
  mpirun_pid="$(pgrep -P "$supervisor")"
  [ -n "$mpirun_pid" ] || fail "no mpirun under the supervisor $supervisor"
  session="$(ls -d "$TMPDIR/loom-mpirun-$pid-"* 2>/dev/null)"
  segments="$(ls -d "/dev/shm/loom-mpirun-$pid-"* 2>/dev/null)"
  [ -n "$session" ] && [ -n "$segments" ] || fail "no job directories for $pid"
  ls -d "$session"/ompi.* > /dev/null 2>&1 || fail "no session directory in $session"
  segment="$(ls "$segments" | grep '^vader_segment\.' | head -n 1)"
  [ -n "$segment" ] || fail "no vader segment in $segments: $(ls -A "$segments")"
  # vader_segment.<host>.<uid>.<job id>.<rank>
  jobid="$(echo "$segment" | awk -F. '{ print $(NF - 1) }')"
}

check_clean() {
  [ ! -e "$session" ] || fail "$1 left $session: $(ls -AR "$session")"
  [ ! -e "$segments" ] || fail "$1 left $segments: $(ls -A "$segments")"
  [ -z "$(ls -A "$TMPDIR")" ] || fail "$1 left in \$TMPDIR: $(ls -A "$TMPDIR")"
  ! ls -d /tmp/ompi.*/pid."$mpirun_pid" 2>/dev/null || fail "$1 left a session in /tmp"
  ! ls /dev/shm/vader_segment.*."$jobid".* 2>/dev/null || fail "$1 left vader segments"
  echo "$1: no files left (mpirun $mpirun_pid, job $jobid)"
}

# start_job ARG: starts the probe with its output on fd 3 and waits (20 s at most)
# until all three ranks are up.
start_job() {
  rm -f "$TEST_TMPDIR/fifo"
  mkfifo "$TEST_TMPDIR/fifo"
  "$probe" "$1" > "$TEST_TMPDIR/fifo" 2>&1 &
  pid=$!
  exec 3< "$TEST_TMPDIR/fifo"
  : > "$TEST_TMPDIR/out.txt"
  local up=0 line
  while [ "$up" -lt 3 ] && IFS= read -r -t 20 -u 3 line; do
    echo "$line" >> "$TEST_TMPDIR/out.txt"
    case "$line" in "rank "*" waiting") up=$((up + 1)) ;; esac
  done
  [ "$up" -eq 3 ] || fail "only $up ranks came up: $(cat "$TEST_TMPDIR/out.txt")"
  inspect_job
  cat <&3 >> "$TEST_TMPDIR/out.txt" &
  drain=$!
  started=$(date +%s)
}

# finish_job LABEL SECONDS: waits (SECONDS at most) for the job, then for its output.
finish_job() {
  wait_for "$pid" "$2" || { kill -9 "$pid"; fail "$1: the job did not end within $2 s"; }
  wait "$pid"
  code=$?
  wait "$drain"
  exec 3<&-
  cat "$TEST_TMPDIR/out.txt"
  echo "$1: exit $code after $(($(date +%s) - started)) s"
}

# 1. Rank 1 fails 5 s after the ranks are up, while ranks 0 and 2 wait on it.
start_job 1
finish_job "rank 1 fails" 15
[ "$code" -ne 0 ] || fail "a failing rank: exit 0"
grep -q "^mpi_abort_probe: world rank 1 of 3 (pid [0-9]* on host [^)]*) aborts the MPI job: mpi rank 1: receive from world rank 0 (pid [0-9]* on [^)]*) (tag 1, 8 bytes) still pending at its deadline$" \
    "$TEST_TMPDIR/out.txt" || fail "rank 1 did not name itself and its cause"
check_clean "rank 1 fails"

# 2. SIGTERM to the program that started mpirun, all ranks waiting.
start_job -1
kill -TERM "$pid"
finish_job "SIGTERM" 10
[ "$code" -ne 0 ] || fail "SIGTERM: exit 0"
check_clean "SIGTERM"

# 3. SIGKILL to it: its supervisor ends mpirun and removes the directories.
start_job -1
kill -KILL "$pid"
wait "$pid" 2>/dev/null
wait_for "$supervisor" 10 || fail "SIGKILL: the supervisor did not end within 10 s"
echo "SIGKILL: the supervisor ended $(($(date +%s) - started)) s after"
wait "$drain"
exec 3<&-
check_clean "SIGKILL"
echo PASS
