"""ddpc.autograd.grad, backward over several outputs or into chosen inputs,
and custom differentiable functions (ddpc.autograd.Function), against
closed-form derivatives."""

import numpy as np
import pytest

import ddpc
from ddpc.autograd import Function


def leaf(values):
    return ddpc.tensor(np.asarray(values, np.float64), requires_grad=True)


def close(t, want):
    np.testing.assert_allclose(t.detach().numpy(), want, rtol=1e-12, atol=1e-12)


# ---- autograd.grad ----------------------------------------------------------------------------

def test_grad_returns_gradients_of_leaves_and_non_leaves_without_touching_dot_grad():
    x = leaf([0.5, -1.0, 2.0])
    x.grad = ddpc.ones(3, dtype=ddpc.float64)
    z = x * 3
    w = (z * z).sum()
    gx, gz = ddpc.autograd.grad(w, [x, z])
    close(gx, 18 * x.detach().numpy())
    close(gz, 2 * z.detach().numpy())
    close(x.grad, np.ones(3))  # untouched
    with pytest.warns(UserWarning, match="not a leaf Tensor"):
        assert z.grad is None


def test_grad_weights_several_outputs_by_their_grad_outputs():
    x = leaf([1.0, 2.0])
    a, b = x * x, x.exp()
    (g,) = ddpc.autograd.grad([a, b], x, grad_outputs=[ddpc.tensor([1.0, 10.0], dtype=ddpc.float64),
                                                        ddpc.tensor([2.0, 0.5], dtype=ddpc.float64)])
    xs = np.array([1.0, 2.0])
    close(g, np.array([1.0, 10.0]) * 2 * xs + np.array([2.0, 0.5]) * np.exp(xs))


def test_grad_of_an_unused_input_raises_unless_allowed():
    x, y = leaf([1.0]), leaf([2.0])
    out = (x * 2).sum()
    with pytest.raises(RuntimeError, match="not have been used"):
        ddpc.autograd.grad(out, [x, y], retain_graph=True)
    gx, gy = ddpc.autograd.grad(out, [x, y], allow_unused=True, retain_graph=True)
    close(gx, [2.0])
    assert gy is None
    gx, gy = ddpc.autograd.grad(out, [x, y], materialize_grads=True)
    close(gy, [0.0])
    with pytest.raises(ValueError, match="allow_unused"):
        ddpc.autograd.grad(out, [x, y], allow_unused=False, materialize_grads=True)


class Counted(Function):
    """y = 2 x, counting its backward calls."""
    calls = 0

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        Counted.calls += 1
        return g * 2


def test_grad_runs_only_the_ops_that_lead_to_its_inputs():
    x, y = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    out = (Counted.apply(x) * y).sum()
    Counted.calls = 0
    (gy,) = ddpc.autograd.grad(out, y, retain_graph=True)
    close(gy, [2.0, 4.0])
    assert Counted.calls == 0  # x's branch does not lead to y
    (gx,) = ddpc.autograd.grad(out, x)
    close(gx, [6.0, 8.0])
    assert Counted.calls == 1


def test_grad_frees_the_graph_unless_retained():
    x = leaf([1.0, 2.0])
    out = (x.exp() * x).sum()
    ddpc.autograd.grad(out, x)
    with pytest.raises(RuntimeError, match="second time"):
        ddpc.autograd.grad(out, x)
    out = (x * x).sum()
    ddpc.autograd.grad(out, x, create_graph=True, retain_graph=False)
    with pytest.raises(RuntimeError, match="second time"):
        ddpc.autograd.grad(out, x)
    with pytest.raises(RuntimeError, match="does not require grad"):
        ddpc.autograd.grad((x * x).sum(), ddpc.ones(2))


def test_grad_lets_input_hooks_see_and_replace_the_gradient():
    x = leaf([1.0, 2.0])
    seen = []
    x.register_hook(lambda g: seen.append(g.numpy().copy()) or g * 10)
    (g,) = ddpc.autograd.grad((x * 3).sum(), x)
    np.testing.assert_array_equal(seen[0], [3.0, 3.0])
    close(g, [30.0, 30.0])
    assert x.grad is None


def test_gradient_penalty_pattern_with_a_second_backward():
    # The common use: the norm of a gradient as a logged quantity (no double backward needed).
    w = leaf([[1.0, -2.0], [0.5, 3.0]])
    x = ddpc.tensor([[1.0, 1.0]], dtype=ddpc.float64)
    out = (x @ w).pow(2).sum()
    (gw,) = ddpc.autograd.grad(out, w, retain_graph=True)
    xw = x.numpy() @ w.detach().numpy()
    close(gw, x.numpy().T @ (2 * xw))
    out.backward()
    close(w.grad, gw.numpy())


# ---- backward over several roots, into chosen inputs ----------------------------------------

