"""PowerSGD gradient compression for DistributedDataParallel (Vogels, Karimireddy
and Jaggi, 2019), as torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook.

Each gradient viewed as an n x m matrix M is sent as two thin factors: P = M Q
(n x r, Q an m x r matrix drawn at random, the same on every rank) is summed
over the ranks and its columns made orthonormal, then Q = M^T P (m x r) is
summed, and P Q^T / world_size stands for the average of M: (n + m) r numbers
on the wire instead of n m. What the approximation leaves out of a rank's
gradient is added to its next one (error feedback), and each step starts
from the last step's Q (warm start), so over steps the low-rank sums follow
the full ones. Gradients whose factors would not save ``min_compression_rate``
times the traffic (biases, small layers) are averaged whole, in the same
all-reduce as the P factors. The first ``start_powerSGD_iter`` steps average
every bucket whole, as PyTorch's hook does, while the model moves fastest.

Where ddpc differs: ``batch_tensors_with_same_shape`` is accepted and changes
nothing (each matrix is multiplied on its own; the results are the same);
with one or two columns, a column of P that is all zero stays zero where
PyTorch's Gram-Schmidt divides by its zero norm (NaN) unless given
``orthogonalization_epsilon``.
"""

import math

import numpy as np

from .. import autograd as _ag
from .. import distributed as dist
from .._dtype import bfloat16, float16
from ..tensor import Generator, randn, zeros

__all__ = ["PowerSGDState", "powerSGD_hook", "batched_powerSGD_hook"]


class PowerSGDState:
    """The settings and memory (error feedback, warm-start Q factors, step
    count, compression statistics) that ``powerSGD_hook`` keeps across steps;
    pass it to ``register_comm_hook`` with the hook."""

    def __init__(self, process_group, matrix_approximation_rank=1, start_powerSGD_iter=1_000,
                 min_compression_rate=2, use_error_feedback=True, warm_start=True, orthogonalization_epsilon=0,
                 random_seed=0, compression_stats_logging_frequency=10_000, batch_tensors_with_same_shape=False):
        if (use_error_feedback or warm_start) and start_powerSGD_iter <= 1:
            raise ValueError("PowerSGDState: start_powerSGD_iter must be > 1 with use_error_feedback or warm_start, "
                             "as DDP's first steps must reduce whole gradients")
        if matrix_approximation_rank < 1:
            raise ValueError(f"PowerSGDState: matrix_approximation_rank must be >= 1, got {matrix_approximation_rank}")
        self.process_group = process_group
        self.matrix_approximation_rank = int(matrix_approximation_rank)
        self.start_powerSGD_iter = int(start_powerSGD_iter)
        self.min_compression_rate = min_compression_rate
        self.use_error_feedback, self.warm_start = bool(use_error_feedback), bool(warm_start)
        self.orthogonalization_epsilon = orthogonalization_epsilon
        self.rng = np.random.RandomState(random_seed)  # the same draws on every rank
        self.compression_stats_logging_frequency = max(1, compression_stats_logging_frequency)
        self.batch_tensors_with_same_shape = batch_tensors_with_same_shape
        self.error_dict, self.q_memory_dict = {}, {}
        self.iter = 0
        self.total_numel_before_compression = self.total_numel_after_compression = 0

    def maybe_increase_iter(self, bucket):
        """Counts a step once its last bucket is reduced."""
        if bucket.is_last():
            self.iter += 1

    def compression_stats(self):
        """(compression rate, numbers before, numbers after) over the compressed steps so far."""
        after = self.total_numel_after_compression
        rate = self.total_numel_before_compression / after if after > 0 else 0
        return rate, self.total_numel_before_compression, after

    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("process_group")  # a group is tied to its processes; the default one is used after loading
        return state

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.process_group = None


def _orthonormal_columns(p, epsilon):
    """The columns of p (n x r) made orthonormal: by Gram-Schmidt for one or
    two columns (a zero column stays zero) and in 16-bit dtypes (a bucket
    that fp16_compress_wrapper cast), else by a Householder QR, which stays
    orthonormal where P is ill-conditioned (as PyTorch chooses)."""
    if p.shape[1] > 2 and p.dtype not in (float16, bfloat16):
        from ..linalg import qr

        return qr(p).Q
    rows = []
    for v in p.T:
        for u in rows:
            v = v - (u * v).sum() * u
        norm = v.norm()
        rows.append(v / _ag.where(norm > 0, norm + epsilon, _ag._like_scalar(1.0, norm)))
    return _ag.stack(rows).T


def _fresh_q(state, shape, like):
    """An orthonormal random m x r factor, the same on every rank (its seed comes from state.rng)."""
    g = Generator(int(state.rng.randint(1_000_000_000)))
    return _orthonormal_columns(randn(*shape, generator=g, dtype=like.dtype, device=like.device),
                                state.orthogonalization_epsilon)


