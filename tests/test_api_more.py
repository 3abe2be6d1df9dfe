"""More PyTorch names against numpy and closed forms: dtype rules and
factories (result_type, promote_types, can_cast, scalar_tensor, asarray,
empty_strided, frombuffer), fill, rsub, isposinf, isneginf, isreal,
nextafter, the scatter forms, put, index_reduce, histogram, histogramdd,
gradient, chain_matmul, frobenius_norm, nuclear_norm, lu_unpack,
kaiser_window, the torch-level nn forms, the new random fills, the
determinism switches and the new Tensor methods."""

import math

import numpy as np
import pytest
from numeric import numeric_grad

import ddpc
from ddpc import nn


def _np(t):
    return np.asarray(t.detach())


# ---- dtypes and factories ----------------------------------------------------------------

def test_result_type_follows_pytorch_categories():
    ints, f16 = ddpc.zeros(3, dtype=ddpc.int32), ddpc.zeros(3, dtype=ddpc.float16)
    assert ddpc.result_type(ints, 2.5) is ddpc.float32  # a float number beside integers: the default dtype
    assert ddpc.result_type(ints, 7) is ddpc.int32
    assert ddpc.result_type(ddpc.zeros(2, dtype=ddpc.uint8), 300) is ddpc.uint8
    assert ddpc.result_type(f16, ddpc.tensor(1.0, dtype=ddpc.float64)) is ddpc.float16
    assert ddpc.result_type(ints, ddpc.tensor(1.0, dtype=ddpc.float64)) is ddpc.float64
    assert ddpc.result_type(ddpc.tensor(1), ddpc.tensor(2.0)) is ddpc.float32
    assert ddpc.result_type(True, ints) is ddpc.int32
    assert ddpc.promote_types(ddpc.float16, ddpc.bfloat16) is ddpc.float32
    assert ddpc.promote_types("int32", ddpc.uint8) is ddpc.int32
    assert ddpc.can_cast(ddpc.float64, ddpc.float16) and ddpc.can_cast(ddpc.int64, ddpc.uint8)
    assert not ddpc.can_cast(ddpc.float32, ddpc.int64)


def test_scalar_tensor_empty_strided_and_frombuffer():
    s = ddpc.scalar_tensor(3)
    assert s.shape == () and s.dtype is ddpc.float32 and s.item() == 3.0
    assert ddpc.scalar_tensor(2, dtype=ddpc.int64).dtype is ddpc.int64
    e = ddpc.empty_strided((2, 3), (3, 1), dtype=ddpc.float64)
    assert e.shape == (2, 3) and e.dtype is ddpc.float64 and e.is_contiguous()
    with pytest.raises(ValueError, match="length of strides"):
        ddpc.empty_strided((2, 3), (1,))
    assert ddpc.ones(1, dtype=ddpc.int32).new_empty_strided((4, 2), (2, 1)).dtype is ddpc.int32
    raw = bytearray(np.arange(5, dtype=np.int32).tobytes())
    t = ddpc.frombuffer(raw, dtype=ddpc.int32, count=3, offset=4)
    assert t.tolist() == [1, 2, 3]
    raw[4:8] = np.int32(-7).tobytes()
    assert t[0].item() == -7  # the buffer's own memory
    with pytest.raises(ValueError, match="multiple of element size"):
        ddpc.frombuffer(raw, dtype=ddpc.float64)
    with pytest.raises(ValueError, match="must not be greater"):
        ddpc.frombuffer(raw, dtype=ddpc.int32, count=6)


def test_asarray_shares_where_it_can():
    arr = np.arange(4.0)
    t = ddpc.asarray(arr)
    arr[1] = 10
    assert t[1].item() == 10
    assert ddpc.asarray(arr, copy=True).data_ptr() != t.data_ptr()
    with pytest.raises(ValueError, match="copy=False"):
        ddpc.asarray(arr, dtype=ddpc.float32, copy=False)
    with pytest.raises(ValueError, match="copy=False"):
        ddpc.asarray([1, 2], copy=False)
    x = ddpc.ones(3)
    assert ddpc.asarray(x) is x
    leaf = ddpc.asarray(x, requires_grad=True)
    assert leaf.requires_grad and leaf.is_leaf and not x.requires_grad and leaf.data_ptr() == x.data_ptr()


