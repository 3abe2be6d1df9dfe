"""Optional: the elementwise math functions against PyTorch's on the same
inputs (skipped when torch is not installed): outputs and gradients within
1e-6 relative (1e-6 absolute) in float32, 1e-12 in float64.

The comparison runs in a child process that imports torch before ddpc (see
test_nn_torch.py) and fails there, printing what differs.
"""

import itertools
import sys

import pytest
from procs import run_torch_case


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_matches_pytorch(dtype):
    out = run_torch_case(__file__, dtype)
    assert out.strip().endswith("ok"), out


# name: (function of the library module and the input tensors, how many inputs)
CASES = {
    "abs": (lambda L, x: L.abs(x), 1), "sqrt": (lambda L, x: L.sqrt(x.abs() + 0.1), 1),
    "rsqrt": (lambda L, x: L.rsqrt(x.abs() + 0.1), 1), "square": (lambda L, x: L.square(x), 1),
    "sin": (lambda L, x: L.sin(x), 1), "cos": (lambda L, x: L.cos(x), 1),
    "log1p": (lambda L, x: L.log1p(x.abs()), 1), "expm1": (lambda L, x: L.expm1(x), 1),
    "erf": (lambda L, x: L.erf(x), 1), "reciprocal": (lambda L, x: L.reciprocal(x), 1),
    "sign": (lambda L, x: L.sign(x) * x, 1), "floor": (lambda L, x: L.floor(x * 3), 1),
    "ceil": (lambda L, x: L.ceil(x * 3), 1), "trunc": (lambda L, x: L.trunc(x * 3), 1),
    "round": (lambda L, x: L.round(x * 3), 1), "round_decimals": (lambda L, x: L.round(x * 3, decimals=1), 1),
    "clamp": (lambda L, x: L.clamp(x, -0.5, 0.5), 1), "clamp_min": (lambda L, x: L.clamp_min(x, 0.1), 1),
    "clamp_tensor": (lambda L, x, lo, hi: L.clamp(x, lo, hi), 3),
    "maximum": (lambda L, a, b: L.maximum(a, b), 2), "minimum": (lambda L, a, b: L.minimum(a, b), 2),
    "where": (lambda L, a, b: L.where(a > b, a, b * 2), 2),
    "masked_fill": (lambda L, a, b: a.masked_fill(b > 0, 3.0), 2),
    "lerp": (lambda L, a, b, w: L.lerp(a, b, w), 3), "lerp_number": (lambda L, a, b: L.lerp(a, b, 0.7), 2),
    "addcmul": (lambda L, a, b, c: L.addcmul(a, b, c, value=0.5), 3),
    "addcdiv": (lambda L, a, b, c: L.addcdiv(a, b, c.abs() + 0.5, value=-2), 3),
    "nan_to_num": (lambda L, x: L.nan_to_num(L.log(x)), 1),
    "pow_tensor": (lambda L, a, b: (a.abs() + 0.1) ** b, 2), "rpow": (lambda L, x: 2.5 ** x, 1),
    "pow_broadcast": (lambda L, a, b: (a.abs() + 0.1) ** b[:1], 2),
    "pow_negative_base": (lambda L, a, b: a ** L.round(b * 2), 2),
    "log2": (lambda L, x: L.log2(x.abs() + 0.1), 1), "log10": (lambda L, x: L.log10(x.abs() + 0.1), 1),
    "exp2": (lambda L, x: L.exp2(x), 1), "sinh": (lambda L, x: L.sinh(x), 1), "cosh": (lambda L, x: L.cosh(x), 1),
    "asinh": (lambda L, x: L.asinh(x * 3), 1), "atan": (lambda L, x: L.atan(x * 3), 1),
}


# Values where C99's pow and fmod and PyTorch's rounding divisions have special rules.
SPECIAL = [0.0, -0.0, 1.0, -1.0, 2.0, -2.0, 0.5, -0.5, 3.0, -3.0, float("inf"), float("-inf"), float("nan"), 1.5, -1.5]

# Values above 2**53 and quotients too large for any float to hold their remainder's digits (but
# not beyond the largest float: there PyTorch's vectorised fmod gives NaN, its scalar one and ddpc's C's fmod).
LARGE = [1e30, -1e30, 2.0 ** 60, 2.0 ** 53 + 2, 1e300, -1e300, 7.5, -7.5, 0.1, -3.0, 2.5]

# name: function of the library module and two tensors holding every pair of SPECIAL (or LARGE) values
SPECIAL_CASES = {
    "pow_tensor": lambda L, a, b: a ** b,
    "pow_number": lambda L, a, b: L.stack([a ** e for e in SPECIAL]),
    "rpow_number": lambda L, a, b: L.stack([e ** a for e in SPECIAL]),
    "fmod": lambda L, a, b: L.fmod(a, b),
    "remainder": lambda L, a, b: L.remainder(a, b) + b.remainder(1.5) + (-2.5) % a.detach(),
    # (outputs only: PyTorch's floor_divide has no backward; div's zero gradients are in test_math.py)
    "floor_divide": lambda L, a, b: L.stack([a.detach() // b.detach(), L.floor_divide(a.detach(), -1.5),
                                             L.div(a.detach(), b.detach(), rounding_mode="floor")]),
    "div_trunc": lambda L, a, b: L.stack([L.div(a.detach(), b.detach(), rounding_mode="trunc"),
                                          L.div(a.detach(), 0.75, rounding_mode="trunc")]),
}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_special_values_match_pytorch(dtype):
    out = run_torch_case(__file__, dtype, "special")
    assert out.strip().endswith("ok"), out


