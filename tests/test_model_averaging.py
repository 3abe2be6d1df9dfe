"""Local SGD: PeriodicModelAverager and HierarchicalModelAverager against
their schedules simulated with numpy (ranks apart between averagings, equal to
the mean right after, one all-reduce per averaging), post_localSGD_hook with
PostLocalSGDOptimizer against the same loop written by hand, state dicts, and
PyTorch's argument errors. Ranks are processes started by ddpc.spawn."""

import collections
import warnings

import numpy as np
import pytest
from test_ddp import data, model, params

import ddpc

SHAPES = [(3, 4), (5,)]


def local_update(rank, step):
    """What a rank's optimizer adds to each parameter at a step."""
    rng = np.random.default_rng(1000 * step + rank)
    return [rng.standard_normal(shape) for shape in SHAPES]


def initial(rank):
    return [np.full(shape, float(rank)) for shape in SHAPES]


def simulate(world, steps, groups_at):
    """Every rank's parameters after each step, where ``groups_at(step)`` is
    the list of rank groups that average at that step (or None)."""
    values = [initial(r) for r in range(world)]
    out = []
    for step in range(steps):
        values = [[v + d for v, d in zip(values[r], local_update(r, step))] for r in range(world)]
        for group in groups_at(step) or ():
            mean = [np.mean([values[r][i] for r in group], axis=0) for i in range(len(SHAPES))]
            for r in group:
                values[r] = [m.copy() for m in mean]
        out.append(values)
    return out


def averager_worker(rank, world, steps, make, form):
    """This rank's parameters after each step under the averager ``make()``
    builds, and how many all-reduces it ran."""
    import ddpc.distributed as dist

    dist.init_process_group("cpu")
    tensors = [ddpc.nn.Parameter(ddpc.tensor(v)) for v in initial(rank)]
    frozen = ddpc.nn.Parameter(ddpc.tensor([float(rank)]))  # no gradient: never averaged
    averager = make()
    calls = []
    all_reduce = dist.all_reduce

    def counted(*args, **kwargs):
        calls.append(1)
        return all_reduce(*args, **kwargs)

    dist.all_reduce = counted
    out = []
    for step in range(steps):
        with ddpc.no_grad():
            for t, d in zip(tensors, local_update(rank, step)):
                t.add_(ddpc.tensor(d))
                t.grad = ddpc.zeros_like(t)
        everything = tensors + [frozen]
        given = {"params": everything,
                 "named": [(f"p{i}", t) for i, t in enumerate(everything)],
                 "groups": [{"params": everything[:1]}, {"params": everything[1:]}]}[form]
        averager.average_parameters(given)
        out.append([t.numpy().copy() for t in tensors])
    dist.all_reduce = all_reduce
    result = out, len(calls), float(frozen.item()), averager.step
    dist.destroy_process_group()
    return result


def _periodic():
    from ddpc.distributed.algorithms.model_averaging import averagers

    return averagers.PeriodicModelAverager(period=3, warmup_steps=2)


def _hierarchical():
    from ddpc.distributed.algorithms.model_averaging import hierarchical_model_averager as hma

    return hma.HierarchicalModelAverager(collections.OrderedDict([(2, 2), (4, 4)]), warmup_steps=1)


def assert_schedule(results, want):
    world = len(results)
    for step, want_step in enumerate(want):
        for r in range(world):
            for got, expected in zip(results[r][0][step], want_step[r]):
                np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12, err_msg=f"step {step} rank {r}")


@pytest.mark.parametrize("world,form", [(2, "params"), (2, "named"), (2, "groups"), (4, "params")])
def test_periodic_averager_follows_its_schedule(world, form):
    steps = 9
    averaging_steps = {2, 5, 8}  # warmup_steps=2, then every period=3 steps
    results = ddpc.spawn(averager_worker, args=(world, steps, _periodic, form), nprocs=world)
    assert_schedule(results, simulate(world, steps, lambda s: [range(world)] if s in averaging_steps else None))
    for step in range(steps):
        same = all(np.array_equal(results[0][0][step][i], results[r][0][step][i])
                   for r in range(world) for i in range(len(SHAPES)))
        assert same == (step in averaging_steps), f"step {step}"  # apart during warm-up and between averagings
    for r, (_, all_reduces, frozen, step_count) in enumerate(results):
        assert all_reduces == len(averaging_steps)  # one flat all-reduce per averaging, not one per tensor
        assert frozen == r and step_count == steps


