// build_mode: prints "optimized" or "unoptimized", how this binary was compiled.
// `./bazelw run //core:build_mode` prints "optimized" (`run` uses --config=opt, see
// .bazelrc); CI checks that it does.
#include <cstdio>

#include "core/build_info.h"

int main() {
  std::printf("%s\n", loom::BuildMode());
  return 0;
}
