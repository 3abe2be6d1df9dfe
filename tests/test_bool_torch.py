"""Bool tensors against PyTorch: a sweep of ops whose results (values and
dtypes) must be PyTorch's, and the errors PyTorch raises on bool."""

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ddpc  # noqa: E402

_X = [0.0, -1.5, 2.0, float("nan"), float("inf"), 3.0]
_Y = [0.0, 2.0, 2.0, 1.0, float("inf"), -3.0]

_OPS = {
    "eq": lambda m, x, y: x == y,
    "ne": lambda m, x, y: x != y,
    "lt": lambda m, x, y: x < y,
    "le": lambda m, x, y: x <= y,
    "gt": lambda m, x, y: m.gt(x, y),
    "ge": lambda m, x, y: m.ge(x, 1.0),
    "isnan": lambda m, x, y: m.isnan(x),
    "isinf": lambda m, x, y: m.isinf(x),
    "isfinite": lambda m, x, y: m.isfinite(x),
    "isclose": lambda m, x, y: m.isclose(x, y),
    "logical_and": lambda m, x, y: m.logical_and(x, y),
    "logical_or": lambda m, x, y: m.logical_or(x, y),
    "logical_xor": lambda m, x, y: m.logical_xor(x, y),
    "logical_not": lambda m, x, y: m.logical_not(x),
    "invert": lambda m, x, y: ~(x > 0),
    "and": lambda m, x, y: (x > 0) & (y > 0),
    "or": lambda m, x, y: (x > 0) | (y > 0),
    "xor": lambda m, x, y: (x > 0) ^ (y > 0),
    "bool_add_bool": lambda m, x, y: (x > 0) + (y > 0),
    "bool_mul_bool": lambda m, x, y: (x > 0) * (y > 0),
    "bool_add_int": lambda m, x, y: (x > 0) + 2,
    "bool_add_true": lambda m, x, y: (x > 0) + True,
    "bool_mul_float": lambda m, x, y: (x > 0) * 1.5,
    "bool_div_bool": lambda m, x, y: (x > 0) / (y >= 0),
    "bool_add_long": lambda m, x, y: (x > 0) + m.arange(6),
    "float_mul_bool": lambda m, x, y: m.nan_to_num(x) * (y > 0),
    "bool_eq_int": lambda m, x, y: (x > 0) == 1,
    "bool_eq_bool": lambda m, x, y: (x > 0) == (y > 0),
    "sum": lambda m, x, y: (x > 0).sum(),
    "sum_dim": lambda m, x, y: (x > 0).reshape(2, 3).sum(1),
    "any": lambda m, x, y: (x > 0).any(),
    "all": lambda m, x, y: (x > 0).all(),
    "any_dim": lambda m, x, y: (x > 0).reshape(2, 3).any(1),
    "all_float": lambda m, x, y: y.all(),
    "max": lambda m, x, y: (x > 0).max(),
    "amin": lambda m, x, y: (x > 0).reshape(2, 3).amin(0),
    "float": lambda m, x, y: (x > 0).float(),
    "long": lambda m, x, y: (x > 0).long(),
    "to_half": lambda m, x, y: (x > 0).to(m.float16),
    "to_bool": lambda m, x, y: x.to(m.bool),
    "bool": lambda m, x, y: y.bool(),
    "int_bool": lambda m, x, y: m.tensor([0, 3, -1]).bool(),
    "ones": lambda m, x, y: m.ones(3, dtype=m.bool),
    "zeros": lambda m, x, y: m.zeros(2, dtype=m.bool),
    "full": lambda m, x, y: m.full((2,), True),
    "tensor": lambda m, x, y: m.tensor([True, False]),
    "masked_select": lambda m, x, y: m.masked_select(y, y > 0),
    "index": lambda m, x, y: y[x > 0],
    "masked_fill": lambda m, x, y: y.masked_fill(x > 0, 7.0),
    "where": lambda m, x, y: m.where(x > 0, y, -y),
    "where_bools": lambda m, x, y: m.where(x > 0, y > 0, y < 0),
    "nonzero": lambda m, x, y: (x > 0).nonzero(),
    "cat": lambda m, x, y: m.cat([x > 0, y > 0]),
    "stack": lambda m, x, y: m.stack([x > 0, y > 0]),
    "reshape_t": lambda m, x, y: (x > 0).reshape(2, 3).t().contiguous(),
    "index_select": lambda m, x, y: (x > 0).index_select(0, m.tensor([4, 1])),
    "isin": lambda m, x, y: m.isin(y, m.tensor([2.0, 1.0])),
    "signbit": lambda m, x, y: m.signbit(y),
    "isposinf": lambda m, x, y: m.isposinf(x),
    "isreal": lambda m, x, y: m.isreal(x),
    "count_nonzero": lambda m, x, y: m.count_nonzero(x > 0),
    "cumsum": lambda m, x, y: (x > 0).cumsum(0),
    "cumprod": lambda m, x, y: (y >= 0).reshape(2, 3).cumprod(1),
    "prod": lambda m, x, y: (y >= 0).prod(),
    "prod_dim": lambda m, x, y: (y >= 0).reshape(2, 3).prod(1),
    "sort": lambda m, x, y: (x > 0).reshape(2, 3).sort(dim=1, stable=True).values,
    "sort_indices": lambda m, x, y: (x > 0).sort(descending=True, stable=True).indices,
    "argsort": lambda m, x, y: (x > 0).argsort(stable=True),
    "msort": lambda m, x, y: m.msort((x > 0).reshape(3, 2)),
    "unique": lambda m, x, y: m.unique(x > 0),
    "flip": lambda m, x, y: (x > 0).flip(0),
    "roll": lambda m, x, y: (x > 0).roll(2),
    "tril": lambda m, x, y: (x > 0).reshape(2, 3).tril(),
    "triu": lambda m, x, y: (x > 0).reshape(2, 3).triu(),
    "diag": lambda m, x, y: m.diag((x > 0).reshape(2, 3)),
    "diag_1d": lambda m, x, y: m.diag(x > 0),
    "clone": lambda m, x, y: (x > 0).clone(),
    "repeat": lambda m, x, y: (x > 0).repeat(2),
    "expand": lambda m, x, y: (x > 0)[:1].expand(3).contiguous(),
}

