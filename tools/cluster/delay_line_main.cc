// delay_line: joins tap devices as a hub that delivers every frame a fixed delay
// after it arrived (tools/cluster/cluster.sh --delay starts it; see delay_line.h).
//
//   delay_line --taps=loom-h1t,loom-h2t --delay=2ms [--rate_bytes_per_second=250e6
//              --queue_bytes=2097152]
//
// Runs until SIGTERM or SIGINT; its taps vanish with it.
#include <signal.h>

#include <atomic>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "tools/cluster/delay_line.h"

ABSL_FLAG(std::string, taps, "", "comma-separated names of the tap devices to create (2..64)");
ABSL_FLAG(absl::Duration, delay, absl::ZeroDuration(), "one-way delay of every frame (0..10s)");
ABSL_FLAG(std::string, tun_device, "/dev/net/tun",
          "the tun clone device (character device 10:200) to open");
ABSL_FLAG(double, rate_bytes_per_second, 0,
          "each port's rate towards its host, bytes a second (0: unlimited)");
ABSL_FLAG(int64_t, queue_bytes, 256 << 20,
          "bytes waiting per port before frames are dropped (the switch's buffer)");

namespace {
std::atomic<bool> stop{false};
void Stop(int) { stop.store(true); }
}  // namespace

int main(int argc, char** argv) {
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    fprintf(stderr, "delay_line: unexpected argument '%s'\n", rest[1]);
    return 2;
  }
  loom::cluster::DelayLineOptions options;
  options.tap_names = absl::StrSplit(absl::GetFlag(FLAGS_taps), ',', absl::SkipEmpty());
  options.delay = absl::GetFlag(FLAGS_delay);
  options.tun_device = absl::GetFlag(FLAGS_tun_device);
  options.bytes_per_second = absl::GetFlag(FLAGS_rate_bytes_per_second);
  const int64_t queue_bytes = absl::GetFlag(FLAGS_queue_bytes);
  if (queue_bytes <= 0) {
    fprintf(stderr, "delay_line: --queue_bytes=%lld is not positive\n",
            static_cast<long long>(queue_bytes));
    return 2;
  }
  options.queue_bytes_per_port = static_cast<size_t>(queue_bytes);
  auto line = loom::cluster::DelayLine::Create(options);
  if (!line.ok()) {
    fprintf(stderr, "delay_line: %s\n", line.status().ToString().c_str());
    return 2;
  }
  struct sigaction action = {};
  action.sa_handler = Stop;
  sigaction(SIGTERM, &action, nullptr);
  sigaction(SIGINT, &action, nullptr);
  fprintf(stderr, "delay_line: %zu taps, delay %s, rate %.0f bytes/s (0: unlimited), queue %zu bytes\n",
          options.tap_names.size(), absl::FormatDuration(options.delay).c_str(),
          options.bytes_per_second, options.queue_bytes_per_port);
  const absl::Status ran = (*line)->Run(stop);
  const loom::cluster::DelayLineCounters counters = (*line)->counters();
  fprintf(stderr, "delay_line: forwarded %llu frames (%llu bytes), dropped %llu\n",
          static_cast<unsigned long long>(counters.frames_forwarded),
          static_cast<unsigned long long>(counters.bytes_forwarded),
          static_cast<unsigned long long>(counters.frames_dropped));
  if (!ran.ok()) {
    fprintf(stderr, "delay_line: %s\n", ran.ToString().c_str());
    return 1;
  }
  return 0;
}
