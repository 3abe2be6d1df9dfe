"""ddpc.nn.parallel's functional building blocks (scatter, scatter_kwargs,
gather) and DataParallel along a dimension other than 0, on cpu devices,
against one module on the whole batch.
"""

import collections

import numpy as np
import pytest

import ddpc
from ddpc import nn
from ddpc.nn import parallel

CPUS = ["cpu", "cpu", "cpu"]


class SeqFirst(nn.Module):
    """A sequence-first LSTM and a head: the batch is dim 1 of its input and output."""

    def __init__(self):
        super().__init__()
        self.lstm = nn.LSTM(3, 5)
        self.head = nn.Linear(5, 2)

    def forward(self, x, h0=None):
        out, (h, _) = self.lstm(x, h0)
        return self.head(out), {"last": h}


def _grads(m):
    return {n: p.grad.numpy().copy() for n, p in m.named_parameters()}


def _assert_close(got, want, atol=1e-5):
    assert got.keys() == want.keys()
    for k in want:
        np.testing.assert_allclose(got[k], want[k], atol=atol, rtol=0, err_msg=k)


def _array(shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


# ---- DataParallel(dim=...) --------------------------------------------------------------

@pytest.mark.parametrize("dim,batch", [(1, 7), (-2, 6)])
def test_data_parallel_along_dim_1_equals_one_module(dim, batch):
    """A sequence-first LSTM split along the batch (dim 1, also spelt -2 for a 3-d
    input) on two cpu replicas: outputs, the initial state's split (dim 1 of
    h0 too) and gradients over two training steps as one module's."""
    ddpc.manual_seed(0)
    ref, dp = SeqFirst(), nn.DataParallel(SeqFirst(), device_ids=["cpu", "cpu"], dim=dim)
    dp.module.load_state_dict(ref.state_dict())
    opts = [ddpc.optim.SGD(m.parameters(), lr=0.1) for m in (ref, dp)]
    for step in range(2):
        x = ddpc.from_numpy(_array((4, batch, 3), step))
        h0 = ddpc.from_numpy(_array((1, batch, 5), 10 + step))
        c0 = ddpc.zeros(1, batch, 5)
        outs = []
        for m, opt in zip((ref, dp), opts):
            opt.zero_grad()
            y, extra = m(x, (h0, c0))
            (y.square().sum() + extra["last"].sum()).backward()
            outs.append((y.detach().numpy().copy(), extra["last"].detach().numpy().copy()))
        assert outs[1][0].shape == (4, batch, 2) and outs[1][1].shape == (1, batch, 5)
        np.testing.assert_allclose(outs[1][0], outs[0][0], atol=1e-5, rtol=0)
        np.testing.assert_allclose(outs[1][1], outs[0][1], atol=1e-5, rtol=0)
        _assert_close(_grads(dp.module), _grads(ref))
        for opt in opts:
            opt.step()
    _assert_close({k: v.numpy() for k, v in dp.module.state_dict().items()},
                  {k: v.numpy() for k, v in ref.state_dict().items()})


def test_data_parallel_dim_errors_and_dim_0_unchanged():
    dp = nn.DataParallel(nn.Linear(3, 2), device_ids=["cpu", "cpu"], dim=2)
    with pytest.raises(IndexError, match="along dim 2"):
        dp(ddpc.ones(4, 3))
    dp = nn.DataParallel(nn.Linear(3, 2), device_ids=["cpu", "cpu"], output_device=-1)
    assert dp.dim == 0 and dp.output_device == "cpu"
    out = dp(ddpc.ones(5, 3))
    assert out.shape == (5, 2)


# ---- scatter, scatter_kwargs, gather ----------------------------------------------------

Pair = collections.namedtuple("Pair", "a b")


def _nested(rows, dim):
    """Tensors of `rows` along dim inside a tuple, a list, a dict and a namedtuple, with other objects."""
    def t(seed):
        shape = [2, 3, 2]
        shape[dim] = rows
        return ddpc.from_numpy(_array(tuple(shape), seed))

    return (t(0), [t(1), "label", 3], {"x": t(2), "none": None}, Pair(t(3), 0.5))


@pytest.mark.parametrize("dim", [0, 1, -1])
@pytest.mark.parametrize("rows,devices,sizes", [(6, 3, [2, 2, 2]), (7, 3, [3, 3, 1]), (4, 3, [2, 2]), (2, 3, [1, 1])])
def test_scatter_gather_round_trip_of_nested_structures(dim, rows, devices, sizes):
    inputs = _nested(rows, dim)
    chunks = parallel.scatter(inputs, ["cpu"] * devices, dim)
    assert isinstance(chunks, list) and len(chunks) == len(sizes)
    for chunk, size in zip(chunks, sizes):
        x, (y, label, three), d, pair = chunk
        assert isinstance(chunk, tuple) and isinstance(chunk[1], list) and isinstance(pair, Pair)
        assert label == "label" and three == 3 and d["none"] is None and pair.b == 0.5
        for t in (x, y, d["x"], pair.a):
            assert t.shape[dim] == size
    back = parallel.gather(chunks, "cpu", dim)
    x, (y, label, three), d, pair = back
    for got, want in ((x, inputs[0]), (y, inputs[1][0]), (d["x"], inputs[2]["x"]), (pair.a, inputs[3].a)):
        np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert isinstance(pair, Pair) and d["none"] is None


def test_scatter_forms_kwargs_and_errors():
    x = ddpc.arange(10.0).reshape(5, 2)
    pieces = parallel.scatter(x, [-1, "cpu"])
    assert isinstance(pieces, tuple) and [p.shape[0] for p in pieces] == [3, 2]
    # The fewest chunks of any tensor decide how many devices get a share; objects go to each.
    assert len(parallel.scatter((x, ddpc.ones(2, 2)), CPUS)) == 2
    assert parallel.scatter(("a", 1), CPUS) == [("a", 1)] * 3
    scalar = ddpc.tensor(2.0)
    assert [s.item() for s, _ in parallel.scatter((scalar, x), CPUS)] == [2.0] * 3
    args, kwargs = parallel.scatter_kwargs((x,), {"mask": ddpc.ones(5, 1)}, CPUS)
    assert len(args) == len(kwargs) == 3 and [k["mask"].shape[0] for k in kwargs] == [2, 2, 1]
    args, kwargs = parallel.scatter_kwargs((x,), None, CPUS)
    assert kwargs == ({}, {}, {})
    args, kwargs = parallel.scatter_kwargs((), {"x": x}, CPUS)
    assert args == ((), (), ())
    with pytest.raises(IndexError, match="along dim 2"):
        parallel.scatter((x,), CPUS, dim=2)
    with pytest.raises(ValueError, match="invalid device"):
        parallel.scatter((x,), ["gpu"])


def test_gather_is_differentiable_and_checks_its_inputs():
    parts = [ddpc.ones(2, 3, requires_grad=True), ddpc.ones(2, 1, requires_grad=True)]
    out = parallel.gather(parts, -1, dim=1)
    assert out.shape == (2, 4)
    (out * ddpc.arange(4.0)).sum().backward()
    np.testing.assert_array_equal(parts[0].grad.numpy(), [[0, 1, 2]] * 2)
    np.testing.assert_array_equal(parts[1].grad.numpy(), [[3]] * 2)
    with pytest.warns(UserWarning, match="scalar outputs"):
        losses = parallel.gather([ddpc.tensor(1.0), ddpc.tensor(2.0)], "cpu")
    assert losses.tolist() == [1.0, 2.0]
    assert parallel.gather([None, None], "cpu") is None
    with pytest.raises(ValueError, match="same number of keys"):
        parallel.gather([{"a": ddpc.ones(1)}, {"a": ddpc.ones(1), "b": ddpc.ones(1)}], "cpu")
