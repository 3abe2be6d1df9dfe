"""Smaller PyTorch functions against numpy and closed forms: F.pdist and
F.gumbel_softmax; fmax, fmin, float_power, isin, diag_embed, diagflat,
unravel_index, unique_consecutive and the window functions; nn.utils's
batch-norm fusion, older spectral_norm and skip_init."""

import itertools
import math

import numpy as np
import pytest
from numeric import numeric_grad

import ddpc
import ddpc.nn.functional as F
from ddpc import nn


# ---- nn.functional -----------------------------------------------------------------------

@pytest.mark.parametrize("p", [1, 2, 3.5, np.inf])
def test_pdist(p):
    x0 = np.random.default_rng(0).standard_normal((5, 3))
    want = [np.linalg.norm(x0[i] - x0[j], p) for i in range(5) for j in range(i + 1, 5)]
    np.testing.assert_allclose(np.asarray(F.pdist(ddpc.tensor(x0), p)), want, rtol=1e-12)
    x = ddpc.tensor(x0, requires_grad=True)
    weight = np.arange(1.0, 11.0)
    (F.pdist(x, p) * ddpc.tensor(weight)).sum().backward()
    ref = numeric_grad(lambda a: float((F.pdist(ddpc.tensor(a), p) * ddpc.tensor(weight)).sum()), x0)
    np.testing.assert_allclose(np.asarray(x.grad), ref, atol=1e-6)


def test_pdist_refuses():
    with pytest.raises(ValueError, match="2D"):
        F.pdist(ddpc.zeros(2, 3, 4))
    with pytest.raises(ValueError, match="non-negative"):
        F.pdist(ddpc.zeros(2, 3), -1)
    assert F.pdist(ddpc.zeros(1, 3)).shape == (0,)


def test_gumbel_softmax_samples_the_softmax():
    """The Gumbel-max trick: the hard sample's class follows softmax(logits),
    at any temperature."""
    ddpc.manual_seed(0)
    probs = np.array([0.1, 0.2, 0.3, 0.4])
    logits = ddpc.tensor(np.tile(np.log(probs), (40000, 1)))
    for tau in (0.3, 1.0):
        y = np.asarray(F.gumbel_softmax(logits, tau=tau, hard=True))
        assert set(np.unique(y)) == {0.0, 1.0} and (y.sum(1) == 1).all()
        np.testing.assert_allclose(y.mean(0), probs, atol=0.01)
    soft = np.asarray(F.gumbel_softmax(logits[:10], tau=2.0, dim=0))
    np.testing.assert_allclose(soft.sum(0), 1, rtol=1e-12)


def test_gumbel_softmax_hard_is_straight_through():
    logits0, weight = np.random.default_rng(1).standard_normal((2, 6, 3)), np.random.default_rng(2).random((2, 6, 3))
    grads = []
    for hard in (True, False):
        ddpc.manual_seed(3)
        logits = ddpc.tensor(logits0, requires_grad=True)
        y = F.gumbel_softmax(logits, tau=0.7, hard=hard, dim=1)
        (y * ddpc.tensor(weight)).sum().backward()
        grads.append(np.asarray(logits.grad))
        if hard:
            hard_y = np.asarray(y.detach())
    np.testing.assert_array_equal(grads[0], grads[1])
    assert (hard_y.sum(1) == 1).all()


# ---- pointwise ---------------------------------------------------------------------------------

