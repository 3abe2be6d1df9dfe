"""torch.distributed's newer and rarer calls on the cpu backend: the
single-tensor collectives (gather_single, all_gather_single,
reduce_scatter_single: concatenated and stacked forms), the coalesced ones
(one collective per dtype), set_timeout, split_group, get_backend_config,
and rendezvous with its handlers. Ranks are real processes started by
ddpc-run; each prints 'RANK <r> PASS' once its checks held."""

import os
import subprocess
import sys
import textwrap
import warnings
from datetime import timedelta

import pytest

import ddpc
import ddpc.distributed as dist
from procs import free_port

HEAD = """
import os, sys, time, warnings
from datetime import timedelta
import numpy as np, ddpc, ddpc.distributed as dist
dist.init_process_group("cpu")
rank, world = dist.get_rank(), dist.get_world_size()


def raises(error, text, fn, *args, **kwargs):
    try:
        fn(*args, **kwargs)
    except error as e:
        assert text in str(e), (text, str(e))
        return e
    raise AssertionError(f"{fn.__name__} did not raise {error.__name__} ({text})")
"""


def run_ranks(world, body, tmp_path, timeout=120):
    """Runs HEAD + ``body`` on ``world`` cpu ranks and checks that each printed 'RANK <r> PASS'."""
    script = tmp_path / "worker.py"
    script.write_text(HEAD + textwrap.dedent(body) + "\nprint(f'RANK {rank} PASS', flush=True)\n")
    res = subprocess.run([sys.executable, "-m", "ddpc.run", "--nproc-per-node", str(world), str(script)],
                         capture_output=True, text=True, timeout=timeout, env=dict(os.environ, OMP_NUM_THREADS="1"))
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    for r in range(world):
        assert f"RANK {r} PASS" in res.stdout, out
    return res.stdout


def test_single_tensor_collectives(tmp_path):
    run_ranks(3, """
    mine = ddpc.arange(2.0) + 10 * rank
    every = np.concatenate([np.arange(2.0) + 10 * r for r in range(world)])
    for shape in ((2 * world,), (world, 2)):  # the concatenation and the stack
        out = ddpc.zeros(*shape)
        assert dist.all_gather_single(out, mine) is None
        assert out.numpy().ravel().tolist() == every.tolist(), (shape, out.tolist())
        out = ddpc.zeros(*shape)
        dist.all_gather_into_tensor(out, mine)
        assert out.numpy().ravel().tolist() == every.tolist()
        part = ddpc.zeros(2)
        dist.reduce_scatter_single(part, ddpc.arange(2.0 * world).reshape(*shape) + rank)
        assert part.tolist() == [world * (2 * rank + k) + sum(range(world)) for k in range(2)], part.tolist()
        for dst in range(world):
            got = ddpc.full(shape, -1.0) if rank == dst else None
            assert dist.gather_single(mine, got, dst=dst) is None
            if rank == dst:
                assert got.numpy().ravel().tolist() == every.tolist(), (dst, got.tolist())
    # group_dst, the other name, an unused gather_tensor on the other ranks, numpy arrays, async handles
    sub = dist.new_group([2, 0])
    if rank in (0, 2):
        got = np.zeros((2, 2), np.float32)
        work = dist.gather_into_tensor(np.full(2, rank, np.float32), got, group=sub, group_dst=1, async_op=True)
        assert work.wait() is True
        assert got.tolist() == ([[0, 0], [2, 2]] if rank == 2 else [[0, 0], [0, 0]]), got.tolist()
    out = ddpc.zeros(world, 3, dtype="int64")
    work = dist.all_gather_single(out, ddpc.full((3,), rank + 1, dtype="int64"), async_op=True)
    assert work.wait() and out.tolist() == [[r + 1] * 3 for r in range(world)], out.tolist()
    part = ddpc.zeros(1)
    work = dist.reduce_scatter_single(part, ddpc.ones(world), op=dist.ReduceOp.MAX, async_op=True)
    assert work.wait() and part.tolist() == [1.0]
    # shapes and dtypes are checked before anything is sent
    raises(ValueError, f"all_gather_single: output has 5 elements and input 2; with {world} ranks the output must "
           f"hold {world} times", dist.all_gather_single, ddpc.zeros(5), mine)
    raises(ValueError, "reduce_scatter_single: output has 2 elements and input 2", dist.reduce_scatter_single,
           ddpc.zeros(2), ddpc.zeros(2))
    raises(TypeError, "input and output dtypes differ (float32 and float64)", dist.all_gather_single,
           ddpc.zeros(2 * world, dtype="float64"), mine)
    raises(ValueError, "gather_tensor must be given on the destination rank", dist.gather_single, mine, None,
           dst=rank)
    raises(ValueError, "gather_single: output has 3 elements", dist.gather_single, mine, ddpc.zeros(3), dst=rank)
    raises(ValueError, "give dst or group_dst, not both", dist.gather_single, mine, None, dst=0, group_dst=0)
    dist.barrier()
    """, tmp_path)


