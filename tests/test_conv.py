"""Convolution and pooling: conv1d/conv2d and the max, average and adaptive
pools against numpy references written from PyTorch's documented formulas
(forward and gradients), the modules' defaults, the errors, a small CNN
trained with SGD and under DDP, and (marked gpu) CUDA against the host."""

import math

import numpy as np
import pytest

import ddpc
import ddpc.nn.functional as F
from ddpc import _C, nn
from numeric import numeric_grad


# ---- numpy references ------------------------------------------------------------------

def ref_conv2d(x, w, b, stride, pads, dilation, groups, g_out=None):
    """y = conv(x, w) + b by slicing the padded input once per kernel tap;
    with g_out, also (gx, gw, gb): the adjoint of the same slices."""
    (sh, sw), (dh, dw) = stride, dilation
    xp = np.pad(x, ((0, 0), (0, 0), pads[0], pads[1]))
    n, c, hp, wp = xp.shape
    o, cg, kh, kw = w.shape
    og = o // groups
    oh, ow = (hp - dh * (kh - 1) - 1) // sh + 1, (wp - dw * (kw - 1) - 1) // sw + 1
    y = np.zeros((n, o, oh, ow))
    gxp, gw = np.zeros_like(xp, dtype=np.float64), np.zeros(w.shape)
    for g in range(groups):
        cs, os_ = slice(g * cg, (g + 1) * cg), slice(g * og, (g + 1) * og)
        for i in range(kh):
            for j in range(kw):
                rows = slice(i * dh, i * dh + sh * (oh - 1) + 1, sh)
                cols = slice(j * dw, j * dw + sw * (ow - 1) + 1, sw)
                patch = xp[:, cs, rows, cols]
                y[:, os_] += np.einsum("ncij,oc->noij", patch, w[os_, :, i, j])
                if g_out is not None:
                    gxp[:, cs, rows, cols] += np.einsum("noij,oc->ncij", g_out[:, os_], w[os_, :, i, j])
                    gw[os_, :, i, j] = np.einsum("noij,ncij->oc", g_out[:, os_], patch)
    if b is not None:
        y += b.reshape(1, -1, 1, 1)
    if g_out is None:
        return y
    gx = gxp[:, :, pads[0][0]:pads[0][0] + x.shape[2], pads[1][0]:pads[1][0] + x.shape[3]]
    return y, gx, gw, g_out.sum((0, 2, 3))


def pool_out_size(n, k, s, p, d, ceil_mode):
    """PyTorch's documented output size of a pool (the last window must start inside the input or left padding)."""
    o = (n + 2 * p - d * (k - 1) - 1 + (s - 1 if ceil_mode else 0)) // s + 1
    if ceil_mode and (o - 1) * s >= n + p:
        o -= 1
    return o


def ref_max_pool2d(x, k, s, p, d, ceil_mode, g_out=None):
    """Max over each window of taps inside the input (the first largest), its
    flat index, and with g_out the gradient routed to that index."""
    n, c, h, w = x.shape
    oh, ow = (pool_out_size(sz, k[i], s[i], p[i], d[i], ceil_mode) for i, sz in enumerate((h, w)))
    y, idx = np.zeros((n, c, oh, ow)), np.zeros((n, c, oh, ow), dtype=np.int64)
    gx = np.zeros(x.shape)
    for i in range(oh):
        for j in range(ow):
            taps = [(i * s[0] - p[0] + a * d[0], j * s[1] - p[1] + b * d[1]) for a in range(k[0]) for b in range(k[1])]
            taps = [(r, q) for r, q in taps if 0 <= r < h and 0 <= q < w]
            vals = np.stack([x[:, :, r, q] for r, q in taps], -1)
            best = vals.argmax(-1)
            y[:, :, i, j] = vals.max(-1)
            flat = np.array([r * w + q for r, q in taps])[best]
            idx[:, :, i, j] = flat
            if g_out is not None:
                np.add.at(gx.reshape(n * c, h * w), (np.arange(n * c), flat.reshape(-1)), g_out[:, :, i, j].reshape(-1))
    return y, idx, gx


def ref_avg_pool2d(x, k, s, p, ceil_mode, count_include_pad, divisor, g_out=None):
    """PyTorch's average pool: the window ends at the right padding at most;
    its size counts the padding when count_include_pad; divisor overrides."""
    n, c, h, w = x.shape
    oh, ow = (pool_out_size(sz, k[i], s[i], p[i], 1, ceil_mode) for i, sz in enumerate((h, w)))
    y, gx = np.zeros((n, c, oh, ow)), np.zeros(x.shape)
    for i in range(oh):
        for j in range(ow):
            h0, w0 = i * s[0] - p[0], j * s[1] - p[1]
            h1, w1 = min(h0 + k[0], h + p[0]), min(w0 + k[1], w + p[1])
            size = (h1 - h0) * (w1 - w0)
            h0, w0, h1, w1 = max(h0, 0), max(w0, 0), min(h1, h), min(w1, w)
            div = divisor or (size if count_include_pad else (h1 - h0) * (w1 - w0))
            y[:, :, i, j] = x[:, :, h0:h1, w0:w1].sum((2, 3)) / div
            if g_out is not None:
                gx[:, :, h0:h1, w0:w1] += g_out[:, :, i, j][:, :, None, None] / div
    return y, gx


def ref_adaptive_avg_pool2d(x, out, g_out):
    h, w = x.shape[2:]
    y, gx = np.zeros(x.shape[:2] + tuple(out)), np.zeros(x.shape)
    for i in range(out[0]):
        h0, h1 = i * h // out[0], -(-(i + 1) * h // out[0])
        for j in range(out[1]):
            w0, w1 = j * w // out[1], -(-(j + 1) * w // out[1])
            y[:, :, i, j] = x[:, :, h0:h1, w0:w1].mean((2, 3))
            gx[:, :, h0:h1, w0:w1] += g_out[:, :, i, j][:, :, None, None] / ((h1 - h0) * (w1 - w0))
    return y, gx


