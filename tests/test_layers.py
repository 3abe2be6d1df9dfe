"""F.pad and the padding layers, PReLU, Threshold, channel dropout, cosine
similarity, pairwise distance and interpolate/Upsample in every mode against numpy
references: outputs, central-difference gradients and refused arguments."""

import numpy as np
import pytest
from numeric import numeric_grad

import ddpc
from ddpc import nn
from ddpc.nn import functional as F


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def _check(fn, ref, *xs, rtol=1e-5):
    """fn on ddpc tensors of ``xs`` equals ref on the arrays, and each input's
    gradient the central differences of ref."""
    ts = [ddpc.tensor(x, requires_grad=True) for x in xs]
    out = fn(*ts)
    want = ref(*xs)
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-9, atol=1e-10)
    g = _x(*want.shape, seed=7)
    out.backward(ddpc.tensor(g))
    for i, t in enumerate(ts):
        def along(v, i=i):
            return ref(*(v if j == i else x for j, x in enumerate(xs)))
        expect = numeric_grad(lambda a: (along(a) * g).sum(), xs[i])
        np.testing.assert_allclose(t.grad.numpy(), expect, rtol=rtol, atol=1e-6)


# ---- padding -----------------------------------------------------------------------------

def _np_pad(x, pad, mode, value=0.0):
    """torch's pad tuple (last dim first) as numpy.pad, negative constant pads cropping."""
    pairs = [(0, 0)] * (x.ndim - len(pad) // 2) + [(pad[i], pad[i + 1]) for i in range(len(pad) - 2, -1, -2)]
    crop = tuple(slice(max(-b, 0), x.shape[d] - max(-a, 0)) for d, (b, a) in enumerate(pairs))
    grow = [(max(b, 0), max(a, 0)) for b, a in pairs]
    np_mode = {"constant": "constant", "reflect": "reflect", "replicate": "edge", "circular": "wrap"}[mode]
    kwargs = {"constant_values": value} if mode == "constant" else {}
    return np.pad(x[crop], grow, mode=np_mode, **kwargs)


@pytest.mark.parametrize("mode", ["constant", "reflect", "replicate", "circular"])
@pytest.mark.parametrize("shape, pad", [((2, 3, 5), (2, 1)), ((2, 3, 4, 5), (1, 2, 3, 0)), ((3, 4, 5), (0, 3, 2, 2)),
                                        ((2, 3, 4), (4, 4))])
def test_pad_matches_numpy(mode, shape, pad):
    if mode == "reflect" and max(pad) >= min(shape[-len(pad) // 2:]):
        pad = tuple(min(p, 2) for p in pad)
    _check(lambda t: F.pad(t, pad, mode), lambda x: _np_pad(x, pad, mode), _x(*shape))


@pytest.mark.parametrize("pad", [(-1, 2), (1, -2, -1, 0), (0, 0, 0, 0, 1, 1), (-2, -3)])
def test_constant_pad_crops_on_negative_pads_and_takes_a_value(pad):
    _check(lambda t: F.pad(t, pad, value=1.5), lambda x: _np_pad(x, pad, "constant", 1.5), _x(2, 3, 5))


@pytest.mark.parametrize("layer, mode, value, pad", [
    (lambda: nn.ZeroPad1d(2), "constant", 0.0, (2, 2)),
    (lambda: nn.ZeroPad2d((1, 0, 2, 1)), "constant", 0.0, (1, 0, 2, 1)),
    (lambda: nn.ConstantPad1d((0, 3), -2.0), "constant", -2.0, (0, 3)),
    (lambda: nn.ConstantPad2d(1, 4.0), "constant", 4.0, (1, 1, 1, 1)),
    (lambda: nn.ReflectionPad1d((2, 1)), "reflect", 0.0, (2, 1)),
    (lambda: nn.ReflectionPad2d(1), "reflect", 0.0, (1, 1, 1, 1)),
    (lambda: nn.ReplicationPad1d(3), "replicate", 0.0, (3, 3)),
    (lambda: nn.ReplicationPad2d((0, 2, 1, 3)), "replicate", 0.0, (0, 2, 1, 3)),
    (lambda: nn.CircularPad1d(2), "circular", 0.0, (2, 2)),
    (lambda: nn.CircularPad2d((1, 2, 0, 1)), "circular", 0.0, (1, 2, 0, 1)),
])
def test_padding_layers(layer, mode, value, pad):
    shape = (2, 3, 4) if len(pad) == 2 else (2, 3, 4, 5)
    _check(layer(), lambda x: _np_pad(x, pad, mode, value), _x(*shape))
    _check(layer(), lambda x: _np_pad(x, pad, mode, value), _x(*shape[1:]))  # unbatched


def test_pad_refuses_bad_arguments():
    x = ddpc.zeros(2, 3, 4)
    with pytest.raises(ValueError, match="even number"):
        F.pad(x, (1, 2, 3))
    with pytest.raises(ValueError, match="too large"):
        F.pad(x, (1,) * 8)
    with pytest.raises(ValueError, match="mode must be one of"):
        F.pad(x, (1, 1), mode="wrap")
    with pytest.raises(ValueError, match="less than the input size"):
        F.pad(x, (4, 0), mode="reflect")
    with pytest.raises(ValueError, match="wraps around"):
        F.pad(x, (5, 0), mode="circular")
    with pytest.raises(ValueError, match="crops more"):
        F.pad(x, (-3, -2))
    with pytest.raises(ValueError, match="value"):
        F.pad(x, (1, 1), mode="reflect", value=2.0)
    with pytest.raises(NotImplementedError, match="last 1 to 3 dims"):
        F.pad(ddpc.zeros(2, 3, 4, 5), (1, 1), mode="reflect")
    with pytest.raises(TypeError, match="ddpc tensor"):
        F.pad(np.zeros(3), (1, 1))
    with pytest.raises(ValueError, match="padding must be"):
        nn.ZeroPad2d((1, 2, 3))


# ---- activations -------------------------------------------------------------------------

def test_prelu_learns_one_slope_per_channel():
    x = _x(2, 3, 4)
    m = nn.PReLU(3, init=0.1).double()
    with ddpc.no_grad():
        m.weight.copy_(ddpc.tensor([0.1, -0.5, 2.0], dtype=ddpc.float64))
    w = np.array([0.1, -0.5, 2.0]).reshape(3, 1)

    def ref(v, w=w):
        return np.where(v > 0, v, w * v)
    _check(m, ref, x)
    g = _x(2, 3, 4, seed=7)
    np.testing.assert_allclose(m.weight.grad.numpy(), (np.minimum(x, 0) * g).sum((0, 2)), rtol=1e-12)
    _check(lambda t, a: F.prelu(t, a), lambda v, a: np.where(v > 0, v, a * v), _x(5), np.array([0.25]))
    t = ddpc.zeros(1, 3, requires_grad=True, dtype=ddpc.float64)
    m(t).sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), [[0.1, -0.5, 2.0]])  # at zero the slope applies, as in PyTorch


def test_prelu_defaults_and_refusals():
    m = nn.PReLU()
    assert m.weight.shape == (1,) and m.weight.item() == 0.25 and repr(m) == "PReLU(num_parameters=1)"
    with pytest.raises(ValueError, match="channel"):
        nn.PReLU(3)(ddpc.zeros(2, 4))
    with pytest.raises(ValueError, match="channel"):
        F.prelu(ddpc.zeros(3), ddpc.ones(3))


def test_threshold_replaces_what_is_not_above():
    x = _x(3, 4)
    ref = lambda v: np.where(v > 0.5, v, -7.0)  # noqa: E731
    _check(nn.Threshold(0.5, -7.0), ref, x)
    x[0, 0] = 0.5
    t = ddpc.tensor(x)
    assert nn.Threshold(0.5, -7.0, inplace=True)(t) is t
    np.testing.assert_array_equal(t.numpy(), ref(x))
    assert repr(nn.Threshold(0.1, 20)) == "Threshold(threshold=0.1, value=20)"


# ---- channel dropout ---------------------------------------------------------------------

@pytest.mark.parametrize("layer, shape, kept", [
    (nn.Dropout1d, (6, 5, 7), 2), (nn.Dropout1d, (40, 7), 1), (nn.Dropout2d, (6, 5, 3, 4), 2),
])
def test_channel_dropout_zeroes_whole_channels(layer, shape, kept):
    x = _x(*shape) + 10.0
    m = layer(p=0.4)
    t = ddpc.tensor(x, requires_grad=True)
    out = m(t)
    ratio = out.detach().numpy() / x
    per_channel = ratio.reshape(shape[:kept] + (-1,))
    assert np.allclose(per_channel, per_channel[..., :1])  # one factor per channel
    assert set(np.round(np.unique(per_channel), 12)) <= {0.0, round(1 / 0.6, 12)}
    assert 0 < (per_channel[..., 0] == 0).mean() < 1
    out.backward(ddpc.ones(*shape))
    np.testing.assert_allclose(t.grad.numpy(), ratio, rtol=1e-12)
    m.eval()
    assert m(t) is t


def test_channel_dropout_refusals_and_edges():
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout2d(1.5)
    with pytest.raises(ValueError, match="between 0 and 1"):
        F.dropout1d(ddpc.zeros(2, 3), p=-0.1)
    with pytest.raises(ValueError, match="2 or 3-d"):
        F.dropout1d(ddpc.zeros(2, 3, 4, 5))
    with pytest.warns(UserWarning, match="2-D input to dropout2d"):  # as PyTorch: single elements
        dropped = F.dropout2d(ddpc.ones(200, 50), p=0.5)
    assert 0.3 < float((dropped == 0).float().mean()) < 0.7 and set(dropped.unique().tolist()) <= {0.0, 2.0}
    with pytest.warns(UserWarning, match="3D input to dropout2d"):
        F.dropout2d(ddpc.ones(2, 3, 4))
    assert F.dropout2d(ddpc.ones(2, 3, 4, 4), p=1.0).numpy().sum() == 0
    x = ddpc.ones(2, 3, 4)
    assert F.dropout1d(x, p=0.0) is x


# ---- distances ---------------------------------------------------------------------------

def _np_cosine(a, b, dim=1, eps=1e-8):
    a, b = np.broadcast_arrays(a, b)
    na = np.maximum(np.sqrt((a * a).sum(dim, keepdims=True)), eps)
    nb = np.maximum(np.sqrt((b * b).sum(dim, keepdims=True)), eps)
    return (a / na * b / nb).sum(dim)


@pytest.mark.parametrize("s1, s2, dim", [((4, 5), (4, 5), 1), ((3, 4, 2), (1, 4, 2), 1), ((2, 6), (6,), -1),
                                         ((3, 1), (3, 4), 1)])
def test_cosine_similarity(s1, s2, dim):
    _check(nn.CosineSimilarity(dim), lambda a, b: _np_cosine(a, b, dim), _x(*s1), _x(*s2, seed=1))


@pytest.mark.parametrize("p", [2.0, 1.0, 3.0, float("inf")])
@pytest.mark.parametrize("keepdim", [False, True])
def test_pairwise_distance(p, keepdim):
    def ref(a, b):
        d = np.abs(a - b + 1e-6)
        out = d.max(-1) if p == float("inf") else (d ** p).sum(-1) ** (1 / p)
        return out[..., None] if keepdim else out
    _check(nn.PairwiseDistance(p, keepdim=keepdim), ref, _x(4, 5), _x(4, 5, seed=1), rtol=1e-4)


# ---- upsampling --------------------------------------------------------------------------

def _np_nearest(x, out, scales, exact=False):
    """PyTorch's host rule: source min(floor(i * scale), n - 1), or
    min(floor((i + 0.5) * scale), n - 1) when ``exact``, scale in float32;
    but 'nearest' on 4-d input reads i in a kept dim and i // 2 in a doubled one."""
    for d, (o, s) in enumerate(zip(out, scales)):
        n = x.shape[2 + d]
        if x.ndim == 4 and not exact and o in (n, 2 * n):
            x = np.take(x, np.arange(o) // (o // n), axis=2 + d)
            continue
        step = np.float32(1.0 / s) if s else np.float32(n) / np.float32(o)
        at = ((np.arange(o) + 0.5) * np.float64(step)).astype(np.float32) if exact else \
            np.arange(o, dtype=np.float32) * step
        x = np.take(x, np.minimum(np.floor(at).astype(np.int64), n - 1), axis=2 + d)
    return x


def _np_linear(x, out, scales, align_corners):
    """Each output element of each dim between its source position's two
    neighbours, weighed by distance; a dim that keeps its size is copied."""
    for d, (o, s) in enumerate(zip(out, scales)):
        n = x.shape[2 + d]
        if o == n:
            continue
        rows = []
        for i in range(o):
            if align_corners:
                at = i * (n - 1) / (o - 1) if o > 1 else 0.0
            else:
                at = max((i + 0.5) * (1 / s if s else n / o) - 0.5, 0.0)
            lo = min(int(np.floor(at)), n - 1)
            frac = at - lo
            rows.append(np.take(x, lo, axis=2 + d) * (1 - frac) + np.take(x, min(lo + 1, n - 1), axis=2 + d) * frac)
        x = np.stack(rows, axis=2 + d)
    return x


@pytest.mark.parametrize("shape, kwargs, out, scales", [
    ((2, 3, 5), {"scale_factor": 2}, (10,), (2.0,)),
    ((2, 3, 5), {"scale_factor": 1.7}, (8,), (1.7,)),
    ((2, 3, 5), {"scale_factor": 2.1}, (10,), (2.1,)),  # scale 1 / 2.1, not in / out
    ((2, 3, 7), {"size": 3}, (3,), (None,)),
    ((2, 3, 4, 5), {"scale_factor": (2, 3)}, (8, 15), (2.0, 3.0)),
    ((2, 3, 4, 5), {"size": (6, 4)}, (6, 4), (None, None)),
    ((1, 2, 3, 3), {"scale_factor": 0.5}, (1, 1), (0.5, 0.5)),
    ((1, 2, 5, 3), {"scale_factor": 1.5, "recompute_scale_factor": True}, (7, 4), (None, None)),
    ((1, 2, 2), {"scale_factor": 1.3}, (2,), (1.3,)),  # the size is kept, yet element 1 reads element 0
    ((1, 2, 3, 2), {"scale_factor": 1.33}, (3, 2), (1.33, 1.33)),  # 4-d 'nearest' copies a kept size
    ((1, 2, 3, 10), {"scale_factor": (1.6, 2.05)}, (4, 20), (1.6, 2.05)),  # and reads i // 2 in a doubled one
    ((1, 2, 2, 3, 4), {"scale_factor": (2, 1.5, 0.5)}, (4, 4, 2), (2.0, 1.5, 0.5)),
    ((1, 2, 3, 2, 4), {"size": (5, 2, 3)}, (5, 2, 3), (None, None, None)),
])
@pytest.mark.parametrize("mode", ["nearest", "nearest-exact"])
def test_nearest_upsample(shape, kwargs, out, scales, mode):
    ref = lambda x: _np_nearest(x, out, scales, mode == "nearest-exact")  # noqa: E731
    _check(nn.Upsample(mode=mode, **kwargs), ref, _x(*shape))
    _check(lambda t: F.interpolate(t, mode=mode, **kwargs), ref, _x(*shape))
    assert ref(_x(*shape)).shape[2:] == out


def test_nearest_upsample_of_4d_input_copies_kept_and_halves_doubled_dims():
    # PyTorch's values: its 4-d kernel does not scale a dim whose size is kept or doubled
    x = ddpc.arange(3.0).reshape(1, 1, 3, 1)
    assert F.interpolate(x, scale_factor=1.33).flatten().tolist() == [0.0, 1.0, 2.0]
    assert F.interpolate(x.reshape(1, 1, 1, 3), scale_factor=(1, 2.05)).flatten().tolist() == [0, 0, 1, 1, 2, 2]
    assert F.interpolate(x.reshape(1, 1, 3), scale_factor=1.33).flatten().tolist() == [0.0, 0.0, 1.0]  # 3-d scales
    x = ddpc.arange(12.0).reshape(1, 1, 3, 4).requires_grad_()
    F.interpolate(x, scale_factor=1.33).sum().backward()
    assert x.grad[0, 0, :, 0].tolist() == [2.0, 2.0, 2.0]  # rows kept, columns 0, 0, 1, 2, 3
    assert x.grad[0, 0, 0].tolist() == [2.0, 1.0, 1.0, 1.0]


@pytest.mark.parametrize("shape, kwargs, out, scales", [
    ((2, 3, 5), {"scale_factor": 2}, (10,), (2.0,)),
    ((2, 3, 5), {"scale_factor": 1.7}, (8,), (1.7,)),
    ((2, 3, 9), {"scale_factor": 0.4}, (3,), (0.4,)),
    ((2, 3, 7), {"size": 3}, (3,), (None,)),
    ((1, 2, 4), {"size": 11}, (11,), (None,)),
    ((1, 2, 4), {"size": 1}, (1,), (None,)),
    ((1, 2, 1), {"size": 4}, (4,), (None,)),
    ((2, 3, 4, 5), {"scale_factor": (2, 3)}, (8, 15), (2.0, 3.0)),
    ((2, 3, 4, 5), {"size": (6, 2)}, (6, 2), (None, None)),
    ((1, 2, 6, 5), {"scale_factor": 0.5}, (3, 2), (0.5, 0.5)),
    ((1, 2, 5, 3), {"scale_factor": 1.5, "recompute_scale_factor": True}, (7, 4), (None, None)),
    ((1, 2, 2, 3), {"scale_factor": (1.3, 2)}, (2, 6), (1.3, 2.0)),  # a kept size is a copy
    ((1, 2, 2, 3, 4), {"scale_factor": (2, 1.5, 0.5)}, (4, 4, 2), (2.0, 1.5, 0.5)),
    ((1, 2, 3, 2, 4), {"size": (5, 2, 3)}, (5, 2, 3), (None, None, None)),  # a kept size is a copy
])
@pytest.mark.parametrize("align_corners", [None, False, True])
def test_linear_bilinear_and_trilinear_upsample(shape, kwargs, out, scales, align_corners):
    mode = {3: "linear", 4: "bilinear", 5: "trilinear"}[len(shape)]
    ref = lambda x: _np_linear(x, out, scales, bool(align_corners))  # noqa: E731
    _check(nn.Upsample(mode=mode, align_corners=align_corners, **kwargs), ref, _x(*shape))
    _check(lambda t: F.interpolate(t, mode=mode, align_corners=align_corners, **kwargs), ref, _x(*shape))
    assert ref(_x(*shape)).shape[2:] == out


def _np_bicubic(x, out, scales, align_corners):
    """Each output element the sum of its 4 x 4 neighbours (clamped into the
    input) weighed by Keys' cubic convolution with A = -0.75, from source
    positions not clamped; an unchanged size is a copy."""
    if tuple(out) == x.shape[2:]:
        return x
    a = -0.75

    def weights(t):
        near = lambda v: ((a + 2) * v - (a + 3)) * v * v + 1  # noqa: E731
        far = lambda v: ((a * v - 5 * a) * v + 8 * a) * v - 4 * a  # noqa: E731
        return [far(t + 1), near(t), near(1 - t), far(2 - t)]

    def source(i, n, o, s):
        if align_corners:
            return i * (n - 1) / (o - 1) if o > 1 else 0.0
        return (i + 0.5) * (1 / s if s else n / o) - 0.5

    (h, w), y = x.shape[2:], np.zeros(x.shape[:2] + tuple(out))
    for i in range(out[0]):
        sy = source(i, h, out[0], scales[0])
        for j in range(out[1]):
            sx = source(j, w, out[1], scales[1])
            for p, wy in enumerate(weights(sy - np.floor(sy))):
                for q, wx in enumerate(weights(sx - np.floor(sx))):
                    r = min(max(int(np.floor(sy)) - 1 + p, 0), h - 1)
                    c = min(max(int(np.floor(sx)) - 1 + q, 0), w - 1)
                    y[:, :, i, j] += wy * wx * x[:, :, r, c]
    return y


@pytest.mark.parametrize("shape, kwargs, out, scales", [
    ((2, 3, 4, 5), {"size": (7, 3)}, (7, 3), (None, None)),
    ((1, 2, 5, 4), {"scale_factor": 2}, (10, 8), (2.0, 2.0)),
    ((1, 2, 8, 9), {"scale_factor": 0.4}, (3, 3), (0.4, 0.4)),
    ((1, 2, 3, 3), {"scale_factor": (1.3, 2)}, (3, 6), (1.3, 2.0)),  # a kept size is resampled by its scale
    ((1, 1, 4, 5), {"size": (4, 5)}, (4, 5), (None, None)),
])
@pytest.mark.parametrize("align_corners", [None, False, True])
def test_bicubic_upsample(shape, kwargs, out, scales, align_corners):
    ref = lambda x: _np_bicubic(x, out, scales, bool(align_corners))  # noqa: E731
    _check(nn.Upsample(mode="bicubic", align_corners=align_corners, **kwargs), ref, _x(*shape))
    _check(lambda t: F.interpolate(t, mode="bicubic", align_corners=align_corners, **kwargs), ref, _x(*shape))
    assert ref(_x(*shape)).shape[2:] == out


def _np_area(x, out):
    """The mean over PyTorch's adaptive windows [floor(i * n / o), ceil((i + 1) * n / o)) of each dim."""
    for d, o in enumerate(out):
        n = x.shape[2 + d]
        x = np.stack([np.take(x, range(i * n // o, -(-(i + 1) * n // o)), axis=2 + d).mean(2 + d) for i in range(o)],
                     axis=2 + d)
    return x


@pytest.mark.parametrize("shape, kwargs, out", [
    ((2, 3, 7), {"size": 3}, (3,)),
    ((2, 3, 7, 9), {"scale_factor": 0.5}, (3, 4)),
    ((1, 2, 3, 4), {"size": (5, 7)}, (5, 7)),
    ((1, 2, 4, 5, 6), {"size": (2, 3, 4)}, (2, 3, 4)),
    ((1, 2, 5, 4, 3), {"scale_factor": (0.5, 1.5, 1)}, (2, 6, 3)),
])
def test_area_interpolation_is_the_adaptive_average_pool(shape, kwargs, out):
    ref = lambda x: _np_area(x, out)  # noqa: E731
    _check(nn.Upsample(mode="area", **kwargs), ref, _x(*shape))
    _check(lambda t: F.interpolate(t, mode="area", **kwargs), ref, _x(*shape))
    assert ref(_x(*shape)).shape[2:] == out


def test_linear_upsample_known_values_and_fixed_mode_layers():
    x = ddpc.tensor([[[0.0, 1.0]]])
    np.testing.assert_allclose(F.interpolate(x, scale_factor=2, mode="linear").numpy(), [[[0, 0.25, 0.75, 1]]])
    np.testing.assert_allclose(F.interpolate(x, size=4, mode="linear", align_corners=True).numpy(),
                               [[[0, 1 / 3, 2 / 3, 1]]], rtol=1e-6)
    img = _x(2, 3, 4, 5)
    want = F.interpolate(ddpc.tensor(img), scale_factor=1.5, mode="bilinear", align_corners=True).numpy()
    np.testing.assert_array_equal(nn.UpsamplingBilinear2d(scale_factor=1.5)(ddpc.tensor(img)).numpy(), want)
    want = F.interpolate(ddpc.tensor(img), size=(3, 7)).numpy()
    np.testing.assert_array_equal(nn.UpsamplingNearest2d(size=(3, 7))(ddpc.tensor(img)).numpy(), want)
    half = F.interpolate(ddpc.tensor(img).half(), scale_factor=2, mode="bilinear")
    assert half.dtype == ddpc.float16 and half.shape == (2, 3, 8, 10)
    assert repr(nn.UpsamplingBilinear2d(scale_factor=2)) == "UpsamplingBilinear2d(scale_factor=2.0, mode='bilinear')"
    assert repr(nn.UpsamplingNearest2d(size=3)) == "UpsamplingNearest2d(size=3, mode='nearest')"


def test_interpolate_refusals():
    x = ddpc.zeros(1, 2, 3)
    with pytest.raises(ValueError, match="only one of"):
        F.interpolate(x, size=4, scale_factor=2)
    with pytest.raises(ValueError, match="either size or scale_factor"):
        F.interpolate(x)
    with pytest.raises(NotImplementedError, match="'trilinear' and 'area', got mode='cubic'"):
        F.interpolate(ddpc.zeros(1, 2, 3, 3), scale_factor=2, mode="cubic")
    with pytest.raises(NotImplementedError, match="trilinear mode needs 5D"):
        F.interpolate(ddpc.zeros(1, 2, 3, 3), scale_factor=2, mode="trilinear")
    with pytest.raises(NotImplementedError, match="bicubic mode needs 4D"):
        F.interpolate(x, scale_factor=2, mode="bicubic")
    with pytest.raises(ValueError, match="align_corners"):
        F.interpolate(x, scale_factor=2, mode="area", align_corners=False)
    with pytest.raises(NotImplementedError, match="5-d"):
        F.interpolate(ddpc.zeros(1, 2, 3, 3, 3, 3), size=2)
    with pytest.raises(NotImplementedError, match="bilinear mode needs 4D"):
        F.interpolate(x, scale_factor=2, mode="bilinear")
    with pytest.raises(NotImplementedError, match="linear mode needs 3D"):
        F.interpolate(ddpc.zeros(1, 2, 3, 3), scale_factor=2, mode="linear")
    with pytest.raises(NotImplementedError, match="antialias"):
        F.interpolate(ddpc.zeros(1, 2, 3, 3), scale_factor=2, mode="bilinear", antialias=True)
    with pytest.raises(TypeError, match="floating"):
        F.interpolate(ddpc.zeros(1, 2, 3, dtype=ddpc.int64), scale_factor=2, mode="linear")
    for mode in ("nearest", "nearest-exact"):
        with pytest.raises(ValueError, match="align_corners"):
            F.interpolate(x, scale_factor=2, mode=mode, align_corners=True)
    with pytest.raises(ValueError, match="spatial dimensions"):
        F.interpolate(x, size=(2, 2))
    with pytest.raises(NotImplementedError, match="3-d"):
        F.interpolate(ddpc.zeros(2, 3), size=4)
    with pytest.raises(ValueError, match="positive"):
        F.interpolate(x, scale_factor=-1)
    assert repr(nn.Upsample(scale_factor=2)) == "Upsample(scale_factor=2.0, mode='nearest')"
    assert repr(nn.Upsample(size=(3, 4))) == "Upsample(size=(3, 4), mode='nearest')"


@pytest.mark.gpu
@pytest.mark.parametrize("mode, shape, kwargs", [
    ("nearest", (2, 3, 4, 5, 3), {"scale_factor": (2, 1.5, 0.7)}),
    ("nearest-exact", (2, 3, 7), {"size": 11}),
    ("linear", (2, 3, 7), {"scale_factor": 1.7, "align_corners": True}),
    ("bilinear", (2, 3, 4, 5), {"size": (7, 3)}),
    ("bicubic", (2, 3, 4, 5), {"scale_factor": 2, "align_corners": False}),
    ("bicubic", (2, 3, 6, 5), {"size": (4, 9), "align_corners": True}),
    ("trilinear", (1, 2, 3, 4, 5), {"size": (5, 2, 7)}),
    ("area", (2, 3, 7, 9), {"scale_factor": 0.5}),
])
def test_interpolate_on_cuda_matches_the_host(mode, shape, kwargs):
    x, g = _x(*shape), None
    results = []
    for device in ("cpu", "cuda"):
        t = ddpc.tensor(x, device=device, requires_grad=True)
        out = F.interpolate(t, mode=mode, **kwargs)
        g = _x(*out.shape, seed=3) if g is None else g
        out.backward(ddpc.tensor(g, device=device))
        results.append((out.detach().cpu().numpy(), t.grad.cpu().numpy()))
    for a, b in zip(*results):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-12)
