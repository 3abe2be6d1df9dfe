"""The host loops written in lanes, vectors and parallel parts (csrc/ops.c,
csrc/ops_nn.c, csrc/ops_dim.c, csrc/ops_select.c): sums, variances, max/min
with their indices, softmax and its gradient, cross entropy, casts,
comparisons, the powers taken as products, nonzero, mask indexing, gather and
scatter give what numpy, an exact sum or ddpc's float64 loops give, at
lengths around the vector widths, at the special values and whatever the
threads."""

import math
import warnings

import numpy as np
import pytest

import ddpc

LENGTHS = [1, 2, 7, 15, 16, 17, 31, 32, 33, 63, 64, 65, 100, 1000, 4099]


def _t(a):
    return ddpc.tensor(a)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("n", LENGTHS)
def test_sums_match_an_exact_sum(dtype, n):
    x = np.random.default_rng(n).standard_normal((3, n)).astype(dtype) * 1e3
    exact = [math.fsum(map(float, row)) for row in x]
    tol = 1e-6 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(ddpc.tensor(x).sum(1).numpy(), exact, rtol=tol, atol=tol * 1e3 * math.sqrt(n))
    assert float(ddpc.tensor(x).sum()) == pytest.approx(math.fsum(map(float, x.ravel())), rel=tol, abs=tol * 1e3 * n)


@pytest.mark.parametrize("n", [(1 << 16) * 4 + 3, (1 << 16) * 64 + 1, 5_000_003])
def test_long_sums_are_exact_to_double_and_do_not_depend_on_the_threads(n):
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    exact = math.fsum(map(float, x))
    before = ddpc.get_num_threads()
    try:
        got = []
        for threads in (1, 2, 3):
            ddpc.set_num_threads(threads)
            got.append(float(ddpc.tensor(x).double().sum()))
    finally:
        ddpc.set_num_threads(before)
    assert got[0] == got[1] == got[2]
    assert got[0] == pytest.approx(exact, rel=1e-12, abs=1e-9)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_sums_along_each_dim_match_numpy_whatever_the_threads(dtype):
    x = np.random.default_rng(7).integers(-1000, 1000, (37, 300, 530)).astype(dtype)
    before = ddpc.get_num_threads()
    try:
        for dim in range(3):
            want = x.astype(np.float64).sum(dim)
            got = []
            for threads in (1, 2):
                ddpc.set_num_threads(threads)
                got.append(ddpc.tensor(x).sum(dim).numpy())
            assert np.array_equal(got[0], got[1])
            np.testing.assert_allclose(got[0].astype(np.float64), want, rtol=1e-6)
    finally:
        ddpc.set_num_threads(before)


def _moments(x, axis, correction):
    """numpy's variance and mean in float64: the reference var_dim is checked against."""
    x64 = x.astype(np.float64)
    n = x64.size if axis is None else math.prod(x.shape[d] for d in np.atleast_1d(axis))
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the mean of an empty slice is NaN, as wanted
        dev = x64 - x64.mean(axis, keepdims=True)
        return (dev * dev).sum(axis) / max(0, n - correction), x64.mean(axis)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape, dim", [((4099,), None), ((3, 17), 1), ((3, 17), 0), ((5, 300, 7), 1),
                                        ((5, 300, 7), (1, 2)), ((2, 3, 4, 600), (0, 1)), ((6, 4, 9), (0, 2)),
                                        ((1, 1), None), ((0, 4), 0)])
@pytest.mark.parametrize("correction", [0, 1, 2])
def test_var_and_std_match_numpy_in_double(dtype, shape, dim, correction):
    # Far from zero, so that E[x^2] - E[x]^2 would lose digits where two passes do not.
    x = (np.random.default_rng(len(shape)).standard_normal(shape) * 3 + 1e3).astype(dtype)
    want_v, want_m = _moments(x, dim, correction)
    v, m = ddpc.var_mean(_t(x), dim, correction=correction)
    tol = 1e-5 if dtype == np.float32 else 1e-12
    np.testing.assert_allclose(v.numpy(), want_v, rtol=tol, equal_nan=True)
    np.testing.assert_allclose(m.numpy(), want_m, rtol=tol, equal_nan=True)
    np.testing.assert_allclose(_t(x).std(dim, correction=correction, keepdim=True).numpy(),
                               np.sqrt(want_v).reshape(_t(x).var(dim, keepdim=True).shape), rtol=tol, equal_nan=True)


