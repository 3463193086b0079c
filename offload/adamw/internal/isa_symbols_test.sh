#!/usr/bin/env bash
# isa_symbols_test.sh ARCHIVE: holds the vector kernel archive (adamw_simd.cc, compiled per
# Highway target) to what makes run-time dispatch safe:
#  - it exports each target's kTileKernels table (data) and, of Loom's names, only those
#    and the dispatcher SimdTileKernels (with core's SimdTableFor, which unoptimized
#    builds leave out of line: baseline code, as the next check shows);
#  - no function outside a target's namespace (N_AVX2, N_AVX3: only that target's code
#    calls into them) holds an AVX instruction. Such a function (an inline function or
#    template compiled with a target's attributes under a shared name) could be the copy
#    the linker keeps for a caller on a CPU without that ISA.
set -euo pipefail
(($# == 1)) || { echo "expected the vector kernel archive, got: $*" >&2; exit 1; }
archive="$1"
[[ -f "$archive" ]] || { echo "missing $archive" >&2; exit 1; }
bad=0
tables=0
while read -r _ type name; do
  [[ -z "${name:-}" ]] && continue
  if [[ "$name" =~ ^_ZN4loom14adamw_internal6N_AVX[23]12kTileKernelsE$ ]]; then
    [[ "$type" == [RD] ]] || { echo "$archive: $name is $type, not data" >&2; bad=1; }
    tables=$((tables + 1))
  elif [[ "$name" =~ ^_ZN4loom && ! "$name" =~ ^_ZN4loom14adamw_internal15SimdTileKernelsE &&
          ! "$name" =~ ^_ZN4loom13core_internal12SimdTableFor ]]; then
    echo "$archive: unexpected $type symbol $name ($(c++filt "$name"))" >&2
    bad=1
  fi
done < <(nm --defined-only --extern-only "$archive" | grep -v ':$' | grep -v '^$')
((tables == 2)) || { echo "$archive: expected the AVX2 and AVX3 tables, found $tables" >&2; bad=1; }

# Every function and whether it uses VEX/EVEX code (v-prefixed mnemonics, ymm, zmm or
# mask registers), from the disassembly.
functions=0
while read -r name uses_avx; do
  functions=$((functions + 1))
  [[ "$name" =~ [0-9]N_AVX[23] ]] && continue
  if [[ "$uses_avx" == 1 ]]; then
    echo "$archive: $name ($(c++filt "$name")) is outside a target namespace but uses AVX" >&2
    bad=1
  fi
done < <(objdump -d --no-show-raw-insn "$archive" | awk '
  /^[0-9a-f]+ <.*>:$/ { if (name != "") print name, avx; name = $2; sub(/^</, "", name);
                        sub(/>:$/, "", name); avx = 0; next }
  /^ +[0-9a-f]+:\t/ { split($0, parts, "\t"); insn = parts[2];
                      if (insn ~ /^v/ || insn ~ /%[yz]mm|%k[0-7]/) avx = 1 }
  END { if (name != "") print name, avx }')
((functions > 0)) || { echo "$archive: no functions disassembled" >&2; bad=1; }
echo "$archive: $tables target tables, $functions functions checked"
exit "$bad"
