"""fully_shard (FSDP2): training equals one process on the concatenated
batch (AdamW, SGD, 2 and 3 ranks, uneven and empty shards, and HSDP on a
2x2 mesh), clip_grad_norm_ over the shards, gradient accumulation without
sync, reshard_after_forward, explicit prefetching and backward's default
one (the order of the collectives, none twice), ignored parameters,
activation checkpointing, state dicts of DTensors and distributed
checkpoints saved on 2 ranks and loaded on 3, mixed precision, and the
errors.

Ranks are real processes started by ddpc.spawn on the cpu backend.
"""

import math

import numpy as np
import pytest

import ddpc

FEATURES, HIDDEN, NARROW, CLASSES, BATCH = 12, 16, 5, 2, 4


def net(seed=0):
    """Two blocks and a head: 5 rows split 3+2 over 2 ranks and 2+2+1 over 3;
    the head's 2 rows 1+1+0 over 3 (a rank with no rows)."""
    from ddpc import nn

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.blocks = nn.ModuleList([nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh()),
                                         nn.Sequential(nn.Linear(HIDDEN, NARROW), nn.ReLU())])
            self.head = nn.Linear(NARROW, CLASSES)

        def forward(self, x):
            for block in self.blocks:
                x = block(x)
            return self.head(x)

    ddpc.manual_seed(seed)
    return Net()


def data(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.standard_normal((n, FEATURES)).astype(np.float32), rng.integers(0, CLASSES, n).astype(np.int64)


def optimizer(name, params):
    if name == "adamw":
        return ddpc.optim.AdamW(params, lr=0.01, weight_decay=0.1)
    return ddpc.optim.SGD(params, lr=0.1, momentum=0.9)


def loss_of(model, X, y):
    return ddpc.nn.CrossEntropyLoss()(model(ddpc.from_numpy(X)), ddpc.from_numpy(y))


def train_single(world, steps, opt="adamw", accumulate=1, clip=None, norm_type=2.0, first=0):
    """One process on each step's batch of every rank (and every micro-batch): the parameters and the norms."""
    m = net()
    o = optimizer(opt, m.parameters())
    X, y = data(world * BATCH * accumulate * (first + steps))
    big = world * BATCH * accumulate
    norms = []
    for s in range(first + steps):
        o.zero_grad()
        loss_of(m, X[s * big:(s + 1) * big], y[s * big:(s + 1) * big]).backward()
        if clip is not None:
            norms.append(float(ddpc.nn.utils.clip_grad_norm_(m.parameters(), clip, norm_type)))
        o.step()
    return {k: v.numpy().copy() for k, v in m.state_dict().items()}, norms


def sharded(model, **kwargs):
    from ddpc.distributed.fsdp import fully_shard

    for block in model.blocks:
        fully_shard(block, **kwargs)
    return fully_shard(model, **kwargs)


def full_params(model):
    """Every parameter whole, from the state dict's DTensors."""
    return {k: v.full_tensor().numpy().copy() for k, v in model.state_dict().items()}


def train_steps(model, o, rank, world, steps, accumulate=1, clip=None, norm_type=2.0, first=0, each_backward=None):
    X, y = data(world * BATCH * accumulate * (first + steps))
    norms = []
    for s in range(first, first + steps):
        o.zero_grad()
        for j in range(accumulate):
            lo = (s * accumulate + j) * world * BATCH + rank * BATCH
            if accumulate > 1:
                model.set_requires_gradient_sync(j == accumulate - 1)
            loss_of(model, X[lo:lo + BATCH], y[lo:lo + BATCH]).backward()
            if each_backward is not None:
                each_backward(j)
        if clip is not None:
            norms.append(float(ddpc.nn.utils.clip_grad_norm_(model.parameters(), clip, norm_type)))
        o.step()
    return norms


def assert_close(a, b, atol=1e-5):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], atol=atol, rtol=0, err_msg=k)