def test_coalesced_collectives(tmp_path):
    run_ranks(2, """
    ts = [ddpc.full((3,), rank + 1.0), ddpc.full((2, 2), rank + 1, dtype="int64"), np.full(4, rank + 1.0, np.float32),
          ddpc.full((1,), complex(rank, 1))]
    before = dist.group.WORLD._c.next_seq
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert dist.all_reduce_coalesced(ts) is None
    assert [w.category for w in seen] == [FutureWarning], seen
    assert "all_reduce_coalesced will be deprecated" in str(seen[0].message) and seen[0].filename == __file__
    # one all-reduce per dtype (float32, int64, complex64), not one per tensor
    assert dist.group.WORLD._c.next_seq - before == 3, dist.group.WORLD._c.next_seq - before
    assert ts[0].tolist() == [3.0] * 3 and ts[1].tolist() == [[3, 3], [3, 3]] and ts[2].tolist() == [3.0] * 4
    assert ts[3].tolist() == [complex(1, 2)], ts[3].tolist()
    one = ddpc.full((2,), rank + 2.0)
    warnings.simplefilter("ignore", FutureWarning)
    future = dist.all_reduce_coalesced(one, op=dist.ReduceOp.PRODUCT, async_op=True)
    assert future.wait()[0] is one and one.tolist() == [6.0, 6.0], one.tolist()
    raises(ValueError, "not supported on complex tensors", dist.all_reduce_coalesced, [ddpc.zeros(1, dtype="complex64")],
           op=dist.ReduceOp.MAX)
    raises(ValueError, "at least one tensor", dist.all_reduce_coalesced, [])

    ins = [ddpc.full((2, 2), rank + 0.5), ddpc.full((1,), 10 * rank, dtype="int32"), ddpc.full((3,), rank - 1.0)]
    outs = [[ddpc.zeros(4), ddpc.zeros(1, dtype="int32"), ddpc.zeros(3)] for _ in range(world)]
    before = dist.group.WORLD._c.next_seq
    future = dist.all_gather_coalesced(outs, ins, async_op=True)
    got = future.wait()
    assert len(got) == 3 * world and all(a is b for a, b in zip(got, [t for row in outs for t in row]))
    assert dist.group.WORLD._c.next_seq - before == 2
    for r in range(world):
        assert outs[r][0].tolist() == [r + 0.5] * 4 and outs[r][1].tolist() == [10 * r]
        assert outs[r][2].tolist() == [r - 1.0] * 3, outs
    assert dist.all_gather_coalesced(outs, ins) is None
    raises(ValueError, f"one list per group member ({world}), got 1", dist.all_gather_coalesced, outs[:1], ins)
    raises(ValueError, "output_tensor_lists[1] holds 2 tensors", dist.all_gather_coalesced,
           [outs[0], outs[1][:2]], ins)
    raises(ValueError, "output_tensor_lists[0][2] (float32, 2 elements) differs from input_tensor_list[2] "
           "(float32, 3 elements)", dist.all_gather_coalesced, [outs[0][:2] + [ddpc.zeros(2)], outs[1]], ins)
    dist.barrier()
    """, tmp_path)


