"""Reductions, scans, splitting, gather/scatter, sorting and matrix products
against numpy references; gradients against finite differences; on a GPU
(marked gpu) the CUDA results against the host's."""

import numpy as np
import pytest
from numeric import numeric_grad

import ddpc

RNG = np.random.default_rng(0)


def t(arr, **kw):
    return ddpc.tensor(np.asarray(arr), **kw)


def close(x, ref, tol=1e-6):
    arr = np.asarray(x.detach().cpu()) if isinstance(x, ddpc.Tensor) else np.asarray(x)
    np.testing.assert_allclose(arr, ref, rtol=tol, atol=tol)


def check_grad(fn, x, tol=1e-5):
    a = t(x, requires_grad=True)
    fn(a).sum().backward()
    close(a.grad, numeric_grad(lambda v: float(fn(t(v)).sum()), x), tol)


# ---- top-level aliases -----------------------------------------------------------------

def test_aliases():
    x = RNG.standard_normal((2, 3, 4))
    a = t(x)
    close(ddpc.sum(a, 1), x.sum(1))
    close(ddpc.sum(a, (0, 2), keepdim=True), x.sum((0, 2), keepdims=True))
    close(ddpc.mean(a, (0, 1)), x.mean((0, 1)))
    assert ddpc.reshape(a, (4, 6)).shape == (4, 6)
    assert ddpc.flatten(a, 1).shape == (2, 12) and a.flatten(0, 1).shape == (6, 4)
    assert ddpc.squeeze(ddpc.unsqueeze(a, 1)).shape == (2, 3, 4) and ddpc.unsqueeze(a, -1).shape == (2, 3, 4, 1)
    close(ddpc.transpose(a, 0, 2), x.transpose(2, 1, 0))
    close(ddpc.permute(a, (1, 2, 0)), x.transpose(1, 2, 0))
    close(ddpc.index_select(a, 2, t([3, 0])), x[:, :, [3, 0]])
    close(ddpc.clone(a), x)
    assert ddpc.numel(a) == 24 and ddpc.is_tensor(a) and not ddpc.is_tensor(x)


# ---- splitting and layout -----------------------------------------------------------------

def test_split_chunk_unbind():
    x = np.arange(20.0).reshape(10, 2)
    a = t(x)
    assert [p.shape[0] for p in a.split(4)] == [4, 4, 2]
    assert [p.shape[0] for p in ddpc.split(a, [3, 7])] == [3, 7]
    assert [p.shape[1] for p in a.split_with_sizes([1, 1], 1)] == [1, 1]
    assert [p.shape[0] for p in a.chunk(3)] == [4, 4, 2]
    assert [p.shape[0] for p in t(np.zeros(6)).chunk(4)] == [2, 2, 2]  # torch gives 3 pieces here
    assert [p.shape[0] for p in a.tensor_split(3)] == [4, 3, 3]
    assert [p.shape[0] for p in a.tensor_split([2, 5])] == [2, 3, 5]
    close(a.tensor_split(3)[1], x[4:7])
    parts = ddpc.unbind(a, 1)
    assert len(parts) == 2
    close(parts[1], x[:, 1])
    with pytest.raises(ValueError):
        a.split([3, 3])


def test_flip_roll_tril_triu():
    x = RNG.standard_normal((3, 4, 5))
    a = t(x)
    close(a.flip(0, 2), np.flip(x, (0, 2)))
    close(ddpc.flip(a, (1,)), np.flip(x, 1))
    close(a.roll(2, 1), np.roll(x, 2, 1))
    close(ddpc.roll(a, (-1, 3), (0, 2)), np.roll(x, (-1, 3), (0, 2)))
    close(a.roll(7), np.roll(x, 7))
    for k in (-1, 0, 2):
        close(a.tril(k), np.tril(x, k))
        close(ddpc.triu(a, k), np.triu(x, k))
    check_grad(lambda v: v.flip(1) * t(np.arange(20.0).reshape(4, 5)) + v.roll(1, 0).tril(), x[0:2, :, :])