def test_fmax_fmin():
    a0 = np.array([1.0, np.nan, 3.0, np.nan, 2.0, -1.0])
    b0 = np.array([2.0, 1.0, np.nan, np.nan, 2.0, -3.0])
    for fn, ref in ((ddpc.fmax, np.fmax), (ddpc.fmin, np.fmin)):
        a, b = ddpc.tensor(a0, requires_grad=True), ddpc.tensor(b0, requires_grad=True)
        y = fn(a, b)
        np.testing.assert_array_equal(np.asarray(y.detach()), ref(a0, b0))
        y.sum().backward()
        took_a = ((ref(a0, b0) == a0) | np.isnan(b0)).astype(float)  # NaN on both sides: a
        took_a[4] = 0.5  # a tie: half each
        np.testing.assert_array_equal(np.asarray(a.grad), took_a)
        np.testing.assert_array_equal(np.asarray(b.grad), 1 - took_a)
    np.testing.assert_array_equal(np.asarray(ddpc.fmax(ddpc.tensor([1, 5]), ddpc.tensor([3, 2]))), [3, 5])
    with pytest.raises(TypeError):
        ddpc.fmax(ddpc.tensor([1.0]), 2.0)


def test_float_power():
    y = ddpc.float_power(ddpc.tensor([2, 3]), 2)
    assert y.dtype is ddpc.float64
    np.testing.assert_array_equal(np.asarray(y), [4, 9])
    np.testing.assert_allclose(np.asarray(ddpc.float_power(2, ddpc.tensor([0.5, 3.0]))), [2 ** 0.5, 8])
    x = ddpc.tensor([1.5, 2.0], dtype=ddpc.float32, requires_grad=True)
    ddpc.float_power(x, ddpc.tensor([2.0, 3.0])).sum().backward()
    np.testing.assert_allclose(np.asarray(x.grad), [3.0, 12.0])


# ---- searching and layout ------------------------------------------------------------------------

def test_isin():
    rng = np.random.default_rng(4)
    a, b = rng.integers(0, 20, (4, 5)), rng.integers(0, 20, 7)
    np.testing.assert_array_equal(np.asarray(ddpc.isin(ddpc.tensor(a), ddpc.tensor(b))), np.isin(a, b))
    np.testing.assert_array_equal(np.asarray(ddpc.isin(ddpc.tensor(a), ddpc.tensor(b), invert=True)),
                                  np.isin(a, b, invert=True))
    np.testing.assert_array_equal(np.asarray(ddpc.isin(ddpc.tensor([1.0, np.nan, 2.5]), ddpc.tensor([2.5, np.nan]))),
                                  [0, 0, 1])
    assert int(ddpc.isin(3, ddpc.tensor([1, 3]))) == 1
    np.testing.assert_array_equal(np.asarray(ddpc.isin(ddpc.tensor([1, 2]), 2)), [0, 1])
    assert not np.asarray(ddpc.isin(ddpc.tensor([1, 2]), ddpc.tensor([], dtype=ddpc.int64))).any()


@pytest.mark.parametrize("offset,dim1,dim2", [(0, -2, -1), (1, 0, 2), (-2, 2, 0), (2, -1, 1)])
def test_diag_embed(offset, dim1, dim2):
    x0 = np.random.default_rng(5).standard_normal((2, 3))
    y = ddpc.diag_embed(ddpc.tensor(x0), offset, dim1, dim2)
    m = 3 + abs(offset)
    want = np.zeros((2, m, m))
    for b in range(2):
        want[b] = np.diag(x0[b], offset)
    want = np.moveaxis(want, (1, 2), (dim1 % 3, dim2 % 3))
    np.testing.assert_array_equal(np.asarray(y), want)
    x = ddpc.tensor(x0, requires_grad=True)
    weight = np.random.default_rng(6).standard_normal(want.shape)
    (ddpc.diag_embed(x, offset, dim1, dim2) * ddpc.tensor(weight)).sum().backward()
    back = np.moveaxis(weight, (dim1 % 3, dim2 % 3), (1, 2))
    np.testing.assert_allclose(np.asarray(x.grad), [np.diag(back[b], offset) for b in range(2)])
    with pytest.raises(ValueError, match="identical"):
        ddpc.diag_embed(ddpc.tensor(x0), 0, 1, 1)


def test_diagflat():
    x = np.arange(1, 5).reshape(2, 2)
    for k in (0, 1, -2):
        np.testing.assert_array_equal(np.asarray(ddpc.diagflat(ddpc.tensor(x), k)), np.diagflat(x, k))


