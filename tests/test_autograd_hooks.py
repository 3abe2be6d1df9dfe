"""ddpc.autograd.graph: saved-tensor hooks (when pack and unpack run, what
they see, save_on_cpu, nesting, disabling, in-place checks, checkpoint),
node pre- and post-hooks, multi-grad hooks and increment_version."""

import gc
import weakref

import numpy as np
import pytest

import ddpc
import ddpc.nn.functional as F
from ddpc import autograd as ag
from ddpc.autograd.graph import (Node, disable_saved_tensors_hooks, increment_version, register_multi_grad_hook,
                                 save_on_cpu, saved_tensors_hooks)
from ddpc.utils.checkpoint import checkpoint

A = np.array([[0.3, -0.7, 1.1], [0.5, 0.2, -0.4]])
W = np.array([[0.1, 0.4, -0.5], [-0.3, 0.8, 0.2], [0.6, -0.2, 0.7], [0.9, 0.1, -0.6]])


class Log:
    """Hooks that record each call; ``copy`` packs a numpy copy instead of the tensor."""

    def __init__(self, copy=False):
        self.calls, self.copy = [], copy

    def pack(self, t):
        self.calls.append(("pack", tuple(t.shape)))
        return (t.numpy().copy(), t.device) if self.copy else t

    def unpack(self, p):
        t = ddpc.tensor(p[0], device=p[1]) if self.copy else p
        self.calls.append(("unpack", tuple(t.shape)))
        return t

    def hooks(self):
        return saved_tensors_hooks(self.pack, self.unpack)

    def count(self, kind):
        return sum(1 for k, _ in self.calls if k == kind)


def test_pack_runs_per_saved_tensor_and_unpack_once_per_pass():
    a = ddpc.tensor(A, requires_grad=True)
    log = Log()
    with log.hooks():
        y = (a * a).sin().sum()  # mul saves both operands, sin its input
    assert log.calls == [("pack", (2, 3))] * 3
    y.backward(retain_graph=True)
    assert log.count("unpack") == 3
    y.backward()  # a retained graph keeps the packed values: unpacked again
    assert log.count("unpack") == 6
    np.testing.assert_allclose(a.grad.numpy(), 2 * 2 * A * np.cos(A * A))
    with pytest.raises(RuntimeError, match="second time"):
        y.backward()
    assert log.count("unpack") == 6


def test_hooks_apply_only_inside_the_block_and_to_recording_ops():
    a = ddpc.tensor(A, requires_grad=True)
    log = Log()
    with log.hooks():
        with ddpc.no_grad():
            a.sin()
        ddpc.tensor(A).sin()  # nothing requires grad: nothing is saved
    y = a.sin().sum()
    assert log.calls == []
    y.backward()
    assert log.calls == []


def test_grad_unpacks_only_the_nodes_it_runs():
    a, b = ddpc.tensor(A, requires_grad=True), ddpc.tensor(A, requires_grad=True)
    log = Log()
    with log.hooks():
        y = (a.sin() * b.exp()).sum()
    assert log.count("pack") == 4  # sin: a; exp: its output; mul: both operands
    ag.grad(y, [a])
    assert log.count("unpack") == 3  # exp's node does not run


@pytest.mark.parametrize("copy", [False, True])
def test_gradients_through_hooks_equal_the_hook_free_run(copy):
    def step(hooks):
        ddpc.manual_seed(0)
        model = ddpc.nn.Sequential(ddpc.nn.Linear(3, 8), ddpc.nn.Tanh(), ddpc.nn.Linear(8, 2))
        x, t = ddpc.tensor(A, dtype=ddpc.float32), ddpc.tensor(A[:, :2], dtype=ddpc.float32)
        if hooks is None:
            loss = F.mse_loss(model(x), t)
        else:
            with hooks:
                loss = F.mse_loss(model(x), t)
        loss.backward()
        return [p.grad.numpy() for p in model.parameters()]

    log = Log(copy)
    want = step(None)
    for got, ref in zip(step(log.hooks()), want):
        np.testing.assert_array_equal(got, ref)
    assert log.count("pack") > 0 and log.count("unpack") == log.count("pack")
    for got, ref in zip(step(save_on_cpu()), want):
        np.testing.assert_array_equal(got, ref)


def test_packing_a_copy_lets_the_saved_memory_go():
    x = ddpc.tensor(A, requires_grad=True)
    log = Log(copy=True)
    with log.hooks():
        h = x * 2
        y = h.sin().sum()
    memory = weakref.ref(h._buf)
    del h
    gc.collect()
    assert memory() is None
    y.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.cos(2 * A))


