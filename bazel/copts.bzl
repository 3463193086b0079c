"""The one place where Loom's compiler flags live (applied through loom.bzl)."""

# Warnings are on and fatal for Loom's own code only; system headers come in through
# -isystem and are exempt.
LOOM_COPTS = [
    "-Wall",
    "-Wextra",
    "-Werror",
    "-Wshadow",
    "-Wnon-virtual-dtor",
    "-Wcast-align",
    "-Wunused",
    "-Woverloaded-virtual",
    "-Wnull-dereference",
    "-Wdouble-promotion",
    "-Wformat=2",
    "-Wimplicit-fallthrough",
]

# Tests and benchmarks use gtest/benchmark macros that trip some of the above.
LOOM_TEST_COPTS = LOOM_COPTS + [
    "-Wno-null-dereference",
]

# nvcc flags for .cu files: host code gets the same warnings; PIC for linking into
# shared test binaries; sm_90 (H100) plus PTX for newer parts.
LOOM_NVCC_FLAGS = [
    "-std=c++17",
    "-O3",
    "--compiler-options=-fPIC,-Wall,-Werror",
    "-gencode=arch=compute_90,code=sm_90",
    "-gencode=arch=compute_90,code=compute_90",
]
