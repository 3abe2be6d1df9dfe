"""One FSDP unit's parameters as a flat parameter: flattening, the shard a
rank keeps, gathering the full parameter into memory that is released and
re-filled in place, and reducing its gradient back to the shard.

The full flat parameter is one leaf tensor over one storage. The module's
parameters become views of it: each forward gathers the storage
(all-gather of every rank's shard) and gives the module autograd views of
the leaf, so backward accumulates one full flat gradient. Releasing frees
the storage (Buffer.release_storage_) while the views, including those the
autograd graph saved, keep their places in it; gathering again re-fills it
and re-points them all.

With ``use_orig_params`` the original Parameters stay registered in their
modules and, between uses, each views the part of itself that falls in this
rank's shard of the flat parameter (1-D, size 0 where none does), so an
optimizer over them steps the shard in place; after a synced backward their
``.grad`` views the matching part of the shard's gradient."""

import math

from ... import distributed as dist
from ...autograd import no_grad
from ...nn.modules import Parameter
from ...tensor import Tensor, cat, zeros
from ..device_mesh import DeviceMesh
from ..tensor import DTensor, Replicate, Shard, _shard_range
from .api import ShardingStrategy


def gradient_to_reduce(holder, sync, who):
    """The gradient of ``holder.full`` (FSDP's flat parameter, or fully_shard's
    unsharded parameters), taken off it, in ``holder.reduce_dtype``, with what
    earlier passes without gradient sync left in ``holder.pending_grad``
    added; None where there is nothing to reduce now (no gradient, or
    ``sync`` False: then it waits in ``pending_grad`` for a synced pass)."""
    grad = holder.full.grad
    holder.full.grad = None
    if grad is None:
        return None
    if grad.requires_grad:
        raise RuntimeError(f"{who}: backward(create_graph=True) is not supported, as the reduced gradients would "
                           "lose their graph")
    if grad.dtype is not holder.reduce_dtype:
        grad = grad.to(holder.reduce_dtype)
    if holder.pending_grad is not None:
        grad = grad + holder.pending_grad
        holder.pending_grad = None
    if not sync:
        holder.pending_grad = grad
        return None
    return grad