def test_unflatten_repeat_interleave_diff():
    x = RNG.standard_normal((2, 6))
    a = t(x)
    assert a.unflatten(1, (2, 3)).shape == (2, 2, 3) and ddpc.unflatten(a, 1, (-1, 2)).shape == (2, 3, 2)
    close(a.repeat_interleave(2, 0), np.repeat(x, 2, 0))
    close(a.repeat_interleave(3), np.repeat(x, 3))
    close(ddpc.repeat_interleave(a, t([1, 0]), 0), np.repeat(x, [1, 0], 0))
    close(a.diff(), np.diff(x))
    close(ddpc.diff(a, 2, 1), np.diff(x, 2, 1))
    close(a.diff(dim=0, prepend=t(x[:1])), np.diff(x, axis=0, prepend=x[:1]))
    check_grad(lambda v: v.diff(2, 1) * 3 + v.repeat_interleave(2, 1).sum(1, keepdim=True), x)


# ---- reductions -----------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int32, np.int64])
def test_prod_cumsum_cumprod(dtype):
    x = RNG.integers(-3, 4, (3, 4, 5)).astype(dtype)
    a = t(x)
    out_dtype = ddpc.int64 if np.issubdtype(dtype, np.integer) else a.dtype
    for d in (0, 1, 2, -1):
        assert a.cumsum(d).dtype is out_dtype and a.prod(d).dtype is out_dtype
        close(a.cumsum(d), np.cumsum(x, d))
        close(a.cumprod(d), np.cumprod(x, d), 1e-5)
        close(a.prod(d), np.prod(x, d), 1e-5)
        close(a.prod(d, keepdim=True), np.prod(x, d, keepdims=True), 1e-5)
    close(ddpc.prod(a), np.prod(x), 1e-5)
    close(ddpc.cumsum(a, 1, dtype=ddpc.float64), np.cumsum(x, 1))


def test_sums_and_products_in_a_narrow_integer_dtype_wrap_to_it():
    """dtype=int32 gives int32, the int64 result wrapped, as PyTorch's."""
    a = ddpc.tensor([2 ** 31 - 1, 1, 3], dtype=ddpc.int32)
    for out in (a.sum(dtype=ddpc.int32), a.sum(0, dtype=ddpc.int32), ddpc.nansum(a, dtype=ddpc.int32),
                ddpc.nansum(a, 0, dtype=ddpc.int32)):
        assert out.dtype is ddpc.int32 and out.item() == -2 ** 31 + 3
    for out in (a.prod(dtype=ddpc.int32), a.prod(0, dtype=ddpc.int32)):
        assert out.dtype is ddpc.int32 and out.item() == 2 ** 31 - 3  # (2**31 - 1) * 3 wrapped
    assert ddpc.tensor([200, 100]).sum(dtype=ddpc.uint8).item() == 44


def test_running_sums_and_products_in_a_narrow_integer_dtype_wrap_to_it():
    """cumsum and cumprod with dtype=int32 run in int64 and wrap to int32, as PyTorch's."""
    a = ddpc.tensor([2 ** 31 - 1, 1, 3])
    cumsum, cumprod = a.cumsum(0, dtype=ddpc.int32), ddpc.cumprod(a, 0, dtype=ddpc.int32)
    assert cumsum.dtype is ddpc.int32 and cumsum.tolist() == [2 ** 31 - 1, -2 ** 31, -2 ** 31 + 3]
    assert cumprod.dtype is ddpc.int32 and cumprod.tolist() == [2 ** 31 - 1, 2 ** 31 - 1, 2 ** 31 - 3]
    assert ddpc.tensor([200, 100]).cumsum(0, dtype=ddpc.uint8).tolist() == [200, 44]


def test_float32_prod_multiplies_in_float32_and_cumprod_in_double():
    """As PyTorch's CPU ops: a running float32 product that leaves the range
    gives inf or 0 even where the whole product fits; cumprod carries on in
    double (each output still rounded to float32)."""
    for values, want in (([1e30, 1e30, 1e-30, 1e-30], np.inf), ([1e-30, 1e-30, 1e30, 1e30], 0.0),
                         ([3e38, 10.0, 0.1], np.inf), ([-1e30, 1e30, 1e-30], -np.inf)):
        x = np.array(values, dtype=np.float32)
        assert ddpc.prod(ddpc.tensor(x)).item() == want, values
        assert ddpc.tensor(np.tile(x, (3, 1)).T.copy()).prod(0).tolist() == [want] * 3, values
        assert ddpc.tensor(np.tile(x, (2, 1))).prod(1, keepdim=True).tolist() == [[want]] * 2, values
        with np.errstate(over="ignore"):
            np.testing.assert_array_equal(ddpc.tensor(x).cumprod(0).numpy(),
                                          np.cumprod(x.astype(np.float64)).astype(np.float32))
        assert ddpc.prod(ddpc.tensor(x, dtype=ddpc.float64)).item() == np.prod(x.astype(np.float64))
    # Along the dim, one float32 rounding per factor: numpy's running float32 product.
    v = RNG.uniform(0.9, 1.1, (1000, 3)).astype(np.float32)
    np.testing.assert_array_equal(ddpc.tensor(v).prod(0).numpy(), np.multiply.accumulate(v, axis=0)[-1])
    np.testing.assert_array_equal(ddpc.tensor(v.T.copy()).prod(1).numpy(), np.multiply.accumulate(v, axis=0)[-1])


