#include "pipeline/lowering.h"

#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "core/status_macros.h"
#include "pipeline/action.h"
#include "pipeline/internal/action_index.h"
#include "pipeline/internal/structure.h"

namespace loom {
namespace {

using pipeline_internal::ActionIndex;

// One message between stages on different ranks.
struct Message {
  Action send;
  int64_t send_rank = 0;
  int64_t recv_rank = 0;
  int64_t consumer = 0;  // Index of the consuming compute in recv_rank's list.
};

// Placer builds the lowered programs by running the ranks' compute lists under
// rendezvous semantics and writing down every action in the order it happens (see
// the header): one global sequence of events that every rank's program follows,
// which is what makes the result deadlock free.
class Placer {
 public:
  Placer(const Schedule& schedule, std::vector<Message> messages,
         std::vector<std::vector<int64_t>> produces, std::vector<std::vector<int64_t>> consumes)
      : schedule_(schedule),
        messages_(std::move(messages)),
        produces_(std::move(produces)),
        consumes_(std::move(consumes)),
        received_(messages_.size(), false),
        next_(schedule.num_ranks(), 0),
        pending_(schedule.num_ranks(), -1),
        programs_(schedule.num_ranks()) {}

  std::vector<std::vector<Action>> Run() {
    while (true) {
      bool progress = true;
      while (progress) {
        progress = false;
        for (int64_t rank = 0; rank < num_ranks(); ++rank) progress |= RunComputes(rank);
        progress |= DeliverToWaitingConsumers();
      }
      // Every rank is blocked. A pending send is delivered where its receiver
      // stands, ahead of its consumer; with none pending the compute order is
      // circular and the rest is written down with the plain rule.
      int64_t forced = -1;
      for (int64_t rank = 0; rank < num_ranks() && forced < 0; ++rank) forced = pending_[rank];
      if (forced < 0) break;
      Deliver(forced);
    }
    FinishPlainly();
    return std::move(programs_);
  }

 private:
  int64_t num_ranks() const { return schedule_.num_ranks(); }
  int64_t size(int64_t rank) const { return static_cast<int64_t>(schedule_.ranks[rank].size()); }

  // ReadyForConsumer is true when message `id`'s receiver has its consumer next:
  // delivered now, the receive lands right before the consumer.
  bool ReadyForConsumer(int64_t id) const {
    return id >= 0 && next_[messages_[id].recv_rank] == messages_[id].consumer;
  }

  // DeliverToWaitingConsumers delivers every pending send whose receiver has its
  // consumer next. Where a rank both sends and receives that way, its send goes
  // first (a blocking executor then does not hold up the next rank for its own
  // receive); a cycle of such ranks is broken at its lowest rank.
  bool DeliverToWaitingConsumers() {
    bool delivered = false;
    bool progress = true;
    while (progress) {
      progress = false;
      for (int64_t rank = 0; rank < num_ranks(); ++rank) {
        const int64_t id = pending_[rank];
        if (ReadyForConsumer(id) && !ReadyForConsumer(pending_[messages_[id].recv_rank])) {
          Deliver(id);
          progress = delivered = true;
        }
      }
      for (int64_t rank = 0; rank < num_ranks() && !progress; ++rank) {
        if (ReadyForConsumer(pending_[rank])) {
          Deliver(pending_[rank]);
          progress = delivered = true;
        }
      }
    }
    return delivered;
  }

  // RunComputes runs `rank` until it must send, lacks an input, or is done.
  bool RunComputes(int64_t rank) {
    bool ran = false;
    while (pending_[rank] < 0 && next_[rank] < size(rank)) {
      const int64_t step = next_[rank];
      const int64_t input = consumes_[rank][step];
      if (input >= 0 && !received_[input]) break;
      programs_[rank].push_back(schedule_.ranks[rank][step]);
      ++next_[rank];
      pending_[rank] = produces_[rank][step];
      ran = true;
    }
    return ran;
  }

  void Deliver(int64_t id) {
    const Message& message = messages_[id];
    programs_[message.send_rank].push_back(message.send);
    programs_[message.recv_rank].push_back(*MatchingAction(message.send));
    received_[id] = true;
    pending_[message.send_rank] = -1;
  }

