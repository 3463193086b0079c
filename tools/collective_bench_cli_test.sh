#!/bin/sh
# collective_bench end to end: the inproc, shm, mpi and gloo transports (the latter launching
# itself as processes) produce checked nccl-tests-style tables with no wrong
# elements, and bad flags fail with a message.
set -eu
bench="$1"
out="$("$bench" --transport=inproc --ranks=4 --op=all_reduce --min_bytes=1K --max_bytes=64K --iters=3 --warmup=1 --check)"
echo "$out"
echo "$out" | grep -q -- "# Avg bus bandwidth" || { echo "no closing line"; exit 1; }
rows="$(echo "$out" | awk '!/^#/ && NF >= 9 && $1 != "size(B)"' | wc -l)"
[ "$rows" -eq 7 ] || { echo "want 7 rows, got $rows"; exit 1; }
echo "$out" | awk '!/^#/ && NF >= 9 && $1 != "size(B)" && $9 != "0" { bad = 1 } END { exit bad }' ||
  { echo "wrong elements"; exit 1; }

out="$("$bench" --transport=shm --ranks=3 --op=reduce_scatter --dtype=bf16 --redop=avg --min_bytes=3K --max_bytes=48K --iters=3 --warmup=1 --check --json)"
echo "$out"
echo "$out" | grep -q -- '"wrong": 0' || { echo "shm rows missing"; exit 1; }
if echo "$out" | grep -q -- '"wrong": [1-9]'; then echo "shm wrong elements"; exit 1; fi

# The staged path (no CMA) checked end to end at sizes above the eager limit.
out="$("$bench" --transport=shm --ranks=2 --op=all_reduce --min_bytes=64K --max_bytes=1M --step_factor=4 --iters=2 --warmup=1 --check --shm_copy=staged --shm_staging_bytes=256K)"
echo "$out"
echo "$out" | awk '!/^#/ && NF >= 9 && $1 != "size(B)" && $9 != "0" { bad = 1 } END { exit bad }' ||
  { echo "staged: wrong elements"; exit 1; }

if "$bench" --transport=shm --ranks=2 --shm_copy=pigeon 2> "$TEST_TMPDIR/err.txt"; then echo "bad shm_copy accepted"; exit 1; fi
grep -q -- "--shm_copy=pigeon is not auto, cma or staged" "$TEST_TMPDIR/err.txt" || { cat "$TEST_TMPDIR/err.txt"; exit 1; }

# The mpi transport (the bench starts itself under mpirun): Loom's algorithms and
# MPI's own (--algo=native), both checked, across the eager and rendezvous sizes.
for algo in auto native; do
  out="$("$bench" --transport=mpi --ranks=2 --op=all_reduce --algo=$algo --min_bytes=4K --max_bytes=256K --step_factor=8 --iters=2 --warmup=1 --check)"
  echo "$out"
  rows="$(echo "$out" | awk '!/^#/ && NF >= 9 && $1 != "size(B)"' | wc -l)"
  [ "$rows" -eq 3 ] || { echo "mpi $algo: want 3 rows, got $rows"; exit 1; }
  echo "$out" | awk '!/^#/ && NF >= 9 && $1 != "size(B)" && $9 != "0" { bad = 1 } END { exit bad }' ||
    { echo "mpi $algo: wrong elements"; exit 1; }
done
echo "$out" | grep -q -- " native " || { echo "mpi: the native rows do not say native"; exit 1; }

# Two levels: 4 ranks in 2 emulated nodes, hierarchical with Loom's shm inside them.
out="$("$bench" --transport=mpi --ranks=4 --ranks_per_node=2 --node_transport=shm --op=all_reduce --algo=hierarchical --min_bytes=4K --max_bytes=256K --step_factor=8 --iters=2 --warmup=1 --check)"
echo "$out"
echo "$out" | grep -q "# transport mpi, shm inside nodes" || { echo "two levels: no shm inside"; exit 1; }
rows="$(echo "$out" | awk '!/^#/ && NF >= 9 && $1 != "size(B)" && $5 == "hierarchical" && $9 == "0"' | wc -l)"
[ "$rows" -eq 3 ] || { echo "two levels: want 3 correct hierarchical rows, got $rows"; exit 1; }
if "$bench" --transport=mpi --ranks=2 --node_transport=nvlink 2> "$TEST_TMPDIR/err.txt"; then echo "bad node_transport accepted"; exit 1; fi
grep -q -- "--node_transport=nvlink is not auto, none or shm" "$TEST_TMPDIR/err.txt" || { cat "$TEST_TMPDIR/err.txt"; exit 1; }

# The gloo transport: processes over Gloo's TCP pairs, checked; the rendezvous
# directory is gone afterwards.
before="$(ls -d /tmp/loom-gloo-* 2>/dev/null | wc -l)"
out="$("$bench" --transport=gloo --ranks=2 --op=all_reduce --min_bytes=4K --max_bytes=256K --step_factor=8 --iters=2 --warmup=1 --check)"
echo "$out"
echo "$out" | grep -q "# transport gloo" || { echo "gloo: not over gloo"; exit 1; }
rows="$(echo "$out" | awk '!/^#/ && NF >= 9 && $1 != "size(B)" && $9 == "0"' | wc -l)"
[ "$rows" -eq 3 ] || { echo "gloo: want 3 correct rows, got $rows"; exit 1; }
[ "$(ls -d /tmp/loom-gloo-* 2>/dev/null | wc -l)" -eq "$before" ] || { echo "gloo: store directory left behind"; exit 1; }

if "$bench" --transport=carrier-pigeon 2> "$TEST_TMPDIR/err.txt"; then echo "bad transport accepted"; exit 1; fi
grep -q -- "--transport=carrier-pigeon is not inproc, shm, mpi or gloo" "$TEST_TMPDIR/err.txt" || { cat "$TEST_TMPDIR/err.txt"; exit 1; }
echo PASS
