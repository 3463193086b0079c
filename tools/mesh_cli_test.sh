#!/usr/bin/env bash
# Runs the real //tools:mesh binary: good invocations print what they should, bad
# ones exit 2 with a message naming the values.
set -euo pipefail
MESH="$1"
fail() { echo "FAIL: $*" >&2; exit 1; }

out="$("$MESH" --shape=dp=2,pp=2,cp=1,tp=2 --ranks_per_node=4 --format=json)"
[[ "$out" == '{"world_size": 8, "dims": [{"name": "dp", "size": 2}, {"name": "pp", "size": 2}, {"name": "cp", "size": 1}, {"name": "tp", "size": 2}], "ranks": [{"rank": 0, "node": 0, "local_rank": 0, "coords": {"dp": 0, "pp": 0, "cp": 0, "tp": 0}, "groups": {"dp": [0, 4], "pp": [0, 2], "cp": [0], "tp": [0, 1]}}'* ]] \
  || fail "json head: $out"
grep -q '{"rank": 7, "node": 1, "local_rank": 3, "coords": {"dp": 1, "pp": 1, "cp": 0, "tp": 1}, "groups": {"dp": \[3, 7\], "pp": \[5, 7\], "cp": \[7\], "tp": \[6, 7\]}}\]}' <<<"$out" \
  || fail "json rank 7: $out"

out="$("$MESH" --shape=dp=2,pp=2,cp=1,tp=2 --order=tp-cp-pp-dp --rank=5)"
grep -q '^5  ' <<<"$out" || fail "table rank 5: $out"
[[ "$(wc -l <<<"$out")" == 3 ]] || fail "one rank -> title, header, one row: $out"

expect_error() {
  local want="$1"; shift
  local err status=0
  err="$("$MESH" "$@" 2>&1 >/dev/null)" || status=$?
  [[ "$status" == 2 ]] || fail "$* exited $status, expected 2"
  grep -qF -- "$want" <<<"$err" || fail "$*: expected '$want' in: $err"
}
expect_error "--shape is required" --format=json
expect_error "ranks_per_node=3 does not divide world size 8" --shape=dp=2,tp=4 --ranks_per_node=3
expect_error "dimension \"tp\" has size 0" --shape=dp=2,tp=0
expect_error "does not place dimension \"tp\"" --shape=dp=2,tp=4 --order=dp
expect_error "rank 8 is outside" --shape=dp=2,tp=4 --rank=8
expect_error "--format=yaml is not table or json" --shape=dp=2 --format=yaml
help="$("$MESH" --help 2>&1 || true)"
for flag in shape order ranks_per_node rank format; do
  grep -q -- "--$flag (" <<<"$help" || fail "--help does not list --$flag: $help"
done
echo "mesh CLI: all checks passed"