# ---- pointwise ---------------------------------------------------------------------------

def test_fill_and_rsub_gradients():
    x = ddpc.tensor([[1.0, -2.0], [3.0, 4.0]], requires_grad=True)
    v = ddpc.tensor(0.5, requires_grad=True)
    y = ddpc.fill(x, v)
    assert _np(y).tolist() == [[0.5, 0.5], [0.5, 0.5]]
    (y * ddpc.tensor([[1.0, 2.0], [3.0, 4.0]])).sum().backward()
    assert _np(x.grad).tolist() == [[0, 0], [0, 0]] and v.grad.item() == 10.0
    assert ddpc.fill(ddpc.zeros(2, dtype=ddpc.int64), 3).tolist() == [3, 3]
    with pytest.raises(ValueError, match="0-dimension"):
        ddpc.fill(x, ddpc.ones(2))
    a, b = ddpc.tensor([1.0, 2.0], requires_grad=True), ddpc.tensor([5.0, 7.0], requires_grad=True)
    out = ddpc.rsub(a, b, alpha=3)
    assert _np(out).tolist() == [2.0, 1.0]
    out.sum().backward()
    assert _np(a.grad).tolist() == [-3.0, -3.0] and _np(b.grad).tolist() == [1.0, 1.0]
    assert ddpc.rsub(a, 10).tolist() == [9.0, 8.0]


def test_infinity_predicates():
    x = ddpc.tensor([1.0, math.inf, -math.inf, math.nan])
    assert ddpc.isposinf(x).tolist() == [0, 1, 0, 0] and x.isneginf().tolist() == [0, 0, 1, 0]
    assert ddpc.isreal(x).tolist() == [1, 1, 1, 1] and x.isposinf().dtype is ddpc.bool
    assert ddpc.isneginf(ddpc.tensor([-1, 2])).tolist() == [0, 0]


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_nextafter_matches_numpy(dtype):
    a = np.array([0.0, -0.0, 1.0, -1.0, 1e-40, np.inf, -np.inf, 2.0 ** -126, np.nan, 5.0, 1.0], dtype=dtype)
    b = np.array([1.0, -1.0, 2.0, -np.inf, 0.0, 0.0, 1.0, 0.0, 1.0, 5.0, np.nan], dtype=dtype)
    got = ddpc.nextafter(ddpc.tensor(a), ddpc.tensor(b))
    assert got.dtype is getattr(ddpc, dtype)
    np.testing.assert_array_equal(_np(got), np.nextafter(a, b))
    np.testing.assert_array_equal(_np(ddpc.tensor(a[:, None]).nextafter(ddpc.tensor(b))),
                                  np.nextafter(a[:, None], b))
    x = ddpc.tensor(a)
    x.nextafter_(ddpc.tensor(b))
    np.testing.assert_array_equal(_np(x), np.nextafter(a, b))


def test_nextafter_refuses_other_dtypes():
    with pytest.raises(TypeError, match="float32 or float64"):
        ddpc.nextafter(ddpc.ones(2, dtype=ddpc.int64), ddpc.zeros(2, dtype=ddpc.int64))
    with pytest.raises(TypeError, match="float32 or float64"):
        ddpc.nextafter(ddpc.ones(2, dtype=ddpc.float16), ddpc.zeros(2, dtype=ddpc.float16))


@pytest.mark.gpu
def test_nextafter_on_gpu_matches_host():
    for dt in (ddpc.float32, ddpc.float64):
        a = ddpc.tensor([0.0, 1.0, -1.0, 1e-40, math.inf, 3.0], dtype=dt)
        b = ddpc.tensor([1.0, 0.0, -2.0, 0.0, 0.0, 3.0], dtype=dt)
        np.testing.assert_array_equal(_np(ddpc.nextafter(a.cuda(), b.cuda()).cpu()), _np(ddpc.nextafter(a, b)))
        np.testing.assert_array_equal(_np(ddpc.nextafter(a.cuda().reshape(-1, 1), b.cuda()).cpu()),
                                      _np(ddpc.nextafter(a.reshape(-1, 1), b)))


