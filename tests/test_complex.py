"""Complex dtypes (complex64, complex128): every op either gives numpy's
complex result or raises TypeError/RuntimeError; storage, numpy and DLPack
interop, views, arithmetic with PyTorch's promotion, gradients against
finite differences, optimizers, and collectives and DistributedDataParallel
on 2 ranks against closed forms."""

import warnings

import numpy as np
import pytest
from procs import run_two_ranks

import ddpc

RNG = np.random.default_rng(0)


def crandn(*shape, dtype=np.complex128):
    return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)


def close(t, expected, rtol=1e-5, atol=1e-6):
    got = t.numpy() if isinstance(t, ddpc.Tensor) else np.asarray(t)
    np.testing.assert_allclose(got, expected, rtol=rtol, atol=atol)


# ---- safety: every op works or raises ---------------------------------------------------

# (name, call, numpy's result or None where the op must raise)
_Z = crandn(2, 3, dtype=np.complex64)
_OPS = [
    ("add", lambda z: z + z, _Z + _Z),
    ("mul", lambda z: z * z, _Z * _Z),
    ("div", lambda z: z / (z + 3), _Z / (_Z + 3)),
    ("neg", lambda z: -z, -_Z),
    ("abs", lambda z: z.abs(), np.abs(_Z)),
    ("exp", lambda z: z.exp(), np.exp(_Z)),
    ("log", lambda z: z.log(), np.log(_Z)),
    ("sqrt", lambda z: z.sqrt(), np.sqrt(_Z)),
    ("reciprocal", lambda z: z.reciprocal(), 1 / _Z),
    ("pow", lambda z: z ** 3, _Z ** 3),
    ("sum", lambda z: z.sum(), _Z.sum()),
    ("sum_dim", lambda z: z.sum(1), _Z.sum(1)),
    ("mean", lambda z: z.mean(0), _Z.mean(0)),
    ("matmul", lambda z: z @ z.T, _Z @ _Z.T),
    ("conj", lambda z: z.conj(), _Z.conj()),
    ("angle", lambda z: z.angle(), np.angle(_Z)),
    ("sgn", lambda z: z.sgn(), _Z / np.abs(_Z)),
    ("clone", lambda z: z.clone(), _Z),
    ("reshape", lambda z: z.reshape(3, 2), _Z.reshape(3, 2)),
    ("transpose", lambda z: z.t(), _Z.T),
    ("permute", lambda z: z.permute(1, 0), _Z.T),
    ("index", lambda z: z[1], _Z[1]),
    ("slice", lambda z: z[:, 1:], _Z[:, 1:]),
    ("fancy_index", lambda z: z[ddpc.tensor([1, 0])], _Z[[1, 0]]),
    ("cat", lambda z: ddpc.cat([z, z], 1), np.concatenate([_Z, _Z], 1)),
    ("stack", lambda z: ddpc.stack([z, z]), np.stack([_Z, _Z])),
    ("flip", lambda z: z.flip(1), _Z[:, ::-1]),
    ("unsqueeze", lambda z: z.unsqueeze(0), _Z[None]),
    ("expand", lambda z: z[:1].expand(3, 3), np.broadcast_to(_Z[:1], (3, 3))),
    ("eq", lambda z: z == z, np.ones((2, 3), np.uint8)),
    ("ne", lambda z: z != z.conj(), (_Z != _Z.conj()).astype(np.uint8)),
    ("tanh", lambda z: z.tanh(), np.tanh(_Z)),
    ("relu", lambda z: ddpc.relu(z), None),
    ("sigmoid", lambda z: z.sigmoid(), None),
    ("sin", lambda z: z.sin(), np.sin(_Z)),
    ("cos", lambda z: ddpc.cos(z), np.cos(_Z)),
    ("square", lambda z: z.square(), _Z * _Z),
    ("roll", lambda z: z.roll(1, 1), np.roll(_Z, 1, 1)),
    ("index_select", lambda z: z.index_select(1, ddpc.tensor([2, 0])), _Z[:, [2, 0]]),
    ("gather", lambda z: z.gather(1, ddpc.tensor([[2, 2], [0, 1]])),
     np.take_along_axis(_Z, np.array([[2, 2], [0, 1]]), 1)),
    ("masked_fill", lambda z: z.masked_fill(ddpc.tensor([True, False, True]), 2j),
     np.where([True, False, True], np.complex64(2j), _Z)),
    ("max", lambda z: z.max(), None),
    ("min", lambda z: z.min(), None),
    ("argmax", lambda z: z.argmax(), None),
    ("lt", lambda z: z < z, None),
    ("maximum", lambda z: ddpc.maximum(z, z), None),
    ("sort", lambda z: z.sort(), None),
    ("cumsum", lambda z: z.cumsum(-1), np.cumsum(_Z, -1)),
    ("prod", lambda z: z.prod(), _Z.prod()),
    ("prod_dim", lambda z: z.prod(1, keepdim=True), _Z.prod(1, keepdims=True)),
    ("softmax", lambda z: z.softmax(0), None),
    ("floor", lambda z: z.floor(), None),
    ("clamp", lambda z: z.clamp(0, 1), None),
    ("where", lambda z: ddpc.where(ddpc.tensor([[1, 0, 1], [0, 1, 0]]).bool(), z, z.conj()),
     np.where([[1, 0, 1], [0, 1, 0]], _Z, _Z.conj())),
    ("where_number", lambda z: ddpc.where(ddpc.tensor([True, False, False]), 1.5, z), np.where([1, 0, 0], 1.5, _Z)),
    ("linear", lambda z: ddpc.nn.functional.linear(z, z), _Z @ _Z.T),
    ("linear_bias", lambda z: ddpc.nn.functional.linear(z, z, z[0, :2]), _Z @ _Z.T + _Z[0, :2]),
    ("linear_real_input", lambda z: ddpc.nn.functional.linear(z.real, z), None),
    ("var", lambda z: z.var(), None),
    ("norm", lambda z: z.norm(), np.linalg.norm(_Z)),
    ("vector_norm", lambda z: ddpc.linalg.vector_norm(z, 1, dim=1), np.abs(_Z).sum(1)),
    ("norm_nuc", lambda z: z.norm("nuc"), None),
    ("topk", lambda z: z.reshape(-1).topk(2), None),
]


