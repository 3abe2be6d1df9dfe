"""DataLoader worker processes (num_workers > 0): batches equal to loading in
one process and in order, every sample once across ranks, get_worker_info and
per-worker seeds, IterableDataset streams (whole or split by the workers),
exceptions and dead workers raised instead of hanging, timeouts, workers
stopped when the iterator goes and kept with persistent_workers, spawn."""

import gc
import itertools
import multiprocessing
import os
import random
import signal
import subprocess
import sys
import time
import warnings

import numpy as np
import pytest

import ddpc
from ddpc.data import (DataLoader, Dataset, DistributedSampler, IterableDataset, TensorDataset, WorkerInfo,
                       get_worker_info)


class Tagged(Dataset):
    """Sample i is [i, worker id, pid]; fails or dies at the indices asked."""

    def __init__(self, n, fail_at=(), die_at=(), exc=ValueError):
        self.n, self.fail_at, self.die_at, self.exc = n, set(fail_at), set(die_at), exc

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i in self.fail_at:
            raise self.exc(f"sample {i} is broken")
        if i in self.die_at:
            os.kill(os.getpid(), signal.SIGKILL)
        info = get_worker_info()
        return np.array([i, -1 if info is None else info.id, os.getpid()])


class Draws(Dataset):
    """Sample i: what the worker's generators give (ddpc, numpy, Python) and its WorkerInfo."""

    def __len__(self):
        return 8

    def __getitem__(self, i):
        info = get_worker_info()
        return {"ddpc": float(ddpc.rand(1).item()), "numpy": float(np.random.rand()), "python": random.random(),
                "id": info.id, "num_workers": info.num_workers, "seed": info.seed,
                "same_type": type(info.dataset) is Draws}


class Stream(IterableDataset):
    """0 .. n-1, or with split=True each worker's share of it (i % workers == id)."""

    def __init__(self, n, split=False):
        self.n, self.split = n, split

    def __iter__(self):
        info = get_worker_info()
        if not self.split or info is None:
            return iter(range(self.n))
        return iter(range(info.id, self.n, info.num_workers))


def rows(loader):
    return [b[:, 0].tolist() for b in loader]


