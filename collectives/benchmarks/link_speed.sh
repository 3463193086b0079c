#!/bin/bash
# All-reduce bus bandwidth across emulated hosts (tools/cluster, RANKS_PER_HOST ranks
# per host (1), links limited with tc tbf) against the link: one TCP stream's goodput
# first, then every Loom algorithm and Open MPI's own at 4, 16 and 64 MiB. Needs root.
#
#   collectives/benchmarks/link_speed.sh [HOSTS] (default 2)
#   RATE=2gbit ROUNDS=2 collectives/benchmarks/link_speed.sh 3
#   DELAY=2ms ALGOS="ring native" collectives/benchmarks/link_speed.sh 2   # a long link
#   BENCHES="before=/path/a after=/path/b" ...   # builds side by side, in turn
#   TRANSPORT=gloo collectives/benchmarks/link_speed.sh 2   # Loom over gloo (TCP) instead
#   CONGESTION=bbr ...   # the hosts' TCP congestion control (cluster.sh --congestion)
#   RANKS_PER_HOST=2 OWN_CPUS=1 collectives/benchmarks/link_speed.sh 2   # 2 x 2 ranks,
#                        # each host on its own CPUs (cluster.sh up --own_cpus)
#   MIN_BYTES=4K MAX_BYTES=1M ITERS=50 ...   # other sizes (every 4x; default 4M..64M, 5 iterations)
#
# Prints "round [build] algorithm bytes time_us busbw_GB/s link_share" per row; bus
# bandwidth is collective_bench's (2(n-1)/n of the bytes per second over n ranks), to
# compare with the rate; link_share is what each host's link must carry at the least,
# 2(h-1)/h of the bytes over h hosts (the same whatever the ranks per host: a node-aware
# schedule sends each byte across once each way), per second, over the rate. With one
# rank per host the two agree.
set -euo pipefail
cd "$(dirname "$0")/../.."
HOSTS="${1:-2}"
RATE="${RATE:-2gbit}"
ROUNDS="${ROUNDS:-2}"
# One-way delay of the link (cluster.sh --delay, the delay line); empty: none.
DELAY="${DELAY:-}"
# The hosts' TCP congestion control (cluster.sh up --congestion); empty: its default.
CONGESTION="${CONGESTION:-}"
RANKS_PER_HOST="${RANKS_PER_HOST:-1}"
OWN_CPUS="${OWN_CPUS:-0}"  # 1: cluster.sh up --own_cpus
MIN_BYTES="${MIN_BYTES:-4M}"
MAX_BYTES="${MAX_BYTES:-64M}"
ITERS="${ITERS:-5}"  # timed iterations per size (more for small sizes)
DEFAULT_ALGOS="ring ring:1M ring:4M dbtree direct halving_doubling tree native"
((RANKS_PER_HOST > 1)) && DEFAULT_ALGOS="$DEFAULT_ALGOS hierarchical"
ALGOS="${ALGOS:-$DEFAULT_ALGOS}"
TRANSPORT="${TRANSPORT:-mpi}"  # mpi, or gloo (its own TCP pairs; no native)
[[ "$TRANSPORT" == mpi || "$TRANSPORT" == gloo ]] || { echo "TRANSPORT=$TRANSPORT: mpi or gloo" >&2; exit 2; }
# rate_bytes_per_second RATE: tc's rate text (2gbit, 500mbit, 100kbit, 64000bit), as
# cluster.sh takes it, in bytes per second.
rate_bytes_per_second() {
  [[ "$1" =~ ^([0-9]+)(k|m|g)?bit$ ]] || { echo "RATE=$1: a whole number and bit, kbit, mbit or gbit" >&2; exit 2; }
  local bits="${BASH_REMATCH[1]}"
  case "${BASH_REMATCH[2]}" in
    g) bits=$((bits * 1000000000)) ;;
    m) bits=$((bits * 1000000)) ;;
    k) bits=$((bits * 1000)) ;;
  esac
  echo $((bits / 8))
}
rate_bytes_per_second "$RATE" >/dev/null
# gloo's rendezvous directories: outside /tmp, which each emulated host has its own of.
STORES="$(mktemp -d "$PWD/.link_speed_gloo.XXXXXX")"
CLUSTER="$PWD/tools/cluster/cluster.sh --name=xlink"
trap '$CLUSTER down; rm -rf "$STORES"' EXIT

./bazelw build --config=opt //tools:collective_bench //tools/cluster:delay_line >&2
BIN="$(./bazelw info --config=opt bazel-bin 2>/dev/null)"
# label=path pairs of collective_bench builds to compare; each algorithm runs on
# each in turn, so both see the same machine.
BENCHES="${BENCHES:-}"
LOOM_DELAY_LINE="$BIN/tools/cluster/delay_line" $CLUSTER up "$HOSTS" --rate="$RATE" \
  ${DELAY:+--delay="$DELAY"} ${CONGESTION:+--congestion="$CONGESTION"} --subnet=10.196.0 \
  --ranks_per_host="$RANKS_PER_HOST" $( ((OWN_CPUS)) && echo --own_cpus) >&2
echo "# hosts' TCP congestion control: $($CLUSTER congestion)"
$CLUSTER exec h2 -- python3 "$PWD/collectives/benchmarks/tcp_stream.py" server 10.196.0.2 5001 268435456 &
sleep 1
$CLUSTER exec h1 -- python3 "$PWD/collectives/benchmarks/tcp_stream.py" client 10.196.0.2 5001 268435456
wait
for ((round = 1; round <= ROUNDS; ++round)); do
  for spec in $ALGOS; do
    algo="${spec%%:*}"
    chunk=256K
    [[ "$spec" == *:* ]] && chunk="${spec#*:}"
    [[ "$TRANSPORT" == gloo && "$algo" == native ]] && continue
    for build in ${BENCHES:-"=$BIN/tools/collective_bench"}; do
      label="${build%%=*}"
      # Over gloo mpirun only starts the processes: each is told it is a rank of a
      # launched job (tools/launcher.h) and meets the others in a fresh directory.
      transport=(--transport=mpi)
      launched=()
      if [[ "$TRANSPORT" == gloo ]]; then
        transport=(--transport=gloo --gloo_interface=eth0
                   --gloo_store_dir="$(mktemp -d "$STORES/run.XXXXXX")")
        launched=(sh -c 'LOOM_JOB_ID=xlink LOOM_WORLD_SIZE=$OMPI_COMM_WORLD_SIZE LOOM_RANK=$OMPI_COMM_WORLD_RANK exec "$0" "$@"')
      fi
      $CLUSTER exec h1 -- mpirun $($CLUSTER mpirun-args) -np "$((HOSTS * RANKS_PER_HOST))" ${MPI_EXTRA:-} "${launched[@]}" \
        "${build#*=}" "${transport[@]}" --op=all_reduce --algo="$algo" --chunk_bytes="$chunk" --min_bytes="$MIN_BYTES" \
        --max_bytes="$MAX_BYTES" --step_factor=4 --iters="$ITERS" --warmup=2 --timeout=5m |
        awk -v spec="$spec" -v round="$round" -v label="${label:+$label }" -v hosts="$HOSTS" \
          -v rate="$(rate_bytes_per_second "$RATE")" \
          '/^ *[0-9]+ +[0-9]+ +f32/ { share = 2 * (hosts - 1) / hosts * $1 / ($6 * 1e-6) / rate
                                     print round, label spec, $1, $6, $8, sprintf("%.2f", share) }'
    done
  done
done
