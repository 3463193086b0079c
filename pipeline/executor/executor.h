// PipelineExecutor: runs a pipeline schedule for real. Each rank calls Run with its
// transport endpoint and its StageModule (stage_module.h); Run executes the rank's
// program of the lowered schedule in order, calling the module for F, B, I and W
// and moving activations and gradients between ranks with the transport's
// point-to-point Send / Recv.
//
// Create lowers a compute-only schedule (lowering.h) and proves the result with
// Verify (verifier.h) once, up front, so a schedule that could deadlock or misses a
// message is refused before any rank moves a byte; the executor is then immutable
// and shared by all ranks' threads, and reused step after step.
//
// How a rank runs its program:
//   F, B, I, W   call the module. Stage 0's F takes its input from module.Input;
//                the last stage's F output goes to module.Loss, whose gradient is
//                that stage's output gradient. An output for a stage on the same
//                rank (the turn of a V, or one rank) is handed over directly.
//                In a forward-only schedule (no B, I or W on any rank, e.g.
//                MakeForwardOnlySchedule: an evaluation) Loss runs for the loss
//                value alone and its gradient is dropped; no gradient moves.
//   SEND_F/B     post a fixed-size header (sender's action, shape, byte count) and
//                the tensor's bytes, without waiting: a send is waited for when
//                more than max_pending_sends are outstanding, and at the end.
//   RECV_F/B     wait for the header, check it, then receive the payload of the
//                announced size.
// All headers between two ranks travel on one tag and all payloads on another, so
// each direction between two ranks is one ordered stream. Verify proves the
// schedule deadlock free under rendezvous semantics, which implies that both ranks
// put their messages to each other in the same order; the header of every message
// is therefore exactly the one the receiver expects. If it is not (the ranks run
// different schedules, or a module's shapes disagree with its peer's), Run fails
// with FailedPrecondition naming both sides, at the first such message.
//
// Every wait has a deadline (options.timeout per wait): a peer that never sends is
// DeadlineExceeded naming the action and the peer. A rank that fails aborts its
// endpoint (unless abort_on_error is false), so its peers fail at once with
// Unavailable carrying its reason instead of waiting out their deadlines.
//
// Example (two ranks as threads over the inproc transport; `modules[r]` holds the
// stages of rank r):
//   LOOM_ASSIGN_OR_RETURN(Schedule schedule, Make1F1BSchedule(2, /*microbatches=*/4));
//   LOOM_ASSIGN_OR_RETURN(PipelineExecutor executor, PipelineExecutor::Create(schedule));
//   executor.schedule().ranks[1];   // 1RECV_F0 1F0 1B0 1RECV_F1 1SEND_B0 1F1 ... (lowered)
//   auto group = *InprocGroup::Create(2);
//   std::vector<std::thread> threads;
//   for (int r = 0; r < 2; ++r) {
//     threads.emplace_back([&, r] {
//       std::unique_ptr<Transport> endpoint = *group->Endpoint(r);
//       absl::StatusOr<RankExecution> run = executor.Run(*endpoint, *modules[r]);
//       // run->actions: every action of rank r with its start and end time
//     });
//   }
//   for (std::thread& t : threads) t.join();
//   // each module now holds its stages' weight gradients, summed over microbatches
//
// A mismatch, e.g. rank 0 running 1F1B with its first two forwards swapped:
//   rank 1: FailedPrecondition: 1f1b rank 1 step 0 (1RECV_F0) expects rank 0's
//     0SEND_F0, but rank 0 sent 0SEND_F1: the ranks run different schedules
//   rank 0: Unavailable: 1f1b rank 0 step 1 (0SEND_F1) to rank 1: rank 1 aborted:
//     1f1b rank 1 step 0 (1RECV_F0) expects rank 0's 0SEND_F0, ...
// and a module whose shapes differ from its peer's:
//   FailedPrecondition: 1f1b rank 1 step 0 (1RECV_F0): rank 0 sent 0SEND_F0 with
//     shape [3,8] (96 bytes), but rank 1's stage module declares [3,9] as stage 1's
//     input for microbatch 0
#ifndef LOOM_PIPELINE_EXECUTOR_EXECUTOR_H_
#define LOOM_PIPELINE_EXECUTOR_EXECUTOR_H_

#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "collectives/transport/transport.h"
#include "pipeline/action.h"
#include "pipeline/executor/send_buffers.h"
#include "pipeline/executor/stage_module.h"
#include "pipeline/schedule.h"

namespace loom {

struct ExecutorOptions {
  // The longest any single wait (for a header, a payload, or a send's completion)
  // may take before Run fails with DeadlineExceeded. Generous by default, as a
  // peer may be busy with several long actions before it gets to the message;
  // the same default as CommunicatorOptions::timeout.
  absl::Duration timeout = absl::Minutes(5);

