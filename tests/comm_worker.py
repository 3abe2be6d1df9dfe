"""Worker program for the multi-process communicator tests.

Started once per rank (by ddpc-run or directly with the env:// variables):
    python comm_worker.py SCENARIO [ARGS...]
Each scenario checks results against closed forms and prints "RANK r PASS"
(or the error it was asked to provoke) on stdout.
"""

import contextlib
import os
import signal
import sys
import threading
import time

import ml_dtypes
import numpy as np

import ddpc
import ddpc.distributed as dist
from ddpc.distributed import ReduceOp


def say(text):
    """One line on stdout in one write. The launcher runs ranks unbuffered
    (python -u), where print writes its text and its newline apart, so two
    ranks' lines could interleave on the shared pipe."""
    os.write(1, (text + "\n").encode())

DTYPES = [np.float32, np.float64, np.float16, ml_dtypes.bfloat16, np.int32, np.int64, np.uint8]
OPS = [ReduceOp.SUM, ReduceOp.AVG, ReduceOp.MIN, ReduceOp.MAX, ReduceOp.PROD]
SIZES = [0, 1, 7, 4097, (1 << 20) + 3]
if os.environ.get("TEST_SMALL_SIZES"):
    SIZES = SIZES[:-1] + [65537]


def contribution(op, rank, n, dtype):
    """Rank `rank`'s input for `op`: small integers, exact in every dtype."""
    i = np.arange(n, dtype=np.int64)
    if op == ReduceOp.PROD:
        x = 1 + (i + rank) % 2
    elif op in (ReduceOp.MIN, ReduceOp.MAX):
        x = (i * 3 + rank * 5) % 11
    else:
        x = i % 7 + rank + 1
    return x.astype(dtype)


