"""The activations and losses beyond ReLU/GELU/cross entropy/MSE: outputs and
gradients against numpy references written from PyTorch's documented
formulas, the derivative PyTorch takes at each kink, numerically stable
extremes, every reduction, class weights, ignore_index, label smoothing,
class-probability targets, the inplace= forms, errors; and (gpu) the CUDA
kernels against the host."""

import math
import warnings

import numpy as np
import pytest

import ddpc
import ddpc.nn.functional as F
from ddpc import nn
from numeric import numeric_grad

rng = np.random.default_rng(7)


def t64(a, requires_grad=False):
    return ddpc.tensor(np.asarray(a, np.float64), requires_grad=requires_grad)


def arr(t):
    return np.asarray(t.detach().cpu())


def sig(x):
    with np.errstate(over="ignore"):
        return 1 / (1 + np.exp(-x))


def softplus_ref(x, beta=1.0, threshold=20.0):
    return np.where(beta * x > threshold, x, np.logaddexp(0, beta * x) / beta)


# name -> (kwargs, f(x), f'(x)); the derivatives at the kinks are PyTorch's.
ACTIVATIONS = {
    "leaky_relu": (dict(negative_slope=0.2), lambda x: np.where(x > 0, x, 0.2 * x),
                   lambda x: np.where(x > 0, 1, 0.2)),
    "elu": (dict(alpha=1.5), lambda x: np.where(x > 0, x, 1.5 * np.expm1(np.minimum(x, 0))),
            lambda x: np.where(x > 0, 1, 1.5 * np.exp(np.minimum(x, 0)))),
    "silu": ({}, lambda x: x * sig(x), lambda x: sig(x) * (1 + x * (1 - sig(x)))),
    "softplus": (dict(beta=2.0, threshold=5.0), lambda x: softplus_ref(x, 2.0, 5.0),
                 lambda x: np.where(2 * x > 5, 1, sig(2 * x))),
    "mish": ({}, lambda x: x * np.tanh(softplus_ref(x)),
             lambda x: np.tanh(softplus_ref(x)) + x * sig(x) * (1 - np.tanh(softplus_ref(x)) ** 2)),
    "hardtanh": (dict(min_val=-2.0, max_val=0.5), lambda x: np.clip(x, -2, 0.5),
                 lambda x: ((x > -2) & (x < 0.5)).astype(float)),
    "relu6": ({}, lambda x: np.clip(x, 0, 6), lambda x: ((x > 0) & (x < 6)).astype(float)),
    "hardswish": ({}, lambda x: x * np.clip(x + 3, 0, 6) / 6,
                  lambda x: np.where(x <= -3, 0, np.where(x < 3, x / 3 + 0.5, 1))),
    "hardsigmoid": ({}, lambda x: np.clip(x + 3, 0, 6) / 6, lambda x: ((x > -3) & (x < 3)) / 6),
    "selu": ({}, lambda x: SELU_S * np.where(x > 0, x, SELU_A * np.expm1(np.minimum(x, 0))),
             lambda x: SELU_S * np.where(x > 0, 1, SELU_A * np.exp(np.minimum(x, 0)))),
    "celu": (dict(alpha=0.5), lambda x: np.where(x > 0, x, 0.5 * np.expm1(np.minimum(x, 0) / 0.5)),
             lambda x: np.where(x > 0, 1, np.exp(np.minimum(x, 0) / 0.5))),
    "logsigmoid": ({}, lambda x: -np.logaddexp(0, -x), lambda x: sig(-x)),
    "softsign": ({}, lambda x: x / (1 + abs(x)), lambda x: 1 / (1 + abs(x)) ** 2),
    "softshrink": ({}, lambda x: np.where(x > 0.5, x - 0.5, np.where(x < -0.5, x + 0.5, 0)),
                   lambda x: (abs(x) > 0.5).astype(float)),
    "hardshrink": (dict(lambd=1.0), lambda x: np.where(abs(x) > 1, x, 0), lambda x: (abs(x) > 1).astype(float)),
    "tanhshrink": ({}, lambda x: x - np.tanh(x), lambda x: np.tanh(x) ** 2),
}
SELU_A, SELU_S = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
KINKS = [-3.0, -2.0, -1.0, -0.0, 0.0, 0.5, 1.0, 2.5, 3.0, 6.0]


@pytest.mark.parametrize("name", list(ACTIVATIONS))
@pytest.mark.parametrize("dtype", [ddpc.float64, ddpc.float32])
def test_activation_matches_its_formula_and_derivative(name, dtype):
    kw, f, df = ACTIVATIONS[name]
    x = np.concatenate([rng.standard_normal(500) * 4, KINKS])
    g = rng.standard_normal(x.shape)
    xt = ddpc.tensor(x, dtype=dtype, requires_grad=True)
    y = getattr(F, name)(xt, **kw)
    y.backward(ddpc.tensor(g, dtype=dtype))
    x = np.asarray(xt.detach(), np.float64)  # the values the op saw
    tol = dict(rtol=1e-12, atol=1e-14) if dtype is ddpc.float64 else dict(rtol=2e-6, atol=1e-6)
    assert y.dtype is dtype and y.grad_fn is not None
    np.testing.assert_allclose(arr(y), f(x), **tol)
    np.testing.assert_allclose(arr(xt.grad), g * df(x), **tol)
    # the kinks exactly (float64): PyTorch's subgradient, not a neighbour's
    k = np.array(KINKS)
    kt = t64(k, requires_grad=True)
    getattr(F, name)(kt, **kw).sum().backward()
    np.testing.assert_allclose(arr(kt.grad), df(k), rtol=1e-14, atol=0)


@pytest.mark.parametrize("name", ["leaky_relu", "elu", "silu", "softplus", "mish", "hardswish", "selu", "celu",
                                  "logsigmoid", "softsign", "tanhshrink"])
def test_smooth_activations_pass_a_gradient_check(name):
    kw = ACTIVATIONS[name][0]
    x = t64(rng.standard_normal(40) * 3 + 0.05, requires_grad=True)  # away from the kinks
    out = getattr(F, name)(x, **kw)
    g = rng.standard_normal(40)
    out.backward(t64(g))
    eps = 1e-6
    with ddpc.no_grad():
        num = [((arr(getattr(F, name)(t64(arr(x) + eps * e), **kw)) - arr(getattr(F, name)(t64(arr(x) - eps * e),
                                                                                          **kw))) * g).sum() / (2 * eps)
               for e in np.eye(40)]
    np.testing.assert_allclose(arr(x.grad), num, rtol=1e-6, atol=1e-8)


def test_activations_keep_nan_and_name_their_backward():
    x = t64([np.nan, 1.0], requires_grad=True)
    for name in ACTIVATIONS:
        y = getattr(F, name)(x)
        assert np.isnan(arr(y)[0]), name
    assert F.hardswish(x).grad_fn.name() == "HardswishBackward"
    assert F.relu6(x).grad_fn.name() == "HardtanhBackward"  # ReLU6 is hardtanh over [0, 6], as in PyTorch


@pytest.mark.parametrize("dtype", [ddpc.float32, ddpc.float64])
def test_softplus_and_mish_are_stable_for_large_inputs(dtype):
    x = np.array([-1000.0, -100.0, -30.0, 30.0, 100.0, 1000.0])
    xt = ddpc.tensor(x, dtype=dtype, requires_grad=True)
    y = F.softplus(xt, beta=1.0, threshold=1e4)  # no shortcut to x: the formula itself must not overflow
    y.sum().backward()
    want = np.logaddexp(0, x)
    np.testing.assert_allclose(arr(y), want, rtol=1e-6, atol=1e-30)
    np.testing.assert_allclose(arr(xt.grad), sig(x), rtol=1e-6, atol=1e-30)
    assert np.isfinite(arr(F.mish(xt))).all()
    np.testing.assert_allclose(arr(F.mish(xt)), x * np.tanh(want), rtol=1e-6, atol=1e-30)
    np.testing.assert_allclose(arr(F.elu(xt)), np.where(x > 0, x, np.expm1(np.minimum(x, 0))), rtol=1e-6)


