#include "tools/cluster/delay_line.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <poll.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"

namespace loom {
namespace cluster {
namespace {

// struct virtio_net_hdr (flags, gso_type, hdr_len, gso_size, csum_start,
// csum_offset), which the tap puts before each frame with IFF_VNET_HDR; the header
// <linux/virtio_net.h> cannot be included from C++ (a member named `class`).
constexpr size_t kHeaderBytes = 10;
// The largest frame a tap hands over with TSO on: a 64 KiB GSO segment, its
// Ethernet header and the virtio-net header, with room to spare. A read that fills
// the buffer whole may have been cut short, and is dropped.
constexpr size_t kMaxFrameBytes = size_t{1} << 17;
constexpr size_t kMaxPorts = 64;
constexpr int64_t kIdlePollNanos = 100'000'000;

int64_t MonotonicNanos() {
  timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return int64_t{now.tv_sec} * 1'000'000'000 + now.tv_nsec;
}

uint64_t Mac(const uint8_t* bytes) {
  uint64_t mac = 0;
  for (int i = 0; i < 6; ++i) mac = (mac << 8) | bytes[i];
  return mac;
}

absl::Status Errno(const std::string& what) {
  return absl::InternalError(absl::StrCat(what, ": ", strerror(errno)));
}

}  // namespace

absl::StatusOr<std::unique_ptr<DelayLine>> DelayLine::Create(const DelayLineOptions& options) {
  const size_t ports = options.tap_names.size();
  if (ports < 2 || ports > kMaxPorts) {
    return absl::InvalidArgumentError(
        absl::StrCat("a delay line joins 2..", kMaxPorts, " taps, not ", ports));
  }
  absl::flat_hash_set<std::string> seen;
  for (const std::string& name : options.tap_names) {
    if (name.empty() || name.size() >= IFNAMSIZ) {
      return absl::InvalidArgumentError(absl::StrCat("tap name '", name, "' is not 1..",
                                                     IFNAMSIZ - 1, " characters"));
    }
    if (!seen.insert(name).second) {
      return absl::InvalidArgumentError(absl::StrCat("tap name '", name, "' is given twice"));
    }
  }
  if (options.delay < absl::ZeroDuration() || options.delay > absl::Seconds(10)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "delay ", absl::FormatDuration(options.delay), " is not within 0..10s"));
  }
  if (!(options.bytes_per_second >= 0) || options.bytes_per_second > 1e12) {
    return absl::InvalidArgumentError(absl::StrCat(
        "rate ", options.bytes_per_second, " bytes/s is not within 0..1e12 (0: unlimited)"));
  }
  if (options.queue_bytes_per_port < kMaxFrameBytes) {
    return absl::InvalidArgumentError(absl::StrCat("queue_bytes_per_port ",
                                                   options.queue_bytes_per_port,
                                                   " holds no frame of ", kMaxFrameBytes));
  }
  std::unique_ptr<DelayLine> line(new DelayLine(options));
  for (Port& port : line->ports_) {
    absl::Status opened = line->OpenTap(port);
    if (!opened.ok()) return opened;
  }
  return line;
}

DelayLine::DelayLine(const DelayLineOptions& options)
    : options_(options), ports_(options.tap_names.size()), scratch_(kMaxFrameBytes) {
  for (size_t i = 0; i < ports_.size(); ++i) ports_[i].name = options.tap_names[i];
}

DelayLine::~DelayLine() {
  for (Port& port : ports_) {
    if (port.fd >= 0) close(port.fd);
  }
}

