"""ddpc.nn: layers, containers and losses shaped like torch.nn."""

from . import functional, init
from .modules import (GELU, CrossEntropyLoss, Dropout, Flatten, Identity, Linear, Module, ModuleList, MSELoss,
                      Parameter, ReLU, Sequential, Sigmoid, Tanh)

__all__ = ["CrossEntropyLoss", "Dropout", "Flatten", "GELU", "Identity", "Linear", "MSELoss", "Module", "ModuleList",
           "Parameter", "ReLU", "Sequential", "Sigmoid", "Tanh", "functional", "init"]


def __getattr__(name):
    # nn.parallel needs ddpc.distributed, so it is imported on first use only.
    if name in ("parallel", "DataParallel", "DistributedDataParallel"):
        import importlib

        parallel = importlib.import_module(".parallel", __name__)
        return parallel if name == "parallel" else getattr(parallel, name)
    raise AttributeError(f"module 'ddpc.nn' has no attribute '{name}'")