@pytest.mark.parametrize("shape, dim", [((3_000_001,), None), ((4, 200_001), 1), ((300, 2000), 0)])
def test_var_does_not_depend_on_the_threads(shape, dim):
    x = np.random.default_rng(5).standard_normal(shape).astype(np.float32)
    before = ddpc.get_num_threads()
    try:
        got = []
        for threads in (1, 2, 3):
            ddpc.set_num_threads(threads)
            got.append(ddpc.tensor(x).var(dim).numpy())
    finally:
        ddpc.set_num_threads(before)
    assert np.array_equal(got[0], got[1]) and np.array_equal(got[0], got[2])
    np.testing.assert_allclose(got[0], _moments(x, dim, 1)[0], rtol=1e-5)


def test_var_with_a_gradient_or_a_nan_takes_the_same_values():
    x = np.random.default_rng(3).standard_normal((6, 50)).astype(np.float32)
    a = ddpc.tensor(x, requires_grad=True)
    v = a.var(1)  # through the ops that record the graph
    np.testing.assert_allclose(v.detach().numpy(), ddpc.tensor(x).var(1).numpy(), rtol=1e-6)
    v.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), 2 * (x - x.mean(1, keepdims=True)) / 49, rtol=1e-5, atol=1e-7)
    x[2, 7] = np.nan
    got = ddpc.tensor(x).var(1).numpy()
    assert np.isnan(got[2]) and not np.isnan(np.delete(got, 2)).any()


def test_sums_pass_on_nan_and_infinities():
    x = np.ones(100, np.float32)
    x[57] = np.nan
    assert math.isnan(float(_t(x).sum()))
    x[57] = np.inf
    assert float(_t(x).sum()) == math.inf
    x[3] = -np.inf
    assert math.isnan(float(_t(x).sum()))


