#include "models/gpt/gpt_init.h"

#include <cmath>
#include <utility>

namespace loom {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint64_t HashName(absl::string_view name) {
  uint64_t h = 0xcbf29ce484222325ULL;
  for (const char c : name) {
    h ^= static_cast<unsigned char>(c);
    h *= 0x100000001b3ULL;
  }
  return h;
}

std::vector<float> SeededValues(uint64_t seed, absl::string_view name, int64_t n, float stddev,
                                float mean) {
  const uint64_t key = SplitMix64(seed ^ HashName(name));
  // Uniform on [-a, a) has standard deviation a / sqrt(3).
  const float a = stddev * std::sqrt(3.0f);
  std::vector<float> v(static_cast<size_t>(n < 0 ? 0 : n));
  for (size_t i = 0; i < v.size(); ++i) {
    const uint64_t bits = SplitMix64(key + i);
    const float u = static_cast<float>(bits >> 40) * (1.0f / 16777216.0f);  // [0, 1)
    v[i] = mean + a * (2.0f * u - 1.0f);
  }
  return v;
}

Tensor SeededTensor(uint64_t seed, absl::string_view name, std::vector<int64_t> shape,
                    float stddev, float mean) {
  const int64_t n = NumElements(shape);
  // FromValues fails only on a count mismatch, which cannot happen here.
  return *Tensor::FromValues(std::move(shape), SeededValues(seed, name, n, stddev, mean));
}

}  // namespace loom
