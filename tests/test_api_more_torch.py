"""Optional: the PyTorch names of test_api_more.py against PyTorch's own
(skipped when torch is not installed): values, shapes, dtypes, gradients and
which inputs raise, for the dtype and factory functions, the pointwise and
layout functions, the scatter forms, histograms, gradient, the matrix
functions, kaiser_window, the torch-level nn forms (cells with the same
weights), the new Tensor methods and the determinism switches.

Each group runs in a child process that imports torch before ddpc (see
test_nn_extra_torch.py) and fails there, printing what differs.
"""

from procs import run_torch_group, torch_group_test


def _name(dt):
    return str(dt).split(".")[-1]


def _compare(np, got, want, what, tol):
    """got (ddpc) against want (torch): tensors, or tuples and lists of them, or plain values."""
    if isinstance(want, (tuple, list)):
        assert len(got) == len(want), f"{what}: {len(got)} results where PyTorch has {len(want)}"
        for i, (g, w) in enumerate(zip(got, want)):
            _compare(np, g, w, f"{what}[{i}]", tol)
        return
    if not hasattr(want, "detach"):
        assert got == want, f"{what}: {got!r} where PyTorch has {want!r}"
        return
    want = want.detach()
    assert tuple(got.shape) == tuple(want.shape), f"{what}: shape {tuple(got.shape)} vs {tuple(want.shape)}"
    gd, wd = _name(got.dtype), _name(want.dtype)
    assert gd == wd or (gd, wd) == ("uint8", "bool"), f"{what}: dtype {gd} vs {wd}"
    g = np.asarray(got.detach().cpu().float() if gd == "bfloat16" else got.detach().cpu())
    w = want.float().numpy() if wd == "bfloat16" else want.numpy()
    np.testing.assert_allclose(g.astype(np.float64), w.astype(np.float64), rtol=tol, atol=tol, equal_nan=True,
                               err_msg=what)


def _same(np, torch, ddpc, what, fn, arrays, tol=1e-10, grad=True):
    """fn(lib, *tensors) for both libraries: the results, and the gradients of a
    weighted sum of the floating results with respect to the float inputs."""
    def run(lib):
        ts = [lib.tensor(a, requires_grad=grad and a.dtype.kind == "f") for a in arrays]
        out = fn(lib, *ts)
        outs = out if isinstance(out, (tuple, list)) else (out,)
        diff = [o for o in outs if hasattr(o, "requires_grad") and o.requires_grad]
        if diff:
            rng = np.random.default_rng(3)
            total = sum((o * lib.tensor(rng.standard_normal(tuple(o.shape)).astype(_name(o.dtype)))).sum()
                        for o in diff)
            total.backward()
        return out, [t.grad for t in ts if t.requires_grad]

    got, got_grads = run(ddpc)
    want, want_grads = run(torch)
    _compare(np, got, want, what, tol)
    assert [g is None for g in got_grads] == [g is None for g in want_grads], f"{what}: which inputs get gradients"
    for i, (g, w) in enumerate(zip(got_grads, want_grads)):
        if w is not None:
            _compare(np, g, w, f"{what}: gradient of input {i}", tol)


def _both_raise(torch, ddpc, what, fn):
    """fn(lib) raises with both libraries."""
    for lib in (torch, ddpc):
        try:
            fn(lib)
        except Exception:  # noqa: BLE001  (each library raises its own kind)
            continue
        raise AssertionError(f"{what}: {lib.__name__} did not raise")


