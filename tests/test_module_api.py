"""nn.Module's hooks and helpers: forward (pre-)hooks, also the global ones, full
backward (pre-)hooks, get_submodule/get_parameter/get_buffer/set_submodule, dtype casts, to_empty,
extra state, the state dict protocol (_save_to_state_dict, _load_from_state_dict, _version and
_metadata, the state dict and load hooks, assign=True, the strict rule for unexpected keys), train()
through each child's own, the assignments PyTorch refuses, ParameterDict's dict methods and dir()."""

import copy
import math
from collections import OrderedDict

import numpy as np
import pytest

import ddpc
from ddpc import nn
from ddpc.nn.modules import module as module_api
from ddpc.nn.modules.module import register_module_forward_hook, register_module_forward_pre_hook


def _linear(in_f=3, out_f=2, bias=False):
    ddpc.manual_seed(0)
    return nn.Linear(in_f, out_f, bias=bias)


class _Scale(nn.Module):
    def forward(self, x, scale=1.0):
        return x * scale


# ---- forward hooks ----------------------------------------------------------------------------

def test_forward_hooks_run_in_order_with_prepend_and_removal():
    m, calls = _Scale(), []
    h1 = m.register_forward_pre_hook(lambda mod, args: calls.append("pre1"))
    m.register_forward_pre_hook(lambda mod, args: calls.append("pre0"), prepend=True)
    m.register_forward_hook(lambda mod, args, out: calls.append("post1"))
    h2 = m.register_forward_hook(lambda mod, args, out: calls.append("post0"), prepend=True)
    m(ddpc.ones(2))
    assert calls == ["pre0", "pre1", "post0", "post1"]
    h1.remove()
    h2.remove()
    calls.clear()
    m(ddpc.ones(2))
    assert calls == ["pre0", "post1"]


def test_forward_hooks_replace_input_and_output():
    m = _Scale()
    m.register_forward_pre_hook(lambda mod, args: args[0] + 1)  # a non-tuple becomes the only argument
    m.register_forward_hook(lambda mod, args, out: out * 10)
    np.testing.assert_allclose(m(ddpc.tensor([1.0, 2.0])).numpy(), [20.0, 30.0])


def test_forward_hooks_with_kwargs_see_and_replace_kwargs():
    m, seen = _Scale(), []
    m.register_forward_pre_hook(lambda mod, args, kwargs: (args, {"scale": kwargs["scale"] * 2}), with_kwargs=True)
    m.register_forward_hook(lambda mod, args, kwargs, out: seen.append(dict(kwargs)), with_kwargs=True)
    np.testing.assert_allclose(m(ddpc.tensor([1.0]), scale=3.0).numpy(), [6.0])
    assert seen == [{"scale": 6.0}]
    m.register_forward_pre_hook(lambda mod, args, kwargs: "bad", with_kwargs=True)
    with pytest.raises(RuntimeError, match="new_args, new_kwargs"):
        m(ddpc.tensor([1.0]), scale=1.0)


