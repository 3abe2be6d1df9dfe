"""Loaders: batch contents against the numpy gather of the sampler's indices,
every sample once per epoch across rank processes, .npy files with bounded
resident memory, the generic Dataset path, errors at construction, and no
threads left behind."""

import gc
import json
import os
import subprocess
import sys
import textwrap
import threading
import time

import numpy as np
import pytest

import ddpc
from ddpc.data import (BatchSampler, DataLoader, Dataset, DistributedSampler, RandomSampler, SequentialSampler,
                       ShardedLoader, TensorDataset, WeightedDistributedSampler)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# Where the ddpc under test was imported from (the checkout, or site-packages), for child processes.
DDPC_PARENT = os.path.dirname(os.path.dirname(ddpc.__file__))


def c_threads():
    return len(os.listdir("/proc/self/task"))


def stable_threads(timeout=2.0):
    """The task count once two looks 50 ms apart agree (threads joined by earlier tests are gone)."""
    deadline = time.monotonic() + timeout
    last = c_threads()
    while time.monotonic() < deadline:
        time.sleep(0.05)
        now, last = last, c_threads()
        if now == last:
            break
    return last


def settled_threads(expected, timeout=5.0):
    """The task count once it equals `expected` or the timeout passes: a joined
    thread can linger in /proc/self/task for a moment after pthread_join returns."""
    deadline = time.monotonic() + timeout
    while c_threads() != expected and time.monotonic() < deadline:
        time.sleep(0.01)
    return c_threads()


def arrays(n=103, seed=0):
    rng = np.random.default_rng(seed)
    return {
        "x": rng.standard_normal((n, 5, 3)).astype(np.float32),
        "y": np.arange(n, dtype=np.int64),
        "u": rng.integers(0, 255, size=(n, 7), dtype=np.uint8),
        "h": rng.standard_normal(n).astype(np.float16),
        "d": rng.standard_normal((n, 2)),
    }


def check_batches(loader, sources, idx, offsets):
    batches = list(loader)
    assert len(batches) == len(offsets) - 1 == len(loader)
    # All batches are still held here: none was overwritten by a later one.
    for b, batch in enumerate(batches):
        want = idx[offsets[b]:offsets[b + 1]]
        assert isinstance(batch, list) and len(batch) == len(sources)
        for t, src in zip(batch, sources):
            assert isinstance(t, ddpc.Tensor)
            got = t.numpy()
            assert got.dtype == src.dtype and got.shape == (len(want),) + src.shape[1:]
            np.testing.assert_array_equal(got, src[want])


@pytest.mark.parametrize("batch_size,drop_last,prefetch,threads",
                         [(1, False, 1, 1), (16, False, 2, 2), (16, True, 3, 4), (50, False, 8, 3), (200, False, 2, 2)])
def test_batches_equal_numpy_gather(batch_size, drop_last, prefetch, threads):
    a = arrays()
    sources = [a["x"], a["y"], a["u"], a["h"], a["d"]]
    sampler = DistributedSampler(len(a["y"]), num_replicas=3, rank=1, seed=5)
    loader = DataLoader(TensorDataset(*sources), batch_size=batch_size, sampler=sampler, drop_last=drop_last,
                        prefetch=prefetch, num_threads=threads)
    idx = sampler.indices()
    n = len(idx)
    nb = n // batch_size if drop_last else -(-n // batch_size)
    check_batches(loader, sources, idx, [min(b * batch_size, n) for b in range(nb + 1)])


def test_the_loader_accounts_for_its_time():
    """_C.Loader.stats(): every batch and chunk counted, the gathering and the
    waits in seconds, consistent with each other, and kept after the pass."""
    a = arrays()
    loader = DataLoader(TensorDataset(a["x"], a["y"]), batch_size=16, shuffle=True, num_threads=2)
    it = iter(loader)
    first = it._loader.stats()
    assert first["batches"] == 0 and first["wait_s"] == 0.0
    n = sum(1 for _ in it)
    stats = it._loader.stats()
    assert stats["batches"] == n == len(loader)
    assert stats["chunks"] >= n
    assert stats["gather_s"] > 0
    assert stats["copy_issue_s"] == stats["staging_wait_s"] == 0.0  # host batches: no copies
    assert 0 <= stats["wait_idle_s"] <= stats["wait_s"] <= stats["elapsed_s"]
    assert it._loader.stats() == stats  # the pass is over: the figures stay as it left them


