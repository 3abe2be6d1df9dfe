"""Resuming a DataLoader mid-epoch (state_dict / load_state_dict): on every
loading path (C gather of a TensorDataset, background thread, the caller,
worker processes in and out of order), the batches after an interruption are
those an uninterrupted loader hands out next, every sample once; skipped
batches are never fetched; later epochs as usual; samplers' states;
IterableDatasets with and without a state of their own; per rank with
DistributedSampler; random augmentation in worker processes draws after a
resume what it would have drawn uninterrupted; clear errors for states of
another loader; a job killed after a mid-epoch checkpoint under ddpc-run
--max-restarts ends with the parameters and the sample order of an
uninterrupted one."""

import itertools
import json
import multiprocessing
import os
import random
import subprocess
import sys

import numpy as np
import pytest

import ddpc
from ddpc import data as ddata
from ddpc.data import (BatchSampler, DataLoader, Dataset, DistributedSampler, IterableDataset, RandomSampler,
                       SequentialSampler, ShardedLoader, SubsetRandomSampler, TensorDataset,
                       WeightedDistributedSampler, WeightedRandomSampler, get_worker_info)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class Items(Dataset):
    """Sample i is i; fetching one of ``forbidden`` is an error (also in a worker process)."""

    def __init__(self, n, forbidden=()):
        self.n, self.forbidden = n, frozenset(forbidden)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i in self.forbidden:
            raise AssertionError(f"sample {i} was handed out before the interruption: it must not be read again")
        return np.int64(i)


def rows(batch):
    """A batch's sample indices as a list (a TensorDataset batch is a list of tensors)."""
    if isinstance(batch, list):
        batch = batch[0]
    return np.asarray(batch.numpy() if hasattr(batch, "numpy") else batch).reshape(-1).tolist()


PATHS = {
    "c-gather": dict(arrays=True),
    "thread": dict(),
    "caller": dict(num_workers=0),
    "workers": dict(num_workers=2),
    "workers-persistent": dict(num_workers=2, persistent_workers=True),
}


def make_loader(path, n=37, forbidden=(), **kw):
    opts = dict(PATHS[path])
    dataset = TensorDataset(np.arange(n, dtype=np.int64)) if opts.pop("arrays", False) else Items(n, forbidden)
    return DataLoader(dataset, **opts, **kw)


def interrupt(loader, k):
    """The first k batches of a pass and the loader's state after them (the iterator then dropped)."""
    it = iter(loader)
    got = [rows(next(it)) for _ in range(k)]
    state = loader.state_dict()
    del it
    return got, state


SAMPLERS = {
    "sequential": lambda n: dict(batch_size=4),
    "shuffle-generator": lambda n: dict(batch_size=4, shuffle=True, generator=ddpc.Generator(11)),
    "random-seeded": lambda n: dict(batch_size=4, sampler=RandomSampler(n, seed=5)),
    "random-replacement": lambda n: dict(batch_size=3, sampler=RandomSampler(n, replacement=True, num_samples=50,
                                                                            generator=ddpc.Generator(2))),
    "subset-random": lambda n: dict(batch_size=4, sampler=SubsetRandomSampler(range(0, n, 2), ddpc.Generator(3))),
    "weighted": lambda n: dict(batch_size=5, sampler=WeightedRandomSampler(np.linspace(1, 2, n), 40,
                                                                           generator=ddpc.Generator(4))),
    "batch-sampler": lambda n: dict(batch_sampler=BatchSampler(RandomSampler(n, seed=9), 6, drop_last=True)),
    "drop-last": lambda n: dict(batch_size=5, shuffle=True, drop_last=True, generator=ddpc.Generator(7)),
}


@pytest.mark.parametrize("path", list(PATHS))
@pytest.mark.parametrize("sampling", list(SAMPLERS))
def test_resumed_pass_hands_out_the_rest_then_later_epochs(path, sampling):
    n, k = 37, 3
    reference = make_loader(path, n, **SAMPLERS[sampling](n))
    expected = [[rows(b) for b in reference] for _ in range(3)]  # three passes, uninterrupted

    first = make_loader(path, n, **SAMPLERS[sampling](n))
    got, state = interrupt(first, k)
    assert got == expected[0][:k]
    assert state["batches_yielded"] == k and not state["finished"]

    if sampling not in ("random-replacement", "weighted"):  # (samples repeat within a pass there)
        # The resumed pass reads no sample handed out before the interruption.
        guarded = make_loader(path, n, forbidden={i for b in got for i in b}, **SAMPLERS[sampling](n))
        guarded.load_state_dict(state)
        assert [rows(b) for b in guarded] == expected[0][k:]

    resumed = make_loader(path, n, **SAMPLERS[sampling](n))
    resumed.load_state_dict(ddpc.load(_saved(state)))  # through a file, as a checkpoint holds it
    assert [rows(b) for b in resumed] == expected[0][k:]
    assert resumed.state_dict()["finished"]
    assert [rows(b) for b in resumed] == expected[1]
    assert [rows(b) for b in resumed] == expected[2]


