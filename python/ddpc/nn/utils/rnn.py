"""ddpc.nn.utils.rnn: PackedSequence, pack_padded_sequence, pad_packed_sequence,
pad_sequence and pack_sequence, as torch.nn.utils.rnn.

Packing and padding are each one gather (index_select) over the rows of the
input, so their gradients come back in one scatter."""

from collections import namedtuple

import numpy as np

from ... import _dtype
from ...autograd import cat
from ...tensor import Tensor, full, tensor

__all__ = ["PackedSequence", "pack_padded_sequence", "pad_packed_sequence", "pad_sequence", "pack_sequence",
           "unpad_sequence", "unpack_sequence", "invert_permutation"]


class PackedSequence(namedtuple("PackedSequence", ["data", "batch_sizes", "sorted_indices", "unsorted_indices"])):
    """Sequences of different lengths packed time step by time step: ``data``
    holds step 0 of every sequence, then step 1 of those still running, ...;
    ``batch_sizes[t]`` (an int64 CPU tensor) counts the sequences at step t.
    Sequences are packed longest first; ``sorted_indices`` (None when the input
    was sorted already) gives that order and ``unsorted_indices`` undoes it."""

    __slots__ = ()

    def __new__(cls, data, batch_sizes, sorted_indices=None, unsorted_indices=None):
        if unsorted_indices is None and sorted_indices is not None:
            unsorted_indices = _invert(sorted_indices)
        return super().__new__(cls, data, batch_sizes, sorted_indices, unsorted_indices)

    def to(self, *args, **kwargs):
        """The same sequences with ``data`` (and the indices, on its device) moved or cast as Tensor.to does."""
        data = self.data.to(*args, **kwargs)
        if data is self.data:
            return self
        move = (lambda t: t if t is None else t.to(device=data.device))
        return type(self)(data, self.batch_sizes, move(self.sorted_indices), move(self.unsorted_indices))

    def cpu(self):
        return self.to(device="cpu")

    def cuda(self, device=None):
        return self.to(device="cuda" if device is None else device)

    @property
    def is_cuda(self):
        return self.data.is_cuda

    def is_pinned(self):
        return self.data.is_pinned()

    def pin_memory(self):
        """The same sequences with ``data`` in pinned host memory, as PyTorch's (the indices stay)."""
        return type(self)(self.data.pin_memory(), self.batch_sizes, self.sorted_indices, self.unsorted_indices)

    # The casts of Tensor, of ``data`` only, as PyTorch's.
    def double(self):
        return self.to(dtype=_dtype.float64)

    def float(self):
        return self.to(dtype=_dtype.float32)

    def half(self):
        return self.to(dtype=_dtype.float16)

    def long(self):
        return self.to(dtype=_dtype.int64)

    def int(self):
        return self.to(dtype=_dtype.int32)

    def byte(self):
        return self.to(dtype=_dtype.uint8)


def _invert(perm):
    inv = np.empty(perm.numel(), np.int64)
    inv[perm.cpu().numpy()] = np.arange(perm.numel())
    return tensor(inv, device=perm.device)


def _lengths(lengths):
    values = lengths.tolist() if isinstance(lengths, Tensor) else list(lengths)
    out = np.asarray([int(v) for v in values], np.int64)
    if out.ndim != 1:
        raise ValueError(f"lengths must be a 1-d sequence, got shape {out.shape}")
    return out


def _batch_sizes(lengths):
    """How many of the (decreasing) lengths exceed each step."""
    return np.array([(lengths > t).sum() for t in range(int(lengths[0]) if len(lengths) else 0)], np.int64)


def _packed_rows(batch_sizes, batch):
    """For the packed rows in order, their (step * batch + sequence) row in the padded (T * batch) layout."""
    return np.concatenate([t * batch + np.arange(n) for t, n in enumerate(batch_sizes)]) if len(batch_sizes) else \
        np.zeros(0, np.int64)


def pack_padded_sequence(input, lengths, batch_first=False, enforce_sorted=True):
    """Packs a padded (T, B, *) batch (``batch_first``: (B, T, *)) of sequences
    whose lengths are ``lengths`` (a list or a CPU tensor); with
    ``enforce_sorted=False`` they may come in any order."""
    lens = _lengths(lengths)
    batch_dim = 0 if batch_first else 1
    if input.ndim < 2 or lens.size != input.shape[batch_dim]:
        raise ValueError(f"pack_padded_sequence: {lens.size} lengths for an input of shape {input.shape} "
                         f"(batch_first={batch_first})")
    if lens.size and (lens.min() <= 0 or lens.max() > input.shape[1 - batch_dim]):
        raise ValueError(f"pack_padded_sequence: lengths must lie in [1, {input.shape[1 - batch_dim]}], got "
                         f"{lens.tolist()}")
    sorted_indices = None
    if enforce_sorted:
        if np.any(lens[1:] > lens[:-1]):
            raise RuntimeError("`lengths` array must be sorted in decreasing order when `enforce_sorted` is True. "
                               "You can pass `enforce_sorted=False` to pack_padded_sequence and/or pack_sequence to "
                               "sidestep this requirement if you do not need ONNX exportability.")
        order = np.arange(lens.size)
    else:
        order = np.argsort(-lens, kind="stable")
        sorted_indices = tensor(order, device=input.device)
        lens = lens[order]
    batch_sizes = _batch_sizes(lens)
    steps, batch = input.shape[1 - batch_dim], lens.size
    # One gather of the packed rows from the padded input's (T * B) rows, the sort folded in.
    time_major = np.arange(steps * batch).reshape(steps, batch) if not batch_first else \
        (np.arange(batch * steps).reshape(batch, steps).T)
    rows = time_major[:, order].reshape(-1)[_packed_rows(batch_sizes, batch)]
    flat = input.reshape(steps * batch, *input.shape[2:])
    data = flat.index_select(0, tensor(rows, device=input.device))
    return PackedSequence(data, tensor(batch_sizes), sorted_indices)


