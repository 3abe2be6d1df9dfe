"""ddpc.fft against numpy.fft: values and dtypes of every transform for each
norm, odd and even lengths, padding and truncation through n and s, several
dims; PyTorch's errors; out=; fftfreq, rfftfreq and the shifts; gradients
against finite differences (gradcheck, and gradgradcheck for a few); and, on
a GPU, cuFFT's results and gradients against the host's."""

import numpy as np
import pytest

import ddpc
from ddpc import fft as F

RNG = np.random.default_rng(0)
NORMS = (None, "backward", "ortho", "forward")


def randn(*shape, dtype=np.float64):
    if np.dtype(dtype).kind == "c":
        return (RNG.standard_normal(shape) + 1j * RNG.standard_normal(shape)).astype(dtype)
    return RNG.standard_normal(shape).astype(dtype)


def close(t, expected, dtype=None):
    got = t.numpy() if isinstance(t, ddpc.Tensor) else np.asarray(t)
    single = np.dtype(dtype or got.dtype) in (np.float32, np.complex64)
    np.testing.assert_allclose(got, expected, rtol=1e-4 if single else 1e-10, atol=1e-4 if single else 1e-10)


# ---- 1-d transforms ------------------------------------------------------------------------

@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("n", [None, 5, 8, 13])
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.complex64, np.complex128])
def test_fft_and_ifft_match_numpy(norm, n, dtype):
    a = randn(3, 8, dtype=dtype)
    want_dtype = np.result_type(dtype, np.complex64)
    for ours, theirs in ((F.fft, np.fft.fft), (F.ifft, np.fft.ifft)):
        got = ours(ddpc.tensor(a), n=n, norm=norm)
        assert got.dtype.name == np.dtype(want_dtype).name
        close(got, theirs(a, n=n, norm=norm))
        close(ours(ddpc.tensor(a), n=n, dim=0, norm=norm), theirs(a, n=n, axis=0, norm=norm))


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("n", [None, 1, 6, 7, 12])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_one_sided_transforms_match_numpy(norm, n, dtype):
    a = randn(2, 9, dtype=dtype)
    ctype = np.result_type(dtype, np.complex64)
    z = randn(2, 5, dtype=ctype)
    r = F.rfft(ddpc.tensor(a), n=n, norm=norm)
    assert r.dtype.name == np.dtype(ctype).name
    close(r, np.fft.rfft(a, n=n, norm=norm))
    close(F.ihfft(ddpc.tensor(a), n=n, norm=norm), np.fft.ihfft(a, n=n, norm=norm))
    i = F.irfft(ddpc.tensor(z), n=n, norm=norm)
    assert i.dtype.name == np.dtype(dtype).name
    close(i, np.fft.irfft(z, n=n, norm=norm))
    close(F.hfft(ddpc.tensor(z), n=n, norm=norm), np.fft.hfft(z, n=n, norm=norm))
    close(F.rfft(ddpc.tensor(a), n=n, dim=0, norm=norm), np.fft.rfft(a, n=n, axis=0, norm=norm))
    close(F.irfft(ddpc.tensor(z), n=n, dim=0, norm=norm), np.fft.irfft(z, n=n, axis=0, norm=norm))


def test_round_trips():
    a, z = randn(4, 10), randn(4, 6, dtype=np.complex128)
    z[:, 0] = z[:, 0].real  # the zero frequency of a real signal is real
    for norm in NORMS:
        close(F.ifft(F.fft(ddpc.tensor(a), norm=norm), norm=norm), a.astype(complex))
        close(F.irfft(F.rfft(ddpc.tensor(a), norm=norm), n=10, norm=norm), a)
        close(F.ihfft(F.hfft(ddpc.tensor(z), n=11, norm=norm), norm=norm), z)


def test_integer_and_bool_inputs_take_the_default_float_dtype():
    for values in ([1, 2, 3, 4], [True, False, True]):
        t = ddpc.tensor(values)
        assert F.fft(t).dtype is ddpc.complex64
        assert F.rfft(t).dtype is ddpc.complex64
        assert F.irfft(t).dtype is ddpc.float32
        close(F.fft(t), np.fft.fft(np.asarray(values, np.float32)))
    ddpc.set_default_dtype(ddpc.float64)
    try:
        assert F.fft(ddpc.tensor([1, 2])).dtype is ddpc.complex128
    finally:
        ddpc.set_default_dtype(ddpc.float32)


