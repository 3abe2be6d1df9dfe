"""PyTorch API forms that ported training code uses: sizes and dims given by
keyword (``x.reshape(shape=...)``, ``ddpc.zeros(size=...)``), the math
constants, ddpc.hub's cached checkpoint downloads (file:// URLs, no
network), torch.nn.modules' submodule paths and private base classes,
ddpc.utils._pytree, optim.optimizer's ``required`` and ``ParamsT``, the
default device and ddpc.version."""

import copy
import hashlib
import math
import pickle

import numpy as np
import pytest

import ddpc
from ddpc import nn


def _same(got, want):
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_array_equal(got.numpy(), want.numpy())


# ---- sizes and dims by keyword ------------------------------------------------------------

def test_tensor_methods_take_their_sizes_and_dims_by_keyword():
    x = ddpc.arange(6.0).reshape(2, 3)
    row = x[:1]
    for got, want in ((x.reshape(shape=(3, 2)), x.reshape(3, 2)), (x.reshape(shape=[6]), x.reshape(6)),
                      (x.view(size=(3, 2)), x.view(3, 2)), (x.view(size=(-1,)), x.view(-1)),
                      (x.permute(dims=(1, 0)), x.permute(1, 0)), (row.expand(size=(4, 3)), row.expand(4, 3)),
                      (row.broadcast_to(size=(4, 3)), row.expand(4, 3)), (x.flip(dims=(0,)), x.flip(0)),
                      (x.tile(dims=(2,)), x.tile(2)), (x.repeat(repeats=(2, 1)), x.repeat(2, 1)),
                      (x.new_zeros(size=(2,)), x.new_zeros(2)), (x.new_ones(size=[2, 2]), x.new_ones(2, 2)),
                      (x.new_full(size=(2,), fill_value=3.0), x.new_full((2,), 3.0))):
        _same(got, want)
    assert x.new_empty(size=(4, 1)).shape == (4, 1)


def test_factories_take_size_by_keyword():
    for got, want in ((ddpc.zeros(size=(2, 3)), ddpc.zeros(2, 3)), (ddpc.ones(size=[2]), ddpc.ones(2)),
                      (ddpc.zeros(size=(), dtype=ddpc.int64), ddpc.zeros((), dtype=ddpc.int64)),
                      (ddpc.full(size=(2,), fill_value=1.5), ddpc.full((2,), 1.5))):
        _same(got, want)
    assert ddpc.empty(size=(3, 1)).shape == (3, 1)
    _same(ddpc.rand(size=(2, 2), generator=ddpc.Generator().manual_seed(1)),
          ddpc.rand(2, 2, generator=ddpc.Generator().manual_seed(1)))
    _same(ddpc.randn(size=(5,), generator=ddpc.Generator().manual_seed(2)),
          ddpc.randn(5, generator=ddpc.Generator().manual_seed(2)))


def test_sizes_given_both_ways_raise():
    x = ddpc.ones(6)
    for call, what in ((lambda: ddpc.zeros(2, size=(2,)), "zeros"), (lambda: x.reshape(6, shape=(6,)), "reshape"),
                       (lambda: x.permute(0, dims=(0,)), "permute"), (lambda: x.new_ones(2, size=(2,)), "ones")):
        with pytest.raises(TypeError, match=f"{what}\\(\\) got multiple values"):
            call()


def test_view_by_dtype_and_the_positional_forms_are_unchanged():
    x = ddpc.ones(2, 2)
    assert x.view(ddpc.int32).dtype == ddpc.int32 and x.view(dtype=ddpc.int32).dtype == ddpc.int32
    assert x.view(4).shape == (4,) and x.view((1, 4)).shape == (1, 4) and x.reshape([4, 1]).shape == (4, 1)
    assert x.permute([1, 0]).shape == (2, 2) and ddpc.zeros((2, 1)).shape == (2, 1) and ddpc.ones().shape == ()


# ---- constants ------------------------------------------------------------------------------

def test_math_constants():
    from ddpc import e, inf, nan, pi

    assert (pi, e, inf) == (math.pi, math.e, math.inf) and math.isnan(nan) and ddpc.newaxis is None
    assert {"pi", "e", "inf", "nan"} <= set(ddpc.__all__)
    assert ddpc.sin(ddpc.tensor(ddpc.pi / 2)).item() == pytest.approx(1.0)


