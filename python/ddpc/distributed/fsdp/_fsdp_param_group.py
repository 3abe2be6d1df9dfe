"""The parameters one fully_shard call manages, as one group: sharding them
per parameter along dim 0, gathering the unsharded parameters with one
all-gather into memory that is released and re-filled in place, and
reduce-scattering their gradients back to the shards with one collective
(on a 2-d mesh, HSDP, within the group of the mesh's last dimension, then
all-reduced with one more across its first).

Layouts. Parameter i of rows n_i (each of r_i elements) is split as
torch.chunk splits over the ``world`` ranks of the shard group: c_i =
ceil(n_i / world) rows per rank, the last ranks
fewer or none. A rank's all-gather input is its rows of every parameter one
after the other, each padded to c_i rows: S = sum of c_i * r_i elements, the
same on every rank, so the all-gather output is the ranks' blocks of S one
after the other, and the reduce-scatter input is laid out the same. The
unsharded parameters are views of one flat leaf tensor, ``full``, holding the
parameters whole one after the other (no padding): each forward gathers into
a temporary buffer and copies each parameter's rows out of the ranks' blocks
(two strided copies per parameter: the ranks with c_i rows, then the one
with fewer), and backward's gradient of ``full`` is copied into the
reduce-scatter input the other way.

``full``'s memory is freed between uses (Buffer.release_storage_) while the
views of it, including those the autograd graph saved, keep their places in
it; gathering again re-fills it and re-points them all (as FSDP1's flat
parameter, see _flat_param.py)."""

import math

from ... import _C
from ... import distributed as dist
from ...autograd import enable_grad, no_grad
from ...tensor import Tensor, empty, zeros
from ._flat_param import gradient_to_reduce


def _view(buf, offset, shape):
    """The tensor of ``shape`` at ``offset`` elements into ``buf`` (an empty one anywhere)."""
    return Tensor(buf.view(offset if math.prod(shape) else 0, shape))


