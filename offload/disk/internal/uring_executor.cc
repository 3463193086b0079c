#include "offload/disk/internal/uring_executor.h"

#include <errno.h>
#include <liburing.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "absl/strings/str_cat.h"
#include "offload/disk/internal/posix_file.h"

namespace loom {
namespace disk_internal {
namespace {

// user_data of cancellation requests; ordinary operations carry their slot index.
constexpr uint64_t kCancelTag = std::numeric_limits<uint64_t>::max();

// io_uring read/write lengths are 32-bit; longer operations continue as partials.
constexpr size_t kMaxSqeBytes = size_t{1} << 30;

__kernel_timespec ToKernelTimespec(absl::Duration d) {
  const int64_t ns = std::max<int64_t>(absl::ToInt64Nanoseconds(d), 1);
  __kernel_timespec ts;
  ts.tv_sec = ns / 1000000000;
  ts.tv_nsec = ns % 1000000000;
  return ts;
}

}  // namespace

struct UringExecutor::Lane {
  io_uring ring{};
  bool initialized = false;
  std::vector<BounceBuffer> bounce;

  ~Lane() {
    if (initialized) io_uring_queue_exit(&ring);
  }
};

absl::Status UringExecutor::Probe() {
  io_uring ring{};
  const int ret = io_uring_queue_init(4, &ring, 0);
  if (ret < 0) {
    return absl::FailedPreconditionError(ErrnoToStatus(-ret, "io_uring_queue_init(4)").message());
  }
  io_uring_probe* probe = io_uring_get_probe_ring(&ring);
  absl::Status status;
  if (probe == nullptr) {
    status = absl::FailedPreconditionError("io_uring_get_probe_ring failed (kernel before 5.6)");
  } else {
    for (int op : {IORING_OP_READ, IORING_OP_WRITE, IORING_OP_FSYNC, IORING_OP_ASYNC_CANCEL}) {
      if (!io_uring_opcode_supported(probe, op)) {
        status =
            absl::FailedPreconditionError(absl::StrCat("this kernel's io_uring lacks opcode ", op));
        break;
      }
    }
    io_uring_free_probe(probe);
  }
  io_uring_queue_exit(&ring);
  return status;
}

absl::StatusOr<std::unique_ptr<UringExecutor>> UringExecutor::Create(int queue_depth,
                                                                     absl::Duration timeout) {
  if (queue_depth < 1 || queue_depth > 4096) {
    return absl::InvalidArgumentError(
        absl::StrCat("io_uring queue depth must be in [1, 4096], got ", queue_depth));
  }
  if (timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        absl::StrCat("io_uring timeout must be positive, got ", absl::FormatDuration(timeout)));
  }
  absl::Status probe = Probe();
  if (!probe.ok()) return probe;
  std::unique_ptr<UringExecutor> executor(new UringExecutor(queue_depth, timeout));
  // One ready lane proves that a ring of the requested depth can be made.
  auto lane = executor->AcquireLane();
  if (!lane.ok()) return absl::FailedPreconditionError(lane.status().message());
  executor->ReleaseLane(std::move(lane).value());
  return executor;
}

UringExecutor::UringExecutor(int queue_depth, absl::Duration timeout)
    : queue_depth_(queue_depth), timeout_(timeout) {}

UringExecutor::~UringExecutor() = default;

absl::StatusOr<std::unique_ptr<UringExecutor::Lane>> UringExecutor::AcquireLane() {
  {
    MutexLock lock(&mu_);
    if (!idle_lanes_.empty()) {
      std::unique_ptr<Lane> lane = std::move(idle_lanes_.back());
      idle_lanes_.pop_back();
      return lane;
    }
  }
  auto lane = std::make_unique<Lane>();
  const int ret = io_uring_queue_init(static_cast<unsigned>(queue_depth_), &lane->ring, 0);
  if (ret < 0) return ErrnoToStatus(-ret, absl::StrCat("io_uring_queue_init(", queue_depth_, ")"));
  lane->initialized = true;
  lane->bounce.resize(queue_depth_);
  return lane;
}

void UringExecutor::ReleaseLane(std::unique_ptr<Lane> lane) {
  MutexLock lock(&mu_);
  idle_lanes_.push_back(std::move(lane));
}

absl::Status UringExecutor::Run(size_t count, const PrepareFn& prepare,
                                const CompleteFn& complete) {
  if (count == 0) return absl::OkStatus();
  auto lane = AcquireLane();
  if (!lane.ok()) return lane.status();
  bool abandon = false;
  absl::Status status = RunOnLane(**lane, count, prepare, complete, abandon);
  if (abandon) {
    // The kernel may still own buffers of this lane: leak it on purpose.
    static_cast<void>(lane->release());
  } else {
    ReleaseLane(std::move(lane).value());
  }
  return status;
}

absl::Status UringExecutor::RunOnLane(Lane& lane, size_t count, const PrepareFn& prepare,
                                      const CompleteFn& complete, bool& abandon) {
  io_uring* ring = &lane.ring;
  struct Slot {
    IoOp op;
    size_t index = 0;
    size_t done = 0;
    bool busy = false;
  };
  const int depth = static_cast<int>(std::min<size_t>(count, queue_depth_));
  std::vector<Slot> slots(depth);
  std::vector<int> free_slots;
  for (int s = depth - 1; s >= 0; --s) free_slots.push_back(s);
  absl::Status status;
  size_t next = 0;
  int in_flight = 0;

  auto get_sqe = [&]() -> io_uring_sqe* {
    io_uring_sqe* sqe = io_uring_get_sqe(ring);
    if (sqe == nullptr) {  // the submission queue is full: hand it to the kernel first
      io_uring_submit(ring);
      sqe = io_uring_get_sqe(ring);
    }
    return sqe;
  };
  auto retire = [&](int s) {
    slots[s].busy = false;
    free_slots.push_back(s);
    --in_flight;
  };
  // Queues slot s's operation from where it stands (its first or a continuing part).
  auto queue = [&](int s) -> bool {
    io_uring_sqe* sqe = get_sqe();
    if (sqe == nullptr) return false;
    const Slot& slot = slots[s];
    const IoOp& op = slot.op;
    const unsigned len = static_cast<unsigned>(std::min(op.length - slot.done, kMaxSqeBytes));
    switch (op.kind) {
      case IoKind::kRead:
        io_uring_prep_read(sqe, op.fd, op.data + slot.done, len, op.offset + slot.done);
        break;
      case IoKind::kWrite:
        io_uring_prep_write(sqe, op.fd, op.data + slot.done, len, op.offset + slot.done);
        break;
      case IoKind::kDataSync:
        io_uring_prep_fsync(sqe, op.fd, IORING_FSYNC_DATASYNC);
        break;
    }
    io_uring_sqe_set_data64(sqe, static_cast<uint64_t>(s));
    return true;
  };
  auto describe = [](const Slot& slot) {
    const IoOp& op = slot.op;
    if (op.kind == IoKind::kDataSync) return absl::StrCat("fdatasync(", op.path, ")");
    return absl::StrCat(IoKindName(op.kind), "(", op.path, ", ", op.length - slot.done,
                        " bytes at offset ", op.offset + slot.done, ")");
  };
  auto handle = [&](uint64_t user_data, int res) {
    if (user_data == kCancelTag) return;
    const int s = static_cast<int>(user_data);
    Slot& slot = slots[s];
    if (!status.ok()) {  // after the first error, operations only retire
      retire(s);
      return;
    }
    if (res == -EINTR || res == -EAGAIN) {
      if (!queue(s)) {
        status = absl::InternalError("io_uring submission queue full");
        retire(s);
      }
      return;
    }
    if (res < 0) {
      status = ErrnoToStatus(-res, absl::StrCat("io_uring ", describe(slot)));
      retire(s);
      return;
    }
    if (slot.op.kind != IoKind::kDataSync) {
      if (res == 0) {
        status =
            slot.op.kind == IoKind::kRead
                ? absl::DataLossError(
                      absl::StrCat("io_uring ", describe(slot), ": unexpected end of file"))
                : absl::InternalError(absl::StrCat("io_uring ", describe(slot), " wrote nothing"));
        retire(s);
        return;
      }
      slot.done += static_cast<size_t>(res);
      if (slot.done < slot.op.length) {  // short transfer: continue where it stopped
        if (!queue(s)) {
          status = absl::InternalError("io_uring submission queue full");
          retire(s);
        }
        return;
      }
    }
    status = complete(slot.index, slot.op);
    retire(s);
  };
  auto reap = [&]() {
    unsigned head;
    unsigned seen = 0;
    io_uring_cqe* cqe;
    io_uring_for_each_cqe(ring, head, cqe) {
      handle(cqe->user_data, cqe->res);
      ++seen;
    }
    io_uring_cq_advance(ring, seen);
  };

  while (true) {
    while (status.ok() && next < count && !free_slots.empty()) {
      const int s = free_slots.back();
      absl::StatusOr<IoOp> op = prepare(next, lane.bounce[s]);
      if (!op.ok()) {
        status = op.status();
        break;
      }
      free_slots.pop_back();
      slots[s] = Slot{*op, next, 0, true};
      ++next;
      ++in_flight;
      if (!queue(s)) {
        status = absl::InternalError("io_uring submission queue full");
        retire(s);
      }
    }
    if (in_flight == 0) break;
    const int submitted = io_uring_submit(ring);
    if (submitted < 0 && submitted != -EINTR && submitted != -EAGAIN && submitted != -EBUSY) {
      // Nothing was handed to the kernel; what is already there is unknown to us.
      abandon = true;
      return ErrnoToStatus(-submitted, "io_uring_submit");
    }
    __kernel_timespec ts = ToKernelTimespec(timeout_);
    io_uring_cqe* cqe = nullptr;
    const int waited = io_uring_wait_cqe_timeout(ring, &cqe, &ts);
    if (waited == 0 || waited == -EINTR) {
      reap();
      continue;
    }
    // No completion within the timeout (or the wait itself failed): cancel and drain.
    const Slot* stuck = nullptr;
    for (const Slot& slot : slots) {
      if (slot.busy) stuck = &slot;
    }
    absl::Status failure =
        waited == -ETIME ? absl::DeadlineExceededError(absl::StrCat(
                               "io_uring: no I/O completed within ", absl::FormatDuration(timeout_),
                               "; ", in_flight, " in flight, e.g. ", stuck ? describe(*stuck) : ""))
                         : ErrnoToStatus(-waited, "io_uring_wait_cqe_timeout");
    if (status.ok()) status = std::move(failure);
    for (int s = 0; s < depth; ++s) {
      if (!slots[s].busy) continue;
      io_uring_sqe* sqe = get_sqe();
      if (sqe == nullptr) break;
      io_uring_prep_cancel64(sqe, static_cast<uint64_t>(s), 0);
      io_uring_sqe_set_data64(sqe, kCancelTag);
    }
    io_uring_submit(ring);
    const absl::Time deadline = absl::Now() + timeout_;
    while (in_flight > 0 && absl::Now() < deadline) {
      __kernel_timespec left = ToKernelTimespec(deadline - absl::Now());
      const int r = io_uring_wait_cqe_timeout(ring, &cqe, &left);
      if (r == 0)
        reap();
      else if (r != -EINTR && r != -ETIME)
        break;
    }
    reap();
    if (in_flight > 0) {
      abandon = true;
      return absl::Status(status.code(),
                          absl::StrCat(status.message(), "; ", in_flight,
                                       " I/Os could not be cancelled, their ring and buffers "
                                       "are abandoned"));
    }
    return status;
  }
  return status;
}

}  // namespace disk_internal
}  // namespace loom