def test_real_inputs_of_the_complex_to_real_transforms():
    a = randn(3, 5)
    close(F.irfft(ddpc.tensor(a)), np.fft.irfft(a.astype(complex)))
    close(F.hfft(ddpc.tensor(a), n=7), np.fft.hfft(a.astype(complex), n=7))


# ---- n-d transforms ------------------------------------------------------------------------

@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("s,dim", [(None, None), ((3, 8), None), ((5,), (0,)), (None, (0, 2)), ((4, 3, 6), None),
                                   ((-1, 7), (2, 1)), (None, (-1,)), ((6, 4), (1, -3))])
def test_n_dim_transforms_match_numpy(norm, s, dim):
    a, z = randn(4, 5, 6), randn(4, 5, 6, dtype=np.complex128)
    axes = dim if dim is not None else None if s is None else tuple(range(3 - len(s), 3))
    shape = None if s is None else tuple(a.shape[d] if n == -1 else n for n, d in zip(s, axes))
    close(F.fftn(ddpc.tensor(z), s=s, dim=dim, norm=norm), np.fft.fftn(z, s=shape, axes=axes, norm=norm))
    close(F.ifftn(ddpc.tensor(z), s=s, dim=dim, norm=norm), np.fft.ifftn(z, s=shape, axes=axes, norm=norm))
    close(F.fftn(ddpc.tensor(a), s=s, dim=dim, norm=norm), np.fft.fftn(a, s=shape, axes=axes, norm=norm))
    close(F.rfftn(ddpc.tensor(a), s=s, dim=dim, norm=norm), np.fft.rfftn(a, s=shape, axes=axes, norm=norm))
    close(F.irfftn(ddpc.tensor(z), s=s, dim=dim, norm=norm), np.fft.irfftn(z, s=shape, axes=axes, norm=norm))


@pytest.mark.parametrize("norm", NORMS)
def test_two_dim_transforms_match_numpy(norm):
    a, z = randn(3, 6, 7), randn(3, 6, 4, dtype=np.complex64)
    close(F.fft2(ddpc.tensor(z), norm=norm), np.fft.fft2(z, norm=norm))
    close(F.ifft2(ddpc.tensor(z), s=(5, 5), norm=norm), np.fft.ifft2(z, s=(5, 5), norm=norm))
    close(F.rfft2(ddpc.tensor(a), norm=norm), np.fft.rfft2(a, norm=norm), np.float32)
    close(F.irfft2(ddpc.tensor(z), norm=norm), np.fft.irfft2(z, norm=norm))
    close(F.fft2(ddpc.tensor(a), dim=(0, 2), norm=norm), np.fft.fft2(a, axes=(0, 2), norm=norm))
    close(F.irfft2(ddpc.tensor(z), s=(4, 9), dim=(2, 0), norm=norm), np.fft.irfft2(z, s=(4, 9), axes=(2, 0), norm=norm))


@pytest.mark.parametrize("norm", NORMS)
def test_hermitian_n_dim_transforms(norm):
    """hfftn is irfftn of the conjugate scaled as a forward transform; ihfftn the conjugate of rfftn scaled
    as an inverse one (numpy has neither; its 1-d hfft and ihfft say the same)."""
    z, a = randn(4, 3, 5, dtype=np.complex128), randn(4, 3, 6)
    inverse = {"forward": "backward", "backward": "forward"}.get(norm or "backward", "ortho")
    close(F.hfftn(ddpc.tensor(z), norm=norm), np.fft.irfftn(z.conj(), norm=inverse))
    close(F.hfft2(ddpc.tensor(z), s=(4, 7), norm=norm), np.fft.irfftn(z.conj(), s=(4, 7), axes=(1, 2), norm=inverse))
    close(F.ihfftn(ddpc.tensor(a), dim=(0, 2), norm=norm), np.fft.rfftn(a, axes=(0, 2), norm=inverse).conj())
    close(F.ihfft2(ddpc.tensor(a), norm=norm), np.fft.rfft2(a, norm=inverse).conj())


