"""loom_dependencies(): every external repository Loom needs, declared once.

Loom's own WORKSPACE calls it, and so does any workspace that embeds Loom:

    local_repository(name = "loom", path = "/path/to/loom")   # or http_archive
    load("@loom//bazel:deps.bzl", "loom_dependencies")
    loom_dependencies()

Nothing is downloaded: the stand-ins for what Bazel 4.2.3 would fetch come from
Debian's bazel-bootstrap-source, the libraries are Debian 12 packages seen through
the BUILD shims in //third_party (./bazelw installs both). A repository the caller
declared before this call is left alone (native.existing_rule), so a consumer can
bring its own Abseil, GoogleTest, ... under the same name, with the same target
names as Loom's shims (see third_party/README.md).

This file loads nothing but @bazel_tools, which every workspace has, so it can be
loaded before anything else is declared.
"""

# Debian's bazel-bootstrap-source ships minimal forwarding copies of the rule
# repositories Bazel 4.2.3 would otherwise fetch.
DEBIAN_MOCK_REPOS = "/usr/src/bazel-bootstrap/mock_repos"

_MOCKED = [
    "rules_cc",
    "rules_java",
    "rules_proto",
    "rules_pkg",
    "bazel_skylib",
    "platforms",
    "remote_java_tools_linux",
]

# name -> (path, BUILD shim in //third_party).
_SYSTEM_LIBRARIES = [
    ("com_google_absl", "/usr", "absl.BUILD"),
    ("com_google_googletest", "/usr", "googletest.BUILD"),
    ("com_github_google_benchmark", "/usr", "benchmark.BUILD"),
    ("com_github_google_glog", "/usr", "glog.BUILD"),
    ("openmpi", "/usr/lib/x86_64-linux-gnu/openmpi", "openmpi.BUILD"),
    ("openblas", "/usr", "openblas.BUILD"),
    ("zstd", "/usr", "zstd.BUILD"),
    ("lz4", "/usr", "lz4.BUILD"),
    ("liburing", "/usr", "liburing.BUILD"),
    ("gloo", "/usr", "gloo.BUILD"),
    ("highway", "/usr", "highway.BUILD"),
    ("onednn", "/usr", "onednn.BUILD"),
    ("nlohmann_json", "/usr", "nlohmann_json.BUILD"),
    # PyTorch 1.13 (libtorch-dev, python3-torch), pybind11 and Python's headers, for
    # //integrations/torch only.
    ("libtorch", "/usr", "torch.BUILD"),
    # The CUDA Toolkit and NCCL come with the machine image, not with apt. Only
    # targets built under --config=cuda reference them, so a machine without
    # /usr/local/cuda never reads this repository.
    ("local_cuda", "/usr/local/cuda", "cuda.BUILD"),
]

def _standin_repository_impl(ctx):
    ctx.file("WORKSPACE", 'workspace(name = "%s")\n' % ctx.name)
    ctx.symlink(ctx.attr.build_file, "BUILD")

# A repository made of one BUILD file of Loom's: a stand-in for one Bazel would
# download. A repository rule (not local_repository) because a path would be
# relative to the consumer's workspace, not to Loom's.
_standin_repository = repository_rule(
    implementation = _standin_repository_impl,
    attrs = {"build_file": attr.label(mandatory = True, allow_single_file = True)},
    local = True,
)

def _shim(file):
    # Resolved against the repository holding this .bzl file (Loom's, whatever
    # name the consumer gave it), not against the workspace that calls the macro.
    return str(Label("//third_party:" + file))

def loom_dependencies():
    """Declares Loom's external repositories, skipping any already declared."""
    for name in _MOCKED:
        if not native.existing_rule(name):
            native.local_repository(name = name, path = DEBIAN_MOCK_REPOS + "/" + name)

    # `bazel test` references these labels; only `bazel coverage` runs them, which
    # Loom does not use offline.
    if not native.existing_rule("remote_coverage_tools"):
        _standin_repository(
            name = "remote_coverage_tools",
            build_file = Label("//third_party:remote_coverage_tools.BUILD"),
        )

    for name, path, shim in _SYSTEM_LIBRARIES:
        if not native.existing_rule(name):
            native.new_local_repository(name = name, path = path, build_file = _shim(shim))