# ---- layout ------------------------------------------------------------------------------

def _check_scatter_form(fn, x0, src0, region):
    """fn(x, src) replaces x[region] by src: values, and gradients against numeric ones."""
    x, src = ddpc.tensor(x0, requires_grad=True), ddpc.tensor(src0, requires_grad=True)
    want = x0.copy()
    want[region] = src0
    out = fn(x, src)
    np.testing.assert_array_equal(_np(out), want)
    w = np.random.default_rng(9).standard_normal(x0.shape)
    (out * ddpc.tensor(w)).sum().backward()
    np.testing.assert_allclose(_np(x.grad), numeric_grad(lambda a: float((fn(ddpc.tensor(a), ddpc.tensor(src0))
                                                                           * ddpc.tensor(w)).sum()), x0), atol=1e-6)
    np.testing.assert_allclose(_np(src.grad), w[region], atol=1e-12)


def test_scatter_forms():
    rng = np.random.default_rng(0)
    x0 = rng.standard_normal((3, 4, 5))
    _check_scatter_form(lambda x, s: ddpc.select_scatter(x, s, 1, -1), x0, rng.standard_normal((3, 5)),
                        (slice(None), 3))
    _check_scatter_form(lambda x, s: x.slice_scatter(s, 2, 1, None, 2), x0, rng.standard_normal((3, 4, 2)),
                        (slice(None), slice(None), slice(1, None, 2)))
    rows = np.arange(3)
    diag_src = rng.standard_normal((4, 3))  # input.diagonal(1, 0, 2): the diagonal last
    want = x0.copy()
    want[rows, :, rows + 1] = diag_src.T
    got = ddpc.diagonal_scatter(ddpc.tensor(x0), ddpc.tensor(diag_src), 1, 0, 2)
    np.testing.assert_array_equal(_np(got), want)
    np.testing.assert_array_equal(_np(got.diagonal(1, 0, 2)), diag_src)
    with pytest.raises(ValueError, match="slice of self"):
        ddpc.slice_scatter(ddpc.tensor(x0), ddpc.ones(3, 4, 1), 2, 0, 2)
    with pytest.raises(IndexError):
        ddpc.select_scatter(ddpc.tensor(x0), ddpc.ones(3, 5), 1, 4)


def test_put_and_index_reduce():
    x0 = np.arange(6.0).reshape(2, 3)
    got = ddpc.put(ddpc.tensor(x0), ddpc.tensor([0, -1, 4]), ddpc.tensor([10.0, 20.0, 30.0], dtype=ddpc.float64))
    assert _np(got).tolist() == [[10.0, 1, 2], [3, 30, 20]]
    acc = ddpc.tensor(x0).put_(ddpc.tensor([1, 1]), ddpc.tensor([1.0, 2.0], dtype=ddpc.float64), accumulate=True)
    assert acc[0, 1].item() == 4.0
    with pytest.raises(ValueError, match="same number of elements"):
        ddpc.tensor(x0).put(ddpc.tensor([1]), ddpc.tensor([1.0, 2.0], dtype=ddpc.float64))
    rng = np.random.default_rng(1)
    base, src, index = rng.standard_normal((4, 3)), rng.standard_normal((5, 3)), np.array([0, 2, 2, 0, 3])
    reducers = {"prod": np.prod, "mean": np.mean, "amax": np.max, "amin": np.min}
    for reduce, fn in reducers.items():
        for include_self in (True, False):
            want = base.copy()
            for row in range(4):
                taken = src[index == row]
                if len(taken):
                    want[row] = fn(np.vstack([base[row:row + 1], taken]) if include_self else taken, axis=0)
            got = ddpc.index_reduce(ddpc.tensor(base), 0, ddpc.tensor(index), ddpc.tensor(src), reduce,
                                    include_self=include_self)
            np.testing.assert_allclose(_np(got), want, rtol=1e-12, err_msg=f"{reduce} {include_self}")
    x = ddpc.tensor(base, requires_grad=True)
    x.index_reduce(0, ddpc.tensor(index), ddpc.tensor(src), "prod").sum().backward()
    want = numeric_grad(lambda a: float(ddpc.index_reduce(ddpc.tensor(a), 0, ddpc.tensor(index), ddpc.tensor(src),
                                                          "prod").sum()), base)
    np.testing.assert_allclose(_np(x.grad), want, atol=1e-6)
    with pytest.raises(ValueError, match="prod, mean, amax or amin"):
        ddpc.index_reduce(x, 0, ddpc.tensor(index), ddpc.tensor(src), "sum")


