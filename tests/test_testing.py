"""ddpc.testing: assert_close's tolerances, NaN and infinity rules, nested
containers and messages; make_tensor's ranges, dtypes and options."""

import math

import numpy as np
import pytest

import ddpc
from ddpc.testing import assert_close, make_tensor


def fails(actual, expected, **kwargs):
    with pytest.raises(AssertionError) as err:
        assert_close(actual, expected, **kwargs)
    return str(err.value)


@pytest.mark.parametrize("dtype, rtol, atol", [(ddpc.float32, 1.3e-6, 1e-5), (ddpc.float64, 1e-7, 1e-7),
                                               (ddpc.float16, 1e-3, 1e-5)])
def test_default_tolerances_follow_the_dtype(dtype, rtol, atol):
    expected = ddpc.tensor([1000.0, 0.0], dtype=dtype)
    inside = (atol + rtol * 1000.0) * 0.5
    assert_close(ddpc.tensor([1000.0 + inside, atol * 0.5], dtype=dtype), expected)
    text = fails(ddpc.tensor([1000.0, atol * 4], dtype=dtype), expected)
    assert text.startswith("Tensor-likes are not close!") and "Mismatched elements: 1 / 2 (50.0%)" in text
    assert f"at index (1,) (up to {atol} allowed)" in text and f"(up to {rtol} allowed)" in text


def test_integers_compare_exactly_and_say_equal():
    text = fails(ddpc.tensor([[1, 2], [3, 4]]), ddpc.tensor([[1, 2], [3, 5]]))
    assert text.startswith("Tensor-likes are not equal!") and "Greatest absolute difference: 1 at index (1, 1)" in text
    assert "allowed" not in text
    assert_close(ddpc.tensor([3, 4]), ddpc.tensor([3, 5]), rtol=0, atol=1)


def test_nan_infinities_and_explicit_tolerances():
    nan = ddpc.tensor([1.0, math.nan])
    fails(nan, nan)
    assert_close(nan, nan, equal_nan=True)
    inf = ddpc.tensor([math.inf, -math.inf])
    assert_close(inf, inf)
    assert "Greatest absolute difference: inf" in fails(inf, ddpc.tensor([math.inf, math.inf]), rtol=1.0, atol=1e9)
    assert_close(ddpc.tensor(1.0), ddpc.tensor(1.1), rtol=0.2, atol=0.0)
    with pytest.raises(ValueError, match="Both 'rtol' and 'atol'"):
        assert_close(ddpc.tensor(1.0), ddpc.tensor(1.0), rtol=0.1)


def test_attributes_are_checked_before_values():
    assert "'shape' do not match" in fails(ddpc.zeros(2), ddpc.zeros(3))
    assert "'dtype' do not match: ddpc.float32 != ddpc.float64" in fails(ddpc.zeros(2), ddpc.zeros(2).double())
    assert_close(ddpc.zeros(2), ddpc.zeros(2).double(), check_dtype=False)
    with pytest.raises(TypeError, match="No comparison pair"):
        assert_close(ddpc.zeros(2), 0.0)


def test_containers_scalars_arrays_and_messages():
    text = fails([ddpc.tensor(1.0), {"a": ddpc.tensor(2.0)}], [ddpc.tensor(1.0), {"a": ddpc.tensor(3.0)}])
    assert text.startswith("Scalars are not close!\n\nExpected 3.0 but got 2.0.")
    assert text.endswith("The failure occurred for item [1]['a']")
    assert fails([1.0], [1.0, 2.0]) == "The length of the sequences mismatch: 1 != 2"
    assert "Missing keys in the actual mapping: ['b']" in fails({"a": 1}, {"a": 1, "b": 2})
    assert "(up to 1e-07 allowed)" in fails(1.0, 1.5)
    assert_close(np.array([1.0, 2.0]), np.array([1.0, 2.0 + 1e-9]))
    fails(np.array([1.0, 2.0]), np.array([1.0, 3.0]))
    assert fails(ddpc.tensor(1.0), ddpc.tensor(2.0), msg="custom") == "custom"
    assert fails(ddpc.tensor(1.0), ddpc.tensor(2.0), msg=lambda m: "X" + m[:7]) == "XScalars"


def test_make_tensor_ranges_and_options():
    ddpc.manual_seed(0)
    x = make_tensor((200,), dtype=ddpc.float32)
    assert x.dtype is ddpc.float32 and x.shape == (200,)
    assert -9 <= x.min().item() and x.max().item() < 9 and x.std().item() > 3
    y = make_tensor(4, 50, dtype=ddpc.int64, low=2, high=5)
    assert set(np.unique(y.numpy())) == {2, 3, 4}
    assert set(np.unique(make_tensor(300, dtype=ddpc.uint8).numpy())) == set(range(10))
    z = make_tensor(1000, dtype=ddpc.int32, low=-1, high=2, exclude_zero=True)
    assert 0 not in z.numpy() and set(np.unique(z.numpy())) == {-1, 1}
    n = make_tensor(3, 4, dtype=ddpc.float64, noncontiguous=True, requires_grad=True)
    assert not n.is_contiguous() and n.requires_grad and n.shape == (3, 4)
    with pytest.raises(ValueError, match="low must be below high"):
        make_tensor(3, dtype=ddpc.int64, low=5, high=5)
