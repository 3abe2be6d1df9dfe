"""The fused recurrent cell ops of _C (lstm_cell, gru_cell and their
backward ops): against numpy references of PyTorch's cell formulas, their
gradients against central differences of the forward op, argument checks,
and (gpu) CUDA against the host."""

import numpy as np
import pytest
from numeric import numeric_grad

import ddpc
from ddpc import _C

N, H = 3, 5


def buf(arr, device="cpu"):
    return ddpc.tensor(np.ascontiguousarray(arr), device=device)._buf


def host(b):
    return np.asarray(ddpc.Tensor(b).cpu()).copy()


def sigmoid(x):
    return 1 / (1 + np.exp(-x))


def tol(dtype):
    return dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-13, atol=1e-14)


def lstm_operands(dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in ((N, 4 * H), (N, 4 * H), (N, H))]


def gru_operands(dtype, seed=0):
    rng = np.random.default_rng(seed)
    return [rng.standard_normal(s).astype(dtype) for s in ((N, 3 * H), (N, 3 * H), (N, H))]


def np_lstm(gates, hidden, c_prev):
    i, f, g, o = np.split(gates + hidden, 4, axis=1)
    i, f, g, o = sigmoid(i), sigmoid(f), np.tanh(g), sigmoid(o)
    c = f * c_prev + i * g
    return o * np.tanh(c), c, np.concatenate([i, f, g, o], axis=1)


def np_gru(gi, gh, h_prev):
    (ir, iz, in_), (hr, hz, hn) = np.split(gi, 3, axis=1), np.split(gh, 3, axis=1)
    r, z = sigmoid(ir + hr), sigmoid(iz + hz)
    n = np.tanh(in_ + r * hn)
    return (1 - z) * n + z * h_prev, np.concatenate([r, z, n], axis=1)


def lstm(gates, hidden, c_prev, device="cpu"):
    """The op's h, c and activations."""
    h, c, g = buf(np.zeros_like(c_prev), device), buf(np.zeros_like(c_prev), device), buf(gates, device)
    _C.lstm_cell(h, c, g, buf(hidden, device), buf(c_prev, device))
    return host(h), host(c), host(g)


def lstm_backward(gh, gc, gates, hidden, c_prev, device="cpu"):
    """The op's gradients of the pre-activations and of c_prev, from those of h and c."""
    _, c, act = lstm(gates, hidden, c_prev)
    ggates, gc_b = buf(np.zeros_like(gates), device), buf(gc, device)
    _C.lstm_cell_backward(ggates, gc_b, buf(gh, device), buf(act, device), buf(c_prev, device), buf(c, device))
    return host(ggates), host(gc_b)


def gru(gi, gh, h_prev, device="cpu"):
    h, g = buf(np.zeros_like(h_prev), device), buf(gi, device)
    _C.gru_cell(h, g, buf(gh, device), buf(h_prev, device))
    return host(h), host(g)


def gru_backward(grad, gi, gh, h_prev, device="cpu"):
    _, act = gru(gi, gh, h_prev)
    ggi, ggh, gh_prev = (buf(np.zeros_like(a), device) for a in (gi, gh, h_prev))
    _C.gru_cell_backward(ggi, ggh, gh_prev, buf(grad, device), buf(act, device), buf(gh, device), buf(h_prev, device))
    return host(ggi), host(ggh), host(gh_prev)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lstm_cell_matches_the_formulas(dtype):
    gates, hidden, c_prev = lstm_operands(dtype)
    for got, want in zip(lstm(gates, hidden, c_prev), np_lstm(gates, hidden, c_prev)):
        np.testing.assert_allclose(got, want, **tol(dtype))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_gru_cell_matches_the_formulas(dtype):
    gi, gh, h_prev = gru_operands(dtype)
    for got, want in zip(gru(gi, gh, h_prev), np_gru(gi, gh, h_prev)):
        np.testing.assert_allclose(got, want, **tol(dtype))


