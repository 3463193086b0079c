#!/bin/bash
# loom_torch's DDP across emulated hosts over Loom's gloo transport: HOSTS tools/cluster
# hosts of one rank each at 2 Gbit/s, each host on its own share of the CPUs (as real
# hosts are), ROUNDS rounds; each round runs ddp_across_hosts.py once per build. Needs
# root. Prints the RESULT lines: the median DDP step and 4 KiB all-reduce per run.
#
#   integrations/torch/benchmarks/ddp_across_hosts.sh [HOSTS] [ROUNDS]   (2, 3)
#   BUILDS="before=/dir/a after=/dir/b" ...   # directories holding a loom_torch package
set -euo pipefail
cd "$(dirname "$0")/../../.."
HOSTS="${1:-2}"
ROUNDS="${2:-3}"
CLUSTER="$PWD/tools/cluster/cluster.sh --name=xddp"
# Outside /tmp, which each emulated host has its own of.
WORK="$(mktemp -d "$PWD/.ddp_across_hosts.XXXXXX")"
trap '$CLUSTER down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
BUILDS="${BUILDS:-}"
if [[ -z "$BUILDS" ]]; then
  ./bazelw build --config=opt //integrations/torch:loom_torch >&2
  mkdir -p "$WORK/this"
  cp -rL "$(./bazelw info --config=opt bazel-bin 2>/dev/null)/integrations/torch/loom_torch" "$WORK/this/"
  BUILDS="this=$WORK/this"
fi
$CLUSTER up "$HOSTS" --rate=2gbit --subnet=10.189.0 --ranks_per_host=1 --own_cpus >&2
port=29600
for ((round = 1; round <= ROUNDS; ++round)); do
  for build in $BUILDS; do
    port=$((port + 1))
    # shellcheck disable=SC2046  # mpirun-args prints several flags
    $CLUSTER exec h1 -- mpirun $($CLUSTER mpirun-args) -np "$HOSTS" -x MASTER_ADDR=10.189.0.1 \
      -x MASTER_PORT=$port -x PYTHONPATH="${build#*=}" -x LOOM_TORCH_TRANSPORT=gloo \
      -x LOOM_TORCH_GLOO_IFNAME=eth0 -x LOOM_CACHE_DIR="$WORK/cache-${build%%=*}" -x OMP_NUM_THREADS=1 \
      /usr/bin/python3 "$PWD/integrations/torch/benchmarks/ddp_across_hosts.py" "${build%%=*}" |
      sed -n "s/^RESULT /$round /p"
  done
done
