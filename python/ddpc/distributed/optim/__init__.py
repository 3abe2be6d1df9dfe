"""Distributed optimizers, at torch.distributed.optim's paths."""

from .zero_redundancy_optimizer import ZeroRedundancyOptimizer

__all__ = ["ZeroRedundancyOptimizer"]
