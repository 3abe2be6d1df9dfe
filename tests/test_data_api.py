"""The parts of ddpc.data shaped after torch.utils.data beyond the loaders'
core: subclassed samplers, collation, PyTorch's DataLoader arguments
(num_workers, timeout, worker_init_fn, generator, ...), IterableDataset,
Subset, ConcatDataset, random_split and the single-process samplers."""

import collections
import itertools
import threading
import time

import numpy as np
import pytest

import ddpc
from ddpc import data
from ddpc.data import (BatchSampler, ConcatDataset, DataLoader, Dataset, DistributedSampler, IterableDataset,
                       RandomSampler, Sampler, SequentialSampler, Subset, SubsetRandomSampler, TensorDataset,
                       WeightedRandomSampler, default_collate, random_split)


class Items(Dataset):
    """Sample i is i itself; records the threads that read it."""

    def __init__(self, n):
        self.n = n
        self.readers = set()

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        self.readers.add(threading.get_ident())
        return i


def batches(loader):
    return [b.tolist() for b in loader]


def test_a_subclass_overriding_iter_is_iterated():
    class Unpadded(DistributedSampler):  # evaluation without the padding samples
        def __iter__(self):
            return iter(range(self.rank, len(self.dataset), self.num_replicas))

        def __len__(self):
            return len(range(self.rank, len(self.dataset), self.num_replicas))

    s = Unpadded(list(range(10)), num_replicas=4, rank=3, shuffle=False)
    for ds in (Items(10), TensorDataset(np.arange(10))):
        loader = DataLoader(ds, batch_size=2, sampler=s)
        got = [b.tolist() if isinstance(b, ddpc.Tensor) else b[0].tolist() for b in loader]
        assert got == [[3, 7]] and len(loader) == 1

    class Reversed(BatchSampler):
        def __iter__(self):
            return iter([[9, 8, 7], [1]])

        def __len__(self):
            return 2

    loader = DataLoader(Items(10), batch_sampler=Reversed(SequentialSampler(range(10)), 3, False))
    assert batches(loader) == [[9, 8, 7], [1]]
    assert list(BatchSampler(s, 1, False)) == [[3], [7]]


def test_collation_of_numbers_tuples_and_mappings():
    got = default_collate([0, 1.5, 2])
    assert got.dtype == ddpc.float32 and got.tolist() == [0.0, 1.5, 2.0]
    assert default_collate([1, 2]).dtype == ddpc.int64
    Pair = collections.namedtuple("Pair", "x y")
    pair = default_collate([Pair(np.ones(2), 1), Pair(np.zeros(2), 2)])
    assert isinstance(pair, Pair) and pair.x.shape == (2, 2) and pair.y.tolist() == [1, 2]
    od = default_collate([collections.OrderedDict(a=1), collections.OrderedDict(a=2)])
    assert isinstance(od, collections.OrderedDict) and od["a"].tolist() == [1, 2]


def test_collation_and_tensor_dataset_rows_keep_the_autograd_graph():
    a = ddpc.ones(2, requires_grad=True)
    batch = default_collate([a, a * 2])
    assert batch.requires_grad
    batch.sum().backward()
    assert a.grad.tolist() == [3.0, 3.0]
    assert not default_collate([ddpc.ones(2), ddpc.ones(2)]).requires_grad
    w = ddpc.arange(4.0, requires_grad=True)
    ds = TensorDataset(w.reshape(2, 2), np.arange(2))
    x, y = ds[1]
    assert x.requires_grad and not y.requires_grad
    x.sum().backward()
    assert w.grad.tolist() == [0.0, 0.0, 1.0, 1.0]
    rows, labels = next(iter(DataLoader(ds, batch_size=2, num_workers=0)))  # not gathered by the C threads
    assert rows.requires_grad and rows.tolist() == [[0.0, 1.0], [2.0, 3.0]] and labels.tolist() == [0, 1]