def _split_as(flat, like):
    """``flat`` cut into consecutive pieces shaped as the tensors of ``like``."""
    pieces, at = [], 0
    for t in like:
        pieces.append(flat[at:at + t.numel()].reshape(t.shape))
        at += t.numel()
    return pieces


def _low_rank_reduce(state, bucket, matrices, whole, assemble):
    """The steps both hooks share, on the bucket's buffer after error feedback:
    P = M Q for each matrix (summed with the ``whole`` tensors, which travel
    uncompressed), then Q = M^T P summed, and ``assemble(averaged whole
    tensors, approximations)`` writes the bucket's result."""
    group, flat, index = state.process_group, bucket.buffer(), bucket.index()
    world = dist.get_world_size(group)
    kept = flat.clone() if state.use_error_feedback else None
    qs = state.q_memory_dict.get(index) if state.warm_start else None
    if qs is None:
        qs = [_fresh_q(state, (m.shape[1], r), flat) for m, r in matrices]
    ps = [m @ q for (m, _), q in zip(matrices, qs)]
    first = _ag.cat([t.reshape(-1) for t in whole + ps])
    work = dist.all_reduce(first, group=group, async_op=True)

    def finish(fut):
        parts = _split_as(fut.value(), whole + ps)
        averaged, p_sums = [t / world for t in parts[:len(whole)]], parts[len(whole):]
        p_hats = [_orthonormal_columns(p, state.orthogonalization_epsilon) for p in p_sums]
        q_locals = [m.T @ p for (m, _), p in zip(matrices, p_hats)]
        new_qs = []
        if q_locals:
            q_sums = _ag.cat([q.reshape(-1) for q in q_locals])
            dist.all_reduce(q_sums, group=group)
            new_qs = _split_as(q_sums, q_locals)
        assemble(averaged, [p @ q.T / world for p, q in zip(p_hats, new_qs)])
        if state.use_error_feedback:
            state.error_dict[index] = kept - flat
        if state.warm_start:
            state.q_memory_dict[index] = new_qs
        state.maybe_increase_iter(bucket)
        return flat

    return dist.Future(work, first).then(finish)


def _whole_until_start(state, bucket):
    """Whole-gradient averaging (its future) for the first steps; after them
    None, with last step's error added to the bucket (error feedback)."""
    if state.iter < state.start_powerSGD_iter:
        from .parallel import allreduce_hook

        state.maybe_increase_iter(bucket)
        return allreduce_hook(state.process_group, bucket)
    error = state.error_dict.get(bucket.index()) if state.use_error_feedback else None
    if error is not None:
        bucket.buffer().add_(error)
    return None


def powerSGD_hook(state, bucket):
    """The PowerSGD comm hook: each gradient of the bucket whose rank-r
    factors save at least ``min_compression_rate`` times its size travels as
    those factors; the others are averaged whole. Register it with
    ``ddp.register_comm_hook(PowerSGDState(...), powerSGD_hook)``."""
    early = _whole_until_start(state, bucket)
    if early is not None:
        return early
    flat = bucket.buffer()
    grads = bucket.gradients()
    compressed, layout = [], []
    for g in grads:
        n = g.shape[0] if g.ndim else 1
        m = g.numel() // n if n else 0
        r = min(n, m, state.matrix_approximation_rank)
        before, after = n * m, (n + m) * r
        squeeze = after * state.min_compression_rate < before
        state.total_numel_before_compression += before
        state.total_numel_after_compression += after if squeeze else before
        if squeeze:
            compressed.append((g.reshape(n, m), r))
        layout.append(squeeze)
    whole = [g for g, squeeze in zip(grads, layout) if not squeeze]

    def assemble(averaged, approximations):
        averaged, approximations = iter(averaged), iter(approximations)
        flat.copy_(_ag.cat([(next(approximations) if squeeze else next(averaged)).reshape(-1)
                            for squeeze in layout]))

    return _low_rank_reduce(state, bucket, compressed, whole, assemble)


def batched_powerSGD_hook(state, bucket):
    """PowerSGD on the whole bucket at once: its buffer, padded with zeros to
    a square of side ceil(sqrt(numel)), is one matrix of rank-r factors
    (fewer, larger multiplications than powerSGD_hook's; coarser)."""
    early = _whole_until_start(state, bucket)
    if early is not None:
        return early
    flat = bucket.buffer()
    n = flat.numel()
    side = math.isqrt(n - 1) + 1 if n else 0
    square = _ag.cat([flat, zeros(side * side - n, dtype=flat.dtype, device=flat.device)]).reshape(side, side)
    r = min(side, state.matrix_approximation_rank)
    state.total_numel_before_compression += n
    state.total_numel_after_compression += 2 * side * r

    def assemble(averaged, approximations):
        flat.copy_(approximations[0].reshape(-1)[:n])

    return _low_rank_reduce(state, bucket, [(square, r)], [], assemble)
