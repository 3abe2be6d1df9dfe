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