def test_unravel_index():
    shape = (3, 4, 5)
    flat = np.array([[0, 7], [59, 23]])
    got = ddpc.unravel_index(ddpc.tensor(flat), shape)
    for g, w in zip(got, np.unravel_index(flat, shape)):
        assert g.dtype is ddpc.int64
        np.testing.assert_array_equal(np.asarray(g), w)
    assert [int(v) for v in ddpc.unravel_index(-1, shape)] == [2, 3, 4]
    with pytest.raises(ValueError, match="out of bounds"):
        ddpc.unravel_index(ddpc.tensor([60]), shape)
    with pytest.raises(TypeError):
        ddpc.unravel_index(ddpc.tensor([1.0]), shape)


def _runs(values):
    groups = [(k, len(list(g))) for k, g in itertools.groupby(values)]
    inverse = np.repeat(np.arange(len(groups)), [n for _, n in groups])
    return [k for k, _ in groups], inverse, [n for _, n in groups]


def test_unique_consecutive():
    x0 = np.array([[1, 1, 2], [2, 2, 3], [1, 1, 1]])
    values, inverse, counts = ddpc.unique_consecutive(ddpc.tensor(x0), return_inverse=True, return_counts=True)
    want = _runs(x0.ravel().tolist())
    np.testing.assert_array_equal(np.asarray(values), want[0])
    np.testing.assert_array_equal(np.asarray(inverse), want[1].reshape(3, 3))
    np.testing.assert_array_equal(np.asarray(counts), want[2])
    np.testing.assert_array_equal(np.asarray(ddpc.unique_consecutive(ddpc.tensor([1.0, np.nan, np.nan]))).ravel()[:1],
                                  [1.0])
    assert ddpc.unique_consecutive(ddpc.tensor([1.0, np.nan, np.nan])).shape == (3,)
    m = np.array([[1, 1, 2, 2, 1], [3, 3, 4, 4, 3]])
    values, inverse, counts = ddpc.unique_consecutive(ddpc.tensor(m), return_inverse=True, return_counts=True, dim=1)
    np.testing.assert_array_equal(np.asarray(values), [[1, 2, 1], [3, 4, 3]])
    np.testing.assert_array_equal(np.asarray(inverse), [0, 0, 1, 1, 2])
    np.testing.assert_array_equal(np.asarray(counts), [2, 2, 1])


# ---- windows ----------------------------------------------------------------------------------------

@pytest.mark.parametrize("name,ref", [("hann_window", np.hanning), ("hamming_window", np.hamming),
                                      ("blackman_window", np.blackman), ("bartlett_window", np.bartlett)])
def test_windows(name, ref):
    fn = getattr(ddpc, name)
    for n in (0, 1, 2, 7, 16):
        np.testing.assert_allclose(np.asarray(fn(n, periodic=False, dtype=ddpc.float64)), ref(n), atol=1e-15)
        np.testing.assert_allclose(np.asarray(fn(n, dtype=ddpc.float64)), ref(n + 1)[:n] if n > 1 else ref(n),
                                   atol=1e-15)
    assert fn(5).dtype is ddpc.get_default_dtype()
    with pytest.raises(TypeError, match="floating"):
        fn(4, dtype=ddpc.int64)


# ---- nn.utils: fusion, the older spectral_norm, skip_init --------------------------------------

def _eval_bn(bn, seed):
    rng = np.random.default_rng(seed)
    n = bn.num_features
    with ddpc.no_grad():
        bn.running_mean.copy_(ddpc.tensor(rng.standard_normal(n)))
        bn.running_var.copy_(ddpc.tensor(rng.uniform(0.5, 2.0, n)))
        bn.weight.copy_(ddpc.tensor(rng.standard_normal(n)))
        bn.bias.copy_(ddpc.tensor(rng.standard_normal(n)))
    return bn.eval()


