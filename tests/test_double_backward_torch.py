"""Optional: gradients of gradients against PyTorch's (skipped when torch is
not installed): WGAN-GP critic steps (fully connected and convolutional),
MAML outer steps (one through an LSTM with functional_call), a
Hessian-vector product, autograd.functional, Hessian-vector products over a
sweep of ops, and the second derivative of each elementwise function. Runs in a child process that imports torch
before ddpc (see test_nn_torch.py)."""

import sys

import numpy as np
from procs import run_torch_case


def test_matches_pytorch():
    out = run_torch_case(__file__, "compare")
    assert out.strip().endswith("ok"), out


def _critic(lib, weights):
    nn = lib.nn
    net = nn.Sequential(nn.Linear(5, 8), nn.LeakyReLU(0.2), nn.LayerNorm(8), nn.Linear(8, 8), nn.GELU(),
                        nn.Dropout(0.0), nn.Linear(8, 1)).double()
    with lib.no_grad():
        for p, w in zip(net.parameters(), weights):
            p.copy_(lib.tensor(w))
    return net


def _gradient_penalty_step(lib, weights, real, fake, alpha):
    net = _critic(lib, weights)
    real, fake = lib.tensor(real), lib.tensor(fake)
    mixed = (lib.tensor(alpha) * real + (1 - lib.tensor(alpha)) * fake).requires_grad_(True)
    (g,) = lib.autograd.grad(net(mixed).sum(), mixed, create_graph=True)
    penalty = ((g.norm(2, dim=1) - 1) ** 2).mean()
    loss = net(fake).mean() - net(real).mean() + 10 * penalty
    loss.backward()
    return [loss.item()] + [p.grad.numpy() for p in net.parameters()]


def _conv_critic_step(lib, weights, images):
    """A convolutional critic's gradient penalty, as in WGAN-GP."""
    nn = lib.nn
    net = nn.Sequential(nn.Conv2d(3, 4, 3, stride=2, padding=1), nn.LeakyReLU(0.2), nn.Conv2d(4, 4, 3, padding=1),
                        nn.SiLU(), nn.AvgPool2d(2), nn.MaxPool2d(2, stride=1), nn.Flatten(), nn.Linear(4, 1)).double()
    with lib.no_grad():
        for p, w in zip(net.parameters(), weights):
            p.copy_(lib.tensor(w))
    x = lib.tensor(images).requires_grad_(True)
    (g,) = lib.autograd.grad(net(x).sum(), x, create_graph=True)
    penalty = ((g.reshape(g.shape[0], -1).norm(2, dim=1) - 1) ** 2).mean()
    (net(x).mean() + 10 * penalty).backward()
    return [penalty.item()] + [p.grad.numpy() for p in net.parameters()]


def _forward(lib, params, x):
    w1, b1, w2, b2 = params
    return lib.nn.functional.linear(lib.tanh(lib.nn.functional.linear(x, w1, b1)), w2, b2)


def _maml_step(lib, params, xs, ys, xq, yq):
    params = [lib.tensor(p, requires_grad=True) for p in params]
    inner = lib.nn.functional.cross_entropy(_forward(lib, params, lib.tensor(xs)), lib.tensor(ys), label_smoothing=0.1)
    grads = lib.autograd.grad(inner, params, create_graph=True)
    fast = [p - 0.5 * g for p, g in zip(params, grads)]
    outer = lib.nn.functional.cross_entropy(_forward(lib, fast, lib.tensor(xq)), lib.tensor(yq))
    outer.backward()
    return [outer.item()] + [p.grad.numpy() for p in params]


