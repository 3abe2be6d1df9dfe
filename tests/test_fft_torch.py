"""Optional: ddpc.fft against torch.fft on the same inputs (skipped without
torch): every transform's values, dtype and shape for each norm, lengths
and dims; the gradients of real and complex inputs (the raw ones, so that
each backward is PyTorch's convention, not just a valid one); fftfreq,
rfftfreq and the shifts; and the errors, type and message."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ddpc  # noqa: E402  (after torch, as the other comparison tests)

RNG = np.random.default_rng(3)
NORMS = (None, "backward", "ortho", "forward")

# (function name, keyword arguments, input shape, complex input)
_CASES = [
    ("fft", {}, (3, 8), True), ("fft", {"n": 5}, (3, 8), False), ("fft", {"n": 11, "dim": 0}, (3, 8), True),
    ("ifft", {}, (4, 7), True), ("ifft", {"n": 4, "dim": 0}, (4, 7), False),
    ("rfft", {}, (3, 8), False), ("rfft", {"n": 9}, (3, 8), False), ("rfft", {"n": 4, "dim": 0}, (5, 3), False),
    ("irfft", {}, (3, 5), True), ("irfft", {"n": 9}, (3, 5), True), ("irfft", {"n": 3, "dim": 0}, (4, 3), True),
    ("irfft", {}, (3, 5), False),
    ("hfft", {}, (3, 5), True), ("hfft", {"n": 7}, (2, 4), True), ("hfft", {"n": 6, "dim": 0}, (5, 2), True),
    ("ihfft", {}, (3, 8), False), ("ihfft", {"n": 7}, (3, 8), False),
    ("fft2", {}, (2, 4, 6), True), ("fft2", {"s": (3, 7)}, (2, 4, 6), False),
    ("ifft2", {"dim": (0, 2)}, (2, 4, 6), True),
    ("rfft2", {}, (2, 4, 6), False), ("rfft2", {"s": (5, 5), "dim": (2, 0)}, (2, 4, 6), False),
    ("irfft2", {}, (2, 4, 6), True), ("irfft2", {"s": (3, 9)}, (2, 4, 6), True),
    ("hfft2", {}, (2, 4, 6), True), ("hfft2", {"s": (5, 7)}, (3, 4), True),
    ("ihfft2", {}, (2, 4, 6), False), ("ihfft2", {"s": (3, 5)}, (2, 4, 6), False),
    ("fftn", {}, (2, 3, 4), True), ("fftn", {"s": (5, 2)}, (2, 3, 4), False),
    ("fftn", {"s": (-1, 6), "dim": (2, 0)}, (2, 3, 4), True),
    ("ifftn", {"dim": (1,)}, (2, 3, 4), True),
    ("rfftn", {}, (2, 3, 4), False), ("rfftn", {"dim": (0, 1)}, (2, 3, 5), False),
    ("irfftn", {}, (2, 3, 4), True), ("irfftn", {"s": (4, 5), "dim": (0, 2)}, (2, 3, 4), True),
    ("hfftn", {}, (2, 3, 4), True), ("hfftn", {"s": (3, 3, 3)}, (2, 3, 4), True),
    ("ihfftn", {}, (2, 3, 4), False), ("ihfftn", {"dim": (2, 1)}, (2, 3, 5), False),
]


def _input(shape, complex_, dtype):
    a = RNG.standard_normal(shape)
    if complex_:
        a = a + 1j * RNG.standard_normal(shape)
    return a.astype({np.float32: np.complex64, np.float64: np.complex128}[dtype] if complex_ else dtype)


def _run(L, name, kwargs, a, norm, weight):
    """The transform of a in library L and the gradient of sum(weight * its real pairs)."""
    x = L.tensor(a, requires_grad=weight is not None)
    out = getattr(L.fft, name)(x, norm=norm, **kwargs).resolve_conj()  # PyTorch's ifft of a real input is a conj view
    grad = None
    if weight is not None:
        pairs = L.view_as_real(out) if out.is_complex() else out
        (pairs * L.tensor(weight.reshape(tuple(pairs.shape)))).sum().backward()
        grad = x.grad.detach().resolve_conj().numpy().copy()
    return out.detach().numpy().copy(), str(out.dtype).split(".")[-1], tuple(out.shape), grad


@pytest.mark.parametrize("norm", NORMS)
@pytest.mark.parametrize("case", range(len(_CASES)), ids=[f"{c[0]}{c[1]}" for c in _CASES])
def test_values_and_gradients_match_pytorch(case, norm):
    name, kwargs, shape, complex_ = _CASES[case]
    a = _input(shape, complex_, np.float32)
    (t_val, t_dtype, t_shape, _), (d_val, d_dtype, d_shape, _) = (_run(L, name, kwargs, a, norm, None)
                                                                  for L in (torch, ddpc))
    assert (d_dtype, d_shape) == (t_dtype, t_shape)
    np.testing.assert_allclose(d_val, t_val, rtol=1e-4, atol=1e-4)
    a = _input(shape, complex_, np.float64)
    out = _run(torch, name, kwargs, a, norm, None)[0]
    weight = RNG.standard_normal(out.size * (2 if np.iscomplexobj(out) else 1))
    (t_val, _, _, t_grad), (d_val, _, _, d_grad) = (_run(L, name, kwargs, a, norm, weight) for L in (torch, ddpc))
    np.testing.assert_allclose(d_val, t_val, rtol=1e-10, atol=1e-10)
    assert d_grad.dtype == t_grad.dtype
    np.testing.assert_allclose(d_grad, t_grad, rtol=1e-10, atol=1e-10)


def test_integer_inputs_match_pytorch():
    values = [3, 1, 4, 1, 5, 9]
    for name in ("fft", "rfft", "ihfft", "irfft", "hfft", "fftn", "rfftn", "irfftn"):
        t, d = getattr(torch.fft, name)(torch.tensor(values)), getattr(ddpc.fft, name)(ddpc.tensor(values))
        assert str(d.dtype) == str(t.dtype).replace("torch", "ddpc")
        np.testing.assert_allclose(d.numpy(), t.resolve_conj().numpy(), rtol=1e-5, atol=1e-5)


def test_frequencies_and_shifts_match_pytorch():
    for n in (1, 4, 7):
        for d in (1.0, 0.3, 2):
            for dtype in ("float32", "float64"):
                for fn in ("fftfreq", "rfftfreq"):
                    t = getattr(torch.fft, fn)(n, d, dtype=getattr(torch, dtype))
                    o = getattr(ddpc.fft, fn)(n, d, dtype=getattr(ddpc, dtype))
                    assert str(o.dtype).split(".")[-1] == dtype
                    np.testing.assert_array_equal(o.numpy(), t.numpy())
    np.testing.assert_array_equal(ddpc.fft.fftfreq(5).numpy(), torch.fft.fftfreq(5).numpy())
    a = RNG.standard_normal((4, 5, 3))
    for dim in (None, 0, (1, 2), (-1, 0)):
        for fn in ("fftshift", "ifftshift"):
            np.testing.assert_array_equal(getattr(ddpc.fft, fn)(ddpc.tensor(a), dim=dim).numpy(),
                                          getattr(torch.fft, fn)(torch.tensor(a), dim=dim).numpy())


def test_errors_match_pytorch():
    def calls(L):
        x = L.ones(4, 6)
        c = x.to(L.complex64)
        return [
            lambda: L.fft.fft(x, norm="foo"), lambda: L.fft.fft(x, n=0), lambda: L.fft.ifft(x, n=-2),
            lambda: L.fft.fft(x, dim=2), lambda: L.fft.rfft(x, dim=-3), lambda: L.fft.fft2(L.ones(3)),
            lambda: L.fft.fft(L.tensor(1.0)), lambda: L.fft.fftn(x, dim=(0, 0)),
            lambda: L.fft.fftn(x, s=(2, 3), dim=(0,)), lambda: L.fft.fftn(x, s=(2, 3, 4)),
            lambda: L.fft.fftn(x, s=(0, 3)), lambda: L.fft.rfftn(x, dim=()), lambda: L.fft.irfftn(c, dim=()),
            lambda: L.fft.hfftn(c, dim=()), lambda: L.fft.rfft(c), lambda: L.fft.rfft2(c), lambda: L.fft.rfftn(c),
            lambda: L.fft.ihfft(c), lambda: L.fft.ihfft2(c), lambda: L.fft.irfft(L.ones(1, dtype=L.complex64)),
            lambda: L.fft.hfft(L.ones(1, dtype=L.complex64)), lambda: L.fft.fft(L.ones(0)),
            lambda: L.fft.fft(x.half()), lambda: L.fft.fft(x, out=L.empty(4, 6)),
            lambda: L.fft.irfft(c, out=L.empty(4, 10, dtype=L.complex64)),
            lambda: L.fft.fftfreq(4, dtype=L.int64), lambda: L.fft.fftshift(x, dim=5),
        ]

    for i, (t_call, d_call) in enumerate(zip(calls(torch), calls(ddpc))):
        with pytest.raises(Exception) as t_err:
            t_call()
        with pytest.raises(Exception) as d_err:
            d_call()
        t_msg = str(t_err.value).splitlines()[0]
        assert isinstance(d_err.value, type(t_err.value)), (i, t_err.value, d_err.value)
        assert str(d_err.value).startswith(t_msg), (i, t_msg, str(d_err.value))


def test_signatures_match_pytorch():
    """Every public function of torch.fft is in ddpc.fft, with its arguments (names, order, keyword-only ones)."""
    import inspect
    import re

    names = [n for n in dir(torch.fft) if not n.startswith("_") and callable(getattr(torch.fft, n))
             and n not in ("Tensor",)]
    assert sorted(names) == sorted(ddpc.fft.__all__)
    for name in names:
        first = getattr(torch.fft, name).__doc__.strip().splitlines()[0]
        args = re.match(r"%s\((.*)\) -> Tensor" % name, first).group(1).replace(" ", "")
        theirs = re.split(r",(?![^()]*\))", args)  # commas outside parentheses
        ours = []
        for p in inspect.signature(getattr(ddpc.fft, name)).parameters.values():
            if p.kind is p.KEYWORD_ONLY and "*" not in ours:
                ours.append("*")
            ours.append(p.name if p.default is p.empty else f"{p.name}={p.default!r}".replace(" ", ""))
        theirs = [t.replace("torch.strided", "strided") for t in theirs]
        ours = [o.replace("layout=" + repr(ddpc.strided), "layout=strided") for o in ours]
        assert ours == theirs, (name, ours, theirs)