def test_zero_dim_and_empty_inputs():
    t = ddpc.tensor(2.5)
    assert F.fftn(t).shape == () and F.fftn(t).dtype is ddpc.complex64
    assert F.fftn(t).item() == 2.5
    z = ddpc.tensor(randn(2, 3, dtype=np.complex64))
    same = F.fftn(z, dim=())
    close(same, z.numpy())
    assert same.data_ptr() != z.data_ptr()
    assert F.fft(ddpc.zeros(0, 3)).shape == (0, 3)
    assert F.rfft(ddpc.zeros(0, 4)).shape == (0, 3)
    assert F.irfft(ddpc.zeros(0, 4, dtype=ddpc.complex64)).shape == (0, 6)
    close(F.fft(ddpc.zeros(0), n=3), np.zeros(3))


# ---- errors --------------------------------------------------------------------------------

def test_errors_match_pytorch():
    x = ddpc.randn(4, 6)
    c = x.to(ddpc.complex64)
    cases = [
        (lambda: F.fft(x, norm="foo"), RuntimeError, 'Invalid normalization mode: "foo"'),
        (lambda: F.rfftn(x, norm="Ortho"), RuntimeError, 'Invalid normalization mode: "Ortho"'),
        (lambda: F.fft(x, n=0), RuntimeError, r"Invalid number of data points \(0\) specified"),
        (lambda: F.irfft(c, n=-1), RuntimeError, r"Invalid number of data points \(-1\) specified"),
        (lambda: F.fftn(x, s=(0, 3)), RuntimeError, r"Invalid number of data points \(0\) specified"),
        (lambda: F.irfft(ddpc.ones(1, dtype=ddpc.complex64)), RuntimeError,
         r"Invalid number of data points \(0\) specified"),
        (lambda: F.fft(ddpc.ones(0)), RuntimeError, r"Invalid number of data points \(0\) specified"),
        (lambda: F.fft(x, dim=2), IndexError,
         r"Dimension out of range \(expected to be in range of \[-2, 1\], but got 2\)"),
        (lambda: F.rfft(x, dim=-3), IndexError, r"expected to be in range of \[-2, 1\], but got -3"),
        (lambda: F.fft2(ddpc.ones(3)), IndexError, r"\[-1, 0\], but got -2"),
        (lambda: F.fft(ddpc.tensor(1.0)), IndexError, "Dimension specified as -1 but tensor has no dimensions"),
        (lambda: F.fftn(x, dim=(0, 0)), RuntimeError, "FFT dims must be unique"),
        (lambda: F.fftn(x, s=(2, 3), dim=(0,)), RuntimeError,
         "When given, dim and shape arguments must have the same length"),
        (lambda: F.fftn(x, s=(2, 3, 4)), RuntimeError,
         "Got shape with 3 values but input tensor only has 2 dimensions"),
        (lambda: F.rfftn(x, dim=()), RuntimeError, "rfftn must transform at least one axis"),
        (lambda: F.irfftn(c, dim=()), RuntimeError, "irfftn must transform at least one axis"),
        (lambda: F.rfft(c), TypeError, "rfft expects a real input tensor, but got ComplexFloat"),
        (lambda: F.rfft2(c), TypeError, "rfftn expects a real-valued input tensor, but got ComplexFloat"),
        (lambda: F.ihfft(c), TypeError, "ihfft expects a real input tensor, but got ComplexFloat"),
        (lambda: F.ihfftn(c.to(ddpc.complex128)), TypeError,
         "Only supports floating-point dtypes, but found: ComplexDouble"),
        (lambda: F.fft(x.half()), NotImplementedError, "Unsupported dtype Half"),
        (lambda: F.fft(x, dim=[0]), TypeError, "argument 'dim' must be int, not list"),
        (lambda: F.fft(x, n=2.0), TypeError, "argument 'n' must be int, not float"),
        (lambda: F.fft(np.ones(3)), TypeError, "must be Tensor"),
        (lambda: F.fftfreq(4, dtype=ddpc.int64), RuntimeError, "fftfreq requires a floating point or complex dtype"),
        (lambda: F.fftfreq(-1), RuntimeError, "negative dimension -1"),
        (lambda: F.fftshift(x, dim=5), IndexError, r"but got 5"),
    ]
    for call, exc, match in cases:
        with pytest.raises(exc, match=match):
            call()


