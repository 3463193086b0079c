#!/usr/bin/env bash
# cluster.sh: an emulated cluster of hosts on one Linux machine, for running and
# testing Loom's jobs across hosts without virtual machines. Needs root, iproute2
# (ip, tc) and util-linux (unshare, nsenter).
#
# Each host hN (N = 1..count) is:
#   - a network namespace NAME-hN with one interface, eth0, at SUBNET.N/24, joined
#     to the other hosts through a bridge in a namespace of its own (NAME-sw); with
#     --rate, eth0 sends at most that rate (tc tbf, its bucket 4 ms of the rate), so
#     the link is slower than memory; with --delay, eth0 is instead a tap of the
#     delay line (tools/cluster/delay_line.h, a hub that hands each frame on DELAY
#     after it arrived: a long link, where the kernel has no netem; with --rate it
#     also sends towards each host at the rate, frame by frame, as a switch port,
#     so no tbf burst arrives at memory speed: --delay=0ms --rate=... for that alone);
#   - its own TCP congestion control (--congestion, default cubic, or reno where the
#     kernel allows no cubic in a namespace), not whatever this machine's default is
#     (see choose_congestion);
#   - with --own_cpus, its own share of this machine's CPUs (taskset on everything
#     started on it: `exec` and mpirun's daemons): hosts 1..count take the CPUs in
#     turn, C / count each (one each, wrapping around, when the hosts outnumber the
#     CPUs). Without it every host runs on every CPU, as the kernel places threads;
#   - its own UTS namespace (hostname hN, so Open MPI and Loom see distinct nodes),
#     IPC namespace, and mount namespace with a private /dev/shm and /tmp (tmpfs), so
#     shared memory and temporary files never cross a host boundary by accident.
# A holder process (sleep) keeps the UTS, IPC and mount namespaces alive; commands
# enter all four namespaces of their host with nsenter. Traffic goes only to
# addresses that exist inside the namespaces made here: the hosts have no route out.
# Nothing machine-wide is edited (no /etc/hosts): hosts are named by address.
# State lives in /run/loom-cluster-NAME (outside /tmp, which is private per host) (holder pids, the mpirun agent, the hostfile).
#
# Usage (NAME defaults to "loom"; letters and digits, at most 8):
#   cluster.sh [--name=NAME] up COUNT [--rate=2gbit] [--delay=2ms] [--subnet=10.199.0]
#                                     [--ranks_per_host=R] [--own_cpus] [--congestion=cubic]
#   cluster.sh [--name=NAME] congestion                the hosts' TCP congestion control
#   cluster.sh [--name=NAME] exec hN -- CMD [ARGS...]   run CMD on host hN
#   cluster.sh [--name=NAME] addr hN                   hN's address
#   cluster.sh [--name=NAME] hosts                     h1 h2 ... (one per line)
#   cluster.sh [--name=NAME] hostfile                  path of an Open MPI hostfile
#   cluster.sh [--name=NAME] mpirun-args               flags for mpirun across the hosts
#   cluster.sh [--name=NAME] pids hN                   the processes running on hN
#   cluster.sh [--name=NAME] kill hN [SIGNAL]          signal every process of hN (KILL)
#   cluster.sh [--name=NAME] link hN up|down           connect or cut hN's link
#   cluster.sh [--name=NAME] down                      remove everything NAME made
# `up` first removes what an earlier run with the same NAME left behind. `down` is
# idempotent and also works after a crashed `up`.
#
# Example: an MPI job of 4 ranks on two hosts (mpirun runs on h1):
#   cluster.sh up 2 --rate=2gbit
#   cluster.sh exec h1 -- mpirun $(cluster.sh mpirun-args) -np 4 ./collective_bench ...
#   cluster.sh down
set -euo pipefail
# Failures inside $(...) end the script too (a die in a helper must not be ignored).
shopt -s inherit_errexit
# ip and tc live in /usr/sbin, which Bazel's strict test environment leaves out of PATH.
export PATH="$PATH:/usr/sbin:/sbin"

die() {
  echo "cluster.sh: $*" >&2
  exit 2
}

NAME=loom
while [[ $# -gt 0 && "$1" == --* ]]; do
  case "$1" in
    --name=*) NAME="${1#--name=}" ;;
    *) die "unknown option $1 (before the command only --name=NAME)" ;;
  esac
  shift
