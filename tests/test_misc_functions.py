"""The smaller torch-namespace functions: elementwise (logaddexp, logaddexp2,
copysign, signbit, heaviside, deg2rad, rad2deg, sinc, frexp, ldexp, gcd, lcm), layout
(rot90, trapz, cumulative_trapezoid, vander, combinations, hsplit, vsplit,
dsplit, is_nonzero, scatter_reduce), statistics (cov, corrcoef), dtype limits
(finfo, iinfo) and printing options, against numpy and closed forms;
gradients against finite differences; on a GPU (marked gpu) the CUDA ops of
scatter_reduce, gcd and lcm against the host's."""

import itertools

import numpy as np
import pytest
from numeric import numeric_grad

import ddpc

RNG = np.random.default_rng(12)
SPECIAL = np.array([0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, 1e-30, -7e5])


def check_grad(f, *xs, rtol=1e-5, atol=1e-6):
    ts = [ddpc.tensor(x, dtype="float64", requires_grad=True) for x in xs]
    f(*ts).sum().backward()
    for i, x in enumerate(xs):
        def scalar(v, i=i):
            args = [ddpc.tensor(v if j == i else xs[j], dtype="float64") for j in range(len(xs))]
            return float(f(*args).sum().item())
        np.testing.assert_allclose(ts[i].grad.numpy(), numeric_grad(scalar, x), rtol=rtol, atol=atol)


# ---- elementwise ---------------------------------------------------------------------------

def test_logaddexp_logaddexp2_match_numpy():
    a = np.concatenate([RNG.standard_normal(20) * 30, [np.inf, -np.inf, np.inf, -np.inf, 800.0]])
    b = np.concatenate([RNG.standard_normal(20) * 30, [np.inf, -np.inf, -np.inf, 3.0, 800.0]])
    for fn, ref in ((ddpc.logaddexp, np.logaddexp), (ddpc.logaddexp2, np.logaddexp2)):
        got = fn(ddpc.tensor(a), ddpc.tensor(b))
        np.testing.assert_allclose(got.numpy(), ref(a, b), rtol=1e-13)
        got32 = fn(ddpc.tensor(a, dtype="float32"), ddpc.tensor(b, dtype="float32"))
        assert got32.dtype is ddpc.float32
        np.testing.assert_allclose(got32.numpy(), ref(a.astype(np.float32), b.astype(np.float32)), rtol=1e-6)
    assert ddpc.tensor([1.0]).logaddexp(ddpc.tensor([2.0], dtype="float64")).dtype is ddpc.float64
    with pytest.raises(TypeError):
        ddpc.logaddexp(ddpc.tensor([1]), ddpc.tensor([2]))
    x, y = RNG.standard_normal(6), RNG.standard_normal(6)
    y[0] = x[0]
    check_grad(ddpc.logaddexp, x, y)
    check_grad(ddpc.logaddexp2, x, y)


def test_copysign_signbit_heaviside():
    b = SPECIAL[::-1].copy()
    got = ddpc.copysign(ddpc.tensor(SPECIAL), ddpc.tensor(b))
    np.testing.assert_array_equal(np.signbit(got.numpy()), np.signbit(np.copysign(SPECIAL, b)))
    np.testing.assert_array_equal(got.numpy(), np.copysign(SPECIAL, b))
    assert ddpc.copysign(ddpc.tensor([1, 2]), -1).dtype is ddpc.float32
    np.testing.assert_array_equal(ddpc.signbit(ddpc.tensor(SPECIAL)).numpy(), np.signbit(SPECIAL))
    np.testing.assert_array_equal(ddpc.tensor([-3, 0, 4]).signbit().numpy(), [1, 0, 0])
    x = np.array([-1.0, 0.0, 2.0, -0.0, np.nan])
    got = ddpc.heaviside(ddpc.tensor(x), ddpc.tensor([0.5], dtype="float64"))
    np.testing.assert_array_equal(got.numpy(), [0.0, 0.5, 1.0, 0.5, 0.0])
    with pytest.raises(TypeError):
        ddpc.heaviside(ddpc.tensor(x), ddpc.tensor([1], dtype="int64"))
    x, y = RNG.standard_normal(5), RNG.standard_normal(5)
    check_grad(lambda a: ddpc.copysign(a, ddpc.tensor(y)), x)