def _equal(result, expected):
    got = result.numpy() if isinstance(result, ddpc.Tensor) else np.asarray(result)
    return got.shape == np.shape(expected) and np.allclose(got, expected, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("name,call,expected", _OPS, ids=[o[0] for o in _OPS])
def test_every_op_works_or_raises(name, call, expected):
    z = ddpc.tensor(_Z)
    if expected is None:
        with pytest.raises((TypeError, RuntimeError)):
            call(z)
    else:
        assert _equal(call(z), expected), name
    np.testing.assert_array_equal(z.numpy(), _Z)  # the input is untouched


def test_c_ops_refuse_complex_buffers_by_name():
    z = ddpc.zeros(3, dtype=ddpc.complex64)
    out = ddpc.zeros(3)
    with pytest.raises(TypeError, match="unary does not support complex64"):
        ddpc._C.unary(0, out._buf, z._buf, 0.0, 0.0)
    with pytest.raises(TypeError, match="binary does not support complex128"):
        c = ddpc.zeros(3, dtype=ddpc.complex128)
        ddpc._C.binary(0, c._buf, c._buf, c._buf)


# ---- storage --------------------------------------------------------------------------------

def test_dtypes():
    assert ddpc.cfloat is ddpc.complex64 and ddpc.cdouble is ddpc.complex128
    assert (ddpc.complex64.itemsize, ddpc.complex128.itemsize) == (8, 16)
    z = ddpc.tensor([1 + 2j])
    assert z.dtype is ddpc.complex64 and z.is_complex() and not z.is_floating_point()
    assert z.element_size() == 8 and not ddpc.ones(1).is_complex()
    assert ddpc.tensor([1 + 2j], dtype=ddpc.cdouble).dtype is ddpc.complex128
    ddpc.set_default_dtype(ddpc.float64)
    try:
        assert ddpc.tensor([1j]).dtype is ddpc.complex128
    finally:
        ddpc.set_default_dtype(ddpc.float32)


def test_creation():
    for dt in (ddpc.complex64, ddpc.complex128):
        close(ddpc.zeros(2, dtype=dt), np.zeros(2))
        close(ddpc.ones(2, dtype=dt), np.ones(2))
        assert ddpc.empty(2, 3, dtype=dt).shape == (2, 3)
        close(ddpc.full((2,), 1 - 2j, dtype=dt), np.full(2, 1 - 2j))
    t = ddpc.full((3,), 2 + 1j)
    assert t.dtype is ddpc.complex64
    close(t, np.full(3, 2 + 1j))
    t.fill_(-1j)
    close(t, np.full(3, -1j))
    with pytest.raises(TypeError):
        ddpc.zeros(2).fill_(1j)


def test_random_fills_draw_each_part():
    ddpc.manual_seed(1)
    z = ddpc.empty(100000, dtype=ddpc.complex128).normal_(2.0, 3.0).numpy()
    assert abs(z.real.mean() - 2) < 0.03 and abs(z.imag.mean() - 2) < 0.03
    assert abs(z.real.var() - 4.5) < 0.1 and abs(z.imag.var() - 4.5) < 0.1
    u = ddpc.empty(1000, dtype=ddpc.complex64).uniform_(-1, 1).numpy()
    assert -1 <= u.real.min() < -0.9 and 0.9 < u.imag.max() < 1
    n = ddpc.normal(ddpc.tensor([1 + 1j] * 50000), 1.0).numpy()
    assert abs(n.imag.var() - 0.5) < 0.02 and abs(n.mean() - (1 + 1j)) < 0.02
    with pytest.raises(TypeError):
        ddpc.empty(2, dtype=ddpc.complex64).random_(0, 5)
    with pytest.raises(TypeError, match="airy_ai does not support|this function does not support"):
        ddpc.special.airy_ai(ddpc.tensor([1j]))


def test_randn_parts_have_variance_one_half():
    ddpc.manual_seed(0)
    z = ddpc.randn(200000, dtype=ddpc.complex64).numpy()
    assert z.dtype == np.complex64
    assert abs(z.real.var() - 0.5) < 0.01 and abs(z.imag.var() - 0.5) < 0.01
    assert abs(np.mean(np.abs(z) ** 2) - 1) < 0.01
    assert abs(np.corrcoef(z.real, z.imag)[0, 1]) < 0.01
    u = ddpc.rand(100000, dtype=ddpc.complex128).numpy()
    assert 0 <= u.real.min() and u.real.max() < 1 and 0 <= u.imag.min() and u.imag.max() < 1


def test_numpy_both_ways_share_memory():
    for npdt in (np.complex64, np.complex128):
        a = crandn(2, 3, dtype=npdt)
        t = ddpc.from_numpy(a)
        assert t.dtype.name == np.dtype(npdt).name
        a[0, 0] = 5 + 5j
        assert t[0, 0].item() == 5 + 5j
        back = t.numpy()
        back[1, 2] = -1j
        assert a[1, 2] == -1j
        assert np.shares_memory(back, a)


def test_dlpack_round_trip():
    a = crandn(4, dtype=np.complex128)
    t = ddpc.from_dlpack(a)
    assert t.dtype is ddpc.complex128
    np.testing.assert_array_equal(np.from_dlpack(t), a)
    t[0] = 7j
    assert a[0] == 7j


def test_layout_ops_keep_values():
    a = crandn(2, 3, 4, dtype=np.complex64)
    z = ddpc.tensor(a)
    close(z.permute(2, 0, 1), a.transpose(2, 0, 1))
    close(z.contiguous(), a)
    close(z[..., 1], a[..., 1])
    close(z[:, ::2], a[:, ::2])
    close(z.reshape(6, 4)[3], a.reshape(6, 4)[3])
    close(ddpc.cat([z, z], 0), np.concatenate([a, a]))
    z[0, 0, 0] = 3 - 4j
    assert z[0, 0, 0].item() == 3 - 4j


def test_casts():
    r = ddpc.tensor([1.5, -2.0])
    close(r.to(ddpc.complex64), np.array([1.5, -2.0]) + 0j)
    close(ddpc.tensor([1, 2]).to(ddpc.complex128), np.array([1, 2]) + 0j)
    z = ddpc.tensor([1.25 + 2j, -3 - 1j], dtype=ddpc.complex128)
    close(z.to(ddpc.complex64), np.array([1.25 + 2j, -3 - 1j]))
    with pytest.warns(UserWarning, match="discards the imaginary part"):
        close(z.to(ddpc.float32), np.array([1.25, -3]))
    with pytest.warns(UserWarning):
        assert z.long().tolist() == [1, -3]


def test_printing():
    assert repr(ddpc.tensor([1 + 2j, 3 - 1j])) == "tensor([1.+2.j, 3.-1.j])"
    assert repr(ddpc.tensor([0.5j], dtype=ddpc.complex128)) == "tensor([0.+0.5000j], dtype=ddpc.complex128)"


def test_complex_data_needs_a_complex_dtype():
    with pytest.raises(TypeError, match="not complex"):
        ddpc.tensor([1 + 2j], dtype=ddpc.float32)
    z = ddpc.tensor([1 + 2j, 3j], dtype=ddpc.complex128)
    ddpc.testing.assert_close(z, z + 1e-9j)
    with pytest.raises(AssertionError, match="not close"):
        ddpc.testing.assert_close(z, z + 1e-3j)


def test_item_and_tolist():
    z = ddpc.tensor([[1 + 1j, 2 - 3j]])
    assert z[0, 1].item() == 2 - 3j and z.tolist() == [[1 + 1j, 2 - 3j]]


def test_save_load(tmp_path):
    z = ddpc.tensor(crandn(3, dtype=np.complex128))
    ddpc.save({"z": z}, tmp_path / "z.pt")
    back = ddpc.load(tmp_path / "z.pt")["z"]
    assert back.dtype is ddpc.complex128
    np.testing.assert_array_equal(back.numpy(), z.numpy())


# ---- views ---------------------------------------------------------------------------------

def test_view_as_real_and_complex_share_memory():
    a = crandn(2, 3, dtype=np.complex64)
    z = ddpc.tensor(a)
    r = ddpc.view_as_real(z)
    assert r.shape == (2, 3, 2) and r.dtype is ddpc.float32 and r.data_ptr() == z.data_ptr()
    close(r, np.stack([a.real, a.imag], -1))
    r[0, 0, 1] = 9.0
    assert z[0, 0].item().imag == 9.0
    back = ddpc.view_as_complex(r)
    assert back.dtype is ddpc.complex64 and back.data_ptr() == z.data_ptr()
    close(back, z.numpy())


def test_view_as_complex_errors():
    with pytest.raises(RuntimeError, match="last dimension of size 2"):
        ddpc.view_as_complex(ddpc.zeros(2, 3))
    with pytest.raises(RuntimeError, match="float and double"):
        ddpc.view_as_complex(ddpc.zeros(2, 2, dtype=ddpc.float16))
    with pytest.raises(RuntimeError, match="one or more dimensions"):
        ddpc.view_as_complex(ddpc.tensor(1.0))
    with pytest.raises(RuntimeError, match="storage_offset divisible by 2"):
        ddpc.view_as_complex(ddpc.zeros(8)[1:7].reshape(3, 2))
    with pytest.raises(RuntimeError, match="only supported for complex"):
        ddpc.view_as_real(ddpc.zeros(2))


def test_real_imag_are_writable():
    z = ddpc.tensor([1 + 2j, 3 + 4j])
    close(z.real, [1, 3])
    close(z.imag, [2, 4])
    z.real += 10
    z.imag[1] = -1
    close(z, [11 + 2j, 13 - 1j])
    z.imag = ddpc.tensor([0.0, 0.5])
    close(z, [11 + 0j, 13 + 0.5j])
    assert ddpc.tensor([1.0]).real.tolist() == [1.0]
    with pytest.raises(RuntimeError):
        ddpc.tensor([1.0]).imag


def test_complex_polar_conj():
    re, im = ddpc.tensor([1.0, -2.0]), ddpc.tensor([0.5, 3.0])
    close(ddpc.complex(re, im), [1 + 0.5j, -2 + 3j])
    with pytest.raises(RuntimeError, match="Float or Double"):
        ddpc.complex(re, im.double())
    r, th = np.array([2.0, 0.5]), np.array([0.3, -2.0])
    close(ddpc.polar(ddpc.tensor(r), ddpc.tensor(th)), r * np.exp(1j * th))
    z = ddpc.tensor([1 + 2j])
    assert z.conj().tolist() == [1 - 2j] and not z.is_conj() and z.resolve_conj() is z
    assert ddpc.isreal(ddpc.tensor([1 + 0j, 1j])).tolist() == [1, 0]
    close(ddpc.angle(ddpc.tensor([-1.0, 2.0, np.nan])), [np.pi, 0, np.nan])
    assert ddpc.angle(ddpc.tensor([-3, 0])).dtype is ddpc.float32


# ---- arithmetic ------------------------------------------------------------------------------

@pytest.mark.parametrize("a_dt,b_dt,out_dt", [
    (ddpc.float32, ddpc.complex64, ddpc.complex64),
    (ddpc.float64, ddpc.complex64, ddpc.complex128),
    (ddpc.int64, ddpc.complex64, ddpc.complex64),
    (ddpc.complex128, ddpc.complex64, ddpc.complex128),
])
def test_promotion(a_dt, b_dt, out_dt):
    a, b = ddpc.ones(3, dtype=a_dt), ddpc.ones(3, dtype=b_dt)
    assert (a + b).dtype is out_dt and (b * a).dtype is out_dt
    assert ddpc.promote_types(a_dt, b_dt) is out_dt


def test_scalars():
    x = ddpc.tensor([1.0, 2.0])
    assert (x * 1j).dtype is ddpc.complex64 and (x.double() + 1j).dtype is ddpc.complex128
    close(x * 1j, [1j, 2j])
    z = ddpc.tensor([1 + 1j, 2 - 1j])
    zn = np.array([1 + 1j, 2 - 1j])
    close(z + 2, zn + 2)
    close(2 - z, 2 - zn)
    close((1 + 1j) / z, (1 + 1j) / zn)
    close(z / 2.5, zn / 2.5)
    close(z * (0.5 - 2j), zn * (0.5 - 2j))


def test_broadcasting_and_inplace():
    a, b = crandn(4, 1, dtype=np.complex64), crandn(3, dtype=np.complex64)
    za, zb = ddpc.tensor(a), ddpc.tensor(b)
    for f in (lambda x, y: x + y, lambda x, y: x - y, lambda x, y: x * y, lambda x, y: x / y):
        close(f(za, zb), f(a, b), rtol=1e-4)
    r = ddpc.tensor(RNG.standard_normal(3).astype(np.float32))
    close(za * r, a * r.numpy(), rtol=1e-4)
    z = ddpc.tensor(a.copy())
    z *= 2j
    z += zb[:1]
    close(z, a * 2j + b[:1], rtol=1e-4)
    with pytest.raises((TypeError, RuntimeError)):
        x = ddpc.zeros(3)
        x += zb


@pytest.mark.parametrize("dt", [np.complex64, np.complex128])
def test_unary_math(dt):
    a = crandn(50, dtype=dt)
    z = ddpc.tensor(a)
    tol = dict(rtol=1e-5, atol=1e-6) if dt == np.complex64 else dict(rtol=1e-12, atol=1e-12)
    close(z.exp(), np.exp(a), **tol)
    close(z.log(), np.log(a), **tol)
    close(z.sqrt(), np.sqrt(a), **tol)
    close(ddpc.sqrt(ddpc.tensor(-a.real.astype(dt) ** 2)), np.sqrt(-a.real.astype(dt) ** 2), **tol)
    close(z.reciprocal(), 1 / a, **tol)
    close(z.abs(), np.abs(a), **tol)
    close(ddpc.angle(z), np.angle(a), **tol)
    close(z ** 2.5, a ** 2.5, rtol=1e-4 if dt == np.complex64 else 1e-11)
    close(z ** -1, 1 / a, **tol)
    close(ddpc.sgn(z), a / np.abs(a), **tol)
    assert ddpc.sgn(ddpc.zeros(1, dtype=ddpc.complex64)).tolist() == [0j]
    assert z.abs().dtype is (ddpc.float32 if dt == np.complex64 else ddpc.float64)


def test_reductions_and_products():
    a = crandn(2, 3, 4, dtype=np.complex128)
    z = ddpc.tensor(a)
    close(z.sum(), a.sum(), rtol=1e-12)
    close(z.sum((0, 2)), a.sum((0, 2)), rtol=1e-12)
    close(z.sum(-1, keepdim=True), a.sum(-1, keepdims=True), rtol=1e-12)
    close(z.mean(1), a.mean(1), rtol=1e-12)
    close(ddpc.mean(z), a.mean(), rtol=1e-12)
    b = crandn(2, 4, 5, dtype=np.complex128)
    close(ddpc.bmm(z, ddpc.tensor(b)), a @ b, rtol=1e-12)
    close(z[0] @ ddpc.tensor(b[0]), a[0] @ b[0], rtol=1e-12)
    close(ddpc.mm(z[0], ddpc.tensor(b[0].real)), a[0] @ b[0].real, rtol=1e-12)


def test_tanh_stays_finite_far_from_the_imaginary_axis():
    z = ddpc.tensor([60 + 1j, -60 - 2j, 400 + 0.5j], dtype=ddpc.complex128)
    close(z.tanh(), np.tanh(z.numpy()), rtol=1e-12, atol=1e-12)


def test_clip_grad_norm_uses_magnitudes_of_complex_gradients():
    p = ddpc.nn.Parameter(ddpc.zeros(2, dtype=ddpc.complex64))
    p.grad = ddpc.tensor([3 + 4j, 12j])
    total = ddpc.nn.utils.clip_grad_norm_([p], 6.5)
    assert total.dtype is ddpc.float32 and abs(total.item() - 13.0) < 1e-5
    close(p.grad, np.array([3 + 4j, 12j]) * 6.5 / (13.0 + 1e-6))


def test_isclose_allclose_equal():
    a = ddpc.tensor([1 + 1j, 2 + 0j])
    b = ddpc.tensor([1 + 1.000001j, 2 + 0.1j])
    assert ddpc.isclose(a, b).tolist() == [1, 0]
    assert ddpc.allclose(a, a + 1e-7) and not ddpc.allclose(a, b)
    assert ddpc.equal(a, a.clone()) and not ddpc.equal(a, b)


# ---- autograd ----------------------------------------------------------------------------

def _numeric_grad(f, z, eps=1e-6):
    """dL/dRe + i dL/dIm of the real scalar f(z) by central differences."""
    z = z.detach()
    base = z.numpy().copy()
    g = np.zeros_like(base)
    for k in range(base.size):
        for unit in (1, 1j):
            plus, minus = base.copy(), base.copy()
            plus.flat[k] += eps * unit
            minus.flat[k] -= eps * unit
            d = (f(ddpc.tensor(plus)).item() - f(ddpc.tensor(minus)).item()) / (2 * eps)
            g.flat[k] += d * unit
    return g


_LOSSES = {
    "mul": lambda z, w: (z * w).abs().sum(),
    "div": lambda z, w: ddpc.view_as_real(z / w).sum(),
    "add_sub": lambda z, w: ((z + w) * (z - 2 * w).conj()).real.sum(),
    "exp_log": lambda z, w: (z.exp() + (z * w).log()).imag.sum(),
    "sqrt_reciprocal": lambda z, w: (z.sqrt() * w.reciprocal()).abs().sum(),
    "pow": lambda z, w: ((z ** 3) * w).real.sum(),
    "angle_sgn": lambda z, w: (z.angle() + (z.sgn() * w).real).sum(),
    "sum_mean": lambda z, w: (z.sum(0) * w.mean()).abs().sum(),
    "matmul": lambda z, w: (z @ w.T).abs().sum(),
    "polar_complex": lambda z, w: (ddpc.polar(z.abs(), w.angle()) * ddpc.complex(w.real, z.imag)).real.sum(),
    "view_as": lambda z, w: (ddpc.view_as_complex(ddpc.view_as_real(z) * 2) * w).imag.sum(),
    "real_mix": lambda z, w: (z * w.abs() + w.real).abs().sum(),
    "sin_cos_tanh": lambda z, w: (z.sin() * w.cos() + (z * w).tanh()).abs().sum(),
    "prod_square": lambda z, w: (z.prod(1) * w.square().prod() + z.prod(0).sum()).real.sum(),
    "where_gather": lambda z, w: (ddpc.where(ddpc.tensor([True, False, True]), z, w) *
                                  z.gather(1, ddpc.tensor([[2, 0, 0], [1, 1, 2]]))).imag.sum(),
    "linear_norm": lambda z, w: ddpc.nn.functional.linear(z, w, w[0, :2]).abs().sum() + ddpc.linalg.vector_norm(z),
}


@pytest.mark.parametrize("name", sorted(_LOSSES))
def test_gradients_match_finite_differences(name):
    loss = _LOSSES[name]
    a, b = crandn(2, 3), crandn(2, 3) + 0.5
    z = ddpc.tensor(a, requires_grad=True)
    w = ddpc.tensor(b, requires_grad=True)
    loss(z, w).backward()
    np.testing.assert_allclose(z.grad.numpy(), _numeric_grad(lambda t: loss(t, ddpc.tensor(b)), z), rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), _numeric_grad(lambda t: loss(ddpc.tensor(a), t), w), rtol=1e-5,
                               atol=1e-6)


