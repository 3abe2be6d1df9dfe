"""ddpc.nn: layers, containers and losses shaped like torch.nn."""

from . import functional, init, utils
from .modules import (GELU, CrossEntropyLoss, Dropout, Embedding, Flatten, Identity, LayerNorm, Linear, Module,
                      ModuleDict, ModuleList, MSELoss, Parameter, ReLU, Sequential, Sigmoid, Tanh)
from . import parallel
from .parallel import DataParallel, DistributedDataParallel

__all__ = ["CrossEntropyLoss", "Dropout", "Embedding", "Flatten", "GELU", "Identity", "LayerNorm", "Linear", "MSELoss",
           "Module", "ModuleDict", "ModuleList", "Parameter", "ReLU", "Sequential", "Sigmoid", "Tanh", "functional",
           "init", "parallel", "utils", "DataParallel", "DistributedDataParallel"]
