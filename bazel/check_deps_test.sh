#!/usr/bin/env bash
# check_deps_test.sh QUERY_OUTPUT ALLOWED_PREFIX...: fails if any label in the
# genquery output starts with none of the allowed prefixes. Keeps each library's
# transitive dependencies to what its package promises (embedding one module pulls
# nothing else).
set -euo pipefail
output="$1"; shift
bad=0
while IFS= read -r label; do
  ok=0
  for prefix in "$@"; do
    [[ "$label" == "$prefix"* ]] && ok=1 && break
  done
  if ((ok == 0)); then
    echo "unexpected dependency: $label" >&2
    bad=1
  fi
done <"$output"
[[ -s "$output" ]] || { echo "empty query output" >&2; exit 1; }
((bad == 0)) && echo "$(wc -l <"$output") labels, all within: $*"
exit "$bad"
