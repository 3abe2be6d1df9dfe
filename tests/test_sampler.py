"""Samplers: DistributedSampler against PyTorch's documented rule, and the
properties every sampler promises (lengths, disjoint shares, shared shuffles)."""

import math
import sys
import types

import numpy as np
import pytest

import ddpc
from ddpc import _C
from ddpc.data import (BalancedDistributedSampler, BatchSampler, DistributedSampler, RandomSampler, SequentialSampler,
                       WeightedDistributedSampler)


def torch_rule(n, R, rank, drop_last, order=None):
    """PyTorch's DistributedSampler.__iter__, transcribed from its documentation and source."""
    if drop_last and n % R != 0:
        num_samples = math.ceil((n - R) / R)
    else:
        num_samples = math.ceil(n / R)
    total_size = num_samples * R
    indices = list(range(n)) if order is None else list(order)
    if not drop_last:
        padding_size = total_size - len(indices)
        if padding_size <= len(indices):
            indices += indices[:padding_size]
        else:
            indices += (indices * math.ceil(padding_size / len(indices)))[:padding_size]
    else:
        indices = indices[:total_size]
    assert len(indices) == total_size
    return indices[rank:total_size:R]


CASES = [(n, R, drop) for n in list(range(1, 30)) + [97, 128, 1000] for R in (1, 2, 3, 4, 7, 8, 31) for drop in (0, 1)]


@pytest.mark.parametrize("n,R,drop_last", CASES)
def test_without_shuffle_equals_pytorch_rule(n, R, drop_last):
    for rank in range(R):
        s = DistributedSampler(n, num_replicas=R, rank=rank, shuffle=False, drop_last=bool(drop_last))
        assert list(s) == torch_rule(n, R, rank, drop_last)
        assert len(s) == len(torch_rule(n, R, rank, drop_last))


