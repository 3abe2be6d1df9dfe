"""ddpc.nn: layers, containers and losses shaped like torch.nn."""

from . import functional, init
from .modules import (GELU, CrossEntropyLoss, Dropout, Flatten, Identity, Linear, Module, ModuleList, MSELoss,
                      Parameter, ReLU, Sequential, Sigmoid, Tanh)
from . import parallel
from .parallel import DataParallel, DistributedDataParallel

__all__ = ["CrossEntropyLoss", "Dropout", "Flatten", "GELU", "Identity", "Linear", "MSELoss", "Module", "ModuleList",
           "Parameter", "ReLU", "Sequential", "Sigmoid", "Tanh", "functional", "init", "parallel", "DataParallel",
           "DistributedDataParallel"]

