"""nn.utils.parametrize, parametrizations.weight_norm / spectral_norm and the
older nn.utils.weight_norm, against numpy: values, gradients, state-dict
keys, assignment, removal and pickling."""

import io
import pickle

import numpy as np
import pytest
from numeric import numeric_grad

import ddpc
from ddpc import nn, optim
from ddpc.nn.utils import parametrizations, parametrize


def linear(seed=0, n_in=4, n_out=3):
    ddpc.manual_seed(seed)
    return nn.Linear(n_in, n_out).double()


def np_weight_norm(v, g, dim):
    axes = tuple(i for i in range(v.ndim) if i != dim) if dim != -1 else None
    return v * g / np.sqrt((v * v).sum(axis=axes, keepdims=dim != -1))


@pytest.mark.parametrize("dim", [0, 1, None])
def test_weight_norm_keeps_the_weight_and_splits_it_into_magnitude_and_direction(dim):
    m = linear()
    w = m.weight.detach().numpy().copy()
    parametrizations.weight_norm(m, dim=dim)
    assert type(m).__name__ == "ParametrizedLinear" and parametrize.type_before_parametrizations(m) is nn.Linear
    assert [n for n, _ in m.named_parameters()] == ["bias", "parametrizations.weight.original0",
                                                    "parametrizations.weight.original1"]
    g = m.parametrizations.weight.original0.detach().numpy()
    want_g = {0: np.linalg.norm(w, axis=1, keepdims=True), 1: np.linalg.norm(w, axis=0, keepdims=True),
              None: np.linalg.norm(w)}[dim]
    np.testing.assert_allclose(g, want_g, rtol=1e-12)
    np.testing.assert_allclose(m.weight.detach().numpy(), w, rtol=1e-12)


def test_weight_norm_gradients_reach_g_and_v():
    m = linear()
    parametrizations.weight_norm(m)
    x = np.random.default_rng(1).standard_normal((5, 4))
    out = m(ddpc.tensor(x))
    (out * out).sum().backward()
    g0 = m.parametrizations.weight.original0.detach().numpy()
    v0 = m.parametrizations.weight.original1.detach().numpy()
    b = m.bias.detach().numpy()

    def loss(g, v):
        y = x @ np_weight_norm(v, g, 0).T + b
        return (y * y).sum()

    np.testing.assert_allclose(m.parametrizations.weight.original0.grad.numpy(),
                               numeric_grad(lambda g: loss(g, v0), g0), rtol=1e-6)
    np.testing.assert_allclose(m.parametrizations.weight.original1.grad.numpy(),
                               numeric_grad(lambda v: loss(g0, v), v0), rtol=1e-6)


def test_assigning_and_removing_a_parametrization():
    m = linear()
    parametrizations.weight_norm(m)
    opt = optim.SGD(m.parameters(), lr=0.1)
    new = np.arange(12.0).reshape(3, 4) - 5
    m.weight = ddpc.tensor(new)
    np.testing.assert_allclose(m.weight.detach().numpy(), new, rtol=1e-12)
    m(ddpc.ones(2, 4, dtype=ddpc.float64)).sum().backward()
    opt.step()  # the optimizer holds the originals, which assignment kept
    trained = m.weight.detach().numpy().copy()
    assert not np.allclose(trained, new)
    parametrize.remove_parametrizations(m, "weight")
    assert type(m) is nn.Linear and not parametrize.is_parametrized(m)
    assert [n for n, _ in m.named_parameters()] == ["bias", "weight"]
    np.testing.assert_allclose(m.weight.detach().numpy(), trained, rtol=1e-12)
    with pytest.raises(ValueError, match="no parametrization"):
        parametrize.remove_parametrizations(m, "weight")


class Symmetric(nn.Module):
    def forward(self, x):
        return x.triu() + x.triu(1).t()

    def right_inverse(self, a):
        return a.triu()


class Scale(nn.Module):
    def __init__(self, k):
        super().__init__()
        self.k = k

    def forward(self, x):
        return x * self.k

    def right_inverse(self, x):
        return x / self.k


