"""Tensor semantics against PyTorch: dtype promotion of numbers beside bool
and integer tensors (also under another default dtype), item assignment of
values with extra leading dims, tensor() of numpy doubles, writes through
copies standing for strided views (which must keep every earlier write),
reshapes of such copies, the gradient of 0 ** x, and small API forms. Each
case runs the same code with L = ddpc and with L = torch."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ddpc  # noqa: E402


def _out(v):
    """A comparable form of a case's result: (dtype name, values) for tensors."""
    if isinstance(v, (tuple, list)):
        return [_out(x) for x in v]
    if hasattr(v, "dtype") and hasattr(v, "tolist"):
        return str(v.dtype).split(".")[-1], v.tolist()
    return v


def _bool(L):
    return L.tensor([True, False, True])


def _ints(L):
    return L.tensor([1, 2, 3])


CASES = {
    # a bool tensor beside an int number computes in int64
    "bool_floordiv": lambda L: _bool(L) // 2,
    "bool_remainder": lambda L: _bool(L) % 2,
    "bool_pow": lambda L: _bool(L) ** 2,
    "bool_fmod": lambda L: L.fmod(_bool(L), 2),
    "bool_div_floor": lambda L: L.div(_bool(L), 2, rounding_mode="floor"),
    "bool_clamp": lambda L: _bool(L).clamp(0, 5),
    "bool_clamp_float": lambda L: _bool(L).clamp(0.5, 2),
    # extra leading size-1 dims of an assigned value are dropped
    "setitem_leading_ones": lambda L: _setitems(L),
    # numpy doubles keep their precision in tensor()
    "tensor_numpy_double_list": lambda L: L.tensor([np.float64(1.5), 2.0]),
    "tensor_numpy_arrays": lambda L: L.tensor([np.array([1.0, 2.0]), np.array([3.0, 4.0])]),
    "tensor_numpy_float32_list": lambda L: L.tensor([np.float32(1.5), 2.0]),
    "tensor_python_floats": lambda L: L.tensor([1.5, 2.0]),
    "tensor_numpy_complex": lambda L: L.tensor([np.complex128(1 + 2j)]),
    # writes through copies keep what was written through other copies, or the source, since
    "two_transposes": lambda L: _two_transposes(L),
    "write_after_source_changed": lambda L: _after_source(L),
    "reshape_of_transpose_copies": lambda L: _reshape_of_transpose(L),
    "reshape_of_slice_copies": lambda L: _reshape_of_slice(L),
    "reshape_of_slice_views": lambda L: _reshape_of_slice_view(L),
    "reshape_of_transpose_rows": lambda L: _reshape_of_rows(L),
    "data_of_a_column": lambda L: _data_of_column(L),
    "view_dtype_of_a_transpose": lambda L: _view_dtype_write(L),
    # in-place rearrangements
    "t_then_write": lambda L: _t_then_write(L),
    "t_of_a_column_block": lambda L: _t_of_block(L),
    "unsqueeze_of_a_column_block": lambda L: _unsqueeze_of_block(L),
    # forms
    "view_dtype": lambda L: L.tensor([1.0, -2.0]).view(L.int32),
    "view_dtype_wider": lambda L: L.zeros(4, dtype=L.uint8).view(L.int32),
    "view_dtype_narrower": lambda L: L.zeros(3, dtype=L.float64).view(L.float32),
    "min_other": lambda L: L.min(L.tensor([1.0, -2.0]), other=L.zeros(2)),
    "max_other": lambda L: L.tensor([1.0, -2.0]).max(other=L.zeros(2)),
    "module_abs_": lambda L: L.abs_(L.tensor([-1.0, 2.0])),
    "module_clamp_": lambda L: L.clamp_(L.tensor([-1.0, 2.0]), 0, 1),
    "module_exp_": lambda L: L.exp_(L.tensor([0.0, 1.0])),
    "module_zero_": lambda L: L.zero_(L.ones(2)),
    "is_signed": lambda L: [d.is_signed for d in (L.float32, L.uint8, L.int64, L.bool)],
    "numpy_force": lambda L: L.ones(2, requires_grad=True).numpy(force=True).tolist(),
    "flatten_same_dims_is_itself": lambda L: _flatten_identity(L),
    "legacy_constructor_of_a_size": lambda L: [tuple(L.FloatTensor(L.ones(3, 4).size()).shape),
                                               tuple(L.LongTensor(L.ones(2, 5).shape).shape), L.FloatTensor((2, 3))],
    "type_of_a_legacy_class": lambda L: L.ones(2, dtype=L.long).type(L.FloatTensor),
    "from_numpy_of_strided_arrays": lambda L: _from_strided(L),
}


def _from_strided(L):
    img = np.arange(24.0).reshape(2, 3, 4)
    chw = L.from_numpy(img.transpose(2, 0, 1))
    chw.mul_(2)  # reaches the array
    data = np.arange(20.0).reshape(4, 5)
    window = L.from_numpy(data[1:, :-1])
    window[0, 0] = -1.0
    return chw, img.tolist(), window, data.tolist(), L.from_numpy(np.asfortranarray(data[:2]))


def _setitems(L):
    x = L.zeros(2, 3)
    x[0, 0] = L.tensor([5.0])
    x[1] = L.ones(1, 1, 3)
    x[x == 0] = L.tensor([[2.0]])
    y = L.zeros(2, 3)
    y[[0, 1]] = L.ones(1, 2, 3) * 4
    return x, y


