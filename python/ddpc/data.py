"""ddpc.data: data sets, samplers, and the prefetching loaders.

Shaped like ``torch.utils.data``: ``Dataset``, ``IterableDataset``,
``TensorDataset``, ``Subset``, ``ConcatDataset``, ``random_split``,
``DataLoader``, ``SequentialSampler``, ``RandomSampler``,
``SubsetRandomSampler``, ``WeightedRandomSampler``, ``BatchSampler``,
``DistributedSampler``, plus ``BalancedDistributedSampler``,
``WeightedDistributedSampler`` and ``ShardedLoader`` (DataLoader +
DistributedSampler in one line).

Index lists are computed in C (csrc/sampler.c). Shuffles use ddpc's own
permutation generator, which is stable across versions and platforms: the
permutation of n items for seed s is Fisher-Yates from the top, where step i
(i = n-1 down to 1) swaps positions i and j = floor(u_i * (i + 1)), with u_i the
64-bit word ``ddpc_random_bits(s, i)`` (splitmix64's finaliser over
``s * 0x9E3779B97F4A7C15 + i * 0xD1B54A32D192ED03 + 0x632BE59BD9B4E019``) read as
a fraction of 2^64. A sampler's seed for an epoch is ``seed + epoch`` (mod
2^64), as in PyTorch, so every rank draws the same permutation.

A ``TensorDataset`` of arrays, ddpc tensors or ``.npy`` paths loads through C
threads that gather rows with the GIL released, ``prefetch`` batches ahead.
A batch's host memory is gathered into again only once nothing refers to the
batch (no tensor, view, numpy array or DLPack capsule made from it), so
batches may be kept as long as wanted, and memory let go is reused without
fresh page faults. With ``device="cuda:N"`` rows are gathered into pinned
staging memory and copied on the device's copy stream; the batch handed out
is ordered before later work on the compute stream by an event (no host
synchronisation). Any other data set (map-style ``__getitem__``/``__len__``,
or an ``IterableDataset``) is fetched and collated by ``num_workers`` worker
processes, as PyTorch's are, or without them in one background thread; either
way ``prefetch`` batches ahead.

``.npy`` paths (and arrays from ``np.load(mmap_mode="r")``) are memory-mapped
and read through the mapping while they fit ``ddpc.data.RESIDENT_BUDGET``
(a quarter of physical memory or of the cgroup's limit, at least 1 GiB). A
``.npy`` path bigger than that is read row by row with ``pread``, so it never
becomes resident; a bigger mapped array has its pages dropped from the
resident set (they stay in the page cache) whenever those the loader made
resident exceed the budget. Either way a data set larger than memory streams
with bounded resident memory.

Loaders resume in the middle of an epoch, as torchdata's
``StatefulDataLoader``: ``DataLoader.state_dict()`` records the batches of
the pass handed out so far, and after ``load_state_dict`` the next pass hands
out the rest, skipping the others without reading them; worker processes'
(and the background thread's) random number generators go on from where
they stood, so random augmentation draws what it would have drawn
uninterrupted (see ``DataLoader.load_state_dict``).

Differences from PyTorch: leaving ``num_workers`` out loads in a background
thread rather than in the caller (``num_workers=0`` does that), and a
``TensorDataset`` is always gathered by C threads (see ``DataLoader``); a
``generator`` is a
``ddpc.Generator`` (an int or a generator with ``initial_seed()`` seeds one),
and samplers also take a fixed ``seed``; batches of a ``TensorDataset`` are
lists of ``ddpc.Tensor``; ``DistributedSampler`` without a process group
takes one replica, unless ``WORLD_SIZE`` names several (then it is an error).
"""

import bisect
import collections.abc
import copy
import itertools
import numbers
import os
import queue
import threading
import types
import warnings
import weakref

import numpy as np

from . import _C, profiler
from ._C import IndexOutOfRangeError
from ._dtype import int32, int64, ordinal
from ._workers import WorkerBatches, WorkerInfo, WorkerPool, context, get_worker_info, rng_snapshot, rng_state
from ._collate import _WIDENED, _rebuild, collate_tensor_fn, default_collate, default_collate_fn_map, default_convert
from .autograd import is_grad_enabled, set_grad_enabled
from .tensor import Generator, Tensor, _thread_draws, default_generator, from_numpy

__all__ = [
    "BalancedDistributedSampler", "BatchSampler", "ConcatDataset", "DataLoader", "Dataset", "DistributedSampler",
    "IterableDataset", "RandomSampler", "Sampler", "SequentialSampler", "ShardedLoader", "Subset",
    "SubsetRandomSampler", "TensorDataset", "WeightedDistributedSampler", "WeightedRandomSampler", "default_collate",
    "random_split", "ChainDataset", "StackDataset", "default_convert", "get_worker_info", "WorkerInfo",
]

_MASK64 = (1 << 64) - 1
# A sampler longer than this is not planned up front but drawn _WINDOW indices
# at a time as its batches are asked for (minGPT's RandomSampler(replacement=True,
# num_samples=int(1e10)) would otherwise take 80 GB of indices).
_PLAN_LIMIT = 1 << 25
_WINDOW = 1 << 20


def _memory_limit():
    """Physical memory, or this process's cgroup memory limit (v1 or v2) where lower."""
    try:
        limit = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError):
        limit = 0
    try:
        with open("/proc/self/cgroup") as f:
            lines = f.read().splitlines()
    except OSError:
        return limit
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":
            candidate = f"/sys/fs/cgroup{path}/memory.max"
        elif "memory" in controllers.split(","):
            candidate = f"/sys/fs/cgroup/memory{path}/memory.limit_in_bytes"
        else:
            continue
        try:
            with open(candidate) as f:
                value = f.read().strip()
        except OSError:
            continue
        if value.isdigit() and (limit == 0 or int(value) < limit):
            limit = int(value)
    return limit


