#include "pipeline/executor/executor.h"

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "core/clock.h"
#include "core/status_macros.h"
#include "pipeline/executor/internal/wire_header.h"
#include "pipeline/lowering.h"
#include "pipeline/verifier.h"

namespace loom {
namespace {

using pipeline_executor_internal::DecodeWireHeader;
using pipeline_executor_internal::EncodeWireHeader;
using pipeline_executor_internal::WireHeader;
using pipeline_executor_internal::WireHeaderWords;

// (stage, microbatch): the key of every tensor a rank holds between actions.
using Key = std::pair<int64_t, int64_t>;

// Prefix keeps a status's code and puts `context` in front of its message.
absl::Status Prefix(const absl::Status& status, absl::string_view context) {
  return absl::Status(status.code(), absl::StrCat(context, ": ", status.message()));
}

// CheckActionsInRange refuses what Run could not even index: a stage outside the
// layout, one held by another rank, a microbatch outside [0, m). Verify checks
// this and more; Create checks it also when verification is off.
absl::Status CheckActionsInRange(const Schedule& schedule) {
  if (schedule.num_ranks() != schedule.layout.num_ranks()) {
    return absl::InvalidArgumentError(absl::StrCat("schedule ", schedule.name, " has ",
                                                   schedule.num_ranks(), " rank programs, its layout ",
                                                   schedule.layout.ToString(), " has ",
                                                   schedule.layout.num_ranks(), " ranks"));
  }
  for (int64_t rank = 0; rank < schedule.num_ranks(); ++rank) {
    const std::vector<Action>& program = schedule.ranks[rank];
    for (size_t step = 0; step < program.size(); ++step) {
      const Action& action = program[step];
      const bool stage_ok = schedule.layout.RankOf(action.stage) == rank;
      const bool microbatch_ok =
          action.microbatch >= 0 && action.microbatch < schedule.num_microbatches;
      if (!stage_ok || !microbatch_ok) {
        return absl::InvalidArgumentError(absl::StrCat(
            "schedule ", schedule.name, " rank ", rank, " step ", step, " (", action.ToString(),
            "): stage ", action.stage, " is ", stage_ok ? "on this rank" : "not on this rank",
            " (layout ", schedule.layout.ToString(), "), microbatch ", action.microbatch,
            microbatch_ok ? " is" : " is not", " in [0, ", schedule.num_microbatches, ")"));
      }
    }
  }
  return absl::OkStatus();
}

// One posted send: the header and the payload (the tensor, or its staged copy in
// communication memory) stay here, unchanged, until both requests complete, as
// the transport's contract requires.
struct PendingSend {
  int64_t step = 0;
  Action action;
  int peer = 0;
  WireHeaderWords header = {};
  Tensor tensor;
  CommBuffer staged;  // Empty unless the payload was staged (SendBuffers).
  std::vector<Request> requests;
};

// RankRunner is one rank's Run: its program, the tensors it holds between
// actions, and its outstanding sends.
class RankRunner {
 public:
  RankRunner(const Schedule& schedule, const ExecutorOptions& options, Transport& transport,
             StageModule& module, SendBuffers* send_buffers)
      : schedule_(schedule),
        options_(options),
        transport_(transport),
        module_(module),
        send_buffers_(send_buffers),
        rank_(transport.rank()),
        last_stage_(schedule.layout.num_stages() - 1),
        forward_only_(!schedule.HasBackward()) {}

  absl::StatusOr<RankExecution> Run() {
    absl::StatusOr<RankExecution> result = RunProgram();
    if (!result.ok()) {
      if (options_.abort_on_error) transport_.Abort(result.status());
      CancelPendingSends();
    }
    return result;
  }

 private:
  const std::vector<Action>& program() const { return schedule_.ranks[rank_]; }

  absl::StatusOr<RankExecution> RunProgram() {
    LOOM_RETURN_IF_ERROR(CheckBeforeRunning());
    execution_.rank = rank_;
    execution_.actions.reserve(program().size());
    execution_.start = Now();
    for (size_t step = 0; step < program().size(); ++step) {
      const Action& action = program()[step];
      const absl::Time start = Now();
      LOOM_RETURN_IF_ERROR(Execute(static_cast<int64_t>(step), action));
      const absl::Time end = Now();
      execution_.actions.push_back({action, start, end});
      if (IsCompute(action.kind)) execution_.compute += end - start;
    }
    while (!pending_.empty()) LOOM_RETURN_IF_ERROR(WaitOldestSend());
    LOOM_RETURN_IF_ERROR(CheckNothingLeft());
    execution_.end = Now();
    return std::move(execution_);
  }

