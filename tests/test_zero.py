"""ZeroRedundancyOptimizer on 2 and 3 ranks (real processes started by
ddpc.spawn on the cpu backend) against a plain optimizer over all the
parameters: the same parameters after steps under an lr scheduler, each
rank holding only its shard of the state, PyTorch's partition rule, and
state dicts that consolidate to the plain optimizer's and load back."""

import numpy as np
import pytest

import ddpc
from ddpc import nn
from ddpc.optim import ZeroRedundancyOptimizer


def _model():
    ddpc.manual_seed(3)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 12), nn.ReLU(), nn.Linear(12, 3))


def _batch(rank, step):
    rng = np.random.default_rng(10 * step + rank)
    return ddpc.tensor(rng.standard_normal((8, 6)).astype(np.float32)), ddpc.tensor(rng.integers(0, 3, 8))


def _train(model, opt, sched, rank, steps, first=0):
    for step in range(first, first + steps):
        x, y = _batch(rank, step)
        opt.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        opt.step()
        sched.step()


def _greedy_owners(params, world):
    loads, owners = [0] * world, {}
    for i in sorted(range(len(params)), key=lambda i: params[i].numel(), reverse=True):
        r = min(range(world), key=loads.__getitem__)
        owners[i] = r
        loads[r] += params[i].numel()
    return owners


def _state_arrays(sd):
    return {i: {k: (v.numpy().copy() if isinstance(v, ddpc.Tensor) else v) for k, v in s.items()}
            for i, s in sd["state"].items()}


def zero_worker(rank, world, steps):
    import ddpc.distributed as dist

    dist.init_process_group("cpu")
    out = {}
    plain = nn.parallel.DistributedDataParallel(_model())
    plain_opt = ddpc.optim.Adam(plain.parameters(), lr=0.01, weight_decay=0.01)
    _train(plain, plain_opt, ddpc.optim.lr_scheduler.StepLR(plain_opt, 2, 0.5), rank, steps)

    model = nn.parallel.DistributedDataParallel(_model())
    params = list(model.parameters())
    zero = ZeroRedundancyOptimizer(params, ddpc.optim.Adam, lr=0.01, weight_decay=0.01)
    sched = ddpc.optim.lr_scheduler.StepLR(zero, 2, 0.5)
    _train(model, zero, sched, rank, steps)
    out["max_diff"] = max(float(np.abs(p.numpy() - q.numpy()).max()) for p, q in zip(params, plain.parameters()))
    out["owned"] = sorted(i for i, p in enumerate(params) if p in zero.state and zero.state[p])
    out["owners_ok"] = all(zero._owner[id(params[i])] == r for i, r in _greedy_owners(params, world).items())
    out["lr"] = (zero.param_groups[0]["lr"], zero.optim.param_groups[0]["lr"])

    zero.consolidate_state_dict(to=0)
    if rank == 0:
        full, ref = zero.state_dict(), plain_opt.state_dict()
        assert full["param_groups"] == ref["param_groups"], (full["param_groups"], ref["param_groups"])
        a, b = _state_arrays(full), _state_arrays(ref)
        assert a.keys() == b.keys()
        out["state_diff"] = max(float(np.abs(np.asarray(a[i][k]) - np.asarray(b[i][k])).max()) for i in a for k in a[i])
    else:
        try:
            zero.state_dict()
            out["unconsolidated"] = "no error"
        except RuntimeError as e:
            out["unconsolidated"] = str(e)

    # A fresh wrapper that loads the consolidated state continues as the plain optimizer does.
    box = [zero.state_dict() if rank == 0 else None]
    dist.broadcast_object_list(box, src=0)
    resumed = ZeroRedundancyOptimizer(params, ddpc.optim.Adam, lr=0.5)
    resumed.load_state_dict(box[0])
    sched2 = ddpc.optim.lr_scheduler.StepLR(plain_opt, 2, 0.5)  # the schedules restart alike on both
    _train(model, resumed, ddpc.optim.lr_scheduler.StepLR(resumed, 2, 0.5), rank, 3, first=steps)
    _train(plain, plain_opt, sched2, rank, 3, first=steps)
    out["resumed_diff"] = max(float(np.abs(p.numpy() - q.numpy()).max()) for p, q in zip(params, plain.parameters()))
    dist.destroy_process_group()
    return out


@pytest.mark.parametrize("world", [2, 3])
def test_zero_matches_the_plain_optimizer_and_shards_its_state(world):
    results = ddpc.spawn(zero_worker, args=(world, 5), nprocs=world)
    owned = [r["owned"] for r in results]
    assert sorted(i for o in owned for i in o) == list(range(6))  # every parameter's state on exactly one rank
    assert all(o for o in owned)
    for r in results:
        assert r["max_diff"] < 1e-6 and r["resumed_diff"] < 1e-6, r
        assert r["owners_ok"]
        assert r["lr"] == (0.0025, 0.0025)  # StepLR(2, 0.5) after 5 steps reached the shard too
    assert results[0]["state_diff"] == 0.0
    assert "consolidate_state_dict" in results[1]["unconsolidated"]


def test_zero_rejects_what_it_cannot_do():
    with pytest.raises(TypeError, match="optimizer_class"):
        ZeroRedundancyOptimizer([ddpc.zeros(2, requires_grad=True)], "Adam")
    with pytest.raises(NotImplementedError, match="overlap_with_ddp"):
        ZeroRedundancyOptimizer([ddpc.zeros(2, requires_grad=True)], ddpc.optim.SGD, overlap_with_ddp=True, lr=0.1)
