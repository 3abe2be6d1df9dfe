"""The forms of test_api_coverage.py against PyTorch's own: keyword sizes
give PyTorch's results, the constants and reprs are PyTorch's, a torch.save
checkpoint loads through ddpc.hub from a file:// URL, the nn.modules names
ddpc resolves exist in torch with the same class relations, and the CUDA
memory statistics without CUDA are PyTorch's."""

import importlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ddpc  # noqa: E402

_KEYWORD_CALLS = {
    "reshape": lambda m, x: x.reshape(shape=(3, 2)),
    "view": lambda m, x: x.view(size=(3, 2)),
    "permute": lambda m, x: x.permute(dims=(1, 0)),
    "expand": lambda m, x: x[:1].expand(size=(4, 3)),
    "broadcast_to": lambda m, x: x[:1].broadcast_to(size=(2, 2, 3)),
    "flip": lambda m, x: x.flip(dims=(0, 1)),
    "tile": lambda m, x: x.tile(dims=(2, 1, 1)),
    "repeat": lambda m, x: x.repeat(repeats=(1, 2, 2)),
    "new_zeros": lambda m, x: x.new_zeros(size=(2,)),
    "new_ones": lambda m, x: x.new_ones(size=(2, 1)),
    "new_full": lambda m, x: x.new_full(size=(2,), fill_value=7),
    "zeros": lambda m, x: m.zeros(size=(2, 3)),
    "ones": lambda m, x: m.ones(size=[]),
    "full": lambda m, x: m.full(size=(2,), fill_value=2.5),
    "empty": lambda m, x: m.empty(size=(0, 3)),
    "rand": lambda m, x: m.rand(size=(4, 1)) * 0,
    "randn": lambda m, x: m.randn(size=(1, 4)) * 0,
}


@pytest.mark.parametrize("name", sorted(_KEYWORD_CALLS))
def test_keyword_sizes_match_pytorch(name):
    got = _KEYWORD_CALLS[name](ddpc, ddpc.arange(6.0).reshape(2, 3))
    want = _KEYWORD_CALLS[name](torch, torch.arange(6.0).reshape(2, 3))
    assert tuple(got.shape) == tuple(want.shape), name
    assert str(got.dtype).split(".")[-1] == str(want.dtype).split(".")[-1], name
    if name != "empty":
        np.testing.assert_array_equal(got.numpy(), want.numpy())


def test_both_forms_at_once_raise_typeerror_as_in_pytorch():
    for lib in (torch, ddpc):
        with pytest.raises(TypeError, match="multiple values for argument 'size'"):
            lib.zeros(2, size=(2,))
        with pytest.raises(TypeError, match="multiple values for argument 'shape'"):
            lib.ones(6).reshape(6, shape=(6,))


def test_constants_match_pytorch():
    for name in ("pi", "e", "inf", "newaxis"):
        assert getattr(ddpc, name) == getattr(torch, name), name
    assert np.isnan(ddpc.nan) and np.isnan(torch.nan)


def test_hub_loads_a_torch_checkpoint_and_has_torchs_signature(tmp_path, monkeypatch):
    import inspect

    monkeypatch.setattr(ddpc.hub, "_hub_dir", None)
    monkeypatch.setenv("DDPC_HOME", str(tmp_path / "home"))
    src = tmp_path / "net-0.pth"
    torch.save({"weight": torch.arange(6.0).reshape(2, 3)}, src)
    sd = ddpc.hub.load_state_dict_from_url(src.as_uri(), map_location="cpu", weights_only=True)
    assert sd["weight"].tolist() == [[0.0, 1.0, 2.0], [3.0, 4.0, 5.0]]
    for ours, theirs in ((ddpc.hub.load_state_dict_from_url, torch.hub.load_state_dict_from_url),
                         (ddpc.hub.download_url_to_file, torch.hub.download_url_to_file)):
        assert list(inspect.signature(ours).parameters) == list(inspect.signature(theirs).parameters)
    assert ddpc.hub.HASH_REGEX.pattern == torch.hub.HASH_REGEX.pattern