  // FinishPlainly writes what a deadlocked run left over: each send right after
  // its producer, each receive not yet placed right before its consumer.
  void FinishPlainly() {
    for (int64_t rank = 0; rank < num_ranks(); ++rank) {
      if (pending_[rank] >= 0) programs_[rank].push_back(messages_[pending_[rank]].send);
      for (int64_t step = next_[rank]; step < size(rank); ++step) {
        const int64_t input = consumes_[rank][step];
        if (input >= 0 && !received_[input]) {
          programs_[rank].push_back(*MatchingAction(messages_[input].send));
        }
        programs_[rank].push_back(schedule_.ranks[rank][step]);
        if (produces_[rank][step] >= 0)
          programs_[rank].push_back(messages_[produces_[rank][step]].send);
      }
    }
  }

  const Schedule& schedule_;
  const std::vector<Message> messages_;
  // produces_[r][k] / consumes_[r][k]: the message compute k of rank r sends /
  // needs, or -1.
  const std::vector<std::vector<int64_t>> produces_;
  const std::vector<std::vector<int64_t>> consumes_;
  std::vector<bool> received_;
  std::vector<int64_t> next_;     // Next compute of each rank.
  std::vector<int64_t> pending_;  // The send a rank must complete first, or -1.
  std::vector<std::vector<Action>> programs_;
};

}  // namespace

absl::StatusOr<Schedule> Lower(const Schedule& schedule) {
  for (int64_t rank = 0; rank < schedule.num_ranks(); ++rank) {
    for (int64_t step = 0; step < static_cast<int64_t>(schedule.ranks[rank].size()); ++step) {
      if (IsCommunication(schedule.ranks[rank][step].kind)) {
        return pipeline_internal::ScheduleError(
            absl::StatusCode::kInvalidArgument, schedule, {{rank, step}},
            absl::StrCat("Lower takes a compute-only schedule; ",
                         pipeline_internal::Describe(schedule, {rank, step}), " is a message"));
      }
    }
  }
  LOOM_ASSIGN_OR_RETURN(const ActionIndex index, pipeline_internal::IndexSchedule(schedule));
  LOOM_RETURN_IF_ERROR(pipeline_internal::CheckComplete(schedule, index));

  const StageLayout& layout = schedule.layout;
  std::vector<Message> messages;
  std::vector<std::vector<int64_t>> produces(schedule.num_ranks());
  std::vector<std::vector<int64_t>> consumes(schedule.num_ranks());
  for (int64_t rank = 0; rank < schedule.num_ranks(); ++rank) {
    produces[rank].assign(schedule.ranks[rank].size(), -1);
    consumes[rank].assign(schedule.ranks[rank].size(), -1);
  }
  for (int64_t rank = 0; rank < schedule.num_ranks(); ++rank) {
    const std::vector<Action>& actions = schedule.ranks[rank];
    for (int64_t step = 0; step < static_cast<int64_t>(actions.size()); ++step) {
      const std::optional<Action> send = pipeline_internal::OutgoingMessage(layout, actions[step]);
      if (!send.has_value()) continue;
      const Action recv = *MatchingAction(*send);
      // The consumer: F of the next stage, or the input-gradient backward (B or I)
      // of the previous one; CheckComplete guaranteed it exists.
      const std::optional<Action> consumer =
          recv.kind == ActionKind::kRecvForward
              ? std::optional<Action>(Action{ActionKind::kForward, recv.stage, recv.microbatch})
              : pipeline_internal::BackwardInput(index, recv.stage, recv.microbatch);
      const ActionPosition at_consumer = *index.Find(*consumer);
      const int64_t id = static_cast<int64_t>(messages.size());
      messages.push_back({*send, rank, at_consumer.rank, at_consumer.step});
      produces[rank][step] = id;
      consumes[at_consumer.rank][at_consumer.step] = id;
    }
  }
  Schedule lowered;
  lowered.name = schedule.name;
  lowered.layout = schedule.layout;
  lowered.num_microbatches = schedule.num_microbatches;
  lowered.ranks =
      Placer(schedule, std::move(messages), std::move(produces), std::move(consumes)).Run();
  return lowered;
}

}  // namespace loom