done
[[ "$NAME" =~ ^[a-z0-9]{1,8}$ ]] || die "--name=$NAME: use 1 to 8 lowercase letters or digits"
[[ $# -ge 1 ]] || die "no command (up, exec, addr, hosts, hostfile, mpirun-args, congestion, pids, kill, link, down)"
COMMAND="$1"
shift

STATE="/run/loom-cluster-$NAME"
SWITCH="$NAME-sw"

require_root() {
  [[ "$(id -u)" == 0 ]] || die "$COMMAND needs root (network namespaces); run it as root"
  local tool
  for tool in ip tc unshare nsenter; do
    command -v "$tool" >/dev/null ||
      die "$COMMAND needs '$tool' (apt-get install iproute2 util-linux)"
  done
}

# host_index hN: N, checked against the cluster's size.
host_index() {
  local host="$1"
  [[ -f "$STATE/count" ]] || die "cluster $NAME is not up (no $STATE/count)"
  local count
  count="$(cat "$STATE/count")"
  [[ "$host" =~ ^h([0-9]+)$ ]] || die "host '$host': hosts are h1..h$count"
  local n="${BASH_REMATCH[1]}"
  ((n >= 1 && n <= count)) || die "host '$host': hosts are h1..h$count"
  echo "$n"
}

holder_pid() {
  local n
  n="$(host_index "$1")"
  local pid
  pid="$(cat "$STATE/h$n.pid" 2>/dev/null)" || die "host h$n has no holder ($STATE/h$n.pid)"
  [[ -e "/proc/$pid/ns/uts" ]] || die "host h$n's holder (pid $pid) is gone"
  echo "$pid"
}

# enter hN: the nsenter prefix that runs a command in hN's namespaces.
enter() {
  local pid n
  pid="$(holder_pid "$1")"
  n="$(host_index "$1")"
  [[ -f "$STATE/h$n.cpus" ]] && echo -n "taskset -c $(cat "$STATE/h$n.cpus") "
  echo nsenter "--target=$pid" --net --uts --ipc --mount "--wd=$PWD" --
}

# host_cpus N COUNT: the CPUs host N of COUNT runs on with --own_cpus (a taskset list).
host_cpus() {
  local cpus
  cpus="$(nproc)"
  if (($2 >= cpus)); then
    echo $((($1 - 1) % cpus))
  else
    local share=$((cpus / $2))
    echo "$((($1 - 1) * share))-$(($1 * share - 1))"
  fi
}

# cpu_mask C: the rps_cpus bitmap of CPU C alone (hex, in 32-bit groups, commas
# between them).
cpu_mask() {
  local mask i
  mask="$(printf '%x' $((1 << ($1 % 32))))"
  for ((i = 0; i < $1 / 32; ++i)); do mask="$mask,00000000"; done
  echo "$mask"
}

# keep_in_order NS DEV CPU: every packet DEV (in namespace NS) receives is handled on
# CPU (receive packet steering), so a link hands a stream's packets on in the order
# they were sent, as a wire does. A veth or tap receives on the CPU that sent; when
# a stream's packets left from two CPUs (the sending process on one, the softirq
# that took an acknowledgement on the other), the two CPUs' backlogs handed them on
# out of order, and TCP took the reordering for loss: 300..1,400 spurious fast
# retransmits in 100 gloo all-reduces of 16 MiB between 2 hosts, none with this.
# Where the kernel has no RPS the files are missing and nothing changes.
keep_in_order() {
  ip netns exec "$1" sh -c 'for q in /sys/class/net/"$1"/queues/rx-*/rps_cpus; do
                              if [ -w "$q" ]; then echo "$2" > "$q"; fi; done' \
    sh "$2" "$(cpu_mask "$3")" 2>/dev/null || true
}

# choose_congestion REQUESTED: the TCP congestion control the hosts use, checked
# against what a network namespace may set (net.ipv4.tcp_allowed_congestion_control,
# which the machine decides). Without a request: cubic, Linux's and Debian's default,
# or reno where cubic is not allowed (on a link that drops nothing they send alike).
# A host must not inherit this machine's choice unseen: on a machine whose default is
# bbr, without the fq qdisc, TCP paces each packet itself behind a bandwidth estimate
# that swung from 0.3 to 12 Gbit/s on these links' 20 us round trip (ss -ti), and
# held the tail of a message for milliseconds. gloo's all-reduces of 64..256 KiB
# between 2 hosts then took 2..3 times as long, and varied from run to run, as with
# reno (collectives/transport/gloo/README.md, "Congestion control").
choose_congestion() {
  local allowed
  allowed=" $(sysctl -n net.ipv4.tcp_allowed_congestion_control 2>/dev/null || echo reno) "
  if [[ -n "$1" ]]; then
    [[ "$allowed" == *" $1 "* ]] ||
      die "--congestion=$1: a host's namespace may use only what this machine allows there (net.ipv4.tcp_allowed_congestion_control:$allowed)"
    echo "$1"
  elif [[ "$allowed" == *" cubic "* ]]; then
    echo cubic
  else
    echo reno
  fi
}

# host_pids hN: every process in hN's network namespace but its holder.
host_pids() {
  local n
  n="$(host_index "$1")"
  local holder
  holder="$(holder_pid "h$n")"
  local ns
  ns="$(readlink "/proc/$holder/ns/net")"
  local dir pid
  for dir in /proc/[0-9]*; do
    pid="${dir#/proc/}"
    [[ "$pid" == "$holder" ]] && continue
    [[ "$(readlink "$dir/ns/net" 2>/dev/null)" == "$ns" ]] && echo "$pid"
  done
  return 0
}

do_down() {
  require_root
  # Processes first (any process in one of NAME's network namespaces, holders
  # included), then links and namespaces, then the state directory.
  local ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$NAME-(h[0-9]+|sw)\$" || true); do
    local pids
    pids="$(ip netns pids "$ns" 2>/dev/null || true)"
    [[ -n "$pids" ]] && kill -KILL $pids 2>/dev/null || true
  done
  if [[ -d "$STATE" ]]; then
    local file
    # The delay line's taps vanish with it.
    for file in "$STATE"/h*.pid "$STATE"/delay_line.pid; do
      [[ -f "$file" ]] && kill -KILL "$(cat "$file")" 2>/dev/null || true
    done
  fi
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep -E "^$NAME-(h[0-9]+|sw)\$" || true); do
    # Deleting a namespace deletes the veth ends inside it, and so their peers.
    ip netns delete "$ns" 2>/dev/null || true
  done
  # A veth end left in the root namespace by a crashed `up`.
  local link
  for link in $(ip -o link show 2>/dev/null | awk -F': ' '{print $2}' | sed 's/@.*//' |
    grep -E "^$NAME-h[0-9]+[ab]\$" || true); do
    ip link delete "$link" 2>/dev/null || true
  done
  rm -rf "$STATE"
}

# rate_bytes RATE: bytes a second of a tc rate (2gbit, 500mbit, ...).
rate_bytes() {
  local number="${1%bit}" scale=1
  case "$number" in
    *k) scale=1000; number="${number%k}" ;;
    *m) scale=1000000; number="${number%m}" ;;
    *g) scale=1000000000; number="${number%g}" ;;
  esac
  echo $((number * scale / 8))
}