def test_always_call_forward_hook_runs_when_forward_raises():
    class Failing(nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    m, calls = Failing(), []
    m.register_forward_hook(lambda mod, args, out: calls.append(("always", out)), always_call=True)
    m.register_forward_hook(lambda mod, args, out: calls.append("normal"))
    with pytest.raises(ValueError, match="boom"):
        m(ddpc.ones(1))
    assert calls == [("always", None)]


def test_handle_works_as_context_manager():
    m, calls = _Scale(), []
    with m.register_forward_hook(lambda mod, args, out: calls.append(1)):
        m(ddpc.ones(1))
    m(ddpc.ones(1))
    assert calls == [1]


# ---- full backward hooks -------------------------------------------------------------------------

def test_full_backward_hook_gets_grad_input_and_grad_output():
    m = _linear()
    w = m.weight.detach().numpy()
    x = ddpc.randn(4, 3, requires_grad=True)
    g = np.arange(8, dtype=np.float32).reshape(4, 2)
    seen = {}

    def hook(mod, grad_input, grad_output):
        assert mod is m
        seen["gi"] = [t.numpy().copy() for t in grad_input]
        seen["go"] = [t.numpy().copy() for t in grad_output]

    m.register_full_backward_hook(hook)
    m(x).backward(ddpc.tensor(g))
    np.testing.assert_allclose(seen["go"][0], g)
    np.testing.assert_allclose(seen["gi"][0], g @ w, rtol=1e-5)
    np.testing.assert_allclose(x.grad.numpy(), g @ w, rtol=1e-5)
    np.testing.assert_allclose(m.weight.grad.numpy(), g.T @ x.detach().numpy(), rtol=1e-5)


def test_full_backward_hooks_replace_gradients_and_run_in_order():
    m = _linear()
    w = m.weight.detach().numpy()
    x = ddpc.randn(4, 3, requires_grad=True)
    order = []
    m.register_full_backward_pre_hook(lambda mod, go: (order.append("pre"), (go[0] * 3,))[1])
    m.register_full_backward_hook(lambda mod, gi, go: order.append("second"))
    m.register_full_backward_hook(lambda mod, gi, go: (order.append("first"), (gi[0] * 2,))[1], prepend=True)
    m(x).sum().backward()
    assert order == ["pre", "first", "second"]
    np.testing.assert_allclose(x.grad.numpy(), 6 * np.ones((4, 2)) @ w, rtol=1e-5)
    # The weight's gradient sees the grad_output the pre-hook replaced, not grad_input's replacement.
    np.testing.assert_allclose(m.weight.grad.numpy(), 3 * np.ones((2, 4)) @ x.detach().numpy(), rtol=1e-5)


def test_full_backward_hook_with_inputs_that_need_no_grad():
    m = _linear()
    seen = []
    m.register_full_backward_hook(lambda mod, gi, go: seen.append((gi, go[0].numpy().copy())))
    m(ddpc.randn(4, 3)).sum().backward()
    (gi, go), = seen
    assert gi == (None,)
    np.testing.assert_allclose(go, np.ones((4, 2)))


def test_full_backward_hook_multiple_inputs_and_outputs():
    class Pair(nn.Module):
        def forward(self, a, b):
            return a * b, a + b

    m, seen = Pair(), {}
    m.register_full_backward_hook(lambda mod, gi, go: seen.update(gi=gi, go=go))
    a = ddpc.tensor([1.0, 2.0], requires_grad=True)
    b = ddpc.tensor([3.0, 5.0], requires_grad=True)
    p, s = m(a, b)
    (p * 2 + s * 7).sum().backward()
    np.testing.assert_allclose(seen["go"][0].numpy(), [2.0, 2.0])
    np.testing.assert_allclose(seen["go"][1].numpy(), [7.0, 7.0])
    np.testing.assert_allclose(seen["gi"][0].numpy(), [2 * 3 + 7, 2 * 5 + 7])
    np.testing.assert_allclose(seen["gi"][1].numpy(), [2 * 1 + 7, 2 * 2 + 7])
    np.testing.assert_allclose(a.grad.numpy(), [13.0, 17.0])


def test_removed_backward_hook_does_not_run_and_bad_replacement_raises():
    m, calls = _linear(), []
    m.register_full_backward_hook(lambda mod, gi, go: calls.append(1)).remove()
    m(ddpc.randn(2, 3, requires_grad=True)).sum().backward()
    assert calls == []
    m.register_full_backward_hook(lambda mod, gi, go: (gi[0], gi[0]))
    with pytest.raises(RuntimeError, match="tuple of 1 gradients"):
        m(ddpc.randn(2, 3, requires_grad=True)).sum().backward()


# ---- DDP and deepcopy ------------------------------------------------------------------------------

def ddp_hook_worker(rank, world):
    import ddpc.distributed as dist

    dist.init_process_group("cpu")
    model = _linear()
    calls = []
    model.register_forward_hook(lambda mod, args, out: calls.append("forward"))
    model.register_full_backward_hook(lambda mod, gi, go: calls.append(("backward", go[0].numpy().tolist())))
    ddp = nn.parallel.DistributedDataParallel(model)
    ddp(ddpc.ones(1, 3, requires_grad=True) * (rank + 1)).sum().backward()
    grad = model.weight.grad.numpy().copy()
    dist.destroy_process_group()
    return calls, grad


def test_module_hooks_fire_under_ddp():
    world = 2
    results = ddpc.spawn(ddp_hook_worker, args=(world,), nprocs=world)
    assert len(results) == world
    for calls, grad in results:
        assert calls == ["forward", ("backward", [[1.0, 1.0]])]
        np.testing.assert_allclose(grad, np.full((2, 3), 1.5))  # mean of ranks' inputs 1 and 2


def test_deepcopy_keeps_hooks():
    m, calls = _Scale(), []
    m.register_forward_hook(lambda mod, args, out: calls.append(mod))
    c = copy.deepcopy(m)
    c(ddpc.ones(1))
    assert calls == [c]


# ---- helpers ------------------------------------------------------------------------------------------

def test_get_submodule_parameter_and_buffer():
    net = nn.Sequential(nn.Linear(2, 3), nn.Sequential(nn.BatchNorm1d(3)))
    assert net.get_submodule("") is net
    assert net.get_submodule("1.0") is net[1][0]
    assert net.get_parameter("0.weight") is net[0].weight
    assert net.get_buffer("1.0.running_mean") is net[1][0].running_mean
    with pytest.raises(AttributeError, match="has no attribute `x`"):
        net.get_submodule("0.x")
    with pytest.raises(AttributeError, match="is not an nn.Module"):
        net.get_submodule("0.weight")
    with pytest.raises(AttributeError, match="is not an nn.Parameter"):
        net.get_parameter("1.0.running_mean")
    with pytest.raises(AttributeError, match="is not a buffer"):
        net.get_buffer("0.weight")


def test_half_bfloat16_and_type_cast_parameters():
    net = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3))
    w = net[0].weight
    assert net.half()[0].weight.dtype is ddpc.float16 and net[0].weight is w
    assert net[1].num_batches_tracked.dtype is ddpc.int64
    assert net.bfloat16()[1].running_var.dtype is ddpc.bfloat16
    net.type(ddpc.float64)
    assert net[0].weight.dtype is ddpc.float64 and net[1].num_batches_tracked.dtype is ddpc.float64


class _Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(2, 2)
        self.steps = 0

    def get_extra_state(self):
        return {"steps": self.steps}

    def set_extra_state(self, state):
        self.steps = state["steps"]


def test_extra_state_round_trips_through_state_dict():
    src = nn.Sequential(_Counter())
    src[0].steps = 7
    sd = src.state_dict()
    assert list(sd) == ["0._extra_state", "0.lin.weight", "0.lin.bias"]
    assert sd["0._extra_state"] == {"steps": 7}
    dst = nn.Sequential(_Counter())
    dst.load_state_dict(sd)
    assert dst[0].steps == 7
    np.testing.assert_array_equal(dst[0].lin.weight.numpy(), src[0].lin.weight.numpy())
    del sd["0._extra_state"]
    with pytest.raises(RuntimeError, match='Missing key.*"0._extra_state"'):
        dst.load_state_dict(sd)
    assert dst.load_state_dict(sd, strict=False).missing_keys == ["0._extra_state"]