def test_angles_sinc_frexp_ldexp():
    x = RNG.standard_normal(10) * 100
    np.testing.assert_allclose(ddpc.deg2rad(ddpc.tensor(x)).numpy(), np.deg2rad(x), rtol=1e-15)
    np.testing.assert_allclose(ddpc.rad2deg(ddpc.tensor(x)).numpy(), np.rad2deg(x), rtol=1e-15)
    assert ddpc.deg2rad(ddpc.tensor([180])).dtype is ddpc.float32
    s = np.concatenate([[0.0, 1.0, -2.0, 0.5], RNG.standard_normal(8)])
    np.testing.assert_allclose(ddpc.sinc(ddpc.tensor(s)).numpy(), np.sinc(s), rtol=1e-13, atol=1e-15)
    check_grad(ddpc.sinc, np.array([0.3, -1.7, 2.5]))
    f = np.concatenate([SPECIAL, [np.nan, 3.0, 0.5, 1.0, 2.0 ** -1074, np.finfo(np.float64).max, 1e-40]])
    for dtype, npt in (("float64", np.float64), ("float32", np.float32)):
        with np.errstate(over="ignore"):  # float64's largest number is inf in float32
            held = f.astype(npt)
        m, e = ddpc.frexp(ddpc.tensor(held, dtype=dtype))
        want_m, want_e = np.frexp(held)
        assert m.dtype.name == dtype and e.dtype is ddpc.int32
        np.testing.assert_array_equal(m.numpy(), want_m)
        np.testing.assert_array_equal(e.numpy()[np.isfinite(held)], want_e[np.isfinite(held)])
    r = ddpc.tensor([3.0]).frexp()
    assert r.mantissa.item() == 0.75 and r.exponent.item() == 2
    e = RNG.integers(-10, 10, 6)
    np.testing.assert_array_equal(ddpc.ldexp(ddpc.tensor(x[:6]), ddpc.tensor(e)).numpy(),
                                  np.ldexp(x[:6], e))
    check_grad(lambda a: ddpc.ldexp(a, ddpc.tensor(e)), x[:6])


def test_gcd_lcm_match_numpy():
    a = np.concatenate([RNG.integers(-60, 60, 40), [0, 0, 7, -12, 2 ** 40]])
    b = np.concatenate([RNG.integers(-60, 60, 40), [0, 5, 0, 18, 6 * 2 ** 35]])
    for dtype in ("int64", "int32", "uint8"):
        x, y = (np.abs(a) % 256, np.abs(b) % 256) if dtype == "uint8" else (a, b)
        if dtype == "int32":
            x, y = x % 2 ** 31, y % 2 ** 31
        x, y = x.astype(dtype), y.astype(dtype)
        got = ddpc.gcd(ddpc.tensor(x), ddpc.tensor(y))
        assert got.dtype.name == dtype
        np.testing.assert_array_equal(got.numpy(), np.gcd(x, y))
        small = np.abs(x) < 2 ** 7
        np.testing.assert_array_equal(ddpc.tensor(x[small]).lcm(ddpc.tensor(y[small])).numpy(),
                                      np.lcm(x[small], y[small]))
    col = ddpc.tensor([[12], [18]])
    np.testing.assert_array_equal(ddpc.gcd(col, ddpc.tensor([8, 27])).numpy(), np.gcd([[12], [18]], [8, 27]))
    np.testing.assert_array_equal(ddpc.gcd(ddpc.tensor([12, 9]), 6).numpy(), [6, 3])
    assert ddpc.gcd(ddpc.tensor([-2 ** 63]), ddpc.tensor([0])).item() == -2 ** 63  # |INT64_MIN| wraps, as PyTorch
    with pytest.raises(TypeError):
        ddpc.gcd(ddpc.tensor([1.0]), ddpc.tensor([2.0]))
    t = ddpc.tensor([4, 6])
    t.lcm_(ddpc.tensor([6, 4]))
    np.testing.assert_array_equal(t.numpy(), [12, 12])


