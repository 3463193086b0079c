#!/usr/bin/env bash
# PyTorch's Gloo backend against Loom's torch backend on this machine, in one run:
# builds loom_torch optimized, measures the machine's memory bandwidth (two processes
# copying at once, collectives/benchmarks/membw.c), then runs torch_vs_gloo.py (2
# processes, all_reduce 4 KiB..64 MiB and DDP steps, backends alternated, medians).
#
#   integrations/torch/benchmarks/compare_gloo.sh [ROUNDS [JSON_FILE]]   (from the repository root)
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../../.."
ROUNDS="${1:-5}"
JSON=("${2:+--json=$2}")
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

./bazelw build --config=opt --noshow_progress //integrations/torch:loom_torch 2>"$WORK/build.log" ||
  { cat "$WORK/build.log" >&2; exit 1; }
gcc -O2 -o "$WORK/membw" collectives/benchmarks/membw.c

echo "# $(lscpu | sed -n 's/^Model name: *//p'), $(nproc) cores; $(uname -r)"
echo "# loom $(git rev-parse --short HEAD 2>/dev/null || echo '?'); command: $0 $ROUNDS"
echo "# memory bandwidth, 2 processes copying at once (read + written bytes): $("$WORK/membw" 2) GB/s"
PYTHONPATH="$PWD/bazel-bin/integrations/torch${PYTHONPATH:+:$PYTHONPATH}" \
  /usr/bin/python3 integrations/torch/benchmarks/torch_vs_gloo.py --rounds "$ROUNDS" ${JSON[@]+"${JSON[@]}"}
echo "# memory bandwidth after the runs: $("$WORK/membw" 2) GB/s"