def test_extra_state_without_set_extra_state_is_unexpected():
    class OnlyGet(nn.Module):
        def get_extra_state(self):
            return 1

    m = OnlyGet()
    sd = m.state_dict()
    assert sd == {"_extra_state": 1}
    with pytest.raises(RuntimeError, match='Unexpected key.*"_extra_state"'):
        m.load_state_dict(sd)


def test_norm_layers_load_state_dicts_without_num_batches_tracked():
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2), nn.InstanceNorm1d(2, track_running_stats=True))
    model[1].num_batches_tracked.fill_(5)
    state = {k: v for k, v in model.state_dict().items() if not k.endswith("num_batches_tracked")}
    state["1.running_mean"] = ddpc.tensor([1.0, 2.0])
    assert model.load_state_dict(state) == ([], [])  # strict, as PyTorch's norm layers accept older state dicts
    assert int(model[1].num_batches_tracked) == 5 and model[1].running_mean.tolist() == [1.0, 2.0]
    del state["1.running_mean"]
    with pytest.raises(RuntimeError, match="running_mean"):
        model.load_state_dict(state)


def test_functional_call_replaces_parameters_for_one_call_and_restores_them():
    net = nn.Sequential(nn.Linear(3, 2), nn.ReLU(), nn.Linear(2, 1))
    before = {k: v.detach().numpy().copy() for k, v in net.state_dict().items()}
    x = ddpc.tensor(np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32))
    fast = {name: (p * 2).detach().requires_grad_(True) for name, p in net.named_parameters()}
    out = ddpc.func.functional_call(net, fast, (x,))
    h = np.maximum(x.numpy() @ fast["0.weight"].detach().numpy().T + fast["0.bias"].detach().numpy(), 0)
    np.testing.assert_allclose(out.detach().numpy(),
                               h @ fast["2.weight"].detach().numpy().T + fast["2.bias"].detach().numpy(), rtol=1e-5)
    out.sum().backward()
    assert all(fast[name].grad is not None for name in fast)
    assert all(p.grad is None for p in net.parameters())
    for k, v in net.state_dict().items():
        np.testing.assert_array_equal(v.numpy(), before[k])
    assert isinstance(net[0].weight, nn.Parameter)
    with pytest.raises(ZeroDivisionError):
        ddpc.func.functional_call(nn.Sequential(net, Raises()), fast_prefixed(fast), x)
    assert isinstance(net[0].weight, nn.Parameter) and net[0].weight.shape == (2, 3)


class Scaled(nn.Linear):
    def forward(self, x):
        return super().forward(x) * getattr(self, "scale", 1.0)


def test_functional_call_sets_other_names_as_attributes_for_the_call():
    layer = Scaled(2, 2)
    x = ddpc.ones(1, 2)
    plain = layer(x).detach().numpy()
    out = ddpc.func.functional_call(layer, {"scale": ddpc.tensor(3.0), "extra": x}, x)
    np.testing.assert_allclose(out.detach().numpy(), 3 * plain, rtol=1e-6)
    assert not hasattr(layer, "scale") and not hasattr(layer, "extra")
    with pytest.raises(AttributeError, match="has no attribute `nosub`"):
        ddpc.func.functional_call(layer, {"nosub.weight": x}, x)
    with pytest.raises(TypeError, match="'in_features' names a int attribute"):
        ddpc.func.functional_call(layer, {"in_features": x}, x)
    assert layer.in_features == 2


class Raises(nn.Module):
    def forward(self, x):
        raise ZeroDivisionError


def fast_prefixed(fast):
    return {"0." + k: v for k, v in fast.items()}


def test_functional_call_buffers_ties_and_errors():
    bn = nn.BatchNorm1d(2)
    stats = ddpc.zeros(2)
    x = ddpc.tensor(np.array([[1.0, 2.0], [3.0, 6.0]], dtype=np.float32))
    ddpc.func.functional_call(bn, {"running_mean": stats}, x)
    np.testing.assert_allclose(stats.numpy(), [0.2, 0.4], rtol=1e-6)  # the given buffer took the update
    np.testing.assert_array_equal(bn.running_mean.numpy(), [0.0, 0.0])

    tied = nn.Sequential(nn.Linear(2, 2, bias=False), nn.Linear(2, 2, bias=False))
    tied[1].weight = tied[0].weight  # two modules, one parameter
    w = ddpc.eye(2) * 3
    out = ddpc.func.functional_call(tied, {"0.weight": w}, ddpc.ones(1, 2))
    np.testing.assert_allclose(out.numpy(), [[9.0, 9.0]])  # both uses of the shared weight replaced
    out = ddpc.func.functional_call(tied, {"0.weight": w}, ddpc.ones(1, 2), tie_weights=False)
    assert not np.allclose(out.detach().numpy(), [[9.0, 9.0]])
    with pytest.raises(ValueError, match=r"multiple values for keys \['0.weight', '1.weight'\], which are tied"):
        ddpc.func.functional_call(tied, {"0.weight": w, "1.weight": w * 1}, ddpc.ones(1, 2))
    out = ddpc.func.functional_call(tied, {"0.weight": w, "1.weight": w}, ddpc.ones(1, 2), strict=True)
    np.testing.assert_allclose(out.numpy(), [[9.0, 9.0]])  # the same tensor under both names is no conflict
    with pytest.raises(RuntimeError, match="Unexpected key\\(s\\): 'extra'.\n\tMissing key\\(s\\): 'bias'."):
        ddpc.func.functional_call(nn.Linear(2, 2), {"weight": w, "extra": w}, ddpc.ones(1, 2), strict=True)
    with pytest.raises(ValueError, match="more than one"):
        ddpc.func.functional_call(nn.Linear(2, 2), ({"weight": w}, {"weight": w}), ddpc.ones(1, 2))
    assert ddpc.nn.utils.stateless.functional_call is ddpc.func.functional_call