def test_hierarchical_averager_averages_pairs_then_everyone():
    world, steps = 4, 7

    def groups_at(step):
        if step < 1:  # warmup_steps
            return None
        if step % 4 == 0:
            return [range(4)]
        if step % 2 == 0:
            return [range(0, 2), range(2, 4)]
        return None

    results = ddpc.spawn(averager_worker, args=(world, steps, _hierarchical, "params"), nprocs=world)
    assert_schedule(results, simulate(world, steps, groups_at))
    at = {step: [results[r][0][step][0] for r in range(world)] for step in (2, 4, 6)}
    for step in (2, 6):
        assert np.array_equal(at[step][0], at[step][1]) and np.array_equal(at[step][2], at[step][3])
        assert not np.allclose(at[step][0], at[step][2])
    assert all(np.array_equal(at[4][0], at[4][r]) for r in range(world))
    assert [r[1] for r in results] == [3] * world  # steps 2, 4 and 6


def post_local_sgd_worker(rank, world, subgroup_size, post_local_allreduce, steps, by_hand):
    """An MLP trained with DDP + post_localSGD_hook + PostLocalSGDOptimizer,
    or (``by_hand``) with the same gradient and parameter averaging written
    out tensor by tensor without DDP."""
    import ddpc.distributed as dist
    from ddpc import nn
    from ddpc.distributed.algorithms.ddp_comm_hooks import post_localSGD_hook as local_sgd
    from ddpc.distributed.algorithms.model_averaging import averagers
    from ddpc.distributed.optim import PostLocalSGDOptimizer

    start, period, batch = 2, 3, 6
    dist.init_process_group("cpu")
    subgroup = dist.new_subgroups(subgroup_size)[0] if subgroup_size else None
    X, y = data(world * batch * steps)
    X = X.astype(np.float64)
    net = model().double()
    if by_hand:
        local = subgroup if subgroup_size else None  # None: the intra-node group, all ranks under ddpc.spawn
        inner = ddpc.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        opt = None
    else:
        state = local_sgd.PostLocalSGDState(None, subgroup, start, post_local_allreduce)
        net = nn.parallel.DistributedDataParallel(net)
        net.register_comm_hook(state, local_sgd.post_localSGD_hook)
        inner = ddpc.optim.SGD(net.parameters(), lr=0.1, momentum=0.9)
        opt = PostLocalSGDOptimizer(inner, averagers.PeriodicModelAverager(period, warmup_steps=start))
    for s in range(steps):
        lo = (s * world + rank) * batch
        (opt or inner).zero_grad()
        nn.CrossEntropyLoss()(net(ddpc.from_numpy(X[lo:lo + batch])), ddpc.from_numpy(y[lo:lo + batch])).backward()
        if opt is not None:
            opt.step()
            continue
        group = None if s < start else local
        if s < start or post_local_allreduce:
            for p in net.parameters():
                dist.all_reduce(p.grad, group=group)
                p.grad /= dist.get_world_size(group)
        inner.step()
        if s >= start and (s - start) % period == 0:
            with ddpc.no_grad():
                for p in net.parameters():
                    dist.all_reduce(p, group=None)
                    p /= world
    out = params(net if by_hand else net.module)
    extra = None if by_hand else (state.iter, opt.state_dict()["step"], state.subgroup and state.subgroup.size())
    dist.destroy_process_group()
    return out, extra


@pytest.mark.parametrize("world,subgroup_size,post_local_allreduce",
                         [(4, 2, True), (2, None, True), (2, 1, True), (2, None, False)])
def test_post_local_sgd_equals_the_loop_written_by_hand(world, subgroup_size, post_local_allreduce):
    steps = 8
    args = (world, subgroup_size, post_local_allreduce, steps)
    hooked = ddpc.spawn(post_local_sgd_worker, args=args + (False,), nprocs=world)
    by_hand = ddpc.spawn(post_local_sgd_worker, args=args + (True,), nprocs=world)
    for r, ((got, (iters, averager_step, subgroup_ranks)), (want, _)) in enumerate(zip(hooked, by_hand)):
        assert iters == 2 and averager_step == steps
        if post_local_allreduce:
            assert subgroup_ranks == (subgroup_size or world)  # None: new_subgroups() by LOCAL_WORLD_SIZE
        for k in want:
            np.testing.assert_allclose(got[k], want[k], rtol=0, atol=1e-10, err_msg=f"rank {r} {k}")
    # Steps 3 and 4 are local (the last averaging was at step 2, the next at 5); after step 7 (the last one)
    # ranks whose gradients were not averaged together differ.
    apart = subgroup_size == 1 or not post_local_allreduce or world == 4
    first = hooked[0][0]
    assert apart == any(not np.allclose(first[k], hooked[-1][0][k]) for k in first)


