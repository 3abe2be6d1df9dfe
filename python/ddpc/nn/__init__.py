"""ddpc.nn: layers, containers and losses shaped like torch.nn."""

from . import functional, init, utils
from .modules import (GELU, BatchNorm1d, BatchNorm2d, BatchNorm3d, CrossEntropyLoss, Dropout, Embedding, Flatten,
                      Identity, LayerNorm, Linear, Module, ModuleDict, ModuleList, MSELoss, Parameter, ReLU, Sequential,
                      Sigmoid, SyncBatchNorm, Tanh)
from . import parallel
from .parallel import DataParallel, DistributedDataParallel

__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "CrossEntropyLoss", "Dropout", "Embedding", "Flatten", "GELU", "Identity", "LayerNorm", "Linear", "MSELoss",
           "Module", "ModuleDict", "ModuleList", "Parameter", "ReLU", "Sequential", "Sigmoid", "Tanh", "functional",
           "init", "parallel", "utils", "DataParallel", "DistributedDataParallel"]