absl::Status DelayLine::OpenTap(Port& port) {
  port.fd = open(options_.tun_device.c_str(), O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (port.fd < 0) {
    return Errno(absl::StrCat("open ", options_.tun_device, " (needs root and the tun module)"));
  }
  ifreq request;
  memset(&request, 0, sizeof(request));
  request.ifr_flags = IFF_TAP | IFF_NO_PI | IFF_VNET_HDR;
  memcpy(request.ifr_name, port.name.data(), port.name.size());
  if (ioctl(port.fd, TUNSETIFF, &request) < 0) {
    return Errno(absl::StrCat("TUNSETIFF ", port.name));
  }
  // The kernel may then hand over whole TSO segments with partial checksums, and
  // the tap on the other side accepts them as they are.
  const unsigned offloads = TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6 | TUN_F_TSO_ECN;
  if (ioctl(port.fd, TUNSETOFFLOAD, offloads) < 0) {
    return Errno(absl::StrCat("TUNSETOFFLOAD ", port.name));
  }
  return absl::OkStatus();
}

std::vector<uint8_t> DelayLine::TakeBuffer() {
  if (spare_buffers_.empty()) return {};
  std::vector<uint8_t> buffer = std::move(spare_buffers_.back());
  spare_buffers_.pop_back();
  return buffer;
}

void DelayLine::Enqueue(size_t to, const uint8_t* data, size_t bytes, int64_t now_ns) {
  Port& port = ports_[to];
  if (port.queued_bytes + bytes > options_.queue_bytes_per_port) {
    ++counters_.frames_dropped;
    return;
  }
  int64_t sent_ns = now_ns;
  if (options_.bytes_per_second > 0) {
    // Serialized behind the port's earlier frames, then on the wire for `delay`.
    const double wire_ns = 1e9 * static_cast<double>(bytes - kHeaderBytes) /
                           options_.bytes_per_second;
    port.free_at_ns = std::max(port.free_at_ns, now_ns) + static_cast<int64_t>(wire_ns);
    sent_ns = port.free_at_ns;
  }
  Frame frame;
  frame.due_ns = sent_ns + absl::ToInt64Nanoseconds(options_.delay);
  frame.bytes = TakeBuffer();
  frame.bytes.assign(data, data + bytes);
  port.queued_bytes += bytes;
  port.queue.push_back(std::move(frame));
}

absl::Status DelayLine::Receive(size_t from, int64_t now_ns) {
  for (;;) {
    const ssize_t got = read(ports_[from].fd, scratch_.data(), scratch_.size());
    if (got < 0) {
      if (errno == EAGAIN || errno == EINTR) return absl::OkStatus();
      // A tap whose link is down (cluster.sh link hN down) has nothing to read.
      if (errno == EIO) return absl::OkStatus();
      return Errno(absl::StrCat("read ", ports_[from].name));
    }
    const size_t bytes = static_cast<size_t>(got);
    if (bytes < kHeaderBytes + 14 || bytes == scratch_.size()) {
      ++counters_.frames_dropped;
      continue;
    }
    const uint8_t* ethernet = scratch_.data() + kHeaderBytes;
    port_of_mac_[Mac(ethernet + 6)] = from;
    const bool group = (ethernet[0] & 1) != 0;
    auto known = port_of_mac_.find(Mac(ethernet));
    if (!group && known != port_of_mac_.end()) {
      if (known->second != from) Enqueue(known->second, scratch_.data(), bytes, now_ns);
      continue;
    }
    for (size_t to = 0; to < ports_.size(); ++to) {
      if (to != from) Enqueue(to, scratch_.data(), bytes, now_ns);
    }
  }
}

int64_t DelayLine::Deliver(int64_t now_ns) {
  int64_t next_due = std::numeric_limits<int64_t>::max();
  for (Port& port : ports_) {
    while (!port.queue.empty() && port.queue.front().due_ns <= now_ns) {
      Frame& frame = port.queue.front();
      const ssize_t wrote = write(port.fd, frame.bytes.data(), frame.bytes.size());
      if (wrote == static_cast<ssize_t>(frame.bytes.size())) {
        ++counters_.frames_forwarded;
        counters_.bytes_forwarded += frame.bytes.size();
      } else {
        ++counters_.frames_dropped;  // the port's link is down, or its backlog full
      }
      port.queued_bytes -= frame.bytes.size();
      spare_buffers_.push_back(std::move(frame.bytes));
      port.queue.pop_front();
    }
    if (!port.queue.empty()) next_due = std::min(next_due, port.queue.front().due_ns);
  }
  return next_due;
}

absl::Status DelayLine::Run(const std::atomic<bool>& stop) {
  std::vector<pollfd> polls(ports_.size());
  for (size_t i = 0; i < ports_.size(); ++i) polls[i] = {ports_[i].fd, POLLIN, 0};
  while (!stop.load(std::memory_order_relaxed)) {
    int64_t now_ns = MonotonicNanos();
    const int64_t next_due = Deliver(now_ns);
    const int64_t wait_ns = std::clamp<int64_t>(
        next_due == std::numeric_limits<int64_t>::max() ? kIdlePollNanos : next_due - now_ns, 0,
        kIdlePollNanos);
    const timespec timeout = {static_cast<time_t>(wait_ns / 1'000'000'000),
                              static_cast<long>(wait_ns % 1'000'000'000)};
    const int ready = ppoll(polls.data(), polls.size(), &timeout, nullptr);
    if (ready < 0) {
      if (errno == EINTR) continue;
      return Errno("ppoll");
    }
    if (ready == 0) continue;
    now_ns = MonotonicNanos();
    for (size_t i = 0; i < polls.size(); ++i) {
      if (polls[i].revents & (POLLERR | POLLNVAL)) {
        return absl::InternalError(absl::StrCat("tap ", ports_[i].name, " failed"));
      }
      if (polls[i].revents & POLLIN) {
        absl::Status received = Receive(i, now_ns);
        if (!received.ok()) return received;
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace cluster
}  // namespace loom