# ---- ddpc.hub -----------------------------------------------------------------------------

def _published(tmp_path, name="weights.pt"):
    """A checkpoint at a file:// URL, with its SHA-256."""
    src = tmp_path / "server" / name
    src.parent.mkdir()
    ddpc.save({"w": ddpc.arange(4.0), "step": 3}, src)
    return src, src.as_uri(), hashlib.sha256(src.read_bytes()).hexdigest()


@pytest.fixture
def hub_home(tmp_path, monkeypatch):
    monkeypatch.setattr(ddpc.hub, "_hub_dir", None)
    for var in ("TORCH_HOME", "XDG_CACHE_HOME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("DDPC_HOME", str(tmp_path / "home"))
    return tmp_path / "home" / "hub"


def test_hub_downloads_once_into_the_cache_then_reads_it_from_there(tmp_path, hub_home):
    src, url, _ = _published(tmp_path)
    assert ddpc.hub.get_dir() == str(hub_home)
    sd = ddpc.hub.load_state_dict_from_url(url)
    assert sd["step"] == 3 and sd["w"].tolist() == [0.0, 1.0, 2.0, 3.0]
    assert (hub_home / "checkpoints" / "weights.pt").read_bytes() == src.read_bytes()
    src.unlink()  # the cached copy is read, nothing is fetched again
    assert ddpc.utils.model_zoo.load_url(url)["step"] == 3
    assert ddpc.utils.model_zoo.load_url is ddpc.hub.load_state_dict_from_url


def test_hub_model_dir_file_name_and_set_dir(tmp_path, hub_home):
    _, url, _ = _published(tmp_path)
    ddpc.hub.load_state_dict_from_url(url, model_dir=tmp_path / "m", file_name="named.pt", map_location="cpu")
    assert (tmp_path / "m" / "named.pt").exists()
    ddpc.hub.set_dir(tmp_path / "elsewhere")
    assert ddpc.hub.get_dir() == str(tmp_path / "elsewhere")
    ddpc.hub.load_state_dict_from_url(url)
    assert (tmp_path / "elsewhere" / "checkpoints" / "weights.pt").exists() and not hub_home.exists()


def test_hub_dir_follows_torch_home_then_the_user_cache(tmp_path, hub_home, monkeypatch):
    monkeypatch.delenv("DDPC_HOME")
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "th"))
    assert ddpc.hub.get_dir() == str(tmp_path / "th" / "hub")
    monkeypatch.delenv("TORCH_HOME")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert ddpc.hub.get_dir() == str(tmp_path / "xdg" / "ddpc" / "hub")


def test_hub_checks_the_hash_prefix_in_the_file_name(tmp_path, hub_home):
    src, _, digest = _published(tmp_path)
    named = src.with_name(f"resnet-{digest[:8]}.pt")
    src.rename(named)
    assert ddpc.hub.load_state_dict_from_url(named.as_uri(), check_hash=True)["step"] == 3
    bad = src.with_name("resnet-0badc0de.pt")
    named.rename(bad)
    with pytest.raises(RuntimeError, match="invalid hash value"):
        ddpc.hub.load_state_dict_from_url(bad.as_uri(), check_hash=True)
    assert sorted(p.name for p in (hub_home / "checkpoints").iterdir()) == [named.name]  # nothing left behind
    assert ddpc.hub.load_state_dict_from_url(bad.as_uri())["step"] == 3  # unchecked without check_hash


def test_download_url_to_file(tmp_path):
    src, url, digest = _published(tmp_path)
    ddpc.hub.download_url_to_file(url, tmp_path / "copy.pt", hash_prefix=digest[:6], progress=False)
    assert (tmp_path / "copy.pt").read_bytes() == src.read_bytes()
    with pytest.raises(RuntimeError, match=digest):
        ddpc.hub.download_url_to_file(url, tmp_path / "other.pt", hash_prefix="ffff" if digest[0] != "f" else "0000")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["copy.pt", "server"]