# Resident pages of mapped files (bytes) a loader may add before dropping them:
# a quarter of the memory this process may use, at least 1 GiB.
RESIDENT_BUDGET = max(1 << 30, _memory_limit() // 4)


def _positive_int(value, name):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer, got {value!r}")
    return int(value)


def _length_of(dataset_or_len, what="data set"):
    if isinstance(dataset_or_len, numbers.Integral) and not isinstance(dataset_or_len, bool):
        n = int(dataset_or_len)
    else:
        try:
            n = len(dataset_or_len)
        except TypeError:
            raise TypeError(f"expected a {what} with __len__ or an int length, got {type(dataset_or_len).__name__}") \
                from None
    if n < 0:
        raise ValueError(f"{what} length must be >= 0, got {n}")
    return n


def _group_defaults(num_replicas, rank):
    """num_replicas and rank, defaulting to the process group when one is initialised (else 1 and 0,
    unless the environment says this process is one of several ranks)."""
    if num_replicas is None or rank is None:
        world, me = 1, 0
        try:
            from . import distributed
        except ImportError:
            distributed = None
        if distributed is not None and distributed.is_initialized():
            world, me = distributed.get_world_size(), distributed.get_rank()
        elif os.environ.get("WORLD_SIZE", "1").strip() not in ("", "0", "1"):
            raise ValueError(f"WORLD_SIZE={os.environ['WORLD_SIZE']} says this process is one of several ranks, but "
                             "no process group is initialised: call ddpc.distributed.init_process_group() first "
                             "(or pass num_replicas and rank)")
        num_replicas = world if num_replicas is None else num_replicas
        rank = me if rank is None else rank
    num_replicas = _positive_int(num_replicas, "num_replicas")
    if isinstance(rank, bool) or not isinstance(rank, numbers.Integral) or not 0 <= rank < num_replicas:
        raise ValueError(f"rank {rank!r} is out of range for num_replicas {num_replicas} "
                         f"(expected 0..{num_replicas - 1})")
    return num_replicas, int(rank)


def _pass_seeds(generator):
    """What draws each pass's seed: ``generator`` (a ddpc.Generator; an int or
    another generator with ``initial_seed()``, e.g. a torch.Generator, seeds a
    private one), or ddpc's global generator for None."""
    if generator is None or isinstance(generator, Generator):
        return generator
    if isinstance(generator, numbers.Integral):
        return Generator(int(generator))
    if callable(getattr(generator, "initial_seed", None)):
        return Generator(generator.initial_seed())
    raise TypeError(f"generator must be a ddpc.Generator, an int seed or have initial_seed(), "
                    f"got {type(generator).__name__}")


def _next_seed(generator):
    """A fresh 64-bit seed from ``generator`` (None: the global one): each pass
    draws anew. The generator's seed and offset are mixed (splitmix64's
    increment and finalizer), so that consecutive passes get unrelated seeds:
    the workers seeded with ``base_seed + id`` must not take the seeds of the
    previous pass's other workers, as PyTorch's random base seeds do not. The
    increment keeps seed 0 at offset 0 (``manual_seed(0)``) from mixing to 0,
    which the finalizer keeps: worker 0 would draw the main process's numbers."""
    gseed, offset = (generator or default_generator).take(1)
    z = (gseed * 0x9E3779B97F4A7C15 + offset + 0x9E3779B97F4A7C15) & _MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & _MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & _MASK64
    return z ^ (z >> 31)


def _generator_state(generator):
    """A private generator's (seed, offset) for a state dict; None for the global one, which is the caller's to save."""
    return None if generator is None else [generator._seed, generator.offset]


def _set_generator_state(generator, state, owner):
    if state is None:
        return
    if generator is None:
        raise ValueError(f"{owner}: the state holds a generator's state, but this one draws from ddpc's global "
                         "generator (restore that with ddpc.set_rng_state)")
    if not isinstance(state, (list, tuple)) or len(state) != 2 or not all(isinstance(v, int) for v in state):
        raise ValueError(f"{owner}: a generator state is [seed, offset], got {state!r}")
    generator._seed, generator.offset = int(state[0]) & _MASK64, int(state[1])


def _state_entries(state, owner, keys):
    """``state``'s values of ``keys`` (a clear error for anything but a dict holding them)."""
    if not isinstance(state, collections.abc.Mapping):
        raise TypeError(f"{owner}.load_state_dict expects the dict that state_dict() returns, got "
                        f"{type(state).__name__}")
    missing = [k for k in keys if k not in state]
    if missing:
        raise ValueError(f"{owner}.load_state_dict: not a state of one: no {', '.join(map(repr, missing))} "
                         f"(it has {sorted(map(str, state))})")
    return [state[k] for k in keys]


def _without_pass_seed(state):
    """A sampler state (maybe a BatchSampler's around it) whose next pass draws afresh instead of repeating."""
    if isinstance(state, collections.abc.Mapping):
        state = dict(state)
        if "pass_seed" in state:
            state["pass_seed"] = None
        if "sampler" in state:
            state["sampler"] = _without_pass_seed(state["sampler"])
    return state


def _int_entry(value, what, owner):
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value < 0:
        raise ValueError(f"{owner}.load_state_dict: {what} must be an integer >= 0, got {value!r}")
    return int(value)


def _f64_vector(values, what):
    arr = np.ascontiguousarray(np.asarray(values, dtype=np.float64))
    if arr.ndim != 1:
        raise ValueError(f"{what} must be 1-d, got shape {arr.shape}")
    return arr


# ---- samplers ----------------------------------------------------------------------------


class Sampler:
    """Base class: a sampler yields sample indices. Subclasses implement ``indices()``,
    the epoch's index list as an int64 numpy array, which the loaders read directly
    (as ``type(s).indices(s)``, so that an instance attribute of that name, as
    SubsetRandomSampler's, hides nothing), or ``__iter__`` as PyTorch's do.
    As PyTorch's, it is generic in what it yields (``Sampler[list[int]]``), and
    has no ``__len__``: a sampler without one has no length (``len()`` is a
    TypeError), and a DataLoader draws its pass as it goes, which may never end."""

    __class_getitem__ = classmethod(types.GenericAlias)

    def indices(self):
        raise NotImplementedError

    def _windows(self):
        """The pass's indices in order, as int64 arrays: ``indices()`` whole,
        or, for a sampler too long to hold, consecutive parts drawn as asked for."""
        yield type(self).indices(self)

    def __iter__(self):
        return itertools.chain.from_iterable(w.tolist() for w in self._windows())


class _EpochMixin:
    """A sampler whose order is a function of (seed, epoch): its state is the epoch."""

    epoch = 0

    def set_epoch(self, epoch):
        """Selects the epoch: the shuffle is drawn from ``seed + epoch``."""
        self.epoch = int(epoch)

    def _epoch_seed(self):
        return (self.seed + self.epoch) & _MASK64

    def state_dict(self):
        """What fixes this sampler's order: ``{"epoch": e}`` (a DataLoader keeps the position within it)."""
        return {"epoch": self.epoch}

    def load_state_dict(self, state_dict):
        (epoch,) = _state_entries(state_dict, type(self).__name__, ["epoch"])
        self.epoch = _int_entry(epoch, "epoch", type(self).__name__)


class _PassSeedMixin:
    """A sampler that draws a fresh seed for each pass from ``self.generator``.

    Its state is the seed of the pass in progress and its private generator's
    state after that draw; ``load_state_dict`` makes the next pass repeat the
    one the state was taken in (so a DataLoader resumes it) and the passes
    after it draw what they would have drawn. A sampler drawing from ddpc's
    global generator leaves that one alone: save ``ddpc.get_rng_state()`` too
    for the later passes to match.
    """

    _pass_seed = None  # the seed of the pass in progress
    _replay = None  # the seed the next pass repeats, set by load_state_dict

    def _draw_seed(self):
        seed, self._replay = (_next_seed(self.generator) if self._replay is None else self._replay), None
        self._pass_seed = seed
        return seed

    def state_dict(self):
        return {"epoch": getattr(self, "epoch", 0), "pass_seed": self._pass_seed,
                "generator": _generator_state(self.generator)}

    def load_state_dict(self, state_dict):
        owner = type(self).__name__
        epoch, pass_seed, generator = _state_entries(state_dict, owner, ["epoch", "pass_seed", "generator"])
        self.epoch = _int_entry(epoch, "epoch", owner)
        if pass_seed is not None:
            pass_seed = _int_entry(pass_seed, "pass_seed", owner)
        _set_generator_state(self.generator, generator, owner)
        self._pass_seed = self._replay = pass_seed


class SequentialSampler(Sampler):
    """0, 1, ..., len(data_source) - 1."""

    def __init__(self, data_source):
        self.data_source = data_source

    def indices(self):
        return np.arange(_length_of(self.data_source), dtype=np.int64)

    def __len__(self):
        return _length_of(self.data_source)


class RandomSampler(_PassSeedMixin, _EpochMixin, Sampler):
    """Random order of ``data_source``: a permutation (or ``num_samples`` draws), or
    uniform draws with ``replacement``.

    With ``seed=None`` every pass draws a fresh seed from ``generator`` (see
    ``ddpc.Generator``; by default ddpc's global one, ``ddpc.manual_seed``);
    with a seed, pass e uses ``seed + e`` as set by ``set_epoch``.
    ``state_dict()`` holds the epoch, and without a seed the pass's seed
    and the generator's state (see ``load_state_dict``).
    """

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None, seed=None):
        if isinstance(generator, numbers.Integral) and seed is None:  # RandomSampler(ds, False, None, 7): a seed
            generator, seed = None, generator
        self.data_source = data_source
        self.replacement = bool(replacement)
        self._num_samples = None if num_samples is None else _positive_int(num_samples, "num_samples")
        self.generator = _pass_seeds(generator)
        self.seed = None if seed is None else int(seed) & _MASK64

    @property
    def num_samples(self):
        return _length_of(self.data_source) if self._num_samples is None else self._num_samples

    def indices(self):
        n = _length_of(self.data_source)
        if n == 0:
            return np.empty(0, dtype=np.int64)
        seed = self._draw_seed() if self.seed is None else self._epoch_seed()
        return np.asarray(_C.random_sampler_indices(n, self.num_samples, self.replacement, seed))

    def _windows(self):
        n, total = _length_of(self.data_source), self.num_samples
        if n == 0 or total <= _PLAN_LIMIT:
            yield type(self).indices(self)
            return
        seed = self._draw_seed() if self.seed is None else self._epoch_seed()
        for first in range(0, total, _WINDOW):  # the same draws as indices(), a window at a time
            yield np.asarray(_C.random_sampler_indices(n, min(_WINDOW, total - first), self.replacement, seed, first))

    def __len__(self):
        return self.num_samples

    def state_dict(self):
        return super().state_dict() if self.seed is None else _EpochMixin.state_dict(self)

    def load_state_dict(self, state_dict):
        """Restores a ``state_dict()``; without a seed the next pass repeats the one it was taken in."""
        if self.seed is None:
            super().load_state_dict(state_dict)
        else:
            _EpochMixin.load_state_dict(self, state_dict)


class BatchSampler(Sampler):
    """Groups a sampler's indices into lists of ``batch_size`` (the last one shorter unless ``drop_last``)."""

    def __init__(self, sampler, batch_size, drop_last):
        self.sampler = sampler
        self.batch_size = _positive_int(batch_size, "batch_size")
        self.drop_last = bool(drop_last)

    def plan(self):
        """(indices, offsets): batch b is ``indices[offsets[b]:offsets[b + 1]]``."""
        return _fixed_batches(_sampler_indices(self.sampler), self.batch_size, self.drop_last)

    def __iter__(self):
        if _is_long(self.sampler):
            return (_key_list(batch) for _, batch in _drawn_batches(self.sampler, self.batch_size, self.drop_last))
        idx, off = self.plan()
        idx = _key_list(idx)
        return (idx[off[b]:off[b + 1]] for b in range(len(off) - 1))

    def __len__(self):
        n = len(self.sampler)
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)

    def state_dict(self):
        """Its sampler's state (``{"sampler": ...}``; None where the sampler has none)."""
        method = getattr(self.sampler, "state_dict", None)
        return {"sampler": method() if callable(method) else None}

    def load_state_dict(self, state_dict):
        (inner,) = _state_entries(state_dict, "BatchSampler", ["sampler"])
        if inner is not None:
            self.sampler.load_state_dict(inner)


class DistributedSampler(_EpochMixin, Sampler):
    """Restricts sampling to this rank's share of the data set, exactly as PyTorch's
    ``DistributedSampler``.

    Without ``drop_last`` the (shuffled) index list is padded by wrapping around to
    a multiple of ``num_replicas``; with it the tail is cut; rank r takes positions
    r, r + R, r + 2R, ... ``len()`` is the per-rank count. ``num_replicas`` and
    ``rank`` default to the process group (1 and 0 without one). The data set
    (or its length) may also be passed as ``dataset=``, PyTorch's name.
    """

    def __init__(self, dataset_or_len=None, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False, *,
                 dataset=None):
        if (dataset_or_len is None) == (dataset is None):
            raise TypeError("DistributedSampler: pass the data set (or its length) once, as the first argument or as "
                            "dataset=")
        dataset_or_len = dataset if dataset is not None else dataset_or_len
        self.dataset = dataset_or_len
        self.num_replicas, self.rank = _group_defaults(num_replicas, rank)
        self.shuffle = bool(shuffle)
        self.seed = int(seed) & _MASK64
        self.drop_last = bool(drop_last)
        self.epoch = 0
        self.num_samples, self.total_size = _C.dist_sampler_size(
            _length_of(dataset_or_len), self.num_replicas, self.rank, self.drop_last)

    def indices(self):
        return np.asarray(_C.dist_sampler_indices(_length_of(self.dataset), self.num_replicas, self.rank,
                                                  self.shuffle, self._epoch_seed(), self.drop_last))

    def __len__(self):
        return self.num_samples


class BalancedDistributedSampler(DistributedSampler):
    """A DistributedSampler whose steps carry near-equal cost on every rank.

    ``costs[i]`` is the cost of sample i (e.g. its sequence length). Each step's
    ``batch_size * num_replicas`` samples (those DistributedSampler would give the
    ranks for that step) are dealt out heaviest first to the rank with the
    smallest load that still has room, so every rank gets ``batch_size`` samples
    per step and no rank waits long for a straggler. Use the same ``batch_size``
    in the DataLoader. ``imbalance()`` reports what the assignment achieves.
    """

    def __init__(self, costs, batch_size, num_replicas=None, rank=None, shuffle=True, seed=0, drop_last=False):
        self.costs = _f64_vector(costs, "costs")
        if not np.all(np.isfinite(self.costs)) or np.any(self.costs < 0):
            raise ValueError("costs must be finite and >= 0")
        self.batch_size = _positive_int(batch_size, "batch_size")
        super().__init__(len(self.costs), num_replicas, rank, shuffle, seed, drop_last)
        self._stats = None

    def _compute(self):
        idx, bal, naive = _C.balanced_sampler_indices(self.costs, self.num_replicas, self.rank, self.batch_size,
                                                      self.shuffle, self._epoch_seed(), self.drop_last)
        self._stats = (self.epoch, bal, naive)
        return np.asarray(idx)

    def indices(self):
        return self._compute()

    def imbalance(self):
        """For the current epoch: max over ranks of a step's cost divided by the mean
        over ranks, as ``{"mean", "worst"}`` over steps, with the same figures for the
        plain DistributedSampler assignment under ``"unbalanced_mean"``/``"unbalanced_worst"``."""
        if self._stats is None or self._stats[0] != self.epoch:
            self._compute()
        _, (mean, worst), (umean, uworst) = self._stats
        return {"mean": mean, "worst": worst, "unbalanced_mean": umean, "unbalanced_worst": uworst}