def test_collate_registry_at_torchs_path():
    import ddpc.utils.data._utils.collate as module
    from ddpc.utils.data._utils.collate import collate, collate_tensor_fn, default_collate_fn_map

    assert module.default_collate is default_collate and module.default_convert is data.default_convert

    def ints(batch, *, collate_fn_map=None):
        return ("ints", list(batch))

    def joined(batch, *, collate_fn_map=None):
        return "".join(batch)

    samples = [(1, "a", {"k": 2}), (3, "b", {"k": 4})]
    got = collate(samples, collate_fn_map={int: ints, str: joined})
    assert got == [("ints", [1, 3]), "ab", {"k": ("ints", [2, 4])}]
    assert collate([True, False], collate_fn_map={str: joined, int: ints}) == ("ints", [True, False])  # isinstance
    with pytest.raises(TypeError, match="found <class 'float'>"):
        collate([1.5, 2.5], collate_fn_map={int: ints})
    assert collate_tensor_fn([ddpc.ones(2), ddpc.zeros(2)]).tolist() == [[1.0, 1.0], [0.0, 0.0]]

    class Box:
        pass

    default_collate_fn_map[Box] = lambda batch, *, collate_fn_map=None: len(batch)  # extends default_collate
    try:
        assert default_collate([(Box(), 1), (Box(), 2)])[0] == 2
        loader = DataLoader(TensorDataset(np.arange(4)), batch_size=2, collate_fn=default_collate)
        default_collate_fn_map[ddpc.Tensor] = lambda batch, *, collate_fn_map=None: "mine"
        assert next(iter(loader)) == ["mine"]  # the C threads gather only what default_collate would make
    finally:
        del default_collate_fn_map[Box]
        default_collate_fn_map[ddpc.Tensor] = collate_tensor_fn


def test_pin_memory_and_device_reach_tensors_in_tuples(monkeypatch):
    pinned = []
    monkeypatch.setattr(ddpc.Tensor, "pin_memory", lambda self: pinned.append(self) or self)
    Pair = collections.namedtuple("Pair", "x y")

    def collate(samples):
        t = ddpc.tensor(samples)
        return (t, {"k": (t,)}, Pair(t, [t]))

    (out,) = list(DataLoader(Items(3), batch_size=3, collate_fn=collate, pin_memory=True))
    assert len(pinned) == 4 and isinstance(out, tuple) and isinstance(out[2], Pair)


def test_pin_memory_with_a_device_pins_before_the_copy(monkeypatch):
    # a copy to a GPU runs asynchronously from pinned memory only, so pin_memory=True holds with device= too
    calls = []
    monkeypatch.setattr(ddpc.Tensor, "pin_memory", lambda self: calls.append("pin") or self)
    moved = ddpc.Tensor.to
    monkeypatch.setattr(ddpc.Tensor, "to", lambda self, *a, **k: calls.append(("to", a, k)) or moved(self, *a, **k))
    out = ddpc.data._move([ddpc.arange(3)], "cpu", True)  # what a pass does with each batch
    assert calls == ["pin", ("to", ("cpu",), {"non_blocking": True})] and out[0].tolist() == [0, 1, 2]


def test_num_workers_zero_reads_in_the_calling_thread_none_in_the_background():
    ds = Items(6)
    assert batches(DataLoader(ds, batch_size=4, num_workers=0)) == [[0, 1, 2, 3], [4, 5]]
    assert ds.readers == {threading.get_ident()}
    ds = Items(6)
    inits = []
    loader = DataLoader(ds, batch_size=4, worker_init_fn=inits.append, prefetch_factor=1, pin_memory_device="cuda")
    assert batches(loader) == [[0, 1, 2, 3], [4, 5]]
    assert len(ds.readers) == 1 and ds.readers != {threading.get_ident()}
    assert inits == [] and loader.num_workers == 0  # worker_init_fn runs in worker processes only, as in PyTorch
    with pytest.raises(ValueError, match="num_workers"):
        DataLoader(ds, num_workers=-1)
    for kwargs in ({"persistent_workers": True}, {"multiprocessing_context": "spawn", "num_workers": 0}):
        with pytest.raises(ValueError, match="num_workers > 0"):
            DataLoader(ds, **kwargs)