def test_gradient_matches_numpy():
    rng = np.random.default_rng(2)
    f = rng.standard_normal((5, 6))
    x = np.cumsum(rng.uniform(0.5, 2.0, 5))
    for edge_order in (1, 2):
        got = ddpc.gradient(ddpc.tensor(f), spacing=[2.0, 0.5], edge_order=edge_order)
        for g, w in zip(got, np.gradient(f, 2.0, 0.5, edge_order=edge_order)):
            np.testing.assert_allclose(_np(g), w, rtol=1e-12)
        (g,) = ddpc.gradient(ddpc.tensor(f), spacing=[ddpc.tensor(x)], dim=0, edge_order=edge_order)
        np.testing.assert_allclose(_np(g), np.gradient(f, x, axis=0, edge_order=edge_order), rtol=1e-12)
    t = ddpc.tensor(f, requires_grad=True)
    w = rng.standard_normal(f.shape)
    (ddpc.gradient(t, dim=1, edge_order=2)[0] * ddpc.tensor(w)).sum().backward()
    want = numeric_grad(lambda a: float((np.gradient(a, axis=1, edge_order=2) * w).sum()), f)
    np.testing.assert_allclose(_np(t.grad), want, atol=1e-6)
    (ints,) = ddpc.gradient(ddpc.arange(5) ** 2)
    assert ints.dtype is ddpc.float32 and _np(ints).tolist() == [1, 2, 4, 6, 7]
    with pytest.raises(ValueError, match="edge_order"):
        ddpc.gradient(ddpc.ones(3), edge_order=3)
    with pytest.raises(ValueError, match="at least edge_order"):
        ddpc.gradient(ddpc.ones(2), edge_order=2)


# ---- histograms --------------------------------------------------------------------------

def test_histogram_matches_numpy():
    rng = np.random.default_rng(3)
    x = rng.standard_normal(300)
    w = rng.uniform(0, 1, 300)
    for kwargs in ({"bins": 8}, {"bins": 5, "range": (-1.0, 2.0)}, {"bins": 6, "density": True},
                   {"bins": 4, "weight": w}):
        d_kwargs = {k: ddpc.tensor(v) if k == "weight" else v for k, v in kwargs.items()}
        n_kwargs = {"weights" if k == "weight" else k: v for k, v in kwargs.items()}
        hist, edges = ddpc.histogram(ddpc.tensor(x), **d_kwargs)
        want, want_edges = np.histogram(x, **n_kwargs)
        np.testing.assert_allclose(_np(edges), want_edges, rtol=1e-12)
        np.testing.assert_allclose(_np(hist), want, rtol=1e-12, err_msg=str(kwargs))
    edges = np.array([-1.0, 0.0, 0.5, 3.0])
    hist, _ = ddpc.tensor(x).histogram(ddpc.tensor(edges))
    np.testing.assert_array_equal(_np(hist), np.histogram(x, edges)[0])
    hist, edges = ddpc.histogram(ddpc.full((4,), 2.0), 2)
    assert _np(edges).tolist() == [1.5, 2.0, 2.5] and _np(hist).tolist() == [0, 4]
    with pytest.raises(TypeError, match="floating"):
        ddpc.histogram(ddpc.tensor([1, 2]), 2)
    with pytest.raises(ValueError, match="not finite"):
        ddpc.histogram(ddpc.tensor([0.0, math.inf]), 2)


