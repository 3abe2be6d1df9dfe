"""Build of the ddpc._C extension: C sources in csrc/, CUDA kernels in kernels/.

CUDA (with cuBLAS and cuFFT) is compiled in when a toolkit is found (CUDA_HOME, /usr/local/cuda, or nvcc
on PATH) unless DDPC_CUDA=0. Environment switches:
  DDPC_CUDA=0             CPU-only build
  DDPC_SANITIZE=address   AddressSanitizer (load with LD_PRELOAD=$(gcc -print-file-name=libasan.so))
  DDPC_DEBUG=1            -O0 -g
  DDPC_CUDA_ARCHS=80;90   SASS targets (PTX for the highest is always added)
  DDPC_BUILD_JOBS=N       sources compiled at once (default: one per core)
  NCCL_HOME=/path         NCCL outside the toolkit (the nvidia-nccl wheel is also found)
"""
import concurrent.futures
import glob
import importlib.util
import os
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))


def env_flag(name, default=""):
    return os.environ.get(name, default).strip()


def find_cuda():
    if env_flag("DDPC_CUDA", "1") in ("0", "off", "no", "false"):
        return None
    candidates = [env_flag("CUDA_HOME"), env_flag("CUDA_PATH"), "/usr/local/cuda"]
    nvcc = shutil.which("nvcc")
    if nvcc:
        candidates.append(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))))
    for home in candidates:
        if home and os.path.exists(os.path.join(home, "bin", "nvcc")):
            return home
    return None


def find_nccl(cuda_home):
    """(include_dir, lib_dir) of NCCL: NCCL_HOME, the nvidia-nccl wheel, or the toolkit.

    ddpc compiles against the headers but does not link the library: _C loads
    libnccl.so.2 on first use (csrc/comm/nccl_lib.c), preferring the copy already
    in the process and the wheel's, so that it shares PyTorch's NCCL. lib_dir is
    its last resort but one. The wheel comes before the toolkit so that the
    headers match the NCCL that PyTorch loads."""
    roots = [env_flag("NCCL_HOME")]
    spec = importlib.util.find_spec("nvidia")
    if spec is not None and spec.submodule_search_locations:
        roots += [os.path.join(p, "nccl") for p in spec.submodule_search_locations]
    roots.append(cuda_home)
    for root in filter(None, roots):
        inc = os.path.join(root, "include")
        if not os.path.exists(os.path.join(inc, "nccl.h")):
            continue
        for lib in ("lib64", "lib"):
            libdir = os.path.join(root, lib)
            if glob.glob(os.path.join(libdir, "libnccl.so*")):
                return inc, libdir
    return None


def cuda_libdir(cuda_home):
    for lib in ("lib64", "lib", os.path.join("targets", "x86_64-linux", "lib")):
        path = os.path.join(cuda_home, lib)
        if os.path.exists(os.path.join(path, "libcudart.so")):
            return path
    return os.path.join(cuda_home, "lib64")


def numpy_include():
    import numpy

    return numpy.get_include()


CUDA_HOME = find_cuda()
NCCL = find_nccl(CUDA_HOME) if CUDA_HOME else None
SANITIZE = env_flag("DDPC_SANITIZE")
DEBUG = env_flag("DDPC_DEBUG") == "1"

opt = ["-O0", "-g"] if DEBUG else ["-O3"]
# No errno from math functions and no floating-point traps (ddpc uses neither)
# let gcc vectorise the sqrt, compares and selects of the host loops; a * b + c
# contracted to one fused multiply-add where the target has one (-std=c11 turns
# that off otherwise) halves the host's polynomial evaluations.
cflags = ["-std=c11", "-Wall", "-Wextra", "-Wno-missing-field-initializers", "-fvisibility=hidden",
          "-fno-math-errno", "-fno-trapping-math", "-ffp-contract=fast", "-D_GNU_SOURCE", "-pthread"] + opt
ldflags = ["-pthread"]
if SANITIZE:
    cflags += ["-fsanitize=" + SANITIZE, "-fno-omit-frame-pointer"]
    ldflags += ["-fsanitize=" + SANITIZE]

include_dirs = [os.path.join(ROOT, "csrc"), os.path.join(ROOT, "kernels")]
library_dirs, libraries, rpaths, macros = [], ["rt", "dl"], [], []
if CUDA_HOME:
    macros.append(("DDPC_WITH_CUDA", "1"))
    include_dirs.append(os.path.join(CUDA_HOME, "include"))
    libdir = cuda_libdir(CUDA_HOME)
    library_dirs.append(libdir)
    rpaths.append(libdir)
    # cuBLAS and cuFFT are loaded on first use (csrc/cuda_libs.h), from this directory unless found elsewhere.
    macros.append(("DDPC_CUDA_LIBDIR", f'"{libdir}"'))
    # The kernels' host code is C++ (nvcc), so it needs libstdc++ (exception handling, static locals).
    libraries += ["cudart", "stdc++"]
    if NCCL:
        macros += [("DDPC_WITH_NCCL", "1"), ("DDPC_NCCL_LIBDIR", f'"{NCCL[1]}"')]
        include_dirs.insert(0, NCCL[0])