class FlatParamHandle:
    """The flat parameter of the parameters `uses` names: (qualified name,
    module, attribute name, Parameter), a Parameter appearing under several
    names kept once (under its first name, in ``names``)."""

    def __init__(self, uses, strategy, process_group, replicate_group, mixed_precision, use_orig_params=False):
        self.group = process_group  # the ranks sharing the parameters (all of them holding everything under NO_SHARD)
        self.replicate_group = replicate_group  # under the HYBRID strategies: the ranks holding the same shard
        self.world, self.rank = dist.get_world_size(process_group), dist.get_rank(process_group)
        self.sharded = strategy is not ShardingStrategy.NO_SHARD
        self.reshard_after_forward = strategy in (ShardingStrategy.FULL_SHARD, ShardingStrategy.HYBRID_SHARD)
        index = {}
        self.params, self.names = [], []  # the original Parameters, in order of first use, and their names
        for qualified, _, _, p in uses:
            if id(p) not in index:
                index[id(p)] = len(self.params)
                self.params.append(p)
                self.names.append(qualified)
        self.uses = [(m, name, index[id(p)]) for _, m, name, p in uses]
        first = self.params[0]
        for p in self.params:
            if p.dtype is not first.dtype or p.device != first.device:
                raise ValueError(f"FullyShardedDataParallel flattens a unit's parameters into one tensor, so they "
                                 f"must share dtype and device: found {first.dtype} on {first.device} and "
                                 f"{p.dtype} on {p.device}; wrap those modules in units of their own")
            if p.requires_grad != first.requires_grad and not use_orig_params:
                raise ValueError("FullyShardedDataParallel (use_orig_params=False) needs a unit's parameters to be "
                                 "all trainable or all frozen; wrap the frozen modules in units of their own, or "
                                 "pass use_orig_params=True")
        self.use_orig_params = use_orig_params
        self.requires_grad = any(p.requires_grad for p in self.params)
        self.dtype, self.device = first.dtype, first.device
        self.shapes = [tuple(p.shape) for p in self.params]  # the originals' own (their views at rest are 1-D)
        self.offsets, at = [], 0
        for p in self.params:
            self.offsets.append(at)
            at += p.numel()
        self.numel = at
        ways = self.world if self.sharded else 1
        self.padded = -(-at // ways) * ways  # padded so that every rank's shard has the same length
        self.shard_numel = self.padded // ways
        self.pieces = [self.piece(i, self.rank) for i in range(len(self.params))]
        self.grad_views = [None] * len(self.params)  # the originals' .grad as reduce_grad last set them
        mp = mixed_precision
        self.compute_dtype = (mp.param_dtype if mp and mp.param_dtype is not None else None) or self.dtype
        self.reduce_dtype = (mp.reduce_dtype if mp and mp.reduce_dtype is not None else None) or self.compute_dtype
        self.keep_low_precision_grads = bool(mp and mp.keep_low_precision_grads)

        flat = zeros(self.padded, dtype=self.dtype, device=self.device)
        with no_grad():
            for p, off in zip(self.params, self.offsets):
                flat[off:off + p.numel()].copy_(p.detach().reshape(-1))
        lo = self.rank * self.shard_numel if self.sharded else 0
        self.flat_param = Parameter(flat[lo:lo + self.shard_numel].clone() if self.sharded else flat,
                                    requires_grad=self.requires_grad)
        # The full parameter has storage of its own, freed between uses, unless
        # it is the flat parameter itself (NO_SHARD in the module's dtype).
        self.freeable = self.sharded or self.compute_dtype is not self.dtype
        self.full = (zeros(self.padded, dtype=self.compute_dtype, device=self.device) if self.freeable
                     else Tensor(flat._buf))
        self.full.requires_grad = self.requires_grad
        self.gathered = not self.freeable
        self.pending = None  # the Work of an all-gather issued ahead of use (prefetched)
        self.pending_grad = None  # full gradients accumulated under no_sync
        self.summoned = None  # the full parameters summon_full_params gathered
        self._rows_plan = None  # made by _row_plan at the first sharded state dict
        self._point_params_at_rest()
        if self.freeable:
            self.full._buf.release_storage_()
        if not use_orig_params:
            for m, name, _ in self.uses:
                del m._parameters[name]

    def piece(self, i, rank):
        """(start, length) in ``rank``'s shard of the part of parameter ``i``
        that falls in it (length 0 where none does)."""
        lo = rank * self.shard_numel if self.sharded else 0
        hi = lo + self.shard_numel
        start = min(max(self.offsets[i], lo), hi)
        end = max(min(self.offsets[i] + math.prod(self.shapes[i]), hi), start)
        return start - lo, end - start

    # ---- the full parameter ------------------------------------------------------------
    def unshard(self, async_op=False):
        """Fills the full flat parameter with every rank's shard. With
        ``async_op`` the all-gather is only issued (a prefetch): ``pending``
        holds its Work until the next ``unshard()`` or ``reshard()`` waits."""
        if self.gathered:
            if not async_op:
                self.wait()
            return
        self.full._buf.restore_storage_()
        # Written through an unversioned view: the graph's saved views of this
        # storage must not count the refill as an in-place change.
        target = Tensor(self.full._buf.unversioned())
        src = self.flat_param.detach()
        if src.dtype is not self.compute_dtype:
            src = src.to(self.compute_dtype)
        with no_grad():
            if self.sharded:
                self.pending = dist.all_gather_into_tensor(target, src, group=self.group, async_op=async_op)
            else:
                target.copy_(src)
        self.gathered = True

    def wait(self):
        """Waits for a prefetched all-gather (if one is in flight)."""
        work, self.pending = self.pending, None
        if work is not None:
            work.wait()

    def reshard(self):
        """Frees the full flat parameter's memory (a no-op where it is the flat parameter)."""
        if self.freeable and self.gathered:
            self.wait()  # an all-gather still writing into the memory
            self.full._buf.release_storage_()
            self.gathered = False

    def held_bytes(self):
        """Bytes the full flat parameter holds now (0 while released)."""
        return self.full._buf.storage_nbytes if self.freeable else 0

    def install_views(self):
        """Gives the modules views of the full flat parameter as their parameters:
        autograd views for the parameters that require grad, plain ones for
        the frozen (so no gradient is computed for them)."""
        views = [self.full[off:off + math.prod(shape)].view(shape) if p.requires_grad else
                 Tensor(self.full._buf.view(off, shape))
                 for p, off, shape in zip(self.params, self.offsets, self.shapes)]
        for m, name, i in self.uses:
            object.__setattr__(m, name, views[i])

    def _point_params(self, full):
        for p, off, shape in zip(self.params, self.offsets, self.shapes):
            p._buf = full._buf.view(off, shape)

    def _point_params_at_rest(self):
        """Outside forward, backward and summon_full_params: the originals view
        their pieces of the shard (use_orig_params) or of the full parameter."""
        if not self.use_orig_params:
            self._point_params(self.full)
            return
        for p, (start, length) in zip(self.params, self.pieces):
            p._buf = self.flat_param._buf.view(start, (length,))

    # ---- summon_full_params ------------------------------------------------------------
    def summon_begin(self):
        """Puts the original Parameters back in their modules, holding the full
        values in the module's dtype."""
        if self.sharded:
            full = zeros(self.padded, dtype=self.dtype, device=self.device)
            dist.all_gather_into_tensor(full, self.flat_param.detach(), group=self.group)
        else:
            full = self.flat_param.detach()
        self.summoned = full
        self._point_params(full)
        self.register(self.params)

    def summon_end(self, writeback):
        self.unregister()
        if writeback and self.sharded:
            lo = self.rank * self.shard_numel
            with no_grad():
                self.flat_param.detach().copy_(self.summoned[lo:lo + self.shard_numel])
        self.summoned = None
        self._point_params_at_rest()

    def register(self, tensors):
        """Puts ``tensors`` (one per original parameter: the originals
        themselves, or stand-ins for them) in the modules under the originals' names."""
        for m, name, i in self.uses:
            m.__dict__.pop(name, None)
            m._parameters[name] = tensors[i]

    def unregister(self):
        """Undoes register: the originals stay registered only under use_orig_params."""
        for m, name, i in self.uses:
            if self.use_orig_params:
                m._parameters[name] = self.params[i]
            else:
                del m._parameters[name]

    # ---- the originals' rows (the sharded state dicts) ---------------------------------
    # Rank r holds rows [r*c, (r+1)*c) of each original (c = ceil(rows / world),
    # as torch.chunk), which lie in one or more ranks' flat shards: one all-to-all
    # brings them over, or, to load, takes them back.

    def _row_shape(self, i):
        """The shape of this rank's rows of parameter ``i`` (a 0-d one is held whole by every rank)."""
        shape = self.shapes[i]
        if not shape:
            return shape
        return (_shard_range(shape[0], self.world, self.rank)[1], *shape[1:])

    def _rows_range(self, i, rank):
        """Where in the flat parameter ``rank``'s rows of parameter ``i`` lie: (start, end)."""
        shape, off = self.shapes[i], self.offsets[i]
        if not shape:
            return off, off + 1
        start, length = _shard_range(shape[0], self.world, rank)
        row = math.prod(shape[1:])
        return off + start * row, off + (start + length) * row

    def _row_plan(self, only):
        """Per rank p: the ranges (parameter, start, end) of this rank's shard
        that are p's rows, and those of p's shard that are this rank's rows
        (of parameter ``only``, or of all where None)."""
        if self._rows_plan is None:
            def between(src, dst):
                lo, hi = src * self.shard_numel, (src + 1) * self.shard_numel
                ranges = ((i, *self._rows_range(i, dst)) for i in range(len(self.params)))
                return [(i, max(a, lo), min(b, hi)) for i, a, b in ranges if max(a, lo) < min(b, hi)]
            self._rows_plan = ([between(self.rank, p) for p in range(self.world)],
                               [between(p, self.rank) for p in range(self.world)])
        if only is None:
            return self._rows_plan
        return tuple([[r for r in ranges if r[0] == only] for ranges in plan] for plan in self._rows_plan)

    def _exchange(self, outgoing, incoming, like):
        """Sends rank p the pieces ``outgoing[p]`` (1-D tensors) and returns, per
        rank p, the block of ``incoming[p]``'s ranges received from it, split into them."""
        ins = [cat(pieces) if pieces else zeros(0, dtype=like.dtype, device=like.device) for pieces in outgoing]
        outs = [zeros(sum(b - a for _, a, b in ranges), dtype=like.dtype, device=like.device) for ranges in incoming]
        dist.all_to_all(outs, ins, group=self.group)
        split = []
        for block, ranges in zip(outs, incoming):
            at, pieces = 0, []
            for i, a, b in ranges:
                pieces.append((i, a, block[at:at + b - a]))
                at += b - a
            split.append(pieces)
        return split

    def _placements(self, i):
        return [Shard(0)] if self.shapes[i] else [Replicate()]

    def row_dtensors(self, flat, only=None):
        """This rank's rows of each original parameter (only of parameter
        ``only``, None standing for the others), as DTensors over the unit's
        group, from ``flat``: this rank's shard of the flat parameter (or of
        optimizer state shaped like it). Collective over the unit's group."""
        sends, recvs = self._row_plan(only)
        flat, base = flat.detach(), self.rank * self.shard_numel
        got = self._exchange([[flat[a - base:b - base] for _, a, b in ranges] for ranges in sends], recvs, flat)
        pieces = [[] for _ in self.params]
        for block in got:
            for i, _, piece in block:
                pieces[i].append(piece)
        mesh = DeviceMesh.from_group(self.group, self.device.type)
        return [None if only not in (None, i) else DTensor.from_local(
                    (cat(ps) if ps else zeros(0, dtype=flat.dtype, device=flat.device)).view(self._row_shape(i)),
                    mesh, self._placements(i), shape=self.shapes[i])
                for i, ps in enumerate(pieces)]

    def load_row_dtensors(self, values, flat, only=None):
        """Writes DTensors of the originals (of parameter ``only`` alone where
        given), redistributed to this rank's rows, into ``flat``: this rank's
        shard of the flat parameter (or of optimizer state shaped like it).
        Collective over the unit's group."""
        sends, recvs = self._row_plan(only)
        mesh = DeviceMesh.from_group(self.group, self.device.type)
        rows = [None if v is None else v.redistribute(mesh, self._placements(i)).to_local().detach()
                .to(device=flat.device, dtype=flat.dtype).reshape(-1) for i, v in enumerate(values)]
        starts = [self._rows_range(i, self.rank)[0] for i in range(len(self.params))]
        got = self._exchange([[rows[i][a - starts[i]:b - starts[i]] for i, a, b in ranges] for ranges in recvs],
                             sends, flat)
        base = self.rank * self.shard_numel
        with no_grad():
            for block in got:
                for _, a, piece in block:
                    flat.detach()[a - base:a - base + piece.numel()].copy_(piece)

    # ---- gradients ---------------------------------------------------------------------
    def reduce_grad(self, sync):
        """Moves the full flat gradient into the shard's .grad, averaged over the
        ranks; under no_sync (``sync`` False) keeps it here for a later synced pass."""
        grad = gradient_to_reduce(self, sync, "FullyShardedDataParallel")
        if grad is None:
            return
        with no_grad():
            if not self.sharded:
                if self.world > 1:
                    dist.all_reduce(grad, op=dist.ReduceOp.AVG, group=self.group)
                shard = grad
            else:
                shard = zeros(self.shard_numel, dtype=self.reduce_dtype, device=self.device)
                dist.reduce_scatter_tensor(shard, grad, op=dist.ReduceOp.AVG, group=self.group)
                if self.replicate_group is not None and dist.get_world_size(self.replicate_group) > 1:
                    dist.all_reduce(shard, op=dist.ReduceOp.AVG, group=self.replicate_group)
            if shard.dtype is not self.dtype and not self.keep_low_precision_grads:
                shard = shard.to(self.dtype)
            if self.use_orig_params:
                self.flat_param.grad = self._originals_grad()
            if self.flat_param.grad is None:
                self.flat_param.grad = shard
            else:
                self.flat_param.grad.add_(shard)
            if self.use_orig_params:
                self._point_grads()

    def _originals_grad(self):
        """The gradient the originals hold now, as one shard (None where none
        does): the optimizer's zero_grad or the user may have replaced or
        dropped the views reduce_grad gave them."""
        if all(p.grad is None for p in self.params):
            return None
        if all(p.grad is v for p, v in zip(self.params, self.grad_views)):
            return self.flat_param.grad
        dtype = next(p.grad.dtype for p in self.params if p.grad is not None)
        flat = zeros(self.shard_numel, dtype=dtype, device=self.device)
        for p, (start, length) in zip(self.params, self.pieces):
            if p.grad is not None:
                Tensor(flat._buf.view(start, (length,))).copy_(p.grad.detach().reshape(-1))
        return flat

    def _point_grads(self):
        """Gives each trainable original a view of its piece of the shard's gradient as its .grad."""
        grad = self.flat_param.grad
        self.grad_views = [Tensor(grad._buf.view(start, (length,))) if p.requires_grad else None
                           for p, (start, length) in zip(self.params, self.pieces)]
        for p, v in zip(self.params, self.grad_views):
            p.grad = v

    def shard_grads(self):
        """This rank's gradients of the unit: the originals' (use_orig_params) or the flat shard's."""
        if self.use_orig_params:
            return [p.grad for p in self.params if p.grad is not None]
        return [] if self.flat_param.grad is None else [self.flat_param.grad]