  absl::Status CheckBeforeRunning() {
    if (transport_.size() != schedule_.num_ranks() || rank_ < 0 || rank_ >= transport_.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "schedule ", schedule_.name, " has ", schedule_.num_ranks(), " ranks, the ",
          transport_.name(), " transport's group has ", transport_.size(), " (this is rank ",
          rank_, ")"));
    }
    if (module_.SupportsSplitBackward()) return absl::OkStatus();
    for (size_t step = 0; step < program().size(); ++step) {
      const ActionKind kind = program()[step].kind;
      if (kind == ActionKind::kBackwardInput || kind == ActionKind::kBackwardWeight) {
        return absl::InvalidArgumentError(absl::StrCat(
            Where(static_cast<int64_t>(step), program()[step]),
            ": the schedule splits backwards into I and W, and this rank's stage module does not "
            "support that (SupportsSplitBackward() is false)"));
      }
    }
    return absl::OkStatus();
  }

  // Where returns "1f1b rank 1 step 4 (1RECV_F2)", the prefix of every error.
  std::string Where(int64_t step, const Action& action) const {
    return absl::StrCat(schedule_.name, " rank ", rank_, " step ", step, " (", action.ToString(),
                        ")");
  }

  absl::Status Execute(int64_t step, const Action& action) {
    switch (action.kind) {
      case ActionKind::kForward:
        return Forward(step, action);
      case ActionKind::kBackward:
      case ActionKind::kBackwardInput:
        return Backward(step, action);
      case ActionKind::kBackwardWeight: {
        absl::Status status = module_.BackwardWeight(action.stage, action.microbatch);
        return status.ok() ? status : Prefix(status, Where(step, action));
      }
      case ActionKind::kSendForward:
      case ActionKind::kSendBackward:
        return Send(step, action);
      case ActionKind::kRecvForward:
      case ActionKind::kRecvBackward:
        return Receive(step, action);
    }
    return absl::InternalError(absl::StrCat(Where(step, action), ": unknown action kind"));
  }

  // Take removes and returns the tensor under `key`, or FailedPrecondition saying
  // what should have produced it.
  absl::StatusOr<Tensor> Take(std::map<Key, Tensor>& tensors, const Key& key, int64_t step,
                                 const Action& action, absl::string_view what) {
    auto it = tensors.find(key);
    if (it == tensors.end()) {
      return absl::FailedPreconditionError(
          absl::StrCat(Where(step, action), ": ", what, " of stage ", key.first,
                       " for microbatch ", key.second, " is not there (", action.ToString(),
                       " runs before the action that produces it)"));
    }
    Tensor tensor = std::move(it->second);
    tensors.erase(it);
    return tensor;
  }

  absl::Status Put(std::map<Key, Tensor>& tensors, const Key& key, Tensor tensor,
                   int64_t step, const Action& action, absl::string_view what) {
    if (!tensors.emplace(key, std::move(tensor)).second) {
      return absl::FailedPreconditionError(
          absl::StrCat(Where(step, action), ": ", what, " of stage ", key.first, " for microbatch ",
                       key.second, " was already produced (an action runs twice)"));
    }
    return absl::OkStatus();
  }

  // CheckTensor refuses a tensor about to enter the module with another shape
  // than the module declared.
  absl::Status CheckTensor(const Tensor& tensor, const std::vector<int64_t>& expected,
                           int64_t step, const Action& action, absl::string_view what) {
    if (tensor.shape() != expected) {
      return absl::FailedPreconditionError(absl::StrCat(
          Where(step, action), ": ", what, " has shape ", ShapeString(tensor.shape()),
          ", the stage module declares ", ShapeString(expected)));
    }
    return absl::OkStatus();
  }

  // CheckCrossing refuses a tensor the module returned for another stage that is
  // not f32: what crosses ranks is f32 activations and gradients.
  absl::Status CheckCrossing(const Tensor& tensor, int64_t step, const Action& action,
                             absl::string_view what) {
    if (tensor.dtype() != DType::kF32) {
      return absl::InvalidArgumentError(absl::StrCat(
          Where(step, action), ": ", what, " is ", DTypeName(tensor.dtype()),
          " ", ShapeString(tensor.shape()), "; tensors between stages are f32"));
    }
    return absl::OkStatus();
  }

