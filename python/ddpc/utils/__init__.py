"""ddpc.utils: helpers shaped like torch.utils (``checkpoint``; data loading is ``ddpc.data``)."""

from . import checkpoint

__all__ = ["checkpoint"]
