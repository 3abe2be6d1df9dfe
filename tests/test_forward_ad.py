"""ddpc.autograd.forward_ad: tangents read with unpack_dual against
ddpc.func.jvp, ddpc.autograd.functional.jvp and central differences, and
its errors."""

import numpy as np
import pytest

import ddpc
import ddpc.autograd.forward_ad as fwAD
import ddpc.nn.functional as F
from ddpc import autograd as ag

rng = np.random.default_rng(0)
X = rng.standard_normal((3, 4))
V = rng.standard_normal((3, 4))
M = rng.standard_normal((4, 2))
U = rng.standard_normal((4, 2))

FUNCTIONS = {
    "sin_exp": lambda x: (x.sin() * x).exp(),
    "tanh_matmul": lambda x: (x @ ddpc.tensor(M)).tanh(),
    "softmax": lambda x: F.softmax(x, dim=1) * x,
    "reduce": lambda x: (x * x).sum(1).sqrt(),
    "index_cat": lambda x: ddpc.cat([x[:, :2] ** 3, (x[:, 1:] * x[:, 1:] + 1).log()], 1),
}


def _tangent(fn, x, v):
    with fwAD.dual_level():
        out = fn(fwAD.make_dual(ddpc.tensor(x), ddpc.tensor(v)))
        primal, tangent = fwAD.unpack_dual(out)
        return primal.detach().numpy(), tangent.numpy()


def _central(fn, x, v, eps=1e-6):
    return (fn(ddpc.tensor(x + eps * v)).numpy() - fn(ddpc.tensor(x - eps * v)).numpy()) / (2 * eps)