def test_transposed_convolution_draws_its_weight_once():
    ddpc.manual_seed(3)
    layer = nn.ConvTranspose2d(4, 6, 3)
    ddpc.manual_seed(3)
    weight = ddpc.empty(4, 6, 3, 3)
    nn.init.kaiming_uniform_(weight, a=math.sqrt(5))
    bias = ddpc.empty(6)
    nn.init.uniform_(bias, -1 / math.sqrt(6 * 9), 1 / math.sqrt(6 * 9))
    np.testing.assert_array_equal(layer.weight.detach().numpy(), weight.numpy())
    np.testing.assert_array_equal(layer.bias.detach().numpy(), bias.numpy())


# ---- global forward hooks (torch.nn.modules.module's register_module_forward_*hook) ----


def test_global_forward_hooks_run_around_every_module_before_its_own():
    order = []
    model = nn.Sequential(nn.Linear(2, 2), nn.ReLU())
    model[0].register_forward_pre_hook(lambda m, args: order.append("own pre"))
    model[0].register_forward_hook(lambda m, args, out: order.append("own post"))
    pre = register_module_forward_pre_hook(lambda m, args: order.append(("pre", type(m).__name__)))
    post = register_module_forward_hook(lambda m, args, out: order.append(("post", type(m).__name__)))
    try:
        model(ddpc.ones(1, 2))
    finally:
        pre.remove()
        post.remove()
    assert order == [("pre", "Sequential"), ("pre", "Linear"), "own pre", ("post", "Linear"), "own post",
                     ("pre", "ReLU"), ("post", "ReLU"), ("post", "Sequential")]
    order.clear()
    model(ddpc.ones(1, 2))
    assert order == ["own pre", "own post"]


def test_global_forward_hooks_replace_inputs_and_outputs_and_take_kwargs():
    layer = nn.Identity()
    seen = []
    with register_module_forward_pre_hook(lambda m, args: (args[0] * 2,)), \
            register_module_forward_hook(lambda m, args, kwargs, out: seen.append(kwargs) or out + 1,
                                         with_kwargs=True):
        out = layer(ddpc.ones(3))
    np.testing.assert_array_equal(out.numpy(), np.full(3, 3.0, np.float32))
    assert seen == [{}]
    np.testing.assert_array_equal(layer(ddpc.ones(3)).numpy(), np.ones(3, np.float32))


def test_global_always_call_forward_hook_sees_a_failing_forward():
    class Fails(nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    outputs = []
    with register_module_forward_hook(lambda m, args, out: outputs.append(out), always_call=True):
        with pytest.raises(ValueError, match="boom"):
            Fails()(ddpc.ones(1))
    with register_module_forward_hook(lambda m, args, out: outputs.append("not always")):
        with pytest.raises(ValueError, match="boom"):
            Fails()(ddpc.ones(1))
    assert outputs == [None]


@pytest.fixture
def global_backward_kind():
    """Restores the kind the global backward hooks are bound to, which registering one fixes for the process."""
    kind = module_api._global_is_full_backward_hook
    yield
    module_api._global_is_full_backward_hook = kind


def test_global_full_backward_hooks_run_before_a_modules_own(global_backward_kind):
    order = []
    layer = nn.Linear(2, 2)
    layer.register_full_backward_pre_hook(lambda m, go: order.append("own pre"))
    layer.register_full_backward_hook(lambda m, gi, go: order.append("own"))
    with module_api.register_module_full_backward_pre_hook(lambda m, go: order.append("pre")), \
            module_api.register_module_full_backward_hook(lambda m, gi, go: (order.append("full"),
                                                                             (gi[0] * 0,))[1]):
        x = ddpc.ones(1, 2, requires_grad=True)
        layer(x).sum().backward()
        with pytest.raises(RuntimeError, match="global Module hook"):
            module_api.register_module_backward_hook(lambda m, gi, go: None)
    assert order == ["pre", "own pre", "full", "own"]
    np.testing.assert_array_equal(x.grad.numpy(), np.zeros((1, 2), np.float32))
    order.clear()
    layer(x).sum().backward()
    assert order == ["own pre", "own"]


def test_global_non_full_backward_hook_sees_the_last_ops_gradients(global_backward_kind):
    seen = []
    module_api._global_is_full_backward_hook = None
    with module_api.register_module_backward_hook(lambda m, gi, go: seen.append((gi[0].tolist(), go[0].tolist()))):
        x = ddpc.tensor([[1.0, -2.0]], requires_grad=True)
        (nn.ReLU()(x) * ddpc.tensor([[3.0, 4.0]])).sum().backward()
    assert seen == [([[3.0, 0.0]], [[3.0, 4.0]])]


def test_global_registration_hooks_see_and_replace_what_is_registered():
    seen, swap = [], nn.Parameter(ddpc.zeros(1))
    hooks = [module_api.register_module_parameter_registration_hook(
                 lambda m, name, p: seen.append(("parameter", name)) or (swap if name == "swapped" else None)),
             module_api.register_module_buffer_registration_hook(lambda m, name, b: seen.append(("buffer", name))),
             module_api.register_module_module_registration_hook(lambda m, name, c: seen.append(("module", name)))]
    try:
        m = nn.Module()
        m.weight = nn.Parameter(ddpc.zeros(1))
        m.register_parameter("none", None)
        m.register_parameter("swapped", nn.Parameter(ddpc.ones(1)))
        m.register_buffer("stat", ddpc.zeros(1))
        m.stat = ddpc.ones(1)
        m.child = nn.ReLU()
    finally:
        for h in hooks:
            h.remove()
    m.other = nn.ReLU()
    assert m.swapped is swap
    assert seen == [("parameter", "weight"), ("parameter", "swapped"), ("buffer", "stat"), ("buffer", "stat"),
                    ("module", "child")]


class _Scaled(nn.Module):
    """Version 2 renamed ``w`` to ``weight``: older checkpoints load through _load_from_state_dict."""

    _version = 2

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(ddpc.zeros(2))

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args):
        if local_metadata.get("version", 1) < 2 and prefix + "w" in state_dict:
            state_dict[prefix + "weight"] = state_dict.pop(prefix + "w")
        super()._load_from_state_dict(state_dict, prefix, local_metadata, *args)


