"""ddpc.distributed.nn.functional: collectives that autograd differentiates, on 2 and 3 real ranks
of the cpu backend, each rank's gradient compared with its closed form. Rank r's input is
(r + 1) * base and its loss weights each output by coefficients that depend on the rank, so the
expected gradient of rank r is a sum over every rank's loss."""

import numpy as np
import pytest

import ddpc

BASE = np.arange(6, dtype=np.float32).reshape(2, 3) + 1


def _leaf(rank):
    return ddpc.tensor((rank + 1) * BASE, requires_grad=True)


def _cases(rank, world):
    """name -> (the loss of this rank, its input, the expected gradient of that input)."""
    import ddpc.distributed.nn as dnn

    c = [float(s + 2) for s in range(world)]  # rank s's loss weight
    total = sum(c)
    cases = {}

    x = _leaf(rank)
    outs = dnn.all_gather(x)
    loss = sum((i + 1) * o.sum() for i, o in enumerate(outs)) * c[rank]
    cases["all_gather"] = (loss, x, np.full((2, 3), (rank + 1) * total))

    x = _leaf(rank)
    y = dnn.all_reduce(x * (rank + 1))
    cases["all_reduce"] = ((y * c[rank]).sum(), x, np.full((2, 3), (rank + 1) * total))

    x = _leaf(rank)
    y = dnn.all_reduce(x, op=ddpc.distributed.ReduceOp.AVG)
    cases["all_reduce_avg"] = ((y * c[rank]).sum(), x, np.full((2, 3), total / world))

    x = _leaf(rank)
    y = dnn.broadcast(x, src=world - 1)
    assert np.array_equal(y.detach().numpy(), world * BASE)
    cases["broadcast"] = ((y * c[rank]).sum(), x, np.full((2, 3), total if rank == world - 1 else 0.0))

    x = _leaf(rank)
    y = dnn.reduce(x, dst=0)
    if rank == 0:
        assert np.array_equal(y.detach().numpy(), sum(range(1, world + 1)) * BASE)
    cases["reduce"] = ((y * c[rank]).sum(), x, np.full((2, 3), c[0]))

    x = _leaf(rank)
    outs = dnn.gather(x, dst=1)
    loss = sum((i + 1) * o.sum() for i, o in enumerate(outs)) * c[rank]
    cases["gather"] = (loss, x, np.full((2, 3), (rank + 1) * c[1]))

    xs = [ddpc.tensor((rank + 1) * (i + 1) * BASE, requires_grad=True) for i in range(world)]
    y = dnn.scatter(xs, src=0)
    assert np.array_equal(y.detach().numpy(), (rank + 1) * BASE)  # rank 0's xs[rank]: 1 * (rank + 1) * BASE
    loss = (y * c[rank]).sum()
    cases["scatter"] = (loss, xs[world - 1], np.full((2, 3), c[world - 1] if rank == 0 else 0.0))

    xs = [ddpc.tensor((rank + 1) * BASE, requires_grad=True) for _ in range(world)]
    y = dnn.reduce_scatter(ddpc.zeros(2, 3), xs)
    assert np.array_equal(y.detach().numpy(), sum(range(1, world + 1)) * BASE)
    cases["reduce_scatter"] = ((y * c[rank]).sum(), xs[0], np.full((2, 3), c[0]))

    x = _leaf(rank)
    y = dnn._all_gather_base(ddpc.zeros(2 * world, 3), x)
    weights = ddpc.tensor(np.repeat(np.arange(1, world + 1, dtype=np.float32), 2)[:, None] * np.ones((1, 3), np.float32))
    cases["_all_gather_base"] = ((y * weights).sum() * c[rank], x, np.full((2, 3), (rank + 1) * total))

    xs = [ddpc.tensor((rank + 1) * BASE, requires_grad=True) for _ in range(world)]
    outs = dnn.all_to_all([ddpc.zeros(2, 3) for _ in range(world)], xs)
    assert all(np.array_equal(o.detach().numpy(), (s + 1) * BASE) for s, o in enumerate(outs))
    loss = sum((s + 1) * o.sum() for s, o in enumerate(outs)) * c[rank]
    # xs[d] of this rank lands in rank d's outs[rank], weighted (rank + 1) * c[d]
    cases["all_to_all"] = (loss, xs[world - 1], np.full((2, 3), (rank + 1) * c[world - 1]))

    x = ddpc.tensor(np.arange(3 * world, dtype=np.float32).reshape(world, 3) + 10 * rank, requires_grad=True)
    y = dnn.all_to_all_single(ddpc.zeros(world, 3), x)
    assert np.array_equal(y.detach().numpy()[:, 0], [3 * rank + 10 * s for s in range(world)])
    weights = ddpc.tensor(np.arange(1, world + 1, dtype=np.float32)[:, None] * np.ones((1, 3), np.float32))
    # row d of this rank's input becomes row rank of rank d's output, weighted (rank + 1) * c[d]
    expected = np.array([[(rank + 1) * c[d]] * 3 for d in range(world)], dtype=np.float32)
    cases["all_to_all_single"] = ((y * weights).sum() * c[rank], x, expected)
    return cases