def test_gradcheck_checks_complex_functions_as_real_pairs():
    z = ddpc.tensor([1 + 1j, 0.5 - 2j], dtype=ddpc.complex128, requires_grad=True)
    w = ddpc.tensor([2.0, -1.0], dtype=ddpc.float64, requires_grad=True)
    assert ddpc.autograd.gradcheck(lambda a, b: (a * a.conj() * a + b).exp() / (a + 3), (z, w))
    assert ddpc.autograd.gradgradcheck(lambda a: a * a.conj() * a, (z,))

    class WrongBackward(ddpc.autograd.Function):  # the gradient of a * a without PyTorch's conjugate
        @staticmethod
        def forward(ctx, a):
            ctx.save_for_backward(a)
            return a * a

        @staticmethod
        def backward(ctx, g):
            (a,) = ctx.saved_tensors
            return g * 2 * a

    assert ddpc.autograd.gradcheck(WrongBackward.apply, (z,), raise_exception=False) is False
    assert ddpc.autograd.gradcheck(WrongBackward.apply, (z.detach().real.requires_grad_(),))


def test_gradient_of_real_input_through_complex_is_real():
    x = ddpc.tensor([1.0, 2.0], dtype=ddpc.float64, requires_grad=True)
    ((x * (1 + 2j)) * (3 - 1j)).imag.sum().backward()
    assert x.grad.dtype is ddpc.float64
    close(x.grad, [5.0, 5.0])  # Im((1 + 2i)(3 - i)) = 5