def _dtypes_factories(np, torch, ddpc):
    dts = ["uint8", "int32", "int64", "float16", "bfloat16", "float32", "float64"]
    for a in dts:
        for b in dts:
            ta, tb, da, db = getattr(torch, a), getattr(torch, b), getattr(ddpc, a), getattr(ddpc, b)
            assert _name(ddpc.promote_types(da, db)) == _name(torch.promote_types(ta, tb)), (a, b)
            assert ddpc.can_cast(da, db) == torch.can_cast(ta, tb), f"can_cast {a} {b}"
    operands = [lambda L: L.zeros(3, dtype=L.int32), lambda L: L.zeros(3, dtype=L.uint8),
                lambda L: L.zeros(3, dtype=L.float16), lambda L: L.tensor(1.0, dtype=L.float64),
                lambda L: L.tensor(2, dtype=L.int64), lambda L: 2.5, lambda L: 3, lambda L: True]
    for i, x in enumerate(operands):
        for j, y in enumerate(operands):
            if i >= 5 and j >= 5:
                continue  # torch.result_type needs a tensor
            assert _name(ddpc.result_type(x(ddpc), y(ddpc))) == _name(torch.result_type(x(torch), y(torch))), (i, j)
    for s in (3, 2.5, True):
        _compare(np, ddpc.scalar_tensor(s), torch.scalar_tensor(s), f"scalar_tensor {s}", 0)
    _compare(np, ddpc.scalar_tensor(3, dtype=ddpc.int64), torch.scalar_tensor(3, dtype=torch.int64), "int", 0)
    e = ddpc.empty_strided((2, 3), (1, 2))
    assert tuple(e.shape) == (2, 3) and e.dtype is ddpc.float32
    assert tuple(ddpc.ones(2).new_empty_strided((4,), (1,)).shape) == (4,)
    _both_raise(torch, ddpc, "empty_strided length", lambda L: L.empty_strided((2, 3), (1,)))
    raw = bytearray(np.arange(6, dtype=np.float32).tobytes())
    for kw in ({}, {"count": 2, "offset": 4}):
        _compare(np, ddpc.frombuffer(raw, dtype=ddpc.float32, **kw), torch.frombuffer(raw, dtype=torch.float32, **kw),
                 f"frombuffer {kw}", 0)
    shared = ddpc.frombuffer(raw, dtype=ddpc.float32)
    raw[0:4] = np.float32(7).tobytes()
    assert shared[0].item() == 7.0, "frombuffer shares the buffer's memory"
    for kw in ({"offset": 3}, {"count": 7}, {"offset": 24}):
        _both_raise(torch, ddpc, f"frombuffer {kw}", lambda L: L.frombuffer(raw, dtype=L.float32, **kw))
    arr = np.arange(6.0).reshape(2, 3)
    for kw in ({}, {"dtype": "float32"}, {"copy": True}):
        kd = {k: getattr(ddpc, v) if k == "dtype" else v for k, v in kw.items()}
        kt = {k: getattr(torch, v) if k == "dtype" else v for k, v in kw.items()}
        _compare(np, ddpc.asarray(arr, **kd), torch.asarray(arr, **kt), f"asarray {kw}", 0)
    a = ddpc.asarray(arr)
    arr[0, 0] = 9
    assert a[0, 0].item() == 9, "asarray shares a numpy array's memory"
    assert ddpc.asarray([[1, 2], [3, 4]]).dtype is ddpc.int64
    _both_raise(torch, ddpc, "asarray copy=False", lambda L: L.asarray(arr, dtype=L.float32, copy=False))
    t = ddpc.ones(2, 3)
    assert ddpc.asarray(t) is t and ddpc.asarray(t, copy=True).data_ptr() != t.data_ptr()
    x_t, x_d = torch.ones(2, 3, 4), ddpc.ones(2, 3, 4)
    for attr in ("is_cpu", "itemsize"):
        assert getattr(x_d, attr) == getattr(x_t, attr), attr
    for m in ("get_device", "ndimension", "is_inference"):
        assert getattr(x_d, m)() == getattr(x_t, m)(), m
    _compare(np, ddpc.tensor([1.5, 300.0]).byte(), torch.tensor([1.5, 300.0]).to(torch.int32).byte(), "byte", 0)
    for m in ("char", "short"):
        try:
            getattr(x_d, m)()
        except TypeError as err:
            assert "unknown dtype" in str(err), err
        else:
            raise AssertionError(f"{m}: ddpc has no such dtype and must say so")


