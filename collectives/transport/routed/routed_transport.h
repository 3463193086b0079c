// Routed transport: one endpoint over ranks spread over hosts that carries each
// message over the better of two transports: to the ranks of its own host through a
// near one (Loom's shm: shared memory, no kernel, no TCP), to the others through a far
// one (gloo's TCP pairs). Algorithms written against Transport then need not know the
// hosts: the ring's and halving-doubling's steps between two ranks of one host move
// through shared memory, the others over the network, and a rank does not spend its
// host's CPUs on TCP over loopback.
//
// Example (each rank of a gloo job whose host holds ranks 4..7, after finding its
// node layout, node_layout.h):
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> far, ConnectGlooTransport(gloo));
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> near, ConnectShmTransport(shm));
//   // near: rank (world rank - 4) of 4 on this host
//   LOOM_ASSIGN_OR_RETURN(std::unique_ptr<Transport> routed,
//                         MakeRoutedTransport(std::move(far), std::move(near), {4, 5, 6, 7}));
//   // routed->name() == "gloo+shm"; rank() and size() are the far transport's.
//   LOOM_ASSIGN_OR_RETURN(auto comm, Communicator::Create(std::move(routed)));
//
// HOW IT WAITS. A Wait may name requests of both transports, and each must keep
// moving while the other is waited on: shm moves bytes only inside its endpoint's
// waits (a staged send is fed by its sender), so a rank blocked on gloo alone would
// starve a peer on its host that waits for it, and that peer's wait may be what the
// gloo message waits for. So the far transport must finish requests on threads of its
// own (SetFinishListener accepts a listener: gloo, inproc), and the near one must have
// TryWait and Wake (shm, inproc). A Wait then sleeps in the near endpoint's TryWait,
// named requests or none, so near messages keep moving; each far request that
// finishes Wakes it through the far transport's finish listener, and the far requests
// are looked at, one at a time (each with its own status), with a TryWait that does
// not block. A Wait naming near requests only is the near endpoint's own Wait (the far
// one needs no help). A TryWait of this endpoint ends at its `until` or at its own Wake
// (the far listener's Wakes only make it look again).
//
// Everything else of the contract (transport.h) holds as each transport gives it:
// matching, sizes and stamps are per peer, so per transport; requests are routed
// by peer (this rank's own messages go through the near transport); Abort aborts
// both; AllocateBuffer is the near transport's (shm's peers map it); EstimatePath is
// the peer's transport's; native() the far one's; tags are reserved on this endpoint.
#ifndef LOOM_COLLECTIVES_TRANSPORT_ROUTED_ROUTED_TRANSPORT_H_
#define LOOM_COLLECTIVES_TRANSPORT_ROUTED_ROUTED_TRANSPORT_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "collectives/transport/transport.h"

namespace loom {

// MakeRoutedTransport joins `far`, an endpoint over the whole group, and `near`, one
// over the ranks of this host: near rank i is group rank `near_ranks[i]`
// (near_ranks[near->rank()] is far->rank()). `far` may be shared with others that use
// it on the same thread (a Communicator that found the hosts), but its finish
// listener is this endpoint's from now on: one routed transport per far endpoint. InvalidArgument naming the values when
// they do not fit together (sizes, ranks out of range or repeated, this rank not
// where near says); FailedPrecondition when `far` cannot report finished requests
// (SetFinishListener) or `near` has no TryWait.
absl::StatusOr<std::unique_ptr<Transport>> MakeRoutedTransport(std::shared_ptr<Transport> far,
                                                               std::unique_ptr<Transport> near,
                                                               std::vector<int> near_ranks);

}  // namespace loom

#endif  // LOOM_COLLECTIVES_TRANSPORT_ROUTED_ROUTED_TRANSPORT_H_
