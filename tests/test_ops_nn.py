"""The nn ops of _C (GEMM, activations, broadcasting, reductions, dropout,
losses, optimizer steps) against numpy, on the host and (gpu) on CUDA."""

import math

import numpy as np
import pytest

import ddpc
from ddpc import _C

RELU, GELU, TANH, SIGMOID, EXP, LOG, POW = range(7)
MSE = 0
ADD, SUB, MUL, DIV, RSUB, RDIV = range(6)
rng = np.random.default_rng(0)
erf = np.vectorize(math.erf)


def buf(arr, device="cpu"):
    return ddpc.tensor(np.ascontiguousarray(arr), device=device)._buf


def empty(shape, dtype, device="cpu"):
    return ddpc.empty(*shape, dtype=dtype, device=device)._buf


def host(b):
    return np.asarray(ddpc.Tensor(b).cpu())


def tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ta,tb", [(0, 0), (0, 1), (1, 0), (1, 1)])
def test_gemm_transposes_and_bias(dtype, ta, tb):
    M, K, N = 7, 5, 3
    a = rng.standard_normal((K, M) if ta else (M, K)).astype(dtype)
    b = rng.standard_normal((N, K) if tb else (K, N)).astype(dtype)
    bias = rng.standard_normal(N).astype(dtype)
    want = (a.T if ta else a) @ (b.T if tb else b)
    out = empty((M, N), dtype)
    _C.gemm(out, buf(a), buf(b), ta, tb)
    np.testing.assert_allclose(host(out), want, **tol(dtype))
    _C.gemm(out, buf(a), buf(b), ta, tb, buf(bias))
    np.testing.assert_allclose(host(out), want + bias, **tol(dtype))
    _C.gemm(out, buf(a), buf(b), ta, tb, accumulate=True)
    np.testing.assert_allclose(host(out), 2 * want + bias, **tol(dtype))


def test_gemm_checks_shapes_and_dtypes():
    with pytest.raises(ValueError, match="inner dimensions"):
        _C.gemm(empty((2, 2), np.float32), buf(np.ones((2, 3), np.float32)), buf(np.ones((2, 2), np.float32)))
    with pytest.raises(TypeError, match="dtype"):
        _C.gemm(empty((2, 2), np.float32), buf(np.ones((2, 2), np.float64)), buf(np.ones((2, 2), np.float32)))
    with pytest.raises(ValueError, match="bias"):
        _C.gemm(empty((2, 2), np.float32), buf(np.ones((2, 2), np.float32)), buf(np.ones((2, 2), np.float32)),
                bias=buf(np.ones(3, np.float32)))


def _unary_ref(op, x, p):
    return {RELU: lambda: np.maximum(x, 0), GELU: lambda: 0.5 * x * (1 + erf(x / math.sqrt(2))),
            TANH: lambda: np.tanh(x), SIGMOID: lambda: 1 / (1 + np.exp(-x)), EXP: lambda: np.exp(x),
            LOG: lambda: np.log(x), POW: lambda: x ** p}[op]()


def _unary_grad_ref(op, x, p):
    y = _unary_ref(op, x, p)
    return {RELU: lambda: (x > 0).astype(x.dtype),
            GELU: lambda: 0.5 * (1 + erf(x / math.sqrt(2))) + x * np.exp(-x * x / 2) / math.sqrt(2 * math.pi),
            TANH: lambda: 1 - y * y, SIGMOID: lambda: y * (1 - y), EXP: lambda: y, LOG: lambda: 1 / x,
            POW: lambda: p * x ** (p - 1)}[op]()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("op", [RELU, GELU, TANH, SIGMOID, EXP, LOG, POW])
def test_unary_forward_backward(dtype, op):
    x = rng.standard_normal(1000).astype(dtype)
    if op in (LOG, POW):
        x = np.abs(x) + 0.1
    p = 2.5
    out = empty(x.shape, dtype)
    _C.unary(op, out, buf(x), p)
    close = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(host(out), _unary_ref(op, x, p).astype(dtype), **close)
    g = rng.standard_normal(1000).astype(dtype)
    saved = out if op in (TANH, SIGMOID, EXP) else buf(x)
    gx = empty(x.shape, dtype)
    _C.unary_backward(op, gx, buf(g), saved, p)
    close = dict(rtol=1e-4, atol=1e-5) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(host(gx), g * _unary_grad_ref(op, x.astype(np.float64), p), **close)


