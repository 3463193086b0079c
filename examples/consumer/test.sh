#!/usr/bin/env bash
# test.sh: builds and tests this workspace as a user of Loom would, through Loom's
# ./bazelw, with a Bazel output base of its own (so it neither shares nor disturbs
# the main workspace's server and cache), then stops that Bazel server.
#   examples/consumer/test.sh [BAZEL TEST FLAGS...]
# LOOM_CONSUMER_OUTPUT_BASE overrides the output base (default: ~/.cache/loom-consumer).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
output_base="${LOOM_CONSUMER_OUTPUT_BASE:-${HOME:-/tmp}/.cache/loom-consumer}"
status=0
../../bazelw --output_base="$output_base" test //... "$@" || status=$?
# The server of this output base would otherwise hold its memory until it idles out.
../../bazelw --output_base="$output_base" shutdown || true
exit "$status"
