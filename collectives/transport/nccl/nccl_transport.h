// NCCL transport: the Transport interface of transport.h over NCCL point-to-point
// (ncclSend/ncclRecv) between GPUs, one device per rank, and NCCL's own collectives
// as the transport's NativeCollectives: the baseline Loom's algorithms are measured
// against. Ranks and size are those of a CPU `bootstrap` transport (shm, MPI, or
// inproc for ranks that are threads of one process), over which rank 0 hands out the
// NCCL unique id.
//
// Example (each rank, on a device of its own):
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> gpu,
//                         ConnectNcclTransport(*bootstrap, /*device=*/bootstrap->rank()));
//   // gpu->name() == "nccl"; gpu->rank() == bootstrap->rank(); gpu->size() == bootstrap->size()
//   LOOM_ASSIGN_OR_RETURN(DeviceBuffer out,
//                         DeviceBuffer::Allocate(MemorySpace::kDevice, bytes, device));
//   LOOM_ASSIGN_OR_RETURN(DeviceBuffer in,
//                         DeviceBuffer::Allocate(MemorySpace::kDevice, bytes, device));
//   LOOM_ASSIGN_OR_RETURN(Request s, gpu->Send(right, /*tag=*/7, {out.data(), bytes}));
//   LOOM_ASSIGN_OR_RETURN(Request r, gpu->Recv(left, /*tag=*/7, {in.data(), bytes}));
//   LOOM_RETURN_IF_ERROR(gpu->Wait({s, r}, absl::Now() + absl::Seconds(10)));
//   // `in` (device memory) now holds the left neighbour's bytes.
//   LOOM_RETURN_IF_ERROR(gpu->native()->AllReduce(x, x, n, DType::kF32, ReduceOp::kSum));
//
// The contract of transport.h, as NCCL keeps it (the differences are marked):
//
// Buffers are DEVICE memory of the transport's device (cudaMalloc; managed memory is
// accepted). Send and Recv refuse any other pointer with InvalidArgument (checked
// with cudaPointerGetAttributes).
//
// Issuing. Send and Recv only queue. Wait issues every queued operation of the
// endpoint (named or not) as one NCCL group (ncclGroupStart ... ncclGroupEnd) on
// the transport's own CUDA stream, records an event after it, and polls the event and
// ncclCommGetAsyncError until the named requests are done or the deadline passes. A
// request completes when the whole group it was issued in has.
//
// Stamps (differ). Accepted and not compared: NCCL's messages carry no header of
// Loom's, so calls that disagree are not found at once (transport.h, "Stamps").
//
// Matching (differs). NCCL has no tags: between two ranks, sends and receives match
// in the order they are issued. A Wait issues its group sorted by (peer, tag,
// posting order), so two ranks agree whenever each pair issues the same messages in
// groups of the same content; the posting order within a group does not matter.
// Messages of one (peer, tag) still match in posting order. Two ranks that issue the
// same messages split differently over their Waits (rank A waits for its tag-1 send
// alone while rank B issues its tag-2 and tag-1 receives together) match them wrong.
// Post the messages of one step, then Wait for all of them, on every rank.
//
// Sizes (differs). NCCL cannot tell a size mismatch: a receive larger than its send
// never completes (DeadlineExceeded), a smaller one is undefined behaviour in NCCL.
// Zero-byte messages are legal and match like others.
//
// Completion. Nothing is buffered: a send completes once NCCL has moved its bytes.
//
// Combining receives are not supported: RecvCombine with a non-copying Combiner is
// Unimplemented (a Combiner is a host function; reductions of device buffers belong
// to device kernels).
//
// Failure. NCCL cannot withdraw work it was given. A Wait whose deadline passes
// aborts the communicator (ncclCommAbort, which stops NCCL's kernels) and returns
// DeadlineExceeded naming a pending request's peer, tag and size; the endpoint is
// then broken, and every later call fails with Internal saying so. Abort(reason)
// aborts the communicator too; pending and later requests fail with `reason`
// (Aborted for an OK reason). Peers are not told (NCCL has no way): theirs fail at
// their deadlines, or with Unavailable where NCCL reports a remote error. An NCCL
// error breaks the endpoint as well (NCCL's state is unknown after one): Internal,
// InvalidArgument, FailedPrecondition or Unavailable naming the call, with NCCL's
// own text (ncclGetErrorString, ncclGetLastError). After an abort, a peer whose
// kernel was still writing into a receive buffer of this rank may still be doing so
// until that peer aborts too: keep the buffers of requests that failed this way alive
// until every rank's transport is destroyed.
//
// Native collectives (native()) take device buffers too, run on the same stream, and
// use NCCL's in-place forms where Loom's match them. NativeCollectives has no deadline:
// each call waits at most NcclTransportOptions::native_timeout (default: forever, as
// NCCL does), then aborts as above. Every DType and ReduceOp maps to NCCL's (ncclAvg
// for kAvg). A Communicator that runs Algorithm::kNative over this transport must
// pass device buffers.
//
// Threads. One thread drives an endpoint; Abort may come from any thread. The
// endpoint sets its device (cudaSetDevice) on the driving thread where it needs it.
//
// Closing (destroying) the endpoint finalizes the communicator (ncclCommFinalize,
// which waits for the peers' side; bounded by close_timeout) when nothing is in
// flight, and aborts it otherwise.
#ifndef LOOM_COLLECTIVES_TRANSPORT_NCCL_NCCL_TRANSPORT_H_
#define LOOM_COLLECTIVES_TRANSPORT_NCCL_NCCL_TRANSPORT_H_