def _maml_module_step(lib, func, xs, ys, xq, yq):
    """MAML on an LSTM classifier through functional_call with fast weights."""
    lib.manual_seed(0)
    nn = lib.nn
    lstm, head = nn.LSTM(4, 5, batch_first=True).double(), nn.Linear(5, 3).double()
    with lib.no_grad():
        for p in list(lstm.parameters()) + list(head.parameters()):
            p.copy_(lib.tensor(np.cos(np.arange(p.numel()) * 0.37).reshape(tuple(p.shape)) * 0.5))

    def logits(weights, x):
        out, _ = func.functional_call(lstm, {k[5:]: v for k, v in weights.items() if k.startswith("lstm.")}, x)
        return func.functional_call(head, {k[5:]: v for k, v in weights.items() if k.startswith("head.")},
                                    out[:, -1])

    params = {"lstm." + k: v for k, v in lstm.named_parameters()}
    params.update({"head." + k: v for k, v in head.named_parameters()})
    inner = nn.functional.cross_entropy(logits(params, lib.tensor(xs)), lib.tensor(ys))
    grads = lib.autograd.grad(inner, list(params.values()), create_graph=True)
    fast = {k: v - 0.4 * g for (k, v), g in zip(params.items(), grads)}
    nn.functional.cross_entropy(logits(fast, lib.tensor(xq)), lib.tensor(yq)).backward()
    return [p.grad.numpy() for p in params.values()]


def _hvp(lib, params, x, y, vs):
    params = [lib.tensor(p, requires_grad=True) for p in params]
    out = lib.softmax(_forward(lib, params, lib.tensor(x)), dim=1)
    loss = lib.nn.functional.mse_loss(out, lib.tensor(y)) + lib.nn.functional.log_softmax(out, 1).amax(1).sum()
    grads = lib.autograd.grad(loss, params, create_graph=True)
    dot = sum((g * lib.tensor(v)).sum() for g, v in zip(grads, vs))
    return [h.numpy() for h in lib.autograd.grad(dot, params)]


UNARY = ["tanh", "sigmoid", "exp", "log", "sqrt", "rsqrt", "sin", "cos", "log1p", "expm1", "erf", "reciprocal",
         "log2", "log10", "exp2", "sinh", "cosh", "asinh", "atan", "abs", "relu", "square"]
ACTIVATIONS = ["gelu", "silu", "mish", "softplus", "elu", "leaky_relu", "hardtanh", "hardswish",
               "relu6", "selu", "celu", "softsign", "logsigmoid", "tanhshrink"]


def _second_derivative(lib, fn, x):
    x = lib.tensor(x, requires_grad=True)
    (g,) = lib.autograd.grad(fn(x).sum(), x, create_graph=True)
    (h,) = lib.autograd.grad((g * x).sum(), x)
    return h.numpy()


def _functional(lib):
    """Each of autograd.functional's derivatives of a function of two tensors with two outputs."""
    F = lib.autograd.functional
    rng = np.random.default_rng(4)
    m, x, y = (lib.tensor(rng.standard_normal(s)) for s in ((3, 4), (4,), (3,)))

    def pair(a, b):
        return lib.tanh(m @ a) * b, (a * a).sum() * b.sum()

    def scalar(a, b):
        return (lib.tanh(m @ a) * b).sum() + (a ** 3).sum() * b[0]

    def flat(r):
        return [t for item in r for t in flat(item)] if isinstance(r, (tuple, list)) else [r.detach().numpy()]

    return flat([F.jacobian(pair, (x, y)), F.jacobian(pair, (x, y), strategy="forward-mode", vectorize=True),
                 F.hessian(scalar, (x, y)), F.vjp(pair, (x, y), (y, lib.tensor(2.0, dtype=lib.float64))),
                 F.jvp(pair, (x, y), (x, y)), F.vhp(scalar, (x, y), (x, y)), F.hvp(scalar, (x, y), (x, y)),
                 F.jacobian(lambda a: lib.sin(a) * 2, x), F.hessian(lambda a: (a ** 3).sum(), x)])


def _F(lib):
    return lib.nn.functional