def test_nested_hooks_the_innermost_applies():
    a = ddpc.tensor(A, requires_grad=True)
    outer, inner = Log(), Log()
    with outer.hooks():
        with inner.hooks():
            y = a.sin()
        z = a.cos()
    assert inner.count("pack") == 1 and outer.count("pack") == 1
    (y + z).sum().backward()
    assert inner.count("unpack") == 1 and outer.count("unpack") == 1  # each saved tensor unpacks with its own hook


def test_disable_saved_tensors_hooks():
    log = Log()
    with disable_saved_tensors_hooks("no hooks in this region"):
        with pytest.raises(RuntimeError, match="no hooks in this region"):
            with log.hooks():
                pass
    with log.hooks():  # allowed again afterwards
        with pytest.raises(RuntimeError, match="already on"):
            with disable_saved_tensors_hooks("already on"):
                pass
        ddpc.tensor(A, requires_grad=True).sin()
    assert log.count("pack") == 1

    @disable_saved_tensors_hooks("decorated")
    def f():
        with log.hooks():
            pass

    with pytest.raises(RuntimeError, match="decorated"):
        f()


def test_hook_errors():
    a = ddpc.tensor(A, requires_grad=True)
    with saved_tensors_hooks(lambda t: t, lambda p: 3):
        y = a.sin().sum()
    with pytest.raises(TypeError, match="unpack_hook expected to be a Tensor but got result of type int"):
        y.backward()
    with pytest.raises(RuntimeError, match="pack hook is modifying its input in place"):
        with saved_tensors_hooks(lambda t: t.mul_(1), lambda p: p):
            (a * 1).sin()


def test_in_place_change_of_packed_memory_raises_but_a_packed_copy_is_safe():
    a = ddpc.tensor(A, requires_grad=True)
    with saved_tensors_hooks(lambda t: t, lambda p: p):  # the graph keeps the memory itself
        h = a * 1
        y = h.sin().sum()
    with ddpc.no_grad():
        h.add_(1)
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        y.backward()
    log = Log(copy=True)
    with log.hooks():
        h = a * 1
        y = h.sin().sum()
    with ddpc.no_grad():
        h.add_(1)
    y.backward()  # the copy holds the forward values, as PyTorch computes it
    np.testing.assert_allclose(a.grad.numpy(), np.cos(A))


def test_increment_version_makes_backward_refuse_saved_memory():
    a = ddpc.tensor(A, requires_grad=True)
    h = a * 1
    y = h.sin().sum()
    increment_version(h)
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        y.backward()
    with pytest.raises(TypeError):
        increment_version([h, 3])


def test_create_graph_through_packed_copies_keeps_second_derivatives():
    x = ddpc.tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    log = Log(copy=True)
    with log.hooks():
        y = (x * x * x).sum()  # saves the leaf and a non-leaf
    (g,) = ag.grad(y, x, create_graph=True)
    np.testing.assert_allclose(g.detach().numpy(), [3.0, 12.0, 27.0])
    (h,) = ag.grad(g.sum(), x)
    np.testing.assert_allclose(h.numpy(), [6.0, 12.0, 18.0])


def test_custom_function_saved_tensors_go_through_the_hooks():
    class Square(ag.Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x * x

        @staticmethod
        def backward(ctx, g):
            (x,) = ctx.saved_tensors
            return 2 * g * x

    x = ddpc.tensor(A, requires_grad=True)
    log = Log(copy=True)
    with log.hooks():
        y = Square.apply(x).sum()
    assert log.calls == [("pack", (2, 3))]
    y.backward()
    assert log.count("unpack") == 1
    np.testing.assert_allclose(x.grad.numpy(), 2 * A)


def test_checkpoint_under_hooks():
    w = ddpc.tensor(W, requires_grad=True)

    def segment(x):
        return (x @ w.t()).tanh().exp()

    def loss(x, ckpt):
        h = x.sin()
        return (checkpoint(segment, h) if ckpt else segment(h)).sum()

    x = ddpc.tensor(A, requires_grad=True)
    loss(x, False).backward()
    want = x.grad.numpy().copy(), w.grad.numpy().copy()
    x.grad = w.grad = None
    log = Log(copy=True)
    with log.hooks():
        y = loss(x, True)
        # The checkpointed ops keep nothing to pack: only sin's input and the sum outside are packed.
        assert log.calls == [("pack", (2, 3))]
        y.backward()  # the recompute inside backward keeps its tensors itself
    assert log.count("unpack") == 1
    np.testing.assert_allclose(x.grad.numpy(), want[0], rtol=1e-12)
    np.testing.assert_allclose(w.grad.numpy(), want[1], rtol=1e-12)


# ---- node hooks -------------------------------------------------------------------------

def test_node_is_the_public_base_of_grad_fn():
    y = ddpc.tensor(A, requires_grad=True).sin()
    assert isinstance(y.grad_fn, Node)
    assert ag.graph.Node is ag.Node


def test_node_prehook_replaces_grad_outputs_and_posthook_sees_both():
    x = ddpc.tensor(A, requires_grad=True)
    y = x.exp()
    seen = []
    y.grad_fn.register_prehook(lambda go: (go[0] * 2,))
    handle = y.grad_fn.register_hook(lambda gi, go: seen.append((gi, go)))
    y.sum().backward(retain_graph=True)
    np.testing.assert_allclose(x.grad.numpy(), 2 * np.exp(A))
    ((gi, go),) = seen
    np.testing.assert_allclose(go[0].numpy(), 2 * np.ones_like(A))
    np.testing.assert_allclose(gi[0].numpy(), 2 * np.exp(A))
    handle.remove()
    x.grad = None
    y.sum().backward()
    assert len(seen) == 1


def test_node_posthook_replaces_grad_inputs():
    x = ddpc.tensor(A, requires_grad=True)
    b = ddpc.tensor(A, requires_grad=True)
    y = x * b
    y.grad_fn.register_hook(lambda gi, go: (gi[0] * 0, None))
    y.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros_like(A))
    assert b.grad is None


