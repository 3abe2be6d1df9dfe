"""ddpc.version: ddpc's version and the CUDA it was built with, as torch.version."""

from . import _C

__version__ = "0.1.0"
hip = None  # no ROCm build


def __getattr__(name):
    """``cuda``: the version of the CUDA runtime ddpc loaded, as "major.minor"
    (the build does not record its toolkit's), None in a build without CUDA;
    looked up on first use, as asking loads the CUDA libraries."""
    if name != "cuda":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    runtime = _C.build_info()["cuda_runtime_version"] if _C.cuda_compiled() else None
    globals()["cuda"] = None if runtime is None else f"{runtime // 1000}.{runtime % 1000 // 10}"
    return globals()["cuda"]
