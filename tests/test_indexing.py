"""Indexing (basic and advanced, reads and writes), layout ops (permute,
transpose, expand, repeat, squeeze...) and their gradients, against numpy's
results; copies that stand where PyTorch has a view write back."""

import math

import numpy as np
import pytest

import ddpc

X = np.arange(120, dtype=np.float32).reshape(4, 5, 6)

READS = [
    np.s_[1], np.s_[-1], np.s_[1:3], np.s_[:, 0], np.s_[::2], np.s_[::-1], np.s_[..., 1], np.s_[None, 1:, ::3],
    np.s_[1, :, 2:5:2], np.s_[3:0:-2, ..., 4], np.s_[[0, 2]], np.s_[:, [1, 3]], np.s_[[0, 1], [2, 3]],
    np.s_[[0, 1], :, [2, 3]], np.s_[X[:, 0, 0] > 30], np.s_[:, :, [5, 0]], np.s_[X[:, :, 0] > 40],
    np.s_[1:3, [0, -1]], np.s_[..., None], np.s_[[[0], [1]], [1, 2]], np.s_[:, 1:4, [0, 0, 2]], np.s_[()],
    np.s_[X > 100], np.s_[np.array([3, 1]), 2:4],
]


@pytest.mark.parametrize("index", READS, ids=[str(i) for i in range(len(READS))])
def test_reads_match_numpy(index):
    x = ddpc.tensor(X)
    got = x[_as_ddpc(index)]
    want = X[index]
    assert got.shape == want.shape and np.array_equal(got.numpy(), want)


def _as_ddpc(index):
    """The same index with its masks as ddpc uint8 tensors (what comparisons give)."""
    if not isinstance(index, tuple):
        return _as_ddpc((index,))[0]
    return tuple(ddpc.tensor(i.astype(np.uint8)) if isinstance(i, np.ndarray) and i.dtype == bool else i
                 for i in index)


def test_integer_index_with_ints_keeps_pytorchs_layout():
    x = ddpc.tensor(X)
    # an int indexes first (PyTorch's rule), so the index dims stay where they were
    assert x[0, :, [1, 2]].shape == (5, 2)
    assert np.array_equal(x[0, :, [1, 2]].numpy(), X[0][:, [1, 2]])
    assert np.array_equal(x[ddpc.tensor([2, 0])].numpy(), X[[2, 0]])
    assert x[ddpc.tensor(1)].shape == (5, 6)  # a 0-d tensor is an int


def test_bad_indices_are_clear_errors():
    x = ddpc.tensor(X)
    with pytest.raises(IndexError, match="out of range for dim 0 of size 4"):
        x[4]
    with pytest.raises(IndexError, match="index 6 is out of bounds for dim 2 with size 6"):
        x[:, :, [0, 6]]
    with pytest.raises(IndexError, match="too many indices"):
        x[0, 0, 0, 0]
    with pytest.raises(IndexError, match="single ellipsis"):
        x[..., 0, ...]
    with pytest.raises(IndexError, match="shape of the mask"):
        x[np.ones(3, dtype=bool)]
    with pytest.raises(IndexError, match="could not be broadcast"):
        x[[0, 1], [0, 1, 2]]
    with pytest.raises(IndexError, match="integer or mask"):
        x[ddpc.tensor([0.5])]


WRITES = [np.s_[1], np.s_[:, 0], np.s_[::2, 1:4], np.s_[..., ::-2], np.s_[[0, 3]], np.s_[:, [4, 0], 1],
          np.s_[X > 70], np.s_[1:3, [0, 2]]]


@pytest.mark.parametrize("index", WRITES, ids=[str(i) for i in range(len(WRITES))])
def test_writes_match_numpy(index):
    want = X.copy()
    x = ddpc.tensor(X)
    x[_as_ddpc(index)] = -1.0
    want[index] = -1.0
    assert np.array_equal(x.numpy(), want)
    part_shape = want[index].shape
    value = np.arange(part_shape[-1] if part_shape else 1, dtype=np.float32).reshape(part_shape[-1:])
    x[_as_ddpc(index)] = ddpc.tensor(value)  # broadcast along the leading dims
    want[index] = value
    assert np.array_equal(x.numpy(), want)


