"""ddpc.autograd.gradcheck and gradgradcheck: they pass correct gradients
(several inputs and outputs, unused inputs, fast mode) and catch wrong first
and second derivatives, nondeterministic backward passes and bad inputs."""

import warnings

import pytest

import ddpc
from ddpc.autograd import Function, GradcheckError, gradcheck, gradgradcheck


def leaf(*shape):
    return ddpc.randn(*shape, dtype=ddpc.float64, requires_grad=True)


class Square(Function):
    """x ** 2 with a backward of a given factor of x (2 is right), detached or not."""

    @staticmethod
    def forward(ctx, x, factor, detach):
        ctx.save_for_backward(x)
        ctx.factor, ctx.detach = factor, detach
        return x * x

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        return g * (x.detach() if ctx.detach else x) * ctx.factor, None, None


def test_correct_gradients_pass():
    ddpc.manual_seed(0)
    assert gradcheck(lambda a, b: ((a * b.sin()).sum(1), a.exp()), (leaf(3, 4), leaf(3, 4)))
    assert gradcheck(lambda a, b, c: a @ b, (leaf(2, 3), leaf(3, 2), leaf(4)))  # c unused
    assert gradcheck(lambda a, n: a.softmax(0) * n, (leaf(5), ddpc.ones(5, dtype=ddpc.float64)))
    assert gradcheck(lambda x: Square.apply(x, 2.0, False), (leaf(4),))
    assert gradcheck(lambda a: a.tanh().cumsum(0), (leaf(6),), fast_mode=True)
    assert gradgradcheck(lambda a, b: (a * b.sin()).sum(1), (leaf(3, 4), leaf(3, 4)))
    assert gradgradcheck(lambda x: Square.apply(x, 2.0, False), (leaf(3),), fast_mode=True)


def test_wrong_first_derivatives_fail():
    x = leaf(3)
    with pytest.raises(GradcheckError, match="Jacobian mismatch for output 0 with respect to input 0"):
        gradcheck(lambda t: Square.apply(t, 1.0, False), (x,))
    assert gradcheck(lambda t: Square.apply(t, 1.0, False), (x,), raise_exception=False) is False
    with pytest.raises(GradcheckError, match="fast mode"):
        gradcheck(lambda t: Square.apply(t, 1.0, False), (x,), fast_mode=True)


def test_gradgradcheck_catches_a_backward_that_cuts_the_graph():
    x = leaf(3)
    assert gradcheck(lambda t: Square.apply(t, 2.0, True), (x,))  # right first derivative
    with pytest.raises(GradcheckError, match="Jacobian mismatch"):
        gradgradcheck(lambda t: Square.apply(t, 2.0, True), (x,))


def test_nondeterministic_backward_and_bad_inputs():
    class Noisy(Function):
        @staticmethod
        def forward(ctx, x):
            return x * 1.0

        @staticmethod
        def backward(ctx, g):
            return g * (1.0 + 1e-9 * ddpc.rand(1, dtype=ddpc.float64).item())

    with pytest.raises(GradcheckError, match="not reentrant"):
        gradcheck(Noisy.apply, (leaf(3),))
    assert gradcheck(Noisy.apply, (leaf(3),), nondet_tol=1e-6)
    with pytest.raises(ValueError, match="at least one input tensor to require gradient"):
        gradcheck(lambda t: t * 2, (ddpc.ones(2, dtype=ddpc.float64),))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        gradcheck(lambda t: t * 2, (ddpc.ones(2, requires_grad=True),), atol=1e-2, rtol=1e-2, eps=1e-3)
    assert any("not a double precision" in str(w.message) for w in caught)
    with pytest.raises(NotImplementedError):
        gradcheck(lambda t: t * 2, (leaf(2),), check_forward_ad=True)
