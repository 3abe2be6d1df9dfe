"""ddpc.nn: layers, containers and losses shaped like torch.nn."""

from . import functional, init, utils
from .modules import (GELU, CrossEntropyLoss, Dropout, Flatten, Identity, Linear, Module, ModuleDict, ModuleList,
                      MSELoss, Parameter, ReLU, Sequential, Sigmoid, Tanh)
from . import parallel
from .parallel import DataParallel, DistributedDataParallel

__all__ = ["CrossEntropyLoss", "Dropout", "Flatten", "GELU", "Identity", "Linear", "MSELoss", "Module", "ModuleDict",
           "ModuleList", "Parameter", "ReLU", "Sequential", "Sigmoid", "Tanh", "functional", "init", "parallel",
           "utils", "DataParallel", "DistributedDataParallel"]