def _saved(obj):
    import io
    buf = io.BytesIO()
    ddpc.save(obj, buf)
    buf.seek(0)
    return buf


@pytest.mark.parametrize("path", list(PATHS))
def test_later_epochs_after_resuming_match_with_set_epoch(path):
    n = 30

    def loader(forbidden=()):
        sampler = DistributedSampler(n, num_replicas=1, rank=0, seed=3)
        return make_loader(path, n, forbidden, batch_size=4, sampler=sampler), sampler

    ref, ref_sampler = loader()
    expected = []
    for epoch in range(3):
        ref_sampler.set_epoch(epoch)
        expected.append([rows(b) for b in ref])
    first, sampler = loader()
    sampler.set_epoch(1)
    got, state = interrupt(first, 5)
    assert state["sampler"] == {"epoch": 1}
    resumed, sampler = loader()
    resumed.load_state_dict(state)
    assert sampler.epoch == 1
    out = []
    for epoch in (1, 2):
        sampler.set_epoch(epoch)  # the saved epoch again, then the next
        out.append([rows(b) for b in resumed])
    assert got + out[0] == expected[1]
    assert out[1] == expected[2]


@pytest.mark.parametrize("path", list(PATHS))
def test_every_sample_once_per_rank_across_an_interruption(path):
    n, world = 53, 3
    per_rank = []
    for rank in range(world):
        def loader(forbidden=()):
            sampler = DistributedSampler(n, num_replicas=world, rank=rank, seed=1)
            sampler.set_epoch(4)
            return make_loader(path, n, forbidden, batch_size=4, sampler=sampler)

        reference = [rows(b) for b in loader()]
        got, state = interrupt(loader(), 2 + rank)
        assert (state["num_replicas"], state["rank"]) == (world, rank)
        resumed = loader(forbidden={i for b in got for i in b})
        resumed.load_state_dict(state)
        rest = [rows(b) for b in resumed]
        assert got + rest == reference
        per_rank.append([i for b in got + rest for i in b])
    padded = sum(map(len, per_rank))
    assert padded == -(-n // world) * world
    assert set().union(*map(set, per_rank)) == set(range(n))


def test_prefetched_batches_do_not_count_as_handed_out():
    loader = make_loader("workers", 40, batch_size=2, prefetch=4)
    it = iter(loader)
    first = rows(next(it))
    assert loader.state_dict()["batches_yielded"] == 1  # 8 tasks were sent ahead
    assert first == [0, 1]
    resumed = make_loader("workers", 40, forbidden={0, 1}, batch_size=2)
    resumed.load_state_dict(loader.state_dict())
    assert [rows(b) for b in resumed][0] == [2, 3]


def test_skipped_batches_are_not_gathered_on_the_c_path(monkeypatch):
    real = ddata._C.Loader
    plans = []

    def recording(sources, backed, indices, offsets, *args, **kwargs):
        plans.append((np.asarray(indices).copy(), np.asarray(offsets).copy()))
        return real(sources, backed, indices, offsets, *args, **kwargs)

    loader = make_loader("c-gather", 20, batch_size=3)
    got, state = interrupt(loader, 4)
    monkeypatch.setattr(ddata._C, "Loader", recording)
    resumed = make_loader("c-gather", 20, batch_size=3)
    resumed.load_state_dict(state)
    rest = [rows(b) for b in resumed]
    assert got + rest == [list(range(i, min(i + 3, 20))) for i in range(0, 20, 3)]
    (indices, offsets), = plans
    assert offsets.tolist() == [12, 15, 18, 20]  # the gather starts at batch 4: rows 0..11 are never read


def test_batches_handed_out_out_of_order_are_skipped():
    """With in_order=False the batches handed out need not be a prefix: those beyond it are listed and skipped."""
    n = 40
    loader = make_loader("workers", n, batch_size=4, in_order=False)
    got, state = interrupt(loader, 3)
    resumed = make_loader("workers", n, forbidden={i for b in got for i in b}, batch_size=4, in_order=False)
    resumed.load_state_dict(state)
    rest = [rows(b) for b in resumed]
    assert sorted(i for b in got + rest for i in b) == list(range(n))
    # A state whose batches 0, 1, 3 and 6 were handed out: the pass resumes with 2, 4, 5, 7, 8, 9.
    state = dict(state, batches_yielded=2, batches_ahead=[3, 6], worker_rng=None)
    for path in ("c-gather", "thread", "workers"):
        resumed = make_loader(path, n, forbidden=set(range(8)) | set(range(12, 16)) | set(range(24, 28)),
                              batch_size=4)
        resumed.load_state_dict(dict(state, num_workers=None))
        assert [rows(b)[0] // 4 for b in resumed] == [2, 4, 5, 7, 8, 9]


class Deterministic:
    """A user's sampler without state_dict: the index stream is fast-forwarded."""

    def __init__(self, n):
        self.n = n

    def __iter__(self):
        return iter(np.random.default_rng(self.n).permutation(self.n).tolist())

    def __len__(self):
        return self.n


class Batches:
    """A user's batch sampler without state_dict."""

    def __iter__(self):
        return iter([[5, 1], [2], [9, 8, 7], [0, 3], [4, 6]])

    def __len__(self):
        return 5


@pytest.mark.parametrize("path", ["c-gather", "thread", "workers"])
def test_user_samplers_without_a_state_are_fast_forwarded(path):
    for kw in (dict(batch_size=3, sampler=Deterministic(20)), dict(batch_sampler=Batches())):
        reference = [rows(b) for b in make_loader(path, 20, **kw)]
        got, state = interrupt(make_loader(path, 20, **kw), 2)
        assert state["sampler"] is None
        resumed = make_loader(path, 20, forbidden={i for b in got for i in b}, **kw)
        resumed.load_state_dict(state)
        assert got + [rows(b) for b in resumed] == reference


class Unsized:
    """A sampler (or batch sampler) without __len__: its pass is drawn as it goes and ends when it ends."""

    def __init__(self, items):
        self.items = items

    def __iter__(self):
        return iter(self.items)


@pytest.mark.parametrize("path", ["c-gather", "thread", "workers"])
def test_samplers_without_a_length_resume_and_end_when_they_end(path):
    for kw in (dict(batch_size=3, sampler=Unsized(Deterministic(20))), dict(batch_sampler=Unsized(Batches())),
               dict(batch_size=None, sampler=Unsized([4, 2, 7, 9]))):
        reference = [rows(b) for b in make_loader(path, 20, **kw)]
        with pytest.raises(TypeError):
            len(make_loader(path, 20, **kw))
        got, state = interrupt(make_loader(path, 20, **kw), 2)
        assert got == reference[:2] and state["num_batches"] is None and not state["finished"]
        resumed = make_loader(path, 20, forbidden={i for b in got for i in b}, **kw)
        resumed.load_state_dict(state)
        assert got + [rows(b) for b in resumed] == reference and resumed.state_dict()["finished"]


def test_a_state_after_the_last_batch_starts_the_next_pass():
    loader = DataLoader(Items(10), batch_size=4, shuffle=True, generator=ddpc.Generator(1))
    passes = [[rows(b) for b in loader] for _ in range(3)]
    first = DataLoader(Items(10), batch_size=4, shuffle=True, generator=ddpc.Generator(1))
    assert [rows(b) for b in first] == passes[0]
    state = first.state_dict()
    assert state["finished"] and state["batches_yielded"] == 3
    resumed = DataLoader(Items(10), batch_size=4, shuffle=True, generator=ddpc.Generator(1))
    resumed.load_state_dict(state)
    assert [rows(b) for b in resumed] == passes[1]
    assert [rows(b) for b in resumed] == passes[2]


def test_state_before_iterating_and_after_loading():
    loader = DataLoader(Items(10), batch_size=4)
    fresh = loader.state_dict()
    assert (fresh["batches_yielded"], fresh["finished"], fresh["num_batches"]) == (0, False, 3)
    _, state = interrupt(DataLoader(Items(10), batch_size=4), 2)
    loader.load_state_dict(state)
    assert loader.state_dict() == state  # loaded, not iterated yet: saved again as it is
    assert [rows(b) for b in loader] == [[8, 9]]
    loader.load_state_dict(fresh)
    assert len([rows(b) for b in loader]) == 3


def test_sharded_loader_state():
    X = np.arange(40, dtype=np.int64)

    def loader(rank):
        return ShardedLoader(X, batch_size=3, seed=2, rank=rank, world_size=2)

    for rank in range(2):
        ref = loader(rank)
        ref.set_epoch(1)
        expected = [b.numpy().tolist() for b in ref]
        first = loader(rank)
        first.set_epoch(1)
        it = iter(first)
        got = [next(it).numpy().tolist() for _ in range(4)]
        state = first.state_dict()
        resumed = loader(rank)
        resumed.load_state_dict(state)
        resumed.set_epoch(1)
        assert got + [b.numpy().tolist() for b in resumed] == expected


def test_sampler_states():
    s = DistributedSampler(10, num_replicas=2, rank=1, seed=4)
    s.set_epoch(3)
    t = DistributedSampler(10, num_replicas=2, rank=1, seed=4)
    t.load_state_dict(s.state_dict())
    assert t.epoch == 3 and t.indices().tolist() == s.indices().tolist()

    r = RandomSampler(12, generator=ddpc.Generator(8))
    first = r.indices().tolist()
    state = r.state_dict()
    second = r.indices().tolist()
    q = RandomSampler(12, generator=ddpc.Generator(0))
    q.load_state_dict(state)
    assert q.indices().tolist() == first  # the pass the state was taken in, again
    assert q.indices().tolist() == second  # then the passes after it

    b = BatchSampler(WeightedDistributedSampler(np.ones(8), 8, num_replicas=2, rank=0), 2, False)
    b.sampler.set_epoch(5)
    c = BatchSampler(WeightedDistributedSampler(np.ones(8), 8, num_replicas=2, rank=0), 2, False)
    c.load_state_dict(b.state_dict())
    assert list(c) == list(b) and c.sampler.epoch == 5

    with pytest.raises(ValueError, match="global generator"):
        RandomSampler(5).load_state_dict(state)
    with pytest.raises(TypeError, match="expects the dict"):
        RandomSampler(5, seed=1).load_state_dict([1])
    with pytest.raises(ValueError, match="epoch must be an integer"):
        DistributedSampler(5, 1, 0).load_state_dict({"epoch": -1})
    assert SequentialSampler(range(4)).indices().tolist() == [0, 1, 2, 3]


class Counter(IterableDataset):
    """A stream of ``n`` items split across workers by item % workers (with ``skew`` worker 0's share
    is cut short); with ``stateful`` it keeps its position in state_dict / load_state_dict (the
    iter() after load_state_dict goes on from there, any other starts over), and an item below
    ``forbid_below`` is an error."""

    def __init__(self, n, stateful=False, forbid_below=0, skew=False):
        self.n, self.forbid_below, self.skew = n, forbid_below, skew
        self.position, self.loaded = 0, False  # items of this worker's share taken so far
        if stateful:
            self.state_dict = lambda: {"position": self.position}
            self.load_state_dict = self._load

    def _load(self, state):
        self.position, self.loaded = state["position"], True

    def _share(self):
        info = get_worker_info()
        w, k = (0, 1) if info is None else (info.id, info.num_workers)
        share = [i for i in range(self.n) if i % k == w]
        if self.skew and w == 0:
            share = share[:3]  # worker 0 runs dry early
        return share

    def __iter__(self):
        share = self._share()
        if not self.loaded:
            self.position = 0
        self.loaded = False
        while self.position < len(share):
            item = share[self.position]
            self.position += 1
            if item < self.forbid_below:
                raise AssertionError(f"item {item} was read again")
            yield np.int64(item)


ITERABLE_PATHS = {"thread": {}, "caller": dict(num_workers=0), "workers": dict(num_workers=2),
                  "workers-persistent": dict(num_workers=2, persistent_workers=True)}


@pytest.mark.parametrize("path", list(ITERABLE_PATHS))
@pytest.mark.parametrize("stateful", [True, False])
@pytest.mark.parametrize("skew", [False, True])
def test_iterable_dataset_resumes(path, stateful, skew):
    opts = ITERABLE_PATHS[path]
    n, k = 30, 4
    if skew and not opts.get("num_workers"):
        pytest.skip("uneven worker streams need workers")

    def loader(**kw):
        return DataLoader(Counter(n, stateful, skew=skew, **kw), batch_size=2, **opts)

    reference = [rows(b) for b in loader()]
    # With skew worker 0 has 2 batches: its end is taken between the 4th and 5th batch handed out.
    for cut in ((3, 4, 5, 6) if skew else (k, k + 1)):
        got, state = interrupt(loader(), cut)
        assert got == reference[:cut]
        if skew:
            assert state["schedule"]["active"] == ([0, 1] if cut < 5 else [1])
        assert state["streams"] is not None and sum(s[0] for s in state["streams"]) == cut
        assert all((s[1] is not None) == stateful for s in state["streams"] if s[0])
        # A stateful stream is not read again before where it stood (the items are increasing per worker).
        resumed = loader(forbid_below=max(i for b in got for i in b) + 1 if stateful and not skew
                         and not opts.get("num_workers") else 0)
        resumed.load_state_dict(_reloaded(state))
        assert got + [rows(b) for b in resumed] == reference
        resumed.dataset.forbid_below = 0
        assert [rows(b) for b in resumed] == reference  # the next pass, from the start


def _reloaded(state):
    return ddpc.load(_saved(state), weights_only=False)


def test_iterable_dataset_stateful_workers_do_not_read_again():
    class Guarded(Counter):
        def __init__(self, n, limits=None):
            super().__init__(n, stateful=True)
            self.limits = limits or {}

        def __iter__(self):
            info = get_worker_info()
            low = self.limits.get(info.id, 0)
            for item in super().__iter__():
                if self.position - 1 < low:
                    raise AssertionError(f"worker {info.id} read its item {self.position - 1} again")
                yield item

    loader = DataLoader(Guarded(40), batch_size=3, num_workers=2)
    reference = [rows(b) for b in loader]
    got, state = interrupt(DataLoader(Guarded(40), batch_size=3, num_workers=2), 5)
    limits = {w: s[1]["position"] for w, s in enumerate(state["streams"]) if s[1] is not None}
    assert sorted(limits) == [0, 1]
    resumed = DataLoader(Guarded(40, limits), batch_size=3, num_workers=2)
    resumed.load_state_dict(state)
    assert got + [rows(b) for b in resumed] == reference


def test_errors_for_states_of_another_loader():
    def dl(**kw):
        args = dict(batch_size=4, sampler=DistributedSampler(20, num_replicas=2, rank=0))
        args.update(kw)
        return DataLoader(Items(args.pop("n", 20)), **args)

    _, state = interrupt(dl(), 1)
    with pytest.raises(ValueError, match="batch size 4, but this one has 5"):
        dl(batch_size=5).load_state_dict(state)
    with pytest.raises(ValueError, match="drop_last False, but this one has True"):
        dl(drop_last=True).load_state_dict(state)
    with pytest.raises(ValueError, match="data set length 20, but this one has 21"):
        dl(n=21, sampler=DistributedSampler(20, num_replicas=2, rank=0)).load_state_dict(state)
    with pytest.raises(ValueError, match=r"world size \(num_replicas\) 2, but this one has 3"):
        dl(sampler=DistributedSampler(20, num_replicas=3, rank=0)).load_state_dict(state)
    with pytest.raises(ValueError, match="rank 0, but this one has 1.*loader_state"):
        dl(sampler=DistributedSampler(20, num_replicas=2, rank=1)).load_state_dict(state)
    with pytest.raises(TypeError, match="expects the dict that state_dict"):
        dl().load_state_dict([state])
    with pytest.raises(ValueError, match="no 'batches_yielded'"):
        dl().load_state_dict({k: v for k, v in state.items() if k != "batches_yielded"})
    with pytest.raises(ValueError, match="batches_yielded must be an integer"):
        dl().load_state_dict(dict(state, batches_yielded="2"))
    with pytest.raises(ValueError, match="7 batches handed out of a pass of 3"):
        dl().load_state_dict(dict(state, batches_yielded=7))
    with pytest.raises(ValueError, match="batches_ahead"):
        dl().load_state_dict(dict(state, batches_ahead=[0]))
    with pytest.raises(ValueError, match="finished must be a bool"):
        dl().load_state_dict(dict(state, finished=None))
    with pytest.raises(ValueError, match="streams must be"):
        dl().load_state_dict(dict(state, streams=[[1, None]]))
    with pytest.raises(ValueError, match="has no load_state_dict"):
        DataLoader(Items(20), batch_size=4, sampler=Deterministic(20)).load_state_dict(
            dict(state, num_replicas=None, rank=None))
    with pytest.raises(ValueError, match="number of workers 2, but this one has 1"):
        _, it_state = interrupt(DataLoader(Counter(10), batch_size=2, num_workers=2), 1)
        DataLoader(Counter(10), batch_size=2, num_workers=1).load_state_dict(it_state)
    # The sampler moved to another epoch between load_state_dict and iter().
    loader = dl()
    loader.load_state_dict(state)
    loader.sampler.set_epoch(1)
    with pytest.raises(ValueError, match="set_epoch with the saved epoch"):
        iter(loader)
    loader.sampler.set_epoch(0)  # the state is kept until a pass takes it
    assert [rows(b) for b in loader] == [rows(b) for b in dl()][1:]


def test_checkpoint_loader_state_without_a_group(tmp_path):
    loader = DataLoader(Items(12), batch_size=5)
    got, _ = interrupt(loader, 1)
    states = ddpc.checkpoint.loader_state(loader)
    ddpc.checkpoint.save({"loader": states}, str(tmp_path / "c"))
    resumed = DataLoader(Items(12), batch_size=5)
    ddpc.checkpoint.load_loader_state(resumed, ddpc.checkpoint.load(str(tmp_path / "c"))["loader"])
    assert [rows(b) for b in resumed] == [[5, 6, 7, 8, 9], [10, 11]]
    with pytest.raises(ValueError, match="one loader state per rank"):
        ddpc.checkpoint.load_loader_state(resumed, states * 2)


def test_killed_rank_resumes_mid_epoch_to_the_same_parameters_and_samples(tmp_path):
    script = os.path.join(ROOT, "examples", "resume_mid_epoch.py")
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "python"))

    def launch(name, *extra, restarts=()):
        res = subprocess.run([sys.executable, "-m", "ddpc.run", "--nproc-per-node", "2", *restarts, script,
                              "--checkpoint", str(tmp_path / f"{name}.ckpt"), "--save", str(tmp_path / f"{name}.json"),
                              *extra], capture_output=True, text=True, timeout=300, env=env, cwd=tmp_path)
        out = res.stdout + res.stderr
        assert res.returncode == 0, out
        with open(tmp_path / f"{name}.json") as f:
            return json.load(f), out

    plain, _ = launch("plain")
    resumed, out = launch("resumed", "--fail-at", "1:7", restarts=("--max-restarts", "1"))
    assert "rank 1" in out and "SIGKILL" in out and "restarting the group (1/1)" in out
    assert "resumed from" in out and "at epoch 1 after batch 5 of 13" in out
    assert "epoch 1  loss" in out and "(8 steps)" in out  # the rest of epoch 1 only
    assert resumed["seen"] == plain["seen"]
    for rank_seen in resumed["seen"]:
        flat = [i for b in rank_seen for i in b]
        assert len(flat) == 3 * 100 and all(len(set(flat[e * 100:(e + 1) * 100])) == 100 for e in range(3))
    for name, value in plain["params"].items():
        np.testing.assert_array_equal(np.asarray(resumed["params"][name]), np.asarray(value), err_msg=name)