_NN_MODULE_NAMES = {
    "activation": ["MultiheadAttention", "GELU"], "batchnorm": ["_BatchNorm", "_NormBase", "LazyBatchNorm2d"],
    "container": ["_addindent", "Sequential"], "conv": ["_ConvNd", "LazyConv1d"], "dropout": ["_DropoutNd"],
    "linear": ["NonDynamicallyQuantizableLinear", "LazyLinear"], "module": ["_addindent", "Module"],
    "padding": ["_ConstantPadNd", "_ReflectionPadNd", "_ReplicationPadNd", "_CircularPadNd"],
    "pooling": ["_AvgPoolNd", "_AdaptiveAvgPoolNd", "_AdaptiveMaxPoolNd", "_MaxPoolNd"],
    "transformer": ["_get_activation_fn", "_get_clones"], "utils": ["_reverse_repeat_tuple", "_pair"],
}


def test_nn_modules_names_are_torchs_with_torchs_class_relations():
    found = {}
    for sub, names in _NN_MODULE_NAMES.items():
        ours = importlib.import_module(f"ddpc.nn.modules.{sub}")
        theirs = importlib.import_module(f"torch.nn.modules.{sub}")
        for name in names:
            found[name] = (getattr(ours, name), getattr(theirs, name))
    for base in ("_DropoutNd", "_ConstantPadNd", "_ReflectionPadNd", "_ReplicationPadNd", "_CircularPadNd",
                 "_AvgPoolNd", "_AdaptiveAvgPoolNd"):
        ours, theirs = found[base]
        for name in ddpc.nn.__all__:
            cls = getattr(torch.nn, name, None)
            if isinstance(cls, type) and not name.startswith("Lazy"):
                assert issubclass(getattr(ddpc.nn, name), ours) == issubclass(cls, theirs), (name, base)
    assert found["_addindent"][0]("x\ny\n", 3) == found["_addindent"][1]("x\ny\n", 3)
    assert found["_reverse_repeat_tuple"][0]((1, 2, 3), 2) == found["_reverse_repeat_tuple"][1]((1, 2, 3), 2)
    assert found["_get_activation_fn"][0]("relu").__name__ == found["_get_activation_fn"][1]("relu").__name__


def test_pytree_matches_torchs():
    import collections

    import ddpc.utils._pytree as ours
    import torch.utils._pytree as theirs

    Pair = collections.namedtuple("Pair", "x y")
    tree = {"b": (1, [2.0, None]), "a": Pair(3, 4), "c": collections.OrderedDict(z=5)}
    assert ours.tree_leaves(tree) == theirs.tree_leaves(tree)
    for fn in (lambda v: v, lambda v: None if v is None else v * 2):
        assert ours.tree_map(fn, tree) == theirs.tree_map(fn, tree)
    add = (lambda a, b: a + b)
    assert ours.tree_map(add, (1, [2]), (3, [4])) == theirs.tree_map(add, (1, [2]), (3, [4]))
    leaf = (lambda n: isinstance(n, list))
    assert ours.tree_leaves([[1], (2,)], is_leaf=leaf) == theirs.tree_leaves([[1], (2,)], is_leaf=leaf)
    assert ours.tree_structure(tree).num_leaves == theirs.tree_structure(tree).num_leaves


def test_required_and_params_t_as_torchs():
    from ddpc.optim.optimizer import ParamsT, required
    from torch.optim.optimizer import required as torch_required

    assert repr(required) == repr(torch_required) and ParamsT is not None


def test_cuda_memory_statistics_without_cuda_are_pytorchs():
    if torch.cuda.is_initialized() or ddpc.cuda.is_initialized():
        pytest.skip("a process that has used CUDA reports real statistics")
    for name in ("memory_allocated", "max_memory_allocated", "memory_reserved", "max_memory_reserved"):
        assert getattr(ddpc.cuda, name)() == getattr(torch.cuda, name)() == 0, name


def test_default_device_and_version_as_torchs():
    assert str(ddpc.get_default_device()) == str(torch.get_default_device()) == "cpu"
    assert type(ddpc.version.cuda) in (type(None), str) and ddpc.version.hip is torch.version.hip is None