def test_state_dict_metadata_and_versioned_load_from_state_dict():
    model = nn.Sequential(_Scaled(), nn.BatchNorm1d(2))
    sd = model.state_dict()
    assert sd._metadata == {"": {"version": 1}, "0": {"version": 2}, "1": {"version": 2}}
    old = OrderedDict([("0.w", ddpc.tensor([1.0, 2.0]))] + [(k, v) for k, v in sd.items() if k.startswith("1.")])
    old._metadata = {"0": {"version": 1}}
    assert model.load_state_dict(old) == ([], [])
    assert model[0].weight.tolist() == [1.0, 2.0]
    current = OrderedDict(old)
    current._metadata = {"0": {"version": 2}}  # saved at version 2: "w" is not renamed
    with pytest.raises(RuntimeError, match=r'Missing key\(s\) in state_dict: "0.weight".*\n.*Unexpected key.*"0.w"'):
        model.load_state_dict(current)
    seen = []
    model[1].register_load_state_dict_pre_hook(lambda m, sd, prefix, meta, *rest: seen.append((prefix, meta)))
    model.load_state_dict(sd)
    assert seen == [("1.", {"version": 2})]
    del sd._metadata  # a plain dict's modules get {}
    model.load_state_dict(dict(sd))
    assert seen[-1] == ("1.", {})


def test_state_dict_hooks_order_and_in_place_edits():
    calls = []
    model = nn.Sequential(nn.Linear(2, 2))
    for name, m in (("root", model), ("lin", model[0])):
        m.register_state_dict_pre_hook(lambda m, prefix, keep_vars, name=name: calls.append(("pre", name, prefix)))
        m.register_state_dict_post_hook(
            lambda m, sd, prefix, meta, name=name: calls.append(("post", name, prefix, sorted(sd), meta)))

    def drop_bias(m, sd, prefix, meta):
        del sd[prefix + "bias"]

    handle = model[0].register_state_dict_post_hook(drop_bias)
    sd = model.state_dict()
    assert calls == [("pre", "root", ""), ("pre", "lin", "0."),
                     ("post", "lin", "0.", ["0.bias", "0.weight"], {"version": 1}),
                     ("post", "root", "", ["0.weight"], {"version": 1})]
    assert list(sd) == ["0.weight"]
    handle.remove()
    assert list(model.state_dict()) == ["0.weight", "0.bias"]
    model.register_state_dict_post_hook(lambda *args: {})
    with pytest.raises(RuntimeError, match="must return None"):
        model.state_dict()


def test_private_state_dict_hook_may_replace_the_dict():
    model = nn.Linear(2, 2)
    model._register_state_dict_hook(lambda m, sd, prefix, meta: {"replaced": 1})
    assert model.state_dict() == {"replaced": 1}


def test_load_state_dict_hooks_order_and_strict_rescue():
    calls = []
    model = nn.Sequential(nn.Linear(2, 2))
    model.register_load_state_dict_pre_hook(lambda m, sd, prefix, *rest: calls.append(("pre", prefix)))
    model[0]._register_load_state_dict_pre_hook(lambda sd, prefix, *rest: calls.append(("private pre", prefix)))
    model[0].register_load_state_dict_post_hook(
        lambda m, keys: calls.append(("post lin", list(keys.missing_keys), list(keys.unexpected_keys))))
    model.register_load_state_dict_post_hook(lambda m, keys: calls.append(("post root", list(keys.missing_keys))))
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    weight = sd["0.weight"]
    del sd["0.bias"]
    sd["0.stale"] = ddpc.zeros(1)
    with pytest.raises(RuntimeError, match="Missing key"):
        model.load_state_dict(sd)
    assert calls == [("pre", ""), ("private pre", "0."), ("post lin", ["0.bias"], ["0.stale"]),
                     ("post root", ["0.bias"])]

    def forgive(m, keys):
        keys.missing_keys.clear()
        keys.unexpected_keys.remove("0.stale")

    model[0].weight.detach().fill_(0)
    model.register_load_state_dict_post_hook(forgive)
    assert model.load_state_dict(sd) == ([], [])  # strict passes: the hook emptied the lists
    np.testing.assert_array_equal(model[0].weight.numpy(), weight.numpy())
    model.register_load_state_dict_post_hook(lambda m, keys: keys)
    with pytest.raises(RuntimeError, match="must return None"):
        model.load_state_dict(sd)