def train_worker(rank, world, opt, options):
    import ddpc.distributed as dist
    from ddpc.distributed.fsdp import FSDPModule
    from ddpc.distributed.tensor import DTensor, Shard
    from ddpc.nn import Parameter

    dist.init_process_group("cpu")
    m = sharded(net(), **options)
    o = optimizer(opt, m.parameters())
    norms = train_steps(m, o, rank, world, 3)
    sd = m.state_dict()
    out = {"params": full_params(m), "norms": norms, "class": type(m).__name__,
           "fsdp": [isinstance(x, FSDPModule) for x in (m, *m.blocks, m.head)],
           "local": {n: tuple(p.shape) for n, p in m.named_parameters()},
           "parameters": all(isinstance(p, Parameter) and p.placements == (Shard(0),) for p in m.parameters()),
           "dtensors": {k: (type(v) is DTensor, v.placements == (Shard(0),), tuple(v.shape), tuple(v.to_local().shape))
                        for k, v in sd.items()}}
    dist.destroy_process_group()
    return out


def chunk_rows(rows, world, rank):
    per = -(-rows // world)
    return max(0, min(per, rows - rank * per))


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("opt", ["adamw", "sgd"])
def test_training_equals_one_process_on_the_concatenated_batch(opt, world):
    ref, _ = train_single(world, 3, opt)
    shapes = {k: v.shape for k, v in ref.items()}
    for rank, r in enumerate(ddpc.spawn(train_worker, args=(world, opt, {}), nprocs=world)):
        assert_close(r["params"], ref)
        assert r["class"] == "FSDPNet" and r["fsdp"] == [True, True, True, False]
        assert r["parameters"]
        for k, shape in shapes.items():  # torch.chunk's rows on each rank, under the original names
            local = (chunk_rows(shape[0], world, rank), *shape[1:])
            assert r["local"][k] == local
            assert r["dtensors"][k] == (True, True, shape, local)
    if world == 3:
        assert r["local"]["head.weight"] == (0, NARROW)  # the last rank holds none of the head's rows


def reshard_worker(rank, world, reshard_after_forward):
    """Whether each block's unsharded parameters are held between forward and
    backward and after the step, and what the module's attribute is then."""
    import ddpc.distributed as dist
    from ddpc.distributed.fsdp._fsdp_param import ShardedParameter

    dist.init_process_group("cpu")
    m = sharded(net(), reshard_after_forward=reshard_after_forward)
    o = optimizer("adamw", m.parameters())
    held = []

    def between(module, args, output):
        held.append([not b._fsdp_state.group.full._buf.storage_released for b in m.blocks])

    m.register_forward_hook(between)
    train_steps(m, o, rank, world, 3)
    after = ([b._fsdp_state.group.full._buf.storage_released for b in m.blocks],
             isinstance(m.blocks[0][0].weight, ShardedParameter))
    out = {"params": full_params(m), "held": held, "after": after}
    dist.destroy_process_group()
    return out


@pytest.mark.parametrize("reshard_after_forward", [True, False, None])
def test_reshard_after_forward_frees_or_keeps_the_unsharded_parameters(reshard_after_forward):
    ref, _ = train_single(2, 3)
    for r in ddpc.spawn(reshard_worker, args=(2, reshard_after_forward), nprocs=2):
        assert_close(r["params"], ref)
        assert r["held"] == [[reshard_after_forward is False] * 2] * 3  # None: True but for the root
        assert r["after"] == ([True, True], True)  # freed after backward, the module on its shard again


def clip_worker(rank, world, norm_type):
    import ddpc.distributed as dist

    dist.init_process_group("cpu")
    m = sharded(net())
    o = optimizer("sgd", m.parameters())
    norms = train_steps(m, o, rank, world, 3, clip=0.05, norm_type=norm_type)
    out = {"params": full_params(m), "norms": norms}
    dist.destroy_process_group()
    return out


@pytest.mark.parametrize("world, norm_type", [(2, 2.0), (3, 2.0), (3, math.inf), (2, 1.0)])
def test_clip_grad_norm_is_the_unsharded_models(world, norm_type):
    ref, ref_norms = train_single(world, 3, "sgd", clip=0.05, norm_type=norm_type)
    for r in ddpc.spawn(clip_worker, args=(world, norm_type), nprocs=world):
        np.testing.assert_allclose(r["norms"], ref_norms, rtol=1e-5)
        assert min(r["norms"]) > 0.05  # the clip did act
        assert_close(r["params"], ref)


def accumulate_worker(rank, world, keep_unsharded):
    import ddpc.distributed as dist

    dist.init_process_group("cpu")
    m = sharded(net())
    if keep_unsharded:
        m.set_reshard_after_backward(False)
    o = optimizer("adamw", m.parameters())
    grads_between = []

    def check(j):
        if j < 2:  # no gradient reaches the shards before the synced backward
            grads_between.append(all(p.grad is None for p in m.parameters()))
        elif keep_unsharded:  # kept for the next micro-batch's forward: reshard before the step
            for module in m.modules():
                if hasattr(module, "reshard"):
                    module.reshard()

    train_steps(m, o, rank, world, 2, accumulate=3, each_backward=check)
    out = {"params": full_params(m), "grads_between": grads_between}
    dist.destroy_process_group()
    return out


@pytest.mark.parametrize("world, keep_unsharded", [(2, False), (3, False), (2, True)])
def test_accumulation_without_gradient_sync_equals_one_big_batch(world, keep_unsharded):
    ref, _ = train_single(world, 2, accumulate=3)
    for r in ddpc.spawn(accumulate_worker, args=(world, keep_unsharded), nprocs=world):
        assert_close(r["params"], ref)
        assert r["grads_between"] == [True] * 4


def prefetch_worker(rank, world):
    import ddpc.distributed as dist

    dist.init_process_group("cpu")
    m = sharded(net())
    first, second = m.blocks
    m.set_modules_to_forward_prefetch([first])
    first.set_modules_to_forward_prefetch([second])
    m.set_modules_to_backward_prefetch([second])
    second.set_modules_to_backward_prefetch([first])
    o = optimizer("adamw", m.parameters())
    train_steps(m, o, rank, world, 3)
    handle = first.unshard(async_op=True)  # explicit: the module uses the gathered parameters until reshard
    handle.wait()
    unsharded = tuple(first[0].weight.shape)
    first.reshard()
    out = {"params": full_params(m), "shapes": (unsharded, tuple(first[0].weight.shape))}
    dist.destroy_process_group()
    return out


def test_prefetching_and_explicit_unshard():
    ref, _ = train_single(3, 3)
    for rank, r in enumerate(ddpc.spawn(prefetch_worker, args=(3,), nprocs=3)):
        assert_close(r["params"], ref)
        assert r["shapes"] == ((HIDDEN, FEATURES), (chunk_rows(HIDDEN, 3, rank), FEATURES))


def collective_log(model):
    """Records each all-gather and reduce-scatter fully_shard issues, as (op,
    module, async): the module named by the size of its all-gather input or
    reduce-scatter output, which differs between the modules of net() (and
    from what full_tensor() gathers)."""
    import ddpc.distributed as dist

    names = {model._fsdp_state.group.block: "root"}
    names.update({b._fsdp_state.group.block: f"block{i}" for i, b in enumerate(model.blocks)})
    log = []
    gather, scatter = dist.all_gather_into_tensor, dist.reduce_scatter_tensor

    def all_gather_into_tensor(output, input, group=None, async_op=False):
        if isinstance(input, ddpc.Tensor) and input.numel() in names:
            log.append(("all_gather", names[input.numel()], async_op))
        return gather(output, input, group=group, async_op=async_op)

    def reduce_scatter_tensor(output, input, op=dist.ReduceOp.SUM, group=None, async_op=False):
        if isinstance(output, ddpc.Tensor) and output.numel() in names:
            log.append(("reduce_scatter", names[output.numel()], async_op))
        return scatter(output, input, op=op, group=group, async_op=async_op)

    dist.all_gather_into_tensor, dist.reduce_scatter_tensor = all_gather_into_tensor, reduce_scatter_tensor
    return log


def backward_prefetch_worker(rank, world, mode):
    """Three steps, with the default backward prefetch, without any (the
    default switched off), or with an explicit list; the collectives of the
    first step's forward and backward, and the parameters."""
    import ddpc.distributed as dist
    from ddpc.distributed.fsdp._fully_shard import _FSDPState

    dist.init_process_group("cpu")
    if mode == "none":
        _FSDPState._default_backward_prefetch = lambda self: None
    m = sharded(net())
    if mode == "explicit":  # the root names the first block: it replaces the root's default (the second block)
        m.set_modules_to_backward_prefetch([m.blocks[0]])
    log = collective_log(m)
    o = optimizer("adamw", m.parameters())
    X, y = data(world * BATCH * 3)  # train_steps' batches of three steps: the first here
    loss = loss_of(m, X[rank * BATCH:(rank + 1) * BATCH], y[rank * BATCH:(rank + 1) * BATCH])
    forward = list(log)
    loss.backward()
    backward = log[len(forward):]
    o.step()
    o.zero_grad()
    train_steps(m, o, rank, world, 2, first=1)
    steps = len(log)
    out = {"forward": forward, "backward": backward, "params": full_params(m), "steps": steps,
           "held_after": [not b._fsdp_state.group.full._buf.storage_released for b in m.blocks]}
    dist.destroy_process_group()
    return out


def test_backward_prefetches_the_next_modules_all_gather_by_default():
    ref, _ = train_single(2, 3)
    runs = {mode: ddpc.spawn(backward_prefetch_worker, args=(2, mode), nprocs=2)
            for mode in ("default", "none", "explicit")}
    forward = [("all_gather", "root", False), ("all_gather", "block0", False), ("all_gather", "block1", False)]
    # Backward reaches the root (the head), then block1, then block0; the
    # root's gradients are reduced last (its views of the unsharded
    # parameters are the oldest nodes of the graph). By default each
    # module's pre-backward issues the next one's all-gather without waiting,
    # before any of its own gradients are computed: block1's while the head
    # computes, block0's when the head has computed block1's output gradient.
    expected = {
        "default": [("all_gather", "block1", True), ("all_gather", "block0", True),
                    ("reduce_scatter", "block1", False), ("reduce_scatter", "block0", False),
                    ("reduce_scatter", "root", False)],
        "none": [("all_gather", "block1", False), ("reduce_scatter", "block1", False),
                 ("all_gather", "block0", False), ("reduce_scatter", "block0", False),
                 ("reduce_scatter", "root", False)],
        "explicit": [("all_gather", "block0", True), ("all_gather", "block1", False),
                     ("reduce_scatter", "block1", False), ("reduce_scatter", "block0", False),
                     ("reduce_scatter", "root", False)],
    }
    for mode, results in runs.items():
        for r in results:
            assert r["forward"] == forward, mode
            assert r["backward"] == expected[mode], mode
            # each block gathered once in forward and once in backward, the root (kept) once: 8 collectives a step
            assert r["steps"] == 3 * 8, mode
            assert r["held_after"] == [False, False], mode
            assert_close(r["params"], ref)
            assert_close(r["params"], runs["none"][0]["params"], atol=0)  # the same arithmetic, only earlier


def ignored_worker(rank, world):
    """One backward with a parameter of block1 and the head's weight ignored:
    their gradients (each rank's own) and every other's (averaged), the
    ignored ones' kind and shape, and the state dict's."""
    import ddpc.distributed as dist
    from ddpc.distributed.fsdp import fully_shard
    from ddpc.distributed.fsdp._fsdp_param import ShardedParameter

    dist.init_process_group("cpu")
    m = net()
    fully_shard(m.blocks[0])
    ignored = {m.blocks[1][0].bias, m.head.weight}  # one set for every call, as PyTorch's users write it
    fully_shard(m.blocks[1], ignored_params=ignored)
    fully_shard(m, ignored_params=ignored)
    X, y = data(world * BATCH)
    loss_of(m, X[rank * BATCH:(rank + 1) * BATCH], y[rank * BATCH:(rank + 1) * BATCH]).backward()
    grads = {n: (p.as_dtensor(p.grad).full_tensor() if isinstance(p, ShardedParameter) else p.grad).numpy().copy()
             for n, p in m.named_parameters()}
    sd = m.state_dict()
    out = {"grads": grads,
           "kinds": {n: (type(p).__name__, tuple(p.shape)) for n, p in m.named_parameters()},
           "state": {k: type(v).__name__ for k, v in sd.items()},
           "weight": m.head.weight.numpy().copy(), "attribute": m.head.weight is sd["head.weight"] or None}
    dist.destroy_process_group()
    return out


def test_ignored_params_stay_whole_and_keep_each_ranks_gradient():
    ignored = {"blocks.1.0.bias", "head.weight"}
    X, y = data(2 * BATCH)

    def grads_of(lo, hi):
        m = net()
        loss_of(m, X[lo:hi], y[lo:hi]).backward()
        return {n: p.grad.numpy().copy() for n, p in m.named_parameters()}

    whole = grads_of(0, 2 * BATCH)
    for rank, r in enumerate(ddpc.spawn(ignored_worker, args=(2,), nprocs=2)):
        own = grads_of(rank * BATCH, (rank + 1) * BATCH)
        for n, g in r["grads"].items():  # the ignored ones: this rank's batch alone; the others: both ranks'
            np.testing.assert_allclose(g, own[n] if n in ignored else whole[n], atol=1e-6, rtol=0, err_msg=n)
        assert not np.allclose(own["head.weight"], whole["head.weight"])  # so the ignored ones were not reduced
        for n, (kind, shape) in r["kinds"].items():
            full = whole[n].shape
            assert (kind, shape) == (("Parameter", full) if n in ignored else
                                     ("ShardedParameter", (chunk_rows(full[0], 2, rank), *full[1:]))), n
        assert r["state"] == {k: "Tensor" if k in ignored else "DTensor" for k in whole}
        np.testing.assert_array_equal(r["weight"], net().head.weight.numpy())


def hsdp_worker(rank, world, clip, path):
    """Training on a (2, 2) mesh (sharded along its second dimension, replicated
    along its first), a distributed checkpoint of it loaded into another
    such model, and full tensors loaded."""
    import ddpc.distributed as dist
    import ddpc.distributed.checkpoint as dcp
    from ddpc.distributed.device_mesh import init_device_mesh

    dist.init_process_group("cpu")
    mesh = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))
    m = sharded(net(), mesh=mesh)
    log = collective_log(m)
    o = optimizer("sgd" if clip else "adamw", m.parameters())
    norms = train_steps(m, o, rank, world, 3, clip=clip)
    collectives = len(log)
    sd = m.state_dict()
    out = {"params": full_params(m), "norms": norms, "coordinate": mesh.get_coordinate(), "collectives": collectives,
           "local": {n: tuple(p.shape) for n, p in m.named_parameters()},
           "dtensors": {k: (v.placements, v.device_mesh == mesh, tuple(v.shape), tuple(v.to_local().shape))
                        for k, v in sd.items()}}
    dcp.save({"model": sd}, checkpoint_id=path)
    other = sharded(net(seed=1), mesh=mesh)
    state = {"model": other.state_dict()}
    dcp.load(state, checkpoint_id=path)
    other.load_state_dict(state["model"])
    out["checkpoint"] = full_params(other)
    m.load_state_dict(net(seed=1).state_dict())  # full tensors: each rank keeps its rows
    out["loaded"] = full_params(m)
    dist.destroy_process_group()
    return out