def test_set_timeout_ends_a_collective_a_rank_never_joins(tmp_path):
    """The group is made with the default 30 minutes; after set_timeout(1.5 s)
    rank 0's all_reduce that rank 1 never joins fails in that time."""
    out = run_ranks(2, """
    sub = dist.new_group([0, 1])
    raises(ValueError, "must be positive", dist.set_timeout, timedelta(0), sub)
    raises(ValueError, "must be positive", dist.set_timeout, -1)
    dist.set_timeout(timedelta(seconds=1.5), sub)
    if rank == 0:
        e = raises(dist.DistBackendTimeoutError, "1.5 s", dist.all_reduce, np.ones(4, np.float32), group=sub)
        print(f"RANK 0 TIMEOUT {e}", flush=True)
    dist.barrier()
    """, tmp_path, timeout=120)
    assert "RANK 0 TIMEOUT" in out, out


def test_a_per_call_timeout_bounds_a_collective_queued_behind_another(tmp_path):
    """ProcessGroup.allreduce with opts.timeout 1.5 s, queued behind an
    all_reduce that rank 1 joins only after 2.5 s (so it starts running
    later), and never joined itself: it times out 1.5 s after it starts, not
    after the group's 40 s, which stays the group's. An asynchronous barrier
    with a timeout of its own keeps it too."""
    out = run_ranks(2, """
    sub, other = dist.new_group([0, 1], timeout=timedelta(seconds=40)), dist.new_group([0, 1], timeout=40)
    if rank == 0:
        first = ddpc.ones(4)
        ahead = sub.allreduce([first])
        start = time.monotonic()
        late = sub.allreduce([ddpc.ones(4)], dist.AllreduceOptions(timeout=timedelta(seconds=1.5)))
        assert sub._timeout_s == 40.0
        ahead.wait()
        assert first.tolist() == [2.0] * 4, first.tolist()
        e = raises(dist.DistBackendTimeoutError, "timed out after 1.5 s", late.wait)
        took = time.monotonic() - start
        assert 1.5 <= took < 20, took
        print(f"RANK 0 TIMEOUT after {took:.1f} s: {e}", flush=True)
        start = time.monotonic()
        barrier = other.barrier(dist.BarrierOptions(timeout=timedelta(seconds=1.5)))
        raises(dist.DistBackendTimeoutError, "timed out after 1.5 s", barrier.wait)
        assert 1.5 <= time.monotonic() - start < 20, time.monotonic() - start
    else:
        time.sleep(2.5)
        sub.allreduce([ddpc.ones(4)]).wait()
    dist.barrier()
    """, tmp_path, timeout=120)
    assert "RANK 0 TIMEOUT" in out, out


# Holds named threads inside a collective call, before its collective is
# queued (in the record the DETAIL debug level logs there), until the test
# lets each go on: a thread preempted in the middle of its call, on demand.
HOLD = """
import logging, threading
dist.set_debug_level("DETAIL")


class Hold(logging.Filter):
    def __init__(self, *names):
        super().__init__()
        self.inside = {n: threading.Event() for n in names}
        self.release = {n: threading.Event() for n in names}
        logging.getLogger("ddpc.distributed").addFilter(self)

    def filter(self, record):
        name = threading.current_thread().name
        if name in self.inside and not self.inside[name].is_set():
            self.inside[name].set()
            self.release[name].wait(60)
        return True


def allreduce_in_thread(name, works, **opts):
    # thread `name` calls sub.allreduce with `opts`; its tensor and Work go to works[name]
    def call():
        t = ddpc.ones(2)
        works[name] = (t, sub.allreduce([t], dist.AllreduceOptions(**opts)))
    thread = threading.Thread(target=call, name=name)
    thread.start()
    return thread
"""