def test_activation_parameters_and_errors():
    x = t64([-2.0, 2.0])
    np.testing.assert_array_equal(arr(F.leaky_relu(x)), [-0.02, 2.0])
    np.testing.assert_array_equal(arr(F.hardtanh(x)), [-1.0, 1.0])
    np.testing.assert_allclose(arr(F.softplus(t64([21.0, 19.0]))), [21.0, np.log1p(np.exp(19.0))], rtol=1e-15)
    with pytest.raises(ValueError, match="min_val"):
        F.hardtanh(x, 1.0, -1.0)
    with pytest.raises(ValueError, match="min_val"):
        nn.Hardtanh(1.0, -1.0)
    with pytest.raises(TypeError, match="ddpc.Tensor"):
        F.silu(np.zeros(2))
    half = F.mish(ddpc.tensor([1.0, -1.0], dtype=ddpc.float16))
    assert half.dtype is ddpc.float16


def test_activation_modules_and_their_repr():
    x = t64(rng.standard_normal((3, 4)) * 4)
    pairs = [(nn.LeakyReLU(0.2), F.leaky_relu(x, 0.2)), (nn.ELU(0.5), F.elu(x, 0.5)), (nn.SiLU(), F.silu(x)),
             (nn.Softplus(2.0, 3.0), F.softplus(x, 2.0, 3.0)), (nn.Mish(), F.mish(x)),
             (nn.Hardtanh(-0.5, 2.0), F.hardtanh(x, -0.5, 2.0)), (nn.ReLU6(), F.relu6(x)),
             (nn.Hardswish(), F.hardswish(x)), (nn.Hardsigmoid(), F.hardsigmoid(x)),
             (nn.Softmax(0), F.softmax(x, 0)), (nn.LogSoftmax(1), F.log_softmax(x, 1)), (nn.SELU(), F.selu(x)),
             (nn.CELU(0.5), F.celu(x, 0.5)), (nn.LogSigmoid(), F.logsigmoid(x)), (nn.Softsign(), F.softsign(x)),
             (nn.Softshrink(0.3), F.softshrink(x, 0.3)), (nn.Hardshrink(2.0), F.hardshrink(x, 2.0)),
             (nn.Tanhshrink(), F.tanhshrink(x)), (nn.RReLU().eval(), F.rrelu(x)),
             (nn.Softmax2d(), F.softmax(x.reshape(1, 3, 4, 1), -3).reshape(3, 4))]
    for m, want in pairs:
        np.testing.assert_array_equal(arr(m(x if not isinstance(m, nn.Softmax2d) else x.reshape(1, 3, 4, 1))
                                          ).reshape(want.shape), arr(want), err_msg=repr(m))
        assert list(m.parameters()) == []
    assert repr(nn.LeakyReLU(0.2, inplace=True)) == "LeakyReLU(negative_slope=0.2, inplace=True)"
    assert repr(nn.ELU()) == "ELU(alpha=1.0)"
    assert repr(nn.ReLU6(True)) == "ReLU6(inplace=True)"
    assert repr(nn.Hardtanh()) == "Hardtanh(min_val=-1.0, max_val=1.0)"
    assert repr(nn.Softplus()) == "Softplus(beta=1.0, threshold=20.0)"
    assert repr(nn.Softmax(dim=1)) == "Softmax(dim=1)"
    assert repr(nn.ReLU()) == "ReLU()" and repr(nn.SiLU(inplace=True)) == "SiLU(inplace=True)"
    assert repr(nn.Dropout(0.2, inplace=True)) == "Dropout(p=0.2, inplace=True)"


# ---- inplace= ----------------------------------------------------------------------------------

INPLACE = [(F.relu, {}), (F.leaky_relu, dict(negative_slope=0.1)), (F.elu, {}), (F.silu, {}), (F.mish, {}),
           (F.hardtanh, {}), (F.relu6, {}), (F.hardswish, {}), (F.hardsigmoid, {})]


@pytest.mark.parametrize("fn,kw", INPLACE, ids=[f.__name__ for f, _ in INPLACE])
def test_inplace_leaves_the_result_in_the_input(fn, kw):
    x = t64(rng.standard_normal(8) * 4)
    want = arr(fn(x, **kw))
    out = fn(x, inplace=True, **kw)
    assert out is x
    np.testing.assert_array_equal(arr(x), want)
    # In the graph: x is an intermediate result, whose history becomes the op's.
    a = t64(rng.standard_normal(8) * 4, requires_grad=True)
    h = a * 2
    ref = fn(a.detach() * 2, **kw)
    assert fn(h, inplace=True, **kw) is h
    np.testing.assert_array_equal(arr(h), arr(ref))
    (h * h).sum().backward()
    b = t64(arr(a), requires_grad=True)
    y = fn(b * 2, **kw)
    (y * y).sum().backward()
    np.testing.assert_array_equal(arr(a.grad), arr(b.grad))