def test_scan_gradients_with_zeros():
    x = RNG.standard_normal((3, 5))
    x[1, 2] = 0.0
    x[2, 0] = x[2, 3] = 0.0
    for d in (0, 1):
        check_grad(lambda v: v.cumsum(d) * t(np.arange(15.0).reshape(3, 5)), x)
        check_grad(lambda v: v.cumprod(d) * t(np.arange(15.0).reshape(3, 5)), x)
        check_grad(lambda v: v.prod(d), x)
    check_grad(lambda v: v.cumprod(1), RNG.standard_normal((2, 4)))  # no zeros: the division formula


@pytest.mark.parametrize("dim", [None, 0, 1, (0, 2), -1])
def test_var_std_norm(dim):
    x = RNG.standard_normal((3, 4, 5))
    a = t(x)
    axis = tuple(dim) if isinstance(dim, tuple) else dim
    for corr in (0, 1, 2):
        close(a.var(dim, correction=corr), np.var(x, axis, ddof=corr))
        close(ddpc.std(a, dim, keepdim=True, correction=corr), np.std(x, axis, ddof=corr, keepdims=True))
    close(a.var(dim, unbiased=False), np.var(x, axis))
    v, m = ddpc.var_mean(a, dim)
    close(v, np.var(x, axis, ddof=1))
    close(m, np.mean(x, axis))
    s, m = ddpc.std_mean(a, dim)
    close(s, np.std(x, axis, ddof=1))
    for p in (2, "fro", 1, float("inf"), -float("inf"), 3):
        ref = np.linalg.norm(x.reshape(-1) if dim is None else x, ord=None if p in (2, "fro") else p, axis=axis) \
            if not isinstance(dim, tuple) or p in (2, "fro") else None
        if isinstance(dim, tuple) or dim is None:
            flat = np.moveaxis(x, axis if axis is not None else (0, 1, 2), range(len(axis) if axis else 3))
            flat = flat.reshape((-1,) + flat.shape[len(axis) if axis else 3:])
            ref = np.linalg.norm(flat, ord=None if p in (2, "fro") else p, axis=0)
        close(a.norm(p, dim), ref)
    check_grad(lambda v: v.var(dim) * 2 + v.std(dim) + v.norm(2, dim), x)
    check_grad(lambda v: v.norm(3, dim) + v.norm(1, dim), x)


def test_std_of_equal_values_has_zero_gradient():
    a = t([[1.0, 1.0, 1.0], [1.0, 2.0, 4.0]], requires_grad=True)
    a.std(1).sum().backward()
    x = np.array([1.0, 2.0, 4.0])
    close(a.grad[0], [0.0, 0.0, 0.0])  # PyTorch's, where d sqrt(v) / dv is infinite at v = 0
    close(a.grad[1], (x - x.mean()) / (2 * x.std(ddof=1)))


def test_var_of_one_element_is_nan():
    assert np.isnan(float(t([1.0]).var()))
    assert float(t([1.0]).var(correction=0)) == 0.0


def test_amax_amin_ties_split_gradient():
    x = np.array([[1.0, 3.0, 3.0], [2.0, 2.0, 2.0]])
    a = t(x, requires_grad=True)
    close(a.amax(1), x.max(1))
    close(ddpc.amin(a, 0), x.min(0))
    close(a.amax(), x.max())
    close(a.amax((0, 1), keepdim=True), x.max((0, 1), keepdims=True))
    a.amax(1).sum().backward()
    close(a.grad, [[0, 0.5, 0.5], [1 / 3, 1 / 3, 1 / 3]])
    b = t(x, requires_grad=True)
    b.amin().backward()
    close(b.grad, [[1, 0, 0], [0, 0, 0]])
    assert np.isnan(float(t([1.0, np.nan, 3.0]).amax()))