@pytest.mark.parametrize("op", [ADD, SUB, MUL, DIV, RSUB, RDIV])
def test_binary_rows_broadcasts_a_row(op):
    a = rng.standard_normal((6, 4)) + 3
    row = rng.standard_normal(4) + 3
    want = {ADD: a + row, SUB: a - row, MUL: a * row, DIV: a / row, RSUB: row - a, RDIV: row / a}[op]
    out = empty(a.shape, np.float64)
    _C.binary_rows(op, out, buf(a), buf(row))
    np.testing.assert_allclose(host(out), want, rtol=1e-12)
    with pytest.raises(ValueError, match="whole rows"):
        _C.binary_rows(op, out, buf(a), buf(np.ones(5)))


@pytest.mark.parametrize("shape,dim", [((5, 3), 0), ((5, 3), 1), ((2, 3, 4), 1), ((2, 3, 4), 2), ((7,), 0)])
def test_sum_dim(shape, dim):
    a = rng.standard_normal(shape)
    want = a.sum(axis=dim)
    out = empty(want.shape, np.float64)
    _C.sum_dim(out, buf(a), dim)
    np.testing.assert_allclose(host(out), want, rtol=1e-12)


def test_transpose():
    a = rng.standard_normal((37, 70)).astype(np.float32)
    out = empty((70, 37), np.float32)
    _C.transpose(out, buf(a))
    np.testing.assert_array_equal(host(out), a.T)


def test_dropout_mask_is_seeded_and_scaled():
    x = np.ones(20000, np.float32)
    out, again = empty(x.shape, np.float32), empty(x.shape, np.float32)
    _C.dropout(out, buf(x), 0.25, 123, 7)
    _C.dropout(again, buf(x), 0.25, 123, 7)
    got = host(out)
    np.testing.assert_array_equal(got, host(again))
    assert set(np.unique(got)) <= {0.0, np.float32(1 / 0.75)}
    assert abs((got == 0).mean() - 0.25) < 0.02
    other = empty(x.shape, np.float32)
    _C.dropout(other, buf(x), 0.25, 124, 7)
    assert not np.array_equal(host(other), got)


def _ce_ref(x, t, ignore, eps, reduction):
    lse = np.log(np.exp(x - x.max(1, keepdims=True)).sum(1)) + x.max(1)
    C = x.shape[1]
    valid = t != ignore
    tt = np.where(valid, t, 0)
    nll = lse - x[np.arange(len(t)), tt]
    smooth = lse - x.sum(1) / C
    loss = np.where(valid, (1 - eps) * nll + eps * smooth, 0)
    if reduction == 0:
        return loss
    return loss.sum() / (valid.sum() if reduction == 1 else 1)


@pytest.mark.parametrize("reduction", [0, 1, 2])
@pytest.mark.parametrize("eps", [0.0, 0.1])
def test_cross_entropy_forward_backward(reduction, eps):
    N, C = 9, 5
    x = rng.standard_normal((N, C)) * 3
    t = rng.integers(0, C, N)
    t[2] = -100
    want = _ce_ref(x, t, -100, eps, reduction)
    out = empty(want.shape, np.float64)
    _C.cross_entropy(out, buf(x), buf(t), None, -100, eps, reduction, False)
    np.testing.assert_allclose(host(out), want, rtol=1e-12)
    g = rng.standard_normal(want.shape)
    gx = empty(x.shape, np.float64)
    _C.cross_entropy_backward(gx, buf(g), buf(x), buf(t), None, -100, eps, reduction, False)
    # Central differences of sum(g * loss(x)).
    h, num = 1e-6, np.zeros_like(x)
    for i in range(N):
        for c in range(C):
            xp, xm = x.copy(), x.copy()
            xp[i, c] += h
            xm[i, c] -= h
            num[i, c] = ((g * _ce_ref(xp, t, -100, eps, reduction)).sum()
                         - (g * _ce_ref(xm, t, -100, eps, reduction)).sum()) / (2 * h)
    np.testing.assert_allclose(host(gx), num, atol=1e-7)
    assert np.all(host(gx)[2] == 0)


