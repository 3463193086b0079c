#!/usr/bin/env bash
# collective_bench over gloo on two emulated hosts with two ranks each (tools/cluster):
# gloo knows nothing of hosts, so the ranks find theirs by name, and those sharing a
# host connect Loom's shm transport among themselves (collectives/node_layout.h).
# Fails unless the run says so, if any algorithm's all-reduce (below and above the
# size where direct and the trees turn node-aware) differs from the reference, or
# if a process, file or segment is left on a host. With ranks h1,h2,h1,h2 (not
# consecutive) the Communicator numbers them host by host and runs as on blocks, with
# the node transport and routed (unrouted with --route_by_host=false). With 3 ranks,
# h1,h1,h2 (hosts of unequal sizes), the run is routed without a node transport, and
# --node_transport=shm is refused naming the hosts. Ranks that share a host name
# but not /dev/shm (h1,h2 both named "pair0"; containers on one machine) fall back to
# plain gloo, every rank alike. --node_transport=none keeps plain gloo. With the layout,
# every algorithm's messages to a rank of the same host go over shm (routed), unless
# --route_by_host=false.
# Needs root (CI runs as root).
#   cross_host_gloo_test.sh CLUSTER_SH COLLECTIVE_BENCH
set -euo pipefail
source "$(dirname "$1")/cluster_testing.sh"
cluster_test_start "$1" xgloo
BENCH="$(realpath "$2")"
# The gloo rendezvous directory is seen by every host: beside the test's files.
STORES="$(mktemp -d "${TEST_TMPDIR:-$PWD}/gloo-stores.XXXXXX")"
trap 'cluster down; rm -rf "$STORES"' EXIT

# bench ALGO [MPIRUN_ARGS...]: the run's output; fails the test if the run fails or
# any element is wrong (collective_bench --check compares with the reference).
# RANK_PREFIX: a command each rank runs under; FLAGS: more collective_bench flags.
RANK_PREFIX=()
FLAGS=()
bench() {
  local algo="$1" log
  shift
  log="$(mktemp)"
  # mpirun only starts the processes: each is a rank of a launched job (tools/launcher.h).
  if ! on h1 timeout --kill-after=10 120 mpirun $(cluster mpirun-args) "$@" -np "${NP:-4}" \
      sh -c 'LOOM_JOB_ID=xgloo LOOM_WORLD_SIZE=$OMPI_COMM_WORLD_SIZE LOOM_RANK=$OMPI_COMM_WORLD_RANK exec "$0" "$@"' \
      "${RANK_PREFIX[@]}" "$BENCH" "${FLAGS[@]}" --transport=gloo --gloo_interface=eth0 --gloo_store_dir="$(mktemp -d "$STORES/run.XXXXXX")" \
      --op=all_reduce --algo="$algo" --min_bytes=4K --max_bytes=1M --step_factor=16 --iters=3 \
      --warmup=1 --check --noauto_calibrate --timeout=60s >"$log" 2>&1; then
    tail -20 "$log" >&2
    fail "collective_bench --transport=gloo --algo=$algo"
  fi
  awk '$1 ~ /^[0-9]+$/ && NF >= 9 && $9 != 0 { print "wrong elements:", $0; bad = 1 }
       END { exit bad }' "$log" >&2 || { cat "$log" >&2; fail "--algo=$algo: wrong elements"; }
  cat "$log"
  rm -f "$log"
}

cluster up 2 --ranks_per_host=2
for algo in direct binomial_tree double_binary_tree hierarchical ring halving_doubling; do
  out="$(bench "$algo")"
  grep -q "^# transport gloo between 2 hosts, shm inside each (2 ranks a host), routed$" <<<"$out" ||
    { echo "$out" >&2; fail "--algo=$algo: the ranks did not run with their hosts' layout, routed"; }
  # 4 KiB, 64 KiB and 1 MiB: below and from the node-aware size.
  [[ "$(awk '$1 ~ /^[0-9]+$/ && NF >= 9' <<<"$out" | wc -l)" == 3 ]] ||
    { echo "$out" >&2; fail "--algo=$algo: not three sizes"; }
  echo "$algo: ok"
