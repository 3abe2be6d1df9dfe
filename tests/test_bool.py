"""The bool dtype: creation, interop, comparisons, logical ops, promotion,
masks, casts, reductions, autograd around masks, save/load and collectives,
each checked against numpy or closed-form values (PyTorch's own results are
compared in tests/test_bool_torch.py)."""

import numpy as np
import pytest
from procs import run_two_ranks

import ddpc
from ddpc import _C


def test_dtype_object():
    b = ddpc.bool
    assert isinstance(b, ddpc.dtype) and repr(b) == "ddpc.bool" and b.itemsize == 1
    assert not b.is_floating_point and not b.is_complex
    assert b is not ddpc.uint8
    for spec in (bool, np.bool_, "bool", ddpc.bool):
        assert ddpc.zeros(2, dtype=spec).dtype is ddpc.bool
    assert ddpc.promote_types(ddpc.bool, ddpc.bool) is ddpc.bool
    assert ddpc.promote_types(ddpc.bool, ddpc.uint8) is ddpc.uint8
    assert ddpc.promote_types(ddpc.bool, ddpc.int32) is ddpc.int32
    assert ddpc.promote_types(ddpc.float16, ddpc.bool) is ddpc.float16
    assert ddpc.can_cast(ddpc.bool, ddpc.float32) and ddpc.can_cast(ddpc.bool, ddpc.bool)
    assert not ddpc.can_cast(ddpc.int64, ddpc.bool) and not ddpc.can_cast(ddpc.float32, ddpc.bool)


def test_creation():
    t = ddpc.tensor([True, False, True])
    assert t.dtype is ddpc.bool and t.tolist() == [True, False, True]
    assert ddpc.ones(3, dtype=ddpc.bool).tolist() == [True] * 3
    assert ddpc.zeros(2, 2, dtype=ddpc.bool).tolist() == [[False, False]] * 2
    assert ddpc.full((2,), True).dtype is ddpc.bool
    assert ddpc.full((2,), 5, dtype=ddpc.bool).tolist() == [True, True]
    assert ddpc.empty(4, dtype=ddpc.bool).shape == (4,)
    assert ddpc.tensor([0.0, 0.5, -2.0], dtype=ddpc.bool).tolist() == [False, True, True]
    assert ddpc.BoolTensor([1, 0]).dtype is ddpc.bool
    r = ddpc.rand(100) > 0.5
    assert r.dtype is ddpc.bool and 0 < r.sum().item() < 100


def test_numpy_and_dlpack_share_memory():
    arr = np.array([True, False, True])
    t = ddpc.from_numpy(arr)
    assert t.dtype is ddpc.bool
    arr[1] = True
    assert t.tolist() == [True, True, True]
    back = t.numpy()
    assert back.dtype == np.bool_
    back[0] = False
    assert t.tolist() == [False, True, True]
    d = np.from_dlpack(t)
    assert d.dtype == np.bool_ and d.tolist() == [False, True, True]
    assert ddpc.from_dlpack(np.array([False, True])).dtype is ddpc.bool
    buf = _C.Buffer.from_dlpack(np.array([True])[...].__dlpack__())
    assert buf.dtype == "bool"


def test_npy_file(tmp_path):
    path = tmp_path / "m.npy"
    np.save(path, np.array([True, False, False, True]))
    f = _C.NpyFile(str(path))
    assert f.dtype == "bool"


def test_printing():
    assert repr(ddpc.tensor([True, False])) == "tensor([ True, False])"
    assert repr(ddpc.tensor([], dtype=ddpc.bool)) == "tensor([], dtype=ddpc.bool)"
    assert repr(ddpc.tensor([1, 2]) == 1) == "tensor([ True, False])"


def test_comparisons_and_predicates_give_bool():
    x = ddpc.tensor([1.0, float("nan"), float("inf"), -2.0])
    for r, expected in ((x == 1, [True, False, False, False]), (x != 1, [False, True, True, True]),
                        (x < 0, [False, False, False, True]), (x <= 1, [True, False, False, True]),
                        (x > 1, [False, False, True, False]), (x >= -2, [True, False, True, True]),
                        (ddpc.isnan(x), [False, True, False, False]), (ddpc.isinf(x), [False, False, True, False]),
                        (ddpc.isfinite(x), [True, False, False, True]),
                        (ddpc.isclose(x, ddpc.tensor([1.0, 0.0, float("inf"), -2.0 + 1e-9])),
                         [True, False, True, True]),
                        (ddpc.eq(x, 1), [True, False, False, False])):
        assert r.dtype is ddpc.bool and r.tolist() == expected
    i = ddpc.tensor([1, 2, 3])
    assert (i == ddpc.tensor([1, 0, 3])).tolist() == [True, False, True]
    assert ddpc.isfinite(i).dtype is ddpc.bool and ddpc.isfinite(i).tolist() == [True] * 3
    assert (ddpc.tensor([1 + 1j, 2j]) == ddpc.tensor([1 + 1j, 2])).tolist() == [True, False]


