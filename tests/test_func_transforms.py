"""ddpc.func's transforms (grad, grad_and_value, vjp, jvp, linearize,
jacrev, jacfwd, hessian, vmap, stack_module_state) against closed-form
derivatives and plain loops."""

import numpy as np
import pytest

import ddpc
import ddpc.func as F
from ddpc import nn


def t64(values):
    return ddpc.tensor(np.asarray(values, np.float64))


def close(t, want, tol=1e-12):
    np.testing.assert_allclose(t.detach().numpy(), want, rtol=tol, atol=tol)


RNG = np.random.default_rng(5)
X, Y = RNG.standard_normal(4), RNG.standard_normal(4)
A = RNG.standard_normal((3, 4))


# ---- grad ---------------------------------------------------------------------------------

def test_grad_by_each_argnum_and_by_several():
    def f(x, y):
        return (x.sin() * y).sum()

    close(F.grad(f)(t64(X), t64(Y)), np.cos(X) * Y)
    close(F.grad(f, argnums=1)(t64(X), t64(Y)), np.sin(X))
    gx, gy = F.grad(f, argnums=(0, 1))(t64(X), t64(Y))
    close(gx, np.cos(X) * Y)
    close(gy, np.sin(X))
    close(F.grad(f, argnums=-1)(t64(X), t64(Y)), np.sin(X))


def test_grad_of_nested_arguments_has_their_structure():
    def f(p):
        return (p["w"] * p["b"][0]).sum() + p["b"][1].exp().sum()

    g = F.grad(f)({"w": t64(X), "b": (t64(Y), t64(X))})
    assert set(g) == {"w", "b"} and isinstance(g["b"], tuple)
    close(g["w"], Y)
    close(g["b"][0], X)
    close(g["b"][1], np.exp(X))


def test_grad_and_value_and_aux():
    def f(x):
        return (x * x).sum(), x.mean()

    g, (value, aux) = F.grad_and_value(f, has_aux=True)(t64(X))
    close(g, 2 * X)
    close(value, (X * X).sum())
    close(aux, X.mean())
    g, aux = F.grad(f, has_aux=True)(t64(X))
    close(g, 2 * X)
    close(aux, X.mean())


def test_grad_results_are_detached_at_the_top_level():
    g = F.grad(lambda x: (x ** 3).sum())(t64(X))
    assert not g.requires_grad and g.grad_fn is None


def test_grad_of_grad_is_the_second_derivative():
    inner = F.grad(lambda x: (x ** 3).sum())
    close(F.grad(lambda x: inner(x).sum())(t64(X)), 6 * X)
    # a gradient inside a gradient that closes over the outer argument
    outer = F.grad(lambda x: F.grad(lambda y: (x * y * y).sum())(t64(Y)).sum())
    close(outer(t64(X)), 2 * Y)


def test_grad_keeps_the_graph_of_an_argument_that_requires_grad():
    x = t64(X).requires_grad_(True)
    g = F.grad(lambda v: (v ** 3).sum())(x)
    assert g.requires_grad
    g.sum().backward()
    close(x.grad, 6 * X)


def test_grad_refuses_a_bad_function_or_argnums():
    with pytest.raises(RuntimeError, match="one-element tensor"):
        F.grad(lambda x: x * 2)(t64(X))
    with pytest.raises(RuntimeError, match="out of range"):
        F.grad(lambda x: x.sum(), argnums=1)(t64(X))
    with pytest.raises(TypeError, match="argnums"):
        F.grad(lambda x: x.sum(), argnums=())(t64(X))
    with pytest.raises(RuntimeError, match="twice"):
        F.grad(lambda x, y: x.sum(), argnums=(0, -2))(t64(X), t64(Y))
    with pytest.raises(TypeError, match="ddpc tensors"):
        F.grad(lambda x: x)(2.0)
    with pytest.raises(RuntimeError, match="has_aux"):
        F.grad(lambda x: x.sum(), has_aux=True)(t64(X))


def test_grad_gives_zeros_for_an_argument_the_output_does_not_use():
    gx, gy = F.grad(lambda x, y: x.sum(), argnums=(0, 1))(t64(X), t64(Y))
    close(gx, np.ones(4))
    close(gy, np.zeros(4))


# ---- vjp, jvp, linearize ----------------------------------------------------------------------