def test_a_timeout_is_raised():
    class Slow(Items):
        def __getitem__(self, i):
            time.sleep(1.0)
            return i

    start = time.monotonic()
    with pytest.raises(RuntimeError, match="timed out after 0.2 seconds"):
        list(DataLoader(Slow(4), batch_size=2, timeout=0.2))
    assert time.monotonic() - start < 5


def test_generator_draws_the_shuffle_reproducibly_and_afresh_each_pass():
    def epochs(gen):
        loader = DataLoader(Items(20), batch_size=20, shuffle=True, generator=gen)
        return [batches(loader)[0] for _ in range(2)]

    a, b = epochs(ddpc.Generator().manual_seed(5)), epochs(ddpc.Generator().manual_seed(5))
    assert a == b and a[0] != a[1] and sorted(a[0]) == list(range(20))
    assert epochs(ddpc.Generator().manual_seed(6)) != a
    assert epochs(5) == a  # an int seeds a private generator
    with pytest.raises(TypeError, match="generator"):
        RandomSampler(range(3), generator="seed")


def test_iterable_dataset_is_batched_in_its_own_order():
    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(7))

    assert batches(DataLoader(Stream(), batch_size=3)) == [[0, 1, 2], [3, 4, 5], [6]]
    assert batches(DataLoader(Stream(), batch_size=3, drop_last=True, num_workers=0)) == [[0, 1, 2], [3, 4, 5]]
    assert [int(x) for x in DataLoader(Stream(), batch_size=None)] == list(range(7))
    with pytest.raises(TypeError):
        len(DataLoader(Stream(), batch_size=3))

    class Sized(Stream):
        def __len__(self):
            return 7

    assert len(DataLoader(Sized(), batch_size=3)) == 3
    with pytest.raises(ValueError, match="IterableDataset"):
        DataLoader(Stream(), shuffle=True)


def test_getitems_reads_a_batch_in_one_call_also_through_subsets():
    class Batched(Items):
        calls = []

        def __getitems__(self, indices):
            self.calls.append(list(indices))
            return [10 * i for i in indices]

    ds = Batched(6)
    for workers in (None, 0, 2):
        assert batches(DataLoader(ds, batch_size=4, num_workers=workers)) == [[0, 10, 20, 30], [40, 50]]
    assert Batched.calls[:2] == [[0, 1, 2, 3], [4, 5]] and len(Batched.calls) == 4  # the workers' calls are theirs
    assert batches(DataLoader(Subset(ds, [5, 3, 1]), batch_size=2, num_workers=0)) == [[50, 30], [10]]
    assert Batched.calls[-2:] == [[5, 3], [1]]
    assert [int(x) for x in DataLoader(ds, batch_size=None, num_workers=0)][:2] == [0, 1]  # unbatched: __getitem__

    class Short(Items):
        def __getitems__(self, indices):
            return [0]

    with pytest.raises(ValueError, match="returned 1 samples for 4 indices"):
        list(DataLoader(Short(8), batch_size=4, num_workers=0))


def test_an_error_in_an_iterable_datasets_stream_is_raised_not_taken_for_its_end():
    class Broken(IterableDataset):
        def __iter__(self):
            yield 1
            yield 2
            raise ValueError("broken stream")

    for workers in (None, 0, 1):
        got = []
        with pytest.raises(ValueError, match="broken stream"):
            for b in DataLoader(Broken(), batch_size=1, num_workers=workers):
                got.append(b.tolist())
        assert got == [[1], [2]]


def test_batch_size_none_hands_out_samples_converted():
    ds = TensorDataset(np.arange(6).reshape(3, 2))
    got = list(DataLoader(ds, batch_size=None))
    assert [tuple(t.shape) for (t,) in got] == [(2,)] * 3 and got[2][0].tolist() == [4, 5]


