"""loom_torch_test: a Python test of //integrations/torch run with Debian's Python.

The tests use PyTorch as the client, so they run with /usr/bin/python3 (Debian's
python3-torch lives in its dist-packages; a `python3` earlier on PATH, a pyenv say,
may have no torch), through run_py_test.sh, with the built loom_torch package on
PYTHONPATH. Tagged `torch`: CI's sanitizer steps skip them (a sanitized extension
cannot be loaded into an uninstrumented Python).
"""

def loom_torch_test(name, src, size = "medium", deps = [], args = [], tags = [], **kwargs):
    native.sh_test(
        name = name,
        size = size,
        srcs = ["tests/run_py_test.sh"],
        args = ["$(location %s)" % src] + args,
        data = [src, ":loom_torch"] + deps,
        tags = tags + ["torch"],
        **kwargs
    )