def expected(op, world, n, dtype):
    """Closed form of the reduction of every rank's contribution."""
    i = np.arange(n, dtype=np.int64)
    if op == ReduceOp.PROD:
        odd = sum(((i + r) % 2) for r in range(world))  # ranks contributing a 2
        return (2 ** odd).astype(dtype)
    if op == ReduceOp.MIN:
        return np.min([(i * 3 + r * 5) % 11 for r in range(world)], axis=0).astype(dtype)
    if op == ReduceOp.MAX:
        return np.max([(i * 3 + r * 5) % 11 for r in range(world)], axis=0).astype(dtype)
    total = world * (i % 7) + world * (world + 1) // 2
    if op == ReduceOp.SUM:
        return total.astype(dtype)
    if np.issubdtype(np.dtype(dtype), np.integer):
        return (total // world).astype(dtype)
    return (total / world).astype(dtype)


def check(got, want, what):
    if not np.array_equal(np.asarray(got).astype(np.float64), np.asarray(want).astype(np.float64)):
        bad = np.flatnonzero(np.asarray(got).astype(np.float64) != np.asarray(want).astype(np.float64))[:5]
        raise AssertionError(f"{what}: mismatch at {bad.tolist()}: got {np.asarray(got)[bad]}, "
                             f"want {np.asarray(want)[bad]}")


def scenario_matrix():
    """Every op x dtype x size for all_reduce and reduce_scatter, every dtype x
    size for broadcast and all_gather, on numpy arrays; a sample on ddpc.Tensor."""
    rank, world = dist.get_rank(), dist.get_world_size()
    for dtype in DTYPES:
        for n in SIZES:
            name = np.dtype(dtype).name
            for op in OPS:
                a = contribution(op, rank, n, dtype)
                dist.all_reduce(a, op=op)
                check(a, expected(op, world, n, dtype), f"all_reduce {name} op {op} n {n}")
                # reduce_scatter: block r of rank q's input is contribution(op, q, ...) shifted by r*n.
                inp = np.concatenate([contribution(op, rank, n, dtype) for _ in range(world)]) if n else \
                    np.zeros(0, dtype)
                out = np.empty(n, dtype)
                dist.reduce_scatter_tensor(out, inp, op=op)
                check(out, expected(op, world, n, dtype), f"reduce_scatter {name} op {op} n {n}")
            b = (np.arange(n) % 251).astype(dtype) if rank == world - 1 else np.zeros(n, dtype)
            dist.broadcast(b, src=world - 1)
            check(b, (np.arange(n) % 251).astype(dtype), f"broadcast {name} n {n}")
            mine = ((np.arange(n) + rank) % 97).astype(dtype)
            out = np.empty(world * n, dtype)
            dist.all_gather_into_tensor(out, mine)
            want = np.concatenate([((np.arange(n) + r) % 97).astype(dtype) for r in range(world)]) if n else out
            check(out, want, f"all_gather_into_tensor {name} n {n}")
    # ddpc.Tensor in place, and all_gather into a list of tensors.
    for dt in (ddpc.float32, ddpc.int64, ddpc.float16):
        t = ddpc.full((3, 5), rank + 1, dtype=dt)
        dist.all_reduce(t)
        check(t.numpy(), np.full((3, 5), world * (world + 1) // 2), f"all_reduce Tensor {dt}")
        outs = [ddpc.zeros(4, dtype=dt) for _ in range(world)]
        dist.all_gather(outs, ddpc.full((4,), rank, dtype=dt))
        for r, o in enumerate(outs):
            check(o.numpy(), np.full(4, r), f"all_gather list Tensor {dt}")
    lst = [np.zeros(3, np.int32) for _ in range(world)]
    dist.all_gather(lst, np.full(3, rank * 10, np.int32))
    for r, o in enumerate(lst):
        check(o, np.full(3, r * 10), "all_gather list numpy")
    # A NaN from any rank wins MIN and MAX, also the last rank's (never the first operand on rank 0).
    for dtype in (np.float32, np.float64, np.float16):
        for op in (ReduceOp.MIN, ReduceOp.MAX):
            a = np.ones(5, dtype)
            if rank == world - 1:
                a[2] = np.nan
            dist.all_reduce(a, op=op)
            if not np.isnan(a[2]) or np.isnan(a[[0, 1, 3, 4]]).any():
                raise AssertionError(f"all_reduce {np.dtype(dtype).name} op {op} with a NaN: got {a}")
    # An average whose sum exceeds the half types' range (float16 max 65504) is still exact.
    for dtype in (np.float16, ml_dtypes.bfloat16):
        a = np.full(9, 40000, dtype)
        dist.all_reduce(a, op=ReduceOp.AVG)
        check(a, np.full(9, 40000, dtype), f"all_reduce {np.dtype(dtype).name} AVG of large values")
    # So is an integer average whose sum leaves the type's range (truncated toward zero, as one division).
    for dtype, big in ((np.uint8, 200), (np.int32, 2_000_000_000), (np.int64, 2**62 + 1)):
        for sign in ((1,) if dtype is np.uint8 else (1, -1)):
            total = sum(sign * (big + r) for r in range(world))
            want = [abs(total) // world * (1 if total > 0 else -1)]
            a = np.full(5, sign * (big + rank), dtype)
            dist.all_reduce(a, op=ReduceOp.AVG)
            out = np.empty(2, dtype)
            dist.reduce_scatter_tensor(out, np.full(2 * world, sign * (big + rank), dtype), op=ReduceOp.AVG)
            if a.tolist() != want * 5 or out.tolist() != want * 2:
                raise AssertionError(f"{np.dtype(dtype).name} AVG of {sign * big} + rank: got {a} and {out}, "
                                     f"want {want}")
    dist.barrier()


def scenario_async():
    rank, world = dist.get_rank(), dist.get_world_size()
    arrays = [np.full(100000 + k, rank + k, np.float64) for k in range(6)]
    works = [dist.all_reduce(a, async_op=True) for a in arrays]
    wb = dist.barrier(async_op=True)
    for k, (a, w) in enumerate(zip(arrays, works)):
        assert w.wait(timeout=60)
        assert w.is_completed()
        check(a, np.full(a.size, sum(r + k for r in range(world))), f"async all_reduce {k}")
    wb.wait()
    lst = [ddpc.zeros(5) for _ in range(world)]
    w = dist.all_gather(lst, ddpc.full((5,), float(rank)), async_op=True)
    w.wait()
    check(np.concatenate([t.numpy() for t in lst]), np.repeat(np.arange(world), 5), "async all_gather list")
    # A sync call after async ones runs after them, in order.
    b = np.full(10, rank, np.int64)
    dist.all_reduce(b)
    check(b, np.full(10, world * (world - 1) // 2), "sync after async")


def scenario_rooted():
    """reduce, gather and scatter (the collectives with a root) against closed
    forms: every dtype x size, roots first and last, every op on all but the
    largest size; the other ranks' buffers are only read (reduce) or not
    given (gather's output, scatter's input)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    for dtype in DTYPES:
        name = np.dtype(dtype).name
        for k, n in enumerate(SIZES):
            root = 0 if k % 2 else world - 1
            for op in OPS if n < SIZES[-1] else [ReduceOp.SUM]:
                a = contribution(op, rank, n, dtype)
                dist.reduce(a, dst=root, op=op)
                check(a, expected(op, world, n, dtype) if rank == root else contribution(op, rank, n, dtype),
                      f"reduce {name} op {op} n {n} to {root}")
            mine = ((np.arange(n) + rank) % 97).astype(dtype)
            out = np.full(world * n, 99, dtype) if rank == root else None
            dist.gather_into_tensor(mine, out, dst=root)
            if rank == root:
                want = np.concatenate([((np.arange(n) + r) % 97).astype(dtype) for r in range(world)])
                check(out, want, f"gather_into_tensor {name} n {n} to {root}")
            check(mine, ((np.arange(n) + rank) % 97).astype(dtype), f"gather's input {name} n {n}")
            parts = [((np.arange(n) * 3 + r) % 89).astype(dtype) for r in range(world)] if rank == root else None
            got = np.full(n, 99, dtype)
            dist.scatter(got, parts, src=root)
            check(got, ((np.arange(n) * 3 + rank) % 89).astype(dtype), f"scatter {name} n {n} from {root}")
    # Lists of blocks (written or read in place): all_gather, reduce_scatter, gather, scatter, on a size
    # that takes several chunks of the shared segment, and with a rank's part inside the list.
    for n in (5, SIZES[-1]):
        want = [((np.arange(n) + r) % 97).astype(np.float32) for r in range(world)]
        outs = [np.full(n, -1, np.float32) for _ in range(world)]
        dist.all_gather(outs, want[rank])
        for r in range(world):
            check(outs[r], want[r], f"all_gather list n {n} block {r}")
        got = np.zeros(n, np.int64)
        dist.reduce_scatter(got, [np.full(n, rank + 10 * r, np.int64) for r in range(world)])
        check(got, np.full(n, s_ranks(world) + 10 * rank * world), f"reduce_scatter list n {n}")
        root = world - 1
        outs = [ddpc.full((n,), -1.0) for _ in range(world)] if rank == root else None
        dist.gather(ddpc.tensor(want[rank]), outs, dst=root)
        if rank == root:
            for r in range(world):
                check(outs[r].numpy(), want[r], f"gather list n {n} block {r}")
        got = np.zeros(n, np.float32)
        dist.scatter(got, [w.copy() for w in want] if rank == root else None, src=root)
        check(got, want[rank], f"scatter list n {n}")
    blocks = [np.full(3, 7 * (r + 1) if r == rank else 0, np.int32) for r in range(world)]
    dist.all_gather(blocks, blocks[rank])  # the input is this rank's block of the output
    check(np.concatenate(blocks), np.repeat(7 * np.arange(1, world + 1), 3), "all_gather list in place")
    parts = [np.full(2, 3.0 * r) for r in range(world)] if rank == 0 else None
    mine = parts[0] if rank == 0 else np.zeros(2)
    dist.scatter(mine, parts, src=0)  # the root's output is its own block of the input
    check(mine, np.full(2, 3.0 * rank), "scatter into the root's own block")
    zs = [ddpc.zeros(2, dtype=ddpc.complex128) for _ in range(world)]
    dist.all_gather(zs, ddpc.full((2,), complex(rank, 1), dtype=ddpc.complex128))
    check(np.concatenate([z.numpy() for z in zs]).view(np.float64),
          np.concatenate([[r, 1, r, 1] for r in range(world)]), "all_gather list complex128")
    # Complex (as pairs of reals) and bool (as bytes), on Tensors.
    z = ddpc.full((5,), complex(rank, -rank), dtype=ddpc.complex64)
    dist.reduce(z, dst=0)
    s = world * (world - 1) // 2
    check(z.numpy().view(np.float32), np.tile([s, -s], 5) if rank == 0 else np.tile([rank, -rank], 5),
          "reduce complex64")
    flags = [ddpc.zeros(3, dtype=ddpc.bool) for _ in range(world)] if rank == 0 else None
    dist.gather(ddpc.full((3,), rank % 2 == 1, dtype=ddpc.bool), flags, dst=0)
    if rank == 0:
        check(np.concatenate([f.numpy() for f in flags]), np.repeat(np.arange(world) % 2 == 1, 3), "gather bool")
    # Asynchronous, several in flight, in order.
    a = np.full(4, rank + 1.0, np.float32)
    got = np.zeros(2, np.int64)
    outs = [np.zeros(2, np.int64) for _ in range(world)] if rank == world - 1 else None
    works = [dist.reduce(a, dst=0, async_op=True),
             dist.scatter(got, [np.full(2, r * 5, np.int64) for r in range(world)] if rank == 0 else None,
                          async_op=True),
             dist.gather(np.full(2, rank, np.int64), outs, dst=world - 1, async_op=True)]
    for w in works:
        w.wait()
    check(a, np.full(4, s + world if rank == 0 else rank + 1.0), "async reduce")
    check(got, np.full(2, rank * 5), "async scatter")
    if rank == world - 1:
        for r, o in enumerate(outs):
            check(o, np.full(2, r), "async gather")


def s_ranks(world):
    """0 + 1 + ... + world - 1."""
    return world * (world - 1) // 2


def scenario_rooted_mismatch(what):
    """Ranks that disagree about a rooted collective: each rank gets DistError."""
    rank = dist.get_rank()
    try:
        if what == "roots":
            dist.reduce(np.zeros(4, np.float32), dst=rank)
        elif what == "reduce":  # rank 0 reduces, the others all-reduce
            x = np.zeros(4, np.float32)
            dist.reduce(x, dst=0) if rank == 0 else dist.all_reduce(x)
        else:  # rank 0 gathers, the others all-gather
            x, out = np.zeros(4, np.float32), np.zeros(4 * dist.get_world_size(), np.float32)
            dist.gather_into_tensor(x, out, dst=0) if rank == 0 else dist.all_gather_into_tensor(out, x)
    except dist.DistError as e:
        say(f"RANK {rank} MISMATCH {e}")
        return
    raise AssertionError(f"{what}: the ranks' calls matched")


def scenario_more():
    """reduce, gather, scatter, reduce_scatter of a list, all_to_all(_single),
    batch_isend_irecv, the object collectives, and results of async calls
    whose handles were dropped unwaited."""
    rank, world = dist.get_rank(), dist.get_world_size()
    dst = world - 1
    for dtype in (np.float32, np.int64, ml_dtypes.bfloat16):
        name = np.dtype(dtype).name
        a = np.full(7, rank + 1, dtype)
        dist.reduce(a, dst=dst)
        check(a, np.full(7, world * (world + 1) // 2 if rank == dst else rank + 1), f"reduce {name}")
        outs = [np.zeros(4, dtype) for _ in range(world)] if rank == dst else None
        dist.gather(np.full(4, rank * 3, dtype), outs, dst=dst)
        if rank == dst:
            for r, o in enumerate(outs):
                check(o, np.full(4, r * 3), f"gather {name}")
        got = np.zeros((2, 3), dtype)
        parts = [np.full((2, 3), 10 + r, dtype) for r in range(world)] if rank == 0 else None
        dist.scatter(got, parts, src=0)
        check(got, np.full((2, 3), 10 + rank), f"scatter {name}")
        out = np.zeros(5, dtype)
        dist.reduce_scatter(out, [np.full(5, rank + r, dtype) for r in range(world)])
        check(out, np.full(5, sum(q + rank for q in range(world))), f"reduce_scatter list {name}")
    # ddpc.Tensor: reduce, gather into Tensors, scatter into a Tensor.
    t = ddpc.full((3,), float(rank))
    dist.reduce(t, dst=0, op=ReduceOp.MAX)
    check(t.numpy(), np.full(3, world - 1 if rank == 0 else rank), "reduce Tensor MAX")
    tl = [ddpc.zeros(2) for _ in range(world)] if rank == 0 else None
    dist.gather(ddpc.full((2,), rank + 0.5), tl, dst=0)
    if rank == 0:
        check(np.concatenate([x.numpy() for x in tl]), np.repeat(np.arange(world) + 0.5, 2), "gather Tensor")
    ts = ddpc.zeros(3, dtype=ddpc.int32)
    dist.scatter(ts, [ddpc.full((3,), r * 7, dtype=ddpc.int32) for r in range(world)] if rank == 0 else None)
    check(ts.numpy(), np.full(3, rank * 7), "scatter Tensor")
    # all_to_all_single: equal blocks of rows, then uneven ones (rank r sends r + q rows to rank q).
    inp = np.arange(world * 2 * 3, dtype=np.float32).reshape(world * 2, 3) + 100 * rank
    out = np.zeros_like(inp)
    dist.all_to_all_single(out, inp)
    want = np.concatenate([np.arange(world * 2 * 3, dtype=np.float32).reshape(world * 2, 3)[2 * rank:2 * rank + 2]
                           + 100 * q for q in range(world)])
    check(out, want, "all_to_all_single")
    send_rows = [rank + q for q in range(world)]
    recv_rows = [q + rank for q in range(world)]
    inp = np.concatenate([np.full((k, 2), rank * 10 + q, np.int64) for q, k in enumerate(send_rows)])
    out = np.full((sum(recv_rows), 2), -1, np.int64)
    dist.all_to_all_single(out, inp, output_split_sizes=recv_rows, input_split_sizes=send_rows)
    want = np.concatenate([np.full((k, 2), q * 10 + rank, np.int64) for q, k in enumerate(recv_rows)])
    check(out, want, "all_to_all_single with split sizes")
    outs = [ddpc.zeros(q + 1) for q in range(world)]
    w = dist.all_to_all(outs, [ddpc.full((rank + 1,), float(rank * world + q)) for q in range(world)],
                        async_op=True)
    w.wait()
    for q, o in enumerate(outs):
        check(o.numpy(), np.full(q + 1, q * world + rank), "all_to_all")
    if world > 1:
        try:
            dist.all_to_all_single(np.zeros(world + 1), np.zeros(world + 1))
            raise AssertionError("rows not a multiple of the group size must be refused")
        except ValueError as e:
            assert "split_sizes" in str(e), e
    # batch_isend_irecv around a ring.
    if world > 1:
        nxt, prv = (rank + 1) % world, (rank - 1) % world
        got = np.zeros(6, np.float64)
        ops = [dist.P2POp(dist.isend, np.full(6, rank, np.float64), nxt), dist.P2POp(dist.irecv, got, prv)]
        for w in dist.batch_isend_irecv(ops):
            w.wait()
        check(got, np.full(6, prv), "batch_isend_irecv")
    # Objects, of different sizes on each rank.
    objs = [None] * world
    dist.all_gather_object(objs, {"rank": rank, "pad": "x" * (rank * 1000)})
    assert objs == [{"rank": r, "pad": "x" * (r * 1000)} for r in range(world)], objs
    lst = [("from", 0), [1, 2, 3], None] if rank == 0 else [None, None, None]
    dist.broadcast_object_list(lst, src=0)
    assert lst == [("from", 0), [1, 2, 3], None], lst
    empty = []
    dist.broadcast_object_list(empty, src=0)
    assert empty == []
    gathered = [None] * world if rank == dst else None
    dist.gather_object(f"rank{rank}", gathered, dst=dst)
    assert rank != dst or gathered == [f"rank{r}" for r in range(world)], gathered
    mine = [None]
    dist.scatter_object_list(mine, [{"for": r} for r in range(world)] if rank == 0 else None, src=0)
    assert mine == [{"for": rank}], mine
    # A rank whose list has another length than src's learns it after taking part (nobody hangs).
    lst = [1, 2] if rank == 0 else [None]
    try:
        dist.broadcast_object_list(lst, src=0)
        assert rank == 0 or world == 1, "a list of the wrong length must be refused"
    except ValueError as e:
        assert rank != 0 and "sent 2 objects" in str(e), e
    # A collective on a group this rank is not in does nothing (with a warning), as in PyTorch.
    first = dist.new_group([0])
    x = np.full(2, rank + 1.0)
    if rank == 0:
        assert dist.get_group_rank(first, 0) == 0 and dist.get_process_group_ranks(first) == [0]
        dist.all_reduce(x, group=first)
    else:
        import warnings
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            assert dist.all_reduce(x, group=first) is None and dist.barrier(group=first) is None
        assert len(caught) == 2 and "not a member" in str(caught[0].message), caught
    check(x, np.full(2, rank + 1.0), "all_reduce outside the group changes nothing")
    dist.barrier(timeout=30)
    assert dist.group.WORLD is dist.GroupMember.WORLD is not None
    # In place: the input is this rank's block of the output (of the input, for reduce_scatter).
    buf = np.zeros(world * 3, np.float32)
    buf[rank * 3:rank * 3 + 3] = rank + 1
    dist.all_gather_into_tensor(buf, buf[rank * 3:rank * 3 + 3])
    check(buf, np.repeat(np.arange(world) + 1.0, 3), "all_gather_into_tensor in place")
    buf = np.ones(world * 2, np.int64)
    dist.reduce_scatter_tensor(buf[rank * 2:rank * 2 + 2], buf)
    check(buf[rank * 2:rank * 2 + 2], np.full(2, world), "reduce_scatter_tensor in place")
    # Work.get_future(): the output tensors, and then() chains on them.
    t = ddpc.full((2,), float(rank))
    fut = dist.all_reduce(t, async_op=True).get_future().then(lambda f: f.value()[0] * 2)
    check(fut.wait().numpy(), np.full(2, world * (world - 1)), "get_future().then")
    assert fut.done()
    # Handles dropped unwaited: their results land by the group's next call.
    lst = [np.zeros(3, np.int32) for _ in range(world)]
    dist.all_gather(lst, np.full(3, rank + 5, np.int32), async_op=True)
    got = np.zeros(2, np.float32)
    dist.scatter(got, [np.full(2, r, np.float32) for r in range(world)] if rank == 0 else None, async_op=True)
    dist.barrier()
    for r, o in enumerate(lst):
        check(o, np.full(3, r + 5), "all_gather list, handle dropped")
    check(got, np.full(2, rank), "scatter, handle dropped")


def scenario_monitored(wait_all):
    """monitored_barrier: everyone comes; then ranks 2.. stay away and rank 0
    names the first of them (or all, with wait_all_ranks), rank 1 times out."""
    rank, world = dist.get_rank(), dist.get_world_size()
    dist.monitored_barrier()
    if rank < 2:
        try:
            dist.monitored_barrier(timeout=2, wait_all_ranks=wait_all == "all")
            say(f"RANK {rank} NO ERROR")
        except dist.DistTimeoutError as e:
            say(f"RANK {rank} MONITORED {e}")
    dist.barrier()


def scenario_groups():
    rank, world = dist.get_rank(), dist.get_world_size()
    evens = dist.new_group([r for r in range(world) if r % 2 == 0])
    odds = dist.new_group([r for r in range(world) if r % 2 == 1]) if world > 1 else None
    mine = evens if rank % 2 == 0 else odds
    members = [r for r in range(world) if r % 2 == rank % 2]
    assert dist.get_rank(mine) == members.index(rank) and dist.get_world_size(mine) == len(members)
    assert [dist.get_global_rank(mine, i) for i in range(len(members))] == members
    other = odds if rank % 2 == 0 else evens
    assert other is dist.GroupMember.NON_GROUP_MEMBER or other is None
    a = np.full(1000, rank, np.int64)
    dist.all_reduce(a, group=mine)
    check(a, np.full(1000, sum(members)), "subgroup all_reduce")
    b = np.full(5, rank, np.float32)
    dist.broadcast(b, src=members[-1], group=mine)
    check(b, np.full(5, members[-1]), "subgroup broadcast (src is a global rank)")
    # The default group still works, interleaved with the subgroup.
    c = np.ones(3, np.float32)
    dist.all_reduce(c)
    check(c, np.full(3, world), "default group after subgroup")
    dist.destroy_process_group(mine)
    dist.barrier()
    # new_subgroups: consecutive blocks of ranks, LOCAL_WORLD_SIZE (set by ddpc-run) by default.
    assert dist.is_torchelastic_launched()
    size = 2 if world % 2 == 0 else 1
    cur, subs = dist.new_subgroups(size)
    assert len(subs) == world // size and subs[rank // size] is cur
    block = list(range(rank - rank % size, rank - rank % size + size))
    assert [dist.get_global_rank(cur, i) for i in range(size)] == block
    d = np.full(4, rank, np.int64)
    dist.all_reduce(d, group=cur)
    check(d, np.full(4, sum(block)), "new_subgroups all_reduce")
    per_node, _ = dist.new_subgroups()
    assert dist.get_world_size(per_node) == int(os.environ["LOCAL_WORLD_SIZE"])
    dist.barrier()


def scenario_p2p():
    rank, world = dist.get_rank(), dist.get_world_size()
    if world == 1:
        return
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    big = np.arange((1 << 20) + 3, dtype=np.float32) + rank
    got = np.empty_like(big)
    # Even ranks send first, odd ranks receive first: no cycle of blocking sends.
    if rank % 2 == 0:
        dist.send(big, nxt)
        dist.recv(got, prv)
    else:
        dist.recv(got, prv)
        dist.send(big, nxt)
    check(got, np.arange(big.size, dtype=np.float32) + prv, "send/recv ring")
    t = ddpc.zeros(7, dtype=ddpc.int32)
    if rank == 0:
        dist.send(ddpc.full((7,), 42, dtype=ddpc.int32), 1, tag=5)
    elif rank == 1:
        assert dist.recv(t, 0, tag=5) == 0
        check(t.numpy(), np.full(7, 42), "send/recv Tensor with tag")
    w = dist.isend(np.full(4, rank, np.int64), nxt)
    r = np.empty(4, np.int64)
    dist.irecv(r, prv).wait()
    w.wait()
    check(r, np.full(4, prv), "isend/irecv")
    # Every rank posts a send larger than the socket buffers before its receive (and
    # then the other way round): sends and receives progress independently.
    for recv_first in (False, True):
        got[:] = 0
        if recv_first:
            rw = dist.irecv(got, prv)
            sw = dist.isend(big, nxt)
        else:
            sw = dist.isend(big, nxt)
            rw = dist.irecv(got, prv)
        rw.wait()
        sw.wait()
        check(got, np.arange(big.size, dtype=np.float32) + prv, f"isend/irecv exchange (recv first: {recv_first})")
    # A pending send neither holds back nor mixes with a collective in between.
    sw = dist.isend(np.full(5, rank, np.float32), nxt)
    total = np.ones(3, np.float32)
    dist.all_reduce(total)
    dist.recv(np.empty(5, np.float32), prv)
    sw.wait()
    check(total, np.full(3, world), "all_reduce while a send is pending")
    # A send whose handle is dropped at once carries on in the background (as
    # in PyTorch): every rank sends more than the socket buffers hold, then receives.
    dist.isend(np.tile(big, 8), nxt)
    many = np.zeros(8 * big.size, np.float32)
    dist.recv(many, prv)
    check(many, np.tile(np.arange(big.size, dtype=np.float32) + prv, 8), "isend whose handle was dropped")
    dist.barrier()


def scenario_p2p_any():
    rank, world = dist.get_rank(), dist.get_world_size()
    if world == 1:
        return
    # Every other rank sends to rank 0, which takes the sends as they come.
    if rank == 0:
        senders = []
        for _ in range(world - 1):
            buf = np.zeros(3, np.int64)
            src = dist.recv(buf, tag=4)
            check(buf, np.full(3, src), "recv from any rank gets the data of the rank it returns")
            senders.append(src)
        assert sorted(senders) == list(range(1, world)), senders
        buf = ddpc.zeros(2)
        w = dist.irecv(buf, tag=6)
        w.wait()
        assert w.source_rank() == world - 1 and buf.numpy().tolist() == [world - 1.0] * 2, w.source_rank()
    else:
        dist.send(np.full(3, rank, np.int64), 0, tag=4)
        if rank == world - 1:
            dist.send(ddpc.full((2,), float(rank)), 0, tag=6)
    dist.barrier()
    if world >= 3:
        # Rank 1's next message has another tag: a recv from any rank for tag 9
        # waits for rank 2's instead, and a recv from rank 1 then takes rank 1's.
        if rank == 0:
            time.sleep(0.2)  # rank 1's message is there first
            a, b = np.zeros(2), np.zeros(2)
            assert dist.recv(a, tag=9) == 2
            assert dist.recv(b, src=1, tag=8) == 1
            check(a, np.full(2, 2.0), "recv from any rank for a tag")
            check(b, np.full(2, 1.0), "recv from rank 1 after a recv from any rank passed it by")
        elif rank == 1:
            dist.send(np.full(2, 1.0), 0, tag=8)
        elif rank == 2:
            time.sleep(0.5)
            dist.send(np.full(2, 2.0), 0, tag=9)
    dist.barrier()
    # In a new group no link exists yet: the last rank hears rank 0, which has
    # to connect to it first.
    sub = dist.new_group(list(range(world)))
    if rank == world - 1:
        buf = np.zeros(2)
        assert dist.recv(buf, group=sub, tag=2) == 0
        check(buf, np.full(2, 5.0), "recv from any rank over a link made meanwhile")
    elif rank == 0:
        dist.send(np.full(2, 5.0), world - 1, group=sub, tag=2)
    dist.barrier()
    dist.destroy_process_group(sub)
    if world >= 3:
        # Rank 2 leaves a new group at once (it never links to rank 0), rank 1
        # sends and then leaves too: rank 0 hears rank 1 without waiting on
        # rank 2, and its second recv sees rank 1's closed link as no sender.
        sub = dist.new_group([0, 1, 2], timeout=3)
        if rank == 0:
            start = time.monotonic()
            buf = np.zeros(2)
            assert dist.recv(buf, group=sub, tag=3) == 1
            assert time.monotonic() - start < 5, time.monotonic() - start
            w = dist.irecv(buf, group=sub, tag=3)
            with no_sender_within():
                w.wait(timeout=1.5)
            # Destroying the group waits for the pending recv up to the group's
            # timeout (3 s, 1.5 of them gone), which then fails it.
            start = time.monotonic()
            dist.destroy_process_group(sub)
            try:
                w.wait()
            except dist.DistError as e:
                assert "recv from any rank" in str(e) or "destroyed" in str(e), e
            else:
                raise AssertionError("the pending recv should fail")
            assert time.monotonic() - start < 5, time.monotonic() - start
        elif rank < 3:
            if rank == 1:
                time.sleep(0.3)
                dist.send(np.full(2, 1.0), 0, group=sub, tag=3)
            dist.destroy_process_group(sub)
    dist.barrier()


def scenario_p2p_tag_order():
    """Rank 0 sends tag 1 and then tag 2, rank 1 receives tag 2 first: as in
    gloo, a recv takes the oldest message from its peer with its tag, and rank
    0's isend of tag 1 (more than the socket buffers hold) completes because
    rank 1 reads it ahead for its own recv."""
    rank = dist.get_rank()
    big = np.arange((1 << 20) + 3, dtype=np.float32)
    if rank == 0:
        for w in (dist.isend(big, 1, tag=1), dist.isend(np.arange(5, dtype=np.int64), 1, tag=2)):
            w.wait()
    elif rank == 1:
        small, got = np.zeros(5, np.int64), np.zeros_like(big)
        assert dist.recv(small, 0, tag=2) == 0
        assert dist.recv(got, 0, tag=1) == 0
        check(small, np.arange(5), "recv of tag 2 sent after tag 1")
        check(got, big, "recv of tag 1 after the recv of tag 2")
    # The same with both receives posted at once.
    if rank == 0:
        ops = [dist.P2POp(dist.isend, big + 1, 1, tag=1), dist.P2POp(dist.isend, np.full(3, 7.0), 1, tag=2)]
    elif rank == 1:
        small, got = np.zeros(3), np.zeros_like(big)
        ops = [dist.P2POp(dist.irecv, small, 0, tag=2), dist.P2POp(dist.irecv, got, 0, tag=1)]
    if rank < 2:
        for w in dist.batch_isend_irecv(ops):
            w.wait()
    if rank == 1:
        check(small, np.full(3, 7.0), "batch_isend_irecv: irecv of tag 2 posted first")
        check(got, big + 1, "batch_isend_irecv: irecv of tag 1 posted second")
    dist.barrier()


def scenario_p2p_tag_fifo():
    """Messages with one tag keep their order with another tag between them:
    the first two with tag 1 wait while rank 1 takes both with tag 2."""
    rank = dist.get_rank()
    if rank == 0:
        for i in range(3):
            dist.send(np.full(i + 1, 10 + i, np.int32), 1, tag=1)
            if i < 2:
                dist.send(np.full(4, 20 + i, np.int32), 1, tag=2)
    elif rank == 1:
        for i in range(2):
            got = np.zeros(4, np.int32)
            dist.recv(got, 0, tag=2)
            check(got, np.full(4, 20 + i), f"message #{i} with tag 2")
        for i in range(3):
            got = np.zeros(i + 1, np.int32)
            dist.recv(got, 0, tag=1)
            check(got, np.full(i + 1, 10 + i), f"message #{i} with tag 1, in order")
    dist.barrier()


def scenario_p2p_tag_any():
    """A recv from any rank matches by tag as well, and reads ahead too."""
    rank, world = dist.get_rank(), dist.get_world_size()
    # Rank 1 takes rank 0's tag 4 first, then the tag 3 sent before it.
    if rank == 0:
        dist.send(np.full(2, 3.0), 1, tag=3)
        dist.send(np.full(6, 4.0), 1, tag=4)
    elif rank == 1:
        got3, got4 = np.zeros(2), np.zeros(6)
        assert dist.recv(got4, tag=4) == 0
        w = dist.irecv(got3, tag=3)
        w.wait()
        assert w.source_rank() == 0, w.source_rank()
        check(got4, np.full(6, 4.0), "recv from any rank of tag 4 sent after tag 3")
        check(got3, np.full(2, 3.0), "recv from any rank of the tag 3 read ahead")
    dist.barrier()
    if world >= 3:
        # Rank 1's tag 8 is read ahead by rank 0's recv of its tag 5; a recv
        # from any rank for tag 7 then gets rank 2's, and one for tag 8 rank 1's.
        if rank == 0:
            b, c, a = np.zeros(3, np.int64), np.zeros(4), np.zeros(2)
            assert dist.recv(b, 1, tag=5) == 1
            assert dist.recv(c, tag=7) == 2
            w = dist.irecv(a, tag=8)
            w.wait()
            assert w.source_rank() == 1, w.source_rank()
            check(b, np.arange(3), "recv of rank 1's tag 5 sent after its tag 8")
            check(c, np.full(4, 2.0), "recv from any rank while another rank's message waits")
            check(a, np.full(2, 1.0), "recv from any rank of a message read ahead")
        elif rank == 1:
            dist.send(np.full(2, 1.0), 0, tag=8)
            dist.send(np.arange(3, dtype=np.int64), 0, tag=5)
        elif rank == 2:
            dist.send(np.full(4, 2.0), 0, tag=7)
        dist.barrier()


def scenario_p2p_tag_timeout():
    """Rank 1 receives a tag rank 0 never sends, each time in a new group with
    a short timeout: from rank 0 when rank 0 sends nothing, from rank 0 and
    then from any rank when rank 0 sends another tag (that send completes).
    The errors name the tag and the peer."""
    rank = dist.get_rank()
    for src, other in ((0, False), (0, True), (None, True)):
        sub = dist.new_group([0, 1], timeout=1.5)
        if rank == 0 and other:
            dist.send(np.ones(3, np.float32), 1, group=sub, tag=1)
        elif rank == 1:
            start = time.monotonic()
            try:
                dist.recv(np.ones(3, np.float32), src, group=sub, tag=3)
            except dist.DistError as e:
                say(f"RANK 1 TIMEOUT {type(e).__name__} after {time.monotonic() - start:.1f} s: {e}")
            else:
                raise AssertionError("a recv for a tag never sent returned")
        dist.barrier()


def scenario_p2p_tag_mismatch(what):
    """Rank 0 sends 10 floats with tag 1 and then with tag 2; rank 1 takes tag 2
    and then receives tag 1 into 12 floats (what="size") or 10 int32 ("dtype"):
    the message read ahead is checked as one read off the link."""
    rank = dist.get_rank()
    try:
        if rank == 0:
            dist.send(np.ones(10, np.float32), 1, tag=1)
            dist.send(np.full(10, 2.0, np.float32), 1, tag=2)
        elif rank == 1:
            got = np.zeros(10, np.float32)
            dist.recv(got, 0, tag=2)
            check(got, np.full(10, 2.0), "recv of tag 2")
            dist.recv(np.ones(12, np.float32) if what == "size" else np.ones(10, np.int32), 0, tag=1)
    except dist.DistError as e:
        say(f"RANK {rank} MISMATCH {e}")


@contextlib.contextmanager
def no_sender_within():
    try:
        yield
    except dist.DistTimeoutError as e:
        assert "did not complete within" in str(e), e
    else:
        raise AssertionError("expected the wait to time out")


def in_shared(mem, n, dtype, offset):
    """n elements of dtype at byte `offset` of a shared buffer (bfloat16 through its bits)."""
    if np.dtype(dtype) == np.dtype(ml_dtypes.bfloat16):
        return np.frombuffer(mem, np.uint16, n, offset).view(ml_dtypes.bfloat16)
    return np.frombuffer(mem, dtype, n, offset)


def scenario_shared():
    """all_reduce in place in a shared buffer: every op x dtype x size at an
    offset that is no multiple of the cache line, async and async after async,
    in async, a buffer outliving its group, and clear errors for sizes that
    differ between ranks."""
    rank, world = dist.get_rank(), dist.get_world_size()
    alone = dist.GroupMember.WORLD._c.local_size == 1
    mem = dist.shared_buffer(1 << 20)
    # A rank alone on its host gets None, and joins the others' collectives with private memory.
    assert (mem is None) == alone, "shared_buffer: None exactly where no other rank shares the host"
    mem = bytearray(1 << 20) if alone else mem
    view = memoryview(mem)
    assert view.nbytes == 1 << 20 and not any(view[:: 4093]), "a shared buffer is not zeroed"
    for dtype in DTYPES:
        for n in [1, 7, 4097, 65537]:
            for op in OPS:
                a = in_shared(mem, n, dtype, 40)
                a[:] = contribution(op, rank, n, dtype)
                dist.all_reduce(a, op=op)
                check(a, expected(op, world, n, dtype), f"shared all_reduce {np.dtype(dtype).name} op {op} n {n}")
    # Two tensors in one buffer, reduced asynchronously one after the other.
    x, y = in_shared(mem, 1000, np.float32, 0), in_shared(mem, 3000, np.float32, 4096)
    x[:], y[:] = rank, 2 * rank
    works = [dist.all_reduce(x, async_op=True), dist.all_reduce(y, async_op=True)]
    for w in works:
        w.wait()
    check(x, np.full(1000, world * (world - 1) // 2), "shared async 1")
    check(y, np.full(3000, world * (world - 1)), "shared async 2")
    # A subgroup's buffer stays usable after the subgroup is destroyed.
    sub = dist.new_group(list(range(world)))
    kept = dist.shared_buffer(4096, group=sub) or bytearray(4096)
    z = np.frombuffer(kept, np.int64, 8)
    z[:] = rank + 1
    dist.all_reduce(z, group=sub)
    dist.destroy_process_group(sub)
    check(z, np.full(8, world * (world + 1) // 2), "shared buffer after its group is gone")
    z[:] = 0
    # Ranks asking for different sizes get an error, not a hang.
    try:
        dist.shared_buffer(4096 * (1 + (rank == 0)))
    except (ValueError, dist.DistError) as e:
        say(f"RANK {rank} SIZES {e}")
    dist.barrier()


def scenario_signals():
    """SharedBuffer.peer/signal and ProcessGroup.await_value: each rank writes
    into its part and signals, then reads every part once it sees its owner's
    signal, and writes into the next rank's part; a counter nobody signals
    times out naming the wait; bad peers and offsets are refused."""
    rank, world = dist.get_rank(), dist.get_world_size()
    g = dist.new_group(list(range(world)), timeout=2)
    mem = dist.shared_buffer(4096, group=g)
    c = g._c
    assert mem.ranks == world and c.local_rank == rank, "one part per rank of the host"
    parts = [mem.peer(j) for j in range(world)]
    for it in (1, 2, 3):
        np.frombuffer(mem, np.int64, 100, 64)[:] = rank * 1000 + it
        mem.signal(0, it)
        for j in range(world):
            c.await_value(parts[j], 0, it, "a test's wait")
            check(np.frombuffer(parts[j], np.int64, 100, 64), np.full(100, j * 1000 + it), f"part {j} at {it}")
        # into the next rank's part, at the offset only this rank writes
        nxt = (rank + 1) % world
        np.frombuffer(parts[nxt], np.int64, 10, 1024)[:] = it * 10 + rank
        parts[nxt].signal(8, it)
        c.await_value(mem, 8, it)
        check(np.frombuffer(mem, np.int64, 10, 1024), np.full(10, it * 10 + (rank - 1) % world), f"from the left {it}")
        dist.barrier(group=g)  # nobody overwrites a part another rank may still read
    for bad in (lambda: mem.peer(world), lambda: mem.peer(-1)):
        try:
            bad()
        except IndexError:
            pass
        else:
            raise AssertionError("peer out of range accepted")
    for bad in (lambda: mem.signal(3, 1), lambda: mem.signal(4096, 1), lambda: c.await_value(mem, -8, 1)):
        try:
            bad()
        except ValueError:
            pass
        else:
            raise AssertionError("offset outside the buffer accepted")
    start = time.monotonic()
    try:
        c.await_value(parts[(rank + 1) % world], 16, 1, "a test's wait")
    except dist.DistError as e:
        assert "a test's wait timed out after 2.0 s" in str(e) and time.monotonic() - start < 10, str(e)
    else:
        raise AssertionError("a counter nobody signals was awaited")
    dist.barrier()


def scenario_shared_full(nbytes):
    """Rank 0 asks for more than /dev/shm holds (the others for a little, so they
    learn of rank 0's failure from it): every rank gets an error at once, and
    the group goes on."""
    rank, world = dist.get_rank(), dist.get_world_size()
    try:
        dist.shared_buffer(int(nbytes) if rank == 0 else 4096)
    except (OSError, dist.DistError) as e:
        say(f"RANK {rank} FULL {e}")
    a = np.ones(5, np.float32)
    dist.all_reduce(a)
    check(a, np.full(5, world), "all_reduce after a failed shared_buffer")


def scenario_shared_mismatch():
    """Rank 0 all-reduces in a shared buffer, the others private arrays: every rank gets DistError."""
    mem = dist.shared_buffer(4096)
    a = np.frombuffer(mem, np.float32, 10) if dist.get_rank() == 0 else np.ones(10, np.float32)
    all_reduce_expecting_mismatch(a, "an all_reduce in a shared buffer against private ones")


def scenario_mismatch():
    """Rank 0 all-reduces 10 floats, the others 12: every rank must get DistError."""
    if dist.get_world_size() == 1:
        return
    all_reduce_expecting_mismatch(np.ones(10 if dist.get_rank() == 0 else 12, np.float32), "mismatched all_reduce")


def all_reduce_expecting_mismatch(a, what):
    """all_reduce(a), about which the ranks disagree: prints the DistError that every rank must get."""
    try:
        dist.all_reduce(a)
    except dist.DistError as e:
        say(f"RANK {dist.get_rank()} MISMATCH {e}")
        return
    raise AssertionError(f"{what} did not raise")


def scenario_broadcast_mismatch():
    """Every rank names itself the root: the mismatch names each side's root."""
    try:
        dist.broadcast(np.zeros(4, np.float32), src=dist.get_rank())
    except dist.DistError as e:
        say(f"RANK {dist.get_rank()} MISMATCH {e}")


def scenario_p2p_objects():
    """send_object_list / recv_object_list from rank 0 to every other rank
    (from a given rank and from any), new_subgroups_by_enumeration, and
    get_node_local_rank."""
    rank, world = dist.get_rank(), dist.get_world_size()
    for r in range(1, world):
        if rank == 0:
            dist.send_object_list([{"to": r}, "x" * (1000 * r), None], r)
            dist.send_object_list([], r)
            dist.send_object_list([(r, r)], r)
        elif rank == r:
            got = [None] * 3
            assert dist.recv_object_list(got, 0) == 0
            assert got == [{"to": r}, "x" * (1000 * r), None], got
            empty = []
            assert dist.recv_object_list(empty, 0) == 0 and empty == []
            one = [None]
            assert dist.recv_object_list(one) == 0 and one == [(r, r)], one
    assert dist.get_node_local_rank() == int(os.environ["LOCAL_RANK"]) == rank
    evens, odds = list(range(0, world, 2)), list(range(1, world, 2))
    cur, subs = dist.new_subgroups_by_enumeration([evens, odds] if odds else [evens])
    assert cur is subs[rank % 2] and dist.get_process_group_ranks(cur) == (evens, odds)[rank % 2]
    d = np.full(3, rank, np.int64)
    dist.all_reduce(d, group=cur)
    check(d, np.full(3, sum((evens, odds)[rank % 2])), "new_subgroups_by_enumeration all_reduce")
    # Peers named by their rank within the group (group_src / group_dst / group_peer), as PyTorch takes them.
    members = (evens, odds)[rank % 2]
    first = np.full(2, rank, np.int64)
    dist.broadcast(first, group=cur, group_src=0)
    check(first, np.full(2, members[0]), "broadcast with group_src")
    got = [None]
    dist.broadcast_object_list(got if rank != members[0] else [("from", rank)], group=cur, group_src=0)
    assert rank == members[0] or got == [("from", members[0])], got
    if len(members) > 1:
        me = members.index(rank)
        if me < 2:
            other = 1 - me
            out = np.zeros(3, np.int64)
            if me == 0:
                dist.send(np.full(3, rank, np.int64), group=cur, group_dst=other)
                assert dist.recv(out, group=cur, group_src=other) == members[other]
            else:
                assert dist.recv(out, group=cur, group_src=other) == members[other]
                dist.send(np.full(3, rank, np.int64), group=cur, group_dst=other)
            check(out, np.full(3, members[other]), "send/recv with group_dst/group_src")
            box = np.zeros(1, np.int64)
            works = dist.batch_isend_irecv([dist.P2POp(dist.isend, np.full(1, rank, np.int64), group=cur,
                                                       group_peer=other),
                                            dist.P2POp(dist.irecv, box, group=cur, group_peer=other)])
            for w in works:
                w.wait()
            check(box, np.full(1, members[other]), "P2POp with group_peer")
    try:
        dist.broadcast(first, src=0, group_src=0)
        raise AssertionError("src and group_src together must be refused")
    except ValueError as e:
        assert "not both" in str(e), e
    try:
        dist.broadcast(first)
        raise AssertionError("a broadcast without src must be refused")
    except ValueError as e:
        assert "group_src" in str(e), e
    alone, _ = dist.new_subgroups_by_enumeration([[0]])
    assert (alone is None) == (rank != 0)
    try:
        dist.new_subgroups_by_enumeration([[0], [0, 1]])
        raise AssertionError("a rank in two subgroups must be refused")
    except ValueError as e:
        assert "more than one subgroup" in str(e), e
    dist.barrier()


# The owners of the Traced objects unpickled in this process, in order.
UNPICKLED = []
# Payloads of very different sizes: none, 1 MiB, 1000 bytes.
PAYLOADS = [b"", bytes(range(256)) * 4096, b"y" * 1000]


def unpickle_traced(owner, payload):
    UNPICKLED.append(owner)
    return Traced(owner, payload)


class Traced:
    """An object that notes in UNPICKLED, in the process unpickling it, whose it is."""

    def __init__(self, owner, payload):
        self.owner, self.payload = owner, payload

    def __reduce__(self):
        return unpickle_traced, (self.owner, self.payload)


def traced(owner):
    return Traced(owner, PAYLOADS[owner % len(PAYLOADS)])


def pickled_size(obj):
    import pickle

    return len(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))


def traffic(call):
    """The collectives and messages of this rank that ``call()`` makes, as
    (name, bytes of its buffer) in order; UNPICKLED holds what it unpickled."""
    from ddpc.profiler import profile

    UNPICKLED.clear()
    with profile() as prof:
        call()
    return [(e.name, e.metadata["bytes"]) for e in prof.events() if e.name.startswith("c10d::")]


def check_gather_object_traffic(group, members, root, **root_arg):
    """gather_object to ``root`` among ``members``: every rank all_gathers the
    sizes, the others send their pickle to the root alone, which receives and
    unpickles each."""
    rank = dist.get_rank()
    got = [None] * len(members) if rank == root else None
    moved = traffic(lambda: dist.gather_object(traced(rank), got, group=group, **root_arg))
    sizes = ("c10d::_allgather_base_", 8 * len(members))
    if rank != root:
        assert moved == [sizes, ("c10d::send", pickled_size(traced(rank)))], (root, moved)
        assert UNPICKLED == [] and got is None, (root, UNPICKLED)
        return
    assert moved == [sizes] + [("c10d::recv_", pickled_size(traced(r))) for r in members if r != root], (root, moved)
    assert UNPICKLED == members, (root, UNPICKLED)
    assert [(o.owner, o.payload) for o in got] == [(r, traced(r).payload) for r in members], root


def check_scatter_object_list_traffic(group, members, root, **root_arg):
    """scatter_object_list from ``root`` among ``members``: the root broadcasts
    the sizes and sends each rank its own pickle alone, which that rank
    unpickles; the root unpickles its own (a copy, as PyTorch's root gets)."""
    rank = dist.get_rank()
    objects = [traced(r) for r in members]
    mine = [None]
    moved = traffic(lambda: dist.scatter_object_list(mine, objects if rank == root else None, group=group,
                                                     **root_arg))
    sizes = ("c10d::broadcast_", 8 * len(members))
    if rank != root:
        assert moved == [sizes, ("c10d::recv_", pickled_size(traced(rank)))], (root, moved)
        assert UNPICKLED == [rank], (root, UNPICKLED)
    else:
        assert moved == [sizes] + [("c10d::send", pickled_size(o)) for o in objects if o.owner != root], (root, moved)
        assert UNPICKLED == [root], (root, UNPICKLED)
    assert (mine[0].owner, mine[0].payload) == (rank, traced(rank).payload), root


def scenario_object_traffic():
    """gather_object and scatter_object_list move what PyTorch's do: sizes to
    every rank, each pickle to its destination alone, which alone unpickles
    it. Objects of 0 bytes to 1 MiB of payload; every root of the default
    group, and the second member of a group of ranks 1 and 2 (rank 0 is
    not in it), named as dst/src and as group_dst/group_src."""
    rank, world = dist.get_rank(), dist.get_world_size()
    members = list(range(world))
    for root in members:
        check_gather_object_traffic(None, members, root, dst=root)
        check_scatter_object_list_traffic(None, members, root, src=root)
    pair = dist.new_group([1, 2])
    if rank in (1, 2):
        check_gather_object_traffic(pair, [1, 2], 2, dst=2)
        check_gather_object_traffic(pair, [1, 2], 2, group_dst=1)
        check_scatter_object_list_traffic(pair, [1, 2], 2, src=2)
        check_scatter_object_list_traffic(pair, [1, 2], 2, group_src=1)
    # A send_object_list message still waiting for its receive is not taken for a gathered pickle.
    if rank == 1:
        dist.send_object_list(["early"], 0)
    got = [None] * world if rank == 0 else None
    dist.gather_object(rank, got, dst=0)
    if rank == 0:
        early = [None]
        assert dist.recv_object_list(early, 1) == 1 and early == ["early"], early
        assert got == members, got
    dist.barrier()


def scenario_p2p_objects_mismatch():
    """Rank 0 sends 2 objects, rank 1 receives into a list of 3."""
    try:
        if dist.get_rank() == 0:
            dist.send_object_list([1, 2], 1)
        else:
            dist.recv_object_list([None] * 3, 0)
    except dist.DistError as e:
        say(f"RANK {dist.get_rank()} MISMATCH {e}")


def scenario_p2p_mismatch():
    """Rank 0 sends 10 floats, rank 1 receives 12: rank 1's error describes its own call as a recv."""
    try:
        if dist.get_rank() == 0:
            dist.send(np.ones(10, np.float32), 1)
        else:
            dist.recv(np.ones(12, np.float32), 0)
    except dist.DistError as e:
        say(f"RANK {dist.get_rank()} MISMATCH {e}")


def scenario_barrier_mismatch():
    """Rank 0 calls barrier, the others all_reduce one uint8 with MAX (which a
    barrier across hosts runs as): every rank gets DistError."""
    try:
        if dist.get_rank() == 0:
            dist.barrier()
        else:
            dist.all_reduce(np.zeros(1, np.uint8), op=ReduceOp.MAX)
    except dist.DistError as e:
        say(f"RANK {dist.get_rank()} MISMATCH {e}")
        return
    raise AssertionError("a barrier matched an all_reduce")


def scenario_subgroup_timeout():
    """In a group of global ranks [1, 2], rank 2 never joins rank 1's all_reduce:
    rank 1's timeout names both by their global ranks."""
    rank = dist.get_rank()
    g = dist.new_group([1, 2], timeout=2)
    if rank == 1:
        try:
            dist.all_reduce(np.ones(10, np.float32), group=g)
        except dist.DistTimeoutError as e:
            say(f"RANK 1 TIMEOUT {e}")
    elif rank == 2:
        time.sleep(3)
    dist.barrier()


def scenario_work_exception():
    """Work.exception(), is_success() and result(): rank 1 never joins rank 0's
    async all_reduce in a group with a 2 s timeout; then an async all_reduce
    and all_to_all of the whole world succeed."""
    rank, world = dist.get_rank(), dist.get_world_size()
    sub = dist.new_group([0, 1], timeout=2)
    if rank == 0:
        t = ddpc.ones(10)
        w = dist.all_reduce(t, group=sub, async_op=True)
        assert w.exception() is None and w.is_success(), "a collective still waiting for its peer has no error yet"
        try:
            w.result()
        except RuntimeError as e:
            assert "not completed" in str(e), e
        else:
            raise AssertionError("result() of a running collective returned")
        deadline = time.monotonic() + 60
        while not w.is_completed():
            assert time.monotonic() < deadline, "the all_reduce without its peer never ended"
            time.sleep(0.05)
        err = w.exception()
        assert isinstance(err, dist.DistTimeoutError) and not w.is_success(), repr(err)
        say(f"RANK 0 EXCEPTION {type(err).__name__}: {err}")
        for call in (w.result, w.wait):
            try:
                call()
            except dist.DistTimeoutError as e:
                assert str(e) == str(err), (str(e), str(err))
            else:
                raise AssertionError(f"{call.__name__}() of a failed collective returned")
        assert str(w.exception()) == str(err)  # still there after wait() raised it
    dist.barrier()
    t = ddpc.full((3,), rank + 1.0)
    w = dist.all_reduce(t, async_op=True)
    assert w.wait() and w.exception() is None and w.is_success()
    out = w.result()
    assert len(out) == 1 and out[0] is t
    check(t.numpy(), np.full(3, world * (world + 1) / 2), "async all_reduce result()")
    outs = [np.zeros(2, np.float32) for _ in range(world)]
    w = dist.all_to_all(outs, [np.full(2, 10 * rank + r, np.float32) for r in range(world)], async_op=True)
    assert w.wait() and w.exception() is None and w.is_success()
    check(np.concatenate(outs), np.repeat(10 * np.arange(world) + rank, 2), "async all_to_all")


def scenario_late():
    """Ranks 0 and 1 leave a broadcast from rank 0 before rank 3 has joined
    it, then disagree on the next collective: the failure they report must
    not cut the broadcast short on ranks 2 and 3, who fail at the next one."""
    rank = dist.get_rank()
    b = np.full(1000, rank, np.float32)
    if rank == 3:
        time.sleep(1.0)
    dist.broadcast(b, src=0)
    check(b, np.zeros(1000), "broadcast finished by ranks behind a failure")
    scenario_mismatch()


def scenario_pickle():
    import pickle

    for obj in (dist.GroupMember.WORLD, dist.all_reduce(np.ones(1), async_op=True)):
        try:
            pickle.dumps(obj)
        except TypeError:
            continue
        raise AssertionError(f"{type(obj).__name__} pickled")


def scenario_kill(victim, size_mb, marker=None):
    """`victim` SIGKILLs itself while all ranks are inside a large all_reduce loop."""
    rank = dist.get_rank()
    a = np.ones(int(size_mb) << 18, np.float32)
    dist.all_reduce(a)
    if rank == int(victim):
        threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    t0 = time.monotonic()
    try:
        while time.monotonic() - t0 < 60:
            dist.all_reduce(a)
    except dist.DistError as e:
        say(f"RANK {rank} CAUGHT {type(e).__name__} after {time.monotonic() - t0:.2f}s: {e}")
        sys.exit(3)


def scenario_leaver(leaver):
    """Rank `leaver` ends its script after a barrier (leaving the group at exit) while
    the others call one more all_reduce: they get DistError, not the timeout."""
    rank = dist.get_rank()
    dist.barrier()
    if rank == int(leaver):
        return
    t0 = time.monotonic()
    try:
        dist.all_reduce(np.ones(1000, np.float32))
    except dist.DistError as e:
        say(f"RANK {rank} CAUGHT {type(e).__name__} after {time.monotonic() - t0:.2f}s: {e}")
        sys.exit(3)


def scenario_ddp_victim(victim, how):
    """DDP training whose 64 x 64 weight is exchanged through shared memory
    (nn/_grad_exchange.py): `victim` SIGKILLs itself (how="kill") or ends its
    script (how="leave") mid-training; the others, waiting for its rows or
    its copy, get DistError, not the timeout."""
    from ddpc import nn
    rank = dist.get_rank()
    ddpc.manual_seed(0)
    ddp = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 64)))
    assert ddp._exchange is not None, "the 64 x 64 weight is exchanged"
    opt = ddpc.optim.SGD(ddp.parameters(), lr=0.01)
    x = ddpc.randn(4, 8)
    if rank == int(victim) and how == "kill":
        threading.Timer(0.5, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    t0 = time.monotonic()
    try:
        for step in range(1_000_000):
            if rank == int(victim) and how == "leave" and time.monotonic() - t0 > 0.5:
                return
            opt.zero_grad()
            ddp(x).square().mean().backward()
            opt.step()
            if time.monotonic() - t0 > 60:
                break
    except dist.DistError as e:
        say(f"RANK {rank} CAUGHT {type(e).__name__} after {time.monotonic() - t0:.2f}s: {e}")
        sys.exit(3)


def scenario_new_group_with_the_dead(victim, when):
    """`victim` SIGKILLs itself before (when="before") or while (when="during") the
    others make a group that includes it: they get DistError, not the timeout."""
    rank = dist.get_rank()
    if rank == int(victim):
        time.sleep(0.0 if when == "before" else 1.0)
        os.kill(os.getpid(), signal.SIGKILL)
    if when == "before":
        time.sleep(1.0)  # the death has been reported by now
    t0 = time.monotonic()
    try:
        dist.new_group(list(range(dist.get_world_size())))
    except dist.DistError as e:
        say(f"RANK {rank} CAUGHT {type(e).__name__} after {time.monotonic() - t0:.2f}s: {e}")
        sys.exit(3)


def scenario_until_error(seconds=60):
    """All-reduces until the group fails (saying RUNNING once it has reduced
    for a second); reports the time since the last success."""
    rank = dist.get_rank()
    a = np.ones(1 << 16, np.float32)
    t0 = last = time.monotonic()
    first, said = None, False
    try:
        while time.monotonic() - t0 < float(seconds):
            dist.all_reduce(a)
            last = time.monotonic()
            first = first or last
            if not said and last - first >= 1.0:
                say(f"RANK {rank} RUNNING")
                said = True
            time.sleep(0.01)
    except dist.DistError as e:
        say(f"RANK {rank} CAUGHT {type(e).__name__} after {time.monotonic() - last:.2f}s: {e}")
        sys.exit(3)


def scenario_absent(absent, sleep_s):
    """Rank `absent` is alive but never joins the collective."""
    rank = dist.get_rank()
    if rank == int(absent):
        time.sleep(float(sleep_s))
        return
    try:
        dist.all_reduce(np.ones(100, np.float32))
    except dist.DistTimeoutError as e:
        say(f"RANK {rank} TIMEOUT {e}")
        return
    raise AssertionError("collective with a missing rank did not time out")


def scenario_loop(stop_file):
    """All-reduces (a job other tests disturb from outside) until `stop_file` exists on some rank."""
    rank, world = dist.get_rank(), dist.get_world_size()
    t0 = time.monotonic()
    stop = np.zeros(1, np.int64)
    while not stop[0] and time.monotonic() - t0 < 120:
        a = np.full(1000, rank, np.int64)
        dist.all_reduce(a)
        check(a, np.full(1000, world * (world - 1) // 2), "all_reduce while disturbed")
        stop[0] = os.path.exists(stop_file)
        dist.all_reduce(stop, op=ReduceOp.MAX)
        time.sleep(0.01)
    assert stop[0], "the test never asked the job to stop"


def scenario_topology():
    """The group found the hosts that TEST_EXPECT_HOSTS (or TEST_HOSTS) lists by rank."""
    hosts = os.environ.get("TEST_EXPECT_HOSTS", os.environ.get("TEST_HOSTS", "")).split(",")
    g = dist.GroupMember.WORLD._c
    want = (len(set(hosts)), hosts.count(hosts[dist.get_rank()]))
    assert (g.nnodes, g.local_size) == want, ((g.nnodes, g.local_size), want)


def main():
    scenario, args = sys.argv[1], sys.argv[2:]
    timeout = float(os.environ.get("TEST_DIST_TIMEOUT", "60"))
    # TEST_HOSTS="a,a,b,b" makes rank r believe it runs on host TEST_HOSTS[r].
    if os.environ.get("TEST_HOSTS"):
        os.environ["DDPC_HOST_ID"] = os.environ["TEST_HOSTS"].split(",")[int(os.environ["RANK"])]
    dist.init_process_group("cpu", timeout=timeout)  # host arrays: the cpu backend, also beside a GPU
    if scenario == "all":
        for name in ("matrix", "rooted", "async", "more", "groups", "p2p", "p2p_any", "pickle", "mismatch"):
            globals()["scenario_" + name]()
    elif "+" in scenario:
        for name in scenario.split("+"):
            globals()["scenario_" + name]()
    else:
        globals()["scenario_" + scenario](*args)
    say(f"RANK {dist.get_rank()} PASS")
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
