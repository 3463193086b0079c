// The shared-memory layout of one rank's segment. Every rank creates one segment,
// `/loom.<job_id>.rank<r>`, and maps every peer's. A segment holds its rank's header
// (liveness mutex, connect phase, doorbell, abort reason) and that rank's inbox: one
// channel per source rank (itself included). The channel from rank s to rank d lives
// in d's segment; s writes descriptors, eager payloads and staged chunks into it and
// d reads them. Everything is addressed by offsets, since every process maps the
// segment at a different address.
#ifndef LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_LAYOUT_H_
#define LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_LAYOUT_H_

#include <pthread.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "collectives/transport/transport.h"

namespace loom {
namespace shm_internal {

// "LOOMSHM1", little-endian; written last when a segment is ready.
inline constexpr uint64_t kSegmentMagic = 0x314d48534d4f4f4cULL;
// Bumped whenever anything below changes, so that mismatched builds refuse to talk.
inline constexpr uint32_t kLayoutVersion = 6;
inline constexpr int kMaxWorldSize = 256;
inline constexpr size_t kCacheLineBytes = 64;
inline constexpr size_t kPageBytes = 4096;
// In-flight sends per ordered pair. A send holds a slot from posting until the
// receiver matched it (or it was cancelled); more sends wait in the sender's queue.
inline constexpr uint32_t kSlotsPerChannel = 1024;
// Descriptor cells per ordered pair; each carries up to eager_bytes of payload.
// An eager send is complete once its cell is written, so this is also how far a
// sender may run ahead of a receiver that is not draining.
inline constexpr uint32_t kCellsPerChannel = 16;
// The staging ring of a pair is split into this many chunks: enough to keep the
// sender filling one while the receiver drains another.
inline constexpr uint32_t kChunksPerChannel = 8;
inline constexpr size_t kAbortMessageBytes = 512;
inline constexpr size_t kHostNameBytes = 64;

// ConnectPhase is how far a rank has come in ConnectShmTransport (header.phase).
enum class ConnectPhase : uint32_t {
  kCreating = 0,  // Segment exists, header not yet valid.
  kReady = 1,     // Header valid, liveness mutex held: peers may map it.
  kAttached = 2,  // This rank mapped every peer and published its CMA probe results.
  kUnlinked = 3,  // Every peer mapped this segment and its name is gone.
};

struct RankHeader {
  std::atomic<uint64_t> magic;  // kSegmentMagic once every field below is valid.
  std::atomic<int32_t> pid;     // Written first, so a crash during setup is attributable.
  uint32_t layout_version;
  int32_t rank;
  int32_t world_size;
  // Who this process is in the whole job (its rank may be group-local), for errors.
  int32_t world_rank;
  char host[kHostNameBytes];
  uint32_t copy_mode;  // ShmOptions::CopyMode.
  uint64_t eager_bytes;
  uint64_t staging_bytes;
  // Where a peer can read probe_cookie with process_vm_readv to test CMA.
  uint64_t probe_address;
  uint64_t probe_cookie;

  // Held (by a thread of this rank that lives as long as the endpoint) from setup
  // until the endpoint closes; robust, so that the kernel marks it when the process
  // dies (see liveness.h).
  alignas(kCacheLineBytes) pthread_mutex_t liveness;
  // CLOCK_MONOTONIC nanoseconds of the holder thread's last beat (heartbeat.h), every
  // heartbeat_interval_ns; a peer whose beat is older than its heartbeat timeout is
  // alive but not running (stopped, frozen).
  alignas(kCacheLineBytes) std::atomic<int64_t> heartbeat_ns;
  int64_t heartbeat_interval_ns;

  alignas(kCacheLineBytes) std::atomic<uint32_t> phase;  // ConnectPhase.
  std::atomic<uint32_t> attach_count;  // Ranks (this one included) that mapped the segment.
  std::atomic<uint32_t> departed;      // 1 once the endpoint closed normally.
  std::atomic<uint32_t> aborted;       // 1 once abort_code and abort_message are valid.
  int32_t abort_code;                  // absl::StatusCode.
  char abort_message[kAbortMessageBytes];
  // A failure a peer left here while connecting, for a rank it had mapped but that
  // had not mapped it (so cannot see its `aborted`). The first writer claims it:
  // 0 = empty, 1 = being written, 2 = valid.
  std::atomic<uint32_t> notice_state;
  int32_t notice_code;
  char notice_message[kAbortMessageBytes];