def test_histogramdd_matches_numpy():
    rng = np.random.default_rng(4)
    pts = rng.standard_normal((200, 3))
    w = rng.uniform(0, 1, 200)
    hist, edges = ddpc.histogramdd(ddpc.tensor(pts), [3, 4, 2], weight=ddpc.tensor(w), density=True)
    want, want_edges = np.histogramdd(pts, [3, 4, 2], weights=w, density=True)
    np.testing.assert_allclose(_np(hist), want, rtol=1e-10)
    for e, we in zip(edges, want_edges):
        np.testing.assert_allclose(_np(e), we, rtol=1e-12)
    hist, _ = ddpc.histogramdd(ddpc.tensor(pts.reshape(2, 100, 3)), 2, range=[-1, 1, -1, 1, -1, 1])
    np.testing.assert_array_equal(_np(hist), np.histogramdd(pts, 2, range=[(-1, 1)] * 3)[0])


# ---- matrices and windows ----------------------------------------------------------------

def test_matrix_functions():
    rng = np.random.default_rng(5)
    a, b, c = rng.standard_normal((3, 4)), rng.standard_normal((4, 6)), rng.standard_normal((6, 2))
    np.testing.assert_allclose(_np(ddpc.chain_matmul(*map(ddpc.tensor, (a, b, c)))), a @ b @ c, rtol=1e-12)
    with pytest.raises(ValueError, match="one or more"):
        ddpc.chain_matmul()
    x = rng.standard_normal((2, 3, 4))
    np.testing.assert_allclose(_np(ddpc.frobenius_norm(ddpc.tensor(x), (1, 2))),
                               np.linalg.norm(x, "fro", axis=(1, 2)), rtol=1e-12)
    np.testing.assert_allclose(_np(ddpc.nuclear_norm(ddpc.tensor(x))), np.linalg.norm(x, "nuc", axis=(1, 2)),
                               rtol=1e-12)
    assert ddpc.nuclear_norm(ddpc.tensor(x[0]), True).shape == (1, 1)
    for shape in ((4, 4), (2, 5, 3), (3, 5)):
        A = rng.standard_normal(shape)
        LU, piv = ddpc.linalg.lu_factor(ddpc.tensor(A))
        P, L, U = ddpc.lu_unpack(LU, piv)
        np.testing.assert_allclose(_np(P @ L @ U), A, atol=1e-12)
        P2, L2, U2 = ddpc.lu_unpack(LU, piv, unpack_data=False)
        assert L2.numel() == 0 and U2.numel() == 0 and np.array_equal(_np(P2), _np(P))
    A = rng.standard_normal((4, 4))
    B = rng.standard_normal((4, 2))
    LU, piv = ddpc.linalg.lu_factor(ddpc.tensor(A))
    np.testing.assert_allclose(_np(ddpc.tensor(B).lu_solve(LU, piv)), np.linalg.solve(A, B), rtol=1e-10)


def test_kaiser_window():
    np.testing.assert_allclose(_np(ddpc.kaiser_window(9, False, 5.0, dtype=ddpc.float64)), np.kaiser(9, 5.0),
                               rtol=1e-12)
    np.testing.assert_allclose(_np(ddpc.kaiser_window(8, beta=12.0, dtype=ddpc.float64)), np.kaiser(9, 12.0)[:8],
                               rtol=1e-12)
    assert ddpc.kaiser_window(1).tolist() == [1.0] and ddpc.kaiser_window(0).shape == (0,)


# ---- nn forms ----------------------------------------------------------------------------