def run(fn, arrays, g_seed=1, device="cpu", dtype=np.float64):
    """fn's output and the gradients of sum(out * G) for a fixed random G, as numpy."""
    ts = [ddpc.tensor(a.astype(dtype), device=device, requires_grad=True) for a in arrays]
    out = fn(*ts)
    g = np.random.default_rng(g_seed).standard_normal(out.shape)
    (out * ddpc.tensor(g.astype(dtype), device=device)).sum().backward()
    return np.asarray(out.detach().cpu()), [np.asarray(t.grad.cpu()) for t in ts], g


# ---- convolution -----------------------------------------------------------------------

# (N, C, H, W), (O, KH, KW), stride, padding, dilation, groups
CONV2D = [
    ((2, 3, 7, 9), (4, 3, 3), 1, 0, 1, 1),
    ((1, 4, 8, 8), (6, 3, 2), 2, 1, 1, 2),
    ((3, 6, 5, 11), (6, 3, 3), (2, 3), (1, 2), (2, 1), 6),  # depthwise
    ((2, 4, 9, 6), (8, 2, 4), 1, "same", (3, 2), 2),  # 'same' with odd total padding on one side
    ((2, 3, 6, 7), (5, 3, 3), 1, "valid", 1, 1),
    ((1, 2, 5, 5), (3, 5, 5), 1, 0, 1, 1),  # the kernel covers the whole input
    ((2, 2, 6, 6), (2, 1, 1), 3, 0, 1, 2),
    ((1, 3, 4, 4), (2, 3, 3), 5, 2, 1, 1),  # stride larger than the input
    ((3, 4, 5, 6), (6, 1, 1), 1, 0, 1, 2),  # pointwise: the columns are the image, no im2col
    ((1, 3, 4, 4), (5, 1, 1), 1, 0, 2, 1),  # pointwise, one sample: no copies at all
]


