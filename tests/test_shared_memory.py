"""Tensors in shared memory (Tensor.share_memory_, Module.share_memory): the
move in place, pickling by segment name for multiprocessing, children started
with spawn and fork writing into the parent's tensors, Hogwild training, and
the segments' lifetime in /dev/shm."""

import copy
import gc
import glob
import os
import pickle
import time
from multiprocessing.reduction import ForkingPickler

import numpy as np
import pytest

import ddpc
import ddpc.multiprocessing as mp
from ddpc import _C, nn

TIMEOUT = 120
START_METHODS = ["spawn", "fork"]


def segments(pids):
    return sorted(path for pid in pids for path in glob.glob(f"/dev/shm/ddpc_{pid}_*"))


def segments_left(pids, seconds=10):
    """The segments of these processes still in /dev/shm once a bounded wait is over."""
    deadline = time.monotonic() + seconds
    while segments(pids) and time.monotonic() < deadline:
        gc.collect()
        time.sleep(0.05)
    return segments(pids)


@pytest.fixture(autouse=True)
def started():
    """Pids of the children a test starts. Each test must leave no segment of
    this process or of its children behind; whatever one leaves is removed."""
    pids = []
    yield pids
    gc.collect()
    left = segments_left([os.getpid()] + pids)
    for path in left:
        try:
            os.unlink(path)
        except FileNotFoundError:
            pass
    assert not left, f"left in /dev/shm: {left}"


def start(ctx, started, target, *args):
    p = ctx.Process(target=target, args=args)
    p.start()
    started.append(p.pid)
    return p


def join(p):
    p.join(TIMEOUT)
    if p.is_alive():
        p.kill()
        p.join()
    assert p.exitcode == 0, f"child exited with {p.exitcode}"


def test_share_memory_moves_the_storage_in_place_and_its_views_follow():
    t = ddpc.arange(12, dtype=ddpc.float32).reshape(3, 4)
    row, whole = t[1], t.data
    assert not t.is_shared() and not row.is_shared()
    before = t.data_ptr()
    assert t.share_memory_() is t
    assert t.is_shared() and row.is_shared() and whole.is_shared()
    assert t.data_ptr() != before and row.data_ptr() == t.data_ptr() + 4 * 4 and whole.data_ptr() == t.data_ptr()
    assert t.tolist() == np.arange(12).reshape(3, 4).tolist()
    assert len(segments([os.getpid()])) == 1
    row.fill_(-1)
    assert t[1].tolist() == [-1] * 4
    t.share_memory_()  # already there: nothing moves
    assert row.data_ptr() == t.data_ptr() + 16
    del t, row, whole
    assert segments_left([os.getpid()]) == []


def test_sharing_a_view_shares_its_whole_storage():
    t = ddpc.zeros(6, dtype=ddpc.int64)
    tail = t[2:]
    tail.share_memory_()
    assert t.is_shared() and tail.storage_offset() == 2
    tail.fill_(3)
    assert t.tolist() == [0, 0, 3, 3, 3, 3]


def test_a_copy_where_pytorch_has_a_view_is_shared_on_its_own():
    x = ddpc.arange(6, dtype=ddpc.float32).reshape(2, 3)
    xt = x.t()  # a copy in ddpc (see Tensor)
    xt.share_memory_()
    assert xt.is_shared() and not x.is_shared()
    assert xt.tolist() == [[0, 3], [1, 4], [2, 5]]


def test_memory_viewed_by_address_is_not_moved_from_under_its_viewers():
    t = ddpc.arange(4, dtype=ddpc.float32)
    arr = t.numpy()
    with pytest.raises(BufferError, match="1 numpy array"):
        t.share_memory_()
    assert not t.is_shared() and arr.tolist() == [0, 1, 2, 3]
    del arr
    capsule = t.__dlpack__()
    with pytest.raises(BufferError, match="view this memory by address"):
        t[1:].share_memory_()
    del capsule
    t.share_memory_()
    assert t.is_shared() and t.tolist() == [0, 1, 2, 3]


def test_a_tensor_made_from_numpy_stops_sharing_the_array_as_in_pytorch():
    a = np.arange(4, dtype=np.float64)
    t = ddpc.from_numpy(a)
    t.share_memory_()
    t.fill_(7)
    assert t.is_shared() and a.tolist() == [0, 1, 2, 3] and t.tolist() == [7] * 4


@pytest.mark.parametrize("dtype", [ddpc.float32, ddpc.float64, ddpc.float16, ddpc.bfloat16, ddpc.int32, ddpc.int64,
                                   ddpc.uint8])
