"""The 3-d padding layers against numpy.pad (reflect, edge and wrap modes,
constants, negative padding cropping), with their gradients; Dropout3d and
FeatureAlphaDropout: whole channels kept or dropped, PyTorch's documented
scale and shift, eval mode, and their argument checks."""

import numpy as np
import pytest

import ddpc
from ddpc import nn
from numeric import numeric_grad

NUMPY_MODE = {"ReflectionPad3d": "reflect", "ReplicationPad3d": "edge", "CircularPad3d": "wrap"}


def numpy_pad(x, widths, mode, value=0.0):
    """x padded along its last three dims by PyTorch's (left, right, top, bottom, front, back) widths."""
    pairs = [(0, 0)] * (x.ndim - 3) + [(widths[4], widths[5]), (widths[2], widths[3]), (widths[0], widths[1])]
    if mode == "constant":
        return np.pad(x, pairs, constant_values=value)
    return np.pad(x, pairs, mode=mode)


@pytest.mark.parametrize("name", ["ReflectionPad3d", "ReplicationPad3d", "CircularPad3d", "ZeroPad3d",
                                  "ConstantPad3d"])
@pytest.mark.parametrize("padding", [1, (2, 0, 1, 2, 0, 1)])
@pytest.mark.parametrize("shape", [(2, 2, 3, 4, 3), (2, 3, 3, 4)])
def test_padding_matches_numpy_with_gradients(name, padding, shape):
    x = np.random.default_rng(0).standard_normal(shape)
    module = getattr(nn, name)(padding, 1.5) if name == "ConstantPad3d" else getattr(nn, name)(padding)
    widths = (padding,) * 6 if isinstance(padding, int) else padding
    want = numpy_pad(x, widths, NUMPY_MODE.get(name, "constant"), 1.5 if name == "ConstantPad3d" else 0.0)
    xt = ddpc.tensor(x, requires_grad=True)
    out = module(xt)
    np.testing.assert_array_equal(out.detach().numpy(), want)
    w = np.random.default_rng(1).standard_normal(want.shape)
    (out * ddpc.tensor(w)).sum().backward()
    num = numeric_grad(lambda a: float((numpy_pad(a, widths, NUMPY_MODE.get(name, "constant")) * w).sum()), x)
    np.testing.assert_allclose(xt.grad.numpy(), num, rtol=1e-6, atol=1e-8)


def test_negative_constant_padding_crops():
    x = np.arange(2 * 4 * 5 * 6, dtype=np.float64).reshape(2, 4, 5, 6)
    out = nn.ZeroPad3d((-1, 2, 0, -2, 1, -1))(ddpc.tensor(x)).numpy()
    np.testing.assert_array_equal(out, np.pad(x[:, :-1, :-2, 1:], [(0, 0), (1, 0), (0, 0), (0, 2)]))


def test_padding_checks():
    with pytest.raises(ValueError, match="reflect padding \\(3, 3\\) must be less than the input size 3"):
        nn.ReflectionPad3d(3)(ddpc.randn(1, 2, 3, 4, 4))
    with pytest.raises(NotImplementedError, match="pads the last 1 to 3 dims"):
        nn.ReplicationPad3d(1)(ddpc.randn(4, 4, 4))
    with pytest.raises(ValueError, match="padding"):
        nn.CircularPad3d((1, 2, 3))


def _channel_masks(out, x, lead):
    """Which channels (all elements after the first ``lead`` dims) out keeps, checking each is all or nothing."""
    per_channel = (out != 0).reshape(*x.shape[:lead], -1)
    assert (per_channel.all(-1) | ~per_channel.any(-1)).all()
    return per_channel.all(-1)


@pytest.mark.parametrize("shape,lead", [((16, 32, 2, 2, 2), 2), ((64, 2, 3, 2), 1)])
def test_dropout3d_drops_whole_channels_and_scales_the_rest(shape, lead):
    ddpc.manual_seed(0)
    x = np.random.default_rng(0).uniform(1, 2, shape)
    m = nn.Dropout3d(0.25)
    xt = ddpc.tensor(x, requires_grad=True)
    out = m(xt)
    kept = _channel_masks(out.detach().numpy(), x, lead)
    assert 0.6 < kept.mean() < 0.9
    mask = kept.reshape(kept.shape + (1,) * (len(shape) - lead))
    np.testing.assert_allclose(out.detach().numpy(), x * mask / 0.75, rtol=1e-15)
    out.sum().backward()
    np.testing.assert_allclose(xt.grad.numpy(), np.broadcast_to(mask / 0.75, shape), rtol=1e-15)
    m.eval()
    assert m(xt) is xt


def test_feature_alpha_dropout_keeps_selu_statistics_per_channel():
    ddpc.manual_seed(0)
    p = 0.2
    x = np.random.default_rng(0).standard_normal((64, 64, 8, 8))
    xt = ddpc.tensor(x, requires_grad=True)
    out = nn.FeatureAlphaDropout(p)(xt)
    alpha = 1.6732632423543772 * 1.0507009873554805
    a = ((1 - p) * (1 + p * alpha ** 2)) ** -0.5
    out.sum().backward()
    kept = xt.grad.numpy()[:, :, 0, 0] != 0
    assert 0.75 < kept.mean() < 0.85
    mask = kept[:, :, None, None]
    want = np.where(mask, x * a + alpha * a * p, -alpha * a + alpha * a * p)
    np.testing.assert_allclose(out.detach().numpy(), want, rtol=1e-14, atol=1e-15)
    np.testing.assert_allclose(xt.grad.numpy(), np.broadcast_to(mask * a, x.shape), rtol=1e-15)
    # A standard normal input keeps mean 0 and variance 1.
    assert abs(out.detach().numpy().mean()) < 0.05 and abs(out.detach().numpy().var() - 1) < 0.05


def test_dropout_checks():
    with pytest.warns(UserWarning, match="3-D input to dropout3d"):  # as PyTorch: channels of (N, C, *)
        dropped = nn.Dropout3d()(ddpc.ones(40, 30, 4))
    assert (dropped.amin(-1) == dropped.amax(-1)).all() and set(dropped.unique().tolist()) <= {0.0, 2.0}
    with pytest.raises(ValueError, match="at least 2 dims"):
        nn.FeatureAlphaDropout().train()(ddpc.randn(5))
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.FeatureAlphaDropout(1.5)
    with pytest.raises(ValueError, match="between 0 and 1"):
        ddpc.nn.functional.dropout3d(ddpc.randn(1, 2, 2, 2, 2), p=-0.1)
    x = ddpc.randn(2, 3, 4)
    assert nn.FeatureAlphaDropout(0.5).eval()(x) is x
    np.testing.assert_array_equal(nn.FeatureAlphaDropout(1.0)(x).numpy(), np.zeros((2, 3, 4)))