@pytest.mark.gpu
def test_gpu_gcd_lcm_match_the_host():
    for dtype in ("uint8", "int32", "int64"):
        a = ddpc.tensor(RNG.integers(0, 120, 5000), dtype=dtype)
        b = ddpc.tensor(RNG.integers(0, 120, 5000), dtype=dtype)
        for fn in (ddpc.gcd, ddpc.lcm):
            d = fn(a.cuda(), b.cuda())
            assert d.is_cuda
            np.testing.assert_array_equal(d.cpu().numpy(), fn(a, b).numpy())


# ---- layout ---------------------------------------------------------------------------------

def test_rot90_matches_numpy():
    x = RNG.standard_normal((2, 3, 4))
    for k in range(-5, 6):
        for dims in ((0, 1), (1, 2), (2, 0), (-1, -2)):
            np.testing.assert_array_equal(ddpc.rot90(ddpc.tensor(x), k, dims).numpy(), np.rot90(x, k, dims))
    with pytest.raises(ValueError):
        ddpc.rot90(ddpc.tensor(x), 1, (0, 0))
    with pytest.raises(ValueError):
        ddpc.tensor([1.0]).rot90()
    check_grad(lambda t: ddpc.rot90(t, 1) * ddpc.arange(8, dtype=ddpc.float64).reshape(4, 2), x[0, :2])


def test_trapz_and_cumulative_trapezoid():
    y = RNG.standard_normal((3, 6))
    xs = np.sort(RNG.standard_normal(6))
    np.testing.assert_allclose(ddpc.trapz(ddpc.tensor(y), ddpc.tensor(xs)).numpy(), np.trapezoid(y, xs)
                               if hasattr(np, "trapezoid") else np.trapz(y, xs), rtol=1e-12)
    want = np.cumsum((y[:, 1:] + y[:, :-1]) / 2 * np.diff(xs), axis=1)
    np.testing.assert_allclose(ddpc.cumulative_trapezoid(ddpc.tensor(y), ddpc.tensor(xs)).numpy(), want, rtol=1e-12)
    want = np.cumsum((y[1:] + y[:-1]) / 2 * 0.5, axis=0)
    np.testing.assert_allclose(ddpc.cumulative_trapezoid(ddpc.tensor(y), dx=0.5, dim=0).numpy(), want, rtol=1e-12)
    check_grad(lambda t: ddpc.cumulative_trapezoid(t, ddpc.tensor(xs)), y)


def test_vander_and_combinations():
    x = np.array([2.0, -1.0, 0.5, 3.0])
    for n in (None, 1, 3, 6):
        for inc in (False, True):
            np.testing.assert_allclose(ddpc.vander(ddpc.tensor(x), n, inc).numpy(), np.vander(x, n, inc), rtol=1e-15)
    got = ddpc.vander(ddpc.tensor([1, 2, 3], dtype="int32"))
    assert got.dtype is ddpc.int64
    np.testing.assert_array_equal(got.numpy(), np.vander([1, 2, 3]))
    assert ddpc.vander(ddpc.tensor(x), 0).shape == (4, 0)
    check_grad(lambda t: ddpc.vander(t, 4), x)
    v = np.array([5.0, 6.0, 7.0, 8.0])
    for r in (1, 2, 3, 5):
        for rep in (False, True):
            pick = itertools.combinations_with_replacement if rep else itertools.combinations
            want = np.array([list(c) for c in pick(v, r)]).reshape(-1, r)
            np.testing.assert_array_equal(ddpc.combinations(ddpc.tensor(v), r, rep).numpy(), want)
    assert ddpc.combinations(ddpc.tensor(v), 0).shape == (0,)


def test_splits_and_is_nonzero():
    x = np.arange(24.0).reshape(2, 4, 3)
    t = ddpc.tensor(x)
    for fn, ref in ((ddpc.hsplit, np.hsplit), (ddpc.vsplit, np.vsplit), (ddpc.dsplit, np.dsplit)):
        for arg in (1, [1, 2], [0, 5]):
            got, want = fn(t, arg), ref(x, arg)
            assert len(got) == len(want)
            for g, w in zip(got, want):
                np.testing.assert_array_equal(g.numpy(), w)
    np.testing.assert_array_equal(t.hsplit(2)[1].numpy(), np.hsplit(x, 2)[1])
    with pytest.raises(ValueError, match="divisible"):
        ddpc.hsplit(t, 3)
    with pytest.raises(ValueError, match="at least 3"):
        ddpc.dsplit(ddpc.zeros(2, 2), 1)
    np.testing.assert_array_equal(ddpc.hsplit(ddpc.arange(6), 3)[2].numpy(), [4, 5])
    assert ddpc.is_nonzero(ddpc.tensor([2.0])) and not ddpc.tensor([[0]]).is_nonzero()
    for bad in (ddpc.zeros(0), ddpc.zeros(2)):
        with pytest.raises(RuntimeError, match="ambiguous"):
            ddpc.is_nonzero(bad)