def test_torch_level_nn_forms():
    x = ddpc.randn(4, 5)
    assert ddpc.alpha_dropout(x, 0.5, False) is x and ddpc.feature_alpha_dropout(x, 0.5, False) is x
    dropped = ddpc.feature_alpha_dropout(ddpc.ones(6, 8, 3), 0.5, True)
    per_channel = _np(dropped).reshape(48, 3)
    assert np.all(per_channel == per_channel[:, :1])  # whole channels keep or drop together
    weight = ddpc.randn(10, 3)
    out, offset2bag, bag_size, max_indices = ddpc.embedding_bag(weight, ddpc.tensor([1, 2, 4, 2, 9]),
                                                                ddpc.tensor([0, 2, 2]), False, 2, False, None,
                                                                False, 2)
    w = _np(weight)
    np.testing.assert_array_equal(_np(out), [np.max(w[[1]], 0), np.zeros(3), np.max(w[[4, 9]], 0)])
    assert offset2bag.tolist() == [0, 0, 2, 2, 2] and bag_size.tolist() == [1, 0, 2]
    assert max_indices.tolist()[1] == [0, 0, 0]
    for name, cell_type, nstate in (("lstm_cell", nn.LSTMCell, 2), ("gru_cell", nn.GRUCell, 1),
                                    ("rnn_tanh_cell", nn.RNNCell, 1)):
        cell = cell_type(5, 4)
        h = tuple(ddpc.randn(3, 4) for _ in range(nstate))
        xs = ddpc.randn(3, 5)
        want = cell(xs, h if nstate == 2 else h[0])
        got = getattr(ddpc, name)(xs, h if nstate == 2 else h[0], cell.weight_ih, cell.weight_hh, cell.bias_ih,
                                  cell.bias_hh)
        for g, w_ in zip(got if nstate == 2 else (got,), want if nstate == 2 else (want,)):
            np.testing.assert_allclose(_np(g), _np(w_), rtol=1e-6)
    relu = nn.RNNCell(5, 4, nonlinearity="relu")
    xs, h0 = ddpc.randn(3, 5), ddpc.randn(3, 4)
    np.testing.assert_allclose(_np(ddpc.rnn_relu_cell(xs, h0, relu.weight_ih, relu.weight_hh, relu.bias_ih,
                                                      relu.bias_hh)), _np(relu(xs, h0)), rtol=1e-6)
    with pytest.raises(ValueError, match="2D input"):
        ddpc.gru_cell(ddpc.randn(5), ddpc.randn(4), relu.weight_ih, relu.weight_hh)


# ---- random fills and determinism --------------------------------------------------------

def test_random_fills_follow_their_distributions():
    ddpc.manual_seed(0)
    c = _np(ddpc.empty(20000, dtype=ddpc.float64).cauchy_(2.0, 0.5))
    assert abs(np.median(c) - 2.0) < 0.03 and abs(np.percentile(c, 75) - 2.5) < 0.05
    g = _np(ddpc.empty(20000, dtype=ddpc.int64).geometric_(0.25))
    assert g.min() >= 1 and abs(g.mean() - 4.0) < 0.1
    ln = np.log(_np(ddpc.empty(20000, dtype=ddpc.float64).log_normal_(0.5, 0.25)))
    assert abs(ln.mean() - 0.5) < 0.01 and abs(ln.std() - 0.25) < 0.01
    with pytest.raises(ValueError, match="sigma"):
        ddpc.empty(2).cauchy_(0.0, 0.0)
    with pytest.raises(ValueError, match=r"\(0, 1\)"):
        ddpc.empty(2).geometric_(1.0)
    with pytest.raises(TypeError, match="floating"):
        ddpc.empty(2, dtype=ddpc.int64).log_normal_()
    t = ddpc.zeros(3, requires_grad=True)
    for fill in (t.cauchy_, t.log_normal_, t.exponential_, lambda: t.geometric_(0.5)):
        with pytest.raises(RuntimeError, match="requires grad"):
            fill()


