#!/bin/bash
# The AdamW kernel's PTX: every f32 operation correctly rounded, none fused. This is what
# makes the GPU step give the CPU AdamW's bits (gpu_adamw_test checks the bits where a
# device exists); this check needs only nvcc, so it runs on machines without a GPU too.
set -euo pipefail
ptx="$1"
fail=0
grep -q "AdamWStepKernel" "${ptx}" || { echo "no AdamWStepKernel in ${ptx}"; exit 1; }
for op in mul.rn.f32 add.rn.f32 sub.rn.f32 div.rn.f32 sqrt.rn.f32; do
  if ! grep -q "${op}" "${ptx}"; then
    echo "expected ${op} in the kernel's PTX"
    fail=1
  fi
done
# fma.*.f32 would round once where the CPU rounds twice; approx / ftz forms are not IEEE.
if grep -nE "fma\.[a-z.]*f32|\.approx\.|\.ftz\." "${ptx}"; then
  echo "the lines above are fused, approximate or flush-to-zero f32 operations"
  fail=1
fi
[[ "${fail}" == 0 ]] && echo "PASS: no fused, approximate or flush-to-zero f32 operations"
exit "${fail}"