  absl::Status Forward(int64_t step, const Action& action) {
    const Key key = {action.stage, action.microbatch};
    Tensor input;
    if (action.stage == 0) {
      absl::StatusOr<Tensor> from_source = module_.Input(action.microbatch);
      if (!from_source.ok()) return Prefix(from_source.status(), Where(step, action));
      input = std::move(*from_source);
    } else {
      LOOM_ASSIGN_OR_RETURN(input, Take(inputs_, key, step, action, "the input"));
    }
    LOOM_RETURN_IF_ERROR(CheckTensor(input, module_.InputShape(action.stage, action.microbatch),
                                     step, action,
                                     absl::StrCat("stage ", action.stage, "'s input for microbatch ",
                                                  action.microbatch)));
    absl::StatusOr<Tensor> output = module_.Forward(action.stage, action.microbatch, input);
    if (!output.ok()) return Prefix(output.status(), Where(step, action));
    LOOM_RETURN_IF_ERROR(CheckCrossing(*output, step, action, "Forward's output"));

    if (action.stage == last_stage_) {
      absl::StatusOr<Tensor> gradient = module_.Loss(action.microbatch, *output);
      if (!gradient.ok()) return Prefix(gradient.status(), Where(step, action));
      // No backward will take the gradient: Loss ran for the loss value.
      if (forward_only_) return absl::OkStatus();
      return Put(output_grads_, key, std::move(*gradient), step, action, "the output gradient");
    }
    if (schedule_.layout.RankOf(action.stage + 1) == rank_) {
      return Put(inputs_, {action.stage + 1, action.microbatch}, std::move(*output), step, action,
                 "the input");
    }
    return Put(outbox_forward_, key, std::move(*output), step, action, "the forward output");
  }

  absl::Status Backward(int64_t step, const Action& action) {
    const Key key = {action.stage, action.microbatch};
    LOOM_ASSIGN_OR_RETURN(Tensor output_grad,
                          Take(output_grads_, key, step, action, "the output gradient"));
    LOOM_RETURN_IF_ERROR(CheckTensor(
        output_grad, module_.OutputShape(action.stage, action.microbatch), step, action,
        absl::StrCat("stage ", action.stage, "'s output gradient for microbatch ",
                     action.microbatch)));
    absl::StatusOr<Tensor> input_grad =
        action.kind == ActionKind::kBackward
            ? module_.Backward(action.stage, action.microbatch, output_grad)
            : module_.BackwardInput(action.stage, action.microbatch, output_grad);
    if (!input_grad.ok()) return Prefix(input_grad.status(), Where(step, action));
    if (action.stage == 0) return absl::OkStatus();  // Nothing before stage 0 needs it.
    LOOM_RETURN_IF_ERROR(CheckCrossing(*input_grad, step, action, "the backward's input gradient"));
    if (schedule_.layout.RankOf(action.stage - 1) == rank_) {
      return Put(output_grads_, {action.stage - 1, action.microbatch}, std::move(*input_grad),
                 step, action, "the output gradient");
    }
    return Put(outbox_backward_, key, std::move(*input_grad), step, action, "the input gradient");
  }

  // PeerOf returns the rank at the other end of a message action, or -1.
  int PeerOf(const Action& action) const {
    const bool forward =
        action.kind == ActionKind::kSendForward || action.kind == ActionKind::kRecvBackward;
    // SEND_F and RECV_B talk to the next stage, SEND_B and RECV_F to the previous.
    const int64_t stage = forward ? action.stage + 1 : action.stage - 1;
    return static_cast<int>(schedule_.layout.RankOf(stage));
  }

  absl::Time Deadline() const { return Now() + options_.timeout; }

  absl::Status Wait(absl::Span<const Request> requests) {
    const absl::Time start = Now();
    absl::Status status = transport_.Wait(requests, Deadline());
    execution_.waiting += Now() - start;
    return status;
  }