# ---- scatter_reduce ---------------------------------------------------------------------------

def ref_scatter_reduce(x, dim, index, src, reduce, include_self):
    """A loop over index elements, as the definition reads (means of integers round down)."""
    out = x.astype(np.float64).copy()
    seen = {}
    for pos in np.ndindex(index.shape):
        target = pos[:dim] + (index[pos],) + pos[dim + 1:]
        seen.setdefault(target, [x[target]] if include_self else []).append(src[pos])
    ops = {"sum": np.sum, "prod": np.prod, "mean": np.mean, "amax": np.max, "amin": np.min}
    for target, vals in seen.items():
        v = ops[reduce](np.array(vals, dtype=np.float64))
        out[target] = np.floor(v) if reduce == "mean" and x.dtype.kind in "iu" else v
    return out


@pytest.mark.parametrize("reduce", ["sum", "prod", "mean", "amax", "amin"])
def test_scatter_reduce_matches_the_reference(reduce):
    for dtype in ("float32", "float64", "int32", "int64", "uint8", "float16"):
        for shape, dim, ishape in [((5,), 0, (8,)), ((4, 5), 0, (6, 5)), ((4, 5), 1, (3, 7)),
                                   ((2, 3, 4), 2, (2, 2, 6))]:
            x = RNG.integers(1, 5, shape).astype(np.float64)
            src = RNG.integers(0 if dtype == "uint8" else -3, 4, ishape).astype(np.float64)
            # The index reaches no further than src in any dim, nor than x outside dim.
            index = RNG.integers(0, shape[dim], tuple(n if k == dim else min(n, shape[k])
                                                     for k, n in enumerate(ishape)))
            npd = np.float32 if dtype == "float16" else np.dtype(dtype)
            for include_self in (True, False):
                got = ddpc.tensor(x, dtype=dtype).scatter_reduce(dim, ddpc.tensor(index), ddpc.tensor(src, dtype=dtype),
                                                                 reduce, include_self=include_self)
                want = ref_scatter_reduce(x.astype(npd), dim, index, src.astype(npd), reduce, include_self)
                assert got.dtype.name == dtype
                if dtype in ("int32", "int64", "uint8"):
                    want = want.astype(np.int64).astype(npd)
                np.testing.assert_allclose(got.double().numpy() if got.dtype.is_floating_point else got.numpy(),
                                           want, rtol=1e-3 if dtype == "float16" else 1e-6,
                                           err_msg=f"{dtype} {shape} {dim} {include_self}")


def test_scatter_with_reduce_is_scatter_reduce_with_the_input():
    index = RNG.integers(0, 4, (6, 5))
    for dtype in ("float32", "float64", "int32", "int64", "uint8"):
        x = RNG.integers(1, 5, (4, 5)).astype(dtype)
        src = RNG.integers(0, 4, (7, 6)).astype(dtype)
        for reduce, named in (("add", "sum"), ("multiply", "prod")):
            want = ref_scatter_reduce(x, 0, index, src, named, True).astype(dtype)
            np.testing.assert_array_equal(ddpc.tensor(x).scatter(0, ddpc.tensor(index), ddpc.tensor(src),
                                                                 reduce=reduce).numpy(), want, err_msg=dtype)
            in_place = ddpc.tensor(x)
            in_place.scatter_(0, ddpc.tensor(index), ddpc.tensor(src), reduce=reduce)
            np.testing.assert_array_equal(in_place.numpy(), want, err_msg=dtype)
            value = ref_scatter_reduce(x, 0, index, np.full(index.shape, 3, dtype), named, True).astype(dtype)
            np.testing.assert_array_equal(ddpc.tensor(x).scatter(0, ddpc.tensor(index), 3, reduce=reduce).numpy(),
                                          value, err_msg=dtype)
            np.testing.assert_array_equal(ddpc.tensor(x).scatter(0, ddpc.tensor(index), value=3,
                                                                 reduce=reduce).numpy(), value, err_msg=dtype)
    with pytest.raises(ValueError, match="'add' or 'multiply'"):
        ddpc.ones(4, 5).scatter(0, ddpc.tensor(index), 2.0, reduce="mean")
    check_grad(lambda t, u: t.scatter(0, ddpc.tensor(index[:2, :3]), u, reduce="multiply"),
               RNG.standard_normal((4, 5)), RNG.standard_normal((2, 3)))