def test_post_local_sgd_optimizer_state_dict_carries_the_averager_step():
    from ddpc.distributed.algorithms.model_averaging import averagers
    from ddpc.distributed.optim import PostLocalSGDOptimizer

    w = ddpc.nn.Parameter(ddpc.ones(3))
    make = lambda: PostLocalSGDOptimizer(ddpc.optim.SGD([w], lr=0.1, momentum=0.9),  # noqa: E731
                                         averagers.PeriodicModelAverager(period=4, warmup_steps=10))
    opt = make()
    for _ in range(3):
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
    sd = opt.state_dict()
    assert sd["step"] == 3 and opt.averager.step == 3
    assert opt.param_groups is opt.optim.param_groups and opt.state is opt.optim.state
    np.testing.assert_allclose(w.detach().numpy(), [0.062] * 3, rtol=1e-6)  # SGD with momentum, no averaging yet
    fresh = make()
    fresh.load_state_dict(sd)
    assert fresh.averager.step == 3
    np.testing.assert_allclose(fresh.state[w]["momentum_buffer"].numpy(), sd["state"][0]["momentum_buffer"].numpy())
    del sd["step"]
    with pytest.warns(UserWarning, match="does not contain a step counter for an averager"):
        fresh.load_state_dict(sd)
    assert fresh.averager.step == 0


def test_params_to_average_and_bad_inputs():
    from ddpc.distributed.algorithms.model_averaging import averagers, utils

    a, b, c = (ddpc.nn.Parameter(ddpc.ones(2)) for _ in range(3))
    a.grad, c.grad = ddpc.zeros(2), ddpc.zeros(2)
    assert utils.get_params_to_average([a, b, c]) == [a, c]
    assert utils.get_params_to_average([("a", a), ("b", b)]) == [a]
    assert utils.get_params_to_average([{"params": [b, c]}]) == [c]
    with pytest.raises(NotImplementedError, match="Parameter input of type <class 'int'> is not supported"):
        utils.get_params_to_average([1])
    with pytest.raises(ValueError, match=r"Arg ``period`` must be a positive value."):
        averagers.PeriodicModelAverager(period=0)
    with pytest.raises(ValueError, match=r"Arg ``warmup_steps`` must be a non-negative number."):
        averagers.PeriodicModelAverager(period=2, warmup_steps=-1)
    with pytest.warns(UserWarning, match="When period is 1, no need to use model averaging"):
        averagers.PeriodicModelAverager(period=1)
    with pytest.raises(TypeError):
        averagers.ModelAverager()  # abstract


def hierarchical_errors_worker(rank):
    import ddpc.distributed as dist
    from ddpc.distributed.algorithms.model_averaging.hierarchical_model_averager import HierarchicalModelAverager

    dist.init_process_group("cpu")
    errors = []
    for sizes, warmup in (({}, 0), ({0: 1, 2: 2}, 0), ({2: 1, 4: 3}, 0), ({2: 2}, -1)):
        try:
            HierarchicalModelAverager(collections.OrderedDict(sizes), warmup_steps=warmup)
        except ValueError as e:
            errors.append(str(e))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        HierarchicalModelAverager({1: 2})
    errors.append(str(caught[0].message))
    dist.destroy_process_group()
    return errors


def test_hierarchical_averager_argument_errors():
    for errors in ddpc.spawn(hierarchical_errors_worker, nprocs=2):
        assert errors == [
            "Arg ``period_group_size_dict`` must not be empty.",
            "The minimum period in arg ``period_group_size_dict`` must be a positive value.",
            "The last value in arg ``period_group_size_dict`` 3 must be equal to the size of arg "
            "``process_group`` 2.",
            "Arg ``warmup_steps`` must be a non-negative number.",
            "When the maximum period in arg ``period_group_size_dict`` is 1, no need to use model averaging "
            "because the communication cost of all-reducing parameters will be no less than the cost of "
            "all-reducing gradients by DistributedDataParallel in the backward pass. Therefore, only "
            "DistributedDataParallel should be used for this case.",
        ]


def test_import_paths():
    import ddpc.distributed.algorithms.model_averaging.averagers as averagers
    from ddpc.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook import PostLocalSGDState
    from ddpc.distributed.optim import PostLocalSGDOptimizer, ZeroRedundancyOptimizer

    assert averagers.PeriodicModelAverager.__module__ == averagers.__name__
    assert ddpc.distributed.algorithms.ddp_comm_hooks.post_localSGD_hook.PostLocalSGDState is PostLocalSGDState
    assert ZeroRedundancyOptimizer is ddpc.optim.ZeroRedundancyOptimizer
    assert ddpc.distributed.optim.PostLocalSGDOptimizer is PostLocalSGDOptimizer