def _worker(rank):
    import ddpc.distributed as dist

    dist.init_process_group("cpu")
    world = dist.get_world_size()
    cases = _cases(rank, world)
    wrong = {}
    for name, (loss, x, expected) in cases.items():  # every rank runs the backward passes in one order
        loss.backward()
        got = x.grad.numpy() if x.grad is not None else np.zeros_like(expected)
        if not np.allclose(got, expected):
            wrong[name] = (got.tolist(), expected.tolist())
    x = _leaf(rank)
    try:
        (ddpc.distributed.nn.all_reduce(x, op=dist.ReduceOp.MAX) * 1.0).sum().backward()
        max_error = None
    except RuntimeError as e:
        max_error = str(e)
    dist.destroy_process_group()
    return wrong, max_error


@pytest.mark.parametrize("world", [2, 3])
def test_each_collective_carries_gradients_back(world):
    for wrong, max_error in ddpc.spawn(_worker, nprocs=world):
        assert wrong == {}
        assert "no gradient for op" in max_error and "MAX" in max_error


def _contrastive_worker(rank, feats, targets):
    """Each rank embeds its quarter of the batch, gathers every rank's embeddings with gradient and
    takes the loss of the whole batch; DDP averages the gradients."""
    import ddpc.distributed as dist
    import ddpc.distributed.nn as dnn

    dist.init_process_group("cpu")
    world = dist.get_world_size()
    ddpc.manual_seed(0)
    model = ddpc.nn.parallel.DistributedDataParallel(ddpc.nn.Linear(5, 4))
    rows = slice(rank * len(feats) // world, (rank + 1) * len(feats) // world)
    z = model(ddpc.tensor(feats[rows]))
    everyone = ddpc.cat(dnn.all_gather(z))
    loss = ddpc.nn.functional.cross_entropy(everyone @ everyone.T, ddpc.tensor(targets))
    loss.backward()
    grads = [p.grad.numpy().copy() for p in model.parameters()]
    dist.destroy_process_group()
    return grads


def test_a_loss_over_the_gathered_batch_matches_one_process():
    rng = np.random.default_rng(0)
    feats = rng.standard_normal((8, 5)).astype(np.float32)
    targets = rng.integers(0, 8, 8)
    ddpc.manual_seed(0)
    model = ddpc.nn.Linear(5, 4)
    z = model(ddpc.tensor(feats))
    ddpc.nn.functional.cross_entropy(z @ z.T, ddpc.tensor(targets)).backward()
    # every rank's loss is the whole batch's, so the ranks' summed gradients are world times one
    # process's, and DDP's average divides them by world again
    for grads in ddpc.spawn(_contrastive_worker, args=(feats, targets), nprocs=2):
        for g, p in zip(grads, model.parameters()):
            assert np.allclose(g, p.grad.numpy(), atol=1e-5)
