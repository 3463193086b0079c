// CRC-32C (Castagnoli; polynomial 0x1EDC6F41, bit-reflected 0x82F63B78, initial and
// final XOR 0xFFFFFFFF), the checksum of iSCSI, ext4 and RocksDB. The offload codecs
// store it for every encoded payload and the disk tier for every block.
//
// On CPUs with SSE4.2 the crc32 instruction runs three independent streams at once
// (its latency is three cycles, its throughput one) and the three partial CRCs are
// combined with precomputed "append zeros" tables; elsewhere a slicing-by-8 table
// loop runs. Both give the same value on every input. Thread-safe, no state.
//
// Example:
//   const std::string s = "123456789";
//   Crc32c(absl::MakeSpan(reinterpret_cast<const std::byte*>(s.data()), s.size()));
//   // == 0xE3069283, the standard check value
//   ExtendCrc32c(Crc32c(a), b) == Crc32c(a followed by b);   // streaming
//   Crc32cBlocks(data, 65536, absl::MakeSpan(crcs));          // crcs[b] = Crc32c(block b)
#ifndef LOOM_CORE_CRC32C_H_
#define LOOM_CORE_CRC32C_H_

#include <cstddef>
#include <cstdint>

#include "absl/types/span.h"

namespace loom {

// Crc32c returns the CRC-32C of `data` (0 for an empty span).
uint32_t Crc32c(absl::Span<const std::byte> data);

// ExtendCrc32c returns the CRC-32C of the bytes that gave `crc` followed by `data`.
uint32_t ExtendCrc32c(uint32_t crc, absl::Span<const std::byte> data);

// Crc32cBlocks cuts `data` into consecutive blocks of `block_bytes` (the last one may
// be shorter) and writes the CRC-32C of block b to out[b] (a per-block checksum, as
// the disk tier stores). Requires block_bytes > 0 and
// out.size() == ceil(data.size() / block_bytes).
void Crc32cBlocks(absl::Span<const std::byte> data, size_t block_bytes, absl::Span<uint32_t> out);

namespace crc32c_internal {

// Both implementations, exposed for tests and benchmarks. ExtendHardware requires
// HasHardware().
bool HasHardware();
uint32_t ExtendSoftware(uint32_t crc, absl::Span<const std::byte> data);
uint32_t ExtendHardware(uint32_t crc, absl::Span<const std::byte> data);

}  // namespace crc32c_internal
}  // namespace loom

#endif  // LOOM_CORE_CRC32C_H_
