#!/usr/bin/env bash
# shape_grid.sh TRAIN [OUT_DIR]: issue 53's grid of 128 training runs, each 2 steps
# against its one-rank reference: hidden 64/320/512/768 (vocabulary 256, 301, 500 and
# 1000 in turn), meshes dp2, tp2, pp2 and dp2 x tp2 x pp2, ZeRO 0-3, f32 and bf16.
# A run passes when the job refuses it with one line and exit 2, or finishes with its
# largest parameter difference within 1e-4 (f32) or 3e-2 (bf16) of the largest
# parameter and its measured activations equal to the estimate. Prints one line per
# run and a closing "N passed, N failed"; exits 1 when any failed.
#
# Not a test (it takes minutes with an optimized binary): run it as
#   ./bazelw build --config=opt //tools:train && tools/training/shape_grid.sh bazel-bin/tools/train
set -uo pipefail
TRAIN="${1:?usage: shape_grid.sh TRAIN [OUT_DIR]}"
OUT="${2:-$(mktemp -d)}"
mkdir -p "$OUT"
passed=0
failed=0
hiddens=(64 320 512 768)
vocabs=(256 301 500 1000)
meshes=("--dp=2 --tp=1 --pp=1" "--dp=1 --tp=2 --pp=1" "--dp=1 --tp=1 --pp=2" "--dp=2 --tp=2 --pp=2")
for i in "${!hiddens[@]}"; do
  hidden="${hiddens[$i]}"
  vocab="${vocabs[$i]}"
  for mesh in "${meshes[@]}"; do
    for zero in 0 1 2 3; do
      for dtype in f32 bf16; do
        name="hidden=$hidden vocab=$vocab $mesh zero=$zero dtype=$dtype"
        json="$OUT/run.json"
        rm -f "$json"
        # shellcheck disable=SC2086
        "$TRAIN" --hidden="$hidden" --heads=8 --layers=2 --vocab="$vocab" --seq_len=64 \
          --steps=2 $mesh --zero="$zero" --dtype="$dtype" --offload=none \
          --summary_json="$json" >"$OUT/run.out" 2>"$OUT/run.err"
        rc=$?
        if ((rc == 2)) && [[ "$(wc -l <"$OUT/run.err")" -eq 1 ]]; then
          echo "refused  $name: $(cat "$OUT/run.err")"
          passed=$((passed + 1))
          continue
        fi
        verdict="$(python3 - "$json" "$dtype" "$OUT/run.out" <<'EOF' 2>&1
import json, re, sys
try:
    d = json.load(open(sys.argv[1]))
except Exception as e:
    print(f"FAIL no summary ({e})"); sys.exit()
bound = 3e-2 if sys.argv[2] == "bf16" else 1e-4
m = re.search(r"\(([0-9.e+-]+) of the largest parameter\)", open(sys.argv[3]).read())
rel = float(m.group(1)) if m else None
act = d["peak_activation_bytes_per_rank"] == d["estimated_activation_bytes_per_rank"]
ok = rel is not None and rel <= bound and act
print("ok" if ok else "FAIL",
      f"difference {rel:.3g} of the largest parameter (bound {bound:g}),"
      if rel is not None else "no reference line,",
      "activations", "= estimate" if act else "!= estimate")
EOF
)"
        if ((rc == 0)) && [[ "$verdict" == ok* ]]; then
          passed=$((passed + 1))
        else
          failed=$((failed + 1))
          verdict="$verdict (exit $rc: $(tail -n 1 "$OUT/run.err"))"
        fi
        echo "${verdict%% *}  $name: ${verdict#* }"
      done
    done
  done
done
echo "$passed passed, $failed failed"
((failed == 0))