def test_subsets_of_a_tensor_dataset_load_through_the_c_threads():
    X = np.arange(40, dtype=np.float32).reshape(20, 2)
    ds = TensorDataset(X, np.arange(20))
    inner = Subset(ds, np.arange(19, -1, -1))  # reversed
    outer = Subset(inner, [1, 3, 5, 7, 9])     # ds rows 18, 16, 14, 12, 10
    loader = DataLoader(outer, batch_size=2)
    assert data._array_rows(outer)[0] is ds
    got = [(x.numpy().tolist(), y.tolist()) for x, y in loader]
    assert [y for _, ys in got for y in ys] == [18, 16, 14, 12, 10]
    assert [row for xs, _ in got for row in xs] == X[[18, 16, 14, 12, 10]].tolist()
    assert len(outer) == 5 and outer[0][1].tolist() == 18


def test_random_split_and_concat():
    ds = Items(10)
    parts = random_split(ds, [3, 7], generator=ddpc.Generator().manual_seed(1))
    again = random_split(ds, [3, 7], generator=ddpc.Generator().manual_seed(1))
    assert [len(p) for p in parts] == [3, 7]
    assert sorted(int(p[i]) for p in parts for i in range(len(p))) == list(range(10))
    assert [list(p.indices) for p in parts] == [list(p.indices) for p in again]
    assert [len(p) for p in random_split(ds, [0.25, 0.75])] == [3, 7]  # the remainder goes to the first
    with pytest.raises(ValueError, match="adding up"):
        random_split(ds, [3, 6])
    cat = ConcatDataset([Items(3), Items(2)])
    assert len(cat) == 5 and [cat[i] for i in range(5)] == [0, 1, 2, 0, 1] and cat[-1] == 1
    with pytest.raises(IndexError):
        cat[5]
    assert batches(DataLoader(cat, batch_size=5)) == [[0, 1, 2, 0, 1]]


def test_single_process_weighted_and_subset_samplers():
    w = WeightedRandomSampler([0, 1, 0, 3], 4000, generator=ddpc.Generator().manual_seed(3))
    counts = np.bincount(list(w), minlength=4)
    assert counts[0] == counts[2] == 0 and 800 < counts[1] < 1200 and len(w) == 4000
    assert list(w)[:50] != list(w)[:50]  # each pass draws afresh
    s = SubsetRandomSampler(range(5, 45, 2), generator=7)
    first, second = list(s), list(s)
    assert sorted(first) == sorted(second) == list(range(5, 45, 2)) and len(s) == 20
    assert first != second
    assert first == list(SubsetRandomSampler(range(5, 45, 2), generator=7))


def test_samplers_without_a_length_are_drawn_as_they_go_and_may_be_endless():
    class Two(Sampler):
        def __iter__(self):
            return iter([2, 1])

    class Endless(Sampler):
        def __iter__(self):
            return itertools.cycle(range(3))

    with pytest.raises(TypeError):
        len(Two())
    for mode in (dict(num_workers=0), dict()):
        loader = DataLoader(Items(3), batch_size=2, sampler=Two(), **mode)
        assert batches(loader) == [[2, 1]] and batches(loader) == [[2, 1]]
        with pytest.raises(TypeError):
            len(loader)
        it = iter(DataLoader(Items(3), batch_size=2, sampler=Endless(), **mode))
        assert [next(it).tolist() for _ in range(3)] == [[0, 1], [2, 0], [1, 2]]
        it = iter(DataLoader(Items(3), batch_size=None, sampler=Endless(), **mode))
        assert [next(it) for _ in range(4)] == [0, 1, 2, 0]
        it = iter(DataLoader(Items(3), batch_sampler=itertools.cycle([[2], [0, 1]]), **mode))
        assert [next(it).tolist() for _ in range(3)] == [[2], [0, 1], [2]]
        it = iter(DataLoader(TensorDataset(np.arange(3)), batch_size=2, sampler=Endless(), **mode))
        assert [next(it)[0].tolist() for _ in range(2)] == [[0, 1], [2, 0]]
    assert list(itertools.islice(BatchSampler(Endless(), 2, False), 2)) == [[0, 1], [2, 0]]
    loader = DataLoader(Items(3), batch_size=2, sampler=Two(), num_workers=0)
    it = iter(loader)
    next(it)
    state = loader.state_dict()
    assert state["num_batches"] is None and state["batches_yielded"] == 1 and not state["finished"]
    assert list(it) == [] and loader.state_dict()["finished"]


