#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "offload/gpu/internal/test_kernels.h"

namespace loom {
namespace gpu_test_internal {
namespace {

constexpr unsigned kThreads = 256;

__device__ __forceinline__ uint64_t GlobalTimerNs() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

__global__ void GateKernel(const volatile int* open, int* timed_out, uint64_t timeout_ns) {
  const uint64_t start = GlobalTimerNs();
  while (*open == 0) {
    if (GlobalTimerNs() - start > timeout_ns) {
      *timed_out = 1;
      return;
    }
    __nanosleep(1000);
  }
}

__global__ void AddKernel(uint32_t* data, size_t count, uint32_t add) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) data[i] += add;
}

__global__ void CopyKernel(const uint32_t* in, uint32_t* out, size_t count) {
  const size_t i = static_cast<size_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < count) out[i] = in[i];
}

unsigned Blocks(size_t count) { return static_cast<unsigned>((count + kThreads - 1) / kThreads); }

}  // namespace

cudaError_t LaunchGate(const volatile int* open, int* timed_out, uint64_t timeout_ns,
                       cudaStream_t stream) {
  GateKernel<<<1, 1, 0, stream>>>(open, timed_out, timeout_ns);
  return cudaGetLastError();
}

cudaError_t LaunchAddToWords(uint32_t* data, size_t count, uint32_t add, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  AddKernel<<<Blocks(count), kThreads, 0, stream>>>(data, count, add);
  return cudaGetLastError();
}

cudaError_t LaunchCopyWords(const uint32_t* in, uint32_t* out, size_t count, cudaStream_t stream) {
  if (count == 0) return cudaSuccess;
  CopyKernel<<<Blocks(count), kThreads, 0, stream>>>(in, out, count);
  return cudaGetLastError();
}

Gate::~Gate() {
  if (flags_ == nullptr) return;
  Open();
  cudaDeviceSynchronize();
  cudaFreeHost(flags_);
}

cudaError_t Gate::Init() {
  // CUDA loads a kernel lazily, at its first launch (CUDA_MODULE_LOADING=LAZY, the
  // default since CUDA 12.2), and loading may wait for the kernels already running. A
  // kernel launched for the first time while a gate holds another stream then waits for
  // the gate, and the gate for the host, which waits for that kernel: on an H100 the
  // copy behind a held upload stream did, until the gate's timeout. Loading this
  // file's kernels here, before any gate runs, keeps them from doing so.
  for (const void* kernel : {reinterpret_cast<const void*>(&GateKernel),
                             reinterpret_cast<const void*>(&AddKernel),
                             reinterpret_cast<const void*>(&CopyKernel)}) {
    cudaFuncAttributes attributes;
    const cudaError_t loaded = cudaFuncGetAttributes(&attributes, kernel);
    if (loaded != cudaSuccess) return loaded;
  }
  const cudaError_t error = cudaHostAlloc(&flags_, 2 * sizeof(int), cudaHostAllocMapped);
  if (error != cudaSuccess) return error;
  flags_[0] = 0;
  flags_[1] = 0;
  return cudaSuccess;
}

cudaError_t Gate::Hold(cudaStream_t stream, uint64_t timeout_ns) {
  int* device = nullptr;
  const cudaError_t error = cudaHostGetDevicePointer(&device, flags_, 0);
  if (error != cudaSuccess) return error;
  return LaunchGate(device, device + 1, timeout_ns, stream);
}

void Gate::Open() { *static_cast<volatile int*>(flags_) = 1; }

bool Gate::timed_out() const { return *static_cast<volatile int*>(flags_ + 1) != 0; }

}  // namespace gpu_test_internal
}  // namespace loom
