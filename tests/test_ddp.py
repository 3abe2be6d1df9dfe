"""DistributedDataParallel and DataParallel: equivalence with one process, gradient
accumulation, comm hooks, uneven inputs, and the errors that replace hangs.

Ranks are real processes started by ddpc.spawn on the cpu backend.
"""

import contextlib

import numpy as np
import pytest

import ddpc

FEATURES, CLASSES, HIDDEN = 12, 5, 16


def data(n, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((n, FEATURES)).astype(np.float32), rng.integers(0, CLASSES, n).astype(np.int64))


def model(seed=0, hidden=HIDDEN, extra=False):
    from ddpc import nn

    ddpc.manual_seed(seed)
    layers = [nn.Linear(FEATURES, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, CLASSES)]
    m = nn.Sequential(*layers)
    return _WithUnused(m) if extra else m


def _WithUnused(body):
    from ddpc import nn

    class WithUnused(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = body
            self.unused = nn.Linear(3, 3)

        def forward(self, x):
            return self.body(x)

    return WithUnused()


def params(m):
    return {k: v.detach().cpu().numpy().copy() for k, v in m.state_dict().items()}


def train_single(world, batch, steps, lr=0.1, accumulate=1, double=False, hidden=HIDDEN):
    from ddpc import nn

    X, y = data(world * batch * steps * accumulate)
    m = model(hidden=hidden)
    if double:
        X, m = X.astype(np.float64), m.double()
    opt = ddpc.optim.SGD(m.parameters(), lr=lr, momentum=0.9)
    big = world * batch * accumulate
    for s in range(steps):
        opt.zero_grad()
        nn.CrossEntropyLoss()(m(ddpc.from_numpy(X[s * big:(s + 1) * big])), ddpc.from_numpy(y[s * big:(s + 1) * big])
                              ).backward()
        opt.step()
    return params(m)


def ddp_worker(rank, world, batch, steps, options):
    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu")
    X, y = data(world * batch * steps * options.get("accumulate", 1))
    m = model(seed=rank if options.get("different_init") else 0, hidden=options.get("hidden", HIDDEN))
    if options.get("double"):
        X, m = X.astype(np.float64), m.double()
    ddp = nn.parallel.DistributedDataParallel(m, bucket_cap_mb=options.get("bucket_cap_mb", 25),
                                              gradient_as_bucket_view=options.get("view", False))
    if options.get("hook"):
        ddp.register_comm_hook(None, comm_hook(options["hook"]))
    if options.get("builtin"):
        ddp._register_builtin_comm_hook(getattr(dist.BuiltinCommHookType, options["builtin"]))
    exchanged = []
    opt = ddpc.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    k = options.get("accumulate", 1)
    big = world * batch * k
    for s in range(steps):
        opt.zero_grad()
        for j in range(k):
            lo = s * big + j * world * batch + rank * batch
            xb, yb = ddpc.from_numpy(X[lo:lo + batch]), ddpc.from_numpy(y[lo:lo + batch])
            if j < k - 1:
                with ddp.no_sync():
                    (loss_fn(ddp(xb), yb) / k).backward()
            else:
                (loss_fn(ddp(xb), yb) / k).backward()
                exchanged.append(ddp._exchange.exchanged if ddp._exchange else 0)
        opt.step()
    out = params(ddp.module)
    dist.destroy_process_group()
    if options.get("count_exchanged"):
        return out, exchanged
    return out


def assert_params_close(a, b, atol=1e-5):
    assert a.keys() == b.keys()
    for k in a:
        np.testing.assert_allclose(a[k], b[k], atol=atol, rtol=0, err_msg=k)


@pytest.mark.parametrize("world", [2, 3])
def test_ddp_equals_one_process_on_the_combined_batch(world):
    ref = train_single(world, batch=8, steps=4)
    # different initial weights on each rank: DDP must broadcast rank 0's
    results = ddpc.spawn(ddp_worker, args=(world, 8, 4, {"different_init": True}), nprocs=world)
    for r in results:
        assert_params_close(r, ref)


def test_small_buckets_and_gradient_views_give_the_same_result():
    ref = train_single(2, batch=8, steps=3)
    results = ddpc.spawn(ddp_worker, args=(2, 8, 3, {"bucket_cap_mb": 0.0005, "view": True}), nprocs=2)
    for r in results:
        assert_params_close(r, ref)


def _owner(t):
    """The object that finally owns a cpu tensor's memory."""
    base = t._buf.base
    while isinstance(base, np.ndarray):
        base = base.base
    return type(base).__name__


def bucket_memory_worker(rank, options):
    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu")
    # bucket_cap_mb=0.0005 (524 bytes) for every bucket: hidden 600 makes several
    ddp = nn.parallel.DistributedDataParallel(model(hidden=600), bucket_cap_mb=0.0005, **options)
    owners = [_owner(b.flat) for b in ddp._buckets]
    exchanged = [_owner(s) for s in ddp._exchange.slots] if ddp._exchange else []
    dist.destroy_process_group()
    return owners, exchanged


def test_buckets_live_in_memory_the_ranks_share():
    """On one host the buckets lie in a dist.shared_buffer, which the cpu backend
    reduces in place; so do the exchanged linear weights' gradients (the 600 x
    600 one: the others are too small to gain from it)."""
    for owners, exchanged in ddpc.spawn(bucket_memory_worker, args=({},), nprocs=2):
        assert owners and set(owners) == {"SharedBuffer"}, owners
        assert exchanged == ["SharedBuffer"]
    # without the exchange (find_unused_parameters=True) every gradient is in a bucket
    for owners, exchanged in ddpc.spawn(bucket_memory_worker, args=({"find_unused_parameters": True},), nprocs=2):
        assert len(owners) > 1 and set(owners) == {"SharedBuffer"} and not exchanged, owners


def bucket_sizes_worker(rank, cap_mb):
    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu")
    m = nn.Sequential(nn.Linear(4, 4), nn.Linear(600, 600))  # 1.44 MB of weight, reduced first
    ddp = nn.parallel.DistributedDataParallel(m, bucket_cap_mb=cap_mb, find_unused_parameters=True)
    sizes = [b.flat.numel() * 4 for b in ddp._buckets]
    dist.destroy_process_group()
    return sizes


def test_the_small_first_bucket_comes_only_with_the_default_cap():
    """PyTorch's rule: under the default cap the first bucket closes once it
    holds 1 MiB (the last bias, then the 600 x 600 weight that passes the cap),
    the rest after; a cap the caller names, even the default's 25, holds for
    every bucket."""
    for sizes in ddpc.spawn(bucket_sizes_worker, args=(None,), nprocs=2):
        assert sizes == [(600 + 600 * 600) * 4, (4 + 4 * 4) * 4], sizes
    for sizes in ddpc.spawn(bucket_sizes_worker, args=(25,), nprocs=2):
        assert sizes == [(600 * 600 + 600 + 4 * 4 + 4) * 4], sizes


# Hidden layers this wide are exchanged (nn/_grad_exchange.py) at the batches below.
WIDE = 128


@pytest.mark.parametrize("world,batch,double", [(2, 8, False), (3, 8, False), (2, 32, False), (2, 8, True)])
def test_exchanged_linear_gradients_equal_one_process(world, batch, double):
    ref = train_single(world, batch=batch, steps=3, hidden=WIDE, double=double)
    results = ddpc.spawn(ddp_worker, args=(world, batch, 3, {"hidden": WIDE, "count_exchanged": True, "double": double}),
                         nprocs=world)
    for r, exchanged in results:
        # the hidden x hidden weight, every step; 32 rows each are more than
        # pay for themselves: all-reduced, then in a bucket from the second step
        assert exchanged == ([1, 1, 1] if batch == 8 else [0, 0, 0])
        assert_params_close(r, ref)
    assert_params_close(results[0][0], results[1][0], atol=0)


@pytest.mark.parametrize("options", [{"accumulate": 3}, {"view": True}, {"hook": "torch_style_hook"}])
def test_exchange_with_no_sync_gradient_views_and_comm_hooks(options):
    """no_sync leaves the gradients to accumulate on each rank (all-reduced at
    the synced step); a comm hook sees every gradient (nothing is exchanged)."""
    ref = train_single(2, batch=4, steps=2, accumulate=options.get("accumulate", 1), hidden=WIDE)
    results = ddpc.spawn(ddp_worker, args=(2, 4, 2, dict(options, hidden=WIDE, count_exchanged=True)), nprocs=2)
    for r, exchanged in results:
        assert exchanged == ([0, 0] if options.get("hook") or options.get("accumulate") else [1, 1])
        assert_params_close(r, ref)


def test_no_sync_accumulation_equals_one_step_on_the_concatenation():
    ref = train_single(2, batch=4, steps=2, accumulate=3)
    results = ddpc.spawn(ddp_worker, args=(2, 4, 2, {"accumulate": 3}), nprocs=2)
    for r in results:
        assert_params_close(r, ref)


def comm_hook(name):
    """A comm hook by name: this file's or ddpc.nn.parallel's, "module.hook" from
    ddp_comm_hooks, or "wrapper(hook)" with a wrapper of default_hooks."""
    from ddpc.distributed.algorithms import ddp_comm_hooks

    if name.endswith(")"):
        wrapper, inner = name[:-1].split("(", 1)
        return getattr(ddp_comm_hooks.default_hooks, wrapper)(comm_hook(inner))
    if "." in name:
        module, hook = name.split(".")
        return getattr(getattr(ddp_comm_hooks, module), hook)
    return globals().get(name) or getattr(ddpc.nn.parallel, name)


def torch_style_hook(state, bucket):
    """A hook as written for PyTorch: the all-reduce's future, divided by the world size in then()."""
    import ddpc.distributed as dist

    fut = dist.all_reduce(bucket.buffer(), group=state, async_op=True).get_future()
    return fut.then(lambda f: f.value()[0] / dist.get_world_size(state))


def _max_difference(a, b):
    return max(float(np.abs(a[k] - b[k]).max()) for k in a)


@pytest.mark.parametrize("hook,atol", [("allreduce_hook", 1e-5), ("fp16_compress_hook", 2e-3),
                                       ("bf16_compress_hook", 2e-2), ("torch_style_hook", 1e-5),
                                       ("fp16_compress_wrapper(allreduce_hook)", 2e-3),
                                       ("bf16_compress_wrapper(allreduce_hook)", 2e-2),
                                       ("fp16_compress_wrapper(torch_style_hook)", 2e-3),
                                       ("quantization_hooks.quantization_pertensor_hook", 2e-3),
                                       ("quantization_hooks.quantization_perchannel_hook", 2e-3)])
def test_comm_hooks_within_compression_tolerance(hook, atol):
    ref = train_single(2, batch=8, steps=2)
    results = ddpc.spawn(ddp_worker, args=(2, 8, 2, {"hook": hook}), nprocs=2)
    assert_params_close(results[0], results[1], atol=0)
    assert_params_close(results[0], ref, atol=atol)
    if atol > 1e-5:  # the compression is there: the result is not exact averaging's
        assert _max_difference(results[0], ref) > 1e-6


def test_quantization_hooks_over_three_ranks():
    """3 ranks and a wider model (several channels of 512 in a bucket, the last
    one partial): within the quantization's tolerance of the exact average."""
    world = 3
    ref = train_single(world, batch=4, steps=2, hidden=40)
    for hook in ("quantization_pertensor_hook", "quantization_perchannel_hook"):
        results = ddpc.spawn(ddp_worker, args=(world, 4, 2, {"hook": f"quantization_hooks.{hook}", "hidden": 40}),
                             nprocs=world)
        for r in results[1:]:
            assert_params_close(results[0], r, atol=0)
        assert_params_close(results[0], ref, atol=2e-3)
        assert _max_difference(results[0], ref) > 1e-6


def quantization_gradients(rank, n):
    """Rank's bucket: values whose magnitude grows along it (channels differ), all
    positive on rank 0 (a zero point of 0), shifted on the others."""
    rng = np.random.default_rng(rank)
    g = (rng.standard_normal(n) * np.linspace(0.01, 3, n)).astype(np.float32)
    return np.abs(g) if rank == 0 else g + np.float32(0.1 * rank)


def expected_quantized_average(world, n, channel):
    """The hooks' scheme in numpy (float32): per rank, uint8 with the scale and zero
    point of the range of each channel and 0, dequantized and averaged."""
    total = 0
    for rank in range(world):
        g = quantization_gradients(rank, n)
        rows = np.concatenate([g, np.zeros(channel - n % channel, np.float32)]).reshape(-1, channel) if channel \
            else g.reshape(1, -1)
        lo, hi = np.minimum(rows.min(1), 0), np.maximum(rows.max(1), 0)
        scale = np.maximum((hi - lo) / np.float32(255), np.finfo(np.float32).eps)
        zero = np.clip(0 - np.round(lo / scale), 0, 255)
        q = np.clip(np.round(rows / scale[:, None]) + zero[:, None], 0, 255).astype(np.uint8)
        total = total + scale[:, None] * (q.astype(np.float32) - zero[:, None])
    return (total / np.float32(world)).reshape(-1)[:n]


def quantization_hook_worker(rank, world, n, channel):
    import ddpc.distributed as dist
    from ddpc.distributed.algorithms.ddp_comm_hooks import quantization_hooks

    dist.init_process_group("cpu")
    bucket = ddpc.nn.parallel.GradBucket(0, ddpc.from_numpy(quantization_gradients(rank, n)), [], True)
    if channel:
        fut = quantization_hooks.quantization_perchannel_hook(None, bucket, bucket_size=channel)
    else:
        fut = quantization_hooks.quantization_pertensor_hook(None, bucket)
    out = fut.wait().numpy().copy()
    dist.destroy_process_group()
    return out


@pytest.mark.parametrize("n,channel", [(1100, 0), (1100, 512), (1024, 512), (30, 8)])
def test_quantization_hooks_match_their_scheme(n, channel):
    """Every rank's result equals the scheme computed in numpy; the error is at most
    half a step of each rank's scale (channels of small values keep theirs small)."""
    world = 3
    want = expected_quantized_average(world, n, channel)
    exact = np.mean([quantization_gradients(r, n) for r in range(world)], 0)
    for got in ddpc.spawn(quantization_hook_worker, args=(world, n, channel), nprocs=world):
        assert got.shape == (n,) and got.dtype == np.float32
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-7)
    step = np.ptp([np.concatenate([quantization_gradients(r, n), [0]]) for r in range(world)], 1).max() / 255
    assert np.abs(want - exact).max() <= step / 2 + 1e-6
    if channel:  # the first channel's values are small: so is their error
        assert np.abs(want - exact)[:channel].max() < np.abs(want - exact)[-channel:].max()


