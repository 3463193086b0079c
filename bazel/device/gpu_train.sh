#!/usr/bin/env bash
# gpu_train.sh: `train --device=cuda` against `--device=cpu` on a GPU machine, from a
# pack made by bazel/device/pack_gpu_suite.sh PACK_DIR //tools:train.
#
#   bazel/device/gpu_train.sh PACK_DIR OUT_DIR
#
# Correctness: each run also trains the one-rank CPU reference (same seed and global
# batch) and prints the largest parameter difference, relative to the largest
# parameter; a GPU run should differ from it as little as a CPU mesh does (both only
# reorder f32 sums). Speed: one rank, a larger model, tokens/s on each device.
set -uo pipefail
pack="$(cd "$1" && pwd)"; out="$2"; mkdir -p "$out"
source "$(dirname "${BASH_SOURCE[0]}")/pack_env.sh"
use_pack "$pack"
train="$pack/bin/train"
run() {  # name flags...
  local name="$1"; shift
  local t0=$SECONDS
  timeout -k 10 240 "$train" "$@" --summary_json="$out/$name.json" > "$out/$name.log" 2>&1
  local rc=$?
  printf '== %s (rc=%s, %ss): %s\n' "$name" "$rc" "$((SECONDS - t0))" "$*"
  grep -E '^(final loss|reference|device:|time per step)' "$out/$name.log" | sed 's/^/   /'
  [[ $rc == 0 ]] || tail -5 "$out/$name.log" | sed 's/^/   ! /'
}
one=(--dp=1 --tp=1 --pp=1 --zero=0 --offload=none)
run one_rank_cpu "${one[@]}" --steps=20 --device=cpu
run one_rank_cuda "${one[@]}" --steps=20 --device=cuda
run mesh_cpu --steps=20 --device=cpu
run mesh_cuda --steps=20 --device=cuda
# --offload=gpu: GpuAdamWStep is the CPU step bit for bit, so these match their
# --offload=cpu twins exactly (the same difference from the reference).
run one_rank_gpu_adamw "${one[@]/--offload=none/--offload=gpu}" --steps=20 --device=cpu
run mesh0_cpu_adamw --zero=0 --offload=cpu --steps=20 --device=cpu
run mesh0_gpu_adamw --zero=0 --offload=gpu --steps=20 --device=cpu
run mesh0_all_gpu --zero=0 --offload=gpu --steps=20 --device=cuda
big=("${one[@]}" --hidden=1024 --heads=16 --layers=4 --seq_len=256 --vocab=256
     --micro_batch=4 --microbatches=2 --steps=4 --nocompare_reference)
run big_cpu "${big[@]}" --device=cpu
run big_cuda "${big[@]}" --device=cuda
run big_cuda_gpu_adamw "${big[@]/--offload=none/--offload=gpu}" --device=cuda
mid=("${one[@]}" --hidden=256 --heads=8 --layers=4 --seq_len=128 --vocab=256
     --micro_batch=4 --microbatches=2 --steps=10 --nocompare_reference)
run mid_cpu "${mid[@]}" --device=cpu
run mid_cuda "${mid[@]}" --device=cuda
echo "== tokens/s"
for f in "$out"/*.json; do
  printf '%-16s %s\n' "$(basename "$f" .json)" \
    "$(grep -oE '"(tokens_per_second|max_abs_param_diff|device_gemm_products)": [^,]*' "$f" | tr '\n' ' ')"
done