def test_write_of_an_overlapping_part_reads_before_it_writes():
    x = ddpc.arange(6)
    x[1:] = x[:-1]
    assert x.tolist() == [0, 0, 1, 2, 3, 4]
    y = ddpc.tensor(X)
    y[:, 1:] = y[:, :-1]
    want = X.copy()
    want[:, 1:] = X[:, :-1].copy()
    assert np.array_equal(y.numpy(), want)


def test_copies_standing_for_views_write_back():
    x = ddpc.zeros(3, 4)
    x[:, 0] += 1  # the augmented assignment
    col = x[:, 1]
    col.add_(2)
    x.t()[3].fill_(5)  # a row of the transpose is a column of x
    x[::2][:, 2].mul_(0)  # a copy of a copy, written back twice
    x.T[2] += 7
    x[:, 0].reshape(3, 1)[1:].sub_(1)  # a view of a copy goes on to the copy's source
    want = np.zeros((3, 4), np.float32)
    want[:, 0] += 1
    want[:, 1] += 2
    want[:, 3] = 5
    want[:, 2] += 7
    want[1:, 0] -= 1
    assert np.array_equal(x.numpy(), want)
    assert not col.is_contiguous() and col.contiguous().is_contiguous()
    own = col.contiguous()
    own.fill_(9)  # a tensor of its own: x keeps its values
    assert np.array_equal(x.numpy(), want)
    with pytest.raises(RuntimeError, match="can't be written back"):
        ddpc.zeros(3, 1).expand(3, 4).fill_(1)  # its elements repeat
    w = ddpc.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    with pytest.raises(RuntimeError, match="view of a leaf tensor that requires grad"):
        w.t().add_(1)
    with ddpc.no_grad():
        w.t()[0] += 10  # w's first column, outside the graph
    assert w.tolist() == [[11.0, 2.0], [13.0, 4.0]]


def test_collectives_write_through_copies_standing_for_views():
    import ddpc.distributed as dist

    x = ddpc.zeros(3, 4)
    column = x[:, 0]
    x.add_(1)  # after the copy was made: a collective reads x's current values
    arg = dist._Arg(column, type("G", (), {"backend": "cpu"})())
    assert np.asarray(arg.obj).tolist() == [1.0, 1.0, 1.0]
    np.asarray(arg.obj)[:] = 5.0  # what the collective writes
    arg.finish()  # ... goes back into x
    assert x[:, 0].tolist() == [5.0] * 3 and x[:, 1].tolist() == [1.0] * 3


LAYOUT = [
    ("permute", lambda t: t.permute(2, 0, 1), lambda a: a.transpose(2, 0, 1)),
    ("transpose", lambda t: t.transpose(0, 2), lambda a: a.swapaxes(0, 2)),
    ("T", lambda t: t.T, lambda a: a.T),
    ("mT", lambda t: t.mT, lambda a: a.swapaxes(-1, -2)),
    ("movedim", lambda t: t.movedim(0, -1), lambda a: np.moveaxis(a, 0, -1)),
    ("unsqueeze", lambda t: t.unsqueeze(-1), lambda a: a[..., None]),
    ("squeeze", lambda t: t[:, :1].squeeze(1), lambda a: a[:, 0]),
    ("expand", lambda t: t[:, :1].expand(-1, 3, -1), lambda a: np.broadcast_to(a[:, :1], (4, 3, 6))),
    ("expand_new", lambda t: t[0, 0].expand(2, 6), lambda a: np.broadcast_to(a[0, 0], (2, 6))),
    ("repeat", lambda t: t.repeat(2, 1, 1, 2), lambda a: np.tile(a, (2, 1, 1, 2))),
    ("narrow", lambda t: t.narrow(1, 1, 3), lambda a: a[:, 1:4]),
    ("select", lambda t: t.select(2, -1), lambda a: a[:, :, -1]),
    ("index_select", lambda t: t.index_select(1, ddpc.tensor([4, 0, 4])), lambda a: a[:, [4, 0, 4]]),
]


