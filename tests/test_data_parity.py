"""ddpc.data where it follows torch.utils.data closely: which data sets the C
threads gather, Subset indices read at each pass, samplers of index lists
without automatic batching, collation of bools, strings, None and the
integer dtypes ddpc widens, worker_init_fn only in worker processes, a failed
batch that leaves the pass going, and the DataLoader's arguments and
attributes. Expected values are worked out by hand (the comparison with
PyTorch itself is in the *_torch.py files)."""

import collections
import math

import numpy as np
import pytest

import ddpc
from ddpc import data
from ddpc.data import (BatchSampler, DataLoader, Dataset, IterableDataset, SequentialSampler, Subset, TensorDataset,
                       default_collate, default_convert, get_worker_info, random_split)

MODES = [dict(num_workers=0), dict(), dict(num_workers=2)]  # caller, background thread, worker processes


def values(loader):
    return [np.asarray(b[0]).tolist() for b in loader]


def test_a_tensor_dataset_subclass_overriding_getitems_is_read_through_it():
    class Negated(TensorDataset):  # batched augmentation: __getitems__ alone is overridden
        def __getitems__(self, indices):
            return [(-self.tensors[0][i],) for i in indices]

    x = np.arange(6, dtype=np.float32)
    assert data._array_rows(Negated(x)) == (None, None)
    assert values(DataLoader(Negated(x), batch_size=4, num_workers=0)) == [[-0.0, -1.0, -2.0, -3.0], [-4.0, -5.0]]
    assert data._array_rows(TensorDataset(x))[0] is not None  # the plain class still goes to the C threads


def test_subset_indices_are_read_at_each_pass():
    sub = Subset(TensorDataset(np.arange(10, dtype=np.int64) * 10), [0, 1])
    loader = DataLoader(sub, batch_size=2)
    assert values(loader) == [[0, 10]]
    sub.indices = [7, 8]  # same length, other samples
    assert values(loader) == [[70, 80]]
    sub.indices = [9, 8, 7]  # grown: len() follows
    assert len(loader) == 2 and values(loader) == [[90, 80], [70]]
    sub.indices.append(1)  # changed in place
    assert len(loader) == 2 and values(loader) == [[90, 80], [70, 10]]
    outer = Subset(sub, [3, 0])
    assert values(DataLoader(outer, batch_size=2)) == [[10, 90]]


class Batched(Dataset):
    """Reads a whole list of indices in one __getitem__ (PyTorch's batched-read pattern); keys may be strings."""

    def __len__(self):
        return 8

    def __getitem__(self, key):
        if isinstance(key, str):
            return {"idx": np.asarray([ord(key)]), "x": np.zeros(1, np.float32)}
        return {"idx": np.asarray(key, dtype=np.int64), "x": np.asarray(key, dtype=np.float32) * 10}


@pytest.mark.parametrize("mode", MODES, ids=["caller", "thread", "workers"])
def test_a_sampler_of_index_lists_without_batching_passes_each_list_as_it_is(mode):
    sampler = BatchSampler(SequentialSampler(range(7)), batch_size=3, drop_last=False)
    loader = DataLoader(Batched(), sampler=sampler, batch_size=None, **mode)
    got = list(loader)
    assert len(loader) == 3
    assert [b["idx"].tolist() for b in got] == [[0, 1, 2], [3, 4, 5], [6]]
    assert [b["x"].tolist() for b in got] == [[0.0, 10.0, 20.0], [30.0, 40.0, 50.0], [60.0]]
    strings = DataLoader(Batched(), sampler=["a", "b"], batch_size=None, **mode)
    assert [b["idx"].tolist() for b in strings] == [[97], [98]]


