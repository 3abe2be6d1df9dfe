"""Linear weight gradients averaged across the ranks of one host without an all-reduce.

A linear layer's weight gradient is a sum over the batch, g.T @ x (g: the
output gradient, [k, out]; x: the input, [k, in]), so the average over R
ranks is one product over their batches put end to end:

    mean_r g_r.T @ x_r  =  [g_0; ...; g_{R-1}].T @ [x_0; ...; x_{R-1}] / R

When every rank of the group is on this host (the cpu backend), each rank
copies its g / R and x (k rows each, usually far smaller than the gradient)
into every rank's part of a shared buffer, and rank r computes rows
[r*out/R, (r+1)*out/R) of the averaged gradient in one GEMM over all the
ranks' rows, into its own gradient, then copies the other ranks' rows of it
from theirs. That is the work of its own gradient's GEMM (a GEMM of R*k
rows, 1/R of the outputs), and the reduction costs one copy of (R-1)/R of
the gradient instead of an all-reduce's passes over all of it.
DistributedDataParallel uses it for the weights of its ``nn.Linear``
modules; the backward of ``F.linear`` hands over (g, x) instead of
computing the gradient (``leaf._grad_exchange``).

Each rank's part of the shared buffer holds, per weight: the gradient (the
parameter's ``.grad`` after the reduction), the ranks' rows of g and x, and
a record (a counter signalled when the rank has handed over its rows for
that iteration, and its row count k, 0 where the rank computed its gradient
itself). A weight is exchanged only when every rank handed over the same k;
otherwise every rank computes its own gradient and they all-reduce it, so
the ranks never disagree on what to do (and DistributedDataParallel moves a
weight that every rank computed itself in the first reduction to its
buckets, where it is all-reduced during backward). A rank writes into
another's part only after every rank has signalled that it copied what it
needed of the previous iteration, and no rank leaves the reduction (to
change its gradients, clip_grad_norm_ say) before every rank has copied
its rows of the averages.
"""

import numpy as np

from .. import _C
from .. import distributed as dist
from ..tensor import Tensor

_ALIGN = 64
_MIN_ROWS = 8  # below this many rows per rank the exchange does not pay for its copies


