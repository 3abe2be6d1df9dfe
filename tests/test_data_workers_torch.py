"""Optional: DataLoader worker processes against PyTorch's (skipped without
torch), on the same data sets: the order batches come in for map-style data
sets and for IterableDatasets read whole or split by get_worker_info
(uneven shares, drop_last, unbatched), the WorkerInfo each worker sees, and
the message an exception in a worker is raised with."""

import os

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch.utils import data as tdata  # noqa: E402

import ddpc  # noqa: E402  (after torch, as the other comparison tests)
from ddpc import data  # noqa: E402


def worker_info(lib):
    return (data if lib == "ddpc" else tdata).get_worker_info()


class Items:
    """Sample i: [i, worker id, number of workers], read through the named library's get_worker_info."""

    def __init__(self, n, lib, fail_at=-1):
        self.n, self.lib, self.fail_at = n, lib, fail_at

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.fail_at:
            raise ValueError(f"sample {i} is broken")
        info = worker_info(self.lib)
        return np.array([i, info.id, info.num_workers])


class Stream:
    """0 .. n-1, whole in every worker or split in contiguous shares (uneven)."""

    def __init__(self, n, lib, split):
        self.n, self.lib, self.split = n, lib, split

    def __iter__(self):
        info = worker_info(self.lib)
        if not self.split:
            return iter(range(self.n))
        per = -(-self.n // info.num_workers)
        return iter(range(info.id * per, min(self.n, (info.id + 1) * per)))


def make(lib, kind, *args):
    base = {"ddpc": data, "torch": tdata}[lib]
    if kind == "map":
        return type("MapItems", (Items, base.Dataset), {})(args[0], lib, *args[1:])
    return type("StreamItems", (Stream, base.IterableDataset), {})(args[0], lib, args[1])


def load(lib, dataset, **kwargs):
    loader = (data.DataLoader if lib == "ddpc" else tdata.DataLoader)(dataset, **kwargs)
    return [np.asarray(b.tolist() if hasattr(b, "tolist") else b).tolist() for b in loader]


@pytest.mark.parametrize("workers,batch,n", [(1, 4, 10), (2, 3, 11), (3, 2, 13), (4, 5, 7)])
def test_map_style_batches_come_in_pytorchs_order_from_the_same_workers(workers, batch, n):
    got = {lib: load(lib, make(lib, "map", n), batch_size=batch, num_workers=workers) for lib in ("ddpc", "torch")}
    assert got["ddpc"] == got["torch"]


@pytest.mark.parametrize("workers,batch,n,split,drop_last", [
    (2, 3, 10, False, False), (2, 3, 10, True, False), (3, 2, 11, True, False), (3, 4, 11, True, True),
    (4, 2, 5, True, False), (3, None, 8, True, False), (2, None, 3, False, False)])
def test_iterable_datasets_interleave_and_end_as_pytorchs(workers, batch, n, split, drop_last):
    kwargs = {"batch_size": batch, "num_workers": workers, "drop_last": drop_last}
    got = {lib: load(lib, make(lib, "stream", n, split), **kwargs) for lib in ("ddpc", "torch")}
    assert got["ddpc"] == got["torch"]


def test_an_exception_in_a_worker_reads_as_pytorchs():
    messages = {}
    for lib in ("ddpc", "torch"):
        with pytest.raises(ValueError) as err:
            load(lib, make(lib, "map", 8, 5), batch_size=2, num_workers=2)
        messages[lib] = str(err.value)
    for lib, message in messages.items():
        first, *rest = message.splitlines()
        assert first == "Caught ValueError in DataLoader worker process 0.", lib
        assert rest[0] == "Original Traceback (most recent call last):" and rest[-1] == "ValueError: sample 5 is broken"


def test_worker_seeds_are_base_seed_plus_id_in_both():
    class Seeds:
        def __init__(self, lib):
            self.lib = lib

        def __len__(self):
            return 4

        def __getitem__(self, i):
            info = worker_info(self.lib)
            return np.array([info.id, info.seed % 1000003, os.getpid()])

    for lib in ("ddpc", "torch"):
        ds = type("S", (Seeds, (data if lib == "ddpc" else tdata).Dataset), {})(lib)
        rows = [r for b in load(lib, ds, batch_size=1, num_workers=2) for r in b]
        seed = {r[0]: r[1] for r in rows}
        assert (seed[1] - seed[0]) % 1000003 == 1, lib
        assert len({r[2] for r in rows}) == 2
    assert ddpc.data.WorkerInfo.__slots__ == ("id", "num_workers", "seed", "dataset")


class Keyed:
    """Samples looked up by whatever key a sampler yields: a name, a float, an (index, size) pair."""

    def __getitem__(self, key):
        if isinstance(key, str):
            return np.int64({"a": 1, "b": 2, "c": 3}[key])
        if isinstance(key, tuple):
            index, size = key
            return np.arange(size) + 10 * index
        return np.float64(2 * key)

    def __len__(self):
        return 3


KEYED = {
    "names": dict(batch_size=2, sampler=["a", "b", "c"]),
    "floats": dict(batch_size=2, sampler=[0.5, 1.5, 2.5]),
    "index-size-pairs": dict(batch_sampler=[[(0, 2), (1, 2)], [(2, 3)], [(1, 4), (0, 4), (2, 4)]]),
    "batch-sampler-of-names": lambda base: dict(batch_sampler=base.BatchSampler(["b", "c", "a"], 2, False)),
}


@pytest.mark.parametrize("workers", [None, 0, 2])
@pytest.mark.parametrize("kind", list(KEYED))
def test_sampler_keys_that_are_not_integers_reach_the_data_set_as_pytorchs_do(workers, kind):
    def batches(lib):
        base = {"ddpc": data, "torch": tdata}[lib]
        kwargs = KEYED[kind](base) if callable(KEYED[kind]) else dict(KEYED[kind])
        dataset = type("KeyedItems", (Keyed, base.Dataset), {})()
        loader = base.DataLoader(dataset, num_workers=workers if lib == "ddpc" else workers or 0, **kwargs)
        return [np.asarray(b).tolist() if lib == "torch" else b.numpy().tolist() for b in loader]

    assert batches("ddpc") == batches("torch")


def test_a_batch_sampler_of_keys_that_are_not_integers_yields_them_as_pytorchs():
    assert list(data.BatchSampler(["a", "b", "c"], 2, False)) == list(tdata.BatchSampler(["a", "b", "c"], 2, False))
