#!/usr/bin/env bash
# Runs the real //tools:launch binary end to end: a good job exits 0 and each rank sees
# its environment; a failing rank, a rank killed by a signal, a timeout and a signal
# sent to launch give the right report and exit status; leftover shared memory is
# removed; bad input exits 2 with a message naming the value.
set -euo pipefail
LAUNCH="$1"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }

# run_launch ARGS...: sets $out, $err and $status.
run_launch() {
  status=0
  "$LAUNCH" "$@" >"$TMP/out" 2>"$TMP/err" || status=$?
  out="$(cat "$TMP/out")"
  err="$(cat "$TMP/err")"
}

# Success: every rank runs with its own LOOM_RANK, one job id, nothing on stderr.
run_launch -n 3 -- /bin/sh -c \
  'echo "$LOOM_RANK $LOOM_WORLD_SIZE $LOOM_LOCAL_RANK $LOOM_LOCAL_WORLD_SIZE $LOOM_JOB_ID"'
[[ "$status" == 0 ]] || fail "success: exit $status, stderr: $err"
[[ -z "$err" ]] || fail "success: unexpected stderr: $err"
[[ "$(cut -d' ' -f1-4 <<<"$out" | sort)" == $'0 3 0 3\n1 3 1 3\n2 3 2 3' ]] || fail "ranks: $out"
[[ "$(cut -d' ' -f5 <<<"$out" | sort -u | wc -l)" == 1 ]] || fail "more than one job id: $out"
grep -Eq '^[A-Za-z0-9_-]{1,64}$' <<<"$(cut -d' ' -f5 <<<"$out" | head -1)" || fail "job id: $out"

# --job_id, and "-n N" as two words.
run_launch -n 2 --job_id=cli_job-1 -- /bin/sh -c 'echo "$LOOM_JOB_ID"'
[[ "$status" == 0 && "$out" == $'cli_job-1\ncli_job-1' ]] || fail "--job_id: $status $out $err"

# A failing rank: reported first, the others stopped, its exit code returned, fast.
start=$SECONDS
run_launch -n 3 -- /bin/sh -c 'if [ "$LOOM_RANK" = 2 ]; then sleep 0.1; exit 3; fi; sleep 60'
[[ "$status" == 3 ]] || fail "failing rank: exit $status, expected 3; stderr: $err"
(( SECONDS - start < 10 )) || fail "failing rank: took $((SECONDS - start))s"
grep -Eq '^launch: rank 2 \(pid [0-9]+\) exited with code 3$' <<<"$(head -1 <<<"$err")" \
  || fail "failing rank: first line: $err"
grep -Eq '^launch:   rank 0 \(pid [0-9]+\): killed by signal 15 \(Terminated\), stopped by launch$' <<<"$err" \
  || fail "failing rank: rank 0 line: $err"
grep -Eq '^launch:   rank 2 \(pid [0-9]+\): exited with code 3$' <<<"$err" || fail "rank 2 line: $err"
[[ "$(grep -c '^launch:   rank ' <<<"$err")" == 3 ]] || fail "one line per rank: $err"

# A rank killed by a signal: 128 + 9.
run_launch -n 2 -- /bin/sh -c 'if [ "$LOOM_RANK" = 1 ]; then kill -9 $$; fi; sleep 60'
[[ "$status" == 137 ]] || fail "kill -9: exit $status, expected 137; stderr: $err"
grep -Eq '^launch: rank 1 \(pid [0-9]+\) killed by signal 9 \(Killed\)$' <<<"$err" || fail "kill -9: $err"

# Timeout: 124.
run_launch -n 2 --timeout=300ms -- sleep 60
[[ "$status" == 124 ]] || fail "timeout: exit $status, expected 124; stderr: $err"
grep -q '^launch: job timed out after 300ms; stopped every rank$' <<<"$err" || fail "timeout: $err"

# SIGTERM sent to launch is forwarded to every rank; launch exits 128 + 15.
rm -f "$TMP"/started.*
"$LAUNCH" -n 2 -- /bin/sh -c 'touch "$1/started.$LOOM_RANK"; exec sleep 60' sh "$TMP" \
  >"$TMP/out" 2>"$TMP/err" &
pid=$!
for _ in $(seq 200); do
  [[ -e "$TMP/started.0" && -e "$TMP/started.1" ]] && break
  sleep 0.05
done
[[ -e "$TMP/started.0" && -e "$TMP/started.1" ]] || fail "signal: ranks did not start"
kill -TERM "$pid"
status=0
wait "$pid" || status=$?
err="$(cat "$TMP/err")"
[[ "$status" == 143 ]] || fail "signal: exit $status, expected 143; stderr: $err"
grep -q '^launch: received signal 15 (Terminated); forwarded it to every running rank$' <<<"$err" \
  || fail "signal: $err"
[[ "$(grep -c 'killed by signal 15 (Terminated), stopped by launch' <<<"$err")" == 2 ]] || fail "signal: $err"

# Leftover shared memory of the job is removed, even when a rank fails.
if [[ -d /dev/shm ]]; then
  job="cli_test-$$"
  # Rank 1 fails once both segments exist.
  run_launch -n 2 --job_id="$job" --timeout=30s -- /bin/sh -c \
    'echo x > "/dev/shm/loom.$LOOM_JOB_ID.seg$LOOM_RANK"; [ "$LOOM_RANK" = 1 ] || exec sleep 60
     until [ -e "/dev/shm/loom.$LOOM_JOB_ID.seg0" ]; do sleep 0.02; done; exit 1'
  [[ "$status" == 1 ]] || fail "shm: exit $status; stderr: $err"
  grep -q "^launch: removed 2 leftover shared-memory segments of job $job\$" <<<"$err" || fail "shm: $err"
  compgen -G "/dev/shm/loom.$job.*" >/dev/null && fail "shm: segments left: $(ls /dev/shm)"
fi

# Bad input: exit 2 and a message naming the value.
expect_error() {
  local want="$1"; shift
  run_launch "$@"
  [[ "$status" == 2 ]] || fail "$* exited $status, expected 2; stderr: $err"
  grep -qF -- "$want" <<<"$err" || fail "$*: expected '$want' in: $err"
}
expect_error "launch: number of ranks 0 is outside [1, 1024]" -n 0 -- true
expect_error "launch: number of ranks 1025 is outside [1, 1024]" -n 1025 -- true
expect_error "launch: -n abc is not a number of ranks" -n abc -- true
expect_error "launch: no PROGRAM given" -n 2
expect_error "launch: no PROGRAM given" -n 2 --
expect_error 'launch: program "loom-no-such-program" not found in PATH=' -n 2 -- loom-no-such-program
expect_error "launch: --timeout=soon is not a duration" --timeout=soon -- true
expect_error "launch: timeout -1s is negative" --timeout=-1s -- true
expect_error 'launch: job id "a/b" must be 1 to 64 characters from [A-Za-z0-9_-]' --job_id=a/b -- true

help="$("$LAUNCH" --help 2>&1 || true)"
for flag in n timeout grace job_id; do
  grep -q -- "-$flag (" <<<"$help" || fail "--help does not list --$flag: $help"
done
echo "launch CLI: all checks passed"
