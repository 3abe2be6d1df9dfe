"""Indices out of range, on the host and on a GPU: every op that takes an index
tensor raises ddpc.IndexOutOfRangeError naming the op, the index and its bound.

On the host the op raises itself. On a GPU the kernel skips the index (it never
reads or writes out of bounds) and records it, and the host raises it where it
next waits for the device; the device stays usable, and the next in-range call
gives the host's result. Each family runs on both devices with the same
assertions (the cuda runs are marked `gpu`), so the host and the GPU are held
to the same messages.
"""

import re

import numpy as np
import pytest

import ddpc
import ddpc.nn.functional as F
from ddpc import _C

DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.gpu)]
SYNCED = "when the device was next synchronized"


def _raises(device, message, exc, at_once):
    """pytest.raises for `message`, which comes with where the host found it
    when a GPU kernel found it (unless the op checks its indices `at_once`)."""
    found = r" \(found on cuda:\d+ when .*; the op ran asynchronously\)" if device != "cpu" and not at_once else ""
    return pytest.raises(exc, match="^" + re.escape(message) + found + r"( \[\w+\.c:\d+\])?$")


def _sync(device):
    if device != "cpu":
        ddpc.cuda.synchronize()


def _check(device, bad, good, message, exc=ddpc.IndexOutOfRangeError, at_once=False):
    """bad() raises `message` by the next synchronisation, once; then good(device) gives good('cpu')'s values."""
    with _raises(device, message, exc, at_once) as info:
        bad()
        _sync(device)
    if exc is ddpc.ArgumentError:
        assert not isinstance(info.value, ddpc.IndexOutOfRangeError)
    _sync(device)  # the error was taken: nothing is left to raise
    np.testing.assert_allclose(good(device).cpu().numpy(), good("cpu").numpy(), rtol=1e-6, atol=1e-6)


def _grid(device, dtype=ddpc.float32):
    return ddpc.arange(12, dtype=dtype, device=device).reshape(3, 4)


def _index(values, device):
    return ddpc.tensor(np.array(values, dtype=np.int64), device=device)


@pytest.mark.parametrize("device", DEVICES)
def test_gather_take_and_their_kin(device):
    x, bad = _grid(device), _index([[0, 3, 1, 0]], device)
    good = lambda d: _grid(d).gather(0, _index([[0, 2, 1, 0]], d))  # noqa: E731
    _check(device, lambda: x.gather(0, bad), good, "gather: index 3 is out of range for dim 0 of size 3")
    _check(device, lambda: x.gather(1, _index([[0], [-1], [2]], device)), good,
           "gather: index -1 is out of range for dim 1 of size 4")
    _check(device, lambda: ddpc.take_along_dim(x, bad, 0), good, "gather: index 3 is out of range for dim 0 of size 3")
    # take wraps negative indices first, as PyTorch's: -13 of 12 is -1 after the wrap
    _check(device, lambda: x.take(_index([2, -13], device)), good, "gather: index -1 is out of range for dim 0 of size 12")
    _check(device, lambda: x.take(_index([12], device)), good, "gather: index 12 is out of range for dim 0 of size 12")


@pytest.mark.parametrize("device", DEVICES)
def test_scatter_family(device):
    x, bad, ones = _grid(device), _index([[0, 3, 1, 0]], device), ddpc.ones((1, 4), device=device)
    good = lambda d: _grid(d).scatter_add(0, _index([[2, 2, 1, 0]], d), ddpc.ones((1, 4), device=d))  # noqa: E731
    _check(device, lambda: x.scatter(0, bad, ones), good, "scatter: index 3 is out of range for dim 0 of size 3")
    _check(device, lambda: x.scatter(0, bad, value=2.0), good, "scatter: index 3 is out of range for dim 0 of size 3")
    _check(device, lambda: x.scatter_add(0, bad, ones), good, "scatter_add: index 3 is out of range for dim 0 of size 3")
    _check(device, lambda: x.scatter_reduce(0, bad, ones, "amax"), good,
           "scatter_reduce: index 3 is out of range for dim 0 of size 3")
    _check(device, lambda: x.index_add(0, _index([5], device), ones), good,
           "scatter_add: index 5 is out of range for dim 0 of size 3")
    _check(device, lambda: x.index_reduce(0, _index([-1], device), ones, "prod"), good,
           "scatter_reduce: index -1 is out of range for dim 0 of size 3")
    # index_put with accumulate adds rows at the flat positions; put adds elements at them
    _check(device, lambda: x.index_put((_index([3], device),), ones.reshape(4), accumulate=True), good,
           "scatter_add: index 3 is out of range for dim 0 of size 3")
    # with several index tensors, an index past its own dim (not only past the flat rows) is refused
    _check(device, lambda: x.index_put((_index([0], device), _index([4], device)), ddpc.ones(1, device=device),
                                       accumulate=True), good,
           "scatter_add: index 12 is out of range for dim 0 of size 12")
    _check(device, lambda: x.put(_index([12], device), ddpc.ones(1, device=device), accumulate=True), good,
           "scatter_add: index 12 is out of range for dim 0 of size 12")
    y = ddpc.ones((1, 1, 2, 2), device=device)
    _check(device, lambda: F.max_unpool2d(y, _index([[[[0, 1], [2, 16]]]], device), 2), good,
           "scatter: index 16 is out of range for dim 1 of size 16")