  // The futex a blocked Wait of this rank sleeps on; producers bump it to wake it.
  alignas(kCacheLineBytes) std::atomic<uint32_t> doorbell;
  // 1 while this rank may be asleep on the doorbell; producers skip the wake otherwise.
  alignas(kCacheLineBytes) std::atomic<uint32_t> sleeping;
  // cma_readable_from[s] = 1: this rank read rank s's memory with process_vm_readv.
  alignas(kCacheLineBytes) std::atomic<uint8_t> cma_readable_from[kMaxWorldSize];
};

// WriteMessage stores `message`, truncated and NUL-terminated, in a header field.
inline void WriteMessage(char (&field)[kAbortMessageBytes], absl::string_view message) {
  const size_t bytes = std::min(message.size(), kAbortMessageBytes - 1);
  std::memcpy(field, message.data(), bytes);
  field[bytes] = '\0';
}
inline void WriteHostName(char (&field)[kHostNameBytes], absl::string_view host) {
  const size_t bytes = std::min(host.size(), kHostNameBytes - 1);
  std::memcpy(field, host.data(), bytes);
  field[bytes] = '\0';
}
inline std::string ReadHostName(const char (&field)[kHostNameBytes]) {
  return std::string(field, strnlen(field, kHostNameBytes));
}
inline std::string ReadMessage(const char (&field)[kAbortMessageBytes]) {
  return std::string(field, strnlen(field, kAbortMessageBytes));
}

// A send's slot word: generation (high 32 bits) and state (low 32 bits), so that a
// compare-and-swap by the receiver fails once the sender reused the slot.
enum class SlotState : uint32_t {
  kFree = 0,
  kPosted = 1,             // Sender: the descriptor is published.
  kCopying = 2,            // Receiver: claimed, pulling the sender's bytes (CMA / self).
  kStreaming = 3,          // Receiver: matched; the sender streams staged chunks.
  kDone = 4,               // Receiver: delivered.
  kMismatch = 5,           // Receiver: sizes differ; receiver_bytes holds its size.
  kSenderCancelled = 6,    // Sender: withdrawn (deadline, abort, failed peer).
  kReceiverCancelled = 7,  // Receiver: gave up on a matched message.
  kAbandoned = 8,          // Sender: stopped waiting for a receiver stuck in kCopying.
};

inline uint64_t PackSlot(uint32_t generation, SlotState state) {
  return (static_cast<uint64_t>(generation) << 32) | static_cast<uint32_t>(state);
}
inline SlotState StateOf(uint64_t word) { return static_cast<SlotState>(word & 0xffffffffu); }
inline uint32_t GenerationOf(uint64_t word) { return static_cast<uint32_t>(word >> 32); }

struct SendSlot {
  std::atomic<uint64_t> word;
  // Valid with kMismatch: the receive's size, or kStampMismatchMarker when the stamps
  // conflicted; then receiver_stamp is the receive's (written before the state).
  std::atomic<uint64_t> receiver_bytes;
  Stamp receiver_stamp;
};
inline constexpr uint64_t kStampMismatchMarker = ~uint64_t{0};

// How a message's bytes travel.
enum class PayloadKind : uint32_t {
  kEager = 0,   // Inline in the descriptor cell.
  kPull = 1,    // The receiver reads the sender's buffer with process_vm_readv.
  kDirect = 2,  // A self-send: the receiver copies from its own address space.
  kStaged = 3,  // The sender streams chunks through the pair's staging ring.
  kMapped = 4,  // The send buffer is in a SharedBuffer: the receiver maps its memfd
                // (pidfd_getfd) and copies with memcpy; CMA if that is refused.
};

// A message descriptor: where a message's bytes are and how they travel, as the
// receiver works with it (assembled from the cell, see CellHeader).
struct MessageDescriptor {
  Tag tag;
  Stamp stamp;
  uint64_t bytes;
  uint64_t address;  // kPull / kDirect / kMapped: the send buffer in the sender's address space.
  uint32_t slot;     // Every kind but kEager: the send's slot.
  uint32_t generation;
  PayloadKind kind;
  int32_t region_fd;       // kMapped: the SharedBuffer's memfd in the sender,
  uint64_t region_id;      // its id there,
  uint64_t region_bytes;   // its size,
  uint64_t region_offset;  // and where the message starts in it.
};

// A cell: a sequence word and the fields every message has, then the payload area.
// The header fills the first cache line (the receiver's poll of the sequence word
// brings all of it in one transfer); an eager message's bytes follow it, a large
// message's CellLargeFields instead.
struct CellHeader {
  // The message's index in the pair's stream plus one, stored last (release) by the
  // sender. The receiver polls the cell it expects next instead of a shared head
  // index: one cache line to move per small message, not two in a row.
  std::atomic<uint64_t> sequence;
  Tag tag;
  uint64_t bytes;
  PayloadKind kind;
  uint32_t slot;  // Large messages only.
  // In the first line, which the receiver reads before anything else. The payload
  // moves to the second line: a message of 2 KiB (a 4 KiB all-reduce's) still spans
  // 33 lines, and only messages of up to 32 bytes gain one. (Measured the other
  // way, the stamp after the payload: 4 KiB all-reduces were slower, by the extra
  // line read out of order.)
  Stamp stamp;
  uint64_t reserved;  // Keeps the payload 16-byte aligned (the Combiner contract).
};
static_assert(sizeof(CellHeader) == 64, "a cell's payload starts on its second line");

// Where a large message's bytes are: in the payload area of its cell.
struct CellLargeFields {
  uint64_t address;
  uint32_t generation;
  int32_t region_fd;  // kMapped only, as the three below.
  uint64_t region_id;
  uint64_t region_bytes;
  uint64_t region_offset;
};

// A staged chunk's header, at the start of each chunk; its bytes follow it.
struct alignas(kCacheLineBytes) ChunkHeader {
  uint32_t slot;
  uint32_t generation;
  uint64_t offset;  // Within the message.
  uint64_t bytes;
};

// Single-producer single-consumer ring indices of a channel, each on its own line:
// the sender writes the heads, the receiver the tails. (The cells need no head: each
// carries its own sequence word.)
struct ChannelControl {
  alignas(kCacheLineBytes) std::atomic<uint64_t> cell_tail;
  alignas(kCacheLineBytes) std::atomic<uint64_t> chunk_head;
  alignas(kCacheLineBytes) std::atomic<uint64_t> chunk_tail;
};

// ChannelView addresses one channel (source -> segment owner) in a mapped segment.
struct ChannelView {
  ChannelControl* control = nullptr;
  SendSlot* slots = nullptr;
  std::byte* cells = nullptr;
  size_t cell_stride = 0;
  size_t eager_bytes = 0;
  std::byte* chunks = nullptr;
  size_t chunk_stride = 0;
  size_t chunk_bytes = 0;