def test_logsumexp():
    x = RNG.standard_normal((3, 4)) * 50
    a = t(x)
    ref = np.log(np.exp(x - x.max(1, keepdims=True)).sum(1)) + x.max(1)
    close(a.logsumexp(1), ref)
    close(ddpc.logsumexp(a, (0, 1)), np.log(np.exp(x - x.max()).sum()) + x.max())
    assert float(t([-np.inf, -np.inf]).logsumexp(0)) == -np.inf
    check_grad(lambda v: v.logsumexp(0, keepdim=True), x / 50)


def test_all_any_count_nonzero():
    x = np.array([[0, 1, 2], [3, 4, 5]])
    a = t(x)
    assert int(a.all()) == 0 and int(a.any()) == 1
    close(ddpc.all(a, 1), np.all(x, 1).astype(np.uint8))
    close(ddpc.any(a == 0, 0, keepdim=True), np.any(x == 0, 0, keepdims=True).astype(np.uint8))
    assert a.all(1).dtype is ddpc.bool
    assert int(ddpc.count_nonzero(a)) == 5
    close(a.count_nonzero(0), [1, 2, 2])
    assert ddpc.count_nonzero(a, 1).dtype is ddpc.int64
    assert int(t(np.zeros(0)).all()) == 1 and int(t(np.zeros(0)).any()) == 0
    empty = t(np.zeros((2, 0)))
    close(empty.all(1), [1, 1])  # over no elements, as numpy
    close(ddpc.any(empty, -1, keepdim=True), [[0], [0]])


def test_reductions_of_zero_dim_tensors_along_dim_0_and_minus_1():
    a = t(np.float64(2.5), requires_grad=True)
    for dim in (0, -1):
        for r in (a.sum(dim), a.mean(dim, keepdim=True), a.amax(dim), a.max(dim).values, a.logsumexp(dim),
                  a.prod(dim), ddpc.nansum(a, dim), a.norm(dim=dim)):
            assert r.shape == () and float(r) == 2.5
        assert a.argmax(dim).shape == () and int(a.argmin(dim)) == 0
        assert float(a.var(dim, correction=0)) == 0.0 and int(ddpc.count_nonzero(a, dim)) == 1
        assert int(a.all(dim)) == 1 and int(a.any(dim)) == 1
    a.sum(0).backward()
    assert float(a.grad) == 1.0
    with pytest.raises(IndexError):
        a.sum(1)
    with pytest.raises(IndexError):
        a.max(-2)


def test_logsumexp_over_no_elements_is_minus_inf():
    assert t(np.zeros((2, 0))).logsumexp(1).tolist() == [-np.inf, -np.inf]
    assert t(np.zeros((0, 2))).logsumexp(0, keepdim=True).shape == (1, 2)


def test_empty_dims_reduce_every_dim_but_all_and_any_none():
    x = RNG.standard_normal((3, 4))
    a = t(x)
    for dims in ((), []):
        close(a.sum(dims), x.sum())
        close(a.mean(dims, keepdim=True), x.mean(keepdims=True))
        close(a.amax(dims), x.max())
        close(ddpc.amin(a, dims), x.min())
        close(a.var(dims), x.var(ddof=1))
        close(ddpc.std(a, dims, keepdim=True), x.std(ddof=1, keepdims=True))
        close(ddpc.var_mean(a, dims)[0], x.var(ddof=1))
        close(ddpc.logsumexp(a, dims), np.log(np.exp(x).sum()))
        assert ddpc.logsumexp(a, dims, keepdim=True).shape == (1, 1)
        close(ddpc.norm(a, dim=dims), np.sqrt((x * x).sum()))
        close(ddpc.nanmean(a, dims), x.mean())
        assert int(ddpc.count_nonzero(a > 0, dims)) == int((x > 0).sum())
        for fn in (ddpc.all, ddpc.any):
            got = fn(a > 0, dims)
            assert got.dtype is ddpc.bool and got.shape == (3, 4)
            close(got, x > 0)
        close(t([[0, 5], [7, 0]]).all(dims), [[0, 1], [1, 0]])
    check_grad(lambda v: v.var(()) + ddpc.std(v, []) * 3, x)
    with pytest.raises(TypeError, match="must be int, not tuple"):
        a.prod(())


