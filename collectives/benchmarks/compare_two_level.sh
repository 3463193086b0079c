#!/bin/bash
# The two-level layout over MPI in one run: all-reduce with the hierarchical
# algorithm on RANKS ranks at PER_NODE per (emulated) node, its intra-node phases
# over MPI (--node_transport=none) and over Loom's shm transport
# (--node_transport=shm), beside MPI's own MPI_Allreduce (--algo=native). f32 sum,
# checked, out of place. Prints one row per size with the three bus bandwidths and
# the ratio shm-inside / MPI-only.
#
#   collectives/benchmarks/compare_two_level.sh [RANKS] [PER_NODE] [ITERS]
#
# On one host the "nodes" are emulated, so the inter-node phase also runs over
# shared memory (Open MPI's vader); across real hosts start collective_bench with
# your own mpirun and drop --ranks_per_node (MPI finds the layout).
set -euo pipefail
cd "$(dirname "$0")/../.."
RANKS="${1:-4}"
PER_NODE="${2:-2}"
ITERS="${3:-20}"
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

./bazelw build -c opt //tools:collective_bench >&2
BENCH="$(./bazelw info -c opt bazel-bin 2>/dev/null)/tools/collective_bench"

run() {  # OUT ARGS... -> rows "size busbw wrong"
  local out="$1"
  shift
  "$BENCH" --transport=mpi --ranks="$RANKS" --ranks_per_node="$PER_NODE" --op=all_reduce \
    --dtype=f32 --redop=sum --check --min_bytes=64K --max_bytes=64M --step_factor=4 \
    --iters="$ITERS" --warmup=3 "$@" |
    awk '!/^#/ && NF >= 9 && $1 ~ /^[0-9]+$/ { print $1, $8, $9 }' > "$WORK/$out"
}

run mpi --algo=hierarchical --node_transport=none
run shm --algo=hierarchical --node_transport=shm
run native --algo=native
echo "# $(nproc) cores, $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | sed 's/^ //')"
echo "# $(mpirun --version 2>/dev/null | head -n1), Loom $(git rev-parse --short HEAD 2>/dev/null || echo unknown)"
echo "# all_reduce f32 sum, $RANKS ranks, $PER_NODE per node, $ITERS iterations; busbw in GB/s"
printf "%10s %14s %14s %12s %10s %8s\n" "size(B)" "hier_mpi_only" "hier_shm_in" "mpi_native" \
  "shm/mpi" "#wrong"
join "$WORK/mpi" "$WORK/shm" | join - "$WORK/native" | awk '{
  ratio = ($2 > 0) ? $4 / $2 : 0
  printf "%10s %14.2f %14.2f %12.2f %9.2fx %8d\n", $1, $2, $4, $6, ratio, $3 + $5 + $7
}'
