"""FullyShardedDataParallel: equivalence with one process for every sharding
strategy, flat and nested; the full state dict; memory freed between forward
and backward; no_sync; clip_grad_norm_; the errors.

Ranks are real processes started by ddpc.spawn on the cpu backend.
"""

import functools

import numpy as np
import pytest

import ddpc
from ddpc.distributed.tensor import Shard

FEATURES, CLASSES, HIDDEN = 12, 5, 16
STRATEGIES = ["FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"]


def data(n, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, FEATURES)).astype(np.float32), rng.integers(0, CLASSES, n).astype(np.int64))


def model(seed=0):
    from ddpc import nn

    ddpc.manual_seed(seed)
    return nn.Sequential(nn.Linear(FEATURES, HIDDEN), nn.Tanh(), nn.Linear(HIDDEN, HIDDEN), nn.ReLU(),
                         nn.Linear(HIDDEN, CLASSES))


def numpy_state(sd):
    return {k: v.detach().cpu().numpy().copy() for k, v in sd.items()}


def optimizer(name, params):
    if name == "adam":
        return ddpc.optim.Adam(params, lr=0.01)
    if name == "adamw":
        return ddpc.optim.AdamW(params, lr=0.01, weight_decay=0.5)
    return ddpc.optim.SGD(params, lr=0.1, momentum=0.9)


def decay_groups(named_parameters):
    """The usual split: weight decay on the weights alone, judged by name (the
    views use_orig_params gives are 1-D, so ndim can't tell), frozen ones left out."""
    named = [(n, p) for n, p in named_parameters if p.requires_grad]
    return [{"params": [p for n, p in named if n.endswith("weight")]},
            {"params": [p for n, p in named if not n.endswith("weight")], "weight_decay": 0.0}]


def freeze(m, names):
    for n, p in m.named_parameters():
        if n in names:
            p.requires_grad_(False)
    return m


def train_single(world, batch, steps, opt="sgd", accumulate=1, clip=None, n=None, groups=False, frozen=()):
    from ddpc import nn

    X, y = data(n or world * batch * steps * accumulate)
    m = freeze(model(), frozen)
    o = optimizer(opt, decay_groups(m.named_parameters()) if groups else m.parameters())
    big = world * batch * accumulate
    norms = []
    for s in range(steps):
        o.zero_grad()
        nn.CrossEntropyLoss()(m(ddpc.from_numpy(X[s * big:(s + 1) * big])),
                              ddpc.from_numpy(y[s * big:(s + 1) * big])).backward()
        if clip is not None:
            norms.append(float(nn.utils.clip_grad_norm_(m.parameters(), clip)))
        o.step()
    return numpy_state(m.state_dict()), norms


def wrap_kwargs(options):
    from ddpc import nn
    from ddpc.distributed.fsdp import BackwardPrefetch, ShardingStrategy
    from ddpc.distributed.fsdp.wrap import ModuleWrapPolicy, size_based_auto_wrap_policy

    kw = {"sharding_strategy": getattr(ShardingStrategy, options.get("strategy", "FULL_SHARD"))}
    if "backward_prefetch" in options:
        kw["backward_prefetch"] = options["backward_prefetch"] and getattr(BackwardPrefetch,
                                                                            options["backward_prefetch"])
    for name in ("forward_prefetch", "limit_all_gathers", "use_orig_params"):
        if name in options:
            kw[name] = options[name]
    if "hybrid" in options:
        kw.update(hybrid_groups(options["hybrid"]))
    nested = options.get("nested")
    if nested == "module":
        kw["auto_wrap_policy"] = ModuleWrapPolicy({nn.Linear})
    elif nested == "size":
        kw["auto_wrap_policy"] = functools.partial(size_based_auto_wrap_policy, min_num_params=200)
    return kw


def hybrid_groups(form):
    """FSDP's arguments that make 4 ranks 2 x 2: shard over {0, 1} and {2, 3}, replicate over {0, 2} and {1, 3}."""
    import os

    import ddpc.distributed as dist
    from ddpc.distributed.device_mesh import init_device_mesh

    if form == "tuple":
        shard, _ = dist.new_subgroups_by_enumeration([[0, 1], [2, 3]])
        replicate, _ = dist.new_subgroups_by_enumeration([[0, 2], [1, 3]])
        return {"process_group": (shard, replicate)}
    if form == "mesh":
        return {"device_mesh": init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))}
    os.environ["LOCAL_WORLD_SIZE"] = "2"  # two nodes of two ranks: the groups FSDP makes itself
    return {}


def fsdp_worker(rank, world, batch, steps, options):
    import ddpc.distributed as dist

    dist.init_process_group("cpu")
    out = train_fsdp(rank, world, batch, steps, options)
    dist.destroy_process_group()
    return out


def train_fsdp(rank, world, batch, steps, options):
    from ddpc import nn
    from ddpc.distributed.fsdp import FullStateDictConfig, StateDictType
    from ddpc.distributed.fsdp import FullyShardedDataParallel as FSDP

    k = options.get("accumulate", 1)
    X, y = data(world * batch * steps * k)
    frozen = options.get("frozen", ())
    if options.get("nested") == "manual":
        from ddpc.distributed.fsdp.wrap import enable_wrap, wrap

        m = model()
        with enable_wrap(wrapper_cls=FSDP, **wrap_kwargs(options)):
            setattr(m, "0", wrap(m[0]))
            setattr(m, "4", wrap(m[4]))
        fsdp = FSDP(m, **wrap_kwargs(options))
    else:
        fsdp = FSDP(freeze(model(), frozen), **wrap_kwargs(options))
    units = len(FSDP.fsdp_modules(fsdp))
    assert FSDP.fsdp_modules(fsdp, root_only=True) == [fsdp]
    params = decay_groups(fsdp.named_parameters()) if options.get("groups") else fsdp.parameters()
    opt = optimizer(options.get("opt", "sgd"), params)
    loss_fn = nn.CrossEntropyLoss()
    big = world * batch * k
    norms = []
    for s in range(steps):
        opt.zero_grad()
        for j in range(k):
            lo = s * big + j * world * batch + rank * batch
            xb, yb = ddpc.from_numpy(X[lo:lo + batch]), ddpc.from_numpy(y[lo:lo + batch])
            if options.get("evaluate"):  # a forward with no backward between the steps changes nothing
                with ddpc.no_grad():
                    fsdp(xb)
            if j < k - 1 and not options.get("accumulate_synced"):
                with fsdp.no_sync():
                    (loss_fn(fsdp(xb), yb) / k).backward()
            else:
                (loss_fn(fsdp(xb), yb) / k).backward()
            if options.get("replace_grads"):  # gradients of their own, which the next backward adds to
                for p in fsdp.parameters():
                    p.grad = None if p.grad is None else p.grad.clone()
        if options.get("clip") is not None:
            norms.append(float(fsdp.clip_grad_norm_(options["clip"])))
        opt.step()
    shard_numel = sum(p.numel() for p in fsdp.parameters())
    raw_names = [n for n, _ in fsdp.named_parameters()]
    named = {n.replace("_fsdp_wrapped_module.", ""): p for n, p in fsdp.named_parameters()}
    with FSDP.state_dict_type(fsdp, StateDictType.FULL_STATE_DICT, FullStateDictConfig(rank0_only=False)):
        out = numpy_state(fsdp.state_dict())
    return {"params": out, "norms": norms, "units": units, "shard_numel": shard_numel,
            "names": raw_names, "numels": {n: p.numel() for n, p in named.items()},
            "frozen_grads_none": [named[n].grad is None for n in frozen], "views": orig_views(fsdp)}


