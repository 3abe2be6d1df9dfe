"""ddpc.optim: SGD, Adam, AdamW, RMSprop, Adagrad, Adamax, NAdam, RAdam and
Adadelta with fused multi-tensor steps, lr_scheduler, swa_utils (weight
averaging), and ZeroRedundancyOptimizer (their state sharded across ranks)."""

from . import lr_scheduler, swa_utils
from .adadelta import Adadelta
from .adagrad import Adagrad
from .adam import Adam, AdamW
from .adamax import Adamax
from .nadam import NAdam, RAdam
from .optimizer import Optimizer
from .rmsprop import RMSprop
from .sgd import SGD
from .zero import ZeroRedundancyOptimizer

__all__ = ["Adadelta", "Adagrad", "Adam", "AdamW", "Adamax", "NAdam", "Optimizer", "RAdam", "RMSprop", "SGD",
           "ZeroRedundancyOptimizer", "lr_scheduler", "swa_utils"]