def test_load_post_hooks_see_the_loaded_values():
    """As in PyTorch, a module's load post-hook runs after its values are
    copied (a hook that derives something from them sees the new ones); a load
    that raises for missing keys leaves loaded what it copied, as PyTorch's does."""
    model = nn.Sequential(nn.Linear(2, 2), nn.Linear(2, 1))
    seen = []
    model[1].register_load_state_dict_post_hook(
        lambda m, keys: seen.append((model[0].weight.numpy().copy(), m.weight.numpy().copy())))
    sd = {k: ddpc.full(tuple(v.shape), float(i + 1)) for i, (k, v) in enumerate(model.state_dict().items())}
    model.load_state_dict(sd)
    (first, second), = seen
    np.testing.assert_array_equal(first, np.full((2, 2), 1.0))
    np.testing.assert_array_equal(second, np.full((1, 2), 3.0))
    del sd["1.bias"]
    sd["0.weight"] = ddpc.full((2, 2), 7.0)
    with pytest.raises(RuntimeError, match='Missing key.*"1.bias"'):
        model.load_state_dict(sd)
    np.testing.assert_array_equal(model[0].weight.numpy(), np.full((2, 2), 7.0))


def test_non_full_backward_hooks_see_the_last_op_and_exclude_full_ones():
    """register_backward_hook (PyTorch's deprecated kind): the gradients of the last op's inputs
    and of the output; a returned tuple replaces them; one module takes one kind of hook."""
    relu = nn.ReLU()
    seen = []
    relu.register_backward_hook(lambda m, gi, go: seen.append((gi[0].numpy().copy(), go[0].numpy().copy())))
    x = ddpc.tensor([[1.0, -2.0, 3.0]], requires_grad=True)
    (relu(x) * ddpc.tensor([[1.0, 2.0, 3.0]])).sum().backward()
    (gi, go), = seen
    np.testing.assert_array_equal(go, [[1.0, 2.0, 3.0]])
    np.testing.assert_array_equal(gi, [[1.0, 0.0, 3.0]])
    doubled = nn.ReLU()
    doubled.register_backward_hook(lambda m, gi, go: tuple(g * 2 for g in gi))
    x.grad = None
    doubled(x).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[2.0, 0.0, 2.0]])
    with pytest.raises(RuntimeError, match="Cannot use both regular backward hooks and full backward hooks"):
        relu.register_full_backward_hook(lambda *args: None)
    full = nn.ReLU()
    full.register_full_backward_hook(lambda *args: None)
    with pytest.raises(RuntimeError, match="Cannot use both"):
        full.register_backward_hook(lambda *args: None)
    full.compile(mode="max-autotune")  # eager: calls stay as they are
    np.testing.assert_array_equal(full(ddpc.tensor([-1.0, 2.0])).numpy(), [0.0, 2.0])


def test_failed_load_keeps_what_checked_out_as_pytorch():
    """Each tensor is copied as its module loads; a mismatch is reported at the end, with the others."""
    model = nn.Sequential(_Scaled(), nn.Linear(2, 2))
    bias = model[1].bias.clone()
    bad = {"0.weight": ddpc.ones(2), "1.weight": ddpc.ones(2, 2), "1.bias": ddpc.ones(3)}
    with pytest.raises(RuntimeError, match="size mismatch for 1.bias"):
        model.load_state_dict(bad)
    assert model[0].weight.tolist() == [1.0, 1.0] and model[1].weight.tolist() == [[1.0, 1.0], [1.0, 1.0]]
    np.testing.assert_array_equal(model[1].bias.numpy(), bias.numpy())
    missing, unexpected, errors = [], [], []
    model[0]._load_from_state_dict({"0.weight": ddpc.ones(2)}, "0.", {}, True, missing, unexpected, errors)
    assert model[0].weight.tolist() == [1.0, 1.0] and (missing, unexpected, errors) == ([], [], [])


def test_load_state_dict_assign_takes_the_tensors():
    model = nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2))
    model[0].bias.requires_grad_(False)
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    given = nn.Parameter(ddpc.ones(2, 2), requires_grad=False)
    sd["0.weight"] = given
    model.load_state_dict(sd, assign=True)
    assert model[0].weight is given and model[0].weight.requires_grad  # the module's requires_grad
    assert model[1].running_mean is sd["1.running_mean"]
    bias = model[0].bias
    assert isinstance(bias, nn.Parameter) and not bias.requires_grad
    sd["0.bias"].fill_(7)  # the parameter shares the state dict's storage
    assert bias.tolist() == [7.0, 7.0]
    other = model.state_dict()
    model.load_state_dict({k: v.clone() for k, v in other.items()})
    assert model[0].weight is given  # without assign: copied into the same objects


def test_set_submodule():
    model = nn.Sequential(nn.Sequential(nn.Linear(2, 2)), nn.ReLU())
    new = nn.Linear(2, 3)
    model.set_submodule("0.0", new)
    assert model[0][0] is new
    model.set_submodule("0.extra", nn.ReLU())
    assert isinstance(model.get_submodule("0.extra"), nn.ReLU)
    with pytest.raises(AttributeError, match="has no attribute `other`"):
        model.set_submodule("0.other", nn.ReLU(), strict=True)
    with pytest.raises(AttributeError, match="has no attribute `9`"):
        model.set_submodule("9.x", nn.ReLU())
    with pytest.raises(AttributeError, match="`weight` is not an nn.Module"):
        model.set_submodule("0.0.weight", nn.ReLU())
    with pytest.raises(ValueError, match="not an nn.Module"):
        model.set_submodule("1", 3)
    with pytest.raises(ValueError, match="without a target"):
        model.set_submodule("", nn.ReLU())


def test_to_empty_keeps_shapes_and_parameters():
    model = nn.Sequential(nn.Linear(2, 3), nn.BatchNorm1d(3), nn.LazyLinear(2))
    weight = model[0].weight
    assert model.to_empty(device="cpu") is model
    assert model[0].weight is weight and model[0].weight.shape == (3, 2) and model[1].running_var.shape == (3,)
    assert isinstance(model[2].weight, nn.UninitializedParameter)
    inner = nn.Sequential(nn.Linear(2, 2))
    outer = nn.Sequential(inner)
    buf = nn.BatchNorm1d(2)
    outer.add_module("bn", buf)
    running = buf.running_var
    outer.to_empty(recurse=False)  # outer has no tensors of its own
    assert buf.running_var is running
    outer.to_empty()
    assert buf.running_var is not running and buf.running_var.shape == (2,)