  CellHeader* cell(uint64_t index) const {
    return reinterpret_cast<CellHeader*>(cells + (index % kCellsPerChannel) * cell_stride);
  }
  std::byte* cell_payload(uint64_t index) const {
    return cells + (index % kCellsPerChannel) * cell_stride + sizeof(CellHeader);
  }
  ChunkHeader* chunk(uint64_t index) const {
    return reinterpret_cast<ChunkHeader*>(chunks + (index % kChunksPerChannel) * chunk_stride);
  }
  std::byte* chunk_payload(uint64_t index) const {
    return chunks + (index % kChunksPerChannel) * chunk_stride + sizeof(ChunkHeader);
  }
};

struct ByteRange {
  size_t offset = 0;
  size_t bytes = 0;
};

// SegmentLayout computes where everything lives in a segment of a group of
// `world_size` ranks. Every rank computes the same layout from the same options.
// Each channel keeps its staging ring in pages of its own, after the rest, so that
// shared memory is committed for rings only where the staged path runs.
class SegmentLayout {
 public:
  SegmentLayout(int world_size, size_t eager_bytes, size_t staging_bytes);

  size_t segment_bytes() const { return header_bytes_ + world_size_ * channel_bytes_; }
  size_t chunk_bytes() const { return chunk_bytes_; }
  // The header and, for every source, everything but the staging ring.
  std::vector<ByteRange> CoreRanges() const;
  // The staging ring of the channel from `source`.
  ByteRange StagingRange(int source) const;

  RankHeader* header(void* segment) const { return static_cast<RankHeader*>(segment); }
  // channel returns the inbox of the segment's owner from `source`.
  ChannelView channel(void* segment, int source) const;
  // Initialize constructs the header and every channel in a fresh, zeroed segment.
  void Initialize(void* segment) const;

 private:
  int world_size_;
  size_t eager_bytes_;
  size_t cell_stride_;
  size_t chunk_bytes_;
  size_t chunk_stride_;
  size_t header_bytes_;
  size_t core_bytes_;  // Per channel: control, slots, cells, rounded to pages.
  size_t channel_bytes_;
};

}  // namespace shm_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_LAYOUT_H_