_DTYPES = {torch.bool: ddpc.bool, torch.float32: ddpc.float32, torch.float16: ddpc.float16,
           torch.int64: ddpc.int64, torch.int32: ddpc.int32, torch.uint8: ddpc.uint8}


@pytest.mark.parametrize("name", sorted(_OPS))
def test_op_matches_pytorch(name):
    f = _OPS[name]
    want = f(torch, torch.tensor(_X), torch.tensor(_Y))
    got = f(ddpc, ddpc.tensor(_X), ddpc.tensor(_Y))
    assert got.dtype is _DTYPES[want.dtype], (got.dtype, want.dtype)
    assert got.shape == tuple(want.shape)
    np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_printing_matches_pytorch():
    for data in ([True, False, True], [[True], [False]]):
        assert repr(ddpc.tensor(data)) == repr(torch.tensor(data))
    assert repr(ddpc.tensor([], dtype=ddpc.bool)).replace("ddpc", "torch") == \
        repr(torch.tensor([], dtype=torch.bool))


@pytest.mark.parametrize("expr", ["a - b", "-a", "a - True", "a - 1", "2.5 - a", "i - a", "a.sub(i, alpha=2)"])
def test_errors_match_pytorch(expr):
    with pytest.raises(RuntimeError) as want:
        eval(expr, {"a": torch.tensor([True]), "b": torch.tensor([False]), "i": torch.tensor([3])})
    with pytest.raises(RuntimeError) as got:
        eval(expr, {"a": ddpc.tensor([True]), "b": ddpc.tensor([False]), "i": ddpc.tensor([3])})
    assert str(got.value) == str(want.value)