def test_multiprocessing_pickles_a_shared_tensor_by_name_for_every_dtype(dtype):
    t = (ddpc.arange(64 * 256) % 100).to(dtype).reshape(64, 256).share_memory_()
    payload = ForkingPickler.dumps(t[3:13])
    assert len(payload) < t[3:13].nbytes // 4  # the name, not the data
    u = pickle.loads(payload)
    assert u.is_shared() and u.dtype is dtype and u.shape == (10, 256) and u.storage_offset() == 3 * 256
    assert u.data_ptr() != t[3].data_ptr()  # a mapping of its own of the same memory
    u.fill_(5)
    assert t[3:13].to(ddpc.float64).tolist() == [[5.0] * 256] * 10
    assert t[2].to(ddpc.float64).tolist() == [float(v % 100) for v in range(512, 768)]


def test_parameters_keep_their_class_and_requires_grad():
    p = nn.Parameter(ddpc.ones(3))
    p.share_memory_()
    q = pickle.loads(ForkingPickler.dumps(p))
    assert type(q) is nn.Parameter and q.requires_grad and q.is_shared()
    q.data.mul_(2)
    assert p.tolist() == [2, 2, 2]


def test_multiprocessing_moves_a_tensor_into_shared_memory_in_place_and_plain_pickles_copy():
    t = ddpc.arange(3, dtype=ddpc.float32)
    head = t[:2]
    before = t.data_ptr()
    u = pickle.loads(ForkingPickler.dumps(t))  # as PyTorch's reduction: t moves, its views follow
    assert t.is_shared() and head.is_shared() and u.is_shared() and t.data_ptr() != before
    u.fill_(9)
    assert t.tolist() == [9, 9, 9] and head.tolist() == [9, 9]
    for v in (pickle.loads(pickle.dumps(t)), copy.deepcopy(t)):  # as PyTorch's: by value
        assert not v.is_shared()
        v.fill_(1)
        assert t.tolist() == [9, 9, 9]


def test_a_non_leaf_tensor_that_requires_grad_is_refused_as_in_pytorch():
    x = ddpc.ones(2, requires_grad=True) * 2
    with pytest.raises(RuntimeError, match="Cowardly refusing to serialize non-leaf tensor which requires_grad"):
        ForkingPickler.dumps(x)
    assert not x.is_shared()
    u = pickle.loads(ForkingPickler.dumps(x.detach()))
    assert u.tolist() == [2, 2] and not u.requires_grad


def test_module_share_memory_shares_parameters_buffers_and_the_grads_there_are():
    m = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    m[0].weight.grad = ddpc.ones(2, 3)
    weight = m[0].weight
    assert m.share_memory() is m
    assert m[0].weight is weight and weight.is_shared() and weight.grad.is_shared()
    assert m[0].bias.grad is None
    assert all(b.is_shared() for b in m.buffers())
    assert all(p.is_shared() for p in m.parameters())


def _write_in_child(t, row):
    row.copy_(t[0] * 2)
    t[2].fill_(t.sum().item())


@pytest.mark.parametrize("method", START_METHODS)
def test_a_child_writes_into_the_parents_tensor(method, started):
    t = ddpc.zeros(3, 3, dtype=ddpc.float64)
    t[0] = ddpc.tensor([1.0, 2.0, 3.0], dtype=ddpc.float64)
    t.share_memory_()
    join(start(mp.get_context(method), started, _write_in_child, t, t[1]))
    assert t.tolist() == [[1, 2, 3], [2, 4, 6], [18, 18, 18]]


def _write_rank(rank, t):
    t[rank] = rank + 1


def _train_three_steps(rank, model):
    optimizer = ddpc.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        model(ddpc.ones(1, 2)).sum().backward()
        optimizer.step()


@pytest.mark.parametrize("method", START_METHODS)
def test_spawn_args_are_the_parents_tensors_and_model(method):
    """As torch.multiprocessing.spawn: what the children write into a tensor or
    train in a model passed in ``args`` is the parent's, forked children's too."""
    t = ddpc.zeros(2)
    mp.start_processes(_write_rank, args=(t,), nprocs=2, start_method=method)
    assert t.tolist() == [1, 2]
    model = nn.Linear(2, 1)
    nn.init.zeros_(model.weight)
    nn.init.zeros_(model.bias)
    mp.start_processes(_train_three_steps, args=(model,), nprocs=1, start_method=method)
    # d(sum of outputs)/dW = [1, 1] and /db = 1 at every step: 3 steps of lr 0.1.
    assert np.allclose(model.weight.tolist(), [[-0.3, -0.3]]) and np.allclose(model.bias.tolist(), [-0.3])
    assert model.weight.is_shared() and model.weight.grad is None


def _write_rank_and_call(rank, t, f):
    t[rank] = f(rank)
    return f(rank)