def test_scatter_reduce_nan_errors_and_gradients():
    x = ddpc.tensor([1.0, 2.0, 3.0])
    got = x.scatter_reduce(0, ddpc.tensor([0, 0, 1]), ddpc.tensor([np.nan, 5.0, -1.0]), "amax")
    assert np.isnan(got[0].item()) and got[1].item() == 2.0
    with pytest.raises(ValueError):
        x.scatter_reduce(0, ddpc.tensor([0]), x, "max")
    with pytest.raises(TypeError):
        x.scatter_reduce(0, ddpc.tensor([0]), ddpc.tensor([1], dtype="int64"), "sum")
    with pytest.raises((ValueError, IndexError)):
        x.scatter_reduce(0, ddpc.tensor([3]), x, "sum")
    index = np.array([[0, 2, 0, 1], [1, 1, 1, 0]])
    a = np.round(RNG.standard_normal((2, 3)) * 4) / 4 + 0.1
    s = RNG.standard_normal((2, 5))
    s[0, 2] = 0.0
    s[1, 3] = a[1, 0]  # a tie with the input element it lands on
    for reduce in ("sum", "prod", "mean", "amax", "amin"):
        for include_self in (True, False):
            def f(t, u, reduce=reduce, include_self=include_self):
                return ddpc.scatter_reduce(t, 1, ddpc.tensor(index), u, reduce, include_self=include_self) * \
                    ddpc.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]], dtype="float64")
            check_grad(f, a, s)
    c = ddpc.tensor(a)
    c.scatter_reduce_(1, ddpc.tensor(index), ddpc.tensor(s), "amin")
    assert c.shape == (2, 3) and float(c.sum().item()) <= a.sum()


# ---- covariance ---------------------------------------------------------------------------

def test_cov_corrcoef_match_numpy():
    x = RNG.standard_normal((3, 9))
    fw, aw = RNG.integers(1, 4, 9), RNG.random(9) + 0.1
    for correction in (0, 1, 2):
        np.testing.assert_allclose(ddpc.cov(ddpc.tensor(x), correction=correction).numpy(),
                                   np.cov(x, ddof=correction), rtol=1e-12)
        got = ddpc.cov(ddpc.tensor(x), correction=correction, fweights=ddpc.tensor(fw), aweights=ddpc.tensor(aw))
        np.testing.assert_allclose(got.numpy(), np.cov(x, ddof=correction, fweights=fw, aweights=aw), rtol=1e-12)
    np.testing.assert_allclose(ddpc.tensor(x).corrcoef().numpy(), np.corrcoef(x), rtol=1e-12)
    one = ddpc.cov(ddpc.tensor(x[0]))
    assert one.ndim == 0 and np.isclose(one.item(), np.cov(x[0]))
    assert ddpc.cov(ddpc.tensor([[1, 2, 4]])).dtype is ddpc.float32
    assert np.isinf(ddpc.cov(ddpc.tensor([[1.0, 2.0]]), correction=3).item())
    with pytest.raises(ValueError):
        ddpc.cov(ddpc.tensor(x), fweights=ddpc.tensor([-1] * 9))
    with pytest.raises(TypeError):
        ddpc.cov(ddpc.tensor(x), fweights=ddpc.tensor(aw))
    check_grad(lambda t: ddpc.cov(t, aweights=ddpc.tensor(aw)), x)
    check_grad(ddpc.corrcoef, x)


# ---- dtype limits and printing ---------------------------------------------------------------