def test_logical_and_bitwise_ops():
    a, b = ddpc.tensor([True, True, False, False]), ddpc.tensor([True, False, True, False])
    for r, expected in ((a & b, [True, False, False, False]), (a | b, [True, True, True, False]),
                        (a ^ b, [False, True, True, False]), (~a, [False, False, True, True]),
                        (ddpc.logical_and(a, b), [True, False, False, False]),
                        (ddpc.logical_or(a, b), [True, True, True, False]),
                        (ddpc.logical_xor(a, b), [False, True, True, False]),
                        (ddpc.logical_not(a), [False, False, True, True]),
                        (ddpc.logical_not(ddpc.tensor([0.0, 2.0])), [True, False])):
        assert r.dtype is ddpc.bool and r.tolist() == expected
    assert (~ddpc.tensor([0, 5], dtype=ddpc.uint8)).tolist() == [255, 250]  # still bitwise for uint8
    assert ((a & b)[None, :] | b[:, None]).tolist() == [[True, True, True, True], [True, False, False, False],
                                                         [True, True, True, True], [True, False, False, False]]


def test_arithmetic_and_promotion():
    a, b = ddpc.tensor([True, True, False]), ddpc.tensor([True, False, False])
    s = a + b
    assert s.dtype is ddpc.bool and s.tolist() == [True, True, False]  # logical or, as PyTorch's
    m = a * b
    assert m.dtype is ddpc.bool and m.tolist() == [True, False, False]
    assert (a + 1).dtype is ddpc.int64 and (a + 1).tolist() == [2, 2, 1]
    assert (a * 2.5).dtype is ddpc.float32 and (a * 2.5).tolist() == [2.5, 2.5, 0.0]
    assert (a + True).dtype is ddpc.bool
    assert (a + ddpc.tensor([1, 2, 3], dtype=ddpc.int32)).tolist() == [2, 3, 3]
    assert (a + ddpc.tensor([1, 2, 3], dtype=ddpc.int32)).dtype is ddpc.int32
    assert (ddpc.tensor([0.5, 1.5, 2.5]) * a).tolist() == [0.5, 1.5, 0.0]
    assert (a / b).dtype is ddpc.float32
    with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with two bool tensors is not supported"):
        a - b
    with pytest.raises(RuntimeError, match="Negation, the `-` operator, on a bool tensor is not supported"):
        -a
    for sub in (lambda: a - 1, lambda: 1.5 - a, lambda: ddpc.tensor([1, 2, 3]) - a, lambda: ddpc.sub(a, 2, alpha=2)):
        with pytest.raises(RuntimeError, match="Subtraction, the `-` operator, with a bool tensor is not supported"):
            sub()


def test_in_place_ops_on_bool_keep_bool_results_and_refuse_others():
    """As PyTorch: a bool tensor takes an in-place result that is bool and
    refuses any other (int64 from an int operand), and the ops without a bool
    form (subtraction, rounding, abs) raise; the tensor is left unchanged."""
    m, n, x = ddpc.tensor([True, False, True]), ddpc.tensor([True, True, False]), ddpc.tensor([1, 0, 2])
    for op in (lambda: m.__iadd__(1), lambda: m.__imul__(2), lambda: m.__ifloordiv__(2), lambda: m.__imod__(2),
               lambda: m.__ipow__(2), lambda: m.__iand__(1), lambda: m.__ior__(2), lambda: m.__iadd__(x),
               lambda: m.div_(2, rounding_mode="floor"), lambda: m.remainder_(2), lambda: m.fmod_(2)):
        with pytest.raises(RuntimeError, match="result type ddpc.int64 can't be cast"):
            op()
    for op in (lambda: m.__isub__(1), lambda: m.__isub__(n), lambda: x.__isub__(m), lambda: x.sub_(m, alpha=2),
               lambda: m.abs_(), lambda: m.floor_(), lambda: m.round_(), lambda: m.__ifloordiv__(n),
               lambda: m.__imod__(n), lambda: m.__ipow__(n), lambda: m.div_(n, rounding_mode="trunc")):
        with pytest.raises(RuntimeError):
            op()
    assert m.tolist() == [True, False, True] and x.tolist() == [1, 0, 2]
    m += n
    m *= ddpc.tensor([True, False, True])
    m ^= n
    assert m.dtype is ddpc.bool and m.tolist() == [False, True, True]
    assert m.add_(n, alpha=2).tolist() == [True, True, True] and m.sign_().tolist() == [True, True, True]


