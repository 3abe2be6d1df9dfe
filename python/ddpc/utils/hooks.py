"""ddpc.utils.hooks, as torch.utils.hooks: ``RemovableHandle``, the handle
that every ``register_*hook`` method returns."""

from ..autograd import RemovableHandle

__all__ = ["RemovableHandle"]