def orig_views(fsdp):
    """Under use_orig_params, for each original parameter with elements on this
    rank: (whether it views its piece of the flat shard, whether its .grad views
    that piece of the shard's gradient or None where it has no gradient)."""
    from ddpc.distributed.fsdp import FullyShardedDataParallel as FSDP

    out = []
    for u in FSDP.fsdp_modules(fsdp):
        h = u._handle
        if h is None or not h.use_orig_params:
            continue
        flat, size = h.flat_param, h.flat_param.element_size()
        for p, (start, length) in zip(h.params, h.pieces):
            if length == 0:
                continue
            grad = None
            if p.grad is not None:
                grad = p.grad.data_ptr() == flat.grad.data_ptr() + start * size and p.grad.shape == (length,)
            out.append((p.data_ptr() == flat.data_ptr() + start * size and p.shape == (length,), grad))
    return out


def assert_params_close(a, b, atol=1e-5):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], atol=atol, rtol=0, err_msg=k)


TOTAL = sum(p.numel() for p in model().parameters())


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("nested", [None, "module"])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_fsdp_equals_one_process_on_the_combined_batch(strategy, nested, world):
    ref, _ = train_single(world, batch=4, steps=3)
    results = ddpc.spawn(fsdp_worker, args=(world, 4, 3, {"strategy": strategy, "nested": nested}), nprocs=world)
    for r in results:
        assert_params_close(r["params"], ref)
        assert r["units"] == (1 if nested is None else 4)
        if strategy == "NO_SHARD":
            assert r["shard_numel"] == TOTAL
        else:  # each rank keeps only its padded 1/world of every unit
            assert r["shard_numel"] < TOTAL / world + len(results) * r["units"]


def checkpointed_worker(rank, world, strategy):
    import ddpc.distributed as dist
    from ddpc import nn
    from ddpc.distributed.algorithms._checkpoint.checkpoint_wrapper import (CheckpointWrapper,
                                                                            apply_activation_checkpointing)
    from ddpc.distributed.fsdp import FullyShardedDataParallel as FSDP
    from ddpc.distributed.fsdp import ShardingStrategy
    from ddpc.distributed.fsdp.wrap import ModuleWrapPolicy

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln, self.fc1 = nn.LayerNorm(FEATURES), nn.Linear(FEATURES, HIDDEN)
            self.fc2 = nn.Linear(HIDDEN, FEATURES)

        def forward(self, x):
            return x + self.fc2(nn.functional.gelu(self.fc1(self.ln(x))))

    dist.init_process_group("cpu")
    X, _ = data(world * 4)
    x = ddpc.from_numpy(X[rank * 4:rank * 4 + 4])
    grads, wrapped = [], 0
    for recompute in (False, True):
        ddpc.manual_seed(0)
        fsdp = FSDP(nn.Sequential(nn.Linear(FEATURES, FEATURES), Block(), Block()),
                    auto_wrap_policy=ModuleWrapPolicy({Block}), sharding_strategy=getattr(ShardingStrategy, strategy))
        if recompute:  # inside the units, as FSDP training scripts apply it
            apply_activation_checkpointing(fsdp, check_fn=lambda m: isinstance(m, Block))
            wrapped = sum(isinstance(m, CheckpointWrapper) for m in fsdp.modules())
        for _ in range(2):
            fsdp(x).sum().backward()
        grads.append([p.grad.numpy().copy() for p in fsdp.parameters()])
    dist.destroy_process_group()
    return grads, wrapped


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_activation_checkpointing_inside_units_leaves_the_gradients_unchanged(strategy):
    # FULL_SHARD frees a unit's parameters after forward: they must be back before backward recomputes from them
    for (plain, recomputed), wrapped in ddpc.spawn(checkpointed_worker, args=(2, strategy), nprocs=2):
        assert wrapped == 2 and len(plain) == len(recomputed) == 3
        for a, b in zip(plain, recomputed):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_fsdp_with_adam_and_size_based_wrapping(strategy):
    ref, _ = train_single(2, batch=4, steps=3, opt="adam")
    results = ddpc.spawn(fsdp_worker, args=(2, 4, 3, {"strategy": strategy, "nested": "size", "opt": "adam"}),
                         nprocs=2)
    for r in results:
        assert_params_close(r["params"], ref)
        assert r["units"] == 3  # the two larger Linears and the root


@pytest.mark.parametrize("strategy", ["FULL_SHARD", "NO_SHARD"])
def test_no_sync_accumulation_equals_one_step_on_the_concatenation(strategy):
    ref, _ = train_single(2, batch=4, steps=2, accumulate=3)
    results = ddpc.spawn(fsdp_worker, args=(2, 4, 2, {"strategy": strategy, "nested": "module", "accumulate": 3}),
                         nprocs=2)
    for r in results:
        assert_params_close(r["params"], ref)


def test_accumulating_synced_backward_passes_sums_the_shard_gradients():
    ref, _ = train_single(2, batch=4, steps=2, accumulate=2)
    options = {"nested": "module", "accumulate": 2, "accumulate_synced": True, "evaluate": True}
    for r in ddpc.spawn(fsdp_worker, args=(2, 4, 2, options), nprocs=2):
        assert_params_close(r["params"], ref)


@pytest.mark.parametrize("strategy", ["FULL_SHARD", "SHARD_GRAD_OP"])
def test_units_made_with_enable_wrap_and_wrap(strategy):
    ref, _ = train_single(3, batch=4, steps=3)
    for r in ddpc.spawn(fsdp_worker, args=(3, 4, 3, {"strategy": strategy, "nested": "manual"}), nprocs=3):
        assert_params_close(r["params"], ref)
        assert r["units"] == 3


@pytest.mark.parametrize("world", [2, 3])
def test_clip_grad_norm_matches_one_process(world):
    ref, ref_norms = train_single(world, batch=4, steps=3, clip=0.05)
    results = ddpc.spawn(fsdp_worker, args=(world, 4, 3, {"nested": "module", "clip": 0.05}), nprocs=world)
    for r in results:
        assert_params_close(r["params"], ref)
        np.testing.assert_allclose(r["norms"], ref_norms, rtol=1e-5)
        assert min(r["norms"]) > 0.05  # the clip did act


ORIG = {"use_orig_params": True, "groups": True, "opt": "adamw"}


def full_numels():
    return {n: p.numel() for n, p in model().named_parameters()}


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("strategy", ["FULL_SHARD", "SHARD_GRAD_OP"])
def test_use_orig_params_gives_the_original_parameters_for_per_parameter_groups(strategy, world):
    ref, _ = train_single(world, batch=4, steps=3, opt="adamw", groups=True)
    results = ddpc.spawn(fsdp_worker, args=(world, 4, 3, {**ORIG, "strategy": strategy}), nprocs=world)
    numels = full_numels()
    for r in results:
        assert_params_close(r["params"], ref)
        # the originals under PyTorch's names: the wrapper's prefix kept, no _flat_param
        assert r["names"] == ["_fsdp_wrapped_module." + n for n in numels]
        assert r["views"] and all(v == (True, True) for v in r["views"])
    pieces = {n: [r["numels"][n] for r in results] for n in numels}
    assert all(sum(pieces[n]) == numels[n] for n in numels)  # each element on exactly one rank
    assert any(sorted(pieces[n])[-2] == 0 for n in numels)  # a parameter wholly on one rank (size 0 on the rest)
    assert any(sorted(pieces[n])[-2] > 0 for n in numels)  # a parameter split across ranks