class WeightedDistributedSampler(_EpochMixin, Sampler):
    """Class-imbalance sampling across ranks: index i is drawn with probability
    proportional to ``weights[i]``.

    ``num_samples`` is the number of draws over all ranks; each rank draws its own
    share, ``ceil(num_samples / num_replicas)`` (``floor`` with ``drop_last``), and
    the ranks' draws together are exactly one single-process draw sequence of
    ``share * num_replicas`` draws (rank r makes draws r, r + R, ...). With
    ``replacement=False`` no index repeats across ranks within an epoch.
    """

    def __init__(self, weights, num_samples, replacement=True, num_replicas=None, rank=None, seed=0, drop_last=False):
        self.weights = _f64_vector(weights, "weights")
        self.num_replicas, self.rank = _group_defaults(num_replicas, rank)
        num_samples = _positive_int(num_samples, "num_samples")
        self.replacement = bool(replacement)
        self.seed = int(seed) & _MASK64
        self.drop_last = bool(drop_last)
        self.epoch = 0
        R = self.num_replicas
        self.num_samples = num_samples // R if self.drop_last else -(-num_samples // R)
        self.total_size = self.num_samples * R
        positive = int(np.count_nonzero(self.weights > 0))
        if not np.all(np.isfinite(self.weights)) or np.any(self.weights < 0) or positive == 0:
            raise ValueError("weights must be finite, >= 0, and not all zero")
        if not self.replacement and self.total_size > positive:
            raise ValueError(f"{self.total_size} draws without replacement, but only {positive} weights are > 0")

    def indices(self):
        return np.asarray(_C.weighted_sampler_indices(self.weights, self.total_size, self.replacement,
                                                      self.num_replicas, self.rank, self._epoch_seed()))

    def __len__(self):
        return self.num_samples


class WeightedRandomSampler(_PassSeedMixin, WeightedDistributedSampler):
    """``num_samples`` indices drawn with probability proportional to
    ``weights`` (one process; a fresh draw each pass, from ``generator``)."""

    def __init__(self, weights, num_samples, replacement=True, generator=None):
        super().__init__(weights, num_samples, replacement, num_replicas=1, rank=0)
        self.generator = _pass_seeds(generator)

    def indices(self):
        return np.asarray(_C.weighted_sampler_indices(self.weights, self.total_size, self.replacement, 1, 0,
                                                      self._draw_seed()))


class SubsetRandomSampler(_PassSeedMixin, Sampler):
    """The given indices in a random order, drawn afresh each pass from ``generator``.
    As PyTorch's, its ``indices`` attribute is the sequence given, read at each pass."""

    def __init__(self, indices, generator=None):
        if isinstance(indices, collections.abc.Iterator):  # (a generator would give one pass)
            indices = list(indices)
        _subset(indices)  # (checked now, read at each pass)
        self.indices = indices
        self.generator = _pass_seeds(generator)

    def indices(self):  # (the class's: self.indices is the instance's sequence)
        subset = _subset(self.indices)
        n = len(subset)
        if n == 0:
            return subset
        return subset[np.asarray(_C.random_sampler_indices(n, n, False, self._draw_seed()))]

    def __len__(self):
        return len(self.indices)


def _subset(indices):
    return _int_indices(list(indices) if not isinstance(indices, np.ndarray) else indices, "indices")


def _int_indices(values, what):
    """``values`` as a 1-d int64 array; anything but integers is an error, not truncated or flattened."""
    try:
        idx = np.asarray(values)
    except ValueError:  # sequences of different lengths
        idx = None
    if idx is not None and idx.size == 0:
        return np.empty(0, dtype=np.int64)
    if idx is None or idx.ndim > 1:
        raise TypeError(f"{what} must yield integer indices, got sequences of them (a sampler yielding lists of "
                        "indices, such as a BatchSampler, goes in batch_sampler=, or in sampler= with "
                        "batch_size=None to pass each list to dataset[...] as it is)")
    if idx.dtype.kind not in "iu":
        raise TypeError(f"{what} must yield integer indices, got {idx.dtype} (e.g. {idx.reshape(-1)[0]!r})")
    return np.ascontiguousarray(idx, dtype=np.int64)


def _keys(values, what):
    """A sampler's elements: as a 1-d int64 array where they are integers (what
    a TensorDataset's C gather reads), else as the list they are, each key
    passed to ``dataset[key]`` as it is (names, floats, ``(index, size)``
    pairs), as PyTorch's loader passes them."""
    try:
        return _int_indices(values, what)
    except TypeError:
        return list(values)


def _key_list(keys):
    """Keys (an int64 array or a list) as a list for ``dataset[...]``, integers as Python ints."""
    return keys.tolist() if isinstance(keys, np.ndarray) else list(keys)


def _sampler_indices(sampler):
    """The epoch's keys (see _keys): a ddpc sampler's ``indices()``, or what any
    iterable yields (e.g. a PyTorch-style sampler that only defines ``__iter__``,
    or a subclass of a ddpc sampler that overrides ``__iter__``)."""
    method = getattr(type(sampler), "indices", None)
    if callable(method) and method is not Sampler.indices and type(sampler).__iter__ is Sampler.__iter__:
        return _int_indices(method(sampler), "sampler")
    return _keys(list(sampler), "sampler")


def _length(sized):
    """len(sized), or None where it has no length."""
    try:
        return len(sized)
    except (TypeError, NotImplementedError):
        return None


def _is_long(sampler):
    """Whether a pass over ``sampler`` is drawn as it goes instead of planned up
    front: it is too long to plan (see _PLAN_LIMIT), or has no length, so may never end."""
    n = _length(sampler)
    return n is None or n > _PLAN_LIMIT


def _drawn_batches(sampler, batch_size, drop_last, skip=0):
    """(batch number, indices) of a long sampler's pass, drawn a window at a
    time as they are asked for (a batch at a time from a sampler without a
    length, which may yield slowly, or forever); the first ``skip`` batches
    are left out. The first window is drawn now, on the caller's thread (a
    pass's seed with it)."""
    if isinstance(sampler, Sampler) and type(sampler).__iter__ is Sampler.__iter__:
        windows = sampler._windows()
    else:
        windows = _windows_of(iter(sampler), _WINDOW if _length(sampler) is not None else batch_size)
    first = next(windows, None)
    return _cut(itertools.chain(() if first is None else (first,), windows), batch_size, drop_last, skip)


def _cut(windows, batch_size, drop_last, skip):
    rest, b = np.empty(0, dtype=np.int64), 0
    for w in windows:
        rest = _joined(rest, w) if len(rest) else w
        whole = len(rest) // batch_size
        for k in range(max(skip - b, 0), whole):
            yield b + k, rest[k * batch_size:(k + 1) * batch_size]
        b += whole
        rest = rest[whole * batch_size:]
    if len(rest) and not drop_last and b >= skip:
        yield b, rest


def _joined(keys, more):
    if isinstance(keys, np.ndarray) and isinstance(more, np.ndarray):
        return np.concatenate([keys, more])
    return _key_list(keys) + _key_list(more)


def _windows_of(it, size):
    while window := list(itertools.islice(it, size)):
        yield _keys(window, "sampler")


def _resumed_at(resume, num_batches):
    """(batches handed out, those handed out ahead) of a pass of ``num_batches``
    that ``resume`` (a loader's state, or None) continues; refuses a state taken
    in a pass of another length."""
    if resume is None:
        return 0, ()
    if resume["num_batches"] not in (None, num_batches):
        raise ValueError(f"DataLoader: the state was taken in a pass of {resume['num_batches']} batches, but "
                         f"this pass has {num_batches}: the sampler does not give the order it gave then")
    return resume["batches_yielded"], resume["batches_ahead"]


class _Order:
    """A long pass's batch numbers, task by task: ``start`` on, without those
    in ``skip`` (handed out before a resume), computed rather than held."""

    def __init__(self, start, skip):
        self.start, self.skip = start, sorted(skip)

    def __getitem__(self, task):
        number = self.start + task
        for a in self.skip:
            number += a <= number
        return number


def _fixed_batches(idx, batch_size, drop_last):
    n = len(idx)
    nb = n // batch_size if drop_last else -(-n // batch_size)
    offsets = np.minimum(np.arange(nb + 1, dtype=np.int64) * batch_size, n)
    return idx, offsets


def _select_batches(idx, offsets, order):
    """(indices, offsets) of the batches numbered ``order`` of the plan (idx, offsets), in that order."""
    starts, lengths = offsets[order], offsets[order + 1] - offsets[order]
    new_offsets = np.zeros(len(order) + 1, dtype=np.int64)
    np.cumsum(lengths, out=new_offsets[1:])
    positions = np.repeat(starts - new_offsets[:-1], lengths) + np.arange(new_offsets[-1], dtype=np.int64)
    return np.ascontiguousarray(idx[positions]), new_offsets


# ---- data sets ---------------------------------------------------------------------------


class Dataset:
    """A map-style data set: ``__getitem__(i)`` and ``__len__()`` (which
    subclasses define; as in PyTorch the base class has none, so ``len()`` of
    a stream without one is a TypeError and ``list(stream)`` works). Generic
    in its samples, as PyTorch's (``Dataset[int]``)."""

    __class_getitem__ = classmethod(types.GenericAlias)

    def __getitem__(self, index):
        raise NotImplementedError

    def __add__(self, other):
        """``a + b``: the samples of a, then those of b (a ConcatDataset), as in PyTorch."""
        return ConcatDataset([self, other])


class IterableDataset(Dataset):
    """A data set read as a stream: ``__iter__`` yields samples. The DataLoader
    batches them in order, with no sampler; each rank yields its own share."""

    def __iter__(self):
        raise NotImplementedError

    def __add__(self, other):
        """``a + b``: a's stream, then b's (a ChainDataset)."""
        return ChainDataset([self, other])

    def __getitem__(self, index):
        raise TypeError(f"{type(self).__name__} is an IterableDataset: it is read by iterating, not by index")


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``. A Subset of a TensorDataset
    still loads through the C threads."""

    def __init__(self, dataset, indices):
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, index):
        if isinstance(index, list):
            return [self.dataset[self.indices[i]] for i in index]
        return self.dataset[self.indices[index]]

    def __getitems__(self, indices):
        """The samples at ``indices``, through the data set's own ``__getitems__`` where it has one."""
        return _samples(self.dataset, [self.indices[i] for i in indices])

    def __len__(self):
        return len(self.indices)


