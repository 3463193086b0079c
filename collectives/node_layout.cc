#include "collectives/node_layout.h"

#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
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
  std::map<std::string, int> number;  // host name -> node, by first rank
  std::vector<int> count;
  for (const std::string& name : host_names) {
    const auto [it, added] = number.emplace(name, static_cast<int>(count.size()));
    if (added) count.push_back(0);
    layout.node_of_rank.push_back(it->second);
    ++count[it->second];
  }
  layout.hosts = std::max(1, static_cast<int>(count.size()));
  if (rank >= 0 && rank < n) {
    layout.node = layout.node_of_rank[rank];
    for (int r = 0; r < rank; ++r) layout.local_rank += layout.node_of_rank[r] == layout.node;
  }
  if (n == 0 || layout.hosts < 2) return layout;
  const int k = count[0];
  for (int c : count) {
    if (c != k) return layout;
  }
  if (k < 2) return layout;
  layout.ranks_per_host = k;
  // In blocks: rank r on host r / k.
  for (int r = 0; r < n; ++r) {
    if (layout.node_of_rank[r] != r / k) return layout;
  }
  layout.ranks_per_node = k;
  return layout;
}

absl::StatusOr<NodeLayout> FindNodeLayout(Communicator& comm, const std::string& host_name) {
  LOOM_ASSIGN_OR_RETURN(std::vector<std::string> names, AllGatherHostNames(comm, host_name));
  return PlanNodeLayout(names, comm.rank());
}

}  // namespace loom
