// Build information a binary can report about itself: whether the translation unit
// that includes this header was compiled with optimization. Loom's tools and
// benchmarks say so in their output, since an unoptimized build runs about 3 times
// slower and its figures mean little.
//
// Example:
//   if (!kOptimizedBuild) std::cerr << kUnoptimizedBuildWarning << "\n";
//   json += absl::StrCat("\"build\": \"", BuildMode(), "\"");   // "optimized"
#ifndef LOOM_CORE_BUILD_INFO_H_
#define LOOM_CORE_BUILD_INFO_H_

namespace loom {

// True when the compiler optimized this translation unit (-O1 and above, which
// `-c opt` and --config=opt give; `./bazelw run` uses --config=opt by default).
#ifdef __OPTIMIZE__
inline constexpr bool kOptimizedBuild = true;
#else
inline constexpr bool kOptimizedBuild = false;
#endif

// "optimized" or "unoptimized".
inline constexpr const char* BuildMode() { return kOptimizedBuild ? "optimized" : "unoptimized"; }

inline constexpr const char kUnoptimizedBuildWarning[] =
    "warning: this binary was built without optimization (fastbuild or dbg) and runs about "
    "3 times slower; `./bazelw run` builds optimized, or pass --config=opt";

}  // namespace loom

#endif  // LOOM_CORE_BUILD_INFO_H_
