"""PyTorch's out= keyword on the module-level functions: the result written
into out (resized, cast as PyTorch casts), out returned, and PyTorch's
refusals (a cast it does not allow, autograd)."""

import inspect
import warnings

import numpy as np
import pytest

import ddpc


def test_result_goes_into_out_and_out_is_returned():
    a, b = ddpc.tensor([1.0, 5.0, 2.0]), ddpc.tensor([3.0, 1.0, 4.0])
    assert ddpc.max(a, b, out=a) is a  # timm's amsgrad: torch.max(max_exp_avg_sq, exp_avg_sq, out=max_exp_avg_sq)
    assert a.tolist() == [3.0, 5.0, 4.0]
    o = ddpc.empty(2, 4)
    assert ddpc.matmul(ddpc.ones(2, 3), ddpc.ones(3, 4), out=o) is o and o.tolist() == [[3.0] * 4] * 2
    o = ddpc.zeros(3)
    ddpc.add(ddpc.ones(3), ddpc.ones(3), alpha=2, out=o)
    assert o.tolist() == [3.0] * 3
    s = ddpc.empty(2)
    ddpc.sum(ddpc.ones(2, 3), 1, out=s)
    assert s.tolist() == [3.0, 3.0]
    c = ddpc.empty(0)
    ddpc.cat([ddpc.ones(2), ddpc.zeros(1)], out=c)
    assert c.tolist() == [1.0, 1.0, 0.0]
    inv = ddpc.empty(2, 2)
    ddpc.linalg.inv(ddpc.eye(2) * 2, out=inv)
    np.testing.assert_allclose(inv.numpy(), np.eye(2) / 2)
    e = ddpc.empty(2)
    ddpc.special.expit(ddpc.zeros(2), out=e)
    assert e.tolist() == [0.5, 0.5]


def test_several_results_take_a_tuple():
    v, i = ddpc.empty(0), ddpc.empty(0, dtype=ddpc.int64)
    r = ddpc.max(ddpc.tensor([[1.0, 3.0], [4.0, 2.0]]), 1, out=(v, i))
    assert r.values is v and r.indices is i and v.tolist() == [3.0, 4.0] and i.tolist() == [1, 0]
    v, i = ddpc.empty(0), ddpc.empty(0, dtype=ddpc.int64)
    ddpc.sort(ddpc.tensor([3.0, 1.0, 2.0]), descending=True, out=(v, i))
    assert v.tolist() == [3.0, 2.0, 1.0] and i.tolist() == [0, 2, 1]
    with pytest.raises(TypeError, match="tuple of 2"):
        ddpc.topk(ddpc.ones(3), 2, out=ddpc.empty(2))


def test_out_is_resized_with_pytorchs_warning_when_it_had_elements():
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        o = ddpc.empty(0)
        ddpc.mul(ddpc.ones(2, 2), 3, out=o)  # empty: resized quietly
        assert not caught and o.shape == (2, 2) and o.tolist() == [[3.0] * 2] * 2
        ddpc.mul(ddpc.ones(3), 3, out=o)
    assert [str(w.message)[:30] for w in caught] == ["An output with one or more ele"]
    assert caught[0].filename == __file__
    assert o.shape == (3,) and o.tolist() == [3.0] * 3


def test_casts_follow_pytorch():
    o = ddpc.empty(3, dtype=ddpc.float64)
    ddpc.add(ddpc.arange(3), 1, out=o)  # an int result into a float tensor
    assert o.dtype is ddpc.float64 and o.tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        ddpc.add(ddpc.ones(2), 1, out=ddpc.empty(2, dtype=ddpc.int64))
    with pytest.raises(RuntimeError, match="Bool"):
        ddpc.add(ddpc.arange(2), 1, out=ddpc.empty(2, dtype=ddpc.bool))
    b = ddpc.empty(2, dtype=ddpc.bool)
    ddpc.gt(ddpc.tensor([1.0, -1.0]), 0, out=b)
    assert b.tolist() == [True, False]
    with pytest.raises(TypeError, match="out"):
        ddpc.add(ddpc.ones(2), 1, out=[1.0, 2.0])


def test_creation_functions_make_outs_dtype():
    i = ddpc.empty(0, dtype=ddpc.int64)
    ddpc.arange(4, out=i)
    assert i.dtype is ddpc.int64 and i.tolist() == [0, 1, 2, 3]
    d = ddpc.empty(0, dtype=ddpc.float64)
    ddpc.zeros(2, 3, out=d)
    assert d.dtype is ddpc.float64 and d.shape == (2, 3)
    ddpc.manual_seed(0)
    r = ddpc.empty(5, dtype=ddpc.float64)
    ddpc.randn(5, out=r)
    assert r.dtype is ddpc.float64 and len(set(r.tolist())) == 5


def test_out_refuses_autograd_as_pytorch():
    w = ddpc.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        ddpc.mul(w, 2, out=ddpc.empty(2))
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        ddpc.cat([w, w], out=ddpc.empty(4))
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        ddpc.mul(ddpc.ones(2), 2, out=ddpc.zeros(2, requires_grad=True))
    o = ddpc.empty(2)
    with ddpc.no_grad():
        ddpc.mul(w, 2, out=o)  # no graph to lose
    assert o.tolist() == [2.0, 2.0] and not o.requires_grad


def test_signatures_are_the_functions_own():
    assert "out" not in inspect.signature(ddpc.add).parameters
    assert inspect.signature(ddpc.add) == inspect.signature(ddpc.add.__wrapped__)
    assert ddpc.add(ddpc.ones(1), 1).tolist() == [2.0]  # without out, the function as it is


def test_aliases_stay_one_function():
    assert ddpc.arcsin is ddpc.asin and ddpc.clip is ddpc.clamp and ddpc.special.expit is ddpc.sigmoid
    o = ddpc.empty(1)
    ddpc.arcsin(ddpc.zeros(1), out=o)
    assert o.tolist() == [0.0]
