#!/bin/bash
# Loom vs Open MPI (and Gloo, on Debian's libgloo-dev, which ./bazelw installs for
# the gloo transport; skipped where its headers are missing) all-reduce on
# this machine, in one run: f32 sum, 2 ranks, out of place, 4 KiB .. 64 MiB, plus a
# latency pass at 8 B .. 4 KiB. Prints one row per size with both bus bandwidths
# and their ratio, then the memory-bandwidth bound.
#
#   collectives/benchmarks/compare_openmpi.sh [ITERS] [LATENCY_ITERS]
#
# Open MPI runs with its shared-memory BTL (vader, CMA single copy where the kernel
# allows) and its default (tuned) algorithm choice; Loom runs collective_bench
# --transport=shm --algo=auto; Gloo (collectives/benchmarks/gloo_allreduce_bench.cc,
# built only if /usr/include/gloo/allreduce.h exists) forks its ranks itself and runs
# gloo::allreduce with the ring algorithm, out of place, over its TCP device on
# 127.0.0.1 (loopback sockets: Gloo has no shared-memory transport). Loom runs twice:
# with ordinary buffers (large messages pulled with CMA) and with --shared_buffers
# (inputs and outputs in SharedBuffers, which the peer maps and copies with memcpy):
# the shared_busbw columns. All time the same way: warm-up, barrier, timed
# iterations, the slowest rank's mean.
set -euo pipefail
cd "$(dirname "$0")/../.."
ITERS="${1:-40}"
LATENCY_ITERS="${2:-2000}"
WORK="$(mktemp -d)"
touch "$WORK/gloo"
trap 'rm -rf "$WORK"' EXIT

./bazelw build -c opt //tools:collective_bench >&2
BENCH="$(./bazelw info -c opt bazel-bin 2>/dev/null)/tools/collective_bench"
mpicc -O3 -o "$WORK/mpi_allreduce" collectives/benchmarks/mpi_allreduce_bench.c
if [ -f /usr/include/gloo/allreduce.h ] && [ -f /usr/include/gloo/transport/tcp/device.h ]; then
  # Optional: without a working Gloo the report just leaves out its columns.
  g++ -O2 -std=c++17 -o "$WORK/gloo_allreduce" collectives/benchmarks/gloo_allreduce_bench.cc \
    -lgloo -pthread >&2 || { echo "warning: Gloo bench did not build; no Gloo column" >&2; rm -f "$WORK/gloo_allreduce"; }
fi
gcc -O2 -o "$WORK/membw" collectives/benchmarks/membw.c
MPIRUN=(mpirun --allow-run-as-root --oversubscribe -np 2 --bind-to none --mca btl self,vader)

run_pass() {  # MIN MAX ITERS WARMUP -> "$WORK/mpi" and "$WORK/loom" rows "size time busbw wrong"
  "${MPIRUN[@]}" "$WORK/mpi_allreduce" "$1" "$2" "$3" "$4" > "$WORK/mpi"
  "$BENCH" --transport=shm --ranks=2 --op=all_reduce --dtype=f32 --redop=sum --check \
    --min_bytes="$1" --max_bytes="$2" --iters="$3" --warmup="$4" |
    awk '!/^#/ && NF >= 9 { print $1, $6, $8, $9 }' > "$WORK/loom"
  # The same with inputs and outputs in SharedBuffers (peers map them: no CMA).
  "$BENCH" --transport=shm --ranks=2 --op=all_reduce --dtype=f32 --redop=sum --check \
    --shared_buffers --min_bytes="$1" --max_bytes="$2" --iters="$3" --warmup="$4" |
    awk '!/^#/ && NF >= 9 { print $1, $6, $8, $9 }' > "$WORK/shared"
  if [ -x "$WORK/gloo_allreduce" ]; then
    # A reference, not the subject: if it fails, say so and go on without it.
    "$WORK/gloo_allreduce" 2 "$1" "$2" "$3" "$4" > "$WORK/gloo" ||
      { echo "warning: the Gloo run failed; no Gloo column" >&2; : > "$WORK/gloo"; }
  fi
}

report() {  # TITLE
  echo "## $1"
  printf "%10s %14s %14s %8s %12s %12s %10s %13s %8s" "size(B)" "openmpi_busbw" "loom_busbw" \
    "ratio" "openmpi_us" "loom_us" "lat_ratio" "shared_busbw" "ratio"
  [ -s "$WORK/gloo" ] && printf " %12s %10s %10s" "gloo_busbw" "gloo_us" "vs_gloo"
  echo
  # Join the rows by size, in the order of the Open MPI run.
  awk 'FILENAME == ARGV[1] { loom[$1] = $2 " " $3 " " $4; next }
       FILENAME == ARGV[2] { shared[$1] = " " $2 " " $3 " " $4; next }
       FILENAME == ARGV[3] { gloo[$1] = " " $2 " " $3 " " $4; next }
       ($1 in loom) && ($1 in shared) { print $0, loom[$1] shared[$1] gloo[$1] }' \
    "$WORK/loom" "$WORK/shared" "$WORK/gloo" "$WORK/mpi" > "$WORK/joined3"
  awk -v gloo="$([ -s "$WORK/gloo" ] && echo 1 || echo 0)" '{
    # fields: size mpi_t mpi_bw mpi_wrong loom_t loom_bw loom_wrong shared_t shared_bw
    #         shared_wrong [gloo_t gloo_bw gloo_wrong]
    if ($4 != 0 || $7 != 0 || $10 != 0 || (gloo == 1 && $13 != 0)) {
      printf "WRONG RESULTS at %s: openmpi %s, loom %s, loom shared %s, gloo %s\n", $1, $4, $7, $10, $13
      bad = 1
    }
    printf "%10s %14.2f %14.2f %7.2fx %12.1f %12.1f %9.2fx %13.2f %7.2fx", $1, $3, $6, $6 / $3, $2, $5,
      $2 / $5, $9, $9 / $3
    # vs_gloo: the Gloo time over the Loom time (for bandwidth rows, also the busbw ratio).
    if (gloo == 1) printf " %12.2f %10.1f %9.2fx", $12, $11, $11 / $5
    printf "\n"
  } END { exit bad }' "$WORK/joined3"
}

echo "# $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ *//')"
echo "# Open MPI $(mpirun --version 2>/dev/null | head -1 | awk '{print $NF}'), Loom $(git rev-parse --short HEAD)"
run_pass 4096 67108864 "$ITERS" 5
report "bandwidth: all_reduce f32 sum, 2 ranks, $ITERS iterations"
run_pass 8 4096 "$LATENCY_ITERS" 100
report "latency: all_reduce f32 sum, 2 ranks, $LATENCY_ITERS iterations"
MEMBW="$("$WORK/membw" 2)"
echo "## bound"
echo "memory bandwidth, 2 processes copying at once (read + write bytes): $MEMBW GB/s"
awk -v b="$MEMBW" 'BEGIN { printf "all_reduce bound for 2 ranks of private buffers: %.2f GB/s busbw (each rank reads its input and the peer half and writes its output: 2.5 bytes of memory traffic per vector byte per rank, 5 for both)\n", b / 5 }'