def test_a_per_call_timeout_leaves_another_threads_collective_alone(tmp_path):
    """While thread A is inside an allreduce with a 1.5 s timeout of its own,
    the main thread's all_reduce on the same group, which rank 1 joins only
    after 3 s, keeps the group's 40 s; A's collective then runs, and the
    group's timeout is still 40 s (a later all_reduce joined after 3 s)."""
    run_ranks(2, HOLD + textwrap.dedent("""
    sub = dist.new_group([0, 1], timeout=timedelta(seconds=40))
    if rank == 0:
        hold, works = Hold("A"), {}
        thread = allreduce_in_thread("A", works, timeout=timedelta(seconds=1.5))
        assert hold.inside["A"].wait(60)
        mine = ddpc.ones(2)
        dist.all_reduce(mine, group=sub)
        assert mine.tolist() == [2.0, 2.0], mine.tolist()
        hold.release["A"].set()
        thread.join(60)
        t, work = works["A"]
        work.wait()
        assert t.tolist() == [2.0, 2.0], t.tolist()
        assert sub._timeout_s == 40.0
        dist.all_reduce(mine, group=sub)
        assert mine.tolist() == [3.0, 3.0], mine.tolist()
    else:
        for delay in (3, 0, 3):
            time.sleep(delay)
            dist.all_reduce(ddpc.ones(2), group=sub)
    dist.barrier()
    """), tmp_path, timeout=120)


def test_per_call_timeouts_of_two_threads_leave_the_group_timeout(tmp_path):
    """Threads A (1.5 s) and B (30 s) each inside an allreduce with a timeout
    of its own at once, A's call ending first: both collectives run, and the
    group keeps its 40 s (a later all_reduce joined after 3 s)."""
    run_ranks(2, HOLD + textwrap.dedent("""
    sub = dist.new_group([0, 1], timeout=timedelta(seconds=40))
    if rank == 0:
        hold, works = Hold("A", "B"), {}
        a = allreduce_in_thread("A", works, timeout=timedelta(seconds=1.5))
        assert hold.inside["A"].wait(60)
        b = allreduce_in_thread("B", works, timeout=timedelta(seconds=30))
        assert hold.inside["B"].wait(60)
        for name, thread in (("A", a), ("B", b)):
            hold.release[name].set()
            thread.join(60)
        for t, work in works.values():
            work.wait()
            assert t.tolist() == [2.0, 2.0], t.tolist()
        assert sub._timeout_s == 40.0, sub._timeout_s
        mine = ddpc.ones(2)
        dist.all_reduce(mine, group=sub)
        assert mine.tolist() == [2.0, 2.0], mine.tolist()
    else:
        for delay in (0, 0, 3):
            time.sleep(delay)
            dist.all_reduce(ddpc.ones(2), group=sub)
    dist.barrier()
    """), tmp_path, timeout=120)


def test_lists_of_blocks_are_checked_in_c(tmp_path):
    """The C calls take the whole of all_gather, reduce_scatter, gather and scatter as one buffer or as a list
    of one block per rank, and refuse a list of the wrong length or block size, and overlaps."""
    run_ranks(2, """
    c = dist.GroupMember.WORLD._c
    f32 = dist._dtype_code("float32")
    mine = np.full(3, rank + 1.0, np.float32)
    outs = [np.zeros(3, np.float32) for _ in range(world)]
    c.all_gather(outs, mine, f32)
    assert [o.tolist() for o in outs] == [[1.0] * 3, [2.0] * 3], outs
    c.all_gather(tuple(outs), mine * 2, f32)
    assert [o.tolist() for o in outs] == [[2.0] * 3, [4.0] * 3], outs
    raises(ValueError, "the output list holds 1 buffers; a group of 2 takes one per rank", c.all_gather,
           outs[:1], mine, f32)
    raises(ValueError, "block 1 of the input list has 4 elements and the output 3", c.reduce_scatter, mine,
           [np.zeros(3, np.float32), np.zeros(4, np.float32)], f32, 0)
    big = np.zeros(6, np.float32)
    raises(ValueError, "input and output must not overlap", c.all_gather, [big[:3], big[3:]], big[1:4], f32)
    raises(ValueError, "the root's alone: pass None here" if rank else "the root's: it must be given there",
           c.gather, outs if rank else None, mine, f32, 0)
    raises(ValueError, "every rank passes its output", c.scatter, None, outs if rank == 0 else None, f32, 0)
    """, tmp_path)


