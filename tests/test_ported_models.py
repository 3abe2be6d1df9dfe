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
    g, = ddpc.autograd.grad(Cube.apply(x).sum(), x, create_graph=True)  # as PyTorch: computed once ...
    assert g.tolist() == [3.0, 12.0]
    with pytest.raises(RuntimeError, match="CubeBackward"):  # ... and refused when differentiated again
        ddpc.autograd.grad(g.sum(), x)


def test_dim_and_keepdim_take_numpys_names():
    # Spinning Up's SAC: log_prob(a).sum(axis=-1), as PyTorch's parser allows for every native op
    x = ddpc.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert x.sum(axis=-1).tolist() == [6.0, 15.0]
    assert x.mean(axis=0, keepdims=True).tolist() == [[2.5, 3.5, 4.5]]
    assert ddpc.sum(x, axis=1, keepdims=True).tolist() == [[6.0], [15.0]]
    values, indices = ddpc.max(x, axis=0)
    assert values.tolist() == [4.0, 5.0, 6.0] and indices.tolist() == [1, 1, 1]
    assert x.argmax(axis=1).tolist() == [2, 2]
    assert x.softmax(axis=0).sum(axis=0).tolist() == pytest.approx([1.0, 1.0, 1.0])
    assert ddpc.cat([x, x], axis=1).shape == (2, 6)
    assert x.unsqueeze(axis=1).shape == (2, 1, 3)
    with pytest.raises(TypeError, match="'dim' and its alias 'axis'"):
        x.sum(dim=0, axis=0)
    # the functions that have an axis argument of their own keep it
    assert ddpc.concatenate([x, x], axis=0).shape == (4, 3)


def test_module_list_takes_a_one_element_integer_tensor_as_index():
    # Mixtral's router: for expert_idx in mask.nonzero(): self.experts[expert_idx]
    experts = ddpc.nn.ModuleList([ddpc.nn.Identity(), ddpc.nn.ReLU(), ddpc.nn.Tanh()])
    hit = ddpc.tensor([[0], [2]])
    assert [type(experts[i]).__name__ for i in hit] == ["Identity", "Tanh"]
    assert experts[ddpc.tensor(-2)] is experts[1]
    experts[ddpc.tensor([1])] = ddpc.nn.Sigmoid()
    assert isinstance(experts[1], ddpc.nn.Sigmoid)
    for bad in (ddpc.tensor([0, 1]), ddpc.tensor([1.0])):
        with pytest.raises(TypeError):
            experts[bad]
    with pytest.raises(IndexError):
        experts[ddpc.tensor([3])]


def test_module_list_prints_runs_of_alike_modules_once():
    # a transformer's printout: its identical layers print once, as PyTorch's ModuleList prints them
    nn = ddpc.nn
    layers = nn.ModuleList([nn.Linear(2, 2) for _ in range(3)] + [nn.ReLU(), nn.Sequential(nn.Tanh())])
    assert repr(layers) == ("ModuleList(\n"
                            "  (0-2): 3 x Linear(in_features=2, out_features=2, bias=True)\n"
                            "  (3): ReLU()\n"
                            "  (4): Sequential(\n"
                            "    (0): Tanh()\n"
                            "  )\n"
                            ")")
    assert repr(nn.ModuleList()) == "ModuleList()"
    nested = nn.Module()
    nested.blocks = nn.ModuleList([nn.Sequential(nn.Linear(1, 1)) for _ in range(2)])
    assert repr(nested) == ("Module(\n"
                            "  (blocks): ModuleList(\n"
                            "    (0-1): 2 x Sequential(\n"
                            "      (0): Linear(in_features=1, out_features=1, bias=True)\n"
                            "    )\n"
                            "  )\n"
                            ")")
