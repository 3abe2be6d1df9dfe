"""The elementwise math functions against numpy: values, dtypes,
broadcasting, the in-place forms, gradients (closed forms and finite
differences) and edge values (NaN, inf, 0, ties, halves)."""

import math

import numpy as np
import pytest

import ddpc

np_erf = np.vectorize(math.erf, otypes=[np.float64])
EDGES = np.array([-2.5, -1.5, -0.5, 0.0, 0.5, 1.5, 2.5, 3.7, -3.7, np.nan, np.inf, -np.inf], dtype=np.float64)

# name: (numpy reference, derivative)
UNARY = {
    "abs": (np.abs, lambda x: np.sign(x)),
    "sqrt": (np.sqrt, lambda x: 0.5 / np.sqrt(x)),
    "rsqrt": (lambda x: 1 / np.sqrt(x), lambda x: -0.5 * x ** -1.5),
    "square": (np.square, lambda x: 2 * x),
    "sin": (np.sin, np.cos),
    "cos": (np.cos, lambda x: -np.sin(x)),
    "log1p": (np.log1p, lambda x: 1 / (1 + x)),
    "expm1": (np.expm1, np.exp),
    "erf": (np_erf, lambda x: 2 / np.sqrt(np.pi) * np.exp(-x * x)),
    "reciprocal": (lambda x: 1 / x, lambda x: -1 / (x * x)),
    "sign": (np.sign, np.zeros_like),
    "floor": (np.floor, np.zeros_like),
    "ceil": (np.ceil, np.zeros_like),
    "trunc": (np.trunc, np.zeros_like),
    "round": (np.round, np.zeros_like),
}
POSITIVE = ("sqrt", "rsqrt", "log1p", "reciprocal")


def _inputs(name, dtype, shape=(4, 5), seed=0):
    x = np.random.default_rng(seed).uniform(-3, 3, shape)
    if name in POSITIVE:
        x = np.abs(x) + 0.2
    return x.astype(dtype)


@pytest.mark.parametrize("name", sorted(UNARY))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_unary_values_and_gradients_match_numpy(name, dtype):
    ref, deriv = UNARY[name]
    x = _inputs(name, dtype)
    t = ddpc.tensor(x, requires_grad=True)
    out = getattr(ddpc, name)(t)
    assert out.dtype is t.dtype and out.shape == t.shape
    tol = 1e-6 if dtype == np.float32 else 1e-13
    np.testing.assert_allclose(out.detach().numpy(), ref(x.astype(np.float64)), rtol=tol, atol=tol)
    g = np.random.default_rng(1).standard_normal(x.shape).astype(dtype)
    out.backward(ddpc.tensor(g))
    np.testing.assert_allclose(t.grad.numpy(), g * deriv(x.astype(np.float64)), rtol=tol * 10, atol=tol * 10)
    np.testing.assert_allclose(getattr(t.detach(), name)().numpy(), out.detach().numpy())


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_edge_values_match_numpy(name):
    ref = UNARY[name][0]
    with np.errstate(all="ignore"):
        want = ref(EDGES)
    got = getattr(ddpc.tensor(EDGES), name)().numpy()
    if name == "sign":
        want = np.nan_to_num(want, nan=0.0)  # PyTorch's sign(NaN) is 0
    np.testing.assert_allclose(got, want, rtol=1e-15, equal_nan=True)


@pytest.mark.parametrize("name", sorted(UNARY))
def test_unary_gradient_by_finite_differences(name):
    x = _inputs(name, np.float64, (7,), seed=3)
    if name in ("sign", "floor", "ceil", "trunc", "round", "abs"):
        x = x + 0.01  # away from the steps and kinks
    t = ddpc.tensor(x, requires_grad=True)
    getattr(ddpc, name)(t).sum().backward()
    eps = 1e-6
    fd = (getattr(ddpc.tensor(x + eps), name)().numpy() - getattr(ddpc.tensor(x - eps), name)().numpy()) / (2 * eps)
    np.testing.assert_allclose(t.grad.numpy(), fd, rtol=1e-6, atol=1e-6)


def test_unary_integer_dtypes_follow_pytorch():
    i = ddpc.tensor([-3, 0, 4])
    assert i.abs().dtype is ddpc.int64 and i.abs().tolist() == [3, 0, 4]
    assert i.sign().tolist() == [-1, 0, 1] and i.square().tolist() == [9, 0, 16]
    assert i.floor().dtype is ddpc.int64 and i.round().tolist() == [-3, 0, 4]
    assert i.sqrt().dtype is ddpc.float32
    assert i.relu().dtype is ddpc.int64 and ddpc.nn.functional.relu(i).tolist() == [0, 0, 4]
    np.testing.assert_allclose(i.abs().sqrt().numpy(), np.sqrt([3, 0, 4]), rtol=1e-6)
    u = ddpc.tensor(np.array([253, 0, 7], dtype=np.uint8))
    assert u.abs().tolist() == [253, 0, 7] and u.sign().tolist() == [1, 0, 1]


def test_sixteen_bit_floats_compute_in_float32():
    x = np.array([0.3, 1.7, -2.2, 4.0], dtype=np.float32)
    for dt in (ddpc.float16, ddpc.bfloat16):
        t = ddpc.tensor(x, dtype=dt)
        for name in ("sqrt", "sin", "abs", "round"):
            out = getattr(t, name)()
            assert out.dtype is dt
            want = getattr(t.float(), name)().to(dtype=dt).float().numpy()
            np.testing.assert_array_equal(out.float().numpy(), want)


def test_round_half_to_even_and_decimals():
    x = ddpc.tensor([0.5, 1.5, 2.5, -0.5, -2.5, 1.2345, 125.0], dtype=ddpc.float64)
    assert x.round().tolist() == [0.0, 2.0, 2.0, -0.0, -2.0, 1.0, 125.0]
    np.testing.assert_allclose(ddpc.round(x, decimals=2).numpy(), [0.5, 1.5, 2.5, -0.5, -2.5, 1.23, 125.0])
    assert ddpc.round(x, decimals=-1).tolist()[-1] == 120.0
    assert round(ddpc.tensor([2.5])).tolist() == [2.0]


