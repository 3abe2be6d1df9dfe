"""ddpc.nn.utils.prune: masks by count and fraction, the _orig/_mask form
and its pre-hook, iterative pruning among what is left, global pruning,
remove, and the errors of bad amounts."""

import numpy as np
import pytest

import ddpc
from ddpc import nn
from ddpc.nn.utils import prune


def linear(weights):
    m = nn.Linear(weights.shape[1], weights.shape[0])
    with ddpc.no_grad():
        m.weight.copy_(ddpc.tensor(weights, dtype=ddpc.float32))
    return m


W = np.array([[0.5, -3.0, 0.1, 2.0], [-0.2, 1.0, -4.0, 0.3], [6.0, -0.05, 0.7, -1.5]])


def test_l1_unstructured_prunes_the_smallest_and_sets_up_orig_mask_and_hook():
    m = linear(W)
    assert prune.l1_unstructured(m, "weight", amount=0.25) is m  # 3 of 12 entries
    names = [n for n, _ in m.named_parameters()]
    assert names == ["bias", "weight_orig"] and "weight_mask" in dict(m.named_buffers())
    want = (np.abs(W) > 0.25).astype(np.float32)
    np.testing.assert_array_equal(m.weight_mask.numpy(), want)
    np.testing.assert_allclose(m.weight.numpy(), W * want, rtol=1e-6)
    assert prune.is_pruned(m) and not prune.is_pruned(nn.Linear(2, 2))
    # The pre-hook recomputes weight from weight_orig before each forward; gradients reach weight_orig masked.
    with ddpc.no_grad():
        m.weight_orig.add_(1.0)
    x = ddpc.ones(2, 4)
    m(x).sum().backward()
    np.testing.assert_allclose(m.weight.numpy(), (W + 1) * want, rtol=1e-6)
    np.testing.assert_array_equal(m.weight_orig.grad.numpy(), 2 * want)


def test_iterative_pruning_prunes_among_what_is_left():
    m = linear(W)
    prune.l1_unstructured(m, "weight", amount=2)
    prune.l1_unstructured(m, "weight", amount=2)  # two more, among the ten left
    hooks = list(m._forward_pre_hooks.values())
    assert len(hooks) == 1 and isinstance(hooks[0], prune.PruningContainer) and len(hooks[0]) == 2
    np.testing.assert_array_equal(m.weight_mask.numpy(), (np.abs(W) > 0.25).astype(np.float32) * (np.abs(W) != 0.3))
    # The row of the smallest L1 norm, of the unpruned weights (5.6, 5.5, 8.25), as PyTorch ranks them.
    prune.ln_structured(m, "weight", amount=1, n=1, dim=0)
    mask = m.weight_mask.numpy()
    assert not mask[1].any() and mask[0].sum() == 3 and mask[2].sum() == 3


def test_structured_random_and_custom_masks():
    ddpc.manual_seed(3)
    conv = nn.Conv2d(3, 8, 3)
    prune.random_structured(conv, "weight", amount=0.5, dim=0)
    kept = conv.weight_mask.numpy().reshape(8, -1)
    assert sorted(kept.min(1)) == [0] * 4 + [1] * 4 and (kept.min(1) == kept.max(1)).all()
    prune.ln_structured(conv, "weight", amount=2, n=2, dim=1)
    per_input = conv.weight_mask.numpy().sum((0, 2, 3))
    assert (per_input == 0).sum() == 2
    m = linear(W)
    custom = ddpc.tensor((np.arange(12).reshape(3, 4) % 2).astype(np.float32))
    prune.custom_from_mask(m, "weight", custom)
    np.testing.assert_array_equal(m.weight.numpy(), W.astype(np.float32) * custom.numpy())
    ddpc.manual_seed(0)
    prune.random_unstructured(m, "bias", amount=2)
    assert m.bias_mask.numpy().sum() == 1


def test_global_unstructured_ranks_all_parameters_together():
    a, b = linear(W), linear(W * 10)
    prune.global_unstructured([(a, "weight"), (b, "weight")], pruning_method=prune.L1Unstructured, amount=12)
    # The 12 smallest of the 24 magnitudes are all of a's but its 6.0, -4.0, -3.0, and none of b's above 6.
    both = np.concatenate([np.abs(W).reshape(-1), np.abs(W * 10).reshape(-1)])
    threshold = np.sort(both)[11]
    np.testing.assert_array_equal(a.weight_mask.numpy(), (np.abs(W) > threshold).astype(np.float32))
    np.testing.assert_array_equal(b.weight_mask.numpy(), (np.abs(W * 10) > threshold).astype(np.float32))
    with pytest.raises(TypeError, match="unstructured"):
        prune.global_unstructured([(a, "weight")], pruning_method=prune.RandomStructured, amount=1)


def test_remove_makes_it_permanent_and_state_dicts_carry_the_form():
    m = linear(W)
    prune.l1_unstructured(m, "weight", amount=0.5)
    assert set(m.state_dict()) == {"bias", "weight_orig", "weight_mask"}
    masked = m.weight.numpy().copy()
    prune.remove(m, "weight")
    assert set(m.state_dict()) == {"bias", "weight"} and isinstance(m.weight, nn.Parameter)
    np.testing.assert_array_equal(m.weight.numpy(), masked)
    assert not prune.is_pruned(m) and not m._forward_pre_hooks
    with pytest.raises(ValueError, match="has to be pruned before"):
        prune.remove(m, "weight")


def test_bad_amounts_raise_and_leave_the_module_as_it_was():
    m = linear(W)
    for amount, error in [(-1, ValueError), (1.5, ValueError), ("half", TypeError)]:
        with pytest.raises(error):
            prune.l1_unstructured(m, "weight", amount=amount)
    with pytest.raises(ValueError, match="should be smaller than the number of parameters"):
        prune.l1_unstructured(m, "weight", amount=13)
    with pytest.raises(ValueError, match="multidimensional"):
        prune.ln_structured(m, "bias", amount=1, n=2, dim=0)
    assert [n for n, _ in m.named_parameters()] == ["weight", "bias"] and not m._forward_pre_hooks


def test_the_forward_pre_hooks_table_holds_the_pruning_methods_as_pytorchs_tutorial_reads_it():
    m = linear(W)
    prune.random_unstructured(m, "weight", amount=0.3)
    prune.l1_unstructured(m, "bias", amount=1)
    hook = next(h for h in m._forward_pre_hooks.values() if h._tensor_name == "weight")
    assert isinstance(hook, prune.RandomUnstructured)
    handle = m.register_forward_pre_hook(lambda mod, args, kwargs: None, with_kwargs=True)
    assert m._forward_pre_hooks_with_kwargs == {handle.id: True}
    handle.remove()
    assert not m._forward_pre_hooks_with_kwargs and len(m._forward_pre_hooks) == 2
