"""Optional: complex tensors against PyTorch (skipped without torch): the
LLaMA rotary embedding (torch.polar, view_as_complex, view_as_real) forward
and every parameter's gradient, and complex elementwise ops' outputs and
gradients on the same inputs."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ddpc  # noqa: E402  (after torch, as the other comparison tests)


def _freqs_cis(L, dim, end, theta=10000.0):
    freqs = 1.0 / (theta ** (L.arange(0, dim, 2)[: dim // 2].float() / dim))
    t = L.arange(end).float()
    freqs = L.outer(t, freqs)
    return L.polar(L.ones_like(freqs), freqs)


def _apply_rotary(L, xq, xk, freqs_cis):
    xq_ = L.view_as_complex(xq.float().reshape(*xq.shape[:-1], -1, 2))
    xk_ = L.view_as_complex(xk.float().reshape(*xk.shape[:-1], -1, 2))
    freqs_cis = freqs_cis.reshape(1, xq_.shape[1], 1, xq_.shape[-1])
    xq_out = L.view_as_real(xq_ * freqs_cis).flatten(3)
    xk_out = L.view_as_real(xk_ * freqs_cis).flatten(3)
    return xq_out.type_as(xq), xk_out.type_as(xk)


def _rotary_block(L, x, wq, wk, freqs_cis):
    """Projections, rotary embedding and the attention scores of one head group."""
    bsz, seqlen, _ = x.shape
    q = (x @ wq).reshape(bsz, seqlen, 2, -1)
    k = (x @ wk).reshape(bsz, seqlen, 2, -1)
    q, k = _apply_rotary(L, q, k, freqs_cis)
    scores = (q.transpose(1, 2) @ k.transpose(1, 2).transpose(2, 3)) / 4.0
    return scores.softmax(-1).sum() + (q * q).mean()


def test_rotary_embedding_forward_and_gradients_match_pytorch():
    rng = np.random.default_rng(0)
    bsz, seqlen, dmodel, head_dim = 2, 5, 16, 8
    x = rng.standard_normal((bsz, seqlen, dmodel)).astype(np.float32)
    wq = (rng.standard_normal((dmodel, 2 * head_dim)) / 4).astype(np.float32)
    wk = (rng.standard_normal((dmodel, 2 * head_dim)) / 4).astype(np.float32)
    results = {}
    for L in (torch, ddpc):
        params = [L.tensor(v, requires_grad=True) for v in (x, wq, wk)]
        freqs = _freqs_cis(L, head_dim, seqlen)
        assert freqs.dtype == L.complex64
        loss = _rotary_block(L, *params, freqs)
        loss.backward()
        results[L.__name__] = (loss.item(), [p.grad.detach().numpy().copy() for p in params],
                               L.view_as_real(freqs).detach().numpy().copy())
    (t_loss, t_grads, t_freqs), (d_loss, d_grads, d_freqs) = results["torch"], results["ddpc"]
    np.testing.assert_allclose(d_freqs, t_freqs, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(d_loss, t_loss, rtol=1e-5)
    for d, t in zip(d_grads, t_grads):
        np.testing.assert_allclose(d, t, rtol=1e-4, atol=1e-6)


_CASES = {
    "mul": lambda L, a, b: a * b,
    "div": lambda L, a, b: a / b,
    "sub_scalar": lambda L, a, b: (2 - 1j) - a * (0.5 + 2j) + b,
    "exp": lambda L, a, b: L.exp(a) * b,
    "log": lambda L, a, b: L.log(a) + b,
    "sqrt": lambda L, a, b: L.sqrt(a) * b,
    "reciprocal": lambda L, a, b: L.reciprocal(a) - b,
    "pow": lambda L, a, b: a ** 2.5 + b ** -2,
    "abs_angle": lambda L, a, b: L.complex(L.abs(a), L.angle(b)),
    "sgn": lambda L, a, b: L.sgn(a) * b,
    "conj": lambda L, a, b: a.conj() * b,
    "real_imag": lambda L, a, b: L.complex(a.imag * b.real, a.real),
    "sum_mean": lambda L, a, b: a.sum(0) * b.mean(0),
    "matmul": lambda L, a, b: a @ b.transpose(0, 1),
    "mixed_real": lambda L, a, b: a * b.real + b.abs(),
    "polar": lambda L, a, b: L.polar(a.abs(), b.real),
    "sin_cos": lambda L, a, b: L.sin(a) * b.cos(),
    "tanh": lambda L, a, b: L.tanh(a) + b.tanh(),
    "square": lambda L, a, b: a.square() * b,
    "prod": lambda L, a, b: a.prod(1, keepdim=True) * b + b.prod(),
    "prod_with_zero": lambda L, a, b: L.where(a.real > 0.5, 0j, a).prod(0) * b,
    "where": lambda L, a, b: L.where(a.real > 0, a, b) + L.where(b.real < 0, 0.5, a),
    "masked_fill": lambda L, a, b: a.masked_fill(b.imag > 0, 1 - 2j) * b,
    "gather_index": lambda L, a, b: a.gather(1, L.tensor([[3, 0, 0, 1]] * 3)) * b[L.tensor([2, 0, 1])],
    "index_select": lambda L, a, b: a.index_select(1, L.tensor([1, 1, 3, 0])) + b[:, L.tensor([0, 2, 1, 3])],
    "flip_roll": lambda L, a, b: a.flip(0) * b.roll(1, 1),
    "linear": lambda L, a, b: L.nn.functional.linear(a, b, b[0, :3]),
    "vector_norm": lambda L, a, b: a * L.linalg.vector_norm(b, dim=1, keepdim=True) + L.linalg.norm(a) +
    a.norm(p=1, dim=0),
}


@pytest.mark.parametrize("dtype", ["complex64", "complex128"])
@pytest.mark.parametrize("name", sorted(_CASES))
def test_ops_and_gradients_match_pytorch(name, dtype):
    rng = np.random.default_rng(1)
    a = (rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4))).astype(dtype)
    b = (rng.standard_normal((3, 4)) + 1j * rng.standard_normal((3, 4)) + 0.5).astype(dtype)
    tol = dict(rtol=1e-4, atol=1e-5) if dtype == "complex64" else dict(rtol=1e-10, atol=1e-12)
    got = {}
    for L in (torch, ddpc):
        ta, tb = L.tensor(a, requires_grad=True), L.tensor(b, requires_grad=True)
        out = _CASES[name](L, ta, tb)
        w = L.tensor(np.linspace(-1, 1, out.numel()).reshape(tuple(out.shape)).astype(a.real.dtype))
        (L.view_as_real(out) * L.stack([w, -2 * w], -1)).sum().backward()
        got[L.__name__] = tuple(t.detach().resolve_conj().numpy() for t in (out, ta.grad, tb.grad))
    for d, t in zip(got["ddpc"], got["torch"]):
        np.testing.assert_allclose(d, t, **tol)


@pytest.mark.parametrize("name,kwargs", [
    ("SGD", dict(lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True)), ("Adam", dict(lr=0.01, weight_decay=0.1)),
    ("AdamW", dict(lr=0.01, amsgrad=True)), ("RMSprop", dict(lr=0.01, momentum=0.5, centered=True)),
    ("Adagrad", dict(lr=0.1)), ("Adadelta", dict()), ("Adamax", dict(lr=0.01)), ("NAdam", dict()), ("RAdam", dict())])
def test_optimizers_with_complex_parameters_match_pytorch(name, kwargs):
    rng = np.random.default_rng(2)
    w0 = (rng.standard_normal((3, 2)) + 1j * rng.standard_normal((3, 2))).astype(np.complex64)
    x = (rng.standard_normal((4, 3)) + 1j * rng.standard_normal((4, 3))).astype(np.complex64)
    got = {}
    for L in (torch, ddpc):
        w = L.tensor(w0, requires_grad=True)
        opt = getattr(L.optim, name)([w], **kwargs)
        for _ in range(3):
            opt.zero_grad()
            (L.tensor(x) @ w).abs().sum().backward()
            opt.step()
        got[L.__name__] = w.detach().numpy()
    assert np.abs(got["ddpc"] - w0).max() > 1e-3  # the parameters moved
    np.testing.assert_allclose(got["ddpc"], got["torch"], rtol=1e-5, atol=1e-6)


def test_clip_grad_norm_of_complex_gradients_matches_pytorch():
    rng = np.random.default_rng(3)
    grads = [(rng.standard_normal(s) + 1j * rng.standard_normal(s)).astype(np.complex64) for s in ((3, 2), (4,))]
    got = {}
    for L in (torch, ddpc):
        params = [L.zeros(g.shape, dtype=L.complex64, requires_grad=True) for g in grads]
        for p, g in zip(params, grads):
            p.grad = L.tensor(g)
        total = L.nn.utils.clip_grad_norm_(params, 1.0)
        got[L.__name__] = (total.item(), [p.grad.numpy() for p in params])
    want = np.sqrt(sum((np.abs(g) ** 2).sum() for g in grads))
    np.testing.assert_allclose(got["ddpc"][0], want, rtol=1e-6)
    np.testing.assert_allclose(got["ddpc"][0], got["torch"][0], rtol=1e-6)
    for d, t in zip(got["ddpc"][1], got["torch"][1]):
        np.testing.assert_allclose(d, t, rtol=1e-5, atol=1e-7)


def test_promotion_and_printing_match_pytorch():
    for a_dt, b_dt in [("float32", "complex64"), ("float64", "complex64"), ("int64", "complex64"),
                       ("complex128", "float32")]:
        t = torch.ones(2, dtype=getattr(torch, a_dt)) + torch.ones(2, dtype=getattr(torch, b_dt))
        d = ddpc.ones(2, dtype=getattr(ddpc, a_dt)) + ddpc.ones(2, dtype=getattr(ddpc, b_dt))
        assert str(t.dtype) == "torch." + d.dtype.name
    # (ddpc prints non-integral values as numpy does, complex or real; PyTorch pads them to 4 decimals)
    for v in ([1 + 2j, 3 - 1j], [[2j], [-4 + 0j]]):
        assert repr(ddpc.tensor(v)) == repr(torch.tensor(v))
    assert (torch.ones(2, dtype=torch.float64) * 1j).dtype == torch.complex128
    assert (ddpc.ones(2, dtype=ddpc.float64) * 1j).dtype is ddpc.complex128