def special_main(dtype):
    """Outputs and gradients at SPECIAL's pairs: NaN, infinities and the
    outputs' signs of zeros as PyTorch's, the other values within a few units in the last
    place (PyTorch's vectorised pow and sqrt are not correctly rounded)."""
    import numpy as np
    import torch

    import ddpc

    for values, name in itertools.product((SPECIAL, LARGE), SPECIAL_CASES):
        if values is LARGE and name.startswith("pow"):
            continue
        with np.errstate(over="ignore"):
            a, b = (v.ravel().astype(dtype) for v in np.meshgrid(values, values, indexing="ij"))
        fn = SPECIAL_CASES[name]
        want, got = _run_special(torch, fn, [a, b]), _run_special(ddpc, fn, [a, b])
        for what, x, y in zip(["output", "grad 0", "grad 1"], got, want):
            assert (x is None) == (y is None), f"{name} {dtype} {what}: {x} where PyTorch has {y}"
            if x is None:
                continue
            x, y = x.reshape(-1, a.size), y.reshape(-1, a.size)
            close = np.isclose(x, y, rtol=1e-6 if dtype == "float32" else 1e-15, atol=0, equal_nan=True)
            # (the sign of a zero gradient is left out: PyTorch's masked gradients carry the upstream one's)
            same = close & ((x != 0) | (np.signbit(x) == np.signbit(y)) | (what != "output"))
            bad = [(i, a[j], b[j], x[i, j], y[i, j]) for i, j in zip(*np.nonzero(~same))]
            assert not bad, f"{name} {dtype} {what}: (stacked result, a, b, ddpc, PyTorch) {bad[:8]}"
    # Integers, exactly, beyond 2**53 too.
    big = np.array([2 ** 62 + 1, -(2 ** 62) - 3, 2 ** 53 + 1, -7, 7, 0, 5, -2 ** 63], dtype=np.int64)
    div = np.array([3, -3, 7, 2, -2, 5, -1, 1], dtype=np.int64)
    for name, fn in (("fmod", lambda L, a, b: L.fmod(a, b)), ("remainder", lambda L, a, b: a % b),
                     ("floor", lambda L, a, b: a // b), ("trunc", lambda L, a, b: L.div(a, b, rounding_mode="trunc"))):
        got, want = (fn(L, L.tensor(big), L.tensor(div)).numpy() for L in (ddpc, torch))
        assert got.tolist() == want.tolist(), f"{name} int64: {got} where PyTorch has {want}"
    print("ok")


def _run_special(lib, fn, arrays):
    """Output and, where it needs them, the inputs' gradients of fn at the arrays."""
    import numpy as np

    if fn(lib, *[lib.tensor(a, requires_grad=True) for a in arrays]).requires_grad:
        return _run(lib, fn, arrays)
    return [np.asarray(fn(lib, *[lib.tensor(a) for a in arrays]))]


def _run(lib, fn, arrays):
    import numpy as np

    ts = [lib.tensor(a, requires_grad=True) for a in arrays]
    out = fn(lib, *ts)
    g = np.random.default_rng(1).standard_normal(tuple(out.shape)).astype(arrays[0].dtype)
    out.backward(lib.tensor(g))
    return [np.asarray(out.detach())] + [None if t.grad is None else np.asarray(t.grad) for t in ts]


def main(dtype):
    import numpy as np
    import torch

    import ddpc

    rng = np.random.default_rng(0)
    f32 = dtype == "float32"
    for name, (fn, n) in CASES.items():
        arrays = [rng.standard_normal((4, 5)).astype(dtype) for _ in range(n)]
        if name in ("maximum", "minimum"):
            arrays[1][0] = arrays[0][0]  # ties
        if name == "clamp_tensor":
            arrays[1][:, 0] = arrays[0][:, 0]
        want, got = _run(torch, fn, arrays), _run(ddpc, fn, arrays)
        for what, a, b in zip(["output"] + [f"grad {i}" for i in range(n)], got, want):
            assert (a is None) == (b is None), f"{name} {dtype} {what}: {a} where PyTorch has {b}"
            if a is None:
                continue
            np.testing.assert_allclose(a, b, rtol=1e-6 if f32 else 1e-12, atol=1e-6 if f32 else 1e-12,
                                       equal_nan=True, err_msg=f"{name} {dtype} {what}")
    print("ok")


if __name__ == "__main__":
    special_main(sys.argv[1]) if sys.argv[2:] == ["special"] else main(sys.argv[1])