@pytest.mark.parametrize("world, nested", [(3, None), (2, "module")])
def test_use_orig_params_with_frozen_parameters_in_a_unit(world, nested):
    frozen = ("0.bias", "2.weight")
    ref, _ = train_single(world, batch=4, steps=3, opt="adamw", groups=True, frozen=frozen)
    initial = numpy_state(model().state_dict())
    options = {**ORIG, "nested": nested, "frozen": frozen}
    results = ddpc.spawn(fsdp_worker, args=(world, 4, 3, options), nprocs=world)
    for r in results:
        assert_params_close(r["params"], ref)
        assert r["frozen_grads_none"] == [True, True]
        for n in frozen:
            np.testing.assert_array_equal(r["params"][n], initial[n])
    views = [v for r in results for v in r["views"]]  # the frozen pieces have no gradient, the others a view
    assert sorted(set(views), key=str) == [(True, None), (True, True)]


def test_use_orig_params_clip_grad_norm_matches_one_process():
    ref, ref_norms = train_single(3, batch=4, steps=3, opt="adamw", groups=True, clip=0.05)
    for r in ddpc.spawn(fsdp_worker, args=(3, 4, 3, {**ORIG, "clip": 0.05}), nprocs=3):
        assert_params_close(r["params"], ref)
        np.testing.assert_allclose(r["norms"], ref_norms, rtol=1e-5)
        assert min(r["norms"]) > 0.05


@pytest.mark.parametrize("replace_grads", [False, True])
def test_use_orig_params_synced_accumulation_adds_to_the_originals_gradients(replace_grads):
    ref, _ = train_single(3, batch=4, steps=2, accumulate=2, opt="adamw", groups=True)
    options = {**ORIG, "accumulate": 2, "accumulate_synced": True, "replace_grads": replace_grads}
    for r in ddpc.spawn(fsdp_worker, args=(3, 4, 2, options), nprocs=3):
        assert_params_close(r["params"], ref)
        assert all(grad is not replace_grads for _, grad in r["views"])  # views of the shard's gradient or not


@pytest.mark.parametrize("strategy", ["FULL_SHARD", "NO_SHARD"])
def test_use_orig_params_no_sync_accumulation(strategy):
    ref, _ = train_single(2, batch=4, steps=2, accumulate=3, opt="adamw", groups=True)
    options = {**ORIG, "strategy": strategy, "nested": "module", "accumulate": 3}
    for r in ddpc.spawn(fsdp_worker, args=(2, 4, 2, options), nprocs=2):
        assert_params_close(r["params"], ref)


PREFETCH = {"off": {"forward_prefetch": False, "backward_prefetch": None},
            "pre": {"forward_prefetch": True, "backward_prefetch": "BACKWARD_PRE"},
            "post": {"forward_prefetch": True, "backward_prefetch": "BACKWARD_POST", "limit_all_gathers": False}}


def prefetch_worker(rank, world, options):
    import ddpc.distributed as dist

    dist.init_process_group("cpu")
    out = {name: train_fsdp(rank, world, 4, 3, {**options, **kw})["params"] for name, kw in PREFETCH.items()}
    dist.destroy_process_group()
    return out


@pytest.mark.parametrize("world", [2, 3])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_prefetching_changes_no_result(strategy, world):
    ref, _ = train_single(world, batch=4, steps=3, opt="adam")
    options = {"strategy": strategy, "nested": "module", "opt": "adam"}
    for r in ddpc.spawn(prefetch_worker, args=(world, options), nprocs=world):
        for name in ("pre", "post"):
            assert_params_close(r[name], r["off"], atol=1e-6)
        assert_params_close(r["off"], ref)


@pytest.mark.parametrize("strategy", ["FULL_SHARD", "SHARD_GRAD_OP"])
def test_use_orig_params_with_prefetching(strategy):
    ref, _ = train_single(2, batch=4, steps=3, opt="adamw", groups=True)
    for r in ddpc.spawn(prefetch_worker, args=(2, {**ORIG, "strategy": strategy, "nested": "module"}), nprocs=2):
        for name in PREFETCH:
            assert_params_close(r[name], ref)


def order_worker(rank, world, options):
    """The collectives and the Linear layers' forward and backward of the
    second step, in the order they began: ("AG"|"RS"|"F"|"B", unit index)."""
    import ddpc.distributed as dist
    from ddpc import nn
    from ddpc.distributed.fsdp import FullyShardedDataParallel as FSDP

    dist.init_process_group("cpu")
    fsdp = FSDP(model(), **wrap_kwargs({"nested": "module", **options}))
    units = [u for u in fsdp.modules() if isinstance(u, FSDP) and u._handle is not None]  # Linears 0, 2, 4
    gathers = {u._handle.padded * 4: i for i, u in enumerate(units)}
    scatters = {u._handle.shard_numel * 4: i for i, u in enumerate(units)}
    assert len(gathers) == len(scatters) == len(units)  # the units tell apart by their sizes
    X, y = data(8, seed=rank)

    def step():
        nn.CrossEntropyLoss()(fsdp(ddpc.from_numpy(X)), ddpc.from_numpy(y)).backward()

    step()
    with ddpc.profiler.profile() as prof:
        step()
    events = sorted(prof.events(), key=lambda e: e.id)
    seen, forward, backward = [], 0, len(units)
    for e in events:
        if e.name == "c10d::_allgather_base_":
            seen.append(("AG", gathers[e.metadata["bytes"]]))
        elif e.name == "c10d::_reduce_scatter_base_":
            seen.append(("RS", scatters[e.metadata["bytes"]]))
        elif e.name == "nn.Module: Linear":
            seen.append(("F", forward))
            forward += 1
        elif e.name == "LinearBackward":
            backward -= 1
            seen.append(("B", backward))
    waits = sum(e.name == "ddpc.distributed.Work.wait" for e in events)
    dist.destroy_process_group()
    return {"seen": seen, "waits": waits}


@pytest.mark.parametrize("prefetch", ["off", "pre", "post"])
def test_prefetch_issues_the_next_units_all_gather_before_the_current_units_compute(prefetch):
    options = PREFETCH[prefetch]
    results = ddpc.spawn(order_worker, args=(2, options), nprocs=2)
    assert results[0]["seen"] == results[1]["seen"]  # every rank issues the same collectives in the same order
    seen = results[0]["seen"]
    at = {}  # where each event happens first
    for i, event in enumerate(seen):
        at.setdefault(event, i)
    backward_gather = {i: max(j for j, ev in enumerate(seen) if ev == ("AG", i)) for i in range(3)}
    assert len(seen) == 3 * 5  # every unit: gathered twice, scattered once
    assert all(at[("AG", i)] < at[("F", 2)] < backward_gather[i] for i in range(3))
    for k in (0, 1):
        # forward: unit k+1's all-gather is issued before (prefetch) or after unit k computes
        assert (at[("AG", k + 1)] < at[("F", k)]) == options["forward_prefetch"]
    for k in (2, 1):
        if options["backward_prefetch"] == "BACKWARD_PRE":  # before unit k's gradient is computed
            assert backward_gather[k - 1] < at[("B", k)]
        elif options["backward_prefetch"] == "BACKWARD_POST":  # after it, before its reduce-scatter
            assert at[("B", k)] < backward_gather[k - 1] < at[("RS", k)]
        else:
            assert at[("B", k)] < backward_gather[k - 1]
    assert (results[0]["waits"] > 0) == (prefetch != "off")


