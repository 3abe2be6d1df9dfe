"""ddpc.optim: SGD, Adam and AdamW with fused multi-tensor steps, and lr_scheduler."""

from . import lr_scheduler
from .adam import Adam, AdamW
from .optimizer import Optimizer
from .sgd import SGD

__all__ = ["Adam", "AdamW", "Optimizer", "SGD", "lr_scheduler"]
