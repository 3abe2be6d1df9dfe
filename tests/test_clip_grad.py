"""clip_grad_norm_ and get_total_norm: the norm's dtype follows the gradients
(float64 kept), a NaN norm makes every gradient NaN as PyTorch's clamped
factor does, and the orders 0 and -inf of PyTorch's vector_norm."""

import math

import numpy as np
import pytest

import ddpc
from ddpc import nn


def params_with_grads(*grads, dtype=ddpc.float32):
    out = []
    for g in grads:
        p = ddpc.zeros(len(g), dtype=dtype, requires_grad=True)
        p.grad = ddpc.tensor(np.array(g, dtype=np.float64)).to(dtype=dtype)
        out.append(p)
    return out


def test_float64_gradients_are_clipped_with_a_float64_norm():
    # ||(1, 1 + 2^-30)||: its float32 rounding is off by ~1e-9 relative, float64 keeps it to ~1e-16
    g = [1.0, 1.0 + 2.0 ** -30]
    (p,) = params_with_grads(g, dtype=ddpc.float64)
    exact = math.sqrt(1.0 + (1.0 + 2.0 ** -30) ** 2)
    total = nn.utils.clip_grad_norm_([p], 0.5)
    assert total.dtype is ddpc.float64
    assert total.item() == pytest.approx(exact, rel=1e-15, abs=0)
    np.testing.assert_allclose(p.grad.numpy(), np.array(g) * (0.5 / (exact + 1e-6)), rtol=1e-15, atol=0)


def test_norm_dtype_is_float64_with_any_float64_gradient_and_float32_otherwise():
    a = params_with_grads([3.0], dtype=ddpc.float32)
    b = params_with_grads([4.0], dtype=ddpc.float64)
    c = params_with_grads([12.0], dtype=ddpc.float16)
    assert nn.utils.clip_grad_norm_(a + b, 100.0).dtype is ddpc.float64
    assert nn.utils.clip_grad_norm_(a + c, 100.0).dtype is ddpc.float32
    total = nn.utils.clip_grad_norm_(a + b + c, 100.0)
    assert total.dtype is ddpc.float64 and total.item() == 13.0


def test_a_nan_gradient_makes_every_gradient_nan_without_raising():
    p, q = params_with_grads([1.0, float("nan"), 3.0], [4.0, 5.0])
    total = nn.utils.clip_grad_norm_([p, q], 1.0)
    assert math.isnan(total.item())
    assert np.isnan(p.grad.numpy()).all() and np.isnan(q.grad.numpy()).all()


def test_an_inf_gradient_zeroes_the_finite_ones():
    # max_norm / (inf + 1e-6) = 0: finite entries become 0, the inf one inf * 0 = NaN
    p, q = params_with_grads([float("inf"), 1.0], [4.0])
    assert nn.utils.clip_grad_norm_([p, q], 1.0).item() == math.inf
    assert math.isnan(p.grad.tolist()[0]) and p.grad.tolist()[1] == 0.0 and q.grad.tolist() == [0.0]


def test_order_zero_counts_the_gradients_with_a_nonzero_entry():
    # per tensor: 2, 2 and 0 nonzero entries; order 0 of (2, 2, 0) is 2, so the factor is 1 / (2 + 1e-6)
    ps = params_with_grads([3.0, 0.0, 4.0], [0.0, 2.0, 1.0], [0.0, 0.0])
    total = nn.utils.clip_grad_norm_(ps, 1.0, norm_type=0)
    assert total.item() == 2.0
    coef = 1.0 / (2.0 + 1e-6)
    assert ps[0].grad.tolist() == pytest.approx([3.0 * coef, 0.0, 4.0 * coef], rel=1e-6)
    assert ps[1].grad.tolist() == pytest.approx([0.0, 2.0 * coef, 1.0 * coef], rel=1e-6)


def test_order_minus_inf_is_the_smallest_magnitude():
    ps = params_with_grads([3.0, -0.5, 4.0], [2.0, -7.0])
    assert nn.utils.get_total_norm([p.grad for p in ps], norm_type=-math.inf).item() == 0.5
    total = nn.utils.clip_grad_norm_(ps, 0.25, norm_type=-math.inf)
    assert total.item() == 0.5
    coef = 0.25 / (0.5 + 1e-6)
    assert ps[1].grad.tolist() == pytest.approx([2.0 * coef, -7.0 * coef], rel=1e-6)