def pad_packed_sequence(sequence, batch_first=False, padding_value=0.0, total_length=None):
    """The padded (T, B, *) (``batch_first``: (B, T, *)) batch of a
    PackedSequence and the sequences' lengths (an int64 CPU tensor), in the
    order they had before packing; ``total_length`` pads T further."""
    data, batch_sizes = sequence.data, sequence.batch_sizes.tolist()
    batch, steps = (batch_sizes[0] if batch_sizes else 0), len(batch_sizes)
    if total_length is not None:
        if total_length < steps:
            raise ValueError(f"Expected total_length to be at least the length of the longest sequence in input, "
                             f"but got total_length={total_length} and max sequence length being {steps}")
        steps = total_length
    # Each padded row reads its packed row, or the appended padding row past a sequence's end.
    source = np.full(steps * batch, data.shape[0], np.int64)
    source[_packed_rows(batch_sizes, batch)] = np.arange(data.shape[0])
    lengths = np.array([sum(1 for n in batch_sizes if n > b) for b in range(batch)], np.int64)
    order = np.arange(batch)
    if sequence.unsorted_indices is not None:
        order = sequence.unsorted_indices.cpu().numpy()
        lengths = lengths[order]
    source = source.reshape(steps, batch)[:, order]
    if batch_first:
        source = source.T
    pad = full((1,) + tuple(data.shape[1:]), padding_value, dtype=data.dtype, device=data.device)
    rows = cat([data, pad]).index_select(0, tensor(np.ascontiguousarray(source).reshape(-1), device=data.device))
    return rows.reshape(*source.shape, *data.shape[1:]), tensor(lengths)


def pad_sequence(sequences, batch_first=False, padding_value=0.0, padding_side="right"):
    """Stacks (L_i, *) tensors into (max L, B, *) (``batch_first``: (B, max L,
    *)), padding each with ``padding_value`` on ``padding_side``."""
    sequences = list(sequences)
    if padding_side not in ("left", "right"):
        raise ValueError(f"Expected padding_side to be one of left or right, but got {padding_side}.")
    if not sequences:
        raise RuntimeError("received an empty list of sequences")
    trailing = tuple(sequences[0].shape[1:])
    for s in sequences:
        if tuple(s.shape[1:]) != trailing:
            raise ValueError(f"pad_sequence: sequences of shapes {tuple(sequences[0].shape)} and {tuple(s.shape)} "
                             "differ past their first dim")
    lens = np.array([s.shape[0] for s in sequences], np.int64)
    steps, batch, total = int(lens.max()), len(sequences), int(lens.sum())
    starts = np.concatenate([[0], np.cumsum(lens)[:-1]])
    source = np.full((batch, steps), total, np.int64)
    for b, (start, n) in enumerate(zip(starts, lens)):
        at = slice(0, n) if padding_side == "right" else slice(steps - n, steps)
        source[b, at] = start + np.arange(n)
    if not batch_first:
        source = source.T
    first = sequences[0]
    pad = full((1,) + trailing, padding_value, dtype=first.dtype, device=first.device)
    rows = cat(sequences + [pad]).index_select(0, tensor(np.ascontiguousarray(source).reshape(-1),
                                                         device=first.device))
    return rows.reshape(*source.shape, *trailing)


def unpad_sequence(padded_sequences, lengths, batch_first=False):
    """The sequences of a padded batch (T x B x * or, batch_first, B x T x *)
    cut to their ``lengths``: a list of B tensors."""
    lengths = _lengths(lengths)
    batch = padded_sequences.shape[0 if batch_first else 1]
    if len(lengths) != batch:
        raise ValueError(f"unpad_sequence: {len(lengths)} lengths for a batch of {batch} sequences")
    if len(lengths) and (lengths.min() < 0 or lengths.max() > padded_sequences.shape[1 if batch_first else 0]):
        raise ValueError(f"unpad_sequence: lengths {lengths.tolist()} do not fit the padded length "
                         f"{padded_sequences.shape[1 if batch_first else 0]}")
    if not batch_first:
        padded_sequences = padded_sequences.transpose(0, 1)
    return [padded_sequences[i, :n] for i, n in enumerate(lengths.tolist())]


def unpack_sequence(packed_sequences):
    """The sequences of a PackedSequence, in their original order: a list of tensors."""
    padded, lengths = pad_packed_sequence(packed_sequences, batch_first=True)
    return unpad_sequence(padded, lengths, batch_first=True)


def invert_permutation(permutation):
    """The inverse of a permutation of 0..n-1 (None for None)."""
    return None if permutation is None else _invert(permutation)


def pack_sequence(sequences, enforce_sorted=True):
    """pack_padded_sequence of pad_sequence(sequences)."""
    sequences = list(sequences)
    return pack_padded_sequence(pad_sequence(sequences), [s.shape[0] for s in sequences],
                                enforce_sorted=enforce_sorted)
