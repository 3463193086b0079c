# pack_env.sh: sourced by the bazel/device scripts. `use_pack PACK_DIR` puts a pack's
# Debian libraries (bazel/device/pack_gpu_suite.sh) and the GPU machine's CUDA
# libraries (cudart, cuBLAS, NCCL: its own under /usr/local/cuda, or else the ones
# PyTorch's wheels bring) on LD_LIBRARY_PATH.
use_pack() {
  local cuda_libs="" d
  for d in /usr/local/cuda/lib64 /usr/local/cuda/lib /usr/local/cuda/targets/x86_64-linux/lib; do
    [[ -d "$d" ]] && cuda_libs="$cuda_libs:$d"
  done
  for d in $(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/*/lib 2>/dev/null); do
    cuda_libs="$cuda_libs:$d"
  done
  export LD_LIBRARY_PATH="$1/lib${cuda_libs}${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
}