def _two_transposes(L):
    x = L.zeros(2, 3)
    a, b = x.t(), x.t()
    a[0, 0] = 1.0
    b[1, 1] = 2.0
    return x


def _after_source(L):
    x = L.zeros(3, 4)
    xt = x.t()
    x.add_(1)
    xt[0, 0] = 7.0
    return x


def _reshape_of_transpose(L):
    x = L.arange(12.0).reshape(3, 4)
    x.t().reshape(-1).zero_()  # PyTorch's reshape copies here: x keeps its values
    return x


def _reshape_of_slice(L):
    x = L.arange(12.0).reshape(3, 4)
    x[:, :2].flatten().add_(100)  # a copy in PyTorch too
    return x


def _reshape_of_slice_view(L):
    x = L.arange(12.0).reshape(3, 4)
    x[:, :2].reshape(3, 2).add_(100)  # a view in PyTorch: x changes
    x[1:, 1:3].unsqueeze(0).mul_(-1)
    return x


def _reshape_of_rows(L):
    x = L.arange(12.0).reshape(3, 4)
    x.t()[1:3].reshape(6).mul_(0)  # rows of the transpose are strided in x: a copy
    x.t()[1].reshape(3).mul_(-1)  # one row of it is a view of a column
    return x


def _data_of_column(L):
    x = L.zeros(3, 4)
    x[:, 0].data.fill_(1)
    return x


def _view_dtype_write(L):
    x = L.zeros(2, 3)
    x.t().view(L.int32)[0, 1] = 5
    return x.view(L.int32)


def _t_then_write(L):
    x = L.arange(6.0).reshape(2, 3)
    row = x[0]
    x.t_()
    x[0, 1] = 100.0
    return row, x


def _t_of_block(L):
    x = L.zeros(3, 4)
    c = x[:, :2]
    c.t_()
    c[0, 1] = 5.0
    return x


def _unsqueeze_of_block(L):
    x = L.zeros(3, 4)
    c = x[:, :2]
    c.unsqueeze_(1)
    c[1, 0, 1] = 7.0
    return x, c.shape


def _flatten_identity(L):
    x = L.zeros(2, 3)
    return [x.flatten(1) is x, L.zeros(3).flatten() is not None, x.flatten(0, 0) is x]


@pytest.mark.parametrize("case", sorted(CASES))
def test_tensor_semantics_match_pytorch(case):
    assert _out(CASES[case](ddpc)) == _out(CASES[case](torch))


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_integers_promote_to_the_default_dtype(dtype):
    """int tensor with a float, true division and float functions of ints give the default dtype."""
    forms = (lambda L, i: i + 1.5, lambda L, i: i / 2, lambda L, i: 2 / i, lambda L, i: L.sqrt(i),
             lambda L, i: i.exp(), lambda L, i: L.where(i > 1, 1.5, 2.5), lambda L, i: i / L.tensor([[2], [3]]))
    for L in (ddpc, torch):
        L.set_default_dtype(getattr(L, dtype))
    try:
        for form in forms:
            assert _out(form(ddpc, _ints(ddpc))) == _out(form(torch, _ints(torch)))
    finally:
        ddpc.set_default_dtype(ddpc.float32)
        torch.set_default_dtype(torch.float32)


@pytest.mark.parametrize("make", [lambda L, z: L.pow(0.0, z), lambda L, z: 0.0 ** z])
def test_gradient_of_zero_to_the_power_x(make):
    """0 where x >= 0, as PyTorch's (not 0 * -inf = NaN); -inf where x < 0."""
    grads = []
    for L in (ddpc, torch):
        z = L.tensor([1.0, 2.0, 0.0, -1.0], requires_grad=True)
        make(L, z).sum().backward()
        grads.append(z.grad.tolist())
    assert grads[0] == grads[1] == [0.0, 0.0, 0.0, -np.inf]


def test_a_tensor_overwritten_in_the_graph_gets_zero_gradient_not_none():
    grads = []
    for L in (ddpc, torch):
        x = L.ones(3, requires_grad=True)
        y = x * 2
        y.zero_()
        y.sum().backward()
        grads.append(x.grad.tolist())
    assert grads[0] == grads[1] == [0.0] * 3


@pytest.mark.parametrize("dtype", ["uint8", "int32", "int64"])
def test_numbers_written_into_integer_tensors_are_refused_as_pytorch_refuses_them(dtype):
    """Item assignment, fill_ and masked_fill_ of a number the dtype can't hold
    raise in both; the rest are stored alike."""
    values = [-256, -255, -1, 255, 256, 2 ** 31 - 1, 2 ** 31, -2 ** 31, -2 ** 31 - 1, -0.5, -1.5, 255.5, 256.0,
              2147483647.5, 2147483648.0, -2147483648.5, 1e30, np.nan, np.inf, -np.inf, True]
    writes = [lambda L, t, v: t.__setitem__(L.tensor([True, False]), v), lambda L, t, v: t.__setitem__(0, v),
              lambda L, t, v: t.fill_(v), lambda L, t, v: t.masked_fill_(L.tensor([True, False]), v)]
    for v in values:
        for write in writes:
            got = []
            for L in (ddpc, torch):
                t = L.zeros(2, dtype=getattr(L, dtype))
                try:
                    write(L, t, v)
                    got.append(t.tolist())
                except (RuntimeError, OverflowError):
                    got.append("refused")
            assert got[0] == got[1], (dtype, v)
