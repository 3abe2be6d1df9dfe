"""ddpc.futures: PyTorch's torch.futures over ddpc's Future (ddpc.distributed.Future)."""

from .distributed import Future, collect_all, wait_all

__all__ = ["Future", "collect_all", "wait_all"]