@pytest.mark.parametrize("clip", [None, 0.05])
def test_hsdp_on_a_2x2_mesh_trains_as_one_process(clip, tmp_path):
    from ddpc.distributed.tensor import Replicate, Shard

    ref, ref_norms = train_single(4, 3, "sgd" if clip else "adamw", clip=clip)
    seed1 = {k: v.numpy().copy() for k, v in net(seed=1).state_dict().items()}
    for rank, r in enumerate(ddpc.spawn(hsdp_worker, args=(4, clip, str(tmp_path / "ckpt")), nprocs=4)):
        assert_close(r["params"], ref)
        assert_close(r["checkpoint"], r["params"], atol=0)
        if clip:
            np.testing.assert_allclose(r["norms"], ref_norms, rtol=1e-5)
        _, col = r["coordinate"]
        assert r["collectives"] == 3 * 8  # the all-gathers and reduce-scatters within the shard group, as on 1-d
        for k, v in ref.items():
            local = (chunk_rows(v.shape[0], 2, col), *v.shape[1:])  # the rows of the rank's place in its row
            assert r["local"][k] == local
            assert r["dtensors"][k] == ((Replicate(), Shard(0)), True, v.shape, local)
        assert_close(r["loaded"], seed1, atol=0)


def recompute_worker(rank, world, order):
    import ddpc.distributed as dist
    from ddpc import nn
    from ddpc.distributed.algorithms._checkpoint.checkpoint_wrapper import (CheckpointWrapper,
                                                                            apply_activation_checkpointing)

    dist.init_process_group("cpu")
    m = net()
    if order == "checkpoint_then_shard":  # fully_shard on the wrappers
        apply_activation_checkpointing(m, check_fn=lambda x: isinstance(x, nn.Sequential))
        sharded(m)
    else:  # the wrappers around the sharded blocks
        sharded(m)
        apply_activation_checkpointing(m, check_fn=lambda x: isinstance(x, nn.Sequential))
    wrapped = sum(isinstance(x, CheckpointWrapper) for x in m.modules())
    o = optimizer("adamw", m.parameters())
    train_steps(m, o, rank, world, 3)
    out = {"params": full_params(m), "wrapped": wrapped}
    dist.destroy_process_group()
    return out