# Functions of (a, b) whose Hessian-vector products both libraries take, with the shapes of a and b.
_IMAGES, _ROWS = [(2, 3, 6, 6), (4, 3, 3, 3)], [(4, 5), (4, 5)]
SWEEP = {
    "tanh, pow": (lambda L, a, b: (L.tanh(a) * b * a).sum() + ((a.abs() + 0.5) ** (b * 0.5)).sum(), _ROWS),
    "atan2, max": (lambda L, a, b: (L.atan2(a, b + 3) ** 2).sum() + (a.max(1).values * b.sum(1)).sum(), _ROWS),
    "logsumexp, var, norm": (lambda L, a, b: (L.logsumexp(a * b, 1) ** 2).sum() + (a.var(1) * b.std()).sum()
                             + (a.norm(dim=1) * b.norm()).sum(), _ROWS),
    "cross_entropy": (lambda L, a, b: _F(L).cross_entropy(a @ b.T, L.tensor([1, 0, 3, 1]),
                                                          weight=L.tensor([1., 2., 3., .5], dtype=L.float64),
                                                          label_smoothing=0.3) ** 2, _ROWS),
    "losses": (lambda L, a, b: _F(L).huber_loss(a * 2, b, delta=0.7) * (a * b).sum()
               + _F(L).binary_cross_entropy_with_logits(a * b, L.sigmoid(b)) ** 2
               + _F(L).smooth_l1_loss(a * b, b, beta=0.5) * _F(L).binary_cross_entropy(L.sigmoid(a), L.sigmoid(b))
               + _F(L).kl_div(_F(L).log_softmax(a, 1), _F(L).softmax(b, 1), reduction="batchmean"), _ROWS),
    "activations": (lambda L, a, b: (_F(L).gelu(a) * _F(L).silu(b) * _F(L).softplus(a * b) + _F(L).elu(a)
                                     * _F(L).mish(b) + _F(L).selu(a) * _F(L).celu(b)).sum(), _ROWS),
    "indexing": (lambda L, a, b: (a[[0, 2, 2]] * b[1:]).sum() ** 2
                 + (a.index_select(1, L.tensor([4, 0, 0])) * b[:, :3]).sum() ** 2
                 + (L.roll(a, 1, 0) * L.flip(b, [1])).sum() ** 2 + (a.masked_fill(b > 0, 0.5) ** 3).sum(), _ROWS),
    "scans": (lambda L, a, b: (a.cumsum(1) * b.cumprod(0)).sum() + (L.logcumsumexp(a, 1) * b).sum()
              + (a.prod(1) * b[:, 0]).sum(), _ROWS),
    "products": (lambda L, a, b: (L.bmm(a.reshape(2, 2, 5), b.reshape(2, 5, 2)).tanh() ** 2).sum()
                 + L.einsum("ij,kj->ik", a, b).sin().sum(), _ROWS),
    "distances": (lambda L, a, b: (_F(L).cosine_similarity(a, b, dim=1) ** 2).sum()
                  + _F(L).pairwise_distance(a, b).sum() + (_F(L).normalize(a * b, dim=1) * b).sum(), _ROWS),
    "conv, pools": (lambda L, a, b: (_F(L).avg_pool2d(_F(L).conv2d(a, b, padding=1).tanh(), 2) ** 2).sum()
                    + (_F(L).max_pool2d(a * a, 3, stride=2, padding=1) * _F(L).adaptive_avg_pool2d(a, 3)).sum()
                    + (_F(L).conv_transpose2d(a, b[:3], stride=2) ** 2).sum(), _IMAGES),
    "norms": (lambda L, a, b: (_F(L).batch_norm(a, None, None, b[0, :, 0, 0], b[1, :, 0, 0], training=True) ** 3
                               ).sum() + (_F(L).group_norm(a * 2, 3, b[0, :, 0, 0], b[1, :, 0, 0]) ** 3).sum(),
              _IMAGES),
    "resampling": (lambda L, a, b: (_F(L).interpolate(a, scale_factor=2, mode="bilinear") ** 2).sum() * b.sum()
                   + (_F(L).pad(a * a, (1, 2, 2, 1), mode="reflect") ** 2).sum() * b.mean()
                   + (_F(L).unfold(a, 3, padding=1) ** 2).sum(), _IMAGES),
}


def _hvp_and_grads(lib, fn, arrays, vectors):
    xs = [lib.tensor(a, requires_grad=True) for a in arrays]
    grads = lib.autograd.grad(fn(lib, *xs), xs, create_graph=True)
    dot = sum((g * lib.tensor(v)).sum() for g, v in zip(grads, vectors))
    return [t.detach().numpy() for t in list(grads) + list(lib.autograd.grad(dot, xs))]