# tbf_burst RATE: tbf's bucket in bytes for RATE (2gbit, 500mbit, ...): 4 ms of the
# rate, at least 64 KiB (one GSO packet). tbf needs about rate/HZ to reach its rate:
# with the flat 64 KiB it had before, one TCP stream got 183 to 212 MB/s through a
# 2gbit link (73-85% of 250 MB/s); with 1 MB, 240 MB/s (96%: the goodput after
# headers).
tbf_burst() {
  local bytes=$(($(rate_bytes "$1") / 250))
  ((bytes < 65536)) && bytes=65536
  echo "$bytes"
}

# delay_line_binary: the delay line's path: $LOOM_DELAY_LINE, beside this script
# (Bazel runfiles: //tools/cluster:cluster and the cross-host tests carry it), or
# the workspace's bazel-bin.
delay_line_binary() {
  local here candidate
  here="$(dirname "${BASH_SOURCE[0]}")"
  for candidate in "${LOOM_DELAY_LINE:-}" "$here/delay_line" "$here/../../bazel-bin/tools/cluster/delay_line"; do
    [[ -n "$candidate" && -x "$candidate" ]] && { echo "$candidate"; return 0; }
  done
  die "--delay needs the delay line: ./bazelw build //tools/cluster:delay_line (or set LOOM_DELAY_LINE to its path)"
}

