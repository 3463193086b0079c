#!/bin/bash
# DiskTier vs dd on the same directory, in one run: write and read GB/s of SIZE_MB MiB,
# RUNS times, with the ratio tier/dd per row and the medians at the end.
#
#   offload/disk/compare_dd.sh [DIR] [SIZE_MB] [RUNS]      (defaults: /tmp 1024 3)
#
# dd:   dd if=/dev/zero of=F bs=1M count=N oflag=direct conv=fsync   (queue depth 1)
#       dd if=F of=/dev/null bs=1M iflag=direct
# tier: disk_tier_bench_cli --dirs=DIR/tier --size_mb=N --direct=true, once with
#       --engine=io_uring and once with --engine=thread_pool: one Write (checksums,
#       fdatasync, rename, directory fsync) and one Read (every checksum verified).
# Both bypass the page cache (O_DIRECT), both start from a new file, 1 GB = 1e9 bytes.
# Set DISK_TIER_BENCH_CLI to a built binary to skip the Bazel build.
set -euo pipefail
cd "$(dirname "$0")/../.."
DIR="${1:-/tmp}"
SIZE_MB="${2:-1024}"
RUNS="${3:-3}"
export LC_ALL=C

if [ -z "${DISK_TIER_BENCH_CLI:-}" ]; then
  ./bazelw build --config=opt //offload/disk:disk_tier_bench_cli >&2
  DISK_TIER_BENCH_CLI="$(./bazelw info --config=opt bazel-bin 2>/dev/null)/offload/disk/disk_tier_bench_cli"
fi
WORK="$(mktemp -d "$DIR/loom_compare_dd.XXXXXX")"
trap 'rm -rf "$WORK"' EXIT
mkdir "$WORK/tier"

# dd's summary line: "N bytes (...) copied, S s, R GB/s" -> N / S / 1e9.
dd_gbps() {
  awk '/bytes/ && /copied/ {
         for (i = 1; i <= NF; i++) if ($i == "copied,") s = $(i + 1)
         printf "%.3f", $1 / s / 1e9 }'
}

# tier_gbps ENGINE -> "write_gbps read_gbps"
tier_gbps() {
  "$DISK_TIER_BENCH_CLI" --dirs="$WORK/tier" --size_mb="$SIZE_MB" --engine="$1" --direct=true \
    --repeat=1 > "$WORK/cli.out"
  grep '^#' "$WORK/cli.out" | grep -q 'direct_io=1' ||
    echo "warning: the tier could not use O_DIRECT here: $(grep '^#' "$WORK/cli.out")" >&2
  awk '$1 == "write" { w = $4 } $1 == "read" { r = $4 } END { print w, r }' "$WORK/cli.out"
}

fs="$(df -T "$DIR" | awk 'NR == 2 { print $2 " on " $1 }')"
echo "## DiskTier vs dd: $DIR ($fs), $SIZE_MB MiB, $RUNS runs, $(nproc) CPUs"
printf "%-4s %-12s %9s %11s %7s %9s %11s %7s\n" run engine dd_write tier_write ratio \
  dd_read tier_read ratio
: > "$WORK/rows"
for run in $(seq 1 "$RUNS"); do
  rm -f "$WORK/dd.bin"
  ddw="$(dd if=/dev/zero of="$WORK/dd.bin" bs=1M count="$SIZE_MB" oflag=direct conv=fsync 2>&1 | dd_gbps)"
  ddr="$(dd if="$WORK/dd.bin" of=/dev/null bs=1M iflag=direct 2>&1 | dd_gbps)"
  rm -f "$WORK/dd.bin"
  for engine in io_uring thread_pool; do
    read -r tw tr < <(tier_gbps "$engine")
    echo "$run $engine $ddw $tw $ddr $tr" >> "$WORK/rows"
    awk '{ printf "%-4s %-12s %9.3f %11.3f %6.2fx %9.3f %11.3f %6.2fx\n",
             $1, $2, $3, $4, $4 / $3, $5, $6, $6 / $5 }' <<< "$run $engine $ddw $tw $ddr $tr"
  done
done
# Medians over the runs, per engine.
for engine in io_uring thread_pool; do
  awk -v e="$engine" 'BEGIN { n = 0 } $2 == e { dw[n] = $3; tw[n] = $4; dr[n] = $5; tr[n] = $6; n++ }
    function med(a,   i, j, t) {
      for (i = 0; i < n; i++) for (j = i + 1; j < n; j++) if (a[j] < a[i]) { t = a[i]; a[i] = a[j]; a[j] = t }
      return n % 2 ? a[int(n / 2)] : (a[n / 2 - 1] + a[n / 2]) / 2 }
    END { w = med(dw); x = med(tw); r = med(dr); y = med(tr)
          printf "%-4s %-12s %9.3f %11.3f %6.2fx %9.3f %11.3f %6.2fx\n", "med", e, w, x, x / w, r, y, y / r }' \
    "$WORK/rows"
done