@pytest.mark.parametrize("transpose", [False, True])
def test_fuse_conv_bn_eval(transpose):
    conv = (nn.ConvTranspose2d(3, 4, 3, stride=2) if transpose else nn.Conv2d(3, 4, 3, padding=1)).eval()
    bn = _eval_bn(nn.BatchNorm2d(4), 7)
    fused = nn.utils.fuse_conv_bn_eval(conv, bn, transpose=transpose)
    x = ddpc.randn(2, 3, 5, 5)
    np.testing.assert_allclose(np.asarray(fused(x).detach()), np.asarray(bn(conv(x)).detach()), rtol=1e-4,
                               atol=1e-5)
    assert isinstance(fused.weight, nn.Parameter) and fused is not conv
    with pytest.raises(ValueError, match="eval"):
        nn.utils.fuse_conv_bn_eval(conv.train(), bn)


def test_fuse_linear_bn_eval():
    linear, bn = nn.Linear(5, 3, bias=False).eval(), _eval_bn(nn.BatchNorm1d(3), 8)
    fused = nn.utils.fuse_linear_bn_eval(linear, bn)
    x = ddpc.randn(4, 5)
    np.testing.assert_allclose(np.asarray(fused(x).detach()), np.asarray(bn(linear(x)).detach()), rtol=1e-4,
                               atol=1e-5)
    with pytest.raises(ValueError, match="num_features"):
        nn.utils.fuse_linear_bn_eval(linear, _eval_bn(nn.BatchNorm1d(4), 9))


def test_old_spectral_norm():
    ddpc.manual_seed(0)
    m = nn.utils.spectral_norm(nn.Linear(6, 4))
    assert sorted(dict(m.named_parameters())) == ["bias", "weight_orig"]
    assert sorted(dict(m.named_buffers())) == ["weight_u", "weight_v"]
    x = ddpc.randn(3, 6)
    for _ in range(30):
        y = m(x)
    assert abs(np.linalg.svd(np.asarray(m.weight.detach()), compute_uv=False)[0] - 1) < 1e-4
    y.sum().backward()
    assert m.weight_orig.grad.shape == (4, 6)
    m.eval()
    u = np.asarray(m.weight_u).copy()
    m(x)
    np.testing.assert_array_equal(np.asarray(m.weight_u), u)
    with pytest.raises(RuntimeError, match="two"):
        nn.utils.spectral_norm(m)
    weight = np.asarray(m.weight.detach()).copy()
    nn.utils.remove_spectral_norm(m)
    assert sorted(dict(m.named_parameters())) == ["bias", "weight"] and not dict(m.named_buffers())
    np.testing.assert_allclose(np.asarray(m.weight.detach()), weight, rtol=1e-6)
    with pytest.raises(ValueError, match="not found"):
        nn.utils.remove_spectral_norm(m)


def test_old_spectral_norm_of_a_transposed_convolution_uses_dim_1():
    m = nn.utils.spectral_norm(nn.ConvTranspose2d(3, 5, 2))
    assert m.weight_u.shape == (5,) and m.weight_v.shape == (3 * 2 * 2,)


def test_skip_init():
    m = nn.utils.skip_init(nn.Linear, 3, 2, bias=False)
    assert isinstance(m, nn.Linear) and m.weight.shape == (2, 3) and m.bias is None

    class NoDevice(nn.Module):
        def __init__(self, n):
            super().__init__()

    with pytest.raises(RuntimeError, match="device"):
        nn.utils.skip_init(NoDevice, 3)


# ---- torch-level forms of nn.functional ------------------------------------------------------------