def test_cross_entropy_rejects_bad_targets():
    x = np.zeros((2, 3), np.float32)
    with pytest.raises(ValueError, match="not a class"):
        _C.cross_entropy(empty((), np.float32), buf(x), buf(np.array([0, 3])), None, -100, 0.0, 1, False)
    with pytest.raises(ValueError, match="int64"):
        _C.cross_entropy(empty((), np.float32), buf(x), buf(np.array([0, 1], np.int32)), None, -100, 0.0, 1, False)


@pytest.mark.parametrize("reduction", [0, 1, 2])
def test_mse_forward_backward(reduction):
    a, b = rng.standard_normal((4, 3)), rng.standard_normal((4, 3))
    d = (a - b) ** 2
    want = d if reduction == 0 else (d.mean() if reduction == 1 else d.sum())
    out = empty(np.shape(want), np.float64)
    _C.loss(MSE, out, buf(a), buf(b), None, 0.0, reduction)
    np.testing.assert_allclose(host(out), want, rtol=1e-12)
    g = rng.standard_normal(np.shape(want))
    ga = empty(a.shape, np.float64)
    _C.loss_backward(MSE, False, ga, buf(g), buf(a), buf(b), None, 0.0, reduction)
    scale = g if reduction == 0 else (g / a.size if reduction == 1 else g)
    np.testing.assert_allclose(host(ga), 2 * (a - b) * scale, rtol=1e-12)


def test_nn_ops_refuse_integer_dtypes():
    with pytest.raises(TypeError, match="float32 or float64"):
        _C.unary(RELU, empty((3,), np.int64), buf(np.arange(3)))


# ---- the same ops on a GPU against the host ------------------------------------------------

