#!/usr/bin/env bash
# Runs the real //tools:schedule binary: each format prints what it should, CSV
# round-trips through --load, --verify accepts good schedules and rejects a
# deadlocking one (exit 1), and bad input exits 2 with a message naming the value.
set -euo pipefail
SCHEDULE="$1"
TMP="${TEST_TMPDIR:-$(mktemp -d)}"
fail() { echo "FAIL: $*" >&2; exit 1; }

# table: the grid, then the summary with the overall and per-rank bubble and the
# peak activations; everything on stdout.
out="$("$SCHEDULE" --schedule=1f1b --ranks=4 --microbatches=8 2>"$TMP/err")"
[[ ! -s "$TMP/err" ]] || fail "table wrote to stderr: $(cat "$TMP/err")"
[[ "$(head -1 <<<"$out")" == "1f1b: loop p=4 v=1, 8 microbatches" ]] || fail "table title: $out"
grep -q '^rank 0  0F0   0F1   0F2   0F3   0B0   0F4' <<<"$out" || fail "grid rank 0: $out"
grep -qF 'makespan 33, bubble ratio 0.2727 (27.27%)' <<<"$out" || fail "bubble ratio: $out"
grep -qF 'rank  busy  idle  bubble ratio     peak activations' <<<"$out" || fail "rank header: $out"
grep -qF '0     24    9     0.2727 (27.27%)  4' <<<"$out" || fail "rank 0 row: $out"
grep -qF '3     24    9     0.2727 (27.27%)  1' <<<"$out" || fail "rank 3 row: $out"

out="$("$SCHEDULE" --schedule=interleaved_1f1b --ranks=4 --microbatches=8 --virtual=2 --verify)"
grep -qF 'makespan 57, bubble ratio 0.1579 (15.79%)' <<<"$out" || fail "interleaved bubble: $out"
grep -q '^verified: interleaved-1f1b (128 actions)' <<<"$out" || fail "interleaved verify: $out"

# Zero-bubble schedules also show the activations held until I.
out="$("$SCHEDULE" --schedule=zb-h1 --ranks=4 --microbatches=8 --costs=F=1,I=1,W=1)"
grep -qF 'makespan 27, bubble ratio 0.1111 (11.11%)' <<<"$out" || fail "zb-h1 bubble: $out"
grep -qF 'peak until I' <<<"$out" || fail "zb-h1 until I: $out"

# csv: one row per rank on stdout, the summary on stderr; loading it back gives the
# same CSV and the same simulation, compute-only and lowered.
for lower in --nolower --lower; do
  "$SCHEDULE" --schedule=zb_v --ranks=4 --microbatches=8 --format=csv "$lower" \
    >"$TMP/zbv.csv" 2>"$TMP/zbv.err"
  [[ "$(wc -l <"$TMP/zbv.csv")" == 4 ]] || fail "csv rows $lower: $(cat "$TMP/zbv.csv")"
  grep -q '^0F0,' "$TMP/zbv.csv" || fail "csv rank 0 $lower: $(cat "$TMP/zbv.csv")"
  ! grep -q 'bubble' "$TMP/zbv.csv" || fail "summary in the csv $lower"
  grep -qF 'makespan 51, bubble ratio 0.0588 (5.88%)' "$TMP/zbv.err" || fail "csv summary $lower: $(cat "$TMP/zbv.err")"
  "$SCHEDULE" --load="$TMP/zbv.csv" --format=csv --verify >"$TMP/back.csv" 2>"$TMP/back.err"
  cmp -s "$TMP/zbv.csv" "$TMP/back.csv" || fail "csv round trip $lower: $(diff "$TMP/zbv.csv" "$TMP/back.csv")"
  grep -qF 'zbv: v-shape p=4, 8 microbatches' "$TMP/back.err" || fail "loaded layout $lower: $(cat "$TMP/back.err")"
  grep -qF 'makespan 51, bubble ratio 0.0588 (5.88%)' "$TMP/back.err" || fail "loaded summary $lower"
  grep -q '^verified: zbv ' "$TMP/back.err" || fail "loaded verify $lower: $(cat "$TMP/back.err")"
done
grep -q 'SEND_F' "$TMP/zbv.csv" || fail "--lower csv has no messages"

# A PyTorch-style file: idle steps as empty cells, \r\n line ends.
printf '0F0,0F1,,0B0,,0B1\r\n,1F0,1B0,1F1,1B1\r\n' >"$TMP/torch.csv"
out="$("$SCHEDULE" --load="$TMP/torch.csv" --verify)"
grep -q '^rank 1  1F0   1B0   1F1   1B1$' <<<"$out" || fail "pytorch csv grid: $out"
grep -q '^verified: torch ' <<<"$out" || fail "pytorch csv verify: $out"

# chrome: JSON with one complete event per compute action (64 for p=4, m=8).
"$SCHEDULE" --schedule=1f1b --ranks=4 --microbatches=8 --format=chrome >"$TMP/trace.json" 2>"$TMP/trace.err"
[[ "$(head -1 "$TMP/trace.json")" == '{"traceEvents": [' ]] || fail "chrome head: $(head -3 "$TMP/trace.json")"
[[ "$(tail -1 "$TMP/trace.json")" == '}' ]] || fail "chrome tail: $(tail -3 "$TMP/trace.json")"
[[ "$(grep -c '"ph":"X"' "$TMP/trace.json")" == 64 ]] || fail "chrome events: $(grep -c '"ph":"X"' "$TMP/trace.json")"
grep -qF '{"name":"F s0 mb0","cat":"F","ph":"X","pid":1,"tid":0,"ts":0,"dur":1000,"args":{"stage":0,"microbatch":0}}' \
  "$TMP/trace.json" || fail "chrome first event"