def test_hub_load_of_a_repository_is_refused_clearly():
    with pytest.raises(NotImplementedError, match="load_state_dict_from_url"):
        ddpc.hub.load("pytorch/vision", "resnet18")


# ---- torch.nn.modules' paths ------------------------------------------------------------

def test_nn_modules_submodules_hold_torchs_names():
    from ddpc.nn.modules.activation import MultiheadAttention
    from ddpc.nn.modules.batchnorm import _BatchNorm, _NormBase, LazyBatchNorm1d
    from ddpc.nn.modules.container import _addindent
    from ddpc.nn.modules.conv import _ConvNd, LazyConv2d
    from ddpc.nn.modules.dropout import _DropoutNd
    from ddpc.nn.modules.linear import LazyLinear, NonDynamicallyQuantizableLinear
    from ddpc.nn.modules.padding import _CircularPadNd, _ConstantPadNd, _ReflectionPadNd, _ReplicationPadNd
    from ddpc.nn.modules.pooling import _AdaptiveAvgPoolNd, _AvgPoolNd
    from ddpc.nn.modules.transformer import _get_activation_fn, _get_clones
    from ddpc.nn.modules.utils import _reverse_repeat_tuple

    assert MultiheadAttention is nn.MultiheadAttention and LazyLinear is nn.LazyLinear
    assert issubclass(nn.BatchNorm2d, _BatchNorm) and issubclass(_BatchNorm, _NormBase)
    assert issubclass(LazyBatchNorm1d, nn.BatchNorm1d) and issubclass(LazyConv2d, nn.Conv2d)
    assert issubclass(nn.Conv1d, _ConvNd) and issubclass(NonDynamicallyQuantizableLinear, nn.Linear)
    for cls in (nn.Dropout, nn.Dropout1d, nn.Dropout2d, nn.Dropout3d, nn.AlphaDropout, nn.FeatureAlphaDropout):
        assert issubclass(cls, _DropoutNd), cls
    for base, classes in ((_ConstantPadNd, (nn.ConstantPad1d, nn.ConstantPad3d, nn.ZeroPad2d)),
                          (_ReflectionPadNd, (nn.ReflectionPad1d, nn.ReflectionPad2d, nn.ReflectionPad3d)),
                          (_ReplicationPadNd, (nn.ReplicationPad1d, nn.ReplicationPad3d)),
                          (_CircularPadNd, (nn.CircularPad2d,)),
                          (_AvgPoolNd, (nn.AvgPool1d, nn.AvgPool2d, nn.AvgPool3d)),
                          (_AdaptiveAvgPoolNd, (nn.AdaptiveAvgPool1d, nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool3d))):
        for cls in classes:
            assert issubclass(cls, base), (cls, base)
    assert not issubclass(nn.AdaptiveMaxPool2d, _AdaptiveAvgPoolNd) and not issubclass(nn.ZeroPad1d, _ReflectionPadNd)
    assert _get_activation_fn("gelu") is nn.functional.gelu
    with pytest.raises(RuntimeError, match="relu/gelu"):
        _get_activation_fn("tanh")
    layers = _get_clones(nn.Linear(2, 2), 3)
    assert isinstance(layers, nn.ModuleList) and len(layers) == 3 and layers[0].weight is not layers[1].weight
    assert _addindent("a\n\nb", 2) == "a\n\n  b" and _reverse_repeat_tuple((1, 2), 2) == (2, 2, 1, 1)