@pytest.mark.parametrize("name", sorted(FUNCTIONS))
def test_tangent_equals_func_jvp_and_finite_differences(name):
    fn = FUNCTIONS[name]
    primal, tangent = _tangent(fn, X, V)
    out, jvp = ddpc.func.jvp(fn, (ddpc.tensor(X),), (ddpc.tensor(V),))
    np.testing.assert_allclose(primal, out.numpy(), rtol=1e-12)
    np.testing.assert_allclose(tangent, jvp.numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(tangent, _central(fn, X, V), rtol=1e-6, atol=1e-7)
    _, jvp2 = ag.functional.jvp(fn, ddpc.tensor(X), ddpc.tensor(V))
    np.testing.assert_allclose(tangent, jvp2.numpy(), rtol=1e-10, atol=1e-12)


def test_two_dual_inputs_add_their_tangents():
    def fn(x, m):
        return (x @ m).sigmoid()

    with fwAD.dual_level():
        x = fwAD.make_dual(ddpc.tensor(X), ddpc.tensor(V))
        m = fwAD.make_dual(ddpc.tensor(M), ddpc.tensor(U))
        tangent = fwAD.unpack_dual(fn(x, m)).tangent.numpy()
    _, jvp = ddpc.func.jvp(fn, (ddpc.tensor(X), ddpc.tensor(M)), (ddpc.tensor(V), ddpc.tensor(U)))
    np.testing.assert_allclose(tangent, jvp.numpy(), rtol=1e-10, atol=1e-12)
    eps = 1e-6
    fd = (fn(ddpc.tensor(X + eps * V), ddpc.tensor(M + eps * U)).numpy()
          - fn(ddpc.tensor(X - eps * V), ddpc.tensor(M - eps * U)).numpy()) / (2 * eps)
    np.testing.assert_allclose(tangent, fd, rtol=1e-6, atol=1e-7)


def test_unpack_dual_of_the_dual_and_of_unrelated_tensors():
    with fwAD.dual_level():
        x = fwAD.make_dual(ddpc.tensor(X), ddpc.tensor(V))
        res = fwAD.unpack_dual(x)
        assert isinstance(res, fwAD.UnpackedDualTensor)
        np.testing.assert_array_equal(res.primal.detach().numpy(), X)
        np.testing.assert_array_equal(res.tangent.numpy(), V)
        other = ddpc.tensor(X).sin()
        assert fwAD.unpack_dual(other).tangent is None
        assert fwAD.unpack_dual(ddpc.tensor(X, requires_grad=True).sin()).tangent is None
        y = x.sin()
        zero = fwAD.unpack_dual((y - y.detach()) * 0).tangent
        np.testing.assert_array_equal(zero.numpy(), np.zeros_like(X))
    assert fwAD.unpack_dual(y).tangent is None  # the level is closed


def test_reverse_mode_still_reaches_a_primal_that_requires_grad():
    w = ddpc.tensor(X, requires_grad=True)
    with fwAD.dual_level():
        x = fwAD.make_dual(w, ddpc.tensor(V))
        y = (x * x).sum()
        np.testing.assert_allclose(fwAD.unpack_dual(y).tangent.item(), float((2 * X * V).sum()))
        y.backward()
    np.testing.assert_allclose(w.grad.numpy(), 2 * X)


def test_enter_and_exit_dual_level():
    level = fwAD.enter_dual_level()
    assert level == 0
    with pytest.raises(RuntimeError, match="Nested"):
        fwAD.enter_dual_level()
    x = fwAD.make_dual(ddpc.tensor(X), ddpc.tensor(V))
    fwAD.exit_dual_level(level=level)
    with pytest.raises(RuntimeError, match="exit"):
        fwAD.exit_dual_level()
    assert fwAD.unpack_dual(x).tangent is None


def test_make_dual_errors():
    with pytest.raises(RuntimeError, match="forward AD level"):
        fwAD.make_dual(ddpc.tensor(X), ddpc.tensor(V))
    with fwAD.dual_level():
        with pytest.raises(ValueError, match="tangent must be like the primal"):
            fwAD.make_dual(ddpc.tensor(X), ddpc.tensor(V[:2]))
        with pytest.raises(ValueError, match="floating point"):
            fwAD.make_dual(ddpc.tensor(np.arange(3)), ddpc.tensor(np.arange(3)))
        with ddpc.no_grad():
            with pytest.raises(RuntimeError, match="grad mode"):
                fwAD.make_dual(ddpc.tensor(X), ddpc.tensor(V))


def test_an_op_without_double_backward_raises_naming_it():
    targets = ddpc.tensor(np.array([[1, 2]]))
    with fwAD.dual_level():
        x = fwAD.make_dual(ddpc.tensor(X[:, :4]), ddpc.tensor(V[:, :4]))
        loss = F.ctc_loss(x.reshape(3, 1, 4).log_softmax(2), targets, [3], [2])
        with pytest.raises(NotImplementedError, match="forward-mode AD.*CTCBackward"):
            fwAD.unpack_dual(loss)


class _Exp(ag.Function):
    """exp with a detached backward and a jvp that scales by 5 (not exp's), so only jvp can give the tangent."""

    @staticmethod
    def forward(x):
        return x.exp()

    @staticmethod
    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(output)
        ctx.save_for_forward(output)
        ctx.scale = 5.0

    @staticmethod
    def backward(ctx, g):
        return g.detach() * ctx.saved_tensors[0].detach()

    @staticmethod
    def jvp(ctx, t):
        assert np.allclose(ctx.saved_tensors[0].detach().numpy(), np.exp([1.0, 2.0]))
        return t * ctx.scale


class _MulAdd(ag.Function):
    """(x * y, x + k): old-style, two outputs, a non-tensor input; jvp is the exact one."""

    @staticmethod
    def forward(ctx, x, y, k):
        ctx.save_for_forward(x, y)
        ctx.save_for_backward(x, y)
        return x * y, x + k

    @staticmethod
    def backward(ctx, g1, g2):
        x, y = ctx.saved_tensors
        return g1 * y + g2, g1 * x, None

    @staticmethod
    def jvp(ctx, tx, ty, tk):
        assert tk is None
        x, y = ctx.saved_tensors
        return tx * y + x * ty, tx


class _NoJvp(ag.Function):
    @staticmethod
    def forward(x):
        return x * 2

    @staticmethod
    def setup_context(ctx, inputs, output):
        pass

    @staticmethod
    def backward(ctx, g):
        return g * 2


def test_a_custom_function_tangent_is_its_jvp():
    x = ddpc.tensor([1.0, 2.0])
    np.testing.assert_allclose(ddpc.func.jvp(_Exp.apply, (x,), (ddpc.ones(2),))[1].numpy(), [5.0, 5.0])
    np.testing.assert_allclose(ddpc.func.jacfwd(_Exp.apply)(x).numpy(), 5.0 * np.eye(2))
    with fwAD.dual_level():
        np.testing.assert_allclose(fwAD.unpack_dual(_Exp.apply(fwAD.make_dual(x, ddpc.ones(2)))).tangent.numpy(),
                                   [5.0, 5.0])


def test_a_custom_function_jvp_gets_zeros_for_inputs_without_a_tangent():
    xs, ys = np.array([1.0, 2.0]), np.array([3.0, -1.0])
    tx = np.array([0.5, 2.0])
    with fwAD.dual_level():
        x = fwAD.make_dual(ddpc.tensor(xs), ddpc.tensor(tx))
        a, b = _MulAdd.apply(x, ddpc.tensor(ys, requires_grad=True), 4.0)
        np.testing.assert_allclose(fwAD.unpack_dual(a).tangent.numpy(), tx * ys)
        np.testing.assert_allclose(fwAD.unpack_dual(b).tangent.numpy(), tx)
        np.testing.assert_allclose(fwAD.unpack_dual((a * b).sum()).tangent.numpy(),
                                   (tx * ys * (xs + 4) + xs * ys * tx).sum())
    ty = np.array([1.0, -3.0])
    (ta, tb) = ddpc.func.jvp(lambda x, y: _MulAdd.apply(x, y, 4.0), (ddpc.tensor(xs), ddpc.tensor(ys)),
                             (ddpc.tensor(tx), ddpc.tensor(ty)))[1]
    np.testing.assert_allclose(ta.numpy(), tx * ys + xs * ty)
    np.testing.assert_allclose(tb.numpy(), tx)


def test_a_custom_function_without_jvp_raises_in_forward_mode_only_where_it_gets_a_tangent():
    x = ddpc.tensor([1.0, 2.0])
    with pytest.raises(NotImplementedError, match="must implement the jvp function"):
        ddpc.func.jvp(_NoJvp.apply, (x,), (ddpc.ones(2),))
    with fwAD.dual_level():
        with pytest.raises(NotImplementedError, match="must implement the jvp function"):
            fwAD.unpack_dual(_NoJvp.apply(fwAD.make_dual(x, ddpc.ones(2))))
        dual = fwAD.make_dual(x, ddpc.tensor([1.0, 3.0]))
        out = _NoJvp.apply(ddpc.tensor([1.0, 1.0], requires_grad=True)) + dual
        np.testing.assert_allclose(fwAD.unpack_dual(out).tangent.numpy(), [1.0, 3.0])
    # reverse-mode double differentiation (autograd.functional.jvp) still uses backward
    np.testing.assert_allclose(ag.functional.jvp(_NoJvp.apply, x, ddpc.ones(2))[1].numpy(), [2.0, 2.0])


def test_a_gradient_detached_from_its_cotangent_raises_instead_of_a_zero_tangent():
    def f(x):
        h = x * 3
        h.register_hook(lambda g: g.detach())
        return h * 2

    x = ddpc.tensor([1.0, 2.0])
    with pytest.raises(RuntimeError, match="detaches it"):
        ddpc.func.jvp(f, (x,), (ddpc.ones(2),))
    with fwAD.dual_level():
        with pytest.raises(RuntimeError, match="detaches it"):
            fwAD.unpack_dual(f(fwAD.make_dual(x, ddpc.ones(2))))
    # a Jacobian that is zero stays a zero tangent
    np.testing.assert_allclose(ddpc.func.jvp(lambda x: x.floor() * 2, (x,), (ddpc.ones(2),))[1].numpy(), [0.0, 0.0])
