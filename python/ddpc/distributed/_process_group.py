"""ProcessGroup's own collective methods and PyTorch's option objects for them.

torch.distributed's ProcessGroup can be driven directly, without the module
functions: ``pg.allreduce([t]).wait()``, ``pg.broadcast([t], opts)``,
``pg.barrier()``. Each method here takes PyTorch's two forms (a list of
tensors with an options object, or the short form with plain arguments),
names roots by their rank in the group, always returns a Work, and runs the
collective on this group as the module function of the same name does. A
timeout given to the call (``opts.timeout``, or ``timeout=``) is that
collective's own, fixed as it is queued: it bounds the collective once it
starts, on the cpu and the nccl backend alike, and the group's timeout,
which the group's other collectives get, stays as it is.
"""

from datetime import timedelta

from ._store import _seconds

# PyTorch's "no timeout given" value in its option objects.
_NO_TIMEOUT = timedelta(milliseconds=-1)


class _Options:
    """Keyword-settable attributes with PyTorch's defaults and names."""

    _defaults = {}

    def __init__(self, **kwargs):
        from . import ReduceOp  # (the package imports this module first)

        for name, value in self._defaults.items():
            setattr(self, name, ReduceOp.SUM if value == "SUM" else list(value) if isinstance(value, list) else value)
        for name, value in kwargs.items():
            if name not in self._defaults:
                raise TypeError(f"{type(self).__name__} has no option {name!r}")
            setattr(self, name, value)

    def __repr__(self):
        fields = ", ".join(f"{k}={getattr(self, k)!r}" for k in self._defaults)
        return f"{type(self).__name__}({fields})"


def _options(name, **defaults):
    return type(name, (_Options,), {"_defaults": dict(asyncOp=True, timeout=_NO_TIMEOUT, **defaults),
                                    "__doc__": f"PyTorch's {name} for ProcessGroup's methods."})


AllreduceOptions = _options("AllreduceOptions", reduceOp="SUM")
AllreduceCoalescedOptions = _options("AllreduceCoalescedOptions", reduceOp="SUM")
BroadcastOptions = _options("BroadcastOptions", rootRank=0, rootTensor=0)
BarrierOptions = _options("BarrierOptions", device=None, device_ids=[])
AllgatherOptions = _options("AllgatherOptions")
ReduceOptions = _options("ReduceOptions", reduceOp="SUM", rootRank=0, rootTensor=0)
ReduceScatterOptions = _options("ReduceScatterOptions", reduceOp="SUM")
GatherOptions = _options("GatherOptions", rootRank=0)
ScatterOptions = _options("ScatterOptions", rootRank=0)
AllToAllOptions = _options("AllToAllOptions")


def _one(tensors, method):
    """The tensor of PyTorch's one-entry tensor list (or the tensor given alone)."""
    if not isinstance(tensors, (list, tuple)):
        return tensors
    if len(tensors) != 1:
        raise ValueError(f"ProcessGroup.{method} takes a list of one tensor (one per process), got {len(tensors)}")
    return tensors[0]


def _timeout(opts, timeout):
    """The call's timeout in seconds (``opts``'s where given, else
    ``timeout``), or None where it has none: the group's then."""
    value = opts.timeout if opts is not None else timeout
    return None if value is None or value == _NO_TIMEOUT else _seconds(value)


class _CollectiveMethods:
    """The methods of PyTorch's ProcessGroup that run collectives on it."""

    def allreduce(self, tensors, opts=None, *, op=None, timeout=None):
        from . import _all_reduce, _group

        if opts is not None and not isinstance(opts, _Options):  # allreduce(tensors, op)
            opts, op = None, opts
        op = opts.reduceOp if opts is not None else (op if op is not None else _sum())
        t = _one(tensors, "allreduce")
        return _all_reduce("all_reduce", t, op, _group(self, t), True, _timeout(opts, timeout))

    def broadcast(self, tensors, opts=None, *, timeout=None):
        """``broadcast(tensors, opts)`` or ``broadcast(tensor, root)``; the root is a group rank."""
        from . import _broadcast

        root = opts.rootRank if isinstance(opts, _Options) else (0 if opts is None else int(opts))
        opts = opts if isinstance(opts, _Options) else None
        return _broadcast(_one(tensors, "broadcast"), None, self, True, root, _timeout(opts, timeout))

    def reduce(self, tensors, opts=None, op=None, *, timeout=None):
        """``reduce(tensors, opts)`` or ``reduce(tensor, root, op)``; the root is a group rank."""
        from . import _reduce

        if isinstance(opts, _Options):
            root, op = opts.rootRank, opts.reduceOp
        else:
            root, op, opts = (0 if opts is None else int(opts)), (op if op is not None else _sum()), None
        return _reduce(_one(tensors, "reduce"), None, op, self, True, root, _timeout(opts, timeout))

    def allgather(self, output_tensors, input_tensors, opts=None, *, timeout=None):
        """``allgather([[outs]], [input], opts)`` or ``allgather(outs, input)``."""
        from . import _all_gather_list, _group

        if isinstance(input_tensors, (list, tuple)):
            outs = _one(output_tensors, "allgather")
            t = _one(input_tensors, "allgather")
        else:
            outs, t = output_tensors, input_tensors
        return _all_gather_list("all_gather", _group(self, t), list(outs), t, True, timeout=_timeout(opts, timeout))

    def barrier(self, opts=None, *, timeout=None):
        from . import barrier

        if opts is not None and not isinstance(opts, _Options):  # barrier(timeout)
            opts, timeout = None, opts
        return barrier(group=self, async_op=True, timeout=_timeout(opts, timeout))

    def send(self, tensors, dstRank, tag=0):
        """Sends to group rank ``dstRank``."""
        from . import isend

        return isend(_one(tensors, "send"), group=self, tag=tag, group_dst=dstRank)

    def recv(self, tensors, srcRank, tag=0):
        """Receives from group rank ``srcRank``."""
        from . import irecv

        return irecv(_one(tensors, "recv"), group=self, tag=tag, group_src=srcRank)

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        from . import monitored_barrier

        return monitored_barrier(self, timeout, wait_all_ranks)

    def set_timeout(self, timeout):
        from . import set_timeout

        set_timeout(timeout, self)

    def split_group(self, split_ranks, timeout=None, pg_options=None, group_desc=None):
        from . import split_group

        return split_group(self, split_ranks, timeout, pg_options, group_desc)

    def shutdown(self):
        """Destroys this group (PyTorch's shutdown), as destroy_process_group(group) does."""
        from . import destroy_process_group

        destroy_process_group(self)

    abort = shutdown


def _sum():
    from . import ReduceOp

    return ReduceOp.SUM