def _pointwise(np, torch, ddpc):
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((3, 4)), rng.standard_normal(4)
    _same(np, torch, ddpc, "fill number", lambda L, a: L.fill(a, 2.5), [x])
    _same(np, torch, ddpc, "fill tensor", lambda L, a, v: L.fill(a, v * 3), [x, np.array(0.5)])
    _both_raise(torch, ddpc, "fill 1-d value", lambda L: L.fill(L.ones(3), L.ones(2)))
    _same(np, torch, ddpc, "rsub", lambda L, a, b: L.rsub(a, b, alpha=2), [x, y])
    _same(np, torch, ddpc, "rsub number", lambda L, a: L.rsub(a, 3.0), [x])
    special = np.array([1.0, -np.inf, np.inf, np.nan, 0.0, -2.0])
    for name in ("isposinf", "isneginf", "isreal"):
        _same(np, torch, ddpc, name, lambda L, a: getattr(L, name)(a), [special])
        _same(np, torch, ddpc, f"Tensor.{name}", lambda L, a: getattr(a, name)(), [special])
    _same(np, torch, ddpc, "isposinf int", lambda L, a: L.isposinf(a), [np.arange(3)])
    # Zeros, subnormals, infinities, the largest float32 and a power of two in each direction.
    tiny = np.array([0.0, -0.0, 1.0, -1.0, 1e-42, np.inf, -np.inf, 2.0 ** -126, np.nan, 5.0, 3.4028234663852886e38])
    other = np.array([1.0, -1.0, 2.0, -np.inf, 0.0, 0.0, 1.0, 0.0, 1.0, 5.0, np.inf])
    for dt in ("float32", "float64"):
        a, b = tiny.astype(dt), other.astype(dt)
        _same(np, torch, ddpc, f"nextafter {dt}", lambda L, p, q: L.nextafter(p, q), [a, b], 0, grad=False)
        _same(np, torch, ddpc, f"nextafter broadcast {dt}", lambda L, p, q: p.nextafter(q), [a.reshape(-1, 1), b],
              0, grad=False)
    _same(np, torch, ddpc, "nextafter_", lambda L, p, q: p.clone().nextafter_(q), [tiny, other], 0, grad=False)
    _both_raise(torch, ddpc, "nextafter int",
                lambda L: L.nextafter(L.ones(2, dtype=L.int64), L.zeros(2, dtype=L.int64)))
    _same(np, torch, ddpc, "Tensor.float_power", lambda L, a, b: a.float_power(b), [np.abs(x) + 0.1, x])
    _same(np, torch, ddpc, "float_power_", lambda L, a: (a * 1).float_power_(2), [x])
    _both_raise(torch, ddpc, "float_power_ float32", lambda L: L.ones(2).float_power_(2))
    _same(np, torch, ddpc, "heaviside_", lambda L, a, v: a.detach().clone().heaviside_(v.detach()),
          [np.array([-1.0, 0.0, 2.0, 0.0]), np.array([5.0, 6.0, 7.0, 8.0])], grad=False)
    xn, yn = x.copy(), np.broadcast_to(y, x.shape).copy()
    xn[0, 1], yn[1, 2], yn[2, 0] = np.nan, np.nan, xn[2, 0]
    for name in ("fmax", "fmin"):
        _same(np, torch, ddpc, f"Tensor.{name}", lambda L, a, b: getattr(a, name)(b), [xn, yn])


