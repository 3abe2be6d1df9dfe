"""Volumes: conv3d, conv_transpose3d, max_pool3d, avg_pool3d, the adaptive
average pools in 3-d and the adaptive max pools and max unpooling in 1 to 3
dims, against
numpy references written from PyTorch's documented formulas for any number
of spatial dims (forward, gradients and the max pools' flattened indices),
central-difference gradients, the modules, the errors and (marked gpu) CUDA
against the host."""

import itertools
import math

import numpy as np
import pytest

import ddpc
import ddpc.nn.functional as F
from ddpc import nn
from numeric import numeric_grad
from test_conv import assert_cuda_matches_the_host, pool_out_size, run


def _tuple(v, nd):
    return (v,) * nd if isinstance(v, int) else tuple(v)


# ---- numpy references over any number of spatial dims ------------------------------------

def ref_conv(x, w, b, stride, pads, dilation, groups, g_out):
    """y = conv(x, w) + b and its gradients (gx, gw, gb) for the output gradient
    g_out: one strided slice of the padded input per kernel tap."""
    nd = x.ndim - 2
    xp = np.pad(x, ((0, 0), (0, 0)) + tuple(pads))
    o, cg = w.shape[:2]
    og = o // groups
    out = tuple((xp.shape[2 + i] - dilation[i] * (w.shape[2 + i] - 1) - 1) // stride[i] + 1 for i in range(nd))
    y, gxp, gw = np.zeros((x.shape[0], o) + out), np.zeros(xp.shape), np.zeros(w.shape)
    for g in range(groups):
        cs, os_ = slice(g * cg, (g + 1) * cg), slice(g * og, (g + 1) * og)
        for tap in itertools.product(*(range(k) for k in w.shape[2:])):
            sl = tuple(slice(t * d, t * d + s * (n - 1) + 1, s) for t, d, s, n in zip(tap, dilation, stride, out))
            patch = xp[(slice(None), cs) + sl]
            wt = w[(os_, slice(None)) + tap]
            y[:, os_] += np.einsum("nc...,oc->no...", patch, wt)
            gxp[(slice(None), cs) + sl] += np.einsum("no...,oc->nc...", g_out[:, os_], wt)
            summed = (0,) + tuple(range(2, 2 + nd))
            gw[(os_, slice(None)) + tap] = np.tensordot(g_out[:, os_], patch, (summed, summed))
    if b is not None:
        y += b.reshape((1, -1) + (1,) * nd)
    gx = gxp[(slice(None), slice(None)) + tuple(slice(p[0], p[0] + n) for p, n in zip(pads, x.shape[2:]))]
    return y, gx, gw, g_out.sum((0,) + tuple(range(2, 2 + nd)))


def _window_taps(o, k, s, p, d, size):
    """The input positions along one dim that output o's window reads."""
    return [o * s - p + t * d for t in range(k) if 0 <= o * s - p + t * d < size]


def ref_max_pool(x, windows, g_out):
    """Max over each window (the first largest), its flattened index in its
    volume, and the gradient routed there; ``windows(dim, o)`` lists the
    input positions that output o reads along spatial dim ``dim``."""
    lead, spatial = x.shape[:-len(g_out.shape[2:])], x.shape[-len(g_out.shape[2:]):]
    out = g_out.shape[2:]
    flat = x.reshape(-1, math.prod(spatial))
    y, idx = np.zeros((flat.shape[0],) + out), np.zeros((flat.shape[0],) + out, dtype=np.int64)
    gx = np.zeros(flat.shape)
    g = g_out.reshape((-1,) + out)
    for o in np.ndindex(*out):
        cells = [np.ravel_multi_index(c, spatial) for c in itertools.product(*(windows(i, v) for i, v in enumerate(o)))]
        vals = flat[:, cells]
        best = np.asarray(cells)[vals.argmax(-1)]
        y[(slice(None),) + o], idx[(slice(None),) + o] = vals.max(-1), best
        np.add.at(gx, (np.arange(flat.shape[0]), best), g[(slice(None),) + o])
    shape = lead + out
    return y.reshape(shape), idx.reshape(shape), gx.reshape(x.shape)


def ref_avg_pool(x, windows, g_out):
    """Sum over each window divided by what ``windows(dim, o)`` -> (lo, hi,
    factor) multiplies up, and the gradient spread evenly over it."""
    nd = g_out.ndim - 2
    y, gx = np.zeros(g_out.shape), np.zeros(x.shape)
    for o in np.ndindex(*g_out.shape[2:]):
        spans = [windows(i, v) for i, v in enumerate(o)]
        box = (slice(None), slice(None)) + tuple(slice(lo, hi) for lo, hi, _ in spans)
        div = math.prod(f for _, _, f in spans)
        y[(slice(None), slice(None)) + o] = x[box].sum(tuple(range(2, 2 + nd))) / div
        gx[box] += g_out[(slice(None), slice(None)) + o].reshape(x.shape[:2] + (1,) * nd) / div
    return y, gx


def adaptive_window(o, size, out):
    return o * size // out, -(-(o + 1) * size // out)


# ---- convolution ---------------------------------------------------------------------------

# (N, C, D, H, W), (O, KD, KH, KW), stride, padding, dilation, groups
CONV3D = [
    ((2, 3, 4, 5, 6), (4, 2, 3, 2), 1, 0, 1, 1),
    ((1, 4, 5, 6, 5), (6, 3, 2, 3), (2, 1, 2), (1, 0, 2), (1, 2, 1), 2),
    ((2, 4, 4, 5, 4), (4, 3, 3, 3), 1, "same", (2, 1, 1), 4),  # depthwise, 'same' with odd padding on one side
    ((2, 3, 3, 4, 5), (5, 3, 1, 2), 1, "valid", 1, 1),
    ((3, 4, 3, 3, 4), (6, 1, 1, 1), 1, 0, 1, 2),  # pointwise: no im2col
    ((1, 2, 3, 3, 3), (3, 3, 3, 3), 4, 1, 1, 1),  # stride larger than the input
]


def _pads(padding, kernel, dilation, nd):
    dilation = _tuple(dilation, nd)
    if padding == "valid":
        return ((0, 0),) * nd
    if padding == "same":
        return tuple((d * (k - 1) // 2, d * (k - 1) - d * (k - 1) // 2) for k, d in zip(kernel, dilation))
    return tuple((p, p) for p in _tuple(padding, nd))


@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups", CONV3D)
@pytest.mark.parametrize("bias", [True, False])
def test_conv3d_matches_the_reference_forward_and_backward(xs, ws, stride, padding, dilation, groups, bias):
    rng = np.random.default_rng(0)
    x, b = rng.standard_normal(xs), rng.standard_normal(ws[0])
    w = rng.standard_normal((ws[0], xs[1] // groups) + ws[1:])
    arrays = [x, w, b] if bias else [x, w]
    out, grads, g = run(lambda *t: F.conv3d(t[0], t[1], t[2] if bias else None, stride, padding, dilation, groups),
                        arrays)
    want = ref_conv(x, w, b if bias else None, _tuple(stride, 3), _pads(padding, ws[1:], dilation, 3),
                    _tuple(dilation, 3), groups, g)
    np.testing.assert_allclose(out, want[0], rtol=1e-10, atol=1e-10)
    for got, ref in zip(grads, want[1:]):
        np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-10)


def test_conv3d_gradients_pass_a_central_difference_check():
    rng = np.random.default_rng(1)
    x, w, b = rng.standard_normal((2, 2, 3, 4, 3)), rng.standard_normal((2, 1, 2, 2, 2)), rng.standard_normal(2)
    args = dict(stride=(1, 2, 1), padding=1, dilation=(1, 1, 2), groups=2)
    out, grads, g = run(lambda x, w, b: F.conv3d(x, w, b, **args), [x, w, b])

    def loss(k, v):
        vals = [x, w, b]
        vals[k] = v
        return float((F.conv3d(*(ddpc.tensor(a) for a in vals), **args).numpy() * g).sum())
    for k, got in enumerate(grads):
        np.testing.assert_allclose(got, numeric_grad(lambda v: loss(k, v), [x, w, b][k]), rtol=1e-6, atol=1e-7)


def test_unbatched_volumes_are_a_batch_of_one():
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal((3, 4, 5, 6)), rng.standard_normal((2, 3, 3, 3, 3))
    one = F.conv3d(ddpc.tensor(x), ddpc.tensor(w), padding=1)
    assert one.shape == (2, 4, 5, 6)
    np.testing.assert_array_equal(one.numpy(), F.conv3d(ddpc.tensor(x[None]), ddpc.tensor(w), padding=1).numpy()[0])
    assert F.max_pool3d(ddpc.tensor(x), 2).shape == (3, 2, 2, 3)
    assert F.avg_pool3d(ddpc.tensor(x), 2, 1).shape == (3, 3, 4, 5)
    assert F.adaptive_avg_pool3d(ddpc.tensor(x), (1, None, 2)).shape == (3, 1, 5, 2)
    assert F.adaptive_max_pool3d(ddpc.tensor(x), 2).shape == (3, 2, 2, 2)


@pytest.mark.parametrize("stride,padding,output_padding,dilation,groups", [
    (1, 0, 0, 1, 1), (2, 1, 1, 1, 2), ((2, 1, 3), (0, 1, 2), (1, 0, 2), (1, 2, 1), 1)])
def test_conv_transpose3d_is_the_adjoint_of_conv3d(stride, padding, output_padding, dilation, groups):
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 6 // groups, 2, 3, 2))
    x = rng.standard_normal((2, 4, 3, 4, 3))
    t = F.conv_transpose3d(ddpc.tensor(x), ddpc.tensor(w), None, stride, padding, output_padding, groups, dilation)
    y = rng.standard_normal(t.shape)
    conv = F.conv3d(ddpc.tensor(y), ddpc.tensor(w), None, stride, padding, dilation, groups).numpy()
    conv = conv[:, :, :x.shape[2], :x.shape[3], :x.shape[4]]  # output_padding may leave conv one longer
    np.testing.assert_allclose((conv * x).sum(), (y * t.numpy()).sum(), rtol=1e-12)
    b = rng.standard_normal(6)
    out, grads, g = run(lambda x, w, b: F.conv_transpose3d(x, w, b, stride, padding, output_padding, groups,
                                                           dilation), [x, w, b])

    def loss(k, v):
        vals = [x, w, b]
        vals[k] = v
        o = F.conv_transpose3d(*(ddpc.tensor(a) for a in vals), stride, padding, output_padding, groups, dilation)
        return float((o.numpy() * g).sum())
    for k, got in enumerate(grads):
        np.testing.assert_allclose(got, numeric_grad(lambda v: loss(k, v), [x, w, b][k]), rtol=1e-6, atol=1e-7)


# ---- pooling -------------------------------------------------------------------------------

# (D, H, W), kernel, stride, padding, dilation, ceil_mode
MAX3D = [
    ((4, 5, 6), 2, None, 0, 1, False),
    ((5, 6, 7), 3, 2, 1, 1, True),
    ((4, 7, 5), (2, 3, 1), (1, 2, 1), (1, 1, 0), (2, 1, 1), False),
    ((6, 5, 5), (3, 2, 3), (3, 2, 2), (1, 1, 1), (2, 1, 1), True),
]


@pytest.mark.parametrize("dhw,k,s,p,d,ceil_mode", MAX3D)
def test_max_pool3d_matches_the_reference(dhw, k, s, p, d, ceil_mode):
    x = np.random.default_rng(4).standard_normal((2, 3) + dhw)
    x[0, 0, 0, 0, :2] = 5.0  # a tie: the first one wins
    out, (gx,), g = run(lambda x: F.max_pool3d(x, k, s, p, d, ceil_mode), [x])
    k3, s3, p3, d3 = _tuple(k, 3), _tuple(s if s is not None else k, 3), _tuple(p, 3), _tuple(d, 3)
    assert out.shape[2:] == tuple(pool_out_size(n, *a, ceil_mode) for n, *a in zip(dhw, k3, s3, p3, d3))
    y, idx, rg = ref_max_pool(x, lambda i, o: _window_taps(o, k3[i], s3[i], p3[i], d3[i], dhw[i]), g)
    np.testing.assert_array_equal(out, y)
    np.testing.assert_allclose(gx, rg, rtol=1e-12, atol=1e-12)
    _, indices = nn.MaxPool3d(k, s, p, d, return_indices=True, ceil_mode=ceil_mode)(ddpc.tensor(x))
    np.testing.assert_array_equal(indices.numpy(), idx)


# (D, H, W), kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
AVG3D = [
    ((4, 5, 6), 2, None, 0, False, True, None),
    ((5, 6, 7), 3, 2, 1, True, True, None),
    ((5, 6, 7), 3, 2, 1, True, False, None),
    ((4, 6, 5), (2, 3, 1), (1, 2, 1), (1, 1, 0), False, False, None),
    ((5, 5, 4), 2, (2, 1, 3), 1, True, True, -3),
]


@pytest.mark.parametrize("dhw,k,s,p,ceil_mode,include,divisor", AVG3D)
def test_avg_pool3d_matches_the_reference(dhw, k, s, p, ceil_mode, include, divisor):
    x = np.random.default_rng(5).standard_normal((2, 3) + dhw)
    out, (gx,), g = run(lambda x: F.avg_pool3d(x, k, s, p, ceil_mode, include, divisor), [x])
    k3, s3, p3 = _tuple(k, 3), _tuple(s if s is not None else k, 3), _tuple(p, 3)

    def window(i, o):
        start = o * s3[i] - p3[i]
        end = min(start + k3[i], dhw[i] + p3[i])
        lo, hi = max(start, 0), min(end, dhw[i])
        return lo, hi, end - start if include else hi - lo
    y, rg = ref_avg_pool(x, window if divisor is None else lambda i, o: window(i, o)[:2] + ((divisor, 1, 1)[i],), g)
    np.testing.assert_allclose(out, y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gx, rg, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("dhw,out", [((5, 7, 9), (2, 3, 4)), ((4, 4, 4), (4, 4, 4)), ((3, 6, 2), (5, 1, 3))])
def test_adaptive_avg_pool3d_uses_floor_and_ceil_windows(dhw, out):
    x = np.random.default_rng(6).standard_normal((2, 3) + dhw)
    y, (gx,), g = run(lambda x: F.adaptive_avg_pool3d(x, out), [x])
    ry, rg = ref_avg_pool(x, lambda i, o: adaptive_window(o, dhw[i], out[i]) + (np.diff(
        adaptive_window(o, dhw[i], out[i]))[0],), g)
    np.testing.assert_allclose(y, ry, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gx, rg, rtol=1e-12, atol=1e-12)
    assert nn.AdaptiveAvgPool3d((None, 2, None))(ddpc.tensor(x)).shape == (2, 3, dhw[0], 2, dhw[2])


@pytest.mark.parametrize("size,out", [((11,), (4,)), ((7, 9), (3, 4)), ((4, 6), (6, 1)), ((5, 7, 6), (2, 3, 4)),
                                      ((3, 3, 3), (3, 3, 3))])
def test_adaptive_max_pools_take_the_windows_of_the_average_ones(size, out):
    nd = len(size)
    x = np.random.default_rng(7).standard_normal((2, 3) + size)
    x[0, 0].reshape(-1)[:2] = 9.0  # a tie in the first window: the first one wins
    fn = getattr(F, f"adaptive_max_pool{nd}d")
    y, (gx,), g = run(lambda x: fn(x, out), [x])
    ry, ridx, rg = ref_max_pool(x, lambda i, o: list(range(*adaptive_window(o, size[i], out[i]))), g)
    np.testing.assert_array_equal(y, ry)
    np.testing.assert_allclose(gx, rg, rtol=1e-12, atol=1e-12)
    values, indices = getattr(nn, f"AdaptiveMaxPool{nd}d")(out, return_indices=True)(ddpc.tensor(x))
    assert indices.dtype is ddpc.int64
    np.testing.assert_array_equal(indices.numpy(), ridx)
    np.testing.assert_array_equal(values.numpy(), ry)


def test_pool_gradients_pass_a_central_difference_check():
    x = np.random.default_rng(8).standard_normal((1, 2, 4, 5, 3))
    for fn in (lambda t: F.avg_pool3d(t, (2, 3, 2), (1, 2, 1), (1, 1, 0), ceil_mode=True, count_include_pad=False),
               lambda t: F.adaptive_avg_pool3d(t, (3, 2, 2)),
               lambda t: F.max_pool3d(t, 2, 1, 1),
               lambda t: F.adaptive_max_pool3d(t, (2, 3, 2))):
        out, (gx,), g = run(fn, [x])
        num = numeric_grad(lambda v: float((fn(ddpc.tensor(v)).numpy() * g).sum()), x)
        np.testing.assert_allclose(gx, num, rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("size,k,s,p,output_size", [((9,), 3, 2, 1, None), ((6, 7), 2, None, 0, (7, 7)),
                                                     ((4, 5, 6), (2, 3, 2), (2, 2, 1), (1, 1, 0), None)])
def test_max_unpool_puts_each_value_at_its_index(size, k, s, p, output_size):
    nd = len(size)
    x = np.random.default_rng(10).standard_normal((2, 3) + size)
    pooled, idx = getattr(F, f"max_pool{nd}d")(ddpc.tensor(x), k, s, p, return_indices=True)
    unpool = getattr(nn, f"MaxUnpool{nd}d")(k, s, p)
    out, (gx,), g = run(lambda t: unpool(t, idx, output_size), [pooled.numpy()])
    k_, s_, p_ = _tuple(k, nd), _tuple(s if s is not None else k, nd), _tuple(p, nd)
    want_size = output_size or tuple((n - 1) * st - 2 * pd + kk for n, kk, st, pd in zip(pooled.shape[2:], k_, s_, p_))
    assert out.shape == (2, 3) + want_size
    want = np.zeros((6, math.prod(want_size)))
    np.put_along_axis(want, idx.numpy().reshape(6, -1), pooled.numpy().reshape(6, -1), 1)
    np.testing.assert_array_equal(out, want.reshape(out.shape))
    np.testing.assert_array_equal(gx, np.take_along_axis(g.reshape(6, -1), idx.numpy().reshape(6, -1), 1)
                                  .reshape(gx.shape))


def test_max_unpool_refuses_what_pytorch_refuses():
    y, i = F.max_pool2d(ddpc.randn(1, 1, 4, 4), 2, return_indices=True)
    with pytest.raises(ValueError, match="Expected shape of indices to be same"):
        F.max_unpool2d(y, i[..., :1], 2)
    with pytest.raises(ValueError, match="dim 0 must be between 2 and 6"):
        F.max_unpool2d(y, i, 2, output_size=(7, 4))
    with pytest.raises(ValueError, match="2 or 4 elements"):
        F.max_unpool2d(y, i, 2, output_size=(4, 4, 4))
    with pytest.raises(TypeError, match="int64"):
        F.max_unpool2d(y, y, 2)
    with pytest.raises(ValueError, match="out of range|outside"):
        F.max_unpool2d(y, i * 100, 2)


# ---- modules and errors --------------------------------------------------------------------

def test_conv3d_module_initialisation_repr_and_padding_modes():
    ddpc.manual_seed(1)
    conv = nn.Conv3d(4, 8, (3, 2, 3), groups=2)
    assert conv.weight.shape == (8, 2, 3, 2, 3) and conv.bias.shape == (8,)
    bound = 1 / math.sqrt(2 * 18)
    w = conv.weight.numpy()
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.9 * bound
    assert np.abs(conv.bias.numpy()).max() <= bound
    assert repr(conv) == "Conv3d(4, 8, kernel_size=(3, 2, 3), stride=(1, 1, 1), groups=2)"
    assert repr(nn.MaxPool3d(2)) == "MaxPool3d(kernel_size=2, stride=2, padding=0, dilation=1, ceil_mode=False)"
    assert repr(nn.AdaptiveMaxPool2d((None, 3))) == "AdaptiveMaxPool2d(output_size=(None, 3))"
    t = nn.ConvTranspose3d(4, 6, 3, stride=2, padding=1, groups=2)
    assert t.weight.shape == (4, 3, 3, 3, 3)
    assert t(ddpc.randn(1, 4, 3, 4, 5), output_size=(6, 8, 10)).shape == (1, 6, 6, 8, 10)
    x = np.random.default_rng(9).standard_normal((2, 2, 3, 4, 5))
    for mode, np_mode in (("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")):
        m = nn.Conv3d(2, 3, 3, padding=(1, 2, 1), padding_mode=mode, dtype=ddpc.float64)
        padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (2, 2), (1, 1)), mode=np_mode)
        want = F.conv3d(ddpc.tensor(padded), m.weight, m.bias).detach().numpy()
        np.testing.assert_allclose(m(ddpc.tensor(x)).detach().numpy(), want, rtol=1e-12)


@pytest.mark.parametrize("fn,exc,match", [
    (lambda: F.conv3d(ddpc.zeros(3, 5, 5), ddpc.zeros(2, 3, 3, 3, 3)), ValueError, "Expected 4D .unbatched. or 5D"),
    (lambda: F.conv3d(ddpc.zeros(1, 3, 5, 5, 5), ddpc.zeros(2, 3, 3, 3)), ValueError, "weight must be 5-d"),
    (lambda: F.conv3d(ddpc.zeros(1, 4, 5, 5, 5), ddpc.zeros(2, 3, 3, 3, 3)), ValueError, "to have 3 channels"),
    (lambda: F.conv3d(ddpc.zeros(1, 3, 2, 5, 5), ddpc.zeros(2, 3, 3, 3, 3)), ValueError, r"\(2 x 5 x 5\)"),
    (lambda: F.conv3d(ddpc.zeros(1, 3, 5, 5, 5), ddpc.zeros(2, 3, 3, 3, 3), stride=(1, 1)), ValueError,
     "tuple of 3 ints"),
    (lambda: F.max_pool3d(ddpc.zeros(1, 5, 5), 2), ValueError, "4-d or 5-d"),
    (lambda: F.max_pool3d(ddpc.zeros(1, 1, 5, 5, 5), 3, padding=2), ValueError, "at most half of kernel size"),
    (lambda: F.avg_pool3d(ddpc.zeros(1, 1, 5, 5, 5), 2, divisor_override=0), ValueError, "non-zero"),
    (lambda: F.adaptive_max_pool2d(ddpc.zeros(1, 2, 3), (1, 2, 3)), ValueError, "pair of ints"),
    (lambda: F.adaptive_max_pool1d(ddpc.zeros(1, 2, 3), -1), ValueError, ">= 0"),
    (lambda: F.adaptive_avg_pool3d(ddpc.zeros(1, 2, 3), 2), ValueError, "4-d or 5-d"),
    (lambda: nn.ConvTranspose3d(3, 4, 3, padding_mode="reflect"), ValueError, "zeros"),
])
def test_bad_arguments_raise_clear_errors(fn, exc, match):
    with pytest.raises(exc, match=match):
        fn()


# ---- CUDA against the host -----------------------------------------------------------------

GPU_CASES = [
    ("conv3d", lambda x, w, b: F.conv3d(x, w, b, stride=(1, 2, 1), padding=1, dilation=(2, 1, 1), groups=2),
     [(2, 4, 6, 7, 5), (6, 2, 3, 3, 2), (6,)]),
    ("conv3d_pointwise", lambda x, w: F.conv3d(x, w), [(2, 4, 3, 4, 5), (3, 4, 1, 1, 1)]),
    ("conv_transpose3d", lambda x, w, b: F.conv_transpose3d(x, w, b, stride=2, padding=1, output_padding=1,
                                                            groups=2), [(2, 4, 3, 4, 3), (4, 3, 3, 2, 3), (6,)]),
    ("max_pool3d", lambda x: F.max_pool3d(x, 3, 2, 1, dilation=(1, 2, 1), ceil_mode=True), [(2, 3, 7, 9, 8)]),
    ("avg_pool3d", lambda x: F.avg_pool3d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), [(2, 3, 7, 8, 6)]),
    ("avg_pool3d_divisor", lambda x: F.avg_pool3d(x, (2, 3, 2), 1, 1, divisor_override=5), [(2, 3, 4, 6, 5)]),
    ("adaptive_avg_pool3d", lambda x: F.adaptive_avg_pool3d(x, (3, 4, 2)), [(2, 3, 7, 9, 5)]),
    ("adaptive_max_pool1d", lambda x: F.adaptive_max_pool1d(x, 4), [(2, 3, 11)]),
    ("adaptive_max_pool2d", lambda x: F.adaptive_max_pool2d(x, (3, 5)), [(2, 3, 7, 9)]),
    ("adaptive_max_pool3d", lambda x: F.adaptive_max_pool3d(x, (2, 3, 4)), [(2, 3, 5, 7, 6)]),
    ("max_unpool3d", lambda x: F.max_unpool3d(*F.max_pool3d(x, 2, 1, 1, return_indices=True), 2, 1, 1),
     [(2, 3, 4, 5, 4)]),
]


@pytest.mark.gpu
@pytest.mark.parametrize("name,fn,shapes", GPU_CASES, ids=[c[0] for c in GPU_CASES])
def test_cuda_matches_the_host(name, fn, shapes):
    assert_cuda_matches_the_host(fn, shapes)


@pytest.mark.gpu
def test_pool_indices_on_cuda_match_the_host():
    x = np.random.default_rng(13).standard_normal((2, 3, 5, 8, 9)).astype(np.float32)
    x[0, 0, 1, 1, 1] = np.nan
    for fn in (lambda t: F.max_pool3d(t, 3, 2, 1, return_indices=True),
               lambda t: F.adaptive_max_pool3d(t, (2, 3, 4), return_indices=True)):
        _, ic = fn(ddpc.tensor(x))
        _, ig = fn(ddpc.tensor(x, device="cuda"))
        np.testing.assert_array_equal(ig.cpu().numpy(), ic.numpy())