def test_conj_wirtinger_convention_for_a_product():
    a = ddpc.tensor([1 + 2j], requires_grad=True)
    b = ddpc.tensor([3 - 1j])
    (a * b).real.sum().backward()  # d Re(ab) / d Re(a) + i d Re(ab) / d Im(a) = conj(b)
    close(a.grad, [3 + 1j])


# ---- optimizers -------------------------------------------------------------------------------

def test_sgd_and_adam_step_complex_parameters_as_real_pairs():
    w0 = np.array([1 + 2j, -3 + 0.5j])
    w = ddpc.tensor(w0, dtype=ddpc.complex128, requires_grad=True)
    opt = ddpc.optim.SGD([w], lr=0.1)
    (w.abs() ** 2).sum().backward()  # |w|^2: gradient 2w in PyTorch's convention
    close(w.grad, 2 * w0)
    opt.step()
    close(w, w0 * 0.8, rtol=1e-12)
    v = ddpc.tensor(w0, dtype=ddpc.complex128, requires_grad=True)
    pairs = ddpc.tensor(np.stack([w0.real, w0.imag], -1), requires_grad=True, dtype=ddpc.float64)
    adams = ddpc.optim.Adam([v], lr=0.05), ddpc.optim.Adam([pairs], lr=0.05)
    for _ in range(3):
        for opt, t in zip(adams, (v, pairs)):
            opt.zero_grad()
            loss = (ddpc.view_as_real(t) if t.is_complex() else t) * ddpc.tensor([[1.0, -2.0], [3.0, 0.5]],
                                                                                  dtype=ddpc.float64)
            loss.sum().backward()
            opt.step()
    close(ddpc.view_as_real(v), pairs.detach().numpy(), rtol=1e-12)


