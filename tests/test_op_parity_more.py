"""Indexing, reduction and shape ops where a randomized comparison with
PyTorch found ddpc giving another result, shape or dtype, or raising where
PyTorch answers; each case here has its expected value worked out by hand
(test_op_parity_more_torch.py compares the same cases with PyTorch's)."""

import numpy as np
import pytest

import ddpc


# ---- indexing along a dim: 0-d tensors and 0-d indices ----------------------------------------

def test_index_along_a_dim_takes_0d_tensors_and_0d_indices():
    x = ddpc.tensor(5.0)  # one slice along dim 0 or -1, as if of shape (1,)
    assert x.index_select(0, ddpc.tensor(0)).shape == () and x.index_select(-1, ddpc.tensor([0])).item() == 5.0
    with pytest.raises(IndexError, match="one index"):
        x.index_select(0, ddpc.tensor([0, 0]))
    assert ddpc.arange(4.0).index_select(0, ddpc.tensor(2)).tolist() == [2.0]
    assert x.index_fill(0, ddpc.tensor([0, -1]), 7).item() == 7.0
    assert x.index_fill(0, ddpc.tensor([], dtype=ddpc.int64), 7).item() == 5.0
    with pytest.raises(IndexError, match="only index 0"):
        x.index_fill(0, ddpc.tensor([1]), 7)
    assert x.index_copy(0, ddpc.tensor([0]), ddpc.tensor(3.0)).item() == 3.0
    assert ddpc.zeros(3).index_copy(0, ddpc.tensor(1), ddpc.tensor(3.0)).tolist() == [0.0, 3.0, 0.0]
    with pytest.raises(ValueError, match="one index"):
        ddpc.zeros(3).index_copy(0, ddpc.tensor([0, 1]), ddpc.tensor(3.0))
    assert x.index_add(0, ddpc.tensor(0), ddpc.tensor(3.0), alpha=2).item() == 11.0
    assert ddpc.zeros(3).index_add(0, ddpc.tensor(1), ddpc.tensor([3.0])).tolist() == [0.0, 3.0, 0.0]


def test_index_add_and_scatter_on_0d_tensors_differentiate():
    x = ddpc.tensor(2.0, requires_grad=True)
    s = ddpc.tensor(3.0, requires_grad=True)
    y = x.index_add(0, ddpc.tensor([0]), s, alpha=2)
    y.backward()
    assert y.item() == 8.0 and x.grad.item() == 1.0 and s.grad.item() == 2.0
    x.grad = s.grad = None
    added = ddpc.scatter_add(x, 0, ddpc.tensor(0), s)
    (3 * added).backward()
    assert added.item() == 5.0 and x.grad.item() == 3.0 and s.grad.item() == 3.0
    x.grad = s.grad = None
    written = ddpc.scatter(x, 0, ddpc.tensor(0), s)
    (3 * written).backward()
    assert written.item() == 3.0 and x.grad.item() == 0.0 and s.grad.item() == 3.0


def test_bools_beside_advanced_indices_broadcast_with_them():
    x = ddpc.arange(24.0).reshape(2, 3, 4)
    assert x[[0, 1], True].shape == (2, 3, 4)  # True indexes a new dim of 1 with [0], broadcast to (2,)
    assert x[True, :, [0, 1]].shape == (2, 2, 4)  # apart: the broadcast dims lead
    assert x[0, True, [1, 2]].tolist() == [[4.0, 5.0, 6.0, 7.0], [8.0, 9.0, 10.0, 11.0]]
    assert x[True, :, False].shape == (0, 2, 3, 4)  # bools alone broadcast together too
    assert x[True].shape == (1, 2, 3, 4) and x[False, None].shape == (0, 1, 2, 3, 4)
    with pytest.raises(IndexError, match="shape mismatch"):
        x[False, [0, 1]]  # [] and [0, 1] do not broadcast
    y = ddpc.zeros(2, 3)
    y[[0, 1], True, [2, 0]] = 5.0
    assert y.tolist() == [[0.0, 0.0, 5.0], [5.0, 0.0, 0.0]]


