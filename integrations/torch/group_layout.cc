#include "integrations/torch/group_layout.h"

#include <algorithm>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/escaping.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace loom {
namespace pytorch {

std::string FormatRankIdentity(const RankIdentity& identity) {
  return absl::StrCat(identity.host_id, "\t", identity.hostname, "\t", identity.pid, "\t",
                      identity.mpi_rank);
}

absl::StatusOr<RankIdentity> ParseRankIdentity(absl::string_view text) {
  const std::vector<std::string> fields = absl::StrSplit(text, '\t');
  RankIdentity identity;
  if (fields.size() != 4 || fields[0].empty() || !absl::SimpleAtoi(fields[2], &identity.pid) ||
      !absl::SimpleAtoi(fields[3], &identity.mpi_rank)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "loom: malformed rank identity \"", absl::CEscape(text),
        "\" in the store (expected host_id, hostname, pid and MPI rank separated by tabs)"));
  }
  identity.host_id = fields[0];
  identity.hostname = fields[1];
  return identity;
}

std::string GroupLayout::Describe() const {
  if (!two_level) return absl::StrCat("shm among ", local_size, " ranks on one host");
  const char* between = mpi ? "mpi" : "gloo";
  const char* numbered = numbered_by_host ? ", numbered by host" : "";
  if (ranks_per_node > 0) {
    // Over gloo every algorithm's messages inside a host take shm (routed); over MPI
    // the node-aware phases' do, and MPI's own shared memory the others'.
    return absl::StrCat(between, " between ", hosts, " hosts, shm inside each (", ranks_per_node,
                        " ranks per host", numbered, routed ? ", every algorithm" : "", ")");
  }
  if (routed) {
    return absl::StrCat(between, " among all ranks (", hosts, " hosts of unequal sizes", numbered,
                        ": shm between two ranks of a host)");
  }
  return absl::StrCat(between, " among all ranks (", hosts, hosts == 1 ? " host" : " hosts",
                      ", no shm level)");
}

absl::StatusOr<GroupLayout> PlanGroupLayout(absl::Span<const RankIdentity> ranks, int rank,
                                            TransportChoice choice) {
  const int size = static_cast<int>(ranks.size());
  if (rank < 0 || rank >= size) {
    return absl::InvalidArgumentError(
        absl::StrCat("loom: rank ", rank, " is outside a group of ", size, " ranks"));
  }
  // Host numbers in order of first appearance, so every rank numbers them alike.
  absl::flat_hash_map<std::string, int> host_of_id;
  std::vector<int> host(size);
  std::vector<int> count;
  std::vector<std::string> names;
  for (int r = 0; r < size; ++r) {
    auto [it, added] = host_of_id.try_emplace(ranks[r].host_id, static_cast<int>(count.size()));
    if (added) {
      count.push_back(0);
      names.push_back(ranks[r].hostname);
    }
    host[r] = it->second;
    ++count[it->second];
  }
  GroupLayout layout;
  layout.hosts = static_cast<int>(count.size());
  layout.node = host[rank];
  layout.local_size = count[layout.node];
  for (int r = 0; r < rank; ++r) layout.local_rank += host[r] == layout.node ? 1 : 0;
  for (int r = 0; r < size; ++r) {
    if (host[r] == layout.node) layout.host_ranks.push_back(r);
  }
  if (layout.hosts > 1 && choice == TransportChoice::kShm) {
    return absl::FailedPreconditionError(absl::StrCat(
        "loom: transport shm needs every rank on one host, but the group's ", size,
        " ranks are on ", layout.hosts, " hosts (", absl::StrJoin(names, ", "),
        "); use transport auto or gloo"));
  }
  layout.two_level = layout.hosts > 1 || choice == TransportChoice::kGloo;
  if (!layout.two_level) return layout;
  std::vector<int> without_mpi;
  for (int r = 0; r < size; ++r) {
    if (ranks[r].mpi_rank < 0) without_mpi.push_back(r);
  }
  if (choice == TransportChoice::kMpi && !without_mpi.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        "loom: transport mpi needs every rank started by mpirun, but rank",
        without_mpi.size() == 1 ? " " : "s ", absl::StrJoin(without_mpi, ", "),
        " of the group ", without_mpi.size() == 1 ? "was" : "were", " not"));
  }
  layout.mpi = choice != TransportChoice::kGloo && without_mpi.empty();
  const int k = count[0];
  bool equal = choice != TransportChoice::kGloo && k > 1;
  for (int c : count) equal = equal && c == k;
  layout.ranks_per_node = equal ? k : 0;
  // One rank a host leaves nothing to number (and no node level, as before).
  if (choice != TransportChoice::kGloo && layout.hosts > 1 && layout.hosts < size) {
    layout.node_of_rank = host;
    layout.numbered_by_host = !std::is_sorted(host.begin(), host.end());
  }
  layout.routed = !layout.mpi && choice != TransportChoice::kGloo && layout.hosts < size;
  return layout;
}

}  // namespace pytorch
}  // namespace loom