def test_forked_children_take_args_that_cannot_be_pickled_as_copies():
    t = ddpc.zeros(2)
    assert ddpc.spawn(_write_rank_and_call, args=(t, lambda r: r + 5), nprocs=2, start_method="fork") == [5, 6]
    assert t.tolist() == [0, 0] and not t.is_shared()
    with pytest.raises(RuntimeError, match="Cowardly refusing"):
        ddpc.spawn(_write_rank, args=(ddpc.ones(2, requires_grad=True) * 2,), nprocs=1, start_method="fork")


def test_forked_children_inherit_args_without_tensors_unpickled(monkeypatch):
    # a large array passed to forked children is not copied into a pickle per child (they inherit it)
    from multiprocessing.reduction import ForkingPickler

    from ddpc.spawn import _fork_payloads

    dumped = []
    monkeypatch.setattr(ForkingPickler, "dumps", classmethod(lambda cls, obj, protocol=None: dumped.append(obj)))
    assert _fork_payloads((np.zeros(4), "name"), 2) is None
    assert dumped == []


def test_a_tensor_a_numpy_array_views_is_sent_as_a_copy_with_a_warning():
    t = ddpc.zeros(2)
    view = t.numpy()  # its memory can't move into shared memory while the array views it
    with pytest.warns(RuntimeWarning, match="sent to another process as a copy"):
        ddpc.spawn(_write_rank, args=(t,), nprocs=2, start_method="fork")
    assert t.tolist() == [0, 0] and not t.is_shared() and view.tolist() == [0, 0]  # the children wrote copies


def _send_and_exit(queue, keep):
    t = ddpc.arange(5, dtype=ddpc.int32).share_memory_()
    keep.append(t)  # alive until this process ends: released at its exit, not freed
    queue.put(t)


@pytest.mark.parametrize("method", START_METHODS)
def test_a_segment_outlives_its_maker_until_the_receiver_has_it(method, started):
    ctx = mp.get_context(method)
    queue = ctx.Queue()
    p = start(ctx, started, _send_and_exit, queue, [])
    join(p)  # the maker is gone before the parent opens what it sent
    t = queue.get(timeout=TIMEOUT)
    assert t.is_shared() and t.tolist() == [0, 1, 2, 3, 4]
    assert len(segments([p.pid])) == 1
    del t
    assert segments_left([p.pid]) == []


def _hogwild_train(model, X, y, seed):
    ddpc.manual_seed(seed)
    optimizer = ddpc.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(60):
        idx = ddpc.randint(0, X.shape[0], (16,))
        optimizer.zero_grad()
        nn.functional.mse_loss(model(X[idx]), y[idx]).backward()
        if not all(p.is_shared() and not p.grad.is_shared() for p in model.parameters()):
            raise SystemExit("the parameters must be shared and the grads each process's own")
        optimizer.step()


@pytest.mark.parametrize("method", START_METHODS)
def test_hogwild_training_in_two_processes_updates_the_parents_model(method, started):
    rng = np.random.default_rng(0)
    X = ddpc.from_numpy(rng.normal(size=(256, 4)).astype(np.float32))
    y = X @ ddpc.tensor([[1.0], [-2.0], [0.5], [3.0]]) + 0.25
    ddpc.manual_seed(0)
    model = nn.Linear(4, 1)
    model.share_memory()
    weight = model.weight.detach().clone()
    with ddpc.no_grad():
        loss_before = nn.functional.mse_loss(model(X), y).item()
    ctx = mp.get_context(method)
    workers = [start(ctx, started, _hogwild_train, model, X, y, seed) for seed in (1, 2)]
    for p in workers:
        join(p)
    with ddpc.no_grad():
        loss_after = nn.functional.mse_loss(model(X), y).item()
    assert not ddpc.equal(model.weight, weight)
    assert loss_after < loss_before / 10, (loss_before, loss_after)
    assert model.weight.grad is None  # the children's grads stayed theirs


def test_opening_a_segment_that_is_gone_says_which_and_why():
    with pytest.raises(OSError, match=r"shm_open\(/ddpc_0_0\) failed: No such file or directory"):
        _C.Buffer.from_shared("/ddpc_0_0", 0, (1,), "float32")
    with pytest.raises(ValueError, match="not the name of a ddpc shared-memory segment"):
        _C.Buffer.from_shared("/dev/shm/x", 0, (1,), "float32")
    t = ddpc.zeros(4).share_memory_()
    name, offset = t._buf.send_shared()
    with pytest.raises(ValueError, match="do not fit"):
        _C.Buffer.from_shared(name, offset + 4, (4,), "float32")  # takes over the reference sent, as a receiver


@pytest.mark.gpu
def test_cuda_tensors_are_not_shared_and_say_so():
    t = ddpc.ones(2, device="cuda")
    with pytest.raises(RuntimeError, match="does not share cuda:0 memory"):
        t.share_memory_()
    assert not t.is_shared()
