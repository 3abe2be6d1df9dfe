"""Builds the data layer's C unit tests (tests/c/test_sampler.c: sampler index
math, .npy headers, the threaded loader core) with AddressSanitizer and
-Werror, and runs them."""

import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CC = os.environ.get("CC", "cc")
FLAGS = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all", "-Wall", "-Wextra",
         "-Werror", "-Wno-missing-field-initializers", "-std=c11", "-D_GNU_SOURCE", "-g", "-O1", "-pthread"]
SOURCES = [f"{ROOT}/csrc/{f}.c" for f in ("common", "dtype", "alloc", "device", "sampler", "npy", "loader")]


def cuda_home():
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home and os.path.exists(os.path.join(home, "include", "cuda_runtime_api.h")):
            return home
    return None


@pytest.mark.parametrize("with_cuda", [False, True], ids=["cpu-only", "cuda"])
def test_data_layer_c_tests_under_asan(tmp_path, with_cuda):
    exe = str(tmp_path / "test_sampler")
    cmd = [CC] + FLAGS + ["-I", f"{ROOT}/csrc", "-I", f"{ROOT}/kernels", f"{ROOT}/tests/c/test_sampler.c"] + SOURCES
    if with_cuda:
        home = cuda_home()
        if home is None:
            pytest.skip("no CUDA toolkit to compile against")
        cmd += ["-DDDPC_WITH_CUDA=1", "-I", f"{home}/include", f"-L{home}/lib64", f"-Wl,-rpath,{home}/lib64",
                "-lcudart", "-lcublas"]
    cmd += ["-o", exe, "-lm", "-lrt"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, "compile failed:\n" + res.stderr
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1", UBSAN_OPTIONS="print_stacktrace=1")
    res = subprocess.run([exe], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "all data-layer tests passed" in res.stdout