def _layout(np, torch, ddpc):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((3, 4, 5))
    _same(np, torch, ddpc, "select", lambda L, a: L.select(a, 1, -2), [x])
    _same(np, torch, ddpc, "concat", lambda L, a, b: L.concat([a, b], dim=1), [x, x[:, :2]])
    _same(np, torch, ddpc, "concatenate", lambda L, a, b: L.concatenate((a, b), axis=-1), [x, x[..., :1]])
    _same(np, torch, ddpc, "select_scatter", lambda L, a, s: L.select_scatter(a, s, 1, -1),
          [x, rng.standard_normal((3, 5))])
    _same(np, torch, ddpc, "Tensor.select_scatter", lambda L, a, s: a.select_scatter(s, 0, 2),
          [x, rng.standard_normal((4, 5))])
    for args in ((1, 1, 4, 2), (2, None, None, 3), (0, -2, None, 1), (2, 1, 100, 1)):
        d, start, end, step = args
        ref = x[(slice(None),) * d + (slice(start, end, step),)]
        _same(np, torch, ddpc, f"slice_scatter {args}", lambda L, a, s: L.slice_scatter(a, s, d, start, end, step),
              [x, rng.standard_normal(ref.shape)])
    for offset, d1, d2 in ((0, 0, 1), (1, 1, 2), (-1, 2, 0), (2, 0, 2), (0, -1, -2)):
        ref = np.diagonal(x, offset, d1, d2)
        _same(np, torch, ddpc, f"diagonal_scatter {offset} {d1} {d2}",
              lambda L, a, s: L.diagonal_scatter(a, s, offset, d1, d2), [x, rng.standard_normal(ref.shape)])
    _both_raise(torch, ddpc, "select_scatter shape", lambda L: L.select_scatter(L.ones(3, 4), L.ones(3), 0, 0))
    _both_raise(torch, ddpc, "diagonal_scatter shape", lambda L: L.diagonal_scatter(L.ones(3, 4), L.ones(4)))
    m = rng.standard_normal((3, 4))
    idx = np.array([[0, -1], [5, 2]])
    _same(np, torch, ddpc, "put", lambda L, a, s: L.put(a, L.tensor(idx), s), [m, rng.standard_normal((2, 2))])
    _same(np, torch, ddpc, "put accumulate", lambda L, a, s: a.put(L.tensor([1, 1, 3]), s, accumulate=True),
          [m, rng.standard_normal(3)])
    _same(np, torch, ddpc, "put_", lambda L, a, s: (a * 1).put_(L.tensor([2, 0]), s), [m, rng.standard_normal(2)])
    _both_raise(torch, ddpc, "put count", lambda L: L.ones(3).put(L.tensor([0, 1]), L.ones(3)))
    src = rng.standard_normal((3, 6, 5))
    index = np.array([0, 2, 2, 3, 0, 2])
    for reduce in ("prod", "mean", "amax", "amin"):
        for include_self in (True, False):
            _same(np, torch, ddpc, f"index_reduce {reduce} {include_self}",
                  lambda L, a, s: L.index_reduce(a, 1, L.tensor(index), s, reduce, include_self=include_self),
                  [x, src])
    ints = rng.integers(-5, 6, (4, 3))
    _same(np, torch, ddpc, "index_reduce int mean",
          lambda L, a, s: a.index_reduce(0, L.tensor([1, 1, 3]), s, "mean"), [ints, rng.integers(-5, 6, (3, 3))])
    _same(np, torch, ddpc, "index_reduce_", lambda L, a, s: (a * 1).index_reduce_(0, L.tensor([1, 0]), s, "amax"),
          [m, rng.standard_normal((2, 4))])
    _both_raise(torch, ddpc, "index_reduce sum", lambda L: L.ones(3).index_reduce(0, L.tensor([0]), L.ones(1), "sum"))
    _same(np, torch, ddpc, "narrow_copy", lambda L, a: a.narrow_copy(1, 1, 2), [x])
    _same(np, torch, ddpc, "unsafe_split", lambda L, a: a.unsafe_split(2, 1), [x])
    _same(np, torch, ddpc, "unsafe_chunk", lambda L, a: a.unsafe_chunk(3, -1), [x])
    _same(np, torch, ddpc, "unsafe_split_with_sizes", lambda L, a: a.unsafe_split_with_sizes([1, 3, 1], 2), [x])
    v = rng.standard_normal(4)
    _same(np, torch, ddpc, "Tensor.diag", lambda L, a: a.diag(1), [v])
    _same(np, torch, ddpc, "Tensor.diag 2-d", lambda L, a: a.diag(-1), [m])
    _same(np, torch, ddpc, "Tensor.diagflat", lambda L, a: a.diagflat(-2), [m])
    _same(np, torch, ddpc, "Tensor.diag_embed", lambda L, a: a.diag_embed(1, 0, 2), [x])
    _same(np, torch, ddpc, "H", lambda L, a: a.H, [m])
    _same(np, torch, ddpc, "mH", lambda L, a: a.mH, [x])
    _same(np, torch, ddpc, "adjoint", lambda L, a: a.adjoint(), [x])
    _both_raise(torch, ddpc, "H of 3-d", lambda L: L.ones(2, 3, 4).H)
    _both_raise(torch, ddpc, "mH of 1-d", lambda L: L.ones(2).mH)


