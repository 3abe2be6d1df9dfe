"""Host threads: ddpc's own loops and the BLAS library numpy's GEMM runs on.

Several ranks on one machine each default to every core, which oversubscribes
it (two ranks on two cores run the GEMMs with four threads). The launcher and
ddpc.spawn give each rank cores // ranks threads unless the user chose
(OMP_NUM_THREADS, DDPC_NUM_THREADS), as torchrun does.
"""

import ctypes
import os

from . import _C

# Thread-count setters of the OpenBLAS builds numpy ships or links.
_BLAS_SETTERS = ("scipy_openblas_set_num_threads64_", "scipy_openblas_set_num_threads", "openblas_set_num_threads64_",
                 "openblas_set_num_threads")


def _blas_libraries():
    """The BLAS shared libraries loaded in this process."""
    try:
        with open("/proc/self/maps") as f:
            paths = {line.split()[-1] for line in f}
    except OSError:
        return []
    libs = []
    for path in sorted(p for p in paths if os.path.isabs(p) and "blas" in os.path.basename(p).lower()
                       and ".so" in p):
        try:
            libs.append(ctypes.CDLL(path))
        except OSError:
            continue
    return libs


def set_num_threads(n):
    """Threads for host work in this process: ddpc's loops and numpy's BLAS (as torch.set_num_threads)."""
    n = int(n)
    if n < 1:
        raise ValueError(f"set_num_threads: n must be at least 1, got {n}")
    _C.set_num_threads(n)
    for lib in _blas_libraries():
        for name in _BLAS_SETTERS:
            fn = getattr(lib, name, None)
            if fn is not None:
                fn.argtypes = [ctypes.c_int]
                fn(n)
                break


def get_num_threads():
    return _C.get_num_threads()


def per_rank_threads(local_world_size):
    """Threads for each of `local_world_size` ranks sharing this machine's cores."""
    return max(1, (os.cpu_count() or 1) // max(1, local_world_size))


def user_chose_threads(env=os.environ):
    return any(k in env for k in ("OMP_NUM_THREADS", "DDPC_NUM_THREADS", "OPENBLAS_NUM_THREADS"))