# ---- random augmentation in worker processes -------------------------------------------------


def draws():
    """A number from each generator a worker seeds: ddpc's (rand), Python's random (random and
    gauss, which keeps every second number for the next call) and numpy's global one (rand and
    randn, which does the same)."""
    return [float(ddpc.rand(1).numpy()[0]), random.random(), random.gauss(0, 1), np.random.rand(),
            np.random.randn()]


class Augmented(Dataset):
    """Sample i is [i, draws()]; reading sample 0 waits for ``gate`` (a multiprocessing Event) when
    there is one, so that the batches after it are handed out first with in_order=False."""

    def __init__(self, n, gate=None):
        self.n, self.gate = n, gate

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == 0 and self.gate is not None and not self.gate.wait(60):
            raise AssertionError("the gate was never opened")
        return np.array([i] + draws())


class AugmentedStream(IterableDataset):
    """Each worker's share of 0..n-1 (i % workers), each item [i, draws()]."""

    def __init__(self, n):
        self.n, self.position, self.loaded = n, 0, False

    def __iter__(self):
        info = get_worker_info()
        share = list(range(self.n))[info.id::info.num_workers] if info is not None else list(range(self.n))
        if not self.loaded:
            self.position = 0
        self.loaded = False
        while self.position < len(share):
            self.position += 1
            yield np.array([share[self.position - 1]] + draws())


