#!/usr/bin/env bash
# Runs one Python test of loom_torch (its path is the first argument) with Debian's
# Python, which has python3-torch: /usr/bin/python3, not whatever `python3` comes
# first on PATH. The built package (loom_torch/_C.so and __init__.py) and the tests'
# helpers are put on PYTHONPATH from the test's runfiles.
set -euo pipefail
readonly PYTHON=/usr/bin/python3
if ! "$PYTHON" -c "import torch.distributed" >/dev/null 2>&1; then
  # ./bazelw installs python3-torch, so this happens only where it was removed.
  echo "SKIPPED: $PYTHON cannot import torch.distributed (install Debian's python3-torch;" \
       "./bazelw does): the loom_torch tests need PyTorch as their client"
  exit 0
fi
root="${TEST_SRCDIR:?}/${TEST_WORKSPACE:?}/integrations/torch"
export PYTHONPATH="$root:$root/tests${PYTHONPATH:+:$PYTHONPATH}"
# One thread of intra-op parallelism per rank: the ranks share the machine's cores.
export OMP_NUM_THREADS="${OMP_NUM_THREADS:-1}"
test_file="$1"
shift
exec "$PYTHON" "$test_file" "$@"
