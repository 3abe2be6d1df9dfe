"""ddpc.utils.checkpoint: the same gradients as without it (dropout included),
the segment's activations freed after forward, recomputation errors, and
checkpointed blocks under DDP on 2 ranks (real processes, cpu backend)."""

import gc
import weakref

import numpy as np
import pytest

import ddpc
from ddpc import nn
from ddpc.utils.checkpoint import (CheckpointError, checkpoint, checkpoint_sequential, noop_context_fn,
                                   set_checkpoint_debug_enabled)


class Blocks(nn.Module):
    def __init__(self, use_checkpoint, p=0.0):
        super().__init__()
        ddpc.manual_seed(4)
        self.a = nn.Sequential(nn.Linear(6, 32), nn.GELU(), nn.Dropout(p), nn.Linear(32, 32), nn.Tanh())
        self.b = nn.Sequential(nn.Linear(32, 32), nn.ReLU(), nn.LayerNorm(32))
        self.head = nn.Linear(32, 3)
        self.use_checkpoint = use_checkpoint

    def forward(self, x):
        run = checkpoint if self.use_checkpoint else (lambda f, *a, **k: f(*a))
        h = run(self.a, x, use_reentrant=False)
        h = run(self.b, h)
        return self.head(h)


def _grads(model, x, y, seed=11):
    ddpc.manual_seed(seed)
    model.zero_grad()
    loss = nn.functional.cross_entropy(model(x), y)
    loss.backward()
    return loss.item(), [p.grad.numpy().copy() for p in model.parameters()]


@pytest.mark.parametrize("p", [0.0, 0.3])
def test_checkpointed_gradients_equal_the_plain_ones(p):
    rng = np.random.default_rng(0)
    x = ddpc.tensor(rng.standard_normal((16, 6)).astype(np.float32))
    y = ddpc.tensor(rng.integers(0, 3, 16))
    loss, plain = _grads(Blocks(False, p), x, y)
    loss_c, ckpt = _grads(Blocks(True, p), x, y)
    assert loss == loss_c
    for a, b in zip(plain, ckpt):
        np.testing.assert_array_equal(a, b)


def test_gradients_reach_parameters_when_no_input_requires_grad():
    lin = nn.Linear(4, 2)
    out = checkpoint(lin, ddpc.ones(3, 4))
    out.sum().backward()
    np.testing.assert_allclose(lin.weight.grad.numpy(), np.full((2, 4), 3.0))
    np.testing.assert_allclose(lin.bias.grad.numpy(), np.full(2, 3.0))


def test_the_segments_activations_are_freed_after_forward_and_recomputed_in_backward():
    lin1, lin2 = nn.Linear(8, 64), nn.Linear(64, 8)
    kept = []

    def block(x):
        h = ddpc.relu(lin1(x))  # saved by lin2's backward unless checkpointed
        kept.append(weakref.ref(h._buf))  # the memory: backward nodes save views of it
        return lin2(h)

    x = ddpc.randn(4, 8, requires_grad=True)
    plain = block(x)
    gc.collect()
    assert kept[0]() is not None
    out = checkpoint(block, x)
    gc.collect()
    assert kept[1]() is None
    assert len(kept) == 2  # not run again yet
    plain.sum().backward()
    once = x.grad.numpy().copy()
    out.sum().backward()
    assert len(kept) == 3  # the recompute, during backward
    np.testing.assert_allclose(x.grad.numpy(), 2 * once, rtol=1e-6)


def test_input_gradients_and_sequential_checkpointing():
    ddpc.manual_seed(1)
    seq = nn.Sequential(nn.Linear(5, 9), nn.ReLU(), nn.Linear(9, 9), nn.Tanh(), nn.Linear(9, 2))
    x = ddpc.randn(7, 5, requires_grad=True)
    seq(x).sum().backward()
    ref = [x.grad.numpy().copy()] + [p.grad.numpy().copy() for p in seq.parameters()]
    x.grad = None
    seq.zero_grad()
    checkpoint_sequential(seq, 2, x).sum().backward()
    got = [x.grad.numpy()] + [p.grad.numpy() for p in seq.parameters()]
    for a, b in zip(ref, got):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_a_function_that_changes_between_runs_is_refused():
    lin = nn.Linear(3, 3)
    calls = []

    def unstable(x):
        calls.append(1)
        return lin(x) if len(calls) == 1 else ddpc.relu(lin(x))

    out = checkpoint(unstable, ddpc.randn(2, 3))
    with pytest.raises(RuntimeError, match="same ops"):
        out.sum().backward()


def test_no_grad_and_nested_checkpoints_run_the_function_once():
    lin = nn.Linear(3, 3)
    with ddpc.no_grad():
        assert not checkpoint(lin, ddpc.randn(2, 3)).requires_grad
    inner = nn.Linear(3, 3)
    out = checkpoint(lambda x: checkpoint(inner, lin(x)), ddpc.randn(2, 3))
    out.sum().backward()
    assert lin.weight.grad is not None and inner.weight.grad is not None