  // Create checks the schedule with Verify (both semantics). Turning it off is for
  // schedules verified elsewhere, and for tests that need a broken schedule to
  // reach the ranks; Run still fails cleanly (FailedPrecondition or
  // DeadlineExceeded), never hangs or crashes, on an inconsistent schedule.
  bool verify = true;

  // Sends are posted without waiting, so a rank goes on computing while its
  // peer takes the message; the sent tensor is held until the send completes.
  // When more than this many are outstanding, the rank waits for the oldest,
  // which bounds the memory held by sends. Waiting later than a blocking send
  // would cannot deadlock a schedule that Verify accepts. At least 1.
  int64_t max_pending_sends = 8;

  // A failing rank aborts its transport endpoint (Transport::Abort) with its
  // error, so its peers fail at once instead of at their deadlines. The endpoint
  // is unusable afterwards; turn this off to keep it (peers then time out).
  bool abort_on_error = true;

  // Headers use tag `tag_base`, payloads `tag_base + 1`, both below
  // kCommunicatorTagsBegin (2^40), so a pipeline can share an endpoint with
  // collectives. Run reserves the two tags on the endpoint (Transport::ReserveTags):
  // two executors running on one endpoint need different bases, and a second one
  // with the same base fails with AlreadyExists naming both.
  Tag tag_base = 0x50495045;  // "PIPE" in ASCII
};

// One action as it ran: its start and end on this rank's clock.
struct ExecutedAction {
  Action action;
  absl::Time start;
  absl::Time end;
};

// RankExecution reports one rank's Run.
struct RankExecution {
  int64_t rank = 0;
  absl::Time start;  // When the first action began.
  absl::Time end;    // When the last send completed.
  // Every action of the rank's lowered program, in program order.
  std::vector<ExecutedAction> actions;
  // Time spent in the module (F, B, I, W, with Input and Loss) and blocked in the
  // transport's Wait.
  absl::Duration compute;
  absl::Duration waiting;
};

class PipelineExecutor {
 public:
  // Create lowers `schedule` if it has no messages yet and, unless options.verify
  // is false, checks it with Verify (which accepts training and forward-only
  // schedules, see schedule.h). InvalidArgument for options out of range
  // (naming the field), for an action whose stage or microbatch lies outside the
  // layout or on the wrong rank, and for Lower's and Verify's errors, which it
  // returns as they are (InvalidArgument or FailedPrecondition, with a grid).
  static absl::StatusOr<PipelineExecutor> Create(const Schedule& schedule,
                                                 ExecutorOptions options = {});

  // schedule returns the lowered schedule that Run executes.
  const Schedule& schedule() const { return schedule_; }
  // forward_only is true when the schedule has no backward at all: Run computes
  // the forwards and the losses, and leaves the module's gradients alone.
  bool forward_only() const { return !schedule_.HasBackward(); }
  const ExecutorOptions& options() const { return options_; }

  // Run executes the program of rank transport.rank() with `module`. Thread-safe:
  // every rank may call it at once on its own thread, with its own transport and
  // module. Every message this rank posted is complete or cancelled when it
  // returns. Errors, each naming the rank, step and action:
  //   InvalidArgument     before any message moves: the transport's group size is
  //                       not the schedule's number of ranks, or the program has
  //                       I or W actions and !module.SupportsSplitBackward();
  //                       later: a tensor to send has more than 8 dimensions, or
  //                       the module returned a tensor whose values do not fill
  //                       its shape.
  //   FailedPrecondition  a header that is not the expected action (the peer runs
  //                       another schedule or order) or announces another shape
  //                       than the module's InputShape / OutputShape; a tensor
  //                       handed between stages on this rank of the wrong shape;
  //                       an action whose data is missing or made twice (only in
  //                       schedules that skipped Verify).
  //   DeadlineExceeded    a wait longer than options.timeout: names the action
  //                       and the peer that did not send or receive.
  //   Unavailable         a peer aborted (carries the peer's error).
  //   the module's own errors, as returned.
  // With `send_buffers` (send_buffers.h; this rank's, kept across Runs), payloads
  // are staged in the transport's communication memory where it is zero-copy
  // (shm: the receiver maps it); without, they are sent from the tensors. The
  // results are bitwise the same either way.
  absl::StatusOr<RankExecution> Run(Transport& transport, StageModule& module,
                                    SendBuffers* send_buffers = nullptr) const;

 private:
  PipelineExecutor(Schedule schedule, ExecutorOptions options)
      : schedule_(std::move(schedule)), options_(options) {}

  Schedule schedule_;
  ExecutorOptions options_;
};

}  // namespace loom

#endif  // LOOM_PIPELINE_EXECUTOR_EXECUTOR_H_
