"""ddpc.cuda: device query, memory statistics and synchronisation, as in torch.cuda."""

from collections import namedtuple

from . import _C
from ._dtype import device as _device

_DeviceProperties = namedtuple("_DeviceProperties",
                               "name total_memory major minor multi_processor_count pci_bus_id")


def is_available():
    """True when this build has CUDA and the machine has a usable GPU and driver."""
    return _C.cuda_device_count() > 0


def device_count():
    return _C.cuda_device_count()


def is_initialized():
    """Whether this process has created a CUDA context (after which fork is unsafe)."""
    return _C.cuda_initialized()


def _index(device):
    if device is None:
        return _C.cuda_current_device()
    if isinstance(device, int):
        return device
    d = _device(device)
    if d.type != "cuda":
        raise ValueError(f"expected a cuda device, got {d}")
    return d._ordinal


def get_device_properties(device=None):
    p = _C.cuda_properties(_index(device))
    major, minor = p["capability"]
    return _DeviceProperties(p["name"], p["total_memory"], major, minor, p["multi_processor_count"], p["pci_bus_id"])


def get_device_name(device=None):
    return get_device_properties(device).name


def get_device_capability(device=None):
    p = get_device_properties(device)
    return (p.major, p.minor)


def set_device(device):
    _C.cuda_set_device(_index(device))


def current_device():
    return _C.cuda_current_device()


def synchronize(device=None):
    """Waits for all work queued on the device."""
    _C.cuda_synchronize(_index(device))


def memory_allocated(device=None):
    """Bytes held by live tensors on the device (in the caching allocator's size classes)."""
    return _C.cuda_memory_stats(_index(device))["allocated"]


def max_memory_allocated(device=None):
    return _C.cuda_memory_stats(_index(device))["peak_allocated"]


def memory_reserved(device=None):
    """Bytes obtained from the driver: allocated plus cached for reuse."""
    return _C.cuda_memory_stats(_index(device))["reserved"]


def memory_stats(device=None):
    return _C.cuda_memory_stats(_index(device))


def empty_cache():
    """Returns every cached, unused block on every device to the driver."""
    for i in range(device_count()):
        _C.cuda_empty_cache(i)
