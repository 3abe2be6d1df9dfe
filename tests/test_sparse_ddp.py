"""DistributedDataParallel with a sparse-gradient Embedding: every rank's
sparse gradient is all-gathered and averaged, so training on R ranks equals
one process training on the concatenated batch.

Ranks are real processes started by ddpc.spawn on the cpu backend.
"""

import numpy as np
import pytest

import ddpc

ROWS, DIM, BAG = 20, 4, 3


def data(n, steps, seed=0):
    rng = np.random.default_rng(seed)
    # rank-skewed lookups: each rank touches a different number of distinct rows
    idx = rng.integers(0, ROWS, (steps, n, BAG)).astype(np.int64)
    y = rng.standard_normal((steps, n, 1)).astype(np.float32)
    return idx, y


def model(seed=0):
    from ddpc import nn

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.emb = nn.Embedding(ROWS, DIM, sparse=True, padding_idx=0)
            self.bag = nn.EmbeddingBag(ROWS, DIM, mode="mean", sparse=True)
            self.head = nn.Linear(2 * DIM, 1)

        def forward(self, idx):
            return self.head(ddpc.cat([self.emb(idx).sum(1), self.bag(idx)], 1))

    ddpc.manual_seed(seed)
    return Model()


def optimizers(m):
    m = getattr(m, "module", m)
    sparse = [m.emb.weight, m.bag.weight]
    return [ddpc.optim.SparseAdam(sparse, lr=0.05), ddpc.optim.SGD(m.head.parameters(), lr=0.1, momentum=0.5)]


def params(m):
    return {k: v.detach().cpu().numpy().copy() for k, v in m.state_dict().items()}


def train(m, batches, steps, rank=0, world=1, per_rank=None):
    opts = optimizers(m)
    idx, y = batches
    for s in range(steps):
        for o in opts:
            o.zero_grad()
        lo, hi = (0, idx.shape[1]) if per_rank is None else (rank * per_rank, (rank + 1) * per_rank)
        out = m(ddpc.from_numpy(idx[s, lo:hi].copy()))
        ((out - ddpc.from_numpy(y[s, lo:hi].copy())) ** 2).mean().backward()
        for o in opts:
            o.step()
    return params(getattr(m, "module", m))


def sparse_worker(rank, world, batch, steps):
    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu")
    ddp = nn.parallel.DistributedDataParallel(model(seed=rank))  # rank 0's weights are broadcast
    out = train(ddp, data(world * batch, steps), steps, rank, world, per_rank=batch)
    grad = ddp.module.emb.weight.grad
    out["grad_is_sparse"] = np.array(grad.is_sparse)
    out["grad_nnz"] = np.array(grad._nnz())
    dist.destroy_process_group()
    return out


@pytest.mark.parametrize("world", [2, 3])
def test_sparse_embedding_under_ddp_equals_one_process_on_the_combined_batch(world):
    batch, steps = 4, 3
    ref = train(model(), data(world * batch, steps), steps)
    for r in ddpc.spawn(sparse_worker, args=(world, batch, steps), nprocs=world):
        assert bool(r.pop("grad_is_sparse"))
        assert int(r.pop("grad_nnz")) == world * batch * BAG - int((data(world * batch, steps)[0][-1] == 0).sum())
        assert r.keys() == ref.keys()
        for k in ref:
            np.testing.assert_allclose(r[k], ref[k], atol=1e-5, rtol=0, err_msg=k)


def tables_worker(rank, find_unused, with_dense):
    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu")

    class Tables(nn.Module):
        def __init__(self):
            super().__init__()
            self.e = nn.Embedding(4, 1, sparse=True)
            self.e2 = nn.Embedding(4, 1, sparse=True)
            if with_dense:
                self.head = nn.Linear(1, 1)

        def forward(self, idx):
            out = {"e": self.e(idx), "e2": self.e2(idx)}
            return {k: self.head(v) for k, v in out.items()} if with_dense else out

    m = Tables()
    ddp = nn.parallel.DistributedDataParallel(m, find_unused_parameters=find_unused)
    out = ddp(ddpc.tensor([rank]))
    # rank 0's loss reaches table e, rank 1's table e2 (without find_unused, both reach e)
    (out["e2" if rank == 1 and find_unused else "e"]).sum().backward()
    grads = {n: None if t.grad is None else t.grad.to_dense().numpy().ravel().tolist()
             for n, t in (("e", m.e.weight), ("e2", m.e2.weight))}
    dist.destroy_process_group()
    return grads


@pytest.mark.parametrize("with_dense", [True, False], ids=["with_a_dense_layer", "tables_alone"])
@pytest.mark.parametrize("find_unused", [True, False])
def test_sparse_tables_each_ranks_loss_reaches_are_averaged_table_by_table(find_unused, with_dense):
    """Every table's gradients are gathered in one order on every rank, whichever
    tables each rank's loss reached (a table none reached keeps None), also in a
    model of sparse tables alone (whose gradients were left unaveraged)."""
    results = ddpc.spawn(tables_worker, args=(find_unused, with_dense), nprocs=2)
    assert results[0] == results[1], results
    got = results[0]
    if find_unused:  # e: rank 0's row 0, halved; e2: rank 1's row 1, halved
        assert got["e"][1:] == [0.0] * 3 and got["e2"][0] == 0.0 and got["e2"][2:] == [0.0] * 2
        assert got["e"][0] != 0.0 and got["e"][0] == pytest.approx(got["e2"][1])
    else:  # both ranks' losses reach e (rows 0 and 1), none reaches e2
        assert got["e2"] is None and got["e"][2:] == [0.0] * 2 and got["e"][0] == pytest.approx(got["e"][1])
    if not with_dense:  # the gradient of the sum over one row is 1, averaged over 2 ranks
        assert max(got["e"]) == pytest.approx(0.5)
