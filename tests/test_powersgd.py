"""PowerSGD comm hooks for DistributedDataParallel: the hook's factors, error
feedback and warm start against the closed form computed with numpy; full-rank
factors reproduce plain averaging, so DDP with them trains exactly as one
process; PyTorch's import paths. Ranks are processes started by ddpc.spawn."""

import numpy as np
import pytest
from test_ddp import assert_params_close, data, model, params, train_single

import ddpc

ROWS, COLS = 6, 4


def local_gradients(rank, step):
    """This rank's weight (6 x 4) and bias (6) gradients at a step."""
    rng = np.random.default_rng(100 * step + rank)
    return rng.standard_normal((ROWS, COLS)), rng.standard_normal(ROWS)


def hook_worker(rank, world, steps):
    """The bucket buffer after each call of powerSGD_hook (rank 1, starting at step 1)."""
    import ddpc.distributed as dist
    from ddpc.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD
    from ddpc.nn.parallel import GradBucket

    dist.init_process_group("cpu")
    state = powerSGD.PowerSGDState(None, matrix_approximation_rank=1, start_powerSGD_iter=2, random_seed=7)
    weight, bias = ddpc.nn.Parameter(ddpc.zeros(ROWS, COLS, dtype=ddpc.float64)), \
        ddpc.nn.Parameter(ddpc.zeros(ROWS, dtype=ddpc.float64))
    out = []
    for step in range(steps):
        w, b = local_gradients(rank, step)
        flat = ddpc.tensor(np.concatenate([w.reshape(-1), b]))
        result = powerSGD.powerSGD_hook(state, GradBucket(0, flat, [weight, bias], True)).wait()
        out.append(result.numpy().copy())
    rate = state.compression_stats()[0]
    dist.destroy_process_group()
    return out, rate


def orthonormal(p):
    q, _ = np.linalg.qr(p)
    return q * np.sign(np.sum(q * p, axis=0))  # Gram-Schmidt's signs: each column along its own p


def expected_hook_results(world, steps):
    """powerSGD_hook's results on every rank, by its definition in numpy."""
    rng = np.random.RandomState(7)
    seed = rng.randint(1_000_000_000)
    q = orthonormal(ddpc.randn(COLS, 1, generator=ddpc.Generator(seed), dtype=ddpc.float64).numpy())
    errors = [(np.zeros((ROWS, COLS)), np.zeros(ROWS)) for _ in range(world)]
    out = []
    for step in range(steps):
        grads = [local_gradients(r, step) for r in range(world)]
        if step < 2:  # start_powerSGD_iter: plain averaging, no error kept
            w, b = np.mean([g[0] for g in grads], 0), np.mean([g[1] for g in grads], 0)
            out.append(np.concatenate([w.reshape(-1), b]))
            continue
        local = [(g[0] + e[0], g[1] + e[1]) for g, e in zip(grads, errors)]
        p = orthonormal(sum(m @ q for m, _ in local))
        q = sum(m.T @ p for m, _ in local)
        w, b = p @ q.T / world, np.mean([v for _, v in local], 0)
        errors = [(m - w, v - b) for m, v in local]
        out.append(np.concatenate([w.reshape(-1), b]))
    return out


def test_powersgd_hook_matches_its_definition_with_error_feedback_and_warm_start():
    world, steps = 2, 4
    want = expected_hook_results(world, steps)
    for got, rate in ddpc.spawn(hook_worker, args=(world, steps), nprocs=world):
        for step, (g, w) in enumerate(zip(got, want)):
            np.testing.assert_allclose(g, w, rtol=1e-10, atol=1e-12, err_msg=f"step {step}")
        # the weight: 24 numbers sent as 6 + 4; the bias (6) whole
        assert rate == pytest.approx((24 + 6) / (10 + 6))