def test_module_pickled_without_the_state_dict_hook_tables_still_works():
    """A whole module saved by an older ddpc (before the state dict hooks) unpickles with empty tables."""
    import pickle
    m = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    for sub in m.modules():
        for table in ("_state_dict_pre_hooks", "_state_dict_hooks", "_load_state_dict_pre_hooks",
                      "_load_state_dict_post_hooks"):
            del sub.__dict__[table]
    back = pickle.loads(pickle.dumps(m))
    sd = back.state_dict()
    assert list(sd) == list(nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2)).state_dict())
    back.load_state_dict(sd)
    calls = []
    back.register_state_dict_pre_hook(lambda mod, prefix, keep_vars: calls.append(prefix))
    back.state_dict()
    assert calls == [""]


def test_sequential_and_module_list_edit_in_place_as_pytorch():
    s = nn.Sequential(nn.Linear(2, 2), nn.ReLU(), nn.Linear(2, 3), nn.Tanh())
    del s[1]
    assert list(s._modules) == ["0", "1", "2"]  # renumbered
    assert [type(m).__name__ for m in s] == ["Linear", "Linear", "Tanh"]
    s.insert(1, nn.Sigmoid()).insert(-1, nn.ReLU())
    assert [type(m).__name__ for m in s] == ["Linear", "Sigmoid", "Linear", "ReLU", "Tanh"]
    assert type(s.pop(0)).__name__ == "Linear" and list(s._modules) == ["0", "1", "2", "3"]
    s[0] = nn.Identity()
    assert [type(m).__name__ for m in s] == ["Identity", "Linear", "ReLU", "Tanh"]
    assert len(s + nn.Sequential(nn.ReLU())) == 5 and len(s * 2) == len(2 * s) == 8 and (s * 2)[4] is s[0]
    del s[1:3]
    assert list(s._modules) == ["0", "1"] and [type(m).__name__ for m in s] == ["Identity", "Tanh"]
    with pytest.raises(IndexError):
        s.insert(5, nn.ReLU())
    layers = nn.ModuleList([nn.ReLU(), nn.Tanh(), nn.Sigmoid()])
    del layers[0]
    assert list(layers._modules) == ["0", "1"] and type(layers[0]).__name__ == "Tanh"
    layers += [nn.ReLU()]
    assert len(layers) == 3 and type(layers.pop(-1)).__name__ == "ReLU" and len(layers + layers) == 4


def test_a_buffer_assigned_is_registered():
    m = nn.Module()
    m.kept = nn.Buffer(ddpc.ones(2))
    m.scratch = nn.Buffer(ddpc.zeros(1), persistent=False)
    assert list(m.state_dict()) == ["kept"] and [n for n, _ in m.named_buffers()] == ["kept", "scratch"]
    assert isinstance(m.kept, nn.Buffer) and not isinstance(ddpc.ones(1), nn.Buffer)
    assert nn.init._calculate_fan_in_and_fan_out(ddpc.zeros(4, 3, 5)) == (15, 20)


def test_instance_norm_is_not_a_group_norm():
    """torchvision-style init tells them apart: InstanceNorm's default has no weight."""
    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.InstanceNorm2d(4), nn.GroupNorm(2, 4))
    for m in model.modules():
        if isinstance(m, (nn.BatchNorm2d, nn.GroupNorm)):
            nn.init.constant_(m.weight, 1)
    assert not isinstance(model[1], nn.GroupNorm) and model[1].weight is None
    assert "InstanceNorm2d(4, eps=1e-05, momentum=0.1, affine=False" in repr(model[1])
    x = ddpc.from_numpy(np.arange(2 * 4 * 9, dtype=np.float32).reshape(2, 4, 3, 3) ** 1.5)
    got = model[1](x).numpy()
    want = (x.numpy() - x.numpy().mean((2, 3), keepdims=True)) / np.sqrt(x.numpy().var((2, 3), keepdims=True) + 1e-5)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_a_gradient_of_another_dtype_is_cast_to_the_outputs():
    x = ddpc.ones(3, requires_grad=True)
    y = ddpc.nn.functional.softmax(x, 0, dtype=ddpc.float64)
    y.backward(ddpc.from_numpy(np.array([1.0, 0.0, 0.0], np.float32)))
    np.testing.assert_allclose(x.grad.numpy(), [2 / 9, -1 / 9, -1 / 9], rtol=1e-6)


class _FrozenNorm(nn.Module):
    """The frozen batch norm pattern: train() is overridden to keep the norm in eval mode."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(2)
        self.modes = []

    def train(self, mode=True):
        self.modes.append(mode)
        super().train(mode)
        self.bn.eval()
        return self


def test_train_and_eval_call_each_childs_own_train():
    model = nn.Sequential(nn.Linear(2, 2), nn.Sequential(_FrozenNorm()))
    assert model.train() is model
    frozen = model[1][0]
    assert frozen.modes == [True] and frozen.training and not frozen.bn.training
    assert model.eval() is model
    assert frozen.modes == [True, False] and not any(m.training for m in model.modules())
    with pytest.raises(ValueError, match="training mode is expected to be boolean"):
        model.train(1)


class _Derived(nn.Module):
    """Derives a value from its weight right after loading it, as PyTorch's modules may."""

    def __init__(self):
        super().__init__()
        self.weight = nn.Parameter(ddpc.zeros(2))
        self.derived = None

    def _load_from_state_dict(self, *args):
        super()._load_from_state_dict(*args)
        self.derived = (self.weight * 2).tolist()


