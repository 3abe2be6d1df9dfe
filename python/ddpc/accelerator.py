"""ddpc.accelerator, shaped like torch.accelerator: the machine's accelerator
(CUDA where a GPU is visible, none otherwise), so that scripts written
against it (the current DDP tutorials pick their device and backend with
``current_accelerator()`` and ``dist.get_default_backend_for_device``) run."""

from . import cuda
from ._dtype import device as _device

__all__ = ["current_accelerator", "current_device_index", "device_count", "is_available", "set_device_index",
           "synchronize"]


def is_available():
    return cuda.is_available()


def current_accelerator(check_available=False):
    """``device('cuda')`` where ddpc can use a GPU here, else None (ddpc's only
    accelerator is CUDA, so ``check_available`` changes nothing)."""
    return _device("cuda") if cuda.is_available() else None


def device_count():
    return cuda.device_count()


def current_device_index():
    return cuda.current_device()


def set_device_index(device):
    cuda.set_device(device)


def synchronize(device=None):
    cuda.synchronize(device)
