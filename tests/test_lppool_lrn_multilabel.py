"""LPPool1d/2d/3d, LocalResponseNorm, CrossMapLRN2d and MultiLabelMarginLoss
against numpy implementations of PyTorch's documented formulas, their
gradients against numeric ones, and their argument checks."""

import numpy as np
import pytest

import ddpc
from ddpc import nn
from numeric import numeric_grad


def _value_and_grad(module, x, *extra):
    xt = ddpc.tensor(x, requires_grad=True)
    out = module(xt, *extra)
    out.sum().backward()
    return out.detach().numpy(), xt.grad.numpy()


@pytest.mark.parametrize("p", [1.0, 2.0, 3.0])
def test_lp_pool2d_is_the_window_norm(p):
    x = np.random.default_rng(0).uniform(0.5, 2.0, (2, 3, 4, 6))
    out, grad = _value_and_grad(nn.LPPool2d(p, (2, 3)), x)
    windows = x.reshape(2, 3, 2, 2, 2, 3).transpose(0, 1, 2, 4, 3, 5).reshape(2, 3, 2, 2, 6)
    np.testing.assert_allclose(out, (windows ** p).sum(-1) ** (1 / p), rtol=1e-13)
    num = numeric_grad(lambda a: float(nn.LPPool2d(p, (2, 3))(ddpc.tensor(a)).sum()), x)
    np.testing.assert_allclose(grad, num, rtol=1e-6)


def test_lp_pool_infinite_norms_and_other_dims():
    x = np.random.default_rng(1).standard_normal((2, 9))
    np.testing.assert_array_equal(nn.LPPool1d(float("inf"), 3)(ddpc.tensor(x)).numpy(),
                                  np.abs(x).reshape(2, 3, 3).max(-1))
    np.testing.assert_array_equal(nn.LPPool1d(-float("inf"), 3)(ddpc.tensor(x)).numpy(),
                                  np.abs(x).reshape(2, 3, 3).min(-1))
    y = np.abs(np.random.default_rng(2).standard_normal((1, 2, 4, 4, 4))) + 0.1
    out = nn.LPPool3d(2, 2)(ddpc.tensor(y)).numpy()
    windows = y.reshape(1, 2, 2, 2, 2, 2, 2, 2).transpose(0, 1, 2, 4, 6, 3, 5, 7).reshape(1, 2, 2, 2, 2, 8)
    np.testing.assert_allclose(out, np.sqrt((windows ** 2).sum(-1)), rtol=1e-13)
    with pytest.raises(ValueError, match="norm_type must be a non-zero value"):
        nn.LPPool1d(0, 2)(ddpc.tensor(x))