def test_torch_level_forms_map_onto_F():
    rng = np.random.default_rng(10)
    x, c = ddpc.tensor(rng.standard_normal((2, 3, 4))), ddpc.tensor(rng.uniform(0.5, 2, 3))
    np.testing.assert_array_equal(np.asarray(ddpc.batch_norm(x, c, c + 1, c * 0.1, c, False, 0.1, 1e-5, False)),
                                  np.asarray(F.batch_norm(x, c * 0.1, c, c, c + 1, False, 0.1, 1e-5)))
    np.testing.assert_array_equal(np.asarray(ddpc.instance_norm(x, c, None, None, None, True, 0.1, 1e-5, False)),
                                  np.asarray(F.instance_norm(x, weight=c)))
    table, ids = ddpc.tensor(rng.standard_normal((5, 2))), ddpc.tensor([[1, 4], [0, 1]])
    np.testing.assert_array_equal(np.asarray(ddpc.embedding(table, ids)), np.asarray(table)[np.asarray(ids)])
    a, b = ddpc.tensor(rng.standard_normal((3, 4))), ddpc.tensor(rng.random((3, 4)))
    for code, name in ((0, "none"), (2, "sum")):
        np.testing.assert_array_equal(np.asarray(ddpc.kl_div(a, b, code)), np.asarray(F.kl_div(a, b, reduction=name)))
    np.testing.assert_allclose(float(ddpc.kl_div(a, b)), float(F.kl_div(a, b, reduction="sum")) / 12, rtol=1e-12)
    with pytest.raises(ValueError, match="reduction"):
        ddpc.kl_div(a, b, 3)
    values, indices = ddpc.adaptive_max_pool1d(ddpc.tensor([[[1.0, 3.0, 2.0, 0.0]]]), 2)
    np.testing.assert_array_equal(np.asarray(values).ravel(), [3, 2])
    np.testing.assert_array_equal(np.asarray(indices).ravel(), [1, 2])
    np.testing.assert_array_equal(np.asarray(ddpc.dropout(a, 0.5, False)), np.asarray(a))
    y = ddpc.tensor([-1.0, 2.0])
    assert ddpc.relu_(y) is y and np.asarray(y).tolist() == [0.0, 2.0]
    assert ddpc.conv2d is F.conv2d and ddpc.max_pool2d is F.max_pool2d


# ---- Tensor aliases and in-place forms --------------------------------------------------------------

def test_aliases_name_the_same_ops():
    a, b = ddpc.tensor([[1.0, -2.0, 3.0]]), ddpc.tensor([[2.0, -2.0, 1.0]])
    for alias, op in (("multiply", np.multiply), ("divide", np.divide), ("subtract", np.subtract),
                      ("greater", np.greater), ("greater_equal", np.greater_equal), ("less", np.less),
                      ("less_equal", np.less_equal), ("not_equal", np.not_equal)):
        want = op(np.asarray(a), np.asarray(b))
        np.testing.assert_array_equal(np.asarray(getattr(a, alias)(b)), want, err_msg=alias)
        if hasattr(ddpc, alias):
            np.testing.assert_array_equal(np.asarray(getattr(ddpc, alias)(a, b)), want, err_msg=alias)
    np.testing.assert_array_equal(np.asarray(ddpc.negative(a)), -np.asarray(a))
    assert ddpc.positive(a) is a
    np.testing.assert_array_equal(np.asarray(ddpc.fix(ddpc.tensor([-1.5, 2.7]))), [-1, 2])
    m = np.arange(6.0).reshape(2, 3)
    np.testing.assert_array_equal(np.asarray(ddpc.ravel(ddpc.tensor(m))), m.ravel())
    np.testing.assert_array_equal(np.asarray(ddpc.fliplr(ddpc.tensor(m))), np.fliplr(m))
    np.testing.assert_array_equal(np.asarray(ddpc.flipud(ddpc.tensor(m))), np.flipud(m))
    with pytest.raises(ValueError):
        ddpc.fliplr(ddpc.tensor([1.0]))
    np.testing.assert_allclose(np.asarray(ddpc.inner(ddpc.tensor(m), ddpc.tensor(m))), np.inner(m, m))
    np.testing.assert_allclose(float(ddpc.vdot(ddpc.tensor(m[0]), ddpc.tensor(m[1]))), np.vdot(m[0], m[1]))
    np.testing.assert_allclose(np.asarray(ddpc.ger(ddpc.tensor(m[0]), ddpc.tensor(m[1]))), np.outer(m[0], m[1]))
    assert ddpc.is_signed(a) and not ddpc.tensor([1], dtype=ddpc.uint8).is_signed()
    assert a.is_same_size(b) and not a.is_same_size(ddpc.tensor([1.0])) and not a.is_complex()
    x = ddpc.tensor(np.arange(24.0).reshape(2, 3, 4))
    want = np.arange(24.0).reshape(2, 3, 4).sum((0, 2))[:, None]
    np.testing.assert_array_equal(np.asarray(x.sum_to_size(3, 1)), want)
    with pytest.raises(ValueError, match="expandable"):
        x.sum_to_size(2, 4)