@pytest.mark.parametrize("order", ["checkpoint_then_shard", "shard_then_checkpoint"])
def test_activation_checkpointing_recomputes_with_the_unsharded_parameters(order):
    ref, _ = train_single(2, 3)
    for r in ddpc.spawn(recompute_worker, args=(2, order), nprocs=2):
        assert r["wrapped"] == 2
        assert_close(r["params"], ref)


def checkpoint_worker(rank, world, path, save):
    """Two steps then a checkpoint (save), or the checkpoint then two more steps (load)."""
    import ddpc.distributed as dist
    import ddpc.distributed.checkpoint as dcp
    from ddpc.distributed.checkpoint.state_dict import get_state_dict, set_state_dict

    dist.init_process_group("cpu")
    m = sharded(net(seed=0 if save else 1))
    o = optimizer("adamw", m.parameters())
    if save:
        train_steps(m, o, rank, world, 2)
    model_sd, optim_sd = get_state_dict(m, o)
    kinds = sorted({type(v).__name__ for v in model_sd.values()} |
                   {type(v).__name__ for s in optim_sd["state"].values() for v in s.values()})
    state = {"model": model_sd, "optim": optim_sd}
    if save:
        dcp.save(state, checkpoint_id=path)
        out = {"params": full_params(m)}
    else:
        dcp.load(state, checkpoint_id=path)
        set_state_dict(m, o, model_state_dict=state["model"], optim_state_dict=state["optim"])
        out = {"loaded": full_params(m)}
        plain = sharded(net(seed=2))  # the model alone, through its own state dict
        sd = plain.state_dict()
        dcp.load({"model": sd}, checkpoint_id=path)
        plain.load_state_dict(sd)
        out["plain"] = full_params(plain)
        train_steps(m, o, rank, world, 2, first=2)
        out["params"] = full_params(m)
    out["kinds"] = kinds
    dist.destroy_process_group()
    return out