def test_builtin_comm_hooks():
    ref = train_single(2, batch=8, steps=2)
    exact = ddpc.spawn(ddp_worker, args=(2, 8, 2, {"builtin": "ALLREDUCE"}), nprocs=2)
    assert_params_close(exact[0], ref)
    results = ddpc.spawn(ddp_worker, args=(2, 8, 2, {"builtin": "FP16_COMPRESS"}), nprocs=2)
    assert_params_close(results[0], results[1], atol=0)
    assert_params_close(results[0], ref, atol=2e-3)
    assert _max_difference(results[0], ref) > 1e-6
    assert ddpc.distributed.BuiltinCommHookType.FP16_COMPRESS.name == "FP16_COMPRESS"
    assert ddpc.distributed.GradBucket is ddpc.nn.parallel.GradBucket


def set_by_hand_hook(state, bucket):
    """PyTorch's documented no-op hook, on a Future completed by hand."""
    fut = ddpc.futures.Future()
    fut.set_result(bucket.buffer())
    return fut


def noop_worker(rank, by_hand):
    import ddpc.distributed as dist
    from ddpc import nn
    from ddpc.distributed.algorithms.ddp_comm_hooks import debugging_hooks

    dist.init_process_group("cpu")
    X, y = data(16)
    m = model()
    ddp = nn.parallel.DistributedDataParallel(m)
    ddp.register_comm_hook(None, set_by_hand_hook if by_hand else debugging_hooks.noop_hook)
    xb, yb = ddpc.from_numpy(X[rank * 8:rank * 8 + 8]), ddpc.from_numpy(y[rank * 8:rank * 8 + 8])
    nn.CrossEntropyLoss()(ddp(xb), yb).backward()
    grads = {n: p.grad.numpy().copy() for n, p in m.named_parameters()}
    dist.destroy_process_group()
    return grads


@pytest.mark.parametrize("by_hand", [False, True])
def test_noop_hook_leaves_each_ranks_own_gradients(by_hand):
    from ddpc import nn

    X, y = data(16)
    results = ddpc.spawn(noop_worker, args=(by_hand,), nprocs=2)
    for rank, got in enumerate(results):
        m = model()
        nn.CrossEntropyLoss()(m(ddpc.from_numpy(X[rank * 8:rank * 8 + 8])),
                              ddpc.from_numpy(y[rank * 8:rank * 8 + 8])).backward()
        assert_params_close(got, {n: p.grad.numpy() for n, p in m.named_parameters()}, atol=1e-6)
    assert _max_difference(results[0], results[1]) > 1e-3


def _one_process_grads(rank):
    """The gradients of model() on rank ``rank``'s rows of data(16), in one process."""
    from ddpc import nn

    X, y = data(16)
    m = model()
    nn.CrossEntropyLoss()(m(ddpc.from_numpy(X[rank * 8:rank * 8 + 8])),
                          ddpc.from_numpy(y[rank * 8:rank * 8 + 8])).backward()
    return {n: p.grad.numpy().copy() for n, p in m.named_parameters()}


def _ddp_grads(rank, ddp):
    """One backward of ``ddp`` on rank ``rank``'s rows of data(16): the module's gradients."""
    from ddpc import nn

    X, y = data(16)
    nn.CrossEntropyLoss()(ddp(ddpc.from_numpy(X[rank * 8:rank * 8 + 8])),
                          ddpc.from_numpy(y[rank * 8:rank * 8 + 8])).backward()
    return {n: p.grad.numpy().copy() for n, p in ddp.module.named_parameters()}


def hook_types_worker(rank):
    import ddpc.distributed as dist
    from ddpc import nn
    from ddpc.distributed.algorithms.ddp_comm_hooks import DDPCommHookType, register_ddp_comm_hook

    dist.init_process_group("cpu", timeout=60)
    grads = {}
    for kind in ("ALLREDUCE", "FP16_COMPRESS", "NOOP", "POWER_SGD_RANK2"):
        ddp = nn.parallel.DistributedDataParallel(model())
        register_ddp_comm_hook(DDPCommHookType[kind], ddp)
        grads[kind] = _ddp_grads(rank, ddp)
    state = ddp._comm_state  # POWER_SGD_RANK2's
    powersgd = (state.matrix_approximation_rank, state.start_powerSGD_iter, state.process_group)
    dist.destroy_process_group()
    return grads, powersgd


def test_register_ddp_comm_hook_by_type():
    from ddpc.distributed.algorithms.ddp_comm_hooks import DDPCommHookType

    assert [t.name for t in DDPCommHookType] == [
        "ALLREDUCE", "FP16_COMPRESS", "BF16_COMPRESS", "QUANTIZE_PER_TENSOR", "QUANTIZE_PER_CHANNEL", "POWER_SGD",
        "POWER_SGD_RANK2", "BATCHED_POWER_SGD", "BATCHED_POWER_SGD_RANK2", "NOOP"]
    local = [_one_process_grads(r) for r in range(2)]
    exact = {n: (local[0][n] + local[1][n]) / 2 for n in local[0]}
    results = ddpc.spawn(hook_types_worker, nprocs=2)
    for rank, (grads, powersgd) in enumerate(results):
        assert_params_close(grads["ALLREDUCE"], exact, atol=1e-6)
        # before start_powerSGD_iter PowerSGD averages whole gradients
        assert_params_close(grads["POWER_SGD_RANK2"], exact, atol=1e-6)
        assert powersgd == (2, 1000, None)
        assert_params_close(grads["NOOP"], local[rank], atol=1e-6)
        for n, g in grads["FP16_COMPRESS"].items():  # averaged in float16
            np.testing.assert_array_equal(g, g.astype(np.float16).astype(np.float32))
            np.testing.assert_allclose(g, exact[n], rtol=2e-3, atol=1e-4)
        assert _max_difference(grads["FP16_COMPRESS"], exact) > 1e-7


def attributes_worker(rank):
    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu", timeout=60)
    ddp = nn.parallel.DistributedDataParallel(nn.BatchNorm1d(3), bucket_cap_mb=1, find_unused_parameters=True,
                                              gradient_as_bucket_view=True)
    group = ddp.process_group
    out = {"group": (group is dist.group.WORLD, group.size()),
           "device": (ddp.device == ddpc.device("cpu"), ddp.device_type, ddp.device_ids, ddp.output_device),
           "caps": [ddp.bucket_bytes_cap, nn.parallel.DistributedDataParallel(model()).bucket_bytes_cap,
                    nn.parallel.DistributedDataParallel(model(), bucket_cap_mb_list=[1, 3]).bucket_bytes_cap],
           "flags": (ddp.broadcast_buffers, ddp.find_unused_parameters, ddp.gradient_as_bucket_view,
                     ddp.static_graph, ddp.is_multi_device_module),
           "ignored": ddp.parameters_to_ignore,
           "buffers": (list(ddp.named_module_buffers), [b is ddp.module.running_mean for b in ddp.modules_buffers])}
    sub = dist.new_group([0, 1])
    out["subgroup"] = nn.parallel.DistributedDataParallel(model(), process_group=sub).process_group is sub
    dist.destroy_process_group()
    return out


def test_pytorchs_attributes():
    for out in ddpc.spawn(attributes_worker, nprocs=2):
        assert out["group"] == (True, 2)
        assert out["device"] == (True, "cpu", None, None)
        assert out["caps"] == [1 << 20, 25 << 20, 3 << 20]
        assert out["flags"] == (True, True, True, False, False)
        assert out["ignored"] == set()
        assert out["buffers"] == (["running_mean", "running_var", "num_batches_tracked"], [True, False, False])
        assert out["subgroup"]