class StatefulAugmentedStream(AugmentedStream):
    """An AugmentedStream that keeps its position in state_dict / load_state_dict."""

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        self.position, self.loaded = state["position"], True


def samples(batches):
    """{first sample index: the batch's bytes} of a pass (every batch once), and their order."""
    out = [np.asarray(b.numpy() if hasattr(b, "numpy") else b) for b in batches]
    return {int(b[0, 0]): b.tobytes() for b in out}, [int(b[0, 0]) for b in out]


def augmented_loader(dataset, num_workers, **kw):
    return DataLoader(dataset, batch_size=3, num_workers=num_workers, generator=ddpc.Generator(17), **kw)


# Forked workers: every case. Spawned ones start an interpreter each (a second or more on a small machine): a sample.
@pytest.mark.parametrize("num_workers,in_order,method",
                         [(n, o, "fork") for n in (0, 1, 2, 3) for o in (True, False) if n or o]
                         + [(2, True, "spawn"), (3, False, "spawn")])
def test_random_augmentation_resumes_where_each_worker_stood(num_workers, in_order, method):
    kw = dict(shuffle=True, in_order=in_order)
    if num_workers:
        kw["multiprocessing_context"] = method

    def fresh():
        ddpc.manual_seed(5), random.seed(5), np.random.seed(5)
        return augmented_loader(Augmented(40), num_workers, **kw)

    reference = fresh()
    expected, order = samples(reference)
    assert samples(fresh())[0] == expected  # the uninterrupted pass is itself repeatable
    next_pass, _ = samples(reference)
    for cut in (1, 5) if method == "fork" else (4,):
        first = fresh()
        it = iter(first)
        got, got_order = samples(next(it) for _ in range(cut))
        state = first.state_dict()
        # With num_workers=0 the data set draws from this process's generators: a checkpoint saves them.
        saved = ddpc.get_rng_state(), random.getstate(), np.random.get_state()
        del it
        ddpc.manual_seed(99), random.seed(99), np.random.seed(99)  # a new process
        resumed = augmented_loader(Augmented(40), num_workers, **kw)
        resumed.load_state_dict(ddpc.load(_saved(state)))
        ddpc.set_rng_state(saved[0]), random.setstate(saved[1]), np.random.set_state(saved[2])
        rest, rest_order = samples(resumed)
        assert {**got, **rest} == expected and len(got) + len(rest) == len(expected)
        if in_order:
            assert got_order + rest_order == order
        assert (state["worker_rng"] is None) == (num_workers == 0)
        if num_workers:
            assert len(state["worker_rng"]) == num_workers
            assert samples(resumed)[0] == next_pass  # a new base seed for the next pass, as uninterrupted