sources = sorted(os.path.relpath(p, ROOT) for p in glob.glob(os.path.join(ROOT, "csrc", "**", "*.c"), recursive=True))
# The headers the C sources include and the kernels: an edited one rebuilds the extension, as an edited
# source does.
headers = sorted(os.path.relpath(p, ROOT)
                 for pattern in ("csrc/**/*.h", "kernels/*.h", "kernels/*.cuh", "kernels/*.cu")
                 for p in glob.glob(os.path.join(ROOT, pattern), recursive=True))


def build_jobs():
    """Compilers run at once: DDPC_BUILD_JOBS, else one per core."""
    return max(1, int(env_flag("DDPC_BUILD_JOBS", "") or os.cpu_count() or 1))


def heaviest_first(paths):
    """Sources in the order to start them: the longest compiles first, so that none starts last and runs
    alone. CUDA sources that include CUB or Thrust take longest (their templates, not their length), then
    the rest by size."""

    def weight(path):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        return ("#include <cub/" in text or "#include <thrust/" in text, len(text))

    return sorted(paths, key=weight, reverse=True)


class BuildExt(build_ext):
    """build_ext that compiles kernels/*.cu with nvcc and links the objects in. The CUDA and the C
    sources are compiled by one pool of build_jobs() workers, heaviest first, where distutils would
    compile them one after another."""

    def build_extensions(self):
        self.pool = concurrent.futures.ThreadPoolExecutor(build_jobs())
        try:
            for ext in self.extensions:
                ext.include_dirs.append(numpy_include())
            super().build_extensions()
        finally:
            self.pool.shutdown(cancel_futures=True)

    def build_extension(self, ext):
        self.cuda_jobs = self.compile_cuda(ext) if CUDA_HOME else []
        ext.extra_objects += [obj for obj, _ in self.cuda_jobs]
        compile_c = self.compiler.compile

        def compile(sources, output_dir=None, macros=None, include_dirs=None, debug=0, extra_preargs=None,
                    extra_postargs=None, depends=None):
            c = self.compiler
            macros, objects, extra_postargs, pp_opts, build = c._setup_compile(
                output_dir, macros, include_dirs, sources, depends, extra_postargs)
            cc_args = c._get_cc_args(pp_opts, debug, extra_preargs)
            stale = heaviest_first([build[obj][0] for obj in objects if obj in build])
            by_src = {src: obj for obj, (src, _) in build.items()}
            jobs = [self.pool.submit(c._compile, by_src[src], src, build[by_src[src]][1], cc_args,
                                     extra_postargs, pp_opts) for src in stale]
            for job in jobs + [job for _, job in self.cuda_jobs]:
                job.result()  # the first failure, raised as distutils raises it
            return objects

        self.compiler.compile = compile
        try:
            super().build_extension(ext)
        finally:
            self.compiler.compile = compile_c

    def compile_cuda(self, ext):
        """Starts nvcc on each stale kernels/*.cu, heaviest first; returns (object, future) for every one."""
        nvcc = os.path.join(CUDA_HOME, "bin", "nvcc")
        archs = [a for a in env_flag("DDPC_CUDA_ARCHS", "80;90").replace(",", ";").split(";") if a]
        gencode = []
        for a in archs:
            gencode += ["-gencode", f"arch=compute_{a},code=sm_{a}"]
        gencode += ["-gencode", f"arch=compute_{archs[-1]},code=compute_{archs[-1]}"]
        # --threads: nvcc compiles the architectures of one source at once (a CUB source's take minutes each).
        flags = ["-std=c++17", "-Xcompiler", "-fPIC,-Wall,-Wextra,-fvisibility=hidden",
                 "--expt-relaxed-constexpr", "-DDDPC_WITH_CUDA=1", "--threads", str(min(build_jobs(), len(archs)))]
        flags += ["-O0", "-g", "-G"] if DEBUG else ["-O3"]
        incs = [f"-I{d}" for d in ext.include_dirs]
        out_dir = os.path.join(self.build_temp, "kernels")
        os.makedirs(out_dir, exist_ok=True)
        shared = glob.glob(os.path.join(ROOT, "kernels", "*.h")) + glob.glob(os.path.join(ROOT, "kernels", "*.cuh"))
        jobs = []
        for cu in heaviest_first(glob.glob(os.path.join(ROOT, "kernels", "*.cu"))):
            obj = os.path.join(out_dir, os.path.basename(cu) + ".o")
            stale = self.force or not os.path.exists(obj) or max(map(os.path.getmtime, [cu] + shared)) > \
                os.path.getmtime(obj)
            if stale:
                cmd = [nvcc, "-c", cu, "-o", obj] + gencode + flags + incs
                print(" ".join(cmd))
                jobs.append((obj, self.pool.submit(subprocess.check_call, cmd)))
            else:
                jobs.append((obj, concurrent.futures.Future()))
                jobs[-1][1].set_result(None)
        return jobs


ext = Extension(
    "ddpc._C",
    sources=sources,
    depends=headers,
    include_dirs=include_dirs,
    define_macros=macros,
    library_dirs=library_dirs,
    libraries=libraries,
    runtime_library_dirs=rpaths,
    extra_compile_args=cflags,
    extra_link_args=ldflags,
)

setup(ext_modules=[ext], cmdclass={"build_ext": BuildExt})
