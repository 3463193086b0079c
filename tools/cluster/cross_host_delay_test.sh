#!/usr/bin/env bash
# The delay line (cluster.sh up --delay): two emulated hosts joined by a 2 Gbit/s
# link that holds every frame 10 ms each way. An MPI all-reduce of one float across
# it takes at least the one-way delay (the frames really wait), a 16 MiB one gives
# the reference's bits through TCP segments of up to 64 KiB (the taps keep the
# kernel's offloads) and takes at least its 8 MiB each way at the rate (the delay
# line paces each host's port). Over gloo the same 16 MiB gives the same bits while
# its receivers post frames for the 5 MB the link holds (FramesWanted, from the
# pings and arrivals they time). `down` leaves no tap and no delay line process. Bad
# --delay values are refused, naming them. Times are bounded from below only.
# Needs root (CI runs as root).
#   cross_host_delay_test.sh CLUSTER_SH COLLECTIVE_BENCH
set -euo pipefail
source "$(dirname "$1")/cluster_testing.sh"
cluster_test_start "$1" xdelay
BENCH="$(realpath "$2")"

# The refusals first: they make nothing.
for bad in "up 1 --delay=2ms" "up 2 --delay=2" "up 2 --delay=-1ms" "up 2 --delay=2ms;x"; do
  if out="$(cluster $bad 2>&1)"; then fail "cluster $bad was accepted"; fi
  grep -q -e "--delay" <<<"$out" || fail "cluster $bad: the error does not name --delay: $out"
done

cluster up 2 --rate=2gbit --delay=10ms --subnet=10.195.0 --ranks_per_host=1
pgrep -f "delay_line --taps=xdelay-h1t,xdelay-h2t" >/dev/null || fail "no delay line runs"

# bench BYTES [gloo]: "<mean us> <wrong elements>" of a ring all-reduce of BYTES over
# MPI (or over gloo, mpirun only starting the processes).
STORES="$(mktemp -d "${TEST_TMPDIR:-$PWD}/gloo_stores.XXXXXX")"
bench() {
  local log transport=(--transport=mpi) launched=()
  if [[ "${2:-}" == gloo ]]; then
    transport=(--transport=gloo --gloo_interface=eth0 --gloo_store_dir="$(mktemp -d "$STORES/run.XXXXXX")")
    launched=(sh -c 'LOOM_JOB_ID=xdelay LOOM_WORLD_SIZE=$OMPI_COMM_WORLD_SIZE LOOM_RANK=$OMPI_COMM_WORLD_RANK exec "$0" "$@"')
  fi
  log="$(mktemp)"
  if ! on h1 timeout --kill-after=10 120 mpirun $(cluster mpirun-args) -np 2 "${launched[@]}" \
      "$BENCH" "${transport[@]}" --op=all_reduce --algo=ring --min_bytes="$1" --max_bytes="$1" \
      --iters=3 --warmup=1 --check >"$log" 2>&1; then
    tail -20 "$log" >&2
    fail "collective_bench of $1 bytes across the delay line ${2:-}"
  fi
  # Columns: size count type redop algo time_us algbw busbw wrong.
  awk '$1 ~ /^[0-9]+$/ && NF >= 9 { print $6, $9 }' "$log"
  rm -f "$log"
}

read -r us wrong <<<"$(bench 4)"
echo "all-reduce of 4 bytes across a 10 ms link: $us us, $wrong wrong"
[[ "$wrong" == 0 ]] || fail "$wrong elements wrong"
awk -v t="$us" 'BEGIN { exit !(t >= 10000) }' || fail "4 bytes took $us us, less than the 10 ms one-way delay"

read -r us wrong <<<"$(bench $((16 << 20)))"
echo "all-reduce of 16 MiB across a 10 ms link: $us us, $wrong wrong"
[[ "$wrong" == 0 ]] || fail "$wrong elements wrong"
# 8 MiB each way at 250 MB/s is 33.6 ms, whatever tbf's bucket let through at once.
awk -v t="$us" 'BEGIN { exit !(t >= 33554) }' || fail "16 MiB took $us us, faster than 2 Gbit/s"

read -r us wrong <<<"$(bench $((16 << 20)) gloo)"
echo "all-reduce of 16 MiB over gloo across a 10 ms link: $us us, $wrong wrong"
[[ "$wrong" == 0 ]] || fail "gloo: $wrong elements wrong"
awk -v t="$us" 'BEGIN { exit !(t >= 33554) }' || fail "gloo: 16 MiB took $us us, faster than 2 Gbit/s"

cluster down
rm -rf "$STORES"
if ip -o link show | grep -q "xdelay-h"; then fail "taps left: $(ip -o link show | grep xdelay-h)"; fi
if pgrep -f "delay_line --taps=xdelay" >/dev/null; then fail "the delay line still runs"; fi
echo PASS
