#!/usr/bin/env bash
# The planner checked here: runs //tools:train on this machine in a dozen
# configurations of one model (one and two ranks on the host's cores: dp, tp, pp,
# ZeRO stage, schedule, microbatch size, recompute, threads per rank), each
# ROUNDS times keeping its fastest run, fits the this-cpu device to two one-rank runs
# (one per thread count), and asks `plan --compare` to predict every run's step time.
# Prints the table of predicted against measured, and (with TOLERANCE > 0) fails when
# a prediction is off by more than TOLERANCE or the predicted best measured more than
# TOLERANCE / 4 slower than the measured best.
#
#   tools/planner/here_check.sh TRAIN PLAN [OUT_DIR]
#     (TRAIN and PLAN: optimized binaries, e.g. from ./bazelw build --config=opt
#      //tools:train //tools:plan; the environment's ROUNDS (3) and TOLERANCE (0.2))
set -euo pipefail
train="$1"
plan="$2"
out="${3:-$(mktemp -d)}"
rounds="${ROUNDS:-3}"
tolerance="${TOLERANCE:-0.2}"
mkdir -p "$out"

model=(--layers=4 --hidden=256 --heads=8 --seq_len=128 --vocab=256 --steps=6
       --offload=none --nocompare_reference)
# name, then the flags of the run (global batch 16 sequences in every one).
configs=(
  "r1_base        --dp=1 --tp=1 --pp=1 --zero=0 --microbatches=8 --micro_batch=2"
  "r1_recompute   --dp=1 --tp=1 --pp=1 --zero=0 --microbatches=8 --micro_batch=2 --recompute=full"
  "r1_mbs4        --dp=1 --tp=1 --pp=1 --zero=0 --microbatches=4 --micro_batch=4"
  "r1_1thread     --dp=1 --tp=1 --pp=1 --zero=0 --microbatches=8 --micro_batch=2 --threads_per_rank=1"
  "dp2_zero0      --dp=2 --tp=1 --pp=1 --zero=0 --microbatches=4 --micro_batch=2"
  "dp2_zero1      --dp=2 --tp=1 --pp=1 --zero=1 --microbatches=4 --micro_batch=2"
  "dp2_zero3      --dp=2 --tp=1 --pp=1 --zero=3 --microbatches=4 --micro_batch=2"
  "dp2_recompute  --dp=2 --tp=1 --pp=1 --zero=0 --microbatches=4 --micro_batch=2 --recompute=full"
  "tp2            --dp=1 --tp=2 --pp=1 --zero=0 --microbatches=8 --micro_batch=2"
  "pp2_1f1b       --dp=1 --tp=1 --pp=2 --zero=0 --microbatches=8 --micro_batch=2 --schedule=1f1b"
  "pp2_gpipe      --dp=1 --tp=1 --pp=2 --zero=0 --microbatches=8 --micro_batch=2 --schedule=gpipe"
  "pp2_zbh1       --dp=1 --tp=1 --pp=2 --zero=0 --microbatches=8 --micro_batch=2 --schedule=zb-h1"
  "pp2_mbs4       --dp=1 --tp=1 --pp=2 --zero=0 --microbatches=4 --micro_batch=4 --schedule=1f1b"
)
calibrations=(
  "cal_1thread    --dp=1 --tp=1 --pp=1 --zero=0 --microbatches=8 --micro_batch=2 --threads_per_rank=1"
  "cal_2threads   --dp=1 --tp=1 --pp=1 --zero=0 --microbatches=8 --micro_batch=2 --threads_per_rank=2"
)

tokens_per_second() { sed -E 's/.*"tokens_per_second": ([0-9.e+]+).*/\1/' "$1"; }

# run NAME FLAGS...: ROUNDS runs, the fastest kept as OUT/NAME.json.
run() {
  local name="$1"; shift
  local r
  for ((r = 0; r < rounds; ++r)); do
    "$train" "${model[@]}" "$@" --summary_json="$out/$name.$r.json" >"$out/$name.$r.log" 2>&1 || {
      echo "here_check: $name failed:"; tail -n 20 "$out/$name.$r.log"; return 1; }
  done
  local best=0 best_rate=0 rate
  for ((r = 0; r < rounds; ++r)); do
    rate="$(tokens_per_second "$out/$name.$r.json")"
    if awk -v a="$rate" -v b="$best_rate" 'BEGIN { exit !(a > b) }'; then best=$r; best_rate=$rate; fi
  done
  cp "$out/$name.$best.json" "$out/$name.json"
  echo "$name: best of $rounds $best_rate tokens/s"
}

for entry in "${calibrations[@]}" "${configs[@]}"; do
  read -r -a words <<<"$entry"
  run "${words[@]}"
done

compare=()
for entry in "${configs[@]}"; do
  read -r -a words <<<"$entry"
  compare+=("$out/${words[0]}.json")
done
"$plan" --device=this-cpu --calibration="$out/cal_1thread.json,$out/cal_2threads.json" \
  --compare="$(IFS=,; echo "${compare[*]}")" --tolerance="$tolerance"
