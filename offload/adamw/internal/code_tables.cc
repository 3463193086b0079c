#include "offload/adamw/internal/code_tables.h"

#include <cstdint>

namespace loom {
namespace adamw_internal {
namespace {

constexpr double Pow2(int e) {
  double x = 1.0;
  for (int i = 0; i < e; ++i) x *= 2.0;
  for (int i = 0; i > e; --i) x /= 2.0;
  return x;
}

// Evaluated at compile time (the tables are constant-initialized, so no static initializer
// runs and nothing can read them before they are set).
constexpr CodeTables MakeTables(int bits) {
  CodeTables t{};
  for (int i = 0; i < 8; ++i) {
    const int z = i < bits ? i : bits - 1;
    t.encode_scale[i] = static_cast<float>(Pow2(3 * z + bits - 1) * 16.0 / 15.0);
    t.encode_offset[i] = static_cast<float>(Pow2(bits - 1 - z) / 15.0 - (Pow2(bits - 1 - z) - 1.0));
    const int l = i < bits ? i : bits - 1;
    const int zl = bits - 1 - l;
    t.decode_offset[i] = static_cast<float>(Pow2(-4 * zl - 4 - l) * (15.0 - 14.0 * Pow2(l)));
    t.decode_slope[i] = static_cast<float>(15.0 * Pow2(-4 * zl - 4 - l));
  }
  for (int e = 127 - 4 * bits; e <= 126; ++e) {
    const int z = (126 - e) / 4;
    t.encode_scale_by_exponent[e % 32] = t.encode_scale[z];
    t.encode_offset_by_exponent[e % 32] = t.encode_offset[z];
  }
  for (int l = 0; l < bits; ++l) {
    t.decode_offset_by_lzcnt[15 - l] = t.decode_offset[l];
    t.decode_slope_by_lzcnt[15 - l] = t.decode_slope[l];
  }
  return t;
}

}  // namespace

constexpr CodeTables kSignedTablesValue = MakeTables(7);
constexpr CodeTables kUnsignedTablesValue = MakeTables(8);
const CodeTables kSignedCodeTables = kSignedTablesValue;
const CodeTables kUnsignedCodeTables = kUnsignedTablesValue;

}  // namespace adamw_internal
}  // namespace loom