def test_abs_gradient_at_zero_is_zero():
    t = ddpc.tensor([0.0, -2.0, 3.0, np.nan], requires_grad=True)
    t.abs().sum().backward()
    assert t.grad.tolist() == [0.0, -1.0, 1.0, 0.0]


@pytest.mark.parametrize("name", ["abs", "sqrt", "sin", "round", "floor", "reciprocal", "expm1"])
def test_inplace_unary_writes_bumps_version_and_refuses_leaves(name):
    x = _inputs(name, np.float32)
    t = ddpc.tensor(x)
    v = t._buf.version
    res = getattr(t, name + "_")()
    assert res is t and t._buf.version > v
    np.testing.assert_allclose(t.numpy(), getattr(ddpc.tensor(x), name)().numpy())
    leaf = ddpc.tensor(x, requires_grad=True)
    with pytest.raises(RuntimeError, match="leaf"):
        getattr(leaf, name + "_")()
    with pytest.raises(TypeError, match="can't be cast"):
        getattr(ddpc.tensor([4, 9]), "sqrt_")()


def test_inplace_unary_in_the_graph_and_through_a_copy():
    a = ddpc.tensor([0.3, 1.2, 2.0], requires_grad=True)
    b = a * 2
    b.sin_()
    b.sum().backward()
    np.testing.assert_allclose(a.grad.numpy(), 2 * np.cos(2 * np.array([0.3, 1.2, 2.0])), rtol=1e-6)
    m = ddpc.tensor([[1.0, 4.0], [9.0, 16.0]])
    m[:, 1].sqrt_()  # a copy (a view in PyTorch): written back
    assert m.tolist() == [[1.0, 2.0], [9.0, 4.0]]


def test_clamp_values_dtypes_and_number_bound_gradient():
    x = np.array([0.0, 1.0, 1.5, 2.0, 3.0, np.nan])
    t = ddpc.tensor(x, requires_grad=True)
    out = t.clamp(1.0, 2.0)
    np.testing.assert_array_equal(out.detach().numpy(), np.clip(x, 1.0, 2.0))
    out.sum().backward()
    assert t.grad.tolist() == [0.0, 0.0, 1.0, 0.0, 0.0, 0.0]  # PyTorch's: 0 at the bounds and at NaN
    assert ddpc.clamp(ddpc.tensor([1.0, 5.0]), min=3.0, max=2.0).tolist() == [2.0, 2.0]
    assert ddpc.clip(ddpc.tensor([-1.0, 5.0]), max=2.0).tolist() == [-1.0, 2.0]
    assert ddpc.tensor([1.0, 5.0]).clamp_min(2).tolist() == [2.0, 5.0]
    assert ddpc.tensor([1.0, 5.0]).clamp_max(2).tolist() == [1.0, 2.0]
    i = ddpc.tensor([1, 5, -7])
    assert i.clamp(0, 4).dtype is ddpc.int64 and i.clamp(0, 4).tolist() == [1, 4, 0]
    assert i.clamp(min=2.5).dtype is ddpc.float32
    u = ddpc.tensor(np.array([0, 200], dtype=np.uint8))
    assert u.clamp(-1, 300).tolist() == [0, 200]  # bounds beyond the dtype change nothing
    with pytest.raises(ValueError, match="at least one"):
        ddpc.clamp(t)


def test_clamp_with_tensor_bounds_broadcasts_and_shares_ties():
    x = ddpc.tensor([0.0, 1.0, 1.5, 2.0, 3.0], requires_grad=True)
    lo = ddpc.tensor([1.0], requires_grad=True)
    hi = ddpc.tensor([2.0, 2.0, 2.0, 2.0, 0.5], requires_grad=True)
    out = ddpc.clamp(x, lo, hi)
    assert out.tolist() == [1.0, 1.0, 1.5, 2.0, 0.5]
    out.sum().backward()
    assert x.grad.tolist() == [0.0, 0.5, 1.0, 0.5, 0.0]
    assert lo.grad.tolist() == [1.5] and hi.grad.tolist() == [0.0, 0.0, 0.0, 0.5, 1.0]
    m = ddpc.tensor(np.arange(6.0).reshape(2, 3))
    np.testing.assert_array_equal(m.clamp(ddpc.tensor([[1.0], [4.0]]), 4.5).numpy(),
                                  np.clip(np.arange(6.0).reshape(2, 3), [[1.0], [4.0]], 4.5))


def test_clamp_inplace():
    t = ddpc.tensor([-2.0, 0.5, 3.0])
    assert t.clamp_(-1, 1) is t and t.tolist() == [-1.0, 0.5, 1.0]
    t.clip_(max=0.0)
    assert t.tolist() == [-1.0, 0.0, 0.0]


def test_maximum_minimum_broadcast_nan_ties_and_integers():
    a = np.array([[1.0, np.nan, 3.0], [4.0, 2.0, -1.0]])
    b = np.array([2.0, 0.0, 3.0])
    np.testing.assert_array_equal(ddpc.maximum(ddpc.tensor(a), ddpc.tensor(b)).numpy(), np.maximum(a, b))
    np.testing.assert_array_equal(ddpc.minimum(ddpc.tensor(b), ddpc.tensor(a)).numpy(), np.minimum(b, a))
    np.testing.assert_array_equal(ddpc.tensor(a).maximum(ddpc.tensor(a[:, :1])).numpy(), np.maximum(a, a[:, :1]))
    i = ddpc.maximum(ddpc.tensor([1, 7]), ddpc.tensor([3, 2], dtype=ddpc.int32))
    assert i.dtype is ddpc.int64 and i.tolist() == [3, 7]
    assert ddpc.minimum(ddpc.tensor([1, 7]), ddpc.tensor([3.5])).dtype is ddpc.float32
    ta, tb = ddpc.tensor(a, requires_grad=True), ddpc.tensor(b, requires_grad=True)
    ddpc.maximum(ta, tb).sum().backward()
    # loser 0, tie half each, NaN: both the whole gradient (PyTorch's rule)
    np.testing.assert_array_equal(ta.grad.numpy(), [[0.0, 1.0, 0.5], [1.0, 1.0, 0.0]])
    np.testing.assert_array_equal(tb.grad.numpy(), [1.0, 1.0, 1.5])


