// Whether this build runs under a sanitizer, for the tests that size their sweeps to
// it: AddressSanitizer (gcc and clang), ThreadSanitizer (gcc, and clang through
// __has_feature). A sanitizer build checks the same code paths; it does not need every
// repetition of them at every size, and its shadow memory and slowdown make the
// largest cases the slowest part of CI.
//
// Example:
//   const std::vector<int> worlds = kUnderSanitizer ? std::vector<int>{1, 2, 3, 5, 8}
//                                                   : std::vector<int>{1, 2, 3, 5, 8, 16};
#ifndef LOOM_CORE_SANITIZERS_H_
#define LOOM_CORE_SANITIZERS_H_

namespace loom {

#if defined(__SANITIZE_ADDRESS__)
inline constexpr bool kAddressSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kAddressSanitizer = true;
#else
inline constexpr bool kAddressSanitizer = false;
#endif
#else
inline constexpr bool kAddressSanitizer = false;
#endif

#if defined(__SANITIZE_THREAD__)
inline constexpr bool kThreadSanitizer = true;
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
inline constexpr bool kThreadSanitizer = true;
#else
inline constexpr bool kThreadSanitizer = false;
#endif
#else
inline constexpr bool kThreadSanitizer = false;
#endif

inline constexpr bool kUnderSanitizer = kAddressSanitizer || kThreadSanitizer;

}  // namespace loom

#endif  // LOOM_CORE_SANITIZERS_H_