def compare():
    import torch
    import ddpc

    rng = np.random.default_rng(0)
    shapes = [(8, 5), (8,), (8,), (8,), (8, 8), (8,), (1, 8), (1,)]
    weights = [rng.standard_normal(s) * 0.5 + (1.0 if i == 2 else 0.0) for i, s in enumerate(shapes)]
    real, fake, alpha = rng.standard_normal((6, 5)), rng.standard_normal((6, 5)), rng.uniform(size=(6, 1))
    ours, theirs = (_gradient_penalty_step(lib, weights, real, fake, alpha) for lib in (ddpc, torch))
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o, t, rtol=1e-9, atol=1e-12, err_msg="gradient penalty")

    shapes = [(4, 3, 3, 3), (4,), (4, 4, 3, 3), (4,), (1, 4), (1,)]
    weights = [rng.standard_normal(s) * 0.5 for s in shapes]
    images = rng.standard_normal((2, 3, 8, 8))
    ours, theirs = (_conv_critic_step(lib, weights, images) for lib in (ddpc, torch))
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o, t, rtol=1e-9, atol=1e-12, err_msg="convolutional gradient penalty")

    params = [rng.standard_normal(s) * 0.5 for s in ((6, 4), (6,), (3, 6), (3,))]
    xs, xq = rng.standard_normal((10, 4)), rng.standard_normal((7, 4))
    ys, yq = rng.integers(0, 3, 10), rng.integers(0, 3, 7)
    ours, theirs = (_maml_step(lib, params, xs, ys, xq, yq) for lib in (ddpc, torch))
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o, t, rtol=1e-9, atol=1e-12, err_msg="MAML")

    seqs, queries = rng.standard_normal((6, 5, 4)), rng.standard_normal((4, 5, 4))
    ours = _maml_module_step(ddpc, ddpc.func, seqs, ys[:6], queries, yq[:4])
    theirs = _maml_module_step(torch, torch.func, seqs, ys[:6], queries, yq[:4])
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o, t, rtol=1e-8, atol=1e-12, err_msg="MAML through an LSTM")

    y = rng.uniform(size=(10, 3))
    vs = [rng.standard_normal(p.shape) for p in params]
    ours, theirs = (_hvp(lib, params, xs, y, vs) for lib in (ddpc, torch))
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o, t, rtol=1e-9, atol=1e-12, err_msg="Hessian-vector product")

    ours, theirs = _functional(ddpc), _functional(torch)
    assert len(ours) == len(theirs) == 28, (len(ours), len(theirs))
    for o, t in zip(ours, theirs):
        np.testing.assert_allclose(o, t, rtol=1e-10, atol=1e-12, err_msg="autograd.functional")

    signs = []  # tensor ** tensor where the masks apply: a's zero is +0, b's is g times 0
    for lib in (ddpc, torch):
        a, b = (lib.tensor(v, dtype=lib.float64, requires_grad=True)
                for v in ([0.0, 2.0, 0.0, 3.0], [0.0, 0.0, 1.0, 2.0]))
        (lib.pow(a, b) * lib.tensor([-1.0, -2.0, -3.0, 1.0], dtype=lib.float64)).sum().backward()
        signs.append([np.signbit(t.grad.numpy()).tolist() + t.grad.numpy().tolist() for t in (a, b)])
    assert signs[0] == signs[1], signs

    for name, (fn, shapes) in SWEEP.items():
        arrays = [rng.standard_normal(shape) for shape in shapes]
        vectors = [rng.standard_normal(shape) for shape in shapes]
        ours, theirs = (_hvp_and_grads(lib, fn, arrays, vectors) for lib in (ddpc, torch))
        for o, t in zip(ours, theirs):
            np.testing.assert_allclose(o, t, rtol=1e-8, atol=1e-10, err_msg=name)

    x = rng.standard_normal(50) * 2
    x = np.concatenate([x, [0.5, 1.5, 3.5, -3.5]])
    for name in UNARY:
        arg = np.abs(x) + 0.1 if name in ("log", "sqrt", "rsqrt", "log1p", "log2", "log10") else x
        ours, theirs = (_second_derivative(lib, getattr(lib, name), arg) for lib in (ddpc, torch))
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-12, err_msg=name)
    for name in ACTIVATIONS:
        ours, theirs = (_second_derivative(lib, getattr(lib.nn.functional, name), x) for lib in (ddpc, torch))
        np.testing.assert_allclose(ours, theirs, rtol=1e-9, atol=1e-12, err_msg=name)


if __name__ == "__main__":
    import torch  # noqa: F401  (before ddpc, see the module docstring)

    globals()[sys.argv[1]]()
    print("ok")
