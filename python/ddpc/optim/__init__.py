"""ddpc.optim: SGD, Adam, AdamW, RMSprop, Adagrad, Adamax, NAdam, RAdam and
Adadelta with fused multi-tensor steps; SparseAdam for sparse gradients;
Rprop, ASGD, Adafactor and LBFGS made of tensor ops; lr_scheduler,
swa_utils (weight averaging), and ZeroRedundancyOptimizer (their state
sharded across ranks)."""

from . import lr_scheduler, swa_utils
from .adadelta import Adadelta
from .adafactor import Adafactor
from .adagrad import Adagrad
from .adam import Adam, AdamW
from .adamax import Adamax
from .asgd import ASGD
from .lbfgs import LBFGS
from .nadam import NAdam, RAdam
from .optimizer import Optimizer
from .rmsprop import RMSprop
from .rprop import Rprop
from .sgd import SGD
from .sparse_adam import SparseAdam
from .zero import ZeroRedundancyOptimizer

__all__ = ["ASGD", "Adadelta", "Adafactor", "Adagrad", "Adam", "AdamW", "Adamax", "LBFGS", "NAdam", "Optimizer",
           "RAdam", "RMSprop", "Rprop", "SGD", "SparseAdam", "ZeroRedundancyOptimizer", "lr_scheduler", "swa_utils"]
