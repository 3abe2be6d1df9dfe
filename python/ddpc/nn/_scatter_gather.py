"""scatter, scatter_kwargs and gather: splitting a batch across devices and
joining the outputs, as torch.nn.parallel's, shared by DataParallel and the
functional ``data_parallel``.

A tensor is split along ``dim`` as ``Tensor.chunk`` splits it (chunks of
ceil(n / devices), so there may be fewer chunks than devices) and each chunk
goes to its device; lists, tuples, namedtuples and dicts are split element by
element, and everything else is handed to every device as it is. Where
tensors give different numbers of chunks, the smallest number of devices
gets a share. Both directions are differentiable: a chunk's gradient lands in
its rows of the input's, a gathered output's gradient goes back to each
device's output.
"""

import warnings

from .._dtype import device as _device
from ..autograd import cat, stack
from ..tensor import Tensor


def _device_name(spec):
    """A device as DataParallel takes them (an int is a CUDA ordinal, -1 the cpu, or a string or ddpc.device)."""
    if isinstance(spec, int) and not isinstance(spec, bool) and spec == -1:
        return "cpu"
    return str(_device(spec))


def _to_device(obj, device):
    if isinstance(obj, Tensor):
        return obj.to(device)
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_device(o, device) for o in obj)
    if isinstance(obj, dict):
        return {k: _to_device(v, device) for k, v in obj.items()}
    return obj


def _split_dim(t, dim):
    """``dim`` of tensor t made non-negative; t must have it."""
    if not -t.dim() <= dim < t.dim():
        raise IndexError(f"scatter: cannot split a tensor of shape {tuple(t.shape)} along dim {dim} "
                         f"(expected a dim in [{-t.dim()}, {t.dim() - 1}])")
    return dim % t.dim()


def _split_tensors(obj):
    """The tensors that scatter splits: those in obj's lists, tuples and dicts."""
    if isinstance(obj, Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _split_tensors(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _split_tensors(o)


def _chunk_count(obj, k, dim):
    """How many of k devices get a share of obj: the fewest chunks of any of its
    tensors (0-d ones are copied whole), k where it holds none."""
    counts = [k]
    for t in _split_tensors(obj):
        if t.dim() > 0:
            n = t.shape[_split_dim(t, dim)]
            counts.append(-(-n // -(-n // k)) if n else 0)
    return min(counts)


def _scatter_chunk(obj, i, k, device, dim):
    """Chunk i of k of every tensor in obj (on `device`); a 0-d tensor goes whole."""
    if isinstance(obj, Tensor):
        if obj.dim() == 0:
            return _to_device(obj, device)
        d = _split_dim(obj, dim)
        n = obj.shape[d]
        per = -(-n // k)
        rows = slice(min(n, i * per), min(n, (i + 1) * per))
        # (a plain slice along dim 0: the batch dimension's case, and the fastest index)
        return _to_device(obj[rows] if d == 0 else obj[(slice(None),) * d + (rows,)], device)
    if isinstance(obj, tuple) and hasattr(obj, "_fields"):
        return type(obj)(*(_scatter_chunk(o, i, k, device, dim) for o in obj))
    if isinstance(obj, (tuple, list)):
        return type(obj)(_scatter_chunk(o, i, k, device, dim) for o in obj)
    if isinstance(obj, dict):
        return {key: _scatter_chunk(v, i, k, device, dim) for key, v in obj.items()}
    return obj


def scatter(inputs, target_gpus, dim=0):
    """Splits the tensors in ``inputs`` along ``dim`` into about equal chunks,
    one per device of ``target_gpus`` (ints for GPUs, or device strings such
    as ``"cpu"``), and copies each chunk to its device; other objects are
    handed to every device as they are. Returns one entry per device that
    gets a chunk: a tuple of chunks for a tensor, otherwise a list with one
    structure like ``inputs`` per device. Differs from PyTorch in taking
    cpu devices and in handing a 0-d tensor to every device whole (PyTorch
    cannot split one)."""
    devices = [_device_name(d) for d in target_gpus]
    k = len(devices)
    chunks = [_scatter_chunk(inputs, i, k, d, dim) for i, d in enumerate(devices[:_chunk_count(inputs, k, dim)])]
    return tuple(chunks) if isinstance(inputs, Tensor) else chunks


def scatter_kwargs(inputs, kwargs, target_gpus, dim=0):
    """``scatter`` of the positional and the keyword arguments, as tuples of
    equal length: the shorter is padded with ``()`` or ``{}``."""
    scattered_inputs = list(scatter(inputs, target_gpus, dim)) if inputs else []
    scattered_kwargs = scatter(kwargs, target_gpus, dim) if kwargs else []
    scattered_inputs += [()] * (len(scattered_kwargs) - len(scattered_inputs))
    scattered_kwargs += [{}] * (len(scattered_inputs) - len(scattered_kwargs))
    return tuple(scattered_inputs), tuple(scattered_kwargs)


def gather(outputs, target_device, dim=0):
    """Joins one output per device on ``target_device`` (an int for a GPU, -1
    or ``"cpu"`` for the cpu, or a device string): tensors are concatenated
    along ``dim``, and lists, tuples, namedtuples and dicts element by
    element; None stays None. Scalar outputs (a loss per device, say) become
    a vector, with a warning, also for a ``dim`` other than 0 (where PyTorch
    fails); other objects are returned as the list of each device's."""
    target = _device_name(target_device)
    first = outputs[0]
    if first is None:
        return None
    if isinstance(first, Tensor):
        moved = [_to_device(o, target) for o in outputs]  # differentiable: gradients flow back to each device
        if all(o.dim() == 0 for o in moved):
            warnings.warn("gather: scalar outputs (e.g. a loss per replica) are gathered into a vector",
                          UserWarning, stacklevel=2)
            return stack(moved)
        return cat(moved, dim)
    if isinstance(first, tuple) and hasattr(first, "_fields"):  # a namedtuple
        return type(first)(*(gather([o[i] for o in outputs], target, dim) for i in range(len(first))))
    if isinstance(first, (tuple, list)):
        return type(first)(gather([o[i] for o in outputs], target, dim) for i in range(len(first)))
    if isinstance(first, dict):
        if any(len(o) != len(first) for o in outputs):
            raise ValueError("gather: all dicts must have the same number of keys")
        return {key: gather([o[key] for o in outputs], target, dim) for key in first}
    return outputs