def _first_extreme(row, want_max):
    """The reference: the first NaN, else the first largest (smallest) value."""
    best, at = row[0], 0
    for i, v in enumerate(row):
        if best != best:
            break
        if v != v or (v > best if want_max else v < best):
            best, at = v, i
    return best, at


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32, np.uint8])
@pytest.mark.parametrize("n", LENGTHS)
def test_max_and_min_give_the_first_extreme(dtype, n):
    rng = np.random.default_rng(n)
    x = rng.integers(0, 5, (4, n)).astype(dtype)  # many ties
    if np.dtype(dtype).kind == "f":
        x[1, rng.integers(0, n)] = np.nan
        x[2, n // 2] = np.nan
        x[2, n - 1] = np.nan
        x[3] = np.where(x[3] > 2, 0.0, -0.0).astype(dtype)
    for want_max in (True, False):
        res = (ddpc.max if want_max else ddpc.min)(_t(x), 1)
        for r in range(4):
            best, at = _first_extreme(list(x[r]), want_max)
            assert int(res.indices[r]) == at, (r, want_max)
            got = res.values.numpy()[r]
            assert (got != got and best != best) or (got == best and np.signbit(got) == np.signbit(best))
        # along a dim that is not the last (the chunked loop)
        res = (ddpc.max if want_max else ddpc.min)(_t(np.ascontiguousarray(x.T)), 0)
        assert [int(i) for i in res.indices] == [_first_extreme(list(x[r]), want_max)[1] for r in range(4)]


def test_max_of_all_elements_and_argmax():
    x = np.random.default_rng(0).standard_normal(100003).astype(np.float32)
    x[77777] = 10.0
    x[99999] = 10.0
    assert float(_t(x).max()) == 10.0 and int(_t(x).argmax()) == 77777
    x[5] = np.nan
    assert math.isnan(float(_t(x).max())) and int(_t(x).argmax()) == 5


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.int32, np.uint8])
@pytest.mark.parametrize("n", [2 * 65536, 3 * 65536 + 17, 65 * 65536 * 2 + 5])
def test_a_long_row_split_across_threads_gives_the_first_extreme_whatever_the_threads(dtype, n):
    """A long row is taken in parts on the cores and the parts merged in order: the first of equal extremes
    (ties in several parts), and the first NaN, whatever the thread count."""
    rng = np.random.default_rng(n)
    x = rng.integers(0, 200, n).astype(dtype)
    top = 250 if dtype is np.uint8 else 1000
    for at in (n - 1, n // 2 + 3, 65536 + 1, 65536):  # equal maxima in several parts; the first wins
        x[at] = top
    low = 0 if dtype is np.uint8 else -5
    x[x == low] = low + 1
    x[n // 3] = x[n - 2] = low
    cases = [(x, 65536, n // 3)]
    if np.dtype(dtype).kind == "f":
        nan = x.copy()
        nan[n - 3], nan[n // 2] = np.nan, np.nan
        cases.append((nan, n // 2, n // 2))
    for values, first_max, first_min in cases:  # numpy's argmax and argmin take the first too
        assert (np.argmax(values), np.argmin(values)) == (first_max, first_min)
    before = ddpc.get_num_threads()
    try:
        for values, first_max, first_min in cases:
            for threads in (1, 2, 3):
                ddpc.set_num_threads(threads)
                t = _t(values)
                hi, lo = t.max(0), t.min(0)
                assert (int(hi.indices), int(lo.indices)) == (first_max, first_min), threads
                assert int(t.argmax()) == first_max and int(t.argmin()) == first_min
                assert np.array_equal(np.asarray(hi.values.numpy()), values[first_max], equal_nan=True)
                assert np.array_equal(np.asarray(t.max().numpy()), values[first_max], equal_nan=True)
    finally:
        ddpc.set_num_threads(before)


@np.errstate(invalid="ignore")
def _softmax64(x):
    m = x.max(-1, keepdims=True)
    e = np.exp(x - m)
    return e / e.sum(-1, keepdims=True), (x - m) - np.log(e.sum(-1, keepdims=True))


@pytest.mark.parametrize("n", LENGTHS)
def test_float32_softmax_is_within_a_few_ulps(n):
    x = (np.random.default_rng(n).standard_normal((5, n)) * 8).astype(np.float32)
    x[1] += 1e4  # x - max needs more than a float's precision
    if n > 1:
        x[2, :: 3] = -np.inf  # masked entries
    sm, lsm = _softmax64(x.astype(np.float64))
    got = ddpc.tensor(x).softmax(-1).numpy()
    ulp = np.spacing(sm.astype(np.float32))
    assert (np.abs(got - sm) <= 4 * ulp + 1e-45).all()
    got = ddpc.tensor(x).log_softmax(-1).numpy()
    fin = np.isfinite(lsm)
    assert (np.abs(got[fin] - lsm[fin]) <= 4 * np.spacing(np.abs(lsm[fin]).astype(np.float32)) + 1e-6).all()
    assert (got[~fin] == -np.inf).all()


def test_softmax_rows_with_nan_or_infinite_maxima_are_nan():
    x = np.zeros((4, 40), np.float32)
    x[0, 3] = np.nan
    x[1, 39] = np.nan
    x[2, 7] = np.inf
    x[3] = -np.inf
    for take_log in (False, True):
        got = (ddpc.tensor(x).log_softmax(-1) if take_log else ddpc.tensor(x).softmax(-1)).numpy()
        assert np.isnan(got).all()


def test_casts_to_bool_and_between_floats():
    x = np.array([0.0, -0.0, 1e-45, np.nan, np.inf, -2.5] * 7, np.float32)
    for dt in (np.float32, np.float64):
        got = ddpc.tensor(x.astype(dt)).to(dtype=ddpc.bool).numpy()
        assert got.tolist() == (x != 0).tolist()  # NaN is true
    assert np.array_equal(ddpc.tensor(x).double().numpy(), x.astype(np.float64), equal_nan=True)
    big = np.array([2**40 + 1, -3, 2**24 + 1], np.int64)
    assert ddpc.tensor(big).float().numpy().tolist() == big.astype(np.float32).tolist()
    assert ddpc.tensor(np.array([0, 1, 255], np.uint8)).double().numpy().tolist() == [0.0, 1.0, 255.0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64, np.uint8])
def test_comparisons_into_bool_match_numpy(dtype):
    import operator

    rng = np.random.default_rng(3)
    x = rng.integers(0, 6, 1003).astype(dtype)
    y = rng.integers(0, 6, 1003).astype(dtype)
    if np.dtype(dtype).kind == "f":
        x[::7] = np.nan
    t, u = ddpc.tensor(x), ddpc.tensor(y)
    for op in (operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge):
        for other, ref in ((u, y), (3, 3), (2.5, 2.5), (True, 1)):
            got = op(t, other)
            assert got.dtype is ddpc.bool and got.tolist() == op(x, ref).tolist(), (op, other)
    big = ddpc.tensor(np.array([2 ** 62, 2 ** 62 + 1], np.int64))
    assert (big == 2 ** 62 + 1).tolist() == [False, True]  # beyond a double's integers
    assert (ddpc.tensor(np.array([1, 200], np.uint8)) < 300).tolist() == [True, True]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_small_integer_powers_are_products(dtype):
    x = np.random.default_rng(1).standard_normal(1001).astype(dtype) * 100
    x[:4] = [np.nan, np.inf, -0.0, -np.inf]
    t = ddpc.tensor(x)
    assert np.array_equal(t.pow(2).numpy(), x * x, equal_nan=True)
    assert np.array_equal((t ** 3).numpy(), x * x * x, equal_nan=True)
    with np.errstate(divide="ignore"):
        assert np.array_equal(t.pow(-1).numpy(), 1 / x, equal_nan=True)
    assert np.array_equal(t.pow(1).numpy(), x, equal_nan=True)
    with np.errstate(invalid="ignore"):
        ref = np.power(x.astype(np.float64), 2.5)
    np.testing.assert_allclose(t.pow(2.5).numpy(), ref, rtol=1e-6 if dtype == np.float32 else 1e-14)
    w = ddpc.tensor(x[4:], requires_grad=True)
    w.pow(2).sum().backward()
    assert np.array_equal(w.grad.numpy(), 2 * x[4:])


@pytest.mark.parametrize("shape", [(), (1,), (37,), (5, 33), (3, 4, 17), (2, 0, 3)])
@pytest.mark.parametrize("density", [0.0, 0.5, 1.0])
def test_nonzero_masked_select_and_mask_indexing_match_numpy(shape, density):
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    m = rng.random(shape) < density
    t, tm = ddpc.tensor(x), ddpc.tensor(m)
    assert np.array_equal(tm.nonzero().numpy(), np.argwhere(m))
    assert np.array_equal(ddpc.masked_select(t, tm).numpy(), x[m])
    if shape:
        assert np.array_equal(t[tm].numpy(), x[m])
        lead = m.reshape(-1)[: shape[0]] if m.size else np.zeros(shape[0], bool)
        assert np.array_equal(t[ddpc.tensor(lead)].numpy(), x[lead])  # rows of a mask over dim 0
        assert np.array_equal(ddpc.tensor(np.where(m, 3, 0).astype(np.uint8)).nonzero().numpy(), np.argwhere(m))


def test_mask_indexing_gradients_and_writes_land_on_the_selected_rows():
    x = ddpc.arange(24, dtype=ddpc.float32).reshape(4, 6).requires_grad_()
    m = ddpc.tensor([True, False, True, True])
    (x[m] * ddpc.arange(18, dtype=ddpc.float32).reshape(3, 6)).sum().backward()
    want = np.zeros((4, 6), np.float32)
    want[[0, 2, 3]] = np.arange(18).reshape(3, 6)
    assert np.array_equal(x.grad.numpy(), want)
    y = ddpc.zeros(4, 6)
    y[m] = 7.0
    y[y > 6] += 1.0
    assert y.sum().item() == 18 * 8


@pytest.mark.parametrize("shape,dim", [((50,), 0), ((7, 9), 0), ((7, 9), 1), ((3, 5, 11), 1), ((3, 5, 11), 2)])
def test_gather_and_scatter_add_match_numpy_at_every_dim(shape, dim):
    rng = np.random.default_rng(dim)
    x = rng.standard_normal(shape).astype(np.float32)
    ishape = tuple(s - (1 if d != dim and s > 1 else 0) for d, s in enumerate(shape))  # smaller than x off dim
    idx = rng.integers(0, shape[dim], ishape)
    got = ddpc.tensor(x).gather(dim, ddpc.tensor(idx)).numpy()
    assert np.array_equal(got, np.take_along_axis(x[tuple(slice(0, s) if d != dim else slice(None)
                                                          for d, s in enumerate(ishape))], idx, dim))
    src = rng.standard_normal(ishape).astype(np.float32)
    out = ddpc.zeros(*shape).scatter_add(dim, ddpc.tensor(idx), ddpc.tensor(src)).numpy()
    want = np.zeros(shape, np.float32)
    for pos in np.ndindex(*ishape):
        tgt = list(pos)
        tgt[dim] = idx[pos]
        want[tuple(tgt)] += src[pos]
    np.testing.assert_allclose(out, want, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("C", [3, 16, 33, 1000])
@pytest.mark.parametrize("kw", [{}, {"label_smoothing": 0.1}, {"reduction": "none"}, {"reduction": "sum"},
                                {"ignore_index": 1}, {"weight": True}, {"probs": True}])
def test_float32_cross_entropy_matches_the_float64_loops(C, kw):
    """float32 rows take the vectorised statistics; float64 the double loops,
    the reference here (to float32's precision)."""
    F = ddpc.nn.functional
    rng = np.random.default_rng(C)
    x = (rng.standard_normal((67, C)) * 4).astype(np.float32)
    x[5, :: 2] = -np.inf  # masked classes
    kw = dict(kw)
    if kw.pop("probs", False):
        p = rng.random((67, C))
        y64 = ddpc.tensor(p / p.sum(1, keepdims=True))
        y32 = y64.float()
        x[5] = 0  # -inf logits with a probability are NaN in both
    else:
        y = rng.integers(0, C, 67)
        y[5] = 1
        y32 = y64 = ddpc.tensor(y)
    if kw.pop("weight", False):
        wt = rng.random(C)
        kw32, kw64 = dict(kw, weight=ddpc.tensor(wt.astype(np.float32))), dict(kw, weight=ddpc.tensor(wt))
    else:
        kw32 = kw64 = kw
    grads = []
    for dt, yy, k in ((ddpc.float32, y32, kw32), (ddpc.float64, y64, kw64)):
        t = ddpc.tensor(x.astype(np.float64)).to(dtype=dt).requires_grad_()
        loss = F.cross_entropy(t, yy, **k)
        loss.sum().backward()
        grads.append((loss.detach().double().numpy(), t.grad.double().numpy()))
    (l32, g32), (l64, g64) = grads
    np.testing.assert_allclose(l32, l64, rtol=2e-6, atol=1e-6)
    np.testing.assert_allclose(g32, g64, rtol=2e-5, atol=2e-7)


@pytest.mark.parametrize("C", [1, 15, 16, 17, 1000])
def test_float32_softmax_gradients_match_the_float64_loops(C):
    rng = np.random.default_rng(C)
    x = (rng.standard_normal((9, C)) * 3).astype(np.float32)
    g = rng.standard_normal((9, C)).astype(np.float32)
    for fn in (ddpc.softmax, ddpc.log_softmax):
        grads = []
        for dt in (ddpc.float32, ddpc.float64):
            t = ddpc.tensor(x).to(dtype=dt).requires_grad_()
            fn(t, 1).backward(ddpc.tensor(g).to(dtype=dt))
            grads.append(t.grad.double().numpy())
        np.testing.assert_allclose(grads[0], grads[1], rtol=1e-5, atol=1e-6 * max(1.0, C ** 0.5))


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.uint8])
def test_large_binary_ops_split_across_threads_match_numpy(dtype):
    n = (1 << 22) + 1001  # above the split size
    rng = np.random.default_rng(11)
    x = rng.integers(1, 100, n).astype(dtype)
    y = rng.integers(1, 100, n).astype(dtype)
    before = ddpc.get_num_threads()
    try:
        for threads in (1, 2):
            ddpc.set_num_threads(threads)
            t, u = ddpc.tensor(x), ddpc.tensor(y)
            assert np.array_equal((t + u).numpy(), x + y)
            assert np.array_equal((t * 3).numpy(), x * dtype(3))
            assert np.array_equal((t - u).numpy(), x - y)
            t.add_(u)  # in place: each range reads and writes its own elements
            assert np.array_equal(t.numpy(), x + y)
        if np.dtype(dtype).kind == "f":
            small = ddpc.tensor(x[:70000] / 50)
            np.testing.assert_allclose((small ** ddpc.tensor(y[:70000] / 50)).numpy(),
                                       (x[:70000] / 50) ** (y[:70000] / 50), rtol=1e-6)
    finally:
        ddpc.set_num_threads(before)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64, np.uint8, np.bool_, np.float16, np.complex128])
@pytest.mark.parametrize("shape,perm", [((37, 45), (1, 0)), ((3, 19, 70), (0, 2, 1)), ((5, 9, 17), (2, 1, 0)),
                                        ((4, 33, 6, 10), (0, 3, 2, 1)), ((2, 3, 40, 24), (1, 0, 3, 2))])
def test_permuted_copies_in_tiles_match_numpy(dtype, shape, perm):
    """Copies whose source runs along another dim than the destination are taken in tiles (a transpose at
    every element size, the odd edges of the tiles, other dims walked around them)."""
    a = np.random.default_rng(len(shape)).integers(0, 100, shape).astype(dtype)
    got = ddpc.tensor(a).permute(*perm).contiguous().numpy()
    assert got.dtype == a.dtype and np.array_equal(got, np.ascontiguousarray(a.transpose(perm)))
    if len(shape) == 2:
        assert np.array_equal(ddpc.tensor(a).t().numpy(), a.T)
    flipped = ddpc.tensor(a).permute(*perm).flip(-1).contiguous().numpy()  # a negative stride along the last dim
    assert np.array_equal(flipped, np.ascontiguousarray(a.transpose(perm)[..., ::-1]))