def test_checkpoint_saved_on_2_ranks_loads_on_3_and_training_continues_the_same(tmp_path):
    path = str(tmp_path / "ckpt")
    saved = ddpc.spawn(checkpoint_worker, args=(2, path, True), nprocs=2)
    ref2, _ = train_single(2, 2)
    assert_close(saved[0]["params"], ref2)
    assert saved[0]["kinds"] == ["DTensor", "int"]  # the parameters and moments as DTensors, and the step counts
    # the next two steps on 3 ranks: the batches of 3 ranks after the 2-rank steps
    m = net()
    o = optimizer("adamw", m.parameters())
    X, y = data(2 * BATCH * 2)
    for s in range(2):
        o.zero_grad()
        loss_of(m, X[s * 2 * BATCH:(s + 1) * 2 * BATCH], y[s * 2 * BATCH:(s + 1) * 2 * BATCH]).backward()
        o.step()
    X, y = data(3 * BATCH * 4)
    for s in range(2, 4):
        o.zero_grad()
        loss_of(m, X[s * 3 * BATCH:(s + 1) * 3 * BATCH], y[s * 3 * BATCH:(s + 1) * 3 * BATCH]).backward()
        o.step()
    ref = {k: v.numpy().copy() for k, v in m.state_dict().items()}
    for r in ddpc.spawn(checkpoint_worker, args=(3, path, False), nprocs=3):
        assert_close(r["loaded"], saved[0]["params"], atol=0)
        assert_close(r["plain"], saved[0]["params"], atol=0)
        assert_close(r["params"], ref)