def test_subset_random_sampler_indices_are_its_sequence_and_an_indices_attribute_breaks_nothing():
    s = SubsetRandomSampler([3, 5], generator=1)
    r = range(5, 45, 2)
    assert s.indices == [3, 5] and SubsetRandomSampler(r).indices is r
    assert sorted(s) == [3, 5] and len(s) == 2
    assert sorted(batches(DataLoader(Items(10), batch_size=2, sampler=s))[0]) == [3, 5]
    s.indices = [7]  # read at each pass, as PyTorch's
    assert list(s) == [7] and len(s) == 1

    class Kept(DistributedSampler):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.indices = [0]  # an attribute of the subclass's own

    k = Kept(10, num_replicas=2, rank=1, shuffle=False)
    assert list(k) == [1, 3, 5, 7, 9] and list(BatchSampler(k, 3, False)) == [[1, 3, 5], [7, 9]]
    for ds in (Items(10), TensorDataset(np.arange(10))):
        loader = DataLoader(ds, batch_size=5, sampler=k)
        assert [b.tolist() if isinstance(b, ddpc.Tensor) else b[0].tolist() for b in loader] == [[1, 3, 5, 7, 9]]


def test_len_of_an_iterator_is_the_number_of_batches_of_its_pass():
    for mode in (dict(num_workers=0), dict()):
        it = iter(DataLoader(Items(5), batch_size=2, **mode))
        assert len(it) == 3
        next(it)
        assert len(it) == 3  # the pass's, as PyTorch's (len(loader))
        assert len(iter(DataLoader(Items(5), batch_size=None, **mode))) == 5
        assert len(iter(DataLoader(TensorDataset(np.arange(5)), batch_size=2, drop_last=True, **mode))) == 2

    class Stream(IterableDataset):
        def __iter__(self):
            return iter(range(3))

        def __len__(self):
            return 3

    with pytest.raises(TypeError):  # as PyTorch's, whose stream has no sampler with a length
        len(iter(DataLoader(Stream(), batch_size=2, num_workers=0)))


def test_distributed_sampler_under_a_launcher_without_a_group_is_an_error(monkeypatch):
    monkeypatch.setenv("WORLD_SIZE", "2")
    with pytest.raises(ValueError, match="init_process_group"):
        DistributedSampler(10)
    assert len(DistributedSampler(10, num_replicas=2, rank=1)) == 5
    monkeypatch.setenv("WORLD_SIZE", "1")
    assert len(DistributedSampler(10)) == 10


def test_distributed_sampler_takes_pytorchs_dataset_keyword():
    ds = list(range(11))
    by_keyword = DistributedSampler(dataset=ds, num_replicas=3, rank=2, seed=4)
    assert list(by_keyword) == list(DistributedSampler(ds, 3, 2, seed=4)) and by_keyword.dataset is ds
    with pytest.raises(TypeError, match="once"):
        DistributedSampler(ds, dataset=ds, num_replicas=3, rank=0)
    with pytest.raises(TypeError, match="once"):
        DistributedSampler(num_replicas=3, rank=0)


def test_data_api_names_exist():
    for name in data.__all__:
        assert hasattr(data, name), name


