"""ddpc: data-parallel training with a C and CUDA core, shaped like PyTorch.

The public API is re-exported here; see the submodules for details.
"""

from . import _C, cuda, data
from ._C import DistError, DistTimeoutError
from . import distributed
from .distributed import destroy_process_group, init_process_group
from .spawn import spawn
from ._dtype import bfloat16, device, dtype, float16, float32, float64, int32, int64, uint8
from .data import DataLoader, DistributedSampler, ShardedLoader, TensorDataset
from .tensor import (Tensor, arange, cat, empty, empty_like, from_dlpack, from_numpy, full, initial_seed, manual_seed,
                     ones, ones_like, rand, randint, randn, randperm, stack, tensor, zeros, zeros_like)

half = float16
float = float32
double = float64
long = int64
int = int32

__version__ = "0.1.0"


def build_info():
    """What this build was compiled with: CUDA, NCCL and their versions (None where absent)."""
    return _C.build_info()


__all__ = [
    "DataLoader", "DistError", "DistTimeoutError", "DistributedSampler", "ShardedLoader", "Tensor", "TensorDataset",
    "arange", "bfloat16", "build_info", "cat", "cuda", "data", "device", "dtype",
    "empty", "empty_like", "float16", "float32", "float64", "from_dlpack", "from_numpy", "full", "initial_seed",
    "int32", "int64", "manual_seed", "ones", "ones_like", "rand", "randint", "randn", "randperm", "stack", "tensor",
    "uint8", "zeros", "zeros_like",
]
__all__ += ["destroy_process_group", "distributed", "init_process_group", "spawn"]
