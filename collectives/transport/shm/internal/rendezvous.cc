#include "collectives/transport/shm/internal/rendezvous.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "collectives/transport/shm/internal/cma.h"
#include "core/status_macros.h"

namespace loom {
namespace shm_internal {
namespace {

std::string RankList(const std::vector<int>& ranks) {
  return absl::StrCat(ranks.size() == 1 ? "rank " : "ranks ", absl::StrJoin(ranks, ", "));
}

// LeaveNotice tells a peer whose segment this rank mapped why it failed to connect;
// the first notice wins.
void LeaveNotice(RankHeader& peer, const absl::Status& status, absl::string_view from) {
  uint32_t empty = 0;
  if (!peer.notice_state.compare_exchange_strong(empty, 1, std::memory_order_acq_rel)) return;
  peer.notice_code = static_cast<int32_t>(status.code());
  WriteMessage(peer.notice_message, absl::StrCat(from, " failed to connect: ", status.message()));
  peer.notice_state.store(2, std::memory_order_release);
}

// Connector runs one rank's side of the rendezvous.
class Connector {
 public:
  explicit Connector(const GroupConfig& config) : config_(config) {}

  absl::StatusOr<ConnectedGroup> Run();

 private:
  std::string Who() const {
    return absl::StrCat("shm rank ", config_.rank, " of job '", config_.job_id, "' (",
                        config_.world_size, " ranks)");
  }
  RankHeader& me() const { return group_.header(config_.rank); }
  std::string Self() const { return absl::StrCat("rank ", config_.rank, " (pid ", getpid(), ")"); }

  absl::Status CreateOwnSegment();
  absl::Status AttachAll();
  absl::Status CommitStagingRings();
  absl::Status Adopt(int peer, Mapping mapping);
  // CheckPeers fails if a notice arrived or one of `peers` (attached, and still
  // needed) failed, died or left before reaching `needed`. A peer that reached it
  // meanwhile is fine whatever it does next: `peers` was listed before this call,
  // and a peer that finished connecting may already be working, aborting or gone,
  // as any connected peer may.
  absl::Status CheckPeers(const std::vector<int>& peers, ConnectPhase needed) const;
  absl::Status CheckPeer(int peer) const;
  // WaitForPeers polls until every peer's phase is at least `phase` (and, for
  // kAttached, this segment's attach count is complete).
  absl::Status WaitForPeers(ConnectPhase phase, absl::string_view what);
  void PollPause(absl::Duration& pause) const;