  absl::Status Send(int64_t step, const Action& action) {
    const int peer = PeerOf(action);
    if (peer < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(Where(step, action), ": there is no stage to send to"));
    }
    const bool activation = action.kind == ActionKind::kSendForward;
    auto send = std::make_unique<PendingSend>();
    send->step = step;
    send->action = action;
    send->peer = peer;
    LOOM_ASSIGN_OR_RETURN(
        send->tensor,
        Take(activation ? outbox_forward_ : outbox_backward_, {action.stage, action.microbatch},
             step, action, activation ? "the forward output" : "the input gradient"));
    absl::StatusOr<WireHeaderWords> header = EncodeWireHeader(action, send->tensor.shape());
    if (!header.ok()) return Prefix(header.status(), Where(step, action));
    send->header = *header;
    LOOM_ASSIGN_OR_RETURN(absl::Span<const float> values,
                          std::as_const(send->tensor).As<float>());  // f32: CheckCrossing
    absl::Span<const float> payload = values;
    if (send_buffers_ != nullptr) {
      absl::StatusOr<CommBuffer> staged = send_buffers_->Stage(transport_, values);
      if (!staged.ok()) return Prefix(staged.status(), Where(step, action));
      if (!staged->empty()) {
        send->staged = std::move(*staged);
        payload = send->staged.As<float>().first(values.size());
        // The copy is what travels: the tensor's memory can go now.
        send->tensor = Tensor();
      }
    }
    // Kept in pending_ before posting, so that an error below still cancels what
    // was posted before the buffers go away.
    PendingSend& posted = *send;
    pending_.push_back(std::move(send));
    const std::string context = absl::StrCat(Where(step, action), " to rank ", peer);
    absl::StatusOr<Request> header_request =
        transport_.Send(peer, options_.tag_base, AsBytes(absl::MakeConstSpan(posted.header)));
    if (!header_request.ok()) return Prefix(header_request.status(), context);
    posted.requests.push_back(*header_request);
    absl::StatusOr<Request> payload_request =
        transport_.Send(peer, options_.tag_base + 1, AsBytes(payload));
    if (!payload_request.ok()) return Prefix(payload_request.status(), context);
    posted.requests.push_back(*payload_request);
    while (static_cast<int64_t>(pending_.size()) > options_.max_pending_sends) {
      LOOM_RETURN_IF_ERROR(WaitOldestSend());
    }
    return absl::OkStatus();
  }

  absl::Status WaitOldestSend() {
    PendingSend& oldest = *pending_.front();
    absl::Status status = Wait(oldest.requests);
    if (!status.ok()) {
      // Wait finished every request it was given, so the buffers may go.
      const absl::Status error = Prefix(
          status, absl::StrCat(Where(oldest.step, oldest.action), " to rank ", oldest.peer));
      PopOldestSend();
      return error;
    }
    PopOldestSend();
    return absl::OkStatus();
  }

  // PopOldestSend drops the oldest send, whose requests are all finished, and
  // gives its staging buffer back for the next send.
  void PopOldestSend() {
    PendingSend& oldest = *pending_.front();
    if (!oldest.staged.empty()) send_buffers_->Return(std::move(oldest.staged));
    pending_.pop_front();
  }

  // CancelPendingSends finishes every outstanding send before its buffers are
  // freed: a deadline in the past completes what has been taken and cancels the
  // rest, so no peer reads from this rank's memory after Run returns.
  void CancelPendingSends() {
    for (const std::unique_ptr<PendingSend>& send : pending_) {
      if (!send->requests.empty()) {
        transport_.Wait(send->requests, absl::InfinitePast()).IgnoreError();
      }
    }
    while (!pending_.empty()) PopOldestSend();
  }

  absl::Status Receive(int64_t step, const Action& action) {
    const int peer = PeerOf(action);
    if (peer < 0) {
      return absl::FailedPreconditionError(
          absl::StrCat(Where(step, action), ": there is no stage to receive from"));
    }
    const bool activation = action.kind == ActionKind::kRecvForward;
    const Action expected = activation ? Action{ActionKind::kSendForward, action.stage - 1,
                                                action.microbatch}
                                       : Action{ActionKind::kSendBackward, action.stage + 1,
                                                action.microbatch};
    const std::string context =
        absl::StrCat(Where(step, action), " waiting for rank ", peer, "'s ", expected.ToString());

    // Posting fails too once the group is aborted, so it gets the same context.
    WireHeaderWords words = {};
    absl::StatusOr<Request> header_request =
        transport_.Recv(peer, options_.tag_base, AsWritableBytes(absl::MakeSpan(words)));
    if (!header_request.ok()) return Prefix(header_request.status(), context);
    absl::Status status = Wait({*header_request});
    if (!status.ok()) return Prefix(status, context);
    absl::StatusOr<WireHeader> header = DecodeWireHeader(words);
    if (!header.ok()) return Prefix(header.status(), context);
    if (header->send != expected) {
      return absl::FailedPreconditionError(absl::StrCat(
          Where(step, action), " expects rank ", peer, "'s ", expected.ToString(), ", but rank ",
          peer, " sent ", header->send.ToString(), ": the ranks run different schedules"));
    }
    const std::vector<int64_t> shape =
        activation ? module_.InputShape(action.stage, action.microbatch)
                   : module_.OutputShape(action.stage, action.microbatch);
    if (header->shape != shape) {
      return absl::FailedPreconditionError(absl::StrCat(
          Where(step, action), ": rank ", peer, " sent ", expected.ToString(), " with shape ",
          ShapeString(header->shape), " (", header->payload_bytes, " bytes), but rank ", rank_,
          "'s stage module declares ", ShapeString(shape), " as stage ", action.stage, "'s ",
          activation ? "input" : "output gradient", " for microbatch ", action.microbatch));
    }

    // Every byte is received into it, so no zero fill first.
    absl::StatusOr<Tensor> made = Tensor::CreateUninitialized(header->shape);
    if (!made.ok()) return Prefix(made.status(), context);
    Tensor tensor = std::move(*made);
    absl::StatusOr<Request> payload_request =
        transport_.Recv(peer, options_.tag_base + 1, AsWritableBytes(*tensor.As<float>()));
    if (!payload_request.ok()) return Prefix(payload_request.status(), context);
    status = Wait({*payload_request});
    if (!status.ok()) return Prefix(status, context);
    const Key key = {action.stage, action.microbatch};
    return activation ? Put(inputs_, key, std::move(tensor), step, action, "the input")
                      : Put(output_grads_, key, std::move(tensor), step, action,
                            "the output gradient");
  }

  // CheckNothingLeft reports tensors that no action consumed: a schedule missing
  // a send or a compute (only possible when Verify was skipped).
  absl::Status CheckNothingLeft() const {
    const std::pair<const std::map<Key, Tensor>*, absl::string_view> held[] = {
        {&inputs_, "an input"},
        {&output_grads_, "an output gradient"},
        {&outbox_forward_, "a forward output to send"},
        {&outbox_backward_, "an input gradient to send"},
    };
    for (const auto& [tensors, what] : held) {
      if (tensors->empty()) continue;
      const Key& key = tensors->begin()->first;
      return absl::FailedPreconditionError(absl::StrCat(
          schedule_.name, " rank ", rank_, ": the program ended with ", tensors->size(),
          " tensor(s) no action consumed, the first ", what, " of stage ", key.first,
          " for microbatch ", key.second));
    }
    return absl::OkStatus();
  }

  const Schedule& schedule_;
  const ExecutorOptions& options_;
  Transport& transport_;
  StageModule& module_;
  SendBuffers* const send_buffers_;  // Null: payloads go from the tensors.
  const int rank_;
  const int64_t last_stage_;
  const bool forward_only_;  // No B, I or W anywhere: Loss's gradients are dropped.

  RankExecution execution_;
  // Inputs of F (received, or from the previous stage on this rank).
  std::map<Key, Tensor> inputs_;
  // Output gradients of B or I (received, from the next stage here, or Loss).
  std::map<Key, Tensor> output_grads_;
  // Tensors waiting for their SEND_F / SEND_B, by the sending stage.
  std::map<Key, Tensor> outbox_forward_;
  std::map<Key, Tensor> outbox_backward_;
  // unique_ptr: the transport holds pointers into each entry until it completes.
  std::deque<std::unique_ptr<PendingSend>> pending_;
};

}  // namespace