def test_casts():
    b = ddpc.tensor([True, False, True])
    assert b.float().tolist() == [1.0, 0.0, 1.0] and b.float().dtype is ddpc.float32
    assert b.long().tolist() == [1, 0, 1] and b.to(ddpc.int32).dtype is ddpc.int32
    assert b.to(ddpc.float16).tolist() == [1.0, 0.0, 1.0]
    assert b.to(ddpc.complex64).tolist() == [1 + 0j, 0j, 1 + 0j]
    assert ddpc.tensor([0.0, 0.25, -3.0, float("nan")]).bool().tolist() == [False, True, True, True]
    assert ddpc.tensor([0, 256, -1]).to(ddpc.bool).tolist() == [False, True, True]
    assert ddpc.tensor([0j, 1j]).bool().tolist() == [False, True]
    assert ddpc.tensor([0, 2], dtype=ddpc.uint8).bool().tolist() == [False, True]


def test_reductions():
    b = ddpc.tensor([[True, False, True], [False, False, True]])
    assert b.sum().dtype is ddpc.int64 and b.sum().item() == 3
    assert b.sum(0).tolist() == [1, 0, 2] and b.sum(1).dtype is ddpc.int64
    assert b.any().dtype is ddpc.bool and b.any().item() is True
    assert b.all().item() is False and b.all(0).tolist() == [False, False, True]
    assert b.any(1).tolist() == [True, True]
    assert ddpc.tensor([1.0, 0.0]).all().dtype is ddpc.bool
    assert b.max().dtype is ddpc.bool and b.max().item() is True and b.min().item() is False
    assert b.amax(1).tolist() == [True, True] and b.amax(1).dtype is ddpc.bool
    assert b.count_nonzero().item() == 3


def test_scans_products_and_sorts():
    b = ddpc.tensor([[True, False, True], [False, True, True]])
    assert b.cumsum(1).dtype is ddpc.int64 and b.cumsum(1).tolist() == [[1, 1, 2], [0, 1, 2]]
    assert b.cumprod(1).dtype is ddpc.int64 and b.cumprod(1).tolist() == [[1, 0, 0], [0, 0, 0]]
    assert b.prod().dtype is ddpc.int64 and b.prod().item() == 0 and b[:, 2].prod().item() == 1
    values, indices = b.sort(1)
    assert values.dtype is ddpc.bool and values.tolist() == [[False, True, True]] * 2
    assert indices.tolist() == [[1, 0, 2], [0, 1, 2]]
    assert b.sort(1, descending=True).values.tolist() == [[True, True, False]] * 2
    assert b.argsort(0).tolist() == [[1, 0, 0], [0, 1, 1]]
    top = b.topk(1, 1)
    assert top.values.dtype is ddpc.bool and top.values.tolist() == [[True], [True]]
    assert top.indices.tolist() == [[0], [1]]
    assert ddpc.msort(b).tolist() == [[False, False, True], [True, True, True]]
    assert ddpc.unique(b).dtype is ddpc.bool and ddpc.unique(b).tolist() == [False, True]
    kth = b.kthvalue(1, 1)
    assert kth.values.dtype is ddpc.bool and kth.values.tolist() == [False, False]
    assert kth.indices.tolist() == [1, 0]
    assert b.kthvalue(3, 1).values.tolist() == [True, True]