INPLACE = [("multiply_", (2.0,)), ("divide_", (4.0,)), ("subtract_", (1.5,)), ("true_divide_", (2.0,)),
           ("greater_", (0.0,)), ("greater_equal_", (1.0,)), ("less_", (1.0,)), ("less_equal_", (1.0,)),
           ("not_equal_", (1.0,)), ("eq_", (1.0,)), ("ne_", (1.0,)), ("gt_", (0.0,)), ("ge_", (1.0,)),
           ("lt_", (1.0,)), ("le_", (1.0,)), ("negative_", ()), ("fix_", ()), ("tril_", ()), ("triu_", (1,)),
           ("cumsum_", (1,)), ("cumprod_", (0,)), ("renorm_", (2, 0, 1.0)), ("remainder_", (1.5,)),
           ("fmod_", (1.5,)), ("floor_divide_", (0.7,)), ("logical_not_", ())]


@pytest.mark.parametrize("name,args", INPLACE, ids=[c[0] for c in INPLACE])
def test_inplace_forms_write_the_op_into_the_tensor(name, args):
    x0 = np.array([[1.0, -2.5, 0.0], [3.25, 1.0, -0.5]])
    x = ddpc.tensor(x0)
    want = getattr(ddpc.tensor(x0), name[:-1])(*args)
    assert getattr(x, name)(*args) is x
    np.testing.assert_array_equal(np.asarray(x), np.asarray(want).astype(np.float64))


def test_inplace_forms_in_the_graph():
    w = ddpc.tensor(np.arange(1.0, 7.0).reshape(2, 3), requires_grad=True)
    y = w * 1
    y.multiply_(3).cumsum_(1)
    y.sum().backward()
    np.testing.assert_array_equal(np.asarray(w.grad), [[9, 6, 3], [9, 6, 3]])
    b = ddpc.tensor([[1, 0], [1, 1]], dtype=ddpc.uint8)
    b.logical_and_(ddpc.tensor([[1, 1], [0, 1]], dtype=ddpc.uint8))
    np.testing.assert_array_equal(np.asarray(b), [[1, 0], [0, 1]])
    i = ddpc.tensor([5, -3])
    i.bitwise_not_()
    np.testing.assert_array_equal(np.asarray(i), [-6, 2])


def test_inplace_view_ops_change_the_shape():
    m = np.arange(6.0).reshape(2, 3)
    x = ddpc.tensor(m)
    assert x.t_() is x and x.shape == (3, 2)
    np.testing.assert_array_equal(np.asarray(x), m.T)
    x.unsqueeze_(1)
    assert x.shape == (3, 1, 2)
    x.squeeze_(1).transpose_(0, 1)
    np.testing.assert_array_equal(np.asarray(x), m)
    x.swapaxes_(0, 1).swapdims_(1, 0)
    np.testing.assert_array_equal(np.asarray(x), m)
    leaf = ddpc.tensor(m, requires_grad=True)
    with pytest.raises(RuntimeError, match="in place"):
        leaf.t_()


# ---- fractional max pooling -------------------------------------------------------------------------

