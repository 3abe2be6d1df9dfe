"""ddpc.cuda: device query, memory statistics, synchronisation, events and
seeding, as in torch.cuda.

Where ddpc differs: each device has one compute stream that every op runs
on, so there are no user-created streams; ``current_stream()`` (also
``default_stream()``) is that stream, and events are recorded on and waited
for by it. ddpc has one random generator for the host and every device, so
``manual_seed``/``manual_seed_all`` seed that one, as ``ddpc.manual_seed``.
``ddpc.cuda.nvtx`` has torch.cuda.nvtx's ranges and marks."""

import atexit
import contextlib
import sys
import types
from collections import namedtuple

from . import _C
from ._C import OutOfMemoryError  # noqa: F401  (raised by the device allocator; re-exported as torch.cuda's)
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


_NO_MEMORY = {"allocated": 0, "reserved": 0, "peak_allocated": 0, "peak_reserved": 0, "num_device_mallocs": 0}


def memory_stats(device=None):
    """The caching allocator's statistics of the device; all 0 before this
    process has used CUDA (also without a GPU), where PyTorch reports none."""
    if not is_initialized():
        if device is not None:
            _index(device)  # refuses a device that is not a cuda one
        return dict(_NO_MEMORY)
    return _C.cuda_memory_stats(_index(device))


def memory_allocated(device=None):
    """Bytes held by live tensors on the device (in the caching allocator's size classes)."""
    return memory_stats(device)["allocated"]


def max_memory_allocated(device=None):
    return memory_stats(device)["peak_allocated"]


def memory_reserved(device=None):
    """Bytes obtained from the driver: allocated plus cached for reuse."""
    return memory_stats(device)["reserved"]


def max_memory_reserved(device=None):
    """The most bytes obtained from the driver at once since the start or reset_peak_memory_stats."""
    return memory_stats(device)["peak_reserved"]


def memory_summary(device=None, abbreviated=False):
    """The caching allocator's statistics of the device as a short table of text."""
    del abbreviated  # ddpc's statistics fit in a few lines either way
    s = memory_stats(device)
    rows = [("allocated (live tensors)", s["allocated"]), ("peak allocated", s["peak_allocated"]),
            ("reserved (allocated + cached)", s["reserved"]), ("peak reserved", s["peak_reserved"])]
    lines = [f"ddpc.cuda memory summary, cuda:{_index(device)}"]
    lines += [f"  {name:<30} {value / 2**20:12.1f} MiB" for name, value in rows]
    lines.append(f"  {'cudaMalloc calls':<30} {s['num_device_mallocs']:12d}")
    return "\n".join(lines) + "\n"


def empty_cache():
    """Returns every cached, unused block on every device to the driver."""
    for i in range(device_count()):
        _C.cuda_empty_cache(i)


# Pinned host blocks are cached for reuse once freed (staging buffers, pinned
# tensors); at exit they are freed while CUDA can still be called (atexit
# handlers run before the CUDA runtime's own teardown).
atexit.register(_C.cuda_host_empty_cache)


def reset_peak_memory_stats(device=None):
    """Starts max_memory_allocated and max_memory_reserved again from what is
    allocated and reserved now; nothing to do before this process has used
    CUDA (where PyTorch raises on a machine without a GPU)."""
    if is_initialized():
        _C.cuda_reset_peak_memory(_index(device))


reset_max_memory_allocated = reset_peak_memory_stats


def mem_get_info(device=None):
    """(free, total) bytes of the device, as the driver reports them (other processes' use included)."""
    return _C.cuda_mem_info(_index(device))


def manual_seed(seed):
    """Seeds ddpc's one generator (host and every device), as ``ddpc.manual_seed``."""
    from .tensor import manual_seed as seed_all

    seed_all(seed)


manual_seed_all = manual_seed


def get_rng_state(device="cuda"):
    """The state of ddpc's one generator, which devices share with the host: ``ddpc.get_rng_state()``."""
    del device
    from .tensor import get_rng_state as host_state

    return host_state()


def set_rng_state(new_state, device="cuda"):
    del device
    from .tensor import set_rng_state as set_host_state

    set_host_state(new_state)


def get_rng_state_all():
    """One state per device, each that of the one shared generator."""
    return [get_rng_state() for _ in range(device_count())]


def set_rng_state_all(new_states):
    for state in new_states:
        set_rng_state(state)


def initial_seed():
    from .tensor import initial_seed as host_seed

    return host_seed()


def seed():
    """Seeds the shared generator from the operating system's entropy, as ``ddpc.seed()``."""
    from .tensor import seed as seed_from_entropy

    seed_from_entropy()


seed_all = seed


def is_bf16_supported(including_emulation=True):
    """Whether the current GPU computes in bfloat16 natively (compute capability 8.0 or later).
    ddpc's kernels do not emulate bfloat16 on older GPUs, so ``including_emulation`` changes nothing."""
    del including_emulation
    return is_available() and get_device_capability()[0] >= 8


