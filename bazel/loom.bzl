"""Thin macros that apply Loom's flags in one place.

loom_cc_library / loom_cc_test / loom_cc_binary / loom_cc_benchmark wrap the native
rules with LOOM_COPTS. loom_cuda_library compiles .cu files with nvcc (only under
--config=cuda; otherwise the target is skipped as incompatible).
"""

load("//bazel:copts.bzl", "LOOM_COPTS", "LOOM_NVCC_FLAGS", "LOOM_TEST_COPTS")

def loom_cc_library(name, copts = [], **kwargs):
    native.cc_library(name = name, copts = LOOM_COPTS + copts, **kwargs)

def loom_cc_binary(name, copts = [], **kwargs):
    native.cc_binary(name = name, copts = LOOM_COPTS + copts, **kwargs)

def loom_cc_test(name, copts = [], deps = [], tags = [], single_threaded = False, **kwargs):
    """A GoogleTest test linked with gtest_main.

    single_threaded: the test starts no threads or processes, so ThreadSanitizer has
    nothing to check in it; it is tagged `single_threaded` and CI's sanitizer passes
    skip it (the suite's -Werror build and its bounds-checked tests cover it).
    """
    native.cc_test(
        name = name,
        copts = LOOM_TEST_COPTS + copts,
        deps = deps + ["@com_google_googletest//:gtest_main"],
        tags = tags + (["single_threaded"] if single_threaded else []),
        **kwargs
    )

def loom_isa_capped_tests(name, srcs, copts = [], deps = [], tags = [], **kwargs):
    """The test `name`'s sources again, as `name`_avx2 and `name`_avx512.

    Each runs on the host as a CPU of that instruction set would
    (//core:isa_capped_test_main caps Loom's kernels, Highway, oneDNN and OpenBLAS),
    so that a kernel chosen by ISA is tested on every ISA the host can run; a host
    without the level skips them, saying so. Tagged `isa_capped` and
    `single_threaded` (the sanitizer steps run the uncapped test).
    """
    for cap in ["avx2", "avx512"]:
        native.cc_test(
            name = "%s_%s" % (name, cap),
            srcs = srcs,
            copts = LOOM_TEST_COPTS + copts,
            deps = deps + ["//core:isa_capped_test_main"],
            args = ["--loom_isa_cap=" + cap],
            tags = tags + ["isa_capped", "single_threaded"],
            **kwargs
        )

def loom_mpi_test(name, ranks = 4, copts = [], deps = [], tags = [], args = [], **kwargs):
    """A GoogleTest test that runs as an Open MPI job of `ranks` processes.

    Its main (//collectives/transport/mpi:mpi_test_main) starts the binary again under
    `mpirun -np <ranks>` on the shared-memory BTL, so `bazel test` runs it like any
    other test. Tagged `mpi` and `exclusive` (several mpirun jobs at once on two cores
    slow each other past their deadlines).
    """
    native.cc_test(
        name = name,
        copts = LOOM_TEST_COPTS + copts,
        deps = deps + ["//collectives/transport/mpi:mpi_test_main"],
        args = args + ["--mpi_ranks=%d" % ranks],
        tags = tags + ["mpi"],
        **kwargs
    )

def loom_cc_benchmark(name, copts = [], deps = [], tags = [], **kwargs):
    """A Google Benchmark binary: testonly, tagged `benchmark`, never run by `test`."""
    native.cc_binary(
        name = name,
        testonly = True,
        copts = LOOM_TEST_COPTS + copts,
        deps = deps + ["//core:benchmark_main"],
        tags = tags + ["benchmark"],
        **kwargs
    )

_CUDA_ONLY = select({
    "//bazel:cuda_enabled": [],
    "//conditions:default": ["//bazel:incompatible"],
})

# target_compatible_with of a target that exists only under --config=cuda.
LOOM_CUDA_ONLY = _CUDA_ONLY

