"""replicate, parallel_apply and data_parallel: the functional form of
DataParallel, as torch.nn.parallel's (DataParallel itself keeps its replicas
instead of making them on every call).

``data_parallel`` scatters the inputs (nn/_scatter_gather.py), copies the
module to each device with ``replicate``, runs the copies on their chunks
with ``parallel_apply``, one thread per copy (ops release the GIL, so the
copies run at the same time), and gathers the outputs. The copies' parameters
are differentiable copies of the module's, so backward through the gathered
output accumulates every device's gradient into the module's ``.grad``.
"""

import contextlib
import itertools
import threading
from collections import OrderedDict

from .. import amp, cuda
from .._dtype import device as _device
from .._workers import caught_text, exception_like
from ..autograd import is_grad_enabled, set_grad_enabled
from ._scatter_gather import _device_name, _split_tensors, gather, scatter_kwargs
from .modules import Parameter, is_lazy


def _refuse_uninitialized(module, wrapper):
    """Raises where a parameter or buffer of module has no shape yet: there is nothing to broadcast or replicate."""
    lazy = [n for n, t in (*module.named_parameters(), *module.named_buffers()) if is_lazy(t)]
    if lazy:
        raise RuntimeError(f"Modules with uninitialized parameters can't be used with `{wrapper}` "
                           f"({', '.join(lazy)} of lazy modules): run a dummy forward pass first to initialize "
                           "the modules")


def _parameter_copy(p, device, detach):
    """A parameter on `device` for a replica: a leaf copy with detach, else one that
    autograd links to p (an alias on p's own device), so gradients reach p."""
    if detach:
        return Parameter(p.detach().to(device, copy=True), requires_grad=p.requires_grad)
    return p.view_as(p) if p.device == _device(device) else p.to(device)


def _buffer_copy(b, device, detach, first):
    """A buffer on `device` for a replica. As in PyTorch, the first replica shares
    the module's buffers where it is on their device (a running statistic it
    updates is the module's), and a buffer that requires grad is linked like a
    parameter unless detach."""
    if b.requires_grad and not detach:
        return _parameter_copy(b, device, False)
    if first and b.device == _device(device):
        return b
    return b.detach().to(device, copy=True)


def _replica(network, device, detach, first):
    """network copied to `device`: every module a shallow copy that holds its own
    parameters and buffers; a module or tensor used twice is copied once."""
    made = {}  # id of a module or tensor of network -> its copy

    def tensor_copy(t, is_param):
        if t is None:
            return None
        if id(t) not in made:
            made[id(t)] = _parameter_copy(t, device, detach) if is_param else _buffer_copy(t, device, detach, first)
        return made[id(t)]

    def module_copy(m):
        if m is None:
            return None
        if id(m) in made:
            return made[id(m)]
        replica = object.__new__(type(m))
        made[id(m)] = replica
        state = replica.__dict__
        state.update(m.__dict__)  # attributes and hook tables shared with m, as in PyTorch
        state["_parameters"] = OrderedDict((k, tensor_copy(p, True)) for k, p in m._parameters.items())
        state["_buffers"] = OrderedDict((k, tensor_copy(b, False)) for k, b in m._buffers.items())
        state["_non_persistent"] = set(m._non_persistent)
        state["_modules"] = OrderedDict((k, module_copy(c)) for k, c in m._modules.items())
        state["_is_replica"] = True
        return replica

    return module_copy(network)


def replicate(network, devices, detach=False):
    """Copies of ``network``, one on each of ``devices`` (ints for GPUs, or
    device strings such as ``"cpu"``). With ``detach=False`` a copy's
    parameters are differentiable copies of ``network``'s (not leaves), so a
    backward pass through a copy's output accumulates into ``network``'s
    ``.grad``; with ``detach=True`` they are independent leaves (Parameters
    with ``network``'s ``requires_grad``). Buffers are copied (the first
    copy shares them where it is on their device, as in PyTorch). Differs
    from PyTorch in that a copy's ``parameters()`` lists its copies (PyTorch
    lists none) and in taking cpu devices."""
    devices = [_device_name(d) for d in devices]
    if not devices:
        return []
    _refuse_uninitialized(network, "replicate")
    return [_replica(network, d, detach, j == 0) for j, d in enumerate(devices)]


