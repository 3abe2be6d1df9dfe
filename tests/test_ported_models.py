"""Fixes found by porting well-known PyTorch training code to ddpc (the
comparisons with PyTorch itself are in test_ported_models_torch.py); each
checked here against hand-computed values."""

import pytest

import ddpc


def test_autograd_function_imports_from_its_pytorch_module():
    # detectron2's and mmcv's custom ops: from torch.autograd.function import once_differentiable
    from ddpc.autograd.function import Function, FunctionCtx, once_differentiable

    assert Function is ddpc.autograd.Function and FunctionCtx is ddpc.autograd.FunctionCtx

    class Cube(Function):
        @staticmethod
        def forward(ctx, x):
            ctx.save_for_backward(x)
            return x ** 3

        @staticmethod
        @once_differentiable
        def backward(ctx, grad):
            x, = ctx.saved_tensors
            return 3 * x ** 2 * grad

    x = ddpc.tensor([1.0, -2.0], requires_grad=True)
    g, = ddpc.autograd.grad(Cube.apply(x).sum(), x)
    assert g.tolist() == [3.0, 12.0]
    with pytest.raises(RuntimeError, match="CubeBackward"):
        ddpc.autograd.grad(Cube.apply(x).sum(), x, create_graph=True)
