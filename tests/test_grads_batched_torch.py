"""Optional: autograd.grad's is_grads_batched form against
torch.autograd.grad(..., is_grads_batched=True), skipped when
torch is not installed: the stacked gradients, None for unused inputs, the
graph of a create_graph pass, and the errors."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ddpc  # noqa: E402


def _grad(lib, outputs, inputs, grad_outputs, **kw):
    return lib.autograd.grad(outputs, inputs, grad_outputs, is_grads_batched=True, **kw)


def _case(lib, X, Y):
    x, y, z = (lib.tensor(a, requires_grad=True) for a in (X, Y, Y))
    outputs = (x.sin() * y.sum(), (x * x * y[0]).sum())
    grad_outputs = (lib.eye(3, dtype=lib.float64), lib.tensor(np.arange(3.0)))
    plain = _grad(lib, outputs, (x, y, z), grad_outputs, retain_graph=True, allow_unused=True)
    hessian_rows = _grad(lib, (x ** 3).sum() * 0 + x ** 3, x, lib.eye(3, dtype=lib.float64), create_graph=True)[0]
    again = lib.autograd.grad(hessian_rows.sum(), x)[0]
    return [g if g is None else g.detach().numpy() for g in plain] + [hessian_rows.detach().numpy(), again.numpy(),
                                                                      hessian_rows.requires_grad]


def test_batched_gradients_match_pytorchs():
    rng = np.random.default_rng(0)
    X, Y = rng.standard_normal(3), rng.standard_normal(2)
    got, want = _case(ddpc, X, Y), _case(torch, X, Y)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        if isinstance(w, np.ndarray):
            np.testing.assert_allclose(g, w, rtol=1e-12, atol=1e-12)
        else:
            assert g == w


def test_batched_gradients_refuse_what_pytorch_refuses():
    for lib in (ddpc, torch):
        x = lib.tensor(np.ones(3), requires_grad=True)
        y = x.sin()
        with pytest.raises(RuntimeError):
            _grad(lib, y, x, None, retain_graph=True)
        with pytest.raises(RuntimeError):
            _grad(lib, y, x, lib.ones(3, 2, dtype=lib.float64), retain_graph=True)
        with pytest.raises(RuntimeError):
            _grad(lib, y.sum() * 0 + x.cos().sum(), lib.tensor(np.ones(2), requires_grad=True),
                  lib.ones(2, dtype=lib.float64))