def test_split_group_and_backend_config(tmp_path):
    run_ranks(3, """
    assert dist.get_backend_config() == "cpu:gloo,cuda:gloo"
    mine = dist.split_group(split_ranks=[[2, 0]])
    if rank == 1:
        assert mine is dist.GroupMember.NON_GROUP_MEMBER
    else:
        # the split's order is its rank order
        assert dist.get_process_group_ranks(mine) == [2, 0] and dist.get_rank(mine) == (0 if rank == 2 else 1)
        t = np.full(2, rank + 1.0)
        dist.all_reduce(t, group=mine)
        assert t.tolist() == [4.0, 4.0], t.tolist()
        assert dist.get_backend_config(mine) == "cpu:gloo,cuda:gloo"
    # a split of a group that rank 0 is not in: its members alone call it
    parent = dist.new_group([1, 2])
    if rank != 0:
        alone = dist.split_group(parent, [[1], [0]], timeout=timedelta(seconds=30))
        assert dist.get_process_group_ranks(alone) == [rank], dist.get_process_group_ranks(alone)
        pair = dist.split_group(parent, [[0, 1]], backend="gloo")
        assert dist.get_backend(pair) == "gloo" and dist.get_process_group_ranks(pair) == [1, 2]
        t = np.full(1, float(rank))
        dist.all_reduce(t, group=pair)
        assert t.tolist() == [3.0]
        raises(ValueError, "not among the parent group's (cpu:gloo,cuda:gloo)", dist.split_group, parent, [[0, 1]],
               backend="nccl")
    raises(ValueError, "split_ranks cannot be None or empty", dist.split_group)
    raises(ValueError, "rank 1 is in two splits ([0, 1] and [1, 2])", dist.split_group, None, [[0, 1], [1, 2]])
    raises(ValueError, "rank 3 of split [3] is not a rank of the parent group", dist.split_group, None, [[3]])
    raises(ValueError, "non-empty list of ranks", dist.split_group, None, [[0], []])
    dist.barrier()
    """, tmp_path)


@pytest.fixture
def single_rank(monkeypatch):
    for k in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"):
        monkeypatch.delenv(k, raising=False)
    yield
    dist.destroy_process_group()


def test_rendezvous_yields_a_store_rank_and_size_once(single_rank, tmp_path, monkeypatch):
    port = free_port()
    gen = dist.rendezvous(f"tcp://127.0.0.1:{port}", rank=0, world_size=1, timeout=timedelta(seconds=20))
    store, rank, world = next(gen)
    assert isinstance(store, dist.TCPStore) and (rank, world) == (0, 1)
    store.set("k", b"v")
    assert store.get("k") == b"v"
    with pytest.raises(RuntimeError, match="re-rendezvous using tcp://"):
        next(gen)
    store, rank, world = next(dist.rendezvous(f"file://{tmp_path / 'f'}?rank=0&world_size=1"))
    assert isinstance(store, dist.FileStore) and (rank, world) == (0, 1)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")
    store, rank, world = next(dist.rendezvous("env://"))
    assert isinstance(store, dist.TCPStore) and (rank, world) == (0, 1)
    with pytest.raises(RuntimeError, match=r"No rendezvous handler for nope://"):
        dist.rendezvous("nope://x")
    with pytest.raises(ValueError, match="has rank or world_size in it already"):
        dist.rendezvous("file:///tmp/x?rank=0", rank=0)
    with pytest.raises(ValueError, match=r"rank 2 is not in \[0, 2\)"):
        next(dist.rendezvous(f"tcp://127.0.0.1:{port}", rank=2, world_size=2))
    with pytest.raises(RuntimeError, match="`rank` must be an integer"):
        dist.rendezvous("env://", rank="0")
    with pytest.raises(RuntimeError, match=r"Rendezvous handler for tcp:// already registered"):
        dist.register_rendezvous_handler("tcp", lambda url, **kw: iter(()))


