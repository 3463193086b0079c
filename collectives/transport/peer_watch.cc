#include "collectives/transport/peer_watch.h"

#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "collectives/transport/heartbeat.h"

namespace loom {
namespace {

// The monotonic clock: a stopped process or a stepped wall clock must not look
// like a silence.
int64_t MonotonicNanos() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

}  // namespace

PeerWatch::PeerWatch(std::string transport, int self, std::vector<PeerIdentity> peers,
                     absl::Duration timeout, std::vector<absl::Duration> peer_intervals)
    : transport_(std::move(transport)),
      self_(self),
      peers_(std::move(peers)),
      timeout_(timeout),
      interval_(HeartbeatInterval(timeout)),
      heard_ns_(new std::atomic<int64_t>[peers_.size()]),
      judged_(new std::atomic<bool>[peers_.size()]) {
  const int64_t now = MonotonicNanos();
  allowed_.resize(peers_.size(), timeout_);
  for (size_t p = 0; p < peers_.size(); ++p) {
    // A peer that beats more slowly than this rank expects gets three of its beats.
    if (p < peer_intervals.size()) allowed_[p] = std::max(timeout_, 3 * peer_intervals[p]);
    heard_ns_[p].store(now, std::memory_order_relaxed);
    judged_[p].store(false, std::memory_order_relaxed);
  }
  listening_since_ns_.store(now, std::memory_order_relaxed);
  last_listen_ns_.store(now, std::memory_order_relaxed);
}

std::string PeerWatch::Describe(int peer) const {
  const PeerIdentity& identity = peers_[peer];
  std::string text = DescribePeer(identity);
  if (identity.world_rank != peer) {
    absl::StrAppend(&text, ", rank ", peer, " of the ", transport_, " group");
  }
  return text;
}

void PeerWatch::Heard(int peer) {
  heard_ns_[peer].store(MonotonicNanos(), std::memory_order_relaxed);
}

void PeerWatch::Listen() {
  const int64_t now = MonotonicNanos();
  const int64_t previous = last_listen_ns_.exchange(now, std::memory_order_relaxed);
  // A gap longer than a beat interval: this process could not have read its peers'
  // beats meanwhile, so their silence counts from now.
  if (now - previous > absl::ToInt64Nanoseconds(interval_)) {
    listening_since_ns_.store(now, std::memory_order_relaxed);
  }
}

absl::Status PeerWatch::Judge(int peer) {
  if (!judging() || peer == self_) return absl::OkStatus();
  const int64_t now = MonotonicNanos();
  const int64_t since = std::max(heard_ns_[peer].load(std::memory_order_relaxed),
                                 listening_since_ns_.load(std::memory_order_relaxed));
  const absl::Duration silent = absl::Nanoseconds(now - since);
  if (silent <= allowed_[peer]) return absl::OkStatus();
  // The state note reads /proc, which tells about this host's processes only.
  const PeerIdentity& identity = peers_[peer];
  const std::string state =
      identity.host == HostName() ? ProcessStateNote(identity.pid) : std::string();
  absl::Status status = absl::UnavailableError(
      absl::StrCat(transport_, ": ", Describe(peer), " stopped responding: no heartbeat for ",
                   absl::FormatDuration(absl::Trunc(silent, absl::Milliseconds(10))),
                   " (heartbeat timeout ", absl::FormatDuration(timeout_), ")", state));
  if (!judged_[peer].exchange(true)) {
    RecordPeerFailure(
        {identity, PeerFault::kUnresponsive, absl::Now(), std::string(status.message())});
  }
  return status;
}

}  // namespace loom