def test_logcumsumexp_keeps_terms_far_below_the_running_maximum():
    x = np.array([[0.0, -1000.0, -1000.0, 0.0, -1000.0], [-1000.0, -1000.0, -999.0, -1.0, -2000.0]])
    x = np.concatenate([x, RNG.uniform(-1000, 0, (3, 5))])
    ref = np.logaddexp.accumulate(x, axis=1)  # float64, each step a stable log-add-exp
    for dtype, tol in ((np.float64, 1e-12), (np.float32, 1e-6)):
        close(t(x.astype(dtype)).logcumsumexp(1), ref, tol * 1000)
    assert np.all(np.isfinite(ddpc.logcumsumexp(t(x), 1).numpy()))
    close(ddpc.logcumsumexp(t([-np.inf, -np.inf, 0.0, np.inf, 1.0]), 0), [-np.inf, -np.inf, 0.0, np.inf, np.inf])
    assert np.isnan(ddpc.logcumsumexp(t([0.0, np.nan, 1.0]), 0).numpy()[1:]).all()
    # the gradient, exp(x_j) * sum over i >= j of g_i exp(-out_i), within the range where it is representable
    w = t(RNG.standard_normal((2, 5)))
    check_grad(lambda v: ddpc.logcumsumexp(v, 1) * w, x[:2] / 100)
    assert ddpc.logcumsumexp(t(x, dtype=ddpc.float16), 1).dtype is ddpc.float16
    with pytest.raises(TypeError, match="floating"):
        ddpc.logcumsumexp(t([1, 2]), 0)


# ---- gather and scatter --------------------------------------------------------------------

def test_gather_scatter():
    x = RNG.standard_normal((3, 4))
    idx = np.array([[0, 3], [1, 1], [2, 0]])
    a, i = t(x), t(idx)
    close(a.gather(1, i), np.take_along_axis(x, idx, 1))
    idx0 = np.array([[2, 0, 1, 1]])
    close(ddpc.gather(a, 0, t(idx0)), np.take_along_axis(x, idx0, 0))
    src = RNG.standard_normal((3, 2))
    ref = x.copy()
    np.put_along_axis(ref, idx[:, :1], src[:, :1], 1)
    close(a.scatter(1, t(idx[:, :1]), t(src)), ref)  # src larger than the index: its front part
    ref = x.copy()
    np.put_along_axis(ref, idx, 7.0, 1)
    close(ddpc.scatter(a, 1, i, value=7.0), ref)
    ref = x.copy()
    np.add.at(ref, (np.arange(3)[:, None], idx), src)
    close(a.scatter_add(1, i, t(src)), ref)
    close(ddpc.scatter(a, 1, i, t(src), reduce="add"), ref)
    b = t(x.copy())
    assert b.scatter_add_(1, i, t(src)) is b
    close(b, ref)
    with pytest.raises(ValueError):
        a.gather(1, t([[4]]))
    with pytest.raises(ValueError):
        a.scatter_add(1, t([[-1]]), t(src))
    close(a.gather(1, t(idx.astype(np.int32))), a.gather(1, t(idx)))  # int32 indices too, as PyTorch
    with pytest.raises(TypeError):
        a.gather(1, t(idx.astype(np.float32)))
    with pytest.raises(ValueError):
        a.gather(1, t([0, 1]))


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "int32", "uint8"])
def test_scatter_add_in_narrow_dtypes(dtype):
    x = np.array([[1, 2, 3], [4, 5, 6]])
    idx = np.array([[0, 0], [2, 1]])
    src = np.array([[1, 2], [3, 4]])
    ref = x.copy()
    np.add.at(ref, (np.arange(2)[:, None], idx), src)
    got = t(x).to(dtype).scatter_add(1, t(idx), t(src).to(dtype))
    assert got.dtype is getattr(ddpc, dtype)
    close(got.float(), ref)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_sort_topk_gather_gradients_in_16_bit(dtype):
    a = t([3.0, 1.0, 2.0]).to(dtype).requires_grad_()
    (a.sort().values * t([1.0, 10.0, 100.0]).to(dtype)).sum().backward()
    close(a.grad.float(), [100.0, 1.0, 10.0])
    b = t([3.0, 1.0, 2.0]).to(dtype).requires_grad_()
    b.topk(2).values.sum().backward()
    close(b.grad.float(), [1.0, 0.0, 1.0])


