// DelayLine: an Ethernet hub whose ports are tap devices and which hands every frame
// to its destination a fixed delay after it arrived: a long link (one way latency
// `delay`) between emulated hosts, where the kernel has no netem (tools/cluster's
// `--delay`). With a rate it is also the switch's port towards each host: frames
// leave it one after another at that rate (serialized, not in bursts), queued up to
// a switch buffer and dropped beyond it. The hosts' own `tc tbf` limits what they
// send (and pushes back on their TCP); the delay line only holds frames, in order,
// per port.
//
//   DelayLineOptions options;
//   options.tap_names = {"loom-h1t", "loom-h2t"};   // made here, then moved by cluster.sh
//   options.delay = absl::Milliseconds(2);
//   absl::StatusOr<std::unique_ptr<DelayLine>> line = DelayLine::Create(options);
//   // ... move each tap into its host's namespace and bring it up ...
//   LOOM_RETURN_IF_ERROR((*line)->Run(stop_flag));  // until *stop_flag
//
// Frames keep the kernel's offloads (a virtio-net header, TSO/GSO segments of up to
// 64 KiB, partial checksums), so forwarding 2 Gbit/s costs a few thousand reads and
// writes a second, not one per MTU. It learns each port's MAC addresses as a switch
// does and floods what it has not learnt (ARP, broadcasts). A frame to a port whose
// link is down is dropped, as a cable would drop it. Taps are not persistent: they
// vanish with the process, so killing it removes them.
#ifndef LOOM_TOOLS_CLUSTER_DELAY_LINE_H_
#define LOOM_TOOLS_CLUSTER_DELAY_LINE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace loom {
namespace cluster {

struct DelayLineOptions {
  // Tap devices to create (2..64 names of 1..15 characters, distinct).
  std::vector<std::string> tap_names;
  // The tun clone device to open (a node of character device 10:200).
  std::string tun_device = "/dev/net/tun";
  // One way: each frame leaves this long after it arrived (0..10 s).
  absl::Duration delay = absl::ZeroDuration();
  // Bytes queued per port before frames are dropped (a switch's buffer); the
  // default holds 1 s of 2 Gbit/s.
  size_t queue_bytes_per_port = size_t{256} << 20;
  // Each port's rate towards its host, bytes a second (frames as the tap hands them
  // over, headers included); 0: as fast as they come. Over the rate, frames wait
  // their turn, and beyond queue_bytes_per_port of waiting they are dropped.
  double bytes_per_second = 0;
};

struct DelayLineCounters {
  uint64_t frames_forwarded = 0;
  uint64_t bytes_forwarded = 0;
  uint64_t frames_dropped = 0;  // queue full or the port's link down
};

class DelayLine {
 public:
  static absl::StatusOr<std::unique_ptr<DelayLine>> Create(const DelayLineOptions& options);
  ~DelayLine();
  DelayLine(const DelayLine&) = delete;
  DelayLine& operator=(const DelayLine&) = delete;

  // Forwards frames until *stop is true (checked at least every 100 ms).
  absl::Status Run(const std::atomic<bool>& stop);

  DelayLineCounters counters() const { return counters_; }

 private:
  struct Frame {
    int64_t due_ns = 0;
    std::vector<uint8_t> bytes;  // virtio-net header, then the Ethernet frame
  };
  struct Port {
    std::string name;
    int fd = -1;
    std::deque<Frame> queue;
    size_t queued_bytes = 0;
    int64_t free_at_ns = 0;  // with a rate: when the port's last frame is through
  };

  explicit DelayLine(const DelayLineOptions& options);
  absl::Status OpenTap(Port& port);
  // Reads every frame waiting on `from` and queues it to its destinations.
  absl::Status Receive(size_t from, int64_t now_ns);
  // Enqueue queues a frame that arrived at `now_ns` to port `to`: due after the
  // port's earlier frames at its rate (if any), plus the delay.
  void Enqueue(size_t to, const uint8_t* data, size_t bytes, int64_t now_ns);
  // Writes the frames whose time has come; returns the earliest due time left
  // (INT64_MAX when every queue is empty).
  int64_t Deliver(int64_t now_ns);
  std::vector<uint8_t> TakeBuffer();

  DelayLineOptions options_;
  std::vector<Port> ports_;
  absl::flat_hash_map<uint64_t, size_t> port_of_mac_;
  std::vector<std::vector<uint8_t>> spare_buffers_;
  std::vector<uint8_t> scratch_;
  DelayLineCounters counters_;
};

}  // namespace cluster
}  // namespace loom

#endif  // LOOM_TOOLS_CLUSTER_DELAY_LINE_H_
