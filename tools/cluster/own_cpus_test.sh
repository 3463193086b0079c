#!/usr/bin/env bash
# cluster.sh up --own_cpus: each emulated host runs what is started on it (by `exec`,
# and the ranks mpirun starts there through the cluster's agent) on its own share of
# the machine's CPUs, hosts taking the CPUs in turn; without it, on all of them. The
# expected sets are computed from nproc here, so the test holds on any CPU count.
# Needs root (CI runs as root).
#   own_cpus_test.sh CLUSTER_SH
set -euo pipefail
source "$(dirname "$1")/cluster_testing.sh"
cluster_test_start "$1" xcpus
CPUS="$(nproc)"

# expand LIST: a taskset list ("0-3,5") as the CPUs it names, one per line.
expand() {
  local part
  for part in ${1//,/ }; do
    if [[ "$part" == *-* ]]; then seq "${part%-*}" "${part#*-}"; else echo "$part"; fi
  done
}
# affinity [exec|mpirun] HOST: the CPUs a process started on HOST may run on.
affinity_exec() { expand "$(on "$1" sh -c 'taskset -pc $$' | sed 's/.*: //')"; }
affinity_mpirun() {
  # One rank per host; each prints its host name and its CPU list.
  on h1 timeout 60 mpirun $(cluster mpirun-args) -np "$2" sh -c 'echo "$(hostname) $(taskset -pc $$ | sed "s/.*: //")"' |
    awk -v h="$1" '$1 == h { print $2 }' | { read -r list; expand "$list"; }
}

for hosts in 2 3; do
  cluster up "$hosts" --subnet=10.194.0 --own_cpus
  for ((n = 1; n <= hosts; ++n)); do
    if ((hosts >= CPUS)); then
      want="$(((n - 1) % CPUS))"
    else
      share=$((CPUS / hosts))
      want="$(seq $(((n - 1) * share)) $((n * share - 1)))"
    fi
    got="$(affinity_exec "h$n")"
    [[ "$got" == "$want" ]] || fail "$hosts hosts, own CPUs: exec on h$n runs on [$got], expected [$want]"
    got="$(affinity_mpirun "h$n" "$hosts")"
    [[ "$got" == "$want" ]] || fail "$hosts hosts, own CPUs: a rank on h$n runs on [$got], expected [$want]"
    # Its link hands packets on in order: eth0 receives on the host's first CPU
    # (where the kernel has receive packet steering at all).
    first="$(echo "$want" | head -1)"
    rps="$(ip netns exec "xcpus-h$n" sh -c 'cat /sys/class/net/eth0/queues/rx-0/rps_cpus 2>/dev/null' || true)"
    if [[ -n "$rps" ]]; then
      rps="${rps//,/}"
      rps="$(echo "$rps" | sed 's/^0*//')"
      mask="$(printf '%x' $((1 << (first % 32))))"
      for ((group = 0; group < first / 32; ++group)); do mask="${mask}00000000"; done
      [[ "$rps" == "$mask" ]] || fail "$hosts hosts: h$n's eth0 steers its packets to [$rps], expected CPU $first [$mask]"
    fi
    echo "$hosts hosts, h$n: CPUs $(echo $want), packets in order on CPU $first"
  done
  expect_no_leftovers
done

# Without the flag, every host may run on every CPU.
cluster up 2 --subnet=10.194.0
all="$(seq 0 $((CPUS - 1)))"
for n in 1 2; do
  got="$(affinity_exec "h$n")"
  [[ "$got" == "$all" ]] || fail "without --own_cpus h$n runs on [$got], expected every CPU"
done
cluster down
[[ -z "$(ip netns list | grep xcpus || true)" ]] || fail "namespaces left: $(ip netns list | grep xcpus)"
echo PASS