def test_init_process_group_takes_a_registered_scheme(single_rank):
    seen = []

    def handler(url, **kwargs):
        seen.append((url, sorted(kwargs)))
        yield dist.HashStore(), 0, 1

    dist.register_rendezvous_handler("mine", handler)
    try:
        dist.init_process_group("cpu", init_method="mine://here", rank=0, world_size=1)
        t = ddpc.ones(3)
        dist.all_reduce(t)
        assert t.tolist() == [1.0] * 3
        assert seen == [("mine://here?rank=0&world_size=1", ["timeout"])], seen
    finally:
        del dist._rendezvous_handlers["mine"]


def test_calls_outside_the_group(single_rank):
    dist.init_process_group("cpu", store=dist.HashStore(), rank=0, world_size=1)
    outside = dist.GroupMember.NON_GROUP_MEMBER
    with pytest.raises(ValueError, match="not a member"):
        dist.set_timeout(timedelta(seconds=5), outside)
    with pytest.raises(ValueError, match="not a member"):
        dist.get_backend_config(outside)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert dist.gather_single(ddpc.ones(1), group=outside) is None
        assert dist.reduce_scatter_single(ddpc.ones(1), ddpc.ones(1), group=outside) is None
    assert len(seen) == 2 and all("not a member of the group" in str(w.message) for w in seen)
    dist.destroy_process_group(outside)  # nothing to release, as in PyTorch (clean-up loops run on every rank)
    assert dist.is_initialized()
    dist.set_timeout(timedelta(seconds=5))
    assert dist.split_group(split_ranks=[[0]]) is not outside


def test_process_group_methods(tmp_path):
    """PyTorch's ProcessGroup driven directly: allreduce, broadcast, reduce, allgather,
    barrier, send and recv in their list-with-options and short forms (roots and peers
    as group ranks), each returning a Work; name, group_name, group_desc, set_timeout."""
    run_ranks(3, """
    pg = dist.group.WORLD
    assert pg.name() == dist.get_backend() == "cpu" and pg.group_desc == "default_pg"
    assert pg.bound_device_id is None
    t = ddpc.full((2,), rank + 1.0)
    pg.allreduce([t]).wait()
    assert t.tolist() == [6.0, 6.0], t.tolist()
    pg.allreduce([t], dist.AllreduceOptions(reduceOp=dist.ReduceOp.MAX)).wait()
    t = ddpc.full((2,), rank + 1.0)
    pg.allreduce([t], dist.ReduceOp.MIN).wait()
    assert t.tolist() == [1.0, 1.0]
    raises(ValueError, "a list of one tensor", pg.allreduce, [t, t])
    raises(TypeError, "has no option", dist.AllreduceOptions, root=1)
    # a subgroup of ranks 1 and 2: roots and peers are ranks within it
    sub = dist.new_group([1, 2], group_desc="pair")
    if rank > 0:
        assert sub.group_desc == "pair" and sub.group_name != pg.group_name
        b = ddpc.full((3,), float(rank))
        sub.broadcast([b], dist.BroadcastOptions(rootRank=1)).wait()
        assert b.tolist() == [2.0] * 3
        b = ddpc.full((3,), float(rank))
        sub.broadcast(b, 0).wait()
        assert b.tolist() == [1.0] * 3
        r = ddpc.full((1,), float(rank))
        sub.reduce([r], dist.ReduceOptions(rootRank=1, reduceOp=dist.ReduceOp.SUM)).wait()
        if rank == 2:
            assert r.tolist() == [3.0]
        outs = [ddpc.zeros(1) for _ in range(2)]
        sub.allgather([outs], [ddpc.full((1,), float(rank))]).wait()
        assert [o.item() for o in outs] == [1.0, 2.0]
        msg = ddpc.zeros(2)
        if rank == 1:
            sub.send([ddpc.tensor([5.0, 6.0])], 1, 0).wait()
        else:
            sub.recv([msg], 0, 0).wait()
            assert msg.tolist() == [5.0, 6.0]
        sub.set_timeout(timedelta(seconds=7))
        assert sub._timeout_s == 7.0
    pg.barrier().wait()
    pg.barrier(dist.BarrierOptions(timeout=timedelta(seconds=30))).wait()
    w = ddpc.full((1,), 1.0)
    pg.allreduce([w], dist.AllreduceOptions(timeout=timedelta(seconds=20))).wait()
    assert w.item() == 3.0 and pg._timeout_s == 1800.0  # the call's timeout left the group's as it was
    """, tmp_path)