class ConcatDataset(Dataset):
    """The samples of several data sets, one after the other."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        if not self.datasets:
            raise ValueError("ConcatDataset needs at least one data set")
        if any(isinstance(d, IterableDataset) for d in self.datasets):
            raise TypeError("ConcatDataset takes map-style data sets, not IterableDataset")
        self.cumulative_sizes = np.cumsum([len(d) for d in self.datasets]).tolist()

    def __len__(self):
        return self.cumulative_sizes[-1]

    def __getitem__(self, index):
        if index < 0:
            if -index > len(self):
                raise IndexError(f"index {index} is out of range for a data set of {len(self)}")
            index += len(self)
        k = bisect.bisect_right(self.cumulative_sizes, index)
        if k == len(self.datasets):
            raise IndexError(f"index {index} is out of range for a data set of {len(self)}")
        return self.datasets[k][index - (self.cumulative_sizes[k - 1] if k else 0)]


class ChainDataset(IterableDataset):
    """The samples of several IterableDatasets, one stream after the other."""

    def __init__(self, datasets):
        self.datasets = list(datasets)
        for d in self.datasets:
            if not isinstance(d, IterableDataset):
                raise TypeError(f"ChainDataset takes IterableDatasets, got {type(d).__name__}")

    def __iter__(self):
        for d in self.datasets:
            yield from d

    def __len__(self):
        return sum(len(d) for d in self.datasets)


class StackDataset(Dataset):
    """Samples made of the samples at one index of several data sets of one
    length: a tuple for ``StackDataset(a, b)``, a dict for ``StackDataset(x=a, y=b)``."""

    def __init__(self, *args, **kwargs):
        if args and kwargs:
            raise ValueError("StackDataset takes data sets as positional or as keyword arguments, not both")
        if not args and not kwargs:
            raise ValueError("StackDataset needs at least one data set")
        self.datasets = args or kwargs
        lengths = {len(d) for d in (args or kwargs.values())}
        if len(lengths) != 1:
            raise ValueError(f"StackDataset: the data sets differ in length ({sorted(lengths)})")
        self._length = lengths.pop()

    def __getitem__(self, index):
        if isinstance(self.datasets, dict):
            return {k: d[index] for k, d in self.datasets.items()}
        return tuple(d[index] for d in self.datasets)

    def __len__(self):
        return self._length


def random_split(dataset, lengths, generator=None):
    """Splits ``dataset`` into Subsets of the given lengths (or fractions of
    its length, the remainder dealt one by one from the first) over a random
    permutation drawn from ``generator`` (ddpc's global one by default)."""
    n = _length_of(dataset)
    lengths = list(lengths)
    if lengths and all(isinstance(k, float) for k in lengths) and abs(sum(lengths) - 1) < 1e-6:
        if any(k < 0 for k in lengths):
            raise ValueError(f"random_split: fractions must be >= 0, got {lengths}")
        counts = [int(np.floor(n * k)) for k in lengths]
        for i in range(n - sum(counts)):
            counts[i % len(counts)] += 1
        lengths = counts
    if any(isinstance(k, bool) or not isinstance(k, numbers.Integral) or k < 0 for k in lengths) \
            or sum(lengths) != n:
        raise ValueError(f"random_split: lengths must be non-negative ints adding up to the data set's {n} samples "
                         f"(or fractions adding up to 1), got {lengths}")
    perm = np.asarray(_C.random_sampler_indices(n, n, False, _next_seed(_pass_seeds(generator)))) if n else \
        np.empty(0, np.int64)
    ends = np.cumsum(lengths)
    return [Subset(dataset, perm[end - k:end].tolist()) for k, end in zip(lengths, ends)]


def _as_source(obj):
    """(Buffer, file_backed, dtype) for an array, tensor, Buffer or .npy path. An
    array (or file) of an integer dtype ddpc lacks (see _WIDENED) gives its bytes,
    as uint8 with a last dimension of the element's size, and that dtype: its
    rows are gathered as they are and widened batch by batch (_widened)."""
    if isinstance(obj, (str, bytes, os.PathLike)):
        path = os.fsdecode(obj)
        if not os.path.exists(path):
            raise FileNotFoundError(f"no such .npy file: {path!r}")
        try:
            return _C.Buffer.from_object(_C.NpyFile(path)), True, None
        except TypeError as error:  # (the C reader maps ddpc's dtypes only)
            obj = np.load(path, mmap_mode="r")
            if obj.dtype not in _WIDENED:
                raise error
    if isinstance(obj, Tensor):
        obj = obj._buf
    if isinstance(obj, _C.Buffer):
        if obj.device != -1:
            raise ValueError("data set arrays must be in host memory; the loader moves batches to the device")
        return obj, False, None
    # A read-only np.memmap (np.load(mmap_mode="r")) maps a file: its pages may be dropped.
    file_backed = isinstance(obj, np.memmap) and obj.mode == "r"
    arr = np.asarray(obj)
    if not arr.flags.c_contiguous:
        if file_backed:
            raise ValueError("a memory-mapped array must be C-contiguous to be read row by row")
        arr = np.ascontiguousarray(arr)
    if arr.dtype in _WIDENED and arr.ndim:
        raw = arr.view(np.uint8).reshape(arr.shape + (arr.dtype.itemsize,))
        return from_numpy(raw)._buf, file_backed, arr.dtype
    return from_numpy(arr)._buf, file_backed, None


def _widened(raw, dtype):
    """Rows of a source of ``dtype`` (one of _WIDENED's) from their bytes (``raw``,
    uint8, the last dimension little-endian), in the dtype _WIDENED gives, on the
    device ``raw`` is on (a batch crosses to a GPU at the source's width)."""
    wide = int32 if _WIDENED[dtype] is np.int32 else int64
    value = raw[..., 0].to(wide)
    for k in range(1, dtype.itemsize):
        value = value + raw[..., k].to(wide) * (1 << 8 * k)
    if dtype.kind == "i":  # two's complement
        bits = 8 * dtype.itemsize
        value = value - (value >= 1 << bits - 1).to(wide) * (1 << bits)
    return value


class TensorDataset(Dataset):
    """Samples are rows of equal-length arrays: numpy arrays, ddpc tensors, or paths of
    ``.npy`` files (memory-mapped). ``dataset[i]`` is a tuple of the i-th rows.

    Arrays and files of int8, int16, uint16 (token ids, say) or uint32, dtypes
    ddpc has no tensors of, are read at their width and each batch (and row)
    widened to int32 (uint32: int64), every value kept, as ``default_collate``
    widens them; ``tensors`` then holds such an array widened whole.

    A mapped file must not be rewritten in place (``np.save`` to its path truncates
    it) while it is read: a loader's next pass over a file that changed raises,
    but a read of a shortened mapping during one kills the process (SIGBUS), as
    with ``np.load(path, mmap_mode="r")``. Write a new file and rename it over
    the old one instead: the mapping keeps the old file."""

    def __init__(self, *arrays):
        if not arrays:
            raise ValueError("TensorDataset needs at least one array")
        if len(arrays) > 16:
            raise ValueError(f"TensorDataset holds at most 16 arrays, got {len(arrays)}")
        self._open(arrays)

    def _open(self, arrays):
        self._buffers, self._file_backed, self._widen = (list(column) for column in
                                                         zip(*(_as_source(a) for a in arrays)))
        # Tensors requiring grad, indexed as they are so that rows stay in their graph (as PyTorch's); None elsewhere.
        self._graphed = [a if isinstance(a, Tensor) and a.requires_grad else None for a in arrays]
        self._paths = [os.fsdecode(a) if isinstance(a, (str, bytes, os.PathLike)) else None for a in arrays]
        for i, buf in enumerate(self._buffers):
            if buf.ndim < 1:
                raise ValueError(f"array {i} is 0-d; every array needs a first (sample) dimension")
        lengths = [buf.shape[0] for buf in self._buffers]
        if len(set(lengths)) != 1:
            raise ValueError(f"arrays have different lengths {lengths}; every array needs one row per sample")

    @property
    def tensors(self):
        return tuple(t if t is not None else Tensor(buf) if dtype is None else _widened(Tensor(buf), dtype)
                     for buf, dtype, t in zip(self._buffers, self._widen, self._graphed))

    def __getstate__(self):
        """Pickles ``.npy`` paths as paths and arrays by value (e.g. for spawned DataLoader workers)."""
        state = {k: v for k, v in self.__dict__.items()
                 if k not in ("_buffers", "_file_backed", "_widen", "_paths", "_graphed")}
        state["_sources"] = [p if p is not None else Tensor(buf) if dtype is None
                             else np.asarray(buf).view(dtype).reshape(buf.shape[:-1])
                             for p, buf, dtype in zip(self._paths, self._buffers, self._widen)]
        return state

    def __setstate__(self, state):
        state = dict(state)
        sources = state.pop("_sources")
        self.__dict__.update(state)
        self._open(sources)

    def __getitem__(self, index):
        return tuple(t[index] if t is not None else Tensor(buf)[index] if dtype is None
                     else _widened(Tensor(buf)[index], dtype)
                     for buf, dtype, t in zip(self._buffers, self._widen, self._graphed))

    def __len__(self):
        return self._buffers[0].shape[0]


# ---- fetching (collation is _collate.py's) -----------------------------------------------


class _Fetcher:
    """How a loader makes batches of a generic data set, in this process or a
    worker's: with automatic batching (a ``batch_size`` or ``batch_sampler``),
    samples collated by ``collate_fn`` (``default_collate``); without, each
    sample by ``collate_fn`` (``default_convert``)."""

    END = object()  # draw's answer once the stream has no (full enough) batch left

    def __init__(self, dataset, auto, batch_size, drop_last, collate_fn):
        self.dataset, self.auto, self.batch_size, self.drop_last = dataset, auto, batch_size, drop_last
        self.collate_fn = collate_fn

    def fetch(self, indices):
        """The batch of a map-style data set's ``indices`` (without automatic batching,
        ``indices`` holds one sampler element, the key of ``dataset[key]``)."""
        if not self.auto:
            return self.collate_fn(self.dataset[indices[0]])
        samples = _samples(self.dataset, indices)
        # A __getitems__ may return a batch already collated, for a collate_fn of its own (as in PyTorch).
        if self.collate_fn is default_collate and len(samples) != len(indices):
            raise ValueError(f"{type(self.dataset).__name__}.__getitems__ returned {len(samples)} samples for "
                             f"{len(indices)} indices (one that returns a batch collated already needs a "
                             "collate_fn of its own)")
        return self.collate_fn(samples)

    def draw(self, stream):
        """The next batch's samples from an iterator over an IterableDataset (one
        sample without automatic batching), to collate with ``collate_fn``; or END."""
        if not self.auto:
            return next(stream, self.END)
        chunk = list(itertools.islice(stream, self.batch_size))
        return self.END if not chunk or (self.drop_last and len(chunk) < self.batch_size) else chunk

    def open(self, batches, state):
        """An iterator over the IterableDataset, past the first ``batches`` of its
        batches: from ``state`` through the data set's ``load_state_dict``, called
        before ``iter()``, where a state was saved; else by drawing and dropping them."""
        if state is not None:
            self.dataset.load_state_dict(state)
            return iter(self.dataset)
        stream = iter(self.dataset)
        for _ in range(batches):
            if self.draw(stream) is self.END:
                break
        return stream

    def stream_state(self):
        """A copy of the IterableDataset's ``state_dict()``, None where it has none."""
        if not _stateful(self.dataset):
            return None
        return copy.deepcopy(self.dataset.state_dict())


def _stateful(obj):
    return callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))