def test_optimizers_without_a_complex_step_refuse_complex_parameters():
    w = ddpc.zeros(2, dtype=ddpc.complex64, requires_grad=True)
    with pytest.raises(TypeError, match="does not support complex parameters"):
        ddpc.optim.LBFGS([w])
    with pytest.raises(TypeError, match="does not support complex parameters"):
        ddpc.optim.Rprop([w])


# ---- collectives ----------------------------------------------------------------------------

_WORKER = """
import sys
import numpy as np
import ddpc
import ddpc.distributed as dist

dist.init_process_group("cpu")
rank, world = dist.get_rank(), dist.get_world_size()
for dt in (ddpc.complex64, ddpc.complex128):
    z = ddpc.tensor([(rank + 1) + 1j * (2 * rank - 1), 1j * rank], dtype=dt)
    s = z.clone()
    dist.all_reduce(s)
    assert s.dtype is dt
    assert s.tolist() == [3 + 0j, 1j], s
    m = z.clone()
    dist.all_reduce(m, op=dist.ReduceOp.AVG)
    assert m.tolist() == [1.5 + 0j, 0.5j], m
    for op in (dist.ReduceOp.MAX, dist.ReduceOp.MIN, dist.ReduceOp.PRODUCT):
        try:
            dist.all_reduce(z.clone(), op=op)
        except ValueError as e:
            assert "complex" in str(e)
        else:
            raise AssertionError("no error for a complex max/min/product")
    b = z.clone()
    dist.broadcast(b, src=1)
    assert b.tolist() == [2 + 1j, 1j], b
    out = [ddpc.zeros(2, dtype=dt) for _ in range(world)]
    dist.all_gather(out, z)
    assert [t.tolist() for t in out] == [[1 - 1j, 0j], [2 + 1j, 1j]], out
    flat = ddpc.zeros(2 * world, dtype=dt)
    dist.all_gather_into_tensor(flat, z)
    assert flat.tolist() == [1 - 1j, 0j, 2 + 1j, 1j], flat
    gathered = [ddpc.zeros(2, dtype=dt) for _ in range(world)] if rank == 0 else None
    dist.gather(z, gathered, dst=0)
    assert rank != 0 or [t.tolist() for t in gathered] == [[1 - 1j, 0j], [2 + 1j, 1j]], gathered
    piece = ddpc.zeros(1, dtype=dt)
    dist.scatter(piece, [ddpc.tensor([5 + 1j], dtype=dt), ddpc.tensor([6 - 2j], dtype=dt)] if rank == 1 else None,
                 src=1)
    assert piece.tolist() == [[5 + 1j], [6 - 2j]][rank], piece
    r = z.clone()
    dist.reduce(r, dst=1)
    assert rank != 1 or r.tolist() == [3 + 0j, 1j], r
    part = ddpc.zeros(1, dtype=dt)
    dist.reduce_scatter(part, [z[:1].clone(), z[1:].clone()])
    assert part.tolist() == [[3 + 0j], [1j]][rank], part
arr = np.array([1j * (rank + 1)], dtype=np.complex64)
dist.all_reduce(arr)
assert arr.tolist() == [3j], arr


class Rotor(ddpc.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = ddpc.nn.Parameter(ddpc.tensor([1 + 1j, 2 - 1j]))
        self.b = ddpc.nn.Parameter(ddpc.tensor([0.5, -0.5]))

    def forward(self, x):
        return ddpc.view_as_real(x * self.w).sum(-1) + self.b


model = ddpc.nn.parallel.DistributedDataParallel(Rotor())
model(ddpc.tensor([[(rank + 1) * (1 + 2j), 1j * (rank + 1)]])).sum().backward()
# d(Re(xw) + Im(xw))/dRe w + i d/dIm w = conj(x) (1 + i), averaged over the ranks' x (1.5 times rank 0's)
expected = np.conj(1.5 * np.array([1 + 2j, 1j])) * (1 + 1j)
assert np.allclose(model.module.w.grad.numpy(), expected), model.module.w.grad
assert model.module.b.grad.tolist() == [1.0, 1.0]
print(f"RANK {rank} PASS")
dist.destroy_process_group()
"""


