#!/usr/bin/env bash
# pack_gpu_suite.sh: builds Loom's GPU tests and benchmarks (--config=cuda, optimized,
# our code linked statically) and packs them, with the Debian shared libraries they
# link, into PACK_DIR for bazel/device/gpu_suite.sh on a GPU machine that has CUDA but
# neither Bazel nor Debian's packages. glibc, the CUDA libraries and the driver are the
# GPU machine's own.
#
#   bazel/device/pack_gpu_suite.sh PACK_DIR [extra bazel targets...]
set -euo pipefail
cd "$(dirname "$0")/../.."
pack="$1"; shift
ob="${LOOM_CUDA_OUTPUT_BASE:-$HOME/.cache/loom_cuda_ob}"
query='kind("cc_test|cc_binary", attr(tags, "\bgpu\b", //...))'
# --keep_going: //... also walks the bazel-<dir> convenience link when the checkout's
# directory is not named after the workspace, and fails on packages inside it.
mapfile -t targets < <(./bazelw --output_base="$ob" query --keep_going "$query" 2>/dev/null |
  grep '^//' | grep -v '^//bazel-')
(( ${#targets[@]} > 0 )) || { echo "pack_gpu_suite: the query for gpu targets found none" >&2; exit 1; }
targets+=("$@")
./bazelw --output_base="$ob" build --config=cuda -c opt --copt=-O3 --dynamic_mode=off "${targets[@]}"
bin="$(./bazelw --output_base="$ob" info --config=cuda -c opt bazel-bin 2>/dev/null)"
rm -rf "$pack"; mkdir -p "$pack/bin" "$pack/lib"
for t in "${targets[@]}"; do
  path="${t#//}"; path="${path/://}"
  cp "$bin/$path" "$pack/bin/"
done
# Shared libraries from Debian's prefix, less glibc's own and the CUDA ones.
for b in "$pack"/bin/*; do ldd "$b"; done | awk '$3 ~ /^\// { print $3 }' | sort -u |
  grep -E '^/(usr/)?lib/x86_64-linux-gnu/' |
  grep -vE '/(libc|libm|libdl|libpthread|librt|ld-linux-x86-64|libcuda|libnvidia)[.-]' |
  while read -r lib; do cp -L "$lib" "$pack/lib/"; done
strip --strip-debug "$pack"/bin/* "$pack"/lib/* 2>/dev/null || true
du -sh "$pack"/bin "$pack"/lib
