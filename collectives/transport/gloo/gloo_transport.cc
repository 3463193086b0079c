#include "collectives/transport/gloo/gloo_transport.h"

#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/file_store.h>
#include <gloo/rendezvous/prefix_store.h>
#include <gloo/transport/tcp/device.h>
#include <sys/stat.h>

#include <chrono>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "collectives/transport/gloo/internal/endpoint.h"
#include "collectives/transport/gloo/internal/gloo_call.h"
#include "collectives/transport/heartbeat.h"
#include "collectives/transport/peer_failure.h"

namespace loom {
namespace {

// What each rank tells the others at connect: who it is, for their errors, and how
// often it beats, for their judging. gloo's own keys are the ranks' numbers, so these
// cannot collide with them.
struct PeerInfo {
  PeerIdentity identity;
  absl::Duration interval;
};

std::string IdentityKey(int rank) { return absl::StrCat("loom_identity_", rank); }

// "world pid interval_ns host"; the host goes last, as it is the only part that is
// not a number.
std::vector<char> EncodeIdentity(const PeerInfo& info) {
  const std::string text =
      absl::StrCat(info.identity.world_rank, " ", info.identity.pid, " ",
                   absl::ToInt64Nanoseconds(info.interval), " ", info.identity.host);
  return std::vector<char>(text.begin(), text.end());
}

absl::StatusOr<PeerInfo> DecodeIdentity(int rank, const std::vector<char>& bytes) {
  const std::string text(bytes.begin(), bytes.end());
  const std::vector<std::string> parts = absl::StrSplit(text, absl::MaxSplits(' ', 3));
  PeerInfo info;
  int64_t interval_ns = 0;
  if (parts.size() != 4 || !absl::SimpleAtoi(parts[0], &info.identity.world_rank) ||
      !absl::SimpleAtoi(parts[1], &info.identity.pid) ||
      !absl::SimpleAtoi(parts[2], &interval_ns) || info.identity.world_rank < 0 ||
      interval_ns <= 0) {
    return absl::FailedPreconditionError(
        absl::StrCat("gloo: rank ", rank, "'s identity in the store, \"", text,
                     "\", is not \"world_rank pid interval_ns host\""));
  }
  info.identity.host = parts[3];
  info.interval = absl::Nanoseconds(interval_ns);
  return info;
}

absl::Status Validate(const GlooOptions& options) {
  if (options.size < 1) {
    return absl::InvalidArgumentError(absl::StrCat("gloo: size ", options.size, " is below 1"));
  }
  if (options.rank < 0 || options.rank >= options.size) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: rank ", options.rank, " is outside [0, ", options.size, ")"));
  }
  if (options.world_rank < -1) {
    return absl::InvalidArgumentError(
        absl::StrCat("gloo: world_rank ", options.world_rank, " is below -1 (-1: the group rank)"));
  }
  if (absl::Status heartbeat =
          ValidateHeartbeatTimeout(options.heartbeat_timeout, "gloo: heartbeat_timeout");
      !heartbeat.ok()) {
    return heartbeat;
  }
  if (options.store == nullptr) {
    if (options.store_dir.empty()) {
      return absl::InvalidArgumentError(
          "gloo: neither store_dir nor store names a rendezvous store");
    }
    struct stat info;
    if (stat(options.store_dir.c_str(), &info) != 0 || !S_ISDIR(info.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat("gloo: store_dir \"", options.store_dir, "\" is not an existing directory"));
    }
  }
  if (options.prefix.empty()) return absl::InvalidArgumentError("gloo: prefix is empty");
  if (options.hostname.empty() && options.interface.empty()) {
    return absl::InvalidArgumentError("gloo: neither hostname nor interface is set");
  }
  if (options.connect_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(absl::StrCat("gloo: connect_timeout ",
                                                   absl::FormatDuration(options.connect_timeout),
                                                   " is not positive"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Transport>> ConnectGlooTransport(const GlooOptions& options) {
  if (absl::Status valid = Validate(options); !valid.ok()) return valid;
  PeerInfo self;
  self.identity = SelfIdentity(options.world_rank >= 0 ? options.world_rank : options.rank);
  self.interval = HeartbeatInterval(options.heartbeat_timeout);
  std::vector<std::vector<char>> identities(options.size);
  gloo_internal::GlooContexts contexts;
  absl::StatusOr<std::unique_ptr<gloo_internal::LoopPoster>> posting =
      absl::InternalError("gloo: not connected");
  const absl::Status connected = gloo_internal::GlooCall(
      absl::StrCat("connecting rank ", options.rank, " of ", options.size, " (prefix \"",
                   options.prefix, "\")"),
      [&] {
        gloo::transport::tcp::attr attr;
        if (options.interface.empty()) {
          attr.hostname = options.hostname;
        } else {
          attr.iface = options.interface;
        }
        // GlooCall blocks SIGPIPE in this thread, so gloo's event-loop thread, which
        // the device starts here, inherits the blocked mask for life: its writes into
        // a reset socket fail with EPIPE instead of killing the process (sigpipe.h).
        std::shared_ptr<gloo::transport::Device> device = gloo::transport::tcp::CreateDevice(attr);
        std::unique_ptr<gloo::rendezvous::FileStore> file_store;
        gloo::rendezvous::Store* store = options.store;
        if (store == nullptr) {
          file_store = std::make_unique<gloo::rendezvous::FileStore>(options.store_dir);
          store = file_store.get();
        }
        const auto connect = [&](gloo::rendezvous::Store& prefixed) {
          auto context = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
          context->setTimeout(
              std::chrono::milliseconds(absl::ToInt64Milliseconds(options.connect_timeout)));
          context->connectFullMesh(prefixed, device);
          return context;
        };
        gloo::rendezvous::PrefixStore prefixed(options.prefix, *store);
        prefixed.set(IdentityKey(options.rank), EncodeIdentity(self));
        contexts.frames = connect(prefixed);
        // Every peer set its key before it connected, so these are there by now.
        for (int rank = 0; rank < options.size; ++rank) {
          identities[rank] = prefixed.get(IdentityKey(rank));
        }
        gloo::rendezvous::PrefixStore upward(options.prefix + "/upward", *store);
        contexts.upward = connect(upward);
        gloo::rendezvous::PrefixStore downward(options.prefix + "/downward", *store);
        contexts.downward = connect(downward);
        posting = gloo_internal::LoopPoster::Create(device);
      });
  if (!connected.ok()) return connected;
  if (!posting.ok()) return posting.status();
  contexts.poster = *std::move(posting);
  std::vector<PeerIdentity> peers(options.size);
  std::vector<absl::Duration> intervals(options.size);
  for (int rank = 0; rank < options.size; ++rank) {
    absl::StatusOr<PeerInfo> info = DecodeIdentity(rank, identities[rank]);
    if (!info.ok()) return info.status();
    peers[rank] = std::move(info->identity);
    intervals[rank] = info->interval;
  }
  return std::unique_ptr<Transport>(std::make_unique<gloo_internal::Endpoint>(
      std::move(contexts), options, std::move(peers), std::move(intervals)));
}

}  // namespace loom
