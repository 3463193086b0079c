#!/usr/bin/env bash
# Runs the four programs and checks what they print against values worked out by
# hand (the examples in Loom's headers), not against a recording of their output.
set -euo pipefail
fail() { echo "FAIL: $*" >&2; exit 1; }

# expect_line OUTPUT LINE: OUTPUT has LINE as one whole line.
expect_line() { grep -qxF -- "$2" <<<"$1" || fail "missing line: $2"$'\n'"in:"$'\n'"$1"; }

# The mesh: in dp=2,pp=2,tp=2 (row-major, tp fastest) rank 5 is dp=1 pp=0 tp=1; its tp
# group is {4, 5}, its pp group {5, 7}, its dp group {1, 5} (topology/mesh.h).
out="$(./mesh_report)"
expect_line "$out" "mesh dp=2,pp=2,tp=2: 8 ranks"
expect_line "$out" "rank 5: dp=1 pp=0 tp=1  groups dp {1, 5} pp {5, 7} tp {4, 5}"
expect_line "$out" "rank 0: dp=0 pp=0 tp=0  groups dp {0, 4} pp {0, 2} tp {0, 1}"
expect_line "$out" "every group matches the row-major reference"
out="$(./mesh_report dp=3,tp=4)"
expect_line "$out" "rank 6: dp=1 tp=2  groups dp {2, 6, 10} tp {4, 5, 6, 7}"
if err="$(./mesh_report dp=0 2>&1)"; then fail "mesh_report accepted dp=0"; fi
grep -q 'dimension "dp" has size 0' <<<"$err" || fail "dp=0 error does not name it: $err"

# The all-reduce: each of 4 ranks checks every element against the sequential sum;
# odd, empty and single-element counts too.
for count in 65537 0 1 3; do
  out="$(./all_reduce_threads "$count")"
  for rank in 0 1 2 3; do
    expect_line "$out" "rank $rank: all_reduce sum of $count int64: exact"
  done
  grep -qE "^all_reduce $((count * 8)) B on 4 ranks: [a-z_]+ \(predicted" <<<"$out" ||
    fail "no algorithm choice for $count elements in: $out"
done

# The schedule: 1F1B on 4 ranks, 8 microbatches. The last rank alternates from the
# start, the first warms up with 3 forwards (pipeline/generators.h); 4 ranks x 8
# microbatches x (F + B) = 64 actions.
out="$(./pipeline_schedule 1f1b 4 8)"
grep -qE "^rank 3 +3F0 +3B0 +3F1 +3B1 +3F2 " <<<"$out" || fail "rank 3 does not alternate: $out"
grep -qE "^rank 0 +0F0 +0F1 +0F2 +0F3 +0B0 +0F4 +0B1 " <<<"$out" || fail "rank 0's warmup is not 3: $out"
expect_line "$out" "verified: 64 actions on 4 ranks, every microbatch forward and backward once, no deadlock"
expect_line "$out" "without rank 3's first action: INVALID_ARGUMENT"
out="$(./pipeline_schedule zb-v 2 4)"
expect_line "$out" "verified: 48 actions on 2 ranks, every microbatch forward and backward once, no deadlock"
if ./pipeline_schedule 1f1b 0 8 >/dev/null 2>&1; then fail "0 ranks accepted"; fi
# Data parallelism at ZeRO stage 3: a two-layer model of the program's own on 4
# thread ranks; each rank's loss must fall below half its first value and the ranks
# must end with the same weights (the program checks both; here its lines). The
# same program at stage 0 (plain data parallelism) and a bad stage.
out="$(./train_stage3 60 3)"
for rank in 0 1 2 3; do
  grep -qE "^rank $rank: loss [0-9.e-]+ at step 1, [0-9.e-]+ at step 60: fell$" <<<"$out" ||
    fail "rank $rank's loss did not fall: $out"
done
expect_line "$out" "every rank holds the same weights"
expect_line "$out" "stage 3 on 4 thread ranks: PASS"
out="$(./train_stage3 60 0)"
expect_line "$out" "stage 0 on 4 thread ranks: PASS"
if out="$(./train_stage3 10 7 2>&1)"; then fail "stage 7 accepted: $out"; fi
grep -q "DataParallelOptions.stage 7 is not 0..3" <<<"$out" || fail "stage 7 not named: $out"
echo "PASS"