# start_delay_line COUNT DELAY RATE: starts the delay line with taps
# NAME-h1t..NAME-hCOUNTt in this (the root) namespace and waits for them; do_up moves
# each into its host. With RATE it also sends towards each host at that rate, as a
# switch port does, its buffer 8 ms of the rate beyond what the delay holds.
start_delay_line() {
  local count="$1" delay="$2" rate="$3" binary taps="" n pacing=()
  binary="$(delay_line_binary)"
  for ((n = 1; n <= count; ++n)); do taps="$taps${taps:+,}$NAME-h${n}t"; done
  if [[ -n "$rate" ]]; then
    local bytes queue
    bytes="$(rate_bytes "$rate")"
    queue="$(awk -v b="$bytes" -v d="$delay" 'BEGIN {
      s = d; if (d ~ /us$/) s = d / 1e6; else if (d ~ /ms$/) s = d / 1e3; else s = d + 0;
      printf "%d", b * (s + 0.008) + 262144 }')"
    pacing=(--rate_bytes_per_second="$bytes" --queue_bytes="$queue")
  fi
  # A machine without the /dev/net/tun node (a container's /dev) may still have the
  # driver: the delay line then opens a node of its own in the state directory,
  # which `down` removes with the rest, rather than one made in the machine's /dev.
  local tun=/dev/net/tun
  if [[ ! -c "$tun" ]]; then
    tun="$STATE/tun"
    mknod "$tun" c 10 200 2>/dev/null ||
      die "--delay needs the tun driver: no /dev/net/tun, and mknod $tun (10:200) failed"
  fi
  setsid "$binary" --taps="$taps" --delay="$delay" --tun_device="$tun" "${pacing[@]}" \
    </dev/null >"$STATE/delay_line.log" 2>&1 &
  echo $! >"$STATE/delay_line.pid"
  local waited=0
  until ip link show "$NAME-h${count}t" >/dev/null 2>&1; do
    kill -0 "$(cat "$STATE/delay_line.pid")" 2>/dev/null ||
      die "the delay line exited: $(cat "$STATE/delay_line.log")"
    ((waited++ < 100)) || die "the delay line's taps did not appear"
    sleep 0.05
  done
}

