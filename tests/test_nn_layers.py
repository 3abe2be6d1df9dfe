"""Parameter containers and the group/instance/RMS normalisation, GLU, Softmin and
Unflatten layers against numpy references (outputs and gradients)."""

import numpy as np
import pytest
from numeric import numeric_grad

import ddpc
from ddpc import nn
from ddpc.nn import functional as F


def _x(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def _group_norm_ref(x, groups, eps=1e-5):
    g = x.reshape(x.shape[0], groups, -1)
    out = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + eps)
    return out.reshape(x.shape)


@pytest.mark.parametrize("layer, ref", [
    (lambda: nn.GroupNorm(2, 4), lambda x: _group_norm_ref(x, 2)),
    (lambda: nn.InstanceNorm2d(4), lambda x: _group_norm_ref(x, 4)),
    (lambda: nn.RMSNorm((3, 2)), lambda x: x / np.sqrt((x.reshape(2, 4, -1) ** 2).mean(-1).reshape(2, 4, 1, 1)
                                                        + np.finfo(np.float64).eps)),
    (lambda: nn.GLU(1), lambda x: x[:, :2] / (1 + np.exp(-x[:, 2:]))),
    (lambda: nn.Softmin(1), lambda x: np.exp(-x) / np.exp(-x).sum(1, keepdims=True)),
])
def test_layer_output_and_input_gradient_match_numpy(layer, ref):
    x = _x(2, 4, 3, 2)
    g = _x(*ref(x).shape, seed=1)
    m = layer().double()
    t = ddpc.tensor(x, requires_grad=True)
    out = m(t)
    np.testing.assert_allclose(out.numpy(), ref(x), rtol=1e-9, atol=1e-10)
    out.backward(ddpc.tensor(g))
    np.testing.assert_allclose(t.grad.numpy(), numeric_grad(lambda a: (ref(a) * g).sum(), x), rtol=1e-5, atol=1e-6)


def test_group_norm_affine_parameters_and_their_gradients():
    x, g = _x(3, 4, 5), _x(3, 4, 5, seed=1)
    m = nn.GroupNorm(2, 4).double()
    with ddpc.no_grad():
        m.weight.copy_(ddpc.tensor([1.0, 2.0, 3.0, 4.0]))
        m.bias.copy_(ddpc.tensor([0.5, 0.0, -0.5, 1.0]))
    out = m(ddpc.tensor(x))
    n = _group_norm_ref(x, 2)
    np.testing.assert_allclose(out.numpy(), n * np.arange(1, 5)[:, None] + np.array([0.5, 0, -0.5, 1])[:, None],
                               rtol=1e-9, atol=1e-10)
    out.backward(ddpc.tensor(g))
    np.testing.assert_allclose(m.weight.grad.numpy(), (g * n).sum((0, 2)), rtol=1e-9)
    np.testing.assert_allclose(m.bias.grad.numpy(), g.sum((0, 2)), rtol=1e-9)
    with pytest.raises(ValueError, match="divisible"):
        nn.GroupNorm(3, 4)


def test_instance_norm_defaults_and_unbatched_input():
    m = nn.InstanceNorm1d(3)
    assert m.weight is None and list(m.parameters()) == []
    x = _x(3, 6).astype(np.float32)
    np.testing.assert_allclose(m(ddpc.tensor(x)).numpy(), _group_norm_ref(x[None], 3)[0], rtol=1e-4, atol=1e-5)
    with pytest.raises(ValueError, match="2 or 3-d"):
        m(ddpc.zeros(2))


def test_instance_norm_running_statistics():
    m = nn.InstanceNorm2d(3, momentum=0.25, track_running_stats=True).double()
    assert m.running_mean.shape == (3,) and sorted(m.state_dict()) == ["num_batches_tracked", "running_mean",
                                                                        "running_var"]
    x = _x(2, 3, 4, 5)
    m(ddpc.tensor(x))
    per_sample_mean, per_sample_var = x.mean((2, 3)), x.var((2, 3), ddof=1)
    np.testing.assert_allclose(m.running_mean.numpy(), 0.25 * per_sample_mean.mean(0), rtol=1e-12)
    np.testing.assert_allclose(m.running_var.numpy(), 0.75 + 0.25 * per_sample_var.mean(0), rtol=1e-12)
    m.eval()
    y = _x(1, 3, 4, 5)
    want = (y - m.running_mean.numpy()[:, None, None]) / np.sqrt(m.running_var.numpy()[:, None, None] + 1e-5)
    np.testing.assert_allclose(m(ddpc.tensor(y)).numpy(), want, rtol=1e-12)
    # PyTorch's positional order: input, running_mean, running_var, weight, bias
    w, b = ddpc.tensor([1.0, 2.0, 3.0], dtype=ddpc.float64), ddpc.tensor([0.0, 1.0, -1.0], dtype=ddpc.float64)
    np.testing.assert_allclose(ddpc.nn.functional.instance_norm(ddpc.tensor(y), None, None, w, b).numpy(),
                               _group_norm_ref(y, 3) * w.numpy()[:, None, None] + b.numpy()[:, None, None],
                               rtol=1e-10, atol=1e-12)