def test_a_chain_of_custom_parametrizations_and_cached():
    m = nn.Linear(3, 3).double()
    parametrize.register_parametrization(m, "weight", Symmetric())
    parametrize.register_parametrization(m, "weight", Scale(2.0))
    w = m.weight.detach().numpy()
    np.testing.assert_allclose(w, w.T)
    orig = m.parametrizations.weight.original.detach().numpy()
    np.testing.assert_allclose(w, 2 * (np.triu(orig) + np.triu(orig, 1).T), rtol=1e-12)
    assert m.weight is not m.weight
    with parametrize.cached():
        assert m.weight is m.weight
    sym = np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 5.0], [3.0, 5.0, 6.0]])
    m.weight = ddpc.tensor(sym)  # through both right_inverses
    np.testing.assert_allclose(m.weight.detach().numpy(), sym, rtol=1e-12)
    np.testing.assert_allclose(m.parametrizations.weight.original.detach().numpy(), np.triu(sym) / 2)


class Rows(nn.Module):
    def forward(self, x):
        return x[:1]


def test_shape_changes_need_unsafe_and_buffers_can_be_parametrized():
    m = linear()
    with pytest.raises(ValueError, match="unsafe=True"):
        parametrize.register_parametrization(m, "weight", Rows())
    assert not parametrize.is_parametrized(m)
    parametrize.register_parametrization(m, "weight", Rows(), unsafe=True)
    assert m.weight.shape == (1, 4)
    with pytest.raises(ValueError, match="no parameter or buffer"):
        parametrize.register_parametrization(m, "nothing", Scale(1.0))
    bn = nn.BatchNorm1d(3).double()
    parametrize.register_parametrization(bn, "running_var", Scale(3.0))
    assert "parametrizations.running_var.original" in bn.state_dict()
    assert "parametrizations.running_var.original" not in dict(bn.named_parameters())
    np.testing.assert_allclose(bn.running_var.numpy(), np.ones(3))  # right_inverse stored 1/3
    np.testing.assert_allclose(bn.parametrizations.running_var.original.numpy(), np.full(3, 1 / 3))


def test_spectral_norm_divides_by_the_largest_singular_value():
    ddpc.manual_seed(0)
    conv = nn.Conv2d(3, 5, 3).double()
    w = conv.weight.detach().numpy().copy()
    parametrizations.spectral_norm(conv)
    state = conv.state_dict()
    assert {"parametrizations.weight.original", "parametrizations.weight.0._u",
            "parametrizations.weight.0._v"} <= set(state)
    x = ddpc.randn(1, 3, 6, 6, dtype=ddpc.float64)
    for _ in range(20):
        conv(x)
    sigma = np.linalg.svd(w.reshape(5, -1), compute_uv=False)[0]
    np.testing.assert_allclose(conv.weight.detach().numpy(), w / sigma, rtol=1e-6)
    conv.eval()
    u = conv.parametrizations.weight[0]._u.numpy().copy()
    conv(x)
    np.testing.assert_array_equal(conv.parametrizations.weight[0]._u.numpy(), u)  # no power step in eval
    conv(x).sum().backward()
    assert conv.parametrizations.weight.original.grad.shape == w.shape


def test_spectral_norm_rows_dim_and_vectors():
    t = nn.ConvTranspose2d(4, 2, 3).double()
    w = t.weight.detach().numpy().copy()  # (in 4, out 2, 3, 3): dim 1 is the rows
    parametrizations.spectral_norm(t, n_power_iterations=30)
    sigma = np.linalg.svd(np.moveaxis(w, 1, 0).reshape(2, -1), compute_uv=False)[0]
    t(ddpc.randn(1, 4, 3, 3, dtype=ddpc.float64))
    np.testing.assert_allclose(t.weight.detach().numpy(), w / sigma, rtol=1e-6)
    m = nn.Module()
    m.register_parameter("v", nn.Parameter(ddpc.tensor([3.0, 4.0], dtype=ddpc.float64)))
    parametrizations.spectral_norm(m, "v")
    np.testing.assert_allclose(m.v.detach().numpy(), [0.6, 0.8])
    with pytest.raises(ValueError, match="n_power_iterations"):
        parametrizations.spectral_norm(linear(), n_power_iterations=0)