def _gradient(np, torch, ddpc):
    rng = np.random.default_rng(2)
    f = rng.standard_normal((5, 6))
    coords = np.cumsum(rng.uniform(0.5, 2.0, 5))
    for edge_order in (1, 2):
        for name, kwargs in (("default", {}), ("spacing", {"spacing": 2.0}), ("dim", {"dim": 1}),
                             ("dims", {"dim": (1, 0), "spacing": [2.0, 0.5]})):
            _same(np, torch, ddpc, f"gradient {name} {edge_order}",
                  lambda L, a: L.gradient(a, edge_order=edge_order, **kwargs), [f])
        _same(np, torch, ddpc, f"gradient coordinates {edge_order}",
              lambda L, a: L.gradient(a, spacing=[L.tensor(coords)], dim=0, edge_order=edge_order), [f])
    _same(np, torch, ddpc, "gradient int", lambda L, a: L.gradient(a), [np.arange(5) ** 2])
    _both_raise(torch, ddpc, "gradient short", lambda L: L.gradient(L.ones(2), edge_order=2))
    _both_raise(torch, ddpc, "gradient edge_order 3", lambda L: L.gradient(L.ones(5), edge_order=3))
    _both_raise(torch, ddpc, "gradient spacing count", lambda L: L.gradient(L.ones(3, 4), spacing=[2.0]))


def _histograms(np, torch, ddpc):
    rng = np.random.default_rng(4)
    for dt in ("float32", "float64"):
        x = rng.standard_normal(200).astype(dt)
        w = rng.uniform(0, 2, 200).astype(dt)
        edges = np.array([-2.0, -0.5, 0.0, 0.3, 2.5], dtype=dt)
        cases = (("bins", lambda L, a: L.histogram(a, 7)),
                 ("range", lambda L, a: L.histogram(a, 5, range=(-1.0, 1.5))),
                 ("edges", lambda L, a: a.histogram(L.tensor(edges))),
                 ("weight density", lambda L, a: L.histogram(a, 4, weight=L.tensor(w), density=True)),
                 ("equal", lambda L, a: L.histogram(a * 0 + 1, 3)),
                 ("empty", lambda L, a: L.histogram(a[:0], 2)))
        for name, fn in cases:
            _same(np, torch, ddpc, f"histogram {name} {dt}", fn, [x], tol=1e-6, grad=False)
        pts = rng.standard_normal((2, 50, 3)).astype(dt)
        dd_cases = (("bins", lambda L, a: L.histogramdd(a, [3, 4, 2])),
                    ("int range", lambda L, a: L.histogramdd(a, 3, range=[-1.0, 1.0, -2.0, 2.0, 0.0, 1.0])),
                    ("edges", lambda L, a: L.histogramdd(a, [L.tensor(edges)] * 3, density=True)),
                    ("weight", lambda L, a: L.histogramdd(a, 2, weight=L.tensor(w[:100].reshape(2, 50)))))
        for name, fn in dd_cases:
            _same(np, torch, ddpc, f"histogramdd {name} {dt}", fn, [pts], tol=1e-6, grad=False)
    _both_raise(torch, ddpc, "histogram int", lambda L: L.histogram(L.tensor([0, 1]), 2))
    _both_raise(torch, ddpc, "histogram range", lambda L: L.histogram(L.tensor([0.0, 1.0]), 2, range=(2.0, 1.0)))
    _both_raise(torch, ddpc, "histogram nan", lambda L: L.histogram(L.tensor([0.0, float("nan")]), 2))
    v = np.array([1, 1, 2, 2, 2, 3, 1, 1])
    _same(np, torch, ddpc, "Tensor.unique_consecutive",
          lambda L, a: a.unique_consecutive(return_inverse=True, return_counts=True), [v])