def load_worker(rank, world):
    """load_state_dict of full tensors, of DTensors laid out otherwise (Replicate), and the state dict functions'."""
    import ddpc.distributed as dist
    from ddpc.distributed.checkpoint.state_dict import (StateDictOptions, get_model_state_dict,
                                                        set_model_state_dict)
    from ddpc.distributed.tensor import Replicate

    dist.init_process_group("cpu")
    m = sharded(net(seed=0))
    other = net(seed=1)
    m.load_state_dict(other.state_dict())
    out = {"full": full_params(m)}
    replicated = {k: v.redistribute(placements=[Replicate()]) for k, v in sharded(net(seed=2)).state_dict().items()}
    m.load_state_dict(replicated)
    out["replicated"] = full_params(m)
    full = get_model_state_dict(m, options=StateDictOptions(full_state_dict=True))
    out["get_full"] = {k: v.numpy().copy() for k, v in full.items()}
    set_model_state_dict(m, other.state_dict())
    out["set_full"] = full_params(m)
    try:
        m.load_state_dict({**other.state_dict(), "head.weight": ddpc.zeros(3, NARROW)})
    except RuntimeError as e:
        out["mismatch"] = str(e)
    dist.destroy_process_group()
    return out


def test_load_state_dict_takes_full_tensors_and_dtensors_of_any_placement():
    one, two = ({k: v.numpy().copy() for k, v in net(seed=s).state_dict().items()} for s in (1, 2))
    for r in ddpc.spawn(load_worker, args=(3,), nprocs=3):
        assert_close(r["full"], one, atol=0)
        assert_close(r["replicated"], two, atol=0)
        assert_close(r["get_full"], two, atol=0)
        assert_close(r["set_full"], one, atol=0)
        assert "size mismatch for head.weight" in r["mismatch"]


