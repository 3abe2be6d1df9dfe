"""DistributedDataParallel and DataParallel.

DistributedDataParallel (one process per device) broadcasts rank 0's
parameters and buffers at construction, puts gradients into buckets in
reverse parameter order, and launches each bucket's all-reduce asynchronously
from the parameters' post-accumulate-grad hooks as soon as the bucket is
complete, so communication overlaps the rest of the backward pass. Buckets
launch in the same order on every rank. The sparse gradients of Embedding
and EmbeddingBag tables with ``sparse=True`` stay outside the buckets: as
PyTorch does, every rank's indices and values are all-gathered (the sizes
exchanged first, since each rank holds a different count) and the values
divided by the world size.

DataParallel (one process, several devices) keeps one persistent replica per
device, scatters inputs along a dimension, runs every replica's forward,
gathers the outputs, and sums the replicas' gradients with an in-process
all-reduce (NCCL across GPUs; copies otherwise). Its functional building
blocks, as torch.nn.parallel's (scatter, gather, replicate, parallel_apply,
data_parallel), are in nn/_scatter_gather.py and nn/_parallel_apply.py.
"""

import atexit
import contextlib
import copy
import dataclasses
import enum
import itertools
import logging
import os
import sys
import time
import types
import warnings
import weakref

import numpy as np

from .. import _C
from .. import profiler
from .. import distributed as dist
from .._join import Join, JoinHook, _GroupJoinable
from ..autograd import Node, is_grad_enabled, no_grad, queue_callback, _run_last
from ..func import functional_call
from .. import _dtype
from .._dtype import bfloat16, device as _device, float16
from .._sparse_coo import SparseTensor
from ..optim.optimizer import Optimizer
from ..tensor import Tensor, cat, from_numpy, zeros
from . import _grad_exchange
from ._parallel_apply import _refuse_uninitialized
from ._parallel_apply import data_parallel, parallel_apply, replicate  # noqa: F401  (torch.nn.parallel's functions)
from ._scatter_gather import _device_name, _split_tensors, _to_device, gather
from ._scatter_gather import scatter, scatter_kwargs  # noqa: F401  (likewise)
from .modules import Linear, Module, SyncBatchNorm

# The NCCL communicators of DataParallel's collectives (made on first use, one
# set per list of devices) are destroyed at exit while CUDA can still be
# called: atexit handlers run before the CUDA runtime's own teardown.
atexit.register(_C.multi_release)

_FIRST_BUCKET_BYTES = 1 << 20  # small first bucket: its all-reduce starts early in backward
# Where DistributedDataParallel's bucket layout goes at debug level INFO and DETAIL (ddpc.distributed.DebugLevel).
_logger = logging.getLogger(__name__)


class GradBucket:
    """What a comm hook receives: one bucket's flat gradient and its parameters."""

    def __init__(self, index, flat, params, is_last):
        self._index, self._flat, self._params, self._last = index, flat, params, is_last

    def index(self):
        return self._index

    def buffer(self):
        return self._flat

    def parameters(self):
        return list(self._params)

    def is_last(self):
        return self._last

    def set_buffer(self, buffer):
        """Puts ``buffer`` (a tensor of the bucket's length) in the bucket's place for
        the hooks that read it after this (a wrapper's compressed copy, say)."""
        self._flat = buffer

    def gradients(self):
        """Views of the flat buffer shaped as each parameter's gradient."""
        out, at = [], 0
        for p in self._params:
            out.append(self._flat[at:at + p.numel()].view(p.shape))
            at += p.numel()
        return out


def allreduce_hook(process_group, bucket):
    """Averages the bucket over the group with one all-reduce (AVG divides while it
    reduces, saving the extra pass over the bucket that a separate division costs)."""
    flat = bucket.buffer()
    if dist.get_world_size(process_group) == 1:
        return dist.Future(value=flat)
    return dist.Future(dist.all_reduce(flat, op=dist.ReduceOp.AVG, group=process_group, async_op=True), flat)


def _compress_hook(dtype, process_group, bucket):
    flat = bucket.buffer()
    compressed = flat.to(dtype)
    compressed /= dist.get_world_size(process_group)  # before reducing, so the sum stays in the narrow type's range
    fut = dist.Future(dist.all_reduce(compressed, group=process_group, async_op=True), compressed)

    def decompress(f):
        flat.copy_(f.value())
        return flat

    return fut.then(decompress)


def fp16_compress_hook(process_group, bucket):
    """Averages the bucket in float16 (half the bytes on the wire), then casts back."""
    return _compress_hook(float16, process_group, bucket)


def bf16_compress_hook(process_group, bucket):
    """Averages the bucket in bfloat16 (half the bytes, float32's range), then casts back."""
    return _compress_hook(bfloat16, process_group, bucket)


def _hook_result(value):
    """The tensor a comm hook's future delivers (a Work's future: [the tensor])."""
    if isinstance(value, (list, tuple)) and len(value) == 1:
        return value[0]
    return value


def _compress_wrapper(dtype, hook):
    if not callable(hook):
        raise TypeError(f"the hook to wrap must be callable: hook(state, bucket) -> future, got {hook!r}")

    def compress_wrapper_hook(state, bucket):
        flat = bucket.buffer()
        bucket.set_buffer(flat.to(dtype))

        def decompress(fut):
            flat.copy_(_hook_result(fut.value()))  # into the bucket's own memory: no second full-size buffer
            return flat

        return hook(state, bucket).then(decompress)

    return compress_wrapper_hook


def fp16_compress_wrapper(hook):
    """A comm hook that runs ``hook`` on the bucket cast to float16 and casts its
    result back into the bucket, as PyTorch's: ``fp16_compress_wrapper(powerSGD_hook)``
    sends PowerSGD's factors in float16, and ``fp16_compress_wrapper(allreduce_hook)``
    averages in float16 as ``fp16_compress_hook`` does."""
    return _compress_wrapper(float16, hook)


def bf16_compress_wrapper(hook):
    """As ``fp16_compress_wrapper``, in bfloat16 (float32's range, fewer digits)."""
    return _compress_wrapper(bfloat16, hook)


class BuiltinCommHookType(enum.Enum):
    """The comm hooks ``DistributedDataParallel._register_builtin_comm_hook``
    takes, as torch.distributed.BuiltinCommHookType: ALLREDUCE is
    ``allreduce_hook`` and FP16_COMPRESS ``fp16_compress_hook``, each with
    the DDP's process group as its state."""

    ALLREDUCE = "ALLREDUCE"
    FP16_COMPRESS = "FP16_COMPRESS"


@dataclasses.dataclass
class _MixedPrecision:
    """DistributedDataParallel's mixed precision, as torch.nn.parallel.distributed._MixedPrecision
    (experimental there too). ``param_dtype``: forward runs on copies of the
    floating-point parameters, and takes floating-point inputs, in this dtype;
    the parameters themselves, their ``.grad`` and checkpoints stay in full
    precision. ``reduce_dtype``: gradients are averaged in this dtype
    (``param_dtype`` where None). ``buffer_dtype``: the floating-point buffers
    are cast to it once, when DistributedDataParallel is made. Each is None
    to leave that part alone."""

    param_dtype: object = None
    reduce_dtype: object = None
    buffer_dtype: object = None

    def __post_init__(self):
        for name in ("param_dtype", "reduce_dtype", "buffer_dtype"):
            value = getattr(self, name)
            if value is not None and not (isinstance(value, _dtype.dtype) and value.is_floating_point):
                raise TypeError(f"_MixedPrecision: {name} must be a floating-point ddpc dtype or None, got {value!r}")


class _DelayedAllReduce:
    """The parameters of ``delay_all_reduce_named_params``: outside the buckets,
    their gradients accumulate in one flat buffer (each ``.grad`` a view of it,
    set after every forward) that one all-reduce averages when the gradient of
    ``param_to_hook_all_reduce`` is ready; backward waits for it at its end."""

    def __init__(self, params):
        self.params = params
        self.flat = zeros(sum(p.numel() for p in params), dtype=params[0].dtype, device=params[0].device)
        self.views, at = [], 0
        for p in params:
            self.views.append(self.flat[at:at + p.numel()].view(p.shape))
            at += p.numel()

    def attach(self):
        """Points every ``.grad`` at its view, keeping what it holds (zeros for None)."""
        if all(p.grad is None for p in self.params):
            self.flat.fill_(0)
        for p, view in zip(self.params, self.views):
            if p.grad is None or p.grad.data_ptr() != view.data_ptr():
                if p.grad is None:
                    view.fill_(0)
                else:
                    view.copy_(p.grad)
                p.grad = view

    def launch(self, process_group):
        work = dist.all_reduce(self.flat, op=dist.ReduceOp.AVG, group=process_group, async_op=True)
        queue_callback(work.wait)


class _Bucket:
    def __init__(self, index, params, flat):
        self.index = index
        self.params = params
        self.offsets = []
        n = 0
        for p in params:
            self.offsets.append(n)
            n += p.numel()
        self.flat = flat
        self.pending = len(params)
        self.future = None
        self.settled = False  # the comm hook's result is in flat (and, with optimizers in backward, stepped)

    def view(self, i):
        p = self.params[i]
        return self.flat[self.offsets[i]:self.offsets[i] + p.numel()].view(p.shape)


class _RuntimeStats:
    """PyTorch's DDP runtime stats (``_get_ddp_logging_data``): when a
    reducing iteration's forward began, its backward compute (from the end of
    forward until every gradient was ready) and its communication (from the
    first bucket's launch until the averaged gradients were in place), in
    nanoseconds. As PyTorch's, they are taken on the first ten reducing
    iterations and then on every ``sample_rate``-th, each iteration's logged
    at the next reducing forward, with running averages over those logged
    (``avg_*``, integer nanoseconds). ``backward_compute_comm_overlap_time``
    runs from the first launch to the end of backward compute: the part of
    the communication window that backward's computation covers. The times
    are the host's clock (PyTorch times CUDA modules with CUDA events), so on
    a GPU they tell when work was queued and waited for."""

    # (logged duration, its start event, its end event)
    SPANS = (("forward_compute_time", "forward", "backward_compute_start"),
             ("backward_compute_time", "backward_compute_start", "backward_compute_end"),
             ("backward_comm_time", "backward_comm_start", "backward_comm_end"),
             ("backward_compute_comm_overlap_time", "backward_comm_start", "backward_compute_end"))
    STARTS = (("forward_compute_time_start", "forward"), ("backward_compute_time_start", "backward_compute_start"),
              ("backward_comm_time_start", "backward_comm_start"), ("backward_compute_time_end", "backward_compute_end"),
              ("backward_comm_time_end", "backward_comm_end"))

    def __init__(self):
        self.iterations = 0  # reducing forwards so far
        self.sample_rate = 100
        self.logged = 0
        self.events = None  # this iteration's {event: ns} while it is sampled
        self.unused_bytes = 0  # the size of the parameters the last reducing forward did not reach
        self.data = {}

    def record(self, event):
        if self.events is not None and event not in self.events:
            self.events[event] = time.time_ns()

    def next_iteration(self):
        """At a reducing forward: logs the previous iteration if it was sampled, and starts the next."""
        if self.events is not None:
            self._log()
        self.iterations += 1
        n = self.iterations
        self.events = {} if n <= 10 or n % self.sample_rate == 0 else None
        self.record("forward")

    def _log(self):
        self.logged += 1
        self.data["iteration"] = self.iterations
        self.data["unused_parameter_size"] = self.unused_bytes
        for name, start, end in self.SPANS:
            self.data[name] = 0
            if start in self.events and end in self.events:
                took = self.events[end] - self.events[start]
                self.data[name] = took
                avg = "avg_" + name
                self.data[avg] = (took + self.data.get(avg, 0) * (self.logged - 1)) // self.logged
            self.data.setdefault("avg_" + name, 0)
        for name, event in self.STARTS:
            self.data[name] = self.events.get(event, 0)