def numpy_lrn(x, size, alpha, beta, k):
    sq = np.pad(x * x, [(0, 0), (size // 2, (size - 1) // 2)] + [(0, 0)] * (x.ndim - 2))
    window = sum(sq[:, j:j + x.shape[1]] for j in range(size)) / size
    return x / (k + alpha * window) ** beta


@pytest.mark.parametrize("size,shape", [(3, (2, 5, 4)), (4, (2, 6, 3, 3)), (1, (1, 3, 2, 2, 2)), (7, (2, 3, 5))])
def test_local_response_norm_matches_the_formula_with_gradients(size, shape):
    x = np.random.default_rng(0).standard_normal(shape)
    m = nn.LocalResponseNorm(size, alpha=0.5, beta=0.75, k=1.5)
    out, grad = _value_and_grad(m, x)
    np.testing.assert_allclose(out, numpy_lrn(x, size, 0.5, 0.75, 1.5), rtol=1e-13)
    np.testing.assert_allclose(grad, numeric_grad(lambda a: float(numpy_lrn(a, size, 0.5, 0.75, 1.5).sum()), x),
                               rtol=1e-6, atol=1e-9)


def numpy_cross_map_lrn(x, size, alpha, beta, k):
    """PyTorch's running sum over the channels, step by step."""
    c = x.shape[1]
    sq = x * x
    pre_pad = int((size - 1) / 2 + 1)
    scale = np.zeros_like(x)
    scale[:, 0] = sq[:, :min(pre_pad, c)].sum(1)
    for ch in range(1, c):
        scale[:, ch] = scale[:, ch - 1]
        if ch < c - pre_pad + 1:
            scale[:, ch] += sq[:, ch + pre_pad - 1]
        if ch > pre_pad:
            scale[:, ch] -= sq[:, ch - pre_pad]
    return x * (k + alpha / size * scale) ** -beta


@pytest.mark.parametrize("size,channels", [(3, 6), (5, 9), (4, 7), (2, 3), (1, 4), (5, 2)])
def test_cross_map_lrn2d_follows_pytorchs_running_sum_with_true_gradients(size, channels):
    x = np.random.default_rng(0).standard_normal((2, channels, 3, 2))
    m = nn.CrossMapLRN2d(size, alpha=0.5, beta=0.75, k=1.0)
    out, grad = _value_and_grad(m, x)
    np.testing.assert_allclose(out, numpy_cross_map_lrn(x, size, 0.5, 0.75, 1.0), rtol=1e-13, atol=1e-15)
    num = numeric_grad(lambda a: float(numpy_cross_map_lrn(a, size, 0.5, 0.75, 1.0).sum()), x)
    np.testing.assert_allclose(grad, num, rtol=1e-6, atol=1e-9)
    with pytest.raises(ValueError, match="Expected input to be 4D, got 3D"):
        m(ddpc.randn(2, 3, 4))


def numpy_multilabel_margin(x, target):
    rows, labels = x.reshape(-1, x.shape[-1]), target.reshape(-1, x.shape[-1])
    out = []
    for row, lab in zip(rows, labels):
        listed = list(lab[:list(lab).index(-1)] if -1 in lab else lab)
        others = [i for i in range(len(row)) if i not in listed]
        out.append(sum(max(0.0, 1 - (row[j] - row[i])) for j in listed for i in others) / len(row))
    return np.array(out).reshape(target.shape[:-1])


def test_multilabel_margin_loss_matches_the_formula_with_gradients():
    x = np.random.default_rng(0).standard_normal((4, 5))
    target = np.array([[3, 0, -1, 1, 2], [1, 1, -1, 0, 0], [-1, 2, 3, 4, 0], [0, 1, 2, 3, 4]])
    for reduction, reduce in (("none", lambda v: v), ("sum", np.sum), ("mean", np.mean)):
        out, grad = _value_and_grad(nn.MultiLabelMarginLoss(reduction=reduction), x, ddpc.tensor(target))
        np.testing.assert_allclose(out, reduce(numpy_multilabel_margin(x, target)), rtol=1e-14)
        num = numeric_grad(lambda a: float(np.sum(reduce(numpy_multilabel_margin(a, target)))), x)
        np.testing.assert_allclose(grad, num, rtol=1e-6, atol=1e-9)
    single = ddpc.nn.functional.multilabel_margin_loss(ddpc.tensor(x[0]), ddpc.tensor(target[0]), reduction="none")
    assert single.shape == () and np.isclose(float(single), numpy_multilabel_margin(x[0], target[0]))


def test_multilabel_margin_loss_checks():
    x = ddpc.randn(2, 3)
    with pytest.raises(ValueError, match="target class out of range \\[0, 3\\)"):
        nn.MultiLabelMarginLoss()(x, ddpc.tensor([[0, 3, -1], [1, -1, 0]]))
    with pytest.raises(ValueError, match="target class out of range"):
        nn.MultiLabelMarginLoss()(x, ddpc.tensor([[0, -2, -1], [1, -1, 0]]))
    nn.MultiLabelMarginLoss()(x, ddpc.tensor([[0, -1, 7], [1, -1, -5]]))  # entries after the first -1 are ignored
    with pytest.raises(ValueError, match="a target of its shape"):
        nn.MultiLabelMarginLoss()(x, ddpc.tensor([0, 1, 2]))
    with pytest.raises(TypeError, match="expected scalar type Long"):
        nn.MultiLabelMarginLoss()(x, ddpc.zeros(2, 3))
    with pytest.raises(ValueError, match="not a valid value for reduction"):
        nn.MultiLabelMarginLoss(reduction="avg")(x, ddpc.tensor([[0, -1, 0], [1, -1, 0]]))


def test_local_response_norm_checks():
    with pytest.raises(ValueError, match="Expected 3D or higher dimensionality input \\(got 2 dimensions\\)"):
        nn.LocalResponseNorm(2)(ddpc.randn(3, 4))
    empty = ddpc.randn(0, 3, 4)
    assert nn.LocalResponseNorm(2)(empty).shape == (0, 3, 4)