@pytest.mark.parametrize("method", ["fork", "spawn"])
def test_random_augmentation_resumes_after_batches_handed_out_out_of_order(method):
    """Worker 0 holds batch 0 back while worker 1 hands out batches 1 and 3: the resumed pass makes
    batch 0 from worker 0's first draws and batch 5 from where worker 1 stood after batch 3."""
    ctx = multiprocessing.get_context(method)
    kw = dict(in_order=False, multiprocessing_context=method)
    expected, _ = samples(augmented_loader(Augmented(30), 2, **kw))
    gate = ctx.Event()
    first = augmented_loader(Augmented(30, gate), 2, **kw)
    it = iter(first)
    got, order = samples(next(it) for _ in range(2))
    assert order == [3, 9]  # batches 1 and 3
    state = first.state_dict()
    gate.set()
    del it
    assert (state["batches_yielded"], state["batches_ahead"]) == (0, [1, 3])
    assert state["worker_rng"][0] is None  # worker 0 handed out nothing: its generators as seeded
    resumed = augmented_loader(Augmented(30), 2, **kw)
    resumed.load_state_dict(ddpc.load(_saved(state)))
    rest, _ = samples(resumed)
    assert sorted(rest) == [i for i in range(0, 30, 3) if i not in (3, 9)]
    assert {**got, **rest} == expected