def test_the_c_op_checks_its_arguments():
    host = ddpc.zeros(4, dtype=ddpc.complex64)
    with pytest.raises(ValueError, match="takes cuda buffers"):
        ddpc._C.fft(0, host._buf, host._buf, 1, False, 1.0)
    with pytest.raises(TypeError, match="got a float32 input and a float32 output"):
        ddpc._C.fft(0, ddpc.zeros(4)._buf, ddpc.zeros(4)._buf, 1, False, 1.0)
    with pytest.raises(ValueError, match="transforms 1 to 3 dims"):
        ddpc._C.fft(0, host._buf, host._buf, 4, False, 1.0)
    with pytest.raises(ValueError, match="r2c has the forward sign only"):
        ddpc._C.fft(1, host._buf, ddpc.zeros(6)._buf, 1, True, 1.0)
    with pytest.raises(ValueError, match=r"an input of shape \(6\) does not give an output of shape \(3\)"):
        ddpc._C.fft(1, ddpc.zeros(3, dtype=ddpc.complex64)._buf, ddpc.zeros(6)._buf, 1, False, 1.0)
    with pytest.raises(ValueError, match="c2r: transforms the last dim only, got 2 dims"):
        ddpc._C.fft(2, ddpc.zeros(2, 4)._buf, ddpc.zeros(2, 3, dtype=ddpc.complex64)._buf, 2, True, 1.0)
    with pytest.raises(ValueError, match="unknown transform kind"):
        ddpc._C.fft(7, host._buf, host._buf, 1, False, 1.0)


# ---- out= ----------------------------------------------------------------------------------

def test_out_receives_the_result():
    a = randn(3, 8, dtype=np.float32)
    out = ddpc.empty(3, 8, dtype=ddpc.complex64)
    ptr = out.data_ptr()
    assert F.fft(ddpc.tensor(a), out=out) is out and out.data_ptr() == ptr
    close(out, np.fft.fft(a))
    half = ddpc.empty(3, 5, dtype=ddpc.complex64)
    assert F.rfft(ddpc.tensor(a), out=half) is half
    close(half, np.fft.rfft(a))
    real = ddpc.empty(3, 8)
    assert F.irfft(half, out=real) is real
    close(real, a)
    wide = ddpc.empty(3, 8, dtype=ddpc.complex128)  # another complex dtype: cast, as in PyTorch
    F.fft(ddpc.tensor(a), out=wide)
    close(wide, np.fft.fft(a), np.float32)
    conj = ddpc.empty(3, 5, dtype=ddpc.complex64)
    F.ihfft(ddpc.tensor(a), out=conj)
    close(conj, np.fft.ihfft(a))
    freq = ddpc.empty(5, dtype=ddpc.float64)
    assert F.fftfreq(5, 0.5, out=freq) is freq
    close(freq, np.fft.fftfreq(5, 0.5))


def test_out_errors():
    x = ddpc.randn(3, 8)
    with pytest.raises(RuntimeError, match="fft expects a complex output tensor, but got Float"):
        F.fft(x, out=ddpc.empty(3, 8))
    with pytest.raises(RuntimeError, match="irfft expects a floating point output tensor, but got ComplexFloat"):
        F.irfft(x.to(ddpc.complex64), out=ddpc.empty(3, 14, dtype=ddpc.complex64))
    with pytest.raises(RuntimeError, match="does not resize out= tensors"):
        F.fft(x, out=ddpc.empty(2, 2, dtype=ddpc.complex64))
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        F.fft(x.requires_grad_(), out=ddpc.empty(3, 8, dtype=ddpc.complex64))


# ---- frequencies and shifts ----------------------------------------------------------------