def _fractional_reference(x, kernel, out, samples, order):
    """Per-volume loops over PyTorch's interval rule (samples[order[d]] drives dim d)."""
    nd = len(kernel)
    planes = x.reshape((-1,) + x.shape[-nd:])
    flat_samples = samples.reshape(-1, nd)
    values = np.zeros((planes.shape[0],) + out)
    indices = np.zeros(values.shape, np.int64)
    for p in range(planes.shape[0]):
        starts = []
        for d in range(nd):
            n, k, o, u = x.shape[-nd + d], kernel[d], out[d], flat_samples[p, order[d]]
            alpha = (n - k) / (o - 1) if o > 1 else 0
            starts.append([int((i + u) * alpha) - int(u * alpha) for i in range(o - 1)] + [n - k])
        for o in np.ndindex(*out):
            box = tuple(slice(starts[d][o[d]], starts[d][o[d]] + kernel[d]) for d in range(nd))
            window = planes[p][box]
            at = np.unravel_index(np.argmax(window), window.shape)
            values[(p,) + o] = window[at]
            indices[(p,) + o] = np.ravel_multi_index(tuple(box[d].start + at[d] for d in range(nd)), x.shape[-nd:])
    return values.reshape(x.shape[:-nd] + out), indices.reshape(x.shape[:-nd] + out)


@pytest.mark.parametrize("nd,shape,kernel,out", [(2, (2, 3, 9, 11), (2, 3), (4, 5)), (2, (3, 8, 8), (3, 3), (6, 1)),
                                                 (3, (1, 2, 6, 7, 8), (2, 2, 3), (3, 4, 5))])
def test_fractional_max_pool(nd, shape, kernel, out):
    rng = np.random.default_rng(11)
    x0 = rng.standard_normal(shape)
    batch = shape[0] if len(shape) == nd + 2 else 1
    samples = rng.random((batch, shape[-nd - 1], nd))
    pool = getattr(F, f"fractional_max_pool{nd}d")
    values, indices = pool(ddpc.tensor(x0), kernel, out, return_indices=True, _random_samples=ddpc.tensor(samples))
    want_values, want_indices = _fractional_reference(x0, kernel, out, samples, (1, 0) if nd == 2 else (0, 1, 2))
    np.testing.assert_array_equal(np.asarray(values), want_values)
    np.testing.assert_array_equal(np.asarray(indices), want_indices)
    weight = rng.standard_normal(values.shape)
    x = ddpc.tensor(x0, requires_grad=True)
    (pool(x, kernel, out, _random_samples=ddpc.tensor(samples)) * ddpc.tensor(weight)).sum().backward()
    grad = np.zeros(x0.size)
    planes = np.arange(want_indices.size) // math.prod(out) * math.prod(shape[-nd:])
    np.add.at(grad, planes + want_indices.ravel(), weight.ravel())
    np.testing.assert_array_equal(np.asarray(x.grad), grad.reshape(shape))


def test_fractional_max_pool_modules():
    ddpc.manual_seed(0)
    m = nn.FractionalMaxPool2d(3, output_ratio=(0.5, 0.7), return_indices=True)
    values, indices = m(ddpc.randn(2, 3, 10, 9))
    assert values.shape == (2, 3, 5, 6) and indices.dtype is ddpc.int64
    assert nn.FractionalMaxPool3d(2, output_size=3)(ddpc.randn(2, 5, 6, 7)).shape == (2, 3, 3, 3)
    with pytest.raises(ValueError, match="output_ratio"):
        nn.FractionalMaxPool2d(2, output_ratio=1.5)
    with pytest.raises(ValueError, match="either"):
        F.fractional_max_pool2d(ddpc.randn(1, 1, 5, 5), 2)
    with pytest.raises(ValueError, match="does not fit"):
        F.fractional_max_pool2d(ddpc.randn(1, 1, 5, 5), 3, 4)
    with pytest.raises(ValueError, match="_random_samples"):
        F.fractional_max_pool2d(ddpc.randn(1, 1, 5, 5), 2, 3, _random_samples=ddpc.rand(1, 1, 3))