#include <memory>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/transport/transport.h"

namespace loom {

struct NcclTransportOptions {
  // How long ConnectNcclTransport may take: the unique id's trip over the bootstrap
  // and NCCL's communicator set-up (which waits for every rank). Positive.
  absl::Duration connect_timeout = absl::Seconds(60);
  // The bootstrap tag the unique id travels on. Every rank passes the same, and it
  // must not collide with the program's own messages on the bootstrap.
  Tag bootstrap_tag = 0x4e43434c;  // "NCCL"
  // How long one native collective may wait. Positive; InfiniteDuration() (the
  // default, NCCL's own behaviour) waits as long as it takes.
  absl::Duration native_timeout = absl::InfiniteDuration();
  // How long destroying the transport waits for ncclCommFinalize (the peers' side
  // of the communicator to be quiescent) before aborting instead. Non-negative.
  absl::Duration close_timeout = absl::Seconds(10);
  // Polls in a wait that only yield the CPU before it sleeps 50 us between polls.
  // Non-negative.
  int spin_iterations = 4000;
};

// ConnectNcclTransport makes this rank's endpoint of an NCCL communicator among the
// ranks of `bootstrap` (rank and size are the bootstrap's), on CUDA device `device`.
// Collective over `bootstrap`: every rank calls it, each with its own device. Rank
// 0 creates the NCCL unique id (ncclGetUniqueId) and sends it to every other rank;
// each initializes its communicator in non-blocking mode and polls it until it is
// ready. `bootstrap` is used only during the call.
// Errors: InvalidArgument for bad options (naming the field) or a device outside
// [0, count); FailedPrecondition naming "no CUDA device" on a machine without one
// (and, on the other ranks, when rank 0 could not create the id); DeadlineExceeded
// when the id or a rank's communicator is not there within connect_timeout (the
// half-made communicator is aborted); NCCL errors as described in the header's
// Failure paragraph; the bootstrap's own errors.
absl::StatusOr<std::unique_ptr<Transport>> ConnectNcclTransport(Transport& bootstrap, int device,
                                                                NcclTransportOptions options = {});

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_NCCL_NCCL_TRANSPORT_H_
