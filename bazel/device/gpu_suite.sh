#!/usr/bin/env bash
# gpu_suite.sh: runs Loom's GPU tests and benchmarks on a machine with a CUDA device,
# from binaries built elsewhere (bazel/device/pack_gpu_suite.sh packs them with the
# Debian shared libraries they link, since the GPU machine has no Bazel).
#
#   bazel/device/gpu_suite.sh PACK_DIR OUT_DIR [tests|benchmarks|all] [filter]
#
# Every test binary runs in full; the summary counts the cases that skipped (on a GPU
# machine only the "needs no device" cases and those needing more GPUs than it has). Logs and benchmark JSON go to OUT_DIR as one tarball;
# a summary table is printed last.
set -uo pipefail
pack="$(cd "$1" && pwd)"; out="$2"; what="${3:-all}"; filter="${4:-}"
mkdir -p "$out"; logs="$(mktemp -d)"
source "$(dirname "${BASH_SOURCE[0]}")/pack_env.sh"
use_pack "$pack"
{
  echo "== machine"; nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm,clocks.max.mem,pcie.link.gen.max,pcie.link.width.max --format=csv
  nvcc --version 2>/dev/null | tail -1
  nvidia-smi topo -m 2>/dev/null | head -5
  nproc; grep -m1 'model name' /proc/cpuinfo; free -g | head -2
  echo "== missing libraries"
  for b in "$pack"/bin/*; do ldd "$b" | grep 'not found' | sed "s|^|$(basename "$b"): |"; done
} 2>&1 | tee "$logs/machine.txt"

summary="$logs/summary.txt"; : > "$summary"
run_one() {  # name seconds command...
  local name="$1" secs="$2"; shift 2
  local t0=$SECONDS rc
  (cd "$(mktemp -d)" && TEST_TMPDIR="$PWD" timeout -k 10 "$secs" "$@") > "$logs/$name.log" 2>&1
  rc=$?
  local skipped; skipped="$(grep -cE '^\[  SKIPPED \] .* \([0-9]+ ms\)$' "$logs/$name.log" 2>/dev/null || true)"
  local passed; passed="$(grep -m1 '^\[  PASSED  \]' "$logs/$name.log" | sed 's/.*\] //')"
  printf '%-34s rc=%-3s %4ss  %s%s\n' "$name" "$rc" "$((SECONDS - t0))" "${passed:-}" \
    "$( [[ "$skipped" != 0 ]] && echo " SKIPPED=$skipped")" | tee -a "$summary"
  if [[ $rc != 0 ]]; then grep -E '^\[  FAILED  \]|Failure|error|Error' "$logs/$name.log" | head -20 | sed 's/^/    /' | tee -a "$summary"; fi
}
if [[ "$what" == tests || "$what" == all ]]; then
  for t in "$pack"/bin/*_test; do
    n="$(basename "$t")"; [[ -n "$filter" && ! "$n" =~ $filter ]] && continue
    run_one "$n" "${LOOM_TEST_SECONDS:-150}" "$t"
  done
fi
if [[ "$what" == benchmarks || "$what" == all ]]; then
  for b in "$pack"/bin/*_benchmark; do
    n="$(basename "$b")"; [[ -n "$filter" && ! "$n" =~ $filter ]] && continue
    run_one "$n" "${LOOM_BENCH_SECONDS:-200}" "$b" --benchmark_out="$logs/$n.json" --benchmark_out_format=json \
      --benchmark_min_time=0.2
  done
fi
tar -C "$logs" -czf "$out/gpu_suite_logs.tgz" .
cp "$summary" "$out/summary.txt"
for b in "$logs"/*_benchmark.log; do [[ -f "$b" ]] && { echo "== $(basename "$b")"; grep -E '^BM_|^-|Benchmark' "$b" | cut -c1-160; }; done
echo "== summary"; cat "$summary"
