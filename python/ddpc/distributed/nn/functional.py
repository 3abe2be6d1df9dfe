"""Collectives that autograd differentiates, as torch.distributed.nn.functional.

Each returns new tensors (the output tensors given to ``reduce_scatter``,
``_all_gather_base`` and the all-to-alls are also filled, as PyTorch's; the
inputs are left alone) and records a node whose
backward is the collective that carries the gradients back: the backward of
``all_gather`` is a reduce-scatter of the gathered outputs' gradients, of
``all_reduce`` an all-reduce, of ``broadcast`` a reduce to the source, of
``reduce`` a broadcast from the destination, of ``scatter`` a gather, of
``gather`` a scatter, of ``reduce_scatter`` an all-gather, of the all-to-alls
the all-to-all back. So contrastive losses over the whole global batch (CLIP,
SimCLR across ranks: ``all_gather`` the features, compute the loss on every
rank) get the gradient of every rank's loss with respect to each rank's
features. As in PyTorch, every rank must run backward through the same
collectives in the same order, since backward communicates.

Where ddpc differs: the input of ``broadcast`` on a rank other than the
source, and the inputs ``scatter`` does not send, get a zero gradient (their
values reach no output); ``all_reduce``'s backward is defined for SUM and AVG
only, and any other op raises there instead of returning a gradient of a
different function; ``scatter`` takes a list of tensors of the output's shape
on every rank (only the source's values are sent).
"""

from ... import _C
from ...autograd import no_grad
from ...tensor import Tensor, zeros_like
from ..._function import Function
from .. import ReduceOp
from .. import all_gather as _all_gather
from .. import all_gather_into_tensor as _all_gather_into_tensor
from .. import all_reduce as _all_reduce
from .. import all_to_all as _all_to_all
from .. import all_to_all_single as _all_to_all_single
from .. import broadcast as _broadcast
from .. import gather as _gather
from .. import get_rank, get_world_size
from .. import reduce as _reduce
from .. import reduce_scatter as _reduce_scatter
from .. import reduce_scatter_tensor as _reduce_scatter_tensor
from .. import scatter as _scatter

__all__ = ["broadcast", "gather", "scatter", "reduce", "reduce_scatter", "all_gather", "_all_gather_base",
           "all_to_all", "all_to_all_single", "all_reduce"]


def _copies(tensors):
    return [t.detach().contiguous().clone() for t in tensors]


def _filled(outputs, results):
    """The outputs the caller gave take the results, as PyTorch's collectives write into them."""
    with no_grad():
        for out, result in zip(outputs, results):
            out.copy_(result)
    return results


def _fresh(like, n):
    return [zeros_like(like) for _ in range(n)]