def test_load_from_state_dict_override_sees_the_values_it_loaded():
    model = nn.Sequential(_Derived(), nn.Linear(2, 2))
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    sd["0.weight"] = ddpc.tensor([1.0, 2.0])
    assert model.load_state_dict(sd) == ([], [])
    assert model[0].derived == [2.0, 4.0]
    sd["0.weight"] = ddpc.tensor([3.0, 4.0])
    model.load_state_dict(sd, assign=True)
    assert model[0].derived == [6.0, 8.0] and model[0].weight.requires_grad


def test_strict_load_refuses_keys_that_name_no_tensor_as_pytorch():
    """A key is this module's own only as ``prefix + name`` of a tensor, and a child's only with a dot
    after the child's name: a bare child name or a key below a parameter is unexpected."""
    model = nn.Sequential(nn.Linear(1, 1))
    sd = model.state_dict()
    sd["0"] = ddpc.zeros(1)
    sd["0.weight.orig"] = ddpc.zeros(1)
    with pytest.raises(RuntimeError, match=r'Unexpected key\(s\) in state_dict: "0", "0.weight.orig"\.'):
        model.load_state_dict(sd)
    result = model.load_state_dict({"0": ddpc.zeros(1), "0.weight.x": ddpc.zeros(1)}, strict=False)
    assert result == (["0.weight", "0.bias"], ["0", "0.weight.x"])


def test_assignments_over_another_kind_of_member_are_refused_as_in_pytorch():
    lin = nn.Linear(1, 1)
    with pytest.raises(TypeError, match=r"cannot assign 'ReLU' as parameter 'weight' \(ddpc.nn.Parameter or None"):
        lin.weight = nn.ReLU()
    with pytest.raises(TypeError, match="as parameter 'bias'"):
        lin.bias = nn.Buffer(ddpc.zeros(1))
    assert [n for n, _ in lin.named_parameters()] == ["weight", "bias"] and not list(lin.children())
    seq = nn.Sequential(nn.ReLU())
    with pytest.raises(TypeError, match=r"cannot assign 'Tensor' as child module '0' \(ddpc.nn.Module or None"):
        setattr(seq, "0", nn.Buffer(ddpc.zeros(1)))
    assert type(seq[0]).__name__ == "ReLU" and not list(seq.buffers())
    setattr(seq, "0", nn.Parameter(ddpc.zeros(1)))  # what PyTorch allows: a Parameter over a child
    bn = nn.BatchNorm1d(1)
    bn.running_mean = nn.ReLU()  # and a module over a buffer
    assert list(seq._parameters) == ["0"] and not seq._modules
    assert "running_mean" not in bn._buffers and bn._modules["running_mean"] is bn.running_mean


def test_get_parameter_of_one_registered_as_none_raises():
    net = nn.Sequential(nn.Linear(1, 1, bias=False), nn.BatchNorm1d(1, affine=False))
    with pytest.raises(AttributeError, match="`bias` is not an nn.Parameter"):
        net.get_parameter("0.bias")
    assert net.get_buffer("1.running_mean") is net[1].running_mean


def test_parameter_dict_orders_plain_dicts_and_has_dicts_methods():
    a, z = nn.Parameter(ddpc.zeros(1)), nn.Parameter(ddpc.ones(2))
    pd = nn.ParameterDict({"z": z, "a": a})
    assert list(pd) == ["a", "z"]  # a plain dict's keys sorted, as PyTorch's
    pd.update(OrderedDict([("y", ddpc.zeros(1)), ("b", ddpc.zeros(1))]))
    assert list(pd) == ["a", "z", "y", "b"]  # an OrderedDict's order kept
    pd.update({"d": ddpc.zeros(1), "c": ddpc.zeros(1)})
    assert list(pd)[-2:] == ["c", "d"]
    assert pd.get("a") is a and pd.get("nothing") is None and pd.get("nothing", 3) == 3
    assert pd.setdefault("a", z) is a and isinstance(pd.setdefault("e", ddpc.ones(1)), nn.Parameter)
    assert pd.popitem()[0] == "e" and "e" not in pd
    copied = pd.copy()
    assert type(copied) is nn.ParameterDict and list(copied) == list(pd) and copied["z"] is z
    made = pd.fromkeys(["q", "p"])
    assert list(made) == ["q", "p"] and made["p"] is None


def test_dir_name_and_slices_of_container_subclasses_as_pytorch():
    lin = nn.Linear(1, 1)
    assert lin._get_name() == "Linear"
    assert {"weight", "bias", "forward", "training"} <= set(dir(lin))
    net = nn.Sequential(nn.Linear(1, 1))
    net.register_buffer("steps", ddpc.zeros(1))
    assert "steps" in dir(net) and "0" not in dir(net)

    class Named(nn.Linear):
        def _get_name(self):
            return "Renamed"

    assert repr(Named(1, 1)).startswith("Renamed(")

    class Steps(nn.Sequential):
        pass

    class Blocks(nn.ModuleList):
        pass

    assert type(Steps(nn.ReLU(), nn.Tanh())[1:]) is Steps and type(Blocks([nn.ReLU()])[:1]) is Blocks


def test_load_state_dict_result_prints_as_pytorch():
    m = ddpc.nn.Linear(2, 2)
    assert repr(m.load_state_dict(m.state_dict())) == "<All keys matched successfully>"
    result = m.load_state_dict({"weight": m.weight.detach()}, strict=False)
    assert result.missing_keys == ["bias"] and result.unexpected_keys == []
    assert repr(result) == "_IncompatibleKeys(missing_keys=['bias'], unexpected_keys=[])"