def test_where_broadcasts_promotes_and_routes_gradients():
    cond = np.array([[True], [False]])
    a = np.arange(6.0).reshape(2, 3)
    ta, tb = ddpc.tensor(a, requires_grad=True), ddpc.tensor([10.0, 20.0, 30.0], requires_grad=True)
    out = ddpc.where(ddpc.tensor(cond), ta, tb)
    np.testing.assert_array_equal(out.detach().numpy(), np.where(cond, a, [10.0, 20.0, 30.0]))
    out.sum().backward()
    np.testing.assert_array_equal(ta.grad.numpy(), np.where(cond, 1.0, 0.0) * np.ones((2, 3)))
    np.testing.assert_array_equal(tb.grad.numpy(), [1.0, 1.0, 1.0])
    x = ddpc.tensor([1, -2, 3])
    assert ddpc.where(x > 0, x, 0).tolist() == [1, 0, 3] and ddpc.where(x > 0, x, 0).dtype is ddpc.int64
    assert ddpc.where(x > 0, x, 0.5).dtype is ddpc.float32
    with pytest.raises(ddpc.DtypeError, match="condition to be a boolean tensor"):
        ddpc.where(x, 1.0, 0.0)  # an int64 condition, as PyTorch refuses it
    assert x.where(x < 0, 9).tolist() == [9, -2, 9]
    for dt in (ddpc.float16, ddpc.bfloat16, ddpc.uint8, ddpc.int32):
        t = ddpc.tensor([1, 2, 3], dtype=dt)
        assert ddpc.where(ddpc.tensor([True, False, True]), t, ddpc.zeros(1, dtype=dt)).tolist() == [1, 0, 3]
    with pytest.warns(UserWarning, match="uint8 condition"):  # taken, with PyTorch's deprecation warning
        z = ddpc.where(ddpc.tensor(1, dtype=ddpc.uint8), ddpc.tensor(2.0), ddpc.tensor(3.0))
    assert z.shape == () and z.item() == 2.0
    with pytest.raises(ValueError, match="broadcast"):
        ddpc.where(ddpc.ones(2, dtype=ddpc.bool), ddpc.ones(3), 0.0)


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_gradients_of_16_bit_operands_broadcast_against_integers(dtype):
    z = ddpc.tensor([1.0, 2.0]).to(dtype).requires_grad_()
    ddpc.where(z > 1, z, ddpc.tensor([[1], [2]])).sum().backward()
    assert z.grad.dtype is getattr(ddpc, dtype) and z.grad.tolist() == [0.0, 2.0]
    w = ddpc.tensor([1.0, 2.0]).to(dtype).requires_grad_()
    (w * ddpc.tensor([[1], [3]])).sum().backward()
    assert w.grad.tolist() == [4.0, 4.0]


def test_add_and_sub_scale_other_in_the_result_dtype():
    small = ddpc.tensor([200], dtype=ddpc.uint8)
    assert ddpc.add(ddpc.tensor([1, 2]), small, alpha=2).tolist() == [401, 402]
    assert ddpc.tensor([1.5], dtype=ddpc.float16).sub(small, alpha=2).tolist() == [-398.5]


def test_masked_fill_and_inplace_form():
    x = np.arange(6.0).reshape(2, 3)
    t = ddpc.tensor(x, requires_grad=True)
    mask = ddpc.tensor([True, False, True])
    out = t.masked_fill(mask, -1.0)
    np.testing.assert_array_equal(out.detach().numpy(), np.where([True, False, True], -1.0, x))
    out.sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), np.where([True, False, True], 0.0, 1.0) * np.ones((2, 3)))
    v = ddpc.tensor(5.0, requires_grad=True)
    ddpc.masked_fill(t, mask, v).sum().backward()
    assert v.grad.item() == 4.0
    u = ddpc.tensor(x)
    assert u.masked_fill_(u > 3, 0.0) is u and u.tolist() == [[0.0, 1.0, 2.0], [3.0, 0.0, 0.0]]
    i = ddpc.tensor([1, 2, 3]).masked_fill(ddpc.tensor([False, True, False]), 7)
    assert i.dtype is ddpc.int64 and i.tolist() == [1, 7, 3]
    wide = ddpc.tensor([1.0, 2.0]).masked_fill(ddpc.tensor([[True, False], [False, False]]), 0.0)
    assert wide.tolist() == [[0.0, 2.0], [1.0, 2.0]]  # x and mask broadcast together, as in PyTorch
    with pytest.raises(ValueError, match="shape"):
        ddpc.tensor([1.0, 2.0]).masked_fill_(ddpc.ones(2, 2) > 0, 0.0)
    with pytest.raises(ValueError):
        ddpc.tensor([1.0, 2.0]).masked_fill(ddpc.ones(3) > 0, 0.0)


