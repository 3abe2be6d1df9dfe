"""Optional: a DataLoader resumed mid-epoch against torchdata's
StatefulDataLoader (skipped without torchdata): the same batches handed out
after state_dict / load_state_dict, in order, for sequential and
worker-process loading of a map-style data set and of an IterableDataset."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")
stateful = pytest.importorskip("torchdata.stateful_dataloader")
from torch.utils import data as tdata  # noqa: E402

from ddpc import data  # noqa: E402  (after torch, as the other comparison tests)


class Items:
    def __init__(self, n):
        self.n = n

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        return np.int64(i)


def stream(lib, n):
    base = data.IterableDataset if lib == "ddpc" else tdata.IterableDataset

    class Stream(base):
        def __iter__(self):
            return iter(np.arange(n, dtype=np.int64))

    return Stream()


def loader(lib, dataset, **kw):
    return (data.DataLoader if lib == "ddpc" else stateful.StatefulDataLoader)(dataset, batch_size=4, **kw)


def resumed(lib, make, k, **kw):
    first = loader(lib, make(), **kw)
    it = iter(first)
    got = [np.asarray(next(it)).tolist() for _ in range(k)]
    state = first.state_dict()
    del it
    second = loader(lib, make(), **kw)
    second.load_state_dict(state)
    return got, [np.asarray(b).tolist() for b in second]


@pytest.mark.parametrize("num_workers", [0, 2])
@pytest.mark.parametrize("kind", ["map", "iterable"])
def test_resumed_batches_match_stateful_dataloader(num_workers, kind):
    def make(lib):
        return (lambda: Items(30)) if kind == "map" else (lambda: stream(lib, 30))

    ours = resumed("ddpc", make("ddpc"), 3, num_workers=num_workers)
    theirs = resumed("torch", make("torch"), 3, num_workers=num_workers)
    assert ours == theirs