def test_the_new_base_classes_keep_the_layers_behaviour():
    class HalfDropout(nn.modules.dropout._DropoutNd):
        def forward(self, input):
            return input * (1 - self.p)

    d = HalfDropout(0.25, inplace=False)
    assert repr(d) == "HalfDropout(p=0.25, inplace=False)" and d(ddpc.ones(2)).tolist() == [0.75, 0.75]
    with pytest.raises(ValueError, match="between 0 and 1"):
        nn.Dropout(1.5)
    x = ddpc.arange(4.0).reshape(1, 1, 4)
    assert nn.ReflectionPad1d(1)(x).tolist() == [[[1.0, 0.0, 1.0, 2.0, 3.0, 2.0]]]
    assert nn.ZeroPad1d(1)(x).tolist() == [[[0.0, 0.0, 1.0, 2.0, 3.0, 0.0]]]
    assert nn.ReplicationPad1d((0, 1))(x).tolist() == [[[0.0, 1.0, 2.0, 3.0, 3.0]]]
    assert nn.AvgPool1d(2)(x).tolist() == [[[0.5, 2.5]]] and nn.AdaptiveAvgPool1d(1)(x).tolist() == [[[1.5]]]
    assert repr(nn.AvgPool2d(2)) == "AvgPool2d(kernel_size=2, stride=2, padding=0)"
    assert repr(nn.Sequential(nn.Sequential(nn.ReLU()))) == "Sequential(\n  (0): Sequential(\n    (0): ReLU()\n  )\n)"


# ---- ddpc.utils._pytree -----------------------------------------------------------------

def test_pytree_functions_by_torchs_names():
    import collections

    from ddpc.utils._pytree import (TreeSpec, tree_all, tree_any, tree_flatten, tree_leaves, tree_map, tree_map_only,
                                    tree_structure, tree_unflatten)

    Pair = collections.namedtuple("Pair", "x y")
    tree = {"b": (1, [2.0, None]), "a": Pair(3, 4)}
    leaves, spec = tree_flatten(tree)
    assert leaves == [1, 2.0, None, 3, 4] and isinstance(spec, TreeSpec) and spec.num_leaves == 5
    assert tree_unflatten([5, 6, 7, 8, 9], spec) == {"b": (5, [6, 7]), "a": Pair(8, 9)}
    assert spec.unflatten(leaves) == tree and tree_structure(tree) == spec
    assert tree_structure((1, 2)) != tree_structure([1, 2])
    with pytest.raises(ValueError, match="3 leaves for a structure of 5"):
        tree_unflatten([1, 2, 3], spec)
    assert tree_map(lambda a, b: a + b, (1, [2]), (10, [20])) == (11, [22])
    with pytest.raises(ValueError, match="different structures"):
        tree_map(lambda a, b: a, (1, 2), (1, 2, 3))
    assert tree_leaves(([1, 2], 3), is_leaf=lambda n: isinstance(n, list)) == [[1, 2], 3]
    assert tree_map_only(int, lambda v: -v, (1, 2.5, [3])) == (-1, 2.5, [-3])
    assert tree_all(lambda v: v > 0, [1, (2,)]) and not tree_any(lambda v: v > 5, {"k": [1, 2]})
    x = ddpc.ones(2)
    assert tree_map(lambda t: t * 2, {"x": x})["x"].tolist() == [2.0, 2.0]


# ---- optim.optimizer ------------------------------------------------------------------------

def test_required_hyper_parameters_and_params_t():
    from ddpc.optim.optimizer import ParamsT, required

    class PlainSGD(ddpc.optim.Optimizer):
        def __init__(self, params: ParamsT, lr=required):
            super().__init__(params, {"lr": lr})

    a, b = nn.Parameter(ddpc.ones(2)), nn.Parameter(ddpc.ones(2))
    assert PlainSGD([{"params": [a], "lr": 0.1}]).param_groups[0]["lr"] == 0.1
    with pytest.raises(ValueError, match="required optimization parameter lr"):
        PlainSGD([b])
    assert repr(required) == "<required parameter>"
    assert copy.deepcopy(required) is required and pickle.loads(pickle.dumps(required)) is required


# ---- default device and version ----------------------------------------------------------

def test_default_device_is_the_host():
    assert ddpc.get_default_device() == ddpc.device("cpu")
    ddpc.set_default_device("cpu")
    ddpc.set_default_device(None)
    with pytest.raises(NotImplementedError, match="device="):
        ddpc.set_default_device("cuda:0")
    assert ddpc.zeros(1).device == ddpc.get_default_device()


def test_version_module():
    assert ddpc.version.__version__ == ddpc.__version__ and ddpc.version.hip is None
    cuda = ddpc.version.cuda
    assert cuda is None or all(part.isdigit() for part in cuda.split("."))
    if not ddpc._C.cuda_compiled():
        assert cuda is None