@pytest.mark.parametrize("row_bytes", [255, 256, 260, 1001, 3136])
@pytest.mark.parametrize("batch_size,threads", [(1, 1), (7, 2), (64, 1), (100, 3)])
def test_wide_rows_equal_numpy_gather(row_bytes, batch_size, threads):
    # Rows of 256 bytes and more are copied line by line with prefetching; rows
    # whose length is no multiple of 64 start off a line boundary in the batch.
    rng = np.random.default_rng(row_bytes)
    n = 301
    wide = rng.integers(0, 256, size=(n, row_bytes), dtype=np.uint8)
    floats = rng.standard_normal((n, 3, 65)).astype(np.float32)  # 780 bytes
    labels = np.arange(n, dtype=np.int64)
    sources = [wide, floats, labels]
    sampler = DistributedSampler(n, num_replicas=2, rank=1, seed=row_bytes)
    loader = DataLoader(TensorDataset(*sources), batch_size=batch_size, sampler=sampler, num_threads=threads)
    idx = sampler.indices()
    check_batches(loader, sources, idx, [min(b * batch_size, len(idx)) for b in range(-(-len(idx) // batch_size) + 1)])


def test_batch_memory_is_reused_only_once_released():
    a = arrays(2000)
    loader = DataLoader(TensorDataset(a["x"], a["y"]), batch_size=10, shuffle=True, prefetch=2, num_threads=2)
    pointers = set()
    for x, y in loader:  # each batch dropped before the next: a handful of buffer sets serve the epoch
        pointers.add(x.data_ptr())
        np.testing.assert_array_equal(x.numpy(), a["x"][y.numpy()])
    assert len(pointers) <= 4
    kept = []
    for i, (x, y) in enumerate(loader):
        if i % 3 == 0:
            kept.append((x.numpy(), y))  # a numpy view alone keeps the memory from being reused
    for x, y in kept:
        np.testing.assert_array_equal(x, a["x"][y.numpy()])


def test_shuffle_sequential_and_epochs():
    a = arrays(64)
    ds = TensorDataset(a["x"], a["y"])
    seq = [y.numpy() for _, y in DataLoader(ds, batch_size=10)]
    assert np.concatenate(seq).tolist() == list(range(64))
    ep1 = np.concatenate([y.numpy() for _, y in DataLoader(ds, batch_size=10, shuffle=True)])
    assert sorted(ep1.tolist()) == list(range(64)) and ep1.tolist() != list(range(64))
    s = DistributedSampler(ds, num_replicas=2, rank=0, seed=1)
    dl = DataLoader(ds, batch_size=8, sampler=s)
    first = np.concatenate([y.numpy() for _, y in dl])
    s.set_epoch(1)
    second = np.concatenate([y.numpy() for _, y in dl])
    assert first.tolist() == s.__class__(ds, 2, 0, seed=1).indices().tolist() and first.tolist() != second.tolist()


def test_batch_sampler_and_other_samplers():
    a = arrays(40)
    ds = TensorDataset(a["x"], a["y"])
    custom = [[3, 1], [39], [0, 0, 5, 7, 9]]
    batches = list(DataLoader(ds, batch_sampler=custom))
    assert [y.numpy().tolist() for _, y in batches] == custom
    bs = BatchSampler(RandomSampler(ds, seed=2), 6, drop_last=True)
    got = [y.numpy().tolist() for _, y in DataLoader(ds, batch_sampler=bs)]
    assert got == list(bs) and len(got) == 6
    w = WeightedDistributedSampler(np.ones(40), 30, num_replicas=2, rank=1, seed=3)
    got = np.concatenate([y.numpy() for _, y in DataLoader(ds, batch_size=4, sampler=w)])
    assert got.tolist() == w.indices().tolist()
    gen = DataLoader(ds, batch_size=5, sampler=range(12))  # any iterable of indices with a length
    assert [y.numpy().tolist() for _, y in gen][-1] == [10, 11]


def test_tensor_sources_and_dataset_indexing():
    a = arrays(30)
    xt = ddpc.from_numpy(a["x"])
    ds = TensorDataset(xt, a["y"].tolist())
    x0, y0 = ds[4]
    np.testing.assert_array_equal(x0.numpy(), a["x"][4])
    assert int(y0) == 4 and len(ds) == 30
    x, y = next(iter(DataLoader(ds, batch_size=30)))
    np.testing.assert_array_equal(x.numpy(), a["x"])


@pytest.mark.parametrize("budget", [1 << 40, 1], ids=["mapped", "pread"])
def test_npy_path_and_np_load_mmap(tmp_path, monkeypatch, budget):
    """A file within the resident budget is read through its mapping; a bigger one with pread."""
    monkeypatch.setattr(ddpc.data, "RESIDENT_BUDGET", budget)
    a = arrays(77)
    px, py = tmp_path / "x.npy", tmp_path / "y.npy"
    np.save(px, a["x"])
    np.save(py, a["y"])
    sampler = DistributedSampler(77, num_replicas=2, rank=0, seed=9)
    idx = sampler.indices()
    offsets = [min(b * 8, len(idx)) for b in range(-(-len(idx) // 8) + 1)]
    for sources in ([str(px), py], [np.load(px, mmap_mode="r"), np.load(py, mmap_mode="r")]):
        check_batches(DataLoader(TensorDataset(*sources), batch_size=8, sampler=sampler), [a["x"], a["y"]], idx,
                      offsets)
    loader = ShardedLoader(str(px), 8, seed=9, rank=0, world_size=2)
    assert len(loader) == len(offsets) - 1
    got = [b.numpy() for b in loader]
    np.testing.assert_array_equal(np.concatenate(got), a["x"][idx])


RANK_SCRIPT = textwrap.dedent("""
    import json, sys
    import numpy as np
    from ddpc.data import ShardedLoader
    path = sys.argv[1]
    rank, world, epoch, batch = map(int, sys.argv[2:6])
    x = np.load(path)
    loader = ShardedLoader([path, np.arange(len(x))], batch, shuffle=True, seed=11, rank=rank, world_size=world)
    loader.set_epoch(epoch)
    seen = []
    for xb, yb in loader:
        assert (xb.numpy() == x[yb.numpy()]).all()
        seen += yb.numpy().tolist()
    print(json.dumps({"len": len(loader), "seen": seen}))
""")


@pytest.mark.parametrize("n,world", [(120, 3), (101, 4)])
def test_every_sample_once_per_epoch_across_rank_processes(tmp_path, n, world):
    path = tmp_path / "data.npy"
    np.save(path, np.random.default_rng(1).standard_normal((n, 4)).astype(np.float32))
    script = tmp_path / "rank.py"
    script.write_text(RANK_SCRIPT)
    env = dict(os.environ, PYTHONPATH=DDPC_PARENT)
    per_epoch = []
    for epoch in (0, 1):
        procs = [subprocess.Popen([sys.executable, str(script), str(path), str(r), str(world), str(epoch), "7"],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                 for r in range(world)]
        outs = []
        for p in procs:
            out, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
            outs.append(json.loads(out))
        seen = [o["seen"] for o in outs]
        assert len({len(s) for s in seen}) == 1  # same number of samples, and of steps, on every rank
        assert len({o["len"] for o in outs}) == 1
        flat = sum(seen, [])
        counts = np.bincount(flat, minlength=n)
        padding = len(flat) - n
        assert (counts >= 1).all() and counts.sum() == n + padding and padding < world
        if padding == 0:
            assert (counts == 1).all()
        per_epoch.append(seen)
    assert per_epoch[0] != per_epoch[1]


def group_worker(rank, path, n, epoch):
    """A rank of a real process group: ShardedLoader takes rank and world size from it."""
    import ddpc.distributed as dist
    dist.init_process_group("cpu")
    try:
        loader = ShardedLoader([path, np.arange(n)], 5, seed=3)
        loader.set_epoch(epoch)
        assert (loader.sampler.rank, loader.sampler.num_replicas) == (dist.get_rank(), dist.get_world_size())
        return [int(v) for _, yb in loader for v in yb.numpy()]
    finally:
        dist.destroy_process_group()


def test_sharded_loader_defaults_to_the_process_group(tmp_path):
    n, world = 40, 2
    path = str(tmp_path / "x.npy")
    np.save(path, np.zeros((n, 3), np.float32))
    shares = ddpc.spawn(group_worker, args=(path, n, 1), nprocs=world)
    assert sorted(shares[0] + shares[1]) == list(range(n))
    for rank, share in enumerate(shares):
        expected = DistributedSampler(n, world, rank, seed=3)
        expected.set_epoch(1)
        assert share == expected.indices().tolist()


RSS_SCRIPT = textwrap.dedent("""
    import sys
    import numpy as np
    import ddpc.data as data
    path, budget, how = sys.argv[1], int(sys.argv[2]), sys.argv[3]
    data.RESIDENT_BUDGET = budget
    def rss():
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * 4096
    source = np.load(path, mmap_mode="r") if how == "memmap" else path
    loader = data.ShardedLoader(source, 256, shuffle=True, rank=0, world_size=1)
    base = rss()
    peak = 0
    rows = 0
    for batch in loader:
        rows += batch.shape[0]
        peak = max(peak, rss() - base)
    print(rows, peak)
""")


def test_npy_larger_than_the_resident_budget_streams_with_bounded_memory(tmp_path):
    rows, width = 40 * 1024, 1024  # 160 MiB of float32
    path = tmp_path / "big.npy"
    mm = np.lib.format.open_memmap(path, mode="w+", dtype=np.float32, shape=(rows, width))
    for i in range(0, rows, 4096):
        mm[i:i + 4096] = i
    del mm
    size = rows * width * 4
    script = tmp_path / "rss.py"
    script.write_text(RSS_SCRIPT)
    env = dict(os.environ, PYTHONPATH=DDPC_PARENT)

    def peak(budget, how):
        res = subprocess.run([sys.executable, str(script), str(path), str(budget), how], capture_output=True,
                             text=True, env=env, timeout=120)
        assert res.returncode == 0, res.stderr
        n, grown = map(int, res.stdout.split())
        assert n == rows
        return grown

    # Within the budget the whole file ends up resident (the control: the measure can see it).
    assert peak(1 << 40, "path") > 0.8 * size
    # With an 8 MiB budget, a path is read with pread and an np.load(mmap_mode="r") array
    # has its pages dropped as the epoch goes: resident memory stays a fraction of the data set.
    assert peak(8 << 20, "path") < size / 8
    assert peak(8 << 20, "memmap") < size / 3


class Squares(Dataset):
    def __init__(self, n, fail_at=None):
        self.n, self.fail_at = n, fail_at

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i == self.fail_at:
            raise KeyError(f"sample {i} is broken")
        return {"x": np.full(3, i, np.float32), "sq": i * i, "f": i / 2}


def test_generic_dataset_path():
    ds = Squares(23)
    batches = list(DataLoader(ds, batch_size=5, shuffle=False, prefetch=3))
    assert len(batches) == 5
    b = batches[1]
    np.testing.assert_array_equal(b["x"].numpy(), np.repeat(np.arange(5, 10, dtype=np.float32)[:, None], 3, 1))
    assert b["sq"].numpy().tolist() == [i * i for i in range(5, 10)] and b["sq"].dtype == ddpc.int64
    assert b["f"].dtype == ddpc.float64
    sampler = DistributedSampler(ds, num_replicas=2, rank=1, seed=3)
    got = np.concatenate([b["sq"].numpy() for b in DataLoader(ds, batch_size=4, sampler=sampler)])
    assert got.tolist() == [i * i for i in sampler.indices().tolist()]
    custom = list(DataLoader(ds, batch_size=4, collate_fn=lambda items: [it["sq"] for it in items]))
    assert custom[0] == [0, 1, 4, 9]
    tuples = list(DataLoader(TensorDataset(np.arange(6.0)), batch_size=4, collate_fn=lambda s: len(s)))
    assert tuples == [4, 2]


def test_generic_dataset_error_reaches_the_caller():
    before = threading.active_count()
    with pytest.raises(KeyError, match="sample 7 is broken"):
        for _ in DataLoader(Squares(20, fail_at=7), batch_size=2):
            pass
    assert threading.active_count() == before


def test_no_threads_left_after_dropping_iterators_mid_epoch():
    a = arrays(1000)
    py_before = threading.active_count()
    c_before = stable_threads()
    loader = DataLoader(TensorDataset(a["x"], a["y"]), batch_size=10, shuffle=True, num_threads=3, prefetch=4)
    it = iter(loader)
    next(it)
    assert c_threads() == c_before + 3
    held = next(it)
    del it
    assert settled_threads(c_before) == c_before
    assert held[1].numpy().shape == (10,)  # a batch outlives its loader
    it = iter(DataLoader(Squares(100), batch_size=3, prefetch=2))
    next(it)
    assert threading.active_count() == py_before + 1
    del it
    assert threading.active_count() == py_before
    it = iter(ShardedLoader(a["x"], 10, rank=0, world_size=1))
    next(it)
    it.close()
    assert settled_threads(c_before) == c_before
    list(DataLoader(TensorDataset(a["y"]), batch_size=100))  # a finished epoch stops its threads too
    assert settled_threads(c_before) == c_before and threading.active_count() == py_before


def test_closing_from_another_thread_while_next_queues_the_following_batch():
    """next() queues the following batch after taking one, and that allocates:
    the garbage collector may run there and let another thread in, whose
    close() must not free the loader under the running next()."""
    it = iter(DataLoader(TensorDataset(np.zeros((256, 8), np.float32)), batch_size=4, prefetch=1, num_threads=1))
    inside, closed, got = threading.Event(), threading.Event(), []

    def during_gc(phase, info):
        # Only in the consumer, inside the C next() (the frame that called it is _ArrayBatches._next).
        if (phase == "start" and threading.current_thread() is consumer and not inside.is_set()
                and sys._getframe(1).f_code.co_name == "_next" and got):
            inside.set()
            closed.wait(5)  # sleeps with the GIL released: the main thread closes meanwhile

    def consume():
        for batch in it:
            got.append(batch)

    consumer = threading.Thread(target=consume)
    threshold = gc.get_threshold()
    gc.callbacks.append(during_gc)
    gc.set_threshold(1)  # a collection at nearly every allocation
    try:
        consumer.start()
        assert inside.wait(20), "the collector never ran inside next()"
        it.close()
        closed.set()
        consumer.join(10)
    finally:
        gc.callbacks.remove(during_gc)
        gc.set_threshold(*threshold)
    assert not consumer.is_alive() and 0 < len(got) < 64


def test_closing_from_another_thread_ends_the_waiting_iteration():
    """close() while another thread waits in next(): that next() ends the epoch (no crash,
    no hang), and a second thread calling next() meanwhile gets an error."""
    rows = np.zeros((1024, 1 << 17), dtype=np.uint8)  # 64 batches of 2 MiB: the consumer mostly waits

    def run(make):
        it = iter(make())
        seen, errors = [], []

        def consume():
            try:
                for b in it:
                    seen.append(b)
            except RuntimeError as e:
                errors.append(str(e))

        t = threading.Thread(target=consume)
        t.start()
        while not seen and t.is_alive():
            time.sleep(0.001)
        it.close()
        t.join(10)
        assert not t.is_alive()
        return seen, errors

    for _ in range(5):
        seen, errors = run(lambda: DataLoader(TensorDataset(rows), batch_size=16, shuffle=True, prefetch=1,
                                              num_threads=1))
        assert not errors and len(seen) < 64
    seen, errors = run(lambda: DataLoader(Squares(1000), batch_size=1, collate_fn=lambda s: time.sleep(0.01)))
    assert not errors and len(seen) < 1000

    it = iter(DataLoader(TensorDataset(rows), batch_size=512, prefetch=1, num_threads=1))
    errors = []

    def other():
        try:
            next(it)
        except RuntimeError as e:
            errors.append(str(e))

    threads = [threading.Thread(target=other) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    it.close()
    assert all("one thread at a time" in e for e in errors)


def test_pytorch_style_samplers_subclasses_and_scalars():
    x = np.arange(10, dtype=np.float32)

    class IterOnly:  # a sampler with only __iter__ and __len__, as PyTorch's samplers are
        def __iter__(self):
            return iter([9, 0, 4])

        def __len__(self):
            return 3

    class WithIndexList(IterOnly):
        indices = [1, 3, 5]  # an attribute called indices, as torch's SubsetRandomSampler has

        def __iter__(self):
            return iter(self.indices)

    for sampler, want in ((IterOnly(), [9, 0, 4]), (WithIndexList(), [1, 3, 5])):
        got = [b[0].numpy().tolist() for b in DataLoader(TensorDataset(x), batch_size=3, sampler=sampler)]
        assert got == [[float(i) for i in want]]
    with pytest.raises(TypeError, match="integer indices"):
        list(DataLoader(TensorDataset(x), batch_size=2, sampler=[1.9, 2.5]))
    with pytest.raises(TypeError, match="integer indices"):
        list(DataLoader(TensorDataset(x), batch_sampler=[[0.7, 3.99]]))

    class Doubled(TensorDataset):  # a subclass that transforms samples is read item by item
        def __getitem__(self, i):
            return tuple(2 * v for v in super().__getitem__(i))

    got = list(DataLoader(Doubled(x), batch_size=4))
    np.testing.assert_array_equal(got[0][0].numpy(), 2 * x[:4])

    class Scalars(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return np.float32(i), np.int32(i)

    f, i = next(iter(DataLoader(Scalars(), batch_size=4)))
    assert (f.dtype, i.dtype) == (ddpc.float32, ddpc.int32)  # numpy scalars keep their dtype


def test_big_endian_arrays_are_refused_and_bfloat16_arrays_load(tmp_path):
    big = np.arange(6, dtype=">f4")
    with pytest.raises(TypeError, match="other byte order"):
        TensorDataset(big)
    with pytest.raises(TypeError, match="other byte order"):
        ddpc.from_numpy(big)
    np.save(tmp_path / "big.npy", big)
    with pytest.raises(TypeError, match="other byte order"):
        TensorDataset(np.load(tmp_path / "big.npy", mmap_mode="r"))
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf = np.arange(4, dtype=np.float32).astype(ml_dtypes.bfloat16)
    (b,) = next(iter(DataLoader(TensorDataset(bf), batch_size=4)))
    assert b.dtype == ddpc.bfloat16 and b.float().numpy().tolist() == [0.0, 1.0, 2.0, 3.0]


def test_errors_at_construction(tmp_path):
    a = arrays(10)
    with pytest.raises(ValueError, match="different lengths"):
        TensorDataset(a["x"], np.arange(9))
    with pytest.raises(ValueError, match="different lengths"):
        ShardedLoader([a["x"], np.arange(11)], 2)
    with pytest.raises(ValueError, match="batch_size"):
        DataLoader(TensorDataset(a["x"]), batch_size=0)
    with pytest.raises(ValueError, match="batch_size"):
        ShardedLoader(a["x"], 0)
    with pytest.raises(ValueError, match="empty"):
        DataLoader(TensorDataset(np.zeros((0, 3), np.float32)), batch_size=2)
    with pytest.raises(ValueError, match="empty"):
        ShardedLoader(np.zeros((0, 3), np.float32), 2)
    with pytest.raises(ValueError, match="empty"):
        DataLoader(Squares(0))
    with pytest.raises(ValueError, match="rank 4 is out of range"):
        ShardedLoader(a["x"], 2, rank=4, world_size=4)
    with pytest.raises(FileNotFoundError, match="missing.npy"):
        ShardedLoader(str(tmp_path / "missing.npy"), 2)
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(TensorDataset(a["x"]), shuffle=True, sampler=SequentialSampler(range(10)))
    with pytest.raises(ValueError, match="mutually exclusive"):
        DataLoader(TensorDataset(a["x"]), batch_size=2, batch_sampler=[[0]])
    with pytest.raises(ValueError, match="prefetch"):
        DataLoader(TensorDataset(a["x"]), prefetch=0)
    with pytest.raises(ValueError, match="0-d"):
        TensorDataset(np.float32(1.0))
    with pytest.raises(TypeError, match="unsupported element format"):
        TensorDataset(np.zeros(4, dtype=np.uint64))
    if not ddpc.cuda.is_available():
        with pytest.raises(RuntimeError, match="cuda:0 was requested"):
            DataLoader(TensorDataset(a["x"]), device="cuda:0")
        with pytest.raises(RuntimeError, match="cuda:0 was requested"):
            ShardedLoader(a["x"], 2, device="cuda")


def write_raw(path, header, payload=b""):
    path.write_bytes(header + payload)
    return str(path)


def npy_header(body, version=1):
    body = body.encode()
    if version == 1:
        return b"\x93NUMPY\x01\x00" + len(body).to_bytes(2, "little") + body
    return b"\x93NUMPY" + bytes([version, 0]) + len(body).to_bytes(4, "little") + body


@pytest.mark.parametrize("make,exc,match", [
    (lambda p: write_raw(p, b"PK\x03\x04 not an npy file"), ValueError, "not a .npy file"),
    (lambda p: write_raw(p, b"\x93NU"), ValueError, "not a .npy file"),
    (lambda p: write_raw(p, npy_header("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }"), bytes(16)),
     ValueError, "Fortran-order"),
    (lambda p: write_raw(p, npy_header("{'descr': '>f4', 'fortran_order': False, 'shape': (2,), }"), bytes(8)),
     TypeError, "dtype '>f4' is not supported"),
    (lambda p: write_raw(p, npy_header("{'descr': '<u8', 'fortran_order': False, 'shape': (2,), }"), bytes(16)),
     TypeError, "dtype '<u8' is not supported"),
    (lambda p: write_raw(p, npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (100,), }"), bytes(16)),
     ValueError, "truncated"),
    (lambda p: write_raw(p, npy_header("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", 9)),
     ValueError, "version 9.0"),
    (lambda p: write_raw(p, npy_header("{'descr': '<f4', 'shape': (2,), 'fortran_order': False", 2), bytes(8)),
     ValueError, "malformed"),
])
def test_malformed_npy_files(tmp_path, make, exc, match):
    path = make(tmp_path / "bad.npy")
    with pytest.raises(exc, match=match):
        ShardedLoader(path, 2)


@pytest.mark.parametrize("dtype,wide", [("uint16", "int32"), ("int16", "int32"), ("int8", "int32"),
                                        ("uint32", "int64")])
def test_integer_dtypes_ddpc_lacks_are_gathered_and_widened(tmp_path, dtype, wide):
    """Token ids in uint16, say, from an array, a .npy path or a memory-mapped
    array: batches and rows come widened, every value kept (the extremes too)."""
    info = np.iinfo(dtype)
    a = np.random.default_rng(0).integers(info.min, info.max, (300, 5), endpoint=True).astype(dtype)
    a[0], a[1] = info.min, info.max
    path = str(tmp_path / "tokens.npy")
    np.save(path, a)
    for source in (a, path, np.load(path, mmap_mode="r")):
        ds = TensorDataset(source, np.arange(300))
        batches = list(DataLoader(ds, batch_size=32, shuffle=True))
        got = np.concatenate([x.numpy() for x, _ in batches])
        rows = np.concatenate([i.numpy() for _, i in batches])
        assert got.dtype == wide and sorted(rows.tolist()) == list(range(300))
        np.testing.assert_array_equal(got, a[rows])
        assert ds[-1][0].dtype == getattr(ddpc, wide) and ds[-1][0].numpy().tolist() == a[-1].tolist()
        np.testing.assert_array_equal(ds.tensors[0].numpy(), a)
    import pickle
    np.testing.assert_array_equal(pickle.loads(pickle.dumps(TensorDataset(a)))[:3][0].numpy(), a[:3])
    flat = np.concatenate([b.numpy() for b in ShardedLoader(a[:, 0].copy(), 64, shuffle=False, rank=0,
                                                            world_size=1)])
    np.testing.assert_array_equal(flat, a[:, 0])


def test_fortran_order_files_laid_out_as_c_order_load(tmp_path):
    """numpy reads a Fortran-order file with one dimension longer than 1 (another
    writer's, say) as a C-order one: so does ddpc."""
    data = np.arange(6, dtype=np.float32)
    for shape in ((6,), (6, 1)):
        header = npy_header(f"{{'descr': '<f4', 'fortran_order': True, 'shape': {shape}, }}")
        path = write_raw(tmp_path / f"f{len(shape)}.npy", header, data.tobytes())
        assert np.load(path).reshape(-1).tolist() == data.tolist()
        got = np.concatenate([b.numpy() for b in ShardedLoader(path, 4, shuffle=False, rank=0, world_size=1)])
        assert got.shape == shape and got.reshape(-1).tolist() == data.tolist()


@pytest.mark.parametrize("rewrite", [np.zeros((100, 8), np.float32), np.zeros((1024, 4), np.float32)],
                         ids=["shorter", "same_size_other_shape"])
def test_a_npy_file_rewritten_in_place_is_refused_at_the_next_pass(tmp_path, rewrite):
    """np.save to the path of a mapped file truncates it: reading the mapping
    past the new end would kill the process (SIGBUS), so the next pass raises."""
    path = tmp_path / "x.npy"
    np.save(path, np.arange(4096, dtype=np.float32).reshape(512, 8))
    loader = DataLoader(TensorDataset(str(path)), batch_size=64, shuffle=True)
    assert sum(len(b) for (b,) in loader) == 512
    np.save(path, rewrite)
    with pytest.raises(ValueError, match=r"x.npy changed since it was opened \(16512 bytes then, \d+ now\).*open it "
                       "again"):
        iter(loader)


def test_npy_versions_2_and_3_and_header_padding(tmp_path):
    data = np.arange(12, dtype=np.int32).reshape(6, 2)
    for version in (2, 3):
        body = "{'descr': '<i4', 'fortran_order': False, 'shape': (6, 2), }"
        body += " " * (64 - (12 + len(body) + 1) % 64) + "\n"
        path = write_raw(tmp_path / f"v{version}.npy", npy_header(body, version), data.tobytes())
        assert np.load(path).tolist() == data.tolist()
        got = np.concatenate([b.numpy() for b in ShardedLoader(path, 4, shuffle=False, rank=0, world_size=1)])
        assert got.tolist() == data.tolist()


def test_loader_and_npy_file_refuse_pickling(tmp_path):
    import pickle
    np.save(tmp_path / "a.npy", np.zeros(3, np.float32))
    with pytest.raises(TypeError, match="cannot be pickled"):
        pickle.dumps(ddpc._C.NpyFile(str(tmp_path / "a.npy")))


@pytest.mark.gpu
def test_cuda_batches_equal_cpu_batches():
    a = arrays(300)
    sampler = DistributedSampler(300, num_replicas=2, rank=1, seed=2)
    ds = TensorDataset(a["x"], a["y"])
    cpu = list(DataLoader(ds, batch_size=32, sampler=sampler))
    gpu = list(DataLoader(ds, batch_size=32, sampler=sampler, device="cuda:0", prefetch=3))
    assert len(cpu) == len(gpu)
    for c, g in zip(cpu, gpu):
        for ct, gt in zip(c, g):
            assert gt.is_cuda
            np.testing.assert_array_equal(gt.cpu().numpy(), ct.numpy())


@pytest.mark.gpu
def test_cuda_prefetch_is_ordered_before_compute_stream_work():
    """A batch consumed right away on the compute stream (no host sync in between) has its data."""
    a = arrays(4096)
    ds = TensorDataset(a["d"])
    total = 0.0
    for (x,) in DataLoader(ds, batch_size=512, device="cuda:0", prefetch=4):
        total += float(x.sum())
    assert total == pytest.approx(float(a["d"].sum()), rel=1e-9)


def paged(arr):
    """A copy of `arr` in pages of its own (an anonymous mapping): CUDA registers
    host memory by whole pages, and two small arrays often share one."""
    import mmap
    out = np.frombuffer(mmap.mmap(-1, max(arr.nbytes, 1)), dtype=arr.dtype, count=arr.size).reshape(arr.shape)
    out[...] = arr
    return out


def check_gpu_batches(batches, sources, idx, batch_size, first=0):
    """Batches `first`, `first` + 1, ... of `batches` (device tensors) against the numpy gather."""
    count = 0
    for b, batch in enumerate(batches, first):
        want = idx[b * batch_size:(b + 1) * batch_size]
        for t, src in zip(batch, sources):
            assert t.is_cuda
            np.testing.assert_array_equal(t.cpu().numpy(), src[want])
        count += 1
    return count


def test_gpu_gather_changes_nothing_on_the_host(monkeypatch):
    """DDPC_LOADER_GPU_GATHER=1 (_C.Loader's gpu_gather=True) is ignored for host batches."""
    monkeypatch.setenv("DDPC_LOADER_GPU_GATHER", "1")
    a = arrays()
    sources = [a["x"], a["y"], a["u"]]
    sampler = DistributedSampler(len(a["y"]), num_replicas=1, rank=0, seed=7)
    loader = DataLoader(TensorDataset(*sources), batch_size=16, sampler=sampler, num_threads=2)
    idx = sampler.indices()
    check_batches(loader, sources, idx, [min(b * 16, len(idx)) for b in range(len(loader) + 1)])
    it = iter(loader)
    n = sum(1 for _ in it)
    stats = it._loader.stats()
    assert stats["direct"] == 0
    assert stats["batches"] == n and stats["chunks"] >= n and stats["gather_s"] > 0


@pytest.mark.gpu
@pytest.mark.parametrize("from_file", [False, True])
def test_gpu_gather_equals_cpu_batches(tmp_path, monkeypatch, from_file):
    """The GPU's own gather (float32 rows, int64 labels, rows of 3 bytes copied
    byte by byte) gives the staged path's batches, from memory and from a
    mapped .npy (a read-only mapping: where the device cannot register memory
    read-only, the loader stages it instead)."""
    monkeypatch.setenv("DDPC_LOADER_GPU_GATHER", "1")
    rng = np.random.default_rng(3)
    n = 301
    x = rng.standard_normal((n, 784)).astype(np.float32)
    y = rng.integers(0, 10, n).astype(np.int64)
    u = rng.integers(0, 256, (n, 3), dtype=np.uint8)
    if from_file:
        for name, arr in (("x", x), ("y", y), ("u", u)):
            np.save(tmp_path / f"{name}.npy", arr)
        sources = [np.load(tmp_path / f"{name}.npy", mmap_mode="r") for name in "xyu"]
    else:
        sources = [paged(x), paged(y), paged(u)]
    sampler = DistributedSampler(n, num_replicas=2, rank=0, seed=4)
    ds = TensorDataset(*sources)
    cpu = list(DataLoader(ds, batch_size=32, sampler=sampler))
    it = iter(DataLoader(ds, batch_size=32, sampler=sampler, device="cuda:0", prefetch=3))
    gpu = list(it)
    stats = it._loader.stats()
    direct = not from_file or ddpc._C.cuda_properties(0)["host_register_read_only"]
    assert stats["direct"] == direct
    assert stats["batches"] == len(cpu) == len(gpu)
    if direct:
        assert stats["chunks"] == 0 and stats["gather_s"] == stats["staging_wait_s"] == 0.0
    for c, g in zip(cpu, gpu):
        for ct, gt in zip(c, g):
            assert gt.is_cuda
            np.testing.assert_array_equal(gt.cpu().numpy(), ct.numpy())


@pytest.mark.gpu
def test_gpu_gather_feeds_compute_stream_work(monkeypatch):
    """A gathered batch consumed right away on the compute stream (no host sync) has its data."""
    monkeypatch.setenv("DDPC_LOADER_GPU_GATHER", "1")
    d = paged(arrays(4096)["d"])
    it = iter(DataLoader(TensorDataset(d), batch_size=512, device="cuda:0", prefetch=4))
    total = sum(float(x.sum()) for (x,) in it)
    assert it._loader.stats()["direct"] == 1
    assert total == pytest.approx(float(d.sum()), rel=1e-9)


@pytest.mark.gpu
@pytest.mark.parametrize("dropped_first", [0, 1])
def test_gpu_gather_loaders_share_registered_arrays(monkeypatch, dropped_first):
    """Two loaders over the same arrays at once, dropped in either order, then a
    third: one registration shared, released by the last, made again after."""
    monkeypatch.setenv("DDPC_LOADER_GPU_GATHER", "1")
    rng = np.random.default_rng(5)
    x = paged(rng.standard_normal((500, 33)).astype(np.float32))
    y = paged(np.arange(500, dtype=np.int64))
    ds = TensorDataset(x, y)
    samplers = [DistributedSampler(500, num_replicas=1, rank=0, seed=s) for s in range(3)]
    its = [iter(DataLoader(ds, batch_size=20, sampler=samplers[i], device="cuda:0")) for i in range(2)]
    for i, it in enumerate(its):
        assert check_gpu_batches([next(it)], [x, y], samplers[i].indices(), 20) == 1
        assert it._loader.stats()["direct"] == 1
    kept = 1 - dropped_first
    del its[dropped_first]
    gc.collect()
    assert check_gpu_batches(its[0], [x, y], samplers[kept].indices(), 20, first=1) == 24
    del its
    gc.collect()
    it = iter(DataLoader(ds, batch_size=20, sampler=samplers[2], device="cuda:0"))
    assert check_gpu_batches(it, [x, y], samplers[2].indices(), 20) == 25
    assert it._loader.stats()["direct"] == 1


@pytest.mark.gpu
def test_gpu_gather_stages_a_view_overlapping_a_registered_array(monkeypatch):
    """X[100:] starts pages into X, which another loader holds registered: its
    pages overlap X's without being the same, so its loader stages, correctly."""
    monkeypatch.setenv("DDPC_LOADER_GPU_GATHER", "1")
    rng = np.random.default_rng(6)
    X = paged(rng.standard_normal((4096, 64)).astype(np.float32))
    y = paged(np.arange(4096, dtype=np.int64))
    s1 = DistributedSampler(4096, num_replicas=1, rank=0, seed=1)
    holder = iter(DataLoader(TensorDataset(X, y), batch_size=64, sampler=s1, device="cuda:0"))
    assert check_gpu_batches([next(holder)], [X, y], s1.indices(), 64) == 1
    assert holder._loader.stats()["direct"] == 1
    view, labels = X[100:], y[100:]
    s2 = DistributedSampler(len(view), num_replicas=1, rank=0, seed=2)
    it = iter(DataLoader(TensorDataset(view, labels), batch_size=64, sampler=s2, device="cuda:0"))
    assert it._loader.stats()["direct"] == 0
    assert check_gpu_batches(it, [view, labels], s2.indices(), 64) == -(-len(view) // 64)
    assert check_gpu_batches(holder, [X, y], s1.indices(), 64, first=1) == 63
