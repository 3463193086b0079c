// Helpers for tests that sweep floating-point bit patterns (testonly): bit casts and a
// mismatch collector that reports a count and a few examples instead of millions of
// failure lines.
#ifndef LOOM_CORE_FLOAT_BITS_TESTING_H_
#define LOOM_CORE_FLOAT_BITS_TESTING_H_

#include <cstdint>
#include <cstring>
#include <string>

namespace loom {
namespace testing_internal {

inline uint32_t FloatBits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

inline float BitsToFloat(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// Mismatches gathers failures from a sweep; the first ten are kept as examples.
class Mismatches {
 public:
  void Add(const std::string& what) {
    if (count_++ < 10) examples_ += what + "\n";
  }
  int count() const { return count_; }
  const std::string& examples() const { return examples_; }

 private:
  int count_ = 0;
  std::string examples_;
};

}  // namespace testing_internal
}  // namespace loom

#endif  // LOOM_CORE_FLOAT_BITS_TESTING_H_