def mixed_precision_worker(rank, world):
    import ddpc.distributed as dist
    from ddpc.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    dist.init_process_group("cpu")
    policy = MixedPrecisionPolicy(param_dtype=ddpc.bfloat16, reduce_dtype=ddpc.float32)
    m = net()
    for block in m.blocks:
        fully_shard(block, mp_policy=policy)
    fully_shard(m, mp_policy=MixedPrecisionPolicy(param_dtype=ddpc.bfloat16, output_dtype=ddpc.float32))
    o = optimizer("sgd", m.parameters())
    X, y = data(BATCH)
    block_out = []
    m.blocks[1].register_forward_hook(lambda module, args, out: block_out.append(out.dtype.name))
    out = m(ddpc.from_numpy(X))
    dtypes = {"block": block_out[0], "output": out.dtype.name,
              "unsharded": m.head.weight.dtype.name}  # the root's, kept for backward
    out.sum().backward()
    o.zero_grad()
    train_steps(m, o, rank, world, 3)
    dtypes["shards"] = sorted({p.dtype.name for p in m.parameters()})
    dtypes["grads"] = sorted({p.grad.dtype.name for p in m.parameters()})
    result = {"params": full_params(m), "dtypes": dtypes}
    dist.destroy_process_group()
    return result


def test_mixed_precision_computes_in_bfloat16_and_steps_float32_shards():
    # the root's policy casts its output to float32; its reduce_dtype (None) is the parameters' float32
    ref, _ = train_single(2, 3, "sgd")
    for r in ddpc.spawn(mixed_precision_worker, args=(2,), nprocs=2):
        assert r["dtypes"] == {"block": "bfloat16", "output": "float32", "unsharded": "bfloat16",
                               "shards": ["float32"], "grads": ["float32"]}
        assert_close(r["params"], ref, atol=5e-3)
        assert any(np.abs(r["params"][k] - ref[k]).max() > 1e-6 for k in ref)  # bfloat16 did compute


