"""ZeroRedundancyOptimizer (implemented in ddpc.optim.zero)."""

from ...optim.zero import ZeroRedundancyOptimizer

__all__ = ["ZeroRedundancyOptimizer"]