do_up() {
  require_root
  [[ $# -ge 1 ]] || die "up COUNT [--rate=RATE] [--delay=DELAY] [--subnet=A.B.C] [--ranks_per_host=R]"
  local count="$1"
  shift
  [[ "$count" =~ ^[0-9]+$ ]] && ((count >= 1 && count <= 32)) || die "up $count: COUNT is 1..32"
  local rate="" delay="" subnet="10.199.0" slots=1 own_cpus=0 congestion=""
  local arg
  for arg in "$@"; do
    case "$arg" in
      --rate=*) rate="${arg#--rate=}" ;;
      --delay=*) delay="${arg#--delay=}" ;;
      --subnet=*) subnet="${arg#--subnet=}" ;;
      --ranks_per_host=*) slots="${arg#--ranks_per_host=}" ;;
      --own_cpus) own_cpus=1 ;;
      --congestion=*)
        congestion="${arg#--congestion=}"
        [[ -n "$congestion" ]] || die "--congestion=: name a TCP congestion control (cubic, reno, bbr, ...)"
        ;;
      *) die "up: unknown option $arg" ;;
    esac
  done
  [[ "$subnet" =~ ^10\.[0-9]{1,3}\.[0-9]{1,3}$ ]] || die "--subnet=$subnet: give the first three parts of a 10.x.y.0/24 network"
  [[ "$slots" =~ ^[1-9][0-9]*$ ]] || die "--ranks_per_host=$slots: a positive number of ranks per host (the hostfile's slots)"
  [[ -z "$rate" || "$rate" =~ ^[0-9]+(k|m|g)?bit$ ]] || die "--rate=$rate: a tc rate such as 2gbit or 500mbit"
  [[ -z "$delay" || "$delay" =~ ^[0-9]+(\.[0-9]+)?(us|ms|s)$ ]] || die "--delay=$delay: a one-way delay such as 2ms or 500us"
  [[ -z "$delay" ]] || ((count >= 2)) || die "--delay joins 2 or more hosts, not $count"
  congestion="$(choose_congestion "$congestion")"
  do_down
  mkdir -p "$STATE"
  echo "$count" >"$STATE/count"
  echo "$subnet" >"$STATE/subnet"

  if [[ -n "$delay" ]]; then
    start_delay_line "$count" "$delay" "$rate"
  else
    ip netns add "$SWITCH"
    ip -n "$SWITCH" link add br0 type bridge
    ip -n "$SWITCH" link set br0 up
  fi
  local n
  for ((n = 1; n <= count; ++n)); do
    local ns="$NAME-h$n"
    ip netns add "$ns"
    if [[ -n "$delay" ]]; then
      ip link set "$NAME-h${n}t" netns "$ns"
      ip -n "$ns" link set "$NAME-h${n}t" name eth0
    else
      # The pair is made in the root namespace, then each end moves into its own.
      ip link add "$NAME-h${n}a" type veth peer name "$NAME-h${n}b"
      ip link set "$NAME-h${n}a" netns "$ns"
      ip link set "$NAME-h${n}b" netns "$SWITCH"
      ip -n "$ns" link set "$NAME-h${n}a" name eth0
    fi
    ip -n "$ns" addr add "$subnet.$n/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    # A connection whose data goes unacknowledged fails after about 3 s instead of
    # the kernel's 15 minutes, so a cut link ends the job's runtime connections (the
    # setting belongs to the host's network namespace; nothing machine-wide changes).
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_retries2=4
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_congestion_control="$congestion" ||
      die "h$n: could not set its TCP congestion control to $congestion"
    if [[ -z "$delay" ]]; then
      ip -n "$SWITCH" link set "$NAME-h${n}b" master br0
      ip -n "$SWITCH" link set "$NAME-h${n}b" up
    fi
    # Each hop a host's packets take in order on one CPU: the first of the host's
    # share (host_cpus, with or without --own_cpus).
    local in_order_cpu
    in_order_cpu="$(host_cpus "$n" "$count")"
    in_order_cpu="${in_order_cpu%%-*}"
    keep_in_order "$ns" eth0 "$in_order_cpu"
    if [[ -z "$delay" ]]; then keep_in_order "$SWITCH" "$NAME-h${n}b" "$in_order_cpu"; fi
    if [[ -n "$rate" ]]; then
      ip netns exec "$ns" tc qdisc add dev eth0 root tbf rate "$rate" burst "$(tbf_burst "$rate")" \
        latency 100ms
    fi
    # The holder: enters the network namespace, makes UTS, IPC and mount namespaces,
    # names the host, mounts its private /dev/shm and /tmp, and sleeps. setsid and
    # closed descriptors: it must not hold the caller's terminal or pipes open.
    local pidfile="$STATE/h$n.pid"
    setsid ip netns exec "$ns" unshare --uts --ipc --mount --propagation private \
      sh -c 'hostname "$1" && mount -t tmpfs -o mode=1777 tmpfs /dev/shm &&
             mount -t tmpfs -o mode=1777 tmpfs /tmp && echo $$ > "$2" && exec sleep infinity' \
      holder "h$n" "$pidfile.tmp" </dev/null >/dev/null 2>&1 &
    local waited=0
    until [[ -s "$pidfile.tmp" ]]; do
      ((waited++ < 100)) || die "host h$n's holder did not start"
      sleep 0.05
    done
    mv "$pidfile.tmp" "$pidfile"
    ((own_cpus)) && host_cpus "$n" "$count" >"$STATE/h$n.cpus"
  done
  echo "$rate" >"$STATE/rate"
  echo "$delay" >"$STATE/delay"
  echo "$congestion" >"$STATE/congestion"

  # The agent mpirun starts remote daemons with ("rsh HOST COMMAND..."): it enters
  # the host that owns HOST's address.
  cat >"$STATE/rsh" <<EOF
