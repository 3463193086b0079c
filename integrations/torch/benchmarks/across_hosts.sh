#!/bin/bash
# loom_torch across emulated hosts: HOSTS tools/cluster hosts of one rank at 2 Gbit/s,
# started by mpirun (Loom's MPI transport between them), run twice: the first run's
# world group measures its cost model (collectives/auto_calibration.h), the second
# reads it from the cache. Needs root.
#
#   integrations/torch/benchmarks/across_hosts.sh [HOSTS] (default 2)
set -euo pipefail
cd "$(dirname "$0")/../../.."
HOSTS="${1:-2}"
CLUSTER="$PWD/tools/cluster/cluster.sh --name=xtorch"
# Outside /tmp, which each emulated host has its own of.
WORK="$(mktemp -d "$PWD/.torch_across_hosts.XXXXXX")"
trap '$CLUSTER down >/dev/null 2>&1; rm -rf "$WORK"' EXIT
./bazelw build --config=opt //integrations/torch:loom_torch >&2
cp -rL "$(./bazelw info --config=opt bazel-bin 2>/dev/null)/integrations/torch/loom_torch" "$WORK/"
$CLUSTER up "$HOSTS" --rate=2gbit --subnet=10.191.0 --ranks_per_host=1 >&2
for run in 1 2; do
  echo "run $run:"
  # shellcheck disable=SC2046  # mpirun-args prints several flags
  $CLUSTER exec h1 -- mpirun $($CLUSTER mpirun-args) -np "$HOSTS" -x MASTER_ADDR=10.191.0.1 \
    -x MASTER_PORT=$((29530 + run)) -x PYTHONPATH="$WORK" -x LOOM_CACHE_DIR="$WORK/cache" \
    -x OMP_NUM_THREADS=1 /usr/bin/python3 "$PWD/integrations/torch/benchmarks/across_hosts.py"
done