def test_lerp_addcmul_addcdiv_values_gradients_and_inplace():
    rng = np.random.default_rng(4)
    s, e, w = (rng.standard_normal(5) for _ in range(3))
    ts, te, tw = (ddpc.tensor(v, requires_grad=True) for v in (s, e, w))
    out = ddpc.lerp(ts, te, tw)
    np.testing.assert_allclose(out.detach().numpy(), s + w * (e - s), rtol=1e-12, atol=1e-12)
    out.sum().backward()
    np.testing.assert_allclose(ts.grad.numpy(), 1 - w, rtol=1e-12)
    np.testing.assert_allclose(te.grad.numpy(), w, rtol=1e-12)
    np.testing.assert_allclose(tw.grad.numpy(), e - s, rtol=1e-12)
    assert ddpc.lerp(ddpc.tensor([1.0]), ddpc.tensor([3.0]), 1.0).tolist() == [3.0]
    np.testing.assert_allclose(ddpc.tensor(s).lerp(ddpc.tensor(e), 0.25).numpy(), s + 0.25 * (e - s), rtol=1e-12)
    a, b, c = (rng.standard_normal((2, 3)) for _ in range(3))
    ta, tb, tc = (ddpc.tensor(v, requires_grad=True) for v in (a, b, c))
    out = ddpc.addcmul(ta, tb, tc, value=0.5) + ddpc.addcdiv(ta, tb, tc, value=2)
    np.testing.assert_allclose(out.detach().numpy(), a + 0.5 * b * c + a + 2 * b / c, rtol=1e-12)
    out.sum().backward()
    np.testing.assert_allclose(tb.grad.numpy(), 0.5 * c + 2 / c, rtol=1e-12)
    np.testing.assert_allclose(tc.grad.numpy(), 0.5 * b - 2 * b / c ** 2, rtol=1e-12)
    u = ddpc.tensor(a)
    assert u.addcmul_(ddpc.tensor(b), ddpc.tensor(c)) is u
    np.testing.assert_allclose(u.numpy(), a + b * c, rtol=1e-12)
    u.addcdiv_(ddpc.tensor(b), ddpc.tensor(c), value=-1)
    np.testing.assert_allclose(u.numpy(), a + b * c - b / c, rtol=1e-12)
    u.lerp_(ddpc.tensor(b), 0.5)
    np.testing.assert_allclose(u.numpy(), (a + b * c - b / c + b) / 2, rtol=1e-12)
    # an operand that requires grad puts the in-place result in the graph
    tb2 = ddpc.tensor(b, requires_grad=True)
    v = ddpc.tensor(a)
    v.addcmul_(tb2, ddpc.tensor(c))
    assert v.requires_grad
    v.sum().backward()
    np.testing.assert_allclose(tb2.grad.numpy(), c, rtol=1e-12)


def test_predicates_and_logical_ops_give_uint8_masks():
    x = ddpc.tensor(EDGES)
    for name, ref in (("isnan", np.isnan), ("isinf", np.isinf), ("isfinite", np.isfinite)):
        m = getattr(ddpc, name)(x)
        assert m.dtype is (x < 0).dtype is ddpc.bool
        np.testing.assert_array_equal(m.numpy(), ref(EDGES))
        np.testing.assert_array_equal(getattr(x.half(), name)().numpy(), ref(EDGES.astype(np.float16)))
    i = ddpc.tensor([1, 2])
    assert i.isnan().tolist() == [0, 0] and i.isfinite().tolist() == [1, 1]
    a = np.array([[0, 1, 2], [3, 0, 0]])
    b = np.array([1.0, 0.0, np.nan])
    ta, tb = ddpc.tensor(a), ddpc.tensor(b)
    for name, ref in (("logical_and", np.logical_and), ("logical_or", np.logical_or),
                      ("logical_xor", np.logical_xor)):
        m = getattr(ddpc, name)(ta, tb)
        assert m.dtype is ddpc.bool
        np.testing.assert_array_equal(m.numpy(), ref(a, b))
    assert ta.logical_not().tolist() == np.logical_not(a).astype(int).tolist()
    assert ddpc.tensor(np.array([0, 7], dtype=np.uint8)).logical_and(ddpc.tensor([3, 3])).tolist() == [0, 1]


def test_nan_to_num_values_defaults_and_gradient():
    x = np.array([np.nan, np.inf, -np.inf, 1.5], dtype=np.float32)
    t = ddpc.tensor(x, requires_grad=True)
    out = ddpc.nan_to_num(t)
    np.testing.assert_array_equal(out.detach().numpy(), np.nan_to_num(x))
    out.sum().backward()
    assert t.grad.tolist() == [0.0, 0.0, 0.0, 1.0]
    assert ddpc.tensor(x).nan_to_num(1.0, 2.0, -3.0).tolist() == [1.0, 2.0, -3.0, 1.5]
    np.testing.assert_array_equal(ddpc.tensor(x, dtype=ddpc.float64).nan_to_num(posinf=7.0).numpy(),
                                  np.nan_to_num(x.astype(np.float64), posinf=7.0))
    assert ddpc.tensor(x).half().nan_to_num().float().tolist() == [0.0, 65504.0, -65504.0, 1.5]
    u = ddpc.tensor(x)
    assert u.nan_to_num_() is u and u.tolist()[0] == 0.0


def test_isclose_allclose_equal():
    a = np.array([1.0, np.inf, -np.inf, np.nan, 1.0, 1e-9, 100.0])
    b = np.array([1.0 + 1e-7, np.inf, np.inf, np.nan, np.inf, 0.0, 100.01])
    for kw in ({}, {"equal_nan": True}, {"rtol": 1e-3, "atol": 0.0}):
        np.testing.assert_array_equal(ddpc.isclose(ddpc.tensor(a), ddpc.tensor(b), **kw).numpy(),
                                      np.isclose(a, b, **kw).astype(np.uint8))
    assert ddpc.tensor([1, 2]).isclose(ddpc.tensor([1, 3])).tolist() == [1, 0]
    assert ddpc.allclose(ddpc.tensor([1.0, 2.0]), ddpc.tensor([1.0, 2.0 + 1e-6]))
    assert not ddpc.allclose(ddpc.tensor([1.0, 2.0]), ddpc.tensor([1.0, 2.1]))
    assert ddpc.tensor([1.0, 2.0]).allclose(ddpc.tensor([1.0, 2.0 + 1e-6]))
    assert ddpc.equal(ddpc.tensor([1, 2]), ddpc.tensor([1, 2]))
    assert not ddpc.equal(ddpc.tensor([1, 2]), ddpc.tensor([1, 3]))
    assert not ddpc.equal(ddpc.tensor([1, 2]), ddpc.tensor([[1, 2]]))
    assert not ddpc.tensor([np.nan]).equal(ddpc.tensor([np.nan]))