def test_autocast_settings_are_replayed_in_the_recompute():
    lin1, lin2 = nn.Linear(4, 4), nn.Linear(4, 4)
    x = ddpc.randn(3, 4)
    with ddpc.autocast("cpu"):
        out = checkpoint(lambda t: lin2(lin1(t)), x)
    assert out.dtype is ddpc.bfloat16
    out.float().sum().backward()  # outside the region: the recompute must still cast as the first run did
    assert lin1.weight.grad.dtype is ddpc.float32


def ddp_checkpoint_worker(rank, find_unused):
    import ddpc.distributed as dist

    dist.init_process_group("cpu")
    rng = np.random.default_rng(rank)
    results = []
    for use in (False, True):
        model = nn.parallel.DistributedDataParallel(Blocks(use, 0.2), find_unused_parameters=find_unused)
        opt = ddpc.optim.SGD(model.parameters(), lr=0.1)
        ddpc.manual_seed(100 + rank)
        for _ in range(3):
            x = ddpc.tensor(rng.standard_normal((8, 6)).astype(np.float32))
            y = ddpc.tensor(rng.integers(0, 3, 8))
            opt.zero_grad()
            nn.functional.cross_entropy(model(x), y).backward()
            opt.step()
        results.append([p.numpy().copy() for p in model.parameters()])
        rng = np.random.default_rng(rank)
    dist.destroy_process_group()
    return results


@pytest.mark.parametrize("find_unused", [False, True])
def test_checkpointed_blocks_under_ddp_train_as_plain_ones(find_unused):
    for plain, ckpt in ddpc.spawn(ddp_checkpoint_worker, args=(find_unused,), nprocs=2):
        for a, b in zip(plain, ckpt):
            np.testing.assert_array_equal(a, b)


# ---- checkpoint_wrapper (torch.distributed.algorithms._checkpoint.checkpoint_wrapper) -------------------------


class Scaled(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(4, 4)
        self.runs = 0

    def forward(self, x, scale=1.0):
        self.runs += 1
        return self.lin(x).tanh() * scale


def test_checkpoint_wrapper_recomputes_and_keeps_the_wrapped_names():
    from ddpc.distributed.algorithms._checkpoint.checkpoint_wrapper import (CheckpointImpl, CheckpointWrapper,
                                                                            apply_activation_checkpointing,
                                                                            checkpoint_wrapper)

    ddpc.manual_seed(0)
    plain = nn.Sequential(nn.Linear(4, 4), Scaled(), nn.Sequential(Scaled(), nn.ReLU()))
    ddpc.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 4), Scaled(), nn.Sequential(Scaled(), nn.ReLU()))
    apply_activation_checkpointing(model, check_fn=lambda m: isinstance(m, Scaled))
    assert [type(m).__name__ for m in (model, model[1], model[2], model[2][0])] == [
        "Sequential", "CheckpointWrapper", "Sequential", "CheckpointWrapper"]
    assert model[1].checkpoint_impl is CheckpointImpl.NO_REENTRANT
    assert model[1].lin is model[1]._checkpoint_wrapped_module.lin  # attributes reach the wrapped module
    # a checkpoint of the wrapped model has the plain model's names, and loads either way
    assert list(model.state_dict()) == list(plain.state_dict()) == ["0.weight", "0.bias", "1.lin.weight",
                                                                    "1.lin.bias", "2.0.lin.weight", "2.0.lin.bias"]
    assert [n for n, _ in model[1].named_parameters()] == ["lin.weight", "lin.bias"]
    assert [n for n, _ in model.named_parameters()][2] == "1._checkpoint_wrapped_module.lin.weight"  # as PyTorch's
    with ddpc.no_grad():
        plain[1].lin.weight.mul_(2.0)
    model.load_state_dict(plain.state_dict())
    assert np.array_equal(model[1].lin.weight.numpy(), plain[1].lin.weight.numpy())

    x = ddpc.randn(3, 4, requires_grad=True)
    scaled = checkpoint_wrapper(Scaled(), CheckpointImpl.REENTRANT)
    assert isinstance(scaled, CheckpointWrapper)
    out = scaled(x, scale=3.0)  # keyword arguments reach the module, under either implementation
    out.sum().backward()
    assert scaled.runs == 2  # forward, then the recompute in backward
    g = x.grad.numpy().copy()
    x.grad = None
    (scaled._checkpoint_wrapped_module(x, scale=3.0)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), g)

    model(x).sum().backward()
    grads = [p.grad.numpy().copy() for p in model.parameters()]
    for p in model.parameters():
        p.grad = None
    plain(x).sum().backward()
    for a, p in zip(grads, plain.parameters()):
        np.testing.assert_allclose(a, p.grad.numpy(), rtol=1e-6, atol=1e-7)
    assert model[1].runs == 2 and plain[1].runs == 1