  const GroupConfig config_;
  ConnectedGroup group_;
  std::vector<bool> attached_;
  std::string own_name_;
  SegmentId own_id_;
  ScopedFd own_fd_;  // Until the staging rings in use are committed.
};

absl::StatusOr<ConnectedGroup> Connector::Run() {
  const int world = config_.world_size;
  group_.config = config_;
  group_.layout = SegmentLayout(world, config_.eager_bytes, config_.staging_bytes);
  group_.segments.resize(world);
  group_.pids.assign(world, 0);
  group_.peer_pulls.assign(world, false);
  attached_.assign(world, false);
  if (config_.cma != CmaPolicy::kNever) AllowCmaFromAnyProcess();

  own_name_ = SegmentName(config_.job_id, config_.rank);
  LOOM_RETURN_IF_ERROR(CreateOwnSegment());
  // Until every peer has mapped it, a failure must take the name away with it.
  bool name_linked = true;
  absl::Cleanup remove_name = [&] {
    if (name_linked) UnlinkSegment(own_name_, own_id_).IgnoreError();
  };
  // Tell the peers why this rank leaves: those that mapped its segment read its
  // header, those it mapped find a notice in theirs.
  auto fail = [&](const absl::Status& status) {
    me().abort_code = static_cast<int32_t>(status.code());
    WriteMessage(me().abort_message, absl::StrCat("connect failed: ", status.message()));
    me().aborted.store(1, std::memory_order_release);
    for (int peer = 0; peer < world; ++peer) {
      if (peer != config_.rank && attached_[peer]) LeaveNotice(group_.header(peer), status, Self());
    }
    return status;
  };

  absl::Status status = AttachAll();
  if (status.ok()) status = CommitStagingRings();
  if (!status.ok()) return fail(status);
  me().phase.store(static_cast<uint32_t>(ConnectPhase::kAttached), std::memory_order_release);
  status = WaitForPeers(ConnectPhase::kAttached, "finish mapping the group");
  if (!status.ok()) return fail(status);
  status = UnlinkSegment(own_name_, own_id_);
  if (!status.ok()) return fail(status);
  name_linked = false;
  me().phase.store(static_cast<uint32_t>(ConnectPhase::kUnlinked), std::memory_order_release);
  status = WaitForPeers(ConnectPhase::kUnlinked, "finish connecting");
  if (!status.ok()) return fail(status);

  if (config_.cma != CmaPolicy::kNever) {
    for (int peer = 0; peer < world; ++peer) {
      if (peer == config_.rank) continue;
      group_.peer_pulls[peer] =
          group_.header(peer).cma_readable_from[config_.rank].load(std::memory_order_acquire) != 0;
    }
  }
  return std::move(group_);
}

absl::Status Connector::CreateOwnSegment() {
  LOOM_ASSIGN_OR_RETURN(CreatedSegment created,
                        CreateSegment(own_name_, group_.layout.segment_bytes(), config_.deadline));
  own_id_ = created.id;
  own_fd_ = std::move(created.fd);
  absl::Status committed = Commit(own_fd_, own_name_, group_.layout.CoreRanges());
  if (!committed.ok()) {
    UnlinkSegment(own_name_, own_id_).IgnoreError();
    return committed;
  }
  group_.segments[config_.rank] = std::move(created.mapping);
  group_.layout.Initialize(group_.segments[config_.rank].base());
  RankHeader& header = me();
  header.pid.store(getpid(), std::memory_order_release);
  header.layout_version = kLayoutVersion;
  header.rank = config_.rank;
  header.world_size = config_.world_size;
  header.world_rank = config_.world_rank;
  WriteHostName(header.host, config_.host);
  header.heartbeat_interval_ns = absl::ToInt64Nanoseconds(config_.heartbeat_interval);
  header.copy_mode = config_.copy_mode;
  header.eager_bytes = config_.eager_bytes;
  header.staging_bytes = config_.staging_bytes;
  group_.probe_word =
      std::make_unique<uint64_t>((uint64_t{std::random_device{}()} << 32) | getpid());
  header.probe_address = reinterpret_cast<uint64_t>(group_.probe_word.get());
  header.probe_cookie = *group_.probe_word;
  group_.pids[config_.rank] = getpid();
  absl::Status status = InitLivenessMutex(&header.liveness);
  if (status.ok()) {
    absl::StatusOr<std::unique_ptr<LivenessHolder>> holder =
        LivenessHolder::Start(&header.liveness, &header.heartbeat_ns, config_.heartbeat_interval);
    if (holder.ok()) {
      group_.liveness = *std::move(holder);
    } else {
      status = holder.status();
    }
  }
  if (!status.ok()) {
    UnlinkSegment(own_name_, own_id_).IgnoreError();
    return status;
  }
  header.phase.store(static_cast<uint32_t>(ConnectPhase::kReady), std::memory_order_relaxed);
  header.attach_count.fetch_add(1, std::memory_order_relaxed);
  attached_[config_.rank] = true;
  header.magic.store(kSegmentMagic, std::memory_order_release);  // Peers may map it now.
  return absl::OkStatus();
}

absl::Status Connector::AttachAll() {
  absl::Duration pause = absl::Microseconds(50);
  while (true) {
    std::vector<int> missing;
    for (int peer = 0; peer < config_.world_size; ++peer) {
      if (attached_[peer]) continue;
      LOOM_ASSIGN_OR_RETURN(std::optional<Mapping> mapping,
                            OpenReadySegment(SegmentName(config_.job_id, peer)));
      if (mapping.has_value()) {
        LOOM_RETURN_IF_ERROR(Adopt(peer, *std::move(mapping)));
      } else {
        missing.push_back(peer);
      }
    }
    std::vector<int> attached;
    for (int peer = 0; peer < config_.world_size; ++peer) {
      if (attached_[peer] && peer != config_.rank) attached.push_back(peer);
    }
    LOOM_RETURN_IF_ERROR(CheckPeers(attached, ConnectPhase::kAttached));
    if (missing.empty()) return absl::OkStatus();
    if (absl::Now() >= config_.deadline) {
      return absl::DeadlineExceededError(absl::StrCat(Who(), ": ", RankList(missing),
                                                      " never arrived by the connect deadline ",
                                                      absl::FormatTime(config_.deadline)));
    }
    PollPause(pause);
  }
}

absl::Status Connector::CommitStagingRings() {
  // The probes are done: the ring from each peer this rank cannot pull from with
  // CMA will carry that peer's large messages.
  std::vector<ByteRange> rings;
  for (int peer = 0; peer < config_.world_size; ++peer) {
    if (peer == config_.rank) continue;  // Self-sends are one memcpy.
    const bool pulled = !config_.stage_ordinary && config_.cma != CmaPolicy::kNever &&
                        me().cma_readable_from[peer].load(std::memory_order_relaxed) != 0;
    if (!pulled) rings.push_back(group_.layout.StagingRange(peer));
  }
  const absl::Status status = Commit(own_fd_, own_name_, rings);
  own_fd_ = ScopedFd();
  return status;
}

absl::Status Connector::Adopt(int peer, Mapping mapping) {
  RankHeader& header = *group_.layout.header(mapping.base());
  // A peer refused here never gets mapped, so it learns why from a notice.
  auto refuse = [&](const absl::Status& status) {
    LeaveNotice(header, status, Self());
    return status;
  };
  const pid_t pid = header.pid.load(std::memory_order_acquire);
  if (header.rank != peer || header.world_size != config_.world_size ||
      header.eager_bytes != config_.eager_bytes || header.staging_bytes != config_.staging_bytes ||
      header.copy_mode != config_.copy_mode || mapping.bytes() < group_.layout.segment_bytes()) {
    return refuse(absl::InvalidArgumentError(absl::StrCat(
        Who(), ": rank ", peer, " (pid ", pid, ") was started with world_size=", header.world_size,
        " eager_bytes=", header.eager_bytes, " staging_bytes=", header.staging_bytes,
        " copy_mode=", header.copy_mode, "; this rank has world_size=", config_.world_size,
        " eager_bytes=", config_.eager_bytes, " staging_bytes=", config_.staging_bytes,
        " copy_mode=", config_.copy_mode)));
  }
  if (config_.cma != CmaPolicy::kNever) {
    uint64_t value = 0;
    const absl::Status read =
        ReadFromProcess(pid, header.probe_address,
                        absl::MakeSpan(reinterpret_cast<std::byte*>(&value), sizeof(value)));
    const bool readable = read.ok() && value == header.probe_cookie;
    if (!readable && config_.cma == CmaPolicy::kRequired) {
      return refuse(absl::FailedPreconditionError(absl::StrCat(
          Who(), ": CopyMode::kCma needs process_vm_readv between the ranks, and reading rank ",
          peer, " (pid ", pid,
          ") failed: ", read.ok() ? "it returned a wrong probe value" : read.message(),
          "; use CopyMode::kAuto to fall back to staged copies")));
    }
    me().cma_readable_from[peer].store(readable ? 1 : 0, std::memory_order_relaxed);
  }
  header.attach_count.fetch_add(1, std::memory_order_acq_rel);
  group_.pids[peer] = pid;
  group_.segments[peer] = std::move(mapping);
  attached_[peer] = true;
  return absl::OkStatus();
}

absl::Status Connector::CheckPeers(const std::vector<int>& peers, ConnectPhase needed) const {
  if (me().notice_state.load(std::memory_order_acquire) == 2) {
    return absl::Status(static_cast<absl::StatusCode>(me().notice_code),
                        absl::StrCat(Who(), ": ", ReadMessage(me().notice_message)));
  }
  for (int peer : peers) {
    if (peer == config_.rank) continue;
    const absl::Status status = CheckPeer(peer);
    // The phase is read after the verdict: a peer advances before it leaves, so a
    // departure seen here that followed the phase it needed shows that phase too.
    const bool reached = group_.header(peer).phase.load(std::memory_order_acquire) >=
                         static_cast<uint32_t>(needed);
    if (!status.ok() && !reached) return status;
  }
  return absl::OkStatus();
}

absl::Status Connector::CheckPeer(int peer) const {
  RankHeader& header = group_.header(peer);
  if (header.aborted.load(std::memory_order_acquire) != 0) {
    // The peer's own code: a rank that saw the same ranks missing reports the same.
    return absl::Status(static_cast<absl::StatusCode>(header.abort_code),
                        absl::StrCat(Who(), ": rank ", peer, " (pid ", group_.pids[peer],
                                     ") failed: ", ReadMessage(header.abort_message)));
  }
  switch (ProbeLiveness(&header.liveness)) {
    case Liveness::kHeld:
      return absl::OkStatus();
    case Liveness::kDied:
      return absl::UnavailableError(absl::StrCat(Who(), ": rank ", peer, " (pid ",
                                                 group_.pids[peer], ") died while connecting"));
    case Liveness::kReleased:
      return absl::UnavailableError(absl::StrCat(Who(), ": rank ", peer, " (pid ",
                                                 group_.pids[peer], ") left while connecting"));
  }
  return absl::OkStatus();
}

absl::Status Connector::WaitForPeers(ConnectPhase phase, absl::string_view what) {
  absl::Duration pause = absl::Microseconds(50);
  while (true) {
    std::vector<int> behind;
    for (int peer = 0; peer < config_.world_size; ++peer) {
      if (group_.header(peer).phase.load(std::memory_order_acquire) <
          static_cast<uint32_t>(phase)) {
        behind.push_back(peer);
      }
    }
    const bool all_mapped_me =
        phase != ConnectPhase::kAttached || me().attach_count.load(std::memory_order_acquire) ==
                                                static_cast<uint32_t>(config_.world_size);
    if (behind.empty() && all_mapped_me) return absl::OkStatus();
    LOOM_RETURN_IF_ERROR(CheckPeers(behind, phase));
    if (absl::Now() >= config_.deadline) {
      return absl::DeadlineExceededError(absl::StrCat(Who(), ": ", RankList(behind), " did not ",
                                                      what, " by the connect deadline ",
                                                      absl::FormatTime(config_.deadline)));
    }
    PollPause(pause);
  }
}

void Connector::PollPause(absl::Duration& pause) const {
  absl::SleepFor(std::min(pause, std::max(absl::ZeroDuration(), config_.deadline - absl::Now())));
  pause = std::min(pause * 2, absl::Milliseconds(1));
}

}  // namespace

absl::StatusOr<ConnectedGroup> Rendezvous(const GroupConfig& config) {
  return Connector(config).Run();
}

}  // namespace shm_internal
}  // namespace loom
