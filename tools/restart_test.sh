#!/usr/bin/env bash
# Elastic restart, end to end, with real processes and a real SIGKILL (issue 22):
# a 3-rank shm job with --checkpoint_every=K and --max_restarts=2 loses a rank at a
# random step; train restarts the job by itself from the newest checkpoint, loses
# at most K steps, finishes, and its final checkpoint (parameters, AdamW moments) is
# byte for byte the uninterrupted run's. Nothing of either job is left behind.
# Also: a checkpoint of another model is refused, naming the field.
set -euo pipefail
TRAIN="$1"
fail() { echo "FAIL: $*" >&2; exit 1; }
dir="$(mktemp -d "${TEST_TMPDIR:-/tmp}/restart.XXXXXX")"
tag="loom-restart-$$-$RANDOM"
# The processes of this test's jobs: tagged through the environment, which ranks
# inherit (they run as /proc/self/exe, another path than $TRAIN).
tagged() {
  # One grep over every environment (a process per /proc entry would take seconds on
  # a busy machine, long enough for the job to run past the step to break).
  local pid
  for pid in $(grep -lsx --null -z "LOOM_RESTART_TEST=$tag" /proc/[0-9]*/environ 2>/dev/null |
               tr '\0' '\n' | sed -E 's|/proc/([0-9]+)/environ|\1|'); do
    # grep -z on the file, not tr | grep -q: under pipefail, the pipe fails when grep
    # matches before tr's last write (SIGPIPE), and a live process would be missed.
    [[ -z "${1:-}" ]] || grep -qsxzF -- "$1" "/proc/$pid/environ" || continue
    echo "$pid"
  done
}
cleanup() {
  for p in $(tagged); do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$dir"
}
trap cleanup EXIT

STEPS=60
K=10
job=(--transport=shm --dp=3 --tp=1 --pp=1 --microbatches=2 --steps=$STEPS
     --checkpoint_every=$K --nocompare_reference --heartbeat_timeout=10s)

LOOM_RESTART_TEST="$tag" "$TRAIN" "${job[@]}" --checkpoint_dir="$dir/whole" >"$dir/whole.log" 2>&1 \
    || fail "the uninterrupted run failed: $(cat "$dir/whole.log")"

# The run to break: a rank dies by SIGKILL once the job has passed a random step.
victim=$((RANDOM % 3))
at=$((K + 5 + RANDOM % (STEPS - 2 * K - 5)))
# The output files exist before the job does: the background job opens them only
# once it runs, and the poll below may read first (on a loaded machine it did, and
# awk's "cannot open" ended the test through set -e).
: >"$dir/broken.out"
LOOM_RESTART_TEST="$tag" "$TRAIN" "${job[@]}" --checkpoint_dir="$dir/broken" --max_restarts=2 \
    >"$dir/broken.out" 2>"$dir/broken.err" &
parent=$!
rank_pid() { tagged "LOOM_RANK=$victim" | head -1; }
# kill_rank kills rank $victim: the first tagged process with its rank, found again
# if the one found was gone by the time of the kill.
kill_rank() {
  local pid
  for _ in 1 2 3 4 5; do
    pid="$(rank_pid)"
    [[ -n "$pid" ]] || { sleep 0.05; continue; }
    if kill -9 "$pid" 2>/dev/null; then
      echo "$pid"
      return 0
    fi
    echo "note: rank $victim as pid $pid was gone at the kill; $(ps -o pid,ppid,args -p "$pid" 2>&1 | tail -1)" >&2
  done
  return 1
}
killed_after=""
for _ in $(seq 1 1200); do
  last="$(awk '/^step / { s = $2 } END { print s + 0 }' "$dir/broken.out")"
  if (( last >= at )); then
    kill_rank >/dev/null || fail "rank $victim not found at step $last"
    killed_after="$last"
    break
  fi
  kill -0 "$parent" 2>/dev/null || break
  sleep 0.05
done
[[ -n "$killed_after" ]] || fail "the job ended before step $at: $(cat "$dir/broken.out" "$dir/broken.err")"
status=0
wait "$parent" || status=$?
[[ "$status" == 0 ]] || fail "the restarted job exited $status: $(cat "$dir/broken.err")"
grep -q "^launch: rank $victim (pid [0-9]*) killed by signal 9 (Killed)$" "$dir/broken.err" \
    || fail "the report does not name rank $victim: $(cat "$dir/broken.err")"
grep -q "^train: restart 1 of 2: rank $victim killed by signal 9 (Killed); resuming from the checkpoint of step " \
    "$dir/broken.err" || fail "no restart line: $(cat "$dir/broken.err")"