def test_apply_activation_checkpointing_takes_an_auto_wrap_policy():
    import functools

    from ddpc.distributed.algorithms._checkpoint.checkpoint_wrapper import (CheckpointWrapper,
                                                                            apply_activation_checkpointing)
    from ddpc.distributed.fsdp.wrap import transformer_auto_wrap_policy

    model = nn.Sequential(Scaled(), nn.Linear(4, 4), Scaled())
    apply_activation_checkpointing(model, auto_wrap_policy=functools.partial(transformer_auto_wrap_policy,
                                                                             transformer_layer_cls={Scaled}))
    assert [isinstance(m, CheckpointWrapper) for m in model] == [True, False, True]


def test_pytorch_keyword_arguments_are_not_passed_to_the_function():
    lin = nn.Linear(3, 3)
    seen = []

    def fn(x, **kwargs):
        seen.append(kwargs)
        return lin(x)

    x = ddpc.randn(2, 3)
    checkpoint(fn, x, use_reentrant=False, preserve_rng_state=True, context_fn=noop_context_fn,
               determinism_check="default", debug=False, early_stop=True, scale=2).sum().backward()
    assert seen == [{"scale": 2}, {"scale": 2}]  # the first run and the recompute
    forward, recompute = noop_context_fn()
    with forward, recompute:
        pass


def test_context_fn_wraps_the_first_run_and_the_recompute():
    lin = nn.Linear(3, 3)
    events = []

    class Context:
        def __init__(self, name):
            self.name = name

        def __enter__(self):
            events.append(f"enter {self.name}")

        def __exit__(self, *exc):
            events.append(f"exit {self.name}")

    def fn(x):
        events.append("run")
        return lin(x)

    out = checkpoint(fn, ddpc.randn(2, 3), use_reentrant=False,
                     context_fn=lambda: (Context("forward"), Context("recompute")))
    assert events == ["enter forward", "run", "exit forward"]
    out.sum().backward()
    assert events[3:] == ["enter recompute", "run", "exit recompute"]


def test_arguments_of_the_non_reentrant_form_are_refused_otherwise():
    x = ddpc.randn(2, 3)
    for use_reentrant in (True, None):
        with pytest.raises(ValueError, match="only supported when use_reentrant=False"):
            checkpoint(ddpc.sin, x, use_reentrant=use_reentrant, context_fn=lambda: noop_context_fn())
        with pytest.raises(ValueError, match="only supported when use_reentrant=False"):
            checkpoint(ddpc.sin, x, use_reentrant=use_reentrant, debug=True)
    with pytest.raises(ValueError, match="incompatible with non-default context_fn"):
        checkpoint(ddpc.sin, x, use_reentrant=False, debug=True, context_fn=lambda: noop_context_fn())
    with pytest.raises(ValueError, match="determinism_check should be one of"):
        checkpoint(ddpc.sin, x, use_reentrant=False, determinism_check="all")


def test_determinism_check_compares_the_recomputed_tensors_metadata():
    lin = nn.Linear(3, 3)
    scales = [ddpc.ones(3), ddpc.ones(1)]  # the second run multiplies by a scale of another shape

    def fn(x, runs):
        return lin(x) * scales[len(runs.append(1) or runs) - 1]

    x = ddpc.randn(2, 3)
    out = checkpoint(fn, x, [], use_reentrant=False)
    with pytest.raises(CheckpointError, match=r"other metadata.*shape \(3,\).*shape \(1,\)"):
        out.sum().backward()
    out = checkpoint(fn, x, [], use_reentrant=False, determinism_check="none")
    out.sum().backward()  # not compared: the same values either way
    assert lin.weight.grad is not None


def test_debug_lists_the_ops_of_both_runs():
    lin = nn.Linear(3, 3)
    calls = []

    def unstable(x):
        calls.append(1)
        return lin(x) if len(calls) % 2 else ddpc.relu(lin(x))

    out = checkpoint(unstable, ddpc.randn(2, 3), use_reentrant=False, debug=True)
    with pytest.raises(CheckpointError, match=r"ops of the first run: LinearBackward\n.*recompute: LinearBackward, "):
        out.sum().backward()
    with set_checkpoint_debug_enabled(False):
        out = checkpoint(unstable, ddpc.randn(2, 3), use_reentrant=False, debug=True)
    with pytest.raises(CheckpointError, match="pass debug=True"):
        out.sum().backward()
    with set_checkpoint_debug_enabled(True):
        out = checkpoint(unstable, ddpc.randn(2, 3))
    with pytest.raises(CheckpointError, match="ops of the first run"):
        out.sum().backward()