def _aligned(n):
    return -(-n // _ALIGN) * _ALIGN


def _max_rows(out, inp, ranks):
    """Rows per rank worth handing over: all ranks' rows at most half the gradient's size."""
    return out * inp // (2 * ranks * (out + inp))


class _Layout:
    """Where one weight's pieces lie in a rank's part (byte offsets)."""

    def __init__(self, p, ranks, at):
        self.out, self.inp = p.shape
        self.dtype = np.dtype(p.dtype.name)
        es = self.dtype.itemsize
        self.max_rows = _max_rows(self.out, self.inp, ranks)
        self.grad = at
        at += _aligned(self.out * self.inp * es)
        self.g = at
        at += _aligned(ranks * self.max_rows * self.out * es)
        self.x = at
        at += _aligned(ranks * self.max_rows * self.inp * es)
        self.record = at  # [iteration, rows] of this rank
        self.end = at + _ALIGN


def exchangeable(p):
    """Whether a weight can be exchanged at all (float32/64, 2-D, on the host, large enough: worth
    _MIN_ROWS rows between two ranks; more ranks may hand over fewer, see _Layout.max_rows)."""
    return (p.ndim == 2 and p.dtype.name in ("float32", "float64") and p.device.type == "cpu" and not p.is_sparse
            and min(p.shape) > 0 and _max_rows(*p.shape, 2) >= _MIN_ROWS)


def _layouts(params, ranks):
    """Each weight's _Layout in a rank's part, and the part's size (the two signals after them)."""
    at, layouts = 0, []
    for p in params:
        layouts.append(_Layout(p, ranks, at))
        at = layouts[-1].end
    return layouts, at + 2 * _ALIGN


def host_group(group):
    """The group's C handle if all its ranks are on this host on the cpu backend (at least 2), else None."""
    g = dist._group(group)
    c = getattr(g, "_c", None)
    if getattr(g, "backend", None) != "cpu" or c is None or c.size < 2 or c.local_size != c.size:
        return None
    return c


class GradExchange:
    """The exchanged weights of one DistributedDataParallel (see the module docstring)."""

    def __init__(self, params, group, memory):
        self.group = dist._group(group)._c
        self.ranks, self.me = self.group.size, self.group.local_rank
        self.params = params
        self.index = {id(p): i for i, p in enumerate(params)}
        self.layouts, end = _layouts(params, self.ranks)
        # signals: this rank's rows of the averages are in place; it has copied the other ranks' rows
        self.ready_at, self.copied_at = end - 2 * _ALIGN, end - _ALIGN
        self.memory = memory
        self.parts = [memory.peer(j) for j in range(self.ranks)]  # part j: rank j's, as mapped here
        self.grads = [[self._array(j, lay.grad, (lay.out, lay.inp), lay.dtype) for lay in self.layouts]
                      for j in range(self.ranks)]
        self.slots = [Tensor(_C.Buffer.from_object(a, p.dtype.name)) for a, p in zip(self.grads[self.me], params)]
        # records[j][i]: rank j's [iteration, rows] of weight i
        self.records = [[np.frombuffer(part, np.uint64, 2, lay.record) for lay in self.layouts] for part in self.parts]
        self.iteration = 0
        self.computed_by_all = set()  # weights every rank computed itself in the last reduction
        self.exchanged = 0  # weights exchanged in the last reduction (the others were all-reduced)
        self.active = False
        self.handed = {}  # weight index -> (g, x) handed over this iteration

    @staticmethod
    def size(params, ranks):
        return _layouts(params, ranks)[1]

    def _share(self, lay, j):
        """Rank j's rows of a weight's averaged gradient."""
        return j * lay.out // self.ranks, (j + 1) * lay.out // self.ranks

    def _array(self, j, offset, shape, dtype):
        return np.frombuffer(self.parts[j], dtype, int(np.prod(shape)), offset).reshape(shape)

    def _rows(self, j, lay, which, rows):
        width = lay.out if which == "g" else lay.inp
        return self._array(j, lay.g if which == "g" else lay.x, (self.ranks * rows, width), lay.dtype)

    def begin(self, active):
        """Before a backward pass: whether this one reduces through the exchange."""
        self.active = active
        self.handed = {}

    def take(self, p, g, x):
        """From the linear backward: hands over this rank's rows of weight `p`
        (g [k, out], x [k, in]) and returns the tensor its averaged gradient
        will be written into, or None where this rank computes it itself."""
        i = self.index.get(id(p))
        if not self.active or i is None or i in self.handed or len(p.__dict__.get("_post_accumulate_hooks", ())) > 1:
            return None  # (another post-accumulate-grad hook than DDP's would read .grad before the exchange)
        lay, k = self.layouts[i], g.shape[0]
        if not 0 < k <= lay.max_rows or g.dtype is not p.dtype or x.dtype is not p.dtype or x.shape[1] != lay.inp:
            return None
        g_np, x_np = g.contiguous().numpy(), x.contiguous().numpy()
        mine_g, mine_x = self._rows(self.me, lay, "g", k), self._rows(self.me, lay, "x", k)
        rows = slice(self.me * k, (self.me + 1) * k)
        np.multiply(g_np, 1.0 / self.ranks, out=mine_g[rows])  # the average's 1/R, on the small factor
        mine_x[rows] = x_np
        for j in range(self.ranks):
            if j != self.me:
                self._rows(j, lay, "g", k)[rows] = mine_g[rows]
                self._rows(j, lay, "x", k)[rows] = x_np
        self.handed[i] = (g, x)
        self._publish(i, k)
        return self.slots[i]

    def _publish(self, i, rows):
        self.records[self.me][i][1] = rows
        self.memory.signal(self.layouts[i].record, self.iteration + 1)

    def mark_computed(self, i):
        """A weight whose gradient this rank computed itself (now in its slot)."""
        if i not in self.handed:
            self._publish(i, 0)

    def finish(self, group):
        """After every weight was handed over or computed: the averaged gradients in the slots."""
        it = self.iteration + 1
        exchanged, own = [], []
        self.computed_by_all = set()
        for i, lay in enumerate(self.layouts):
            rows = set()
            for j in range(self.ranks):
                self.group.await_value(self.parts[j], lay.record, it, "DistributedDataParallel's gradient exchange")
                rows.add(int(self.records[j][i][1]))
            if rows == {0}:
                self.computed_by_all.add(i)
            (exchanged if len(rows) == 1 and 0 not in rows else own).append((i, rows.pop() if len(rows) == 1 else 0))
        for i, k in exchanged:  # this rank's rows of the average
            lay = self.layouts[i]
            lo, hi = self._share(lay, self.me)
            # matmul hands the column slice of g to BLAS as a transposed
            # operand; np.dot would first copy it out, element by element.
            np.matmul(self._rows(self.me, lay, "g", k)[:, lo:hi].T, self._rows(self.me, lay, "x", k),
                      out=self.grads[self.me][i][lo:hi])
        self.memory.signal(self.ready_at, it)
        # The other ranks' rows, copied from their gradients into this rank's
        # (reading them here leaves them in this core's cache for the optimizer).
        for j in range(self.ranks):
            if j != self.me and exchanged:
                self.group.await_value(self.parts[j], self.ready_at, it, "DistributedDataParallel's gradient exchange")
                for i, _ in exchanged:
                    lo, hi = self._share(self.layouts[i], j)
                    self.grads[self.me][i][lo:hi] = self.grads[j][i][lo:hi]
        # No rank returns (and changes its gradients, clip_grad_norm_ say) before every rank has copied its rows.
        self.memory.signal(self.copied_at, it)
        for i, _ in own:  # every rank's own gradient, all-reduced (in place: the slots lie in a shared buffer)
            if i in self.handed:
                g, x = self.handed[i]
                _C.gemm(self.slots[i]._buf, g.contiguous()._buf, x.contiguous()._buf, True, False)
            dist.all_reduce(self.slots[i], op=dist.ReduceOp.AVG, group=group)
        for j in range(self.ranks):
            self.group.await_value(self.parts[j], self.copied_at, it, "DistributedDataParallel's gradient exchange")
        self.iteration = it
        self.exchanged = len(exchanged)
        self.handed = {}
        self.active = False

    def shadow(self):
        """A joined rank's part of a step: zero gradients it computed itself, so
        that every rank all-reduces (finish() follows)."""
        self.handed = {}
        for i, s in enumerate(self.slots):
            s.fill_(0)
            self._publish(i, 0)