class FSDPParamGroup:
    """The ShardedParameters ``params`` and where the modules use them:
    ``uses`` holds (module, attribute name, index into params)."""

    def __init__(self, params, uses, mesh, mp_policy):
        self.params, self.uses = params, uses
        self.group = mesh.get_group(mesh.ndim - 1)  # the ranks sharing the rows
        self.world = mesh.size(mesh.ndim - 1)
        self.replicate_group = mesh.get_group(0) if mesh.ndim == 2 else None  # the ranks holding the same rows
        first = params[0]
        self.dtype, self.device = first.dtype, first.device
        self.compute_dtype = mp_policy.param_dtype or self.dtype
        self.reduce_dtype = mp_policy.reduce_dtype or self.dtype
        self.shapes = [tuple(p.full_shape) for p in params]
        self.row_numel = [math.prod(s[1:]) for s in self.shapes]
        self.per_rank = [-(-s[0] // self.world) for s in self.shapes]  # c_i: rows on each rank but the last ones
        self.offsets, self.block_offsets = [], []  # where each parameter starts in full / in one rank's block
        at = block = 0
        for shape, per, row in zip(self.shapes, self.per_rank, self.row_numel):
            self.offsets.append(at)
            self.block_offsets.append(block)
            at += math.prod(shape)
            block += per * row
        self.block = block  # S
        self.requires_grad = any(p.requires_grad for p in params)
        self.full = zeros(at, dtype=self.compute_dtype, device=self.device)
        self.full.requires_grad = self.requires_grad
        self.full._buf.release_storage_()
        self.gathered = False  # full's memory is allocated (and filled, or being filled: see pending)
        self.pending = None  # (Work, gather output) of an all-gather issued with async_op, copied out on wait()
        self.pending_grad = None  # full's gradients accumulated without gradient sync, in reduce_dtype

    # ---- the unsharded parameters --------------------------------------------------------
    def unshard(self, async_op=False):
        """Fills ``full`` with every rank's rows. With ``async_op`` the
        all-gather is only issued: ``wait()`` (which every use calls first)
        waits for it and copies the rows out."""
        if self.gathered:
            if not async_op:
                self.wait()
            return
        local = empty(self.block, dtype=self.compute_dtype, device=self.device)
        with no_grad():
            for p, at in zip(self.params, self.block_offsets):
                _view(local._buf, at, tuple(p.shape)).copy_(p.detach())
            out = empty(self.world * self.block, dtype=self.compute_dtype, device=self.device)
            work = dist.all_gather_into_tensor(out, local, group=self.group, async_op=async_op)
        self.full._buf.restore_storage_()
        self.gathered = True
        self.pending = (work, out)
        if not async_op:
            self.wait()

    def wait(self):
        """Waits for the all-gather in flight (if any) and copies its rows into ``full``."""
        if self.pending is None:
            return
        (work, out), self.pending = self.pending, None
        if work is not None:
            work.wait()
        for i in range(len(self.params)):
            self._copy_rows(out, self.full, i, to_full=True)

    def reshard(self):
        """Frees ``full``'s memory and gives the modules back their sharded parameters."""
        if not self.gathered:
            return
        self.wait()  # an all-gather still writing
        self.full._buf.release_storage_()
        self.gathered = False
        for m, name, _ in self.uses:
            m.__dict__.pop(name, None)

    def install_views(self):
        """Gives the modules views of ``full`` as their parameters (shadowing the
        sharded ones until reshard): autograd views for the parameters that
        require grad, plain ones for the frozen (so no gradient is computed for
        them). Made with grad enabled: in backward, a forward recomputed for
        activation checkpointing records its ops on them."""
        with enable_grad():
            views = [self.full[off:off + math.prod(shape)].view(shape) if p.requires_grad else
                     _view(self.full._buf, off, shape)
                     for p, off, shape in zip(self.params, self.offsets, self.shapes)]
        for m, name, i in self.uses:
            object.__setattr__(m, name, views[i])

    def _copy_rows(self, padded, full, i, to_full):
        """Copies parameter i between ``padded`` (the ranks' blocks, its rows at
        block_offsets[i] in each) and ``full`` (it whole at offsets[i]), into
        ``full`` or out of it. Both have the same dtype."""
        rows, per, row = self.shapes[i][0], self.per_rank[i], self.row_numel[i]
        if not rows * row:
            return
        whole, rest = divmod(rows, per)  # ranks holding c_i rows; rows of the one after them
        off, at = self.offsets[i], self.block_offsets[i]
        pieces = [((whole, per * row), off, (per * row, 1), at, (self.block, 1))]
        if rest:
            pieces.append(((rest * row,), off + whole * per * row, (1,), whole * self.block + at, (1,)))
        for shape, full_at, full_strides, padded_at, padded_strides in pieces:
            if to_full:
                _C.strided_copy(full._buf, full_at, full_strides, padded._buf, padded_at, padded_strides, shape)
            else:
                _C.strided_copy(padded._buf, padded_at, padded_strides, full._buf, full_at, full_strides, shape)

    # ---- gradients -------------------------------------------------------------------------
    def reduce_grad(self, sync):
        """Moves ``full``'s gradient into the sharded parameters' ``.grad``
        (added to what they hold), averaged over the mesh (over the shard
        group, then over the replicate group); without ``sync`` keeps it
        here, unsharded, for the next synced pass to add."""
        grad = gradient_to_reduce(self, sync, "fully_shard")
        if grad is None:
            return
        padded = empty(self.world * self.block, dtype=self.reduce_dtype, device=self.device)
        trainable = [i for i, p in enumerate(self.params) if p.requires_grad]
        for i in trainable:
            self._copy_rows(padded, grad, i, to_full=False)
        mine = empty(self.block, dtype=self.reduce_dtype, device=self.device)
        with no_grad():
            dist.reduce_scatter_tensor(mine, padded, op=dist.ReduceOp.AVG, group=self.group)
            if self.replicate_group is not None:
                dist.all_reduce(mine, op=dist.ReduceOp.AVG, group=self.replicate_group)
            for i in trainable:
                p = self.params[i]
                rows = _view(mine._buf, self.block_offsets[i], tuple(p.shape))
                if rows.dtype is not p.dtype:
                    rows = rows.to(p.dtype)
                if p.grad is None:
                    p.grad = rows
                else:
                    p.grad.add_(rows)