grep -q '^train: 1 restart$' "$dir/broken.err" || fail "one restart expected: $(cat "$dir/broken.err")"
resumed="$(sed -n 's/^resumed from the checkpoint of step \([0-9]*\) in .*/\1/p' "$dir/broken.out")"
[[ -n "$resumed" ]] || fail "no resume line: $(cat "$dir/broken.out")"
# The first run's last reported step: the last before the second run's header. (The
# kill lands a step or two after the poll saw step $killed_after, and a checkpoint
# commits before its step is printed.)
reached="$(awk '/^train: dp=/ { if (++runs == 2) exit } /^step / { s = $2 } END { print s + 0 }' \
    "$dir/broken.out")"
# Steps lost: those the killed run finished after its last checkpoint, at most K.
(( resumed % K == 0 && resumed <= reached + 1 && reached - resumed <= K && reached >= killed_after )) \
    || fail "resumed at step $resumed; the killed run reported step $reached (K=$K)"
grep -q "^step   $STEPS " "$dir/broken.out" || fail "the restarted job did not finish"
final="$dir/whole/step-$(printf %08d $STEPS)"
for f in "$final"/*; do
  cmp -s "$f" "$dir/broken/step-$(printf %08d $STEPS)/$(basename "$f")" \
      || fail "$(basename "$f") differs from the uninterrupted run's"
done
echo "rank $victim killed after step $reached, resumed from step $resumed: final state bitwise equal"

# Nothing of the jobs is left: no process, no shared-memory segment.
sleep 0.2
leftover="$(tagged)"
[[ -z "$leftover" ]] || fail "processes of the job still run: $leftover"
if compgen -G "/dev/shm/loom.*" >/dev/null; then
  # Other tests may run beside this one: only complain about this job's segments.
  for seg in /dev/shm/loom.*; do
    [[ -e "$seg" ]] || continue
    grep -q "$(basename "$seg" | cut -d. -f2)" "$dir/broken.err" && fail "leftover $seg"
  done
fi

# --elastic_dp: the failed rank's host counts as lost; the job continues at dp 2
# with 3 microbatches per replica (the same global batch of 6) from the checkpoint,
# and ends where the uninterrupted dp-3 run ends, up to the rounding of another
# summation order.
victim=$((RANDOM % 3))
at=$((K + 5 + RANDOM % (STEPS - 2 * K - 5)))
: >"$dir/elastic.out"  # before the job, as above
LOOM_RESTART_TEST="$tag" "$TRAIN" "${job[@]}" --checkpoint_dir="$dir/elastic" --max_restarts=1 \
    --elastic_dp >"$dir/elastic.out" 2>"$dir/elastic.err" &
parent=$!
killed=""
for _ in $(seq 1 1200); do
  last="$(awk '/^step / { s = $2 } END { print s + 0 }' "$dir/elastic.out")"
  if (( last >= at )); then
    kill_rank >/dev/null || fail "elastic: rank $victim not found"
    killed=1
    break
  fi
  kill -0 "$parent" 2>/dev/null || break
  sleep 0.05
done
[[ -n "$killed" ]] || fail "elastic: the job ended before step $at"
status=0
wait "$parent" || status=$?
[[ "$status" == 0 ]] || fail "the elastic job exited $status: $(cat "$dir/elastic.err")"
grep -q "^train: restart 1 of 1: rank $victim killed by signal 9 (Killed); resuming from the checkpoint of step [0-9]* in .* at dp 2 (3 microbatches, 2 ranks)$" \
    "$dir/elastic.err" || fail "elastic restart line: $(cat "$dir/elastic.err")"
grep -q '^train: dp=2 tp=1 pp=1 (2 processes over shm), schedule 1f1b, 3 microbatches' "$dir/elastic.out" \
    || fail "the restart does not run at dp 2: $(grep '^train:' "$dir/elastic.out")"
whole_loss="$(sed -n 's/^final loss \([0-9.]*\) .*/\1/p' "$dir/whole.log")"
elastic_loss="$(sed -n 's/^final loss \([0-9.]*\) .*/\1/p' "$dir/elastic.out")"
awk -v a="$whole_loss" -v b="$elastic_loss" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(d < 2e-3) }' \
    || fail "elastic run ends at loss $elastic_loss, the uninterrupted one at $whole_loss"
echo "elastic: rank $victim killed, continued at dp 2; final loss $elastic_loss (uninterrupted $whole_loss)"

# Bad checkpoint and restart flags are bad_input_test's; a checkpoint of another
# model is refused before any rank starts (exit 1: the flags are fine, the files
# disagree).
err="$("$TRAIN" --resume_from="$dir/whole" --hidden=128 --steps=70 2>&1 >/dev/null)" && fail "another model resumed"
[[ "$err" == "train: --resume_from $dir/whole: the checkpoint's model has hidden 64, this job's 128" ]] \
    || fail "model mismatch: $err"
echo PASS