def test_older_weight_norm_recomputes_the_weight_before_each_forward():
    m = linear()
    w = m.weight.detach().numpy().copy()
    nn.utils.weight_norm(m)
    assert sorted(n for n, _ in m.named_parameters()) == ["bias", "weight_g", "weight_v"]
    np.testing.assert_allclose(m.weight.detach().numpy(), w, rtol=1e-12)
    with ddpc.no_grad():
        m.weight_g.mul_(2)
    m(ddpc.ones(1, 4, dtype=ddpc.float64))
    np.testing.assert_allclose(m.weight.detach().numpy(), 2 * w, rtol=1e-12)
    with pytest.raises(RuntimeError, match="two weight_norm"):
        nn.utils.weight_norm(m)
    nn.utils.remove_weight_norm(m)
    assert sorted(n for n, _ in m.named_parameters()) == ["bias", "weight"]
    np.testing.assert_allclose(m.weight.detach().numpy(), 2 * w, rtol=1e-12)


@pytest.mark.parametrize("norm, remove, hook", [
    (nn.utils.weight_norm, nn.utils.remove_weight_norm, "WeightNorm"),
    (nn.utils.spectral_norm, nn.utils.remove_spectral_norm, "SpectralNorm")])
def test_older_weight_and_spectral_norm_modules_pickle_whole(norm, remove, hook):
    m = norm(linear())
    x = ddpc.ones(2, 4, dtype=ddpc.float64)
    m(x)
    m.eval()
    want = m(x).detach().numpy()
    buf = io.BytesIO()
    ddpc.save(m, buf)
    buf.seek(0)
    for copy in (ddpc.load(buf, weights_only=False), pickle.loads(pickle.dumps(m))):
        assert [type(h).__name__ for h in copy._forward_pre_hooks.values()] == [hook]  # the hooks, as PyTorch keeps them
        assert sorted(copy.state_dict()) == sorted(m.state_dict())
        np.testing.assert_allclose(copy(x).detach().numpy(), want, rtol=1e-12)
        remove(copy)
        assert not copy._forward_pre_hooks and sorted(dict(copy.named_parameters())) == ["bias", "weight"]
        np.testing.assert_allclose(copy.weight.detach().numpy(), m.weight.detach().numpy(), rtol=1e-12)
    assert len(m._forward_pre_hooks) == 1


def test_weight_norm_loads_a_checkpoint_of_the_older_weight_norm():
    old = nn.Sequential(linear())
    w = old[0].weight.detach().numpy().copy()
    nn.utils.weight_norm(old[0])
    checkpoint = old.state_dict()  # weight_g and weight_v
    new = nn.Sequential(parametrizations.weight_norm(linear(seed=1)))
    assert new.load_state_dict(checkpoint) == ([], [])
    np.testing.assert_allclose(new[0].weight.detach().numpy(), w, rtol=1e-12)
    assert list(new.state_dict()) == ["0.bias", "0.parametrizations.weight.original0",
                                      "0.parametrizations.weight.original1"]


class Doubled(nn.Module):
    def forward(self, x):
        return x * 2


@pytest.mark.parametrize("unsafe", [False, True])
def test_assigning_needs_a_right_inverse_in_every_parametrization(unsafe):
    m = linear()
    parametrize.register_parametrization(m, "weight", Doubled(), unsafe=unsafe)
    before = m.weight.detach().numpy().copy()
    with pytest.raises(RuntimeError, match=r"^parametrization Doubled does not implement right_inverse\.$"):
        m.weight = ddpc.zeros(3, 4, dtype=ddpc.float64)
    np.testing.assert_array_equal(m.weight.detach().numpy(), before)