@pytest.mark.parametrize("device", DEVICES)
def test_selections_read_their_indices_on_the_host(device):
    """Advanced indexing and the ops built on it work out their positions on the
    host (one copy of the index, as a mask needs anyway), so they raise at once."""
    x, bad = _grid(device), _index([0, 3], device)
    good = lambda d: _grid(d).index_select(0, _index([2, 0], d))  # noqa: E731
    message, exc = "index 3 is out of bounds for dim 0 with size 3", ddpc.IndexOutOfRangeError
    _check(device, lambda: x.index_select(0, bad), good, message, exc, at_once=True)
    _check(device, lambda: x[bad], good, message, exc, at_once=True)
    _check(device, lambda: x.index_copy_(0, bad, ddpc.zeros((2, 4), device=device)), good, message, exc, at_once=True)
    _check(device, lambda: x.index_fill_(0, bad, 1.0), good, message, exc, at_once=True)
    _check(device, lambda: x.index_put_((bad,), ddpc.zeros(4, device=device)), good, message, exc, at_once=True)


@pytest.mark.parametrize("device", DEVICES)
def test_embedding_and_its_gradient(device):
    w = ddpc.tensor(np.arange(40, dtype=np.float32).reshape(10, 4), device=device)
    good = lambda d: F.embedding(_index([[9, 0], [3, 3]], d), w.to(device=d))  # noqa: E731
    _check(device, lambda: F.embedding(_index([[1, 10]], device), w), good,
           "index rows: index 10 is out of range for 10 rows")
    _check(device, lambda: F.embedding(_index([-1], device), w), good, "index rows: index -1 is out of range for 10 rows")
    gw, g = ddpc.zeros((10, 4), device=device), ddpc.ones((2, 4), device=device)
    _check(device, lambda: _C.index_add_rows(gw._buf, g._buf, _index([2, 10], device)._buf), good,
           "embedding gradient: index 10 is out of range for 10 rows")
    _check(device, lambda: _C.put_rows(gw._buf, g._buf, _index([11, 2], device)._buf), good,
           "put rows: index 11 is out of range for 10 rows")


