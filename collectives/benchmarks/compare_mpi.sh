#!/bin/bash
# Loom's algorithms over the MPI transport against MPI's own collectives (Open MPI's
# MPI_Allreduce and kin, Algorithm::kNative), in one run: collective_bench
# --transport=mpi with --algo=auto, then with --algo=native, both checked, f32 sum,
# out of place, 4 KiB .. 64 MiB and a latency pass at 8 B .. 4 KiB. Prints one row
# per size with both bus bandwidths and the ratio Loom / MPI.
#
#   collectives/benchmarks/compare_mpi.sh [RANKS] [OP] [ITERS] [LATENCY_ITERS]
#
# collective_bench starts itself under mpirun on this host (Open MPI's vader BTL);
# across hosts, start it with your own mpirun (see collectives/transport/mpi/README.md).
set -euo pipefail
cd "$(dirname "$0")/../.."
RANKS="${1:-2}"
OP="${2:-all_reduce}"
ITERS="${3:-30}"
LATENCY_ITERS="${4:-5000}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

./bazelw build -c opt //tools:collective_bench >&2
BENCH="$(./bazelw info -c opt bazel-bin 2>/dev/null)/tools/collective_bench"

run() {  # ALGO MIN MAX ITERS -> rows "size algo time busbw wrong"
  "$BENCH" --transport=mpi --ranks="$RANKS" --op="$OP" --dtype=f32 --redop=sum --check \
    --algo="$1" --min_bytes="$2" --max_bytes="$3" --iters="$4" --warmup=5 |
    awk '!/^#/ && NF >= 9 && $1 ~ /^[0-9]+$/ { print $1, $5, $6, $8, $9 }'
}

report() {  # TITLE MIN MAX ITERS
  run auto "$2" "$3" "$4" > "$WORK/loom"
  run native "$2" "$3" "$4" > "$WORK/native"
  echo "## $1"
  printf "%10s %12s %12s %12s %12s %8s %10s %10s\n" "size(B)" "loom_algo" "loom_us" \
    "loom_busbw" "mpi_busbw" "ratio" "mpi_us" "#wrong"
  join "$WORK/loom" "$WORK/native" | awk '{
    ratio = ($8 > 0) ? $4 / $8 : 0
    printf "%10s %12s %12.1f %12.2f %12.2f %7.2fx %10.1f %5d/%-4d\n", $1, $2, $3, $4, $8, ratio, $7, $5, $9
  }'
}

echo "# $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "# $(mpirun --version 2>/dev/null | head -n1), Loom $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "# $OP f32 sum, $RANKS ranks on one host, Loom (--algo=auto over the mpi transport) vs MPI's own (--algo=native)"
report "bandwidth, $ITERS iterations" 4K 64M "$ITERS"
report "latency, $LATENCY_ITERS iterations" 8 4K "$LATENCY_ITERS"