def test_node_hook_return_values_are_checked():
    x = ddpc.tensor(A, requires_grad=True)

    def run(register, fn):
        y = x.sin()
        getattr(y.grad_fn, register)(fn)
        y.sum().backward()

    with pytest.raises(TypeError, match="expected tuple"):
        run("register_prehook", lambda go: go[0])
    with pytest.raises(RuntimeError, match="incorrect number of values"):
        run("register_prehook", lambda go: (go[0], go[0]))
    with pytest.raises(RuntimeError, match="changed the size"):
        run("register_hook", lambda gi, go: (gi[0].sum(),))


def test_node_hooks_on_a_custom_function_with_two_outputs():
    class Split(ag.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2, x * 3

        @staticmethod
        def backward(ctx, g1, g2):
            return 2 * g1 + 3 * g2

    x = ddpc.tensor(A, requires_grad=True)
    p, q = Split.apply(x)
    seen = []
    node = p.grad_fn.next_functions[0][0]
    node.register_prehook(lambda go: seen.append(len(go)) or (go[0], go[1] * 10))
    (p.sum() + q.sum()).backward()
    assert seen == [2]
    np.testing.assert_allclose(x.grad.numpy(), np.full_like(A, 2 + 30))


# ---- multi-grad hooks -------------------------------------------------------------------

def test_multi_grad_hook_all_fires_once_with_every_gradient():
    a, b, c = (ddpc.tensor(A, requires_grad=True) for _ in range(3))
    calls = []
    handle = register_multi_grad_hook((a, b, c), lambda grads: calls.append(grads))
    ((a * 2).sum() + (b * 3).sum()).backward()  # c is not reached
    ((grads),) = calls
    np.testing.assert_allclose(grads[0].numpy(), np.full_like(A, 2))
    np.testing.assert_allclose(grads[1].numpy(), np.full_like(A, 3))
    assert grads[2] is None
    ((a * b * c).sum()).backward()
    assert len(calls) == 2 and all(g is not None for g in calls[1])
    handle.remove()
    (a * b).sum().backward()
    assert len(calls) == 2


def test_multi_grad_hook_any_fires_once_per_pass():
    a = ddpc.tensor(A, requires_grad=True)
    h1, h2 = a.sin(), a.cos()
    calls = []
    register_multi_grad_hook((h1, h2), lambda g: calls.append(g), mode="any")
    (h1 * h2).sum().backward(retain_graph=True)
    assert len(calls) == 1
    (h1 * h2).sum().backward()
    assert len(calls) == 2
    with pytest.raises(ValueError, match="mode"):
        register_multi_grad_hook((a,), print, mode="some")


@pytest.mark.gpu
@pytest.mark.parametrize("pin", [False, True])
def test_save_on_cpu_keeps_cuda_activations_in_host_memory(pin):
    seen = []
    hooks = save_on_cpu(pin_memory=pin)
    pack, unpack = hooks.pack_hook, hooks.unpack_hook
    hooks.pack_hook = lambda t: seen.append(pack(t)) or seen[-1]
    x = ddpc.tensor(A, requires_grad=True, device="cuda")
    with hooks:
        y = (x * x).tanh().sum()
    assert seen and all(not packed.is_cuda and device.type == "cuda" for device, packed in seen)
    y.backward()
    assert x.grad.is_cuda
    np.testing.assert_allclose(x.grad.cpu().numpy(), 2 * A * (1 - np.tanh(A * A) ** 2), rtol=1e-12)
    assert unpack(seen[0]).is_cuda
