"""out= against PyTorch: the same calls with out= give the same values,
dtypes and shapes, and the same calls are refused."""

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ddpc  # noqa: E402

_X = np.array([[0.5, -1.25, 2.0], [3.0, 0.75, -0.5]], dtype=np.float32)
_Y = np.array([[1.5, 2.0, -1.0], [0.25, 4.0, 2.5]], dtype=np.float32)

# name -> (args from (x, y), kwargs, out dtype)
_CALLS = {
    "add": (lambda x, y: (x, y), {"alpha": 2}, "float32"),
    "sub": (lambda x, y: (x, y), {}, "float64"),
    "mul": (lambda x, y: (x, 3), {}, "float32"),
    "div": (lambda x, y: (x, y), {"rounding_mode": "floor"}, "float32"),
    "maximum": (lambda x, y: (x, y), {}, "float32"),
    "pow": (lambda x, y: (x.abs(), y), {}, "float32"),
    "abs": (lambda x, y: (x,), {}, "float32"),
    "exp": (lambda x, y: (x,), {}, "float64"),
    "sigmoid": (lambda x, y: (x,), {}, "float32"),
    "clamp": (lambda x, y: (x,), {"min": -0.5, "max": 1.0}, "float32"),
    "where": (lambda x, y: (x > 0, x, y), {}, "float32"),
    "sum": (lambda x, y: (x, 1), {}, "float32"),
    "mean": (lambda x, y: (x, 0), {"keepdim": True}, "float32"),
    "cumsum": (lambda x, y: (x, 1), {}, "float64"),
    "argmax": (lambda x, y: (x, 1), {}, "int64"),
    "matmul": (lambda x, y: (x, y.T), {}, "float32"),
    "mm": (lambda x, y: (x, y.T), {}, "float32"),
    "cat": (lambda x, y: ([x, y], 0), {}, "float32"),
    "stack": (lambda x, y: ([x, y],), {}, "float32"),
    "gt": (lambda x, y: (x, y), {}, "bool"),
    "eq": (lambda x, y: (x, y), {}, "float32"),
    "lerp": (lambda x, y: (x, y, 0.25), {}, "float32"),
    "addcmul": (lambda x, y: (x, x, y), {"value": 0.5}, "float32"),
    "tril": (lambda x, y: (x,), {}, "float32"),
    "softmax": (lambda x, y: (x, 1), {}, "float32"),
    "arange": (lambda x, y: (5,), {}, "int64"),
    "zeros": (lambda x, y: (2, 3), {}, "float64"),
    "full": (lambda x, y: ((2,), 7), {}, "int64"),
    "linspace": (lambda x, y: (0, 1, 5), {}, "float64"),
}


def _call(lib, name, out_dtype):
    make, kwargs, _ = _CALLS[name]
    x, y = lib.from_numpy(_X.copy()), lib.from_numpy(_Y.copy())
    out = lib.empty(0, dtype=getattr(lib, out_dtype))
    res = getattr(lib, name)(*make(x, y), out=out, **kwargs)
    return res is out, out.dtype, tuple(out.shape), out.detach().cpu().numpy()


@pytest.mark.parametrize("name", sorted(_CALLS))
def test_out_matches_pytorch(name):
    dt = _CALLS[name][2]
    same_d, d_d, shape_d, val_d = _call(ddpc, name, dt)
    same_t, d_t, shape_t, val_t = _call(torch, name, dt)
    assert same_d and same_t
    assert str(d_d).split(".")[-1] == str(d_t).split(".")[-1] and shape_d == shape_t
    np.testing.assert_allclose(val_d, val_t, rtol=1e-6)


@pytest.mark.parametrize("lib", [ddpc, torch], ids=["ddpc", "torch"])
def test_tuple_outs_and_refusals_as_pytorch(lib):
    x = lib.from_numpy(_X.copy())
    v, i = lib.empty(0), lib.empty(0, dtype=lib.int64)
    r = lib.topk(x, 2, dim=1, out=(v, i))
    assert r[0] is v and r[1] is i and v.tolist() == [[2.0, 0.5], [3.0, 0.75]] and i.tolist() == [[2, 0], [0, 1]]
    with pytest.raises(RuntimeError, match="can't be cast to the desired output type Long"):
        lib.add(x, 1, out=lib.empty(0, dtype=lib.int64))
    w = lib.ones(2, requires_grad=True)
    with pytest.raises(RuntimeError, match="don't support automatic differentiation"):
        lib.mul(w, 2, out=lib.empty(2))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        o = lib.empty(4)
        lib.neg(x, out=o)
    assert o.shape == (2, 3) and any("was resized" in str(w.message) for w in caught)
