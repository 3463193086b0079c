// JobHosts: a job's processes numbered host by host, and each group's hosts.
//
// The job mesh (job_mesh.h) puts tp fastest, so consecutive ranks share whole tp
// groups, then cp rings, then pipelines; that keeps tp inside a host only where a
// host's processes are consecutive ranks. A launcher may deal them out instead
// (`mpirun --map-by node` on 2 hosts: h1, h2, h1, h2), and tp would then cross the
// link on every layer. So the job numbers its ranks by host: hosts in the order of
// their lowest process rank, a host's processes in their order, and the mesh places
// job ranks. Process 0 is always job rank 0.
//
// Each group's Communicator is then told its members' hosts
// (CommunicatorOptions::node_of_rank), so that its algorithms and its calibration
// know which members share a host (a dp group of 4 on 2 hosts of 2: {0, 0, 1, 1}).
//
// Example (4 processes dealt over 2 hosts, --dp=2 --tp=2):
//   LOOM_ASSIGN_OR_RETURN(JobHosts hosts, JobHosts::Number({0, 1, 0, 1}));
//   hosts.process_of_rank();   // {0, 2, 1, 3}: job rank 1 is process 2
//   hosts.JobRankOf(2);        // 1
//   hosts.host_of_rank();      // {0, 0, 1, 1}
//   hosts.Describe("mpi");     // "2 hosts of 2 ranks; mpi dealt them, the job numbers
//                              //  them by host (job ranks 0 1 | 2 3 are mpi ranks 0 2 | 1 3)"
//   LOOM_ASSIGN_OR_RETURN(std::vector<int> tp, GroupNodeOfRank(mesh, 0, "tp", hosts));
//   // {}: the tp group {0, 1} is on one host. The world: {0, 0, 1, 1}.
//   TensorParallelAcrossHosts(mesh, hosts);   // "": every tp group on one host
#ifndef LOOM_TOOLS_TRAINING_JOB_HOSTS_H_
#define LOOM_TOOLS_TRAINING_JOB_HOSTS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "topology/mesh.h"

namespace loom {

class JobHosts {
 public:
  // One host holding `size` processes in order.
  static JobHosts OneHost(int size);

  // Number numbers the processes whose hosts are `host_of_process` (any ints; equal
  // ints, one host). InvalidArgument when it is empty.
  static absl::StatusOr<JobHosts> Number(absl::Span<const int> host_of_process);

  int size() const { return static_cast<int>(process_of_rank_.size()); }
  int hosts() const { return hosts_; }
  // Element r: the process (the launcher's rank) that is job rank r.
  const std::vector<int>& process_of_rank() const { return process_of_rank_; }
  // Element r: job rank r's host, 0 for the first host; non-decreasing.
  const std::vector<int>& host_of_rank() const { return host_of_rank_; }
  // The job rank of process `process` (0 <= process < size()).
  int JobRankOf(int process) const { return rank_of_process_[process]; }
  // True when the launcher placed the processes host by host already.
  bool InBlocks() const;

  // One line for the job's summary (`transport` names the launcher's ranks): the
  // hosts, their ranks, and the renumbering when there was one; empty on one host.
  std::string Describe(absl::string_view transport) const;

 private:
  std::vector<int> process_of_rank_, rank_of_process_, host_of_rank_;
  int hosts_ = 1;
};

// GroupNodeOfRank returns CommunicatorOptions::node_of_rank for the group of job
// rank `rank` along `dimension` ("tp", "cp", "dp-cp": the parameters' group, or
// "world"), in the group's own rank order (as the job connects it: tp rank, cp rank,
// d * cp + c, job rank). Empty where there is nothing to tell: the group is on one
// host, or on as many hosts as it has members. InvalidArgument for another
// dimension, or when `hosts` is not the mesh's size; OutOfRange for a rank outside it.
absl::StatusOr<std::vector<int>> GroupNodeOfRank(const Mesh& mesh, int rank,
                                                 absl::string_view dimension,
                                                 const JobHosts& hosts);

// TensorParallelAcrossHosts returns, for the job's summary, how many of the mesh's
// tp groups span more than one host ("; 2 of 2 tp groups span hosts: ..."), since
// each of their layer's all-reduces then crosses the link; empty when every tp group
// is on one host. InvalidArgument when `hosts` is not the mesh's size.
absl::StatusOr<std::string> TensorParallelAcrossHosts(const Mesh& mesh, const JobHosts& hosts);

}  // namespace loom

#endif  // LOOM_TOOLS_TRAINING_JOB_HOSTS_H_
