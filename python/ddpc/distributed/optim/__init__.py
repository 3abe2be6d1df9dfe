"""Distributed optimizers, at torch.distributed.optim's paths, and the
optimizer in backward (``_apply_optimizer_in_backward``)."""

from .apply_optimizer_in_backward import _apply_optimizer_in_backward, _get_in_backward_optimizers
from .post_localSGD_optimizer import PostLocalSGDOptimizer
from .zero_redundancy_optimizer import ZeroRedundancyOptimizer

__all__ = ["PostLocalSGDOptimizer", "ZeroRedundancyOptimizer"]