def test_torch_import_paths_reach_the_same_classes():
    import ddpc.utils.data
    from ddpc.utils.data import DataLoader as PathLoader
    from ddpc.utils.data.dataloader import DataLoader as ModuleLoader
    from ddpc.utils.data.dataset import TensorDataset as ModuleDataset
    from ddpc.utils.data.distributed import DistributedSampler as PathSampler
    from ddpc.utils.data.sampler import BatchSampler as ModuleBatchSampler

    assert ddpc.utils.data is data and PathLoader is DataLoader and PathSampler is DistributedSampler
    assert ModuleLoader is DataLoader and ModuleDataset is data.TensorDataset
    assert ModuleBatchSampler is data.BatchSampler
    loader = PathLoader(ddpc.utils.data.TensorDataset(np.arange(6.0)), batch_size=4)
    assert [b[0].tolist() for b in loader] == [[0.0, 1.0, 2.0, 3.0], [4.0, 5.0]]


class Named(Dataset):
    """Sample "k<i>" is i."""

    def __getitem__(self, key):
        return np.int64(int(key[1:]))

    def __len__(self):
        return 10


class Endless(Sampler):
    """Keys without a length: "k0" .. "k<n-1>", drawn as the loader asks."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return (f"k{i}" for i in range(self.n))


@pytest.mark.parametrize("num_workers", [None, 0, 2])
@pytest.mark.parametrize("sampling", ["planned", "drawn", "batch-sampler", "drawn-batch-sampler"])
def test_keys_that_are_not_integers_resume_mid_pass(num_workers, sampling):
    def loader():
        keys = [f"k{i}" for i in (3, 1, 4, 0, 9, 2, 6)]
        kwargs = {"planned": dict(batch_size=2, sampler=keys), "drawn": dict(batch_size=2, sampler=Endless(7)),
                  "batch-sampler": dict(batch_sampler=BatchSampler(keys, 3, False)),
                  "drawn-batch-sampler": dict(batch_sampler=BatchSampler(Endless(7), 3, True))}[sampling]
        return DataLoader(Named(), num_workers=num_workers, **kwargs)

    expected = [b.numpy().tolist() for b in loader()]
    assert expected[0] == ([3, 1] if sampling == "planned" else [3, 1, 4] if sampling == "batch-sampler"
                           else [0, 1] if sampling == "drawn" else [0, 1, 2])
    first = loader()
    it = iter(first)
    got = [next(it).numpy().tolist() for _ in range(2)]
    state = first.state_dict()
    del it
    resumed = loader()
    resumed.load_state_dict(state)
    assert got + [b.numpy().tolist() for b in resumed] == expected


def test_the_c_gather_refuses_keys_that_are_not_integers():
    x = np.arange(4.0)
    for kwargs in (dict(batch_size=2, sampler=["a", "b"]), dict(batch_sampler=[[(0, 2), (1, 2)]])):
        with pytest.raises(TypeError, match="integer indices.*gathered by C threads"):
            list(DataLoader(TensorDataset(x), **kwargs))


class _KeyValueStore(Dataset):
    """A map-style data set without __len__ (a key-value store): a sampler names its keys."""

    def __getitem__(self, key):
        return key * 2


@pytest.mark.parametrize("num_workers", [None, 0, 1])
def test_a_data_set_without_a_length_loads_through_a_given_sampler(num_workers):
    by_sampler = DataLoader(_KeyValueStore(), batch_size=2, sampler=[1, 2, 3], num_workers=num_workers)
    by_batches = DataLoader(_KeyValueStore(), batch_sampler=[[1, 2], [3]], num_workers=num_workers)
    assert [b.tolist() for b in by_sampler] == [b.tolist() for b in by_batches] == [[2, 4], [6]]
    with pytest.raises(TypeError, match="__len__"):  # the default sampler needs the length, as PyTorch's
        DataLoader(_KeyValueStore(), batch_size=2)


@pytest.mark.parametrize("make", [np.ones, ddpc.ones])
def test_collating_samples_of_different_shapes_names_them(make):
    with pytest.raises(RuntimeError, match=r"equal size, but got \[2\] at entry 0 and \[3\] at entry 2"):
        data.default_collate([make(2), make(2), make(3)])
    with pytest.raises(RuntimeError, match="equal size"):
        list(DataLoader([np.ones(2), np.ones(3)], batch_size=2))