def test_gather_scatter_gradients():
    x = RNG.standard_normal((3, 4))
    idx = t(np.array([[0, 3, 3], [1, 1, 2], [2, 0, 0]]))
    w = t(np.arange(9.0).reshape(3, 3))
    check_grad(lambda v: v.gather(1, idx) * w, x)
    check_grad(lambda v: v.scatter_add(1, idx, t(np.ones((3, 3)))) * t(np.arange(12.0).reshape(3, 4)), x)
    src = RNG.standard_normal((3, 3))
    check_grad(lambda s: t(x).scatter_add(1, idx, s) * t(np.arange(12.0).reshape(3, 4)), src)
    check_grad(lambda s: t(x).scatter(1, idx[:, :1], s) * t(np.arange(12.0).reshape(3, 4)), src)
    check_grad(lambda v: v.scatter(1, idx[:, :1], t(src)) * t(np.arange(12.0).reshape(3, 4)), x)


def test_index_add_take_masked_select():
    x = RNG.standard_normal((4, 3))
    src = RNG.standard_normal((3, 3))
    idx = np.array([0, 2, 0])
    ref = x.copy()
    np.add.at(ref, idx, 2 * src)
    close(t(x).index_add(0, t(idx), t(src), alpha=2), ref)
    src1 = RNG.standard_normal((4, 3))
    ref = x.copy()
    np.add.at(ref.T, idx, src1.T)
    close(ddpc.index_add(t(x), 1, t(idx), t(src1)), ref)
    b = t(x.copy())
    assert b.index_add_(0, t(idx), t(src)) is b
    close(b, x + np.eye(4)[idx].T @ src)
    check_grad(lambda s: t(x).index_add(0, t(idx), s) * t(np.arange(12.0).reshape(4, 3)), src)
    close(t(x).take(t([[0, 11], [-1, 5]])), np.take(x, [[0, 11], [-1, 5]]))
    check_grad(lambda v: ddpc.take(v, t([0, 0, 7])), x)
    mask = x > 0
    close(t(x).masked_select(t(mask)), x[mask])
    close(ddpc.masked_select(t(x), t(np.array([True, False, True]))), x[:, [0, 2]].reshape(-1))


# ---- sorting ---------------------------------------------------------------------------------

@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.int64])
def test_sort_stable_and_nan(dtype):
    x = RNG.integers(0, 4, (5, 7)).astype(dtype)
    if dtype is not np.int64:
        x[1, 3] = x[2, 0] = np.nan
    a = t(x)
    for d in (0, 1):
        v, i = a.sort(d, stable=True)
        ref = np.argsort(x, d, kind="stable")
        close(i, ref)
        close(v, np.take_along_axis(x, ref, d))
        v, i = ddpc.sort(a, d, descending=True)
        key = -np.where(np.isnan(x), np.inf, x) if dtype is not np.int64 else -x
        ref = np.argsort(key, d, kind="stable")
        close(i, ref)
        close(ddpc.argsort(a, d, descending=True), ref)


def test_topk_unique_and_sort_grad():
    x = np.array([[1.0, 5.0, 3.0, 5.0], [0.0, -1.0, 2.0, 2.0]])
    v, i = t(x).topk(2)
    close(v, [[5, 5], [2, 2]])
    close(i, [[1, 3], [2, 3]])
    v, i = ddpc.topk(t(x), 3, dim=1, largest=False)
    close(v, [[1, 3, 5], [-1, 0, 2]])
    close(i, [[0, 2, 1], [1, 0, 2]])
    with pytest.raises(ValueError):
        t(x).topk(5)
    u, inv, cnt = ddpc.unique(t(x), return_inverse=True, return_counts=True)
    ru, rinv, rcnt = np.unique(x, return_inverse=True, return_counts=True)
    close(u, ru)
    close(inv, rinv.reshape(x.shape))
    close(cnt, rcnt)
    close(t([3, 1, 3]).unique(), [1, 3])
    check_grad(lambda v: v.sort(1).values * t(np.arange(8.0).reshape(2, 4)), RNG.standard_normal((2, 4)))
    check_grad(lambda v: v.topk(2, 0).values * 3, RNG.standard_normal((3, 4)))


# ---- matrix products ----------------------------------------------------------------------------