def test_layout_ops_keep_bool():
    b = ddpc.tensor([[True, False, True], [False, True, True]])
    for out in (b.flip(0), b.roll(1, 1), b.tril(), b.triu(1), ddpc.diag(b), ddpc.diag(b[0]), b.clone(),
                b.t().contiguous(), ddpc.cat([b, b]), ddpc.stack([b, b]), b.repeat(2, 1), b[:1].expand(3, 3)):
        assert out.dtype is ddpc.bool
    assert b.flip(0).tolist() == [[False, True, True], [True, False, True]]
    assert b.roll(1, 1).tolist() == [[True, True, False], [True, False, True]]
    assert b.tril().tolist() == [[True, False, False], [False, True, False]]
    assert b.triu(1).tolist() == [[False, False, True], [False, False, True]]
    assert ddpc.diag(b).tolist() == [True, True]
    assert ddpc.diag(b[0]).tolist() == [[True, False, False], [False, False, False], [False, False, True]]
    assert b.repeat(1, 2).tolist()[1] == [False, True, True, False, True, True]
    assert b[1:].expand(2, 3).tolist() == [[False, True, True]] * 2


def test_mean_refuses_bool():
    with pytest.raises(RuntimeError, match="Input dtype must be either a floating point or complex dtype. Got: Bool"):
        ddpc.tensor([True, False]).mean()


def test_masks_index_and_select():
    x = ddpc.arange(6.0).reshape(2, 3)
    mask = x > 2
    assert x[mask].tolist() == [3.0, 4.0, 5.0]
    y = x.clone()
    y[mask] = -1.0
    assert y.tolist() == [[0.0, 1.0, 2.0], [-1.0, -1.0, -1.0]]
    assert x.masked_fill(mask, 9.0).tolist() == [[0.0, 1.0, 2.0], [9.0, 9.0, 9.0]]
    assert ddpc.masked_select(x, mask).tolist() == [3.0, 4.0, 5.0]
    assert ddpc.where(mask, x, -x).tolist() == [[-0.0, -1.0, -2.0], [3.0, 4.0, 5.0]]
    assert mask.nonzero().tolist() == [[1, 0], [1, 1], [1, 2]]
    byte = mask.to(ddpc.uint8)  # uint8 masks keep working as before (where warns, as PyTorch does)
    assert x[byte].tolist() == [3.0, 4.0, 5.0]
    with pytest.warns(UserWarning, match="uint8 condition"):
        assert ddpc.where(byte, x, 0.0).tolist() == [[0.0, 0.0, 0.0], [3.0, 4.0, 5.0]]
    assert mask[1].tolist() == [True, True, True] and mask.t().dtype is ddpc.bool
    assert ddpc.cat([mask, ~mask]).tolist() == [[False] * 3, [True] * 3, [True] * 3, [False] * 3]
    assert mask.flatten().index_select(0, ddpc.tensor([5, 0])).tolist() == [True, False]
    assert ddpc.gather(mask, 1, ddpc.tensor([[2], [0]])).tolist() == [[False], [True]]
    assert ddpc.where(ddpc.tensor([True, False]), ddpc.tensor([True, True]), ddpc.tensor([False, False])).tolist() \
        == [True, False]


def test_gradients_flow_around_masks():
    x = ddpc.tensor([-1.0, 0.5, 2.0], requires_grad=True)
    y = ddpc.where(x > 0, x * x, -x)
    y.sum().backward()
    assert x.grad.tolist() == [-1.0, 1.0, 4.0]
    m = x > 0
    assert not m.requires_grad and m.grad_fn is None
    x.grad = None
    (x.masked_fill(~m, 0.0) * 3).sum().backward()
    assert x.grad.tolist() == [0.0, 3.0, 3.0]
    x.grad = None
    ddpc.nn.functional.relu(x).sum().backward()
    assert x.grad.tolist() == [0.0, 1.0, 1.0]
    x.grad = None
    x.abs().max().backward()
    assert x.grad.tolist() == [0.0, 0.0, 1.0]


def test_ops_that_take_no_bool_raise_type_errors():
    b = ddpc.tensor([True, False])
    with pytest.raises(TypeError, match="bool"):
        _C.unary(0, _C.Buffer((2,), "bool", -1), b._buf)
    with pytest.raises(TypeError, match="does not support bool"):
        _C.sum(_C.Buffer((), "bool", -1), b._buf)


def test_c_binary_makes_bool_results_zero_or_one():
    a = ddpc.tensor([True, True, False])
    out = _C.Buffer((3,), "bool", -1)
    _C.binary(0, out, a._buf, a._buf)  # add: 2 becomes true
    assert np.asarray(out).view(np.uint8).tolist() == [1, 1, 0]


def test_save_load(tmp_path):
    b = ddpc.tensor([True, False, True])
    ddpc.save({"m": b}, tmp_path / "m.pt")
    back = ddpc.load(tmp_path / "m.pt")["m"]
    assert back.dtype is ddpc.bool and back.tolist() == [True, False, True]


