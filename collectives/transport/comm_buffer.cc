#include "collectives/transport/comm_buffer.h"

#include <errno.h>
#include <sys/mman.h>

#include <cstring>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/posix.h"

namespace loom {
namespace {

class MappedOwner final : public CommBuffer::Owner {
 public:
  MappedOwner(void* data, size_t bytes) : data_(data), bytes_(bytes) {}
  ~MappedOwner() override { munmap(data_, bytes_); }

 private:
  void* data_;
  size_t bytes_;
};

}  // namespace

absl::StatusOr<CommBuffer> CommBuffer::Ordinary(size_t bytes) {
  if (bytes == 0) return CommBuffer();
  // An anonymous mapping: page-aligned, zeroed by the kernel, and the pages are
  // touched only when used.
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) {
    return absl::ResourceExhaustedError(absl::StrCat("communication buffer of ", bytes,
                                                     " bytes: mmap failed: ", StrError(errno)));
  }
  return CommBuffer(absl::MakeSpan(static_cast<std::byte*>(data), bytes), /*zero_copy=*/false,
                    std::make_unique<MappedOwner>(data, bytes));
}

}  // namespace loom