class device:
    """A context in which ``device`` is the current one, as torch.cuda.device.
    On exit the device current before becomes current again without creating
    its CUDA context where it has none yet (as PyTorch's exit does)."""

    def __init__(self, device):
        self.idx = -1 if device is None else _index(device)
        self.prev_idx = -1

    def __enter__(self):
        if self.idx >= 0:
            self.prev_idx = current_device()
            set_device(self.idx)
        return self

    def __exit__(self, *exc):
        if self.idx >= 0:
            _C.cuda_restore_device(self.prev_idx)
        return False


class device_of(device):
    """The context of the device that a tensor is on (nothing for a host tensor)."""

    def __init__(self, obj):
        super().__init__(obj.device if obj.device.type == "cuda" else None)


class Event:
    """A point in a device's compute stream, as torch.cuda.Event: ``record()``
    marks it after the work queued so far, ``synchronize()`` waits for that
    work on the host, ``query()`` says whether it has finished, ``wait()``
    makes a device's stream wait for it, and with ``enable_timing``
    ``start.elapsed_time(end)`` gives the milliseconds between two events.
    The CUDA event is created on the device of the first ``record``."""

    def __init__(self, enable_timing=False, blocking=False, interprocess=False):
        if interprocess:
            raise NotImplementedError("ddpc.cuda.Event: interprocess events are not supported")
        self.enable_timing = enable_timing
        self._event = None
        self.device = None

    def record(self, stream=None):
        device = _index(None) if stream is None else stream.device_index
        if self._event is None:
            self._event, self.device = _C.cuda_event_create(device, self.enable_timing), device
        elif device != self.device:
            raise ValueError(f"this event belongs to cuda:{self.device}; it cannot be recorded on cuda:{device}")
        _C.cuda_event_record(self._event, device)

    def wait(self, stream=None):
        """Makes the stream (the current device's) wait for this event, without the host waiting."""
        if self._event is not None:
            _C.cuda_event_wait(self._event, _index(None) if stream is None else stream.device_index)

    def query(self):
        return self._event is None or _C.cuda_event_query(self._event)

    def synchronize(self):
        if self._event is not None:
            _C.cuda_event_synchronize(self._event)

    def elapsed_time(self, end_event):
        """Milliseconds from this event to ``end_event``, both recorded with enable_timing=True."""
        if not (self.enable_timing and end_event.enable_timing):
            raise RuntimeError("elapsed_time needs two events created with enable_timing=True")
        if self._event is None or end_event._event is None:
            raise RuntimeError("elapsed_time: both events must be recorded first")
        return _C.cuda_event_elapsed(self._event, end_event._event)

    def __reduce__(self):
        raise TypeError("a ddpc.cuda.Event belongs to this process and cannot be pickled")


class _ComputeStream:
    """A device's compute stream, where every ddpc op on that device runs."""

    def __init__(self, device_index):
        self.device_index = device_index
        self.device = _device(f"cuda:{device_index}")

    @property
    def cuda_stream(self):
        """The cudaStream_t as an int, for handing to other CUDA libraries."""
        return _C.cuda_compute_stream(self.device_index)

    def synchronize(self):
        """Waits for the work queued on this stream (not the device's other
        streams: NCCL's, the loaders' copies), as PyTorch's Stream.synchronize."""
        self.record_event().synchronize()

    def record_event(self, event=None):
        event = Event() if event is None else event
        event.record(self)
        return event

    def wait_event(self, event):
        event.wait(self)

    def wait_stream(self, stream):
        self.wait_event(stream.record_event())

    def query(self):
        return self.record_event().query()

    def __eq__(self, other):
        return isinstance(other, _ComputeStream) and other.device_index == self.device_index

    def __hash__(self):
        return hash(("ddpc.cuda stream", self.device_index))

    def __repr__(self):
        return f"<ddpc.cuda stream of cuda:{self.device_index} (compute)>"


def current_stream(device=None):
    """The compute stream of the device (the current one when None)."""
    return _ComputeStream(_index(device))


default_stream = current_stream


@contextlib.contextmanager
def _nvtx_range(msg, *args, **kwargs):
    """A range around the block (or, as a decorator, each call): ``msg``
    formatted with the other arguments, as torch.cuda.nvtx.range."""
    _C.nvtx_range_push(msg.format(*args, **kwargs))
    try:
        yield
    finally:
        _C.nvtx_range_pop()


# ddpc.cuda.nvtx: NVTX ranges and marks, as torch.cuda.nvtx (see csrc/nvtx.c);
# a module of its own, so that ``import ddpc.cuda.nvtx`` works too.
nvtx = types.ModuleType(__name__ + ".nvtx", "NVTX ranges and marks for profilers such as Nsight Systems, as "
                        "torch.cuda.nvtx: range_push/range_pop (nested, this thread), range_start/range_end "
                        "(any thread), mark, and range (a context manager and decorator).")
nvtx.range_push = _C.nvtx_range_push
nvtx.range_pop = _C.nvtx_range_pop
nvtx.range_start = _C.nvtx_range_start
nvtx.range_end = _C.nvtx_range_end
nvtx.mark = _C.nvtx_mark
nvtx.range = _nvtx_range
sys.modules[nvtx.__name__] = nvtx
