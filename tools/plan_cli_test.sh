#!/usr/bin/env bash
# Runs the real //tools:plan binary: the Megatron-LM paper's 39.1B model on 512 A100s
# (a table, the breakdown, the JSON list best first), this CPU measured on the spot,
# and bad input exiting 2 with one line naming the value.
set -euo pipefail
PLAN="$1"
fail() { echo "FAIL: $*" >&2; exit 1; }
tmp="$(mktemp -d)"
trap 'rm -rf "$tmp"' EXIT

megatron=(--layers=48 --hidden=8192 --heads=64 --seq_len=2048 --vocab=51200 --global_batch=1536
          --gpus=512 --device=a100-80gb)
out="$("$PLAN" "${megatron[@]}" --tp=8 --pp=2 --zero=0 --recompute=full --explain --top=3 --json="$tmp/plan.json")"
grep -qE '^ +1 +32 +8 +2 +1 +0 [a-z0-9-]+' <<<"$out" || fail "first row: $out"
grep -q '^best: dp=32 tp=8 pp=2' <<<"$out" || fail "--explain best: $out"
grep -q '^runner-up: ' <<<"$out" || fail "--explain runner-up: $out"
[[ "$(grep -c '"dp": 32, "tp": 8, "pp": 2, "cp": 1, "zero": 0' "$tmp/plan.json")" == 3 ]] \
  || fail "json rows: $(cat "$tmp/plan.json")"
for key in schedule microbatch_size recompute memory_bytes_per_device step_seconds \
           tokens_per_second tflops_per_device mfu; do
  grep -q "\"$key\": " "$tmp/plan.json" || fail "json lacks $key"
done
# Best first: the step times never fall down the list.
sed -E 's/.*"step_seconds": ([0-9.e+-]+).*/\1/;t;d' "$tmp/plan.json" |
  awk 'NR > 1 && $1 < prev { bad = 1 } { prev = $1 } END { exit bad }' || fail "json not best first"

# Every free choice searched: H100 and H200 entries run too.
for device in h100-80gb h200; do
  "$PLAN" --layers=32 --hidden=4096 --heads=32 --seq_len=4096 --vocab=32000 --global_batch=256 \
    --gpus=64 --device="$device" --top=2 | grep -q "on 64 x $device" || fail "$device"
done

# This CPU, measured: one rank with all the cores.
out="$("$PLAN" --device=this-cpu --ranks=1 --layers=2 --hidden=64 --heads=4 --seq_len=32 --vocab=64 --global_batch=8 --top=2)"
grep -q '^this-cpu: .* 1 ranks x [0-9]* threads; per rank [0-9.]* GFLOP/s f32 peak' <<<"$out" \
  || fail "this-cpu line: $out"
grep -qE '^ +1 +1 +1 +1 +1 +0 1f1b' <<<"$out" || fail "this-cpu row: $out"

# Two hosts like this one, one rank each, on a 0.25 GB/s link (2 Gbit/s): the dp=2
# all-reduce of 12.7 M f32 gradients is priced on that link (2 x 1/2 x 50.9 MB at
# 0.25 GB/s, 0.204 s), not on the in-process one.
across=(--device=this-cpu --ranks=2 --layers=4 --hidden=512 --heads=8 --seq_len=128 --vocab=256
        --global_batch=8 --dp=2 --tp=1 --pp=1 --cp=1 --zero=0 --explain --top=1)
out="$("$PLAN" "${across[@]}" --ranks_per_host=1 --inter_node_gbs=0.25 --inter_node_latency_us=50)"
grep -q '^across 2 hosts of 1 ranks: link 50 us, 0.25 GB/s' <<<"$out" || fail "hosts line: $out"
dp_s() { sed -nE 's/.*dp traffic ([0-9.e+-]+) s.*/\1/p' <<<"$1" | head -n 1; }
across_s="$(dp_s "$out")"
awk -v a="$across_s" 'BEGIN { exit !(a > 0.2 && a < 0.21) }' || fail "dp across hosts ${across_s} s: $out"
# On one host the same all-reduce is priced on the in-process link measured on the
# spot (its figures printed in the run's own first line), 2 latencies + bytes / rate.
one_host="$("$PLAN" "${across[@]}")"
link="$(sed -nE 's/.*inproc link ([0-9.e+-]+) us, ([0-9.e+-]+) GB\/s.*/\1 \2/p' <<<"$one_host")"
awk -v d="$(dp_s "$one_host")" -v link="$link" 'BEGIN { split(link, l, " ")
    want = 2 * l[1] * 1e-6 + 4 * 12807200 / (l[2] * 1e9)
    exit !(want > 0 && d > 0.97 * want && d < 1.03 * want) }' \
  || fail "dp on one host: $one_host"

expect_error() {
  local want="$1"; shift
  local err status=0
  err="$("$PLAN" "$@" 2>&1 >/dev/null)" || status=$?
  [[ "$status" == 2 ]] || fail "$* exited $status, expected 2 ($err)"
  [[ "$(wc -l <<<"$err")" == 1 ]] || fail "$*: more than one line: $err"
  grep -qF -- "$want" <<<"$err" || fail "$*: expected '$want' in: $err"
}
small=(--layers=24 --hidden=2048 --heads=16 --global_batch=64)
expect_error "--gpus (or --ranks) is 0" "${small[@]}"
expect_error "heads 30 do not divide hidden 2048" --layers=24 --hidden=2048 --heads=30 --global_batch=64 --gpus=8
expect_error "the model fits nowhere on 8 x a100-80gb" --layers=96 --hidden=16384 --heads=128 --global_batch=64 --gpus=8
expect_error "unknown device \"tpu\"" "${small[@]}" --gpus=8 --device=tpu
expect_error "tp=3 does not divide the 8 devices" "${small[@]}" --gpus=8 --tp=3
expect_error "--global_batch is 0" --layers=24 --hidden=2048 --heads=16 --gpus=8
expect_error "--recompute \"some\" is not none, selective or full" "${small[@]}" --gpus=8 --recompute=some
expect_error "--calibration goes with --device=this-cpu" "${small[@]}" --gpus=8 --calibration=x.json
expect_error "interleaved-1f1b needs virtual_stages >= 2 (got 1)" "${small[@]}" --gpus=8 --pp=2 --schedule=interleaved-1f1b --virtual_stages=1
expect_error "kv_heads 5 do not divide the 16 heads" "${small[@]}" --gpus=8 --kv_heads=5
expect_error "--ranks_per_host goes with --device=this-cpu" "${small[@]}" --gpus=8 --ranks_per_host=4
expect_error "--ranks_per_host=1 puts the job's 2 ranks on 2 hosts: give the link between them, --inter_node_gbs" \
  "${across[@]}" --ranks_per_host=1
expect_error "--ranks_per_host=2 does not divide the job's 3 ranks" "${across[@]}" --ranks=3 --dp=3 \
  --global_batch=9 --ranks_per_host=2 --inter_node_gbs=1
expect_error "--ranks_per_host is -1" "${across[@]}" --ranks_per_host=-1
help="$("$PLAN" --help 2>&1 || true)"
for flag in layers hidden heads seq_len vocab global_batch gpus ranks device dp tp pp cp zero \
            schedule microbatch_size recompute dtype explain json calibration compare ranks_per_host; do
  grep -q -- "--$flag (" <<<"$help" || fail "--help does not list --$flag"
done
echo "plan CLI: all checks passed"
