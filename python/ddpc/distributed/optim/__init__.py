"""Distributed optimizers, at torch.distributed.optim's paths."""

from .post_localSGD_optimizer import PostLocalSGDOptimizer
from .zero_redundancy_optimizer import ZeroRedundancyOptimizer

__all__ = ["PostLocalSGDOptimizer", "ZeroRedundancyOptimizer"]