def _samples(dataset, indices):
    """The samples at ``indices``: one ``__getitems__(indices)`` call where the data
    set has it (a batched read, as PyTorch's loader makes; what it returns is for
    the collate_fn, as is), else one read each."""
    getitems = getattr(dataset, "__getitems__", None)
    if callable(getitems):
        return getitems(indices)
    return [dataset[i] for i in indices]


def _move(value, device, pin_memory):
    if isinstance(value, Tensor):
        # (a copy to a GPU runs asynchronously only from pinned memory)
        if pin_memory and not value.is_cuda and not value.is_pinned():
            value = value.pin_memory()
        return value if device is None else value.to(device, non_blocking=True)
    if isinstance(value, list):
        return [_move(v, device, pin_memory) for v in value]
    if isinstance(value, tuple):
        moved = [_move(v, device, pin_memory) for v in value]
        return type(value)(*moved) if hasattr(value, "_fields") else tuple(moved)
    if isinstance(value, collections.abc.Mapping):
        moved = {k: _move(v, device, pin_memory) for k, v in value.items()}
        return moved if type(value) is dict else _rebuild(value, moved)
    return value


# ---- iterators -----------------------------------------------------------------------------


class _Progress:
    """Where a pass over a DataLoader stands, for its ``state_dict()``: the
    batches handed out (all before ``done``, and with ``in_order=False`` those
    in ``ahead``), over an IterableDataset each stream's (batches handed out,
    data set state after them) and the workers' round-robin, with worker
    processes each one's generators before the first of its batches not
    handed out (None: as seeded), and with the fetch thread its generator's
    offset after the last batch handed out (None: as seeded)."""

    def __init__(self, order, num_batches, done=0, ahead=(), streams=None, schedule=None, base_seed=None):
        self.order = order  # map-style: the pass's batch numbers, task by task; None for a stream
        self.num_batches = num_batches
        self.done, self.ahead = done, set(ahead)
        self.streams, self.schedule, self.base_seed = streams, schedule, base_seed
        self.ended = False
        self.rng = None  # with workers: a list, one per worker
        self.thread_offset = None  # with the fetch thread (_ThreadedBatches)

    @property
    def finished(self):
        """Whether every batch was handed out: a pass of no known length (a stream's, or a sampler's without
        one) once its iterator said so."""
        return self.ended if self.num_batches is None else self.done >= self.num_batches

    def hand_out(self, task, worker, state, schedule, rng=None):
        """Counts a batch handed out (not one merely prefetched). ``rng``: where the
        generators of what made it stood after it, a worker's snapshot or the
        fetch thread's generator offset."""
        if self.rng is not None:
            self.rng[worker] = rng
        elif rng is not None:
            self.thread_offset = rng
        if self.order is None:
            self.done += 1
            stream = self.streams[worker or 0]
            stream[0], stream[1] = stream[0] + 1, state
            self.schedule = schedule
            return
        number = int(self.order[task])
        if number != self.done:
            self.ahead.add(number)
            return
        self.done += 1
        while self.done in self.ahead:
            self.ahead.remove(self.done)
            self.done += 1


class _Batches:
    """What DataLoader's iterators share: ``__next__`` (their ``_next``, which
    returns the batch and what ``_Progress.hand_out`` takes) shows in
    ddpc.profiler under the name PyTorch's loader iterators have there."""

    _progress = None

    def __iter__(self):
        return self

    def __len__(self):
        """The number of batches of the pass (not of those left), as PyTorch's iterators give: len(loader)."""
        if self._progress is None or self._progress.num_batches is None:
            raise TypeError("this pass's number of batches is not known: its sampler (or batch_sampler, or "
                            "IterableDataset stream) has no len()")
        return self._progress.num_batches

    def __next__(self):
        try:
            if profiler._is_profiler_enabled:
                with profiler.record_function(f"enumerate(DataLoader)#{type(self).__name__}.__next__"):
                    batch, note = self._next()
            else:
                batch, note = self._next()
        except StopIteration:
            if self._progress is not None:
                self._progress.ended = True
            raise
        if self._progress is not None:
            self._progress.hand_out(*note)
        return batch


class _ArrayBatches(_Batches):
    """Batches of a TensorDataset gathered by _C.Loader's threads (and widened, see _widened)."""

    def __init__(self, loader, widen):
        self._loader, self._widen = loader, widen
        self._count = 0

    def _next(self):
        batch = [Tensor(buf) if dtype is None else _widened(Tensor(buf), dtype)
                 for buf, dtype in zip(next(self._loader), self._widen)]
        self._count += 1
        return batch, (self._count - 1, None, None, None)

    def __length_hint__(self):
        return self._loader.__length_hint__()

    def close(self):
        """Stops the loader's threads now (dropping the iterator does the same)."""
        self._loader.close()


_END = object()


class _Failure:
    def __init__(self, exc):
        self.exc = exc


def _produce(fetch, batches, out, stop, setting):
    """Background thread of _ThreadedBatches: fetches batches in order until told to stop.
    A batch that raises an Exception is handed on as a _Failure and the ones after it
    follow, as they do when the caller fetches them (num_workers=0). ``setting``:
    the thread's (generator, grad mode). Each batch goes with its note for
    ``_Progress.hand_out`` and the generator's offset after making it (drawing
    it from a stream included), where a resumed pass's thread starts."""
    generator, grad = setting
    _thread_draws.generator = generator
    set_grad_enabled(grad)
    try:
        batches = iter(batches)
        while not stop.is_set():
            try:
                item = next(batches, _END)  # drawing a batch may fail too: an IterableDataset's stream
            except BaseException as exc:  # handed to the consumer, which re-raises it
                item = _Failure(exc)
            if item is _END:
                return
            if not isinstance(item, _Failure):
                rec = profiler._is_profiler_enabled and profiler._open("DataLoader.fetch")
                try:
                    batch, note = fetch(item)
                    item = batch, note + (generator.offset,)
                except BaseException as exc:
                    item = _Failure(exc)
                if rec:
                    profiler._close(rec)
            while not stop.is_set():
                try:
                    out.put(item, timeout=0.05)
                    break
                except queue.Full:
                    continue
            if isinstance(item, _Failure) and not isinstance(item.exc, Exception):  # KeyboardInterrupt, ...
                return
    finally:
        while not stop.is_set():
            try:
                out.put(_END, timeout=0.05)
                break
            except queue.Full:
                continue


def _shutdown(stop, thread):
    stop.set()
    if thread is not threading.current_thread():
        thread.join()


class _ThreadedBatches(_Batches):
    """Batches of a generic data set, fetched and collated by one background thread,
    at most ``prefetch`` ahead. The thread holds no reference to this iterator, so
    dropping the iterator stops and joins it."""

    def __init__(self, fetch, batches, prefetch, remaining, timeout=0, seed=0, offset=0):
        self._queue = queue.Queue(maxsize=prefetch)
        stop = threading.Event()
        # The thread fetches as the caller would (num_workers=0): in the grad mode of the thread starting the
        # pass, and drawing from a generator of its own, seeded from the loader's (from ``offset`` on: a resumed
        # pass's), so a data set's random augmentation is the same run to run whatever the training loop draws
        # meanwhile.
        generator, grad = Generator(), is_grad_enabled()
        generator.manual_seed(seed)
        generator.offset = offset
        thread = threading.Thread(target=_produce, args=(fetch, batches, self._queue, stop, (generator, grad)),
                                  daemon=True, name="ddpc-data-prefetch")
        thread.start()
        self._finalizer = weakref.finalize(self, _shutdown, stop, thread)
        self._remaining = remaining
        self._timeout = timeout

    def _next(self):
        waited = 0.0
        while True:
            if not self._finalizer.alive:  # closed, also by another thread while this one waited
                raise StopIteration
            try:
                item = self._queue.get(timeout=0.05)
                break
            except queue.Empty:
                waited += 0.05
                if self._timeout and waited >= self._timeout:
                    self.close()
                    raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds waiting for a batch")
        if item is _END:
            self.close()
            raise StopIteration
        self._remaining = max(self._remaining - 1, 0)
        if isinstance(item, _Failure):  # the thread goes on with the next batch (after a BaseException, it ends)
            try:
                raise item.exc
            finally:  # not held by its own traceback: dropping the error lets the iterator (and thread) go
                del item
        return item

    def __length_hint__(self):
        return self._remaining

    def close(self):
        """Stops and joins the background thread now."""
        self._finalizer()


class _WorkerBatches(_Batches, WorkerBatches):
    """Batches of a generic data set made by worker processes (``num_workers`` > 0)."""


class _CallerBatches(_Batches):
    """Batches of a generic data set fetched by the thread that asks for them
    (``num_workers=0``, as PyTorch's loader does in the main process)."""

    def __init__(self, fetch, batches, remaining):
        self._fetch, self._batches, self._remaining = fetch, iter(batches), remaining

    def _next(self):
        task = next(self._batches)
        self._remaining = max(self._remaining - 1, 0)
        return self._fetch(task)

    def __length_hint__(self):
        return self._remaining

    def close(self):
        self._batches = iter(())


def _array_rows(dataset):
    """(TensorDataset, rows) when ``dataset`` is a TensorDataset whose rows the C
    threads can gather (a subclass overriding neither ``__getitem__`` nor
    ``__getitems__``, holding no tensor that requires grad, while
    ``default_collate_fn_map`` collates tensors as ddpc does), maybe through
    Subsets (``rows`` maps its indices to the TensorDataset's, None for
    itself); (None, None) otherwise. The Subsets' indices are read as they are
    now: a loader calls this for each pass, as PyTorch's reads them in each
    pass."""
    subsets = []
    while type(dataset) is Subset:
        subsets.append(dataset)
        dataset = dataset.dataset
    if not isinstance(dataset, TensorDataset) or type(dataset).__getitem__ is not TensorDataset.__getitem__ \
            or hasattr(type(dataset), "__getitems__") or any(t is not None for t in dataset._graphed) \
            or default_collate_fn_map.get(Tensor) is not collate_tensor_fn:
        return None, None
    rows = None
    for subset in subsets:
        ind = _int_indices(subset.indices, "Subset indices")
        rows = ind if rows is None else ind[_wrapped(rows, len(ind))]
    return dataset, rows


def _wrapped(idx, n):
    """Row indices ``idx`` of a data set of ``n`` with negative ones counted from the end, as
    ``dataset[-1]`` does; IndexOutOfRangeError for one outside -n .. n - 1."""
    if idx.size == 0:
        return idx
    low, high = idx.min(), idx.max()
    if low < -n or high >= n:
        raise IndexOutOfRangeError(f"index {low if low < -n else high} is out of range for a data set of {n} "
                                   "samples")
    return idx + n * (idx < 0) if low < 0 else idx


