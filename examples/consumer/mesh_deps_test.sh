#!/usr/bin/env bash
# mesh_deps_test.sh QUERY_OUTPUT: deps(@loom//topology:mesh), seen from this
# workspace, holds Loom's topology and core packages and Abseil, nothing else.
set -euo pipefail
[[ -s "$1" ]] || { echo "FAIL: empty query output" >&2; exit 1; }
if unexpected="$(grep -vE '^@loom//(topology|core):|^@com_google_absl//' "$1")"; then
  echo "FAIL: unexpected dependencies of @loom//topology:mesh:" >&2
  echo "$unexpected" >&2
  exit 1
fi
grep -qx "@loom//topology:mesh" "$1" || { echo "FAIL: the mesh itself is missing" >&2; exit 1; }
echo "PASS: $(wc -l <"$1") labels, all in @loom//topology, @loom//core or Abseil"