def exited(pid):
    """Whether process pid has ended (reaped, or a zombie waiting to be)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


def gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


@pytest.mark.parametrize("workers", [1, 2, 3])
def test_batches_equal_loading_in_one_process_in_order(workers):
    def loader(num_workers):
        return DataLoader(Tagged(23), batch_size=4, shuffle=True, generator=11, num_workers=num_workers)

    got = list(loader(workers))
    assert [b[:, 0].tolist() for b in got] == rows(loader(0))
    ids = [b[:, 1].tolist() for b in got]
    assert ids == [[k % workers] * len(b) for k, b in enumerate(ids)]  # tasks go round-robin
    pids = {int(p) for b in got for p in b[:, 2].tolist()}
    assert len(pids) == workers and os.getpid() not in pids
    assert all(gone(p) for p in pids)  # the pass is over: its workers are stopped and reaped


def test_unbatched_samples_custom_collate_and_batch_sampler():
    assert [int(x[0]) for x in DataLoader(Tagged(5), batch_size=None, num_workers=2)] == [0, 1, 2, 3, 4]
    firsts = list(DataLoader(Tagged(6), batch_size=3, num_workers=2, collate_fn=lambda s: [int(v[0]) for v in s]))
    assert firsts == [[0, 1, 2], [3, 4, 5]]
    loader = DataLoader(Tagged(10), batch_sampler=[[9, 8], [1], [4, 5, 6]], num_workers=2)
    assert rows(loader) == [[9, 8], [1], [4, 5, 6]]


class Mixed(Dataset):
    """Samples of every kind a batch carries: tensors of each dtype (a view, a 0-d one, one that
    requires grad), numpy arrays ddpc has no tensor for, numbers and strings; large ones (over
    64 KiB) cross outside the pickle, the rest inside."""

    def __len__(self):
        return 6

    def __getitem__(self, i):
        base = ddpc.arange(12, dtype=ddpc.float32).reshape(3, 4) * (i + 1)
        return {"f32": base, "view": base.t()[1:], "f64": base.double(), "f16": base.half(),
                "bf16": base.to(ddpc.bfloat16), "i32": base.int(), "u8": base.to(ddpc.uint8),
                "scalar": ddpc.tensor(float(i)), "grad": ddpc.ones(2, requires_grad=True) * i,
                "bools": np.array([i % 2 == 0, True]), "text": f"s{i}", "number": i / 2,
                "big": ddpc.arange(40000, dtype=ddpc.float64) + i, "big_view": (ddpc.ones(300, 200) * i).t(),
                "big_bf16": ddpc.full((70000,), float(i)).to(ddpc.bfloat16), "big_array": np.full(30000, i)}


def test_batches_of_every_kind_cross_from_workers_unchanged():
    def load(workers):
        return list(DataLoader(Mixed(), batch_size=4, num_workers=workers,
                               collate_fn=lambda s: {k: [v[k] for v in s] for k in s[0]}))

    for mine, ref in zip(load(2), load(0)):
        assert mine.keys() == ref.keys()
        for key in ref:
            for a, b in zip(mine[key], ref[key]):
                if isinstance(b, ddpc.Tensor):
                    assert (a.dtype, a.shape, a.requires_grad) == (b.dtype, b.shape, b.requires_grad), key
                    assert np.array_equal(a.detach().float().numpy(), b.detach().float().numpy()), key
                elif isinstance(b, np.ndarray):
                    assert a.dtype == b.dtype and np.array_equal(a, b)
                else:
                    assert a == b
    batch = next(iter(DataLoader(Mixed(), batch_size=3, num_workers=1)))
    assert batch["f32"].shape == (3, 3, 4) and batch["f32"][2].tolist() == (ddpc.arange(12.0).reshape(3, 4) * 3).tolist()
    batch["f32"].add_(1)  # a batch from a worker is writable memory of its own


def test_worker_info_and_seeds_per_worker_reproducible_from_the_generator():
    assert get_worker_info() is None

    def draws(seed):
        return [s for batch in DataLoader(Draws(), batch_size=2, num_workers=2, generator=seed,
                                          collate_fn=lambda s: s) for s in batch]

    first, again, other = draws(3), draws(3), draws(4)
    assert first == again and first != other
    by_worker = {d["id"]: d for d in first}
    assert sorted(by_worker) == [0, 1]
    assert all(d["num_workers"] == 2 and d["same_type"] for d in first)
    assert by_worker[1]["seed"] == by_worker[0]["seed"] + 1
    for gen in ("ddpc", "numpy", "python"):  # each worker's generators are seeded apart
        assert by_worker[0][gen] != by_worker[1][gen]
    assert "id=1" in repr(WorkerInfo(1, 2, 5, None))


def test_workers_draw_anew_in_each_pass():
    """Each pass's base seed is unrelated to the last (as PyTorch's random ones): worker w of one epoch must not
    take the seed, and so repeat the draws, of worker w + 1 of the epoch before."""
    ddpc.manual_seed(1234)
    loader = DataLoader(Draws(), batch_size=2, num_workers=2, collate_fn=lambda s: s)
    passes = [{(d[gen], d["seed"]) for batch in loader for d in batch for gen in ("ddpc", "numpy", "python")}
              for _ in range(3)]
    seeds = [{seed for _, seed in p} for p in passes]
    values = [{v for v, _ in p} for p in passes]
    assert not seeds[0] & seeds[1] and not seeds[1] & seeds[2]
    assert not values[0] & values[1] and not values[1] & values[2]


def test_workers_seeds_after_seeding_0_are_drawn_not_the_main_processs():
    """Seeding 0 (ddpc.manual_seed(0), or a generator's) must not make base seed 0: worker 0 would then draw
    what the main process draws after manual_seed(0), and the seeds would be 0, 1, 2, ..."""
    def draws(generator=None):
        return [(d["seed"], d["ddpc"]) for batch in DataLoader(Draws(), batch_size=2, num_workers=2,
                                                               generator=generator, collate_fn=lambda s: s)
                for d in batch]

    def seed_the_global_one():
        ddpc.manual_seed(0)  # (and the loader draws from it: generator None)

    seed_the_global_one()
    main = [ddpc.rand(1).item() for _ in range(4)]
    for make in (seed_the_global_one, lambda: ddpc.Generator().manual_seed(0)):
        first, again = draws(make()), draws(make())
        assert first == again  # reproducible
        seeds = sorted({seed for seed, _ in first})
        assert len(seeds) == 2 and seeds[0] >= 1 << 32 and seeds[1] == seeds[0] + 1
        assert not {value for _, value in first} & set(main)


def test_an_endless_sampler_feeds_the_workers_as_batches_are_asked_for():
    class Endless:
        def __iter__(self):
            return itertools.cycle(range(5))

    loader = DataLoader(Tagged(5), batch_size=2, sampler=Endless(), num_workers=2)
    it = iter(loader)
    assert [next(it)[:, 0].tolist() for _ in range(4)] == [[0, 1], [2, 3], [4, 0], [1, 2]]
    with pytest.raises(TypeError):
        len(it)
    it.close()
    it = iter(DataLoader(Tagged(5), batch_size=2, num_workers=2))
    assert len(it) == 3 and rows(it) == [[0, 1], [2, 3], [4]]


def test_worker_init_fn_runs_in_each_worker_before_its_samples():
    class Inited(Dataset):
        def __len__(self):
            return 4

        def __getitem__(self, i):
            return np.array([i, os.environ.get("DDPC_TEST_WORKER", "unset") == str(get_worker_info().id)])

    def init(worker_id):
        os.environ["DDPC_TEST_WORKER"] = str(worker_id)

    got = list(DataLoader(Inited(), batch_size=1, num_workers=2, worker_init_fn=init))
    assert [b.tolist() for b in got] == [[[0, 1]], [[1, 1]], [[2, 1]], [[3, 1]]]
    assert "DDPC_TEST_WORKER" not in os.environ


def test_iterable_dataset_read_whole_by_each_worker_or_split_by_worker_info():
    # Unsplit, every worker reads the whole stream (as PyTorch's): batches alternate between the copies.
    whole = [b.tolist() for b in DataLoader(Stream(5), batch_size=2, num_workers=2)]
    assert whole == [[0, 1], [0, 1], [2, 3], [2, 3], [4], [4]]
    split = [b.tolist() for b in DataLoader(Stream(11, split=True), batch_size=2, num_workers=3)]
    assert sorted(v for b in split for v in b) == list(range(11))
    assert split[:3] == [[0, 3], [1, 4], [2, 5]]
    # drop_last drops each worker's short tail; one worker ending early leaves the others going.
    dropped = [b.tolist() for b in DataLoader(Stream(11, split=True), batch_size=2, num_workers=3, drop_last=True)]
    assert dropped == [[0, 3], [1, 4], [2, 5], [6, 9], [7, 10]]
    assert [int(x) for x in DataLoader(Stream(3, split=True), batch_size=None, num_workers=2)] == [0, 1, 2]


def test_an_exception_in_a_worker_is_raised_with_its_traceback():
    it = iter(DataLoader(Tagged(8, fail_at={3}), batch_size=2, num_workers=2))
    assert next(it)[:, 0].tolist() == [0, 1]
    with pytest.raises(ValueError, match="(?s)Caught ValueError in DataLoader worker process 1.*"
                                         "__getitem__.*sample 3 is broken"):
        next(it)
    assert rows(it) == [[4, 5], [6, 7]]  # as PyTorch's, the pass goes on after the failed batch
    with pytest.raises(KeyError) as err:
        list(DataLoader(Tagged(8, fail_at={0}, exc=KeyError), batch_size=2, num_workers=2))
    assert "\n" in str(err.value) and "sample 0 is broken" in str(err.value)

    class TwoArgs(Exception):
        def __init__(self, a, b):
            super().__init__(a, b)

    class Fails(Dataset):
        def __len__(self):
            return 2

        def __getitem__(self, i):
            raise TwoArgs("x", "y")

    with pytest.raises(RuntimeError, match="Caught TwoArgs in DataLoader worker process 0"):
        list(DataLoader(Fails(), batch_size=1, num_workers=1))

    def bad_init(worker_id):
        raise KeyError("no seed")

    it = iter(DataLoader(Tagged(4), batch_size=2, num_workers=2, worker_init_fn=bad_init))
    with pytest.raises(KeyError, match="(?s)worker_init_fn of DataLoader worker process 0.*no seed"):
        next(it)
    with pytest.raises(StopIteration):  # a worker that could not start ends the pass
        next(it)


def test_a_batch_that_does_not_pickle_is_an_error_naming_the_worker():
    loader = DataLoader(Tagged(4), batch_size=2, num_workers=1, collate_fn=lambda s: (lambda: s))
    with pytest.raises(Exception, match="sending a batch from DataLoader worker process 0"):
        list(loader)


def test_a_dead_worker_is_reported_not_waited_for():
    start = time.monotonic()
    with pytest.raises(RuntimeError, match=r"DataLoader worker 1 \(pid \d+\) was killed by signal SIGKILL"):
        list(DataLoader(Tagged(12, die_at={6}), batch_size=2, num_workers=2))
    assert time.monotonic() - start < 30


def test_timeout_bounds_each_wait_and_stops_the_workers():
    class Slow(Tagged):
        def __getitem__(self, i):
            if i >= 2:
                time.sleep(3)
            return super().__getitem__(i)

    it = iter(DataLoader(Slow(6), batch_size=2, num_workers=2, timeout=0.3))
    first = next(it)
    start = time.monotonic()
    with pytest.raises(RuntimeError, match="timed out after 0.3 seconds"):
        next(it)
    assert time.monotonic() - start < 2.5
    deadline = time.monotonic() + 10
    while not gone(int(first[0, 2])) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert gone(int(first[0, 2]))


def test_workers_stop_when_the_iterator_is_dropped_mid_pass():
    it = iter(DataLoader(Tagged(40), batch_size=2, num_workers=2))
    pids = {int(next(it)[0, 2]), int(next(it)[0, 2])}
    assert len(pids) == 2 and not any(gone(p) for p in pids)
    del it
    assert all(gone(p) for p in pids)


def test_persistent_workers_serve_every_pass_and_drop_an_abandoned_pass():
    loader = DataLoader(Tagged(10), batch_size=3, num_workers=2, persistent_workers=True)
    it = iter(loader)
    first = next(it)
    pids = set(first[:, 2].tolist())
    del it  # abandoned with batches in flight: their results must not reach the next pass
    epochs = [list(loader) for _ in range(2)]
    for batches in epochs:
        assert [b[:, 0].tolist() for b in batches] == [[0, 1, 2], [3, 4, 5], [6, 7, 8], [9]]
        pids |= {int(p) for b in batches for p in b[:, 2].tolist()}
    assert len(pids) == 2 and not any(gone(p) for p in pids)
    older, newer = iter(loader), iter(loader)  # PyTorch hands out one iterator; here the older one stops
    with pytest.raises(RuntimeError, match="newer pass"):
        next(older)
    assert [b[:, 0].tolist() for b in newer][-1] == [9]
    with pytest.raises(StopIteration):
        next(older)
    del loader, older, newer
    assert all(gone(p) for p in pids)


def test_spawned_workers_and_start_method_checks():
    ds = TensorDataset(np.arange(12).reshape(6, 2))
    inner = ddpc.data.ConcatDataset([ds])  # not a bare TensorDataset: loaded by the workers
    loader = DataLoader(inner, batch_size=4, num_workers=2, multiprocessing_context="spawn")
    got = [x.tolist() for (x,) in loader]
    assert got == [[[0, 1], [2, 3], [4, 5], [6, 7]], [[8, 9], [10, 11]]]
    assert [x.tolist() for (x,) in DataLoader(inner, batch_size=6, num_workers=1,
                                              multiprocessing_context=multiprocessing.get_context("fork"))] \
        == [np.arange(12).reshape(6, 2).tolist()]
    with pytest.raises(ValueError, match="start method"):
        DataLoader(inner, num_workers=1, multiprocessing_context="teleport")
    with pytest.raises(TypeError, match="multiprocessing_context"):
        DataLoader(inner, num_workers=1, multiprocessing_context=3)


def test_out_of_order_batches_pass_a_slow_one_and_all_arrive():
    class SlowFirst(Tagged):
        def __getitem__(self, i):
            if i == 0:
                time.sleep(1.0)
            return super().__getitem__(i)

    loader = DataLoader(SlowFirst(12), batch_size=2, num_workers=2, in_order=False)
    got = rows(loader)
    assert got[0] != [0, 1] and sorted(got) == [[k, k + 1] for k in range(0, 12, 2)]
    assert rows(DataLoader(SlowFirst(4), batch_size=2, num_workers=2))[0] == [0, 1]  # in order by default


def test_a_tensor_dataset_stays_on_the_c_threads():
    ds = TensorDataset(np.arange(8))
    loader = DataLoader(ds, batch_size=4, num_workers=3)
    assert [b.tolist() for (b,) in loader] == [[0, 1, 2, 3], [4, 5, 6, 7]]
    assert type(iter(loader)).__name__ == "_ArrayBatches"


def rank_share(rank, n):
    import ddpc.distributed as dist
    dist.init_process_group("cpu")
    try:
        sampler = DistributedSampler(n, shuffle=True, seed=5)
        sampler.set_epoch(1)
        loader = DataLoader(Tagged(n), batch_size=3, sampler=sampler, num_workers=2)
        seen = [int(v) for b in loader for v in b[:, 0].tolist()]
        assert seen == sampler.indices().tolist()
        return seen
    finally:
        dist.destroy_process_group()


def test_every_sample_once_across_ranks_each_with_workers():
    n = 30
    shares = ddpc.spawn(rank_share, args=(n,), nprocs=2)
    assert sorted(shares[0] + shares[1]) == list(range(n))


class Wide(Dataset):
    """Sample i: 20,000 float32 equal to i (over 64 KiB a batch: in shared memory) and i as a label (in the
    pickle); dies at the indices asked."""

    def __init__(self, n, die_at=()):
        self.n, self.die_at = n, set(die_at)

    def __len__(self):
        return self.n

    def __getitem__(self, i):
        if i in self.die_at:
            os.kill(os.getpid(), signal.SIGKILL)
        return np.full(20000, i, np.float32), i


def batch_maps():
    """How many of this process's mappings are batch memory from workers."""
    with open("/proc/self/maps") as f:
        return sum("memfd:ddpc-batch" in line for line in f)


def open_fds():
    gc.collect()  # descriptors of earlier tests' garbage (processes' sentinels) go first
    return len(os.listdir("/proc/self/fd"))


def batch_fds(pid):
    """How many of a process's open descriptors are batch memory."""
    links = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        try:
            links.append(os.readlink(f"/proc/{pid}/fd/{fd}"))
        except FileNotFoundError:  # closed meanwhile
            pass
    return sum("memfd:ddpc-batch" in link for link in links)


def shm_names(pids):
    """Entries of /dev/shm whose names carry one of these processes' ids."""
    return [f for f in os.listdir("/dev/shm") if any(str(p) in f for p in pids)]


def settles(check, seconds=10):
    """Whether check() comes true within a bounded wait."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def worker_pids(loader_or_pass):
    return [p.pid for p in loader_or_pass._pool.procs]


def test_large_batches_wrap_shared_memory_and_stay_valid_while_kept():
    maps, fds = batch_maps(), open_fds()
    loader = DataLoader(Wide(40), batch_size=4, num_workers=2, persistent_workers=True)
    epochs = [list(loader) for _ in range(3)]  # every batch of three passes kept to the end
    # 8 batches a worker wrap its blocks (each its own: none was filled again while held), the rest are copies
    assert 16 <= batch_maps() - maps <= 16 + 2 * 5
    assert batch_fds("self") == batch_maps()  # each mapping keeps its descriptor, so they are bounded too
    for batches in epochs:
        for k, (x, y) in enumerate(batches):
            assert y.tolist() == [4 * k + j for j in range(4)]
            assert np.array_equal(x.numpy(), np.repeat(np.arange(4 * k, 4 * k + 4, dtype=np.float32), 20000)
                                  .reshape(4, 20000))
    x = epochs[0][0][0]
    x.add_(1)  # a batch's memory is its own: writing to it changes no other batch
    assert x.numpy()[0, 0] == 1 and epochs[1][0][0].numpy()[0, 0] == 0
    del epochs, batches, x, y
    assert sum(1 for _ in loader) == 10  # the workers hear of the blocks let go of with tasks, unmap all but a few
    assert batch_maps() - maps <= 2 * 5  # per worker: the spare blocks, those of the prefetched batches and one
    pids = worker_pids(loader)
    del loader
    assert batch_maps() == maps and batch_fds("self") == 0
    assert settles(lambda: all(gone(p) for p in pids))
    assert open_fds() == fds and not shm_names(pids + [os.getpid()])


@pytest.mark.parametrize("method", multiprocessing.get_all_start_methods())
def test_no_batch_memory_left_after_a_pass_with_each_start_method(method):
    def one_pass():
        it = iter(DataLoader(Wide(24), batch_size=4, num_workers=2, shuffle=True, generator=3,
                             multiprocessing_context=method))
        pids = worker_pids(it)
        assert sorted(int(v) for _, y in it for v in y.tolist()) == list(range(24))
        return pids

    one_pass()  # the start method's own process and pipe (forkserver, resource tracker) stay: not counted
    maps, fds = batch_maps(), open_fds()
    pids = one_pass()
    assert settles(lambda: all(gone(p) for p in pids))
    assert batch_maps() == maps and open_fds() == fds and not shm_names(pids + [os.getpid()])


def test_a_task_for_a_worker_that_died_names_its_death():
    """Both workers killed once their batches in flight are in their pipes:
    the next batch is taken from there, and the task sent after it finds the
    pipe closed, which is reported as the worker's death (not a
    BrokenPipeError)."""
    it = iter(DataLoader(Wide(80), batch_size=4, num_workers=2, prefetch_factor=2))
    next(it)
    pids = worker_pids(it)
    deadline = time.monotonic() + 20
    pool = it._pool  # each worker's answers received, or at least one waiting in its pipe
    while not all(n == 0 or c.poll() for n, c in zip(pool.outstanding, pool.conns)) and time.monotonic() < deadline:
        time.sleep(0.05)
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    deadline = time.monotonic() + 20  # until each has exited (a zombie: its pipe is closed), not yet reaped
    while not all(exited(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.05)
    with pytest.raises(RuntimeError, match="killed by signal SIGKILL"):
        for _ in range(20):
            next(it)


def test_no_batch_memory_left_after_a_pass_is_dropped_a_worker_dies_or_the_loop_raises():
    maps, fds = batch_maps(), open_fds()
    it = iter(DataLoader(Wide(80), batch_size=4, num_workers=2, prefetch_factor=4))
    next(it)  # the rest of the prefetched batches are in flight or in the loader's hands
    pids = worker_pids(it)
    del it
    assert all(gone(p) for p in pids)
    assert batch_maps() == maps and open_fds() == fds

    with pytest.raises(RuntimeError, match="killed by signal SIGKILL"):
        list(DataLoader(Wide(80, die_at={41}), batch_size=4, num_workers=2, prefetch_factor=4))
    assert batch_maps() == maps and open_fds() == fds

    loader = DataLoader(Wide(80), batch_size=4, num_workers=2, persistent_workers=True)
    with pytest.raises(ZeroDivisionError):
        for k, _ in enumerate(loader):
            if k == 3:
                1 / 0
    pids += worker_pids(loader)
    del loader, _  # the workers stay with the loader, the last batch with its name
    assert settles(lambda: all(gone(p) for p in pids))
    assert batch_maps() == maps and open_fds() == fds and not shm_names(pids + [os.getpid()])


def test_no_batch_memory_left_when_the_loaders_process_raises():
    script = ("import os, sys, numpy as np\n"
              "sys.path.insert(0, os.path.dirname(sys.argv[1]))\n"
              "from test_data_workers import Wide, worker_pids\n"
              "from ddpc.data import DataLoader\n"
              "it = iter(DataLoader(Wide(400), batch_size=4, num_workers=2, prefetch_factor=4))\n"
              "next(it)\n"
              "print(*worker_pids(it), flush=True)\n"
              "raise RuntimeError('the loop failed')\n")
    done = subprocess.run([sys.executable, "-c", script, __file__], capture_output=True, text=True, timeout=60)
    assert done.returncode == 1 and "the loop failed" in done.stderr
    pids = [int(p) for p in done.stdout.split()]
    assert len(pids) == 2 and settles(lambda: all(gone(p) for p in pids))
    assert not shm_names(pids)


def test_more_workers_than_cpus_warns_as_pytorch(monkeypatch):
    """check_worker_number_rationality: a warning naming the counts when the
    workers outnumber the CPUs this process may use, none otherwise."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0})
    loader = DataLoader(Tagged(4), batch_size=2, num_workers=2)
    with pytest.warns(UserWarning, match="will create 2 worker processes in total. Our suggested max number of "
                                         "worker in current system is 1,"):
        assert sorted(sum(rows(loader), [])) == [0, 1, 2, 3]
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        loader.check_worker_number_rationality()