def _both(arr):
    return buf(arr), buf(arr, "cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gpu_ops_match_host(dtype):
    x = rng.standard_normal((33, 70)).astype(dtype)
    w = rng.standard_normal((20, 70)).astype(dtype)
    bias = rng.standard_normal(20).astype(dtype)
    g = rng.standard_normal((33, 20)).astype(dtype)
    t = rng.integers(0, 20, 33)
    t[3] = -100
    close = dict(rtol=1e-4, atol=1e-4) if dtype == np.float32 else dict(rtol=1e-10, atol=1e-10)

    def run(device):
        def B(a):
            return buf(a, device)

        res = {}
        out = empty((33, 20), dtype, device)
        _C.gemm(out, B(x), B(w), False, True, B(bias))
        res["gemm"] = out
        for ta, tb, shp, a, b in [(1, 0, (70, 20), x, g), (0, 0, (33, 70), g, w)]:
            o = empty(shp, dtype, device)
            _C.gemm(o, B(a), B(b), ta, tb)
            res[f"gemm{ta}{tb}"] = o
        for op in range(7):
            src = np.abs(x) + 0.1 if op in (LOG, POW) else x
            o = empty(x.shape, dtype, device)
            _C.unary(op, o, B(src), 1.5)
            gx = empty(x.shape, dtype, device)
            _C.unary_backward(op, gx, B(x), o if op in (TANH, SIGMOID, EXP) else B(src), 1.5)
            res[f"unary{op}"], res[f"unary_bwd{op}"] = o, gx
        for op in range(6):
            o = empty(g.shape, dtype, device)
            _C.binary_rows(op, o, B(g + 5), B(bias + 5))
            res[f"rows{op}"] = o
        for dim in (0, 1):
            o = empty((x.shape[1 - dim],), dtype, device)
            _C.sum_dim(o, B(x), dim)
            res[f"sum{dim}"] = o
        o = empty((70, 33), dtype, device)
        _C.transpose(o, B(x))
        res["transpose"] = o
        o = empty(x.shape, dtype, device)
        _C.dropout(o, B(x), 0.3, 5, 11)
        res["dropout"] = o
        for take_log in (False, True):
            o = empty(x.shape, dtype, device)
            _C.softmax(o, B(x), take_log)
            gx = empty(x.shape, dtype, device)
            _C.softmax_backward(gx, B(x * 0.5), o, take_log)
            res[f"softmax{take_log}"], res[f"softmax_bwd{take_log}"] = o, gx
        for red in (0, 1, 2):
            o = empty((33,) if red == 0 else (), dtype, device)
            _C.cross_entropy(o, B(g), buf(t, device), None, -100, 0.1, red, False)
            go = empty((33,) if red == 0 else (), dtype, device)
            _C.fill(go, 0.5)
            gx = empty(g.shape, dtype, device)
            _C.cross_entropy_backward(gx, go, B(g), buf(t, device), None, -100, 0.1, red, False)
            res[f"ce{red}"], res[f"ce_bwd{red}"] = o, gx
            o = empty(x.shape if red == 0 else (), dtype, device)
            _C.loss(MSE, o, B(x), B(x * 0.5), None, 0.0, red)
            go = empty(x.shape if red == 0 else (), dtype, device)
            _C.fill(go, 0.5)
            ga = empty(x.shape, dtype, device)
            _C.loss_backward(MSE, False, ga, go, B(x), B(x * 0.5), None, 0.0, red)
            res[f"mse{red}"], res[f"mse_bwd{red}"] = o, ga
        p, gr, m, v, mx = (B(x.copy()) for _ in range(5))
        _C.adam_step([p], [B(x * 0.1)], [m], [v], [mx], 3, 1e-3, 0.9, 0.999,
                     1e-8, 0.01, True, True)
        res["adam"] = p
        p, bf = B(x.copy()), B(x * 0.2)
        _C.sgd_step([p], [B(x * 0.1)], [bf], 0.1, 0.9, 0.1, 0.01, False, False, True)
        res["sgd"] = p
        return res

    cpu, gpu = run("cpu"), run("cuda")
    for k in cpu:
        np.testing.assert_allclose(host(gpu[k]), host(cpu[k]), err_msg=k, **close)


def test_float32_activations_handle_extremes():
    x = np.array([0.0, -0.0, 1e-7, -1e-7, 0.6249, 0.6251, 30.0, -30.0, 88.0, 89.0, -87.5, -104.0, np.inf, -np.inf,
                  np.nan], np.float32)
    x64 = x.astype(np.float64)
    with np.errstate(over="ignore"):
        refs = {TANH: np.tanh(x64), SIGMOID: 1 / (1 + np.exp(-x64)), EXP: np.exp(x64)}
        refs = {op: v.astype(np.float32) for op, v in refs.items()}
    for op, want in refs.items():
        out = empty(x.shape, np.float32)
        _C.unary(op, out, buf(x))
        got = host(out)
        np.testing.assert_array_equal(np.isnan(got), np.isnan(want), err_msg=str(op))
        finite = ~np.isnan(want)
        # Results below float32's normal range may flush to zero.
        np.testing.assert_allclose(got[finite], want[finite], rtol=3e-7, atol=1.2e-38,
                                   err_msg=str(op))


def test_float32_exp_is_accurate_up_to_both_ends_of_its_range():
    x = np.array([88.0, 88.3, 88.7, 88.72, -87.0, -87.2, -87.3, -87.33], np.float32)
    out = empty(x.shape, np.float32)
    _C.unary(EXP, out, buf(x))
    np.testing.assert_allclose(host(out), np.exp(x.astype(np.float64)), rtol=3e-7)
    # Below float32's normal range results round to subnormals instead of flushing to zero.
    x = np.array([-90.0, -100.0, -103.9, -104.5, 88.73], np.float32)
    out = empty(x.shape, np.float32)
    _C.unary(EXP, out, buf(x))
    with np.errstate(over="ignore"):
        want = np.exp(x.astype(np.float64)).astype(np.float32)
    np.testing.assert_allclose(host(out), want, rtol=0, atol=1.5e-45)
    assert host(out)[-1] == np.inf and host(out)[2] > 0


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_relu_keeps_nan_and_passes_its_gradient_on(dtype):
    x = np.array([np.nan, -1.0, -0.0, 0.0, 2.0], dtype)
    out = empty(x.shape, dtype)
    _C.unary(RELU, out, buf(x))
    got = host(out)
    assert np.isnan(got[0]) and got[1:].tolist() == [0.0, 0.0, 0.0, 2.0]
    gx = empty(x.shape, dtype)
    _C.unary_backward(RELU, gx, buf(np.full(5, 3.0, dtype)), buf(x))
    assert host(gx).tolist() == [3.0, 0.0, 0.0, 0.0, 3.0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_softmax_and_cross_entropy_keep_ties_among_huge_logits(dtype):
    x = np.array([[1e20, 1e20, 0.0], [-1e17, 5.0, -1e17], [1.0, 2.0, 3.0]], dtype)
    x64 = x.astype(np.float64)
    shifted = x64 - x64.max(1, keepdims=True)
    lsm = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    for take_log, want in ((True, lsm), (False, np.exp(lsm))):
        out = empty(x.shape, dtype)
        _C.softmax(out, buf(x), take_log)
        np.testing.assert_allclose(host(out), want, rtol=1e-6)
    t = np.array([0, 1, 2])
    for eps in (0.0, 0.1):
        out = empty((3,), dtype)
        _C.cross_entropy(out, buf(x), buf(t), None, -100, eps, 0, False)
        want = -(1 - eps) * lsm[np.arange(3), t] - eps * lsm.mean(1)
        np.testing.assert_allclose(host(out), want, rtol=1e-6)
    gx, go = empty(x.shape, dtype), buf(np.ones(3, dtype))
    _C.cross_entropy_backward(gx, go, buf(x), buf(t), None, -100, 0.0, 0, False)
    want = np.exp(lsm)
    want[np.arange(3), t] -= 1
    np.testing.assert_allclose(host(gx), want, rtol=1e-6, atol=1e-12)
    assert host(gx)[0].tolist() == [-0.5, 0.5, 0.0]


def test_sum_dim_accumulates_float32_in_double_for_every_layout():
    a = np.full((1 << 20, 3), 0.1, np.float32)
    want = a.astype(np.float64).sum(0)
    out = empty((3,), np.float32)
    _C.sum_dim(out, buf(a), 0)
    np.testing.assert_allclose(host(out), want, rtol=1e-7)
    b = np.full((2, 1 << 14, 300), 0.1, np.float32)  # rows longer than the host loop's chunk
    out = empty((2, 300), np.float32)
    _C.sum_dim(out, buf(b), 1)
    np.testing.assert_allclose(host(out), b.astype(np.float64).sum(1), rtol=1e-7)


def test_sum_dim_of_int64_is_exact():
    a = np.array([[[2 ** 53 + 1, -5], [1, 2 ** 62]]] * 3, np.int64)
    for dim in (0, 1, 2):
        out = empty(np.delete(a.shape, dim), np.int64)
        _C.sum_dim(out, buf(a), dim)
        np.testing.assert_array_equal(host(out), a.sum(dim))
    with pytest.raises(TypeError, match="float32 or float64"):
        _C.sum_dim(empty((2,), np.int32), buf(a[0].astype(np.int32)), 0)


@pytest.mark.gpu
def test_gpu_edge_cases_match_host():
    """The cases the host loops handle with care come out the same on a GPU."""
    x = np.array([[1e20, 1e20, 0.0], [np.nan, -1.0, 2.0]])
    big = np.array([[2 ** 53 + 1, 2 ** 60 + 1], [-3, 2 ** 40 + 7]], np.int64)
    long_rows = np.full((1 << 16, 3), 0.1, np.float32)

    def run(device):
        res = {}
        for name, op, src in (("relu", RELU, x[1:]), ("relu32", RELU, x[1:].astype(np.float32))):
            o = empty(src.shape, src.dtype, device)
            _C.unary(op, o, buf(src, device))
            res[name] = o
        for take_log in (False, True):
            o = empty(x[:1].shape, x.dtype, device)
            _C.softmax(o, buf(x[:1], device), take_log)
            res[f"softmax{take_log}"] = o
        o = empty((1,), x.dtype, device)
        _C.cross_entropy(o, buf(x[:1], device), buf(np.array([0]), device), None, -100, 0.1, 0, False)
        res["ce"] = o
        for dim in (0, 1):
            o = empty((big.shape[1 - dim],), np.int64, device)
            _C.sum_dim(o, buf(big, device), dim)
            res[f"sum_dim{dim}"] = o
        o = empty((3,), np.float32, device)
        _C.sum_dim(o, buf(long_rows, device), 0)
        res["sum_dim_f32"] = o
        o = empty((), np.int64, device)
        _C.sum(o, buf(big, device))
        res["sum"] = o
        o = empty(big.shape, np.int32, device)
        _C.cast(o, buf(big, device))
        res["cast"] = o
        for dt in (np.int64, np.int32, np.uint8):
            o = empty(big.shape, dt, device)
            _C.binary_rows(SUB, o, buf(big.astype(dt), device), buf(big[0].astype(dt), device))
            res[f"rows_{dt.__name__}"] = o
        for dt in (np.float16, np.uint8, np.int64):
            o = empty(big.T.shape, dt, device)
            _C.transpose(o, buf(big.astype(dt), device))
            res[f"transpose_{dt.__name__}"] = o
        return res

    cpu, gpu = run("cpu"), run("cuda")
    for k in cpu:
        got, want = host(gpu[k]), host(cpu[k])
        if want.dtype.kind == "f":
            np.testing.assert_allclose(got, want, rtol=1e-7, atol=0, err_msg=k)
        else:
            np.testing.assert_array_equal(got, want, err_msg=k)
    assert host(cpu["sum"]) == big.sum() and host(cpu["cast"]).tolist() == big.astype(np.int32).tolist()


def test_transpose_moves_elements_of_any_dtype():
    for dt in (np.float16, np.int64, np.int32, np.uint8, np.float64):
        a = (np.arange(37 * 70) % 251).astype(dt).reshape(37, 70)
        out = empty((70, 37), dt)
        _C.transpose(out, buf(a))
        np.testing.assert_array_equal(host(out), a.T)


@pytest.mark.parametrize("dt", [np.int64, np.int32, np.uint8])
def test_binary_rows_of_integers(dt):
    a = (np.arange(12) % 7).astype(dt).reshape(3, 4)
    row = np.array([1, 2, 3, 250], dt)
    for op, want in ((ADD, a + row), (SUB, a - row), (MUL, a * row), (RSUB, row - a)):
        out = empty(a.shape, dt)
        _C.binary_rows(op, out, buf(a), buf(row))
        np.testing.assert_array_equal(host(out), want)
    for op in (DIV, RDIV):
        with pytest.raises(TypeError, match="no integer division"):
            _C.binary_rows(op, empty(a.shape, dt), buf(a), buf(row))


def _c_enum(header, last):
    """The names of a C enum of csrc/<header> in order, from its first member to `last` (excluded)."""
    import os
    import re
    src = open(os.path.join(os.path.dirname(__file__), "..", "csrc", header)).read()
    body = re.search(r"typedef enum \{([^}]*?)\b" + last + r"\b", src).group(1)
    return [re.sub(r"^DDPC_|\s*=\s*0$", "", n.strip()) for n in body.split(",") if n.strip()]


def test_python_op_codes_are_the_c_enums():
    # The CUDA switches number the ops as the C enums (static assertions in
    # csrc/ops.h and csrc/ops_nn.h); the Python side passes the same numbers.
    import importlib
    autograd, tensor = importlib.import_module("ddpc.autograd"), importlib.import_module("ddpc.tensor")
    for name, code in zip(_c_enum("ops_nn.h", "DDPC_NUNARY"), range(1000)):
        assert getattr(autograd, "_" + name) == code, name
    for name, code in zip(_c_enum("ops.h", "DDPC_NBINARY"), range(1000)):
        assert getattr(tensor, "_" + name) == code, name
