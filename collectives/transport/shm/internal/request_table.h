// RequestTable: the operations of one shm endpoint, by request id. An id is a slot
// index and that slot's generation, so finding a request is an index and a
// compare, and an id that was already waited for (its slot since reused) is told
// apart. Operations are allocated once per slot and reused: on the latency path of
// a small message, neither a hash lookup nor an allocation shows.
#ifndef LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_REQUEST_TABLE_H_
#define LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_REQUEST_TABLE_H_

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include "collectives/transport/shm/internal/operation.h"
#include "collectives/transport/transport.h"

namespace loom {
namespace shm_internal {

class RequestTable {
 public:
  // Add returns a new request and its operation, reset to a default Operation. The
  // operation stays at its address until Remove.
  std::pair<Request, Operation*> Add() {
    uint32_t index;
    if (free_.empty()) {
      index = static_cast<uint32_t>(entries_.size());
      entries_.push_back(Entry{std::make_unique<Operation>(), 0, false});
    } else {
      index = free_.back();
      free_.pop_back();
      *entries_[index].op = Operation();
    }
    Entry& entry = entries_[index];
    entry.live = true;
    // Generation 0 is never handed out, so Request{0} (a default) is never valid.
    if (++entry.generation == 0) entry.generation = 1;
    return {Request{(uint64_t{entry.generation} << 32) | index}, entry.op.get()};
  }

  // Find returns the operation of a request added and not yet removed; else nullptr.
  Operation* Find(Request request) const {
    const uint64_t index = request.id & 0xffffffffu;
    if (index >= entries_.size()) return nullptr;
    const Entry& entry = entries_[index];
    if (!entry.live || entry.generation != request.id >> 32) return nullptr;
    return entry.op.get();
  }

  // Remove forgets a request that Find returns; its operation is kept for reuse.
  void Remove(Request request) {
    const uint32_t index = static_cast<uint32_t>(request.id & 0xffffffffu);
    entries_[index].live = false;
    free_.push_back(index);
  }

  // Live returns the requests added and not yet removed.
  std::vector<Request> Live() const {
    std::vector<Request> live;
    for (uint32_t index = 0; index < entries_.size(); ++index) {
      const Entry& entry = entries_[index];
      if (entry.live) live.push_back(Request{(uint64_t{entry.generation} << 32) | index});
    }
    return live;
  }

 private:
  struct Entry {
    std::unique_ptr<Operation> op;  // Never moves while the slot is live.
    uint32_t generation;
    bool live;
  };
  std::vector<Entry> entries_;
  std::vector<uint32_t> free_;
};

}  // namespace shm_internal
}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_SHM_INTERNAL_REQUEST_TABLE_H_