#!/usr/bin/env bash
# mpirun's remote agent for cluster $NAME: runs COMMAND on the host with address HOST.
host="\$1"
shift
n="\${host##*.}"
[[ "\$host" == "$subnet.\$n" && -f "$STATE/h\$n.pid" ]] || { echo "cluster $NAME: no host at \$host" >&2; exit 255; }
# With --own_cpus the host's daemon, and so its ranks, run on the host's CPUs only.
[[ -f "$STATE/h\$n.cpus" ]] && set -- taskset -c "\$(cat "$STATE/h\$n.cpus")" "\$@"
exec nsenter --target="\$(cat "$STATE/h\$n.pid")" --net --uts --ipc --mount -- sh -c "\$*"
EOF
  chmod +x "$STATE/rsh"
  : >"$STATE/hostfile"
  for ((n = 1; n <= count; ++n)); do echo "$subnet.$n slots=$slots" >>"$STATE/hostfile"; done

  # Every link is up (carrier on both ends) before `up` returns.
  for ((n = 1; n <= count; ++n)); do
    local tries=0
    until ip -n "$NAME-h$n" link show eth0 | grep -q LOWER_UP; do
      ((tries++ < 50)) || die "h$n's link did not come up"
      sleep 0.1
    done
  done
}

case "$COMMAND" in
  up) do_up "$@" ;;
  down) do_down ;;
  exec)
    require_root
    [[ $# -ge 3 && "$2" == "--" ]] || die "exec hN -- CMD [ARGS...]"
    host="$1"
    shift 2
    prefix="$(enter "$host")"  # on failure, enter said why and set -e ends here
    # shellcheck disable=SC2086
    exec $prefix "$@"
    ;;
  addr)
    [[ $# -eq 1 ]] || die "addr hN"
    echo "$(cat "$STATE/subnet").$(host_index "$1")"
    ;;
  congestion)
    [[ -f "$STATE/congestion" ]] || die "cluster $NAME is not up"
    cat "$STATE/congestion"
    ;;
  hosts)
    [[ -f "$STATE/count" ]] || die "cluster $NAME is not up"
    for ((n = 1; n <= $(cat "$STATE/count"); ++n)); do echo "h$n"; done
    ;;
  hostfile)
    [[ -f "$STATE/hostfile" ]] || die "cluster $NAME is not up"
    echo "$STATE/hostfile"
    ;;
  mpirun-args)
    [[ -f "$STATE/hostfile" ]] || die "cluster $NAME is not up"
    subnet="$(cat "$STATE/subnet")"
    # Open MPI's yield in every idle poll (mpi_yield_when_idle), as mpirun decides it
    # for one host: on when the ranks outnumber the cores, which every emulated host
    # shares. There it lets Open MPI's own blocking calls (communicator splits, its
    # collectives) hand the core to the rank they wait for. Otherwise off: it would
    # hand a rank's communication thread's core to its compute thread for a whole
    # time slice at every poll, and a gradient all-reduce beside the backward crawls
    # (collectives/transport/mpi/mpi_transport.h).
    slots="$(sed -nE '1s/.* slots=([0-9]+)$/\1/p' "$STATE/hostfile")"
    yield=0
    (($(cat "$STATE/count") * slots > $(nproc))) && yield=1
    echo "--allow-run-as-root --hostfile $STATE/hostfile --mca plm_rsh_agent $STATE/rsh" \
      "--mca btl self,vader,tcp --mca btl_tcp_if_include $subnet.0/24" \
      "--mca oob_tcp_if_include $subnet.0/24 --bind-to none --mca mpi_yield_when_idle $yield" \
      "--mca oob_tcp_keepalive_time 2 --mca oob_tcp_keepalive_intvl 1" \
      "--mca oob_tcp_keepalive_probes 3" \
      "--mca orte_allowed_exit_without_sync 1"  # as RunUnderMpirun: mpirun.cc says why
    ;;
  pids)
    require_root
    [[ $# -eq 1 ]] || die "pids hN"
    host_pids "$1"
    ;;
  kill)
    require_root
    [[ $# -ge 1 && $# -le 2 ]] || die "kill hN [SIGNAL]"
    pids="$(host_pids "$1")"
    [[ -z "$pids" ]] || kill "-${2:-KILL}" $pids 2>/dev/null || true
    ;;
  link)
    require_root
    [[ $# -eq 2 && ("$2" == up || "$2" == down) ]] || die "link hN up|down"
    ip -n "$NAME-h$(host_index "$1")" link set eth0 "$2"
    ;;
  *) die "unknown command '$COMMAND' (up, exec, addr, hosts, hostfile, mpirun-args, congestion, pids, kill, link, down)" ;;
esac