def _reachable_leaves(outputs):
    """The leaf tensors an autograd graph reaches from `outputs` (ids)."""
    found, seen, stack = set(), set(), []
    for t in _flatten(outputs):
        if isinstance(t, Tensor) and t.grad_fn is not None:
            stack.append(t.grad_fn)
        elif isinstance(t, Tensor) and t.requires_grad:
            found.add(id(t))
    while stack:
        node = stack.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        for e in node.edges:
            if isinstance(e, Node):
                stack.append(e)
            elif isinstance(e, Tensor):
                found.add(id(e))
    return found


def _flatten(obj):
    if isinstance(obj, Tensor):
        yield obj
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            yield from _flatten(o)
    elif isinstance(obj, dict):
        for o in obj.values():
            yield from _flatten(o)
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        for f in dataclasses.fields(obj):
            yield from _flatten(getattr(obj, f.name))


def _refuse_recorded_grad(p, what):
    """Before any communication: a create_graph pass's gradient, whose graph the reduction would cut."""
    if p.grad is not None and p.grad.requires_grad:
        raise RuntimeError(
            f"{what}: backward(create_graph=True) is not supported, as the averaged gradients would lose their graph "
            "(PyTorch's do too); take a gradient penalty's gradient with ddpc.autograd.grad(..., create_graph=True) "
            "and call backward() without create_graph")


def _verify_same_model(named_params, process_group, what):
    """Raises naming the first parameter whose name or shape differs between ranks."""
    desc = "\n".join(f"{n}:{tuple(p.shape)}:{p.dtype.name}{'' if p.requires_grad else ':frozen'}"
                     for n, p in named_params).encode()
    size = dist.get_world_size(process_group)
    device = dist._metadata_device(process_group)
    length = from_numpy(np.array([len(desc)], dtype=np.int64)).to(device)
    dist.all_reduce(length, op=dist.ReduceOp.MAX, group=process_group)
    mine = zeros(int(length.item()), dtype="uint8")
    if desc:
        mine.numpy()[:len(desc)] = list(desc)
    gathered = [zeros(mine.numel(), dtype="uint8", device=device) for _ in range(size)]
    dist.all_gather(gathered, mine.to(device), group=process_group)
    tables = [bytes(g.cpu().numpy()).rstrip(b"\0").decode().split("\n") for g in gathered]
    for r, table in enumerate(tables):
        if table == tables[0]:
            continue
        for i in range(max(len(table), len(tables[0]))):
            a = tables[0][i] if i < len(tables[0]) else "<none>"
            b = table[i] if i < len(table) else "<none>"
            if a != b:
                raise RuntimeError(
                    f"{what}: the model differs between ranks 0 and {r} at parameter #{i}: "
                    f"rank 0 has {a!r}, rank {r} has {b!r} (name:shape:dtype[:frozen]); every rank must build "
                    "the same model")


