#!/usr/bin/env bash
# isa_symbols_test.sh ARCHIVE...: fails if an ISA kernel archive defines any global or
# weak symbol other than its Step*Avx2 / Step*Avx512 entry points. Such a symbol (an
# inline function from a header, a template instantiation) would be compiled for the
# archive's ISA, and the linker could keep that copy for callers on CPUs without it.
set -euo pipefail
bad=0
(($# == 2)) || { echo "expected the two ISA kernel archives, got: $*" >&2; exit 1; }
for archive in "$@"; do
  [[ -f "$archive" ]] || { echo "missing $archive" >&2; exit 1; }
  while read -r _ type name; do
    [[ -z "${name:-}" ]] && continue
    if [[ "$name" =~ ^_ZN4loom14adamw_internal[0-9]+Step(F32|BF16|Blockwise8)Avx(2|512)E ]]; then
      continue
    fi
    # Sanitizer and debug builds refer to the C++ exception personality routine through a
    # weak data word (DW.ref.__gxx_personality_v0): data, not code, so no ISA leaks.
    [[ "$name" == DW.ref.* ]] && continue
    # clang's UBSan (-fsanitize=function) emits the type_info of the function types it
    # checks calls against (_ZTIF... and their names, _ZTSF...): data, not code.
    [[ "$name" =~ ^_ZT[IS]F ]] && continue
    echo "$archive: unexpected $type symbol $name ($(c++filt "$name"))" >&2
    bad=1
  done < <(nm --defined-only --extern-only "$archive" | grep -v ':$' | grep -v '^$')
  count="$(nm --defined-only --extern-only "$archive" | grep -c ' T _ZN4loom14adamw_internal' || true)"
  ((count == 3)) || { echo "$archive: expected 3 entry points, found $count" >&2; bad=1; }
  echo "$archive: $count entry points, nothing else exported"
done
exit "$bad"