def test_a_list_holding_sequences_indexes_as_a_tuple_with_a_warning():
    x = ddpc.arange(24.0).reshape(2, 3, 4)
    with pytest.warns(UserWarning, match="non-tuple sequence"):
        picked = x[[[0, 1], [1, 0]]]  # legacy PyTorch code's x[[rows, cols]] is x[rows, cols]
    assert picked.tolist() == [[4.0, 5.0, 6.0, 7.0], [12.0, 13.0, 14.0, 15.0]]
    with pytest.warns(UserWarning):
        assert x[[ddpc.tensor([0, 1]), (2, 0)]].tolist() == [[8.0, 9.0, 10.0, 11.0], [12.0, 13.0, 14.0, 15.0]]
        assert x[[0, slice(None), 1]].tolist() == [1.0, 5.0, 9.0]
        y = ddpc.zeros(2, 3)
        y[[[0, 1], [2, 0]]] = 1.0
    assert y.tolist() == [[0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]
    assert x[[1, 0]].shape == (2, 3, 4) and x[range(1, 2)].shape == (1, 3, 4)  # plain ints stay one index


# ---- reductions ----------------------------------------------------------------------------

def test_sum_of_a_0d_integer_tensor_over_no_dims_is_int64():
    for dtype in (ddpc.uint8, ddpc.int32):
        for dims in ((), []):
            s = ddpc.tensor(3, dtype=dtype).sum(dims, keepdim=True)
            assert s.dtype is ddpc.int64 and s.shape == () and s.item() == 3
    with pytest.raises(ValueError, match="twice"):
        ddpc.tensor(3.0).sum((0, -1))  # its one dim named twice


def test_vector_norm_of_a_0d_tensor_stays_0d():
    n = ddpc.linalg.vector_norm(ddpc.tensor(-2.5), 2, (0,), True)
    assert n.shape == () and n.item() == 2.5
    assert ddpc.linalg.vector_norm(ddpc.tensor(-2.5), 1, -1).item() == 2.5
    with pytest.raises(IndexError, match="out of range"):
        ddpc.linalg.vector_norm(ddpc.tensor(-2.5), 2, 1)


def test_aminmax_along_a_dim_of_an_empty_tensor():
    lo, hi = ddpc.aminmax(ddpc.zeros(1, 0), dim=0)
    assert lo.shape == (0,) and hi.shape == (0,)
    lo, hi = ddpc.aminmax(ddpc.zeros(2, 0), dim=0, keepdim=True)
    assert lo.shape == (1, 0) and hi.shape == (1, 0)
    with pytest.raises(ValueError):
        ddpc.aminmax(ddpc.zeros(0, 2), dim=0)  # no element to take along the dim
    with pytest.raises(ValueError):
        ddpc.aminmax(ddpc.zeros(0, 2))


@pytest.mark.parametrize("op, values, grad", [
    (lambda x: x.max(), [1.0, 3.0, 3.0, 2.0], [0.0, 0.5, 0.5, 0.0]),
    (lambda x: ddpc.min(x), [2.0, 1.0, 1.0, 1.0], [0.0, 1 / 3, 1 / 3, 1 / 3]),
    (lambda x: x.median(), [1.0, 2.0, 2.0, 3.0], [0.0, 0.5, 0.5, 0.0]),  # the lower middle value, 2
    (lambda x: ddpc.nanmedian(x), [float("nan"), 2.0, 2.0, 5.0], [0.0, 0.5, 0.5, 0.0]),
    (lambda x: x.max(), [1.0, float("nan"), float("nan")], [0.0, 0.5, 0.5]),  # NaN wins and ties with NaN
], ids=["max", "min", "median", "nanmedian", "max_nan"])
def test_max_min_median_of_all_elements_split_the_gradient_among_ties(op, values, grad):
    x = ddpc.tensor(values, dtype=ddpc.float64, requires_grad=True)
    op(x).backward()
    np.testing.assert_allclose(x.grad.numpy(), grad, rtol=1e-12)


def test_norm_gradient_is_zero_where_the_norm_is_zero():
    for p in (2, "fro", 3, 1, float("inf")):
        x = ddpc.zeros(2, 2, requires_grad=True)
        ddpc.norm(x, p).backward()
        assert x.grad.tolist() == [[0.0, 0.0], [0.0, 0.0]], p
    x = ddpc.tensor([[0.0, 0.0], [3.0, 4.0]], requires_grad=True)
    n = x.norm(dim=1)
    n.sum().backward()
    assert n.tolist() == [0.0, 5.0]
    np.testing.assert_allclose(x.grad.numpy(), [[0.0, 0.0], [0.6, 0.8]], rtol=1e-6)


def test_negative_order_norms_and_matrix_norms_of_empty_matrices():
    inf = float("inf")
    vector_norm, matrix_norm = ddpc.linalg.vector_norm, ddpc.linalg.matrix_norm
    assert vector_norm(ddpc.tensor([inf, inf]), -1).item() == inf  # (0 + 0) ** -1
    assert vector_norm(ddpc.tensor([0.0, 4.0]), -1).item() == 0.0
    assert vector_norm(ddpc.tensor([2.0, 2.0]), -1).item() == 1.0
    assert ddpc.tensor([inf, inf]).norm(-2).item() == inf
    with pytest.raises(ValueError, match="empty dim"):
        vector_norm(ddpc.zeros(2, 0), -1, dim=1)
    assert vector_norm(ddpc.zeros(2, 0), -1, dim=0).shape == (0,)
    # The largest column sum, row sum or singular value of an empty matrix is 0; the smallest has no value.
    assert matrix_norm(ddpc.zeros(0, 3), 2).item() == 0.0 and matrix_norm(ddpc.zeros(3, 0), 1).item() == 0.0
    assert matrix_norm(ddpc.zeros(0, 3), inf).item() == 0.0 and matrix_norm(ddpc.zeros(0, 0), 1).item() == 0.0
    assert matrix_norm(ddpc.zeros(2, 0, 3), 2).tolist() == [0.0, 0.0]
    assert matrix_norm(ddpc.zeros(0, 3), 2, keepdim=True).shape == (1, 1)
    with pytest.raises(ValueError, match="empty dim"):
        matrix_norm(ddpc.zeros(3, 0), -1)


def test_einsum_takes_the_sublist_form():
    a = ddpc.arange(6.0).reshape(2, 3)
    b = ddpc.arange(12.0).reshape(3, 4)
    assert ddpc.einsum(a, [0, 1], [1, 0]).tolist() == [[0.0, 3.0], [1.0, 4.0], [2.0, 5.0]]
    # Dims 30 and 2 are left, in the order of their numbers: (4, 2), the transposed product.
    assert ddpc.einsum(a, [30, 1], b, [1, 2]).tolist() == (a @ b).t().tolist()
    assert ddpc.einsum(a, [Ellipsis, 1], b, [1, 51], [Ellipsis, 51]).tolist() == (a @ b).tolist()
    with pytest.raises(ValueError, match=r"\[0, 52\)"):
        ddpc.einsum(a, [52, 0])


# ---- shape ops -------------------------------------------------------------------------------

def test_repeat_interleave_takes_output_size_and_counts_alone():
    counts = ddpc.tensor([3, 0, 1], dtype=ddpc.int32)
    alone = ddpc.repeat_interleave(counts)  # index i, counts[i] times
    assert alone.tolist() == [0, 0, 0, 2] and alone.dtype is ddpc.int32
    assert ddpc.repeat_interleave(counts, output_size=4).tolist() == [0, 0, 0, 2]
    x = ddpc.tensor([[1.0, 2.0]])
    assert x.repeat_interleave(ddpc.tensor([1, 2]), dim=1, output_size=3).tolist() == [[1.0, 2.0, 2.0]]
    assert ddpc.repeat_interleave(x, 2, output_size=4).tolist() == [1.0, 1.0, 2.0, 2.0]
    with pytest.raises(ValueError, match="output_size 5"):
        ddpc.repeat_interleave(x, 2, dim=-1, output_size=5)
    with pytest.raises(ValueError, match="1-d integer"):
        ddpc.repeat_interleave(ddpc.tensor([[1, 2]]))


def test_tensor_split_takes_a_tensor_of_sections_or_indices():
    x = ddpc.arange(7)
    assert [p.tolist() for p in ddpc.tensor_split(x, ddpc.tensor(3))] == [[0, 1, 2], [3, 4], [5, 6]]
    assert [p.tolist() for p in x.tensor_split(ddpc.tensor([1, 5]))] == [[0], [1, 2, 3, 4], [5, 6]]
    with pytest.raises(TypeError, match="0- or 1-d integer"):
        x.tensor_split(ddpc.tensor([[1, 5]]))


def test_squeeze_refuses_a_dim_named_twice_and_unfold_of_0d_takes_size_0():
    with pytest.raises(ValueError, match="twice"):
        ddpc.zeros(3, 1, 1).squeeze((1, -2))
    assert ddpc.zeros(3, 1, 1).squeeze((1, -1)).shape == (3,)
    x = ddpc.tensor(4.0)
    assert x.unfold(0, 0, 1).shape == (0,) and x.unfold(0, 1, 1).tolist() == [4.0]
