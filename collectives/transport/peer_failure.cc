#include "collectives/transport/peer_failure.h"

#include <unistd.h>

#include <fstream>
#include <optional>
#include <string>

#include "absl/base/attributes.h"
#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "core/mutex.h"

namespace loom {
namespace {

ABSL_CONST_INIT Mutex g_mu;
std::optional<PeerFailure>* g_first ABSL_GUARDED_BY(g_mu) ABSL_PT_GUARDED_BY(g_mu) = nullptr;
void (*g_observer)(const PeerFailure&) ABSL_GUARDED_BY(g_mu) = nullptr;

const char* StateName(char state) {
  switch (state) {
    case 'R':
      return "running";
    case 'S':
      return "sleeping";
    case 'D':
      return "in uninterruptible wait";
    case 'T':
      return "stopped";
    case 't':
      return "stopped by a tracer";
    case 'Z':
      return "zombie";
    case 'X':
      return "dead";
  }
  return "unknown";
}

}  // namespace

std::string DescribePeer(const PeerIdentity& peer) {
  std::string detail;
  if (peer.pid > 0) absl::StrAppend(&detail, "pid ", peer.pid);
  if (!peer.host.empty()) absl::StrAppend(&detail, detail.empty() ? "on " : " on ", peer.host);
  if (peer.world_rank < 0) return detail.empty() ? "an unknown peer" : detail;
  if (detail.empty()) return absl::StrCat("world rank ", peer.world_rank);
  return absl::StrCat("world rank ", peer.world_rank, " (", detail, ")");
}

std::string HostName() {
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "";
  return name;
}

PeerIdentity SelfIdentity(int world_rank) {
  PeerIdentity self;
  self.world_rank = world_rank;
  self.pid = getpid();
  self.host = HostName();
  return self;
}

absl::string_view PeerFaultName(PeerFault fault) {
  switch (fault) {
    case PeerFault::kDied:
      return "died";
    case PeerFault::kUnresponsive:
      return "stopped responding";
    case PeerFault::kAborted:
      return "aborted";
  }
  return "failed";
}

void RecordPeerFailure(const PeerFailure& failure) {
  void (*observer)(const PeerFailure&) = nullptr;
  {
    MutexLock lock(&g_mu);
    if (g_first == nullptr) g_first = new std::optional<PeerFailure>();  // process-wide
    if (g_first->has_value()) return;
    *g_first = failure;
    observer = g_observer;
  }
  if (observer != nullptr) observer(failure);
}

void SetPeerFailureObserver(void (*observer)(const PeerFailure&)) {
  MutexLock lock(&g_mu);
  g_observer = observer;
}

std::optional<PeerFailure> FirstPeerFailure() {
  MutexLock lock(&g_mu);
  if (g_first == nullptr) return std::nullopt;
  return *g_first;
}

std::string ProcessStateNote(int64_t pid) {
  if (pid <= 0) return "";
  std::ifstream stat(absl::StrCat("/proc/", pid, "/stat"));
  std::string line;
  if (!std::getline(stat, line)) return "";
  // The command name in parentheses may hold spaces: the state follows the last
  // ')'.
  const size_t paren = line.rfind(')');
  if (paren == std::string::npos || paren + 2 >= line.size()) return "";
  const char state = line[paren + 2];
  return absl::StrCat(" (its state: ", std::string(1, state), ", ", StateName(state), ")");
}

}  // namespace loom
