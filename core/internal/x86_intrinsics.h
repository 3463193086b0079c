#ifndef LOOM_CORE_INTERNAL_X86_INTRINSICS_H_
#define LOOM_CORE_INTERNAL_X86_INTRINSICS_H_

// <immintrin.h> for Loom's AVX2 and AVX-512 kernels. Include it before anything else
// that might include <immintrin.h>: the first inclusion is the one that counts.
//
// GCC 12's AVX-512 intrinsics start their "undefined" operands as self-initialised
// variables, which -Wmaybe-uninitialized (and -Wuninitialized) report wherever they are
// inlined at -O2 (GCC PR 105593, fixed in GCC 13). clang has neither the warning group
// nor the problem, and would warn about the unknown group instead.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#pragma GCC diagnostic ignored "-Wuninitialized"
#include <immintrin.h>
#pragma GCC diagnostic pop
#else
#include <immintrin.h>
#endif

#endif  // LOOM_CORE_INTERNAL_X86_INTRINSICS_H_
