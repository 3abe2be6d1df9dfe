"""Saved-tensor hooks and forward AD against PyTorch: the sequence of pack
and unpack calls (with the shapes they see) over two backward passes of a
retained graph, gradients under save_on_cpu, node hooks, and tangents."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ddpc  # noqa: E402
import ddpc.autograd.forward_ad as fwAD  # noqa: E402

A = np.array([[0.3, -0.7, 1.1], [0.5, 0.2, -0.4]])
B = np.array([[0.1, 0.4], [-0.3, 0.8], [0.6, -0.2]])

# The ops whose saved tensors are PyTorch's: the calls must match one for one.
SAME = {
    "mul": lambda L, a, b: (a * b.T).sum(),
    "div": lambda L, a, b: (a / b.T).sum(),
    "sin": lambda L, a, b: a.sin().sum(),
    "exp": lambda L, a, b: a.exp().sum(),
    "tanh": lambda L, a, b: a.tanh().sum(),
    "sigmoid": lambda L, a, b: a.sigmoid().sum(),
    "relu": lambda L, a, b: a.relu().sum(),
    "pow": lambda L, a, b: (a ** 2).sum(),
    "log_sqrt": lambda L, a, b: (a * a + 1).log().sum() + (a * a + 1).sqrt().sum(),
    "mse": lambda L, a, b: ((a - 1) ** 2).mean(),
    "softmax": lambda L, a, b: (L.nn.functional.softmax(a, dim=1) * a).sum(),
}


def _calls(lib, fn):
    log = []

    def pack(t):
        log.append(("pack", tuple(t.shape)))
        return t

    def unpack(t):
        log.append(("unpack", tuple(t.shape)))
        return t

    a, b = lib.tensor(A, requires_grad=True), lib.tensor(B, requires_grad=True)
    with lib.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = fn(lib, a, b)
    y.backward(retain_graph=True)
    y.backward()
    return log, a.grad.numpy(), b.grad


@pytest.mark.parametrize("name", sorted(SAME))
def test_pack_and_unpack_calls_match_torch(name):
    got, grad, _ = _calls(ddpc, SAME[name])
    want, want_grad, _ = _calls(torch, SAME[name])
    assert got == want
    np.testing.assert_allclose(grad, want_grad, rtol=1e-12)


def test_matmul_packs_the_same_tensors_as_torch():
    # PyTorch packs matmul's operands in the other order.
    fn = lambda L, a, b: ((a @ b).tanh() * 2).exp().sum()  # noqa: E731
    got, _, _ = _calls(ddpc, fn)
    want, _, _ = _calls(torch, fn)
    assert sorted(got) == sorted(want) and len(got) == len(want)


def test_save_on_cpu_gradients_match_torch():
    def run(lib):
        x = lib.tensor(A, requires_grad=True)
        w = lib.tensor(B, requires_grad=True)
        with lib.autograd.graph.save_on_cpu():
            y = ((x @ w).tanh() * x.sum()).sigmoid().sum()
        (gx, gw) = lib.autograd.grad(y, (x, w), create_graph=True)
        (hx,) = lib.autograd.grad((gx * gx).sum() + gw.sum(), x)
        return [t.detach().numpy() for t in (gx, gw, hx)]

    for got, want in zip(run(ddpc), run(torch)):
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)


def test_node_hooks_match_torch():
    def run(lib):
        seen = []
        x = lib.tensor(A, requires_grad=True)
        y = x.exp()
        y.grad_fn.register_prehook(lambda go: (go[0] * 3,))
        y.grad_fn.register_hook(lambda gi, go: seen.append((gi[0].numpy().copy(), go[0].numpy().copy())))
        (y * 2).sum().backward()
        return x.grad.numpy(), seen

    (g1, s1), (g2, s2) = run(ddpc), run(torch)
    np.testing.assert_allclose(g1, g2, rtol=1e-12)
    assert len(s1) == len(s2) == 1
    for a, b in zip(s1[0], s2[0]):
        np.testing.assert_allclose(a, b, rtol=1e-12)


def test_multi_grad_hook_matches_torch():
    def run(lib):
        got = []
        a, b, c = (lib.tensor(A, requires_grad=True) for _ in range(3))
        lib.autograd.graph.register_multi_grad_hook((a, b, c), lambda gs: got.append(
            [None if g is None else g.numpy().copy() for g in gs]))
        ((a * 2).sum() + (b.sin()).sum()).backward()
        return got

    (d,), (t,) = run(ddpc), run(torch)
    assert [g is None for g in d] == [g is None for g in t]
    for x, y in zip(d, t):
        if x is not None:
            np.testing.assert_allclose(x, y, rtol=1e-12)


@pytest.mark.parametrize("name", ["sin_mul", "matmul_tanh", "softmax", "norm"])
def test_forward_ad_tangents_match_torch(name):
    rng = np.random.default_rng(1)
    x, v = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    m = rng.standard_normal((4, 2))
    fns = {
        "sin_mul": lambda L, t: t.sin() * t,
        "matmul_tanh": lambda L, t: (t @ L.tensor(m)).tanh(),
        "softmax": lambda L, t: L.nn.functional.softmax(t, dim=1),
        "norm": lambda L, t: (t * t).sum(1).sqrt(),
    }

    def run(lib, ad):
        with ad.dual_level():
            out = fns[name](lib, ad.make_dual(lib.tensor(x), lib.tensor(v)))
            p, tangent = ad.unpack_dual(out)
            return p.detach().numpy(), tangent.numpy()

    (p1, t1), (p2, t2) = run(ddpc, fwAD), run(torch, torch.autograd.forward_ad)
    np.testing.assert_allclose(p1, p2, rtol=1e-12)
    np.testing.assert_allclose(t1, t2, rtol=1e-10, atol=1e-12)
