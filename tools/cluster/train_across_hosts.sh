#!/bin/bash
# `train --transport=mpi` at dp=2 across 2 emulated hosts (tools/cluster, 1 rank per
# host, links at RATE): ZeRO 0 with the gradient all-reduce beside the last backward
# (1 microbatch of 8, 4 of 2) and after it (--nooverlap_grad_reduce), ROUNDS rounds
# alternated. Prints each run's step (from its tokens/s), exposed dp communication
# and compute, then the medians; the runs' --summary_json files stay in OUT for
# `plan --compare` (tools/docs/train.md, "Across hosts"). Needs root.
#
#   tools/cluster/train_across_hosts.sh [ROUNDS] (default 3)
#   RATE=2gbit OUT=$PWD/runs tools/cluster/train_across_hosts.sh 1
#   DELAY=2ms tools/cluster/train_across_hosts.sh 1   # a long link (the delay line)
#   # 2 ranks a host, dealt over the hosts by mpirun, two builds in turn, 1x8 only:
#   RANKS_PER_HOST=2 MESH="--dp=2 --tp=2 --pp=1" MPI_EXTRA="--map-by node" CONFIGS=1x8 \
#     TRAINS="before=/path/train after=/path/train" tools/cluster/train_across_hosts.sh 3
set -euo pipefail
cd "$(dirname "$0")/../.."
ROUNDS="${1:-3}"
RATE="${RATE:-2gbit}"
DELAY="${DELAY:-}"  # one-way delay of the link (cluster.sh --delay); empty: none
RANKS_PER_HOST="${RANKS_PER_HOST:-1}"
MESH="${MESH:---dp=2 --tp=1 --pp=1}"  # the job's mesh: dp x tp x pp = 2 x RANKS_PER_HOST
MPI_EXTRA="${MPI_EXTRA:-}"       # more mpirun flags, e.g. --map-by node
CONFIGS="${CONFIGS:-1x8 4x2 4x2-no-overlap}"
CLUSTER="$PWD/tools/cluster/cluster.sh --name=xtrain"
# The summaries live outside /tmp, which each emulated host has its own of.
OUT="${OUT:-$(mktemp -d "$PWD/.train_across_hosts.XXXXXX")}"
mkdir -p "$OUT"
trap '$CLUSTER down >/dev/null 2>&1' EXIT

./bazelw build --config=opt //tools:train //tools/cluster:delay_line >&2
BIN="$(./bazelw info --config=opt bazel-bin 2>/dev/null)"
TRAIN="${TRAIN:-$BIN/tools/train}"  # TRAIN=PATH: another build of train
TRAINS="${TRAINS:-train=$TRAIN}"    # NAME=PATH ...: builds run in turn, each round
LOOM_DELAY_LINE="$BIN/tools/cluster/delay_line" $CLUSTER up 2 --rate="$RATE" \
  ${DELAY:+--delay="$DELAY"} --subnet=10.196.0 --ranks_per_host="$RANKS_PER_HOST" >&2
declare -A FLAGS=(
  [1x8]="--microbatches=1 --micro_batch=8"
  [4x2]="--microbatches=4 --micro_batch=2"
  [4x2-no-overlap]="--microbatches=4 --micro_batch=2 --nooverlap_grad_reduce"
)
printf '%-24s %5s %8s %12s %10s\n' config round step_s exposed_dp_s compute_s
for ((round = 1; round <= ROUNDS; ++round)); do
  for build in $TRAINS; do
    name="${build%%=*}"
    for config in $CONFIGS; do
      label="$config"
      [[ "$TRAINS" == *" "* ]] && label="$name:$config"
      json="$OUT/$name.$config.$round.json"
      # shellcheck disable=SC2086  # FLAGS, MESH and MPI_EXTRA hold several flags
      $CLUSTER exec h1 -- mpirun $($CLUSTER mpirun-args) $MPI_EXTRA -np $((2 * RANKS_PER_HOST)) \
        "${build#*=}" --transport=mpi $MESH --hidden=512 --layers=4 --threads_per_rank=1 \
        --zero=0 --offload=none --steps=12 --nocompare_reference --cost_model_cache="$OUT" \
        --summary_json="$json" ${FLAGS[$config]} >"$OUT/$name.$config.$round.log" 2>&1 ||
        { echo "$label round $round failed: $OUT/$name.$config.$round.log" >&2; exit 1; }
      python3 - "$json" "$label" "$round" <<'PY'
import json, sys
j = json.load(open(sys.argv[1]))
b = j["step_breakdown_s"]
step = j["global_batch"] * j["seq_len"] / j["tokens_per_second"]
print(f"{sys.argv[2]:<24} {sys.argv[3]:>5} {step:8.3f} {b['dp_comm']:12.3f} {b['compute']:10.3f}")
PY
    done
  done
done | tee "$OUT/runs.txt"
echo "medians:"
python3 - "$OUT/runs.txt" <<'PY'
import statistics, sys
rows = [line.split() for line in open(sys.argv[1]) if not line.startswith("config")]
for config in sorted({r[0] for r in rows}):
    step = statistics.median(float(r[2]) for r in rows if r[0] == config)
    dp = statistics.median(float(r[3]) for r in rows if r[0] == config)
    print(f"{config:<24} step {step:.3f} s, exposed dp {dp:.3f} s ({100 * dp / step:.0f}%)")
PY
echo "summaries: $OUT"