def test_frequencies_match_numpy():
    assert F.fftfreq(0).shape == (0,) and F.rfftfreq(0).shape == (1,)
    for n in (1, 4, 5, 10):
        for d in (1.0, 0.1, 3):
            f = F.fftfreq(n, d)
            assert f.dtype is ddpc.float32 and f.shape == (n,)
            close(f, np.fft.fftfreq(n, d).astype(np.float32))
            close(F.fftfreq(n, d, dtype=ddpc.float64), np.fft.fftfreq(n, d))
            close(F.rfftfreq(n, d), np.fft.rfftfreq(n, d).astype(np.float32))
            close(F.rfftfreq(n, d, dtype=ddpc.float64), np.fft.rfftfreq(n, d))
    assert F.fftfreq(4, requires_grad=True).requires_grad
    assert F.fftfreq(4, dtype=ddpc.complex64).dtype is ddpc.complex64
    assert F.rfftfreq(4, dtype=ddpc.float16).dtype is ddpc.float16


def test_shifts_match_numpy():
    a = randn(4, 5, 3)
    for dim in (None, 0, 1, (0, 2), [-1, 1], ()):
        axes = dim if dim != () else ()
        close(F.fftshift(ddpc.tensor(a), dim=dim), np.fft.fftshift(a, axes=axes))
        close(F.ifftshift(ddpc.tensor(a), dim=dim), np.fft.ifftshift(a, axes=axes))
    z = ddpc.tensor(randn(5, dtype=np.complex64))
    close(F.ifftshift(F.fftshift(z)), z.numpy())
    close(F.fftshift(F.fftfreq(6)), np.fft.fftshift(np.fft.fftfreq(6)).astype(np.float32))


# ---- gradients -----------------------------------------------------------------------------

def _leaf(shape, complex_=False):
    return ddpc.tensor(randn(*shape, dtype=np.complex128 if complex_ else np.float64), requires_grad=True)


_GRAD_CASES = [
    ("fft real", lambda t: F.fft(t, n=6, norm="ortho"), False),
    ("fft", lambda t: F.fft(t, n=4), True),
    ("ifft dim 0", lambda t: F.ifft(t, dim=0, norm="forward"), True),
    ("rfft odd", lambda t: F.rfft(t, n=7), False),
    ("rfft even", lambda t: F.rfft(t, n=6, norm="forward"), False),
    ("irfft even", lambda t: F.irfft(t, n=8), True),
    ("irfft odd", lambda t: F.irfft(t, n=7, norm="ortho"), True),
    ("irfft real input", lambda t: F.irfft(t, dim=0), False),
    ("hfft", lambda t: F.hfft(t, n=6), True),
    ("hfft odd", lambda t: F.hfft(t, n=5, norm="forward"), True),
    ("ihfft", lambda t: F.ihfft(t, n=5, norm="ortho"), False),
    ("fft2", lambda t: F.fft2(t, s=(4, 3)), True),
    ("ifftn real", lambda t: F.ifftn(t, norm="ortho"), False),
    ("rfftn", lambda t: F.rfftn(t), False),
    ("rfft2 reversed dims", lambda t: F.rfft2(t, dim=(1, 0)), False),
    ("irfftn", lambda t: F.irfftn(t, s=(3, 6)), True),
    ("irfft2 odd", lambda t: F.irfft2(t, s=(2, 5), norm="forward"), True),
    ("hfftn", lambda t: F.hfftn(t, s=(3, 5)), True),
    ("ihfftn", lambda t: F.ihfftn(t, norm="forward"), False),
    ("ihfft2", lambda t: F.ihfft2(t, s=(2, 6)), False),
    ("fftshift", lambda t: F.fftshift(t, dim=1), True),
    ("ifftshift", lambda t: F.ifftshift(t), False),
]


@pytest.mark.parametrize("name,fn,complex_", _GRAD_CASES, ids=[c[0] for c in _GRAD_CASES])
def test_gradcheck(name, fn, complex_):
    x = _leaf((3, 5), complex_)
    assert ddpc.autograd.gradcheck(fn, (x,))
    out = fn(x)
    (ddpc.view_as_real(out) if out.dtype.is_complex else out).sum().backward()
    assert x.grad.dtype is x.dtype  # real inputs get real gradients


@pytest.mark.parametrize("fn,complex_", [(lambda t: F.fft(t, n=4), True), (lambda t: F.rfft(t, n=7), False),
                                         (lambda t: F.irfft(t, n=6), True), (lambda t: F.hfftn(t), True)])
def test_gradgradcheck(fn, complex_):
    assert ddpc.autograd.gradgradcheck(fn, (_leaf((2, 4), complex_),))