def test_inplace_refuses_a_leaf_that_requires_grad_and_writes_copies_back():
    leaf = t64([1.0, -1.0], requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        F.relu(leaf, inplace=True)
    with ddpc.no_grad():
        F.relu(leaf, inplace=True)
    np.testing.assert_array_equal(arr(leaf), [1.0, 0.0])
    # A column is a copy in ddpc (a view in PyTorch): the write lands in the matrix too.
    m = t64([[1.0, -1.0], [-2.0, 2.0]])
    col = m[:, 1]
    F.elu(col, inplace=True)
    np.testing.assert_allclose(arr(m), [[1.0, math.expm1(-1.0)], [-2.0, 2.0]])
    nn.ReLU(inplace=True)(m)
    assert arr(m).min() == 0
    with pytest.raises(TypeError, match="result type"):
        F.elu(ddpc.tensor([1, -1]), inplace=True)  # the op computes in float; ints can't hold it
    ints = ddpc.tensor([1, -1, 9])
    assert F.relu6(ints, inplace=True) is ints and ints.tolist() == [1, 0, 6]  # a clamp: ints stay ints


def test_inplace_dropout_writes_the_kept_and_scaled_values():
    ddpc.manual_seed(3)
    x = ddpc.ones(1000)
    out = F.dropout(x, 0.5, inplace=True)
    assert out is x and set(np.unique(arr(x))) == {0.0, 2.0}
    y = ddpc.ones(4)
    assert F.dropout(y, 0.5, training=False, inplace=True) is y and arr(y).tolist() == [1.0] * 4
    model = nn.Dropout(0.5, inplace=True).eval()
    assert model(y) is y


# ---- softmax along any dim --------------------------------------------------------------------

def test_softmax_along_every_dim_and_its_implicit_choice():
    x = t64(rng.standard_normal((2, 3, 4)), requires_grad=True)
    xn = arr(x)
    for dim in (0, 1, 2, -1, -3):
        e = np.exp(xn - xn.max(dim, keepdims=True))
        np.testing.assert_allclose(arr(F.softmax(x, dim)), e / e.sum(dim, keepdims=True), rtol=1e-12)
        np.testing.assert_allclose(arr(F.log_softmax(x, dim)), np.log(e / e.sum(dim, keepdims=True)), rtol=1e-12)
    g = rng.standard_normal(x.shape)
    F.softmax(x, 1).backward(t64(g))
    s = np.exp(xn) / np.exp(xn).sum(1, keepdims=True)
    np.testing.assert_allclose(arr(x.grad), s * (g - (g * s).sum(1, keepdims=True)), rtol=1e-10, atol=1e-14)
    with pytest.warns(UserWarning, match="Implicit dimension"):
        implicit = F.softmax(x)  # 3-d: dim 0, as PyTorch picks it
    np.testing.assert_array_equal(arr(implicit), arr(F.softmax(x, 0)))
    with pytest.warns(UserWarning, match="Implicit dimension"):
        nn.LogSoftmax()(t64(np.ones((2, 3))))
    assert F.softmax(t64(3.0), 0).item() == 1.0
    assert F.log_softmax(ddpc.ones(2, 3), 1, dtype=ddpc.float64).dtype is ddpc.float64


# ---- elementwise losses ---------------------------------------------------------------------------

def reduce_ref(loss, reduction):
    return loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.mean()


def bce_ref(x, y):
    with np.errstate(divide="ignore"):
        return -(y * np.maximum(np.log(x), -100) + (1 - y) * np.maximum(np.log1p(-x), -100))


def bce_logits_ref(x, y, pw=1.0):
    log_sig = np.minimum(x, 0) - np.log1p(np.exp(-np.abs(x)))
    return (1 - y) * x - (1 + (pw - 1) * y) * log_sig


LOSSES = {  # name -> (kwargs, loss(x, y), d loss / dx, d loss / dy)
    "mse_loss": ({}, lambda x, y: (x - y) ** 2, lambda x, y: 2 * (x - y), lambda x, y: -2 * (x - y)),
    "l1_loss": ({}, lambda x, y: np.abs(x - y), lambda x, y: np.sign(x - y), lambda x, y: -np.sign(x - y)),
    "smooth_l1_loss": (dict(beta=0.5),
                       lambda x, y: np.where(np.abs(x - y) < 0.5, (x - y) ** 2, np.abs(x - y) - 0.25),
                       lambda x, y: np.clip((x - y) / 0.5, -1, 1), lambda x, y: -np.clip((x - y) / 0.5, -1, 1)),
    "huber_loss": (dict(delta=1.5),
                   lambda x, y: np.where(np.abs(x - y) < 1.5, 0.5 * (x - y) ** 2, 1.5 * (np.abs(x - y) - 0.75)),
                   lambda x, y: np.clip(x - y, -1.5, 1.5), lambda x, y: -np.clip(x - y, -1.5, 1.5)),
    "binary_cross_entropy_with_logits": ({}, bce_logits_ref, lambda x, y: sig(x) - y, lambda x, y: -x),
}


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("name", list(LOSSES))
def test_elementwise_loss_and_its_gradients(name, reduction):
    kw, f, dfx, dfy = LOSSES[name]
    x, y = rng.standard_normal((5, 4)) * 2, rng.uniform(-1, 1, (5, 4))
    x[0, 0] = y[0, 0]  # equal: L1's derivative is 0 there, as in PyTorch
    xt, yt = t64(x, True), t64(y, True)
    out = getattr(F, name)(xt, yt, reduction=reduction, **kw)
    np.testing.assert_allclose(arr(out), reduce_ref(f(x, y), reduction), rtol=1e-12)
    g = rng.standard_normal(x.shape) if reduction == "none" else np.full(x.shape, 0.7)
    out.backward(t64(g) if reduction == "none" else t64(0.7))
    scale = g / x.size if reduction == "mean" else g
    np.testing.assert_allclose(arr(xt.grad), scale * dfx(x, y), rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(arr(yt.grad), scale * dfy(x, y), rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_binary_cross_entropy_with_weight_and_edge_probabilities(reduction):
    x = rng.uniform(0.01, 0.99, (4, 3))
    y = rng.uniform(0, 1, (4, 3))
    x[0] = [0.0, 1.0, 1e-300]
    y[0] = [1.0, 0.0, 1.0]
    w = rng.uniform(0.5, 2, 3)
    xt, yt = t64(x, True), t64(y, True)
    out = F.binary_cross_entropy(xt, yt, weight=t64(w), reduction=reduction)
    loss = bce_ref(x, y) * w
    np.testing.assert_allclose(arr(out), reduce_ref(loss, reduction), rtol=1e-12)
    assert arr(out).max() <= 100 * w.max() * (1 if reduction == "none" else x.size)  # the logs clamped at -100
    out.sum().backward()
    scale = w / (x.size if reduction == "mean" else 1)
    want = scale * (x - y) / np.maximum(x * (1 - x), 1e-12)
    np.testing.assert_allclose(arr(xt.grad), want, rtol=1e-12)
    with np.errstate(divide="ignore"):
        np.testing.assert_allclose(arr(yt.grad), scale * (np.log1p(-x) - np.log(x)), rtol=1e-12)
    np.testing.assert_allclose(arr(xt.grad)[0, 0], -1e12 * scale[0], rtol=1e-12)  # x (1 - x) is taken as 1e-12


@pytest.mark.parametrize("dtype", [ddpc.float32, ddpc.float64])
def test_bce_with_logits_is_stable_and_weighs_positives(dtype):
    x = np.array([[-1000.0, 1000.0, -50.0, 50.0], [0.0, 3.0, -3.0, 1e4]])
    y = np.array([[1.0, 0.0, 0.3, 1.0], [0.5, 1.0, 0.0, 0.2]])
    pw = np.array([2.0, 0.5, 1.0, 3.0])
    xt = ddpc.tensor(x, dtype=dtype, requires_grad=True)
    out = F.binary_cross_entropy_with_logits(xt, ddpc.tensor(y, dtype=dtype), pos_weight=ddpc.tensor(pw, dtype=dtype),
                                             reduction="none")
    assert np.isfinite(arr(out)).all()
    np.testing.assert_allclose(arr(out), bce_logits_ref(x, y, pw), rtol=1e-6)
    out.sum().backward()
    np.testing.assert_allclose(arr(xt.grad), (1 + (pw - 1) * y) * sig(x) - pw * y, rtol=1e-6, atol=1e-30)
    w = np.array([[1.0], [3.0]])
    weighted = F.binary_cross_entropy_with_logits(ddpc.tensor(x, dtype=dtype), ddpc.tensor(y, dtype=dtype),
                                                  weight=ddpc.tensor(w, dtype=dtype))
    np.testing.assert_allclose(weighted.item(), (bce_logits_ref(x, y) * w).mean(), rtol=1e-6)


def test_smooth_l1_with_beta_zero_is_l1_and_huber_is_delta_times_smooth_l1():
    x, y = t64(rng.standard_normal(20) * 3), t64(rng.standard_normal(20))
    np.testing.assert_array_equal(arr(F.smooth_l1_loss(x, y, beta=0.0)), arr(F.l1_loss(x, y)))
    np.testing.assert_allclose(arr(F.huber_loss(x, y, delta=2.0)), 2.0 * arr(F.smooth_l1_loss(x, y, beta=2.0)),
                               rtol=1e-12)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_weighted_huber_loss_weighs_each_element_before_reducing(reduction):
    x, y, w = rng.standard_normal((4, 5)) * 3, rng.standard_normal((4, 5)), rng.uniform(0, 2, (4, 5))
    xt = t64(x).requires_grad_(True)
    d = x - y
    per = np.where(np.abs(d) < 1.5, 0.5 * d * d, 1.5 * (np.abs(d) - 0.75)) * w
    want = {"none": per, "mean": per.mean(), "sum": per.sum()}[reduction]
    got = F.huber_loss(xt, t64(y), reduction=reduction, delta=1.5, weight=t64(w))
    np.testing.assert_allclose(arr(got), want, rtol=1e-12)
    got.sum().backward()
    scale = {"none": 1.0, "mean": 1.0 / d.size, "sum": 1.0}[reduction]
    np.testing.assert_allclose(arr(xt.grad), np.clip(d, -1.5, 1.5) * w * scale, rtol=1e-12)
    with pytest.raises(ValueError, match="weight's shape"):
        F.huber_loss(xt, t64(y), weight=t64(w[0]))


@pytest.mark.parametrize("log_target", [False, True])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum", "batchmean"])
def test_kl_div(reduction, log_target):
    x = np.log(rng.dirichlet(np.ones(5), 3))
    p = rng.dirichlet(np.ones(5), 3)
    p[0, 1] = 0.0  # 0 log 0 is 0
    y = np.log(p + 0.01) if log_target else p
    xt, yt = t64(x, True), t64(y, requires_grad=log_target)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = F.kl_div(xt, yt, reduction=reduction, log_target=log_target)
    assert any("batchmean" in str(w.message) for w in caught) == (reduction == "mean")
    if log_target:
        loss, dx, dy = np.exp(y) * (y - x), -np.exp(y), np.exp(y) * (y - x + 1)
    else:
        with np.errstate(divide="ignore", invalid="ignore"):
            loss, dx = np.where(y > 0, y * np.log(y), 0) - y * x, -y
    want = loss.sum() / 3 if reduction == "batchmean" else reduce_ref(loss, reduction)
    np.testing.assert_allclose(arr(out), want, rtol=1e-12)
    out.sum().backward()
    scale = 1 / 3 if reduction == "batchmean" else 1 / x.size if reduction == "mean" else 1
    np.testing.assert_allclose(arr(xt.grad), scale * dx, rtol=1e-12)
    if log_target:
        np.testing.assert_allclose(arr(yt.grad), scale * dy, rtol=1e-12)


def test_regression_losses_broadcast_with_a_warning():
    x, y = t64(rng.standard_normal((3, 4)), True), t64(rng.standard_normal((1, 4)), True)
    with pytest.warns(UserWarning, match="different to the input size"):
        out = F.l1_loss(x, y, reduction="sum")
    np.testing.assert_allclose(out.item(), np.abs(arr(x) - arr(y)).sum(), rtol=1e-12)
    out.backward()
    assert y.grad.shape == (1, 4)
    np.testing.assert_allclose(arr(y.grad), -np.sign(arr(x) - arr(y)).sum(0, keepdims=True))
    with pytest.warns(UserWarning), pytest.raises(ValueError, match="broadcast"):
        F.mse_loss(x, t64(np.zeros((2, 4))))


@pytest.mark.parametrize("name, fn", [("mse_loss", lambda d: d * d), ("l1_loss", np.abs)])
@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_weighted_regression_losses(name, fn, reduction):
    x, y, w = rng.standard_normal((3, 4)), rng.standard_normal((3, 4)), rng.uniform(0.5, 2, (3, 4))
    xt, yt, wt = t64(x, True), t64(y, True), t64(w, True)
    out = getattr(F, name)(xt, yt, reduction=reduction, weight=wt)

    def ref(a, b, c):
        loss = fn(a - b) * c
        return loss if reduction == "none" else loss.sum() if reduction == "sum" else loss.sum() / c.sum()

    np.testing.assert_allclose(arr(out), ref(x, y, w), rtol=1e-12)
    g = rng.standard_normal(out.shape)
    out.backward(t64(g))
    for t, i in ((xt, 0), (yt, 1), (wt, 2)):
        def along(v, i=i):
            return ref(*(v if j == i else a for j, a in enumerate((x, y, w))))
        np.testing.assert_allclose(arr(t.grad), numeric_grad(lambda v: (along(v) * g).sum(), (x, y, w)[i]),
                                   rtol=1e-6, atol=1e-8)
    with pytest.raises(ValueError, match="Weights and input must have the same size"):
        getattr(F, name)(xt, yt, weight=t64(w[0]))
    with pytest.raises(ValueError, match="Invalid reduction mode"):
        getattr(F, name)(xt, yt, reduction="batchmean", weight=wt)
    with pytest.raises(TypeError, match="weight must be a ddpc tensor"):
        getattr(F, name)(xt, yt, weight=w)


def test_loss_errors():
    p, q = t64([[0.5, 0.2]]), t64([[1.0, 0.0]])
    with pytest.raises(ValueError, match="different to the input size"):
        F.binary_cross_entropy(p, t64([1.0, 0.0]))
    with pytest.raises(ValueError, match="must be the same as input size"):
        F.binary_cross_entropy_with_logits(p, t64([1.0, 0.0]))
    with pytest.raises(ValueError, match="between 0 and 1, element 1 is 1.5"):
        F.binary_cross_entropy(t64([0.5, 1.5]), t64([1.0, 0.0]))
    with pytest.raises(ValueError, match="target should be between 0 and 1"):
        F.binary_cross_entropy(t64([0.5, 0.5]), t64([1.0, -0.5]))
    with pytest.raises(RuntimeError, match="not differentiable with respect to weight"):
        F.binary_cross_entropy(p, q, weight=t64([1.0, 2.0], requires_grad=True))
    with pytest.raises(RuntimeError, match="pos_weight"):
        F.binary_cross_entropy_with_logits(p, q, pos_weight=t64([1.0, 2.0], requires_grad=True))
    with pytest.raises(ValueError, match="expanded"):
        F.binary_cross_entropy(p, q, weight=t64([1.0, 2.0, 3.0]))
    with pytest.raises(ValueError, match="negative values for beta"):
        F.smooth_l1_loss(p, q, beta=-1.0)
    with pytest.raises(ValueError, match="non-positive values for delta"):
        F.huber_loss(p, q, delta=0.0)
    with pytest.raises(ValueError, match="reduction"):
        F.l1_loss(p, q, reduction="batchmean")
    with pytest.raises(TypeError, match="ddpc tensors"):
        F.l1_loss(p, [[1.0, 0.0]])
    x = ddpc.zeros(2, 2)
    with pytest.raises(ValueError, match="only binary cross entropy with logits takes a pos_weight"):
        ddpc._C.loss(0, ddpc.empty(())._buf, x._buf, x._buf, x._buf, 0.0, 1)
    with pytest.raises(ValueError, match="unknown loss"):
        ddpc._C.loss(99, ddpc.empty(())._buf, x._buf, x._buf, None, 0.0, 1)
    with pytest.raises(ValueError, match="beta must be positive"):
        ddpc._C.loss(2, ddpc.empty(())._buf, x._buf, x._buf, None, 0.0, 1)


def test_losses_of_16_bit_inputs_and_empty_ones():
    x, y = ddpc.tensor([[0.5, -1.0]], dtype=ddpc.float16), ddpc.tensor([[1.0, 0.0]], dtype=ddpc.float16)
    out = F.binary_cross_entropy_with_logits(x, y)
    assert out.dtype is ddpc.float16
    np.testing.assert_allclose(out.item(), bce_logits_ref(np.array([0.5, -1.0]), np.array([1.0, 0.0])).mean(),
                               rtol=2e-3)
    e = ddpc.zeros(0, 3)
    assert math.isnan(F.l1_loss(e, e).item()) and F.huber_loss(e, e, reduction="sum").item() == 0
    assert F.mse_loss(e, e, reduction="none").shape == (0, 3)


def test_legacy_size_average_and_reduce():
    x, y = t64([1.0, 3.0]), t64([0.0, 0.0])
    with pytest.warns(UserWarning, match="reduction='sum'"):
        assert F.l1_loss(x, y, size_average=False).item() == 4.0
    with pytest.warns(UserWarning, match="reduction='none'"):
        assert F.mse_loss(x, y, reduce=False).shape == (2,)
    with pytest.warns(UserWarning, match="reduction='sum'"):
        assert nn.NLLLoss(size_average=False).reduction == "sum"


# ---- cross entropy and NLL --------------------------------------------------------------------------

def log_softmax_ref(x, axis=1):
    m = x.max(axis, keepdims=True)
    return x - m - np.log(np.exp(x - m).sum(axis, keepdims=True))


def ce_ref(x, t, w=None, ignore=-100, eps=0.0, reduction="mean", log_probs=False):
    """PyTorch's cross entropy (or nll_loss) of rows x [N, C] at class indices t [N]."""
    lp = x if log_probs else log_softmax_ref(x)
    n, c = x.shape
    w = np.ones(c) if w is None else w
    valid = t != ignore
    tt = np.where(valid, t, 0)
    nll = -w[tt] * lp[np.arange(n), tt]
    smooth = -(lp * w).sum(1)
    loss = np.where(valid, (1 - eps) * nll + eps / c * smooth, 0.0)
    if reduction == "none":
        return loss
    return loss.sum() / (np.where(valid, w[tt], 0).sum() if reduction == "mean" else 1)


def ce_prob_ref(x, p, w=None, eps=0.0, reduction="mean"):
    c = x.shape[1]
    q = (1 - eps) * p + eps / c
    loss = -(log_softmax_ref(x) * q * (np.ones(c) if w is None else w)).sum(1)
    return loss if reduction == "none" else loss.sum() / (len(loss) if reduction == "mean" else 1)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
@pytest.mark.parametrize("eps", [0.0, 0.2])
def test_cross_entropy_with_class_weights_and_ignore_index(reduction, eps):
    x = rng.standard_normal((6, 4)) * 2
    t = np.array([0, 3, 1, -1, 2, 3])
    w = np.array([0.5, 2.0, 1.0, 3.0])
    xt = t64(x, True)
    out = F.cross_entropy(xt, ddpc.tensor(t), weight=t64(w), ignore_index=-1, reduction=reduction,
                          label_smoothing=eps)
    want = ce_ref(x, t, w, -1, eps, reduction)
    np.testing.assert_allclose(arr(out), want, rtol=1e-12)
    if reduction == "mean":  # divided by the summed weights of the targets' classes, not by the row count
        np.testing.assert_allclose(arr(out), ce_ref(x, t, w, -1, eps, "sum") / (0.5 + 3 + 2 + 1 + 3), rtol=1e-12)
    g = rng.standard_normal(np.shape(want))
    out.backward(t64(g))
    num = numeric_grad(lambda z: (ce_ref(z, t, w, -1, eps, reduction) * g).sum(), x)
    np.testing.assert_allclose(arr(xt.grad), num, atol=1e-7)
    assert (arr(xt.grad)[3] == 0).all()


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_cross_entropy_with_class_probabilities(reduction):
    x = rng.standard_normal((5, 3)) * 2
    p = rng.dirichlet(np.ones(3), 5)
    w = np.array([1.0, 0.5, 2.0])
    xt, pt = t64(x, True), t64(p, True)
    out = F.cross_entropy(xt, pt, weight=t64(w), reduction=reduction, label_smoothing=0.1)
    want = ce_prob_ref(x, p, w, 0.1, reduction)
    np.testing.assert_allclose(arr(out), want, rtol=1e-12)
    g = rng.standard_normal(np.shape(want))
    out.backward(t64(g))
    np.testing.assert_allclose(arr(xt.grad), numeric_grad(lambda z: (ce_prob_ref(z, p, w, 0.1, reduction) * g).sum(),
                                                          x), atol=1e-7)
    np.testing.assert_allclose(arr(pt.grad), numeric_grad(lambda q: (ce_prob_ref(x, q, w, 0.1, reduction) * g).sum(),
                                                          p), atol=1e-7)
    onehot = np.eye(3)[[0, 2, 1, 1, 0]]
    np.testing.assert_allclose(F.cross_entropy(t64(x), t64(onehot)).item(),
                               F.cross_entropy(t64(x), ddpc.tensor([0, 2, 1, 1, 0])).item(), rtol=1e-12)


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_nll_loss_of_log_softmax_is_cross_entropy(reduction):
    x = rng.standard_normal((6, 5))
    t = np.array([4, 0, -100, 2, 2, 1])
    w = rng.uniform(0.5, 2, 5)
    lp = t64(log_softmax_ref(x), True)
    out = F.nll_loss(lp, ddpc.tensor(t), weight=t64(w), reduction=reduction)
    np.testing.assert_allclose(arr(out), ce_ref(arr(lp), t, w, reduction=reduction, log_probs=True), rtol=1e-12)
    np.testing.assert_allclose(arr(out), arr(F.cross_entropy(t64(x), ddpc.tensor(t), t64(w), reduction=reduction)),
                               rtol=1e-12)
    assert out.grad_fn.name() == "NllLossBackward"
    out.sum().backward()
    scale = 1 / w[t[t != -100]].sum() if reduction == "mean" else 1
    want = np.zeros((6, 5))
    for i, c in enumerate(t):
        if c != -100:
            want[i, c] = -w[c] * scale
    np.testing.assert_allclose(arr(lp.grad), want, rtol=1e-12)
    # NLLLoss after LogSoftmax, as modules
    loss = nn.NLLLoss(weight=t64(w), reduction=reduction)(nn.LogSoftmax(dim=1)(t64(x)), ddpc.tensor(t))
    np.testing.assert_allclose(arr(loss), arr(out), rtol=1e-12)


def test_cross_entropy_and_nll_over_extra_dims_and_single_samples():
    x = rng.standard_normal((2, 4, 3, 5))  # N, C, d1, d2
    t = rng.integers(0, 4, (2, 3, 5))
    t[0, 1, 2] = -100
    w = rng.uniform(0.5, 2, 4)
    rows = x.transpose(0, 2, 3, 1).reshape(-1, 4)
    xt = t64(x, True)
    out = F.cross_entropy(xt, ddpc.tensor(t), weight=t64(w), reduction="none", label_smoothing=0.1)
    assert out.shape == (2, 3, 5)
    np.testing.assert_allclose(arr(out).reshape(-1), ce_ref(rows, t.reshape(-1), w, eps=0.1, reduction="none"),
                               rtol=1e-12)
    F.cross_entropy(xt, ddpc.tensor(t), weight=t64(w)).backward()
    num = numeric_grad(lambda z: ce_ref(z.transpose(0, 2, 3, 1).reshape(-1, 4), t.reshape(-1), w).sum(), x)
    np.testing.assert_allclose(arr(xt.grad), num, atol=1e-7)
    np.testing.assert_allclose(F.nll_loss(t64(x), ddpc.tensor(t)).item(),
                               ce_ref(rows, t.reshape(-1), log_probs=True), rtol=1e-12)
    p = rng.dirichlet(np.ones(4), (2, 3, 5)).transpose(0, 3, 1, 2)
    np.testing.assert_allclose(F.cross_entropy(t64(x), t64(p)).item(),
                               ce_prob_ref(rows, p.transpose(0, 2, 3, 1).reshape(-1, 4)), rtol=1e-12)
    one = F.cross_entropy(t64(x[0, :, 0, 0]), ddpc.tensor(2), reduction="none")
    assert one.shape == ()
    np.testing.assert_allclose(one.item(), -log_softmax_ref(x[0, :, 0, 0], 0)[2], rtol=1e-12)


def test_cross_entropy_all_ignored_is_nan_and_weighted_module_follows_to():
    x = t64(rng.standard_normal((2, 3)))
    assert math.isnan(F.cross_entropy(x, ddpc.tensor([-100, -100]), weight=t64([1.0, 2.0, 3.0])).item())
    loss = nn.CrossEntropyLoss(weight=ddpc.tensor([1.0, 2.0, 3.0]), label_smoothing=0.1)
    assert "weight" in loss.state_dict()
    loss = loss.to(dtype=ddpc.float64)
    assert loss.weight.dtype is ddpc.float64
    np.testing.assert_allclose(loss(x, ddpc.tensor([2, 0])).item(),
                               ce_ref(arr(x), np.array([2, 0]), np.array([1.0, 2.0, 3.0]), eps=0.1), rtol=1e-12)


def test_cross_entropy_errors():
    x = t64(np.zeros((3, 4)))
    with pytest.raises(ValueError, match="one element per class"):
        F.cross_entropy(x, ddpc.tensor([0, 1, 2]), weight=t64([1.0, 2.0]))
    with pytest.raises(RuntimeError, match="not differentiable with respect to weight"):
        F.nll_loss(x, ddpc.tensor([0, 1, 2]), weight=t64(np.ones(4), requires_grad=True))
    with pytest.raises(ValueError, match=r"class indices must have shape ddpc.Size\(\[3\]\)"):
        F.cross_entropy(x, ddpc.tensor([0, 1]))
    with pytest.raises(ValueError, match="shaped like the input"):
        F.cross_entropy(x, t64(np.ones((3, 3))))
    with pytest.raises(TypeError, match="expected target dtype to be Long or Byte, but got ddpc.float64"):
        F.nll_loss(x, t64(np.ones((3, 4))))
    with pytest.raises(RuntimeError, match="expected target dtype to be Long or Byte"):  # float class indices
        F.cross_entropy(x, t64(np.ones(3)))
    with pytest.raises(ValueError, match="not a class"):
        F.nll_loss(x, ddpc.tensor([0, 4, 1]))
    with pytest.raises(ValueError, match="0-d"):
        F.cross_entropy(t64(1.0), ddpc.tensor(0))
    with pytest.raises(ValueError, match="label_smoothing"):
        F.cross_entropy(x, ddpc.tensor([0, 1, 2]), label_smoothing=1.5)


def test_class_index_targets_must_be_int64_as_pytorch_says():
    x = t64(np.zeros((2, 3)))
    for dtype in ("int32", "bool"):
        target = ddpc.tensor([0, 1]).to(dtype=dtype)
        for loss in (F.cross_entropy, F.nll_loss, nn.CrossEntropyLoss(), nn.NLLLoss()):
            with pytest.raises(ddpc.DtypeError, match="expected target dtype to be Long or Byte"):
                loss(x, target)
        with pytest.raises(ddpc.DtypeError, match="expected scalar type Long"):
            F.multi_margin_loss(x, target)
    with pytest.raises(ddpc.DtypeError, match="expected scalar type Long"):
        F.multilabel_margin_loss(x, ddpc.tensor([[0, -1, 1], [1, -1, 0]], dtype=ddpc.int32))
    with pytest.raises(ddpc.DtypeError, match="expected target dtype to be Long or Byte"):
        F.cross_entropy(t64(np.zeros((2, 3, 2))), ddpc.zeros(2, 2, dtype=ddpc.int32))
    byte = ddpc.tensor([0, 2], dtype=ddpc.uint8)  # PyTorch takes Byte class indices too
    assert F.cross_entropy(x, byte).item() == pytest.approx(math.log(3))
    assert F.nll_loss(x, byte).item() == 0.0


def test_loss_modules_match_the_functions():
    x, y = t64(rng.standard_normal((4, 3))), t64(rng.uniform(0, 1, (4, 3)))
    w = t64([1.0, 2.0, 0.5])
    pairs = [(nn.L1Loss(reduction="sum"), F.l1_loss(x, y, reduction="sum")),
             (nn.SmoothL1Loss(beta=0.3), F.smooth_l1_loss(x, y, beta=0.3)),
             (nn.HuberLoss(delta=0.3), F.huber_loss(x, y, delta=0.3)),
             (nn.BCEWithLogitsLoss(weight=w, pos_weight=w), F.binary_cross_entropy_with_logits(x, y, w, pos_weight=w)),
             (nn.KLDivLoss(reduction="batchmean", log_target=True), F.kl_div(x, y, reduction="batchmean",
                                                                              log_target=True)),
             (nn.MSELoss(reduction="none"), F.mse_loss(x, y, reduction="none"))]
    for m, want in pairs:
        np.testing.assert_array_equal(arr(m(x, y)), arr(want), err_msg=repr(m))
    s = F.sigmoid(x)
    np.testing.assert_array_equal(arr(nn.BCELoss(w)(s, y)), arr(F.binary_cross_entropy(s, y, w)))
    assert set(nn.BCEWithLogitsLoss(pos_weight=w).state_dict()) == {"pos_weight"}


# ---- the CUDA kernels against the host -----------------------------------------------------------

def on(device, fn, arrays, grads):
    """fn's output and the gradients of its sum with respect to the arrays marked in grads, on device."""
    ts = [ddpc.tensor(np.ascontiguousarray(a), device=device, requires_grad=bool(r)) for a, r in zip(arrays, grads)]
    out = fn(*ts)
    out.sum().backward()
    return [arr(out)] + [arr(t.grad) for t, r in zip(ts, grads) if r]


def _gpu_cases(dev):
    """(name, fn, arrays, which need grad); dev(array) puts an argument that is no input on the device tried."""
    x = rng.standard_normal((37, 5)) * 4
    x[0] = [-3.0, 0.0, 3.0, 6.0, np.nan]
    z, y = rng.standard_normal((37, 5)) * 3, rng.uniform(0, 1, (37, 5))
    p = rng.uniform(0, 1, (37, 5))
    p[1, :3] = [0.0, 1.0, 1e-30]
    t = rng.integers(0, 5, 37)
    t[4] = -100
    w, sm = rng.uniform(0.5, 2, 5), rng.dirichlet(np.ones(5), 37)
    cases = [(name, lambda a, name=name: getattr(F, name)(a, **ACTIVATIONS[name][0]), [x], [True])
             for name in ACTIVATIONS]
    for red in ("none", "mean", "sum"):
        cases += [
            (f"smooth_l1_{red}", lambda a, b, r=red: F.smooth_l1_loss(a, b, reduction=r, beta=0.5), [z, y], [1, 1]),
            (f"huber_{red}", lambda a, b, r=red: F.huber_loss(a, b, reduction=r, delta=2.0), [z, y], [1, 1]),
            (f"l1_{red}", lambda a, b, r=red: F.l1_loss(a, b, reduction=r), [z, y], [1, 1]),
            (f"mse_{red}", lambda a, b, r=red: F.mse_loss(a, b, reduction=r), [z, y], [1, 1]),
            (f"bce_{red}", lambda a, b, r=red: F.binary_cross_entropy(a, b, dev(w), reduction=r), [p, y], [1, 1]),
            (f"bce_logits_{red}", lambda a, b, r=red: F.binary_cross_entropy_with_logits(
                a, b, reduction=r, pos_weight=dev(w)), [z * 30, y], [1, 1]),
            (f"kl_{red}", lambda a, b, r=red: F.kl_div(a, b, reduction=r), [np.log(sm), sm], [1, 0]),
            (f"kl_log_{red}", lambda a, b, r=red: F.kl_div(a, b, reduction=r, log_target=True),
             [np.log(sm), np.log(sm[::-1])], [1, 1]),
            (f"ce_{red}", lambda a, r=red: F.cross_entropy(a, dev(t), dev(w), reduction=r, label_smoothing=0.1), [z],
             [1]),
            (f"ce_probs_{red}", lambda a, b, r=red: F.cross_entropy(a, b, dev(w), reduction=r, label_smoothing=0.2),
             [z, sm], [1, 1]),
            (f"nll_{red}", lambda a, r=red: F.nll_loss(a, dev(t), dev(w), reduction=r), [np.log(sm)], [1]),
        ]
    return cases


@pytest.mark.gpu
def test_new_kernels_on_cuda_match_the_host():
    device = ["cpu"]
    cases = _gpu_cases(lambda a: ddpc.tensor(a, device=device[0]))
    for name, fn, arrays, grads in cases:
        res = []
        for device[0] in ("cpu", "cuda"):
            res.append(on(device[0], fn, arrays, grads))
        for a, b in zip(*res):
            np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-12, equal_nan=True, err_msg=name)


@pytest.mark.gpu
def test_cuda_float32_activations_and_nan_for_bad_bce_inputs():
    x = (rng.standard_normal(1000) * 5).astype(np.float32)
    for name, (kw, _, _) in ACTIVATIONS.items():
        a, b = (on(d, lambda t: getattr(F, name)(t, **kw), [x], [True]) for d in ("cpu", "cuda"))
        for u, v in zip(a, b):
            np.testing.assert_allclose(v, u, rtol=1e-5, atol=1e-6, err_msg=name)
    out = F.binary_cross_entropy(ddpc.tensor([0.5, 1.5], device="cuda"), ddpc.tensor([1.0, 0.0], device="cuda"),
                                 reduction="none")
    assert np.isnan(arr(out)[1]) and np.isfinite(arr(out)[0])
    assert math.isnan(F.cross_entropy(ddpc.ones(2, 3, device="cuda"), ddpc.tensor([0, 5], device="cuda")).item())


# ---- composed activations, margin and likelihood losses, layout ---------------------------------

def test_rrelu_draws_slopes_in_its_range_while_training_and_uses_their_mean_otherwise():
    x = t64(-np.abs(rng.standard_normal(4000)) - 0.1, requires_grad=True)
    y = F.rrelu(x, 0.1, 0.3, training=True)
    slope = arr(y) / arr(x)
    assert slope.min() >= 0.1 and slope.max() <= 0.3 and slope.std() > 0.05
    y.sum().backward()
    np.testing.assert_allclose(arr(x.grad), slope, rtol=1e-12)  # the drawn slope is the gradient
    pos = t64([0.0, 2.0])
    np.testing.assert_array_equal(arr(F.rrelu(pos, training=True)), [0.0, 2.0])
    np.testing.assert_allclose(arr(F.rrelu(t64([-3.0]))), [-3.0 * (1 / 8 + 1 / 3) / 2], rtol=1e-15)
    with pytest.raises(ValueError, match="lower <= upper"):
        F.rrelu(x, 0.5, 0.1)


def test_alpha_dropout_keeps_a_standard_normal_input_standard():
    x = t64(np.random.default_rng(0).standard_normal(200_000))
    y = arr(F.alpha_dropout(x, 0.3, training=True))
    assert abs(y.mean()) < 0.02 and abs(y.std() - 1) < 0.02
    # a dropped element takes one value: SELU's saturation -alpha', mapped by the same affine map as the rest
    alpha = SELU_A * SELU_S
    a = (0.7 * (1 + 0.3 * alpha ** 2)) ** -0.5
    dropped = np.isclose(y, -alpha * a * 0.7, rtol=1e-12, atol=0)
    assert 0.29 < dropped.mean() < 0.31
    np.testing.assert_allclose(y[~dropped], arr(x)[~dropped] * a + alpha * a * 0.3, rtol=1e-12)
    assert F.alpha_dropout(x, 0.3, training=False) is x
    np.testing.assert_array_equal(arr(F.alpha_dropout(x, 1.0, training=True)), 0)
    m = nn.AlphaDropout(0.2)
    assert repr(m) == "AlphaDropout(p=0.2, inplace=False)" and m.eval()(x) is x


def _reference_losses(x1, x2, y, cls, w):
    """Each margin loss of ``x1`` (N, C) written out sample by sample from PyTorch's documented formula."""
    n, c = x1.shape
    multi = np.array([sum(w[cls[i]] * max(0, 0.8 - x1[i, cls[i]] + x1[i, j]) ** 2 for j in range(c) if j != cls[i])
                      / c for i in range(n)])
    cos = (x1 * x2).sum(1) / np.sqrt(((x1 * x1).sum(1) + 1e-12) * ((x2 * x2).sum(1) + 1e-12))
    return {
        "margin_ranking_loss": np.maximum(0, -y * (x1[:, 0] - x2[:, 0]) + 0.3),
        "cosine_embedding_loss": np.where(y == 1, 1 - cos, np.maximum(0, cos - 0.2)),
        "multi_margin_loss": multi,
        "triplet_margin_loss": np.maximum(0, 1 + np.linalg.norm(x1 - x2 + 1e-6, axis=1)
                                          - np.linalg.norm(x1 - 2 * x2 + 1e-6, axis=1)),
    }


@pytest.mark.parametrize("reduction", ["none", "mean", "sum"])
def test_margin_losses_match_their_formulas_and_pass_a_gradient_check(reduction):
    x1, x2 = rng.standard_normal((2, 6, 4))
    y = np.where(rng.random(6) < 0.5, 1.0, -1.0)
    cls, w = rng.integers(0, 4, 6), rng.random(4) + 0.5
    want = _reference_losses(x1, x2, y, cls, w)
    calls = {
        "margin_ranking_loss": lambda a: F.margin_ranking_loss(a[:, 0], t64(x2[:, 0]), t64(y), 0.3,
                                                               reduction=reduction),
        "cosine_embedding_loss": lambda a: F.cosine_embedding_loss(a, t64(x2), t64(y), 0.2, reduction=reduction),
        "multi_margin_loss": lambda a: F.multi_margin_loss(a, ddpc.tensor(cls), p=2, margin=0.8, weight=t64(w),
                                                           reduction=reduction),
        "triplet_margin_loss": lambda a: F.triplet_margin_loss(a, t64(x2), t64(2 * x2), reduction=reduction),
    }
    reduce = {"none": lambda v: v, "mean": np.mean, "sum": np.sum}[reduction]
    for name, call in calls.items():
        a = t64(x1, requires_grad=True)
        out = call(a)
        np.testing.assert_allclose(arr(out), reduce(want[name]), rtol=1e-12, err_msg=name)
        out.sum().backward()
        with ddpc.no_grad():
            num = numeric_grad(lambda v: float(arr(call(t64(v))).sum()), x1)
        np.testing.assert_allclose(arr(a.grad), num, rtol=1e-5, atol=1e-7, err_msg=name)


def test_hinge_soft_margin_and_multilabel_losses():
    x = rng.standard_normal((5, 3))
    y = np.where(rng.random((5, 3)) < 0.5, 1.0, -1.0)
    np.testing.assert_allclose(arr(F.hinge_embedding_loss(t64(x), t64(y), 0.5, reduction="none")),
                               np.where(y == 1, x, np.maximum(0, 0.5 - x)), rtol=1e-15)
    np.testing.assert_allclose(arr(F.soft_margin_loss(t64(x), t64(y))), np.log1p(np.exp(-y * x)).mean(), rtol=1e-12)
    labels, w = (y > 0).astype(float), np.array([1.0, 2.0, 0.5])
    per = -(labels * np.log(sig(x)) + (1 - labels) * np.log(sig(-x))) * w
    np.testing.assert_allclose(arr(F.multilabel_soft_margin_loss(t64(x), t64(labels), t64(w), reduction="none")),
                               per.mean(1), rtol=1e-12)


def test_gaussian_and_poisson_nll():
    mu, target = rng.standard_normal((2, 4, 3))
    var = rng.random((4, 3)) + 0.5
    var[0, 0] = 1e-9
    v = t64(var, requires_grad=True)
    loss = F.gaussian_nll_loss(t64(mu), t64(target), v, full=True, reduction="sum")
    clamped = np.maximum(var, 1e-6)
    np.testing.assert_allclose(arr(loss), (0.5 * (np.log(clamped) + (mu - target) ** 2 / clamped)
                                           + 0.5 * np.log(2 * np.pi)).sum(), rtol=1e-12)
    loss.backward()  # the clamp is not differentiated: the gradient is the formula's at the clamped value
    np.testing.assert_allclose(arr(v.grad), 0.5 / clamped - 0.5 * (mu - target) ** 2 / clamped ** 2, rtol=1e-12)
    homo = F.gaussian_nll_loss(t64(mu), t64(target), t64(var[:, 0]), reduction="none")
    np.testing.assert_allclose(arr(homo), 0.5 * (np.log(np.maximum(var[:, :1], 1e-6)) + (mu - target) ** 2
                                                 / np.maximum(var[:, :1], 1e-6)), rtol=1e-12)
    np.testing.assert_allclose(arr(F.gaussian_nll_loss(t64(mu), t64(target), 2.0)),
                               (0.5 * (np.log(2.0) + (mu - target) ** 2 / 2)).mean(), rtol=1e-12)
    counts = np.array([[0.0, 1.0, 2.0], [5.0, 3.0, 0.0]])
    rate = np.array([[0.1, -0.3, 1.2], [2.0, 0.5, -1.0]])
    stirling = np.where(counts > 1, counts * np.log(np.maximum(counts, 1)) - counts
                        + 0.5 * np.log(2 * np.pi * np.maximum(counts, 1)), 0)
    np.testing.assert_allclose(arr(F.poisson_nll_loss(t64(rate), t64(counts), full=True, reduction="none")),
                               np.exp(rate) - counts * rate + stirling, rtol=1e-12)
    np.testing.assert_allclose(arr(F.poisson_nll_loss(t64(np.exp(rate)), t64(counts), log_input=False)),
                               (np.exp(rate) - counts * np.log(np.exp(rate) + 1e-8)).mean(), rtol=1e-12)


def test_composed_loss_errors():
    x = t64(np.ones((2, 3)))
    with pytest.raises(ValueError, match="negative"):
        F.gaussian_nll_loss(x, x, t64(-np.ones((2, 3))))
    with pytest.raises(ValueError, match="incorrect size"):
        F.gaussian_nll_loss(x, x, t64(np.ones((3, 2))))
    with pytest.raises(ValueError, match="p == 1 and p == 2"):
        F.multi_margin_loss(x, ddpc.tensor([0, 1]), p=3)
    with pytest.raises(ValueError, match=r"\(N, C\)"):
        F.multi_margin_loss(x, ddpc.tensor([0, 1, 2]))
    with pytest.raises(ValueError, match="margin must be greater than 0"):
        F.triplet_margin_loss(x, x, x, margin=0)
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        F.soft_margin_loss(x, x, reduction="max")
    with pytest.raises(TypeError, match="ddpc tensors"):
        F.hinge_embedding_loss(np.ones(3), x)
    with pytest.raises(ValueError, match="celu"):
        F.celu(x, alpha=0)
    with pytest.raises(ValueError, match="lambda"):
        F.softshrink(x, -1)


def test_loss_modules_of_the_composed_losses():
    x1, x2, x3 = (t64(rng.standard_normal((4, 3))) for _ in range(3))
    y = t64([1.0, -1.0, 1.0, -1.0])
    cls = ddpc.tensor([0, 2, 1, 1])
    w = t64([1.0, 0.5, 2.0])
    pairs = [(nn.MarginRankingLoss(0.2)(x1[:, 0], x2[:, 0], y), F.margin_ranking_loss(x1[:, 0], x2[:, 0], y, 0.2)),
             (nn.HingeEmbeddingLoss(0.5, reduction="sum")(x1, x2.sign()), F.hinge_embedding_loss(x1, x2.sign(), 0.5,
                                                                                                  reduction="sum")),
             (nn.SoftMarginLoss()(x1, x2.sign()), F.soft_margin_loss(x1, x2.sign())),
             (nn.CosineEmbeddingLoss(0.1)(x1, x2, y), F.cosine_embedding_loss(x1, x2, y, 0.1)),
             (nn.TripletMarginLoss(p=1.0, swap=True)(x1, x2, x3), F.triplet_margin_loss(x1, x2, x3, p=1.0, swap=True)),
             (nn.TripletMarginWithDistanceLoss(distance_function=F.pairwise_distance)(x1, x2, x3),
              F.triplet_margin_loss(x1, x2, x3)),
             (nn.GaussianNLLLoss(full=True)(x1, x2, x3.abs()), F.gaussian_nll_loss(x1, x2, x3.abs(), full=True)),
             (nn.PoissonNLLLoss(full=True)(x1, x2.abs()), F.poisson_nll_loss(x1, x2.abs(), full=True)),
             (nn.MultiLabelSoftMarginLoss(w)(x1, (x2 > 0).to(dtype=ddpc.float64)),
              F.multilabel_soft_margin_loss(x1, (x2 > 0).to(dtype=ddpc.float64), w)),
             (nn.MultiMarginLoss(p=2, margin=0.5, weight=w)(x1, cls), F.multi_margin_loss(x1, cls, 2, 0.5, w))]
    for got, want in pairs:
        np.testing.assert_array_equal(arr(got), arr(want))
    assert dict(nn.MultiMarginLoss(weight=w).named_buffers())["weight"] is w
    with pytest.raises(ValueError, match="greater than 0"):
        nn.TripletMarginLoss(margin=-1.0)


def test_refusals_of_one_hot_data_and_calculate_gain_as_pytorch():
    with pytest.raises(RuntimeError, match="LongTensor"):
        F.one_hot(ddpc.tensor([0, 1], dtype=ddpc.int32))
    p = ddpc.nn.Parameter(ddpc.zeros(2))
    with pytest.raises(RuntimeError, match="must be floating point or complex dtype"):
        ddpc.nn.utils.vector_to_parameters(ddpc.arange(2), [p])
    assert p.dtype is ddpc.float32 and p.requires_grad
    for param in (True, "x"):
        with pytest.raises(ValueError, match="not a valid number"):
            ddpc.nn.init.calculate_gain("leaky_relu", param)
    assert ddpc.nn.init.calculate_gain("leaky_relu", 1) == 1.0


def test_packed_sequence_casts_and_pins_its_data_only():
    packed = ddpc.nn.utils.rnn.pack_sequence([ddpc.ones(3), ddpc.ones(2)], enforce_sorted=False)
    for cast, dtype in (("double", ddpc.float64), ("half", ddpc.float16), ("long", ddpc.int64),
                        ("int", ddpc.int32), ("byte", ddpc.uint8), ("float", ddpc.float32)):
        out = getattr(packed, cast)()
        assert type(out) is type(packed) and out.data.dtype is dtype and out.data.tolist() == [1] * 5
        assert out.batch_sizes.tolist() == [2, 2, 1] and out.sorted_indices.tolist() == [0, 1]
    assert not packed.is_pinned() and packed.pin_memory().data.tolist() == packed.data.tolist()


def test_one_hot_normalize_and_pixel_layouts():
    idx = ddpc.tensor([[0, 3], [2, 1]])
    got = F.one_hot(idx)
    assert got.dtype is ddpc.int64 and got.shape == (2, 2, 4)
    np.testing.assert_array_equal(arr(got), np.eye(4, dtype=np.int64)[arr(idx)])
    assert F.one_hot(idx, 6).shape == (2, 2, 6)
    for bad, n, match in ((ddpc.tensor([-1]), -1, "non-negative"), (idx, 3, "smaller than num_classes"),
                          (ddpc.tensor([], dtype=ddpc.int64), -1, "empty")):
        with pytest.raises(ValueError, match=match):
            F.one_hot(bad, n)
    with pytest.raises(TypeError, match="LongTensor"):
        F.one_hot(t64([1.0]))
    x = rng.standard_normal((2, 3, 4))
    np.testing.assert_allclose(arr(F.normalize(t64(x))), x / np.linalg.norm(x, axis=1, keepdims=True), rtol=1e-12)
    np.testing.assert_array_equal(arr(F.normalize(t64(np.zeros((2, 3))))), 0)  # eps keeps zero rows finite
    planes = t64(rng.standard_normal((2, 12, 3, 5)))
    shuffled = F.pixel_shuffle(planes, 2)
    assert shuffled.shape == (2, 3, 6, 10)
    # output pixel (h r + i, w r + j) of channel c is input channel c r^2 + i r + j at (h, w)
    np.testing.assert_array_equal(arr(shuffled)[1, 2, 2 * 1 + 1, 2 * 4 + 0], arr(planes)[1, 2 * 4 + 1 * 2 + 0, 1, 4])
    np.testing.assert_array_equal(arr(F.pixel_unshuffle(shuffled, 2)), arr(planes))
    np.testing.assert_array_equal(arr(nn.PixelUnshuffle(2)(nn.PixelShuffle(2)(planes))), arr(planes))
    once = F.channel_shuffle(planes, 3)
    np.testing.assert_array_equal(arr(once)[:, 1], arr(planes)[:, 4])  # channel k*groups + g is g*(C/groups) + k
    np.testing.assert_array_equal(arr(nn.ChannelShuffle(4)(once)), arr(planes))
    with pytest.raises(ValueError, match="divisible"):
        F.pixel_shuffle(planes, 5)
    with pytest.raises(ValueError, match="divisible"):
        F.channel_shuffle(planes, 5)


def test_deprecated_forms_warn_and_call_the_current_ones():
    """upsample*, nn.init's names without the underscore and clip_grad_norm: older code calls them; they
    warn as PyTorch's do and give what the current forms give."""
    x = ddpc.tensor(np.random.default_rng(0).standard_normal((1, 2, 3, 4)))
    for old, kw, new in ((F.upsample, dict(scale_factor=2, mode="bilinear"), dict(mode="bilinear")),
                         (F.upsample_nearest, dict(scale_factor=2), dict(mode="nearest")),
                         (F.upsample_bilinear, dict(size=(5, 7)), dict(mode="bilinear", align_corners=True))):
        with pytest.warns(UserWarning, match="is deprecated. Use `nn.functional.interpolate` instead"):
            got = old(x, **kw)
        want = F.interpolate(x, **{k: v for k, v in kw.items() if k != "mode"}, **new)
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    for name, args in (("uniform", ()), ("normal", ()), ("constant", (0.5,)), ("xavier_uniform", ()),
                       ("xavier_normal", ()), ("kaiming_uniform", ()), ("kaiming_normal", ()), ("orthogonal", ()),
                       ("sparse", (0.5,)), ("eye", ()), ("dirac", ())):
        shape = (2, 2, 3) if name == "dirac" else (3, 4)
        a, b = ddpc.empty(*shape), ddpc.empty(*shape)
        ddpc.manual_seed(1)
        with pytest.warns(FutureWarning, match=f"`nn.init.{name}` is now deprecated in favor of `nn.init.{name}_`"):
            assert getattr(nn.init, name)(a, *args) is a
        ddpc.manual_seed(1)
        getattr(nn.init, name + "_")(b, *args)
        np.testing.assert_array_equal(a.numpy(), b.numpy())
    p = nn.Parameter(ddpc.ones(4))
    p.grad = ddpc.full((4,), 3.0)
    with pytest.warns(FutureWarning, match="clip_grad_norm_"):
        assert float(nn.utils.clip_grad_norm([p], 1.0)) == 6.0
    assert np.allclose(p.grad.numpy(), 0.5, atol=1e-6)


def test_with_indices_forms_give_the_pools_output_and_indices():
    x = ddpc.tensor(np.random.default_rng(1).standard_normal((2, 3, 8, 8)))
    for form, pool, args in ((F.max_pool2d_with_indices, F.max_pool2d, (3, 2, 1)),
                             (F.adaptive_max_pool2d_with_indices, F.adaptive_max_pool2d, (3,)),
                             (F.max_pool1d_with_indices, F.max_pool1d, (2,))):
        inp = x.reshape(2, 3, 64) if form is F.max_pool1d_with_indices else x
        out, idx = form(inp, *args, return_indices=False)  # the indices whatever return_indices says
        want, want_idx = pool(inp, *args, return_indices=True)
        assert np.array_equal(out.numpy(), want.numpy()) and np.array_equal(idx.numpy(), want_idx.numpy())
    assert F.max_pool3d_with_indices.__name__ == "max_pool3d_with_indices"