def test_type_as_and_new_factories():
    t = ddpc.tensor([1.0, 2.0], dtype=ddpc.float64)
    assert ddpc.tensor([1, 2]).type_as(t).dtype is ddpc.float64
    z = t.new_zeros(2, 3)
    assert z.shape == (2, 3) and z.dtype is ddpc.float64 and z.numpy().sum() == 0
    assert t.new_zeros((4,)).shape == (4,)
    assert t.new_ones(2).tolist() == [1.0, 1.0] and t.new_ones(2, dtype=ddpc.int32).dtype is ddpc.int32
    f = t.new_full((2,), 7)
    assert f.dtype is ddpc.float64 and f.tolist() == [7.0, 7.0]
    assert t.new_empty(3).shape == (3,) and t.new_empty(3).dtype is ddpc.float64
    n = t.new_tensor([3, 4])
    assert n.dtype is ddpc.float64 and n.tolist() == [3.0, 4.0]
    assert t.new_zeros(1, requires_grad=True).requires_grad


def test_top_level_functions_are_exported():
    for name in ("abs", "sqrt", "rsqrt", "square", "sin", "cos", "log1p", "expm1", "erf", "reciprocal", "sign",
                 "floor", "ceil", "trunc", "round", "clamp", "clip", "clamp_min", "clamp_max", "where", "masked_fill",
                 "maximum", "minimum", "lerp", "addcmul", "addcdiv", "isnan", "isinf", "isfinite", "logical_and",
                 "logical_or", "logical_not", "logical_xor", "nan_to_num", "allclose", "isclose", "equal"):
        assert callable(getattr(ddpc, name)) and name in ddpc.__all__, name
    assert math.isclose(ddpc.sqrt(ddpc.tensor(2.0)).item(), math.sqrt(2), rel_tol=1e-6)


GPU_CASES = [
    ("unary", lambda a: (a.abs().sqrt() + a.square().rsqrt() + a.sin() * a.cos() + (a * a).log1p() + a.expm1()
                         + a.erf() + (a + 5).reciprocal() + a.sign() + a.floor() + a.ceil() + a.trunc()
                         + ddpc.round(a, decimals=1)).sum()),
    ("clamp", lambda a: (a.clamp(-0.5, 0.7) + a.clamp(min=0.1) * 2 + a.clamp(a[:1] * 0.5, 1.0)).sum()),
    ("where", lambda a: (ddpc.where(a > 0, a * 3, a[:, :1]) + a.masked_fill(a < -1, 2.0) + ddpc.maximum(a, a[:1])
                         + ddpc.minimum(a, 0.2) + ddpc.lerp(a, a * a, 0.3) + ddpc.addcdiv(a, a, a * a + 1)).sum()),
    ("nan_to_num", lambda a: ddpc.nan_to_num(a.log()).sum() + a.isnan().float().sum()),
    ("pow", lambda a: ((a.abs() + 0.5) ** a + 2.0 ** a + (a.abs() + 0.1) ** a[:1]).sum()),
    ("unary_more", lambda a: ((a.abs() + 0.5).log2() + (a.abs() + 0.5).log10() + a.exp2() + a.sinh() + a.cosh()
                              + a.asinh() + a.atan() + ddpc.atan2(a, a[:1] + 0.5) + ddpc.remainder(a * 3, 0.7)).sum()),
]