def test_futures_in_place_exchanges_and_object_copies_as_pytorch(tmp_path):
    run_ranks(2, """
    # then() runs its callback once, when the collective completes: waiting for the first future is enough
    t = ddpc.full((2,), float(rank + 1))
    fut = dist.all_reduce(t, async_op=True).get_future()
    fut.then(lambda f: f.value()[0].div_(world))
    fut.wait()
    assert t.tolist() == [1.5, 1.5], t.tolist()
    calls = []

    def failing(f):
        calls.append(f.value())
        raise KeyError("in the callback")

    child = dist.all_reduce(ddpc.ones(1), async_op=True).get_future().then(failing)
    for _ in range(3):
        raises(RuntimeError, "Got the following error when running the callback: KeyError: 'in the callback'",
               child.wait)
    assert len(calls) == 1 and child.done()
    # all_to_all_single in place: the blocks received do not overwrite the blocks still to send
    for trial in range(20):
        x = ddpc.arange(4.0 * world) + 100 * rank + trial
        work = dist.all_to_all_single(x, x, async_op=True)
        assert work.get_future().wait()[0] is x
        want = [100 * r + trial + 4 * rank + k for r in range(world) for k in range(4)]
        assert x.tolist() == want, (trial, x.tolist(), want)
    # complex tensors and buffers through all_to_all_single
    z = ddpc.view_as_complex(ddpc.arange(4.0).reshape(2, 2) + 10 * rank)
    out = ddpc.zeros(2, dtype=ddpc.complex64)
    dist.all_to_all_single(out, z)
    assert out.tolist() == [complex(10 * r + 2 * rank, 10 * r + 2 * rank + 1) for r in range(world)], out.tolist()
    # scatter_object_list gives rank src a copy too
    given = [[r] for r in range(world)] if rank == 0 else None
    got = [None]
    dist.scatter_object_list(got, given, src=0)
    assert got[0] == [rank] and (rank != 0 or got[0] is not given[0])
    raises(ValueError, "ranks must not repeat", dist.new_group, [0, 0, 1])
    """, tmp_path)


def test_a_store_counter_adds_integers_only():
    for store in (dist.HashStore(), dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=5))):
        assert store.add("n", 2) == 2 and store.add("n", -5) == -3
        with pytest.raises(TypeError):
            store.add("n", 1.7)  # (PyTorch's is an error too; it added 1)
        assert store.get("n") == b"-3"