grep -qF '"args":{"name":"rank 3"}' "$TMP/trace.json" || fail "chrome thread names"
grep -qF 'bubble ratio 0.2727' "$TMP/trace.err" || fail "chrome summary: $(cat "$TMP/trace.err")"
if command -v python3 >/dev/null 2>&1; then
  python3 -c 'import json, sys; json.load(sys.stdin)' <"$TMP/trace.json" || fail "chrome output is not JSON"
fi

# svg: a picture with one box per compute action; --out gets the picture and
# stdout the summary.
out="$("$SCHEDULE" --schedule=1f1b --ranks=4 --microbatches=8 --format=svg --out="$TMP/t.svg")"
[[ "$(head -c 5 "$TMP/t.svg")" == '<svg ' ]] || fail "svg head: $(head -c 200 "$TMP/t.svg")"
[[ "$(tail -1 "$TMP/t.svg")" == '</svg>' ]] || fail "svg tail"
[[ "$(grep -o '<rect class="action ' "$TMP/t.svg" | wc -l)" == 64 ]] || fail "svg boxes"
grep -qF '<title>1f1b: p=4, m=8, v=1 (loop), makespan 33, bubble ratio 0.2727 (27.27%)</title>' \
  "$TMP/t.svg" || fail "svg title"
grep -qF 'bubble ratio 0.2727 (27.27%)' <<<"$out" || fail "svg --out summary: $out"
grep -q "^wrote $TMP/t.svg (" <<<"$out" || fail "svg --out note: $out"

# --verify rejects a lowered 1F1B whose rank 1 sends B0 before taking F1.
printf '0F0,0SEND_F0,0F1,0SEND_F1,0RECV_B0,0B0,0RECV_B1,0B1\n1RECV_F0,1F0,1B0,1SEND_B0,1RECV_F1,1F1,1B1,1SEND_B1\n' \
  >"$TMP/deadlock.csv"
status=0
err="$("$SCHEDULE" --load="$TMP/deadlock.csv" --verify 2>&1 >/dev/null)" || status=$?
[[ "$status" == 1 ]] || fail "deadlock --verify exited $status, expected 1"
grep -qF 'verification failed: deadlock under rendezvous semantics' <<<"$err" || fail "deadlock message: $err"
grep -qF '>1SEND_B0<' <<<"$err" || fail "deadlock grid: $err"

expect_error() {
  local want="$1"; shift
  local err status=0
  err="$("$SCHEDULE" "$@" 2>&1 >/dev/null)" || status=$?
  [[ "$status" == 2 ]] || fail "$* exited $status, expected 2"
  grep -qF -- "$want" <<<"$err" || fail "$*: expected '$want' in: $err"
}
expect_error "--ranks=0 must be >= 1" --schedule=1f1b --ranks=0
expect_error "--microbatches=-3 must be >= 1" --schedule=1f1b --microbatches=-3
expect_error "--schedule or --load is required"
expect_error "--schedule=2f2b is not gpipe, 1f1b, interleaved_1f1b, zb_h1 or zb_v" --schedule=2f2b
expect_error "--format=yaml is not table, csv, chrome or svg" --schedule=1f1b --format=yaml
expect_error "--costs: F=-1 is not a finite number >= 0" --schedule=1f1b --costs=F=-1
expect_error "--costs: unknown key \"X\"" --schedule=1f1b --costs=X=2
expect_error "num_microbatches=6, num_ranks=4" --schedule=interleaved_1f1b --microbatches=6
expect_error "1f1b does not take virtual_stages=3" --schedule=1f1b --virtual=3
expect_error "cannot read --load=$TMP/missing.csv" --load="$TMP/missing.csv"
expect_error "give --schedule=1f1b or --load=$TMP/torch.csv, not both" --schedule=1f1b --load="$TMP/torch.csv"
printf '0F0,0Z1\n' >"$TMP/bad.csv"
expect_error "bad.csv: line 1 (rank 0), cell 2: cannot parse action \"0Z1\"" --load="$TMP/bad.csv"
expect_error "--out=$TMP/no/such/dir.svg: cannot open for writing: No such file or directory" --schedule=1f1b --format=svg --out="$TMP/no/such/dir.svg"
expect_error "--svg_width: width=10 must be between 200 and 100000 pixels" --schedule=1f1b --format=svg --svg_width=10

# The pictures in pipeline/docs are what the tool draws today (regenerate them with
# the commands in pipeline/README.md after changing the drawing).
shift
[[ "$#" -ge 3 ]] || fail "expected the pipeline/docs pictures as arguments, got $#"
for picture in "$@"; do
  case "$(basename "$picture")" in
    interleaved_1f1b_p4_m8_v2.svg) flags=(--schedule=interleaved_1f1b --ranks=4 --microbatches=8 --virtual=2) ;;
    zb_v_p4_m8.svg) flags=(--schedule=zb_v --ranks=4 --microbatches=8) ;;
    1f1b_p4_m8.svg) flags=(--schedule=1f1b --ranks=4 --microbatches=8) ;;
    *) fail "no command known for $picture" ;;
  esac
  "$SCHEDULE" "${flags[@]}" --format=svg --svg_width=1600 >"$TMP/picture.svg" 2>/dev/null
  cmp -s "$picture" "$TMP/picture.svg" || fail "$picture is out of date: regenerate it (pipeline/README.md)"
done

help="$("$SCHEDULE" --help 2>&1 || true)"
for flag in schedule ranks microbatches virtual costs format verify lower load out time_unit_us svg_width; do
  grep -q -- "--$flag (" <<<"$help" || fail "--help does not list --$flag: $help"
done
echo "schedule CLI: all checks passed"