def test_gradients_are_the_adjoint_transforms():
    """The gradient of Re <w, fft(x)> in PyTorch's convention (dL/dRe x + i dL/dIm x) is F^H w = n ifft(w)."""
    x, w = _leaf((6,), True), randn(6, dtype=np.complex128)
    ddpc.real(F.fft(x) * ddpc.tensor(w).conj()).sum().backward()
    close(x.grad, 6 * np.fft.ifft(w))


# ---- GPU -----------------------------------------------------------------------------------

gpu = pytest.mark.skipif(ddpc.cuda.device_count() == 0, reason="needs a GPU")


@pytest.mark.gpu
@gpu
@pytest.mark.parametrize("norm", NORMS)
def test_gpu_transforms_match_the_host(norm):
    a, z = randn(3, 4, 5, 6, dtype=np.float32), randn(3, 4, 5, 6, dtype=np.complex64)
    calls = [
        lambda t, c: F.fft(c, n=7, norm=norm), lambda t, c: F.ifft(c, dim=1, norm=norm),
        lambda t, c: F.fft(t, norm=norm), lambda t, c: F.rfft(t, n=9, norm=norm),
        lambda t, c: F.rfft(t, dim=0, norm=norm), lambda t, c: F.irfft(c, n=10, norm=norm),
        lambda t, c: F.irfft(c, dim=2, norm=norm), lambda t, c: F.hfft(c, norm=norm),
        lambda t, c: F.ihfft(t, norm=norm),
        lambda t, c: F.fft2(c, norm=norm), lambda t, c: F.fftn(c, norm=norm),
        lambda t, c: F.ifftn(c, s=(2, 3), dim=(3, 0), norm=norm), lambda t, c: F.rfftn(t, norm=norm),
        lambda t, c: F.rfftn(t, dim=(2, 0, 3), norm=norm), lambda t, c: F.irfftn(c, norm=norm),
        lambda t, c: F.irfftn(c, s=(5, 3, 4, 7), norm=norm), lambda t, c: F.hfftn(c, dim=(1, 3), norm=norm),
        lambda t, c: F.ihfftn(t, norm=norm), lambda t, c: F.fftshift(c), lambda t, c: F.ifftshift(t, dim=(0, 3)),
    ]
    host = (ddpc.tensor(a), ddpc.tensor(z))
    device = tuple(t.to("cuda") for t in host)
    for call in calls:
        want, got = call(*host), call(*device)
        assert got.is_cuda and got.dtype is want.dtype and got.shape == want.shape
        close(got.cpu(), want.numpy())
    f64 = ddpc.tensor(randn(4, 6)).to("cuda")
    close(F.rfft(f64).cpu(), np.fft.rfft(f64.cpu().numpy()))
    close(F.fftfreq(5, device="cuda").cpu(), np.fft.fftfreq(5).astype(np.float32))


@pytest.mark.gpu
@gpu
def test_gpu_gradients_match_the_host():
    for name, fn, complex_ in _GRAD_CASES:
        x = _leaf((3, 5), complex_)
        xd = x.detach().to("cuda").requires_grad_()
        for t in (x, xd):
            out = fn(t)
            w = ddpc.tensor(np.linspace(-1, 1, out.numel() * (2 if out.dtype.is_complex else 1)),
                            dtype=ddpc.float64, device=t.device).reshape(
                tuple(out.shape) + ((2,) if out.dtype.is_complex else ()))
            ((ddpc.view_as_real(out) if out.dtype.is_complex else out) * w).sum().backward()
        close(xd.grad.cpu(), x.grad.numpy())


@pytest.mark.gpu
@gpu
def test_gpu_out_and_plan_reuse():
    z = ddpc.tensor(randn(8, 16, dtype=np.complex64), device="cuda")
    out = ddpc.empty(8, 16, dtype=ddpc.complex64, device="cuda")
    for _ in range(3):  # the cached plan serves the repeats
        assert F.fft(z, out=out) is out
        close(out.cpu(), np.fft.fft(z.cpu().numpy()))
    for n in range(1, 40):  # more shapes than the cache holds
        close(F.rfft(z.real, n=n).cpu(), np.fft.rfft(z.cpu().numpy().real, n=n))
