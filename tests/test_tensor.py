"""Tensor storage API on the host: dtypes, casts, views, arithmetic, random numbers, pickling."""

import copy
import multiprocessing as mp
import pickle

import numpy as np
import pytest

import ddpc

ALL = [ddpc.float32, ddpc.float64, ddpc.float16, ddpc.bfloat16, ddpc.int32, ddpc.int64, ddpc.uint8]
NUMPY_TYPED = [d for d in ALL if d is not ddpc.bfloat16]


def bf16_reference_bits(x):
    """bfloat16 bits of float32 values, round-to-nearest-even, written from the format's definition."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    nan = np.isnan(np.asarray(x, np.float32))
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    return np.where(nan, ((bits >> 16) | 0x40).astype(np.uint16), rounded)


def bf16_bits(t):
    return np.asarray(t._buf).copy()  # bfloat16 buffers export their raw 16-bit words


def special_floats():
    rng = np.random.default_rng(0)
    vals = [0.0, -0.0, 1.0, -1.0, np.inf, -np.inf, np.nan, 65504.0, 65519.0, 65520.0, 1e-8, 6e-8, 3e-8, 2.98e-8,
            5.96e-8, 6.1e-5, 1e38, -3.4e38, 1.00390625, 1.01171875, 2.0 ** -133]
    return np.concatenate([np.array(vals, np.float32), rng.standard_normal(5000).astype(np.float32) * 100,
                           rng.standard_normal(1000).astype(np.float32) * 1e-6,
                           rng.integers(0, 2**32, 20000, dtype=np.uint64).astype(np.uint32).view(np.float32)])


@pytest.mark.parametrize("dt", NUMPY_TYPED, ids=lambda d: d.name)
def test_round_trip_every_numpy_dtype(dt):
    a = (np.arange(24).reshape(2, 3, 4) % 17).astype(dt._np)
    t = ddpc.tensor(a)
    assert t.dtype is dt and t.shape == (2, 3, 4) and t.numel() == 24
    np.testing.assert_array_equal(t.numpy(), a)
    np.testing.assert_array_equal(ddpc.from_numpy(a).numpy(), a)


@pytest.mark.filterwarnings("ignore:overflow")
def test_float16_cast_matches_numpy_bit_for_bit():
    x = special_floats()
    got = ddpc.from_numpy(x).to(ddpc.float16).numpy()
    want = x.astype(np.float16)
    same = (got.view(np.uint16) == want.view(np.uint16)) | (np.isnan(got) & np.isnan(want))
    assert same.all(), x[~same][:5]
    back = ddpc.from_numpy(want).to(ddpc.float32).numpy()
    np.testing.assert_array_equal(back, want.astype(np.float32))


def test_bfloat16_cast_matches_reference_rounding():
    x = special_floats()
    t = ddpc.from_numpy(x).to(ddpc.bfloat16)
    assert t.dtype is ddpc.bfloat16
    np.testing.assert_array_equal(bf16_bits(t), bf16_reference_bits(x))
    widened = t.to(ddpc.float32).numpy()
    expect = (bf16_reference_bits(x).astype(np.uint32) << 16).view(np.float32)
    np.testing.assert_array_equal(widened[~np.isnan(x)], expect[~np.isnan(x)])
    assert np.isnan(widened[np.isnan(x)]).all()


@pytest.mark.parametrize("src", NUMPY_TYPED, ids=lambda d: d.name)
@pytest.mark.parametrize("dst", NUMPY_TYPED, ids=lambda d: d.name)
def test_casts_between_all_dtypes_match_numpy(src, dst):
    a = np.array([0, 1, 2, 7, 100, 127, 250], dtype=src._np)
    got = ddpc.from_numpy(a).to(dst).numpy()
    np.testing.assert_array_equal(got, a.astype(dst._np))


def test_from_numpy_and_numpy_are_zero_copy_both_ways():
    a = np.zeros((4, 3), np.float32)
    t = ddpc.from_numpy(a)
    a[1, 2] = 5.0
    assert t[1].tolist() == [0.0, 0.0, 5.0]
    t.fill_(2.0)
    assert (a == 2.0).all()
    v = t.numpy()
    v[0, 0] = -1
    assert a[0, 0] == -1 and np.shares_memory(v, a)


def test_slices_are_views_and_step_slices_copy():
    t = ddpc.arange(12, dtype=ddpc.float32).reshape(4, 3)
    s = t[1:3]
    assert s.shape == (2, 3)
    s.fill_(0)
    assert t.numpy()[1:3].sum() == 0 and t.numpy()[0].sum() == 3
    row = t[-1]
    assert row.tolist() == [9.0, 10.0, 11.0]
    stepped = t[::2]
    assert not stepped.is_contiguous()
    stepped.contiguous().fill_(7)  # a copy of its own, as PyTorch's contiguous() gives
    assert t.numpy()[0].tolist() == [0.0, 1.0, 2.0]
    stepped.fill_(7)  # written back into t, as through PyTorch's view
    assert t.numpy()[::2].tolist() == [[7.0] * 3] * 2 and t.numpy()[1].tolist() == [0.0] * 3
    assert len(t) == 4 and len(t[4:]) == 0
    with pytest.raises(IndexError):
        t[4]


def test_reshape_view_infers_and_checks():
    t = ddpc.arange(6)
    assert t.reshape(2, -1).shape == (2, 3)
    assert t.view((3, 2)).shape == (3, 2)
    with pytest.raises(ValueError):
        t.reshape(4, -1)
    with pytest.raises(ValueError):
        t.view(5)


def test_stack_cat_copy_fill():
    a, b = ddpc.ones(2, 3), ddpc.zeros(2, 3)
    np.testing.assert_array_equal(ddpc.stack([a, b]).numpy(), np.stack([np.ones((2, 3)), np.zeros((2, 3))]))
    np.testing.assert_array_equal(ddpc.cat([a, b, a]).numpy(), np.concatenate([np.ones((2, 3)), np.zeros((2, 3)),
                                                                                np.ones((2, 3))]))
    c = ddpc.empty(2, 3, dtype=ddpc.float64).copy_(a)
    assert c.dtype is ddpc.float64 and c.numpy().sum() == 6
    with pytest.raises(ValueError):
        ddpc.cat([ddpc.ones(2, 3), ddpc.ones(2, 4)])
    with pytest.raises(ValueError):
        ddpc.stack([])


@pytest.mark.parametrize("dt", [ddpc.float32, ddpc.float64, ddpc.int32, ddpc.int64], ids=lambda d: d.name)
def test_arithmetic_matches_numpy(dt):
    rng = np.random.default_rng(1)
    x = (rng.integers(1, 50, (5, 7))).astype(dt._np)
    y = (rng.integers(1, 50, (5, 7))).astype(dt._np)
    tx, ty = ddpc.tensor(x), ddpc.tensor(y)
    np.testing.assert_array_equal((tx + ty).numpy(), x + y)
    np.testing.assert_array_equal((tx - ty).numpy(), x - y)
    np.testing.assert_array_equal((tx * ty).numpy(), x * y)
    np.testing.assert_allclose((tx / ty).numpy(), x / y, rtol=1e-6)
    np.testing.assert_array_equal((tx + 3).numpy(), x + 3)
    np.testing.assert_array_equal((3 - tx).numpy(), 3 - x)
    np.testing.assert_allclose((2 / tx).numpy(), 2 / x, rtol=1e-6)
    np.testing.assert_array_equal((-tx).numpy(), -x)
    z = tx.clone()
    z += ty
    z *= 2
    np.testing.assert_array_equal(z.numpy(), (x + y) * 2)
    assert tx.sum().item() == pytest.approx(float(x.sum()))


def test_half_precision_arithmetic_rounds_once():
    x = np.array([1.0, 2.5, 1000.0, 0.1], np.float32)
    h = ddpc.from_numpy(x).half()
    got = (h * 3 + h).numpy()
    want = ((x.astype(np.float16).astype(np.float32) * 3).astype(np.float16).astype(np.float32)
            + x.astype(np.float16).astype(np.float32)).astype(np.float16)
    np.testing.assert_array_equal(got, want)
    b = ddpc.from_numpy(x).bfloat16()
    assert (b + b).float().tolist() == (b.float() * 2).tolist()


def test_sum_mean_and_promotion():
    t = ddpc.arange(10)
    assert t.sum().dtype is ddpc.int64 and t.sum().item() == 45
    assert (t / 2).dtype is ddpc.float32 and (t + 0.5).dtype is ddpc.float32
    f = ddpc.arange(10, dtype=ddpc.float32)
    assert f.mean().item() == pytest.approx(4.5)
    big = ddpc.ones(1 << 20) * 0.1
    assert big.sum().item() == pytest.approx(0.1 * (1 << 20), rel=1e-6)
    with pytest.raises(RuntimeError, match="Input dtype must be either a floating point or complex dtype. Got: Long"):
        t.mean()
    with pytest.raises(TypeError):
        i = ddpc.arange(3)
        i += 0.5
    with pytest.raises(ValueError):
        ddpc.ones(3) + ddpc.ones(4)


@pytest.mark.parametrize("dim", [0, 1, 2, -1, (0,), (0, 2), (2, 0, 1), (), None])
@pytest.mark.parametrize("keepdim", [False, True])
def test_mean_and_sum_over_any_dims_match_numpy(dim, keepdim):
    x = np.random.default_rng(3).standard_normal((2, 3, 4))
    axis = None if dim in (None, ()) else dim
    t = ddpc.tensor(x, requires_grad=True)
    out = t.mean(dim, keepdim) if dim is not None else t.mean()
    np.testing.assert_allclose(out.detach().numpy(), x.mean(axis, keepdims=keepdim), rtol=1e-12)
    np.testing.assert_allclose(t.sum(dim, keepdim).detach().numpy() if dim is not None else t.sum().detach().numpy(),
                               x.sum(axis, keepdims=keepdim), rtol=1e-12)
    out.sum().backward()
    counted = x.size if axis is None else np.prod([x.shape[d] for d in np.atleast_1d(axis)])
    np.testing.assert_allclose(t.grad.numpy(), np.full(x.shape, 1 / counted), rtol=1e-12)


def test_pow_with_tensor_exponents_and_number_bases():
    rng = np.random.default_rng(4)
    a, b = rng.random((3, 4)) + 0.2, rng.standard_normal((3, 1))
    ta, tb = ddpc.tensor(a, requires_grad=True), ddpc.tensor(b, requires_grad=True)
    out = ta ** tb
    np.testing.assert_allclose(out.detach().numpy(), a ** b, rtol=1e-12)
    out.sum().backward()
    np.testing.assert_allclose(ta.grad.numpy(), b * a ** (b - 1), rtol=1e-12)
    np.testing.assert_allclose(tb.grad.numpy(), (a ** b * np.log(a)).sum(1, keepdims=True), rtol=1e-12)
    ta.grad = None
    (3.0 ** ta).sum().backward()
    np.testing.assert_allclose(ta.grad.numpy(), 3.0 ** a * np.log(3.0), rtol=1e-12)
    with np.errstate(invalid="ignore"):  # a negative base to a fractional power is NaN in both
        np.testing.assert_allclose((ddpc.tensor(b) ** ddpc.tensor(a[:1])).numpy(), b ** a[:1], rtol=1e-12)
    # 0 ** b: no gradient to the base where b is 0, none to the exponent where b >= 0
    z, e = ddpc.tensor([0.0, 0.0, 2.0], requires_grad=True), ddpc.tensor([0.0, 2.0, 0.0], requires_grad=True)
    (z ** e).sum().backward()
    np.testing.assert_array_equal(z.grad.numpy(), [0, 0, 0])
    np.testing.assert_allclose(e.grad.numpy(), [0, 0, np.log(2)], rtol=1e-6)
    # integers stay integers, exactly; a negative integer power is refused
    i = ddpc.arange(6)
    assert (i ** 2).dtype is ddpc.int64 and (i ** 2).tolist() == [k * k for k in range(6)]
    assert (3 ** i).tolist() == [3 ** k for k in range(6)] and (i ** i).tolist() == [k ** k for k in range(6)]
    assert (i ** 0.5).dtype is ddpc.float32 and (0.5 ** i).dtype is ddpc.float32
    with pytest.raises(RuntimeError, match="negative integer powers"):
        i ** -1
    # negative powers in a tensor: 1 for a base of 1, +-1 for -1, else 0 (PyTorch's)
    base = ddpc.tensor([-2, -1, 0, 1, 2, 3])
    assert (base ** ddpc.tensor([-1, -1, -1, -2, -2, -3])).tolist() == [0, -1, 0, 1, 0, 0]
    assert (base ** ddpc.tensor([-2])).tolist() == [0, 1, 0, 1, 0, 0]
    assert (2 ** (i - 3)).tolist() == [0, 0, 0, 1, 2, 4]
    half = ddpc.tensor([1.5, 2.0], dtype=ddpc.float16)
    assert (half ** half).dtype is ddpc.float16
    assert (2 ** half).tolist() == np.float16([2 ** 1.5, 4.0]).tolist()
    x = ddpc.tensor([2.0, 3.0])
    x **= ddpc.tensor([3.0, 2.0])
    assert x.tolist() == [8.0, 9.0]

def test_random_is_reproducible_and_well_distributed():
    ddpc.manual_seed(123)
    a, b = ddpc.rand(10000), ddpc.randn(10000)
    ddpc.manual_seed(123)
    a2, b2 = ddpc.rand(10000), ddpc.randn(10000)
    np.testing.assert_array_equal(a.numpy(), a2.numpy())
    np.testing.assert_array_equal(b.numpy(), b2.numpy())
    assert 0.0 <= a.numpy().min() and a.numpy().max() < 1.0
    assert abs(a.numpy().mean() - 0.5) < 0.02
    assert abs(b.numpy().mean()) < 0.05 and abs(b.numpy().std() - 1.0) < 0.05
    r = ddpc.randint(3, 9, (5000,))
    assert r.dtype is ddpc.int64 and set(np.unique(r.numpy())) == set(range(3, 9))
    p = ddpc.randperm(1000)
    assert sorted(p.tolist()) == list(range(1000)) and p.tolist() != list(range(1000))
    assert ddpc.rand(3, dtype=ddpc.float64).dtype is ddpc.float64
    with pytest.raises(TypeError):
        ddpc.rand(3, dtype=ddpc.int32)


def test_factories_follow_torch_signatures():
    assert ddpc.zeros(2, 3).shape == (2, 3) and ddpc.zeros((2, 3)).shape == (2, 3)
    assert ddpc.ones(4, dtype=ddpc.int32).tolist() == [1, 1, 1, 1]
    assert ddpc.full((2,), 7).dtype is ddpc.int64 and ddpc.full((2,), 7.5).tolist() == [7.5, 7.5]
    assert ddpc.arange(1, 4).tolist() == [1, 2, 3] and ddpc.arange(0, 1, 0.25).tolist() == [0, 0.25, 0.5, 0.75]
    assert ddpc.tensor([1.5, 2]).dtype is ddpc.float32 and ddpc.tensor([1, 2]).dtype is ddpc.int64
    assert ddpc.tensor(np.array([1.0])).dtype is ddpc.float64
    assert ddpc.tensor(3.0).item() == 3.0 and ddpc.tensor(3.0).shape == ()
    assert ddpc.empty(3, pin_memory=True).shape == (3,)


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(TypeError, match="unknown dtype"):
        ddpc.zeros(2, dtype="complex32")
    with pytest.raises(ValueError, match="negative dimension"):
        ddpc.zeros(2, -1)
    with pytest.raises(ValueError, match="negative"):
        ddpc.from_numpy(np.zeros((4, 4), np.float32)[:, ::-1])
    copied = ddpc.tensor(np.arange(16, dtype=np.float32).reshape(4, 4)[:, ::2])
    assert copied.tolist()[1] == [4.0, 6.0]
    with pytest.raises(TypeError, match="unsupported element format"):
        ddpc.from_numpy(np.zeros(3, np.int16))
    with pytest.raises(ValueError, match="invalid device"):
        ddpc.zeros(2, device="tpu")
    # as torch.device: a cpu device may carry an index, which tensors do not keep
    assert repr(ddpc.device("cpu", 0)) == "device(type='cpu', index=0)" and str(ddpc.device("cpu:1")) == "cpu:1"
    assert ddpc.device("cpu:0") != ddpc.device("cpu") and ddpc.device("cpu", 0) == "cpu:0"
    assert ddpc.zeros(2, device="cpu:0").device == ddpc.ones(2).to("cpu:0").device == ddpc.device("cpu")
    with pytest.raises(ValueError, match="invalid device index"):
        ddpc.device("cpu", -2)
    with pytest.raises(ValueError, match="one element"):
        ddpc.ones(2).item()


def test_readonly_arrays_are_viewed_but_not_written():
    a = np.arange(4, dtype=np.float32)
    a.setflags(write=False)
    t = ddpc.from_numpy(a)
    assert t.tolist() == [0, 1, 2, 3]
    with pytest.raises(ValueError, match="read-only"):
        t.fill_(1)


def test_pickle_by_value():
    for dt in ALL:
        t = ddpc.arange(6, dtype=dt).reshape(2, 3)
        u = pickle.loads(pickle.dumps(t))
        assert u.dtype is dt and u.shape == (2, 3) and u.to(ddpc.float64).tolist() == t.to(ddpc.float64).tolist()
        assert u.data_ptr() != t.data_ptr()


def test_deepcopy_keeps_views_of_one_storage_together_and_copies_grad_and_attributes():
    x = ddpc.arange(6.0)
    r = copy.deepcopy({"x": x, "v": x.view(2, 3), "d": x.detach(), "s": x[2:4]})
    r["x"][0], r["x"][3] = 99.0, -1.0
    assert r["v"].tolist() == [[99.0, 1.0, 2.0], [-1.0, 4.0, 5.0]] and r["d"].tolist() == r["x"].tolist()
    assert r["s"].tolist() == [2.0, -1.0] and r["s"].storage_offset() == 2
    assert x.tolist() == [0.0, 1.0, 2.0, 3.0, 4.0, 5.0]  # the original keeps its memory
    a = ddpc.ones(2, requires_grad=True)
    (a * 3).sum().backward()
    a.foo = [3]
    b = copy.deepcopy(a)
    assert b.requires_grad and b.is_leaf and b.grad.tolist() == [3.0, 3.0] and b.grad.data_ptr() != a.grad.data_ptr()
    assert b.foo == [3] and b.foo is not a.foo
    with pytest.raises(RuntimeError, match=r"Only Tensors created explicitly by the user \(graph leaves\)"):
        copy.deepcopy(a * 2)
    g = ddpc.zeros(2)
    a.grad = g
    c, h = copy.deepcopy([a, g])
    assert c.grad is h


def test_deepcopy_of_a_parameter_and_copy_copy_of_a_tensor():
    p = ddpc.nn.Parameter(ddpc.ones(3))
    p.foo = 1
    (p * 2).sum().backward()
    q = copy.deepcopy(p)  # as PyTorch's: the data alone, as a parameter of the class
    assert type(q) is ddpc.nn.Parameter and q.requires_grad and q.grad is None and not hasattr(q, "foo")
    assert not copy.deepcopy(ddpc.nn.Parameter(ddpc.ones(1), requires_grad=False)).requires_grad
    a = ddpc.ones(2, requires_grad=True)
    (a * 3).sum().backward()
    a.foo = 3
    c = copy.copy(a)  # the same memory, a leaf without the grad
    assert c.data_ptr() == a.data_ptr() and c.requires_grad and c.grad is None and c.foo == 3
    cp = copy.copy(p)
    assert type(cp) is ddpc.nn.Parameter and cp.data_ptr() == p.data_ptr() and cp.foo == 1


def _double_in_child(t):
    return t * 2


def test_tensors_cross_process_boundaries():
    ctx = mp.get_context("spawn")
    with ctx.Pool(1) as pool:
        out = pool.apply(_double_in_child, (ddpc.arange(5, dtype=ddpc.float32),))
    assert isinstance(out, ddpc.Tensor) and out.tolist() == [0, 2, 4, 6, 8]


def test_cuda_tensor_unpickles_with_clear_error_where_no_gpu():
    if ddpc.cuda.device_count() > 3:
        pytest.skip("machine has a cuda:3")
    from ddpc.tensor import _rebuild_tensor
    with pytest.raises(RuntimeError, match="pickled on cuda:3"):
        _rebuild_tensor(b"\0" * 8, (2,), "float32", "cuda:3", False)


def test_uint8_scalars_wrap_modulo_256_and_integer_division_by_a_truncated_zero_is_refused():
    from ddpc import _C
    from ddpc.tensor import _DIV

    t = ddpc.tensor([0, 5, 200], dtype=ddpc.uint8)
    assert (t + (-1)).tolist() == [255, 4, 199]
    assert (t - 300).tolist() == [(v - 300) % 256 for v in (0, 5, 200)]
    for dt in (ddpc.int32, ddpc.uint8):
        a, out = ddpc.tensor([4, 5], dtype=dt), ddpc.empty(2, dtype=dt)
        for s in (0.5, 0.0) + ((256,) if dt is ddpc.uint8 else ()):
            with pytest.raises(ValueError, match="integer division by zero"):
                _C.scalar(_DIV, out._buf, a._buf, s)


INT_MINS = ((ddpc.int32, -2**31), (ddpc.int64, -2**63))


def _c_divide(op, dtype, a, b, device="cpu"):
    """The C op's integer quotient: a tensor by a scalar, or a by the tensor b."""
    from ddpc import _C

    x = ddpc.tensor(a, dtype=dtype, device=device)
    out = ddpc.empty(x.shape, dtype=dtype, device=device)
    if isinstance(b, list):
        _C.binary(op, out._buf, x._buf, ddpc.tensor(b, dtype=dtype, device=device)._buf)
    else:
        _C.scalar(op, out._buf, x._buf, b)
    return out.cpu().tolist()


