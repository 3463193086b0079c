#!/usr/bin/env bash
# readme_in_sync_test.sh README WORKSPACE BUILD: the code blocks of Loom's README
# marked "<!-- examples/consumer/FILE -->" are copies of this workspace's files: the
# WORKSPACE block is the whole file, the BUILD block one part of it, verbatim.
set -euo pipefail
readme="$1" workspace="$2" build="$3"

# block MARK: the fenced block that follows the line "<!-- MARK -->".
block() {
  awk -v mark="<!-- $1 -->" '
    $0 == mark { found = 1; next }
    found && /^```/ { if (inside) exit; inside = 1; next }
    inside { print }' "$readme"
}

want="$(cat "$workspace")"
got="$(block examples/consumer/WORKSPACE)"
[[ -n "$got" ]] || { echo "FAIL: README has no block marked examples/consumer/WORKSPACE" >&2; exit 1; }
if [[ "$got" != "$want" ]]; then
  echo "FAIL: README's WORKSPACE block differs from examples/consumer/WORKSPACE:" >&2
  diff <(echo "$want") <(echo "$got") >&2 || true
  exit 1
fi

got="$(block examples/consumer/BUILD)"
[[ -n "$got" ]] || { echo "FAIL: README has no block marked examples/consumer/BUILD" >&2; exit 1; }
if [[ "$(cat "$build")" != *"$got"* ]]; then
  echo "FAIL: README's BUILD block is not part of examples/consumer/BUILD:" >&2
  echo "$got" >&2
  exit 1
fi
echo "PASS: README's WORKSPACE and BUILD blocks match examples/consumer"