@pytest.mark.parametrize("cut", [2, 7, 12])
def test_persistent_workers_resume_mid_pass_and_go_on_into_the_next(cut):
    """The second pass of persistent workers (their generators go on from the first, here dropped
    after two batches with tasks still in flight) is resumed; the pass after it goes on from where
    every worker stood, also one that made its last batch of the pass before the state was taken."""
    kw = dict(num_workers=3, persistent_workers=True, shuffle=True)

    def passes(loader, first_cut=2):
        it = iter(loader)
        for _ in range(first_cut):
            next(it)
        return it

    reference = augmented_loader(Augmented(40), **kw)
    passes(reference)
    expected, second = [samples(reference) for _ in range(2)]
    first = augmented_loader(Augmented(40), **kw)
    passes(first)
    it = iter(first)
    got, _ = samples(next(it) for _ in range(cut))
    state = first.state_dict()
    del it
    resumed = augmented_loader(Augmented(40), **kw)
    resumed.load_state_dict(state)
    rest, rest_order = samples(resumed)
    assert {**got, **rest} == expected[0] and rest_order == expected[1][cut:]
    assert samples(resumed) == second


@pytest.mark.parametrize("stateful,num_workers,in_order,method",
                         [(s, n, o, "fork") for s in (True, False) for n in (1, 2, 3) for o in (True, False)]
                         + [(True, 3, True, "spawn"), (True, 2, False, "spawn")])  # (spawned workers: a sample)
