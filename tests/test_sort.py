"""The sort op and what is built on it (sort, argsort, msort, topk, unique, also along a dim),
the nonzero op (nonzero, argwhere, masked_select), nan_to_num, tril/triu and
logsumexp at the edges: against numpy references over every dtype, with ties,
NaN, infinities, signed zeros and empty dims; gradients against finite
differences; on a GPU (marked gpu) the CUDA results against the host's."""

import numpy as np
import pytest
from numeric import numeric_grad

import ddpc

RNG = np.random.default_rng(7)
DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8"]
SHAPES_DIMS = [((0,), 0), ((5, 0), 1), ((0, 3), 0), ((1,), 0), ((7,), 0), ((3, 5, 4), 0), ((3, 5, 4), 1),
               ((3, 5, 4), -1), ((2, 300), 1), ((300, 3), 0), ((8, 5000), 1), ((1, 40000), -1)]


def sample(shape, dtype):
    """A tensor of ``dtype`` with many ties (and, for floats, NaN, +-inf and -0),
    and its elements as numpy holds them (float32 for the 16-bit floats)."""
    x = RNG.integers(-3, 4, shape).astype(np.float64)
    if dtype == "uint8":
        x = x + 3
    if dtype.startswith(("float", "bfloat")) and x.size:
        flat = x.reshape(-1)
        picks = RNG.integers(0, flat.size, max(1, flat.size // 6))
        flat[picks] = RNG.choice([np.nan, np.inf, -np.inf, -0.0, 0.5], picks.size)
    a = ddpc.tensor(x, dtype=dtype)
    held = a.float().numpy() if dtype in ("float16", "bfloat16") else a.numpy()
    return a, held


def ref_order(x, dim, descending):
    """numpy's stable order along dim with NaN the largest value (last
    ascending, first descending), ties in index order: a lexsort per line."""
    moved = np.moveaxis(x, dim, -1)
    out = np.empty(moved.shape, dtype=np.int64)
    for line in np.ndindex(moved.shape[:-1]):
        v = moved[line]
        pos = np.arange(v.shape[0])
        if v.dtype.kind == "f":
            nan = np.isnan(v)
            val = np.where(nan, 0, v)
            keys = (pos, -val, ~nan) if descending else (pos, val, nan)
        else:
            v = v.astype(np.int64)
            keys = (pos, ~v if descending else v)
        out[line] = np.lexsort(keys)
    return np.moveaxis(out, -1, dim)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("descending", [False, True])
def test_sort_matches_a_stable_numpy_order(dtype, descending):
    for shape, dim in SHAPES_DIMS:
        a, x = sample(shape, dtype)
        v, i = ddpc.sort(a, dim, descending=descending)
        want = ref_order(x, dim, descending)
        assert i.dtype == ddpc.int64 and v.dtype == a.dtype and i.shape == a.shape
        np.testing.assert_array_equal(i.numpy(), want, err_msg=f"{shape} dim {dim}")
        got = v.float().numpy() if dtype in ("float16", "bfloat16") else v.numpy()
        np.testing.assert_array_equal(got, np.take_along_axis(x, want, dim))
        np.testing.assert_array_equal(a.argsort(dim, descending=descending).numpy(), want)


def test_sort_nan_and_signed_zero_order():
    a = ddpc.tensor([np.nan, 1.0, -np.inf, -0.0, np.inf, 0.0, -np.nan, 1.0])
    assert a.sort().indices.tolist() == [2, 3, 5, 1, 7, 4, 0, 6]
    assert a.sort(descending=True).indices.tolist() == [0, 6, 4, 1, 7, 3, 5, 2]
    assert ddpc.tensor(3.0).sort().values.item() == 3.0 and ddpc.tensor(3.0).argsort().item() == 0


def test_msort_sorts_the_first_dim():
    a, x = sample((6, 4), "float64")
    np.testing.assert_array_equal(ddpc.msort(a).numpy(), np.take_along_axis(x, ref_order(x, 0, False), 0))
    np.testing.assert_array_equal(a.msort().numpy(), ddpc.msort(a).numpy())


@pytest.mark.parametrize("dtype", DTYPES)
def test_topk_takes_the_first_k_of_the_stable_order(dtype):
    for shape, dim in [((7,), 0), ((3, 5, 4), 1), ((2, 300), -1), ((5, 0), 0)]:
        a, x = sample(shape, dtype)
        n = shape[dim]
        for k in sorted({0, 1, n // 2, n}):
            if k > n:
                continue
            for largest in (True, False):
                v, i = a.topk(k, dim, largest=largest)
                want = np.take(ref_order(x, dim, largest), np.arange(k), axis=dim)
                np.testing.assert_array_equal(i.numpy(), want, err_msg=f"{shape} {dim} k={k} {largest}")
                got = v.float().numpy() if dtype in ("float16", "bfloat16") else v.numpy()
                np.testing.assert_array_equal(got, np.take_along_axis(x, want, dim))
    with pytest.raises(ValueError):
        ddpc.topk(ddpc.ones(3), 4)
    with pytest.raises(ValueError):
        ddpc.topk(ddpc.ones(3), -1)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape", [(0,), (1,), (4, 6), (2, 3, 50)])
def test_unique_values_inverse_and_counts(dtype, shape):
    a, x = sample(shape, dtype)
    u, inv, cnt = ddpc.unique(a, return_inverse=True, return_counts=True)
    ru, rinv, rcnt = np.unique(x, return_inverse=True, return_counts=True, equal_nan=False)
    nan = np.flatnonzero(np.isnan(x.ravel())) if x.dtype.kind == "f" else []
    rinv = rinv.reshape(-1)
    rinv[nan] = np.arange(len(nan)) + ru.size - len(nan)  # each NaN its own value, in index order (PyTorch's)
    got = u.float().numpy() if dtype in ("float16", "bfloat16") else u.numpy()
    np.testing.assert_array_equal(got, ru)
    assert u.dtype == a.dtype and inv.dtype == ddpc.int64 and cnt.dtype == ddpc.int64
    np.testing.assert_array_equal(inv.numpy(), rinv.reshape(shape))
    np.testing.assert_array_equal(cnt.numpy(), rcnt)
    np.testing.assert_array_equal(a.unique().float().numpy(), ru)
    _, c = ddpc.unique(a, return_counts=True)
    np.testing.assert_array_equal(c.numpy(), rcnt)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("shape,dim", [((6, 3), 0), ((6, 3), 1), ((5, 4, 3), 1), ((5, 4, 3), -1), ((7,), 0),
                                       ((300, 7), 0), ((0, 3), 0), ((1, 2), 0)])
def test_unique_along_a_dim_matches_numpy(dtype, shape, dim):
    x = RNG.integers(0, 2, shape).astype(np.float64)
    if dtype == "uint8":
        x = x * 3
    a = ddpc.tensor(x, dtype=dtype)
    ru, rinv, rcnt = np.unique(x, axis=dim, return_inverse=True, return_counts=True)
    for sorted_ in (True, False):  # sorted either way, as PyTorch's
        u, inv, cnt = ddpc.unique(a, sorted=sorted_, return_inverse=True, return_counts=True, dim=dim)
        assert u.dtype == a.dtype and inv.dtype == ddpc.int64 and cnt.dtype == ddpc.int64
        np.testing.assert_array_equal(u.double().numpy(), ru)
        np.testing.assert_array_equal(inv.numpy(), rinv.reshape(-1))
        np.testing.assert_array_equal(cnt.numpy(), rcnt)
    np.testing.assert_array_equal(a.unique(dim=dim).double().numpy(), ru)


def test_unique_along_a_dim_edges():
    # A slice holding NaN equals no other; -0 equals 0.
    x = ddpc.tensor([[1.0, np.nan], [1.0, np.nan], [-0.0, 2.0], [0.0, 2.0]])
    u, inv, cnt = ddpc.unique(x, dim=0, return_inverse=True, return_counts=True)
    np.testing.assert_array_equal(u.numpy(), [[0.0, 2.0], [1.0, np.nan], [1.0, np.nan]])
    assert inv.tolist() == [1, 2, 0, 0] and cnt.tolist() == [2, 1, 1]
    # Long slices go through several rounds of pairing their columns' ranks.
    rows = RNG.integers(0, 2, (50, 37)).astype(np.float32)
    rows[25:] = rows[:25]
    np.testing.assert_array_equal(ddpc.unique(ddpc.tensor(rows), dim=0).numpy(), np.unique(rows, axis=0))
    with pytest.raises(RuntimeError, match="0 sized dimensions"):
        ddpc.unique(ddpc.zeros(3, 0), dim=0)
    with pytest.raises(IndexError):
        ddpc.unique(ddpc.zeros(3, 2), dim=2)


@pytest.mark.parametrize("shape", [(), (0,), (5,), (3, 4), (2, 3, 4), (4, 0, 2)])
def test_nonzero_argwhere_and_masked_select(shape):
    x = RNG.integers(0, 3, shape).astype(np.float64) * (RNG.random(shape) < 0.5)
    if x.size:
        x.reshape(-1)[0] = np.nan  # NaN is non-zero
    a = ddpc.tensor(x)
    want = np.argwhere(x)
    nz = ddpc.nonzero(a)
    assert nz.dtype == ddpc.int64 and nz.shape == want.shape
    np.testing.assert_array_equal(nz.numpy(), want)
    np.testing.assert_array_equal(ddpc.argwhere(a).numpy(), want)
    for got, ref in zip(a.nonzero(as_tuple=True), np.nonzero(x) if x.ndim else (np.flatnonzero(x),)):
        np.testing.assert_array_equal(got.numpy(), ref)
    vals = ddpc.tensor(RNG.standard_normal(shape))
    mask = ddpc.tensor(x != 0)
    np.testing.assert_array_equal(vals.masked_select(mask).numpy(), vals.numpy()[x != 0])


def test_masked_select_broadcasts_and_takes_the_gradient():
    x = RNG.standard_normal((3, 4))
    cols = np.array([True, False, False, True])
    np.testing.assert_array_equal(ddpc.masked_select(ddpc.tensor(x), ddpc.tensor(cols)).numpy(), x[:, cols].ravel())
    row = RNG.standard_normal(4)
    mask = RNG.random((3, 4)) < 0.5
    np.testing.assert_array_equal(ddpc.tensor(row).masked_select(ddpc.tensor(mask)).numpy(),
                                  np.broadcast_to(row, (3, 4))[mask])
    assert ddpc.masked_select(ddpc.tensor(x), ddpc.zeros(3, 4, dtype=ddpc.bool)).shape == (0,)
    check_grad(lambda v: v.masked_select(ddpc.tensor(mask)) * 2, x)


def _count_nonzero_op(mask):
    count = ddpc.empty((), dtype=ddpc.int64, device=mask.device)
    ddpc._C.count_nonzero(count._buf, mask._buf)
    return int(count.item())


def test_nonzero_op_refuses_a_wrong_count():
    mask = ddpc.tensor([0, 1, 1], dtype=ddpc.uint8)
    with pytest.raises(ValueError, match="non-zero"):
        ddpc._C.nonzero(ddpc.empty(3, dtype=ddpc.int64)._buf, mask._buf)


def test_count_nonzero_op_counts_any_non_zero_byte():
    assert _count_nonzero_op(ddpc.tensor([0, 1, 2, 255, 0], dtype=ddpc.uint8)) == 3
    assert _count_nonzero_op(ddpc.empty(0, dtype=ddpc.uint8)) == 0
    with pytest.raises(TypeError, match="uint8"):
        _count_nonzero_op(ddpc.tensor([1, 2]))


@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_nan_to_num_every_float_dtype(dtype):
    x = np.array([np.nan, np.inf, -np.inf, 1.5, -0.0, -np.nan, 2.0])
    a = ddpc.tensor(x, dtype=dtype)
    big = float(np.finfo(np.float32).max) if dtype == "float32" else {
        "float64": np.finfo(np.float64).max, "float16": 65504.0, "bfloat16": 3.3895313892515355e38}[dtype]
    got = ddpc.nan_to_num(a)
    assert got.dtype == a.dtype
    np.testing.assert_array_equal(got.double().numpy(), [0, big, -big, 1.5, 0, 0, 2])
    np.testing.assert_array_equal(a.nan_to_num(1.0, 2.0, -3.0).double().numpy(), [1, 2, -3, 1.5, 0, 1, 2])
    assert ddpc.nan_to_num(ddpc.tensor([3, 4])).tolist() == [3, 4]


def test_nan_to_num_gradient_passes_where_finite():
    a = ddpc.tensor([np.nan, 1.0, np.inf, -2.0, -np.inf], requires_grad=True)
    (ddpc.nan_to_num(a) * ddpc.tensor([1.0, 2, 3, 4, 5])).sum().backward()
    assert a.grad.tolist() == [0, 2, 0, 4, 0]


@pytest.mark.parametrize("diagonal", [-1, 0, 2])
def test_tril_triu_zero_the_rest_even_inf_and_nan(diagonal):
    x = np.full((2, 3, 4), np.inf)
    x[0, 1, 2] = x[1, 0, 3] = np.nan
    a = ddpc.tensor(x)
    np.testing.assert_array_equal(a.tril(diagonal).numpy(), np.tril(x, diagonal))  # numpy's tril selects too
    lower, upper = np.tril(np.ones((3, 4)), diagonal), np.triu(np.ones((3, 4)), diagonal)
    np.testing.assert_array_equal(ddpc.tril(a, diagonal).numpy(), np.where(lower == 1, x, 0))
    np.testing.assert_array_equal(ddpc.triu(a, diagonal).numpy(), np.where(upper == 1, x, 0))
    g = ddpc.tensor(x, requires_grad=True)
    ddpc.tril(g, diagonal).sum().backward()
    np.testing.assert_array_equal(g.grad.numpy(), np.broadcast_to(lower, x.shape))
    m = ddpc.tensor(np.arange(12).reshape(3, 4), dtype=ddpc.uint8)
    np.testing.assert_array_equal(m.triu(diagonal).numpy(), np.triu(np.arange(12).reshape(3, 4), diagonal))


def test_logsumexp_shift_on_the_device_at_the_edges():
    x = np.array([[1.0, np.inf, 0.0], [-np.inf, -np.inf, -np.inf], [np.nan, 1.0, 2.0], [1000.0, 1000.0, -5.0]])
    got = ddpc.logsumexp(ddpc.tensor(x), 1).numpy()
    np.testing.assert_allclose(got, [np.inf, -np.inf, np.nan, 1000.0 + np.log(2.0 + np.exp(-1005.0))])
    h = ddpc.logsumexp(ddpc.tensor(x[3:], dtype=ddpc.float16), 1)
    assert h.dtype == ddpc.float16 and abs(float(h) - 1000.69) < 1


# ---- gradients ---------------------------------------------------------------------------------

def check_grad(fn, x, tol=1e-5):
    a = ddpc.tensor(x, requires_grad=True)
    fn(a).sum().backward()
    want = numeric_grad(lambda v: float(fn(ddpc.tensor(v)).sum()), x)
    np.testing.assert_allclose(a.grad.numpy(), want, rtol=tol, atol=tol)


def test_gradients_flow_through_the_sorted_values():
    x = RNG.standard_normal((3, 5, 4))
    w = ddpc.tensor(np.arange(60.0).reshape(3, 5, 4))
    check_grad(lambda v: v.sort(1, descending=True).values * w, x)
    check_grad(lambda v: v.topk(2, -1, largest=False).values * w[..., :2], x)
    check_grad(lambda v: ddpc.msort(v) * w, x)
    check_grad(lambda v: ddpc.nan_to_num(v) * w, x)
    check_grad(lambda v: v.triu(1) * w, x)
    check_grad(lambda v: ddpc.logsumexp(v * 3, (0, 2)), x)


# ---- on a GPU: the CUDA path against the host's -------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_sort_topk_unique_match_the_host(dtype):
    for shape, dim in SHAPES_DIMS + [((3, 70000), 1), ((200000,), 0)]:
        a, _ = sample(shape, dtype)
        c = a.cuda()
        for descending in (False, True):
            hv, hi = ddpc.sort(a, dim, descending=descending)
            dv, di = ddpc.sort(c, dim, descending=descending)
            np.testing.assert_array_equal(di.cpu().numpy(), hi.numpy(), err_msg=f"{shape} {dim} {descending}")
            np.testing.assert_array_equal(dv.cpu().float().numpy(), hv.float().numpy())
        k = shape[dim] // 3
        np.testing.assert_array_equal(c.topk(k, dim).indices.cpu().numpy(), a.topk(k, dim).indices.numpy())
    a, _ = sample((5, 40), dtype)
    for h, d in zip(ddpc.unique(a, return_inverse=True, return_counts=True),
                    ddpc.unique(a.cuda(), return_inverse=True, return_counts=True)):
        assert d.is_cuda
        np.testing.assert_array_equal(d.cpu().float().numpy(), h.float().numpy())
    rows = ddpc.tensor(RNG.integers(0, 2, (300, 9)), dtype=dtype)
    for dim in (0, 1):
        for h, d in zip(ddpc.unique(rows, dim=dim, return_inverse=True, return_counts=True),
                        ddpc.unique(rows.cuda(), dim=dim, return_inverse=True, return_counts=True)):
            assert d.is_cuda
            np.testing.assert_array_equal(d.cpu().float().numpy(), h.float().numpy())


@pytest.mark.gpu
def test_gpu_nonzero_masked_select_nan_to_num_tril_match_the_host():
    for shape in [(), (0,), (7,), (3, 4, 5), (300, 1000)]:
        x = (RNG.random(shape) < 0.3) * RNG.standard_normal(shape)
        a = ddpc.tensor(x)
        np.testing.assert_array_equal(ddpc.nonzero(a.cuda()).cpu().numpy(), ddpc.nonzero(a).numpy())
        np.testing.assert_array_equal(a.cuda().masked_select(a.cuda() > 0).cpu().numpy(),
                                      a.masked_select(a > 0).numpy())
    big = ddpc.tensor(RNG.integers(0, 4, 3 * 2 ** 21 + 5).astype(np.uint8))  # a count over many blocks
    np.testing.assert_array_equal(ddpc.nonzero(big.cuda()).cpu().numpy(), ddpc.nonzero(big).numpy())
    for mask in (big, big[:0], big[:1000]):
        assert _count_nonzero_op(mask.cuda()) == _count_nonzero_op(mask) == np.count_nonzero(mask.numpy())
    for dtype in ["float32", "float64", "float16", "bfloat16"]:
        a = ddpc.tensor([np.nan, np.inf, -np.inf, 1.5, -0.0], dtype=dtype)
        np.testing.assert_array_equal(ddpc.nan_to_num(a.cuda(), 1.0).cpu().double().numpy(),
                                      ddpc.nan_to_num(a, 1.0).double().numpy())
    x = np.full((3, 4), np.inf)
    np.testing.assert_array_equal(ddpc.tensor(x).cuda().tril().cpu().numpy(), ddpc.tensor(x).tril().numpy())
    y = np.array([[1.0, np.inf], [-np.inf, -np.inf]])
    np.testing.assert_array_equal(ddpc.tensor(y).cuda().logsumexp(1).cpu().numpy(), [np.inf, -np.inf])