@pytest.mark.parametrize("n,R,drop_last", CASES[::3])
@pytest.mark.parametrize("seed,epoch", [(0, 0), (1, 5), (2**63 + 11, 3)])
def test_shuffled_properties(n, R, drop_last, seed, epoch):
    lists = []
    for rank in range(R):
        s = DistributedSampler(n, num_replicas=R, rank=rank, shuffle=True, seed=seed, drop_last=bool(drop_last))
        s.set_epoch(epoch)
        lists.append(s.indices())
    lengths = {len(x) for x in lists}
    assert len(lengths) == 1  # equal per-rank lengths
    num = lengths.pop()
    # Interleave the ranks back into the global list: it is one permutation,
    # padded by wrapping around, so every rank used the same shuffle.
    merged = np.empty(num * R, dtype=np.int64)
    for rank, x in enumerate(lists):
        merged[rank::R] = x
    if drop_last:
        assert len(set(merged.tolist())) == len(merged)  # disjoint
        assert len(merged) == (n // R) * R
    else:
        head = merged[:n]
        assert sorted(head.tolist()) == list(range(n))  # disjoint before padding, covering the data set
        assert merged[n:].tolist() == [head[i % n] for i in range(len(merged) - n)]
        order = head
        for rank in range(R):
            assert lists[rank].tolist() == torch_rule(n, R, rank, False, order)


def test_shuffle_is_seed_plus_epoch_and_changes_across_epochs():
    a = DistributedSampler(100, 4, 1, seed=3)
    b = DistributedSampler(100, 4, 1, seed=4)
    a.set_epoch(1)
    assert a.indices().tolist() == b.indices().tolist()
    first = a.indices().tolist()
    a.set_epoch(2)
    assert a.indices().tolist() != first
    a.set_epoch(1)
    assert a.indices().tolist() == first


def test_permutation_generator_is_stable():
    """The documented generator: these numbers must never change between versions."""
    s = DistributedSampler(10, num_replicas=1, rank=0, shuffle=True, seed=0)
    assert s.indices().tolist() == STABLE_PERM_10_SEED_0
    buf = _C.Buffer((1000,), "int64")
    _C.randperm(buf, 12345, 0)
    assert DistributedSampler(1000, 1, 0, seed=12345).indices().tolist() == np.asarray(buf).tolist()


def reference_permutation(n, seed):
    """The generator as documented in ddpc.data, in pure Python."""
    M = (1 << 64) - 1

    def bits(counter):
        z = (seed * 0x9E3779B97F4A7C15 + counter * 0xD1B54A32D192ED03 + 0x632BE59BD9B4E019) & M
        z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M
        z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M
        return z ^ (z >> 31)

    p = list(range(n))
    for i in range(n - 1, 0, -1):
        j = (bits(i) * (i + 1)) >> 64
        p[i], p[j] = p[j], p[i]
    return p


STABLE_PERM_10_SEED_0 = reference_permutation(10, 0)


@pytest.mark.parametrize("n,seed", [(1, 0), (2, 9), (50, 7), (333, 2**64 - 1)])
def test_permutation_matches_documented_algorithm(n, seed):
    assert DistributedSampler(n, 1, 0, seed=seed).indices().tolist() == reference_permutation(n, seed)


def test_group_defaults(monkeypatch):
    s = DistributedSampler(10)
    assert (s.num_replicas, s.rank) == (1, 0)
    fake = types.ModuleType("ddpc.distributed")
    fake.is_initialized = lambda: True
    fake.get_world_size = lambda: 4
    fake.get_rank = lambda: 3
    monkeypatch.setitem(sys.modules, "ddpc.distributed", fake)
    monkeypatch.setattr(ddpc, "distributed", fake, raising=False)
    s = DistributedSampler(10, shuffle=False)
    assert (s.num_replicas, s.rank) == (4, 3)
    assert list(s) == torch_rule(10, 4, 3, False)
    assert DistributedSampler(10, rank=0).rank == 0


@pytest.mark.parametrize("kwargs,match", [
    (dict(num_replicas=2, rank=2), "rank 2 is out of range"),
    (dict(num_replicas=2, rank=-1), "out of range"),
    (dict(num_replicas=0, rank=0), "num_replicas"),
])
def test_distributed_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        DistributedSampler(10, **kwargs)


def test_sequential_random_and_batch_samplers():
    assert list(SequentialSampler(range(5))) == [0, 1, 2, 3, 4]
    r = RandomSampler(range(50), seed=1)
    first = list(r)
    assert sorted(first) == list(range(50)) and first != list(range(50))
    assert list(r) == first
    r.set_epoch(1)
    assert list(r) != first
    ddpc.manual_seed(5)
    a = list(RandomSampler(range(20)))
    ddpc.manual_seed(5)
    assert list(RandomSampler(range(20))) == a
    longer = list(RandomSampler(range(10), num_samples=25, seed=2))
    assert len(longer) == 25 and sorted(longer[:10]) == list(range(10)) and sorted(longer[10:20]) == list(range(10))
    drawn = list(RandomSampler(range(10), replacement=True, num_samples=1000, seed=3))
    assert len(drawn) == 1000 and set(drawn) == set(range(10))
    assert list(BatchSampler(SequentialSampler(range(10)), 3, drop_last=False)) == \
        [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
    assert list(BatchSampler(SequentialSampler(range(10)), 3, drop_last=True)) == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert len(BatchSampler(range(10), 3, False)) == 4 and len(BatchSampler(range(10), 3, True)) == 3
    assert list(BatchSampler(range(5), 2, False)) == [[0, 1], [2, 3], [4]]  # any iterable of indices
    with pytest.raises(ValueError, match="batch_size"):
        BatchSampler(range(10), 0, False)


def test_weighted_sampler_follows_weights_across_ranks():
    w = np.array([1.0, 0.0, 2.0, 5.0, 2.0])
    R, total = 4, 40000
    draws = [WeightedDistributedSampler(w, total, num_replicas=R, rank=r, seed=7).indices() for r in range(R)]
    assert {len(d) for d in draws} == {total // R}
    single = WeightedDistributedSampler(w, total, num_replicas=1, rank=0, seed=7).indices()
    merged = np.empty(total, dtype=np.int64)
    for r, d in enumerate(draws):
        merged[r::R] = d
    assert (merged == single).all()  # the ranks' draws together are the one-process draw
    freq = np.bincount(merged, minlength=len(w)) / total
    assert freq[1] == 0
    assert np.abs(freq - w / w.sum()).max() < 0.01
    s = WeightedDistributedSampler(w, 10, num_replicas=3, rank=0, seed=7)
    assert len(s) == 4 and len(list(s)) == 4
    s.set_epoch(1)
    assert len(WeightedDistributedSampler(w, 10, num_replicas=3, rank=0, drop_last=True)) == 3


def test_weighted_sampler_without_replacement():
    w = np.arange(20, dtype=np.float64)  # index 0 has weight 0
    R = 3
    shares = [WeightedDistributedSampler(w, 18, replacement=False, num_replicas=R, rank=r, seed=1).indices()
              for r in range(R)]
    union = np.concatenate(shares)
    assert len(union) == 18 and len(set(union.tolist())) == 18 and 0 not in union
    with pytest.raises(ValueError, match="without replacement"):
        WeightedDistributedSampler(w, 20, replacement=False, num_replicas=1, rank=0)
    with pytest.raises(ValueError, match="weights"):
        WeightedDistributedSampler([0.0, 0.0], 2)
    with pytest.raises(ValueError, match="weights"):
        WeightedDistributedSampler([1.0, -1.0], 2)


@pytest.mark.parametrize("n,R,B,drop_last",
                         [(1000, 4, 8, False), (999, 3, 16, False), (50, 4, 5, True), (7, 8, 2, False)])
def test_balanced_sampler(n, R, B, drop_last):
    rng = np.random.default_rng(0)
    costs = rng.integers(1, 500, size=n).astype(np.float64)
    plain = [DistributedSampler(n, R, r, seed=4, drop_last=drop_last).indices() for r in range(R)]
    bal = [BalancedDistributedSampler(costs, B, num_replicas=R, rank=r, seed=4, drop_last=drop_last) for r in range(R)]
    lists = [b.indices() for b in bal]
    num = len(plain[0])
    assert all(len(x) == num == len(b) for x, b in zip(lists, bal))
    loads = []
    for s0 in range(0, num, B):
        # The step holds the same samples DistributedSampler gives; only who gets them changes.
        assert sorted(np.concatenate([x[s0:s0 + B] for x in lists]).tolist()) == \
            sorted(np.concatenate([x[s0:s0 + B] for x in plain]).tolist())
        step = [costs[x[s0:s0 + B]].sum() for x in lists]
        loads.append(max(step) / np.mean(step))
    stats = bal[0].imbalance()
    assert stats == bal[R - 1].imbalance()
    assert stats["worst"] == pytest.approx(max(loads))
    assert stats["mean"] == pytest.approx(np.mean(loads))
    assert stats["mean"] <= stats["unbalanced_mean"]
    if n >= 999:
        assert stats["mean"] < 1.02 < stats["unbalanced_mean"]


def test_balanced_sampler_errors():
    with pytest.raises(ValueError, match="costs"):
        BalancedDistributedSampler([1.0, np.nan], 2, num_replicas=1, rank=0)
    with pytest.raises(ValueError, match="batch_size"):
        BalancedDistributedSampler([1.0, 2.0], 0, num_replicas=1, rank=0)
    with pytest.raises(ValueError, match="rank"):
        BalancedDistributedSampler([1.0, 2.0], 1, num_replicas=2, rank=5)


def test_balanced_sampler_batch_larger_than_the_data_set():
    """A batch bigger than a rank's share is one step holding all of it (no overflow for huge sizes)."""
    plain = DistributedSampler(10, num_replicas=2, rank=1, shuffle=False).indices()
    for bs in (7, 2**61, 2**63 - 1):
        s = BalancedDistributedSampler(np.ones(10), bs, num_replicas=2, rank=1, shuffle=False)
        assert sorted(s.indices().tolist()) == sorted(plain.tolist())