def test_random_augmentation_of_a_stream_resumes_where_each_worker_stood(stateful, num_workers, in_order, method):
    kw = dict(in_order=in_order, multiprocessing_context=method)
    stream = StatefulAugmentedStream if stateful else AugmentedStream
    expected, order = samples(augmented_loader(stream(31), num_workers, **kw))
    for cut in (1, 5):
        first = augmented_loader(stream(31), num_workers, **kw)
        it = iter(first)
        got, got_order = samples(next(it) for _ in range(cut))
        state = first.state_dict()
        del it
        resumed = augmented_loader(stream(31), num_workers, **kw)
        resumed.load_state_dict(_reloaded(state))
        rest, rest_order = samples(resumed)
        assert {**got, **rest} == expected and len(got) + len(rest) == len(expected)
        if in_order:
            assert got_order + rest_order == order


def test_states_without_worker_generators_still_load():
    """A state of an earlier ddpc (no worker_rng) resumes the rest of the pass, its workers' draws
    starting over from the base seed; one of another number of workers does the same."""
    expected, order = samples(augmented_loader(Augmented(30), 2))
    first = augmented_loader(Augmented(30), 2)
    it = iter(first)
    got, got_order = samples(next(it) for _ in range(4))
    state = first.state_dict()
    del it
    old = {k: v for k, v in state.items() if k != "worker_rng"}
    for loaded, workers in ((old, 2), (state, 3)):
        resumed = augmented_loader(Augmented(30), workers)
        resumed.load_state_dict(loaded)
        rest, rest_order = samples(resumed)
        assert got_order + rest_order == order
        assert rest != {i: expected[i] for i in rest_order}  # the draws started over
    with pytest.raises(ValueError, match="worker_rng must list"):
        augmented_loader(Augmented(30), 2).load_state_dict(dict(state, worker_rng={}))
    broken = dict(state["worker_rng"][0], numpy=[b"\0" * 5, 0, 0, 0.0])
    with pytest.raises(ValueError, match="generator state must be what state_dict"):
        augmented_loader(Augmented(30), 2).load_state_dict(dict(state, worker_rng=[broken, None]))


