#!/usr/bin/env bash
# cluster.sh up --congestion: every emulated host uses the TCP congestion control
# asked for, or cubic (reno where the machine allows no cubic in a namespace) when
# none is asked for, whatever this machine's own default is; `cluster.sh congestion`
# says which. A name the machine does not allow in a namespace is refused before
# anything is made, naming the allowed ones. The expected values come from the
# machine's allowed list, so the test holds on any kernel. Needs root (CI runs as root).
#   congestion_test.sh CLUSTER_SH
set -euo pipefail
source "$(dirname "$1")/cluster_testing.sh"
cluster_test_start "$1" xcong
allowed="$(sysctl -n net.ipv4.tcp_allowed_congestion_control)"
echo "allowed in a namespace here: $allowed; this machine's default: $(sysctl -n net.ipv4.tcp_congestion_control)"

# expect_hosts_use NAME HOSTS: the cluster reports NAME and each host's namespace uses it.
expect_hosts_use() {
  local reported
  reported="$(cluster congestion)"
  [[ "$reported" == "$1" ]] || fail "cluster congestion says '$reported', expected '$1'"
  local n got
  for ((n = 1; n <= $2; ++n)); do
    got="$(ip netns exec "xcong-h$n" sysctl -n net.ipv4.tcp_congestion_control)"
    [[ "$got" == "$1" ]] || fail "h$n uses '$got', expected '$1'"
  done
}

want=reno
[[ " $allowed " == *" cubic "* ]] && want=cubic
cluster up 3 --subnet=10.192.0
expect_hosts_use "$want" 3
echo "default: $want on every host"

for name in $allowed; do
  cluster up 2 --subnet=10.192.0 --congestion="$name"
  expect_hosts_use "$name" 2
  echo "--congestion=$name: on every host"
done

# Refused before anything is made: the cluster that is up stays as it was.
if out="$(cluster up 2 --subnet=10.192.0 --congestion=no_such_cc 2>&1)"; then
  fail "--congestion=no_such_cc was accepted"
fi
[[ "$out" == *"--congestion=no_such_cc"* && "$out" == *"$(echo $allowed | cut -d' ' -f1)"* ]] ||
  fail "the refusal does not name the value and the allowed list: $out"
echo "refused: $out"
last="$(echo $allowed | awk '{print $NF}')"
expect_hosts_use "$last" 2
cluster down
[[ -z "$(ip netns list | grep xcong || true)" ]] || fail "namespaces left: $(ip netns list | grep xcong)"
echo PASS