@pytest.mark.parametrize("name,op,ref", LAYOUT, ids=[c[0] for c in LAYOUT])
def test_layout_ops_and_their_gradients(name, op, ref):
    x = ddpc.tensor(X, requires_grad=True)
    out = op(x)
    want = ref(X)
    assert out.shape == want.shape and np.array_equal(out.numpy(), want)
    # d/dx sum(out * w) is w sent back along the same map: check it with numpy's
    # gradient of the same map, taken by running it on an array of element ids.
    w = np.random.default_rng(0).standard_normal(want.shape).astype(np.float32)
    (out * ddpc.tensor(w)).sum().backward()
    ids = ref(np.arange(X.size).reshape(X.shape))
    expected = np.zeros(X.size, np.float64)
    np.add.at(expected, ids.reshape(-1), w.reshape(-1))
    np.testing.assert_allclose(x.grad.numpy().reshape(-1), expected, rtol=1e-6, atol=1e-5)


@pytest.mark.parametrize("index", READS[:-1], ids=[str(i) for i in range(len(READS) - 1)])
def test_index_gradients(index):
    x = ddpc.tensor(X, requires_grad=True)
    out = x[_as_ddpc(index)]
    w = np.random.default_rng(1).standard_normal(out.shape).astype(np.float32)
    (out * ddpc.tensor(w)).sum().backward()
    ids = np.arange(X.size).reshape(X.shape)[index]
    expected = np.zeros(X.size, np.float64)
    np.add.at(expected, np.reshape(ids, -1), w.reshape(-1))
    np.testing.assert_allclose(x.grad.numpy().reshape(-1), expected, rtol=1e-6, atol=1e-5)


def test_assignment_in_the_graph():
    w = ddpc.tensor([1.0, 2.0, 3.0], requires_grad=True)
    h = ddpc.zeros(2, 3) * w  # a non-leaf in the graph
    h[:, 1] = w[0] * 10  # a broadcast value, through a strided part
    h[1, [0, 2]] = w[1:] * 3
    h.sum().backward()
    # h = [[0, 10 w0, 0], [3 w1, 10 w0, 3 w2]]
    assert h.tolist() == [[0.0, 10.0, 0.0], [6.0, 10.0, 9.0]]
    assert w.grad.tolist() == [20.0, 3.0, 3.0]


def test_transpose_and_t_keep_pytorchs_rules():
    x = ddpc.tensor(X)
    with pytest.raises(RuntimeError, match="<= 2 dims"):
        x.t()
    assert ddpc.arange(3).t().tolist() == [0, 1, 2]
    with pytest.raises(IndexError, match="out of range"):
        x.transpose(0, 3)
    with pytest.raises(ValueError, match="not an ordering"):
        x.permute(0, 0, 1)
    with pytest.raises(ValueError, match="can't be expanded"):
        x.expand(4, 5, 7)


@pytest.mark.parametrize("index", [(slice(None), slice(-1, 0)), (np.array([0, -1, 0]), slice(None)), (Ellipsis,)])
def test_writes_that_select_no_elements_are_no_ops(index):
    x = ddpc.zeros(1, 0)
    x[tuple(ddpc.tensor(i) if isinstance(i, np.ndarray) else i for i in index)] = 3
    assert x.shape == (1, 0)
    y = ddpc.zeros(2, 4)
    y[:, 2:2] = ddpc.ones(2, 0)
    y[ddpc.tensor([], dtype=ddpc.int64)] = 5
    assert y.tolist() == [[0.0] * 4] * 2