def test_backward_of_several_outputs_sums_their_gradients():
    x = leaf([1.0, 2.0])
    y = x * x
    z = y * 3  # z depends on y: y's node waits for z's gradient
    ddpc.autograd.backward([y.sum(), z], [None, ddpc.tensor([1.0, 2.0], dtype=ddpc.float64)])
    xs = np.array([1.0, 2.0])
    close(x.grad, 2 * xs + np.array([1.0, 2.0]) * 3 * 2 * xs)


def test_backward_into_inputs_leaves_other_grads_alone():
    x, y = leaf([1.0, 2.0]), leaf([3.0, 4.0])
    h = x * y
    out = (h * h).sum()
    out.backward(inputs=[y, h], retain_graph=True)
    assert x.grad is None
    xs, ys = np.array([1.0, 2.0]), np.array([3.0, 4.0])
    close(y.grad, 2 * xs * xs * ys)
    close(h.grad, 2 * xs * ys)
    ddpc.autograd.backward(out, inputs=y)  # accumulates
    close(y.grad, 4 * xs * xs * ys)


def test_backward_checks_its_gradients():
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match="implicitly created only for scalar"):
        ddpc.autograd.backward([x * 2])
    with pytest.raises(RuntimeError, match="2 gradients for 1 tensors"):
        ddpc.autograd.backward([x * 2], [None, None])
    with pytest.raises(RuntimeError, match="element 1 of tensors does not require grad"):
        ddpc.autograd.backward([(x * 2).sum(), ddpc.ones(())])


# ---- custom functions -------------------------------------------------------------------------

class ScaledExp(Function):
    """y = exp(k x) for a number k."""

    @staticmethod
    def forward(ctx, x, k):
        y = (x * k).exp()
        ctx.save_for_backward(y)
        ctx.k = k
        return y

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * y * ctx.k, None


def test_custom_function_forward_and_backward():
    x = leaf([0.5, 1.0, -1.0])
    y = ScaledExp.apply(x, 2.0)
    assert y.grad_fn.name() == "ScaledExpBackward" and y.requires_grad
    (y * ddpc.tensor([1.0, 2.0, 3.0], dtype=ddpc.float64)).sum().backward()
    xs = np.array([0.5, 1.0, -1.0])
    close(x.grad, np.array([1.0, 2.0, 3.0]) * 2 * np.exp(2 * xs))


def test_custom_function_refuses_saved_tensors_changed_in_place():
    x = leaf([0.5, 1.0])
    y = ScaledExp.apply(x, 1.0)
    out = y.sum()
    with ddpc.no_grad():
        y.mul_(2)
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        out.backward()


class SplitScale(Function):
    """(2 x, 3 x, the argmax of x): two differentiable outputs and an index."""

    @staticmethod
    def forward(ctx, x):
        ctx.mark_non_differentiable()
        return x * 2, x * 3, x.argmax()

    @staticmethod
    def backward(ctx, ga, gb, gi):
        assert gi is None or not gi.numel() or not gi.dtype.is_floating_point or float(gi.abs().sum()) == 0
        return ga * 2 + gb * 3


def test_custom_function_with_several_outputs_gets_zeros_for_unused_ones():
    x = leaf([1.0, -2.0])
    a, b, i = SplitScale.apply(x)
    assert not i.requires_grad and i.dtype is ddpc.int64 and int(i) == 0
    (a * a).sum().backward()  # b unused: its gradient arrives as zeros
    close(x.grad, 2 * 2 * (2 * np.array([1.0, -2.0])))
    x.grad = None
    a, b, _ = SplitScale.apply(x)
    (a.sum() + (b * b).sum()).backward()
    close(x.grad, 2 + 3 * 2 * 3 * np.array([1.0, -2.0]))



def test_custom_function_grad_fn_is_named_after_the_function():
    x = leaf([1.0, -2.0])
    a, b, _ = SplitScale.apply(x)
    assert type(a.grad_fn).__name__ == type(b.grad_fn).__name__ == "SplitScaleBackward"
    assert type(NoMaterialize.apply(x)[0].grad_fn).__name__ == "NoMaterializeBackward"