def test_deterministic_switches():
    try:
        assert not ddpc.are_deterministic_algorithms_enabled()
        ddpc.use_deterministic_algorithms(True, warn_only=True)
        assert ddpc.are_deterministic_algorithms_enabled() and ddpc.is_deterministic_algorithms_warn_only_enabled()
        ddpc.use_deterministic_algorithms(True)
        assert not ddpc.is_deterministic_algorithms_warn_only_enabled()
        # Host ops are deterministic: nothing raises.
        x = ddpc.zeros(3).scatter_add(0, ddpc.tensor([0, 0, 2]), ddpc.ones(3))
        assert x.tolist() == [2.0, 0.0, 1.0]
    finally:
        ddpc.use_deterministic_algorithms(False)


@pytest.mark.gpu
def test_deterministic_mode_refuses_gpu_atomics():
    index, src = ddpc.tensor([0, 0, 2]).cuda(), ddpc.ones(3).cuda()
    try:
        ddpc.use_deterministic_algorithms(True)
        with pytest.raises(RuntimeError, match="deterministic"):
            ddpc.zeros(3).cuda().scatter_add(0, index, src)
        counts = ddpc.histc(ddpc.tensor([0.1, 0.2, 0.9]).cuda(), 2, 0, 1)  # counts add exactly: allowed
        assert counts.cpu().tolist() == [2.0, 1.0]
        ddpc.use_deterministic_algorithms(True, warn_only=True)
        with pytest.warns(UserWarning, match="deterministic"):
            out = ddpc.zeros(3).cuda().scatter_add(0, index, src)
        assert out.cpu().tolist() == [2.0, 0.0, 1.0]
    finally:
        ddpc.use_deterministic_algorithms(False)


# ---- Tensor methods ----------------------------------------------------------------------

def test_tensor_methods():
    x = ddpc.arange(24.0).reshape(2, 3, 4)
    m = x[0]
    assert _np(m.H).tolist() == _np(m.T).tolist() and _np(x.mH).tolist() == _np(x.transpose(1, 2)).tolist()
    assert _np(x.adjoint()).tolist() == _np(x.mH).tolist()
    with pytest.raises(RuntimeError, match="matrices"):
        x.H
    assert x.is_cpu and x.get_device() == -1 and x.itemsize == 4 and x.ndimension() == 3 and not x.is_inference()
    c = x.narrow_copy(1, 1, 2)
    assert c.shape == (2, 2, 4) and c.data_ptr() != x.data_ptr()
    assert [t.shape for t in x.unsafe_split(2, 2)] == [(2, 3, 2)] * 2
    assert [t.shape for t in x.unsafe_chunk(3, 1)] == [(2, 1, 4)] * 3
    assert [t.shape for t in x.unsafe_split_with_sizes([1, 3], 2)] == [(2, 3, 1), (2, 3, 3)]
    assert ddpc.tensor([1.7, 255.0]).byte().tolist() == [1, 255]
    for name in ("char", "short"):
        with pytest.raises(TypeError, match="unknown dtype"):
            getattr(x, name)()
    f = ddpc.tensor([2.0, 3.0], dtype=ddpc.float64)
    assert f.float_power_(2).tolist() == [4.0, 9.0]
    with pytest.raises(TypeError, match="float64"):
        ddpc.ones(2).float_power_(2)
    assert ddpc.tensor([1, 2]).float_power(ddpc.tensor([0.5, 2])).dtype is ddpc.float64
    h = ddpc.tensor([-1.0, 0.0, 2.0])
    assert h.heaviside_(ddpc.tensor([7.0, 8.0, 9.0])).tolist() == [0.0, 8.0, 1.0]
    a, b = ddpc.tensor([1.0, math.nan, 3.0]), ddpc.tensor([2.0, 5.0, math.nan])
    assert a.fmax(b).tolist() == [2.0, 5.0, 3.0] and a.fmin(b).tolist() == [1.0, 5.0, 3.0]
    v = ddpc.tensor([1.0, 2.0])
    assert v.diag(1).shape == (3, 3) and v.diagflat().tolist() == [[1.0, 0.0], [0.0, 2.0]]
    assert v.reshape(1, 2).diag_embed().shape == (1, 2, 2)
    values, inverse, counts = ddpc.tensor([1, 1, 3, 1]).unique_consecutive(return_inverse=True, return_counts=True)
    assert values.tolist() == [1, 3, 1] and inverse.tolist() == [0, 0, 1, 2] and counts.tolist() == [2, 1, 1]
    hist, _ = ddpc.tensor([0.0, 1.0, 1.0]).histogram(2)
    assert hist.tolist() == [1.0, 2.0]
    assert ddpc.select(x, 1, -1).tolist() == x[:, 2].tolist()
    assert ddpc.concat([m, m], dim=1).shape == (3, 8) and ddpc.concatenate([m, m], axis=0).shape == (6, 4)