class DistributedDataParallel(Module, _GroupJoinable):
    """Data parallelism across processes, with PyTorch's constructor and behaviour.

    ``device_ids`` names this process's device (one entry), where the module
    is moved (PyTorch expects it there already), or is None for a module on
    the cpu or already on its device; a CUDA device on a machine without a
    usable GPU raises PyTorch's ValueError for device_ids with a CPU module.
    Gradients are averaged over the group. With ``find_unused_parameters``,
    parameters forward did not use, and those the loss does not reach (an
    output left out of it), are ready with no gradient, as in PyTorch.
    Differences from PyTorch: after each reduction a parameter's ``.grad``
    is a view of its bucket (no copy back), as PyTorch gives only with
    ``gradient_as_bucket_view=True``, which here also makes the gradients
    views before the first reduction; a group of one skips the buckets;
    ``static_graph=True`` looks for parameters that get no gradient in every
    iteration, as ``find_unused_parameters=True`` does (PyTorch looks in the
    first and keeps what it found, the same for a static graph);
    ``init_sync=False`` skips the check that every rank has the same model
    and the broadcast of rank 0's state; ``gradient_predivide_factor`` is not
    offered.

    Buckets fill in reduction order (the last parameters first). Under the
    default ``bucket_cap_mb`` (None: 25 MiB) the first bucket takes at most
    1 MiB, so that its all-reduce starts early in backward; a
    ``bucket_cap_mb`` the caller gives holds for every bucket, as in PyTorch.

    The rest of PyTorch 2.15's arguments, as it defines them:

    * ``forward_sync_buffers`` (default True): rank 0's buffers are broadcast
      at the start of each forward (see ``will_sync_module_buffers``), and to
      the ranks that joined early; once a rank has joined, the highest rank
      still active broadcasts its buffers instead; the init sync always
      includes them.
      ``broadcast_buffers`` is its deprecated name (a FutureWarning): given
      alone, ``False`` also leaves the buffers out of the init sync; it is
      ignored when ``forward_sync_buffers`` is given. The attribute
      ``broadcast_buffers`` reads and sets ``forward_sync_buffers``.
    * ``bucket_cap_mb_list``: the size limit of each bucket in turn, in MiB
      (bucket i, in reduction order, takes up to entry i; the last entry for
      the rest), in place of ``bucket_cap_mb`` and the small first bucket.
    * ``delay_all_reduce_named_params`` with ``param_to_hook_all_reduce``
      (both or neither): those (name, parameter) pairs stay out of the buckets,
      the verification and the comm hook; they are broadcast from rank 0 at
      construction (also with ``init_sync=False``, as in PyTorch), their
      ``.grad`` are views of one flat buffer, and that buffer is averaged with
      one all-reduce when the gradient of ``param_to_hook_all_reduce`` has
      been accumulated (PyTorch fires when it is computed, just before), and
      waited for at the end of backward. Not under ``no_sync`` (the average
      is linear, so the accumulated result is the same).
    * ``mixed_precision`` (a ``_MixedPrecision``): forward runs on copies of
      the parameters, and on the floating-point inputs, cast to
      ``param_dtype``; each bucket is cast to ``reduce_dtype`` (else
      ``param_dtype``) for the comm hook, the default one or a registered
      one, and the average lands in the full-precision ``.grad``; buffers are
      cast to ``buffer_dtype`` once. PyTorch swaps the parameters' storage and
      accumulates under ``no_sync`` in ``param_dtype``; here the gradients
      come back through the casts, so they accumulate in full precision. The
      linear weights' exchange is off (it would average in full precision).
    * ``skip_all_reduce_unused_params`` (with ``find_unused_parameters``):
      the parameters forward's outputs do not reach keep their ``.grad`` as
      it was (None, or what this rank accumulated), buckets holding only such
      parameters are not all-reduced, and the all-reduce of which parameters
      are used anywhere is skipped. As in PyTorch, every rank must leave the
      same parameters unused, in every iteration; under ``join()`` the ranks
      that ran out reduce every bucket, so the active ones must use every
      parameter while any rank has joined.
    * ``batched_grad_copy`` and ``lazy_bucket_allocation`` are PyTorch's
      kernel-launch and memory knobs of its C++ reducer: taken (bools, kept
      as attributes) and change nothing here, where backward writes most
      gradients straight into their bucket slots and the buckets live for
      the wrapper's life (on the host, in memory the ranks share).
    * ``check_reduction`` is deprecated (a FutureWarning when True) and does
      nothing, as in PyTorch.

    As PyTorch's, the parameters and buffers named by
    ``_set_params_and_buffers_to_ignore_for_model`` (``parameters_to_ignore``)
    are left alone, and ``copy.deepcopy`` or pickling gives a DDP of its own
    over the default process group (see ``__setstate__``).

    Optimizers in backward, as PyTorch's: where the module's parameters have
    optimizers from ``ddpc.distributed.optim._apply_optimizer_in_backward``
    at the first forward, their own hooks (which would step on this rank's
    gradient) are removed and the reducer steps them on the averaged
    gradient, bucket by bucket as each bucket's average arrives during
    backward (the rest at its end), then sets their ``.grad`` to None.
    ``_register_fused_optim`` does the same with an optimizer it makes, and
    leaves the averaged ``.grad`` in place. Both step on the comm hook's
    result, whichever hook is registered; under ``no_sync()`` nothing steps
    and the next reducing backward steps on the accumulated gradients. The
    linear weights' exchange is off with them (it bypasses the buckets).

    Where the work goes: a linear layer's fresh weight and bias gradients are
    written by backward straight into their bucket slots (nothing is copied
    into the buckets), and host buckets lie in a
    ``ddpc.distributed.shared_buffer``, which the cpu backend reduces in place
    across the ranks on a host.

    At debug level INFO or DETAIL (``ddpc.distributed.set_debug_level``, or
    TORCH_DISTRIBUTED_DEBUG), rank 0 of the group logs this layout when the
    wrapper is made (logger ``ddpc.nn.parallel``), and the error for
    parameters that got no gradient names each with its shape and index
    (at OFF, the first ten).
    """

    def __init__(self, module, device_ids=None, output_device=None, dim=0, broadcast_buffers=None, init_sync=True,
                 process_group=None, bucket_cap_mb=None, find_unused_parameters=False, check_reduction=False,
                 gradient_as_bucket_view=False, static_graph=False, delay_all_reduce_named_params=None,
                 param_to_hook_all_reduce=None, mixed_precision=None, device_mesh=None,
                 skip_all_reduce_unused_params=False, bucket_cap_mb_list=None, batched_grad_copy=False,
                 forward_sync_buffers=None, lazy_bucket_allocation=False):
        super().__init__()
        if dim != 0:
            raise ValueError("DistributedDataParallel splits nothing (each rank brings its own batch): dim must be 0")
        _refuse_uninitialized(module, "DistributedDataParallel")
        if (delay_all_reduce_named_params is None) != (param_to_hook_all_reduce is None):
            raise ValueError("delay_all_reduce_named_params and param_to_hook_all_reduce need to be set at the same "
                             "time.")
        for name, flag in (("skip_all_reduce_unused_params", skip_all_reduce_unused_params),
                           ("batched_grad_copy", batched_grad_copy),
                           ("lazy_bucket_allocation", lazy_bucket_allocation)):
            if not isinstance(flag, bool):
                raise TypeError(f"{name} must be a bool, got {flag!r}")
        if mixed_precision is not None and not isinstance(mixed_precision, _MixedPrecision):
            raise TypeError("mixed_precision must be a ddpc.nn.parallel._MixedPrecision or None, got "
                            f"{type(mixed_precision).__name__}")
        if check_reduction:
            warnings.warn("The `check_reduction` argument in `DistributedDataParallel` module is deprecated. Please "
                          "avoid using it.", FutureWarning, stacklevel=2)
        explicit_cap = bucket_cap_mb is not None
        if not explicit_cap:
            bucket_cap_mb = 25
        if not isinstance(bucket_cap_mb, (int, float)) or bucket_cap_mb <= 0:
            raise ValueError(f"bucket_cap_mb must be a positive number of MiB, got {bucket_cap_mb!r}")
        if bucket_cap_mb_list:  # (an empty list is none, as in PyTorch)
            if not all(isinstance(c, (int, float)) and not isinstance(c, bool) and c > 0 for c in bucket_cap_mb_list):
                raise ValueError(f"bucket_cap_mb_list must list positive numbers of MiB, got {bucket_cap_mb_list!r}")
            self._bucket_caps = [int(c * (1 << 20)) for c in bucket_cap_mb_list]
        else:
            # The small first bucket only under the default cap, as in PyTorch:
            # a cap the caller names holds for every bucket.
            cap = int(bucket_cap_mb * (1 << 20))
            self._bucket_caps = [cap] if explicit_cap else [_FIRST_BUCKET_BYTES, cap]
        self.batched_grad_copy, self.lazy_bucket_allocation = batched_grad_copy, lazy_bucket_allocation
        if broadcast_buffers is not None:
            warnings.warn("`broadcast_buffers` is deprecated. Use `forward_sync_buffers` instead"
                          + (": `broadcast_buffers` is ignored when `forward_sync_buffers` is given."
                             if forward_sync_buffers is not None else
                             ". Unlike `broadcast_buffers=False`, `forward_sync_buffers=False` still syncs buffers "
                             "at init."), FutureWarning, stacklevel=2)
        if forward_sync_buffers is not None:
            init_sync_buffers = True
        else:
            forward_sync_buffers = init_sync_buffers = broadcast_buffers if broadcast_buffers is not None else True
        if not dist.is_initialized():
            raise RuntimeError("DistributedDataParallel needs a process group: call "
                               "ddpc.distributed.init_process_group() first")
        if device_ids is not None and len(device_ids) != 1:
            raise ValueError("DistributedDataParallel drives one device per process: pass device_ids=[i] or None")
        self.module = module
        target = device_ids[0] if device_ids else None
        if target is not None and _device(target).type == "cuda" and _C.cuda_device_count() == 0:
            devices = {p.device for p in module.parameters()}
            raise ValueError(
                "DistributedDataParallel device_ids and output_device arguments only work with "
                f"single-device/multiple-device GPU modules or CPU modules, but got device_ids {list(device_ids)}, "
                f"output_device {output_device}, and module parameters {devices}. There is no usable GPU here: "
                "pass device_ids=None for a module on the cpu")
        # where the module is moved and forward moves the inputs
        self._input_device = None if target is None else target if not isinstance(target, int) else f"cuda:{target}"
        if self._input_device is not None:
            module.to(self._input_device)
        self.forward_sync_buffers = forward_sync_buffers
        if device_mesh is not None:
            if process_group is not None:
                raise RuntimeError("Cannot specify both process_group and device_mesh arguments.")
            if device_mesh.ndim != 1:
                raise RuntimeError(f"Only 1D device mesh is supported, but got {device_mesh}.")
            process_group = device_mesh.get_group(mesh_dim=0)
        self.device_mesh = device_mesh
        self._join_group = process_group  # (as given: Join compares it with its other joinables')
        self.process_group = dist._group(process_group)
        self.find_unused_parameters = find_unused_parameters
        self.static_graph = bool(static_graph)
        self.gradient_as_bucket_view = gradient_as_bucket_view
        self.bucket_bytes_cap = int((max(bucket_cap_mb_list) if bucket_cap_mb_list else bucket_cap_mb) * (1 << 20))
        self.require_backward_grad_sync = True
        self.require_forward_param_sync = True  # as PyTorch's: cleared by a forward that will not reduce
        self.skip_all_reduce_unused_params = skip_all_reduce_unused_params
        self.mixed_precision = mixed_precision
        self._reduce_dtype = mixed_precision and (mixed_precision.reduce_dtype or mixed_precision.param_dtype)
        # As PyTorch's: the names of _set_params_and_buffers_to_ignore_for_model, and those of the delayed parameters.
        self.parameters_to_ignore = set(getattr(module, "_ddp_params_and_buffers_to_ignore", ()))
        if delay_all_reduce_named_params is not None:
            delay_all_reduce_named_params = list(delay_all_reduce_named_params)
        self._delay_all_reduce_params = self._delayed_params(module, delay_all_reduce_named_params,
                                                             param_to_hook_all_reduce)
        self._param_to_hook_all_reduce = param_to_hook_all_reduce
        self.parameters_to_ignore.update(n for n, _ in delay_all_reduce_named_params or ())
        # frozen ones too: verified and broadcast (not the ignored ones; the delayed ones apart, as in PyTorch)
        self._all_params = [(n, p) for n, p in module.named_parameters() if n not in self.parameters_to_ignore]
        if not any(p.requires_grad for _, p in self._all_params):
            raise RuntimeError("DistributedDataParallel is not needed when a module doesn't have any parameter that "
                               "requires a gradient.")
        self.device = self._all_params[0][1].device
        self.device_type = self.device.type
        self.is_multi_device_module = len({str(p.device) for _, p in self._all_params}) > 1
        if target is None or self.device_type == "cpu":
            self.device_ids = self.output_device = None
        else:
            self.device_ids = [self.device.index]
            self.output_device = _device(output_device if output_device is not None else target).index
        if init_sync:
            _verify_same_model(self._all_params, self.process_group, "DistributedDataParallel")
            self._broadcast_states(0, with_params=True, with_buffers=init_sync_buffers)
        if self._delay_all_reduce_params:
            with no_grad():
                for p in self._delay_all_reduce_params:
                    dist.broadcast(p, src=dist.get_global_rank(self.process_group, 0), group=self.process_group)
        if mixed_precision is not None and mixed_precision.buffer_dtype is not None:
            for b in self.modules_buffers:
                if b.dtype.is_floating_point:
                    b.data = b.to(mixed_precision.buffer_dtype)
        self.dim = dim
        self._manual_finalization = False
        self._init_reducer()

    _private_buckets = False  # (see _bucket_memory)

    def _init_reducer(self):
        """The reducer of the parameters in ``_all_params`` that require a gradient: the default comm hook, the
        buckets, the parameters' hooks, and what each iteration tracks. Collective (the memory the ranks on a
        host share, see _build_reducer), unless ``_private_buckets``: then every gradient goes through buckets
        in memory of this rank's own."""
        self._set_comm_hook(allreduce_hook, self.process_group)
        self._comm_hook_registered = False
        sparse = {id(m.weight) for m in self.module.modules() if getattr(m, "sparse", False) is True
                  and isinstance(getattr(m, "weight", None), Tensor)}
        trained = [(n, p) for n, p in self._all_params if p.requires_grad]
        self._named_params = [(n, p) for n, p in trained if id(p) not in sparse]  # these are reduced in buckets
        self._sparse_params = [p for _, p in trained if id(p) in sparse]  # these are all-gathered
        for p in self._sparse_params:
            p.register_post_accumulate_grad_hook(self._on_sparse_grad_ready)
        self._delayed = _DelayedAllReduce(self._delay_all_reduce_params) if self._delay_all_reduce_params else None
        self._index = {id(p): k for k, (_, p) in enumerate(self._named_params)}
        self._exchange_settled = False  # (see _finish_reduction)
        # Parameter -> the optimizers the reducer steps on its averaged gradient
        # (see _setup_in_backward_optimizers and _register_fused_optim), and
        # the parameters whose gradient is then dropped.
        self._steppers, self._drop_grads = {}, set()
        self._fused_optim_registered = False
        self._lazy_init_ran = False
        # (the exchange averages in the gradients' own dtype, not in a mixed precision's reduce_dtype, and
        # outside the buckets, where no optimizer in backward would step)
        self._build_reducer(exchange=not self._private_buckets and not self._finds_unused()
                            and self._reduce_dtype is None
                            and not any("_in_backward_optimizers" in p.__dict__ for _, p in self._named_params))
        if dist.get_debug_level() is not dist.DebugLevel.OFF and dist.get_rank(self.process_group) == 0:
            self._log_layout()
        for _, p in self._named_params:
            p.register_post_accumulate_grad_hook(self._on_grad_ready)
        if self._delayed:  # after the reducer's own hook: a bucket the same gradient completes goes first
            self._param_to_hook_all_reduce.register_post_accumulate_grad_hook(self._on_delayed_hook)
        self._delayed_sync = False
        self._next_launch = self._next_settle = 0
        self._got_grad = {}
        self._hook_fired = self._ends_with_backward = False
        self._unused, self._used_mask, self._used, self._sparse_ready = [], None, None, set()
        self._expect_reduction = self._gather_sparse = False
        self._join_steps, self._join_active, self._join_divide_by_world = 0, None, True
        self._awaiting_finalize = False  # (manual finalization) every bucket launched, not yet finished
        self._stats = _RuntimeStats()

    # ---- construction --------------------------------------------------------------
    def _world(self):
        return dist.get_world_size(self.process_group), dist.get_rank(self.process_group)

    def _collective_tensor(self, values):
        """A numpy array's copy where this group's collectives take it."""
        return from_numpy(values).to(dist._metadata_device(self.process_group))

    def _delayed_params(self, module, named, hooked):
        """The parameters of ``delay_all_reduce_named_params``, checked against the module."""
        if named is None:
            return []
        named = list(named)
        own = dict(module.named_parameters())
        for item in named:
            if not (isinstance(item, tuple) and len(item) == 2 and own.get(item[0]) is item[1]):
                raise ValueError("delay_all_reduce_named_params must list (name, parameter) pairs of the module's "
                                 f"named_parameters(), got {item!r}")
        delayed = [p for _, p in named if p.requires_grad]
        if not delayed:
            raise ValueError("delay_all_reduce_named_params names no parameter that requires a gradient")
        if len({(p.dtype, p.device) for p in delayed}) != 1:
            raise ValueError("the parameters of delay_all_reduce_named_params must have one dtype and one device "
                             "(their gradients are averaged in one flat buffer)")
        if not isinstance(hooked, Tensor) or not hooked.requires_grad or hooked.grad_fn is not None:
            raise ValueError("param_to_hook_all_reduce must be a parameter that requires a gradient, got "
                             f"{type(hooked).__name__}")
        return delayed

    @property
    def named_module_buffers(self):
        """The module's buffers by name, less those in ``parameters_to_ignore``: those that are broadcast."""
        return {n: b for n, b in self.module.named_buffers() if n not in self.parameters_to_ignore}

    @property
    def modules_buffers(self):
        """The buffers of ``named_module_buffers``, in the module's order."""
        return list(self.named_module_buffers.values())

    @property
    def join_process_group(self):
        """The process group as given (None: the default one), which Join compares with its other joinables'."""
        return self._join_group

    @staticmethod
    def _set_params_and_buffers_to_ignore_for_model(module, params_and_buffers_to_ignore):
        """Names (fully qualified, as ``named_parameters()`` and ``named_buffers()`` give them) the parameters and
        buffers that a DistributedDataParallel made over ``module`` afterwards leaves alone, as PyTorch's: they are
        neither verified nor broadcast, at construction or in forward, and their gradients are not averaged (each
        rank keeps its own). Stored as given in ``module._ddp_params_and_buffers_to_ignore``; each of them is
        marked ``_ddp_ignored``."""
        module._ddp_params_and_buffers_to_ignore = params_and_buffers_to_ignore
        for name, tensor in itertools.chain(module.named_parameters(), module.named_buffers()):
            if name in params_and_buffers_to_ignore:
                tensor._ddp_ignored = True

    @property
    def broadcast_buffers(self):
        """The deprecated name of ``forward_sync_buffers``."""
        return self.forward_sync_buffers

    @broadcast_buffers.setter
    def broadcast_buffers(self, value):
        self.forward_sync_buffers = value

    def _broadcast_states(self, group_rank, with_params, with_buffers=True):
        """Copies the parameters (if asked) and buffers (if asked) of one group member to all."""
        src = dist.get_global_rank(self.process_group, group_rank)
        tensors = (([p for _, p in self._all_params] if with_params else [])
                   + (self.modules_buffers if with_buffers else []))
        with no_grad():
            for t in tensors:
                dist.broadcast(t, src=src, group=self.process_group)

    def _build_reducer(self, exchange, only=None):
        """The buckets, and the exchange of linear weight gradients (see
        nn/_grad_exchange.py) where every rank is on this host: the weights of
        the module's nn.Linear layers (or those in ``only``) are averaged
        through it instead of a bucket. Collective (the ranks share memory)."""
        params = [p for _, p in self._named_params]
        swapped = []
        if exchange and _grad_exchange.host_group(self.process_group) is not None:
            # (the weights of a Linear's own table: reading a parametrized one's weight would run its parametrization)
            weights = ({id(m._parameters.get("weight")) for m in self.module.modules() if isinstance(m, Linear)}
                       if only is None else {id(p) for p in only})
            swapped = [p for p in params if id(p) in weights and _grad_exchange.exchangeable(p)]
        self._exchange = None
        if swapped:
            size = _grad_exchange.GradExchange.size(swapped, dist.get_world_size(self.process_group))
            try:
                memory = dist.shared_buffer(size, self.process_group)
                self._exchange = _grad_exchange.GradExchange(swapped, self.process_group, memory)
            except (dist.DistError, OSError) as e:  # every rank on the host gets an error
                warnings.warn(f"DistributedDataParallel all-reduces every gradient: {e}", RuntimeWarning)
        exchanged = {id(p) for p in self._exchange.params} if self._exchange else set()
        self._buckets = self._make_buckets([p for p in params if id(p) not in exchanged])
        self._where = {}
        self._handed, self._warned_alias = [], False  # (p, the gradient handed out): see _hand_out
        for b in self._buckets:
            for i, p in enumerate(b.params):
                self._where[id(p)] = (b, i)
                p._grad_into = b.view(i)  # backward writes a fresh gradient straight into the bucket
                p.__dict__.pop("_grad_exchange", None)
        if self._exchange:
            for p, slot in zip(self._exchange.params, self._exchange.slots):
                p._grad_into = slot
                p._grad_exchange = self._exchange.take

    def _log_layout(self):
        """Logs where each gradient is reduced (at debug level INFO and DETAIL, on rank 0)."""
        names = {id(p): n for n, p in self._all_params}
        caps = ", ".join(str(c) for c in self._bucket_caps)
        lines = [f"DistributedDataParallel over {dist.get_world_size(self.process_group)} ranks: "
                 f"{len(self._buckets)} bucket(s) (up to {caps} bytes in turn, the last for the rest), "
                 "reduced in this order:"]
        for b in self._buckets:
            p = b.params[0]
            lines.append(f"  bucket {b.index}: {b.flat.nbytes} bytes of {p.dtype.name} on {p.device}, "
                         f"{len(b.params)} parameter(s): {', '.join(names[id(q)] for q in b.params)}")
        if self._exchange:
            lines.append("  outside the buckets, averaged by the ranks on this host through shared memory: "
                         + ", ".join(names[id(q)] for q in self._exchange.params))
        if self._sparse_params:
            lines.append("  sparse gradients, all-gathered: " + ", ".join(names[id(q)] for q in self._sparse_params))
        if self._delayed:
            names.update({id(p): n for n, p in self.module.named_parameters()})
            lines.append("  delayed, all-reduced together when param_to_hook_all_reduce's gradient is ready: "
                         + ", ".join(names[id(q)] for q in self._delayed.params))
        _logger.info("\n".join(lines))

    def _make_buckets(self, params):
        """Bucket i closes once it holds ``_bucket_caps[i]`` bytes or more (the
        last cap for the rest), PyTorch's rule: the parameter that reaches the
        cap is still in it. A change of dtype or device closes a bucket too."""
        caps = self._bucket_caps
        buckets, current, size = [], [], 0
        for p in reversed(params):
            if current and (p.dtype is not current[0].dtype or p.device != current[0].device):
                buckets.append(current)
                current, size = [], 0
            current.append(p)
            size += p.nbytes
            if size >= caps[min(len(buckets), len(caps) - 1)]:
                buckets.append(current)
                current, size = [], 0
        if current:
            buckets.append(current)
        flats = self._bucket_memory(buckets)
        return [_Bucket(i, ps, flat) for i, (ps, flat) in enumerate(zip(buckets, flats))]

    def _bucket_memory(self, buckets):
        """Zeroed flat storage for each bucket. On the host, all of it lies in one
        buffer that the ranks on this host share (dist.shared_buffer), at the same
        offsets on every rank, so the cpu backend reduces the buckets in place;
        a copy's buckets (``_private_buckets``, see __setstate__) lie in memory of its own."""
        counts = [sum(p.numel() for p in ps) for ps in buckets]
        offsets, end, memory = [], 0, None
        for ps, n in zip(buckets, counts):
            offsets.append(end)
            end += -(-n * ps[0].element_size() // 64) * 64  # 64-byte aligned: no cache line spans two buckets
        if buckets and all(ps[0].device.type == "cpu" for ps in buckets) and not self._private_buckets:
            try:
                memory = dist.shared_buffer(end, self.process_group)
            except (dist.DistError, OSError) as e:  # e.g. /dev/shm too small: every rank on the host gets an error
                warnings.warn(f"DistributedDataParallel keeps its buckets in private memory: {e}", RuntimeWarning)
        if memory is None:
            return [zeros(n, dtype=ps[0].dtype, device=ps[0].device) for ps, n in zip(buckets, counts)]
        return [Tensor(_C.Buffer.from_object(np.frombuffer(memory, f"u{ps[0].element_size()}", n, o), ps[0].dtype.name))
                for ps, n, o in zip(buckets, counts, offsets)]

    # ---- the reducer -----------------------------------------------------------------
    def _check_reducer_finalized(self):
        """Raises if the last backward pass's gradient reduction did not finish:
        some parameters got no gradient, or (with manual finalization)
        finalize_backward() was not called. Forward checks the same."""
        if self._awaiting_finalize:
            raise RuntimeError("Expected to have finalized the prior backward pass before starting a new one. Call "
                               "finalize_backward() after backward() when require_manual_backward_finalization is "
                               "true.")
        if self._expect_reduction and self._hook_fired:
            missing = [(k, n, p) for k, (n, p) in enumerate(self._named_params) if id(p) not in self._got_grad]
            if dist.get_debug_level() is dist.DebugLevel.OFF:
                listed = (f"{[n for _, n, _ in missing[:10]]}{' ...' if len(missing) > 10 else ''} ({len(missing)} "
                          "in all; with TORCH_DISTRIBUTED_DEBUG=INFO this error names each, with its shape)")
            else:
                listed = ", ".join(f"{n} {tuple(p.shape)} (index {k})" for k, n, p in missing)
            raise RuntimeError(
                "DistributedDataParallel: the previous iteration's gradient reduction did not finish because these "
                f"parameters got no gradient on rank {dist.get_rank()}: {listed}. Pass "
                "find_unused_parameters=True if some parameters are unused in forward, or make every output "
                "contribute to the loss")

    def _prepare_for_backward(self, outputs):
        self._check_reducer_finalized()
        self._stats.record("backward_compute_start")
        # A forward without a backward (e.g. evaluation with grad mode on) launched nothing: start afresh.
        for b in self._buckets:
            b.pending, b.future, b.settled = len(b.params), None, False
        self._next_launch = self._next_settle = 0
        self._exchange_pending = len(self._exchange.params) if self._exchange else 0
        self._got_grad = {}
        self._hook_fired = self._ends_with_backward = False
        self._unused, self._used_mask, self._used, self._skipped = [], None, None, None
        self._sparse_ready = set()
        # A group of one with the default hook has nothing to average: skip the buckets entirely.
        alone = (self._comm_hook is allreduce_hook and dist.get_world_size(self.process_group) == 1
                 and self._reduce_dtype is None and not self._manual_finalization and not self._steppers)
        self._expect_reduction = self.require_backward_grad_sync and not alone
        if self._exchange:
            self._exchange.begin(self._expect_reduction and self._comm_hook is allreduce_hook)
        self._gather_sparse = self._expect_reduction  # (the buckets may finish before the sparse tables' turn)
        if self._expect_reduction and self._finds_unused():
            used = _reachable_leaves(outputs)
            self._unused = [p for _, p in self._named_params if id(p) not in used]
            if self.skip_all_reduce_unused_params:  # unused here means unused on every rank
                self._skipped = {id(p) for p in self._unused}
            self._stats.unused_bytes = sum(p.nbytes for p in self._unused)

    def _finds_unused(self):
        """Whether each backward pass looks for parameters that get no gradient:
        with find_unused_parameters, or a static graph (which PyTorch looks at
        in its first iteration only; the same set every time, for a static graph)."""
        return self.find_unused_parameters or self.static_graph

    def _first_gradient(self):
        """The first gradient of this backward pass: the parameters forward did
        not reach are ready now (as PyTorch marks them), with any gradient they hold."""
        self._hook_fired = True
        if self._finds_unused():
            self._ends_with_backward = True
            queue_callback(self._end_of_backward)
            for q in self._unused:
                self._mark_ready(q, q.grad)

    @_run_last
    def _on_grad_ready(self, p):
        if not self._expect_reduction:
            return
        _refuse_recorded_grad(p, "DistributedDataParallel")
        if not self._hook_fired:
            self._first_gradient()
        if self._got_grad.get(id(p)) and any(q is p for q in self._unused):
            raise RuntimeError(
                f"DistributedDataParallel: a parameter ({tuple(p.shape)}) that forward's outputs do not reach got a "
                "gradient; with find_unused_parameters=True, return from forward every tensor the loss is computed "
                "from")
        self._mark_ready(p, p.grad)

    def _end_of_backward(self):
        """End of a backward pass that looks for unused parameters: those that
        forward's outputs reach but the loss does not (an output left out of
        it) got no gradient, and are ready now, as PyTorch marks them (with
        skip_all_reduce_unused_params, unused on every rank, so left alone).
        Then which parameters got a gradient anywhere is all-reduced, and the
        sparse tables' gradients are gathered in their order, on every rank
        after every bucket, whichever buckets or tables this rank's loss reached."""
        if not self._expect_reduction:
            return
        late = [p for _, p in self._named_params if id(p) not in self._got_grad]
        self._unused += late
        if self._skipped is not None:
            self._skipped.update(id(p) for p in late)
        for p in late:
            self._mark_ready(p, p.grad)
        if self._skipped is None:
            self._launch_used_mask()
        for p in self._sparse_params:
            self._reduce_sparse(p, p.grad if id(p) in self._sparse_ready else None)
        self._ends_with_backward = False
        self._launch_ready()

    @_run_last
    def _on_sparse_grad_ready(self, p):
        if not self._gather_sparse:
            return
        _refuse_recorded_grad(p, "DistributedDataParallel")
        if self._finds_unused():  # another rank's loss may reach other tables: all are gathered at the end
            if not self._hook_fired:
                self._first_gradient()
            self._sparse_ready.add(id(p))
            return
        self._reduce_sparse(p, p.grad)

    def _reduce_sparse(self, p, grad):
        """A sparse table's gradient, ``grad`` (None where this rank's loss did
        not reach it), averaged over the ranks: their sparse gradients
        gathered, None where no rank has one."""
        if grad is not None and not grad.is_sparse:  # a dense gradient (its weight used outside the lookup)
            dist.all_reduce(grad, op=dist.ReduceOp.AVG, group=self.process_group)
        else:
            mine = grad if grad is not None else SparseTensor(
                zeros((1, 0), dtype=_dtype.int64, device=p.device),
                zeros((0,) + tuple(p.shape[1:]), dtype=p.dtype, device=p.device), p.shape)
            gathered = self._gathered_sparse(mine)
            p.grad = gathered if gathered._nnz() or grad is not None else None
        for optimizer in self._steppers.get(id(p), ()):
            optimizer.step()
        if id(p) in self._drop_grads:
            p.grad = None

    def _gathered_sparse(self, grad):
        """Every rank's sparse gradient concatenated in rank order (uncoalesced), over the world size."""
        world = dist.get_world_size(self.process_group)
        indices, values = grad._indices(), grad._values()
        count = self._collective_tensor(np.array([indices.shape[1]], dtype=np.int64))
        counts = [zeros(1, dtype=count.dtype, device=count.device) for _ in range(world)]
        dist.all_gather(counts, count, group=self.process_group)
        counts = [int(c.item()) for c in counts]
        most = max(counts)
        # all_gather moves equal sizes: each rank's part is padded to the largest count
        pad = most - indices.shape[1]
        if pad:
            indices = cat([indices, zeros((indices.shape[0], pad), dtype=indices.dtype, device=indices.device)], 1)
            values = cat([values, zeros((pad,) + tuple(values.shape[1:]), dtype=values.dtype, device=values.device)])
        parts_i = [zeros(tuple(indices.shape), dtype=indices.dtype, device=indices.device) for _ in range(world)]
        parts_v = [zeros(tuple(values.shape), dtype=values.dtype, device=values.device) for _ in range(world)]
        dist.all_gather(parts_i, indices.contiguous(), group=self.process_group)
        dist.all_gather(parts_v, values.contiguous(), group=self.process_group)
        return SparseTensor(cat([t.narrow(1, 0, c) for t, c in zip(parts_i, counts)], 1),
                            cat([t.narrow(0, 0, c) for t, c in zip(parts_v, counts)]) / world, grad.shape)

    def _launch_used_mask(self):
        """All-reduces which parameters have a gradient on some rank: those that have
        none anywhere keep ``.grad`` None after the reduction, as in PyTorch."""
        unused = {id(q) for q in self._unused}
        used = np.array([id(q) not in unused or q.grad is not None for _, q in self._named_params], dtype=np.int32)
        self._used_mask, self._used = self._collective_tensor(used), None
        self._used_mask_work = dist.all_reduce(self._used_mask, op=dist.ReduceOp.MAX, group=self.process_group,
                                               async_op=True)

    def _mark_ready(self, p, grad):
        if self._got_grad.get(id(p)):
            raise RuntimeError(f"DistributedDataParallel: a parameter got a gradient twice in one backward pass "
                               f"({tuple(p.shape)}); this reducer supports one backward per forward")
        self._got_grad[id(p)] = True
        k = self._exchange.index.get(id(p)) if self._exchange else None
        if k is None:
            b, i = self._where[id(p)]
            slot = b.view(i)
            b.pending -= 1
        else:
            slot = self._exchange.slots[k]
            self._exchange_pending -= 1
        if grad is None:
            slot.fill_(0)
        elif grad.data_ptr() != slot.data_ptr():
            slot.copy_(grad)
        if k is not None:
            self._exchange.mark_computed(k)  # (unless its rows were handed over)
        if self.gradient_as_bucket_view and grad is not None:
            p.grad = slot
        self._launch_ready()

    def _launch_ready(self):
        while self._next_launch < len(self._buckets) and self._buckets[self._next_launch].pending == 0:
            b = self._buckets[self._next_launch]
            self._next_launch += 1
            if self._skipped and all(id(p) in self._skipped for p in b.params):
                continue  # (b.future stays None)
            last = b.index == len(self._buckets) - 1
            rec = profiler._is_profiler_enabled and profiler._open("DistributedDataParallel.launch_bucket", (b.flat,),
                                                                   {"bucket": b.index, "bytes": b.flat.nbytes})
            self._stats.record("backward_comm_start")
            b.future = self._bucket_hook(self._comm_state, GradBucket(b.index, b.flat, b.params, last))
            if rec:
                profiler._close(rec)
        if self._steppers and not self._ends_with_backward:
            # The optimizers step on each bucket whose average has arrived,
            # in bucket order, while backward goes on; _finish_reduction
            # waits for the rest. (Looking for unused parameters, which of
            # them got a gradient anywhere is known only once backward ends.)
            while self._next_settle < self._next_launch:
                b = self._buckets[self._next_settle]
                if b.future is not None:  # (None: skipped, all its parameters unused)
                    if not b.future.done():
                        break
                    self._settle(b)
                self._next_settle += 1
        if self._next_launch == len(self._buckets) and not self._exchange_pending and not self._ends_with_backward:
            self._stats.record("backward_compute_end")
            if self._manual_finalization:
                self._awaiting_finalize = True  # the caller's finalize_backward() finishes
            else:
                self._finish_reduction()

    def _rescale(self):
        """Under join(divide_by_initial_world_size=False) with ranks joined: the
        factor that turns an average over the world into one over the active ranks; else None."""
        world = dist.get_world_size(self.process_group)
        if (self._join_config.enable and not self._join_divide_by_world and self._join_active is not None
                and 0 < self._join_active < world):
            return world / self._join_active
        return None

    def _used_flags(self):
        """With find_unused_parameters: which parameters (by _index) have a gradient on some rank; else None."""
        if self._used_mask is None:
            return None
        if self._used is None:
            self._used_mask_work.wait()
            self._used = self._used_mask.cpu().numpy()
        return self._used

    def _settle(self, b):
        """Waits for bucket ``b``'s comm hook and puts its result in the bucket;
        then the optimizers stepped in backward step its parameters on it."""
        result = _hook_result(b.future.wait())
        if result is not b.flat:
            b.flat.copy_(result)
        scale = self._rescale()
        if scale is not None:  # averaged over the ranks still active, not over the whole world
            b.flat.mul_(scale)
        b.settled = True
        if not self._steppers:
            return
        used = self._used_flags()
        for i, p in enumerate(b.params):
            optimizers = self._steppers.get(id(p))
            if optimizers and (used is None or used[self._index[id(p)]]):
                p.grad = b.view(i)
                for optimizer in optimizers:
                    optimizer.step()

    def _hand_out(self, p, slot):
        """Makes the reduced gradient in ``slot`` p's ``.grad``: the bucket's
        memory itself, with no copy (as with PyTorch's gradient_as_bucket_view).
        Without gradient_as_bucket_view, where the caller keeps it after
        dropping it from p (``g = p.grad; zero_grad()``), the next forward
        gives it memory of its own first (_keep_handed_out), so that the next
        backward, which reuses the bucket, leaves it as it was, as in PyTorch."""
        p.grad = Tensor(slot._buf.view(0, tuple(slot.shape)))  # (an alias of its own: the slots stay the reducer's)
        if not self.gradient_as_bucket_view:
            self._handed.append((p, p.grad))

    def _keep_handed_out(self):
        """Before a backward reuses the buckets: each gradient handed out last
        time that is no longer its parameter's but is still held elsewhere
        takes a copy of its values into memory of its own. (A detached alias
        or a view of one would still follow the bucket: warned of once.)"""
        handed, self._handed = self._handed, []
        while handed:
            p, g = handed.pop()
            if g is p.grad:
                continue
            if sys.getrefcount(g) > 2:  # (this local and the call's argument, else held elsewhere)
                g.data = g.detach().clone()
            elif sys.getrefcount(g._buf) > 2 and not self._warned_alias:
                self._warned_alias = True
                warnings.warn("DistributedDataParallel: a gradient of an earlier step is still referenced through "
                              "detach(), .data or a view; the next backward reuses its memory (clone() gradients "
                              "that you keep across steps)", RuntimeWarning, stacklevel=3)

    def _finish_reduction(self):
        rec = profiler._is_profiler_enabled and profiler._open("DistributedDataParallel.finish_reduction")
        rescale = self._rescale()
        if self._exchange:  # (while the collectives' thread reduces the buckets)
            ex = profiler._is_profiler_enabled and profiler._open("DistributedDataParallel.exchange_gradients")
            self._exchange.finish(self.process_group)
            if ex:
                profiler._close(ex)
            for p, slot in zip(self._exchange.params, self._exchange.slots):
                if rescale:
                    slot.mul_(rescale)
                self._hand_out(p, slot)
        for b in self._buckets:
            # (b.future None: all its parameters unused, with skip_all_reduce_unused_params)
            if b.future is not None and not b.settled:
                self._settle(b)
        used = self._used_flags()
        skipped = self._skipped or ()
        for b in self._buckets:
            for i, p in enumerate(b.params):
                if (used is None or used[self._index[id(p)]]) and id(p) not in skipped:
                    if id(p) in self._drop_grads:  # none once an optimizer in backward used it
                        p.grad = None
                    else:
                        self._hand_out(p, b.view(i))
        self._expect_reduction = False
        if self._exchange and not self._exchange_settled:
            # After the first reduction: the weights that every rank computed
            # itself (too many rows, a layer used twice, no_sync accumulation)
            # go to the buckets for good, where they are all-reduced during
            # backward; every rank saw the same records, so they agree.
            self._exchange_settled = True
            left = [p for i, p in enumerate(self._exchange.params) if i not in self._exchange.computed_by_all]
            if len(left) < len(self._exchange.params):
                self._build_reducer(exchange=True, only=left)
        self._stats.record("backward_comm_end")
        if rec:
            profiler._close(rec)

    # ---- public API --------------------------------------------------------------------
    def forward(self, *inputs, **kwargs):
        if not self._lazy_init_ran:
            self._lazy_init_ran = True
            self._setup_in_backward_optimizers()
        if is_grad_enabled() and self.require_backward_grad_sync:
            self._stats.next_iteration()
        sync_buffers = self.will_sync_module_buffers()
        if self._join_config.enable:
            Join.notify_join_context(self)
            syncing = int(self.require_backward_grad_sync and is_grad_enabled())
            self._join_active = self._join_vote(1, syncing, int(sync_buffers))[0]
            self._join_steps += 1
        if sync_buffers:  # from the highest active rank under join(), as PyTorch's (also while every rank is)
            self._broadcast_states(self._highest_active_rank(True) if self._join_config.enable else 0,
                                   with_params=False)
        if self._handed and is_grad_enabled():
            self._keep_handed_out()
        if self._input_device is not None:
            inputs, kwargs = _to_device(inputs, self._input_device), _to_device(kwargs, self._input_device)
        compute_dtype = self.mixed_precision and self.mixed_precision.param_dtype
        if compute_dtype is not None:
            # The module runs on copies in param_dtype, through whose casts the
            # gradients come back to the parameters in their own dtype.
            inputs, kwargs = _cast_floating((inputs, kwargs), compute_dtype)
            ignored = getattr(self.module, "_ddp_params_and_buffers_to_ignore", ())  # (they stay as they are)
            copies = {n: p.to(compute_dtype) for n, p in self.module.named_parameters()
                      if p.dtype.is_floating_point and n not in ignored}
            outputs = functional_call(self.module, copies, inputs, kwargs)
        else:
            outputs = self.module(*inputs, **kwargs)
        if (self._buckets or self._exchange or self._sparse_params) and is_grad_enabled():  # eval mode too, as PyTorch
            self._prepare_for_backward(outputs)
        self.require_forward_param_sync = self.require_backward_grad_sync and is_grad_enabled()
        if self._delayed:
            self._delayed.attach()
            self._delayed_sync = self.require_forward_param_sync and dist.get_world_size(self.process_group) > 1
        return outputs

    @_run_last
    def _on_delayed_hook(self, _param):
        """param_to_hook_all_reduce's gradient is ready: average the delayed parameters' gradients."""
        if self._delayed_sync:
            self._delayed_sync = False  # once per backward pass
            self._delayed.launch(self.process_group)

    def will_sync_module_buffers(self):
        """Whether the next forward broadcasts rank 0's buffers: as PyTorch's, only
        after a forward that reduced gradients (and before the first), so that
        forwards under ``no_grad`` or ``no_sync`` after the first (evaluation,
        perhaps on one rank only) communicate nothing."""
        return (self.require_forward_param_sync and self.forward_sync_buffers
                and any(n not in self.parameters_to_ignore for n, _ in self.module.named_buffers()))

    @contextlib.contextmanager
    def no_sync(self):
        """Gradients of backward passes inside accumulate locally; the first
        backward after the block reduces the accumulated gradients."""
        old = self.require_backward_grad_sync
        self.require_backward_grad_sync = False
        try:
            yield
        finally:
            self.require_backward_grad_sync = old

    @property
    def require_manual_backward_finalization(self):
        """Whether the caller finishes each reducing backward pass itself, with
        finalize_backward(), as in PyTorch: once every bucket's all-reduce is
        launched the reduction waits for that call (to wait for the
        all-reduces and give the parameters their averaged ``.grad``), so work
        after backward, or an optimizer step on other parameters from a
        backward hook, overlaps the all-reduces still in flight. Set it
        between iterations, not during a backward pass. A group of one
        reduces too while it is set (otherwise it skips the buckets)."""
        return self._manual_finalization

    @require_manual_backward_finalization.setter
    def require_manual_backward_finalization(self, required):
        required = bool(required)
        if required and self._delayed and not self._named_params:
            raise RuntimeError("Manual backward finalization is not supported when all DDP parameters use "
                               "delay_all_reduce_named_params.")
        if self._awaiting_finalize or (self._expect_reduction and self._hook_fired):
            raise RuntimeError("require_manual_backward_finalization can be changed only before forward or after "
                               "the backward pass's reduction finished")
        self._manual_finalization = required

    @property
    def should_finalize_after_backward(self):
        """Whether finalize_backward() must wait until backward returns (rather
        than run from a backward hook once every bucket is ready): False
        unless manual finalization is on; then True with a mixed precision,
        as in PyTorch (this reducer never rebuilds its buckets)."""
        return self._manual_finalization and self.mixed_precision is not None

    def finalize_backward(self):
        """Finishes a reducing backward pass under manual finalization: waits
        for the buckets' all-reduces and sets the parameters' averaged
        ``.grad``. Call it once per such pass, after every bucket is ready."""
        if not self._manual_finalization:
            raise RuntimeError("finalize_backward() called but manual backward finalization is not required. Set "
                               "require_manual_backward_finalization to true first.")
        if not self._expect_reduction:
            raise RuntimeError("finalize_backward() called but no gradient reduction requires finalization. This can "
                               "happen if no_sync() is active or finalize_backward() was already called for this "
                               "backward pass.")
        if not self._awaiting_finalize:
            pending = sum(b.pending > 0 for b in self._buckets) + int(self._exchange_pending > 0)
            raise RuntimeError(f"finalize_backward() called before every gradient bucket was ready ({pending} still "
                               "waiting for gradients): call it after backward, or from a hook that runs once the "
                               "last bucket is ready")
        self._awaiting_finalize = False
        self._finish_reduction()

    def scatter(self, inputs, kwargs, device_ids):
        """PyTorch's method: ``scatter_kwargs`` of the arguments along ``dim``."""
        return scatter_kwargs(inputs, kwargs, device_ids, dim=self.dim)

    def to_kwargs(self, inputs, kwargs, device_id):
        """PyTorch's method: the arguments moved to ``device_id``, as
        ``((inputs,), (kwargs,))`` (``((), ())`` for none)."""
        device = _device_name(device_id)
        moved_inputs = [_to_device(tuple(inputs), device)] if inputs else []
        moved_kwargs = [_to_device(dict(kwargs), device)] if kwargs else []
        moved_inputs += [()] * (len(moved_kwargs) - len(moved_inputs))
        moved_kwargs += [{}] * (len(moved_inputs) - len(moved_kwargs))
        return tuple(moved_inputs), tuple(moved_kwargs)

    def gather(self, outputs, output_device):
        """PyTorch's method: ``gather`` of the outputs along ``dim``."""
        return gather(outputs, output_device, dim=self.dim)

    def _get_ddp_logging_data(self):
        """PyTorch's dict of this DDP's configuration and runtime stats (its
        keys; ddpc's dtype and backend names). ``iteration`` is the reducing
        iteration whose stats were logged last (0 before any); the runtime
        stats are _RuntimeStats'."""
        world, rank = self._world()
        params = [p for _, p in self._all_params]
        env = os.environ.get
        return {
            "world_size": world, "rank": rank, "module_name": type(self.module).__name__,
            "device_ids": "" if self.device_ids is None else ", ".join(map(str, self.device_ids)),
            "output_device": -1 if self.output_device is None else self.output_device,
            "backend_name": dist.get_backend(self.process_group),
            "broadcast_buffers": int(self.forward_sync_buffers),
            "bucket_cap_bytes": self._bucket_caps[-1],
            "find_unused_parameters": int(self.find_unused_parameters),
            "static_graph": int(self.static_graph),
            "gradient_as_bucket_view": int(self.gradient_as_bucket_view),
            "has_sync_bn": int(any(isinstance(m, SyncBatchNorm) for m in self.module.modules())),
            "is_multi_device_module": int(self.is_multi_device_module),
            "num_parameter_tensors": len(params), "total_parameter_size_bytes": sum(p.nbytes for p in params),
            "bucket_sizes": ", ".join(str(b.flat.nbytes) for b in self._buckets),
            "dtypes": ", ".join(sorted({str(p.dtype).removeprefix("ddpc.") for p in params})),
            "iteration": 0,
            "master_addr": env("MASTER_ADDR", "N/A"), "master_port": env("MASTER_PORT", "N/A"),
            "cuda_visible_devices": env("CUDA_VISIBLE_DEVICES", "N/A"),
            "torch_distributed_debug": env("TORCH_DISTRIBUTED_DEBUG", "N/A"),
            **self._stats.data,
        }

    def _set_ddp_runtime_logging_sample_rate(self, sample_rate):
        """After the first ten reducing iterations, runtime stats are taken on
        every ``sample_rate``-th (PyTorch's default: 100)."""
        if isinstance(sample_rate, bool) or not isinstance(sample_rate, int) or sample_rate < 1:
            raise ValueError("DDP runtime logging sample rate should be equal or greater than 1")
        self._stats.sample_rate = sample_rate

    def _set_static_graph(self):
        """``static_graph=True`` set after construction (on every rank, before
        the first iteration), as PyTorch's."""
        if self.static_graph:
            warnings.warn("You've set static_graph to be True, no need to set it again.", stacklevel=2)
            return
        self.static_graph = True
        if self._exchange:  # (collective, as the call is on every rank)
            self._build_reducer(exchange=False)

    def register_comm_hook(self, state, hook):
        """``hook(state, bucket) -> future``: replaces the default all-reduce of
        each bucket. Once per wrapper, as in PyTorch."""
        if not callable(hook):
            raise TypeError("hook must be callable: hook(state, bucket) -> future")
        if self._comm_hook_registered:
            raise RuntimeError("register_comm_hook or register_builtin_comm_hook can only be called once.")
        self._comm_hook_registered = True
        if self._exchange and hook is not allreduce_hook:  # the hook sees every gradient, in buckets
            self._build_reducer(exchange=False)
        self._set_comm_hook(hook, state)

    def _set_comm_hook(self, hook, state):
        """With a mixed precision's reduce_dtype, the hook gets each bucket cast to it."""
        self._comm_hook, self._comm_state = hook, state
        self._bucket_hook = hook if self._reduce_dtype is None else _compress_wrapper(self._reduce_dtype, hook)

    def _optimizable_params(self):
        """The parameters whose averaged gradient the reducer has during backward:
        the bucketed ones and the sparse tables."""
        return [p for _, p in self._named_params] + self._sparse_params

    def _setup_in_backward_optimizers(self):
        """At the first forward, as PyTorch: where the parameters have
        optimizers in backward (_apply_optimizer_in_backward), their own hooks,
        which would step on this rank's gradient, are removed, and the reducer
        steps them on the averaged one instead."""
        from ..distributed.optim.apply_optimizer_in_backward import param_to_optim_hook_handle_map

        params = [p for p in self._optimizable_params() if "_in_backward_optimizers" in p.__dict__]
        delayed = self._delayed.params if self._delayed else []
        if any("_in_backward_optimizers" in p.__dict__ for p in delayed):
            raise RuntimeError("DistributedDataParallel: the parameters of delay_all_reduce_named_params cannot have "
                               "optimizers in backward (_apply_optimizer_in_backward)")
        if not params:
            return
        if self._fused_optim_registered:
            raise RuntimeError("DistributedDataParallel: _register_fused_optim and _apply_optimizer_in_backward do "
                               "not compose; use one of them")
        for p in params:
            for handle in param_to_optim_hook_handle_map.pop(p, ()):
                handle.remove()
            self._steppers[id(p)] = p._in_backward_optimizers  # (the list itself: optimizers added later step too)
            self._drop_grads.add(id(p))
        if self._exchange:
            self._build_reducer(exchange=False)

    def _register_fused_optim(self, optim, *args, optim_params=None, **kwargs):
        """Registers an optimizer that steps each parameter right after its
        gradient's bucket has been averaged, inside backward, instead of after
        every bucket's reduction, as PyTorch's: ``optim(params, *args,
        **kwargs)`` over ``optim_params`` (default: every parameter this
        wrapper reduces), one instance per parameter (PyTorch's functional
        optimizers also keep a state per parameter and step one at a time).
        As in PyTorch, ``.grad`` holds the averaged gradient afterwards, so
        call ``zero_grad()`` before the next backward; it can be registered
        once per wrapper, and not together with _apply_optimizer_in_backward.
        Unlike PyTorch's, it composes with any comm hook (it steps on the
        hook's result) and, under ``no_sync()``, steps at the next reducing
        backward on the accumulated gradients. Collective, the first time it
        turns off the exchange of linear weights' gradients (which bypasses
        the buckets): call it on every rank."""
        if self._fused_optim_registered:
            raise RuntimeError("_register_fused_optim should only be called once on a DDP instance")
        if not (isinstance(optim, type) and issubclass(optim, Optimizer)):
            raise TypeError(f"_register_fused_optim: optim must be a ddpc.optim.Optimizer subclass, got {optim!r}")
        managed = {id(p) for p in self._optimizable_params()}
        params = self._optimizable_params() if optim_params is None else list(optim_params)
        for p in params:
            if id(p) not in managed:
                raise ValueError("_register_fused_optim: optim_params must be parameters of the module that "
                                 f"DistributedDataParallel reduces, got a {type(p).__name__} of shape "
                                 f"{tuple(getattr(p, 'shape', ()))}")
        if any("_in_backward_optimizers" in p.__dict__ for p in self._optimizable_params()):
            raise RuntimeError("DistributedDataParallel: _register_fused_optim and _apply_optimizer_in_backward do "
                               "not compose; use one of them")
        optimizers = {id(p): [optim([p], *args, **kwargs)] for p in params}
        self._steppers.update(optimizers)
        self._fused_optim_registered = True
        if self._exchange:
            self._build_reducer(exchange=False)

    def _register_builtin_comm_hook(self, comm_hook_type):
        """Registers one of the hooks ``BuiltinCommHookType`` names, with this DDP's
        process group as its state (PyTorch runs these in C++; here they are the
        Python hooks of the same names)."""
        hooks = {BuiltinCommHookType.ALLREDUCE: allreduce_hook, BuiltinCommHookType.FP16_COMPRESS: fp16_compress_hook}
        if comm_hook_type not in hooks:
            raise TypeError(f"comm_hook_type must be a ddpc.distributed.BuiltinCommHookType, got {comm_hook_type!r}")
        self.register_comm_hook(self.process_group, hooks[comm_hook_type])

    # ---- uneven inputs -----------------------------------------------------------------
    def _join_vote(self, active, grads, buffers):
        """Of the ranks still active: how many, how many reduce gradients this step,
        how many broadcast buffers (the joined ranks shadow those collectives)."""
        votes = self._collective_tensor(np.array([active, grads, buffers], dtype=np.int64))
        dist.all_reduce(votes, group=self.process_group)
        return tuple(int(v) for v in votes.cpu().numpy())

    def join(self, divide_by_initial_world_size=True, enable=True, throw_on_early_termination=False):
        """Lets ranks with fewer batches finish the epoch: a rank that has run
        out shadows the others' collectives (contributing zero gradients) until
        every rank is done, then takes the model of the rank that ran the most
        steps. As in PyTorch, gradients are averaged over the whole world
        size, or with ``divide_by_initial_world_size=False`` over the ranks
        still active; ``throw_on_early_termination=True`` makes every rank
        raise instead as soon as one runs out of inputs. With
        ``find_unused_parameters``, a parameter no active rank used in a step
        keeps ``.grad`` None (PyTorch's joined ranks resend their last used
        map, which can make it zeros). ``Join([ddp, ...])``
        (ddpc.distributed.algorithms.Join) does the same for several joinables,
        a ZeroRedundancyOptimizer say."""
        return Join([self], enable, throw_on_early_termination,
                    divide_by_initial_world_size=divide_by_initial_world_size)

    def join_hook(self, divide_by_initial_world_size=True, **kwargs):
        self._join_steps, self._join_active = 0, None
        self._join_divide_by_world = bool(divide_by_initial_world_size)
        return _DDPJoinHook(self)

    def _highest_active_rank(self, active):
        """Once a rank has joined: the highest group rank still active, whose
        buffers the forwards broadcast (rank 0's may be stale), as in PyTorch."""
        key = self._collective_tensor(np.array([self._world()[1] if active else -1], dtype=np.int64))
        dist.all_reduce(key, op=dist.ReduceOp.MAX, group=self.process_group)
        return int(key.item())

    def _shadow_step(self):
        """One step of the ranks still active, on a rank that has run out: the
        same collectives with zero gradients; the averaged gradients land in
        ``.grad`` as on the active ranks (a joined optimizer step uses them)."""
        self._join_active, grads, buffers = self._join_vote(0, 0, 0)
        if buffers:
            self._broadcast_states(self._highest_active_rank(False), with_params=False)
        if not grads:  # the active ranks' step is inside no_sync() or without grad mode
            return
        self._used_mask, self._used, self._skipped = None, None, None
        for b in self._buckets:
            b.flat.fill_(0)
            b.settled = False
            b.future = self._bucket_hook(self._comm_state, GradBucket(b.index, b.flat, b.params, False))
        if self._finds_unused() and not self.skip_all_reduce_unused_params:  # after the buckets, as the others
            self._used_mask = self._collective_tensor(np.zeros(len(self._named_params), dtype=np.int32))
            self._used_mask_work = dist.all_reduce(self._used_mask, op=dist.ReduceOp.MAX, group=self.process_group,
                                                   async_op=True)
        if self._exchange:
            self._exchange.shadow()
        self._finish_reduction()

    def _sync_from_last_joiner(self):
        """Ranks that joined early stopped stepping; the rank that ran the most
        steps (the highest such rank on ties) broadcasts its model to all."""
        size, rank = self._world()
        key = self._collective_tensor(np.array([self._join_steps * size + rank], dtype=np.int64))
        dist.all_reduce(key, op=dist.ReduceOp.MAX, group=self.process_group)
        self._broadcast_states(int(key.item()) % size, with_params=True, with_buffers=self.forward_sync_buffers)

    # What _init_reducer and the iterations set: left out of a copy's state (see __getstate__).
    _REDUCER_STATE = frozenset((
        "process_group", "_join_group", "_join_config", "_comm_hook", "_comm_state", "_bucket_hook",
        "_comm_hook_registered", "_named_params", "_sparse_params", "_delayed", "_index", "_exchange_settled",
        "_steppers", "_drop_grads", "_fused_optim_registered", "_lazy_init_ran", "_exchange", "_exchange_pending",
        "_buckets", "_where", "_handed", "_warned_alias", "_delayed_sync", "_next_launch", "_next_settle",
        "_got_grad", "_hook_fired", "_ends_with_backward", "_unused", "_used_mask", "_used_mask_work", "_used",
        "_skipped", "_sparse_ready", "_expect_reduction", "_gather_sparse", "_join_steps", "_join_active",
        "_join_divide_by_world", "_awaiting_finalize", "_stats"))

    def __getstate__(self):
        """``copy.deepcopy`` and pickling, as PyTorch's: only over the default process group (else
        RuntimeError). The state is the module and the configuration, without the group and the reducer."""
        if self.process_group is not dist.group.WORLD:
            raise RuntimeError("DDP Pickling/Unpickling are only supported when using DDP with the default process "
                               "group. That is, when you have called init_process_group and have not passed "
                               "process_group argument to DDP constructor")
        return {k: v for k, v in self.__dict__.items() if k not in self._REDUCER_STATE}

    def __setstate__(self, state):
        """The copy, as PyTorch's, runs over the default process group with a reducer of its own and the default
        all-reduce (a comm hook registered on the original is not carried over); it neither verifies the model
        nor broadcasts rank 0's state again. Making it communicates nothing, so one rank may copy alone (a
        snapshot of the model, say), as in PyTorch: its gradients are averaged through buckets in memory of its
        own, not through the memory the ranks on a host share, whose setup all of them take part in."""
        super().__setstate__(state)
        self.process_group = dist._group(None)
        self._join_group = None
        self._private_buckets = True
        self._init_reducer()


class _DDPJoinHook(JoinHook):
    def __init__(self, ddp):
        self.ddp = ddp

    def main_hook(self):
        self.ddp._shadow_step()

    def post_hook(self, is_last_joiner):
        self.ddp._sync_from_last_joiner()


# A replica's own: its tensors, and what holds them.
_REPLICA_OWN = frozenset(("_parameters", "_buffers", "_modules"))


def _holds_own(value, own):
    """Whether a module attribute holds one of the module's own parameters or
    buffers (ids in ``own``), itself or in a list, tuple or dict (an RNN's
    flat weights, say): a replica keeps its copy, which holds the replica's."""
    if isinstance(value, dict):
        value = value.values()
    elif not isinstance(value, (list, tuple)):
        return isinstance(value, Tensor) and id(value) in own
    return any(isinstance(v, Tensor) and id(v) in own for v in value)


def _share_attributes(module, replica):
    """The module's attributes on a replica of it, as PyTorch's replicas share
    them: all but its tensors (and what holds them), a method bound to the
    module bound to the replica (a forward patched in), none the module lost."""
    own = {id(t) for t in itertools.chain(module._parameters.values(), module._buffers.values()) if t is not None}
    for k in [k for k in replica.__dict__ if k not in module.__dict__ and k not in _REPLICA_OWN]:
        del replica.__dict__[k]
    for k, v in module.__dict__.items():
        if k in _REPLICA_OWN or _holds_own(v, own):
            continue
        if isinstance(v, types.MethodType) and v.__self__ is module:
            v = types.MethodType(v.__func__, replica)
        replica.__dict__[k] = v


class DataParallel(Module):
    """One process, one replica per device, gradients summed in place across replicas.

    ``device_ids`` lists devices (ints for GPUs, or device strings; ``["cpu",
    "cpu"]`` runs CPU replicas); the default is every visible GPU. Replicas are
    made once and kept: after a backward pass their gradients are summed with
    an in-process all-reduce, and before the next forward the replicas take
    the first replica's parameters and buffers with an in-process broadcast,
    and share its other attributes (mode, hooks, settings), instead of
    PyTorch's rebuilding the replicas on every call; a module whose layout
    changed (a layer replaced, parameters assigned or cast) is copied again
    then; where the module's parameters have gradient hooks of their own
    (or optimizers in backward), the replicas are made afresh through
    autograd, as PyTorch's, so the hooks see the summed gradient. Tensors in
    the inputs,
    also inside lists, tuples and dicts and in keyword arguments, are split
    along ``dim`` as ``ddpc.nn.parallel.scatter`` splits them (``dim=1`` for
    a sequence-first batch, an LSTM's say), and outputs are concatenated
    along ``dim`` on ``output_device`` (default the first device; -1 is the
    cpu) as ``gather`` does; replicas left without a chunk sit the step out,
    and a parameter only some replicas used gets their gradients when backward
    ends. The replicas run one after another (PyTorch's run in threads, as
    ``parallel_apply`` does here).

    As PyTorch's, forward goes through four methods a subclass may override:
    ``scatter(inputs, kwargs, device_ids)`` (``scatter_kwargs`` along
    ``dim``), ``replicate(module, device_ids)`` (the kept replicas, brought
    up to date, for this module; for another, ``nn.parallel.replicate``'s
    copies), ``parallel_apply(replicas, inputs, kwargs)`` and
    ``gather(outputs, output_device)``. Replicas other than the kept ones
    (an override's ``replicate``) pass their gradients back to the module
    through autograd, as in PyTorch.
    """

    def __init__(self, module, device_ids=None, output_device=None, dim=0):
        super().__init__()
        _refuse_uninitialized(module, "DataParallel")
        if device_ids is None:
            n = _C.cuda_device_count()
            device_ids = list(range(n)) if n else ["cpu"]
        self.device_ids = [_device_name(d) for d in device_ids]
        if not self.device_ids:
            raise ValueError("DataParallel needs at least one device")
        self.output_device = self.device_ids[0] if output_device is None else _device_name(output_device)
        self.dim = dim
        self.module = module.to(self.device_ids[0])
        self._hooked = {}  # id -> weakref of each parameter whose gradient this wrapper listens to
        self._make_replicas()
        self._ran = len(self._replicas)  # replicas that got a chunk in the last forward
        self._finishing = False

    def _layout(self):
        """What the kept replicas copy of the module: its modules and their
        parameters and buffers (which tensors, of what dtype and shape)."""
        return [(id(m), [(n, id(t), t.dtype, tuple(t.shape)) if t is not None else (n,)
                         for n, t in (*m._parameters.items(), *m._buffers.items())])
                for m in self.module.modules()]

    def _make_replicas(self):
        """Copies of the module on the other devices, made again when its
        layout changed (a layer replaced, parameters assigned or cast)."""
        self._replicas = [self.module] + [copy.deepcopy(self.module).to(d) for d in self.device_ids[1:]]
        # Every parameter, frozen ones too: requires_grad may change after wrapping.
        self._params = [list(r.parameters()) for r in self._replicas]
        self._slot = {id(p): k for ps in self._params for k, p in enumerate(ps)}
        self._ready = [0] * len(self._params[0])
        self._made = self._layout()
        self._hooked = {i: ref for i, ref in self._hooked.items() if ref() is not None}
        self._hook_trainable()

    def _hook_trainable(self):
        """Listens to the gradients of every parameter that requires one (once each)."""
        for ps in zip(*self._params):
            if not ps[0].requires_grad:
                continue
            for p in ps:
                ref = self._hooked.get(id(p))
                if ref is None or ref() is not p:
                    self._hooked[id(p)] = weakref.ref(p)
                    p.register_post_accumulate_grad_hook(self._on_grad_ready)

    def _on_grad_ready(self, p):
        k = self._slot.get(id(p))
        if k is None:  # a parameter the module no longer holds
            return
        _refuse_recorded_grad(self._params[0][k], "DataParallel")
        if not self._finishing:
            self._finishing = True
            queue_callback(self._finish_backward)
        self._ready[k] += 1
        if self._ready[k] == self._ran:
            self._reduce(k)

    def _reduce(self, k):
        """Sums parameter k's gradients of the replicas that ran into each of them;
        replicas whose forward did not use it contribute zeros."""
        self._ready[k] = 0
        ps = [ps[k] for ps in self._params[:self._ran]]
        if len(ps) > 1:
            for p in ps:
                if p.grad is None:
                    p.grad = zeros(p.shape, dtype=p.dtype, device=p.device)
            _C.multi_all_reduce([p.grad._buf for p in ps], 0)
        # The optimizer steps the first replica only; the others' gradients are
        # spent, and clearing them keeps accumulation across backward passes
        # (without zero_grad) exact.
        for p in ps[1:]:
            p.grad = None

    def _finish_backward(self):
        """End of a backward pass: parameters that some replicas' forward did not use."""
        self._finishing = False
        for k, n in enumerate(self._ready):
            if n:
                self._reduce(k)

    def _sync_replicas(self):
        """The module's state on every replica: its parameters and buffers
        broadcast, and its other attributes (train or eval mode, hooks,
        settings) shared, as PyTorch's replicas share them; replicas made
        again where the module's layout changed."""
        if self._layout() != self._made:
            self._make_replicas()
        with no_grad():
            for ps in zip(*self._params):
                _C.multi_broadcast([p._buf for p in ps], 0)
                for p in ps[1:]:
                    p.requires_grad = ps[0].requires_grad
            for bs in zip(*(list(r.buffers()) for r in self._replicas)):
                _C.multi_broadcast([b._buf for b in bs], 0)
        for ms in zip(*(r.modules() for r in self._replicas)):
            for m in ms[1:]:
                _share_attributes(ms[0], m)
        self._hook_trainable()

    def _hooked_elsewhere(self):
        """Whether a parameter of the module has gradient hooks (an optimizer
        in backward's too) besides this wrapper's: they must see the gradient
        summed over the replicas, as PyTorch's replicas give it."""
        for p in self.module.parameters():
            hooks = p.__dict__
            if hooks.get("_grad_hooks") or "_in_backward_optimizers" in hooks or any(
                    h != self._on_grad_ready for h in hooks.get("_post_accumulate_hooks", {}).values()):
                return True
        return False

    def forward(self, *inputs, **kwargs):
        if len(self._replicas) == 1:
            return self.module(*_to_device(inputs, self.device_ids[0]), **_to_device(kwargs, self.device_ids[0]))
        inputs, kwargs = self.scatter(inputs, kwargs, self.device_ids)
        if not inputs and not kwargs:
            inputs, kwargs = ((),), ({},)
        replicas = self.replicate(self.module, self.device_ids[:len(inputs)])
        kept = all(r is k for r, k in zip(replicas, self._replicas)) and len(replicas) <= len(self._replicas)
        # Afresh each forward, also after a backward that raised before it ended
        # (whose gradients on the other replicas were never reduced and cleared).
        # Other replicas than the kept ones hand their gradients to the module
        # through autograd: the module's own are then the only ones to sum.
        self._ran, self._ready, self._finishing = len(replicas) if kept else 1, [0] * len(self._ready), False
        for ps in self._params[1:]:
            for p in ps:
                p.grad = None
        return self.gather(self.parallel_apply(replicas, inputs, kwargs), self.output_device)

    def scatter(self, inputs, kwargs, device_ids):
        """Per device that gets a chunk, its positional and keyword arguments
        (two tuples of equal length): every tensor, also in lists, tuples and
        dicts, split along ``dim`` as ``scatter_kwargs`` splits it."""
        if not any(t.dim() > 0 for t in _split_tensors((inputs, kwargs))):
            raise ValueError("DataParallel needs at least one tensor input with a batch dimension to scatter")
        inputs, kwargs = scatter_kwargs(inputs, kwargs, device_ids, self.dim)
        if not inputs:
            raise ValueError("DataParallel cannot scatter an empty batch")
        return inputs, kwargs

    def replicate(self, module, device_ids):
        """The kept replicas for ``device_ids`` (a prefix of this wrapper's),
        given the first replica's parameters and buffers, which the optimizer
        or load_state_dict changed (and its other attributes); for another
        module or other devices, or where the module's parameters have
        gradient hooks of their own (which must see the replicas' gradients
        summed), ``nn.parallel.replicate``'s copies, through which autograd
        sums them, as PyTorch's."""
        devices = [_device_name(d) for d in device_ids]
        if module is not self.module or devices != self.device_ids[:len(devices)] or self._hooked_elsewhere():
            return replicate(module, devices, not is_grad_enabled())
        self._sync_replicas()
        return self._replicas[:len(devices)]

    def parallel_apply(self, replicas, inputs, kwargs):
        """Each replica on its chunk, one after another."""
        return [r(*args, **kw) for r, args, kw in zip(replicas, inputs, kwargs)]

    def gather(self, outputs, output_device):
        return gather(outputs, output_device, self.dim)


# PyTorch's import paths of the hooks above (ddpc.distributed.algorithms.ddp_comm_hooks...), which import this module.
from ..distributed import algorithms as _algorithms  # noqa: E402,F401
from ..distributed.fsdp.fully_sharded_data_parallel import _cast_floating  # noqa: E402