# In-place ops on a bool tensor m (n another, x an int64 one): PyTorch keeps the bool
# results and refuses the others, and the ops that have no bool form.
_IN_PLACE = ["m += 1", "m += x", "m -= 1", "m -= n", "m *= 2", "m //= 2", "m //= n", "m %= 2", "m %= n", "m **= 2",
             "m **= n", "m &= 1", "m |= 2", "m ^= 1", "m.add_(1)", "m.sub_(n)", "m.div_(2, rounding_mode='floor')",
             "m.div_(n, rounding_mode='trunc')", "m.remainder_(2)", "m.fmod_(n)", "m.abs_()", "m.floor_()",
             "m.round_()", "m.clamp_(min=0)", "m.square_()", "x -= m", "x.sub_(m, alpha=2)",
             "m += n", "m += True", "m *= n", "m *= True", "m &= n", "m |= n", "m ^= n", "m **= True",
             "m.add_(n, alpha=2)", "m.mul_(n)", "m.logical_and_(n)", "m.logical_or_(x)", "m.sign_()", "m.sgn_()"]


def test_in_place_ops_on_bool_refuse_what_pytorch_refuses():
    def run(lib, stmt):
        names = {"m": lib.tensor([True, False, True]), "n": lib.tensor([True, True, False]), "x": lib.tensor([1, 0, 2])}
        try:
            exec(stmt, names)
        except RuntimeError:
            return "raises"
        return [(names[k].tolist(), str(names[k].dtype).split(".")[1]) for k in ("m", "x")]

    differ = [(stmt, run(ddpc, stmt), run(torch, stmt)) for stmt in _IN_PLACE]
    assert not [d for d in differ if d[1] != d[2]]


def test_mean_error_matches_pytorch():
    with pytest.raises(RuntimeError) as want:
        torch.tensor([True]).mean()
    with pytest.raises(RuntimeError) as got:
        ddpc.tensor([True]).mean()
    assert str(got.value) == str(want.value)


def test_topk_and_kthvalue_take_bool_where_pytorch_refuses():
    b = [True, False, True, False]
    for f in (lambda m, t: t.topk(2), lambda m, t: t.kthvalue(2)):
        with pytest.raises(NotImplementedError):
            f(torch, torch.tensor(b))
        want = f(torch, torch.tensor(b, dtype=torch.uint8))
        got = f(ddpc, ddpc.tensor(b))
        assert got.values.dtype is ddpc.bool
        np.testing.assert_array_equal(got.values.numpy(), want.values.numpy().astype(bool))
        np.testing.assert_array_equal(got.indices.numpy(), want.indices.numpy())


def test_promotion_matches_pytorch():
    for other in (torch.uint8, torch.int32, torch.int64, torch.float16, torch.bfloat16, torch.float32,
                  torch.float64, torch.bool, torch.complex64):
        want = torch.promote_types(torch.bool, other)
        got = ddpc.promote_types(ddpc.bool, getattr(ddpc, str(other).split(".")[1]))
        assert got.name == str(want).split(".")[1]
    for dt in (torch.int64, torch.float32, torch.bool):
        assert ddpc.can_cast(getattr(ddpc, str(dt).split(".")[1]), ddpc.bool) == torch.can_cast(dt, torch.bool)
        assert ddpc.can_cast(ddpc.bool, getattr(ddpc, str(dt).split(".")[1])) == torch.can_cast(torch.bool, dt)


def test_dlpack_between_pytorch_and_ddpc():
    t = torch.tensor([True, False, True])
    d = ddpc.from_dlpack(t)
    assert d.dtype is ddpc.bool and d.tolist() == [True, False, True]
    back = torch.from_dlpack(ddpc.tensor([False, True]))
    assert back.dtype == torch.bool and back.tolist() == [False, True]


def test_pytorch_checkpoint_with_bool_tensors(tmp_path):
    torch.save({"mask": torch.tensor([True, False])}, tmp_path / "m.pt")
    m = ddpc.load(tmp_path / "m.pt")["mask"]
    assert m.dtype is ddpc.bool and m.tolist() == [True, False]