def _raised_again(exc, where):
    """exc's type (RuntimeError where that cannot be made from a message) with a
    message that says where it was raised and carries its traceback, as PyTorch's."""
    return exception_like(type(exc), caught_text(exc, where))


def _run_replica(module, input, kwargs, device, grad_enabled, autocasts):
    """module on one input in the caller's grad and autocast modes, with `device` current."""
    if not isinstance(input, (list, tuple)):  # a single argument (a tensor is not split into its rows)
        input = (input,)
    with contextlib.ExitStack() as stack:
        stack.enter_context(set_grad_enabled(grad_enabled))
        for device_type, dtype in autocasts.items():
            stack.enter_context(amp.autocast(device_type, dtype))
        if device is not None and _device(device).type == "cuda":
            stack.enter_context(cuda.device(device))
        return module(*input, **kwargs)


def parallel_apply(modules, inputs, kwargs_tup=None, devices=None):
    """``modules[i](*inputs[i], **kwargs_tup[i])`` for every i at the same time,
    one thread each (an input that is not a list or tuple is the only
    argument), on ``devices[i]`` (by default the device of the input's first
    tensor), in the caller's grad and autocast modes. Returns the outputs in
    order; an exception in a module is raised again here, its type and
    message naming the replica, as PyTorch's."""
    n = len(modules)
    if kwargs_tup is None:
        kwargs_tup = ({},) * n
    if devices is None:
        devices = [None] * n
    for name, seq in (("inputs", inputs), ("kwargs_tup", kwargs_tup), ("devices", devices)):
        if len(seq) != n:
            raise ValueError(f"parallel_apply: {n} modules but {len(seq)} {name}")
    devices = [None if d is None else _device_name(d) for d in devices]
    for i, inp in enumerate(inputs):
        if devices[i] is None:
            devices[i] = next((str(t.device) for t in _split_tensors(inp)), None)
    grad_enabled = is_grad_enabled()
    autocasts = {t: amp.get_autocast_dtype(t) for t in ("cpu", "cuda") if amp.is_autocast_enabled(t)}
    results = [None] * n

    def run(i):
        try:
            results[i] = (True, _run_replica(modules[i], inputs[i], kwargs_tup[i], devices[i], grad_enabled,
                                             autocasts))
        except Exception as e:
            results[i] = (False, e)

    if n == 1:
        run(0)
    else:
        threads = [threading.Thread(target=run, args=(i,), name=f"ddpc-parallel-apply-{i}") for i in range(n)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    outputs = []
    for i, (ok, value) in enumerate(results):
        if not ok:
            where = f"in replica {i}" + (f" on device {devices[i]}" if devices[i] is not None else "")
            raise _raised_again(value, where) from None
        outputs.append(value)
    return outputs


def data_parallel(module, inputs, device_ids=None, output_device=None, dim=0, module_kwargs=None):
    """``module(*inputs, **module_kwargs)`` on the devices of ``device_ids``
    (ints for GPUs, or device strings; default every GPU, else the cpu):
    the inputs scattered along ``dim``, the module replicated, the copies run
    in parallel and the outputs gathered on ``output_device`` (default
    ``device_ids[0]``; -1 is the cpu). The module must be on
    ``device_ids[0]``. The functional form of DataParallel, as PyTorch's."""
    if not isinstance(inputs, tuple):
        inputs = (inputs,) if inputs is not None else ()
    if device_ids is None:
        count = cuda.device_count()
        device_ids = list(range(count)) if count else ["cpu"]
    device_ids = [_device_name(d) for d in device_ids]
    if not device_ids:
        raise ValueError("data_parallel needs at least one device")
    output_device = device_ids[0] if output_device is None else _device_name(output_device)
    source = _device(device_ids[0])
    for t in itertools.chain(module.parameters(), module.buffers()):
        if t.device != source:
            raise RuntimeError(f"module must have its parameters and buffers on device {source} (device_ids[0]) "
                               f"but found one of them on device: {t.device}")
    inputs, module_kwargs = scatter_kwargs(inputs, module_kwargs, device_ids, dim)
    if not inputs and not module_kwargs:  # a module without inputs runs on the first device
        inputs, module_kwargs = ((),), ({},)
    if len(device_ids) == 1:
        return module(*inputs[0], **module_kwargs[0])
    used = device_ids[:len(inputs)]
    replicas = replicate(module, used)
    outputs = parallel_apply(replicas, inputs, module_kwargs, used)
    return gather(outputs, output_device, dim)
