#include "offload/disk/internal/file_header.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/crc32c.h"

namespace loom {
namespace disk_internal {
namespace {

constexpr char kMagic[8] = {'L', 'O', 'O', 'M', 'D', 'I', 'S', 'K'};

template <typename T>
void Put(absl::Span<std::byte> out, size_t offset, T value) {
  for (size_t i = 0; i < sizeof(T); ++i) {
    out[offset + i] = static_cast<std::byte>((static_cast<uint64_t>(value) >> (8 * i)) & 0xFF);
  }
}

template <typename T>
T Get(absl::Span<const std::byte> in, size_t offset) {
  uint64_t v = 0;
  for (size_t i = 0; i < sizeof(T); ++i) {
    v |= static_cast<uint64_t>(in[offset + i]) << (8 * i);
  }
  return static_cast<T>(v);
}

}  // namespace

uint64_t HeaderBytes(size_t name_bytes, uint64_t block_count) {
  const uint64_t raw = kHeaderFixedBytes + name_bytes + 4 * block_count + 4;
  return (raw + 4095) / 4096 * 4096;
}

void EncodeHeader(const FileHeader& h, absl::Span<std::byte> out) {
  std::memset(out.data(), 0, out.size());
  std::memcpy(out.data(), kMagic, sizeof(kMagic));
  Put<uint32_t>(out, 8, kHeaderVersion);
  Put<uint32_t>(out, 12, static_cast<uint32_t>(out.size()));
  Put<uint64_t>(out, 16, h.write_id);
  Put<uint64_t>(out, 24, h.total_bytes);
  Put<uint64_t>(out, 32, h.stripe_bytes);
  Put<uint64_t>(out, 40, h.block_bytes);
  Put<uint32_t>(out, 48, h.file_index);
  Put<uint32_t>(out, 52, h.file_count);
  Put<uint64_t>(out, 56, h.file_data_bytes);
  Put<uint32_t>(out, 64, static_cast<uint32_t>(h.tensor_name.size()));
  Put<uint32_t>(out, 68, static_cast<uint32_t>(h.block_crcs.size()));
  size_t pos = kHeaderFixedBytes;
  std::memcpy(out.data() + pos, h.tensor_name.data(), h.tensor_name.size());
  pos += h.tensor_name.size();
  for (uint32_t crc : h.block_crcs) {
    Put<uint32_t>(out, pos, crc);
    pos += 4;
  }
  Put<uint32_t>(out, pos, Crc32c(out.first(pos)));
}

absl::StatusOr<uint64_t> HeaderBytesFromPrefix(absl::Span<const std::byte> prefix) {
  if (prefix.size() < kHeaderFixedBytes) {
    return absl::DataLossError(absl::StrCat("header truncated: ", prefix.size(),
                                            " bytes, the fixed part alone is ", kHeaderFixedBytes));
  }
  if (std::memcmp(prefix.data(), kMagic, sizeof(kMagic)) != 0) {
    return absl::DataLossError(
        absl::StrFormat("bad magic 0x%016x, expected \"LOOMDISK\"", Get<uint64_t>(prefix, 0)));
  }
  const uint32_t version = Get<uint32_t>(prefix, 8);
  if (version != kHeaderVersion) {
    return absl::DataLossError(absl::StrCat("unsupported header version ", version,
                                            " (this build reads ", kHeaderVersion, ")"));
  }
  const uint32_t header_bytes = Get<uint32_t>(prefix, 12);
  const uint32_t name_bytes = Get<uint32_t>(prefix, 64);
  const uint32_t block_count = Get<uint32_t>(prefix, 68);
  if (name_bytes > kMaxHeaderNameBytes) {
    return absl::DataLossError(
        absl::StrCat("header name length ", name_bytes, " exceeds ", kMaxHeaderNameBytes));
  }
  if (header_bytes != HeaderBytes(name_bytes, block_count)) {
    return absl::DataLossError(absl::StrCat(
        "header size ", header_bytes, " does not match ", name_bytes, " name bytes and ",
        block_count, " blocks (", HeaderBytes(name_bytes, block_count), ")"));
  }
  return header_bytes;
}

absl::StatusOr<FileHeader> DecodeHeader(absl::Span<const std::byte> bytes) {
  auto header_bytes = HeaderBytesFromPrefix(bytes);
  if (!header_bytes.ok()) return header_bytes.status();
  if (bytes.size() < *header_bytes) {
    return absl::DataLossError(
        absl::StrCat("header truncated: ", bytes.size(), " of ", *header_bytes, " bytes"));
  }
  FileHeader h;
  h.write_id = Get<uint64_t>(bytes, 16);
  h.total_bytes = Get<uint64_t>(bytes, 24);
  h.stripe_bytes = Get<uint64_t>(bytes, 32);
  h.block_bytes = Get<uint64_t>(bytes, 40);
  h.file_index = Get<uint32_t>(bytes, 48);
  h.file_count = Get<uint32_t>(bytes, 52);
  h.file_data_bytes = Get<uint64_t>(bytes, 56);
  const uint32_t name_bytes = Get<uint32_t>(bytes, 64);
  const uint32_t block_count = Get<uint32_t>(bytes, 68);
  size_t pos = kHeaderFixedBytes + name_bytes + 4 * size_t{block_count};
  const uint32_t stored = Get<uint32_t>(bytes, pos);
  const uint32_t computed = Crc32c(bytes.first(pos));
  if (stored != computed) {
    return absl::DataLossError(absl::StrFormat(
        "header checksum mismatch: stored 0x%08x, computed 0x%08x", stored, computed));
  }
  h.tensor_name.assign(reinterpret_cast<const char*>(bytes.data() + kHeaderFixedBytes), name_bytes);
  h.block_crcs.resize(block_count);
  pos = kHeaderFixedBytes + name_bytes;
  for (uint32_t b = 0; b < block_count; ++b, pos += 4) h.block_crcs[b] = Get<uint32_t>(bytes, pos);

  // A header whose checksum holds was written by a tier; still refuse layouts that
  // could make the reader index out of range.
  if (h.stripe_bytes == 0 || h.stripe_bytes % 4096 != 0 || h.block_bytes == 0 ||
      h.stripe_bytes % h.block_bytes != 0) {
    return absl::DataLossError(
        absl::StrCat("invalid stripe_bytes ", h.stripe_bytes, " / block_bytes ", h.block_bytes));
  }
  const StripeLayout layout = h.layout();
  const uint64_t max_files = std::max<uint64_t>(1, layout.stripe_count());
  if (h.file_count == 0 || h.file_count > max_files || h.file_index >= h.file_count) {
    return absl::DataLossError(absl::StrCat("invalid file ", h.file_index, " of ", h.file_count,
                                            " for ", layout.stripe_count(), " stripes"));
  }
  if (h.file_data_bytes != layout.FileDataBytes(h.file_index) ||
      block_count != layout.FileBlockCount(h.file_index)) {
    return absl::DataLossError(absl::StrCat("header says ", h.file_data_bytes, " data bytes in ",
                                            block_count, " blocks; the layout gives ",
                                            layout.FileDataBytes(h.file_index), " in ",
                                            layout.FileBlockCount(h.file_index)));
  }
  return h;
}

}  // namespace disk_internal
}  // namespace loom
