#!/bin/sh
# A rank of an mpirun job is SIGKILLed mid all-reduce (mpi_dead_rank_probe.cc): the
# job must end, not hang: mpirun names the dead rank and its signal, stops the
# survivor, and exits non-zero, well within the probe's 20 s collective timeout.
set -u
probe="$1"
# Under the sanitizers, as collectives/transport/mpi/mpirun.cc does for the MPI
# tests: no leak report or lock-order detector for Open MPI's own internals.
[ -z "${ASAN_OPTIONS:-}" ] || export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
[ -z "${TSAN_OPTIONS:-}" ] || export TSAN_OPTIONS="$TSAN_OPTIONS:detect_deadlocks=0"
start=$(date +%s)
timeout 120 mpirun --allow-run-as-root --oversubscribe --bind-to none --mca btl self,vader \
  -np 3 "$probe" > "$TEST_TMPDIR/out.txt" 2>&1
code=$?
took=$(( $(date +%s) - start ))
cat "$TEST_TMPDIR/out.txt"
echo "mpirun exit $code after ${took}s"
[ "$code" -ne 0 ] || { echo "FAIL: mpirun exited 0 with a dead rank"; exit 1; }
[ "$code" -ne 124 ] || { echo "FAIL: the job hung until timeout(1) killed it"; exit 1; }
[ "$took" -lt 20 ] || { echo "FAIL: the job took ${took}s to end"; exit 1; }
grep -q "rank 1 with PID" "$TEST_TMPDIR/out.txt" || { echo "FAIL: mpirun did not name rank 1"; exit 1; }
grep -q "signal 9" "$TEST_TMPDIR/out.txt" || { echo "FAIL: mpirun did not name the signal"; exit 1; }
echo PASS