@pytest.mark.parametrize("path", ["c-gather", "caller", "workers"])
@pytest.mark.parametrize("sampling", ["shuffle-generator", "random-seeded", "random-replacement", "batch-sampler",
                                      "drop-last"])
def test_long_samplers_drawn_as_they_go_give_the_planned_batches(path, sampling, monkeypatch):
    # A sampler longer than the plan limit is drawn a window at a time (here windows of 5 across batches of 3 to 6),
    # with the same batches, also after a resume, as a planned one.
    n, k = 37, 3
    expected = [rows(b) for b in make_loader(path, n, **SAMPLERS[sampling](n))]
    monkeypatch.setattr(ddata, "_PLAN_LIMIT", 8)
    monkeypatch.setattr(ddata, "_WINDOW", 5)
    monkeypatch.setattr(ddata.DataLoader, "_plan", None)  # (never planned up front)
    loader = make_loader(path, n, **SAMPLERS[sampling](n))
    assert len(loader) == len(expected) and [rows(b) for b in loader] == expected
    got, state = interrupt(make_loader(path, n, **SAMPLERS[sampling](n)), k)
    assert got == expected[:k]
    resumed = make_loader(path, n, **SAMPLERS[sampling](n))
    resumed.load_state_dict(state)
    assert [rows(b) for b in resumed] == expected[k:] and resumed.state_dict()["finished"]


def test_a_sampler_of_1e12_draws_hands_out_batches_at_once(monkeypatch):
    # minGPT's idiom: RandomSampler(data, replacement=True, num_samples=int(1e10)), then next() forever.
    monkeypatch.setattr(ddata, "_WINDOW", 1000)
    sampler = RandomSampler(Items(50), replacement=True, num_samples=10 ** 12, generator=ddpc.Generator(1))
    loader = DataLoader(Items(50), batch_size=64, sampler=sampler, num_workers=0)
    assert len(loader) == 10 ** 12 // 64
    it = iter(loader)
    batches = [rows(next(it)) for _ in range(40)]  # past the first window of draws
    flat = sum(batches, [])
    assert all(len(b) == 64 for b in batches) and set(flat) == set(range(50))
    first = list(itertools.islice(iter(RandomSampler(Items(50), replacement=True, num_samples=10 ** 12,
                                                     generator=ddpc.Generator(1))), len(flat)))
    assert first == flat  # the sampler's own order
    pairs = BatchSampler(sampler, 64, drop_last=False)
    assert len(next(iter(pairs))) == 64


class Noisy(Dataset):
    """Sample i: [i, two numbers from ddpc.rand], drawn as it is read (random augmentation)."""

    def __len__(self):
        return 20

    def __getitem__(self, i):
        return ddpc.cat([ddpc.tensor([float(i)]), ddpc.rand(2)])


class NoisyStream(IterableDataset):
    def __iter__(self):
        return (ddpc.cat([ddpc.tensor([float(i)]), ddpc.rand(2)]) for i in range(20))


@pytest.mark.parametrize("cut", [1, 4])
@pytest.mark.parametrize("source", ["planned", "drawn", "stream"])
def test_random_augmentation_in_the_fetch_thread_resumes_where_it_stood(source, cut):
    """The background thread (PATHS['thread']) draws ahead of the batches handed out; a resumed
    pass's thread draws on from where it stood after the last batch handed out."""
    def loader():
        dataset, kwargs = {"planned": (Noisy(), dict(shuffle=True)),
                           "drawn": (Noisy(), dict(sampler=iter(range(20)))),  # (no length: drawn as it goes)
                           "stream": (NoisyStream(), {})}[source]
        return DataLoader(dataset, batch_size=3, generator=ddpc.Generator(17), **PATHS["thread"], **kwargs)

    expected = [b.numpy().tobytes() for b in loader()]
    assert [b.numpy().tobytes() for b in loader()] == expected  # the uninterrupted pass is itself repeatable
    first = loader()
    it = iter(first)
    got = [next(it).numpy().tobytes() for _ in range(cut)]
    state = first.state_dict()
    del it
    ddpc.manual_seed(99)  # a new process
    resumed = loader()
    resumed.load_state_dict(_reloaded(state))
    assert got + [b.numpy().tobytes() for b in resumed] == expected
