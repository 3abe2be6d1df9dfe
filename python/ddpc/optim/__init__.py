"""ddpc.optim: SGD, Adam and AdamW with fused multi-tensor steps, lr_scheduler, and
ZeroRedundancyOptimizer (their state sharded across ranks)."""

from . import lr_scheduler
from .adam import Adam, AdamW
from .optimizer import Optimizer
from .sgd import SGD
from .zero import ZeroRedundancyOptimizer

__all__ = ["Adam", "AdamW", "Optimizer", "SGD", "ZeroRedundancyOptimizer", "lr_scheduler"]