absl::StatusOr<PipelineExecutor> PipelineExecutor::Create(const Schedule& schedule,
                                                          ExecutorOptions options) {
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ExecutorOptions.timeout ", absl::FormatDuration(options.timeout),
                     " is not positive"));
  }
  if (options.max_pending_sends < 1) {
    return absl::InvalidArgumentError(absl::StrCat("ExecutorOptions.max_pending_sends ",
                                                   options.max_pending_sends, " is below 1"));
  }
  if (options.tag_base >= kCommunicatorTagsBegin - 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ExecutorOptions.tag_base ", options.tag_base, ": its tags (tag_base and tag_base + 1) ",
        "must lie below ", kCommunicatorTagsBegin, " (2^40), where the Communicators' begin"));
  }
  Schedule lowered = schedule;
  if (!schedule.HasCommunication()) {
    LOOM_ASSIGN_OR_RETURN(lowered, Lower(schedule));
  }
  LOOM_RETURN_IF_ERROR(CheckActionsInRange(lowered));
  if (options.verify) LOOM_RETURN_IF_ERROR(Verify(lowered));
  return PipelineExecutor(std::move(lowered), options);
}

absl::StatusOr<RankExecution> PipelineExecutor::Run(Transport& transport, StageModule& module,
                                                     SendBuffers* send_buffers) const {
  // Held for the run: another executor on this endpoint with overlapping tags would
  // take this one's messages.
  LOOM_ASSIGN_OR_RETURN(const TagReservation tags,
                        transport.ReserveTags(options_.tag_base, options_.tag_base + 1,
                                              "pipeline executor"));
  return RankRunner(schedule_, options_, transport, module, send_buffers).Run();
}

}  // namespace loom