def errors_worker(rank, world):
    import ddpc.distributed as dist
    from ddpc import nn
    from ddpc.distributed.device_mesh import init_device_mesh
    from ddpc.distributed.fsdp import CPUOffloadPolicy, fully_shard

    dist.init_process_group("cpu")
    found = {}

    class Scalar(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(ddpc.ones(()))

    def ignore_what_a_block_sharded():
        m = net()
        weight = m.blocks[0][0].weight
        fully_shard(m.blocks[0])
        fully_shard(m, ignored_params={weight})

    twice = fully_shard(nn.Linear(3, 3))
    for name, make in {
        "twice": lambda: fully_shard(twice),
        "mesh_3d": lambda: fully_shard(nn.Linear(3, 3), mesh=init_device_mesh("cpu", (1, 1, 2))),
        "mesh_2d_unnamed": lambda: fully_shard(nn.Linear(3, 3), mesh=init_device_mesh("cpu", (1, 2))),
        "ignored_sharded": ignore_what_a_block_sharded,
        "ignored_tensor": lambda: fully_shard(nn.Linear(3, 3), ignored_params={ddpc.ones(3)}),
        "ignored_not_a_set": lambda: fully_shard(nn.Linear(3, 3), ignored_params=ddpc.ones(3)),
        "ignored_scalar": lambda: fully_shard(s := Scalar(), ignored_params={s.scale}),
        "not_a_module": lambda: fully_shard(ddpc.ones(3)),
        "container": lambda: fully_shard(nn.ModuleList([nn.Linear(3, 3)])),
        "list": lambda: fully_shard([nn.Linear(3, 3), nn.Linear(3, 3)]),
        "reshard_int": lambda: fully_shard(nn.Linear(3, 3), reshard_after_forward=2),
        "scalar": lambda: fully_shard(Scalar()),
        "top_down": lambda: [fully_shard(m := net()), fully_shard(m.blocks[0])],
        "shapes": lambda: fully_shard(nn.Linear(4, 4 + rank)),
        "offload": lambda: fully_shard(nn.Linear(3, 3), offload_policy=CPUOffloadPolicy()),
        "prefetch": lambda: twice.set_modules_to_forward_prefetch([nn.Linear(3, 3)]),
    }.items():
        try:
            make()
            found[name] = None
        except Exception as e:
            found[name] = (type(e).__name__, str(e))
    dist.destroy_process_group()
    return found


def test_clear_errors():
    from ddpc import nn
    from ddpc.distributed.fsdp import fully_shard

    with pytest.raises(RuntimeError, match="init_process_group"):
        fully_shard(nn.Linear(2, 2))
    for r in ddpc.spawn(errors_worker, args=(2,), nprocs=2):
        assert r["twice"][0] == "RuntimeError" and "already been applied" in r["twice"][1]
        assert r["mesh_3d"][0] == "ValueError" and "1D or 2D DeviceMesh" in r["mesh_3d"][1]
        assert r["mesh_2d_unnamed"][0] == "AssertionError" and "mesh_dim_names" in r["mesh_2d_unnamed"][1]
        assert r["ignored_sharded"] is None  # passed over: the block's call sharded it already
        assert r["ignored_tensor"][0] == "TypeError" and "hold Parameters" in r["ignored_tensor"][1]
        assert r["ignored_not_a_set"][0] == "TypeError" and "set of Parameters" in r["ignored_not_a_set"][1]
        assert r["ignored_scalar"] is None  # an ignored 0-d parameter is left as it is
        assert r["not_a_module"][0] == "TypeError" and "Module" in r["not_a_module"][1]
        assert r["container"][0] == "ValueError" and "do not implement forward" in r["container"][1]
        assert r["list"][0] == "NotImplementedError" and "list" in r["list"][1]
        assert r["reshard_int"][0] == "NotImplementedError" and "smaller world" in r["reshard_int"][1]
        assert r["scalar"][0] == "ValueError" and "0D tensor: scale" in r["scalar"][1]
        assert r["top_down"][0] == "ValueError" and "bottom-up" in r["top_down"][1]
        assert r["shapes"][0] == "RuntimeError" and "differs between ranks 0 and 1" in r["shapes"][1]
        assert r["offload"] is None  # the cpu: nothing to move
        assert r["prefetch"][0] == "ValueError" and "Expects FSDPModule" in r["prefetch"][1]


def test_deepcopy_is_refused_as_in_pytorch():
    import copy

    from ddpc.distributed.fsdp import FSDPModule

    class Sharded(FSDPModule, ddpc.nn.Linear):
        pass

    with pytest.raises(AssertionError, match="does not support deepcopy"):
        copy.deepcopy(Sharded(2, 2))
