"""Optional: searchsorted, bucketize, cummax/cummin, the order statistics,
bincount, histc, scatter_reduce, the smaller elementwise and layout
functions, cov/corrcoef, and finfo/iinfo of ddpc against PyTorch's on the same
inputs (skipped when torch is not installed): same dtypes, shapes, values
(NaN where PyTorch has NaN), indices and gradients. Each group runs in a
child process that imports torch before ddpc (see test_nn_extra_torch.py)
and fails there, printing what differs."""

from procs import run_torch_group, torch_group_test

DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8"]


def _sample(np, dtype, shape, seed, nan=True):
    """Small integers with ties (NaN and -0 among floats when ``nan``)."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0 if dtype == "uint8" else -4, 5, shape).astype(np.float32)
    if dtype.startswith(("float", "bfloat")) and x.size and nan:
        flat = x.reshape(-1)
        picks = rng.integers(0, flat.size, max(1, flat.size // 6))
        flat[picks] = rng.choice(np.array([np.nan, -0.0, 0.5], dtype=np.float32), picks.size)
    return x


def _both(torch, ddpc, x, dtype):
    return torch.tensor(x).to(getattr(torch, dtype)), ddpc.tensor(x, dtype=dtype)


def _same(np, got, want, what, rtol=0.0):
    """got (ddpc) equals want (torch) in shape, dtype name and every element (NaN equal)."""
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1], f"{what}: {got.dtype} vs {want.dtype}"
    assert tuple(got.shape) == tuple(want.shape), f"{what}: shape {tuple(got.shape)} vs {tuple(want.shape)}"
    g = got.double().numpy() if got.dtype.is_floating_point else got.numpy()
    w = want.detach().double().numpy() if want.dtype.is_floating_point else want.numpy()
    if rtol:
        np.testing.assert_allclose(g, w, rtol=rtol, atol=rtol, err_msg=what)
    else:
        np.testing.assert_array_equal(g, w, err_msg=what)


def _search(np, torch, ddpc):
    rng = np.random.default_rng(1)
    for dtype in DTYPES:
        seq = np.sort(_sample(np, dtype, (3, 12), 2, nan=False), -1)
        vals = _sample(np, dtype, (3, 7), 3)
        ts, ds = _both(torch, ddpc, seq, dtype)
        tv, dv = _both(torch, ddpc, vals, dtype)
        for right in (False, True):
            _same(np, ddpc.searchsorted(ds, dv, right=right), torch.searchsorted(ts, tv, right=right),
                  f"searchsorted {dtype} {right}")
            _same(np, ddpc.searchsorted(ds[0], dv, side="right" if right else "left", out_int32=True),
                  torch.searchsorted(ts[0], tv, side="right" if right else "left", out_int32=True),
                  f"searchsorted 1-d {dtype}")
            _same(np, ddpc.bucketize(dv, ds[1], right=right), torch.bucketize(tv, ts[1], right=right),
                  f"bucketize {dtype} {right}")
    unsorted = rng.standard_normal(9)
    order = np.argsort(unsorted)
    _same(np, ddpc.searchsorted(ddpc.tensor(unsorted), ddpc.tensor([0.0, 5.0]), sorter=ddpc.tensor(order)),
          torch.searchsorted(torch.tensor(unsorted), torch.tensor([0.0, 5.0]), sorter=torch.tensor(order)), "sorter")
    _same(np, ddpc.searchsorted(ddpc.tensor([1, 2, 3]), ddpc.tensor([1.5, 2.5])),
          torch.searchsorted(torch.tensor([1, 2, 3]), torch.tensor([1.5, 2.5])), "mixed dtypes")
    _same(np, ddpc.searchsorted(ddpc.tensor([1.0, 2.0, 2.0, 4.0]), 2.0),
          torch.searchsorted(torch.tensor([1.0, 2.0, 2.0, 4.0]), 2.0), "scalar value")


def _cumulative(np, torch, ddpc):
    for dtype in DTYPES:
        x = _sample(np, dtype, (4, 9), 4)
        tt, dt = _both(torch, ddpc, x, dtype)
        for dim in (0, 1):
            for name in ("cummax", "cummin"):
                want, got = getattr(torch, name)(tt, dim), getattr(ddpc, name)(dt, dim)
                _same(np, got.values, want.values, f"{name} {dtype} {dim}")
                _same(np, got.indices, want.indices, f"{name} {dtype} {dim}")
    x = np.random.default_rng(5).standard_normal((3, 8))
    w = np.arange(8.0)
    for name in ("cummax", "cummin"):
        tt, dt = torch.tensor(x, requires_grad=True), ddpc.tensor(x, requires_grad=True)
        (getattr(torch, name)(tt, 1).values * torch.tensor(w)).sum().backward()
        (getattr(ddpc, name)(dt, 1).values * ddpc.tensor(w)).sum().backward()
        _same(np, dt.grad, tt.grad, f"{name} gradient")


def _order(np, torch, ddpc):
    for dtype in DTYPES:
        for shape, dim in [((9,), 0), ((5, 8), 1), ((5, 8), 0), ((2, 3, 4), 1)]:
            x = _sample(np, dtype, shape, 6)
            tt, dt = _both(torch, ddpc, x, dtype)
            for name in ("median", "nanmedian"):
                if name == "nanmedian" and not dt.dtype.is_floating_point:
                    continue
                for keepdim in (False, True):
                    want, got = getattr(torch, name)(tt, dim, keepdim), getattr(ddpc, name)(dt, dim, keepdim)
                    _same(np, got.values, want.values, f"{name} {dtype} {shape} {dim}")
                    _same(np, got.indices, want.indices, f"{name} {dtype} {shape} {dim}")
                _same(np, getattr(ddpc, name)(dt), getattr(torch, name)(tt), f"{name} all {dtype}")
            for k in (1, 2, shape[dim]):
                # PyTorch leaves which of equal elements kthvalue's index points at unspecified.
                want, got = torch.kthvalue(tt, k, dim, True), ddpc.kthvalue(dt, k, dim, True)
                _same(np, got.values, want.values, f"kthvalue {dtype} {shape} {k}")
                _same(np, ddpc.take_along_dim(dt, got.indices, dim), want.values, f"kthvalue {dtype} {shape} {k}")
            want, got = torch.aminmax(tt, dim=dim), ddpc.aminmax(dt, dim=dim)
            _same(np, got.min, want.min, f"aminmax {dtype}")
            _same(np, got.max, want.max, f"aminmax {dtype}")
            xm = _sample(np, dtype, shape, 7, nan=False)
            tt, dt = _both(torch, ddpc, xm, dtype)
            want, got = torch.mode(tt, dim), ddpc.mode(dt, dim)
            _same(np, got.values, want.values, f"mode {dtype} {shape} {dim}")
            _same(np, got.indices, want.indices, f"mode {dtype} {shape} {dim}")


def _quantiles(np, torch, ddpc):
    rng = np.random.default_rng(8)
    for dtype in ("float32", "float64"):
        x = rng.standard_normal((4, 9, 3)).astype(dtype)
        xn = x.copy()
        xn[0, 2, 1] = xn[1, :, 0] = np.nan
        q = np.array([0.0, 0.25, 0.5, 0.7, 1.0], dtype=dtype)
        for interpolation in ("linear", "lower", "higher", "midpoint", "nearest"):
            for dim in (None, 0, 1, -1):
                for keepdim in (False, True):
                    for name, data in (("quantile", x), ("quantile", xn), ("nanquantile", xn)):
                        want = getattr(torch, name)(torch.tensor(data), torch.tensor(q), dim, keepdim,
                                                    interpolation=interpolation)
                        got = getattr(ddpc, name)(ddpc.tensor(data), ddpc.tensor(q), dim, keepdim,
                                                  interpolation=interpolation)
                        _same(np, got, want, f"{name} {dtype} {interpolation} {dim} {keepdim}",
                              rtol=1e-6 if dtype == "float32" else 1e-13)
                _same(np, ddpc.quantile(ddpc.tensor(x), 0.35, dim, interpolation=interpolation),
                      torch.quantile(torch.tensor(x), 0.35, dim, interpolation=interpolation), "scalar q",
                      rtol=1e-6 if dtype == "float32" else 1e-13)
    x = rng.standard_normal((4, 6))
    for fn in (lambda m, t: m.quantile(t, m.tensor([0.2, 0.9], dtype=m.float64), 1),
               lambda m, t: m.median(t, 0).values, lambda m, t: m.kthvalue(t, 3, 1).values,
               lambda m, t: m.mode(m.round(t), 1).values):
        tt, dt = torch.tensor(x, requires_grad=True), ddpc.tensor(x, requires_grad=True)
        fn(torch, tt).sum().backward()
        fn(ddpc, dt).sum().backward()
        _same(np, dt.grad, tt.grad, "order statistic gradient", rtol=1e-12)


def _counting(np, torch, ddpc):
    rng = np.random.default_rng(9)
    x = rng.integers(0, 12, 80)
    for wdtype in ("float32", "float64", "int64"):
        w = rng.standard_normal(80).astype(wdtype) if wdtype != "int64" else rng.integers(-3, 4, 80)
        _same(np, ddpc.bincount(ddpc.tensor(x), ddpc.tensor(w)), torch.bincount(torch.tensor(x), torch.tensor(w)),
              f"bincount {wdtype}", rtol=1e-6)
    _same(np, ddpc.bincount(ddpc.tensor(x), minlength=20), torch.bincount(torch.tensor(x), minlength=20), "bincount")
    for dtype in ("float32", "float64"):
        v = rng.standard_normal(300).astype(dtype)
        for bins, lo, hi in ((10, 0, 0), (7, -1.0, 1.5), (1, -5, 5)):
            _same(np, ddpc.histc(ddpc.tensor(v), bins, lo, hi), torch.histc(torch.tensor(v), bins, lo, hi),
                  f"histc {dtype} {bins} {lo} {hi}")


def _elementwise(np, torch, ddpc):
    special = np.array([0.0, -0.0, 1.5, -2.25, np.inf, -np.inf, np.nan, 3.0, -7e3, 1e-30], dtype=np.float32)
    other = special[::-1].copy()
    for dtype in ("float32", "float64", "float16", "bfloat16"):
        ta, da = _both(torch, ddpc, special, dtype)
        tb, db = _both(torch, ddpc, other, dtype)
        tol = {"float32": 1e-6, "float64": 1e-13}.get(dtype, 1e-2)
        for name in ("logaddexp", "logaddexp2", "copysign"):
            # ddpc reads no NaN's sign bit (see signbit), so copysign from a NaN is left out.
            keep = ~np.isnan(other) if name == "copysign" else np.ones(other.shape, bool)
            _same(np, getattr(ddpc, name)(da[keep], db[keep]), getattr(torch, name)(ta[keep], tb[keep]),
                  f"{name} {dtype}", rtol=tol)
        for name in ("deg2rad", "rad2deg", "sinc"):
            _same(np, getattr(ddpc, name)(da), getattr(torch, name)(ta), f"{name} {dtype}", rtol=tol)
        _same(np, ddpc.signbit(da[~np.isnan(special)]).long(), torch.signbit(ta[~np.isnan(special)]).long(),
              f"signbit {dtype}")
        _same(np, ddpc.heaviside(da, db).float(), torch.heaviside(ta, tb).float(), f"heaviside {dtype}")
        if dtype in ("float32", "float64"):
            m, e = ddpc.frexp(da)
            want = torch.frexp(ta)
            _same(np, m, want.mantissa, f"frexp {dtype}")
            finite = np.isfinite(special)
            _same(np, e[finite], want.exponent[finite], f"frexp exponent {dtype}")
    for dtype in ("int32", "int64", "uint8"):
        ti, di = _both(torch, ddpc, np.array([0, 3, 7, 90]), dtype)
        for name in ("deg2rad", "rad2deg", "sinc"):
            _same(np, getattr(ddpc, name)(di), getattr(torch, name)(ti), f"{name} {dtype}", rtol=1e-6)
    e = np.array([-3, 0, 2, 5, 1, 0, 2, 3, -1, 4])
    _same(np, ddpc.ldexp(ddpc.tensor(special), ddpc.tensor(e)), torch.ldexp(torch.tensor(special), torch.tensor(e)),
          "ldexp")
    rng = np.random.default_rng(13)
    for dtype in ("uint8", "int32", "int64"):
        a, b = rng.integers(0 if dtype == "uint8" else -50, 50, (2, 30))
        a[:3], b[:3] = [0, 0, 9], [0, 4, 0]
        ta, da = _both(torch, ddpc, a, dtype)
        tb, db = _both(torch, ddpc, b, dtype)
        _same(np, ddpc.gcd(da, db), torch.gcd(ta, tb), f"gcd {dtype}")
        _same(np, ddpc.lcm(da, db), torch.lcm(ta, tb), f"lcm {dtype}")
    x, y = np.random.default_rng(10).standard_normal((2, 6))
    for name in ("logaddexp", "logaddexp2", "copysign"):
        ta, tb = torch.tensor(x, requires_grad=True), torch.tensor(y, requires_grad=True)
        da, db = ddpc.tensor(x, requires_grad=True), ddpc.tensor(y, requires_grad=True)
        getattr(torch, name)(ta, tb).sum().backward()
        getattr(ddpc, name)(da, db).sum().backward()
        _same(np, da.grad, ta.grad, f"{name} gradient", rtol=1e-12)
        if name != "copysign":
            _same(np, db.grad, tb.grad, f"{name} gradient", rtol=1e-12)
    ta, da = torch.tensor(x, requires_grad=True), ddpc.tensor(x, requires_grad=True)
    torch.sinc(ta).sum().backward()
    ddpc.sinc(da).sum().backward()
    _same(np, da.grad, ta.grad, "sinc gradient", rtol=1e-12)


def _layout(np, torch, ddpc):
    rng = np.random.default_rng(11)
    x = rng.standard_normal((2, 4, 6))
    tt, dt = torch.tensor(x), ddpc.tensor(x)
    for k in (-1, 0, 1, 2, 3, 7):
        for dims in ((0, 1), (1, 2), (2, 0)):
            _same(np, ddpc.rot90(dt, k, dims), torch.rot90(tt, k, dims), f"rot90 {k} {dims}")
    for name in ("hsplit", "vsplit", "dsplit"):
        for arg in (2, [1, 3]):
            for g, w in zip(getattr(ddpc, name)(dt, arg), getattr(torch, name)(tt, arg)):
                _same(np, g, w, f"{name} {arg}")
    xs = torch.tensor(np.sort(rng.standard_normal(6)))
    for kwargs in ({}, {"dim": 1}):
        _same(np, ddpc.trapz(dt, **kwargs), torch.trapz(tt, **kwargs), "trapz", rtol=1e-13)
        _same(np, ddpc.cumulative_trapezoid(dt, dx=0.5, **kwargs), torch.cumulative_trapezoid(tt, dx=0.5, **kwargs),
              "cumulative_trapezoid", rtol=1e-13)
    _same(np, ddpc.cumulative_trapezoid(dt, ddpc.tensor(xs.numpy())), torch.cumulative_trapezoid(tt, xs),
          "cumulative_trapezoid x", rtol=1e-13)
    for dtype in ("float32", "int32", "int64"):
        v = np.array([2, -1, 3, 1])
        tv, dv = _both(torch, ddpc, v, dtype)
        for n in (None, 2, 5):
            _same(np, ddpc.vander(dv, n), torch.vander(tv, n), f"vander {dtype} {n}")
            _same(np, ddpc.vander(dv, n, True), torch.vander(tv, n, True), f"vander {dtype} {n}")
    v = torch.tensor([4.0, 5.0, 6.0, 7.0])
    for r in (0, 1, 2, 3, 5):
        for rep in (False, True):
            _same(np, ddpc.combinations(ddpc.tensor(v.numpy()), r, rep), torch.combinations(v, r, rep),
                  f"combinations {r} {rep}")
    for t in (torch.tensor([3.0]), torch.tensor([[0]])):
        assert ddpc.is_nonzero(ddpc.tensor(t.numpy())) == torch.is_nonzero(t)
    m = rng.standard_normal((3, 10))
    fw, aw = rng.integers(1, 4, 10), rng.random(10)
    for correction in (0, 1, 3):
        _same(np, ddpc.cov(ddpc.tensor(m), correction=correction, fweights=ddpc.tensor(fw), aweights=ddpc.tensor(aw)),
              torch.cov(torch.tensor(m), correction=correction, fweights=torch.tensor(fw), aweights=torch.tensor(aw)),
              f"cov {correction}", rtol=1e-12)
    _same(np, ddpc.cov(ddpc.tensor(m[0])), torch.cov(torch.tensor(m[0])), "cov 1-d", rtol=1e-12)
    _same(np, ddpc.cov(ddpc.tensor([[1, 2, 4], [0, 1, 1]])), torch.cov(torch.tensor([[1, 2, 4], [0, 1, 1]])),
          "cov int", rtol=1e-6)
    _same(np, ddpc.corrcoef(ddpc.tensor(m)), torch.corrcoef(torch.tensor(m)), "corrcoef", rtol=1e-12)
    # (PyTorch's own vander gradient fails with an in-place error, so test_misc_functions.py checks ddpc's
    # against finite differences.)
    for name, fn in (("cov", lambda mod, t: mod.cov(t)), ("corrcoef", lambda mod, t: mod.corrcoef(t)),
                     ("rot90", lambda mod, t: mod.rot90(t, 1) * 3)):
        tg, dg = torch.tensor(m, requires_grad=True), ddpc.tensor(m, requires_grad=True)
        tout, dout = fn(torch, tg), fn(ddpc, dg)
        (tout * torch.arange(tout.numel()).reshape(tout.shape)).sum().backward()
        (dout * ddpc.arange(dout.numel()).reshape(dout.shape)).sum().backward()
        _same(np, dg.grad, tg.grad, f"{name} gradient", rtol=1e-10)


def _scatter_reduce(np, torch, ddpc):
    rng = np.random.default_rng(12)
    for dtype in ("float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8"):
        x = rng.integers(1, 5, (4, 6)).astype(np.float32)
        src = rng.integers(0 if dtype == "uint8" else -3, 4, (4, 9)).astype(np.float32)
        index = rng.integers(0, 6, (3, 9))
        tx, dx = _both(torch, ddpc, x, dtype)
        ts, ds = _both(torch, ddpc, src, dtype)
        for reduce in ("sum", "prod", "mean", "amax", "amin"):
            for include_self in (True, False):
                want = tx.scatter_reduce(1, torch.tensor(index), ts, reduce, include_self=include_self)
                got = dx.scatter_reduce(1, ddpc.tensor(index), ds, reduce, include_self=include_self)
                _same(np, got, want, f"scatter_reduce {dtype} {reduce} {include_self}",
                      rtol=1e-2 if dtype in ("float16", "bfloat16") else 0.0)
    x = rng.standard_normal((3, 5))
    src = rng.standard_normal((3, 8))
    src[0, 1] = 0.0
    src[2, 4] = x[2, 2]  # a tie with the input element it lands on
    index = rng.integers(0, 5, (3, 8))
    index[2, 4] = 2
    for reduce in ("sum", "prod", "mean", "amax", "amin"):
        for include_self in (True, False):
            # Without include_self, PyTorch still counts an input element equal to the
            # extreme when it shares out the gradient (which then does not add up to
            # the incoming one); ddpc shares it among the reduced elements only.
            data = src.copy()
            data[2, 4] += 0 if include_self else 0.5
            tx, ts = torch.tensor(x, requires_grad=True), torch.tensor(data, requires_grad=True)
            dx, ds = ddpc.tensor(x, requires_grad=True), ddpc.tensor(data, requires_grad=True)
            w = np.arange(15.0).reshape(3, 5)
            (tx.scatter_reduce(1, torch.tensor(index), ts, reduce, include_self=include_self)
             * torch.tensor(w)).sum().backward()
            (dx.scatter_reduce(1, ddpc.tensor(index), ds, reduce, include_self=include_self)
             * ddpc.tensor(w)).sum().backward()
            _same(np, dx.grad, tx.grad, f"scatter_reduce {reduce} {include_self} gradient of input", rtol=1e-12)
            _same(np, ds.grad, ts.grad, f"scatter_reduce {reduce} {include_self} gradient of src", rtol=1e-12)


def _limits(np, torch, ddpc):
    for name in ("float16", "bfloat16", "float32", "float64"):
        f, w = ddpc.finfo(getattr(ddpc, name)), torch.finfo(getattr(torch, name))
        for attr in ("bits", "eps", "max", "min", "tiny", "smallest_normal", "resolution", "dtype"):
            got, want = getattr(f, attr), getattr(w, attr)
            assert got == want, f"finfo {name} {attr}: {got} vs {want}"
    for name in ("uint8", "int32", "int64"):
        i, w = ddpc.iinfo(getattr(ddpc, name)), torch.iinfo(getattr(torch, name))
        for attr in ("bits", "min", "max", "dtype"):
            assert getattr(i, attr) == getattr(w, attr), f"iinfo {name} {attr}"
    assert ddpc.finfo().dtype == torch.finfo().dtype


GROUPS = {"search": _search, "cumulative": _cumulative, "order": _order, "quantiles": _quantiles,
          "counting": _counting, "elementwise": _elementwise, "layout": _layout, "limits": _limits,
          "scatter_reduce": _scatter_reduce}


test_matches_pytorch = torch_group_test(__file__, GROUPS)


if __name__ == "__main__":
    run_torch_group(GROUPS)
