#!/usr/bin/env bash
# gpu_resident.sh: issue 58's checks of `train --device=cuda` with the whole model on
# the device (tools/training/device_trainer.h), on a GPU machine, from a pack made by
# bazel/device/pack_gpu_suite.sh PACK //tools:train and tarred with xz:
#
#   tar -C PACK -cf - . | xz -T2 > PACK.tar.xz
#   bazel/device/gpu_resident.sh PACK.tar.xz OUT_DIR [phases]
#
# phases (comma-separated, in this order by default): test (flash_attention_kernels_test,
# gpt_kernels_test, device_gpt_model_test, gpu_adamw_test), bench (tokens/s and MFU at
# hidden 1024, 12 layers, seq 1024, bf16 with flash attention; a bin/train_before in
# the pack runs first, as the baseline), bench_materialized (the same with materialized
# attention), bench_mb16 (micro-batch 16), bench_f32 (the
# same in f32), parity (100 steps against --device=cpu, f32 and bf16, loss curves
# compared step by step), parity_flash (bf16, head_dim 64, so flash attention runs),
# ckpt (a GPU checkpoint resumed on the CPU and back), big (hidden 2048, 24 layers),
# suite (the other GPU tests); and, only when named, largest (a 2.5 B model) and, last,
# profile (each kernel's time over two bf16 steps at the bench shape, by Nsight
# Compute, summed by kernel). Every run has its own timeout; a summary ends the output.
set -uo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
tarball="$(cd "$(dirname "$1")" && pwd)/$(basename "$1")"; out="$2"
phases="${3:-test,bench,bench_materialized,bench_mb16,bench_f32,parity,parity_flash,ckpt,big,suite}"
mkdir -p "$out"; out="$(cd "$out" && pwd)"
pack="$(mktemp -d)"; tar -C "$pack" -xJf "$tarball" || { echo "cannot unpack $tarball"; exit 1; }
work="$(mktemp -d)"; cd "$work" || exit 1
source "$here/pack_env.sh"
use_pack "$pack"
train="$pack/bin/train"
summary="$out/summary.txt"; : > "$summary"
note() { echo "$*" | tee -a "$summary"; }
has() { [[ ",$phases," == *",$1,"* ]]; }

{
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv
  nvcc --version 2>/dev/null | tail -1
  nproc; grep -m1 'model name' /proc/cpuinfo; free -g | head -2
} 2>&1 | tee "$out/machine.txt"

run() {  # name seconds flags...   (TRAIN=binary to run another build's train)
  local name="$1" secs="$2"; shift 2
  local t0=$SECONDS
  timeout -k 10 "$secs" "${TRAIN:-$train}" "$@" --summary_json="$out/$name.json" --metrics="$out/$name.jsonl" \
    > "$out/$name.log" 2>&1
  local rc=$?
  note "== $name (rc=$rc, $((SECONDS - t0)) s): $*"
  grep -E '^(final loss|reference|device:|GPU:|time per step)' "$out/$name.log" | sed 's/^/   /' | tee -a "$summary"
  [[ $rc == 0 ]] || tail -4 "$out/$name.log" | sed 's/^/   ! /' | tee -a "$summary"
}

# Loss curves of two runs, step by step: the largest difference, absolute and
# relative to the CPU run's loss at that step.
compare() {  # name a b
  python3 - "$out/$2.jsonl" "$out/$3.jsonl" <<'EOF' 2>&1 | sed "s/^/   $1: /" | tee -a "$summary"
import json, sys
def losses(p):
    try:
        return {r["step"]: r["loss"] for r in map(json.loads, open(p)) if "loss" in r}
    except OSError as e:
        return {}
a, b = losses(sys.argv[1]), losses(sys.argv[2])
steps = sorted(set(a) & set(b))
if not steps:
    print("no common steps"); sys.exit()
worst = max(steps, key=lambda s: abs(a[s] - b[s]))
rel = max(abs(a[s] - b[s]) / abs(b[s]) for s in steps)
print(f"{len(steps)} steps; largest |loss difference| {abs(a[worst]-b[worst]):.3g} at step {worst} "
      f"({a[worst]:.6f} vs {b[worst]:.6f}); largest relative {rel:.3g}; last {a[steps[-1]]:.6f} vs {b[steps[-1]]:.6f}")
EOF
}

one=(--dp=1 --tp=1 --pp=1 --zero=0 --offload=none)
if has test; then
  for t in flash_attention_kernels_test gpt_kernels_test device_gpt_model_test gpu_adamw_test; do
    t0=$SECONDS
    (cd "$(mktemp -d)" && TEST_TMPDIR="$PWD" timeout -k 10 200 "$pack/bin/$t") > "$out/$t.log" 2>&1
    note "== $t (rc=$?, $((SECONDS - t0)) s)"
    grep -E '^\[  (PASSED|FAILED) |Failure|Expected|Which is|actual|error' "$out/$t.log" | head -30 | sed 's/^/   /' | tee -a "$summary"
  done
fi
shape=(--hidden=1024 --heads=16 --layers=12 --seq_len=1024 --vocab=256 --micro_batch=8
       --microbatches=1 --nocompare_reference)
if has bench; then
  # Baseline builds packed as bin/train_before* (earlier commits' train) run first, on
  # the same machine, so the rows compare.
  for before in "$pack"/bin/train_before*; do
    [[ -x "$before" ]] || continue
    TRAIN="$before" run "bench_bf16_${before##*/train_}" 150 "${one[@]}" "${shape[@]}" \
      --dtype=bf16 --steps=12 --device=cuda
  done
  run bench_bf16 150 "${one[@]}" "${shape[@]}" --dtype=bf16 --steps=12 --device=cuda