def hybrid_worker(rank, world, strategy):
    import ddpc.distributed as dist
    from ddpc.distributed.fsdp import FullyShardedDataParallel as FSDP

    dist.init_process_group("cpu")
    out = {}
    for form in ("tuple", "mesh", "node"):
        options = {"strategy": strategy, "nested": "module", "opt": "adam", "hybrid": form}
        out[form] = train_fsdp(rank, world, 4, 3, options)
        fsdp = FSDP(model(), **wrap_kwargs(options))
        out[form]["groups"] = [dist.get_process_group_ranks(fsdp.process_group),
                               dist.get_process_group_ranks(fsdp._inter_node_pg)]
        out[form]["shard"] = fsdp.module[0]._flat_param.detach().numpy().copy()
    dist.destroy_process_group()
    return out


@pytest.mark.parametrize("strategy", ["HYBRID_SHARD", "_HYBRID_SHARD_ZERO2"])
def test_hybrid_sharding_equals_one_process_on_the_combined_batch(strategy):
    ref, _ = train_single(4, batch=4, steps=3, opt="adam")
    results = ddpc.spawn(hybrid_worker, args=(4, strategy), nprocs=4)
    for rank, r in enumerate(results):
        for form in ("tuple", "mesh", "node"):
            assert_params_close(r[form]["params"], ref)
            assert r[form]["groups"] == [[0, 1] if rank < 2 else [2, 3], [rank % 2, rank % 2 + 2]]
            assert r[form]["shard_numel"] < TOTAL / 2 + 2 * r[form]["units"]  # half the model on each rank
            # the ranks at the same place of the two shard groups hold the same shard
            np.testing.assert_array_equal(r[form]["shard"], results[rank ^ 2][form]["shard"])
            assert not np.array_equal(r[form]["shard"], results[rank ^ 1][form]["shard"])


def state_dict_worker(rank, world, strategy, use_orig_params):
    import ddpc.distributed as dist
    from ddpc.distributed.fsdp import FullStateDictConfig, LocalStateDictConfig, StateDictType
    from ddpc.distributed.fsdp import FullyShardedDataParallel as FSDP

    dist.init_process_group("cpu")
    fsdp = FSDP(model(seed=0), **wrap_kwargs({"strategy": strategy, "nested": "module",
                                              "use_orig_params": use_orig_params}))
    out = {"initial": numpy_state(fsdp.state_dict())}  # FULL_STATE_DICT is the default
    other = model(seed=1)
    fsdp.load_state_dict(other.state_dict())
    out["loaded"] = numpy_state(fsdp.state_dict())
    out["pieces"] = {n.replace("_fsdp_wrapped_module.", ""): p.detach().numpy().copy()
                     for n, p in fsdp.named_parameters()}
    x = ddpc.from_numpy(data(6)[0])
    out["output"] = fsdp(x).detach().numpy().copy()
    out["expected_output"] = other(x).detach().numpy().copy()
    with FSDP.state_dict_type(fsdp, StateDictType.FULL_STATE_DICT, FullStateDictConfig(rank0_only=True)):
        out["rank0_only_keys"] = sorted(fsdp.state_dict())
    with FSDP.state_dict_type(fsdp, StateDictType.LOCAL_STATE_DICT, LocalStateDictConfig()):
        local = fsdp.state_dict()
        out["local_keys"] = sorted(local)
        fsdp.load_state_dict(local)
    with FSDP.summon_full_params(fsdp):
        out["summoned"] = {n: p.detach().numpy().copy() for n, p in fsdp.named_parameters()}
        with ddpc.no_grad():
            fsdp.module[0].weight.fill_(0.5)
    out["after_writeback"] = numpy_state(fsdp.state_dict())["0.weight"]
    plain = model(seed=2)
    plain.load_state_dict(fsdp.state_dict())  # a full state dict loads into the unwrapped model
    out["plain"] = numpy_state(plain.state_dict())
    dist.destroy_process_group()
    return out


@pytest.mark.parametrize("use_orig_params", [False, True])
@pytest.mark.parametrize("strategy", STRATEGIES)
def test_full_state_dict_has_the_unwrapped_names_and_loads_back(strategy, use_orig_params):
    initial, other = numpy_state(model(seed=0).state_dict()), numpy_state(model(seed=1).state_dict())
    results = ddpc.spawn(state_dict_worker, args=(3, strategy, use_orig_params), nprocs=3)
    if use_orig_params:  # each rank's originals hold the parts of the parameters in its shard, in rank order
        for n, v in other.items():
            pieces = [r["pieces"][n] for r in results]
            np.testing.assert_array_equal(np.concatenate(pieces) if strategy != "NO_SHARD" else pieces[0], v.ravel())
    for rank, r in enumerate(results):
        assert list(r["initial"]) == list(initial)  # same names, same order
        assert_params_close(r["initial"], initial, atol=0)
        assert_params_close(r["loaded"], other, atol=0)
        np.testing.assert_allclose(r["output"], r["expected_output"], atol=1e-6)
        assert r["rank0_only_keys"] == (sorted(initial) if rank == 0 else [])
        # the root holds no parameters of its own: every Linear is a unit; under use_orig_params the
        # local state is each original's piece
        assert r["local_keys"] == ([f"_fsdp_wrapped_module.{i}._fsdp_wrapped_module.{w}" for i in (0, 2, 4)
                                    for w in ("bias", "weight")] if use_orig_params else
                                   [f"_fsdp_wrapped_module.{i}._flat_param" for i in (0, 2, 4)])
        # inside summon_full_params the parameters are the original ones, full
        assert sorted(k.replace("_fsdp_wrapped_module.", "") for k in r["summoned"]) == sorted(initial)
        np.testing.assert_array_equal(r["after_writeback"], np.full((HIDDEN, FEATURES), 0.5, np.float32))
        assert r["plain"]["0.weight"][0, 0] == 0.5
        assert_params_close({k: v for k, v in r["plain"].items() if k != "0.weight"},
                            {k: v for k, v in other.items() if k != "0.weight"}, atol=0)


CKPT_BATCH, CKPT_STEPS = 12, 4  # the combined batch of every rank and the steps, half before the checkpoint
FULL_SD = {"full_state_dict": True}
RANK0_SD = {"full_state_dict": True, "cpu_offload": True, "broadcast_from_rank0": True}
SHARDED_SD = {}  # the default: FSDP's sharded state dicts