def test_vjp_of_a_nested_output_can_be_called_again():
    out, vjp_fn = F.vjp(lambda x, y: {"s": x.sin() * y, "t": (x * 2,)}, t64(X), t64(Y))
    close(out["s"], np.sin(X) * Y)
    assert not out["s"].requires_grad
    for _ in range(2):
        gx, gy = vjp_fn({"s": t64(Y), "t": (t64(X),)})
        close(gx, np.cos(X) * Y * Y + 2 * X)
        close(gy, np.sin(X) * Y)
    with pytest.raises(RuntimeError, match="structure and shapes"):
        vjp_fn({"s": t64(Y), "t": (t64(X[:2]),)})
    with pytest.raises(RuntimeError, match="structure and shapes"):
        vjp_fn({"s": t64(Y)})


def test_vjp_with_aux():
    out, vjp_fn, aux = F.vjp(lambda x: (x.exp(), x.sum()), t64(X), has_aux=True)
    close(aux, X.sum())
    (g,) = vjp_fn(t64(Y))
    close(g, np.exp(X) * Y)


def test_jvp_and_linearize_give_the_directional_derivative():
    def f(x, y):
        return x.sin() * y.exp()

    out, tangent_out = F.jvp(f, (t64(X), t64(Y)), (t64(Y), t64(X)))
    close(out, np.sin(X) * np.exp(Y))
    want = np.cos(X) * np.exp(Y) * Y + np.sin(X) * np.exp(Y) * X
    close(tangent_out, want)
    out, jvp_fn = F.linearize(f, t64(X), t64(Y))
    close(jvp_fn(t64(Y), t64(X)), want)
    close(jvp_fn(t64(X), t64(Y) * 0), np.cos(X) * np.exp(Y) * X)
    with pytest.raises(RuntimeError, match="tuple"):
        F.jvp(f, t64(X), t64(Y))
    with pytest.raises(RuntimeError, match="structure and shapes"):
        F.jvp(f, (t64(X), t64(Y)), (t64(Y),))


# ---- Jacobians and Hessians -------------------------------------------------------------------

@pytest.mark.parametrize("transform", [F.jacrev, F.jacfwd])
def test_jacobians_match_closed_forms(transform):
    close(transform(lambda x: t64(A) @ x)(t64(X)), A)
    jac = transform(lambda x: x.sin() * x[0])(t64(X))
    want = np.diag(np.cos(X) * X[0])
    want[:, 0] += np.sin(X)
    close(jac, want)
    jx, jy = transform(lambda x, y: x * y, argnums=(0, 1))(t64(X), t64(Y))
    close(jx, np.diag(Y))
    close(jy, np.diag(X))


def test_jacobian_of_nested_output_and_input():
    jac, aux = F.jacrev(lambda p: ({"a": p[0] * 2, "b": p[1].sum()}, 7), has_aux=True)((t64(X), t64(Y[:2])))
    assert aux == 7
    close(jac["a"][0], 2 * np.eye(4))
    close(jac["a"][1], np.zeros((4, 2)))
    close(jac["b"][1], np.ones(2))
    assert jac["b"][0].shape == (4,)


def test_hessian_of_a_quadratic_form_and_of_a_nonlinear_function():
    M = RNG.standard_normal((4, 4))
    close(F.hessian(lambda x: 0.5 * (x @ (t64(M) @ x)))(t64(X)), 0.5 * (M + M.T))
    close(F.hessian(lambda x: x.sin().sum())(t64(X)), np.diag(-np.sin(X)))


# ---- vmap -------------------------------------------------------------------------------------

def test_vmap_maps_over_the_given_dims_and_stacks_along_out_dims():
    W = RNG.standard_normal((5, 4, 3))
    v = RNG.standard_normal(3)
    close(F.vmap(lambda w, x: w @ x, in_dims=(0, None))(t64(W), t64(v)), W @ v)
    close(F.vmap(lambda w, x: w @ x, in_dims=(2, 1), out_dims=1)(t64(W.transpose(1, 2, 0)), t64(W[:, 0, :].T)),
          np.einsum("bij,bj->ib", W, W[:, 0, :]))
    close(F.vmap(F.vmap(lambda a, b: a * b))(t64(W), t64(W)), W * W)
    out = F.vmap(lambda p, scale: {"s": p[0] + p[1] * scale}, in_dims=((0, 1),))(
        (t64(W[:, 0]), t64(W[:, 1].T)), scale=2.0)
    close(out["s"], W[:, 0] + 2 * W[:, 1])


