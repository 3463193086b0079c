#include "collectives/node_layout.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <set>

#include "absl/strings/str_cat.h"
#include "core/buffer_view.h"
#include "core/status_macros.h"

namespace loom {
namespace {

std::string ThisHostName() {
  char host[256] = {};
  if (gethostname(host, sizeof(host) - 1) != 0) return "?";
  return host;
}

}  // namespace

std::string SentHostName(const std::string& host_name) {
  if (host_name.size() < kHostNameBytes) return host_name;
  uint64_t hash = 1469598103934665603ull;  // FNV-1a
  for (const unsigned char c : host_name) {
    hash ^= c;
    hash *= 1099511628211ull;
  }
  constexpr size_t kHexDigits = 16;
  return absl::StrCat(host_name.substr(0, kHostNameBytes - 2 - kHexDigits), "~",
                      absl::Hex(hash, absl::kZeroPad16));
}

absl::StatusOr<std::vector<std::string>> AllGatherHostNames(Communicator& comm,
                                                            const std::string& host_name) {
  const int n = comm.size();
  const std::string host = SentHostName(host_name.empty() ? ThisHostName() : host_name);
  std::vector<uint8_t> mine(kHostNameBytes, 0);
  std::memcpy(mine.data(), host.data(), std::min(host.size(), kHostNameBytes - 1));
  std::vector<uint8_t> all(kHostNameBytes * static_cast<size_t>(n));
  CallOptions by_ring;
  by_ring.algorithm = Algorithm::kRing;  // fixed: nothing is known of the layout yet
  LOOM_RETURN_IF_ERROR(comm.AllGather(ConstBufferView::Of(absl::MakeConstSpan(mine)),
                                      BufferView::Of(absl::MakeSpan(all)), by_ring));
  std::vector<std::string> names;
  names.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    const char* name = reinterpret_cast<const char*>(all.data() + kHostNameBytes * r);
    names.emplace_back(name, strnlen(name, kHostNameBytes));
  }
  return names;
}

NodeLayout PlanNodeLayout(const std::vector<std::string>& host_names, int rank) {
  NodeLayout layout;
  layout.host_names = host_names;
  const int n = static_cast<int>(host_names.size());
  layout.hosts = static_cast<int>(std::set<std::string>(host_names.begin(), host_names.end()).size());
  if (n == 0 || layout.hosts < 2) return layout;
  // k: the first host's run of consecutive ranks; every run must be as long, and
  // every run a host of its own (a host seen again later is not consecutive).
  int k = 1;
  while (k < n && host_names[k] == host_names[0]) ++k;
  if (k < 2 || n % k != 0 || n / k != layout.hosts) return layout;
  for (int r = 0; r < n; ++r) {
    if (host_names[r] != host_names[r - r % k]) return layout;
  }
  layout.ranks_per_node = k;
  layout.node = rank / k;
  layout.local_rank = rank % k;
  return layout;
}

absl::StatusOr<NodeLayout> FindNodeLayout(Communicator& comm, const std::string& host_name) {
  LOOM_ASSIGN_OR_RETURN(std::vector<std::string> names, AllGatherHostNames(comm, host_name));
  return PlanNodeLayout(names, comm.rank());
}

}  // namespace loom
