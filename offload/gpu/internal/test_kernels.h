// Small kernels for the tests of offload/gpu (testonly): a gate that holds a stream
// until the host opens it, so a test can tell what ran while a compute stream was
// held, and word-wise kernels that read and change a device slot.
#ifndef LOOM_OFFLOAD_GPU_INTERNAL_TEST_KERNELS_H_
#define LOOM_OFFLOAD_GPU_INTERNAL_TEST_KERNELS_H_

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace loom {
namespace gpu_test_internal {

// LaunchGate enqueues one thread that spins until *open (mapped pinned host memory,
// as a device pointer) is non-zero, or `timeout_ns` of device time has passed, in
// which case it sets *timed_out to 1 (so a test that never opens the gate fails
// instead of hanging the device).
cudaError_t LaunchGate(const volatile int* open, int* timed_out, uint64_t timeout_ns,
                       cudaStream_t stream);

// LaunchAddToWords enqueues data[i] += add for i < count.
cudaError_t LaunchAddToWords(uint32_t* data, size_t count, uint32_t add, cudaStream_t stream);

// LaunchCopyWords enqueues out[i] = in[i] for i < count.
cudaError_t LaunchCopyWords(const uint32_t* in, uint32_t* out, size_t count, cudaStream_t stream);

// Gate: an int in mapped pinned host memory that LaunchGate spins on; the host opens
// it. The destructor opens it and waits for the device before freeing it.
class Gate {
 public:
  Gate() = default;
  Gate(const Gate&) = delete;
  Gate& operator=(const Gate&) = delete;
  ~Gate();

  // Init loads this file's kernels (see test_kernels.cu: a kernel first launched while
  // a gate holds may wait for the gate) and allocates the flags; returns the CUDA
  // error. Other kernels a test launches behind a gate must have run once before.
  cudaError_t Init();
  // Hold enqueues a gate on `stream`: later work on it waits until Open (or timeout).
  cudaError_t Hold(cudaStream_t stream, uint64_t timeout_ns = 20'000'000'000ull);
  void Open();
  // Whether a gate gave up waiting (the test then failed to open it in time).
  bool timed_out() const;

 private:
  int* flags_ = nullptr;  // [0]: open, [1]: timed out.
};

}  // namespace gpu_test_internal
}  // namespace loom

#endif  // LOOM_OFFLOAD_GPU_INTERNAL_TEST_KERNELS_H_