@pytest.mark.parametrize("device", DEVICES)
def test_embedding_bags(device):
    w = ddpc.tensor(np.arange(40, dtype=np.float32).reshape(10, 4), device=device)
    good = lambda d: F.embedding_bag(_index([1, 2, 3], d), w.to(device=d), _index([0, 2], d), mode="sum")  # noqa: E731
    for mode in ("sum", "mean", "max"):
        _check(device, lambda: F.embedding_bag(_index([1, 12, 3], device), w, _index([0, 2], device), mode=mode), good,
               "embedding_bag: index 12 is out of range for 10 rows")
    # malformed offsets are argument errors, as on the host
    _check(device, lambda: F.embedding_bag(_index([1, 2, 3], device), w, _index([0, 3, 2], device)), good,
           "embedding_bag: offsets must be non-decreasing, got offsets[2] = 2 after 3", ddpc.ArgumentError)
    _check(device, lambda: F.embedding_bag(_index([1, 2, 3], device), w, _index([1, 2], device)), good,
           "embedding_bag: offsets[0] has to be 0, i.e., the first sequence in the mini-batch has to start from "
           "position 0. However, got 1", ddpc.ArgumentError)
    out = ddpc.empty((1, 4), device=device)
    _check(device, lambda: _C.embedding_bag(out._buf, None, w._buf, _index([1, 2, 3], device)._buf,
                                            _index([0, 5], device)._buf, None, 0, -1), good,
           "embedding_bag: offsets[-1] can not be greater than input's length 3 but got offsets[-1] of 5",
           ddpc.ArgumentError)
    gw, g = ddpc.empty((10, 4), device=device), ddpc.ones((1, 4), device=device)
    _check(device, lambda: _C.embedding_bag_backward(gw._buf, g._buf, _index([[0, -1, 10, 2]], device)._buf,
                                                     _index([1, 2], device)._buf, _index([0, 2], device)._buf, None, 2,
                                                     -1), good,
           "embedding_bag backward: argmax 10 is out of range for 10 rows")
    gs = ddpc.empty(2, device=device)
    _check(device, lambda: _C.embedding_bag_weights_backward(gs._buf, g._buf, w._buf, _index([4, 10], device)._buf,
                                                             _index([0, 2], device)._buf, -1), good,
           "embedding_bag per-sample weights backward: index 10 is out of range for 10 rows")


@pytest.mark.parametrize("device", DEVICES)
def test_losses_refuse_targets_that_are_not_classes(device):
    logits = ddpc.tensor(np.linspace(-1, 1, 20, dtype=np.float32).reshape(4, 5), device=device)
    good = lambda d: F.cross_entropy(logits.to(device=d), _index([0, 4, -100, 2], d), reduction="none")  # noqa: E731
    for reduction in ("none", "mean", "sum"):
        _check(device, lambda: F.cross_entropy(logits, _index([0, 5, 1, 2], device), reduction=reduction).cpu(), good,
               "cross entropy: target 5 of row 1 is not a class in [0, 5)")
    _check(device, lambda: F.nll_loss(logits, _index([0, 1, -3, 2], device)).cpu(), good,
           "cross entropy: target -3 of row 2 is not a class in [0, 5)")
    glogits = ddpc.empty((4, 5), device=device)
    _check(device, lambda: _C.cross_entropy_backward(glogits._buf, ddpc.ones(4, device=device)._buf, logits._buf,
                                                     _index([7, 0, 1, 2], device)._buf, None, -100, 0.0, 0, False),
           good, "cross entropy: target 7 of row 0 is not a class in [0, 5)")


@pytest.mark.parametrize("device", DEVICES)
def test_ctc_labels(device):
    """The C op's own check of the labels (F.ctc_loss checks them before it is called)."""
    T, N, C = 4, 2, 3
    lp = F.log_softmax(ddpc.tensor(np.linspace(-1, 1, T * N * C).reshape(T, N, C)), 2).to(device=device)
    args = [_index(v, device)._buf for v in ([1, 2, 5, 1], [0, 2], [2, 2], [4, 4])]
    nll, alpha = ddpc.empty(N, dtype=ddpc.float64, device=device), ddpc.empty((N, T, 5), dtype=ddpc.float64,
                                                                              device=device)
    good = lambda d: F.ctc_loss(lp.to(device=d), _index([[1, 2], [2, 1]], d), [4, 4], [2, 2],  # noqa: E731
                                reduction="none")
    _check(device, lambda: _C.ctc_loss(nll._buf, alpha._buf, lp._buf, *args, 0), good,
           "ctc_loss: target label 5 of sample 1 is not a class in [0, 3) other than the blank 0")
    args[0] = _index([1, 0, 2, 1], device)._buf
    _check(device, lambda: _C.ctc_loss(nll._buf, alpha._buf, lp._buf, *args, 0), good,
           "ctc_loss: target label 0 of sample 0 is not a class in [0, 3) other than the blank 0")


