#include "tools/training/job_hosts.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/status_macros.h"

namespace loom {
namespace {

// The rank lists of a Describe line stop after this many ranks (a line, not a table).
constexpr int kListedRanks = 32;

// Ranks `values` host by host: "0 2 | 1 3", or the first kListedRanks then " ...".
std::string ByHost(const std::vector<int>& values, const std::vector<int>& host_of_rank) {
  std::string out;
  const int listed = std::min<int>(kListedRanks, static_cast<int>(values.size()));
  for (int r = 0; r < listed; ++r) {
    if (r > 0) absl::StrAppend(&out, host_of_rank[r] != host_of_rank[r - 1] ? " | " : " ");
    absl::StrAppend(&out, values[r]);
  }
  if (listed < static_cast<int>(values.size())) absl::StrAppend(&out, " ...");
  return out;
}

}  // namespace

JobHosts JobHosts::OneHost(int size) {
  JobHosts hosts;
  for (int r = 0; r < size; ++r) {
    hosts.process_of_rank_.push_back(r);
    hosts.rank_of_process_.push_back(r);
    hosts.host_of_rank_.push_back(0);
  }
  return hosts;
}

absl::StatusOr<JobHosts> JobHosts::Number(absl::Span<const int> host_of_process) {
  if (host_of_process.empty()) {
    return absl::InvalidArgumentError("JobHosts::Number: no processes");
  }
  // Hosts numbered in the order of their lowest process.
  std::map<int, int> number_of_host;
  std::vector<int> host(host_of_process.size());
  for (size_t p = 0; p < host_of_process.size(); ++p) {
    const auto [it, added] =
        number_of_host.emplace(host_of_process[p], static_cast<int>(number_of_host.size()));
    host[p] = it->second;
  }
  JobHosts hosts;
  hosts.hosts_ = static_cast<int>(number_of_host.size());
  for (int h = 0; h < hosts.hosts_; ++h) {
    for (size_t p = 0; p < host.size(); ++p) {
      if (host[p] != h) continue;
      hosts.process_of_rank_.push_back(static_cast<int>(p));
      hosts.host_of_rank_.push_back(h);
    }
  }
  std::vector<int> rank_of_process(host.size(), 0);
  for (size_t r = 0; r < host.size(); ++r) rank_of_process[hosts.process_of_rank_[r]] = static_cast<int>(r);
  hosts.rank_of_process_ = std::move(rank_of_process);
  return hosts;
}

bool JobHosts::InBlocks() const {
  for (int r = 0; r < size(); ++r) {
    if (process_of_rank_[r] != r) return false;
  }
  return true;
}

std::string JobHosts::Describe(absl::string_view transport) const {
  if (hosts_ < 2) return "";
  std::map<int, int> ranks_on;  // host -> its ranks
  for (int host : host_of_rank_) ++ranks_on[host];
  std::set<int> sizes;
  std::vector<int> each;
  for (const auto& [host, ranks] : ranks_on) {
    sizes.insert(ranks);
    each.push_back(ranks);
  }
  std::string line =
      sizes.size() == 1
          ? absl::StrCat(hosts_, " hosts of ", *sizes.begin(), " rank", *sizes.begin() == 1 ? "" : "s")
          : absl::StrCat(hosts_, " hosts of ", absl::StrJoin(each, ", "), " ranks");
  if (InBlocks()) return absl::StrCat(line, ", in blocks");
  std::vector<int> job_ranks(size());
  for (int r = 0; r < size(); ++r) job_ranks[r] = r;
  return absl::StrCat(line, "; ", transport, " dealt them, the job numbers them by host (job ranks ",
                      ByHost(job_ranks, host_of_rank_), " are ", transport, " ranks ",
                      ByHost(process_of_rank_, host_of_rank_), ")");
}

absl::StatusOr<std::vector<int>> GroupNodeOfRank(const Mesh& mesh, int rank,
                                                 absl::string_view dimension,
                                                 const JobHosts& hosts) {
  const int world = static_cast<int>(mesh.world_size());
  if (hosts.size() != world) {
    return absl::InvalidArgumentError(absl::StrCat("GroupNodeOfRank: ", hosts.size(),
                                                   " ranks on hosts, but the mesh has ", world));
  }
  if (dimension != "tp" && dimension != "cp" && dimension != "dp-cp" && dimension != "world") {
    return absl::InvalidArgumentError(absl::StrCat("GroupNodeOfRank: dimension \"", dimension,
                                                   "\" is none of tp, cp, dp-cp, world"));
  }
  if (rank < 0 || rank >= world) {
    return absl::OutOfRangeError(
        absl::StrCat("GroupNodeOfRank: rank ", rank, " is outside the mesh of ", world));
  }
  // The group's members, and each one's rank in the group as the job connects it.
  std::vector<int64_t> members;
  if (dimension == "world") {
    for (int r = 0; r < world; ++r) members.push_back(r);
  } else {
    LOOM_ASSIGN_OR_RETURN(members, mesh.Group(rank, dimension));
  }
  LOOM_ASSIGN_OR_RETURN(const int64_t cp, mesh.DimSize("cp"));
  std::map<int64_t, int> host_of_member;  // group rank -> host
  for (const int64_t member : members) {
    int64_t index = member;
    if (dimension == "tp" || dimension == "cp") {
      LOOM_ASSIGN_OR_RETURN(index, mesh.Coordinate(member, dimension));
    } else if (dimension == "dp-cp") {
      LOOM_ASSIGN_OR_RETURN(const int64_t d, mesh.Coordinate(member, "dp"));
      LOOM_ASSIGN_OR_RETURN(const int64_t c, mesh.Coordinate(member, "cp"));
      index = d * cp + c;
    }
    host_of_member[index] = hosts.host_of_rank()[member];
  }
  if (static_cast<int64_t>(host_of_member.size()) != static_cast<int64_t>(members.size()) ||
      host_of_member.rbegin()->first != static_cast<int64_t>(members.size()) - 1) {
    return absl::InternalError(absl::StrCat("GroupNodeOfRank: the ", dimension, " group of rank ",
                                            rank, " does not number its members 0..",
                                            members.size() - 1));
  }
  std::vector<int> node_of_rank;
  std::set<int> distinct;
  for (const auto& [index, host] : host_of_member) {
    node_of_rank.push_back(host);
    distinct.insert(host);
  }
  if (distinct.size() < 2 || distinct.size() == node_of_rank.size()) return std::vector<int>();
  return node_of_rank;
}

absl::StatusOr<std::string> TensorParallelAcrossHosts(const Mesh& mesh, const JobHosts& hosts) {
  if (hosts.size() != mesh.world_size()) {
    return absl::InvalidArgumentError(absl::StrCat("TensorParallelAcrossHosts: ", hosts.size(),
                                                   " ranks on hosts, but the mesh has ",
                                                   mesh.world_size()));
  }
  LOOM_ASSIGN_OR_RETURN(const std::vector<std::vector<int64_t>> groups, mesh.AllGroups("tp"));
  int spanning = 0;
  for (const std::vector<int64_t>& group : groups) {
    for (const int64_t member : group) {
      if (hosts.host_of_rank()[member] != hosts.host_of_rank()[group.front()]) {
        ++spanning;
        break;
      }
    }
  }
  if (spanning == 0) return std::string();
  return absl::StrCat("; ", spanning, " of ", groups.size(), " tp groups span hosts: each layer's ",
                      "tp all-reduces cross the link (give every host a multiple of --tp ",
                      groups.front().size(), " ranks)");
}

}  // namespace loom
