// StripeLayout: where each byte of a tensor lives on disk. A tensor of N bytes is cut
// into stripes of `stripe_bytes` (the last one may be shorter); stripe i goes to file
// i % file_count, at slot i / file_count of that file, where file k lives in directory
// k. file_count = max(1, min(directories, stripes)), so a small tensor makes no empty
// files (a 0-byte tensor still has file 0, for its header). Inside a file, slot j starts
// at header_bytes + j * stripe_bytes; only the tensor's last stripe is short, it is the
// last slot of its file and is padded to 4096 bytes. Checksum blocks of `block_bytes`
// tile each file's data bytes; block_bytes divides stripe_bytes, so every block lies in
// one stripe.
//
// Example (10 MiB tensor, 4 MiB stripes, 1 MiB blocks, 2 directories):
//   StripeLayout l{10 << 20, 4 << 20, 1 << 20, 2};   // or StripeLayout::For(..., 2)
//   l.stripe_count();         // 3: [0, 4 MiB) [4, 8 MiB) [8, 10 MiB)
//   l.FileOfStripe(2);        // 0, at slot 1
//   l.FileDataBytes(0);       // 6 MiB; FileDataBytes(1) == 4 MiB
//   l.FileBlockCount(0);      // 6
//   l.FirstBlockOfStripe(2);  // 4 (blocks 4 and 5 of file 0)
#ifndef LOOM_OFFLOAD_DISK_INTERNAL_STRIPE_LAYOUT_H_
#define LOOM_OFFLOAD_DISK_INTERNAL_STRIPE_LAYOUT_H_

#include <algorithm>
#include <cstdint>

namespace loom {
namespace disk_internal {

struct StripeLayout {
  uint64_t total_bytes = 0;
  uint64_t stripe_bytes = 0;  // > 0, a multiple of 4096
  uint64_t block_bytes = 0;   // > 0, divides stripe_bytes
  uint32_t file_count = 1;    // >= 1

  // For returns the layout a tier with `directories` directories writes.
  static StripeLayout For(uint64_t total_bytes, uint64_t stripe_bytes, uint64_t block_bytes,
                          uint32_t directories) {
    StripeLayout l{total_bytes, stripe_bytes, block_bytes, 1};
    l.file_count = static_cast<uint32_t>(
        std::max<uint64_t>(1, std::min<uint64_t>(directories, l.stripe_count())));
    return l;
  }

  uint64_t stripe_count() const { return (total_bytes + stripe_bytes - 1) / stripe_bytes; }
  uint64_t blocks_per_stripe() const { return stripe_bytes / block_bytes; }

  uint32_t FileOfStripe(uint64_t stripe) const {
    return static_cast<uint32_t>(stripe % file_count);
  }
  uint64_t SlotOfStripe(uint64_t stripe) const { return stripe / file_count; }
  uint64_t StripeOffset(uint64_t stripe) const { return stripe * stripe_bytes; }
  uint64_t StripeLength(uint64_t stripe) const {
    return std::min(stripe_bytes, total_bytes - StripeOffset(stripe));
  }
  uint64_t FirstBlockOfStripe(uint64_t stripe) const {
    return SlotOfStripe(stripe) * blocks_per_stripe();
  }
  uint64_t StripeBlockCount(uint64_t stripe) const {
    return (StripeLength(stripe) + block_bytes - 1) / block_bytes;
  }

  // StripesInFile returns how many stripes file k holds.
  uint64_t StripesInFile(uint32_t file) const {
    const uint64_t n = stripe_count();
    return file < n ? (n - file + file_count - 1) / file_count : 0;
  }

  // FileDataBytes returns the tensor bytes file k holds (without padding).
  uint64_t FileDataBytes(uint32_t file) const {
    const uint64_t stripes = StripesInFile(file);
    if (stripes == 0) return 0;
    const uint64_t last = file + (stripes - 1) * file_count;
    return (stripes - 1) * stripe_bytes + StripeLength(last);
  }

  // FilePaddedDataBytes returns the bytes file k holds after its header: its data with
  // the last stripe padded to 4096.
  uint64_t FilePaddedDataBytes(uint32_t file) const {
    return (FileDataBytes(file) + 4095) / 4096 * 4096;
  }

  uint64_t FileBlockCount(uint32_t file) const {
    return (FileDataBytes(file) + block_bytes - 1) / block_bytes;
  }
};

}  // namespace disk_internal
}  // namespace loom

#endif  // LOOM_OFFLOAD_DISK_INTERNAL_STRIPE_LAYOUT_H_