def test_gradients_of_writes_broadcast_into_empty_tensors():
    x = ddpc.zeros(4, 3, 0, requires_grad=True)
    v = ddpc.ones(3, 1, requires_grad=True)
    y = x * 1
    y[:, ...] = v
    y.sum().backward()
    assert x.grad.shape == (4, 3, 0) and v.grad.tolist() == [[0.0]] * 3


def test_index_put_accumulate_on_empty_rows():
    x = ddpc.zeros(1, 0)
    got = ddpc.index_put(x, (ddpc.tensor([0, 0]),), ddpc.ones(0), accumulate=True)
    assert got.shape == (1, 0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_row_index_gradients_in_16_bit(dtype):
    a = ddpc.tensor(np.arange(6.0).reshape(3, 2)).to(dtype).requires_grad_()
    a[ddpc.tensor([2, 0, 2])].sum().backward()
    assert a.grad.dtype is getattr(ddpc, dtype) and a.grad.float().tolist() == [[1, 1], [0, 0], [2, 2]]
    b = ddpc.tensor(np.arange(6.0).reshape(3, 2)).to(dtype).requires_grad_()
    (b.index_copy(0, ddpc.tensor([1]), ddpc.ones(1, 2).to(dtype)) * 2).sum().backward()
    assert b.grad.float().tolist() == [[2, 2], [0, 0], [2, 2]]


def test_a_bool_index_is_a_new_dim_not_an_integer():
    x = ddpc.tensor(np.arange(6.0).reshape(2, 3))
    assert x[True].shape == (1, 2, 3) and x[False].shape == (0, 2, 3)  # as numpy and PyTorch: not x[1], x[0]
    assert x[True, 1].tolist() == [[3.0, 4.0, 5.0]] and x[..., False].shape == (2, 3, 0)
    y = x.clone()
    y[False] = 7.0
    assert y.tolist() == x.tolist()
    y[True] = 7.0
    assert y.tolist() == [[7.0] * 3] * 2


@pytest.mark.parametrize("write", [
    lambda t, v: t.__setitem__(ddpc.tensor([True, False]), v),
    lambda t, v: t.__setitem__(0, v),
    lambda t, v: t.__setitem__(slice(None), v),
    lambda t, v: t.__setitem__([0], v),
    lambda t, v: t.fill_(v),
    lambda t, v: t.masked_fill_(ddpc.tensor([True, False]), v),
    lambda t, v: t.masked_fill(ddpc.tensor([True, False]), v),
    lambda t, v: t.index_fill_(0, ddpc.tensor([0]), v),
    lambda t, v: ddpc.full((2,), v, dtype=t.dtype),
], ids=["mask", "int", "slice", "list", "fill_", "masked_fill_", "masked_fill", "index_fill_", "full"])
def test_numbers_an_integer_dtype_cannot_hold_are_refused(write):
    # What PyTorch refuses: NaN, infinities, floats whose integer part the dtype
    # can't hold, and ints beyond it, where uint8 lets ints down to -255 wrap.
    refused = {"uint8": [256, -256, -1.5, -0.5, 256.0, math.nan, math.inf],
               "int32": [2 ** 31, -2 ** 31 - 1, 2.0 ** 31, -2.0 ** 31 - 1, math.nan, -math.inf],
               "int64": [2 ** 63, 1e30, math.nan, math.inf]}
    taken = {"uint8": [(-1, 255), (-255, 1), (255.5, 255), (1.5, 1), (True, 1)],
             "int32": [(-2 ** 31, -2 ** 31), (2147483647.5, 2 ** 31 - 1), (-1.5, -1)],
             "int64": [(-2 ** 63, -2 ** 63), (-1.5, -1)]}
    for name in refused:
        dt = getattr(ddpc, name)
        for v in refused[name]:
            with pytest.raises(OverflowError, match="without overflow"):
                write(ddpc.zeros(2, dtype=dt), v)
        for v, want in taken[name]:
            t = ddpc.zeros(2, dtype=dt)
            out = write(t, v)
            got = t if out is None or out is t else out
            assert got.tolist()[0] == want