def test_lstm_cell_backward_matches_central_differences():
    gates, hidden, c_prev = lstm_operands(np.float64, 1)
    rng = np.random.default_rng(2)
    wh, wc = rng.standard_normal((N, H)), rng.standard_normal((N, H))

    def loss(g, cp):
        h, c, _ = lstm(g, hidden, cp)
        return float((h * wh).sum() + (c * wc).sum())

    ggates, gc_prev = lstm_backward(wh, wc, gates, hidden, c_prev)
    np.testing.assert_allclose(ggates, numeric_grad(lambda g: loss(g, c_prev), gates), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(gc_prev, numeric_grad(lambda cp: loss(gates, cp), c_prev), rtol=1e-7, atol=1e-9)


def test_gru_cell_backward_matches_central_differences():
    gi, gh, h_prev = gru_operands(np.float64, 1)
    w = np.random.default_rng(2).standard_normal((N, H))

    def loss(a, b, hp):
        return float((gru(a, b, hp)[0] * w).sum())

    ggi, ggh, gh_direct = gru_backward(w, gi, gh, h_prev)
    np.testing.assert_allclose(ggi, numeric_grad(lambda a: loss(a, gh, h_prev), gi), rtol=1e-7, atol=1e-9)
    np.testing.assert_allclose(ggh, numeric_grad(lambda b: loss(gi, b, h_prev), gh), rtol=1e-7, atol=1e-9)
    # h_prev also reaches h through gh = h_prev W_hh^T, which the caller adds (ggh W_hh); held fixed here.
    np.testing.assert_allclose(gh_direct, numeric_grad(lambda hp: loss(gi, gh, hp), h_prev), rtol=1e-7, atol=1e-9)


def test_rows_of_any_count_and_an_empty_step():
    gates, hidden, c_prev = (np.random.default_rng(3).standard_normal((40, k * 67)) for k in (4, 4, 1))
    for got, want in zip(lstm(gates, hidden, c_prev), np_lstm(gates, hidden, c_prev)):
        np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-14)
    empty = np.zeros((0, 4 * H))
    assert [a.shape for a in lstm(empty, empty, np.zeros((0, H)))] == [(0, H), (0, H), (0, 4 * H)]


def test_argument_checks():
    gates, hidden, c_prev = lstm_operands(np.float64)
    h, c = buf(np.zeros((N, H))), buf(np.zeros((N, H)))
    with pytest.raises(ValueError, match="the hidden gates must be"):
        _C.lstm_cell(h, c, buf(gates), buf(hidden[:, :H]), buf(c_prev))
    with pytest.raises(TypeError, match="c_prev is float32"):
        _C.lstm_cell(h, c, buf(gates), buf(hidden), buf(c_prev.astype(np.float32)))
    with pytest.raises(TypeError, match="needs float32 or float64"):
        _C.gru_cell(buf(np.zeros((N, H), np.int64)), buf(gates[:, :3 * H]), buf(hidden[:, :3 * H]), buf(c_prev))
    with pytest.raises(ValueError, match="2-d"):
        _C.gru_cell(buf(np.zeros(H)), buf(gates[0, :3 * H]), buf(hidden[0, :3 * H]), buf(c_prev[0]))
    frozen = np.zeros((N, H))
    frozen.flags.writeable = False
    with pytest.raises(ValueError, match="h is read-only"):
        _C.lstm_cell(_C.Buffer.from_object(frozen), c, buf(gates), buf(hidden), buf(c_prev))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_cuda_matches_the_host(dtype):
    close = dict(rtol=1e-5, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-13)
    gates, hidden, c_prev = lstm_operands(dtype, 4)
    gh, gc = (np.random.default_rng(5).standard_normal((N, H)).astype(dtype) for _ in range(2))
    gi, ghid, h_prev = gru_operands(dtype, 6)
    pairs = [(lstm(gates, hidden, c_prev), lstm(gates, hidden, c_prev, "cuda")),
             (lstm_backward(gh, gc, gates, hidden, c_prev), lstm_backward(gh, gc, gates, hidden, c_prev, "cuda")),
             (gru(gi, ghid, h_prev), gru(gi, ghid, h_prev, "cuda")),
             (gru_backward(gh, gi, ghid, h_prev), gru_backward(gh, gi, ghid, h_prev, "cuda"))]
    for want, got in pairs:
        for a, b in zip(got, want):
            np.testing.assert_allclose(a, b, **close)