def test_testing_assert_close():
    ddpc.testing.assert_close(ddpc.tensor([True, False]), ddpc.tensor([True, False]))
    with pytest.raises(AssertionError):
        ddpc.testing.assert_close(ddpc.tensor([True, False]), ddpc.tensor([True, True]))


_WORKER = """
import ddpc
import ddpc.distributed as dist

dist.init_process_group("cpu")
rank = dist.get_rank()
mine = ddpc.tensor([rank == 0, rank == 1, False, True])
s = mine.clone()
dist.all_reduce(s)  # logical or, as PyTorch's
assert s.dtype is ddpc.bool and s.tolist() == [True, True, False, True], s
p = mine.clone()
dist.all_reduce(p, op=dist.ReduceOp.PRODUCT)  # logical and
assert p.tolist() == [False, False, False, True], p
mx = mine.clone()
dist.all_reduce(mx, op=dist.ReduceOp.MAX)
assert mx.tolist() == [True, True, False, True], mx
try:
    dist.all_reduce(mine.clone(), op=dist.ReduceOp.AVG)
except TypeError as e:
    assert "Cannot use ReduceOp.AVG with boolean inputs" in str(e), e
else:
    raise AssertionError("no error for an average of bools")
b = mine.clone()
dist.broadcast(b, src=1)
assert b.tolist() == [False, True, False, True], b
out = [ddpc.zeros(4, dtype=ddpc.bool) for _ in range(2)]
dist.all_gather(out, mine)
assert [t.tolist() for t in out] == [[True, False, False, True], [False, True, False, True]], out
print(f"RANK {rank} PASS")
dist.destroy_process_group()
"""


def test_collectives_on_two_ranks(tmp_path):
    run_two_ranks(tmp_path, _WORKER)


gpu = pytest.mark.skipif(ddpc.cuda.device_count() == 0, reason="needs a GPU")


@pytest.mark.gpu
@gpu
def test_gpu_bool_ops_match_host():
    x = ddpc.tensor([0.0, -1.5, 2.0, float("nan")])
    xc = x.cuda()
    for f in (lambda t: t > 0, lambda t: (t > 0) + (t < 0), lambda t: (t > 0) | ddpc.isnan(t),
              lambda t: ~(t == 0), lambda t: t.bool(), lambda t: (t > 0).float(), lambda t: (t > 0).sum(),
              lambda t: ddpc.where(t > 0, t, 0.0), lambda t: ddpc.ones(4, dtype=ddpc.bool, device=t.device),
              lambda t: t[t > 0], lambda t: (t > 0).any()):
        host, dev = f(x), f(xc)
        assert dev.dtype is host.dtype and dev.cpu().tolist() == host.tolist()


def test_conditions_and_masks_must_be_bool():
    x = ddpc.tensor([1.0, 2.0, 3.0])
    ints = ddpc.tensor([1, 0, 1])
    with pytest.raises(ddpc.DtypeError, match="where expected condition to be a boolean tensor"):
        ddpc.where(ints, x, 0.0)
    with pytest.warns(UserWarning, match="uint8 condition tensor"):  # deprecated in PyTorch, still taken
        assert ddpc.where(ints.to(ddpc.uint8), x, 0.0).tolist() == [1.0, 0.0, 3.0]
    for mask in (ints, ints.to(ddpc.uint8)):
        with pytest.raises(ddpc.DtypeError, match="masked_fill_ only supports boolean masks"):
            x.masked_fill(mask, 0.0)
        with pytest.raises(ddpc.DtypeError, match="masked_fill_ only supports boolean masks"):
            x.clone().masked_fill_(mask, 0.0)
        with pytest.raises(ddpc.DtypeError, match="expected BoolTensor for mask"):
            x.masked_select(mask)
        with pytest.raises(ddpc.DtypeError, match="masked_scatter_ only supports boolean masks"):
            x.masked_scatter(mask, x)
    assert x.masked_fill(ints > 0, 0.0).tolist() == [0.0, 2.0, 0.0]


def test_relu_refuses_bool():
    with pytest.raises(ddpc.DtypeError, match="Boolean inputs not supported for relu"):
        ddpc.relu(ddpc.tensor([True, False]))
    with pytest.raises(ddpc.DtypeError, match="Boolean inputs not supported for relu"):
        ddpc.nn.functional.relu(ddpc.tensor([True, False]))
    assert ddpc.relu(ddpc.tensor([-1, 2])).tolist() == [0, 2]
