// IdleWait: how the calling thread waits, once it has spun, for a peer it polls (a
// transport whose progress needs polling, as MPI's does): by yielding the CPU
// between polls, or by napping.
//
// Why: a yield hands the core to whatever else is runnable for the rest of that
// thread's time slice (milliseconds). For a rank's own thread waiting on a peer
// rank of the same priority that is what it wants: the peer runs and answers. For a
// communication thread beside the rank's compute threads (collectives/comm_worker.h)
// it is the opposite: each yield gives the core to a compute thread for a whole
// slice, and a transfer that needs a poll every few hundred microseconds to keep
// its link busy crawls (measured: a 4 MiB gradient all-reduce across two hosts on
// 2 Gbit/s took 140 ms beside the backward instead of 17 ms). A nap ends in a
// wake-up, which preempts the compute thread at once, and costs the core only the
// poll itself.
//
// Example:
//   SetThisThreadIdleWait(IdleWait::kNap);   // a communication thread, at its start
//   if (ThisThreadIdleWait() == IdleWait::kNap) { /* spin briefly, then nanosleep */ }
#ifndef LOOM_CORE_IDLE_WAIT_H_
#define LOOM_CORE_IDLE_WAIT_H_

namespace loom {

enum class IdleWait {
  kYield,  // every thread's default
  kNap,
};

// The calling thread's setting (kYield until it sets another).
IdleWait ThisThreadIdleWait();
void SetThisThreadIdleWait(IdleWait wait);

}  // namespace loom

#endif  // LOOM_CORE_IDLE_WAIT_H_