class NoMaterialize(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.set_materialize_grads(False)
        return x * 1, x * 1

    @staticmethod
    def backward(ctx, ga, gb):
        NoMaterialize.got = (ga is None, gb is None)
        return ga if gb is None else ga + gb


def test_custom_function_without_materialized_grads_sees_none():
    x = leaf([1.0])
    a, _ = NoMaterialize.apply(x)
    a.sum().backward()
    assert NoMaterialize.got == (False, True)
    close(x.grad, [1.0])


class Identity(Function):
    @staticmethod
    def forward(ctx, x, y):
        ctx.seen = ctx.needs_input_grad
        return x

    @staticmethod
    def backward(ctx, g):
        return g, None


def test_custom_function_returning_its_input_and_needs_input_grad():
    x = leaf([1.0, 2.0])
    out = Identity.apply(x, ddpc.ones(2))
    assert out is not x and x.is_leaf and out.grad_fn is not None
    assert out.grad_fn.seen == (True, False)
    (out * 3).sum().backward()
    close(x.grad, [3.0, 3.0])
    with ddpc.no_grad():
        assert not Identity.apply(x, x).requires_grad


class WrongCount(Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g, g


class WrongShape(Function):
    @staticmethod
    def forward(ctx, x):
        return x.sum()

    @staticmethod
    def backward(ctx, g):
        return g


def test_custom_function_backward_errors_name_the_function():
    x = leaf([1.0, 2.0])
    with pytest.raises(RuntimeError, match="WrongCountBackward returned an incorrect number of gradients"):
        WrongCount.apply(x).sum().backward()
    with pytest.raises(RuntimeError, match=r"WrongShapeBackward returned an invalid gradient at index 0.*\(2,\)"):
        WrongShape.apply(x).backward()
    with pytest.raises(RuntimeError, match="apply"):
        WrongCount()


class Scale(Function):
    @staticmethod
    def forward(ctx, x, s):
        ctx.save_for_backward(x, s)
        return x * s

    @staticmethod
    def backward(ctx, g):  # s's gradient as large as x's: PyTorch sums it down to s's shape
        x, s = ctx.saved_tensors
        return g * s, g * x


class Widen(Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g.reshape(2, 1) * ddpc.ones(1, 3, dtype=g.dtype)


class TrailingNone(Function):
    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2, None


def test_custom_function_gradient_for_a_broadcast_input_is_summed_to_its_shape():
    x = leaf([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    for s, want in ((leaf([1.0, 2.0, 3.0]), [5.0, 7.0, 9.0]), (leaf([[2.0], [3.0]]), [[6.0], [15.0]]),
                    (leaf([[1.0, 2.0, 3.0]]), [[5.0, 7.0, 9.0]])):
        Scale.apply(x, s).sum().backward()
        close(s.grad, want)
    with pytest.raises(RuntimeError, match=r"WidenBackward returned an invalid gradient at index 0: got shape "
                                           r"\(2, 3\) but expected shape compatible with \(2,\)"):
        Widen.apply(leaf([1.0, 2.0])).sum().backward()  # (2,) does not broadcast to (2, 3)


def test_custom_function_may_return_trailing_nones():
    x = leaf([1.0, 2.0])
    TrailingNone.apply(x).sum().backward()
    close(x.grad, [2.0, 2.0])


class ReluInPlace(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.mark_dirty(x)
        x.clamp_(min=0)
        ctx.save_for_backward(x)
        return x

    @staticmethod
    def backward(ctx, g):
        (y,) = ctx.saved_tensors
        return g * (y > 0).to(dtype=g.dtype)


def test_custom_function_marking_an_input_dirty_gives_it_the_function_history():
    w = leaf([1.0, -2.0, 3.0])
    x = w * 2
    seen_before = x * 1  # reads x before the in-place change: saves nothing that changes
    y = ReluInPlace.apply(x)
    assert y is x and x.grad_fn is not None and x.grad_fn.name() == "ReluInPlaceBackward"
    close(x, [2.0, 0.0, 6.0])
    (y.sum() + seen_before.sum()).backward()
    close(w.grad, [4.0, 2.0, 4.0])
    with pytest.raises(RuntimeError, match="leaf tensor that requires grad is being used in an in-place operation"):
        ReluInPlace.apply(leaf([1.0, -1.0]))
    z = w * 1
    saved = z * z  # saves z
    ReluInPlace.apply(z)
    with pytest.raises(RuntimeError, match="modified by an in-place operation"):
        saved.sum().backward()
    with ddpc.no_grad():  # outside the graph a leaf may change
        t = leaf([-1.0, 1.0])
        assert ReluInPlace.apply(t) is t
    close(t, [0.0, 1.0])


class DirtyButNotReturned(Function):
    @staticmethod
    def forward(ctx, x):
        ctx.mark_dirty(x)
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


def test_mark_dirty_errors():
    with pytest.raises(RuntimeError, match="must be returned as an output"):
        DirtyButNotReturned.apply(leaf([1.0]) * 1)


def test_the_newer_form_with_setup_context_and_keyword_arguments():
    class Scaled(ddpc.autograd.Function):
        @staticmethod
        def forward(x, scale=2.0):
            return x * x * scale

        @staticmethod
        def setup_context(ctx, inputs, output):
            x, scale = inputs
            ctx.save_for_backward(x)
            ctx.scale = scale

        @staticmethod
        def backward(ctx, grad):
            (x,) = ctx.saved_tensors
            return grad * 2 * x * ctx.scale, None

    x = ddpc.tensor([1.0, 2.0, 3.0], requires_grad=True)
    y = Scaled.apply(x, scale=3.0)
    assert y.tolist() == [3.0, 12.0, 27.0]
    y.sum().backward()
    assert x.grad.tolist() == [6.0, 12.0, 18.0]
    assert Scaled.apply(x).tolist() == [2.0, 8.0, 18.0]  # the default, bound from forward's signature