def test_vmap_records_gradients_and_gives_per_sample_gradients():
    W = t64(RNG.standard_normal((2, 3))).requires_grad_(True)
    xs = RNG.standard_normal((6, 3))
    F.vmap(lambda x: (W @ x).tanh().sum())(t64(xs)).sum().backward()
    per_sample = F.vmap(F.grad(lambda w, x: (w @ x).tanh().sum()), in_dims=(None, 0))(W.detach(), t64(xs))
    want = [(1 - np.tanh(W.detach().numpy() @ x) ** 2)[:, None] * x[None, :] for x in xs]
    close(per_sample, np.stack(want))
    close(W.grad, np.sum(want, axis=0))


def test_vmap_refuses_inconsistent_inputs():
    with pytest.raises(ValueError, match="one size"):
        F.vmap(lambda a, b: a + b)(t64(X), t64(Y[:3]))
    with pytest.raises(ValueError, match="all None"):
        F.vmap(lambda a: a, in_dims=None)(t64(X))
    with pytest.raises(ValueError, match="only tensors"):
        F.vmap(lambda a, k: a * k)(t64(X), 3)
    with pytest.raises(ValueError, match="out of range"):
        F.vmap(lambda a: a, in_dims=1)(t64(X))
    with pytest.raises(ValueError, match="does not match"):
        F.vmap(lambda a, b: a, in_dims=((0, 0), 0))(t64(X), t64(Y))
    with pytest.raises(ValueError, match="chunk_size"):
        F.vmap(lambda a: a, chunk_size=0)


def test_vmap_randomness_modes():
    x = t64(np.zeros((3, 2)))
    with pytest.raises(RuntimeError, match="randomness"):
        F.vmap(lambda a: a + ddpc.randn(2, dtype=ddpc.float64))(x)
    same = F.vmap(lambda a: a + ddpc.randn(2, dtype=ddpc.float64), randomness="same")(x).numpy()
    assert np.all(same == same[0]) and np.all(same != 0)
    different = F.vmap(lambda a: a + ddpc.randn(2, dtype=ddpc.float64), randomness="different")(x).numpy()
    assert not np.allclose(different[0], different[1])


def test_vmap_over_an_empty_batch_gives_empty_outputs():
    x = ddpc.zeros(0, 3, dtype=ddpc.float64, requires_grad=True)
    w = t64(np.ones((3, 2)))
    y, total = F.vmap(lambda a, b: (a @ b, a.sum()), in_dims=(0, None), out_dims=(1, 0))(x, w)
    assert y.shape == (2, 0) and total.shape == (0,) and y.dtype is ddpc.float64
    (y.sum() + total.sum()).backward()  # as PyTorch's, in the graph of the input
    assert x.grad.shape == (0, 3)
    assert F.vmap(lambda a: a + 1)(ddpc.zeros(0, 2, dtype=ddpc.int32)).shape == (0, 2)
    state = ddpc.default_generator.get_state()
    F.vmap(lambda a: a + ddpc.randn(3), randomness="different")(ddpc.zeros(0, 3))
    assert np.array_equal(ddpc.default_generator.get_state().numpy(), state.numpy())
    with pytest.raises(RuntimeError, match="randomness"):
        F.vmap(lambda a: a + ddpc.randn(3))(ddpc.zeros(0, 3))


# ---- ensembles ----------------------------------------------------------------------------------

def test_stack_module_state_runs_an_ensemble_under_vmap():
    ddpc.manual_seed(0)
    models = [nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double() for _ in range(3)]
    params, buffers = F.stack_module_state(models)
    assert params["0.weight"].shape == (3, 4, 3) and params["0.weight"].requires_grad and not buffers
    x = t64(RNG.standard_normal((5, 3)))
    out = F.vmap(lambda p, b: F.functional_call(models[0], (p, b), (x,)))(params, buffers)
    for i, m in enumerate(models):
        close(out[i], m(x).detach().numpy())
    out.sum().backward()
    assert params["0.weight"].grad.shape == (3, 4, 3)
    with pytest.raises(RuntimeError, match="same parameters"):
        F.stack_module_state([models[0], nn.Linear(3, 4)])
    models[1].eval()
    with pytest.raises(RuntimeError, match="training/eval"):
        F.stack_module_state(models)


def test_replace_all_batch_norm_modules_drops_running_statistics():
    net = nn.Sequential(nn.Linear(3, 4), nn.BatchNorm1d(4))
    assert F.replace_all_batch_norm_modules_(net) is net
    bn = net[1]
    assert bn.running_mean is None and not bn.track_running_stats
    net.eval()
    x = ddpc.randn(6, 3)
    h = net[0](x).detach().numpy()
    close(net(x), (h - h.mean(0)) / np.sqrt(h.var(0) + 1e-5), tol=1e-5)