def checkpoint_worker(rank, world, path, options, save, use_orig_params):
    """Trains the first (save) or the last (not save) half of the steps,
    saving or loading a checkpoint through the state_dict functions."""
    import ddpc.distributed as dist
    import ddpc.distributed.checkpoint as dcp
    from ddpc import nn
    from ddpc.distributed.checkpoint.state_dict import StateDictOptions, get_state_dict, set_state_dict
    from ddpc.distributed.fsdp import FullyShardedDataParallel as FSDP
    from ddpc.distributed.tensor import DTensor

    dist.init_process_group("cpu")
    X, y = data(CKPT_BATCH * CKPT_STEPS)
    fsdp = FSDP(model(seed=0 if save else 5), **wrap_kwargs({"nested": "module", "use_orig_params": use_orig_params}))
    opt = optimizer("adam", fsdp.parameters())
    batch = CKPT_BATCH // world
    state_options = StateDictOptions(**options)
    out = {}
    if not save:  # a template of the state to load into, filled by dcp.load, then loaded into the shards
        model_sd, optim_sd = get_state_dict(fsdp, opt, options=state_options)
        state = {"model": model_sd, "optim": optim_sd}
        dcp.load(state, checkpoint_id=path)
        set_state_dict(fsdp, opt, model_state_dict=state["model"], optim_state_dict=state["optim"],
                       options=state_options)
    for s in range(CKPT_STEPS // 2) if save else range(CKPT_STEPS // 2, CKPT_STEPS):
        lo = s * CKPT_BATCH + rank * batch
        opt.zero_grad()
        nn.CrossEntropyLoss()(fsdp(ddpc.from_numpy(X[lo:lo + batch])), ddpc.from_numpy(y[lo:lo + batch])).backward()
        opt.step()
    model_sd, optim_sd = get_state_dict(fsdp, opt, options=state_options)
    if save:
        dcp.save({"model": model_sd, "optim": optim_sd}, checkpoint_id=path)
    out["kinds"] = sorted({type(v).__name__ for v in model_sd.values()})
    out["model"] = numpy_state({k: v.full_tensor() if isinstance(v, DTensor) else v for k, v in model_sd.items()})
    out["optim_names"] = optim_sd.get("param_groups", [{}])[0].get("params")
    out["optim_shapes"] = {n: {k: (type(v).__name__, tuple(v.shape)) for k, v in st.items()
                               if isinstance(v, (ddpc.Tensor, DTensor)) and k != "step"}
                           for n, st in optim_sd.get("state", {}).items()}
    dist.destroy_process_group()
    return out


@pytest.mark.parametrize("save_options, load_world, load_options, use_orig_params", [
    (FULL_SD, 2, FULL_SD, False), (FULL_SD, 3, RANK0_SD, False), (FULL_SD, 3, FULL_SD, True),
    (SHARDED_SD, 3, SHARDED_SD, False), (SHARDED_SD, 1, SHARDED_SD, True), (SHARDED_SD, 3, FULL_SD, False)],
    ids=["2-ranks", "3-ranks-rank0", "3-ranks-orig-params", "sharded-3-ranks", "sharded-1-rank-orig-params",
         "sharded-into-full"])
def test_state_dict_functions_save_and_load_fsdp_checkpoints_across_world_sizes(tmp_path, save_options, load_world,
                                                                                 load_options, use_orig_params):
    half, _ = train_single(CKPT_BATCH, 1, CKPT_STEPS // 2, opt="adam", n=CKPT_BATCH * CKPT_STEPS)
    ref, _ = train_single(CKPT_BATCH, 1, CKPT_STEPS, opt="adam", n=CKPT_BATCH * CKPT_STEPS)
    shapes = {k: v.shape for k, v in ref.items()}
    path = str(tmp_path / "ckpt")
    # full tensors with full_state_dict; by default (sharded) DTensors of each rank's rows, the optimizer's too
    kind = "Tensor" if save_options.get("full_state_dict") else "DTensor"
    for r in ddpc.spawn(checkpoint_worker, args=(2, path, save_options, True, use_orig_params), nprocs=2):
        assert list(r["model"]) == list(ref)  # the unwrapped model's names
        assert r["kinds"] == [kind]
        assert_params_close(r["model"], half)
        assert r["optim_names"] == list(ref)
        assert r["optim_shapes"] == {n: {"exp_avg": (kind, shapes[n]), "exp_avg_sq": (kind, shapes[n])} for n in ref}
    results = ddpc.spawn(checkpoint_worker, args=(load_world, path, load_options, False, use_orig_params),
                         nprocs=load_world)
    for rank, r in enumerate(results):
        if load_options.get("cpu_offload") and rank > 0:
            assert r["model"] == {} and r["optim_names"] is None  # rank 0's alone
            continue
        assert_params_close(r["model"], ref)  # training went on as if never interrupted


def sharded_state_dict_worker(rank, world, options):
    import warnings

    import ddpc.distributed as dist
    from ddpc.distributed.fsdp import FullyShardedDataParallel as FSDP
    from ddpc.distributed.fsdp import ShardedStateDictConfig, StateDictType
    from ddpc.distributed.tensor import DTensor, Replicate

    dist.init_process_group("cpu")
    fsdp = FSDP(model(seed=0), **wrap_kwargs(options))
    gathers, all_gather = [], dist.all_gather_into_tensor
    dist.all_gather_into_tensor = lambda *a, **k: gathers.append(a) or all_gather(*a, **k)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with FSDP.state_dict_type(fsdp, StateDictType.SHARDED_STATE_DICT, ShardedStateDictConfig(offload_to_cpu=True)):
            sd = fsdp.state_dict()
    dist.all_gather_into_tensor = all_gather
    out = {"gathers": len(gathers), "warnings": [str(w.message) for w in caught], "keys": list(sd),
           "full": numpy_state(fsdp.state_dict()),
           "values": {k: (type(v).__name__, tuple(v.shape), getattr(v, "placements", None),
                          (v.to_local() if isinstance(v, DTensor) else v).numpy().copy()) for k, v in sd.items()}}
    # loaded into a model of other values: as given, and replicated (load redistributes them to its rows)
    replicated = {k: v.redistribute(placements=[Replicate()]) if isinstance(v, DTensor) else v for k, v in sd.items()}
    for name, values in (("loaded", sd), ("loaded_replicated", replicated)):
        other = FSDP(model(seed=1), **wrap_kwargs(options))
        with FSDP.state_dict_type(other, StateDictType.SHARDED_STATE_DICT):
            other.load_state_dict(values)
        out[name] = numpy_state(other.state_dict())
    errors = {}
    for name, values in (("plain", model(seed=2).state_dict()),
                         ("shape", {**sd, "0.bias": sd["4.bias"]})):
        try:
            with FSDP.state_dict_type(other, StateDictType.SHARDED_STATE_DICT):
                other.load_state_dict(values)
            errors[name] = None
        except RuntimeError as e:
            errors[name] = str(e)
    out["errors"] = errors
    out["unchanged"] = numpy_state(other.state_dict())  # a refused state dict changed nothing
    dist.destroy_process_group()
    return out


@pytest.mark.parametrize("world, options", [
    (3, {"nested": "module"}), (2, {"strategy": "SHARD_GRAD_OP", "use_orig_params": True}),
    (3, {"nested": "module", "use_orig_params": True}), (4, {"strategy": "HYBRID_SHARD", "hybrid": "mesh"}),
    (2, {"strategy": "NO_SHARD", "nested": "module"})], ids=["full-shard", "orig-params", "nested-orig-params",
                                                             "hybrid", "no-shard"])
def test_sharded_state_dict_holds_each_ranks_rows_and_loads_back(world, options):
    full = numpy_state(model(seed=0).state_dict())
    shard_world = 2 if "hybrid" in options else world  # HYBRID_SHARD shards over pairs of ranks
    for rank, r in enumerate(ddpc.spawn(sharded_state_dict_worker, args=(world, options), nprocs=world)):
        assert r["keys"] == list(full)  # the unwrapped names, in the full state dict's order
        assert_params_close(r["full"], full, atol=0)
        for k, (kind, shape, placements, local) in r["values"].items():
            if options.get("strategy") == "NO_SHARD":  # as PyTorch's: a full state dict, with a warning
                assert kind == "Tensor" and any("NO_SHARD" in w for w in r["warnings"])
                np.testing.assert_array_equal(local, full[k])
                continue
            rows = -(-full[k].shape[0] // shard_world)  # torch.chunk's: the last rank holds fewer
            assert (kind, shape, placements) == ("DTensor", full[k].shape, (Shard(0),)), k
            np.testing.assert_array_equal(local, full[k][rank % shard_world * rows:][:rows], err_msg=k)
        if options.get("strategy") != "NO_SHARD":
            assert r["gathers"] == 0 and r["warnings"] == []  # the rows come by all-to-all, never gathered whole
            assert "expected a DTensor but got Tensor" in r["errors"]["plain"]
            assert "size mismatch for 0.bias" in r["errors"]["shape"]
            assert_params_close(r["unchanged"], full, atol=0)
        assert_params_close(r["loaded"], full, atol=0)
        assert_params_close(r["loaded_replicated"], full, atol=0)


def sharded_checkpoint_worker(rank, world, path, save, options):
    """Saves (save) or loads the SHARDED_STATE_DICT of an FSDP model with dcp; returns its full state."""
    import ddpc.distributed as dist
    import ddpc.distributed.checkpoint as dcp
    from ddpc import nn
    from ddpc.distributed.fsdp import FullyShardedDataParallel as FSDP
    from ddpc.distributed.fsdp import StateDictType

    dist.init_process_group("cpu")
    fsdp = FSDP(model(seed=0 if save else 3), **wrap_kwargs(options))
    if save:  # one step, so the shards hold values no seed gives
        X, y = data(2 * world)
        opt = optimizer("sgd", fsdp.parameters())
        nn.CrossEntropyLoss()(fsdp(ddpc.from_numpy(X[2 * rank:2 * rank + 2])),
                              ddpc.from_numpy(y[2 * rank:2 * rank + 2])).backward()
        opt.step()
    with FSDP.state_dict_type(fsdp, StateDictType.SHARDED_STATE_DICT):
        state = {"model": fsdp.state_dict()}
        if save:
            dcp.save(state, checkpoint_id=path)
        else:
            dcp.load(state, checkpoint_id=path)
            fsdp.load_state_dict(state["model"])
    out = numpy_state(fsdp.state_dict())
    dist.destroy_process_group()
    return out


@pytest.mark.parametrize("save_world, save_options, load_worlds", [
    (2, {"nested": "module"}, [1, 3]), (3, {"nested": "module"}, [2]),
    (4, {"nested": "module", "strategy": "HYBRID_SHARD", "hybrid": "mesh"}, [2])], ids=["2", "3", "4-hybrid"])
def test_sharded_state_dict_checkpoints_load_on_other_world_sizes(tmp_path, save_world, save_options, load_worlds):
    import os

    import ddpc.distributed.checkpoint as dcp

    path = str(tmp_path / "ckpt")
    saved = ddpc.spawn(sharded_checkpoint_worker, args=(save_world, path, True, save_options), nprocs=save_world)[0]
    # each rank wrote its own rows of each parameter, none a whole one; rows that two ranks hold (the
    # replicas of HYBRID_SHARD) were written once
    sizes = [os.path.getsize(os.path.join(path, f"__{r}_0.distcp")) for r in range(save_world)]
    total = sum(v.nbytes for v in saved.values())
    assert total <= sum(sizes) <= total + 64 * len(saved) * save_world and max(sizes) < 0.7 * total, sizes
    for world in load_worlds:
        for r in ddpc.spawn(sharded_checkpoint_worker, args=(world, path, False, {"nested": "module"}),
                            nprocs=world):
            assert_params_close(r, saved, atol=0)
    plain = {"model": model(seed=4).state_dict()}  # the full values, in one process without a group
    dcp.load(plain, checkpoint_id=path)
    assert_params_close(numpy_state(plain["model"]), saved, atol=0)


def memory_worker(rank, world, strategy, prefetch="pre"):
    import ddpc.distributed as dist
    from ddpc import nn
    from ddpc.distributed.fsdp import FullyShardedDataParallel as FSDP

    dist.init_process_group("cpu")
    ddpc.manual_seed(0)
    body = nn.Sequential(*[nn.Sequential(nn.Linear(64, 64), nn.Tanh()) for _ in range(4)], nn.Linear(64, 1))
    fsdp = FSDP(body, **wrap_kwargs({"strategy": strategy, "nested": "module", **PREFETCH[prefetch]}))
    inner = [m for m in fsdp.modules() if isinstance(m, FSDP) and m is not fsdp]

    def held():
        return sum(u._handle.held_bytes() for u in inner)

    x = ddpc.from_numpy(np.random.default_rng(rank).standard_normal((8, 64)).astype(np.float32))
    fsdp(x).pow(2).mean().backward()  # the first step records the order the prefetches follow
    out = {"before": held()}
    loss = fsdp(x).pow(2).mean()
    out["between"] = held()
    out["full_bytes"] = sum(u._handle.padded * 4 for u in inner)
    loss.backward()
    out["after"] = held()
    out["grads"] = all(p.grad is not None for p in fsdp.parameters())
    dist.destroy_process_group()
    return out


@pytest.mark.parametrize("prefetch", ["off", "pre", "post"])
@pytest.mark.parametrize("strategy", ["FULL_SHARD", "SHARD_GRAD_OP"])
def test_full_parameters_are_freed_between_forward_and_backward_under_full_shard(strategy, prefetch):
    for r in ddpc.spawn(memory_worker, args=(2, strategy, prefetch), nprocs=2):
        assert r["before"] == 0 and r["after"] == 0
        assert r["full_bytes"] >= 4 * 64 * 65 * 4
        # FULL_SHARD frees the gathered parameters of every inner unit after its
        # forward; SHARD_GRAD_OP keeps them all until backward
        assert r["between"] == (0 if strategy == "FULL_SHARD" else r["full_bytes"])
        assert r["grads"]


def limit_worker(rank, world, limit):
    import ddpc.distributed as dist
    from ddpc import nn
    from ddpc.distributed.fsdp import FullyShardedDataParallel as FSDP

    dist.init_process_group("cpu")
    fsdp = FSDP(model(), limit_all_gathers=limit, **wrap_kwargs({"nested": "module"}))
    fsdp(ddpc.from_numpy(data(4)[0])).sum().backward()
    units = [u for u in fsdp.modules() if isinstance(u, FSDP) and u._handle is not None]
    in_flight = []
    for u in units:  # three prefetches in a row, none of them used yet
        fsdp._prefetch(u)
        in_flight.append(sum(v._handle.pending is not None for v in units))
    gathered = all(u._handle.gathered for u in units)
    for u in units:
        u._handle.wait()
    full = [u._handle.full.detach().numpy()[:u._handle.numel].copy() for u in units]
    for u in units:
        u._handle.reshard()
    left = sum(u._handle.held_bytes() for u in units)
    with FSDP.summon_full_params(fsdp):
        params = [p.detach().numpy().ravel().copy() for p in fsdp.parameters()]  # weight, bias of each Linear
    dist.destroy_process_group()
    return {"in_flight": in_flight, "gathered": gathered, "left": left, "full": full,
            "expected": [np.concatenate(params[i:i + 2]) for i in (0, 2, 4)]}


@pytest.mark.parametrize("limit", [True, False])
def test_limit_all_gathers_keeps_two_in_flight(limit):
    for r in ddpc.spawn(limit_worker, args=(2, limit), nprocs=2):
        assert r["in_flight"] == ([1, 2, 2] if limit else [1, 2, 3])
        assert r["gathered"] and r["left"] == 0
        for got, want in zip(r["full"], r["expected"]):
            np.testing.assert_array_equal(got, want)


def test_released_storage_keeps_its_views_and_refuses_exports():
    t = ddpc.arange(100, dtype=ddpc.float32)
    v = t[10:20].view(2, 5)
    assert t._buf.storage_nbytes == 400
    t._buf.release_storage_()
    assert t._buf.storage_released and v._buf.storage_released and v._buf.storage_nbytes == 0
    with pytest.raises(RuntimeError, match="released"):
        memoryview(v._buf)
    with pytest.raises(RuntimeError, match="released"):
        v.numpy()
    t._buf.restore_storage_()
    t.copy_(ddpc.arange(100, dtype=ddpc.float32) * 2)
    np.testing.assert_array_equal(v.numpy(), np.arange(10, 20, dtype=np.float32).reshape(2, 5) * 2)
    a = t.numpy()
    with pytest.raises(BufferError, match="numpy"):
        t._buf.release_storage_()
    del a
    with pytest.raises(ValueError, match="allocated itself"):
        ddpc.from_numpy(np.zeros(3, np.float32))._buf.release_storage_()


def errors_worker(rank, world):
    import ddpc.distributed as dist
    from ddpc import nn
    from ddpc.distributed.fsdp import FullyShardedDataParallel as FSDP
    from ddpc.distributed.device_mesh import init_device_mesh
    from ddpc.distributed.fsdp import ShardingStrategy, StateDictType

    dist.init_process_group("cpu")
    mesh = init_device_mesh("cpu", (2,))
    found = {}
    for name, make in {
        "hybrid_group": lambda: FSDP(model(), sharding_strategy=ShardingStrategy.HYBRID_SHARD,
                                     process_group=dist.group.WORLD),
        "hybrid_mesh": lambda: FSDP(model(), sharding_strategy=ShardingStrategy.HYBRID_SHARD, device_mesh=mesh),
        "group_and_mesh": lambda: FSDP(model(), process_group=dist.group.WORLD, device_mesh=mesh),
        "tuple": lambda: FSDP(model(), process_group=(dist.group.WORLD, dist.group.WORLD)),
        "mesh_1d": lambda: FSDP(model(), device_mesh=mesh),
        "frozen_mix": lambda: FSDP(freeze(model(), ["0.bias"])),
        "init_fn": lambda: FSDP(model(), param_init_fn=lambda m: None),
        "state_dict_type": lambda: FSDP.set_state_dict_type(FSDP(model()), "SHARDED_STATE_DICT"),
        "shapes": lambda: FSDP(nn.Linear(4, 4 + rank)),
    }.items():
        try:
            make()
            found[name] = None
        except Exception as e:
            found[name] = (type(e).__name__, str(e))
    dist.destroy_process_group()
    return found


def test_clear_errors():
    from ddpc.distributed.fsdp import FullyShardedDataParallel as FSDP

    with pytest.raises(RuntimeError, match="init_process_group"):
        FSDP(model())
    for r in ddpc.spawn(errors_worker, args=(2,), nprocs=2):
        assert r["hybrid_group"][0] == "ValueError" and "Tuple[dist.ProcessGroup" in r["hybrid_group"][1]
        assert r["hybrid_mesh"][0] == "ValueError" and "ndim=2" in r["hybrid_mesh"][1]
        assert r["group_and_mesh"][0] == "ValueError" and "Cannot pass both" in r["group_and_mesh"][1]
        assert r["tuple"][0] == "ValueError" and "HYBRID" in r["tuple"][1]
        assert r["mesh_1d"] is None  # a 1-d mesh stands for its group
        assert r["frozen_mix"][0] == "ValueError" and "use_orig_params=True" in r["frozen_mix"][1]
        assert r["init_fn"][0] == "NotImplementedError" and "param_init_fn" in r["init_fn"][1]
        assert r["state_dict_type"][0] == "TypeError" and "must be a StateDictType" in r["state_dict_type"][1]
        assert r["shapes"][0] == "RuntimeError" and "differs between ranks 0 and 1" in r["shapes"][1]


def test_torch_import_names():
    from ddpc.distributed.fsdp import FullyShardedDataParallel, MixedPrecision, ShardingStrategy
    from ddpc.distributed.fsdp.wrap import enable_wrap, transformer_auto_wrap_policy, wrap

    assert {s.name for s in ShardingStrategy} >= {"FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD"}
    assert MixedPrecision(param_dtype=ddpc.float16).param_dtype is ddpc.float16
    assert wrap(model()) is not None  # outside enable_wrap: the module itself
    assert transformer_auto_wrap_policy(model(), True, 0, transformer_layer_cls={ddpc.nn.Linear})
    assert callable(enable_wrap) and FullyShardedDataParallel.__doc__


def mixed_precision_worker(rank, world, strategy):
    import ddpc.distributed as dist
    from ddpc import nn
    from ddpc.distributed.fsdp import FullyShardedDataParallel as FSDP
    from ddpc.distributed.fsdp import MixedPrecision

    dist.init_process_group("cpu")
    X, y = data(world * 4 * 3)
    mp = MixedPrecision(param_dtype=ddpc.float64, reduce_dtype=ddpc.float64)
    fsdp = FSDP(model(), mixed_precision=mp, **wrap_kwargs({"strategy": strategy, "nested": "module"}))
    opt = optimizer("sgd", fsdp.parameters())
    dtypes = set()
    for s in range(3):
        lo = s * world * 4 + rank * 4
        opt.zero_grad()
        out = fsdp(ddpc.from_numpy(X[lo:lo + 4]))
        dtypes.add(out.dtype.name)
        nn.CrossEntropyLoss()(out, ddpc.from_numpy(y[lo:lo + 4])).backward()
        dtypes.update(p.grad.dtype.name for p in fsdp.parameters())
        opt.step()
    out = numpy_state(fsdp.state_dict())
    dist.destroy_process_group()
    return {"params": out, "dtypes": sorted(dtypes), "shards": sorted({p.dtype.name for p in fsdp.parameters()})}


@pytest.mark.parametrize("strategy", ["FULL_SHARD", "NO_SHARD"])
def test_mixed_precision_computes_in_param_dtype_and_steps_the_shards_in_theirs(strategy):
    ref, _ = train_single(2, batch=4, steps=3)
    for r in ddpc.spawn(mixed_precision_worker, args=(2, strategy), nprocs=2):
        assert r["dtypes"] == ["float32", "float64"]  # float64 outputs, float32 shard gradients
        assert r["shards"] == ["float32"]
        assert_params_close(r["params"], ref, atol=1e-4)
        assert {v.dtype for v in r["params"].values()} == {np.dtype(np.float32)}


def shared_model():
    from ddpc import nn

    class Shared(nn.Module):
        """A unit applied twice in one forward, and a weight tied under two names."""

        def __init__(self):
            super().__init__()
            ddpc.manual_seed(0)
            self.inp = nn.Linear(FEATURES, HIDDEN)
            self.block = nn.Sequential(nn.Linear(HIDDEN, HIDDEN), nn.Tanh())
            self.out = nn.Linear(HIDDEN, HIDDEN)
            self.back = nn.Linear(HIDDEN, HIDDEN, bias=False)
            self.back.weight = self.out.weight

        def forward(self, x):
            h = self.block(self.block(self.inp(x)))
            return self.back(self.out(h))[:, :CLASSES]

    return Shared()


def shared_worker(rank, world, strategy):
    import ddpc.distributed as dist
    from ddpc import nn
    from ddpc.distributed.fsdp import FullyShardedDataParallel as FSDP
    from ddpc.distributed.fsdp import ShardingStrategy
    from ddpc.distributed.fsdp.wrap import ModuleWrapPolicy

    dist.init_process_group("cpu")
    X, y = data(world * 4 * 3)
    m = shared_model()
    fsdp = FSDP(m, sharding_strategy=getattr(ShardingStrategy, strategy),
                auto_wrap_policy=ModuleWrapPolicy({nn.Sequential}))
    opt = optimizer("adam", fsdp.parameters())
    for s in range(3):
        lo = s * world * 4 + rank * 4
        opt.zero_grad()
        nn.CrossEntropyLoss()(fsdp(ddpc.from_numpy(X[lo:lo + 4])), ddpc.from_numpy(y[lo:lo + 4])).backward()
        opt.step()
    out = numpy_state(fsdp.state_dict())
    dist.destroy_process_group()
    return out


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_unit_used_twice_and_tied_weights(strategy):
    from ddpc import nn

    world = 2
    X, y = data(world * 4 * 3)
    m = shared_model()
    opt = optimizer("adam", m.parameters())
    for s in range(3):
        opt.zero_grad()
        big = slice(s * world * 4, (s + 1) * world * 4)
        nn.CrossEntropyLoss()(m(ddpc.from_numpy(X[big])), ddpc.from_numpy(y[big])).backward()
        opt.step()
    ref = numpy_state(m.state_dict())
    for r in ddpc.spawn(shared_worker, args=(world, strategy), nprocs=world):
        assert list(r) == list(ref)  # the tied weight under both names, as the unwrapped model has it
        assert_params_close(r, ref)


def as_numpy(v):
    return v.detach().cpu().numpy().copy() if isinstance(v, ddpc.Tensor) else np.asarray(v)


def optim_state_worker(rank, world, strategy, use_orig_params, form="names"):
    import ddpc.distributed as dist
    from ddpc import nn
    from ddpc.distributed.fsdp import FullyShardedDataParallel as FSDP, OptimStateKeyType, StateDictType
    from ddpc.distributed.tensor import DTensor

    dist.init_process_group("cpu")
    X, y = data(world * 4 * 3)
    sd_type = StateDictType.SHARDED_STATE_DICT if form == "sharded" else StateDictType.FULL_STATE_DICT

    def step(fsdp, opt, s):
        lo = s * world * 4 + rank * 4
        opt.zero_grad()
        nn.CrossEntropyLoss()(fsdp(ddpc.from_numpy(X[lo:lo + 4])), ddpc.from_numpy(y[lo:lo + 4])).backward()
        opt.step()

    options = {"strategy": strategy, "nested": "size", "use_orig_params": use_orig_params}
    fsdp = FSDP(model(), **wrap_kwargs(options))
    opt = optimizer("adam", fsdp.parameters())
    for s in range(2):
        step(fsdp, opt, s)
    if form in ("names", "sharded"):
        with FSDP.state_dict_type(fsdp, sd_type):
            full_osd = FSDP.optim_state_dict(fsdp, opt)
    else:  # PyTorch's older form: keyed by IDs, on rank 0 only
        full_osd = FSDP.full_optim_state_dict(fsdp, opt)
        assert (full_osd == {}) == (rank != 0)
        by_name = FSDP.rekey_optim_state_dict(FSDP.optim_state_dict(fsdp, opt), OptimStateKeyType.PARAM_NAME, fsdp)
        assert FSDP.rekey_optim_state_dict(by_name, OptimStateKeyType.PARAM_ID, fsdp)["param_groups"] == \
            (full_osd or FSDP.rekey_optim_state_dict(by_name, OptimStateKeyType.PARAM_ID, fsdp))["param_groups"]
    with FSDP.state_dict_type(fsdp, sd_type):
        full_sd = fsdp.state_dict()
    # a fresh model and optimizer resume from the two dicts
    resumed = FSDP(model(seed=5), **wrap_kwargs(options))
    with FSDP.state_dict_type(resumed, sd_type):
        resumed.load_state_dict(full_sd)
    opt2 = optimizer("adam", resumed.parameters())
    if form in ("names", "sharded"):
        opt2.load_state_dict(FSDP.optim_state_dict_to_load(resumed, opt2, full_osd))
    else:
        opt2.load_state_dict(FSDP.scatter_full_optim_state_dict(full_osd if rank == 0 else None, resumed, optim=opt2))
    step(resumed, opt2, 2)
    state = full_osd.get("state", {})
    out = {"osd": {n: {k: as_numpy(v.full_tensor() if isinstance(v, DTensor) else v) for k, v in st.items()}
                   for n, st in state.items()},
           "rows": {n: {k: as_numpy(v.to_local()) for k, v in st.items() if isinstance(v, DTensor)}
                    for n, st in state.items()},
           "names": full_osd.get("param_groups", [{"params": []}])[0]["params"],
           "params": numpy_state(resumed.state_dict())}
    dist.destroy_process_group()
    return out


def single_adam(world):
    """One process's Adam over the combined batches, 3 steps: the final
    parameters and the optimizer's state dict after step 2, keyed by IDs."""
    from ddpc import nn

    X, y = data(world * 4 * 3)
    m = model()
    opt = optimizer("adam", m.parameters())
    for s in range(3):
        big = slice(s * world * 4, (s + 1) * world * 4)
        opt.zero_grad()
        nn.CrossEntropyLoss()(m(ddpc.from_numpy(X[big])), ddpc.from_numpy(y[big])).backward()
        opt.step()
        if s == 1:
            packed = opt.state_dict()
            osd = {"state": {i: {k: as_numpy(v) for k, v in st.items()} for i, st in packed["state"].items()},
                   "ids": packed["param_groups"][0]["params"], "names": [n for n, _ in m.named_parameters()]}
    return numpy_state(m.state_dict()), osd


@pytest.mark.parametrize("form", ["names", "sharded"])
@pytest.mark.parametrize("use_orig_params", [False, True])
@pytest.mark.parametrize("strategy", ["FULL_SHARD", "NO_SHARD"])
def test_optim_state_dict_is_the_unwrapped_optimizers_and_resumes(strategy, use_orig_params, form):
    world = 3
    ref, osd = single_adam(world)
    names = osd["names"]
    expected = {names[i]: st for i, st in osd["state"].items()}
    for rank, r in enumerate(ddpc.spawn(optim_state_worker, args=(world, strategy, use_orig_params, form),
                                        nprocs=world)):
        assert sorted(r["names"]) == sorted(names)
        assert r["osd"].keys() == expected.keys()
        for n in expected:
            assert r["osd"][n].keys() == expected[n].keys()
            for k in expected[n]:
                np.testing.assert_allclose(r["osd"][n][k], expected[n][k], atol=1e-6, rtol=1e-5, err_msg=f"{n} {k}")
            # under SHARDED_STATE_DICT each rank holds the rows of the moments that it holds of the parameters
            sharded = form == "sharded" and strategy != "NO_SHARD"
            assert sorted(r["rows"][n]) == (["exp_avg", "exp_avg_sq"] if sharded else [])
            for k, rows in r["rows"][n].items():
                per = -(-expected[n][k].shape[0] // world)
                np.testing.assert_allclose(rows, expected[n][k][rank * per:][:per], atol=1e-6, rtol=1e-5)
        assert_params_close(r["params"], ref)


@pytest.mark.parametrize("use_orig_params", [False, True])
def test_full_optim_state_dict_is_keyed_by_ids_on_rank_0_and_scatters_back(use_orig_params):
    world = 2
    ref, osd = single_adam(world)  # the unwrapped optimizer's own state dict, keyed by IDs
    expected, expected_ids = osd["state"], osd["ids"]
    results = ddpc.spawn(optim_state_worker, args=(world, "FULL_SHARD", use_orig_params, "ids"), nprocs=world)
    assert results[1]["osd"] == {}  # rank0_only
    assert results[0]["names"] == expected_ids and results[0]["osd"].keys() == expected.keys()
    for i in expected:
        for k in expected[i]:
            np.testing.assert_allclose(results[0]["osd"][i][k], expected[i][k], atol=1e-6, rtol=1e-5)
    for r in results:  # both ranks resumed from what rank 0 scattered
        assert_params_close(r["params"], ref)