def loom_gpu_cc_library(name, tags = [], **kwargs):
    """A plain C++ library over CUDA, NCCL or cuBLAS (no .cu sources): built only
    under --config=cuda, tagged `gpu`."""
    loom_cc_library(
        name = name,
        tags = tags + ["gpu"],
        target_compatible_with = _CUDA_ONLY,
        **kwargs
    )

def loom_cuda_library(name, cu_srcs, hdrs = [], cu_hdrs = [], deps = [], tags = [], **kwargs):
    """A library whose .cu sources are compiled by nvcc into objects.

    The public headers are plain C++ so that CPU code can include them. `cu_hdrs`
    are further headers the .cu sources include (plain, dependency-free ones such as
    core/half.h: nvcc sees only these files, not the deps' include paths). Built only
    under --config=cuda; without it the target is incompatible and skipped.
    """
    objs = []
    for src in cu_srcs:
        obj = name + "_" + src.replace("/", "_").replace(".cu", ".o")
        native.genrule(
            name = obj + "_nvcc",
            srcs = [src] + hdrs + cu_hdrs,
            outs = [obj],
            cmd = "/usr/local/cuda/bin/nvcc %s -I. -I$(GENDIR) -c $(location %s) -o $@" % (
                " ".join(LOOM_NVCC_FLAGS),
                src,
            ),
            target_compatible_with = _CUDA_ONLY,
            tags = tags + ["gpu"],
        )
        objs.append(obj)
    native.cc_library(
        name = name,
        srcs = objs,
        hdrs = hdrs,
        copts = LOOM_COPTS,
        deps = deps + ["@local_cuda//:cudart"],
        target_compatible_with = _CUDA_ONLY,
        tags = tags + ["gpu"],
        **kwargs
    )

def loom_cuda_test(name, deps = [], tags = [], **kwargs):
    """A GPU test: built only under --config=cuda, tagged `gpu`."""
    loom_cc_test(
        name = name,
        deps = deps,
        tags = tags + ["gpu"],
        target_compatible_with = _CUDA_ONLY,
        **kwargs
    )

def loom_deps_test(name, target, allowed):
    """Fails if `target` depends (transitively, ignoring toolchains) on anything whose
    label starts with none of the `allowed` prefixes: embedding one library must pull
    in only what its package promises."""
    native.genquery(
        name = name + "_query",
        expression = "deps(%s)" % target,
        opts = ["--noimplicit_deps"],
        scope = [target],
    )
    native.sh_test(
        name = name,
        size = "small",
        srcs = ["//bazel:check_deps_test.sh"],
        args = ["$(location :%s_query)" % name] + allowed,
        data = [":%s_query" % name],
        tags = ["single_threaded"],
    )

def loom_cuda_benchmark(name, tags = [], **kwargs):
    """A GPU Google Benchmark binary: loom_cc_benchmark built only under --config=cuda,
    tagged `gpu` (and `benchmark`, so `test` never runs it)."""
    loom_cc_benchmark(
        name = name,
        tags = tags + ["gpu"],
        target_compatible_with = _CUDA_ONLY,
        **kwargs
    )

def loom_cross_host_test(name, srcs, args = [], data = [], size = "medium", **kwargs):
    """A shell test of jobs across hosts emulated by //tools/cluster (root).

    Its first argument is cluster.sh (cluster_testing.sh beside it, to source); `args`
    follow. Tagged `cross_host` (CI's sanitizer steps skip it), `exclusive` (several
    mpirun jobs at once on two cores slow each other past their deadlines), `mpi` and
    `no_tsan`.
    """
    native.sh_test(
        name = name,
        size = size,
        srcs = srcs,
        args = ["$(location //tools/cluster:cluster.sh)"] + args,
        # The delay line beside cluster.sh in the runfiles, for `up --delay`.
        data = data + [
            "//tools/cluster:cluster.sh",
            "//tools/cluster:cluster_testing.sh",
            "//tools/cluster:delay_line",
        ],
        tags = ["cross_host", "exclusive", "mpi", "no_tsan"],
        **kwargs
    )