fi
if has bench_materialized; then
  run bench_bf16_materialized 150 "${one[@]}" "${shape[@]}" --dtype=bf16 --steps=12 --device=cuda \
    --device_attention=materialized
fi
# The same model at micro-batch 16 (16,384 tokens a step): the optimizer step and the
# per-step work amortized over twice the tokens.
if has bench_mb16; then
  run bench_bf16_mb16 150 "${one[@]}" "${shape[@]}" --micro_batch=16 --dtype=bf16 --steps=8 \
    --device=cuda
fi
if has bench_f32; then
  run bench_f32 120 "${one[@]}" "${shape[@]}" --steps=5 --device=cuda
fi
if has parity; then
  run parity_f32_cpu 120 "${one[@]}" --steps=100 --device=cpu --nocompare_reference
  run parity_f32_cuda 120 "${one[@]}" --steps=100 --device=cuda
  compare f32 parity_f32_cuda parity_f32_cpu
  run parity_bf16_cpu 120 "${one[@]}" --dtype=bf16 --steps=100 --device=cpu --nocompare_reference
  run parity_bf16_cuda 120 "${one[@]}" --dtype=bf16 --steps=100 --device=cuda
  compare bf16 parity_bf16_cuda parity_bf16_cpu
fi
if has parity_flash; then
  small=(--hidden=128 --heads=2 --seq_len=96 --layers=2 --dtype=bf16 --steps=100)
  run parity_flash_cpu 120 "${one[@]}" "${small[@]}" --device=cpu --nocompare_reference
  run parity_flash_cuda 120 "${one[@]}" "${small[@]}" --device=cuda
  compare bf16_flash parity_flash_cuda parity_flash_cpu
fi
if has ckpt; then
  rm -rf "$work/ck_gpu" "$work/ck_cpu"
  run ckpt_gpu_60 90 "${one[@]}" --steps=60 --device=cuda --nocompare_reference --checkpoint_dir="$work/ck_gpu"
  run ckpt_cpu_resumes 90 "${one[@]}" --steps=100 --device=cpu --nocompare_reference --resume_from="$work/ck_gpu" --checkpoint_dir="$work/ck_gpu2"
  compare gpu60_then_cpu ckpt_cpu_resumes parity_f32_cpu
  run ckpt_cpu_60 90 "${one[@]}" --steps=60 --device=cpu --nocompare_reference --checkpoint_dir="$work/ck_cpu"
  run ckpt_gpu_resumes 90 "${one[@]}" --steps=100 --device=cuda --nocompare_reference --resume_from="$work/ck_cpu" --checkpoint_dir="$work/ck_cpu2"
  compare cpu60_then_gpu ckpt_gpu_resumes parity_f32_cpu
fi
if has big; then
  run big_bf16 200 "${one[@]}" --hidden=2048 --heads=16 --layers=24 --seq_len=1024 --vocab=256 \
    --micro_batch=8 --microbatches=1 --nocompare_reference --dtype=bf16 --steps=6 --device=cuda
fi
# The largest model measured: 2.5 B parameters (hidden 2560, 32 layers, 40 heads of 64),
# about 45 GB of state and 24 GB of activations at micro-batch 8 with flash attention.
if has largest; then
  run largest_bf16 300 "${one[@]}" --hidden=2560 --heads=40 --layers=32 --seq_len=1024 --vocab=256 \
    --micro_batch=8 --microbatches=1 --nocompare_reference --dtype=bf16 --steps=5 --device=cuda
fi
if has suite; then
  t0=$SECONDS
  mkdir -p "$work/suite_pack/bin"; ln -s "$pack/lib" "$work/suite_pack/lib"
  for t in "$pack"/bin/*_test; do
    [[ "$t" == *device_gpt_model_test || "$t" == *gpt_kernels_test ||
       "$t" == *flash_attention_kernels_test || "$t" == *gpu_adamw_test ]] ||
      ln -s "$t" "$work/suite_pack/bin/"
  done
  LOOM_TEST_SECONDS=90 bash "$here/gpu_suite.sh" "$work/suite_pack" "$out/suite" tests \
    > "$out/suite.log" 2>&1
  note "== gpu suite ($((SECONDS - t0)) s)"; sed 's/^/   /' "$out/suite/summary.txt" | tee -a "$summary"
fi
# Where a step's time goes: every kernel of two steps timed by Nsight Compute (one
# metric, so one replay each), summed by kernel name.
if has profile; then
  ncu_bin="$(command -v ncu || find /usr/local/cuda/bin /opt/nvidia -name ncu -type f 2>/dev/null | head -1)"
  t0=$SECONDS
  timeout -k 10 150 "${ncu_bin:-ncu}" --clock-control none --metrics gpu__time_duration.sum --csv \
    "$train" "${one[@]}" "${shape[@]}" --dtype=bf16 --steps=2 --device=cuda \
    > "$out/profile_flash.csv" 2> "$out/profile_flash.err"
  note "== profile flash (rc=$?, $((SECONDS - t0)) s)"
  python3 "$here/kernel_times.py" "$out/profile_flash.csv" 2>&1 | head -40 | sed 's/^/   /' | tee -a "$summary"
fi
nvidia-smi --query-gpu=name,memory.used,temperature.gpu,clocks.sm --format=csv | tee -a "$summary"
# Every line above went to stdout as it came; the summary file keeps them (not printed
# again: a device run returns only the output's tail).
echo "== summary: $summary"