def test_c_integer_division_of_int_min_by_minus_one_wraps():
    # C leaves INT_MIN / -1 undefined and x86 traps on it, which killed the process.
    from ddpc.tensor import _DIV, _RDIV

    for dt, low in INT_MINS:
        assert _c_divide(_DIV, dt, [low, 7, -7], -1.0) == [low, -7, 7]
        assert _c_divide(_DIV, dt, [low, 7, -7], [-1, 2, 2]) == [low, 3, -3]
        assert _c_divide(_RDIV, dt, [-1, 2, -3], float(low)) == [low, low // 2, low // -3]


@pytest.mark.gpu
def test_cuda_integer_division_by_a_scalar_matches_the_host():
    from ddpc.tensor import _DIV

    for dt, low in INT_MINS:
        for s in (-1.0, 3.0, -7.0):
            a = [low, 7, -7, low + 1]
            assert _c_divide(_DIV, dt, a, s, "cuda") == _c_divide(_DIV, dt, a, s)


def test_assignment_through_a_stepped_slice_writes_the_selected_rows():
    x = ddpc.zeros(4, 2)
    x[::2] = 7.0
    assert x.tolist() == [[7, 7], [0, 0], [7, 7], [0, 0]]
    y = ddpc.zeros(3)
    y[::-1] = ddpc.tensor([1.0, 2.0, 3.0])
    assert y.tolist() == [3.0, 2.0, 1.0]
    z = ddpc.zeros(4)
    z[1::2] += 5
    assert z.tolist() == [0.0, 5.0, 0.0, 5.0]
    w = ddpc.arange(4)
    w[::-1] = w  # reads every row before writing any
    assert w.tolist() == [3, 2, 1, 0]
    v = ddpc.zeros(5, dtype=ddpc.float64)
    v[4:0:-2] = [1, 2]
    assert v.tolist() == [0.0, 0.0, 2.0, 0.0, 1.0]
    with pytest.raises(ValueError, match="cannot be broadcast"):
        v[::2] = ddpc.ones(2)


def test_numpy_float_scalars_make_integer_arithmetic_float():
    t = ddpc.tensor([1, 2])
    for s in (2.5, np.float64(2.5), np.float32(2.5), np.float16(2.5)):
        r = t * s
        assert r.dtype is ddpc.float32 and r.tolist() == [2.5, 5.0], type(s)
    assert (t + np.int32(3)).dtype is ddpc.int64
    assert ddpc.full((2,), np.float32(1.5)).tolist() == [1.5, 1.5]
    assert ddpc.arange(0, 2, np.float32(0.5)).tolist() == [0.0, 0.5, 1.0, 1.5]


def test_int64_values_beyond_two_to_the_53_stay_exact():
    big = 2 ** 53 + 1
    assert ddpc.tensor([big, 0]).sum().item() == big
    assert ddpc.tensor([[big], [2]]).sum(1).tolist() == [big, 2]
    assert ddpc.full((3,), big).tolist() == [big] * 3
    assert ddpc.full((1,), -2 ** 63).item() == -2 ** 63 and ddpc.full((1,), 2 ** 63 - 1).item() == 2 ** 63 - 1
    t = ddpc.zeros(2, dtype=ddpc.int64)
    t[0] = big
    assert t.tolist() == [big, 0]
    assert (ddpc.tensor([1]) + big).item() == big + 1
    assert (big - ddpc.tensor([1])).item() == big - 1
    assert (ddpc.tensor([3]) * (2 ** 60 + 1)).item() == 3 * (2 ** 60 + 1)
    low = ddpc.tensor([2 ** 60 + 1, -(2 ** 40) - 3]).to(ddpc.int32)
    assert low.tolist() == np.array([2 ** 60 + 1, -(2 ** 40) - 3]).astype(np.int32).tolist() == [1, -3]
    assert ddpc.tensor([2 ** 40 + 300]).to(ddpc.uint8).item() == 300 % 256


def test_integers_a_dtype_cannot_hold_raise_overflow_error():
    with pytest.raises(OverflowError, match="int32"):
        ddpc.tensor([1], dtype=ddpc.int32) + 2 ** 40
    with pytest.raises(OverflowError, match="int64"):
        ddpc.tensor([1]) + 2 ** 63
    with pytest.raises(OverflowError, match="int32"):
        ddpc.zeros(2, dtype=ddpc.int32).fill_(-2 ** 31 - 1)
    with pytest.raises(OverflowError):
        ddpc.tensor([2 ** 63])
    with pytest.raises(OverflowError):
        ddpc.tensor([2 ** 64])
    with pytest.raises(OverflowError, match="int32"):
        ddpc.tensor([2 ** 31], dtype=ddpc.int32)
    assert (ddpc.tensor([1], dtype=ddpc.int32) + (2 ** 31 - 2)).item() == 2 ** 31 - 1
    assert ddpc.tensor([2 ** 63 - 1, -2 ** 63]).tolist() == [2 ** 63 - 1, -2 ** 63]


def test_inplace_ops_between_overlapping_views_match_numpy():
    for op in ("__iadd__", "__isub__", "__imul__"):
        x, n = ddpc.arange(1, 7, dtype=ddpc.float32), np.arange(1, 7, dtype=np.float32)
        getattr(x[1:], op)(x[:-1])
        getattr(n[1:], op)(n[:-1])
        assert x.tolist() == n.tolist(), op
        x, n = ddpc.arange(1, 7, dtype=ddpc.float32), np.arange(1, 7, dtype=np.float32)
        getattr(x[:-2], op)(x[2:])
        getattr(n[:-2], op)(n[2:])
        assert x.tolist() == n.tolist(), op
    x = ddpc.arange(4, dtype=ddpc.float32)
    x += x
    assert x.tolist() == [0.0, 2.0, 4.0, 6.0]


def test_integer_sum_along_a_dim_is_exact_int64():
    a = np.array([[2 ** 24 + 1, 0], [3, 4]], np.int64)
    for dt in (ddpc.int64, ddpc.int32):
        r = ddpc.tensor(a, dtype=dt).sum(1)
        assert r.dtype is ddpc.int64 and r.tolist() == a.sum(1).tolist()
    r = ddpc.tensor([[200, 100], [255, 1]], dtype=ddpc.uint8).sum(0, keepdim=True)
    assert r.dtype is ddpc.int64 and r.tolist() == [[455, 101]]


def test_reductions_take_a_dim_tuple_and_check_the_dim():
    t = ddpc.ones(2, 3)
    assert t.mean((1,)).tolist() == [1.0, 1.0] and t.mean(-2, keepdim=True).shape == (1, 3)
    with pytest.raises(IndexError, match=r"but got 5\)"):
        t.mean(5)
    with pytest.raises(IndexError, match=r"but got -3\)"):
        t.sum(-3)


def test_transposing_a_dim_with_itself_is_a_no_op():
    t = ddpc.arange(6, dtype=ddpc.float32).reshape(2, 3)
    assert t.transpose(1, 1).tolist() == t.tolist() and t.transpose(0, -2).shape == (2, 3)
    assert t.transpose(1, 0).shape == (3, 2)
    with pytest.raises(IndexError, match=r"but got 2\)"):
        t.transpose(0, 2)


def test_integer_tensors_broadcast_and_transpose():
    i = ddpc.tensor([[1, 2, 3], [4, 5, 6]])
    row = ddpc.tensor([10, 20, 30], dtype=ddpc.int32)
    assert (i + row).dtype is ddpc.int64 and (i + row).tolist() == [[11, 22, 33], [14, 25, 36]]
    assert (row - i).tolist() == [[9, 18, 27], [6, 15, 24]] and (i * row[:1]).tolist() == [[10, 20, 30], [40, 50, 60]]
    np.testing.assert_allclose((i / row).numpy(), np.array([[1, 2, 3], [4, 5, 6]]) / [10, 20, 30], rtol=1e-6)
    u = ddpc.tensor([[250, 3]], dtype=ddpc.uint8)
    assert (u + ddpc.tensor([10, 1], dtype=ddpc.uint8)).tolist() == [[4, 4]]
    for dt in (ddpc.int64, ddpc.int32, ddpc.uint8, ddpc.float16, ddpc.bfloat16):
        t = ddpc.arange(6, dtype=dt).reshape(2, 3)
        assert t.t().dtype is dt and t.t().to(ddpc.float64).tolist() == [[0, 3], [1, 4], [2, 5]]


@pytest.mark.parametrize("dt", [ddpc.float16, ddpc.bfloat16], ids=lambda d: d.name)
def test_16_bit_floats_broadcast_reduce_and_activate_in_float32_rounded_once(dt):
    rng = np.random.default_rng(3)
    x = ddpc.tensor(rng.standard_normal((4, 5)), dtype=dt)
    row = ddpc.tensor(rng.standard_normal(5), dtype=dt)
    xf, rowf = x.float(), row.float()
    pairs = [(x + row, xf + rowf), (row / x, rowf / xf), (x.sum(1), xf.sum(1)), (x.mean(0), xf.mean(0)),
             (x.exp(), xf.exp()), (x.relu(), xf.relu()), (x.tanh(), xf.tanh()),
             (ddpc.nn.functional.softmax(x, -1), ddpc.nn.functional.softmax(xf, -1)),
             (ddpc.nn.functional.log_softmax(x, -1), ddpc.nn.functional.log_softmax(xf, -1))]
    for got, want in pairs:
        assert got.dtype is dt
        np.testing.assert_array_equal(got.float().numpy(), want.to(dt).float().numpy())
    w = x.detach().requires_grad_()
    (w * row).exp().sum(1).mean().backward()
    wf = xf.detach().requires_grad_()
    (wf * rowf).exp().sum(1).mean().backward()
    assert w.grad.dtype is dt
    np.testing.assert_allclose(w.grad.float().numpy(), wf.grad.numpy(), rtol=2e-2, atol=1e-3)


def test_16_bit_rand_stays_below_one_and_randint_refuses_what_the_dtype_cannot_hold():
    for dt, levels in ((ddpc.float16, 2048), (ddpc.bfloat16, 256)):
        x = ddpc.rand(100000, dtype=dt).float().numpy()
        assert x.max() < 1.0 and x.min() >= 0.0 and len(np.unique(x)) == levels
    big = ddpc.randint(2 ** 53, 2 ** 53 + 10, (4000,)).numpy() - 2 ** 53
    assert sorted(np.unique(big).tolist()) == list(range(10))  # odd offsets too
    with pytest.raises(ValueError, match="does not fit int32"):
        ddpc.randint(0, 2 ** 40, (3,), dtype=ddpc.int32)
    with pytest.raises(ValueError, match="does not fit uint8"):
        ddpc.randint(0, 300, (3,), dtype=ddpc.uint8)


def test_comparisons_are_elementwise_uint8_masks():
    a, b = ddpc.tensor([1.0, 2.0, float("nan")]), ddpc.tensor([1.0, 5.0, float("nan")])
    assert (a == b).tolist() == [True, False, False] and (a == b).dtype is ddpc.bool
    assert (a != b).tolist() == [0, 1, 1]
    assert (a < 2).tolist() == [1, 0, 0] and (2 < a).tolist() == [0, 0, 0] and (a >= 2).tolist() == [0, 1, 0]
    assert (a <= b).tolist() == [1, 1, 0] and a.gt(1).tolist() == [0, 1, 0]
    pred, y = ddpc.tensor([3, 1, 2]), ddpc.tensor([3, 0, 2])
    assert (pred == y).sum().item() == 2 and (pred == y).float().mean().item() == pytest.approx(2 / 3)
    rows = ddpc.ones(2, 3) == ddpc.tensor([1.0, 0.0, 1.0])  # a row repeated over the leading dim
    assert rows.tolist() == [[1, 0, 1]] * 2
    small = ddpc.tensor([1, 44], dtype=ddpc.uint8)
    assert (small == 300).tolist() == [0, 0] and (small < 300).tolist() == [1, 1]  # not taken modulo 256
    assert ddpc.tensor([1.0, 2.5], dtype=ddpc.bfloat16).gt(2).tolist() == [0, 1]
    assert (a == None) is False and a in [a] and {a: 1}[a] == 1  # noqa: E711 - identity where no tensor is given
    with pytest.raises(ValueError, match="one element"):
        bool(a == b)


def test_max_min_and_their_indices():
    x = ddpc.tensor([[1.0, 5.0, 3.0], [7.0, 2.0, 7.0]], requires_grad=True)
    values, indices = ddpc.max(x, 1)
    assert values.tolist() == [5.0, 7.0] and indices.tolist() == [1, 0]  # the first of equal values
    (values * ddpc.tensor([1.0, 2.0])).sum().backward()
    assert x.grad.tolist() == [[0.0, 1.0, 0.0], [2.0, 0.0, 0.0]]
    assert x.min(0).values.tolist() == [1.0, 2.0, 3.0] and x.min(0).indices.tolist() == [0, 1, 0]
    assert x.max().item() == 7.0 and x.argmax().item() == 3 and x.argmin(1, keepdim=True).tolist() == [[0], [1]]
    assert x.max(0, keepdim=True).values.shape == (1, 3)
    assert ddpc.tensor([1.0, float("nan"), 3.0]).max().item() != ddpc.tensor([1.0, float("nan"), 3.0]).max().item()
    assert ddpc.tensor([3, 1, 2], dtype=ddpc.uint8).argmin().item() == 1
    assert ddpc.tensor([2 ** 60, 2 ** 60 + 1]).argmax().item() == 1  # int64 compared exactly
    assert ddpc.tensor([1.0, 2.0], dtype=ddpc.bfloat16).max(0).values.dtype is ddpc.bfloat16
    with pytest.raises(ValueError, match="empty"):
        ddpc.zeros(0).max()
    with pytest.raises(IndexError, match="no elements"):  # as PyTorch, also where the result would be empty
        ddpc.zeros(2, 0).max(1)
    with pytest.raises(IndexError, match="no elements"):
        ddpc.zeros(0, 0).argmin(1)


def test_cat_and_stack_along_any_dim_match_numpy():
    rng = np.random.default_rng(7)
    a, b = rng.standard_normal((2, 3, 4)).astype(np.float32), rng.standard_normal((2, 5, 4)).astype(np.float32)
    np.testing.assert_array_equal(ddpc.cat([ddpc.tensor(a), ddpc.tensor(b)], 1).numpy(), np.concatenate([a, b], 1))
    np.testing.assert_array_equal(ddpc.cat([ddpc.tensor(a), ddpc.tensor(a)], -1).numpy(), np.concatenate([a, a], -1))
    for dim in (0, 1, 2, 3, -1, -4):
        np.testing.assert_array_equal(ddpc.stack([ddpc.tensor(a), ddpc.tensor(a * 2)], dim).numpy(),
                                      np.stack([a, a * 2], dim))
    with pytest.raises(ValueError, match="differ beyond dim 0"):
        ddpc.cat([ddpc.tensor(a), ddpc.tensor(b)])
    with pytest.raises(IndexError, match="out of range"):
        ddpc.cat([ddpc.tensor(a)], 3)
    with pytest.raises(IndexError, match="out of range"):
        ddpc.stack([ddpc.tensor(a)], 4)


def test_mask_operators_act_on_truth_and_other_integers_bitwise():
    x = ddpc.tensor(np.arange(12.0).reshape(3, 4))
    a, b = x > 2, x < 8
    n = np.arange(12.0).reshape(3, 4)
    for got, want in (((a & b), (n > 2) & (n < 8)), ((a | b), (n > 2) | (n < 8)), ((a ^ b), (n > 2) ^ (n < 8)),
                      (~a, ~(n > 2)), ((a & True), n > 2), ((False | a), n > 2)):
        assert got.dtype is ddpc.bool
        np.testing.assert_array_equal(got.numpy(), want)
    # ~ of a mask is its logical not, so where() picks the other side (not 254/255, which are both true)
    np.testing.assert_array_equal(ddpc.where(~a, x, -1.0).numpy(), np.where(n > 2, -1.0, n))
    m = a.clone()
    m &= b
    np.testing.assert_array_equal(m.numpy(), (n > 2) & (n < 8))
    assert (ddpc.arange(6) & ddpc.arange(6).flip(0)).tolist() == [0, 0, 2, 2, 0, 0]  # bitwise, as PyTorch's
    with pytest.raises(NotImplementedError, match="integer"):
        x | a
    assert (~ddpc.arange(3)).tolist() == [-1, -2, -3]  # other integers: bitwise, as PyTorch's


def test_binary_max_min_dtype_reductions_and_inplace_unary_methods():
    x = ddpc.tensor([[1.0, 5.0], [4.0, 2.0]], requires_grad=True)
    y = ddpc.tensor([[3.0, 3.0], [3.0, 3.0]])
    assert ddpc.max(x, y).tolist() == [[3, 5], [4, 3]] and x.min(y).tolist() == [[1, 3], [3, 2]]
    ddpc.max(x, y).sum().backward()
    assert x.grad.tolist() == [[0, 1], [1, 0]]
    assert x.sum(dtype=ddpc.float64).dtype is ddpc.float64 and x.mean(0, dtype=ddpc.float64).tolist() == [2.5, 3.5]
    t = ddpc.tensor([0.5, -1.0])
    for name, f in (("exp_", np.exp), ("log_", lambda v: np.log(np.abs(v))), ("neg_", np.negative),
                    ("relu_", lambda v: np.maximum(v, 0)), ("sigmoid_", lambda v: 1 / (1 + np.exp(-v))),
                    ("tanh_", np.tanh)):
        c = t.abs() if name == "log_" else t.clone()
        before = c.numpy().copy()
        assert getattr(c, name)() is c
        np.testing.assert_allclose(c.numpy(), f(before), rtol=1e-6, err_msg=name)
    c = t.clone()
    c.pow_(2)
    assert c.tolist() == [0.25, 1.0]


def test_take_along_dim_index_put_and_single_argument_where():
    rng = np.random.default_rng(5)
    a = rng.standard_normal((3, 4))
    idx = rng.integers(0, 4, (3, 2))
    t = ddpc.tensor(a, requires_grad=True)
    got = ddpc.take_along_dim(t, ddpc.tensor(idx), 1)
    np.testing.assert_array_equal(got.detach().numpy(), np.take_along_axis(a, idx, 1))
    np.testing.assert_array_equal(t.take_along_dim(ddpc.tensor(idx[:1]), 1).detach().numpy(),
                                  np.take_along_axis(a, np.broadcast_to(idx[:1], (3, 2)), 1))
    np.testing.assert_array_equal(ddpc.take_along_dim(t, ddpc.tensor([5, 0])).detach().numpy(), a.reshape(-1)[[5, 0]])
    rows, cols = ddpc.tensor([0, 0, 2, -1]), ddpc.tensor([1, 1, 3, 0])
    put = ddpc.index_put(t, (rows, cols), ddpc.tensor(1.0, dtype=ddpc.float64), accumulate=True)
    want = a.copy()
    np.add.at(want, ([0, 0, 2, -1], [1, 1, 3, 0]), 1.0)
    np.testing.assert_allclose(put.detach().numpy(), want, rtol=1e-12)
    put.sum().backward()
    np.testing.assert_array_equal(t.grad.numpy(), np.ones((3, 4)))
    c = ddpc.tensor(a)
    c.index_put_((ddpc.tensor([1, 2]),), ddpc.tensor(np.zeros(4)))
    want = a.copy()
    want[[1, 2]] = 0
    np.testing.assert_array_equal(c.numpy(), want)
    r, k = ddpc.where(ddpc.tensor(a) > 0)
    np.testing.assert_array_equal(np.stack([r.numpy(), k.numpy()]), np.stack(np.nonzero(a > 0)))


def test_zero_dim_tensors_promote_only_across_kinds():
    # PyTorch's rule: beside a tensor with dims, a 0-d tensor decides the dtype
    # only where it is floating and the other integer.
    v = ddpc.ones(3)
    assert (v + ddpc.tensor(2.0, dtype=ddpc.float64)).dtype is ddpc.float32
    assert (ddpc.tensor(2.0, dtype=ddpc.float64) * v.half()).dtype is ddpc.float16
    assert (v.to(ddpc.uint8) + ddpc.tensor(3)).dtype is ddpc.uint8
    assert (v.int() - ddpc.tensor(2.5, dtype=ddpc.float64)).dtype is ddpc.float64
    assert (ddpc.tensor(1.0, dtype=ddpc.float16) + ddpc.ones(2, dtype=ddpc.bfloat16)).dtype is ddpc.bfloat16
    assert ddpc.where(v > 0, v, ddpc.tensor(0.0, dtype=ddpc.float64)).dtype is ddpc.float32
    assert ddpc.atan2(v, ddpc.tensor(1.0, dtype=ddpc.float64)).dtype is ddpc.float32
    assert (ddpc.tensor(2.0) + ddpc.tensor(1.0, dtype=ddpc.float64)).dtype is ddpc.float64  # both 0-d
    assert (ddpc.ones(1, dtype=ddpc.float64) + v).dtype is ddpc.float64  # both with dims


def test_inplace_ops_cast_their_result_except_floating_to_integer():
    x = ddpc.ones(2, 3, dtype=ddpc.bfloat16)
    x += ddpc.tensor([1.5, 2.5, 3.5])
    assert x.dtype is ddpc.bfloat16 and x.float().tolist() == [[2.5, 3.5, 4.5]] * 2
    h = ddpc.ones(3, dtype=ddpc.float16)
    h.mul_(ddpc.tensor([0.5, 0.25, 2.0], dtype=ddpc.float64))
    assert h.dtype is ddpc.float16 and h.tolist() == [0.5, 0.25, 2.0]
    i = ddpc.ones(3, dtype=ddpc.int32)
    i *= ddpc.tensor([2, 3, 4])
    assert i.dtype is ddpc.int32 and i.tolist() == [2, 3, 4]
    with pytest.raises(TypeError):
        i += 2.5
    with pytest.raises(TypeError):
        i.add_(ddpc.ones(3))
    p = ddpc.ones(3, requires_grad=True)
    q = p * 1
    q += ddpc.tensor([1.0, 2.0, 3.0], dtype=ddpc.float64)
    (q * ddpc.tensor([1.0, 2.0, 3.0])).sum().backward()
    assert q.dtype is ddpc.float32 and p.grad.tolist() == [1.0, 2.0, 3.0]


def test_copy_broadcasts_the_source():
    z = ddpc.zeros(2, 3)
    z.copy_(ddpc.tensor([1.0, 2.0, 3.0]))
    assert z.tolist() == [[1.0, 2.0, 3.0]] * 2
    w = ddpc.zeros(2, 3, requires_grad=True).clone()
    s = ddpc.tensor([1.0, 2.0, 3.0], requires_grad=True)
    w.copy_(s)
    (w * ddpc.tensor([[1.0], [2.0]])).sum().backward()
    assert s.grad.tolist() == [3.0, 3.0, 3.0]
    with pytest.raises(ValueError):
        z.copy_(ddpc.ones(2))


def test_large_host_copies_split_across_threads_are_exact():
    # From 4 MiB on, host copies go in 2 MiB pieces on 4 KiB boundaries: odd sizes leave a
    # tail, and a destination one element into a buffer is not page-aligned.
    threads = ddpc.get_num_threads()
    try:
        for n in (1_048_576 + 1, 3_000_001):
            src = ddpc.from_numpy(np.random.default_rng(n).standard_normal(n).astype(np.float32))
            for k in (1, 3):
                ddpc.set_num_threads(k)
                dst = ddpc.zeros(n)
                dst.copy_(src)
                np.testing.assert_array_equal(dst.numpy(), src.numpy())
                big = ddpc.zeros(n + 2)
                big[1:-1].copy_(src)
                got = big.numpy()
                assert got[0] == 0 and got[-1] == 0
                np.testing.assert_array_equal(got[1:-1], src.numpy())
    finally:
        ddpc.set_num_threads(threads)


def test_cat_leaves_out_one_dim_empty_tensors_but_counts_their_dtype():
    grown = ddpc.cat([ddpc.tensor([]), ddpc.tensor([[1, 2]])])
    assert grown.dtype is ddpc.float32 and grown.tolist() == [[1.0, 2.0]]
    assert ddpc.cat([ddpc.zeros(0, dtype=ddpc.int64), ddpc.ones(2, 3, dtype=ddpc.int32)], 1).dtype is ddpc.int64
    assert ddpc.cat([ddpc.zeros(0), ddpc.zeros(0)]).shape == (0,)
    y = ddpc.ones(2, 2, requires_grad=True)
    ddpc.cat([ddpc.zeros(0, requires_grad=True), y], -1).sum().backward()
    assert y.grad.tolist() == [[1.0, 1.0]] * 2
    with pytest.raises(ValueError):
        ddpc.cat([ddpc.zeros(1), ddpc.ones(2, 2)])


def test_chunk_of_an_empty_dim_gives_chunks_empty_pieces():
    assert [p.shape for p in ddpc.zeros(0, 3).chunk(3)] == [(0, 3)] * 3
    assert [p.shape for p in ddpc.zeros(2, 0).chunk(2, 1)] == [(2, 0)] * 2


def test_integer_division_runs_in_the_result_dtype():
    x = ddpc.tensor([1, 7, 200], dtype=ddpc.uint8)
    # uint8 (N,) with an int64 0-d tensor is uint8, so -5 is read as the uint8 251, as in PyTorch
    assert ddpc.div(x, ddpc.tensor(-5), rounding_mode="floor").tolist() == [0, 0, 0]
    assert ddpc.remainder(x, ddpc.tensor(-5)).tolist() == [1, 7, 200]
    assert (x // ddpc.tensor(3)).tolist() == [0, 2, 66] and (x // ddpc.tensor(3)).dtype is ddpc.uint8
    assert ddpc.remainder(ddpc.tensor([-7, 7]), ddpc.tensor(3, dtype=ddpc.uint8)).tolist() == [2, 1]


def test_casts_to_bool_test_nonzero():
    x = ddpc.tensor([0.5, 256.0, -1.0, 0.0, np.nan])
    want = [True, True, True, False, True]  # PyTorch's bool of each (a cast to an integer would truncate 0.5 to 0)
    for got in (x.bool(), x.to(bool), x.to(dtype=np.bool_), x.to("bool"), ddpc.tensor(x, dtype=bool)):
        assert got.dtype is ddpc.bool and got.tolist() == want
    assert ddpc.tensor([0.5, 2.0, 0.0], dtype=bool).tolist() == [True, True, False]
    assert ddpc.tensor(np.array([0.5, 300.0]), dtype=bool).tolist() == [1, 1]
    assert ddpc.full((2,), 2.5, dtype=bool).tolist() == [1, 1]
    assert ddpc.tensor([2, 256, 0]).bool().tolist() == [1, 1, 0]
    assert x.to(ddpc.uint8).tolist() == [0, 0, 255, 0, 0]  # a cast to uint8 still truncates and wraps
