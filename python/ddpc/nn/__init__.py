"""ddpc.nn: layers, containers and losses shaped like torch.nn."""

from . import functional, init, utils
from .modules import (ELU, GELU, BatchNorm1d, BatchNorm2d, BatchNorm3d, CrossEntropyLoss, Dropout, Embedding, Flatten,
                      Hardsigmoid, Hardswish, Hardtanh, Identity, LayerNorm, LeakyReLU, Linear, LogSoftmax, Mish, Module,
                      ModuleDict, ModuleList, MSELoss, Parameter, ReLU, ReLU6, Sequential, Sigmoid, SiLU, Softmax,
                      Softplus, SyncBatchNorm, Tanh)
from . import parallel
from .parallel import DataParallel, DistributedDataParallel

__all__ = ["BatchNorm1d", "BatchNorm2d", "BatchNorm3d", "SyncBatchNorm", "CrossEntropyLoss", "Dropout", "Embedding", "Flatten", "GELU", "Identity", "LayerNorm", "Linear", "MSELoss",
           "Module", "ModuleDict", "ModuleList", "Parameter", "ReLU", "Sequential", "Sigmoid", "Tanh", "functional",
           "init", "parallel", "utils", "DataParallel", "DistributedDataParallel",
           "LeakyReLU", "ELU", "SiLU", "Softplus", "Mish", "Hardtanh", "ReLU6", "Hardswish", "Hardsigmoid", "Softmax",
           "LogSoftmax"]