@pytest.mark.gpu
@pytest.mark.parametrize("name,fn", GPU_CASES, ids=[c[0] for c in GPU_CASES])
def test_math_on_cuda_matches_cpu(name, fn):
    x = np.random.default_rng(5).standard_normal((6, 7)).astype(np.float32)
    res = []
    for device in ("cpu", "cuda"):
        t = ddpc.tensor(x, device=device, requires_grad=True)
        out = fn(t)
        out.backward()
        res.append((out.detach().cpu().numpy(), t.grad.cpu().numpy()))
    np.testing.assert_allclose(res[1][0], res[0][0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(res[1][1], res[0][1], rtol=1e-5, atol=1e-5)


@pytest.mark.gpu
def test_where_and_predicates_on_cuda_every_dtype_and_edge_value():
    cond = ddpc.tensor([[1], [0], [1]], dtype=ddpc.uint8)
    for dt in (ddpc.float32, ddpc.float64, ddpc.float16, ddpc.bfloat16, ddpc.int32, ddpc.int64, ddpc.uint8):
        a, b = ddpc.tensor(np.arange(12).reshape(3, 4), dtype=dt), ddpc.tensor([9, 8, 7, 6], dtype=dt)
        want = ddpc.where(cond, a, b)
        got = ddpc.where(cond.cuda(), a.cuda(), b.cuda())
        np.testing.assert_array_equal(got.cpu().float().numpy(), want.float().numpy())
    e = ddpc.tensor(EDGES)
    for name in ("isnan", "isinf", "isfinite", "sign", "round", "abs", "floor"):
        np.testing.assert_array_equal(getattr(e.cuda(), name)().cpu().numpy(), getattr(e, name)().numpy())
    i = ddpc.tensor([[1, -5, 3]])
    np.testing.assert_array_equal(ddpc.maximum(i.cuda(), i.T.cuda()).cpu().numpy(), ddpc.maximum(i, i.T).numpy())


def test_floor_division_of_an_infinity_is_nan():
    x = ddpc.tensor([np.inf, -np.inf, np.inf, 7.0], dtype=ddpc.float64)
    y = ddpc.tensor([2.0, 3.0, 0.0, np.inf], dtype=ddpc.float64)
    floor = ddpc.div(x, y, rounding_mode="floor").tolist()
    assert np.isnan(floor[0]) and np.isnan(floor[1]) and floor[2:] == [np.inf, 0.0]  # as Python's // and PyTorch's
    assert ddpc.div(x, y, rounding_mode="trunc").tolist()[:3] == [np.inf, -np.inf, np.inf]
    assert np.isnan((x // y)[0].item())


SPECIAL = np.array([0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, np.inf, -np.inf, np.nan, 1.5, -1.5])


def assert_same_values(got, want, err_msg=""):
    """Infinities, NaN and zeros (with their signs) where want has them, other
    values within float32 rounding (libm's powf is not correctly rounded)."""
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=0, err_msg=err_msg)
    assert (np.signbit(got) == np.signbit(want))[want == 0].all(), err_msg


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pow_special_values_follow_c99_and_sqrt_for_halves(dtype):
    """Tensor ** tensor and number ** tensor are C99's pow at every special
    pair; tensor ** number too, except that (as PyTorch) 0.5 and -0.5 are
    sqrt and 1 / sqrt: (-0) ** 0.5 is -0 and (-inf) ** 0.5 NaN."""
    a, b = (v.ravel().astype(dtype) for v in np.meshgrid(SPECIAL, SPECIAL, indexing="ij"))
    with np.errstate(all="ignore"):
        assert_same_values((ddpc.tensor(a) ** ddpc.tensor(b)).numpy(), np.power(a, b))
        for e in SPECIAL.astype(dtype):
            want = np.sqrt(a) if e == 0.5 else 1 / np.sqrt(a) if e == -0.5 else np.power(a, e)
            assert_same_values((ddpc.tensor(a) ** float(e)).numpy(), want.astype(dtype), f"x ** {e}")
            assert_same_values((float(e) ** ddpc.tensor(a)).numpy(), np.power(e, a), f"{e} ** x")
    x = ddpc.tensor([-0.0, -np.inf, 4.0], dtype=dtype, requires_grad=True)
    (x ** 0.5).sum().backward()  # 0.5 * x ** -0.5, again through 1 / sqrt
    assert_same_values(x.grad.numpy(), np.array([-np.inf, np.nan, 0.25], dtype=dtype))


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_pow_special_values_on_cuda_match_cpu(dtype):
    a = SPECIAL.astype(dtype)
    for e in (0.5, -0.5, 1.5, -1.5, 2.0, 3.0, -1.0, 0.0, np.inf, -np.inf, np.nan):
        outs = []
        for device in ("cpu", "cuda"):
            x = ddpc.tensor(a, device=device, requires_grad=True)
            y = x ** float(e)
            y.sum().backward()
            outs.append((y.detach().cpu().numpy(), x.grad.cpu().numpy()))
        assert_same_values(outs[1][0], outs[0][0], f"x ** {e}")
        np.testing.assert_allclose(outs[1][1], outs[0][1], rtol=1e-6, atol=0, err_msg=f"gradient of x ** {e}")


def _wide_pairs(dtype):
    """Dividends and divisors of every sign over a wide range: values above
    2**53 and quotients far beyond what a float holds exactly, with the
    special values among them."""
    rng = np.random.default_rng(11)
    top = 30 if dtype == "float32" else 300
    mags = 10.0 ** rng.uniform(-top / 3, top, 400) * rng.choice([-1, 1], 400)
    a = np.concatenate([mags, SPECIAL.repeat(len(SPECIAL)), [1e30, 2.0 ** 60, 2.0 ** 53 + 2]]).astype(dtype)
    b = np.concatenate([10.0 ** rng.uniform(-5, 5, 400) * rng.choice([-1, 1], 400), np.tile(SPECIAL, len(SPECIAL)),
                        [2.5, 3.0, 3.0]]).astype(dtype)
    return a, b


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_fmod_and_remainder_are_exact(dtype):
    """fmod is C's fmod for every pair (fmod(1e30, 2.5) is 1, not 0); the
    remainder is fmod's, moved by one divisor where the signs differ, as
    PyTorch's (so remainder(-0.0, 3) keeps -0)."""
    a, b = _wide_pairs(dtype)
    with np.errstate(all="ignore"):
        mod = np.fmod(a, b)
        rem = np.where((mod != 0) & ((b < 0) != (mod < 0)), mod + b, mod)
    assert_same_values(ddpc.fmod(ddpc.tensor(a), ddpc.tensor(b)).numpy(), mod)
    assert_same_values(ddpc.remainder(ddpc.tensor(a), ddpc.tensor(b)).numpy(), rem)
    assert_same_values((ddpc.tensor(a) % ddpc.tensor(b)).numpy(), rem)
    assert ddpc.fmod(ddpc.tensor([1e30], dtype="float64"), 2.5).item() == 1.0
    assert ddpc.fmod(ddpc.tensor(2.0 ** 60, dtype="float64"), 3.0).item() == 1.0
    # Broadcast, with a number on either side.
    np.testing.assert_array_equal(ddpc.fmod(ddpc.tensor(a[:6]).reshape(2, 3), ddpc.tensor(b[:3])).numpy(),
                                  np.fmod(a[:6].reshape(2, 3), b[:3]))
    with np.errstate(all="ignore"):
        assert_same_values((7.5 % ddpc.tensor(b)).numpy(), np.where((np.fmod(7.5, b) != 0) & (b < 0),
                                                                    np.fmod(7.5, b) + b, np.fmod(7.5, b)).astype(dtype))


def test_fmod_and_remainder_gradients():
    """d/da = 1 and d/db = -(the rounded quotient), as PyTorch's."""
    a, b = np.array([[5.3, -5.3, 7.1]]), np.array([[2.0], [-3.0]])
    for f, rounding in ((ddpc.fmod, "trunc"), (ddpc.remainder, "floor")):
        x, y = ddpc.tensor(a, requires_grad=True), ddpc.tensor(b, requires_grad=True)
        f(x, y).sum().backward()
        np.testing.assert_array_equal(x.grad.numpy(), np.full(a.shape, 2.0))
        q = (np.trunc if rounding == "trunc" else np.floor)(a / b)
        np.testing.assert_array_equal(y.grad.numpy(), -q.sum(1, keepdims=True))


def test_rounded_division_gradients_are_zeros():
    """div's rounding modes are recorded with zero gradients, as PyTorch's
    (floor_divide stays outside the graph: PyTorch's backward raises there)."""
    x, y = ddpc.tensor([[5.3, -5.3, 7.1]], requires_grad=True), ddpc.tensor([[2.0], [-3.0]], requires_grad=True)
    out = x.div(y, rounding_mode="floor") + ddpc.div(x, 2, rounding_mode="trunc")
    assert out.requires_grad
    (out * 3).sum().backward()
    assert x.grad.tolist() == [[0.0, 0.0, 0.0]] and y.grad.tolist() == [[0.0], [0.0]]
    assert not ddpc.floor_divide(x, y).requires_grad and not (x // 2).requires_grad


def test_integer_division_with_rounding_is_exact_beyond_2_53():
    a = np.array([2 ** 62 + 1, -(2 ** 62) - 3, 2 ** 53 + 1, -7, 7, 0, -(2 ** 63)], dtype=np.int64)
    b = np.array([3, -3, 7, 2, -2, 5, 1], dtype=np.int64)
    x, y = ddpc.tensor(a), ddpc.tensor(b)
    np.testing.assert_array_equal((x // y).numpy(), np.floor_divide(a, b))
    np.testing.assert_array_equal((x % y).numpy(), np.remainder(a, b))
    np.testing.assert_array_equal(ddpc.fmod(x, y).numpy(), np.fmod(a, b))
    np.testing.assert_array_equal(ddpc.div(x, y, rounding_mode="trunc").numpy(), (a - np.fmod(a, b)) // b)
    assert (x // y).dtype is ddpc.int64 and (ddpc.tensor([7], dtype="uint8") // 2).tolist() == [3]
    with pytest.raises(ZeroDivisionError):
        x // ddpc.tensor([0] * 7)
    with pytest.raises(ZeroDivisionError):
        ddpc.fmod(x, 0)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_rounded_division_keeps_the_sign_of_zero(dtype):
    """Floor division is Python's (and numpy's) //: exact remainder first, a
    zero quotient with the sign of a / b; 'trunc' is trunc(a / b). Both as
    PyTorch's, so 0.5 // -1 is -1, -0.0 // 1 and 0.5 / -1 truncated are -0."""
    a, b = _wide_pairs(dtype)
    x, y = ddpc.tensor(a), ddpc.tensor(b)
    with np.errstate(all="ignore"):
        floor, trunc = np.floor_divide(a, b), np.trunc(a / b)
    assert_same_values((x // y).numpy(), floor)
    assert_same_values(ddpc.div(x, y, rounding_mode="floor").numpy(), floor)
    assert_same_values(ddpc.div(x, y, rounding_mode="trunc").numpy(), trunc)
    zeros = ddpc.tensor([0.5, -0.0, 0.0, 3.0, -1.0], dtype=dtype) // ddpc.tensor([-1.0, 1.0, -1.0, -np.inf, np.inf],
                                                                                   dtype=dtype)
    assert_same_values(zeros.numpy(), np.array([-1.0, -0.0, -0.0, -1.0, -1.0], dtype=dtype))
    assert np.signbit(ddpc.div(ddpc.tensor([0.5], dtype=dtype), -1.0, rounding_mode="trunc").item())


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", ["float32", "float64", "float16", "int32", "int64"])
def test_rounded_division_on_cuda_matches_cpu(dtype):
    a, b = _wide_pairs("float32")
    if dtype.startswith("int"):
        rng = np.random.default_rng(12)
        a, b = rng.integers(-10 ** 6, 10 ** 6, 500), rng.integers(1, 1000, 500) * rng.choice([-1, 1], 500)
    x, y = ddpc.tensor(a, dtype=dtype), ddpc.tensor(b, dtype=dtype)
    cases = {"fmod": lambda p, q: ddpc.fmod(p, q), "remainder": lambda p, q: p % q, "floor": lambda p, q: p // q,
             "trunc": lambda p, q: ddpc.div(p, q, rounding_mode="trunc"),
             "broadcast": lambda p, q: p[:20].reshape(4, 5) // q[:5], "number": lambda p, q: ddpc.fmod(p, 3)}
    for name, f in cases.items():
        want, got = f(x, y), f(x.cuda(), y.cuda()).cpu()
        assert_same_values(got.double().numpy(), want.double().numpy(), f"{name} {dtype}")


def _ulps(got, want):
    """Distance in float32 units in the last place, on the ordered integer line of the bits."""
    g, w = got.view(np.int32).astype(np.int64), want.view(np.int32).astype(np.int64)
    g = np.where(g < 0, -(g & 0x7FFFFFFF), g)
    w = np.where(w < 0, -(w & 0x7FFFFFFF), w)
    return np.abs(g - w)


_np_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def _silu(x):
    with np.errstate(over="ignore"):
        return x / (1 + np.exp(-x))


# The host's vectorised float32 forms (csrc/fastmath.h): name: (the function, its float64 reference, the
# bound in ulps that fastmath.h states).
FAST_PATHS = {
    "sin": (ddpc.sin, np.sin, 2), "cos": (ddpc.cos, np.cos, 2), "tan": (ddpc.tan, np.tan, 3),
    "atan": (ddpc.atan, np.arctan, 3), "log": (ddpc.log, np.log, 2), "log1p": (ddpc.log1p, np.log1p, 2),
    "exp": (ddpc.exp, np.exp, 1), "expm1": (ddpc.expm1, np.expm1, 2), "tanh": (ddpc.tanh, np.tanh, 2),
    "sigmoid": (ddpc.sigmoid, lambda v: 1 / (1 + np.exp(-v)), 2), "silu": (ddpc.nn.functional.silu, _silu, 3),
    "sinh": (ddpc.sinh, np.sinh, 2), "cosh": (ddpc.cosh, np.cosh, 2), "erf": (ddpc.erf, np_erf, 3),
    "erfc": (ddpc.erfc, _np_erfc, 6),
    "gelu": (ddpc.nn.functional.gelu, lambda v: 0.5 * v * _np_erfc(-v / np.sqrt(2)), 7),
    "asinh": (ddpc.asinh, np.arcsinh, 2), "acosh": (ddpc.acosh, np.arccosh, 2), "atanh": (ddpc.atanh, np.arctanh, 2),
    "asin": (ddpc.asin, np.arcsin, 2), "acos": (ddpc.acos, np.arccos, 2),
}


@pytest.mark.parametrize("name, low, high", [
    ("sin", -10, 10), ("sin", -4096, 4096), ("sin", -1e7, 1e7), ("cos", -10, 10), ("cos", -4096, 4096),
    ("cos", -1e7, 1e7), ("log", 1e-44, 3e38), ("log", 0.5, 2.0), ("exp", -104, 89), ("exp", -1e-3, 1e-3),
    ("tanh", -12, 12), ("tanh", -0.6, 0.6), ("sigmoid", -30, 30), ("sigmoid", -87, 89), ("tan", -1.5, 1.5),
    ("tan", -4096, 4096), ("tan", -1e7, 1e7), ("atan", -3, 3), ("atan", -1e7, 1e7), ("expm1", -20, 90),
    ("expm1", -0.5, 0.5), ("log1p", -1, 1), ("log1p", 1e-30, 3e38), ("silu", -87, 89), ("silu", -6, 6),
    ("sinh", -89, 89), ("sinh", -1, 1), ("cosh", -89, 89), ("erf", -4, 4), ("erf", -0.6, 0.6), ("erfc", -4, 10),
    ("erfc", 1e-6, 10), ("gelu", -14, 6), ("gelu", -3, 3), ("asinh", -1e7, 1e7),
    ("asinh", -2, 2), ("acosh", 1, 1e7), ("acosh", 1, 3), ("atanh", -1, 1), ("asin", -1, 1), ("acos", -1, 1)])
def test_float32_fast_paths_are_within_a_few_ulps(name, low, high):
    # Against float64 numpy rounded once, each within the bound fastmath.h states; near the zeros of sin and
    # cos too, where the argument's reduction decides the relative error. Ranges that span decades are
    # sampled evenly in the logarithm; results below FLT_MIN, which carry fewer bits, are left out.
    fn, ref, bound = FAST_PATHS[name]
    rng = np.random.default_rng(7)
    x = (np.exp(rng.uniform(np.log(low), np.log(high), 300_000)) if low > 0 and high / low > 1e3
         else rng.uniform(low, high, 300_000)).astype(np.float32)
    if name in ("sin", "cos", "tan"):
        x[:6] = np.float32(np.pi) * np.array([1, 2, 1000, 1303, 2607, 2608], np.float32)
    with np.errstate(over="ignore"):
        want = ref(x.astype(np.float64)).astype(np.float32)
    got = fn(ddpc.tensor(x)).numpy()
    normal = np.abs(want) >= np.finfo(np.float32).tiny
    assert _ulps(got[normal], want[normal]).max() <= bound, name
    if hasattr(ddpc.Tensor, name + "_"):
        inplace = ddpc.tensor(x)
        getattr(inplace, name + "_")()  # out and in the same memory
        np.testing.assert_array_equal(inplace.numpy(), got)


def test_float32_fast_paths_edge_values():
    # Zeros of both signs, infinities, NaN, subnormals and the bounds where the functions overflow, underflow,
    # saturate or switch form, against float64 numpy: the same specials and signs, finite values within bound.
    x = np.array([0.0, -0.0, np.inf, -np.inf, np.nan, 1e-45, -1e-45, 1e-30, -1e-30, 0.5, -0.5, 1.0, -1.0,
                  1.0000001, 0.99999994, -0.99999994, 9.1, -9.1, 10.5, 17.5, -17.5, 25.0, 87.5, -87.5, 88.72,
                  88.73, 89.5, -89.5, -103.9, -104.0, -120.0, 4096.0, 4096.5, -8192.25, 3e38, -3e38], np.float32)
    for name, (fn, ref, bound) in FAST_PATHS.items():
        with np.errstate(all="ignore"):
            want = ref(x.astype(np.float64)).astype(np.float32)
            got = fn(ddpc.tensor(x)).numpy()
        number = ~np.isnan(want)  # a NaN's sign bit means nothing
        np.testing.assert_array_equal(np.signbit(got[number]), np.signbit(want[number]), err_msg=name)
        finite = np.isfinite(want) & (np.abs(want) >= np.finfo(np.float32).tiny)
        assert (_ulps(got[finite], want[finite]) <= bound).all(), (name, x[finite], got[finite], want[finite])
        special = ~np.isfinite(want)
        np.testing.assert_array_equal(got[special], want[special], err_msg=name)


def test_isclose_refuses_tensors_of_two_dtypes():
    for a, b in [(ddpc.tensor([1, 2]), ddpc.tensor([1.0, 2.0])),
                 (ddpc.tensor([1.0]), ddpc.tensor([1.0], dtype=ddpc.float64))]:
        with pytest.raises(ddpc.DtypeError, match="did not match"):
            ddpc.isclose(a, b)
        with pytest.raises(ddpc.DtypeError, match="did not match"):
            ddpc.allclose(a, b)
    assert ddpc.isclose(ddpc.tensor([1, 2]), ddpc.tensor([1, 3])).tolist() == [True, False]
    assert ddpc.isclose(ddpc.tensor([1.0, 2.0]), 1.0).tolist() == [True, False]  # a number takes the tensor's dtype


def test_clamp_with_a_nan_bound_gives_nan():
    x = ddpc.tensor([1.0, 2.0, 3.0], requires_grad=True)
    for kwargs in ({"min": math.nan}, {"max": math.nan}, {"min": 0.0, "max": math.nan}):
        y = ddpc.clamp(x, **kwargs)
        assert all(math.isnan(v) for v in y.tolist())
    y.sum().backward()
    assert x.grad.tolist() == [0.0, 0.0, 0.0]  # no element lies within the bounds, as PyTorch's gradient says
    assert all(math.isnan(v) for v in ddpc.tensor([1.0]).clamp_min(math.nan).tolist())
    z = ddpc.clamp(ddpc.tensor([1, 2]), min=math.nan)
    assert z.dtype is ddpc.float32 and all(math.isnan(v) for v in z.tolist())