def test_a_sampler_of_index_lists_with_a_batch_size_is_an_error_not_flattened():
    sampler = BatchSampler(SequentialSampler(range(8)), batch_size=4, drop_last=False)
    with pytest.raises(TypeError, match="batch_size=None"):
        list(DataLoader(TensorDataset(np.arange(8.0)), sampler=sampler, batch_size=2))
    ragged = BatchSampler(SequentialSampler(range(7)), batch_size=4, drop_last=False)
    with pytest.raises(TypeError, match="batch_size=None"):
        list(DataLoader(TensorDataset(np.arange(8.0)), sampler=ragged, batch_size=2))
    # Integer indices without batching still read one sample each.
    got = [float(x) for (x,) in DataLoader(TensorDataset(np.arange(4.0)), sampler=[3, 1], batch_size=None)]
    assert got == [3.0, 1.0]


def test_random_split_gives_lists_of_python_ints():
    a, b = random_split(range(6), [2, 4], generator=ddpc.Generator(0))
    assert type(a.indices) is list and all(type(i) is int for i in a.indices + b.indices)
    assert sorted(a.indices + b.indices) == [0, 1, 2, 3, 4, 5]


def test_scalars_and_0d_arrays_keep_their_shape_without_batching():
    class Sample(Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            return {"x": np.ones(3, np.float32), "label": np.int64(i), "w": np.array(0.5)}

    s = next(iter(DataLoader(Sample(), batch_size=None, num_workers=0)))
    assert {k: tuple(v.shape) for k, v in s.items()} == {"x": (3,), "label": (), "w": ()}
    assert s["label"].item() == 0 and s["w"].item() == 0.5
    t = default_convert(np.float32(1.5))
    assert tuple(t.shape) == () and t.dtype == ddpc.float32 and t.item() == 1.5
    f = default_convert(np.arange(6.0).reshape(2, 3).T)  # not contiguous: copied
    assert tuple(f.shape) == (3, 2) and f.numpy().tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    pair = default_convert((np.ones(2), 3))  # a plain tuple comes out a list, as from PyTorch's
    assert isinstance(pair, list) and pair[0].tolist() == [1.0, 1.0] and pair[1] == 3


def test_collate_bools_strings_and_none():
    b = default_collate([True, False, True])
    assert isinstance(b, ddpc.Tensor) and b.dtype == ddpc.bool and b.numpy().tolist() == [True, False, True]
    masks = default_collate([np.array([True, False]), np.array([False, False])])
    assert masks.dtype == ddpc.bool and masks.numpy().tolist() == [[True, False], [False, False]]
    assert default_collate([np.bool_(False), np.bool_(True)]).dtype == ddpc.bool
    strs = default_collate([np.str_("a"), np.str_("b")])
    assert strs == ["a", "b"] and type(strs) is list
    with pytest.raises(TypeError, match="None"):
        default_collate([None, None])
    with pytest.raises(TypeError, match="None"):
        default_collate([{"y": None}, {"y": None}])


def test_collate_keeps_the_strings_of_tuples_and_refuses_other_types():
    Pair = collections.namedtuple("Pair", "x y")
    n, s = default_collate([(1, "a"), (2, "b")])  # as PyTorch: the strings of a field as the tuple zip makes
    assert n.tolist() == [1, 2] and s == ("a", "b")
    pair = default_collate([Pair(1, "a"), Pair(2, "b")])
    assert isinstance(pair, Pair) and pair.x.tolist() == [1, 2] and pair.y == ("a", "b")
    assert default_collate([["a", "b"], ["c", "d"]]) == [("a", "c"), ("b", "d")]
    assert default_collate([{"s": "a"}, {"s": "b"}]) == {"s": ["a", "b"]}
    for odd in (object(), {1}, frozenset(), 1j):
        with pytest.raises(TypeError, match=f"found {type(odd)}"):
            default_collate([odd, odd])


def test_integer_dtypes_ddpc_lacks_are_widened_exactly():
    for dtype, wide, edge in ((np.int8, ddpc.int32, -128), (np.int16, ddpc.int32, -32768),
                              (np.uint16, ddpc.int32, 65535), (np.uint32, ddpc.int64, 2**32 - 1)):
        batch = default_collate([np.array([edge, 1], dtype), np.array([0, 2], dtype)])
        assert batch.dtype == wide and batch.numpy().tolist() == [[edge, 1], [0, 2]]
        scalars = default_collate([dtype(edge), dtype(3)])
        assert scalars.dtype == wide and scalars.numpy().tolist() == [edge, 3]
        one = default_convert(np.array([edge], dtype))
        assert one.dtype == wide and one.numpy().tolist() == [edge]
    with pytest.raises(TypeError, match="uint64"):
        default_collate([np.array([1], np.uint64)])
    with pytest.raises(TypeError, match="uint64"):
        default_convert(np.uint64(2**64 - 1))

    class Tokens(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return {"tok": np.array([i, -i], np.int16), "pad": i % 2 == 0}

    (b,) = list(DataLoader(Tokens(), batch_size=4, num_workers=0))
    assert isinstance(b["tok"], ddpc.Tensor) and b["tok"].dtype == ddpc.int32  # a tensor: device= moves it
    assert b["tok"].numpy().tolist() == [[0, 0], [1, -1], [2, -2], [3, -3]]
    assert b["pad"].dtype == ddpc.bool and b["pad"].numpy().tolist() == [True, False, True, False]


class Range(IterableDataset):
    def __init__(self, start, end):
        self.start, self.end = start, end

    def __iter__(self):
        return iter(range(self.start, self.end))


def shard(worker_id):
    """PyTorch's documented worker_init_fn: each worker reads its share of the range."""
    info = get_worker_info()
    ds = info.dataset
    per = int(math.ceil((ds.end - ds.start) / float(info.num_workers)))
    ds.start = ds.start + worker_id * per
    ds.end = min(ds.start + per, ds.end)


@pytest.mark.parametrize("mode", MODES, ids=["caller", "thread", "workers"])
def test_worker_init_fn_runs_in_worker_processes_only(mode):
    got = sorted(int(x) for x in DataLoader(Range(3, 10), batch_size=None, worker_init_fn=shard, **mode))
    assert got == [3, 4, 5, 6, 7, 8, 9]  # every value once: all of it without workers, a share in each with


class FailsAt(Dataset):
    def __init__(self, bad):
        self.bad = bad

    def __len__(self):
        return 10

    def __getitem__(self, i):
        if i in self.bad:
            raise ValueError(f"corrupt record {i}")
        return i


def drain(it):
    got = []
    while True:
        try:
            got.append(np.asarray(next(it)).tolist())
        except StopIteration:
            return got
        except ValueError as exc:
            got.append(str(exc).splitlines()[-1].split(": ")[-1])


@pytest.mark.parametrize("mode", MODES, ids=["caller", "thread", "workers"])
def test_a_failed_batch_is_raised_and_the_pass_goes_on(mode):
    got = drain(iter(DataLoader(FailsAt({2, 9}), batch_size=2, **mode)))
    assert got == [[0, 1], "corrupt record 2", [4, 5], [6, 7], "corrupt record 9"]


def test_a_failed_batch_leaves_the_pass_going_out_of_order_too():
    got = drain(iter(DataLoader(FailsAt({4}), batch_size=2, num_workers=2, in_order=False)))
    assert sorted(map(str, got)) == sorted(map(str, [[0, 1], [2, 3], "corrupt record 4", [6, 7], [8, 9]]))


def test_arguments_refused_as_pytorch_refuses_them():
    ds = TensorDataset(np.arange(6.0))
    with pytest.raises(ValueError, match="drop_last"):
        DataLoader(ds, batch_size=None, drop_last=True)
    with pytest.raises(ValueError, match="prefetch_factor"):
        DataLoader(ds, prefetch_factor=4, num_workers=0)
    assert DataLoader(ds, prefetch_factor=4).prefetch == 4  # ddpc's background thread takes it


def test_attributes_read_as_pytorch_s():
    ds = TensorDataset(np.arange(10.0))
    loader = DataLoader(ds, batch_size=3, drop_last=True)
    bs = loader.batch_sampler
    assert isinstance(bs, BatchSampler) and (bs.batch_size, bs.drop_last, bs.sampler) == (3, True, loader.sampler)
    assert list(bs) == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert loader.num_workers == 0 and loader.collate_fn is default_collate
    assert loader.prefetch_factor is None and loader.generator is None
    assert DataLoader(ds, batch_size=None).collate_fn is default_convert
    assert DataLoader(ds, batch_size=None).batch_sampler is None
    given = [[0, 1], [2]]
    assert DataLoader(ds, batch_sampler=given).batch_sampler is given
    workers = DataLoader(ds, num_workers=2, prefetch_factor=3, generator=5)
    assert workers.prefetch_factor == 3 and isinstance(workers.generator, ddpc.Generator)


def test_negative_indices_wrap_and_out_of_range_ones_are_index_errors():
    ds = TensorDataset(np.arange(6.0))
    assert values(DataLoader(ds, sampler=[-1, 0, -6], batch_size=3)) == [[5.0, 0.0, 0.0]]
    assert values(DataLoader(Subset(ds, [-1, 2]), batch_size=2)) == [[5.0, 2.0]]
    assert values(DataLoader(Subset(Subset(ds, [4, 3]), [-1]), batch_size=1)) == [[3.0]]
    for loader in (DataLoader(ds, sampler=[9], batch_size=1), DataLoader(ds, sampler=[-7], batch_size=1),
                   DataLoader(Subset(ds, [6]), batch_size=1), DataLoader(Subset(Subset(ds, [1]), [3]), batch_size=1)):
        with pytest.raises(IndexError, match="out of range"):
            list(loader)
    with pytest.raises(ddpc.IndexOutOfRangeError, match="index 9 is out of range for a data set of 6"):
        list(DataLoader(ds, sampler=[0, 9], batch_size=1))


class Collated(Dataset):
    """__getitems__ returns the batch already collated (a dict of arrays)."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        return {"x": i}

    def __getitems__(self, idx):
        return {"x": np.asarray(idx), "y": np.asarray(idx) * 2}


def test_getitems_may_return_a_collated_batch_for_a_collate_fn():
    got = list(DataLoader(Collated(), batch_size=4, collate_fn=lambda b: b, num_workers=0))
    assert [b["x"].tolist() for b in got] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert [b["y"].tolist() for b in got] == [[0, 2, 4, 6], [8, 10, 12, 14]]
    via_subset = list(DataLoader(Subset(Collated(), [7, 5]), batch_size=2, collate_fn=lambda b: b, num_workers=0))
    assert [b["x"].tolist() for b in via_subset] == [[7, 5]]
    with pytest.raises(ValueError, match="returned 2 samples for 4 indices.*collate_fn"):
        list(DataLoader(Collated(), batch_size=4, num_workers=0))


def test_loader_arguments_in_pytorchs_positional_order():
    """The 6th positional argument is num_workers and the 9th drop_last, as in PyTorch (drop_last was 6th)."""
    ds = TensorDataset(ddpc.arange(10))
    assert [len(b[0]) for b in DataLoader(ds, 4, False, None, None, 0)] == [4, 4, 2]
    assert [len(b[0]) for b in DataLoader(ds, 4, False, None, None, 0, None, False, True)] == [4, 4]


def test_data_classes_are_generic_as_pytorchs():
    from typing import List

    class Pairs(data.Sampler[List[int]]):
        def __iter__(self):
            return iter([[0, 1], [2]])

        def __len__(self):
            return 2

    class Squares(Dataset[int]):
        def __getitem__(self, i):
            return i * i

        def __len__(self):
            return 3

    assert [b.tolist() for b in DataLoader(Squares(), batch_sampler=Pairs())] == [[0, 1], [4]]
    assert DataLoader[int] is not None and IterableDataset[int] is not None and Subset[int] is not None