class _Broadcast(Function):
    @staticmethod
    def forward(ctx, src, group, tensor):
        ctx.src, ctx.group = src, group
        (out,) = _copies([tensor])
        _broadcast(out, src=src, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        (total,) = _copies([grad])
        _reduce(total, dst=ctx.src, group=ctx.group)
        return None, None, total if get_rank() == ctx.src else zeros_like(grad)


class _Reduce(Function):
    @staticmethod
    def forward(ctx, dst, op, group, tensor):
        ctx.dst, ctx.group = dst, group
        (out,) = _copies([tensor])
        _reduce(out, dst=dst, op=op, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        (g,) = _copies([grad])
        _broadcast(g, src=ctx.dst, group=ctx.group)
        return None, None, None, g


class _AllReduce(Function):
    @staticmethod
    def forward(ctx, op, group, tensor):
        ctx.op, ctx.group = op, group
        (out,) = _copies([tensor])
        _all_reduce(out, op=op, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        if ctx.op not in (ReduceOp.SUM, ReduceOp.AVG):
            name = next((k for k, v in _C.REDUCE_OPS.items() if v == ctx.op), ctx.op)
            raise RuntimeError(f"ddpc.distributed.nn.all_reduce: no gradient for op {name} (SUM and AVG have one)")
        return None, None, _AllReduce.apply(ctx.op, ctx.group, grad)


class _AllGather(Function):
    @staticmethod
    def forward(ctx, group, tensor):
        ctx.group = group
        outs = _fresh(tensor.contiguous(), get_world_size(group))
        _all_gather(outs, tensor.detach().contiguous(), group=group)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        return None, _ReduceScatter.apply(ReduceOp.SUM, ctx.group, zeros_like(grads[0]), *grads)


class _ReduceScatter(Function):
    @staticmethod
    def forward(ctx, op, group, output, *inputs):
        ctx.group = group
        (out,) = _copies([output])
        _reduce_scatter(out, _copies(inputs), op=op, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        return (None, None, None) + _AllGather.apply(ctx.group, grad)


class _AllGatherBase(Function):
    @staticmethod
    def forward(ctx, output, tensor, group):
        ctx.group = group
        (out,) = _copies([output])
        _all_gather_into_tensor(out, tensor.detach().contiguous(), group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        rows = grad.shape[0] // get_world_size(ctx.group)
        out = grad.new_zeros((rows,) + tuple(grad.shape[1:]))
        _reduce_scatter_tensor(out, grad.detach().contiguous(), group=ctx.group)
        return None, out, None


class _Gather(Function):
    @staticmethod
    def forward(ctx, dst, group, tensor):
        ctx.dst, ctx.group = dst, group
        outs = _fresh(tensor.contiguous(), get_world_size(group))
        _gather(tensor.detach().contiguous(), outs if get_rank() == dst else None, dst=dst, group=group)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        return None, None, _Scatter.apply(ctx.dst, ctx.group, *grads)


class _Scatter(Function):
    @staticmethod
    def forward(ctx, src, group, *tensors):
        if any(tuple(t.shape) != tuple(tensors[0].shape) for t in tensors):
            raise ValueError("ddpc.distributed.nn.scatter: the tensors must all have one shape")
        ctx.src, ctx.group = src, group
        out = zeros_like(tensors[0])
        _scatter(out, _copies(tensors) if get_rank() == src else None, src=src, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        grads = _Gather.apply(ctx.src, ctx.group, grad)
        if get_rank() != ctx.src:
            grads = tuple(zeros_like(g) for g in grads)
        return (None, None) + tuple(grads)


class _AllToAll(Function):
    @staticmethod
    def forward(ctx, group, outputs, *tensors):
        ctx.group = group
        outs = _copies(outputs)
        _all_to_all(outs, _copies(tensors), group=group)
        return tuple(outs)

    @staticmethod
    def backward(ctx, *grads):
        back = [zeros_like(g) for g in grads]
        return (None, None) + _AllToAll.apply(ctx.group, back, *grads)


class _AllToAllSingle(Function):
    @staticmethod
    def forward(ctx, group, output, output_split_sizes, input_split_sizes, tensor):
        ctx.group, ctx.splits, ctx.shape = group, (output_split_sizes, input_split_sizes), tuple(tensor.shape)
        (out,) = _copies([output])
        _all_to_all_single(out, tensor.detach().contiguous(), output_split_sizes, input_split_sizes, group=group)
        return out

    @staticmethod
    def backward(ctx, grad):
        output_split_sizes, input_split_sizes = ctx.splits
        back = grad.new_zeros(ctx.shape)
        return None, None, None, None, _AllToAllSingle.apply(ctx.group, back, input_split_sizes, output_split_sizes,
                                                             grad)


def _tensor(x, what):
    if not isinstance(x, Tensor):
        raise TypeError(f"ddpc.distributed.nn.{what}: expected a ddpc tensor, got {type(x).__name__}")
    return x


def broadcast(tensor, src, group=None):
    """``tensor`` of rank ``src`` on every rank; its gradient is the sum of every rank's, on ``src``."""
    return _Broadcast.apply(src, group, _tensor(tensor, "broadcast"))


def gather(tensor, dst=0, group=None):
    """A tuple of every rank's ``tensor`` on ``dst`` (zeros elsewhere)."""
    return _Gather.apply(dst, group, _tensor(tensor, "gather"))


def scatter(tensors, src=0, group=None):
    """``tensors[rank]`` of rank ``src``, on each rank."""
    return _Scatter.apply(src, group, *[_tensor(t, "scatter") for t in tensors])


def reduce(tensor, dst, op=ReduceOp.SUM, group=None):
    """The reduction of every rank's ``tensor`` on ``dst``; the gradient of ``dst``'s result reaches every rank."""
    return _Reduce.apply(dst, op, group, _tensor(tensor, "reduce"))


def reduce_scatter(output, input_list, op=ReduceOp.SUM, group=None):
    """The reduction over ranks of ``input_list[rank]``, written into ``output`` too."""
    result = _ReduceScatter.apply(op, group, _tensor(output, "reduce_scatter"),
                                  *[_tensor(t, "reduce_scatter") for t in input_list])
    return _filled([output], [result])[0]


def all_gather(tensor, group=None):
    """A tuple of every rank's ``tensor``, on every rank."""
    return _AllGather.apply(group, _tensor(tensor, "all_gather"))


def _all_gather_base(output_tensor, input_tensor, group=None):
    """Every rank's ``input_tensor`` concatenated along dim 0, written into ``output_tensor`` too."""
    result = _AllGatherBase.apply(_tensor(output_tensor, "_all_gather_base"),
                                  _tensor(input_tensor, "_all_gather_base"), group)
    return _filled([output_tensor], [result])[0]


def all_to_all(output_tensor_list, input_tensor_list, group=None):
    """A tuple whose entry ``r`` is rank ``r``'s ``input_tensor_list[rank]``, also written into
    ``output_tensor_list``."""
    results = _AllToAll.apply(group, [_tensor(t, "all_to_all") for t in output_tensor_list],
                              *[_tensor(t, "all_to_all") for t in input_tensor_list])
    return _filled(output_tensor_list, results)


def all_to_all_single(output, input, output_split_sizes=None, input_split_sizes=None, group=None):
    """``input``'s rows split among the ranks and each rank's share concatenated, written into ``output`` too."""
    result = _AllToAllSingle.apply(group, _tensor(output, "all_to_all_single"), output_split_sizes,
                                   input_split_sizes, _tensor(input, "all_to_all_single"))
    return _filled([output], [result])[0]


def all_reduce(tensor, op=ReduceOp.SUM, group=None):
    """The reduction of every rank's ``tensor``, on every rank."""
    return _AllReduce.apply(op, group, _tensor(tensor, "all_reduce"))