def _matrices(np, torch, ddpc):
    rng = np.random.default_rng(5)
    a, b, c = rng.standard_normal((3, 4)), rng.standard_normal((4, 6)), rng.standard_normal((6, 2))
    _same(np, torch, ddpc, "chain_matmul", lambda L, p, q, r: L.chain_matmul(p, q, r), [a, b, c])
    _same(np, torch, ddpc, "chain_matmul one", lambda L, p: L.chain_matmul(p), [a])
    _both_raise(torch, ddpc, "chain_matmul 1-d", lambda L: L.chain_matmul(L.ones(3), L.ones(3, 2)))
    _both_raise(torch, ddpc, "chain_matmul none", lambda L: L.chain_matmul())
    x = rng.standard_normal((2, 3, 4))
    for dim in ((1, 2), 1, (0,), (-1, 0)):
        _same(np, torch, ddpc, f"frobenius_norm {dim}", lambda L, t: L.frobenius_norm(t, dim, keepdim=dim == 1), [x])
    _both_raise(torch, ddpc, "frobenius_norm 3 dims", lambda L: L.frobenius_norm(L.ones(2, 2, 2), (0, 1, 2)))
    _same(np, torch, ddpc, "nuclear_norm", lambda L, t: L.nuclear_norm(t), [x[0]], tol=1e-8)
    _same(np, torch, ddpc, "nuclear_norm keepdim", lambda L, t: L.nuclear_norm(t, True), [x[0]], tol=1e-8)
    _same(np, torch, ddpc, "nuclear_norm dim", lambda L, t: L.nuclear_norm(t, (0, 2)), [x], tol=1e-8)
    sq = rng.standard_normal((2, 4, 4))
    for shape in ((2, 4, 4), (3, 5), (5, 3)):
        A = rng.standard_normal(shape)
        LU_t, piv_t = torch.linalg.lu_factor(torch.tensor(A))
        LU_d, piv_d = ddpc.linalg.lu_factor(ddpc.tensor(A))
        _compare(np, piv_d, piv_t, f"lu_factor pivots {shape}", 0)
        for flags in ((True, True), (True, False), (False, True)):
            # (PyTorch's backward fails where L and U are not unpacked)
            _same(np, torch, ddpc, f"lu_unpack {shape} {flags}",
                  lambda L, lu: L.lu_unpack(lu, L.tensor(piv_t.numpy()), *flags), [LU_t.numpy()], grad=all(flags))
    LU_t, piv_t = torch.linalg.lu_factor(torch.tensor(sq))
    _same(np, torch, ddpc, "Tensor.lu_solve", lambda L, rhs, lu: rhs.lu_solve(lu, L.tensor(piv_t.numpy())),
          [rng.standard_normal((2, 4, 3)), LU_t.numpy()], tol=1e-8)
    for n, periodic, beta in ((0, True, 12.0), (1, False, 5.0), (8, True, 12.0), (9, False, 3.5)):
        for dt in ("float32", "float64"):
            _compare(np, ddpc.kaiser_window(n, periodic, beta, dtype=getattr(ddpc, dt)),
                     torch.kaiser_window(n, periodic, beta, dtype=getattr(torch, dt)), f"kaiser {n} {periodic}", 1e-6)
    _both_raise(torch, ddpc, "kaiser int", lambda L: L.kaiser_window(4, dtype=L.int64))