@pytest.mark.parametrize("device", DEVICES)
def test_pooling_gradients_searchsorted_and_max_gradients(device):
    good = lambda d: ddpc.searchsorted(ddpc.tensor([4.0, 1.0, 3.0, 2.0], device=d), ddpc.tensor([2.5], device=d),  # noqa: E731
                                       sorter=_index([1, 3, 2, 0], d))
    gx, g = ddpc.empty((2, 4, 4), device=device), ddpc.ones((2, 2, 2), device=device)
    indices = _index([[[0, -1], [5, 15]], [[16, 1], [2, 3]]], device)  # -1: a window with no element
    _check(device, lambda: _C.max_pool_backward(gx._buf, g._buf, indices._buf), good,
           "max pool backward: index 16 is outside a plane of 16 elements")
    _check(device, lambda: ddpc.searchsorted(ddpc.tensor([1.0, 2.0, 3.0, 4.0], device=device),
                                             ddpc.tensor([2.5], device=device), sorter=_index([0, 1, 7, 3], device)),
           good, "searchsorted: sorter index 7 is out of range for lines of 4")
    out = ddpc.empty((3, 4), device=device)
    _check(device, lambda: _C.put_dim(out._buf, ddpc.ones(4, device=device)._buf, _index([0, 1, 3, 2], device)._buf, 0),
           good, "gradient of max/min along a dim: index 3 is out of range for a dim of 3")


# ---- on a GPU: where the error is found, and what the kernel leaves -------------------------------------------------

def _bad_gather():
    x = _grid("cuda")
    return x, x.gather(0, _index([[0, 3, 1, 0]], "cuda"))


def _keep_busy():
    """Queues milliseconds of work on the device, so that kernels queued next
    have not run yet when the host looks at the record at their launches."""
    a = ddpc.ones((4096, 4096), device="cuda")
    for _ in range(8):
        a = a @ a  # the values overflow; only the time counts


def _poll(event):
    while not event.query():
        pass


FOUND_BY = {
    "synchronize": (lambda y: ddpc.cuda.synchronize(), SYNCED),
    "item": (lambda y: y[0, 0].item(), "when a blocking copy next waited for the device"),
    "cpu": (lambda y: y.cpu(), "when a blocking copy next waited for the device"),
    "tolist": (lambda y: y.tolist(), "when a blocking copy next waited for the device"),
    "copy to the device": (lambda y: ddpc.ones(3).cuda(), "when a blocking copy next waited for the device"),
    "event": (lambda y: ddpc.cuda.current_stream().record_event().synchronize(), "when an event was next waited for"),
    "event query": (lambda y: _poll(ddpc.cuda.current_stream().record_event()), "when an event was next queried"),
    "stream": (lambda y: ddpc.cuda.current_stream().synchronize(), "when an event was next waited for"),
}


@pytest.mark.gpu
@pytest.mark.parametrize("how", sorted(FOUND_BY))
def test_gpu_error_is_raised_where_the_host_waits(how):
    wait, when = FOUND_BY[how]
    x, y = _bad_gather()
    with pytest.raises(ddpc.IndexOutOfRangeError, match=rf"\(found on cuda:\d+ {when}; the op ran asynchronously\)"):
        wait(y)
    ddpc.cuda.synchronize()  # raised once


@pytest.mark.gpu
def test_gpu_error_is_raised_at_a_later_launch_without_a_synchronisation():
    x, y = _bad_gather()
    with pytest.raises(ddpc.IndexOutOfRangeError, match=r"\(found on cuda:\d+ when a later op was launched;"):
        for _ in range(100_000):  # the record is read at each launch; the kernel is done long before the last
            x.add_(0.0)
    ddpc.cuda.synchronize()


@pytest.mark.gpu
def test_gpu_kernel_skips_only_the_bad_index_and_the_first_error_wins():
    x = _grid("cuda")
    first, second = _index([[0, 3, 1, 0]], "cuda"), _index([[2, 2, 9, 2]], "cuda")  # (their copies wait for the device)
    _keep_busy()
    y, z = x.gather(0, first), x.gather(0, second)  # two errors, queued one after the other behind the busy work
    with pytest.raises(ddpc.IndexOutOfRangeError, match="^gather: index 3 is out of range"):
        ddpc.cuda.synchronize()
    ddpc.cuda.synchronize()  # the second error was dropped, not kept for later
    # Nothing was read out of bounds, so the context works and the in-range elements are there.
    got = y.cpu().numpy()
    assert got[0, 0] == 0 and got[0, 2] == 6 and got[0, 3] == 3
    assert z.cpu().numpy()[0, [0, 1, 3]].tolist() == [8, 9, 11]