def test_rms_norm_weight_and_default_eps():
    m = nn.RMSNorm(4)
    assert m.eps is None and m.weight.shape == (4,)
    x = _x(2, 4).astype(np.float32)
    with ddpc.no_grad():
        m.weight.copy_(ddpc.tensor([1.0, 2.0, 3.0, 4.0]))
    want = x / np.sqrt((x ** 2).mean(-1, keepdims=True) + np.finfo(np.float32).eps) * [1, 2, 3, 4]
    np.testing.assert_allclose(m(ddpc.tensor(x)).numpy(), want, rtol=1e-5)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_rms_norm_of_16_bit_floats_computes_in_float32_with_its_epsilon(dtype):
    x = np.array([0.5, -0.25, 1.0], dtype=np.float32).reshape(3, 1)
    got = F.rms_norm(ddpc.tensor(x).to(dtype), (1,))
    assert got.dtype is getattr(ddpc, dtype)
    np.testing.assert_allclose(got.float().numpy(), x / np.sqrt(x * x + np.finfo(np.float32).eps), rtol=1e-2)


def test_norms_of_empty_batches_keep_their_shape():
    x = ddpc.zeros(0, 4, 2)
    assert F.batch_norm(x, ddpc.zeros(4), ddpc.ones(4), training=False).shape == (0, 4, 2)
    assert F.group_norm(x, 2).shape == (0, 4, 2)
    assert F.rms_norm(ddpc.zeros(3, 0, 4), (4,)).shape == (3, 0, 4)


def test_gelu_tanh_approximation():
    x = np.linspace(-4, 4, 17)
    want = 0.5 * x * (1 + np.tanh(np.sqrt(2 / np.pi) * (x + 0.044715 * x ** 3)))
    np.testing.assert_allclose(F.gelu(ddpc.tensor(x), approximate="tanh").numpy(), want, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(nn.GELU("tanh")(ddpc.tensor(x)).numpy(), want, rtol=1e-12, atol=1e-15)
    a = ddpc.tensor(x, requires_grad=True)
    F.gelu(a, approximate="tanh").sum().backward()
    f = lambda v: 0.5 * v * (1 + np.tanh(np.sqrt(2 / np.pi) * (v + 0.044715 * v ** 3)))
    np.testing.assert_allclose(a.grad.numpy(), numeric_grad(lambda v: float(f(v).sum()), x), rtol=1e-6, atol=1e-8)
    assert F.gelu(ddpc.tensor(x).half(), approximate="tanh").dtype is ddpc.float16
    with pytest.raises(ValueError):
        F.gelu(a, approximate="erf")


def test_glu_needs_an_even_dim_and_unflatten_splits_a_dim():
    with pytest.raises(ValueError, match="even"):
        F.glu(ddpc.zeros(2, 3))
    x = ddpc.arange(24.0).reshape(2, 12)
    assert nn.Unflatten(1, (3, -1))(x).shape == (2, 3, 4)
    np.testing.assert_array_equal(F.unflatten(x, -1, (2, 6)).numpy(), np.arange(24.0).reshape(2, 2, 6))


def test_parameter_list_and_dict_register_parameters():
    pl = nn.ParameterList([ddpc.zeros(2), nn.Parameter(ddpc.ones(3))])
    pl.append(ddpc.ones(1))
    assert len(pl) == 3 and all(isinstance(p, nn.Parameter) for p in pl)
    assert [n for n, _ in pl.named_parameters()] == ["0", "1", "2"]
    assert pl[-1].shape == (1,) and len(pl[1:]) == 2
    pd = nn.ParameterDict({"a": ddpc.zeros(2)})
    pd["b"] = ddpc.ones(3)
    assert "b" in pd and list(pd) == ["a", "b"] and isinstance(pd["a"], nn.Parameter)
    net = nn.ModuleDict({"pl": pl, "pd": pd})
    assert sorted(net.state_dict()) == ["pd.a", "pd.b", "pl.0", "pl.1", "pl.2"]
    del pd["a"]
    assert list(pd.keys()) == ["b"]
    opt = ddpc.optim.SGD(pl.parameters(), lr=1.0)
    (pl[0].sum() + pl[1].sum()).backward()
    opt.step()
    np.testing.assert_array_equal(pl[0].detach().numpy(), [-1.0, -1.0])


def test_bilinear_matches_numpy_and_its_gradients():
    rng = np.random.default_rng(3)
    x1, x2 = rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 5, 4))
    w, b = rng.standard_normal((6, 3, 4)), rng.standard_normal(6)
    got = F.bilinear(ddpc.tensor(x1), ddpc.tensor(x2), ddpc.tensor(w), ddpc.tensor(b))
    np.testing.assert_allclose(got.numpy(), np.einsum("...i,kij,...j->...k", x1, w, x2) + b, rtol=1e-12)
    weight = ddpc.tensor(w, requires_grad=True)
    F.bilinear(ddpc.tensor(x1), ddpc.tensor(x2), weight).sum().backward()
    np.testing.assert_allclose(weight.grad.numpy(), np.einsum("abi,abj->ij", x1, x2)[None].repeat(6, 0), rtol=1e-10)
    m = nn.Bilinear(3, 4, 6)
    assert [(n, p.shape) for n, p in m.named_parameters()] == [("weight", (6, 3, 4)), ("bias", (6,))]
    assert float(m.weight.detach().abs().max()) <= 1 / np.sqrt(3)
    assert m(ddpc.randn(5, 3), ddpc.randn(5, 4)).shape == (5, 6)
    assert nn.Bilinear(3, 4, 6, bias=False).bias is None
    with pytest.raises(ValueError):
        F.bilinear(ddpc.randn(5, 3), ddpc.randn(4, 4), ddpc.tensor(w))