def _nn_forms(np, torch, ddpc):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((4, 3, 2))
    for name in ("alpha_dropout", "feature_alpha_dropout"):
        _same(np, torch, ddpc, f"{name} eval", lambda L, a: getattr(L, name)(a, 0.5, False), [x])
        out = getattr(ddpc, name)(ddpc.tensor(x), 0.3, True)
        assert tuple(out.shape) == x.shape and not np.allclose(np.asarray(out), x), name
    weight = rng.standard_normal((10, 3))
    idx, offsets = np.array([1, 2, 4, 5, 4, 3, 2, 9]), np.array([0, 4, 4])
    for mode in (1, 2):
        for pad in (None, 2):
            def bag(L, w):
                return L.embedding_bag(w, L.tensor(idx), L.tensor(offsets), False, mode, False, None, False, pad)
            _same(np, torch, ddpc, f"embedding_bag mode {mode} padding {pad}", bag, [weight])
    _same(np, torch, ddpc, "embedding_bag sum", lambda L, w: L.embedding_bag(w, L.tensor(idx), L.tensor(offsets))[0],
          [weight])
    n, i, h = 3, 4, 5
    inputs = [rng.standard_normal((n, i)), rng.standard_normal((n, h))]
    for name, chunks in (("lstm_cell", 4), ("gru_cell", 3), ("rnn_tanh_cell", 1), ("rnn_relu_cell", 1)):
        weights = [rng.standard_normal((chunks * h, i)), rng.standard_normal((chunks * h, h)),
                   rng.standard_normal(chunks * h), rng.standard_normal(chunks * h)]
        if name == "lstm_cell":
            def cell(L, x_, h_, c_, w_ih, w_hh, *bias):
                return L.lstm_cell(x_, (h_, c_), w_ih, w_hh, *bias)
            arrays = inputs + [rng.standard_normal((n, h))] + weights
        else:
            def cell(L, x_, h_, w_ih, w_hh, *bias):
                return getattr(L, name)(x_, h_, w_ih, w_hh, *bias)
            arrays = inputs + weights
        _same(np, torch, ddpc, name, cell, arrays, tol=1e-9)
        _same(np, torch, ddpc, f"{name} without bias", cell, arrays[:-2], tol=1e-9)
        unbatched = [a[0] if a.shape[0] == n else a for a in arrays]
        _both_raise(torch, ddpc, f"{name} unbatched", lambda L: cell(L, *[L.tensor(a) for a in unbatched]))


def _random_and_determinism(np, torch, ddpc):
    for name, args in (("cauchy_", (0.0, -1.0)), ("geometric_", (1.5,)), ("log_normal_", (1.0, 0.0))):
        _both_raise(torch, ddpc, name, lambda L: getattr(L.ones(3), name)(*args))
    for name, args in (("cauchy_", (1.0, 2.0)), ("geometric_", (0.3,)), ("log_normal_", (0.5, 0.25))):
        got, want = getattr(ddpc.zeros(50), name)(*args), getattr(torch.zeros(50), name)(*args)
        assert tuple(got.shape) == tuple(want.shape) and got.dtype is ddpc.float32, name
    got = ddpc.zeros(50, dtype=ddpc.int64).geometric_(0.3)
    assert got.dtype is ddpc.int64 and int(got.min()) >= 1
    for mode, warn_only in ((True, False), (True, True), (False, False)):
        ddpc.use_deterministic_algorithms(mode, warn_only=warn_only)
        torch.use_deterministic_algorithms(mode, warn_only=warn_only)
        assert ddpc.are_deterministic_algorithms_enabled() == torch.are_deterministic_algorithms_enabled()
        assert (ddpc.is_deterministic_algorithms_warn_only_enabled()
                == torch.is_deterministic_algorithms_warn_only_enabled())


GROUPS = {"dtypes_factories": _dtypes_factories, "pointwise": _pointwise, "layout": _layout, "gradient": _gradient,
          "histograms": _histograms, "matrices": _matrices, "nn_forms": _nn_forms,
          "random_and_determinism": _random_and_determinism}


test_matches_pytorch = torch_group_test(__file__, GROUPS)


if __name__ == "__main__":
    run_torch_group(GROUPS)