# ---- loaders -------------------------------------------------------------------------------


class DataLoader:
    """Batches of a data set, prefetched in the background, like ``torch.utils.data.DataLoader``.

    A ``TensorDataset`` (or a ``Subset`` of one, whose indices are read at
    each ``iter()`` as PyTorch's loader reads them) with the default
    collation and automatic batching is gathered by ``num_threads`` C threads
    (by default one fewer than this rank's share of the cores, at most 4),
    helped by the thread waiting for a batch, straight into new batch tensors
    (pinned staging and a copy stream when ``device`` is a GPU), whatever
    ``num_workers`` says; negative indices count from the end, and one out of
    range is an ``IndexOutOfRangeError`` (an IndexError). Any other data
    set (a TensorDataset subclass overriding ``__getitem__`` or
    ``__getitems__`` too) is read with ``__getitem__`` (one call per batch to
    ``__getitems__(indices)`` where it has one, as in PyTorch, its result
    passed to ``collate_fn`` as it is; an ``IterableDataset`` by iterating
    it) and collated by ``collate_fn``; keys a sampler or batch_sampler
    yields that are not integers (names, floats, ``(index, size)`` pairs for
    multi-scale batches) are passed to it as they are, as in PyTorch (the C
    threads of a TensorDataset take integers only). With ``batch_size=None``
    each element the sampler yields is passed to ``dataset[...]`` as it is (a
    ``BatchSampler`` as ``sampler`` reads a batch with one call):

    - ``num_workers=N > 0``: in N worker processes, as PyTorch's: each has
      its own copy of the data set (inherited with the ``fork`` start method,
      pickled with ``spawn``), and runs ``worker_init_fn(id)`` after seeding
      ddpc's, Python's and numpy's global generators with ``base_seed + id``
      (PyTorch seeds numpy's from a hash of ``base_seed`` and ``id``, so the
      numpy numbers differ from PyTorch's workers'); ``get_worker_info()``
      tells a worker its id, the number of workers, its seed and its data
      set, e.g. to split an IterableDataset, which every worker otherwise
      reads whole; ``prefetch`` (``prefetch_factor``)
      batches per worker are asked for ahead and handed out in order; an
      exception in a worker is raised here with the worker's traceback (the
      next ``next()`` goes on with the batch after it, as in PyTorch), a
      worker that dies raises RuntimeError instead of hanging, and
      ``timeout`` > 0 bounds each wait for a batch; ``persistent_workers``
      keeps the workers from one pass to the next; ``multiprocessing_context``
      is a start method name or context (the default context otherwise);
    - ``num_workers=0``: in the thread that asks for each batch, as PyTorch
      does (for data sets tied to their thread, e.g. holding a connection);
    - ``num_workers`` left out (ddpc's default; the attribute reads 0): in
      one background thread of this process, ``prefetch`` batches ahead,
      where ``timeout`` bounds each wait. As with ``num_workers=0`` (and in
      PyTorch), ``worker_init_fn`` is not called, and an exception raised
      for one batch leaves the pass going on with the next.

    Batches of a TensorDataset are lists of ``ddpc.Tensor`` (one per array).
    ``device`` places batches on that device; ``pin_memory`` puts host
    batches in page-locked memory (in this process, after a worker made them).
    Experimental: with ``DDPC_LOADER_GPU_GATHER=1`` in the environment, a
    TensorDataset's batches for a CUDA ``device`` are gathered by the GPU
    itself, reading the arrays in place (registered with CUDA, over the bus)
    instead of threads staging them through pinned memory; a data set that
    does not allow it (a ``.npy`` file beyond the resident budget, memory
    another registration overlaps) is staged as before.
    ``generator`` draws the shuffle (see ``RandomSampler``) and, with
    workers, each pass's ``base_seed`` after it; the ``generator`` attribute
    is the ``ddpc.Generator`` drawing them (None: ddpc's global one). As in
    PyTorch, ``collate_fn`` reads ``default_collate`` (``default_convert``
    with ``batch_size=None``) where none is given, ``batch_sampler`` a
    ``BatchSampler`` over ``sampler`` where a ``batch_size`` is (made at
    each access: the loader itself reads the sampler's indices), and
    ``prefetch_factor`` None without worker processes. ``in_order=False`` lets
    workers' batches out as they are ready instead of in the sampler's order
    (a slow batch no longer holds up the ones after it); ``pin_memory_device``
    changes nothing. The arguments come in PyTorch's positional order;
    ddpc's own (``device``, ``prefetch``, ``num_threads``) are keyword-only.
    As PyTorch's, a ``sampler`` (or ``batch_sampler``) without ``__len__`` is
    read as the batches are asked for, so it may be endless, and the pass
    ends when it does (``len()`` of the loader is then a TypeError); ``len()``
    of an iterator is its pass's number of batches.

    ``state_dict()`` / ``load_state_dict()`` resume a pass interrupted in
    the middle (a job restarted from a checkpoint), worker processes' random
    number generators included: see there. An
    IterableDataset that defines ``state_dict()`` and ``load_state_dict()``
    is asked for its state after each batch is drawn (in the worker that
    draws it), and on resuming has ``load_state_dict`` called right before
    ``iter()``, which must go on from there (an ``iter()`` without it starts
    over); one without them is fast-forwarded.
    """

    __class_getitem__ = classmethod(types.GenericAlias)  # DataLoader[Batch], as PyTorch's

    def __init__(self, dataset, batch_size=1, shuffle=False, sampler=None, batch_sampler=None, num_workers=None,
                 collate_fn=None, pin_memory=False, drop_last=False, timeout=0, worker_init_fn=None,
                 multiprocessing_context=None, generator=None, *, prefetch_factor=None, persistent_workers=False,
                 pin_memory_device="", in_order=True, device=None, prefetch=2, num_threads=None):
        del pin_memory_device  # see the docstring
        self.in_order = bool(in_order)
        self.dataset = dataset
        self.generator = _pass_seeds(generator)
        self._iterable = isinstance(dataset, IterableDataset)
        if self._iterable:
            if shuffle or sampler is not None or batch_sampler is not None:
                raise ValueError("an IterableDataset is read in its own order: no shuffle, sampler or batch_sampler")
        elif sampler is None and batch_sampler is None and _length_of(dataset) == 0:
            # Only the default samplers read the length: a given one may index a data set without __len__.
            raise ValueError("the data set is empty")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler is mutually exclusive with batch_size, shuffle, sampler and drop_last")
            batch_size = None
        else:
            batch_size = None if batch_size is None else _positive_int(batch_size, "batch_size")
            if batch_size is None and drop_last:
                raise ValueError("batch_size=None (no automatic batching) is mutually exclusive with drop_last")
            if sampler is not None and shuffle:
                raise ValueError("sampler is mutually exclusive with shuffle")
            if sampler is None and not self._iterable:
                sampler = (RandomSampler(dataset, generator=self.generator) if shuffle
                           else SequentialSampler(dataset))
        self.batch_size = batch_size
        self.drop_last = bool(drop_last)
        self.sampler = sampler
        self._batch_sampler = batch_sampler
        batched = batch_size is not None or batch_sampler is not None
        self.collate_fn = collate_fn if collate_fn is not None else default_collate if batched else default_convert
        # The C threads gather a TensorDataset's batches as default_collate would collate them (see _array_rows).
        self._gathered = batched and self.collate_fn is default_collate
        self.pin_memory = bool(pin_memory)
        self.device = None if device is None else ordinal(device)
        if self.device == -1:
            self.device = None
        if self.device is not None and self.device >= _C.cuda_device_count():
            count = _C.cuda_device_count()
            raise RuntimeError(f"cuda:{self.device} was requested but "
                               + (f"this machine has {count} GPU(s)" if count else _C.cuda_unavailable_reason()))
        self.prefetch = _positive_int(prefetch if prefetch_factor is None else prefetch_factor, "prefetch")
        if num_workers is not None and (isinstance(num_workers, bool) or not isinstance(num_workers, numbers.Integral)
                                        or num_workers < 0):
            raise ValueError(f"num_workers must be an integer >= 0, got {num_workers!r}")
        if num_workers == 0 and prefetch_factor is not None:
            raise ValueError("prefetch_factor needs worker processes (num_workers > 0), as in PyTorch; prefetch= "
                             "sets how far ahead ddpc's own threads load")
        self.num_workers = num_workers or 0
        self._threaded = num_workers is None  # ddpc's default: a background thread, not the caller's
        if (persistent_workers or multiprocessing_context is not None) and not num_workers:
            raise ValueError("persistent_workers and multiprocessing_context need worker processes "
                             f"(num_workers > 0), got num_workers={num_workers!r}")
        self.persistent_workers = bool(persistent_workers)
        self.multiprocessing_context = multiprocessing_context
        self._context = context(multiprocessing_context) if num_workers else None
        self._pool = None
        if not isinstance(timeout, numbers.Real) or timeout < 0:
            raise ValueError(f"timeout must be >= 0, got {timeout!r}")
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        # The thread waiting for a batch gathers too: one thread fewer than this rank's cores, 1 to 4.
        self.num_threads = (max(1, min(4, _C.get_num_threads() - 1)) if num_threads is None
                            else _positive_int(num_threads, "num_threads"))
        self._progress = None  # the latest pass's
        self._resume = None  # a state load_state_dict took, for the next pass

    @property
    def batch_sampler(self):
        """The ``batch_sampler`` given; else, with a ``batch_size``, a BatchSampler over ``sampler`` (see above)."""
        return self._batch_sampler if self._batch_sampler is not None or self.batch_size is None or \
            self.sampler is None else BatchSampler(self.sampler, self.batch_size, self.drop_last)

    @property
    def prefetch_factor(self):
        """Batches asked for ahead per worker process; None without them, as in PyTorch."""
        return self.prefetch if self.num_workers else None

    def _plan(self):
        """The epoch's (indices, offsets): batch b is indices[offsets[b]:offsets[b + 1]].
        Without automatic batching the indices are a list of the sampler's elements as they are."""
        if self._batch_sampler is None:
            if self.batch_size is None:
                keys = list(self.sampler)
                return keys, np.arange(len(keys) + 1, dtype=np.int64)
            return _fixed_batches(_sampler_indices(self.sampler), self.batch_size, self.drop_last)
        if isinstance(self._batch_sampler, BatchSampler) and \
                type(self._batch_sampler).__iter__ is BatchSampler.__iter__:
            return self._batch_sampler.plan()
        batches = [list(b) for b in self._batch_sampler]
        offsets = np.zeros(len(batches) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in batches], out=offsets[1:])
        return _keys(list(itertools.chain.from_iterable(batches)), "batch_sampler"), offsets

    def __iter__(self):
        resume = self._resume if self._resume is not None and not self._resume["finished"] else None
        fetcher = _Fetcher(self.dataset, self.batch_size is not None or self._batch_sampler is not None,
                           self.batch_size, self.drop_last, self.collate_fn)
        if self._iterable:
            self._resume = None
            return self._stream(fetcher, resume)
        if resume is not None:
            self._check_sampler(resume)  # before the plan: a sampler repeating a pass does it once
        long = self._long_pass()
        if long is not None:
            self._resume = None
            return self._drawn_pass(fetcher, resume, *long)
        idx, offsets = self._plan()
        self._resume = None
        nb = len(offsets) - 1
        done, ahead = _resumed_at(resume, nb)
        order = np.setdiff1d(np.arange(done, nb, dtype=np.int64), np.asarray(ahead, dtype=np.int64),
                             assume_unique=True)
        progress = _Progress(order, nb, done, ahead, base_seed=None if resume is None else resume["base_seed"])
        self._progress = progress
        ds, rows = _array_rows(self.dataset) if self._gathered else (None, None)
        if ds is not None:
            if not isinstance(idx, np.ndarray):
                try:
                    _int_indices(idx, "sampler" if self._batch_sampler is None else "batch_sampler")
                except TypeError as error:
                    raise TypeError(f"{error}: a TensorDataset's rows are gathered by C threads, which take "
                                    "integer indices only") from None
            # Skipped batches are left out of the plan, so their rows are never gathered.
            idx, offsets = (idx, offsets[done:]) if not ahead else _select_batches(idx, offsets, order)
            if rows is not None:
                idx = rows[_wrapped(idx, len(rows))]
            idx = _wrapped(idx, len(ds))
            loader = _C.Loader(ds._buffers, ds._file_backed, idx, offsets, self.prefetch, self.num_threads,
                               self.device, self.pin_memory, RESIDENT_BUDGET,
                               gpu_gather=os.environ.get("DDPC_LOADER_GPU_GATHER") == "1")
            if loader.stats()["direct"]:
                # The arrays stay registered with CUDA while a loader over them
                # lives: keeping this pass's until the next one is made spares
                # each epoch registering them again.
                self._direct_loader = loader
            batches = _ArrayBatches(loader, ds._widen)
            batches._progress = progress
            return batches
        idx = _key_list(idx)
        tasks = [idx[offsets[b]:offsets[b + 1]] for b in order.tolist()]
        if self.num_workers:
            return self._in_workers(fetcher, list(zip(order.tolist(), tasks)), progress, resume)
        return self._batches(lambda task: (self._finish(fetcher.fetch(task[1])), (task[0], None, None, None)),
                             enumerate(tasks), len(tasks), progress, resume)

    def _long_pass(self):
        """(draw, number of batches) where the pass is drawn as its batches are
        asked for instead of planned up front: its sampler is too long to plan,
        or it (or a batch_sampler of the user's) has no length, so may never end
        (the number of batches is then None); else None. ``draw(skip)`` gives
        the pass's (batch number, indices) from batch ``skip`` on."""
        bs = self._batch_sampler
        if bs is None and self.batch_size is not None:
            sampler, size, drop = self.sampler, self.batch_size, self.drop_last
        elif isinstance(bs, BatchSampler) and type(bs).__iter__ is BatchSampler.__iter__:
            sampler, size, drop = bs.sampler, bs.batch_size, bs.drop_last
        else:  # the sampler's elements as they are (no automatic batching), or a batch_sampler's lists
            source = self.sampler if bs is None else bs
            if _length(source) is not None:
                return None
            tasks = ([key] for key in source) if bs is None else \
                (_key_list(_keys(list(b), "batch_sampler")) for b in source)
            return (lambda skip: itertools.islice(enumerate(tasks), skip, None)), None
        if not _is_long(sampler):
            return None
        n = _length(sampler)
        nb = None if n is None else n // size if drop else -(-n // size)
        return (lambda skip: ((b, _key_list(batch)) for b, batch in _drawn_batches(sampler, size, drop, skip))), nb

    def _drawn_pass(self, fetcher, resume, draw, nb):
        """A pass drawn as it goes (see _long_pass): each batch fetched as a
        generic data set's (arrays too); ``nb`` batches, or None where it ends
        when its sampler ends."""
        done, ahead = _resumed_at(resume, nb)
        skip = set(ahead)
        progress = _Progress(_Order(done, skip), nb, done, ahead,
                             base_seed=None if resume is None else resume["base_seed"])
        self._progress = progress
        tasks = ((b, indices) for b, indices in draw(done) if b not in skip)
        remaining = 0 if nb is None else nb - done - len(skip)  # (only a length hint)
        if self.num_workers:
            return self._in_workers(fetcher, tasks, progress, resume, remaining)
        return self._batches(lambda task: (self._finish(fetcher.fetch(task[1][1])), (task[0], None, None, None)),
                             enumerate(tasks), remaining, progress, resume)

    def _stream(self, fetcher, resume):
        """A pass over an IterableDataset, from the start or from where ``resume`` says it was."""
        streams = [[0, None] for _ in range(max(self.num_workers, 1))]
        progress = _Progress(None, None, streams=streams)
        if resume is not None:
            progress.done, progress.schedule = resume["batches_yielded"], resume["schedule"]
            progress.streams, progress.base_seed = [list(s) for s in resume["streams"]], resume["base_seed"]
        self._progress = progress
        if self.num_workers:
            return self._in_workers(fetcher, None, progress, resume)
        stream = fetcher.open(*progress.streams[0])

        def draws():
            while (samples := fetcher.draw(stream)) is not fetcher.END:
                yield samples, fetcher.stream_state()

        return self._batches(lambda item: (self._finish(fetcher.collate_fn(item[0])), (None, None, item[1], None)),
                             draws(), max(self._length_or(0) - progress.done, 0), progress, resume)

    def _in_workers(self, fetcher, tasks, progress, resume, remaining=None):
        # Where each worker's generators stood; from an earlier ddpc or another number of workers, as seeded.
        saved = None if resume is None else resume["worker_rng"]
        rng = [rng_snapshot(r, "DataLoader") for r in saved] if saved and len(saved) == self.num_workers else None
        pool, owned = self._workers(fetcher, None if resume is None else resume["base_seed"], rng)
        progress.base_seed = pool.seed
        start = schedule = None
        if resume is not None and self._iterable:
            start, schedule = [tuple(s) for s in resume["streams"]], resume["schedule"]
        if remaining is None:
            remaining = len(tasks) if tasks is not None else max(self._length_or(0) - progress.done, 0)
        batches = _WorkerBatches(pool, tasks, self.prefetch, self.timeout, self._finish, owned, remaining,
                                 self.in_order, start, schedule)
        progress.rng = rng or batches.starts
        batches._progress = progress
        return batches

    def _batches(self, fetch, batches, remaining, progress, resume):
        if self._threaded:
            if progress.base_seed is None:
                progress.base_seed = _next_seed(self.generator)
            elif resume is not None:  # a resumed pass keeps the seed its thread had, and goes on from where it stood
                progress.thread_offset = resume["thread_rng_offset"]
            batches = _ThreadedBatches(fetch, batches, self.prefetch, remaining, self.timeout, progress.base_seed,
                                       progress.thread_offset or 0)
        else:
            batches = _CallerBatches(fetch, batches, remaining)
        batches._progress = progress
        return batches

    def _finish(self, batch):
        return _move(batch, self.device, self.pin_memory)

    def _workers(self, fetcher, seed=None, rng=None):
        """(pool, owned): a new pool of worker processes for one pass (their base
        seed ``seed``, else a fresh one; ``rng``: each one's generators to set before
        its first task), or the loader's own with ``persistent_workers`` (started
        afresh for a resumed pass: its workers begin as seeded, or as ``rng`` says)."""
        if self.persistent_workers and self._pool is not None and self._pool.alive:
            if seed is None:
                return self._pool, False
            self._pool.close()
        seed = _next_seed(self.generator) if seed is None else seed
        self.check_worker_number_rationality()
        pool = WorkerPool(fetcher, self.num_workers, seed, self.worker_init_fn, self._context, rng)
        if not self.persistent_workers:
            return pool, True
        self._pool = pool
        return pool, False

    def check_worker_number_rationality(self):
        """Warns, as PyTorch's DataLoader does when it starts its workers, where
        ``num_workers`` is more than the CPUs this process may run on."""
        if not self.num_workers:
            return
        cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
        if cpus is not None and self.num_workers <= cpus:
            return
        suggestion = ("DataLoader is not able to compute a suggested max number of worker in current system."
                      if cpus is None else
                      f"Our suggested max number of worker in current system is {cpus}"
                      f"{'' if hasattr(os, 'sched_getaffinity') else ' (`cpuset` is not taken into account)'}, "
                      "which is smaller than what this DataLoader is going to create.")
        warnings.warn(f"This DataLoader will create {self.num_workers} worker processes in total. {suggestion} "
                      "Please be aware that excessive worker creation might get DataLoader running slow or even "
                      "freeze, lower the worker number to avoid potential slowness/freeze if necessary.",
                      UserWarning, stacklevel=3)

    def _length_or(self, default):
        try:
            return len(self)
        except TypeError:
            return default

    # ---- resuming mid-epoch -------------------------------------------------------------------

    _STATE_KEYS = ("batch_size", "drop_last", "dataset_length", "num_replicas", "rank", "num_workers",
                   "num_batches", "batches_yielded", "batches_ahead", "finished", "sampler", "generator",
                   "base_seed", "streams", "schedule")

    def _index_sampler(self):
        return self.sampler if self._batch_sampler is None else self._batch_sampler

    def _shape(self):
        """What a state must have been taken from a loader alike in: the batching, the
        data set's length, the rank's share, and for a stream the worker count."""
        given = self._batch_sampler
        sampler = self.sampler if given is None else getattr(given, "sampler", None)
        batch_size = self.batch_size if given is None else getattr(given, "batch_size", None)
        drop_last = self.drop_last if given is None else getattr(given, "drop_last", None)
        try:
            length = len(self.dataset)
        except (TypeError, NotImplementedError):
            length = None
        return {"batch_size": batch_size, "drop_last": drop_last, "dataset_length": length,
                "num_replicas": getattr(sampler, "num_replicas", None), "rank": getattr(sampler, "rank", None),
                "num_workers": self.num_workers if self._iterable else None}

    def state_dict(self):
        """Where the current pass stands, as torchdata's ``StatefulDataLoader``:
        the batches handed out so far (batches prefetched but not yet handed
        out do not count), the sampler's ``state_dict()`` (for ddpc's samplers,
        the epoch, or a pass's seed and generator state), and for an
        IterableDataset each stream's position. ``load_state_dict`` of it, in
        a loader made alike (the next process of a restarted job), makes the
        next ``iter()`` hand out the rest of that pass, the batches an
        uninterrupted loader would have handed out next in the same order;
        a state taken after a pass ended makes the next ``iter()`` a new pass
        as usual. With worker processes it also holds, in ``worker_rng``,
        each worker's random number generators (ddpc's, Python's ``random``
        and numpy's global one, a few KB) as they stood before the first of
        its batches not yet handed out, and with the background thread, in
        ``thread_rng_offset``, its generator's offset after the last batch
        handed out. A plain dict of ints, bytes, lists and
        the samplers' and data sets' states, for ``ddpc.save`` /
        ``ddpc.checkpoint.save``."""
        if self._resume is not None:  # loaded, not iterated yet
            return copy.deepcopy(self._resume)
        progress = self._progress
        sampler = self._index_sampler()
        method = getattr(sampler, "state_dict", None)
        state = self._shape()
        state.update({
            "num_batches": progress.num_batches if progress is not None and progress.order is not None
            else (None if self._iterable else self._length_or(None)),
            "batches_yielded": 0 if progress is None else progress.done,
            "batches_ahead": [] if progress is None else sorted(progress.ahead),
            "finished": False if progress is None else progress.finished,
            "sampler": method() if callable(method) else None,
            "generator": _generator_state(self.generator),
            "base_seed": None if progress is None else progress.base_seed,
            "streams": None if progress is None or progress.streams is None
            else [list(stream) for stream in progress.streams],
            "schedule": None if progress is None else copy.deepcopy(progress.schedule),
            "worker_rng": None if progress is None or progress.rng is None or progress.finished
            else [rng_state(r) for r in progress.rng],
            "thread_rng_offset": None if progress is None or progress.finished else progress.thread_offset,
        })
        return state

    def load_state_dict(self, state_dict):
        """Restores a ``state_dict()`` (see there). The sampler's state is loaded at
        once (calling ``set_epoch`` with the saved epoch afterwards changes
        nothing; another epoch is an error at ``iter()``), and the loader's
        generator's. A state from a loader with another batch size, drop_last,
        data set length, world size or rank (or, over an IterableDataset,
        number of workers) is refused.

        How the rest of the pass is found: the sampler gives the pass's
        indices again (ddpc's samplers give the same ones after their
        ``load_state_dict``; a sampler without one must be deterministic for
        the pass to match) and the batches handed out are skipped, never read
        or gathered. An IterableDataset with ``state_dict``/``load_state_dict``
        has, in each stream (each worker's), ``load_state_dict`` of the state
        it returned after the last batch handed out called before ``iter()``;
        one without them is read again from its start and the batches handed
        out are drawn and dropped (not collated). With worker processes and
        ``in_order=False`` the batches handed out need not be a prefix of the
        pass: the state lists those beyond it and the resumed pass skips them
        too, so every batch is still handed out once (the order of the rest is
        as they come, as always with ``in_order=False``).

        Worker processes get the base seed of the interrupted pass again, and
        each one's generators are set where they stood before the first of its
        batches not handed out (batch b of a map-style pass is made by worker
        b % num_workers, resumed or not; a stream's worker is set once its
        data set is restored or fast-forwarded), so a data set drawing random
        augmentation from ``ddpc.rand``, ``random`` or ``numpy.random`` hands
        out, batch for batch, what an uninterrupted pass would have, and with
        ``persistent_workers`` the passes after it too (a persistent pool is
        started afresh for a resumed pass). torchdata's StatefulDataLoader
        restores the base seed only, so its workers' draws start over from it
        after a resume, as they do here for a state without ``worker_rng``
        (from ddpc before it) or from a loader with another number of
        workers. Generators of the data set's own (a ``numpy.random.Generator``
        it holds) are its state to keep. Without worker processes the data set
        draws from this process's generators: with ``num_workers=0`` each batch
        is made when asked for, so the generator states a checkpoint saves
        with the loader's (``ddpc.get_rng_state()``, ``random.getstate()``,
        ``numpy.random.get_state()``) carry the draws on; the background
        thread (``num_workers`` left out) draws from a ddpc generator of its
        own, which a resumed pass starts where it stood after the last batch
        handed out (``thread_rng_offset``), so its ``ddpc`` draws resume
        exactly too (Python's ``random`` and numpy's global generator, which
        it shares with this process, do not).
        """
        values = dict(zip(self._STATE_KEYS, _state_entries(state_dict, "DataLoader", self._STATE_KEYS)))
        for key in ("worker_rng", "thread_rng_offset"):  # absent from states of ddpc before them
            values[key] = state_dict.get(key)
        for key, what in (("batch_size", "batch size"), ("drop_last", "drop_last"),
                          ("dataset_length", "data set length"), ("num_replicas", "world size (num_replicas)"),
                          ("rank", "rank"), ("num_workers", "number of workers")):
            saved, mine = values[key], self._shape()[key]
            if saved != mine:
                hint = (" (each rank loads its own loader's state: see ddpc.checkpoint.loader_state)"
                        if key == "rank" else "")
                raise ValueError(f"DataLoader.load_state_dict: the state was taken from a loader with {what} "
                                 f"{saved!r}, but this one has {mine!r}{hint}")
        done = _int_entry(values["batches_yielded"], "batches_yielded", "DataLoader")
        if not isinstance(values["finished"], bool):
            raise ValueError(f"DataLoader.load_state_dict: finished must be a bool, got {values['finished']!r}")
        nb = values["num_batches"]
        if nb is not None and (_int_entry(nb, "num_batches", "DataLoader") < done):
            raise ValueError(f"DataLoader.load_state_dict: {done} batches handed out of a pass of {nb}")
        ahead = values["batches_ahead"]
        if not isinstance(ahead, (list, tuple)) or any(
                isinstance(b, bool) or not isinstance(b, numbers.Integral) or not done < b
                or (nb is not None and b >= nb) or values["streams"] is not None for b in ahead):
            raise ValueError(f"DataLoader.load_state_dict: batches_ahead must list batch numbers after the "
                             f"{done} handed out{'' if nb is None else f' and below {nb}'}, got {ahead!r}")
        streams = values["streams"]
        if streams is not None and (
                not self._iterable or not isinstance(streams, (list, tuple))
                or len(streams) != max(self.num_workers, 1)
                or any(not isinstance(s, (list, tuple)) or len(s) != 2 for s in streams)):
            raise ValueError(f"DataLoader.load_state_dict: streams must be one [batches, state] per worker "
                             f"of a loader over an IterableDataset, got {streams!r}")
        for s in streams or ():
            _int_entry(s[0], "a stream's batch count", "DataLoader")
        worker_rng = values["worker_rng"]
        if worker_rng is not None:
            if not isinstance(worker_rng, (list, tuple)) or not worker_rng:
                raise ValueError(f"DataLoader.load_state_dict: worker_rng must list each worker's generators, "
                                 f"got {worker_rng!r:.200}")
            for r in worker_rng:
                rng_snapshot(r, "DataLoader")
        schedule = values["schedule"]
        if schedule is not None and (not isinstance(schedule, collections.abc.Mapping)
                                     or sorted(schedule) != ["active", "pending", "turn"]):
            raise ValueError(f"DataLoader.load_state_dict: schedule must be a dict of active, turn and pending, "
                             f"got {schedule!r}")
        for key in ("base_seed", "thread_rng_offset"):
            if values[key] is not None:
                _int_entry(values[key], key, "DataLoader")
        sampler_state = values["sampler"]
        if sampler_state is not None:
            sampler = self._index_sampler()
            if not callable(getattr(sampler, "load_state_dict", None)):
                raise ValueError(f"DataLoader.load_state_dict: the state holds a sampler's state, but this "
                                 f"loader's {type(sampler).__name__} has no load_state_dict")
            sampler.load_state_dict(_without_pass_seed(sampler_state) if values["finished"] else sampler_state)
        _set_generator_state(self.generator, values["generator"], "DataLoader")
        self._resume = copy.deepcopy(values)
        self._resume["batches_ahead"] = sorted(int(b) for b in ahead)

    def _check_sampler(self, resume):
        """Refuses to resume a pass whose sampler was since moved to another epoch."""
        saved = resume["sampler"]
        method = getattr(self._index_sampler(), "state_dict", None)
        if saved is None or not callable(method) or method() == saved:
            return
        raise ValueError(f"DataLoader: the state was taken in a pass with sampler state {saved!r}, but the sampler "
                         f"is now at {method()!r} (set_epoch to another epoch after load_state_dict?): call "
                         "set_epoch with the saved epoch, or none, before iterating a resumed loader")

    def __len__(self):
        if self._batch_sampler is not None:
            return len(self._batch_sampler)
        if self._iterable:
            try:
                n = len(self.dataset)
            except (NotImplementedError, TypeError):
                raise TypeError(f"{type(self.dataset).__name__} has no len(), nor has its loader") from None
        else:
            n = len(self.sampler)
        if self.batch_size is None:
            return n
        return n // self.batch_size if self.drop_last else -(-n // self.batch_size)