def test_matrix_products():
    a, b = RNG.standard_normal((3, 4)), RNG.standard_normal((4, 2))
    v, w = RNG.standard_normal(4), RNG.standard_normal(3)
    close(ddpc.mm(t(a), t(b)), a @ b)
    close(ddpc.mv(t(a), t(v)), a @ v)
    close(t(v).dot(t(v)), v @ v)
    close(ddpc.outer(t(w), t(v)), np.outer(w, v))
    c = RNG.standard_normal((3, 2))
    close(ddpc.addmm(t(c), t(a), t(b), beta=0.5, alpha=2), 0.5 * c + 2 * a @ b)
    x, y = RNG.standard_normal((5, 3, 4)), RNG.standard_normal((5, 4, 2))
    close(ddpc.bmm(t(x), t(y)), x @ y)
    check_grad(lambda p: ddpc.bmm(p, t(y)) * t(np.arange(30.0).reshape(5, 3, 2)), x)
    check_grad(lambda q: ddpc.bmm(t(x), q), y)
    check_grad(lambda p: ddpc.mv(p, t(v)) + ddpc.outer(t(w), p[0]).sum(1), a)
    with pytest.raises(ValueError):
        ddpc.bmm(t(x), t(x))
    with pytest.raises(ValueError):
        ddpc.dot(t(v), t(w))


@pytest.mark.parametrize("dtype", ["int64", "int32", "uint8"])
def test_integer_matrix_products_keep_the_dtype(dtype):
    a, b = np.array([[2, 3], [4, 5]]), np.array([[7, 1, 0], [8, 2, 1]])
    got = t(a).to(dtype) @ t(b).to(dtype)
    assert got.dtype is getattr(ddpc, dtype) and got.tolist() == (a @ b).tolist()
    assert ddpc.bmm(t(a[None]).to(dtype), t(b[None]).to(dtype)).tolist() == [(a @ b).tolist()]
    v = t(np.array([1, 2])).to(dtype)
    assert ddpc.mv(t(a).to(dtype), v).tolist() == (a @ [1, 2]).tolist()
    assert v.dot(v).dtype is getattr(ddpc, dtype) and int(v.dot(v)) == 5


def test_linear_with_no_features_and_with_a_1d_weight():
    x = t(np.ones((4, 3)), requires_grad=True)
    w = t(np.ones((0, 3)), requires_grad=True)
    b = t(np.ones(0), requires_grad=True)
    y = ddpc.nn.functional.linear(x, w, b)
    assert y.shape == (4, 0)
    y.sum().backward()
    assert x.grad.tolist() == [[0.0] * 3] * 4 and w.grad.shape == (0, 3) and b.grad.shape == (0,)
    v = RNG.standard_normal(3)
    close(ddpc.nn.functional.linear(t(np.eye(3)[:2]), t(v)), v[:2])


def test_sum_and_mean_functions_take_dtype():
    x = np.array([[1, 2], [3, 4]])
    got = ddpc.sum(t(x), 0, dtype=ddpc.float32)
    assert got.dtype is ddpc.float32 and got.tolist() == [4.0, 6.0]
    got = ddpc.mean(t(x), (0, 1), True, dtype=ddpc.float64)
    assert got.dtype is ddpc.float64 and got.tolist() == [[2.5]]
    half = t(np.full(3, 40000.0)).half()  # float16 holds 40000 but not the sum
    assert ddpc.sum(half, dtype=ddpc.float32).item() == 120000.0


def test_errors():
    a = t(np.zeros((2, 3)))
    with pytest.raises(IndexError):
        a.cumsum(2)
    with pytest.raises(IndexError):
        a.var(5)
    with pytest.raises(ValueError):
        t(np.zeros((2, 0))).amax(1)


# ---- GPU against the host -----------------------------------------------------------------------

GPU_CASES = [
    ("folds", lambda a: a.cumsum(1) * 2 + a.cumprod(0) + a.prod(1, keepdim=True)),
    ("gather", lambda a: a.gather(1, ddpc.tensor([[0, 4, 4], [1, 1, 0], [3, 2, 2], [0, 0, 0]], device=a.device))
     .sum(1, keepdim=True) + a),
    ("scatter_add", lambda a: a.scatter_add(0, ddpc.tensor([[0, 3, 3, 1, 0]] * 3, device=a.device), a[:3] * 2)),
    ("scatter", lambda a: a.scatter(1, ddpc.tensor([[4], [0], [2], [1]], device=a.device), a[:, :2])),
    ("reductions", lambda a: a.var(1, keepdim=True) + a.std(0) + a.amax(1, keepdim=True) + a.logsumexp(0)
     + a.norm(1, 0)),
    ("layout", lambda a: a.flip(0, 1) + a.roll(2, 1) + a.tril() * a.sort(1).values + a.topk(2, 0).values.sum(0)),
    ("logcumsumexp", lambda a: a.logcumsumexp(1) * 2 + ddpc.logcumsumexp(a * 300, 0)),
]