def test_new_names_are_exported():
    for name in ("select", "concat", "concatenate", "asarray", "result_type", "promote_types", "can_cast",
                 "scalar_tensor", "empty_strided", "frombuffer", "fill", "rsub", "isposinf", "isneginf", "isreal",
                 "nextafter", "select_scatter", "slice_scatter", "diagonal_scatter", "index_reduce", "histogram",
                 "histogramdd", "gradient", "chain_matmul", "frobenius_norm", "nuclear_norm", "lu_unpack",
                 "kaiser_window", "alpha_dropout", "feature_alpha_dropout", "embedding_bag", "lstm_cell", "gru_cell",
                 "rnn_tanh_cell", "rnn_relu_cell", "use_deterministic_algorithms",
                 "are_deterministic_algorithms_enabled", "is_deterministic_algorithms_warn_only_enabled", "put"):
        assert name in ddpc.__all__ and hasattr(ddpc, name), name


def test_memory_formats_are_accepted_and_contiguity_follows_pytorchs_rule():
    x = ddpc.randn(2, 3, 4, 5, requires_grad=True)
    # PyTorch copies into the layout asked for; ddpc copies (in row-major order), so writes stay in the copy
    for y in (x.to(memory_format=ddpc.channels_last), x.contiguous(memory_format=ddpc.channels_last)):
        assert y is not x and y.tolist() == x.tolist() and y.grad_fn is not None
        y.detach().fill_(0)
        assert x.abs().sum().item() > 0
    one_channel = ddpc.randn(2, 1, 4, 5)  # contiguous as channels_last too: no copy, as in PyTorch
    assert one_channel.contiguous(memory_format=ddpc.channels_last) is one_channel
    assert x.is_contiguous() and x.is_contiguous(memory_format=ddpc.contiguous_format)
    assert not x.is_contiguous(memory_format=ddpc.channels_last)  # row-major NCHW is not NHWC
    assert ddpc.empty(2, 1, 4, 5).is_contiguous(memory_format=ddpc.channels_last)  # one channel: both
    assert ddpc.empty(2, 3, 1, 1).is_contiguous(memory_format=ddpc.channels_last)  # one pixel: both
    assert not ddpc.empty(2, 3).is_contiguous(memory_format=ddpc.channels_last)  # not 4-d
    assert ddpc.empty(2, 1, 3, 4, 5).is_contiguous(memory_format=ddpc.channels_last_3d)
    y = x.clone(memory_format=ddpc.contiguous_format)
    assert y.tolist() == x.tolist() and y.grad_fn is not None
    for like in (ddpc.zeros_like, ddpc.ones_like, ddpc.empty_like, ddpc.rand_like, ddpc.randn_like):
        assert like(x, memory_format=ddpc.channels_last).shape == x.shape
    assert ddpc.full_like(x, 2.0, memory_format=ddpc.preserve_format).sum().item() == 2.0 * x.numel()
    assert ddpc.zeros_like(x, requires_grad=True).requires_grad
    conv = nn.Conv2d(3, 4, 3).to(memory_format=ddpc.channels_last)
    assert conv(x.detach()).shape == (2, 4, 2, 3)
    with pytest.raises(TypeError, match="memory_format"):
        x.contiguous(memory_format="channels_last")
    assert repr(ddpc.channels_last) == "ddpc.channels_last" and isinstance(ddpc.channels_last, ddpc.memory_format)
