# cluster_testing.sh: what the cross-host tests share; source it, then call
# cluster_test_start CLUSTER_SH NAME. Tests that need the emulated cluster fail
# loudly (never pass) where it cannot run: not root, or no iproute2 / util-linux.
#
#   source tools/cluster/cluster_testing.sh
#   cluster_test_start "$1" xmpi           # checks the machine; `down` on every exit
#   cluster up 2 --ranks_per_host=2
#   on h1 mpirun $(cluster mpirun-args) -np 4 ./test
#   expect_no_leftovers                    # on every host: no process, file or segment

# ip and tc live in /usr/sbin, which Bazel's strict test environment leaves out of PATH.
export PATH="$PATH:/usr/sbin:/sbin"

fail() {
  echo "FAIL: $*" >&2
  exit 1
}

cluster_test_start() {
  CLUSTER_SH="$1"
  CLUSTER_NAME="$2"
  [[ "$(id -u)" == 0 ]] ||
    fail "this test emulates hosts with network namespaces and needs root (CI runs as root); run it as root"
  local tool
  for tool in ip tc unshare nsenter; do
    command -v "$tool" >/dev/null || fail "this test needs '$tool' (apt-get install iproute2 util-linux)"
  done
  # Each emulated host mounts a private /tmp, so binaries under /tmp (a Bazel
  # --output_base there) cannot be seen on the hosts: say so instead of letting
  # mpirun fail with "could not access or execute".
  [[ "$(pwd -P)" != /tmp/* ]] ||
    fail "the test's files are under /tmp ($(pwd -P)), which the emulated hosts replace with a private /tmp; use a Bazel output base outside /tmp (the default, ~/.cache/bazel, works)"
  trap 'cluster down' EXIT
  # set -e ends a test at a failing command: say which (-E: inside functions too).
  set -E
  trap 'echo "FAIL: ${BASH_SOURCE[0]}:$LINENO: \"$BASH_COMMAND\" exited $?" >&2' ERR
  trap 'exit 130' INT TERM
  # Inner GoogleTest binaries must not write the report Bazel reads for this test.
  unset XML_OUTPUT_FILE GTEST_OUTPUT TEST_PREMATURE_EXIT_FILE
  # Open MPI's own allocations outlive MPI_Finalize: under ASan the ranks do not look
  # for leaks (as RunUnderMpirun does for the one-host MPI tests).
  [[ -z "${ASAN_OPTIONS:-}" ]] || export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
}

cluster() { "$CLUSTER_SH" --name="$CLUSTER_NAME" "$@"; }

# on hN CMD...: runs CMD on host hN.
on() {
  local host="$1"
  shift
  cluster exec "$host" -- "$@"
}

# expect_no_leftovers [HOST...]: no process runs on the hosts (default: every host),
# and their /tmp and /dev/shm are empty.
expect_no_leftovers() {
  local host
  for host in ${*:-$(cluster hosts)}; do
    local pids
    pids="$(cluster pids "$host")"
    [[ -z "$pids" ]] || fail "processes left on $host: $(ps -o pid=,args= -p $(tr '\n' ' ' <<<"$pids"))"
    local files
    files="$(on "$host" sh -c 'ls -A /tmp /dev/shm | grep -v -e "^/" -e "^$"' || true)"
    [[ -z "$files" ]] || fail "files left on $host: $files"
  done
}