class ShardedLoader:
    """DataLoader + DistributedSampler over arrays or ``.npy`` files, in one line.

    ``sources`` is one array/tensor/path (batches are single tensors) or a list or
    tuple of them (batches are lists). Each rank gets its DistributedSampler share
    (``rank`` and ``world_size`` default to the process group); ``drop_last`` drops
    both the uneven tail across ranks and each rank's last incomplete batch. A
    ``sampler`` replaces the DistributedSampler, e.g. ``RandomSampler(n, seed=s)``
    when every rank passes a data set of its own. ``set_epoch(e)`` reshuffles.
    """

    def __init__(self, sources, batch_size, shuffle=True, seed=0, drop_last=False, rank=None, world_size=None,
                 device=None, prefetch=2, sampler=None):
        self._single = not isinstance(sources, (list, tuple))
        self.dataset = TensorDataset(*([sources] if self._single else sources))
        if len(self.dataset) == 0:
            raise ValueError("the data set is empty")
        batch_size = _positive_int(batch_size, "batch_size")
        if sampler is None:
            sampler = DistributedSampler(len(self.dataset), world_size, rank, shuffle, seed, drop_last)
        self.sampler = sampler
        self.loader = DataLoader(self.dataset, batch_size, sampler=sampler, drop_last=drop_last, device=device,
                                 prefetch=prefetch)

    def set_epoch(self, epoch):
        if hasattr(self.sampler, "set_epoch"):
            self.sampler.set_epoch(epoch)

    def state_dict(self):
        """The DataLoader's ``state_dict()``: where the current pass stands."""
        return self.loader.state_dict()

    def load_state_dict(self, state_dict):
        """Makes the next ``iter()`` hand out the rest of the pass ``state_dict`` was taken in."""
        self.loader.load_state_dict(state_dict)

    def __iter__(self):
        batches = iter(self.loader)
        if not self._single:
            return batches
        return _Single(batches)

    def __len__(self):
        return len(self.loader)


class _Single:
    def __init__(self, batches):
        self._batches = batches

    def __iter__(self):
        return self

    def __next__(self):
        return next(self._batches)[0]

    def __len__(self):
        return len(self._batches)

    def close(self):
        self._batches.close()
