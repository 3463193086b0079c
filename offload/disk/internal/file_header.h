// FileHeader: the self-describing header at the start of every stripe file. It names
// the tensor, records the layout (total size, stripe and checksum-block sizes, which
// file of how many this is), a write id shared by all files of one Write, and the
// CRC-32C of each checksum block of this file's data; a CRC-32C of the header itself
// closes it. Little-endian, padded with zeros to a multiple of 4096:
//
//   offset  size  field
//        0     8  magic "LOOMDISK"
//        8     4  version (1)
//       12     4  header_bytes (this header, padded)
//       16     8  write_id
//       24     8  total_bytes (the tensor)
//       32     8  stripe_bytes
//       40     8  block_bytes (checksum block)
//       48     4  file_index
//       52     4  file_count
//       56     8  file_data_bytes (tensor bytes in this file)
//       64     4  name_bytes
//       68     4  block_count
//       72     n  tensor name
//   72 + n  4*b   CRC-32C of each checksum block
//        ...   4  CRC-32C of every header byte before it
//
// Example:
//   FileHeader h{...};
//   std::vector<std::byte> bytes(HeaderBytes(h.tensor_name.size(), h.block_crcs.size()));
//   EncodeHeader(h, absl::MakeSpan(bytes));
//   HeaderBytesFromPrefix(first_4096_bytes);   // bytes.size(), from the fixed fields
//   DecodeHeader(bytes);                       // h again; DataLoss if any bit flipped
#ifndef LOOM_OFFLOAD_DISK_INTERNAL_FILE_HEADER_H_
#define LOOM_OFFLOAD_DISK_INTERNAL_FILE_HEADER_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "offload/disk/internal/stripe_layout.h"

namespace loom {
namespace disk_internal {

inline constexpr size_t kHeaderFixedBytes = 72;
inline constexpr uint32_t kHeaderVersion = 1;
// Longest tensor name a header may carry (the tier's own limit is lower).
inline constexpr size_t kMaxHeaderNameBytes = 4096;

struct FileHeader {
  uint64_t write_id = 0;
  uint64_t total_bytes = 0;
  uint64_t stripe_bytes = 0;
  uint64_t block_bytes = 0;
  uint32_t file_index = 0;
  uint32_t file_count = 1;
  uint64_t file_data_bytes = 0;
  std::string tensor_name;
  std::vector<uint32_t> block_crcs;

  StripeLayout layout() const {
    return StripeLayout{total_bytes, stripe_bytes, block_bytes, file_count};
  }
};

// HeaderBytes returns the padded size of a header with this name and block count.
uint64_t HeaderBytes(size_t name_bytes, uint64_t block_count);

// EncodeHeader writes `header` into `out`, whose size must be
// HeaderBytes(header.tensor_name.size(), header.block_crcs.size()).
void EncodeHeader(const FileHeader& header, absl::Span<std::byte> out);

// HeaderBytesFromPrefix reads the fixed fields at the start of a file (at least
// kHeaderFixedBytes) and returns the full header's size; DataLoss for a bad magic, an
// unknown version or sizes that do not agree.
absl::StatusOr<uint64_t> HeaderBytesFromPrefix(absl::Span<const std::byte> prefix);

// DecodeHeader parses and verifies a whole header: DataLoss when its checksum does not
// match or its fields do not describe a valid layout (file_index >= file_count, stripe
// not a multiple of 4096, data or block counts that disagree with the layout, ...).
absl::StatusOr<FileHeader> DecodeHeader(absl::Span<const std::byte> bytes);

}  // namespace disk_internal
}  // namespace loom

#endif  // LOOM_OFFLOAD_DISK_INTERNAL_FILE_HEADER_H_
