"""Builds and runs the C unit tests (tests/c/) under AddressSanitizer and
UBSan with -Werror, CPU-only and against CUDA; and builds the whole extension
CPU-only with AddressSanitizer and -Werror and runs Python tests on it."""

import glob
import os
import re
import shutil
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CC = os.environ.get("CC", "cc")
SANITIZE = ["-fsanitize=address,undefined", "-fno-omit-frame-pointer", "-fno-sanitize-recover=all"]
WARN = ["-Wall", "-Wextra", "-Werror", "-Wno-missing-field-initializers", "-std=c11", "-D_GNU_SOURCE", "-g", "-O1"]


def cuda_home():
    for home in (os.environ.get("CUDA_HOME"), "/usr/local/cuda"):
        if home and os.path.exists(os.path.join(home, "include", "cuda_runtime_api.h")):
            return home
    return None


def compile_and_run(tmp_path, test_source, sources, with_cuda, kernel_objects=()):
    exe = str(tmp_path / ("test_cuda" if with_cuda else "test_cpu"))
    cmd = [CC] + WARN + SANITIZE + ["-I", f"{ROOT}/csrc", "-I", f"{ROOT}/kernels", test_source] + sources
    if with_cuda:
        home = cuda_home()
        cmd += ["-DDDPC_WITH_CUDA=1", "-I", f"{home}/include", *kernel_objects, f"-L{home}/lib64",
                f"-Wl,-rpath,{home}/lib64", "-lcudart"] + (["-lstdc++"] if kernel_objects else [])
    cmd += ["-o", exe, "-lm", "-pthread", "-lrt"]
    subprocess.run(cmd, check=True, capture_output=True, text=True, timeout=300)
    env = dict(os.environ, ASAN_OPTIONS="detect_leaks=1:abort_on_error=0", UBSAN_OPTIONS="print_stacktrace=1")
    res = subprocess.run([exe], capture_output=True, text=True, timeout=300, env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    return res.stdout


def _sources(*names):
    return [f"{ROOT}/csrc/{n}.c" for n in names]


CORE = _sources("common", "dtype", "alloc", "pool", "device", "index_error")
# name: (test program, the sources it links)
C_TESTS = {
    "core": (f"{ROOT}/tests/c/test_core.c", CORE),
    "watchdog": (f"{ROOT}/tests/c/test_watchdog.c", _sources("common", "comm/watchdog")),
    "data": (f"{ROOT}/tests/c/test_sampler.c", CORE + _sources("sampler", "npy", "loader")),
    "copy": (f"{ROOT}/tests/c/test_copy_lines.c", CORE + _sources("npy")),  # includes loader.c
    "comm": (f"{ROOT}/tests/c/test_ring_schedule.c", _sources("dtype", "comm/reduce")),
    "stash": (f"{ROOT}/tests/c/test_stash.c", _sources("common", "comm/stash")),
    "pool": (f"{ROOT}/tests/c/test_pool.c", _sources("common", "pool")),
    "sort": (f"{ROOT}/tests/c/test_sort.c", _sources("sort")),
    "window": (f"{ROOT}/tests/c/test_window.c", []),  # kernels/window.h is header-only
    "special": (f"{ROOT}/tests/c/test_special_functions.c", []),  # so are kernels/special_functions.h and the rest
    "search": (f"{ROOT}/tests/c/test_search.c", []),
    "crc": (f"{ROOT}/tests/c/test_crc.c", _sources("common", "crc")),
    "index_error": (f"{ROOT}/tests/c/test_index_error.c", _sources("common", "index_error")),
    "net": (f"{ROOT}/tests/c/test_net.c", _sources("common")),  # includes comm/net.c
    "store": (f"{ROOT}/tests/c/test_store.c", _sources("common", "comm/net", "comm/store")),
    "complex": (f"{ROOT}/tests/c/test_complex_math.c", []),  # kernels/complex_math.h is header-only
}
# The CUDA kernels (kernels/<name>.cu) that a test's sources launch in the CUDA build (loader.c's direct gather).
C_TEST_KERNELS = {"data": ["gather"], "copy": ["gather"]}


@pytest.fixture(scope="session")
def kernel_object(tmp_path_factory):
    """kernel_object(name): kernels/<name>.cu compiled by nvcc (once per test run), for a CUDA build to link."""
    made = {}

    def get(name):
        if name not in made:
            obj = str(tmp_path_factory.mktemp("kernels") / f"{name}.o")
            subprocess.run([f"{cuda_home()}/bin/nvcc", "-c", "-O1", "-std=c++17", "-arch=sm_80", "-DDDPC_WITH_CUDA=1",
                            "-I", f"{ROOT}/csrc", "-I", f"{ROOT}/kernels", f"{ROOT}/kernels/{name}.cu", "-o", obj],
                           check=True, capture_output=True, text=True, timeout=300)
            made[name] = obj
        return made[name]

    return get


@pytest.mark.parametrize("with_cuda", [False, True], ids=["cpu-only", "cuda"])
@pytest.mark.parametrize("name", sorted(C_TESTS))
def test_c_unit_tests_under_asan(tmp_path, kernel_object, name, with_cuda):
    if with_cuda and not cuda_home():
        pytest.skip("no CUDA toolkit to compile against")
    source, deps = C_TESTS[name]
    try:
        kernels = [kernel_object(k) for k in C_TEST_KERNELS.get(name, ())] if with_cuda else []
        out = compile_and_run(tmp_path, source, deps, with_cuda, kernels)
    except subprocess.CalledProcessError as e:
        pytest.fail(f"compile failed:\n{e.stderr}")
    assert "tests passed" in out


ASAN_SUITES = ("test_tensor", "test_indexing", "test_interop", "test_nccl", "test_ops_nn", "test_autograd", "test_nn",
               "test_optim", "test_nn_extra", "test_sampler", "test_amp", "test_conv", "test_conv3d",
               "test_embedding_bag", "test_reductions", "test_math", "test_sort", "test_stats", "test_misc_functions",
               "test_special", "test_fft")


def libasan():
    out = subprocess.run([CC, "-print-file-name=libasan.so"], capture_output=True, text=True).stdout.strip()
    return out if os.path.isabs(out) and os.path.exists(out) else None


@pytest.mark.slow
def test_extension_cpu_only_asan_build_without_warnings(tmp_path):
    """The CPU-only build compiles with no warnings and passes the in-process suites under ASan,
    and multi-process all-reduces through shared memory."""
    asan = libasan()
    if asan is None:
        pytest.skip("the compiler has no libasan.so")
    pkg = tmp_path / "lib"
    env = dict(os.environ, DDPC_CUDA="0", DDPC_SANITIZE="address", CFLAGS="-Werror")
    res = subprocess.run([sys.executable, "setup.py", "-q", "build_ext", "--build-lib", str(pkg), "--build-temp",
                          str(tmp_path / "tmp")], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "warning:" not in res.stdout + res.stderr
    shutil.copytree(f"{ROOT}/python/ddpc", pkg / "ddpc", dirs_exist_ok=True,
                    ignore=shutil.ignore_patterns("_C*.so", "__pycache__"))
    assert glob.glob(str(pkg / "ddpc" / "_C*.so"))
    env = dict(os.environ, LD_PRELOAD=asan, ASAN_OPTIONS="detect_leaks=0", PYTHONPATH=str(pkg))
    suites = ", ".join(f"'{ROOT}/tests/{t}.py'" for t in ASAN_SUITES)
    check = ("import ddpc; assert not ddpc.build_info()['cuda'];"
             "import pytest, sys; sys.exit(pytest.main(['-q', '-p', 'no:cacheprovider', '-x', "
             f"{suites}, '-k', 'not cross_process and not torch']))")
    res = subprocess.run([sys.executable, "-c", check], cwd=str(tmp_path), env=env, capture_output=True, text=True,
                         timeout=600)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    passed = re.search(r"(\d+) passed", res.stdout)
    assert passed and int(passed.group(1)) > 300, res.stdout[-3000:]
    # Ranks in processes of their own, on the same build: the shared-memory engine and its shared buffers,
    # send/recv reading messages ahead into the stash that destroying the group frees, and the collectives
    # with a root. (Of the shared buffers' rank counts, 3 and the two-host layout; 2 and 4 run in the suite
    # without ASan.)
    res = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-x",
                          f"{ROOT}/tests/test_collectives.py", "-k",
                          "(shared or later or tag or rooted_collectives_on) and not shared_buffers[4] and "
                          "not shared_buffers[2]"],
                         cwd=str(tmp_path), env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0 and " passed" in res.stdout, res.stdout[-3000:] + res.stderr[-3000:]
