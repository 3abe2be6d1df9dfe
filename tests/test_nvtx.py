"""ddpc.cuda.nvtx: the ranges and marks reach an NVTX tool (a recorder built
from tests/c/nvtx_recorder.c and loaded as NVTX tools are, through
NVTX_INJECTION64_PATH), in order, with the tool's return values."""

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

import ddpc

HERE = os.path.dirname(os.path.abspath(__file__))
CUDA_INCLUDE = os.path.join(os.environ.get("CUDA_HOME", "/usr/local/cuda"), "include")


def _has_nvtx():
    try:
        ddpc.cuda.nvtx.range_pop()
    except RuntimeError:
        return False
    return True


needs_nvtx = pytest.mark.skipif(not _has_nvtx(), reason="a build without the CUDA toolkit has no NVTX")


@needs_nvtx
def test_calls_reach_the_tool_in_order(tmp_path):
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None or not os.path.exists(os.path.join(CUDA_INCLUDE, "nvtx3", "nvToolsExt.h")):
        pytest.skip("needs a C compiler and the NVTX headers")
    lib, record = tmp_path / "librecorder.so", tmp_path / "record.txt"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", f"-I{CUDA_INCLUDE}", os.path.join(HERE, "c", "nvtx_recorder.c"),
                    "-o", str(lib)], check=True)
    script = textwrap.dedent("""
        import ddpc.cuda.nvtx as nvtx
        print(nvtx.range_push("outer"), nvtx.range_push("inner"), nvtx.range_pop())
        with nvtx.range("step {} of {n}", 3, n=5):
            nvtx.mark("here")

        @nvtx.range("decorated")
        def f():
            return 7

        print(f(), nvtx.range_pop())
        rid = nvtx.range_start("async")
        nvtx.range_end(rid)
        print(rid)
    """)
    res = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60,
                         env=dict(os.environ, NVTX_INJECTION64_PATH=str(lib), NVTX_RECORD=str(record)))
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["0", "1", "1", "7", "0", "100"]  # the recorder's depths and id
    assert record.read_text().splitlines() == [
        "push outer", "push inner", "pop", "push step 3 of 5", "mark here", "pop", "push decorated", "pop", "pop",
        "start async 100", "end 100"]


@needs_nvtx
def test_messages_must_be_strings_and_without_a_tool_calls_return_at_once():
    with pytest.raises(TypeError, match="NVTX message must be a str"):
        ddpc.cuda.nvtx.range_push(3)
    with pytest.raises(TypeError, match="NVTX message must be a str"):
        ddpc.cuda.nvtx.mark(b"bytes")
    import ddpc.cuda.nvtx as nvtx
    assert nvtx is ddpc.cuda.nvtx
    if "NVTX_INJECTION64_PATH" not in os.environ:
        with nvtx.range("nothing listens"):
            nvtx.mark("m")
        assert isinstance(nvtx.range_start("r"), int)