def ddp_powersgd_worker(rank, world, batch, steps, hook_name, wrapper=None):
    import ddpc.distributed as dist
    from ddpc import nn
    from ddpc.distributed.algorithms.ddp_comm_hooks import default_hooks
    from ddpc.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as powerSGD

    dist.init_process_group("cpu")
    X, y = data(world * batch * steps)
    ddp = nn.parallel.DistributedDataParallel(model().double(), bucket_cap_mb=0.0005)
    X = X.astype(np.float64)
    # Factors of full rank, on every gradient: the approximation is exact (up to the
    # rounding of orthogonalizing them, which float64 keeps far below the tolerance).
    state = powerSGD.PowerSGDState(None, matrix_approximation_rank=64, start_powerSGD_iter=2, min_compression_rate=0)
    hook = getattr(powerSGD, hook_name)
    ddp.register_comm_hook(state, getattr(default_hooks, wrapper)(hook) if wrapper else hook)
    opt = ddpc.optim.SGD(ddp.parameters(), lr=0.1, momentum=0.9)
    for s in range(steps):
        lo = s * world * batch + rank * batch
        opt.zero_grad()
        nn.CrossEntropyLoss()(ddp(ddpc.from_numpy(X[lo:lo + batch])), ddpc.from_numpy(y[lo:lo + batch])).backward()
        opt.step()
    out = params(ddp.module), state.iter, len(state.q_memory_dict)
    dist.destroy_process_group()
    return out


@pytest.mark.parametrize("hook_name", ["powerSGD_hook", "batched_powerSGD_hook"])
def test_full_rank_powersgd_trains_as_one_process(hook_name):
    ref = train_single(2, batch=8, steps=4, double=True)
    for got, iters, buckets in ddpc.spawn(ddp_powersgd_worker, args=(2, 8, 4, hook_name), nprocs=2):
        assert iters == 4 and buckets >= 1  # two steps whole, then two compressed (with warm-start memory)
        assert_params_close(got, ref, atol=1e-8)


@pytest.mark.parametrize("wrapper", ["fp16_compress_wrapper", "bf16_compress_wrapper"])
@pytest.mark.parametrize("hook_name", ["powerSGD_hook", "batched_powerSGD_hook"])
def test_compress_wrappers_around_powersgd(hook_name, wrapper):
    """Full-rank PowerSGD on buckets cast to 16 bits: one process's training
    within the 16-bit rounding, and not exactly (the cast happened). The
    factors are orthogonalized in 16 bits too (by Gram-Schmidt, as PyTorch
    does), which loses more than the cast: on one bucket of these shapes
    both ddpc and PyTorch end about 5e-4 (float16) and 3e-3 (bfloat16) from
    the exact average, and four steps add these up."""
    atol = 2e-2
    ref = train_single(2, batch=8, steps=4, double=True)
    results = ddpc.spawn(ddp_powersgd_worker, args=(2, 8, 4, hook_name, wrapper), nprocs=2)
    assert_params_close(results[0][0], results[1][0], atol=0)
    assert results[0][1] == 4 and results[0][2] >= 1  # the compressed steps ran
    assert_params_close(results[0][0], ref, atol=atol)
    assert max(np.abs(results[0][0][k] - ref[k]).max() for k in ref) > 1e-6


def test_import_paths_and_state_checks():
    from ddpc.distributed.algorithms.ddp_comm_hooks import default_hooks
    from ddpc.distributed.algorithms.ddp_comm_hooks.powerSGD_hook import PowerSGDState

    assert default_hooks.fp16_compress_hook is ddpc.nn.parallel.fp16_compress_hook
    assert ddpc.distributed.algorithms.ddp_comm_hooks.default_hooks is default_hooks
    with pytest.raises(ValueError, match="start_powerSGD_iter"):
        PowerSGDState(None, start_powerSGD_iter=1)
    PowerSGDState(None, start_powerSGD_iter=1, use_error_feedback=False, warm_start=False)
    with pytest.raises(ValueError, match="matrix_approximation_rank"):
        PowerSGDState(None, matrix_approximation_rank=0)