@pytest.mark.gpu
@pytest.mark.parametrize("name,fn", GPU_CASES, ids=[c[0] for c in GPU_CASES])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gpu_matches_host(name, fn, dtype):
    x = RNG.standard_normal((4, 5)).astype(dtype)
    results = []
    for device in ("cpu", "cuda"):
        a = ddpc.tensor(x, device=device, requires_grad=True)
        out = fn(a)
        out.backward(ddpc.tensor(np.arange(out.numel(), dtype=dtype).reshape(out.shape), device=device))
        results.append((np.asarray(out.detach().cpu()), np.asarray(a.grad.cpu())))
    tol = 1e-4 if dtype == np.float32 else 1e-10
    for h, d in zip(*results):
        np.testing.assert_allclose(d, h, rtol=tol, atol=tol)


@pytest.mark.gpu
def test_gpu_int64_folds_and_index_errors():
    x = RNG.integers(-5, 5, (6, 7))
    for device in ("cpu", "cuda"):
        a = ddpc.tensor(x, device=device)
        close(a.cumsum(0), np.cumsum(x, 0))
        close(a.prod(1), np.prod(x, 1))
        close(a.scatter_add(1, ddpc.tensor([[0, 0]] * 6, device=device), a[:, :2]),
              x + np.stack([x[:, 0] + x[:, 1]] + [np.zeros(6, int)] * 6, 1))
        with pytest.raises(ddpc.IndexOutOfRangeError):  # on a GPU at the copy that waits for the kernel
            a.gather(0, ddpc.tensor([[6]], device=device)).cpu()


def _sum_of_all(x, device):
    """_C.sum of x on device: the op behind a.sum(), which sums 16-bit floats in float32 before reaching it."""
    out_dtype = x.dtype if x.dtype.is_floating_point else ddpc.int64
    out = ddpc.empty((), dtype=out_dtype, device=device)
    ddpc._C.sum(out._buf, x.to(device=device)._buf)
    return out.cpu().item()


@pytest.mark.gpu
@pytest.mark.parametrize("n", [0, 1, 1000, 3_000_017, 9_000_000])
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "bfloat16"])
def test_gpu_sum_of_all_elements_matches_the_host(n, dtype):
    # Both accumulate in double and round once; only the order of the additions differs. The
    # 16-bit sums stay near sqrt(n), within float16's range.
    wide = dtype in ("float32", "float64")
    x = ddpc.tensor(RNG.standard_normal(n) + (0.25 if wide else 0.0), dtype=getattr(ddpc, dtype))
    host, device = _sum_of_all(x, "cpu"), _sum_of_all(x, "cuda")
    exact = float(np.sum(x.double().numpy(), dtype=np.float64))
    assert host == pytest.approx(exact, rel={"float64": 1e-12, "float32": 1e-6}.get(dtype, 1e-2), abs=1e-9)
    assert device == pytest.approx(host, rel={"float64": 1e-12, "float32": 1e-6}.get(dtype, 1e-2), abs=1e-9)
    if wide and n:
        assert ddpc.sum(x.cuda()).item() == pytest.approx(host, rel=1e-6)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype,high", [("int64", 2**62), ("int32", 2**31 - 1), ("uint8", 256)])
def test_gpu_sum_of_all_integers_is_exact_and_wraps_as_on_the_host(dtype, high):
    x = ddpc.tensor(RNG.integers(-high if dtype != "uint8" else 0, high, 5_000_003), dtype=getattr(ddpc, dtype))
    assert _sum_of_all(x, "cuda") == _sum_of_all(x, "cpu")


@pytest.mark.gpu
def test_gpu_float32_prod_overflows_as_the_host():
    x = np.array([[1e30, 1e30, 1e-30, 1e-30], [1e-30, 1e-30, 1e30, 1e30]], dtype=np.float32)
    for dim in (0, 1):
        t = np.ascontiguousarray(x if dim == 1 else x.T)
        got = ddpc.tensor(t, device="cuda").prod(dim).cpu().numpy()
        np.testing.assert_array_equal(got, ddpc.tensor(t).prod(dim).numpy())
        np.testing.assert_array_equal(got, [np.inf, 0.0])
