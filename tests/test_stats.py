"""Searching, counting and order statistics (searchsorted, bucketize, cummax,
cummin, median, nanmedian, quantile, nanquantile, kthvalue, mode, aminmax,
bincount, histc) against numpy references over dtypes, ties, NaN and empty
dims; gradients against finite differences; on a GPU (marked gpu) the CUDA
results of the search and running-extreme ops against the host's."""

import numpy as np
import pytest
from numeric import numeric_grad

import ddpc
from ddpc import _C

RNG = np.random.default_rng(11)
DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8"]


def sample(shape, dtype, nan=True):
    """A tensor with many ties (NaN and -0 among floats when ``nan``) and its values as float64."""
    x = RNG.integers(0 if dtype == "uint8" else -4, 5, shape).astype(np.float64)
    if dtype.startswith(("float", "bfloat")) and x.size and nan:
        flat = x.reshape(-1)
        picks = RNG.integers(0, flat.size, max(1, flat.size // 6))
        flat[picks] = RNG.choice([np.nan, -0.0, 0.5], picks.size)
    return ddpc.tensor(x, dtype=dtype), x


def values_of(t):
    return t.double().numpy() if t.dtype.is_floating_point else t.numpy()


def check_grad(f, x, rtol=1e-5, atol=1e-6):
    a = ddpc.tensor(x, dtype="float64", requires_grad=True)
    f(a).sum().backward()
    want = numeric_grad(lambda v: float(f(ddpc.tensor(v, dtype="float64")).sum().item()), x)
    np.testing.assert_allclose(a.grad.numpy(), want, rtol=rtol, atol=atol)


# ---- searchsorted and bucketize --------------------------------------------------------------

@pytest.mark.parametrize("dtype", DTYPES)
def test_searchsorted_matches_numpy_per_row(dtype):
    for shape in [(7,), (3, 9), (2, 3, 5), (4, 0)]:
        seq_np = np.sort(RNG.integers(0 if dtype == "uint8" else -5, 6, shape), axis=-1).astype(np.float64)
        seq = ddpc.tensor(seq_np, dtype=dtype)
        vals_np = RNG.integers(0 if dtype == "uint8" else -6, 7, shape[:-1] + (11,)).astype(np.float64)
        vals = ddpc.tensor(vals_np, dtype=dtype)
        for right in (False, True):
            got = ddpc.searchsorted(seq, vals, right=right)
            assert got.dtype is ddpc.int64 and got.shape == vals.shape
            lines = int(np.prod(shape[:-1]))
            rows_s, rows_v = seq_np.reshape(lines, shape[-1]), vals_np.reshape(lines, 11)
            want = np.stack([np.searchsorted(s, v, side="right" if right else "left") for s, v in zip(rows_s, rows_v)])
            np.testing.assert_array_equal(got.numpy().reshape(want.shape), want)
            assert ddpc.searchsorted(seq, vals, side="right" if right else "left").equal(got)


def test_searchsorted_shared_sequence_sorter_int32_and_scalars():
    unsorted = np.array([5.0, 1.0, 3.0, 3.0, -2.0])
    order = np.argsort(unsorted, kind="stable")
    vals = np.array([[0.0, 3.0], [6.0, -3.0]])
    seq = ddpc.tensor(unsorted)
    got = ddpc.searchsorted(seq, ddpc.tensor(vals), sorter=ddpc.tensor(order), out_int32=True)
    assert got.dtype is ddpc.int32
    np.testing.assert_array_equal(got.numpy(), np.searchsorted(unsorted, vals, sorter=order))
    sorted_seq = ddpc.tensor(np.sort(unsorted))
    assert ddpc.searchsorted(sorted_seq, 3.0).item() == 2 and ddpc.searchsorted(sorted_seq, 3.0, right=True).item() == 4
    assert ddpc.searchsorted(sorted_seq, 3.0).ndim == 0
    # int boundaries against float values: promoted, not truncated
    np.testing.assert_array_equal(ddpc.searchsorted(ddpc.tensor([1, 2, 3]), ddpc.tensor([1.5, 2.5])).numpy(), [1, 2])
    # A NaN value lands at the end either way.
    assert ddpc.searchsorted(ddpc.tensor([1.0, 2.0]), ddpc.tensor([np.nan])).item() == 2
    assert ddpc.searchsorted(sorted_seq, ddpc.tensor([4.0])).item() == 4


def test_searchsorted_errors():
    seq = ddpc.tensor([1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="opposites"):
        ddpc.searchsorted(seq, seq, side="left", right=True)
    with pytest.raises(ValueError, match="leading dims"):
        ddpc.searchsorted(ddpc.zeros(2, 3), ddpc.zeros(3, 3))
    with pytest.raises(ValueError, match="sorter"):
        ddpc.searchsorted(seq, seq, sorter=ddpc.tensor([0, 1]))
    with pytest.raises(ValueError, match="out of range"):
        ddpc.searchsorted(seq, seq, sorter=ddpc.tensor([0, 1, 3]))
    with pytest.raises(ValueError, match="1-d"):
        ddpc.bucketize(seq, ddpc.zeros(2, 2))


def test_bucketize_matches_numpy():
    bounds = np.array([-1.0, 0.0, 0.0, 2.5, 4.0])
    x = RNG.choice([-2.0, -1.0, 0.0, 1.0, 2.5, 3.0, 4.0, 9.0], (4, 6))
    for right in (False, True):
        got = ddpc.bucketize(ddpc.tensor(x), ddpc.tensor(bounds), right=right)
        np.testing.assert_array_equal(got.numpy(), np.searchsorted(bounds, x, side="right" if right else "left"))


# ---- cummax and cummin ---------------------------------------------------------------------

def ref_cum_extreme(x, dim, want_max):
    """PyTorch's rule along dim: a NaN always takes over, ties take the latest index."""
    moved = np.moveaxis(x, dim, -1)
    vals, idx = np.empty_like(moved), np.empty(moved.shape, np.int64)
    for line in np.ndindex(moved.shape[:-1] if moved.shape[-1] else (0,)):
        best, at = moved[line][0], 0
        for i, v in enumerate(moved[line]):
            if np.isnan(v) or (not np.isnan(best) and (v >= best if want_max else v <= best)):
                best, at = v, i
            vals[line + (i,)], idx[line + (i,)] = best, at
    return np.moveaxis(vals, -1, dim), np.moveaxis(idx, -1, dim)


@pytest.mark.parametrize("dtype", DTYPES)
def test_cummax_cummin_match_the_reference(dtype):
    for shape, dim in [((9,), 0), ((4, 7), 1), ((4, 7), 0), ((2, 3, 5), 1), ((3, 0), 1), ((0, 3), 0)]:
        a, _ = sample(shape, dtype)
        held = values_of(a)
        for fn, want_max in ((ddpc.cummax, True), (ddpc.cummin, False)):
            got = fn(a, dim)
            want_v, want_i = ref_cum_extreme(held, dim, want_max)
            assert got.values.dtype is a.dtype and got.indices.dtype is ddpc.int64
            np.testing.assert_array_equal(values_of(got.values), want_v)
            np.testing.assert_array_equal(got.indices.numpy(), want_i)
    a = ddpc.tensor(3.0)
    assert a.cummax(0).values.item() == 3.0 and a.cummin(0).indices.item() == 0


def test_cummax_gradient_goes_to_the_selected_elements():
    x = RNG.standard_normal((3, 6))
    check_grad(lambda t: ddpc.cummax(t, 1).values * ddpc.arange(6, dtype=ddpc.float64), x)
    check_grad(lambda t: ddpc.cummin(t, 0).values * 2, x)


# ---- order statistics ----------------------------------------------------------------------

def ref_sorted_pick(x, dim, pos_fn):
    """x's element at sorted position pos_fn(n, nan_count) along dim (NaN last, stable) and its index."""
    moved = np.moveaxis(x, dim, -1)
    # A stable order with NaN after every number: lexsort's last key is the primary one.
    order = np.lexsort((np.where(np.isnan(moved), 0, moved), np.isnan(moved)), axis=-1)
    pos = np.vectorize(lambda c: pos_fn(moved.shape[-1], int(c)))(np.isnan(moved).sum(-1))
    idx = np.take_along_axis(order, np.asarray(pos)[..., None], -1)[..., 0]
    return np.take_along_axis(moved, idx[..., None], -1)[..., 0], idx


@pytest.mark.parametrize("dtype", DTYPES)
def test_median_nanmedian_kthvalue_match_the_reference(dtype):
    # Lines longer than 32 go through the host's quickselect rather than its final insertion sort.
    for shape, dim in [((9,), 0), ((4, 6), 1), ((4, 6), 0), ((2, 3, 5), -1), ((3, 257), 1), ((300, 2), 0)]:
        a, _ = sample(shape, dtype)
        held = values_of(a)
        cases = [(ddpc.median, lambda n, c: n - c if c else (n - 1) // 2),
                 (ddpc.nanmedian, lambda n, c: max(n - c - 1, 0) // 2)]
        for fn, pos in cases:
            got = fn(a, dim)
            want_v, want_i = ref_sorted_pick(held, dim, pos)
            np.testing.assert_array_equal(values_of(got.values), want_v, err_msg=f"{fn.__name__} {shape}")
            np.testing.assert_array_equal(got.indices.numpy(), want_i, err_msg=f"{fn.__name__} {shape}")
            kept = fn(a, dim, keepdim=True)
            assert kept.values.shape == tuple(1 if d == dim % a.ndim else s for d, s in enumerate(shape))
        np.testing.assert_array_equal(values_of(ddpc.median(a)), ref_sorted_pick(
            held.reshape(-1), 0, cases[0][1])[0])
        for k in (1, shape[dim]):
            got = ddpc.kthvalue(a, k, dim)
            want_v, want_i = ref_sorted_pick(held, dim, lambda n, c, k=k: k - 1)
            np.testing.assert_array_equal(values_of(got.values), want_v)
            np.testing.assert_array_equal(got.indices.numpy(), want_i)


def test_median_edges_and_errors():
    assert np.isnan(ddpc.median(ddpc.zeros(0)).item())
    assert ddpc.median(ddpc.tensor(2.5)).item() == 2.5
    assert ddpc.nanmedian(ddpc.tensor([np.nan, np.nan])).item() != ddpc.nanmedian(ddpc.tensor([np.nan, np.nan])).item()
    with pytest.raises(IndexError):
        ddpc.median(ddpc.zeros(3, 0), 1)
    with pytest.raises(IndexError):
        ddpc.kthvalue(ddpc.zeros(3), 4)
    indices = ddpc.zeros(2, dtype=ddpc.int64)
    with pytest.raises(ValueError, match="outside lines of length 3"):
        _C.select_dim(indices._buf, ddpc.zeros(2, 3)._buf, 1, ddpc.tensor([0, 3])._buf)


@pytest.mark.parametrize("dtype", DTYPES)
def test_mode_is_the_smallest_most_frequent_value_at_its_last_index(dtype):
    for shape, dim in [((9,), 0), ((5, 8), 1), ((5, 8), 0), ((2, 3, 6), 1), ((4, 1), 1)]:
        a, _ = sample(shape, dtype, nan=False)
        held = values_of(a)
        got = ddpc.mode(a, dim)
        got_values = values_of(got.values)
        moved = np.moveaxis(held, dim, -1)
        for line in np.ndindex(moved.shape[:-1]):
            vals, counts = np.unique(moved[line], return_counts=True)
            want = vals[np.argmax(counts)]
            assert got_values[line] == want
            assert got.indices.numpy()[line] == np.nonzero(moved[line] == want)[0][-1]


def test_aminmax():
    a, x = sample((4, 5), "float64", nan=False)
    r = ddpc.aminmax(a)
    assert r.min.item() == x.min() and r.max.item() == x.max() and r.min.ndim == 0
    r = a.aminmax(dim=1, keepdim=True)
    np.testing.assert_array_equal(r.min.numpy(), x.min(1, keepdims=True))
    np.testing.assert_array_equal(r.max.numpy(), x.max(1, keepdims=True))
    with pytest.raises(ValueError):
        ddpc.aminmax(ddpc.zeros(0))


@pytest.mark.parametrize("interpolation", ["linear", "lower", "higher", "midpoint", "nearest"])
def test_quantile_matches_numpy(interpolation):
    x = RNG.standard_normal((4, 7, 3))
    q = np.array([0.0, 0.1, 0.5, 0.75, 1.0])
    for dim in (None, 0, 1, -1):
        for keepdim in (False, True):
            got = ddpc.quantile(ddpc.tensor(x), ddpc.tensor(q), dim, keepdim, interpolation=interpolation)
            want = np.quantile(x, q, axis=dim, keepdims=keepdim, method=interpolation)
            assert got.shape == want.shape
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12)
        got = ddpc.tensor(x).quantile(0.3, dim, interpolation=interpolation)
        np.testing.assert_allclose(got.numpy(), np.quantile(x, 0.3, axis=dim, method=interpolation), rtol=1e-12)
    # One q in lines longer than 32, with ties: the host selects its positions by quickselect.
    x = np.round(RNG.standard_normal((3, 301)), 1)
    for dim in (None, 1):
        got = ddpc.tensor(x).quantile(0.37, dim, interpolation=interpolation)
        np.testing.assert_allclose(got.numpy(), np.quantile(x, 0.37, axis=dim, method=interpolation), rtol=1e-12)


def test_nanquantile_and_quantile_with_nan():
    x = RNG.standard_normal((5, 8))
    x[0, 3] = x[2, :] = x[4, 1] = np.nan
    q = np.array([0.2, 0.5, 0.9])
    got = ddpc.nanquantile(ddpc.tensor(x), ddpc.tensor(q), 1)
    np.testing.assert_allclose(got.numpy(), np.nanquantile(x, q, axis=1), rtol=1e-12)
    got = ddpc.quantile(ddpc.tensor(x), ddpc.tensor(q), 1).numpy()
    assert np.isnan(got[:, [0, 2, 4]]).all()
    np.testing.assert_allclose(got[:, [1, 3]], np.quantile(x[[1, 3]], q, axis=1), rtol=1e-12)
    x32 = ddpc.tensor(x[1], dtype="float32")
    assert x32.nanquantile(0.5).dtype is ddpc.float32


def test_quantile_errors():
    with pytest.raises(TypeError):
        ddpc.quantile(ddpc.tensor([1, 2]), 0.5)
    with pytest.raises(ValueError):
        ddpc.quantile(ddpc.tensor([1.0, 2.0]), 1.5)
    with pytest.raises(ValueError):
        ddpc.quantile(ddpc.tensor([1.0, 2.0]), ddpc.tensor([0.5, -0.1]))
    with pytest.raises(ValueError):
        ddpc.quantile(ddpc.tensor([1.0, 2.0]), 0.5, interpolation="cubic")
    with pytest.raises(TypeError):
        ddpc.quantile(ddpc.tensor([1.0, 2.0], dtype="float64"), ddpc.tensor([0.5], dtype="float32"))
    with pytest.raises(ValueError, match="non-empty"):  # as PyTorch, also along a dim with elements
        ddpc.quantile(ddpc.zeros(2, 0, 4, dtype="float64"), 0.5, 0)


def test_quantile_of_a_0d_tensor_keeps_0_dims():
    x = ddpc.tensor(2.5, dtype="float64")
    for keepdim in (False, True):
        assert ddpc.quantile(x, 0.3, 0, keepdim).shape == () and x.nanquantile(0.3, -1, keepdim).item() == 2.5
        assert ddpc.quantile(x, ddpc.tensor([0.1, 0.9], dtype="float64"), 0, keepdim).shape == (2,)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_16_bit_gradients_reach_the_selected_elements(dtype):
    x = np.array([[3.0, 1.0, 2.0, 5.0], [0.5, 4.0, -1.0, 2.0]])
    for fn in (lambda t: ddpc.median(t, 1).values, lambda t: ddpc.kthvalue(t, 2).values,
               lambda t: ddpc.cummax(t, 1).values, lambda t: ddpc.sort(t, 1).values[:, :1]):
        a = ddpc.tensor(x, dtype=dtype, requires_grad=True)
        b = ddpc.tensor(x, dtype="float32", requires_grad=True)
        fn(a).sum().backward()
        fn(b).sum().backward()
        assert a.grad.dtype.name == dtype
        np.testing.assert_array_equal(a.grad.float().numpy(), b.grad.numpy())


def test_order_statistic_gradients():
    x = RNG.standard_normal((4, 6))
    check_grad(lambda t: ddpc.median(t, 1).values, x)
    check_grad(lambda t: ddpc.median(t), x)
    check_grad(lambda t: ddpc.kthvalue(t, 2, 0).values, x)
    check_grad(lambda t: ddpc.quantile(t, ddpc.tensor([0.3, 0.8], dtype="float64"), 1), x)
    check_grad(lambda t: ddpc.nanquantile(t, 0.4, interpolation="midpoint"), x)
    r = np.round(RNG.standard_normal((3, 7)))
    a = ddpc.tensor(r, requires_grad=True)
    m = ddpc.mode(a, 1)
    m.values.sum().backward()
    want = np.zeros_like(r)
    want[np.arange(3), m.indices.numpy()] = 1
    np.testing.assert_array_equal(a.grad.numpy(), want)


# ---- counting and binning ------------------------------------------------------------------

def test_bincount_matches_numpy():
    x = RNG.integers(0, 9, 50)
    w = RNG.standard_normal(50)
    got = ddpc.bincount(ddpc.tensor(x))
    assert got.dtype is ddpc.int64
    np.testing.assert_array_equal(got.numpy(), np.bincount(x))
    np.testing.assert_array_equal(ddpc.tensor(x, dtype="int32").bincount(minlength=15).numpy(),
                                  np.bincount(x, minlength=15))
    got = ddpc.bincount(ddpc.tensor(x), ddpc.tensor(w))
    assert got.dtype is ddpc.float64
    np.testing.assert_allclose(got.numpy(), np.bincount(x, w), rtol=1e-12)
    assert ddpc.bincount(ddpc.tensor(x), ddpc.tensor(w, dtype="float32")).dtype is ddpc.float32
    assert ddpc.bincount(ddpc.tensor(x), ddpc.tensor(x)).dtype is ddpc.float64
    np.testing.assert_array_equal(ddpc.bincount(ddpc.zeros(0, dtype=ddpc.int64), minlength=3).numpy(), [0, 0, 0])
    with pytest.raises(ValueError):
        ddpc.bincount(ddpc.tensor([1, -1]))
    with pytest.raises(ValueError):
        ddpc.bincount(ddpc.tensor([1.0]))


def test_histc_matches_numpy():
    x = RNG.standard_normal(200)
    for dtype in ("float32", "float64"):
        a = ddpc.tensor(x, dtype=dtype)
        got = ddpc.histc(a, bins=7, min=-1.5, max=2)
        assert got.dtype is a.dtype
        held = values_of(a)
        np.testing.assert_array_equal(got.numpy(), np.histogram(held, 7, range=(-1.5, 2))[0])
        got = a.histc(bins=10)
        np.testing.assert_array_equal(got.numpy(), np.histogram(held, 10, range=(held.min(), held.max()))[0])
    np.testing.assert_array_equal(ddpc.histc(ddpc.tensor([2.0, 2.0]), bins=4).numpy(), [0, 0, 2, 0])
    np.testing.assert_array_equal(ddpc.histc(ddpc.tensor([1.0, np.nan, 3.0]), bins=2, min=0, max=4).numpy(), [1, 1])
    with pytest.raises(TypeError):
        ddpc.histc(ddpc.tensor([1, 2]))
    with pytest.raises(ValueError):
        ddpc.histc(ddpc.tensor([1.0]), min=2, max=1)


# ---- on a GPU: the CUDA ops against the host's ------------------------------------------------

@pytest.mark.gpu
@pytest.mark.parametrize("dtype", DTYPES)
def test_gpu_searchsorted_cum_extreme_match_the_host(dtype):
    for shape in [(7,), (3, 9), (2, 3, 500), (4, 0), (2, 70000)]:
        seq, _ = sample(shape, dtype)
        seq = ddpc.sort(seq, -1).values
        vals, _ = sample(shape[:-1] + (33,), dtype)
        for right in (False, True):
            h = ddpc.searchsorted(seq, vals, right=right)
            d = ddpc.searchsorted(seq.cuda(), vals.cuda(), right=right, out_int32=True)
            assert d.is_cuda
            np.testing.assert_array_equal(d.cpu().numpy(), h.numpy())
        order = ddpc.argsort(seq.flip(-1), -1)
        np.testing.assert_array_equal(
            ddpc.searchsorted(seq.flip(-1).cuda(), vals.cuda(), sorter=order.cuda()).cpu().numpy(),
            ddpc.searchsorted(seq.flip(-1), vals, sorter=order).numpy())
        flat = vals.reshape(-1)
        np.testing.assert_array_equal(ddpc.searchsorted(seq.reshape(-1)[:50].sort().values.cuda(), flat.cuda())
                                      .cpu().numpy(),
                                      ddpc.searchsorted(seq.reshape(-1)[:50].sort().values, flat).numpy())
        for dim in range(len(shape)):
            for fn in (ddpc.cummax, ddpc.cummin):
                h, d = fn(seq, dim), fn(seq.cuda(), dim)
                np.testing.assert_array_equal(d.values.cpu().double().numpy() if seq.dtype.is_floating_point
                                              else d.values.cpu().numpy(), values_of(h.values))
                np.testing.assert_array_equal(d.indices.cpu().numpy(), h.indices.numpy())


@pytest.mark.gpu
def test_gpu_order_statistics_and_counts_stay_on_the_device():
    a, _ = sample((6, 40), "float32")
    c = a.cuda()
    for h, d in [(ddpc.median(a, 1), ddpc.median(c, 1)), (ddpc.mode(a, 1), ddpc.mode(c, 1)),
                 (ddpc.kthvalue(a, 3, 1), ddpc.kthvalue(c, 3, 1)), (ddpc.nanmedian(a, 0), ddpc.nanmedian(c, 0))]:
        assert d.values.is_cuda
        np.testing.assert_array_equal(d.values.cpu().numpy(), h.values.numpy())
        np.testing.assert_array_equal(d.indices.cpu().numpy(), h.indices.numpy())
    q = ddpc.tensor([0.1, 0.5])
    np.testing.assert_array_equal(ddpc.nanquantile(c, q.cuda(), 1).cpu().numpy(), ddpc.nanquantile(a, q, 1).numpy())
    x = ddpc.tensor(RNG.integers(0, 30, 1000))
    np.testing.assert_array_equal(ddpc.bincount(x.cuda()).cpu().numpy(), ddpc.bincount(x).numpy())
    np.testing.assert_array_equal(ddpc.histc(c, 9).cpu().numpy(), ddpc.histc(a, 9).numpy())


def test_histc_refuses_a_data_range_that_is_not_finite():
    for data in ([1.0, np.nan, 3.0], [np.nan], [1.0, np.inf], [-np.inf, 1.0]):
        with pytest.raises(ValueError, match="is not finite"):
            ddpc.histc(ddpc.tensor(data), bins=2)
    # With a range given, NaN is not counted and infinities fall outside it, as in PyTorch.
    assert ddpc.histc(ddpc.tensor([1.0, np.nan, np.inf, 3.0]), bins=2, min=0, max=4).tolist() == [1.0, 1.0]