def ignore_worker(rank):
    import ddpc.distributed as dist
    from ddpc import nn

    class M(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(3, 2)
            self.sub = nn.Module()
            self.sub.scale = nn.Parameter(ddpc.ones(rank + 1))  # of a shape of each rank's own
            self.register_buffer("own", ddpc.full((1,), 10.0 * rank))
            self.register_buffer("shared", ddpc.full((1,), 10.0 * rank))

        def forward(self, x):
            return self.lin(x).sum() + self.sub.scale.sum() * x.sum()

    dist.init_process_group("cpu", timeout=60)
    m = M()
    with ddpc.no_grad():
        m.lin.bias.fill_(rank)
    names = ["lin.bias", "sub.scale", "own"]
    nn.parallel.DistributedDataParallel._set_params_and_buffers_to_ignore_for_model(m, names)
    marked = (m._ddp_params_and_buffers_to_ignore is names, m.lin.bias._ddp_ignored, m.own._ddp_ignored)
    ddp = nn.parallel.DistributedDataParallel(m)
    out = {"marked": marked, "ignored": ddp.parameters_to_ignore, "built": (m.lin.bias.tolist(), m.own.item(),
                                                                            m.shared.item()),
           "buffers": list(ddp.named_module_buffers)}
    with ddpc.no_grad():
        m.own.fill_(100.0 + rank)
        m.shared.fill_(100.0 + rank)
    ddp(ddpc.full((rank + 1, 3), float(rank + 1))).backward()  # rank r: r + 1 rows of r + 1
    out["after"] = (m.own.item(), m.shared.item(), m.lin.bias.tolist())
    out["grads"] = (m.lin.weight.grad.tolist(), m.lin.bias.grad.tolist(), m.sub.scale.grad.tolist())
    dist.destroy_process_group()
    return out


def test_ignored_parameters_and_buffers_are_each_ranks_own():
    for rank, out in enumerate(ddpc.spawn(ignore_worker, nprocs=2)):
        assert out["marked"] == (True, True, True)
        assert out["ignored"] == {"lin.bias", "sub.scale", "own"}
        assert out["buffers"] == ["shared"]
        # neither verified (sub.scale's shape differs) nor broadcast at construction, nor in forward
        assert out["built"] == ([float(rank)] * 2, 10.0 * rank, 0.0)
        assert out["after"] == (100.0 + rank, 100.0, [float(rank)] * 2)
        w, b, scale = out["grads"]
        assert w == [[2.5] * 3] * 2  # (1 row of 1, 2 rows of 2) summed per rank: 1 and 4, averaged
        assert b == [rank + 1.0] * 2  # this rank's rows, not averaged
        assert scale == [3.0 * (rank + 1) ** 2] * (rank + 1)  # this rank's x.sum()


def copy_worker(rank):
    import copy
    import pickle

    import ddpc.distributed as dist
    from ddpc import nn
    from ddpc.distributed.algorithms.ddp_comm_hooks import default_hooks

    dist.init_process_group("cpu", timeout=60)
    m = model(seed=rank)
    ddp = nn.parallel.DistributedDataParallel(m)
    ddp.register_comm_hook(None, default_hooks.fp16_compress_hook)
    ddp.require_backward_grad_sync = False
    # one rank alone (a snapshot of the model): making the copy communicates nothing, so it can't hang
    snapshot = copy.deepcopy(ddp).module[0].weight.tolist() if rank == 0 else m[0].weight.tolist()
    twin = copy.deepcopy(ddp)
    out = {"copy": (type(twin).__name__, twin.module is not m, twin.process_group is dist.group.WORLD,
                    twin.require_backward_grad_sync), "snapshot": snapshot == m[0].weight.tolist()}
    twin.require_backward_grad_sync = True
    out["twin"] = _ddp_grads(rank, twin)  # the default all-reduce: the hook is not carried over
    out["original_grad"] = m[0].weight.grad
    loaded = pickle.loads(pickle.dumps(ddp))
    loaded.require_backward_grad_sync = True
    out["loaded"] = _ddp_grads(rank, loaded)
    sub = dist.new_group([0, 1])
    try:
        copy.deepcopy(nn.parallel.DistributedDataParallel(model(), process_group=sub))
    except RuntimeError as e:
        out["subgroup"] = str(e)
    dist.destroy_process_group()
    return out


def test_deepcopy_and_pickle_give_a_working_ddp_over_the_default_group():
    local = [_one_process_grads(r) for r in range(2)]
    exact = {n: (local[0][n] + local[1][n]) / 2 for n in local[0]}
    for out in ddpc.spawn(copy_worker, nprocs=2):
        assert out["copy"] == ("DistributedDataParallel", True, True, False) and out["snapshot"]
        assert_params_close(out["twin"], exact, atol=1e-6)
        assert_params_close(out["loaded"], exact, atol=1e-6)
        assert out["original_grad"] is None
        assert out["subgroup"].startswith("DDP Pickling/Unpickling are only supported when using DDP with the default")


def _penalised_loss(m, xb, yb):
    """Cross entropy plus a gradient penalty on the input (create_graph), as in WGAN-GP."""
    from ddpc import nn

    xb = xb.requires_grad_(True)
    out = m(xb)
    (gx,) = ddpc.autograd.grad(out.sum(), xb, create_graph=True)
    return nn.CrossEntropyLoss()(out, yb) + ((gx.norm(dim=1) - 1) ** 2).mean()


def penalty_worker(rank, world, batch, steps):
    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu")
    X, y = data(world * batch * steps)
    ddp = nn.parallel.DistributedDataParallel(model())
    opt = ddpc.optim.SGD(ddp.parameters(), lr=0.1)
    for s in range(steps):
        lo = (s * world + rank) * batch
        opt.zero_grad()
        _penalised_loss(ddp, ddpc.from_numpy(X[lo:lo + batch]), ddpc.from_numpy(y[lo:lo + batch])).backward()
        opt.step()
    out = params(ddp.module)
    dist.destroy_process_group()
    return out


def test_gradient_penalty_under_ddp_equals_one_process():
    world, batch, steps = 2, 6, 3
    X, y = data(world * batch * steps)
    m = model()
    opt = ddpc.optim.SGD(m.parameters(), lr=0.1)
    for s in range(steps):
        lo, hi = s * world * batch, (s + 1) * world * batch
        opt.zero_grad()
        _penalised_loss(m, ddpc.from_numpy(X[lo:hi]), ddpc.from_numpy(y[lo:hi])).backward()
        opt.step()
    for r in ddpc.spawn(penalty_worker, args=(world, batch, steps), nprocs=world):
        assert_params_close(r, params(m))


def create_graph_worker(rank):
    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu")
    X, y = data(8)
    ddp = nn.parallel.DistributedDataParallel(model())
    xb, yb = ddpc.from_numpy(X[rank * 4:rank * 4 + 4]), ddpc.from_numpy(y[rank * 4:rank * 4 + 4])
    with pytest.raises(RuntimeError, match="create_graph=True. is not supported"):
        nn.CrossEntropyLoss()(ddp(xb), yb).backward(create_graph=True)
    for p in ddp.parameters():  # the refused pass left recorded gradients behind
        p.grad = None
    nn.CrossEntropyLoss()(ddp(xb), yb).backward()
    out = {k: v.grad.numpy().copy() for k, v in ddp.module.named_parameters()}
    dist.destroy_process_group()
    return out


def test_backward_with_create_graph_is_refused_before_communicating_and_training_goes_on():
    a, b = ddpc.spawn(create_graph_worker, nprocs=2)
    assert_params_close(a, b, atol=0)  # the next, ordinary step averaged as usual
    dp = ddpc.nn.DataParallel(model(), device_ids=["cpu", "cpu"])
    X, y = data(4)
    with pytest.raises(RuntimeError, match="DataParallel: backward.create_graph=True. is not supported"):
        ddpc.nn.CrossEntropyLoss()(dp(ddpc.from_numpy(X)), ddpc.from_numpy(y)).backward(create_graph=True)


def mismatched_worker(rank):
    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu")
    try:
        nn.parallel.DistributedDataParallel(model(hidden=HIDDEN + rank))
    except RuntimeError as e:
        return str(e)
    finally:
        dist.destroy_process_group()
    return "no error"


def test_mismatched_models_are_refused_at_construction():
    msgs = ddpc.spawn(mismatched_worker, nprocs=2)
    for m in msgs:
        assert "differs between ranks 0 and 1" in m and "0.weight" in m


def unused_worker(rank, find_unused, hidden=HIDDEN):
    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu")
    X, y = data(32, seed=rank)
    ddp = nn.parallel.DistributedDataParallel(model(extra=True, hidden=hidden), find_unused_parameters=find_unused)
    opt = ddpc.optim.SGD(ddp.parameters(), lr=0.1)
    try:
        for _ in range(3):
            opt.zero_grad()
            nn.CrossEntropyLoss()(ddp(ddpc.from_numpy(X)), ddpc.from_numpy(y)).backward()
            opt.step()
    except RuntimeError as e:
        return str(e)
    finally:
        dist.destroy_process_group()
    return params(ddp.module)


@pytest.mark.parametrize("hidden", [HIDDEN, WIDE])
def test_unused_parameter_without_find_unused_is_a_clear_error(hidden):
    msgs = ddpc.spawn(unused_worker, args=(False, hidden), nprocs=2)
    for m in msgs:
        assert isinstance(m, str) and "got no gradient" in m and "unused.weight" in m
        assert "find_unused_parameters=True" in m


def gpu_ids_worker(rank):
    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu")
    try:
        for ids in ([rank], [f"cuda:{rank}"]):  # a GPU script's DDP(model, device_ids=[local_rank]) on a CPU host
            with pytest.raises(ValueError, match=r"only work with single-device/multiple-device GPU modules or "
                               rf"CPU modules, but got device_ids \['?(cuda:)?{rank}'?\], output_device None, and "
                               r"module parameters \{device\(type='cpu'\)\}.*pass device_ids=None"):
                nn.parallel.DistributedDataParallel(model(), device_ids=ids)
        ddp = nn.parallel.DistributedDataParallel(model(), device_ids=None)  # what PyTorch asks for instead
        return ddp.module[0].weight.device.type
    finally:
        dist.destroy_process_group()


@pytest.mark.skipif(ddpc.cuda.is_available(), reason="needs a machine without a usable GPU")
def test_gpu_device_ids_without_a_gpu_raise_pytorchs_value_error():
    assert ddpc.spawn(gpu_ids_worker, nprocs=2) == ["cpu", "cpu"]


def test_find_unused_parameters_keeps_ranks_identical():
    results = ddpc.spawn(unused_worker, args=(True,), nprocs=2)
    assert_params_close(results[0], results[1], atol=0)


def _TwoHeads():
    from ddpc import nn

    class TwoHeads(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = model()
            self.aux = nn.Linear(CLASSES, 2)
            self.never = nn.Linear(3, 3)

        def forward(self, x):
            h = self.body(x)
            return {"cls": h, "aux": self.aux(h)}

    return TwoHeads()


def unused_by_loss_worker(rank, options):
    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu")
    X, y = data(32, seed=rank)
    m = _TwoHeads()
    ddp = nn.parallel.DistributedDataParallel(m, bucket_cap_mb=0.0001, **options)
    if options.get("static_graph") is None:
        ddp._set_static_graph()
    grads = []
    for i in range(3):  # the next iteration would raise if a reduction had not finished
        ddp.zero_grad()
        # rank 1 leaves the aux head out of its loss in the last iteration only, rank 0 always
        out = ddp(ddpc.from_numpy(X[i * 8:i * 8 + 8]))
        loss = nn.CrossEntropyLoss()(out["cls"], ddpc.from_numpy(y[i * 8:i * 8 + 8]))
        if rank == 1 and i < 2:
            loss = loss + out["aux"].sum()
        loss.backward()
        grads.append({n: None if p.grad is None else p.grad.numpy().copy() for n, p in m.named_parameters()})
    dist.destroy_process_group()
    return grads


def _local_grads(rank, i, with_aux):
    from ddpc import nn

    X, y = data(32, seed=rank)
    m = _TwoHeads()
    out = m(ddpc.from_numpy(X[i * 8:i * 8 + 8]))
    loss = nn.CrossEntropyLoss()(out["cls"], ddpc.from_numpy(y[i * 8:i * 8 + 8]))
    (loss + out["aux"].sum() if with_aux else loss).backward()
    return {n: p.grad for n, p in m.named_parameters()}


@pytest.mark.parametrize("options", [{"find_unused_parameters": True}, {"static_graph": True},
                                     {"static_graph": None}], ids=["find_unused", "static_graph", "set_static_graph"])
def test_outputs_left_out_of_the_loss_and_parameters_never_used_get_no_gradient(options):
    """As PyTorch's: parameters forward used but the loss does not reach are
    ready with no gradient, averaged with the ranks whose loss reached them;
    None where no rank's did; and the same with a static graph."""
    results = ddpc.spawn(unused_by_loss_worker, args=(options,), nprocs=2)
    for i in range(3):
        local = [_local_grads(rank, i, with_aux=rank == 1 and i < 2) for rank in range(2)]
        for got in (results[0][i], results[1][i]):
            assert got["never.weight"] is None and got["never.bias"] is None
            for n, g in got.items():
                if n.startswith("body."):
                    np.testing.assert_allclose(g, (local[0][n].numpy() + local[1][n].numpy()) / 2, atol=1e-6,
                                               err_msg=n)
            if i < 2:  # rank 1's loss reached the aux head: half its gradient everywhere
                np.testing.assert_allclose(got["aux.weight"], local[1]["aux.weight"].numpy() / 2, atol=1e-6)
            else:
                assert got["aux.weight"] is None and got["aux.bias"] is None


def skip_left_out_worker(rank):
    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu")
    m = _TwoHeads()
    ddp = nn.parallel.DistributedDataParallel(m, find_unused_parameters=True, skip_all_reduce_unused_params=True)
    before = m.aux.weight.numpy().copy()
    opt = ddpc.optim.SGD(ddp.parameters(), lr=0.1, weight_decay=0.1)
    X, y = data(16, seed=rank)
    for i in range(2):
        opt.zero_grad()
        nn.CrossEntropyLoss()(ddp(ddpc.from_numpy(X[i * 8:i * 8 + 8]))["cls"], ddpc.from_numpy(y[i * 8:i * 8 + 8])
                              ).backward()
        assert m.aux.weight.grad is None and m.never.weight.grad is None
        opt.step()
    dist.destroy_process_group()
    return np.array_equal(m.aux.weight.numpy(), before)


def test_skipping_unused_parameters_leaves_an_output_no_loss_reaches_alone():
    """With skip_all_reduce_unused_params, a head every rank leaves out of the
    loss keeps .grad None (it got zeros), so weight decay leaves it as it was."""
    assert ddpc.spawn(skip_left_out_worker, nprocs=2) == [True, True]


def join_worker(rank, hidden=HIDDEN):
    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu")
    X, y = data(64, seed=rank)
    ddp = nn.parallel.DistributedDataParallel(model(hidden=hidden))
    opt = ddpc.optim.SGD(ddp.parameters(), lr=0.1)
    with ddp.join():
        for i in range(2 + 3 * rank):
            opt.zero_grad()
            nn.CrossEntropyLoss()(ddp(ddpc.from_numpy(X[i * 8:i * 8 + 8])), ddpc.from_numpy(y[i * 8:i * 8 + 8])
                                  ).backward()
            opt.step()
    out = params(ddp.module)
    dist.destroy_process_group()
    return out


@pytest.mark.parametrize("hidden", [HIDDEN, WIDE])
def test_join_lets_uneven_ranks_finish_with_identical_models(hidden):
    results = ddpc.spawn(join_worker, args=(hidden,), nprocs=2)
    assert_params_close(results[0], results[1], atol=0)


def join_error_worker(rank):
    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu", timeout=30)
    X, y = data(80, seed=rank)
    ddp = nn.parallel.DistributedDataParallel(model())
    opt = ddpc.optim.SGD(ddp.parameters(), lr=0.1)
    steps = 0
    try:
        with ddp.join():
            for i in range(10):
                if rank == 1 and i == 3:
                    raise ValueError("bad batch")
                opt.zero_grad()
                nn.CrossEntropyLoss()(ddp(ddpc.from_numpy(X[i * 8:i * 8 + 8])), ddpc.from_numpy(y[i * 8:i * 8 + 8])
                                      ).backward()
                opt.step()
                steps += 1
    except ValueError as e:
        return f"raised {e} after {steps} steps"
    except ddpc.DistError:
        return f"peer failed after {steps} steps"
    return f"finished {steps} steps"


def test_an_exception_inside_join_is_raised_at_once_not_shadowed():
    results = ddpc.spawn(join_error_worker, nprocs=2)
    assert results[1] == "raised bad batch after 3 steps", results
    assert results[0].startswith("peer failed after") and results[0] != "peer failed after 10 steps", results


STEPS_OF_RANK = (4, 2)  # uneven inputs: rank 1 runs out after two steps


def join_zero_worker(rank, throw=False, hidden=HIDDEN):
    """DDP and a ZeroRedundancyOptimizer (Adam) under one Join."""
    import ddpc.distributed as dist
    from ddpc import nn
    from ddpc.distributed.algorithms.join import Join

    dist.init_process_group("cpu")
    X, y = data(64, seed=rank)
    ddp = nn.parallel.DistributedDataParallel(model(hidden=hidden))
    opt = ddpc.optim.ZeroRedundancyOptimizer(ddp.parameters(), optimizer_class=ddpc.optim.Adam, lr=0.01)
    try:
        with Join([ddp, opt], throw_on_early_termination=throw):
            for i in range(STEPS_OF_RANK[rank]):
                opt.zero_grad()
                nn.CrossEntropyLoss()(ddp(ddpc.from_numpy(X[i * 8:i * 8 + 8])), ddpc.from_numpy(y[i * 8:i * 8 + 8])
                                      ).backward()
                opt.step()
    except RuntimeError as e:
        return f"raised: {e}"
    finally:
        out = params(ddp.module)
        dist.destroy_process_group()
    return out


@pytest.mark.parametrize("hidden", [HIDDEN, WIDE])
def test_join_with_zero_matches_one_process_averaging_over_the_world(hidden):
    """Each step's gradient is the active ranks' sum over the world size (rank 1
    adds zeros once it has joined); the joined rank keeps stepping its shard
    of Adam's state, so the result is one process's Adam on those gradients."""
    from ddpc import nn

    results = ddpc.spawn(join_zero_worker, args=(False, hidden), nprocs=2)
    m = model(hidden=hidden)
    opt = ddpc.optim.Adam(m.parameters(), lr=0.01)
    batches = [data(64, seed=r) for r in range(2)]
    for i in range(max(STEPS_OF_RANK)):
        grads = [ddpc.zeros_like(p) for p in m.parameters()]
        for r, (X, y) in enumerate(batches):
            if i < STEPS_OF_RANK[r]:
                m.zero_grad()
                nn.CrossEntropyLoss()(m(ddpc.from_numpy(X[i * 8:i * 8 + 8])), ddpc.from_numpy(y[i * 8:i * 8 + 8])
                                      ).backward()
                grads = [g + p.grad / 2 for g, p in zip(grads, m.parameters())]
        for p, g in zip(m.parameters(), grads):
            p.grad = g
        opt.step()
    assert_params_close(results[0], results[1], atol=0)
    assert_params_close(results[0], params(m), atol=1e-6)


def uneven_batch_worker(rank, tied):
    """Rank 1's second batch is shorter than rank 0's, so that weight's rows are
    not exchanged that step; with `tied` the hidden layer runs twice (its
    weight gets two gradients, summed before DDP sees them)."""
    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu")
    m = model(hidden=WIDE)
    ddp = nn.parallel.DistributedDataParallel(_Tied(m) if tied else m)
    opt = ddpc.optim.SGD(ddp.parameters(), lr=0.1)
    X, y = data(64)
    exchanged = []
    for lo, n in BATCHES_OF_RANK[rank]:
        opt.zero_grad()
        nn.CrossEntropyLoss()(ddp(ddpc.from_numpy(X[lo:lo + n])), ddpc.from_numpy(y[lo:lo + n])).backward()
        exchanged.append(ddp._exchange.exchanged if ddp._exchange else None)
        opt.step()
    out = params(m)
    dist.destroy_process_group()
    return out, exchanged


BATCHES_OF_RANK = [[(0, 8), (16, 8), (32, 8)], [(8, 8), (24, 5), (40, 8)]]


def _Tied(body):
    from ddpc import nn

    class Tied(nn.Module):
        def __init__(self):
            super().__init__()
            self.body = body

        def forward(self, x):
            h = self.body[1](self.body[0](x))
            return self.body[4](self.body[3](self.body[2](self.body[2](h))))

    return Tied()


@pytest.mark.parametrize("tied", [False, True])
def test_weights_not_exchanged_on_every_rank_are_all_reduced(tied):
    from ddpc import nn

    results = ddpc.spawn(uneven_batch_worker, args=(tied,), nprocs=2)
    # tied: computed by every rank in the first step, the weight goes to the buckets for good
    assert results[0][1] == results[1][1] == ([None, None, None] if tied else [1, 0, 1])
    m = model(hidden=WIDE)
    net = _Tied(m) if tied else m
    opt = ddpc.optim.SGD(m.parameters(), lr=0.1)
    X, y = data(64)
    for step in range(3):
        grads = [ddpc.zeros_like(p) for p in m.parameters()]
        for r in range(2):
            lo, n = BATCHES_OF_RANK[r][step]
            m.zero_grad()
            nn.CrossEntropyLoss()(net(ddpc.from_numpy(X[lo:lo + n])), ddpc.from_numpy(y[lo:lo + n])).backward()
            grads = [g + p.grad / 2 for g, p in zip(grads, m.parameters())]
        for p, g in zip(m.parameters(), grads):
            p.grad = g
        opt.step()
    assert_params_close(results[0][0], results[1][0], atol=0)
    assert_params_close(results[0][0], params(m))


def _bn_batch(s):
    return ddpc.from_numpy(np.arange(12, dtype=np.float32).reshape(4, 3) * (s + 1) + 10.0 * s)


def join_buffers_worker(rank, world):
    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu")
    ddpc.manual_seed(0)
    m = nn.Sequential(nn.Linear(3, 3), nn.BatchNorm1d(3))
    ddp = nn.parallel.DistributedDataParallel(m)
    with ddp.join():
        for s in range(1 + 2 * rank):  # the last rank runs longest; rank 0 joins first
            ddp.zero_grad()
            ddp(_bn_batch(s)).sum().backward()
    out = {k: v.numpy().copy() for k, v in m.named_buffers()}
    dist.destroy_process_group()
    return out


def test_join_keeps_the_buffers_of_the_ranks_still_active():
    """Once rank 0 has joined, the highest active rank's buffers (BatchNorm's
    running statistics) are broadcast, not rank 0's stale ones, as in
    PyTorch: here every step but the first runs on the last rank only, so
    every rank ends with the statistics of the last rank's batches alone."""
    results = ddpc.spawn(join_buffers_worker, args=(3,), nprocs=3)
    ddpc.manual_seed(0)
    m = ddpc.nn.Sequential(ddpc.nn.Linear(3, 3), ddpc.nn.BatchNorm1d(3))
    for s in range(5):
        m(_bn_batch(s))
    for got in results:
        assert int(got["1.num_batches_tracked"]) == 5
        np.testing.assert_allclose(got["1.running_mean"], m[1].running_mean.numpy(), rtol=1e-6)
        np.testing.assert_allclose(got["1.running_var"], m[1].running_var.numpy(), rtol=1e-6)


def hook_twice_worker(rank):
    import ddpc.distributed as dist
    from ddpc import nn
    from ddpc.distributed.algorithms.ddp_comm_hooks import debugging_hooks

    dist.init_process_group("cpu")
    ddp = nn.parallel.DistributedDataParallel(model())
    ddp.register_comm_hook(None, debugging_hooks.noop_hook)
    try:
        with pytest.raises(RuntimeError, match="can only be called once"):
            ddp.register_comm_hook(None, debugging_hooks.noop_hook)
        with pytest.raises(RuntimeError, match="can only be called once"):
            ddp._register_builtin_comm_hook(dist.BuiltinCommHookType.ALLREDUCE)
    finally:
        dist.destroy_process_group()
    return True


def test_a_comm_hook_is_registered_once():
    assert ddpc.spawn(hook_twice_worker, nprocs=2) == [True, True]


def test_join_throw_on_early_termination_raises_on_every_rank():
    results = ddpc.spawn(join_zero_worker, args=(True,), nprocs=2)
    assert all(isinstance(r, str) and "throw_on_early_termination" in r for r in results), results


def counting_worker(rank, iterations):
    """A Joinable of its own: every iteration all-reduces a one; a joined rank adds zeros."""
    import ddpc.distributed as dist
    from ddpc.distributed.algorithms import Join, JoinHook, Joinable

    class Counter(Joinable):
        def __init__(self):
            self.total, self.last = 0, None

        def step(self):
            Join.notify_join_context(self)
            self.add(1)

        def add(self, value):
            t = ddpc.full((1,), value, dtype="int64")
            dist.all_reduce(t)
            self.total += int(t.item())

        def join_hook(self, **kwargs):
            counter = self

            class Hook(JoinHook):
                def main_hook(self):
                    counter.add(0)

                def post_hook(self, is_last_joiner):
                    counter.last = is_last_joiner

            return Hook()

        join_device = "cpu"
        join_process_group = None

    dist.init_process_group("cpu")
    counter = Counter()
    with Join([counter]):
        for _ in range(iterations[rank]):
            counter.step()
    dist.destroy_process_group()
    return counter.total, counter.last


def test_join_runs_any_joinables_hooks_until_every_rank_is_done():
    # Iterations 3, 2 and 1 ranks long: 3 + 2 + 1 ones, summed on every rank; rank 1 leaves last.
    assert ddpc.spawn(counting_worker, args=((1, 3, 2),), nprocs=3) == [(6, False), (6, True), (6, False)]


def test_join_refuses_what_is_not_a_joinable():
    from ddpc.distributed.algorithms import Join
    with pytest.raises(ValueError, match="at least one joinable"):
        Join([])
    with pytest.raises(TypeError, match="Joinable objects"):
        Join([object()])


def torch_arguments_worker(rank):
    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu")
    m = model(seed=rank)  # different on each rank: init_sync=False keeps them so
    ddp = nn.parallel.DistributedDataParallel(m, None, None, 0, True, False, bucket_cap_mb=None, static_graph=True,
                                              check_reduction=False)
    ddp._set_static_graph()
    out = params(ddp.module)
    with np.testing.assert_raises(ValueError):
        nn.parallel.DistributedDataParallel(model(), dim=1)
    dist.destroy_process_group()
    return out


def test_pytorch_constructor_arguments_are_taken():
    results = ddpc.spawn(torch_arguments_worker, nprocs=2)
    assert not np.allclose(results[0]["0.weight"], results[1]["0.weight"])


def _two_branches():
    from ddpc import nn

    class TwoBranches(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(4, 2), nn.Linear(4, 2)

        def forward(self, x, use_b=True):
            return self.a(x) + self.b(x) if use_b else self.a(x)

    ddpc.manual_seed(0)
    return TwoBranches()


def _with_big():
    """A small layer and a parameter of 1.2 MB, alone in the first bucket, whose
    gradient backward does not write into the bucket (an elementwise use)."""
    from ddpc import nn

    class WithBig(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.big = nn.Parameter(ddpc.ones(300000))

        def forward(self, x, use_big):
            out = self.lin(x).sum()
            return out + (self.big * 0.5).sum() if use_big else out

    ddpc.manual_seed(0)
    return WithBig()


def semantics_worker(rank, scenario):
    """One PyTorch DDP behaviour per scenario; returns what the test compares across ranks."""
    import contextlib
    import dataclasses
    import time

    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu")
    x = ddpc.from_numpy(np.full((2, 4), rank + 1.0, dtype=np.float32))  # rank r's gradients are (r + 1) * ...
    DDP = nn.parallel.DistributedDataParallel
    try:
        if scenario == "frozen_broadcast":  # frozen parameters are rank 0's too
            ddpc.manual_seed(rank)
            m = nn.Sequential(nn.Linear(3, 3), nn.Linear(3, 2))
            m[0].requires_grad_(False)
            return params(DDP(m).module)
        if scenario == "unused_everywhere":  # a parameter no rank used keeps .grad None
            ddp = DDP(_two_branches(), find_unused_parameters=True)
            ddp(x, False).sum().backward()
            return ddp.module.b.weight.grad, ddp.module.a.weight.grad.numpy().tolist()
        if scenario == "unused_after_no_sync":  # a gradient accumulated under no_sync is reduced, not zeroed
            ddp = DDP(_two_branches(), find_unused_parameters=True)
            with ddp.no_sync():
                ddp(x, True).sum().backward()
            ddp(x, False).sum().backward()
            return ddp.module.b.weight.grad.numpy().tolist()
        if scenario == "used_on_one_rank":  # a parameter alone in its bucket, used by rank 0 only
            ddp = DDP(_with_big(), find_unused_parameters=True)
            ddp(x, rank == 0).backward()
            return ddp.module.big.grad.numpy()[:3].tolist()
        if scenario == "hook_on_one_rank":  # a bias alone in its bucket whose gradient a hook replaces on rank 0
            ddpc.manual_seed(0)
            m = nn.Linear(600, 600)
            if rank == 0:
                m.bias.register_hook(lambda g: g * 3)
            ddp = DDP(m)
            ddp(ddpc.ones(1, 600)).sum().backward()
            return m.bias.grad.numpy()[:3].tolist()
        if scenario == "late_post_hook":  # hooks registered after DDP's still see this rank's own gradient
            m = nn.Linear(4, 2)
            ddp = DDP(m)
            seen = []

            def slow_hook(p):  # (time enough for a bucket's all-reduce launched before it to finish)
                time.sleep(0.2)
                seen.append(float(p.grad.numpy().sum()))

            for p in m.parameters():
                p.register_post_accumulate_grad_hook(slow_hook)
            (ddp(x).sum() * (rank + 1)).backward()
            return sorted(seen), float(m.weight.grad.numpy().sum())
        if scenario == "eval_mode":  # eval() does not turn the reduction off
            ddp = DDP(_two_branches()).eval()
            ddp(x).sum().backward()
            return ddp.module.a.weight.grad.numpy().tolist()
        if scenario == "skip_backward":  # a forward without backward, then two forwards and one backward
            ddp = DDP(_two_branches())
            ddp(x)
            (ddp(x).sum() + ddp(x).sum()).backward()
            return ddp.module.a.weight.grad.numpy().tolist()
        if scenario == "dataclass_output":  # find_unused_parameters walks dataclass outputs
            @dataclasses.dataclass
            class Out:
                y: object

            class Wrapped(nn.Module):
                def __init__(self):
                    super().__init__()
                    self.inner = _two_branches()

                def forward(self, x):
                    return Out(self.inner(x))

            ddp = DDP(Wrapped(), find_unused_parameters=True)
            ddp(x).y.sum().backward()
            return ddp.module.inner.a.weight.grad.numpy().tolist()
        if scenario in ("join_no_sync", "join_lone_bucket"):  # uneven inputs with no_sync or lone buckets
            m = _two_branches() if scenario == "join_no_sync" else _with_big()
            ddp = DDP(m)
            opt = ddpc.optim.SGD(ddp.parameters(), lr=0.1)
            with ddp.join():
                for i in range(1 + 2 * rank):
                    if i % 2 and scenario == "join_no_sync":
                        with ddp.no_sync():
                            ddp(x).sum().backward()
                        continue
                    (ddp(x).sum() if scenario == "join_no_sync" else ddp(x, True)).backward()
                    opt.step()
                    opt.zero_grad()
            return params(m)
        if scenario == "bucket_gradients":  # GradBucket.gradients(): per-parameter views of the flat bucket
            ddp = DDP(_two_branches())
            seen = []

            def hook(state, bucket):
                grads = bucket.gradients()
                seen.append([(tuple(g.shape), tuple(p.shape), g.data_ptr() - bucket.buffer().data_ptr())
                             for g, p in zip(grads, bucket.parameters())])
                return nn.parallel.allreduce_hook(state, bucket)

            ddp.register_comm_hook(None, hook)
            ddp(x).sum().backward()
            return seen
        if scenario == "join_throw":  # every rank raises as soon as rank 0 runs out
            ddp = DDP(_two_branches())
            try:
                with ddp.join(throw_on_early_termination=True):
                    for _ in range(1 + 2 * rank):
                        ddp(x).sum().backward()
            except RuntimeError as e:
                return "raised" if "throw_on_early_termination" in str(e) else str(e)
            return "no error"
        if scenario == "join_active_average":  # gradients averaged over the ranks still active
            ddp = DDP(_two_branches())
            grads = []
            with ddp.join(divide_by_initial_world_size=False):
                for _ in range(1 + rank):
                    ddp.zero_grad()
                    ddp(x).sum().backward()
                    grads.append(ddp.module.a.weight.grad.numpy()[0, 0].item())
            return grads[-1] if rank == 1 else None
        if scenario == "buffer_sync_rule":  # buffers broadcast before a forward that follows a reducing one
            lin = nn.Linear(4, 3)
            lin.register_buffer("seen", ddpc.zeros(1))
            ddp, seen = DDP(lin), []

            def step(fill, *, grad=True, sync=True, ranks=(0, 1)):
                if rank not in ranks:
                    return
                if fill is not None:
                    lin.seen.fill_(fill)
                with ddpc.set_grad_enabled(grad), (contextlib.nullcontext() if sync else ddp.no_sync()):
                    out = ddp(x).sum()
                    if grad:
                        out.backward()
                seen.append((lin.seen.item(), ddp.require_forward_param_sync))

            step(10.0 * (rank + 1))  # the first forward broadcasts
            step(None, grad=False)  # so does the first one after a reducing forward
            step(rank + 1.0, grad=False, ranks=(0,))  # later evaluation on rank 0 alone communicates nothing
            step(None, grad=False, ranks=(0,))
            step(rank + 1.0)  # nor does the forward after it
            step(None, sync=False)  # this one follows a reducing forward
            step(rank + 1.0)  # and this one a forward under no_sync
            return seen
        raise ValueError(scenario)
    finally:
        dist.destroy_process_group()


@pytest.mark.parametrize("scenario", ["frozen_broadcast", "unused_everywhere", "unused_after_no_sync",
                                      "used_on_one_rank", "hook_on_one_rank", "eval_mode", "skip_backward",
                                      "dataclass_output", "join_no_sync", "join_lone_bucket", "join_throw",
                                      "join_active_average", "bucket_gradients", "buffer_sync_rule", "late_post_hook"])
def test_ddp_behaves_as_pytorch_ddp(scenario):
    r0, r1 = ddpc.spawn(semantics_worker, args=(scenario,), nprocs=2)
    if isinstance(r0, dict):
        assert_params_close(r0, r1, atol=0)
    elif scenario == "buffer_sync_rule":
        flags = [True, False, False, False, True, False, True]
        assert r0 == list(zip([10.0, 10.0, 1.0, 1.0, 1.0, 1.0, 1.0], flags))
        assert r1 == list(zip([10.0, 10.0, 2.0, 1.0, 2.0], [f for i, f in enumerate(flags) if i not in (2, 3)]))
        return
    elif scenario == "late_post_hook":  # rank r: bias 2 entries of 2 (r + 1), weight 8 of 2 (r + 1) ** 2
        assert r0 == ([4.0, 16.0], 40.0) and r1 == ([8.0, 64.0], 40.0)
        return
    elif scenario == "join_active_average":
        assert r1 == 4.0  # rank 1's own gradient (2 rows of 2.0) once rank 0 has joined, not half of it
        return
    else:
        assert r0 == r1
    # Rank r's input is r + 1, so the average gradient of sum(W x) is 1.5 per weight (2 rows of inputs: 3.0).
    if scenario == "unused_everywhere":
        assert r0[0] is None and r0[1] == [[3.0] * 4] * 2
    elif scenario == "unused_after_no_sync":
        assert r0 == [[3.0] * 4] * 2  # (2 + 4) / 2: each rank's accumulated gradient, averaged
    elif scenario == "used_on_one_rank":
        assert r0 == [0.25] * 3  # rank 0's 0.5 and rank 1's nothing (zero), averaged
    elif scenario == "hook_on_one_rank":
        assert r0 == [2.0] * 3  # (3 + 1) / 2
    elif scenario in ("eval_mode", "dataclass_output"):
        assert r0 == [[3.0] * 4] * 2
    elif scenario == "join_throw":
        assert r0 == "raised"
    elif scenario == "bucket_gradients":
        views = [v for bucket in r0 for v in bucket]
        assert len(views) == 4 and all(g == p for g, p, _ in views)
        for bucket in r0:  # consecutive views, each starting where the previous parameter ends
            offsets = [off for _, _, off in bucket]
            sizes = [int(np.prod(shape)) * 4 for shape, _, _ in bucket]
            assert offsets == [sum(sizes[:i]) for i in range(len(sizes))]
    elif scenario == "skip_backward":
        assert r0 == [[6.0] * 4] * 2


def test_data_parallel_cpu_replicas_equal_one_process():
    from ddpc import nn

    X, y = data(3 * 16 * 3)
    ref = train_single(3, batch=16, steps=3)
    dp = nn.DataParallel(model(), device_ids=["cpu", "cpu", "cpu"])
    opt = ddpc.optim.SGD(dp.parameters(), lr=0.1, momentum=0.9)
    for s in range(3):
        opt.zero_grad()
        out = dp(ddpc.from_numpy(X[s * 48:(s + 1) * 48]))
        assert out.shape == (48, CLASSES)
        nn.CrossEntropyLoss()(out, ddpc.from_numpy(y[s * 48:(s + 1) * 48])).backward()
        opt.step()
    assert_params_close(params(dp.module), ref)
    # the replicas are kept, and hold the same weights as the module before each forward
    dp(ddpc.from_numpy(X[:6]))
    for replica in dp._replicas[1:]:
        assert_params_close(params(replica), params(dp.module), atol=0)


def _grads(m):
    return {n: (p.grad.numpy().copy() if p.grad is not None else None) for n, p in m.named_parameters()}


def test_data_parallel_replicas_carry_bool_and_complex_buffers():
    """A bool mask and a complex buffer reach every replica (the broadcast moves any dtype's bytes)."""
    from ddpc import nn

    class Masked(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(4, 4)
            self.register_buffer("mask", ddpc.tensor([True, False, True, True]))
            self.register_buffer("phase", ddpc.tensor([1 + 1j, 2 - 1j]))

        def forward(self, x):
            return self.lin(x) * self.mask + ddpc.view_as_real(self.phase).sum()

    ref, dp = Masked(), nn.DataParallel(Masked(), device_ids=["cpu"] * 2)
    dp.module.load_state_dict(ref.state_dict())
    dp.module.mask.copy_(ddpc.tensor([False, True, True, False]))
    ref.mask.copy_(dp.module.mask)
    x = ddpc.from_numpy(np.arange(24, dtype=np.float32).reshape(6, 4))
    np.testing.assert_allclose(dp(x).numpy(), ref(x).detach().numpy(), rtol=1e-6)
    for replica in dp._replicas[1:]:
        assert replica.mask.tolist() == [False, True, True, False] and replica.phase.tolist() == [1 + 1j, 2 - 1j]


def test_data_parallel_uneven_chunks_and_replicas_without_a_chunk():
    """Batches of 1 on 2 replicas and 4 rows on 3 (chunks 2, 2 and none) give one
    process's gradients, also on the next full batch."""
    from ddpc import nn

    X, y = data(16)
    ref, dp = model(), nn.DataParallel(model(), device_ids=["cpu"] * 3)
    for rows in (slice(0, 1), slice(1, 5), slice(5, 14)):
        for m in (ref, dp):
            m.zero_grad()
            nn.CrossEntropyLoss()(m(ddpc.from_numpy(X[rows])), ddpc.from_numpy(y[rows])).backward()
        got, want = _grads(dp.module), _grads(ref)
        for k in want:
            np.testing.assert_allclose(got[k], want[k], atol=1e-6, err_msg=f"{k} after rows {rows}")


def test_data_parallel_parameter_used_by_some_replicas_only():
    """A parameter only replica 1's chunk uses gets replica 1's gradient (on the
    module, which is replica 0), and nothing stale is left for the next step."""
    from ddpc import nn

    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(4, 2), nn.Linear(4, 2)

        def forward(self, x):
            out = self.a(x).sum()
            return (out + self.b(x).sum() if float(x.numpy()[0, 0]) > 0 else out).reshape(1)

    ddpc.manual_seed(0)
    dp = nn.DataParallel(Branchy(), device_ids=["cpu", "cpu"])
    x = np.ones((4, 4), dtype=np.float32)
    x[:2] = -1  # replica 0's chunk
    for _ in range(2):
        dp.zero_grad()
        dp(ddpc.from_numpy(x)).sum().backward()
        np.testing.assert_allclose(dp.module.b.weight.grad.numpy(), np.full((2, 4), 2.0))  # rows 2 and 3 only
        np.testing.assert_allclose(dp.module.a.weight.grad.numpy(), np.zeros((2, 4)))  # 2 rows of +1, 2 of -1


def test_data_parallel_step_after_a_backward_that_raised():
    """A backward interrupted by an exception leaves nothing behind on the other
    replicas that the next step would add."""
    from ddpc import nn

    class Branchy(nn.Module):
        def __init__(self):
            super().__init__()
            self.a, self.b = nn.Linear(3, 2), nn.Linear(3, 2)

        def forward(self, x):
            y = self.a(x)
            return y + self.b(x) if float(x.numpy()[0, 0]) > 0 else y

    ddpc.manual_seed(0)
    dp = nn.DataParallel(Branchy(), device_ids=["cpu"] * 3)
    x = np.ones((6, 3), dtype=np.float32)
    x[2:4, 0] = -1  # replica 1's chunk skips b

    class Stop(Exception):
        pass

    def stop(g):
        raise Stop

    handle = dp.module.a.weight.register_hook(stop)
    with pytest.raises(Stop):
        dp(ddpc.from_numpy(x)).sum().backward()
    handle.remove()
    dp.zero_grad()
    dp(ddpc.from_numpy(x)).sum().backward()
    want = x[[0, 1, 4, 5]].sum(0, keepdims=True).repeat(2, 0)  # the rows of the chunks that use b
    np.testing.assert_allclose(dp.module.b.weight.grad.numpy(), want)


def test_data_parallel_modes_frozen_parameters_inputs_and_outputs():
    from ddpc import nn

    ddpc.manual_seed(0)
    m = nn.Sequential(nn.Linear(4, 4), nn.Dropout(0.5))
    dp = nn.DataParallel(m, device_ids=["cpu", "cpu"])
    dp.eval()  # reaches every replica: no dropout anywhere
    out = dp(ddpc.ones(4, 4)).numpy()
    np.testing.assert_array_equal(out[2:], out[:2])

    # A frozen parameter changed by load_state_dict, and one unfrozen after wrapping.
    lin = nn.Linear(3, 1)
    lin.weight.requires_grad_(False)
    dp = nn.DataParallel(lin, device_ids=["cpu", "cpu"])
    state = lin.state_dict()
    state["weight"] = ddpc.full((1, 3), 5.0)
    lin.load_state_dict(state)
    x = ddpc.from_numpy(np.arange(12, dtype=np.float32).reshape(4, 3))
    np.testing.assert_allclose(dp(x).numpy()[:, 0], 5.0 * x.numpy().sum(1) + lin.bias.numpy()[0], rtol=1e-6)
    lin.weight.requires_grad_(True)
    dp(x).sum().backward()
    np.testing.assert_allclose(lin.weight.grad.numpy(), x.numpy().sum(0, keepdims=True))

    # Tensors in keyword arguments and nested containers are scattered; scalars and None gathered.
    class Inputs(nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = nn.Linear(2, 2)

        def forward(self, pair, mask=None):
            out = self.lin(pair[0]) * mask
            return out, out.sum(), None

    dp = nn.DataParallel(Inputs(), device_ids=["cpu", "cpu"])
    x = ddpc.ones(4, 2)
    with pytest.warns(UserWarning, match="scalar outputs"):
        out, total, none = dp([x], mask=ddpc.ones(4, 2))
    assert out.shape == (4, 2) and total.shape == (2,) and none is None
    np.testing.assert_allclose(total.numpy(), out.numpy().reshape(2, 4).sum(1), rtol=1e-6)


NCCL_RANK = r"""
import socket, sys
import numpy as np
sys.path.insert(0, sys.argv[2])
import ddpc, ddpc.distributed as dist
from ddpc import nn
from test_ddp import data, model, params
with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
X, y = data(32)
ddp = nn.parallel.DistributedDataParallel(model().cuda(), device_ids=[0])
opt = ddpc.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
for s in range(4):
    opt.zero_grad()
    xb, yb = ddpc.from_numpy(X[s * 8:s * 8 + 8]), ddpc.from_numpy(y[s * 8:s * 8 + 8]).cuda()
    nn.CrossEntropyLoss()(ddp(xb), yb).backward()
    opt.step()
np.savez(sys.argv[1], **params(ddp.module))
dist.destroy_process_group()
"""


@pytest.mark.gpu
def test_ddp_on_one_nccl_rank_matches_cpu(tmp_path):
    # A fresh interpreter: this process may already hold a CUDA context, which forked ranks cannot use.
    import os
    import subprocess
    import sys
    out = tmp_path / "params.npz"
    res = subprocess.run([sys.executable, "-c", NCCL_RANK, str(out), os.path.dirname(os.path.abspath(__file__))],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    got = dict(np.load(out))
    assert_params_close(got, train_single(1, batch=8, steps=4), atol=1e-4)


@pytest.mark.gpu
def test_data_parallel_one_cuda_device_matches_cpu():
    from ddpc import nn
    X, y = data(32)
    dp = nn.DataParallel(model(), device_ids=[0])
    opt = ddpc.optim.SGD(dp.parameters(), lr=0.1, momentum=0.9)
    for s in range(4):
        opt.zero_grad()
        nn.CrossEntropyLoss()(dp(ddpc.from_numpy(X[s * 8:s * 8 + 8])), ddpc.from_numpy(y[s * 8:s * 8 + 8]).cuda()
                              ).backward()
        opt.step()
    assert_params_close(params(dp.module), train_single(1, batch=8, steps=4), atol=1e-4)


# ---- PyTorch 2.15's further constructor arguments ------------------------------------------------------------------

@contextlib.contextmanager
def _recording_all_reduce():
    """Lists the element count of each dist.all_reduce call inside, in order."""
    import ddpc.distributed as dist

    calls, original = [], dist.all_reduce

    def all_reduce(tensor, *args, **kwargs):
        calls.append(tensor.numel())
        return original(tensor, *args, **kwargs)

    dist.all_reduce = all_reduce
    try:
        yield calls
    finally:
        dist.all_reduce = original


def _scaled_mlp(seed=0):
    """x * scale -> Linear(4, 8) -> tanh -> Linear(8, 2): scale's gradient is the last one backward computes."""
    from ddpc import nn

    class Scaled(nn.Module):
        def __init__(self):
            super().__init__()
            self.scale = nn.Parameter(ddpc.ones(4))
            self.inner, self.out = nn.Linear(4, 8), nn.Linear(8, 2)

        def forward(self, x):
            return self.out(ddpc.tanh(self.inner(x * self.scale)))

    ddpc.manual_seed(seed)
    return Scaled()


def _sized_params(sizes):
    from ddpc import nn

    class Sized(nn.Module):
        def __init__(self):
            super().__init__()
            for i, n in enumerate(sizes):
                setattr(self, f"p{i}", nn.Parameter(ddpc.ones(n)))

        def forward(self, x):
            return sum((p * x).sum() for p in self.parameters())

    return Sized()


def new_arguments_worker(rank, scenario):
    import warnings

    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu", timeout=60)
    DDP = nn.parallel.DistributedDataParallel
    x = ddpc.from_numpy(np.full((2, 4), rank + 1.0, dtype=np.float32))
    try:
        if scenario == "delay_all_reduce":
            X, Y = (ddpc.from_numpy(np.random.default_rng(rank).standard_normal((6, n)).astype(np.float32))
                    for n in (4, 2))
            results = []
            for delay in (False, True):
                m = _scaled_mlp(seed=rank)  # different on each rank: the delayed ones are broadcast too
                kw = {}
                if delay:
                    kw = {"delay_all_reduce_named_params": [("out.weight", m.out.weight), ("out.bias", m.out.bias)],
                          "param_to_hook_all_reduce": m.scale, "bucket_cap_mb_list": [1e-6]}
                ddp = DDP(m, **kw)
                # a hook of another name: every gradient goes through the buckets (no linear weight exchange)
                ddp.register_comm_hook(None, lambda state, bucket: nn.parallel.allreduce_hook(state, bucket))
                opt = ddpc.optim.SGD(m.parameters(), lr=0.1)
                with _recording_all_reduce() as calls:
                    for _ in range(3):
                        opt.zero_grad()
                        ((ddp(X) - Y) ** 2).sum().backward()
                        opt.step()
                results.append((params(m), calls))
            return results
        if scenario == "mixed_precision":
            seen = []

            class Probe(nn.Module):  # what forward computes on
                def __init__(self):
                    super().__init__()
                    self.body = _scaled_mlp()
                    self.register_buffer("stat", ddpc.ones(3))
                    self.register_buffer("count", ddpc.zeros(1, dtype=ddpc.int64))

                def forward(self, x):
                    seen.append((x.dtype.name, self.body.inner.weight.dtype.name, self.stat.dtype.name))
                    return self.body(x)

            mp = nn.parallel._MixedPrecision(param_dtype=ddpc.bfloat16, reduce_dtype=ddpc.float16,
                                             buffer_dtype=ddpc.bfloat16)
            m = Probe()
            ddp = DDP(m, mixed_precision=mp)
            X = ddpc.from_numpy(np.random.default_rng(rank).standard_normal((6, 4)).astype(np.float32))
            out = ddp(X)
            out.sum().backward()
            grads = {n: p.grad.numpy().copy() for n, p in m.body.named_parameters()}
            # by hand: the model in bfloat16, each gradient averaged in float16, back in float32
            ref = _scaled_mlp().to(ddpc.bfloat16)
            ref(X.to(ddpc.bfloat16)).sum().backward()
            expected = {}
            for n, p in ref.named_parameters():
                g = p.grad.to(ddpc.float16)
                dist.all_reduce(g, op=dist.ReduceOp.AVG)
                expected[n] = g.to(ddpc.float32).numpy()
            # and in full precision, for contrast
            full = _scaled_mlp()
            full(X).sum().backward()
            exact = {n: p.grad.numpy() for n, p in full.named_parameters()}
            dtypes = ({n: p.dtype.name for n, p in m.named_parameters()}, {n: p.grad.dtype.name for n, p in
                      m.named_parameters()}, {n: b.dtype.name for n, b in m.named_buffers()}, out.dtype.name)
            with ddp.no_sync():  # accumulates in full precision, locally
                ddp(X).sum().backward()
            ddp(X).sum().backward()
            accumulated = {n: p.grad.numpy().copy() for n, p in m.body.named_parameters()}
            return seen, grads, expected, exact, dtypes, accumulated
        if scenario == "skip_unused":
            out = []
            for skip in (False, True):
                m = _two_branches()
                ddp = DDP(m, find_unused_parameters=True, skip_all_reduce_unused_params=skip,
                          bucket_cap_mb_list=[1e-6])  # a bucket per parameter
                with _recording_all_reduce() as calls:
                    ddp(x, False).sum().backward()
                    first = m.b.weight.grad
                    with ddp.no_sync():
                        ddp(x, True).sum().backward()
                    ddp(x, False).sum().backward()
                out.append((first, m.b.weight.grad.numpy().tolist(), m.a.weight.grad.numpy().tolist(), calls))
            return out
        if scenario == "bucket_cap_mb_list":
            layouts = []
            for caps in (None, [0.0005, 0.001, 0.002]):  # 524, 1048 and 2097 bytes
                m = _sized_params([100, 200, 300, 400, 500])
                ddp = DDP(m, bucket_cap_mb_list=caps)
                index = {id(p): i for i, p in enumerate(m.parameters())}
                layouts.append([[index[id(p)] for p in b.params] for b in ddp._buckets])
                ddp(ddpc.tensor(rank + 1.0)).backward()
                layouts.append(sorted({float(v) for p in m.parameters() for v in p.grad.numpy()}))
            return layouts
        if scenario == "buffer_sync":
            out = []
            for kw in ({}, {"broadcast_buffers": False}, {"forward_sync_buffers": False},
                       {"broadcast_buffers": False, "forward_sync_buffers": True}):
                lin = nn.Linear(4, 3)
                lin.register_buffer("seen", ddpc.full((1,), rank + 1.0))
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    ddp = DDP(lin, **kw)
                at_init = lin.seen.item()
                lin.seen.fill_(10.0 * (rank + 1))
                ddp(x).sum().backward()
                out.append((at_init, lin.seen.item(), ddp.forward_sync_buffers, ddp.broadcast_buffers,
                            [w.category.__name__ for w in caught]))
            ddp.broadcast_buffers = False  # the deprecated name sets the new one
            out.append(ddp.forward_sync_buffers)
            return out
        if scenario == "runtime_stats":
            m = model(extra=True)
            ddp = DDP(m, find_unused_parameters=True, bucket_cap_mb=0.0005)
            ddp._set_ddp_runtime_logging_sample_rate(4)
            X = ddpc.from_numpy(data(4, seed=rank)[0])
            logged = [ddp._get_ddp_logging_data()]
            for i in range(14):
                if i == 5:
                    with ddp.no_sync():
                        ddp(X).sum().backward()
                with ddpc.no_grad():
                    ddp(X)
                ddp(X).square().sum().backward()
                logged.append(ddp._get_ddp_logging_data())
            refused = []
            for bad in (0, 2.5):
                with pytest.raises(ValueError) as e:
                    ddp._set_ddp_runtime_logging_sample_rate(bad)
                refused.append(str(e.value))
            return logged, refused
        if scenario == "manual_finalization":
            def error(fn):
                try:
                    fn()
                except RuntimeError as e:
                    return str(e)
                return None

            X = ddpc.from_numpy(np.random.default_rng(rank).standard_normal((6, FEATURES)).astype(np.float32))
            grads = []
            for manual in (False, True):
                m = model()
                ddp = DDP(m)
                ddp.require_manual_backward_finalization = manual
                out = ddp(X).square().sum()
                if manual:  # from a hook on the first gradient: the other buckets are not ready yet
                    early = []
                    handle = m[4].bias.register_post_accumulate_grad_hook(
                        lambda p: early.append(error(ddp.finalize_backward)))
                out.backward()
                if manual:
                    handle.remove()
                    ddp.finalize_backward()
                grads.append({n: p.grad.numpy().copy() for n, p in m.named_parameters()})
            errors = {"early": early[0], "twice": error(ddp.finalize_backward)}
            ddp(X).sum().backward()  # not finalized: the next forward refuses
            errors["unfinalized"] = error(lambda: ddp(X))
            errors["check"] = error(ddp._check_reducer_finalized)
            errors["switch"] = error(lambda: setattr(ddp, "require_manual_backward_finalization", False))
            ddp.finalize_backward()
            with ddp.no_sync():
                ddp(X).sum().backward()
            errors["no_sync"] = error(ddp.finalize_backward)
            ddp.require_manual_backward_finalization = False
            ddp(X).sum().backward()  # finished by backward again
            errors["not_manual"] = error(ddp.finalize_backward)
            plain = DDP(model())
            methods = (plain.to_kwargs((X, 3), {"k": X}, "cpu"), plain.to_kwargs((), {}, "cpu"),
                       plain.scatter((X,), {}, ["cpu", "cpu"]), plain.gather([X, X], "cpu"))
            return grads, errors, ddp.should_finalize_after_backward, ddp._get_ddp_logging_data(), methods
        raise ValueError(scenario)
    finally:
        dist.destroy_process_group()


def test_manual_backward_finalization_as_pytorch():
    """require_manual_backward_finalization: backward leaves the reduction to
    finalize_backward(), whose gradients equal the automatic ones; its misuses
    raise PyTorch's errors, and DDP's scatter, to_kwargs and gather methods
    and its logging data are there."""
    for rank, (grads, errors, after, info, methods) in enumerate(
            ddpc.spawn(new_arguments_worker, args=("manual_finalization",), nprocs=2)):
        auto, manual = grads
        assert auto.keys() == manual.keys()
        for n in auto:
            np.testing.assert_array_equal(manual[n], auto[n], err_msg=n)
        assert "before every gradient bucket was ready" in errors["early"]
        for key in ("twice", "no_sync"):
            assert "no gradient reduction requires finalization" in errors[key], errors[key]
        for key in ("unfinalized", "check"):
            assert "Expected to have finalized the prior backward pass" in errors[key], errors[key]
        assert "only before forward or after" in errors["switch"]
        assert "manual backward finalization is not required" in errors["not_manual"]
        assert after is False
        assert info["world_size"] == 2 and info["rank"] == rank and info["module_name"] == "Sequential"
        assert info["backend_name"] == "cpu" and info["iteration"] == 3 and info["dtypes"] == "float32"
        assert info["num_parameter_tensors"] == 6
        assert info["total_parameter_size_bytes"] == 4 * (FEATURES * HIDDEN + HIDDEN * HIDDEN + HIDDEN * CLASSES
                                                          + 2 * HIDDEN + CLASSES)
        (moved_args, moved_kwargs), empty, (scattered, skw), gathered = methods
        assert len(moved_args) == len(moved_kwargs) == 1 and moved_args[0][1] == 3 and list(moved_kwargs[0]) == ["k"]
        assert empty == ((), ())
        assert len(scattered) == 2 and [tuple(a[0].shape) for a in scattered] == [(3, FEATURES)] * 2
        assert skw == ({}, {})
        assert tuple(gathered.shape) == (12, FEATURES)


def test_runtime_stats_as_pytorch_logs_them():
    """_get_ddp_logging_data's runtime stats: the first ten reducing
    iterations and every sample_rate-th after are logged at the next reducing
    forward (no_sync and no_grad forwards do not count); the times hold
    together, the averages average the logged ones, and the unused
    parameters' bytes are reported."""
    for logged, refused in ddpc.spawn(new_arguments_worker, args=("runtime_stats",), nprocs=2):
        # reducing iterations 1..14 (one a step); after step i, iteration i is running and the last one
        # sampled before it (1-10, then multiples of 4) is logged
        assert [d["iteration"] for d in logged] == [0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 10, 12, 12]
        assert "backward_comm_time" not in logged[0] and "unused_parameter_size" not in logged[0]
        spans = ["forward_compute_time", "backward_compute_time", "backward_comm_time",
                 "backward_compute_comm_overlap_time"]
        seen = {k: [] for k in spans}
        for before, d in zip(logged, logged[1:]):
            if d["iteration"] == before["iteration"]:
                continue  # (nothing logged since)
            assert d["unused_parameter_size"] == 4 * (3 * 3 + 3)  # the extra Linear(3, 3)
            assert all(d[k] > 0 for k in spans), d
            assert d["backward_compute_comm_overlap_time"] <= d["backward_comm_time"]
            assert d["backward_compute_time_start"] - d["forward_compute_time_start"] == d["forward_compute_time"]
            assert d["backward_comm_time_end"] - d["backward_comm_time_start"] == d["backward_comm_time"]
            assert d["backward_compute_time_start"] < d["backward_comm_time_start"] <= d["backward_compute_time_end"]
            assert d["backward_compute_time_end"] <= d["backward_comm_time_end"]
            for k in spans:
                seen[k].append(d[k])
                # a running mean in integer nanoseconds: within a nanosecond a step of the exact mean
                assert abs(d["avg_" + k] - np.mean(seen[k])) <= len(seen[k]), (k, d["avg_" + k], seen[k])
        assert len(seen["backward_comm_time"]) == 11
        assert all("sample rate should be equal or greater than 1" in e for e in refused), refused


def test_delayed_all_reduce_equals_plain_ddp_and_comes_last():
    ranks = ddpc.spawn(new_arguments_worker, args=("delay_all_reduce",), nprocs=2)
    assert_params_close(ranks[0][1][0], ranks[1][1][0], atol=0)
    for plain, delayed in ranks:
        assert_params_close(delayed[0], plain[0], atol=1e-6)
        # plain: one bucket of all 4 + 32 + 8 + 16 + 2 values; delayed: a bucket per parameter outside
        # out (inner.bias, inner.weight, scale, in reduction order), then out's 16 + 2 values together,
        # although backward computed them first
        assert plain[1] == [62] * 3
        assert delayed[1] == [8, 32, 4, 18] * 3


def test_mixed_precision_equals_its_hand_written_equivalent():
    ranks = ddpc.spawn(new_arguments_worker, args=("mixed_precision",), nprocs=2)
    for seen, grads, expected, exact, dtypes, accumulated in ranks:
        # forward ran on bfloat16 inputs, parameters and buffers (the float ones, cast once)
        assert seen == [("bfloat16", "bfloat16", "bfloat16")] * 3
        params_dtypes, grad_dtypes, buffer_dtypes, out_dtype = dtypes
        assert set(params_dtypes.values()) == set(grad_dtypes.values()) == {"float32"}
        assert buffer_dtypes == {"stat": "bfloat16", "count": "int64"} and out_dtype == "bfloat16"
        assert sorted(grads) == sorted(expected)
        for n in grads:
            np.testing.assert_array_equal(grads[n], expected[n], err_msg=n)
        assert any(not np.array_equal(grads[n], exact[n]) for n in grads)  # not what full precision gives
        for n in accumulated:
            assert accumulated[n].dtype == np.float32
            np.testing.assert_array_equal(accumulated[n], ranks[0][5][n], err_msg=n)  # reduced: equal on every rank
    np.testing.assert_array_equal(ranks[0][1]["inner.weight"], ranks[1][1]["inner.weight"])


def test_skip_all_reduce_unused_params_leaves_unused_gradients_local():
    for rank, (plain, skipped) in enumerate(ddpc.spawn(new_arguments_worker, args=("skip_unused",), nprocs=2)):
        # b is unused in the reducing passes: None at first; then what no_sync accumulated, which plain
        # find_unused_parameters averages ((2 + 4) / 2) and skip_all_reduce_unused_params leaves as it is
        assert plain[0] is None and skipped[0] is None
        assert plain[1] == [[3.0] * 4] * 2
        assert skipped[1] == [[2.0 * (rank + 1)] * 4] * 2
        assert plain[2] == skipped[2] == [[9.0] * 4] * 2  # a is averaged either way
        # a bucket per parameter (b.bias, b.weight, a.bias, a.weight): plain all-reduces every bucket and
        # then the used mask (4 flags); skipping all-reduces a's two buckets only
        assert plain[3] == [2, 8, 2, 8, 4] * 2
        assert skipped[3] == [2, 8] * 2


def test_bucket_cap_mb_list_sizes_the_buckets_in_turn():
    for default, default_grads, listed, listed_grads in ddpc.spawn(new_arguments_worker, args=("bucket_cap_mb_list",),
                                                                    nprocs=2):
        assert default == [[4, 3, 2, 1, 0]]
        # a bucket closes once it reaches its cap: 2000 bytes alone (over 524), 1600 alone (over 1048), then
        # 1200 + 800 + 400 (2400, past 2097)
        assert listed == [[4], [3], [2, 1, 0]]
        assert default_grads == listed_grads == [1.5]


def test_forward_sync_buffers_and_the_deprecated_broadcast_buffers():
    r0, r1 = ddpc.spawn(new_arguments_worker, args=("buffer_sync",), nprocs=2)
    # (buffer after init, after a forward that follows rank r's fill of 10 (r + 1), forward_sync_buffers,
    # broadcast_buffers, warnings)
    assert r0 == [(1.0, 10.0, True, True, []), (1.0, 10.0, False, False, ["FutureWarning"]),
                  (1.0, 10.0, False, False, []), (1.0, 10.0, True, True, ["FutureWarning"]), False]
    assert r1 == [(1.0, 10.0, True, True, []),
                  (2.0, 20.0, False, False, ["FutureWarning"]),  # broadcast_buffers=False: neither at init nor later
                  (1.0, 20.0, False, False, []),  # forward_sync_buffers=False: at init only
                  (1.0, 10.0, True, True, ["FutureWarning"]),  # forward_sync_buffers wins
                  False]


def test_new_constructor_arguments_refuse_bad_values():
    from ddpc import nn

    DDP = nn.parallel.DistributedDataParallel
    m = model()
    with pytest.raises(ValueError, match="need to be set at the same time"):
        DDP(m, delay_all_reduce_named_params=[("0.weight", m[0].weight)])
    with pytest.raises(ValueError, match="need to be set at the same time"):
        DDP(m, param_to_hook_all_reduce=m[0].weight)
    for name in ("skip_all_reduce_unused_params", "batched_grad_copy", "lazy_bucket_allocation"):
        with pytest.raises(TypeError, match=f"{name} must be a bool"):
            DDP(m, **{name: 1})
    with pytest.raises(TypeError, match="_MixedPrecision"):
        DDP(m, mixed_precision={"param_dtype": ddpc.bfloat16})
    with pytest.raises(TypeError, match="floating-point ddpc dtype"):
        nn.parallel._MixedPrecision(param_dtype=ddpc.int32)
    for bad in ([0], [1, -2], ["25"]):
        with pytest.raises(ValueError, match="bucket_cap_mb_list"):
            DDP(m, bucket_cap_mb_list=bad)


def bad_delay_worker(rank):
    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu", timeout=60)
    m, errors = model(), []
    try:
        for named, hooked in (([("0.weight", m[2].weight)], m[0].weight), ([("nope", m[0].weight)], m[0].weight),
                              ([("0.weight", m[0].weight)], ddpc.ones(2))):
            try:
                nn.parallel.DistributedDataParallel(m, delay_all_reduce_named_params=named,
                                                    param_to_hook_all_reduce=hooked)
            except ValueError as e:
                errors.append(str(e).split(",")[0].split(" must")[0])
        return errors
    finally:
        dist.destroy_process_group()


def test_delay_all_reduce_refuses_what_is_not_the_modules():
    for errors in ddpc.spawn(bad_delay_worker, nprocs=2):
        assert errors == ["delay_all_reduce_named_params", "delay_all_reduce_named_params", "param_to_hook_all_reduce"]


def kept_gradient_worker(rank):
    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu")
    ddpc.manual_seed(0)
    m = nn.Sequential(nn.Linear(600, 600), nn.Linear(600, 2))  # the first weight's gradient goes by the exchange
    ddp = nn.parallel.DistributedDataParallel(m)
    ddp(ddpc.ones(4, 600)).sum().backward()
    kept = [p.grad for p in m.parameters()]
    before = [g.clone() for g in kept]
    m.zero_grad(set_to_none=True)
    (ddp(ddpc.ones(4, 600)) * 5).sum().backward()
    unchanged = all(bool((g == b).all()) for g, b in zip(kept, before))
    scaled = all(bool(ddpc.allclose(p.grad, b * 5)) for p, b in zip(m.parameters(), before))
    dist.destroy_process_group()
    return unchanged, scaled


def test_a_gradient_kept_across_steps_keeps_its_values():
    """g = p.grad; zero_grad(); backward: g keeps the earlier step's values, as under PyTorch's DDP (the reducer
    reuses its buckets, which the handed-out gradients are views of)."""
    assert ddpc.spawn(kept_gradient_worker, nprocs=2) == [(True, True)] * 2


def join_broadcast_worker(rank):
    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu")
    m = nn.Sequential(nn.Linear(1, 1), nn.BatchNorm1d(1, momentum=0.5))
    with ddpc.no_grad():
        m[0].weight.fill_(1.0)
        m[0].bias.fill_(0.0)
    ddp = nn.parallel.DistributedDataParallel(m)
    with ddp.join():
        for step in range(2):
            ddp(ddpc.tensor([[1.0 + rank + 10 * step], [3.0 + rank]])).sum().backward()
    mean = m[1].running_mean.item()
    dist.destroy_process_group()
    return mean


def test_buffers_come_from_the_highest_rank_under_join():
    """Under join() the forward broadcasts the buffers of the highest active rank, as PyTorch's, also while every
    rank is active: rank 1's statistics after its first step, then its own second step."""
    first = 0.5 * (2.0 + 4.0) / 2  # rank 1's batch mean, momentum 0.5 from 0
    second = 0.5 * first + 0.5 * (12.0 + 4.0) / 2
    assert ddpc.spawn(join_broadcast_worker, nprocs=2) == [second, second]


def parametrized_worker(rank):
    import ddpc.distributed as dist
    from ddpc import nn
    from ddpc.nn.utils import parametrize

    class Counted(nn.Module):
        calls = 0

        def forward(self, w):
            Counted.calls += 1
            return w * 2

    dist.init_process_group("cpu")
    m = nn.Sequential(nn.Linear(3, 3))
    parametrize.register_parametrization(m[0], "weight", Counted())
    Counted.calls = 0
    nn.parallel.DistributedDataParallel(m)
    calls = Counted.calls
    dist.destroy_process_group()
    return calls


def test_wrapping_runs_no_parametrization():
    """Reading a parametrized Linear's weight runs its parametrization (one more power iteration of spectral_norm);
    wrapping in DDP does not read it, as in PyTorch."""
    assert ddpc.spawn(parametrized_worker, nprocs=2) == [0, 0]


def frozen_worker(rank):
    import ddpc.distributed as dist
    from ddpc import nn

    dist.init_process_group("cpu")
    m = nn.Linear(2, 2).requires_grad_(False)
    try:
        nn.parallel.DistributedDataParallel(m)
        return "accepted"
    except RuntimeError as e:
        return str(e)
    finally:
        dist.destroy_process_group()


def test_a_module_with_nothing_to_train_is_refused():
    assert all("not needed" in r for r in ddpc.spawn(frozen_worker, nprocs=2))