def _pads(padding, kernel, dilation, nd):
    dilation = (dilation,) * nd if isinstance(dilation, int) else dilation
    if padding == "valid":
        return ((0, 0),) * nd
    if padding == "same":
        tot = [d * (k - 1) for k, d in zip(kernel, dilation)]
        return tuple((t // 2, t - t // 2) for t in tot)
    padding = (padding,) * nd if isinstance(padding, int) else padding
    return tuple((p, p) for p in padding)


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups", CONV2D)
@pytest.mark.parametrize("bias", [True, False])
def test_conv2d_matches_the_reference_forward_and_backward(xs, ws, stride, padding, dilation, groups, bias):
    rng = np.random.default_rng(0)
    x = rng.standard_normal(xs)
    w = rng.standard_normal((ws[0], xs[1] // groups, ws[1], ws[2]))
    b = rng.standard_normal(ws[0])
    arrays = [x, w, b] if bias else [x, w]
    out, grads, g = run(lambda *t: F.conv2d(t[0], t[1], t[2] if bias else None, stride, padding, dilation, groups),
                        arrays)
    y, gx, gw, gb = ref_conv2d(x, w, b if bias else None, _pair(stride), _pads(padding, ws[1:], dilation, 2),
                               _pair(dilation), groups, g_out=np.random.default_rng(1).standard_normal(out.shape))
    np.testing.assert_allclose(out, y, rtol=1e-10, atol=1e-10)
    for got, want in zip(grads, (gx, gw, gb)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10)


# (N, C, L), (O, K), stride, padding, dilation, groups
CONV1D = [
    ((2, 3, 10), (4, 3), 1, 0, 1, 1),
    ((1, 4, 9), (4, 2), 2, 1, 3, 4),
    ((3, 2, 7), (6, 4), 1, "same", 1, 2),
    ((2, 4, 12), (2, 5), 3, 2, 2, 2),
]


@pytest.mark.parametrize("xs,ws,stride,padding,dilation,groups", CONV1D)
def test_conv1d_is_conv2d_over_a_row(xs, ws, stride, padding, dilation, groups):
    rng = np.random.default_rng(2)
    x, w, b = rng.standard_normal(xs), rng.standard_normal((ws[0], xs[1] // groups, ws[1])), rng.standard_normal(ws[0])
    out, (gx, gw, gb), g = run(lambda x, w, b: F.conv1d(x, w, b, stride, padding, dilation, groups), [x, w, b])
    pads = ((0, 0),) + _pads(padding, ws[1:], dilation, 1)
    y, rx, rw, rb = ref_conv2d(x[:, :, None], w[:, :, None], b, (1, stride), pads, (1, dilation), groups,
                               g_out=g[:, :, None])
    np.testing.assert_allclose(out, y[:, :, 0], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(gx, rx[:, :, 0], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(gw, rw[:, :, 0], rtol=1e-10, atol=1e-10)
    np.testing.assert_allclose(gb, rb, rtol=1e-10, atol=1e-10)


def test_unbatched_input_is_a_batch_of_one():
    rng = np.random.default_rng(3)
    x, w, b = rng.standard_normal((3, 6, 5)), rng.standard_normal((4, 3, 3, 2)), rng.standard_normal(4)
    one = F.conv2d(ddpc.tensor(x), ddpc.tensor(w), ddpc.tensor(b), padding=1)
    batch = F.conv2d(ddpc.tensor(x[None]), ddpc.tensor(w), ddpc.tensor(b), padding=1)
    assert one.shape == (4, 6, 6)
    np.testing.assert_array_equal(np.asarray(one), np.asarray(batch)[0])
    x1 = rng.standard_normal((3, 8))
    assert F.conv1d(ddpc.tensor(x1), ddpc.tensor(w[:, :, 0])).shape == (4, 7)
    assert F.max_pool2d(ddpc.tensor(x), 2).shape == (3, 3, 2)
    assert F.avg_pool1d(ddpc.tensor(x1), 3).shape == (3, 2)
    assert F.adaptive_avg_pool2d(ddpc.tensor(x), 1).shape == (3, 1, 1)


@pytest.mark.parametrize("kernel,padding", [(3, 1), (1, 0)])
def test_batches_larger_than_one_column_step_give_the_same_result(monkeypatch, kernel, padding):
    """The batch goes through im2col (none for a pointwise kernel) and the
    GEMMs in steps bounded in bytes; a step of one sample and one step for
    all agree."""
    from ddpc.nn import _conv

    rng = np.random.default_rng(4)
    x, w, b = (rng.standard_normal((5, 4, 6, 6)), rng.standard_normal((6, 2, kernel, kernel)),
               rng.standard_normal(6))
    fn = lambda x, w, b: F.conv2d(x, w, b, padding=padding, groups=2)  # noqa: E731
    monkeypatch.setitem(_conv._COLUMN_BYTES, "cpu", 1 << 30)
    whole = run(fn, [x, w, b])
    monkeypatch.setitem(_conv._COLUMN_BYTES, "cpu", 1)
    steps = run(fn, [x, w, b])
    np.testing.assert_allclose(steps[0], whole[0], rtol=1e-12, atol=1e-12)
    for a, c in zip(steps[1], whole[1]):
        np.testing.assert_allclose(a, c, rtol=1e-12, atol=1e-12)


def test_host_loops_split_across_threads_give_the_same_result(monkeypatch):
    """Large enough for im2col, col2im and the pools to split their planes across threads."""
    from ddpc.nn import _conv

    monkeypatch.setitem(_conv._COLUMN_BYTES, "cpu", 1 << 30)
    rng = np.random.default_rng(14)
    arrays = [rng.standard_normal((8, 16, 64, 64)), rng.standard_normal((32, 16, 3, 3))]

    def fn(x, w):
        y = F.conv2d(x, w, padding=1)
        return F.max_pool2d(y, 3, 1, 1) + F.avg_pool2d(y, 3, 1, 1) + F.adaptive_avg_pool2d(y, 16).sum()

    results = []
    for threads in (1, 4):
        _C.set_num_threads(threads)
        try:
            results.append(run(fn, arrays, dtype=np.float32))
        finally:
            _C.set_num_threads(0)
    for a, b in zip([results[0][0]] + results[0][1], [results[1][0]] + results[1][1]):
        np.testing.assert_array_equal(a, b)


def test_an_empty_batch_gives_an_empty_output_and_zero_weight_gradient():
    x = ddpc.zeros(0, 3, 5, 5, requires_grad=True)
    w = ddpc.ones(2, 3, 3, 3, requires_grad=True)
    b = ddpc.ones(2, requires_grad=True)
    y = F.conv2d(x, w, b)
    assert y.shape == (0, 2, 3, 3)
    y.sum().backward()
    assert x.grad.shape == (0, 3, 5, 5)
    np.testing.assert_array_equal(np.asarray(w.grad), 0)
    np.testing.assert_array_equal(np.asarray(b.grad), 0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16", "float32"])
def test_lower_precisions_compute_in_float32(dtype):
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((2, 3, 6, 6)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    xt = ddpc.tensor(x).to(dtype=dtype).requires_grad_()
    wt = ddpc.tensor(w).to(dtype=dtype).requires_grad_()
    y = F.conv2d(xt, wt, padding=1)
    assert y.dtype.name == dtype
    y.float().sum().backward()
    assert xt.grad.dtype.name == dtype and wt.grad.dtype.name == dtype
    want = ref_conv2d(np.asarray(xt.detach().float()).astype(np.float64),
                      np.asarray(wt.detach().float()).astype(np.float64), None, (1, 1), ((1, 1), (1, 1)), (1, 1), 1)
    tol = 1e-5 if dtype == "float32" else 2e-2
    np.testing.assert_allclose(np.asarray(y.detach().float()), want, rtol=tol, atol=tol * 10)
    pooled = F.max_pool2d(xt, 2)
    assert pooled.dtype.name == dtype
    np.testing.assert_array_equal(np.asarray(pooled.detach().float()),
                                  np.asarray(F.max_pool2d(xt.detach().float(), 2)))
    assert F.avg_pool2d(xt, 3).dtype.name == dtype


# ---- pooling ------------------------------------------------------------------------

# (H, W), kernel, stride, padding, dilation, ceil_mode
MAX2D = [
    ((7, 8), 2, None, 0, 1, False),
    ((7, 8), 3, 2, 1, 1, True),
    ((6, 9), (2, 3), (1, 2), (1, 0), (2, 1), False),
    ((5, 5), 2, 2, 1, 1, True),
    ((9, 7), 3, 3, 1, 2, True),
    ((4, 6), (4, 1), 1, (2, 0), 1, False),
]


@pytest.mark.parametrize("hw,k,s,p,d,ceil_mode", MAX2D)
def test_max_pool2d_matches_the_reference(hw, k, s, p, d, ceil_mode):
    x = np.random.default_rng(6).standard_normal((2, 3) + hw)
    x[0, 0, 0, :2] = 5.0  # a tie: the first one wins
    out, (gx,), g = run(lambda x: F.max_pool2d(x, k, s, p, d, ceil_mode), [x])
    pair = lambda v: _pair(v) if v is not None else _pair(k)  # noqa: E731
    y, idx, rg = ref_max_pool2d(x, _pair(k), pair(s), _pair(p), _pair(d), ceil_mode, g)
    np.testing.assert_array_equal(out, y)
    np.testing.assert_allclose(gx, rg, rtol=1e-12, atol=1e-12)
    values, indices = F.max_pool2d(ddpc.tensor(x), k, s, p, d, ceil_mode, return_indices=True)
    assert indices.dtype is ddpc.int64
    np.testing.assert_array_equal(np.asarray(indices), idx)


def test_max_pool1d_indices_and_a_nan_wins():
    x = np.array([[[1.0, 3.0, 3.0, np.nan, 0.0, 2.0, -1.0]]])
    values, indices = F.max_pool1d(ddpc.tensor(x), 2, 2, 1, ceil_mode=True, return_indices=True)
    np.testing.assert_array_equal(np.asarray(values), [[[1.0, 3.0, np.nan, 2.0]]])
    np.testing.assert_array_equal(np.asarray(indices), [[[0, 1, 3, 5]]])
    m = nn.MaxPool1d(3, stride=1, return_indices=True)
    _, idx = m(ddpc.tensor(x[:, :, 4:]))
    np.testing.assert_array_equal(np.asarray(idx), [[[1]]])


def test_ceil_mode_output_sizes_follow_the_last_window_rule():
    # 5 elements, kernel 2, stride 2: floor gives 2 windows, ceil 3 (the last starts at 4, inside).
    assert F.max_pool1d(ddpc.zeros(1, 1, 5), 2, ceil_mode=True).shape == (1, 1, 3)
    assert F.max_pool1d(ddpc.zeros(1, 1, 5), 2).shape == (1, 1, 2)
    # 5 elements, kernel 2, stride 2, padding 1: ceil's fourth window would start at 6 - 1 = 5, in the right
    # padding, so it is dropped.
    assert F.avg_pool1d(ddpc.zeros(1, 1, 5), 2, 2, 1, ceil_mode=True).shape == (1, 1, 3)
    # 6 elements, kernel 3, stride 3, padding 1: floor gives 2 windows, ceil a third starting at 5, inside.
    assert F.avg_pool1d(ddpc.zeros(1, 1, 6), 3, 3, 1).shape == (1, 1, 2)
    assert F.avg_pool1d(ddpc.zeros(1, 1, 6), 3, 3, 1, ceil_mode=True).shape == (1, 1, 3)


# (H, W), kernel, stride, padding, ceil_mode, count_include_pad, divisor_override
AVG2D = [
    ((7, 8), 2, None, 0, False, True, None),
    ((7, 8), 3, 2, 1, True, True, None),
    ((7, 8), 3, 2, 1, True, False, None),
    ((6, 9), (2, 3), (1, 2), (1, 0), False, False, None),
    ((5, 6), 3, 2, 1, False, True, 4),
    ((5, 5), (2, 4), 3, (1, 2), True, True, -2),
]


@pytest.mark.parametrize("hw,k,s,p,ceil_mode,include,divisor", AVG2D)
def test_avg_pool2d_matches_the_reference(hw, k, s, p, ceil_mode, include, divisor):
    x = np.random.default_rng(7).standard_normal((2, 3) + hw)
    out, (gx,), g = run(lambda x: F.avg_pool2d(x, k, s, p, ceil_mode, include, divisor), [x])
    y, rg = ref_avg_pool2d(x, _pair(k), _pair(s if s is not None else k), _pair(p), ceil_mode, include, divisor, g)
    np.testing.assert_allclose(out, y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gx, rg, rtol=1e-12, atol=1e-12)


def test_avg_pool1d_matches_the_2d_reference_over_a_row():
    x = np.random.default_rng(8).standard_normal((2, 3, 11))
    out, (gx,), g = run(lambda x: F.avg_pool1d(x, 4, 3, 2, True, False), [x])
    y, rg = ref_avg_pool2d(x[:, :, None], (1, 4), (1, 3), (0, 2), True, False, None, g[:, :, None])
    np.testing.assert_allclose(out, y[:, :, 0], rtol=1e-12)
    np.testing.assert_allclose(gx, rg[:, :, 0], rtol=1e-12)


@pytest.mark.parametrize("hw,out", [((7, 9), (3, 4)), ((5, 5), (5, 5)), ((4, 6), (6, 1)), ((8, 8), (1, 1))])
def test_adaptive_avg_pool2d_uses_floor_and_ceil_windows(hw, out):
    x = np.random.default_rng(9).standard_normal((2, 3) + hw)
    y, (gx,), g = run(lambda x: F.adaptive_avg_pool2d(x, out), [x])
    ry, rg = ref_adaptive_avg_pool2d(x, out, g)
    np.testing.assert_allclose(y, ry, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(gx, rg, rtol=1e-12, atol=1e-12)
    assert nn.AdaptiveAvgPool2d((None, 2))(ddpc.tensor(x)).shape == (2, 3, hw[0], 2)


# ---- modules ------------------------------------------------------------------------

def test_conv_modules_default_initialisation_and_shapes():
    ddpc.manual_seed(1)
    conv = nn.Conv2d(16, 32, 5, groups=2)
    assert conv.weight.shape == (32, 8, 5, 5) and conv.bias.shape == (32,)
    bound = 1 / math.sqrt(8 * 25)  # kaiming_uniform_(a=sqrt(5)) over fan_in = in_channels / groups * kernel
    w, b = np.asarray(conv.weight), np.asarray(conv.bias)
    assert np.abs(w).max() <= bound and np.abs(w).max() > 0.95 * bound
    assert abs(w.std() - bound / math.sqrt(3)) < 0.02 * bound
    assert np.abs(b).max() <= bound and np.abs(b).max() > 0.5 * bound
    c1 = nn.Conv1d(3, 4, 3, bias=False, dtype=ddpc.float64)
    assert c1.weight.shape == (4, 3, 3) and c1.bias is None and c1.weight.dtype is ddpc.float64
    assert [name for name, _ in conv.named_parameters()] == ["weight", "bias"]
    ddpc.manual_seed(1)
    np.testing.assert_array_equal(np.asarray(nn.Conv2d(16, 32, 5, groups=2).weight), w)


def test_module_reprs_follow_pytorch():
    assert repr(nn.Conv2d(3, 8, 3)) == "Conv2d(3, 8, kernel_size=(3, 3), stride=(1, 1))"
    assert repr(nn.Conv2d(3, 8, (3, 5), stride=2, padding=1, dilation=2, bias=False, padding_mode="reflect")) == (
        "Conv2d(3, 8, kernel_size=(3, 5), stride=(2, 2), padding=(1, 1), dilation=(2, 2), bias=False, "
        "padding_mode=reflect)")
    assert repr(nn.Conv1d(4, 8, 3, padding="same", groups=2)) == (
        "Conv1d(4, 8, kernel_size=(3,), stride=(1,), padding=same, groups=2)")
    assert repr(nn.MaxPool2d(3)) == "MaxPool2d(kernel_size=3, stride=3, padding=0, dilation=1, ceil_mode=False)"
    assert repr(nn.AvgPool1d(3)) == "AvgPool1d(kernel_size=(3,), stride=(3,), padding=(0,))"
    assert repr(nn.AvgPool2d(2, 1, divisor_override=3)) == "AvgPool2d(kernel_size=2, stride=1, padding=0)"
    assert repr(nn.AdaptiveAvgPool2d((None, 3))) == "AdaptiveAvgPool2d(output_size=(None, 3))"


@pytest.mark.parametrize("mode,np_mode", [("reflect", "reflect"), ("replicate", "edge"), ("circular", "wrap")])
def test_padding_modes_pad_the_input_as_numpy_does(mode, np_mode):
    ddpc.manual_seed(2)
    conv = nn.Conv2d(2, 3, 3, padding=(2, 1), padding_mode=mode, dtype=ddpc.float64)
    x = np.random.default_rng(10).standard_normal((2, 2, 4, 5))
    out, (gx,), g = run(conv, [x])
    w, b = np.asarray(conv.weight), np.asarray(conv.bias)
    padded = np.pad(x, ((0, 0), (0, 0), (2, 2), (1, 1)), mode=np_mode)
    y, gxp, _, _ = ref_conv2d(padded, w, b, (1, 1), ((0, 0), (0, 0)), (1, 1), 1, g_out=g)
    np.testing.assert_allclose(out, y, rtol=1e-12, atol=1e-12)
    # The gradient of the padded copy folds back onto the elements it repeats.
    idx_h = np.pad(np.arange(4), (2, 2), mode=np_mode)
    idx_w = np.pad(np.arange(5), (1, 1), mode=np_mode)
    want = np.zeros_like(x)
    for i, r in enumerate(idx_h):
        for j, c in enumerate(idx_w):
            want[:, :, r, c] += gxp[:, :, i, j]
    np.testing.assert_allclose(gx, want, rtol=1e-12, atol=1e-12)
    same = nn.Conv1d(2, 2, 4, padding="same", padding_mode=mode, dtype=ddpc.float64)
    assert same(ddpc.tensor(x[:, :, 0])).shape == (2, 2, 5)


ERRORS = [
    (lambda: F.conv2d(ddpc.zeros(3, 5), ddpc.zeros(2, 3, 3, 3)), ValueError, "Expected 3D .unbatched. or 4D"),
    (lambda: F.conv2d(ddpc.zeros(1, 4, 5, 5), ddpc.zeros(2, 3, 3, 3)), ValueError, "to have 3 channels, but got 4"),
    (lambda: F.conv2d(ddpc.zeros(1, 4, 5, 5), ddpc.zeros(3, 2, 3, 3), groups=2), ValueError, "divisible by 2"),
    (lambda: F.conv2d(ddpc.zeros(1, 4, 5, 5), ddpc.zeros(2, 4, 3, 3), groups=0), ValueError, "groups must be"),
    (lambda: F.conv2d(ddpc.zeros(1, 3, 5, 5), ddpc.zeros(2, 3, 7, 7)), ValueError, "Kernel size can't be greater"),
    (lambda: F.conv2d(ddpc.zeros(1, 3, 5, 5), ddpc.zeros(2, 3, 7, 7), padding=(0, 1)), ValueError, r"\(5 x 7\)"),
    (lambda: F.conv1d(ddpc.zeros(1, 3, 5), ddpc.zeros(2, 3, 3), stride=0), ValueError, "stride must be greater"),
    (lambda: F.conv1d(ddpc.zeros(1, 3, 5), ddpc.zeros(2, 3, 3), dilation=-1), ValueError, "dilation must be"),
    (lambda: F.conv1d(ddpc.zeros(1, 3, 5), ddpc.zeros(2, 3, 3), padding=-1), ValueError, "negative padding"),
    (lambda: F.conv2d(ddpc.zeros(1, 3, 5, 5), ddpc.zeros(2, 3, 3, 3), stride=2, padding="same"), ValueError,
     "not supported for strided"),
    (lambda: F.conv2d(ddpc.zeros(1, 3, 5, 5), ddpc.zeros(2, 3, 3, 3), padding="full"), ValueError,
     "Invalid padding string"),
    (lambda: F.conv2d(ddpc.zeros(1, 3, 5, 5), ddpc.zeros(2, 3, 3)), ValueError, "weight must be 4-d"),
    (lambda: F.conv2d(ddpc.zeros(1, 3, 5, 5), ddpc.zeros(2, 3, 3, 3), ddpc.zeros(3)), ValueError, "bias must have"),
    (lambda: F.conv2d(ddpc.zeros(1, 3, 5, 5), ddpc.zeros(2, 3, 3, 3, dtype=ddpc.float64)), TypeError, "share one"),
    (lambda: F.conv2d(ddpc.zeros(1, 3, 5, 5, dtype=ddpc.int64), ddpc.zeros(2, 3, 3, 3, dtype=ddpc.int64)), TypeError,
     "floating-point"),
    (lambda: F.conv2d(ddpc.zeros(1, 3, 5, 5), ddpc.zeros(2, 3, 3, 3), stride=(1, 2, 3)), ValueError,
     "tuple of 2 ints"),
    (lambda: nn.Conv2d(3, 4, 3, groups=2), ValueError, "in_channels must be divisible by groups"),
    (lambda: nn.Conv2d(4, 3, 3, groups=2), ValueError, "out_channels must be divisible by groups"),
    (lambda: nn.Conv2d(4, 4, 3, padding_mode="mirror"), ValueError, "padding_mode must be one of"),
    (lambda: nn.Conv2d(4, 4, 3, stride=2, padding="same"), ValueError, "not supported for strided"),
    (lambda: nn.Conv1d(1, 1, 3, padding=3, padding_mode="reflect")(ddpc.zeros(1, 1, 3)), ValueError,
     "must be less than the input size"),
    (lambda: nn.Conv1d(1, 1, 3, padding=3, padding_mode="circular")(ddpc.zeros(1, 1, 2)), ValueError,
     "more than once"),
    (lambda: F.max_pool2d(ddpc.zeros(1, 1, 5, 5), 3, padding=2), ValueError, "at most half of kernel size"),
    (lambda: F.avg_pool2d(ddpc.zeros(1, 1, 5, 5), 3, padding=-1), ValueError, "non-negative"),
    (lambda: F.max_pool2d(ddpc.zeros(1, 1, 2, 2), 3), ValueError, "Output size is too small"),
    (lambda: F.max_pool2d(ddpc.zeros(1, 1, 5, 5), 0), ValueError, "kernel_size must be greater than zero"),
    (lambda: F.max_pool2d(ddpc.zeros(1, 1, 5, 5), 2, stride=0), ValueError, "stride must be greater than zero"),
    (lambda: F.max_pool2d(ddpc.zeros(5, 5), 2), ValueError, "3-d or 4-d"),
    (lambda: F.max_pool1d(ddpc.zeros(1, 0, 5), 2), ValueError, "non-empty"),
    (lambda: F.max_pool2d(ddpc.zeros(1, 1, 5, 5, dtype=ddpc.bool), 2), TypeError, "floating-point"),
    (lambda: F.avg_pool2d(ddpc.zeros(1, 1, 5, 5), 2, divisor_override=0), ValueError, "non-zero"),
    (lambda: F.adaptive_avg_pool2d(ddpc.zeros(1, 2, 3), (-1, 2)), ValueError, ">= 0"),
    (lambda: F.adaptive_avg_pool2d(ddpc.zeros(1, 2, 3), (1, 2, 3)), ValueError, "pair of ints"),
]


@pytest.mark.parametrize("fn,exc,match", ERRORS, ids=[str(i) for i in range(len(ERRORS))])
def test_bad_arguments_raise_clear_errors(fn, exc, match):
    with pytest.raises(exc, match=match):
        fn()


def test_the_c_ops_check_their_arguments():
    """Called directly, the ops refuse inconsistent buffers and geometry instead of reading out of bounds."""
    x = ddpc.zeros(2, 3, 5, 5)._buf
    col = _C.Buffer((3, 3, 3, 2, 3, 3), "float32", -1)
    _C.im2col(col, x, (1, 1), (0, 0), (1, 1))
    with pytest.raises(ValueError, match="the columns has shape"):
        _C.im2col(_C.Buffer((3, 3, 3, 1, 3, 3), "float32", -1), x, (1, 1), (0, 0), (1, 1))
    with pytest.raises(ValueError, match="must be positive"):
        _C.im2col(col, x, (0, 1), (0, 0), (1, 1))
    with pytest.raises(ValueError, match="padding must be >= 0"):
        _C.col2im(x, col, (1, 1), (-1, 0), (1, 1))
    with pytest.raises(ValueError, match="too large"):
        _C.im2col(col, x, (1, 1), (1 << 40, 0), (1, 1))
    with pytest.raises(TypeError, match="tuple of 2 ints"):
        _C.im2col(col, x, 1, (0, 0), (1, 1))
    with pytest.raises(TypeError, match="tuple of 2 ints"):
        _C.im2col(col, x, (1, 1, 1), (0, 0), (1, 1))
    with pytest.raises(ValueError, match="1 to 3 spatial dims"):
        _C.im2col(col, ddpc.zeros(1, 1, 1, 1, 1, 1)._buf, (1,), (0,), (1,))
    with pytest.raises(TypeError, match="float32 or float64"):
        _C.im2col(_C.Buffer((3, 3, 3, 2, 3, 3), "int32", -1), ddpc.zeros(2, 3, 5, 5, dtype=ddpc.int32)._buf,
                  (1, 1), (0, 0), (1, 1))
    planes = ddpc.zeros(2, 4, 4)._buf
    out, idx = _C.Buffer((2, 2, 2), "float32", -1), _C.Buffer((2, 2, 2), "int64", -1)
    _C.max_pool(out, idx, planes, (2, 2), (2, 2), (0, 0), (1, 1))
    np.testing.assert_array_equal(np.asarray(idx)[0], [[0, 2], [8, 10]])
    bad = ddpc.tensor(np.full((2, 2, 2), 16, dtype=np.int64))._buf
    with pytest.raises(ValueError, match="outside a plane of 16"):
        _C.max_pool_backward(ddpc.zeros(2, 4, 4)._buf, ddpc.zeros(2, 2, 2)._buf, bad)
    with pytest.raises(ValueError, match="indices must be int64"):
        _C.max_pool(out, _C.Buffer((2, 2, 2), "int32", -1), planes, (2, 2), (2, 2), (0, 0), (1, 1))
    with pytest.raises(ValueError, match="the output has shape"):
        _C.avg_pool(_C.Buffer((3, 2, 2), "float32", -1), planes, (2, 2), (2, 2), (0, 0), True, 0)
    # A window wholly in the padding (possible only by calling the op directly) gives -inf at index -1,
    # and its gradient goes nowhere.
    one = ddpc.tensor(np.ones((1, 1, 1), dtype=np.float32))._buf
    o2, i2 = _C.Buffer((1, 1, 2), "float32", -1), _C.Buffer((1, 1, 2), "int64", -1)
    _C.max_pool(o2, i2, one, (1, 1), (1, 2), (0, 2), (1, 1))
    np.testing.assert_array_equal(np.asarray(o2), [[[-np.inf, 1.0]]])
    np.testing.assert_array_equal(np.asarray(i2), [[[-1, 0]]])
    gx = _C.Buffer((1, 1, 1), "float32", -1)
    _C.max_pool_backward(gx, ddpc.ones(1, 1, 2)._buf, i2)
    np.testing.assert_array_equal(np.asarray(gx), [[[1.0]]])


# ---- training ------------------------------------------------------------------------

def _cnn(seed=0):
    ddpc.manual_seed(seed)
    return nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Conv2d(8, 16, 3, groups=2),
                         nn.ReLU(), nn.AvgPool2d(2, ceil_mode=True), nn.Flatten(), nn.Linear(16, 3))


def _images(n):
    rng = np.random.default_rng(11)
    return rng.standard_normal((n, 1, 8, 8)).astype(np.float32), rng.integers(0, 3, n).astype(np.int64)


def test_a_small_cnn_learns_random_labels():
    model = _cnn()
    opt = ddpc.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    x, y = _images(32)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = F.cross_entropy(model(ddpc.tensor(x)), ddpc.tensor(y))
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.5 * losses[0], losses
    assert all(p.grad is not None and np.abs(np.asarray(p.grad)).sum() > 0 for p in model.parameters())


def _train(model, batches, opt):
    for xb, yb in batches:
        opt.zero_grad()
        F.cross_entropy(model(ddpc.tensor(xb)), ddpc.tensor(yb)).backward()
        opt.step()


def ddp_cnn_worker(rank, world, batch, steps):
    import ddpc.distributed as dist

    dist.init_process_group("cpu")
    x, y = _images(world * batch * steps)
    ddp = nn.parallel.DistributedDataParallel(_cnn())
    opt = ddpc.optim.SGD(ddp.parameters(), lr=0.1)
    big = world * batch
    _train(ddp, [(x[s * big + rank * batch:s * big + (rank + 1) * batch],
                  y[s * big + rank * batch:s * big + (rank + 1) * batch]) for s in range(steps)], opt)
    out = {k: v.numpy().copy() for k, v in ddp.module.state_dict().items()}
    dist.destroy_process_group()
    return out


def test_cnn_under_ddp_cross_process_equals_one_process_on_the_combined_batch():
    world, batch, steps = 2, 4, 3
    x, y = _images(world * batch * steps)
    model = _cnn()
    opt = ddpc.optim.SGD(model.parameters(), lr=0.1)
    big = world * batch
    _train(model, [(x[s * big:(s + 1) * big], y[s * big:(s + 1) * big]) for s in range(steps)], opt)
    ref = {k: v.numpy() for k, v in model.state_dict().items()}
    for result in ddpc.spawn(ddp_cnn_worker, args=(world, batch, steps), nprocs=world):
        assert result.keys() == ref.keys()
        for k in ref:
            np.testing.assert_allclose(result[k], ref[k], atol=2e-5, rtol=0, err_msg=k)


# ---- CUDA against the host ---------------------------------------------------------------

GPU_CASES = [
    ("conv2d", lambda x, w, b: F.conv2d(x, w, b, stride=(1, 2), padding=1, dilation=(2, 1), groups=2),
     [(3, 4, 9, 10), (6, 2, 3, 3), (6,)]),
    ("conv2d_same_depthwise", lambda x, w: F.conv2d(x, w, padding="same", groups=4), [(2, 4, 7, 6), (8, 1, 4, 3)]),
    ("conv1d", lambda x, w, b: F.conv1d(x, w, b, stride=2, padding=3), [(2, 3, 17), (5, 3, 4), (5,)]),
    ("max_pool2d", lambda x: F.max_pool2d(x, 3, 2, 1, dilation=(1, 2), ceil_mode=True), [(2, 3, 9, 11)]),
    ("max_pool1d", lambda x: F.max_pool1d(x, 4, 3, 2), [(2, 3, 13)]),
    ("avg_pool2d", lambda x: F.avg_pool2d(x, 3, 2, 1, ceil_mode=True, count_include_pad=False), [(2, 3, 9, 8)]),
    ("avg_pool2d_divisor", lambda x: F.avg_pool2d(x, (2, 3), 1, (1, 1), divisor_override=5), [(2, 3, 6, 7)]),
    ("adaptive", lambda x: F.adaptive_avg_pool2d(x, (4, 3)), [(2, 3, 9, 7)]),
    ("cnn", lambda x: _cnn().to(x.device, x.dtype)(x).sum(), [(4, 1, 8, 8)]),
    ("conv_transpose2d", lambda x, w, b: F.conv_transpose2d(x, w, b, stride=2, padding=1, output_padding=1, groups=2),
     [(2, 4, 5, 6), (4, 3, 3, 2), (6,)]),
    ("conv_transpose1d", lambda x, w: F.conv_transpose1d(x, w, stride=3, dilation=2), [(2, 3, 7), (3, 2, 4)]),
    ("fold_unfold", lambda x: F.fold(F.unfold(x, 3, padding=1, stride=2) * 2, (7, 6), 3, padding=1, stride=2),
     [(2, 3, 7, 6)]),
]


def assert_cuda_matches_the_host(fn, shapes):
    """fn's output and input gradients on CUDA equal the host's, in float32 and float64."""
    rng = np.random.default_rng(12)
    arrays = [rng.standard_normal(s) for s in shapes]
    for dtype, tol in ((np.float32, 1e-4), (np.float64, 1e-12)):
        out_c, g_c, _ = run(fn, arrays, dtype=dtype)
        out_g, g_g, _ = run(fn, arrays, device="cuda", dtype=dtype)
        np.testing.assert_allclose(out_g, out_c, rtol=tol, atol=tol)
        for a, b in zip(g_g, g_c):
            np.testing.assert_allclose(a, b, rtol=tol, atol=tol)


@pytest.mark.gpu
@pytest.mark.parametrize("name,fn,shapes", GPU_CASES, ids=[c[0] for c in GPU_CASES])
def test_cuda_matches_the_host(name, fn, shapes):
    assert_cuda_matches_the_host(fn, shapes)


@pytest.mark.gpu
def test_max_pool_indices_on_cuda_match_the_host():
    x = np.random.default_rng(13).standard_normal((2, 3, 8, 9)).astype(np.float32)
    x[0, 0, 1, 1] = np.nan
    _, ic = F.max_pool2d(ddpc.tensor(x), 3, 2, 1, return_indices=True)
    _, ig = F.max_pool2d(ddpc.tensor(x, device="cuda"), 3, 2, 1, return_indices=True)
    np.testing.assert_array_equal(np.asarray(ig.cpu()), np.asarray(ic))


# ---- transposed convolution, fold and unfold -------------------------------------------------

@pytest.mark.parametrize("stride,padding,output_padding,dilation,groups", [
    (1, 0, 0, 1, 1), (2, 1, 1, 1, 2), ((2, 3), (0, 2), (1, 2), (1, 1), 1), (1, 2, 1, 2, 1), (3, 1, 0, 2, 2)])
def test_conv_transpose2d_is_the_adjoint_of_conv2d(stride, padding, output_padding, dilation, groups):
    """<conv2d(y, w), x> = <y, conv_transpose2d(x, w)> for every x and y: the
    transposed convolution is the convolution's adjoint, the definition
    PyTorch's follows; and its gradients pass a central-difference check."""
    rng = np.random.default_rng(3)
    w = rng.standard_normal((4, 6 // groups, 3, 2))
    x = rng.standard_normal((2, 4, 4, 5))
    t = F.conv_transpose2d(ddpc.tensor(x), ddpc.tensor(w), None, stride, padding, output_padding, groups, dilation)
    y = rng.standard_normal(t.shape)
    conv = F.conv2d(ddpc.tensor(y), ddpc.tensor(w), None, stride, padding, dilation, groups).numpy()
    # an output_padding of at least the stride (allowed below the dilation) leaves the convolution one row
    # or column longer than x: those read only padding the transposed convolution never wrote
    assert conv.shape[:2] == x.shape[:2] and all(c - s in (0, 1) for c, s in zip(conv.shape[2:], x.shape[2:]))
    conv = conv[:, :, :x.shape[2], :x.shape[3]]
    np.testing.assert_allclose((conv * x).sum(), (y * t.numpy()).sum(), rtol=1e-12)
    b = rng.standard_normal(6)
    xt, wt, bt = (ddpc.tensor(v, requires_grad=True) for v in (x, w, b))
    out = F.conv_transpose2d(xt, wt, bt, stride, padding, output_padding, groups, dilation)
    g = rng.standard_normal(out.shape)
    out.backward(ddpc.tensor(g))

    def loss(xv, wv, bv):
        o = F.conv_transpose2d(ddpc.tensor(xv), ddpc.tensor(wv), ddpc.tensor(bv), stride, padding, output_padding,
                               groups, dilation)
        return float((o.numpy() * g).sum())
    for got, k in ((xt.grad, 0), (wt.grad, 1), (bt.grad, 2)):
        args = [x, w, b]
        num = numeric_grad(lambda v: loss(*(v if i == k else a for i, a in enumerate(args))), args[k])
        np.testing.assert_allclose(got.numpy(), num, rtol=1e-6, atol=1e-8)


def test_conv_transpose1d_modules_output_size_and_errors():
    m = nn.ConvTranspose1d(3, 4, 3, stride=2, padding=1)
    assert m.weight.shape == (3, 4, 3) and m.bias.shape == (4,)
    x = ddpc.randn(2, 3, 6)
    assert m(x).shape == (2, 4, 11) and m(x, output_size=[12]).shape == (2, 4, 12)
    assert m(x[0]).shape == (4, 11)  # unbatched
    with pytest.raises(ValueError, match="valid sizes range from 11 to 12"):
        m(x, output_size=[13])
    with pytest.raises(ValueError, match="output padding must be smaller"):
        F.conv_transpose1d(x, m.weight, stride=2, output_padding=2)
    with pytest.raises(ValueError, match="channels"):
        F.conv_transpose1d(ddpc.randn(2, 5, 6), m.weight)
    with pytest.raises(ValueError, match="zeros"):
        nn.ConvTranspose2d(3, 4, 3, padding_mode="reflect")


def test_fold_sums_what_unfold_takes_apart():
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 3, 7, 6))
    cols = F.unfold(ddpc.tensor(x), (3, 2), dilation=(1, 2), padding=1, stride=(2, 1))
    # block l of channel c, tap (i, j): the padded image at the block's corner plus the tap's offset
    padded = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    oh, ow = (7 + 2 - 3) // 2 + 1, (6 + 2 - 3) // 1 + 1
    want = np.stack([padded[:, :, r * 2 + i, c + 2 * j] for i in range(3) for j in range(2)
                     for r in range(oh) for c in range(ow)], -1).reshape(2, 3, 6, oh * ow).reshape(2, 18, oh * ow)
    assert cols.shape == (2, 18, oh * ow)
    np.testing.assert_array_equal(cols.numpy(), want)
    # fold is unfold's adjoint: <unfold(x), c> = <x, fold(c)>
    c = rng.standard_normal(cols.shape)
    folded = F.fold(ddpc.tensor(c), (7, 6), (3, 2), dilation=(1, 2), padding=1, stride=(2, 1))
    np.testing.assert_allclose((want * c).sum(), (x * folded.numpy()).sum(), rtol=1e-12)
    # without overlap, fold undoes unfold
    y = ddpc.tensor(rng.standard_normal((3, 4, 6)))
    np.testing.assert_array_equal(nn.Fold((4, 6), 2, stride=2)(nn.Unfold(2, stride=2)(y)).numpy(), y.numpy())
    t = ddpc.tensor(x, requires_grad=True)
    F.unfold(t, 2).sum().backward()  # each pixel counted once per block it falls in
    assert t.grad.numpy()[0, 0, 0, 0] == 1 and t.grad.numpy()[0, 0, 1, 1] == 4
    with pytest.raises(ValueError, match="sliding blocks"):
        F.fold(ddpc.tensor(c), (9, 6), (3, 2), dilation=(1, 2), padding=1, stride=(2, 1))
    with pytest.raises(ValueError, match="divisible by the product of kernel_size"):
        F.fold(ddpc.randn(1, 5, 4), (3, 3), 2)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_unfold_and_fold_of_16_bit_floats(dtype):
    x = np.arange(32.0).reshape(1, 2, 4, 4)
    a = ddpc.tensor(x).to(dtype).requires_grad_()
    cols = F.unfold(a, 2, stride=2)
    assert cols.dtype is getattr(ddpc, dtype)
    np.testing.assert_array_equal(cols.float().numpy(), F.unfold(ddpc.tensor(x), 2, stride=2).numpy())
    back = F.fold(cols, (4, 4), 2, stride=2)
    assert back.dtype is getattr(ddpc, dtype) and back.float().numpy().tolist() == x.tolist()
    back.float().sum().backward()
    assert a.grad.dtype is getattr(ddpc, dtype) and a.grad.float().numpy().tolist() == np.ones_like(x).tolist()
