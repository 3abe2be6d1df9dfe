"""Optional: sort, topk, unique, masked_select, nonzero, nan_to_num, tril/triu
and logsumexp of ddpc against PyTorch's on the same inputs (skipped when torch
is not installed), exactly: same dtypes, same values (NaN where PyTorch has
NaN), same indices. Each group runs in a child process that imports torch
before ddpc (see test_nn_extra_torch.py) and fails there, printing what differs."""

from procs import run_torch_group, torch_group_test

DTYPES = ["float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8"]


def _inputs(np, dtype):
    """Small integers with ties (plus NaN, +-inf and -0 for floats) in a few shapes."""
    rng = np.random.default_rng(5)
    out = []
    for shape in [(9,), (4, 6), (3, 5, 4), (2, 0), (2, 300)]:
        x = rng.integers(0 if dtype == "uint8" else -3, 4, shape).astype(np.float32)
        if dtype.startswith(("float", "bfloat")) and x.size:
            flat = x.reshape(-1)
            picks = rng.integers(0, flat.size, max(1, flat.size // 5))
            flat[picks] = rng.choice(np.array([np.nan, np.inf, -np.inf, -0.0], dtype=np.float32), picks.size)
        out.append(x)
    return out


def _both(torch, ddpc, x, dtype):
    return torch.tensor(x).to(getattr(torch, dtype)), ddpc.tensor(x, dtype=dtype)


def _same(np, got, want, what):
    """got (ddpc) equals want (torch) in shape, dtype name and every element (NaN equal)."""
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1], f"{what}: {got.dtype} vs {want.dtype}"
    assert tuple(got.shape) == tuple(want.shape), f"{what}: shape {tuple(got.shape)} vs {tuple(want.shape)}"
    g = got.double().numpy() if got.dtype.is_floating_point else got.numpy()
    w = want.double().numpy() if want.dtype.is_floating_point else want.numpy()
    np.testing.assert_array_equal(g, w, err_msg=what)


def _sort(np, torch, ddpc):
    for dtype in DTYPES:
        for x in _inputs(np, dtype):
            tt, dt = _both(torch, ddpc, x, dtype)
            for dim in range(x.ndim):
                for descending in (False, True):
                    want = tt.sort(dim=dim, descending=descending, stable=True)
                    got = dt.sort(dim, descending=descending)
                    what = f"sort {dtype} {x.shape} dim {dim} descending {descending}"
                    _same(np, got.values, want.values, what)
                    _same(np, got.indices, want.indices, what)
                    _same(np, ddpc.argsort(dt, dim, descending=descending),
                          torch.argsort(tt, dim=dim, descending=descending, stable=True), what)
            _same(np, ddpc.msort(dt), torch.msort(tt), f"msort {dtype}")


def _topk(np, torch, ddpc):
    # Distinct values (and one NaN for floats): PyTorch leaves the order of ties unspecified.
    rng = np.random.default_rng(6)
    for dtype in DTYPES:
        x = rng.permutation(60).reshape(3, 20).astype(np.float32)
        if dtype.startswith(("float", "bfloat")):
            x[1, 7] = np.nan
        tt, dt = _both(torch, ddpc, x, dtype)
        for dim in (0, 1):
            for k in (0, 1, 3, x.shape[dim]):
                for largest in (True, False):
                    want, got = tt.topk(k, dim, largest=largest), dt.topk(k, dim, largest=largest)
                    what = f"topk {dtype} dim {dim} k {k} largest {largest}"
                    _same(np, got.values, want.values, what)
                    _same(np, got.indices, want.indices, what)


def _unique(np, torch, ddpc):
    for dtype in DTYPES:
        for x in _inputs(np, dtype):
            tt, dt = _both(torch, ddpc, x, dtype)
            want = list(torch.unique(tt, return_inverse=True, return_counts=True))
            got = list(ddpc.unique(dt, return_inverse=True, return_counts=True))
            # Every NaN is its own value in both; which NaN element PyTorch maps
            # to which of them depends on its (unstable) sort, so those compare as a set.
            nan = np.isnan(x)
            for inverse in (got[1], want[1]):
                assert sorted(inverse.numpy()[nan]) == list(range(want[0].numel() - nan.sum(), want[0].numel()))
            got[1], want[1] = got[1].masked_fill(ddpc.tensor(nan), -1), want[1].masked_fill(
                torch.tensor(nan), -1)
            for g, w, part in zip(got, want, ("values", "inverse", "counts")):
                _same(np, g, w, f"unique {dtype} {x.shape} {part}")


def _unique_dim(np, torch, ddpc):
    """Slices along a dim, without NaN (PyTorch's comparator sort leaves their order undefined)."""
    rng = np.random.default_rng(8)
    for dtype in DTYPES:
        for shape, dim in [((6, 3), 0), ((6, 3), 1), ((4, 3, 2), 1), ((4, 3, 2), -1), ((5,), 0), ((0, 3), 0),
                           ((40, 9), 0), ((2, 1, 3), 0)]:
            x = rng.integers(0, 2, shape).astype(np.float32)
            tt, dt = _both(torch, ddpc, x, dtype)
            for sorted_ in (True, False):
                want = torch.unique(tt, sorted=sorted_, return_inverse=True, return_counts=True, dim=dim)
                got = ddpc.unique(dt, sorted=sorted_, return_inverse=True, return_counts=True, dim=dim)
                for g, w, part in zip(got, want, ("values", "inverse", "counts")):
                    _same(np, g, w, f"unique {dtype} {shape} dim {dim} {part}")
            _same(np, ddpc.unique(dt, dim=dim), torch.unique(tt, dim=dim), f"unique {dtype} {shape} dim {dim}")


def _select(np, torch, ddpc):
    rng = np.random.default_rng(7)
    for shape in [(), (0,), (7,), (3, 4), (2, 3, 4)]:
        x = (rng.integers(0, 3, shape) * (rng.random(shape) < 0.6)).astype(np.float64)
        tt, dt = torch.tensor(x), ddpc.tensor(x)
        _same(np, ddpc.nonzero(dt), torch.nonzero(tt), f"nonzero {shape}")
        _same(np, ddpc.argwhere(dt), torch.argwhere(tt), f"argwhere {shape}")
        for g, w in zip(dt.nonzero(as_tuple=True), tt.nonzero(as_tuple=True)):
            _same(np, g, w, f"nonzero as_tuple {shape}")
        _same(np, dt.masked_select(dt > 0), tt.masked_select(tt > 0), f"masked_select {shape}")
    x = rng.standard_normal((3, 4))
    mask = np.array([1, 0, 0, 1], dtype=bool)
    _same(np, ddpc.masked_select(ddpc.tensor(x), ddpc.tensor(mask)),
          torch.masked_select(torch.tensor(x), torch.tensor(mask)), "masked_select broadcast mask")
    _same(np, ddpc.masked_select(ddpc.tensor(x[0]), ddpc.tensor(x > 0)),
          torch.masked_select(torch.tensor(x[0]), torch.tensor(x > 0)), "masked_select broadcast input")


def _elementwise(np, torch, ddpc):
    x = np.array([[np.nan, np.inf, -np.inf, 1.5], [-0.0, 2.0, np.inf, np.nan], [np.nan, -1.0, 3.0, -np.inf]],
                 dtype=np.float32)
    for dtype in ["float32", "float64", "float16", "bfloat16"]:
        tt, dt = _both(torch, ddpc, x, dtype)
        _same(np, ddpc.nan_to_num(dt), torch.nan_to_num(tt), f"nan_to_num {dtype}")
        _same(np, dt.nan_to_num(1.0, 1e3, -7.0), tt.nan_to_num(1.0, 1e3, -7.0), f"nan_to_num values {dtype}")
        for diagonal in (-1, 0, 1, 3):
            _same(np, dt.tril(diagonal), tt.tril(diagonal), f"tril {dtype} {diagonal}")
            _same(np, dt.triu(diagonal), tt.triu(diagonal), f"triu {dtype} {diagonal}")
    for dtype in ["float32", "float64"]:
        tt, dt = _both(torch, ddpc, x, dtype)
        for dim in (0, 1, (0, 1)):
            want, got = torch.logsumexp(tt, dim), ddpc.logsumexp(dt, dim)
            assert np.array_equal(np.isnan(got.numpy()), np.isnan(want.numpy())), f"logsumexp {dim}"
            np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6, err_msg=f"logsumexp {dim}")


GROUPS = {"sort": _sort, "topk": _topk, "unique": _unique, "unique_dim": _unique_dim, "select": _select,
          "elementwise": _elementwise}


test_matches_pytorch = torch_group_test(__file__, GROUPS)


if __name__ == "__main__":
    run_torch_group(GROUPS)