def test_collectives_and_ddp_on_two_ranks(tmp_path):
    run_two_ranks(tmp_path, _WORKER)


# ---- GPU ---------------------------------------------------------------------------------------

gpu = pytest.mark.skipif(ddpc.cuda.device_count() == 0, reason="needs a GPU")


@pytest.mark.gpu
@gpu
def test_gpu_complex_ops_match_host():
    a, b = crandn(1000, dtype=np.complex64), crandn(1000, dtype=np.complex64)
    za, zb = ddpc.tensor(a, device="cuda"), ddpc.tensor(b, device="cuda")
    for f in (lambda x, y: x + y, lambda x, y: x * y, lambda x, y: x / y, lambda x, y: x.exp() * y.conj(),
              lambda x, y: x.log() - y.sqrt(), lambda x, y: x ** 3 + y.reciprocal(), lambda x, y: x * 2j):
        close(f(za, zb).cpu(), f(a, b), rtol=1e-4, atol=1e-5)
    close(za.abs().cpu(), np.abs(a), rtol=1e-5)
    close(za.angle().cpu(), np.angle(a), rtol=1e-5, atol=1e-6)
    close(ddpc.full((3,), 1 - 2j, device="cuda").cpu(), np.full(3, 1 - 2j))
    close(za.to(ddpc.complex128).cpu(), a.astype(np.complex128))
    close(ddpc.tensor(a.real, device="cuda").to(ddpc.complex64).cpu(), a.real + 0j)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        close(za.float().cpu(), a.real)
    close((za @ zb.reshape(1000, 1)).cpu(), a @ b.reshape(1000, 1), rtol=1e-3)
    close(za.sum().cpu(), a.sum(), rtol=1e-4)
    with pytest.raises((TypeError, RuntimeError)):
        za.tanh()