def test_a_future_made_alone_is_completed_by_hand():
    """ddpc.futures.Future() as torch.futures.Future(): done once set_result or
    set_exception completes it (once), also from another thread."""
    import threading

    fut = ddpc.futures.Future()
    later = fut.then(lambda f: f.wait() * 2)
    assert not fut.done() and not later.done()
    fut.set_result(21)
    assert fut.done() and later.done() and fut.wait() == 21 and later.value() == 42
    with pytest.raises(RuntimeError, match="only be marked completed once"):
        fut.set_result(1)
    with pytest.raises(RuntimeError, match="only be marked completed once"):
        ddpc.futures.Future(value=None).set_result(1)  # (completed as made)
    failed = ddpc.futures.Future()
    failed.set_exception(ValueError("no data"))
    with pytest.raises(ValueError, match="no data"):
        failed.wait()
    with pytest.raises(ValueError, match="no data"):  # the parent's error, re-raised by the callback, stays itself
        failed.then(lambda f: f.wait()).wait()
    with pytest.raises(RuntimeError, match="when running the callback: ZeroDivisionError"):  # the callback's own
        fut.then(lambda f: 1 / 0).wait()
    with pytest.raises(TypeError, match="takes an exception"):
        ddpc.futures.Future().set_exception("no data")
    other = ddpc.futures.Future()
    timer = threading.Timer(0.05, other.set_result, args=("from a thread",))
    timer.start()
    both = ddpc.futures.collect_all([fut, other])
    assert [f.wait() for f in both.wait()] == [21, "from a thread"]
    assert ddpc.futures.wait_all([fut, other]) == [21, "from a thread"]
    timer.join()


def test_collectives_write_through_copies_standing_for_views_and_fill_outputs_as_pytorch(tmp_path):
    run_ranks(2, """
    import ddpc.distributed.nn.functional as F
    # A transposed or column view (a copy in ddpc) takes the result, and so does the tensor it views.
    x = ddpc.arange(6.0).reshape(2, 3) + rank
    dist.all_reduce(x.t())
    assert x.tolist() == [[1.0, 3.0, 5.0], [7.0, 9.0, 11.0]], x.tolist()
    y = ddpc.full((2, 3), float(rank))
    dist.broadcast(y[:, 1], src=1)
    assert y.tolist() == [[rank, 1.0, rank], [rank, 1.0, rank]], y.tolist()
    z = ddpc.ones(3, 2) * (rank + 1)
    z.add_(0)  # (a write into z after the view below was made: the collective reads z's current values)
    zt = z.t()
    z.mul_(2)
    dist.all_reduce(zt, async_op=True).wait()
    assert z.tolist() == [[6.0, 6.0]] * 3 and zt.tolist() == [[6.0] * 3] * 2, (z.tolist(), zt.tolist())
    # all_gather_object fills a longer list's first entries, as PyTorch's
    objs = [None, None, "kept"]
    dist.all_gather_object(objs, {"rank": rank})
    assert objs == [{"rank": 0}, {"rank": 1}, "kept"], objs
    # the autograd-aware collectives fill the outputs they are given
    out = ddpc.zeros(2)
    got = F.reduce_scatter(out, [ddpc.ones(2) * (rank + i) for i in range(2)])
    assert out.tolist() == got.tolist() == [2 * rank + 1.0] * 2, out.tolist()
    out = ddpc.zeros(4)
    got = F.all_to_all_single(out, ddpc.arange(4.0) + 10 * rank)
    assert out.tolist() == got.tolist() == [2.0 * rank, 2.0 * rank + 1, 10 + 2.0 * rank, 11 + 2.0 * rank], out.tolist()
    outs = [ddpc.zeros(1), ddpc.zeros(1)]
    F.all_to_all(outs, [ddpc.full((1,), 10.0 * rank + i) for i in range(2)])
    assert [o.item() for o in outs] == [rank, 10.0 + rank], outs
    whole = ddpc.zeros(4)
    F._all_gather_base(whole, ddpc.full((2,), float(rank)))
    assert whole.tolist() == [0.0, 0.0, 1.0, 1.0]
    """, tmp_path)