@pytest.mark.parametrize("name", ["float16", "float32", "float64"])
def test_finfo_matches_numpy(name):
    f, n = ddpc.finfo(getattr(ddpc, name)), np.finfo(name)
    assert (f.bits, f.eps, f.max, f.min, f.tiny, f.smallest_normal, f.resolution) == (
        n.bits, float(n.eps), float(n.max), float(n.min), float(n.tiny), float(n.smallest_normal), 10.0 ** -n.precision)
    assert f.dtype == name


def test_finfo_bfloat16_iinfo_and_errors():
    f = ddpc.finfo(ddpc.bfloat16)
    assert (f.bits, f.eps, f.max, f.tiny, f.resolution) == (16, 2.0 ** -7, 3.3895313892515355e+38, 2.0 ** -126, 0.01)
    # eps is the gap after 1 and max the largest finite value, as the dtype rounds them
    assert ddpc.tensor([1 + f.eps], dtype="bfloat16").item() > 1
    assert ddpc.tensor([1 + f.eps / 2], dtype="bfloat16").item() == 1
    assert np.isfinite(ddpc.tensor([f.max], dtype="bfloat16").float().item())
    assert ddpc.finfo().dtype == "float32"
    for name in ("uint8", "int32", "int64"):
        i, n = ddpc.iinfo(getattr(ddpc, name)), np.iinfo(name)
        assert (i.bits, i.min, i.max, i.dtype) == (n.bits, n.min, n.max, name)
    with pytest.raises(TypeError):
        ddpc.finfo(ddpc.int32)
    with pytest.raises(TypeError):
        ddpc.iinfo(ddpc.float32)
    assert "eps" in repr(ddpc.finfo(ddpc.float16)) and "max=255" in repr(ddpc.iinfo(ddpc.uint8))


def test_set_printoptions_changes_repr():
    t = ddpc.tensor([1.0 / 3, 2.0e-5, 12345.678])
    try:
        ddpc.set_printoptions(precision=2)
        assert "0.33" in repr(t[:1]) and "0.333" not in repr(t[:1])
        ddpc.set_printoptions(precision=3, sci_mode=True)
        assert "3.333e-01" in repr(t)
        ddpc.set_printoptions(sci_mode=False)
        assert "e-" not in repr(t) and "e+" not in repr(t)
        ddpc.set_printoptions(threshold=5, edgeitems=2)
        assert "..." in repr(ddpc.arange(100))
        ddpc.set_printoptions(linewidth=20)
        assert max(len(line) for line in repr(ddpc.arange(30)).splitlines()) <= 22
        ddpc.set_printoptions(profile="full")
        assert "..." not in repr(ddpc.arange(2000))
        with pytest.raises(ValueError):
            ddpc.set_printoptions(profile="long")
    finally:
        ddpc.set_printoptions(profile="default")
    assert "..." in repr(ddpc.arange(2000)) and repr(t[:1]) == "tensor([0.3333])"


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64", "int32", "int64", "uint8", "bfloat16"])
def test_gpu_scatter_reduce_matches_the_host(dtype):
    x = ddpc.tensor(RNG.integers(1, 4, (6, 50)), dtype=dtype)
    src = ddpc.tensor(RNG.integers(1, 3, (6, 4000)), dtype=dtype)  # products of 1s and 2s stay finite
    index = ddpc.tensor(RNG.integers(0, 50, (6, 4000)))
    if dtype.startswith(("float", "bfloat")):
        x[0, :5] = float("nan")
        src[1, :7] = float("nan")
    for reduce in ("sum", "prod", "mean", "amax", "amin"):
        for include_self in (True, False):
            h = x.scatter_reduce(1, index, src, reduce, include_self=include_self)
            d = x.cuda().scatter_reduce(1, index.cuda(), src.cuda(), reduce, include_self=include_self)
            assert d.is_cuda
            hv = h.double().numpy() if h.dtype.is_floating_point else h.numpy()
            dv = d.cpu().double().numpy() if d.dtype.is_floating_point else d.cpu().numpy()
            # Atomic products and sums of floats may add in another order.
            np.testing.assert_allclose(dv, hv, rtol=1e-5 if reduce in ("sum", "mean", "prod") else 0,
                                       err_msg=f"{reduce} {include_self}")
