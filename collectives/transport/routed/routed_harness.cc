#include "collectives/transport/routed/routed_harness.h"

#include <stdlib.h>

#include <cstdlib>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "collectives/transport/gloo/gloo_transport.h"
#include "collectives/transport/inproc/inproc_transport.h"
#include "collectives/transport/routed/routed_transport.h"
#include "collectives/transport/shm/shm_harness.h"
#include "core/status_macros.h"

namespace loom {

int BlocksOfTwo(int rank, int world) {
  (void)world;
  return rank / 2;
}

int Alternating(int rank, int world) {
  (void)world;
  return rank % 2;
}

std::vector<int> RanksOnHost(const HostOf& host_of, int host, int world) {
  std::vector<int> ranks;
  for (int r = 0; r < world; ++r) {
    if (host_of(r, world) == host) ranks.push_back(r);
  }
  return ranks;
}

namespace {

// NearRank: `rank`'s place among the ranks of its host.
int NearRank(const std::vector<int>& on_host, int rank) {
  for (size_t i = 0; i < on_host.size(); ++i) {
    if (on_host[i] == rank) return static_cast<int>(i);
  }
  return -1;
}

// EndTogether: a byte to and from every peer (a barrier), for a few seconds at most
// (a rank that aborted cannot take part).
absl::Status EndTogether(Transport& t) {
  constexpr Tag kEndTag = kCommunicatorTagsBegin - 1;
  std::vector<std::byte> out(1), in(t.size());
  std::vector<Request> requests;
  absl::Status posted;
  for (int peer = 0; peer < t.size() && posted.ok(); ++peer) {
    absl::StatusOr<Request> send = t.Send(peer, kEndTag, out);
    absl::StatusOr<Request> recv = t.Recv(peer, kEndTag, absl::MakeSpan(&in[peer], 1));
    for (const absl::StatusOr<Request>* request : {&send, &recv}) {
      if (request->ok()) {
        requests.push_back(**request);
      } else {
        posted.Update(request->status());
      }
    }
  }
  // Whatever was posted is waited for (or cancelled) before its buffers go.
  const absl::Status waited = t.Wait(requests, absl::Now() + absl::Seconds(posted.ok() ? 5 : 0));
  return posted.ok() ? waited : posted;
}

class RoutedInprocHarness final : public TransportHarness {
 public:
  explicit RoutedInprocHarness(HostOf host_of) : host_of_(std::move(host_of)) {}
  std::string name() const override { return "routed inproc+inproc"; }

  std::vector<absl::Status> Run(int world,
                                const std::function<absl::Status(Transport&)>& body) override {
    absl::StatusOr<std::shared_ptr<InprocGroup>> far = InprocGroup::Create(world);
    if (!far.ok()) return std::vector<absl::Status>(world, far.status());
    std::vector<std::shared_ptr<InprocGroup>> hosts(world);
    for (int host = 0; host < world; ++host) {
      const int members = static_cast<int>(RanksOnHost(host_of_, host, world).size());
      if (members == 0) continue;
      absl::StatusOr<std::shared_ptr<InprocGroup>> group = InprocGroup::Create(members);
      if (!group.ok()) return std::vector<absl::Status>(world, group.status());
      hosts[host] = *group;
    }
    std::vector<absl::Status> results(world);
    std::vector<std::thread> threads;
    for (int rank = 0; rank < world; ++rank) {
      threads.emplace_back([&, rank] {
        results[rank] = [&]() -> absl::Status {
          const int host = host_of_(rank, world);
          const std::vector<int> on_host = RanksOnHost(host_of_, host, world);
          LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> far_end, (*far)->Endpoint(rank));
          LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> near_end,
                                hosts[host]->Endpoint(NearRank(on_host, rank)));
          LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> routed,
                                MakeRoutedTransport(std::move(far_end), std::move(near_end), on_host));
          return body(*routed);
        }();
      });
    }
    for (auto& thread : threads) thread.join();
    return results;
  }

 private:
  const HostOf host_of_;
};

class RoutedShmGlooHarness final : public TransportHarness {
 public:
  RoutedShmGlooHarness(HostOf host_of, ShmOptions::CopyMode mode)
      : host_of_(std::move(host_of)), mode_(mode) {}
  std::string name() const override { return "routed gloo+shm"; }
  // gloo measures its paths; shm does not.
  bool measures_path(int from, int to, int world) const override {
    return host_of_(from, world) != host_of_(to, world);
  }

  std::vector<absl::Status> Run(int world,
                                const std::function<absl::Status(Transport&)>& body) override {
    const char* tmp = std::getenv("TEST_TMPDIR");
    std::string dir = absl::StrCat(tmp != nullptr ? tmp : "/tmp", "/routed_store_XXXXXX");
    if (mkdtemp(dir.data()) == nullptr) {
      return std::vector<absl::Status>(world,
                                       absl::InternalError(absl::StrCat("mkdtemp(", dir, ")")));
    }
    const std::string job = UniqueJobId("routed");
    return RunProcesses(world, absl::Seconds(120), [&](int rank) -> absl::Status {
      const int host = host_of_(rank, world);
      const std::vector<int> on_host = RanksOnHost(host_of_, host, world);
      GlooOptions gloo;
      gloo.rank = rank;
      gloo.size = world;
      gloo.store_dir = dir;
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> far, ConnectGlooTransport(gloo));
      ShmOptions shm;
      shm.job_id = absl::StrCat(job, ".h", host);
      shm.rank = NearRank(on_host, rank);
      shm.size = static_cast<int>(on_host.size());
      shm.world_rank = rank;
      shm.host_ranks = world;  // every process of the test shares this host's CPUs
      shm.copy_mode = mode_;
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> near, ConnectShmTransport(shm));
      LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> routed,
                            MakeRoutedTransport(std::move(far), std::move(near), on_host));
      const absl::Status result = body(*routed);
      // Every rank is done before any closes, as a job's ranks end together: a rank
      // whose gloo endpoint closed early would look gone to the others.
      EndTogether(*routed).IgnoreError();
      return result;
    });
  }

 private:
  const HostOf host_of_;
  const ShmOptions::CopyMode mode_;
};

}  // namespace

TransportHarnessFactory MakeRoutedInprocHarness(HostOf host_of) {
  return [host_of] { return std::make_unique<RoutedInprocHarness>(host_of); };
}

TransportHarnessFactory MakeRoutedShmGlooHarness(HostOf host_of, ShmOptions::CopyMode mode) {
  return [host_of, mode] { return std::make_unique<RoutedShmGlooHarness>(host_of, mode); };
}

}  // namespace loom