done
# Not routed: the node-blind algorithms' messages inside a host go over gloo.
FLAGS=(--route_by_host=false)
for algo in ring halving_doubling; do
  out="$(bench "$algo")"
  grep -q "^# transport gloo between 2 hosts, shm inside each (2 ranks a host)$" <<<"$out" ||
    { echo "$out" >&2; fail "--algo=$algo --route_by_host=false: not the plain layout"; }
done
FLAGS=()
expect_no_leftovers

# Ranks alternating between the hosts: the Communicator numbers them host by host,
# so every algorithm runs as on blocks; the node transport connects each host's two
# ranks, and the messages between them take shm (routed). Every algorithm is right.
for algo in direct hierarchical halving_doubling ring; do
  out="$(bench "$algo" --map-by node)"
  grep -q "^# transport gloo between 2 hosts, shm inside each (2 ranks a host, numbered by host), routed$" <<<"$out" ||
    { echo "$out" >&2; fail "--algo=$algo, ranks h1,h2,h1,h2: not numbered by host and routed"; }
done
FLAGS=(--route_by_host=false)
out="$(bench ring --map-by node)"
grep -q "^# transport gloo between 2 hosts, shm inside each (2 ranks a host, numbered by host)$" <<<"$out" ||
  { echo "$out" >&2; fail "ranks h1,h2,h1,h2 with --route_by_host=false: not numbered by host, unrouted"; }
FLAGS=(--node_transport=shm)
out="$(bench direct --map-by node)"
grep -q "^# transport gloo between 2 hosts, shm inside each (2 ranks a host, numbered by host), routed$" <<<"$out" ||
  { echo "$out" >&2; fail "--node_transport=shm, ranks h1,h2,h1,h2: no node transport"; }
# Hosts of 3 ranks: h1,h1,h2. No node transport; routed; --node_transport=shm refused.
FLAGS=()
out="$(NP=3 bench ring)"
grep -q "^# transport gloo between 2 hosts (of unequal sizes), shm inside each, routed$" <<<"$out" ||
  { echo "$out" >&2; fail "ranks h1,h1,h2: not routed without a node transport"; }
FLAGS=(--node_transport=shm)
log="$(mktemp)"
if (NP=3 bench direct) >"$log" 2>&1; then cat "$log" >&2; fail "--node_transport=shm ran on hosts of 2 and 1 ranks"; fi
grep -q "node_transport=shm: the ranks' hosts (h1,h1,h2) are not 2 or more hosts of the same number" "$log" ||
  { cat "$log" >&2; fail "--node_transport=shm on hosts of unequal sizes: not the expected error"; }
rm -f "$log"
FLAGS=(--node_transport=none)
out="$(bench direct)"
grep -q "^# transport gloo$" <<<"$out" || { echo "$out" >&2; fail "--node_transport=none found a layout"; }
expect_no_leftovers

# Ranks 0,1 (on h1 and h2) named pair0, ranks 2,3 pair1: a layout by name whose
# "hosts" share no /dev/shm. Each rank runs in a UTS namespace of its own.
FLAGS=()
cat >"$STORES/named_by_pair.sh" <<'EOS'
#!/bin/sh
exec unshare --uts sh -c 'hostname "pair$((OMPI_COMM_WORLD_RANK / 2))" && exec "$0" "$@"' "$@"
EOS
chmod +x "$STORES/named_by_pair.sh"
RANK_PREFIX=("$STORES/named_by_pair.sh")
out="$(bench direct --map-by node)"
grep -q "^# transport gloo (node-blind: shm inside a host did not connect" <<<"$out" ||
  { echo "$out" >&2; fail "ranks named alike without a shared /dev/shm did not fall back to plain gloo"; }
expect_no_leftovers
echo "PASS"
