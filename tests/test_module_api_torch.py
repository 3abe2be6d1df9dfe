"""Optional: module hooks (also the global ones of nn.modules.module), the state dict protocol, the new layers and creation functions against PyTorch
(skipped when torch is not installed). Each comparison runs in a child process
that imports torch before ddpc (see test_nn_torch.py) and fails there, printing
what differs."""

import sys

import numpy as np
import pytest
from procs import run_torch_case


@pytest.mark.parametrize("case", ["layers", "creation", "hooks", "instance_norm_running_stats", "state_dict_protocol",
                                  "non_full_backward_hooks", "module_semantics", "global_backward_hooks",
                                  "global_non_full_backward_hooks", "global_registration_hooks"])
def test_matches_pytorch(case):
    out = run_torch_case(__file__, case)
    assert out.strip().endswith("ok"), out


def _layer_run(lib, make, x, g):
    """make(lib.nn)(x) in float64 and backward with g: output, input gradient, parameter gradients."""
    m = make(lib.nn).double()
    t = lib.tensor(x, requires_grad=True)
    out = m(t)
    out.backward(lib.tensor(g))
    return [out.detach().numpy(), t.grad.numpy()] + [p.grad.numpy() for p in m.parameters()]


def layers():
    import torch
    import ddpc

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 4, 3, 2))
    for make in (lambda nn: nn.GroupNorm(2, 4), lambda nn: nn.GroupNorm(4, 4, affine=False),
                 lambda nn: nn.InstanceNorm2d(4), lambda nn: nn.InstanceNorm2d(4, affine=True),
                 lambda nn: nn.RMSNorm((3, 2)), lambda nn: nn.RMSNorm(2, eps=1e-3),
                 lambda nn: nn.GLU(1), lambda nn: nn.Softmin(dim=2)):
        out = make(torch.nn).double()(torch.tensor(x))
        g = rng.standard_normal(tuple(out.shape))
        want, ours = _layer_run(torch, make, x, g), _layer_run(ddpc, make, x, g)
        assert len(want) == len(ours), make(torch.nn)
        for w, o in zip(want, ours):
            np.testing.assert_allclose(o, w, rtol=1e-9, atol=1e-12, err_msg=repr(make(torch.nn)))


def creation():
    import torch
    import ddpc

    def same(ours, want):
        np.testing.assert_allclose(ours.numpy(), want.numpy(), rtol=1e-6, atol=1e-7)
        assert ours.shape == tuple(want.shape)

    same(ddpc.linspace(-1, 2, 7), torch.linspace(-1, 2, 7))
    same(ddpc.logspace(0, 2, 5, base=3.0), torch.logspace(0, 2, 5, base=3.0))
    same(ddpc.eye(3, 4), torch.eye(3, 4))
    for ind in ("ij", "xy"):
        for o, w in zip(ddpc.meshgrid(ddpc.arange(2), ddpc.arange(3), indexing=ind),
                        torch.meshgrid(torch.arange(2), torch.arange(3), indexing=ind)):
            same(o, w)
    m = np.arange(12.0).reshape(3, 4)
    for k in (-1, 0, 2):
        same(ddpc.diag(ddpc.tensor(m), k), torch.diag(torch.tensor(m), k))
        same(ddpc.diag(ddpc.tensor(m[0]), k), torch.diag(torch.tensor(m[0]), k))
    assert ddpc.broadcast_shapes((2, 1), (3,), (4, 1, 1)) == tuple(torch.broadcast_shapes((2, 1), (3,), (4, 1, 1)))
    assert ddpc.get_default_dtype().name == str(torch.get_default_dtype()).split(".")[1]


def hooks():
    import torch
    import ddpc

    rng = np.random.default_rng(1)
    x, g = rng.standard_normal((4, 3)), rng.standard_normal((4, 2))
    w = rng.standard_normal((2, 3))
    seen = {}
    for lib in (torch, ddpc):
        m = lib.nn.Linear(3, 2).double()
        with lib.no_grad():
            m.weight.copy_(lib.tensor(w))
        log = seen.setdefault(lib.__name__, [])
        m.register_full_backward_pre_hook(lambda mod, go: (log.append(go[0].numpy().copy()), (go[0] * 2,))[1])
        m.register_full_backward_hook(lambda mod, gi, go: log.extend([gi[0].numpy().copy(), go[0].numpy().copy()]))
        m.register_forward_hook(lambda mod, args, out: out + 1)
        t = lib.tensor(x, requires_grad=True)
        m(t).backward(lib.tensor(g))
        log.append(t.grad.numpy())
    assert len(seen["ddpc"]) == len(seen["torch"]) == 4
    for o, w in zip(seen["ddpc"], seen["torch"]):
        np.testing.assert_allclose(o, w, rtol=1e-12)


def instance_norm_running_stats():
    """Two training steps then eval with track_running_stats, for 1-, 2- and 3-d
    instance norms, momentum None among them: outputs, gradients, buffers, repr."""
    import torch
    import ddpc

    rng = np.random.default_rng(2)
    for make, shape in ((lambda nn: nn.InstanceNorm1d(3, track_running_stats=True), (4, 3, 5)),
                        (lambda nn: nn.InstanceNorm2d(3, affine=True, track_running_stats=True, momentum=0.3),
                         (2, 3, 4, 5)),
                        (lambda nn: nn.InstanceNorm3d(3, track_running_stats=True, momentum=None), (2, 3, 2, 3, 2)),
                        (lambda nn: nn.InstanceNorm1d(3, track_running_stats=True), (3, 5))):
        xs = [rng.standard_normal(shape) * 2 + 1 for _ in range(3)]
        gs = [rng.standard_normal(shape) for _ in range(3)]
        runs = {}
        for lib in (torch, ddpc):
            m = make(lib.nn).double()
            log = runs[lib.__name__] = []
            for i, (x, g) in enumerate(zip(xs, gs)):
                m.train(i < 2)
                t = lib.tensor(x, requires_grad=True)
                out = m(t)
                out.backward(lib.tensor(g))
                log += [out.detach().numpy(), t.grad.numpy()] + [b.numpy().copy() for b in m.buffers()]
            log.append(sorted(m.state_dict()))
            log.append(repr(m))
        assert runs["ddpc"][-2:] == runs["torch"][-2:], (runs["ddpc"][-2:], runs["torch"][-2:])
        for o, w in zip(runs["ddpc"][:-2], runs["torch"][:-2]):
            np.testing.assert_allclose(o, w, rtol=1e-10, atol=1e-12, err_msg=runs["torch"][-1])


def _state_dict_run(lib):
    """The state dict protocol on a model with a versioned module: keys, metadata, hook calls, results."""
    nn, log = lib.nn, []

    class Renamed(nn.Module):
        _version = 2

        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(lib.zeros(2))

        def _load_from_state_dict(self, state_dict, prefix, local_metadata, *args):
            log.append(("load", prefix, dict(local_metadata)))
            if local_metadata.get("version", 1) < 2 and prefix + "w" in state_dict:
                state_dict[prefix + "weight"] = state_dict.pop(prefix + "w")
            super()._load_from_state_dict(state_dict, prefix, local_metadata, *args)

    model = nn.Sequential(Renamed(), nn.Sequential(nn.Linear(2, 2), nn.BatchNorm1d(2)))
    for name, m in (("root", model), ("renamed", model[0]), ("inner", model[1]), ("bn", model[1][1])):
        m.register_state_dict_pre_hook(lambda m, prefix, keep_vars, name=name: log.append(("sd pre", name, prefix)))
        m.register_state_dict_post_hook(
            lambda m, sd, prefix, meta, name=name: log.append(("sd post", name, prefix, len(sd), dict(meta))))
        m.register_load_state_dict_pre_hook(
            lambda m, sd, prefix, meta, strict, missing, unexpected, errors, name=name:
            log.append(("load pre", name, prefix, sorted(sd), strict, list(missing), list(unexpected))))
        m.register_load_state_dict_post_hook(
            lambda m, keys, name=name: log.append(("load post", name, list(keys.missing_keys),
                                                   list(keys.unexpected_keys))))
    sd = model.state_dict()
    log.append(list(sd))
    log.append({k: dict(v) for k, v in sd._metadata.items()})
    old = type(sd)((k.replace("0.weight", "0.w"), v.clone()) for k, v in sd.items() if "running_var" not in k)
    old["1.stale"] = lib.zeros(1)
    old._metadata = type(sd._metadata)((k, dict(v)) for k, v in sd._metadata.items())
    old._metadata["0"]["version"] = 1
    result = model.load_state_dict(old, strict=False)
    log.append((list(result.missing_keys), list(result.unexpected_keys)))

    def forgive(m, keys):
        keys.missing_keys.clear()
        keys.unexpected_keys.clear()

    model.register_load_state_dict_post_hook(forgive)
    log.append(tuple(model.load_state_dict(old)))
    log.append(model[0].weight.tolist())
    assigned = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(assigned, assign=True)
    log.append([type(model[1][0].weight).__name__, model[1][0].weight.requires_grad,
                model[1][1].running_mean is assigned["1.1.running_mean"]])
    return log


def state_dict_protocol():
    import torch
    import ddpc

    want, ours = _state_dict_run(torch), _state_dict_run(ddpc)
    assert len(want) == len(ours), (want, ours)
    for w, o in zip(want, ours):
        assert w == o, (w, o)


def _non_full_run(lib):
    """register_backward_hook on modules whose last op is plain (a product, a ReLU, a sum of two
    outputs in a tuple): what the hooks see, a hook's replacement, and the mixing error."""
    log = []

    class Scale(lib.nn.Module):
        def __init__(self):
            super().__init__()
            self.w = lib.nn.Parameter(lib.tensor([2.0, 3.0, 4.0], dtype=lib.float64))

        def forward(self, x):
            return (x * self.w, x.sum())

    def record(name):
        return lambda m, gi, go: log.append((name, [None if g is None else g.tolist() for g in gi],
                                             [g.tolist() for g in go]))

    scale, relu = Scale(), lib.nn.ReLU()
    scale.register_backward_hook(record("scale"))
    relu.register_backward_hook(record("relu"))
    x = lib.tensor([[1.0, -2.0, 3.0]], dtype=lib.float64, requires_grad=True)
    y, _ = scale(x)
    (relu(y) * lib.tensor([[1.0, 2.0, 3.0]], dtype=lib.float64)).sum().backward()
    log.append(("grads", x.grad.tolist(), scale.w.grad.tolist()))
    zero = lib.nn.ReLU()
    zero.register_backward_hook(lambda m, gi, go: tuple(g * 0 for g in gi))
    x.grad = None
    zero(x).sum().backward()
    log.append(("replaced", x.grad.tolist()))
    try:
        relu.register_full_backward_hook(lambda *args: None)
    except RuntimeError as e:
        log.append(str(e))
    full = lib.nn.ReLU()
    full.register_full_backward_hook(lambda *args: None)
    try:
        full.register_backward_hook(lambda *args: None)
    except RuntimeError as e:
        log.append(str(e))
    return log


def non_full_backward_hooks():
    import warnings

    import torch
    import ddpc

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # PyTorch's deprecation of these hooks
        want = _non_full_run(torch)
    ours = _non_full_run(ddpc)
    assert want == ours, (want, ours)


def _semantics_run(lib):
    """train() through each child's override, values seen after super()._load_from_state_dict, the strict
    rule for unexpected keys, refused assignments, get_parameter of a None, ParameterDict's order and
    methods, dir(), slices of container subclasses and consume_prefix_in_state_dict_if_present's metadata."""
    import importlib
    from collections import OrderedDict

    nn, log = lib.nn, []

    def error(fn):
        try:
            fn()
        except Exception as e:
            return type(e).__name__
        return None

    class Frozen(nn.Module):
        def __init__(self):
            super().__init__()
            self.bn = nn.BatchNorm1d(2)

        def train(self, mode=True):
            log.append(("train", mode))
            super().train(mode)
            self.bn.eval()
            return self

    model = nn.Sequential(nn.Linear(2, 2), Frozen())
    model.eval()
    model.train()
    log.append([m.training for m in model.modules()])
    log.append(error(lambda: model.train(1)))

    class Derived(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(lib.zeros(2))

        def _load_from_state_dict(self, *args):
            super()._load_from_state_dict(*args)
            log.append(("derived", self.weight.tolist()))

    model = nn.Sequential(Derived(), nn.Linear(2, 2))
    sd = {k: v.clone() for k, v in model.state_dict().items()}
    sd["0.weight"] = lib.tensor([1.0, 2.0])
    sd["1.bias"] = lib.zeros(3)
    log.append(error(lambda: model.load_state_dict(sd)))
    log.append(model[0].weight.tolist())
    sd = nn.Sequential(nn.Linear(1, 1)).state_dict()
    sd["0"], sd["0.weight.orig"] = lib.zeros(1), lib.zeros(1)
    log.append(tuple(nn.Sequential(nn.Linear(1, 1)).load_state_dict(sd, strict=False)))
    lin = nn.Linear(1, 1, bias=False)
    log.append([error(lambda: setattr(lin, "weight", nn.ReLU())), error(lambda: lin.get_parameter("bias")),
                error(lambda: setattr(nn.Sequential(nn.ReLU()), "0", nn.Buffer(lib.zeros(1))))])
    log.append([n for n in dir(lin) if n in ("weight", "bias", "forward")] + [lin._get_name()])
    pd = nn.ParameterDict({"z": nn.Parameter(lib.zeros(1)), "a": nn.Parameter(lib.zeros(1))})
    pd.update({"y": lib.zeros(1), "b": lib.zeros(1)})
    log.append([list(pd), pd.get("x", 3), type(pd.setdefault("c", lib.ones(1))).__name__, pd.popitem()[0],
                list(pd.copy()), list(pd.fromkeys(["q", "p"]))])

    class Steps(nn.Sequential):
        pass

    class Blocks(nn.ModuleList):
        pass

    log.append([type(Steps(nn.ReLU(), nn.Tanh())[1:]).__name__, type(Blocks([nn.ReLU()])[:1]).__name__])
    utils = importlib.import_module(lib.__name__ + ".nn.modules.utils")
    wrapper = nn.Module()
    wrapper.module = nn.Sequential(nn.Linear(1, 1))
    sd = wrapper.state_dict()
    utils.consume_prefix_in_state_dict_if_present(sd, "module.")
    log.append([list(sd), list(sd._metadata)])
    return log


def module_semantics():
    import torch
    import ddpc

    want, ours = _semantics_run(torch), _semantics_run(ddpc)
    assert want == ours, (want, ours)


def _global_backward_run(lib, x, g, weights):
    """register_module_full_backward_pre_hook and register_module_full_backward_hook
    around a model with a module's own full backward hooks: the order of the calls,
    the gradients they see, a global replacement, and the global mixing error."""
    module_api = __import__(lib.__name__ + ".nn.modules.module", fromlist=["module"])
    nn, log = lib.nn, []

    def record(kind):
        def hook(m, *grads):
            log.append((kind, type(m).__name__, [[None if t is None else t.tolist() for t in gs] for gs in grads]))
        return hook

    model = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2)).double()
    with lib.no_grad():
        for layer, w in zip((model[0], model[2]), weights):
            layer.weight.copy_(lib.tensor(w))
            layer.bias.fill_(0.5)
    model[2].register_full_backward_pre_hook(record("own pre"))
    model[2].register_full_backward_hook(record("own"))
    handles = [module_api.register_module_full_backward_pre_hook(record("global pre")),
               module_api.register_module_full_backward_hook(record("global"))]
    t = lib.tensor(x, requires_grad=True)
    model(t).backward(lib.tensor(g))
    log.append(("grads", t.grad.tolist(), model[0].weight.grad.tolist()))
    scale = module_api.register_module_full_backward_hook(
        lambda m, gi, go: tuple(None if v is None else v * 3 for v in gi) if isinstance(m, nn.Tanh) else None)
    t.grad = None
    model(t).backward(lib.tensor(g))
    log.append(("scaled", t.grad.tolist()))
    try:
        module_api.register_module_backward_hook(record("non-full"))
    except RuntimeError as e:
        log.append(str(e))
    for h in handles + [scale]:
        h.remove()
    t.grad = None
    calls = len(log)
    model(t).backward(lib.tensor(g))
    log.append(("removed", [len(log) - calls], t.grad.tolist()))
    return log


def global_backward_hooks():
    import torch
    import ddpc

    rng = np.random.default_rng(2)
    x, g = rng.standard_normal((5, 3)), rng.standard_normal((5, 2))
    weights = rng.standard_normal((4, 3)), rng.standard_normal((2, 4))
    want, ours = _global_backward_run(torch, x, g, weights), _global_backward_run(ddpc, x, g, weights)
    assert len(want) == len(ours), (want, ours)
    for w, o in zip(want, ours):
        if not isinstance(w, tuple):
            assert w == o, (w, o)
            continue
        labels = 1 if w[0] in ("grads", "scaled", "removed") else 2
        assert w[:labels] == o[:labels], (w, o)
        np.testing.assert_allclose(_flat(o[labels:]), _flat(w[labels:]), rtol=1e-12)


def _flat(value):
    """The numbers in nested lists (None as nan), in order."""
    if value is None:
        return [float("nan")]
    if isinstance(value, (list, tuple)):
        return [v for item in value for v in _flat(item)]
    return [float(value)]


def global_non_full_backward_hooks():
    """register_module_backward_hook on ReLUs (whose one op makes grad_input the module's), before a
    module's own non-full hook, then the mixing error."""
    import warnings

    import torch
    import ddpc

    def run(lib):
        module_api = __import__(lib.__name__ + ".nn.modules.module", fromlist=["module"])
        log = []
        relu, own = lib.nn.ReLU(), lib.nn.ReLU()
        own.register_backward_hook(lambda m, gi, go: log.append(("own", gi[0].tolist())))
        handle = module_api.register_module_backward_hook(
            lambda m, gi, go: log.append(("global", [v.tolist() for v in gi], [v.tolist() for v in go])))
        x = lib.tensor([[1.0, -2.0, 3.0]], dtype=lib.float64, requires_grad=True)
        (own(relu(x)) * lib.tensor([[1.0, 2.0, 3.0]], dtype=lib.float64)).sum().backward()
        log.append(x.grad.tolist())
        try:
            module_api.register_module_full_backward_hook(lambda *args: None)
        except RuntimeError as e:
            log.append(str(e))
        handle.remove()
        return log

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        want = run(torch)
    ours = run(ddpc)
    assert want == ours, (want, ours)


def global_registration_hooks():
    """register_module_{buffer,module,parameter}_registration_hook: which registrations call them (the
    register_* methods and assignment, None included or not) and a returned replacement."""
    import torch
    import ddpc

    def run(lib):
        module_api = __import__(lib.__name__ + ".nn.modules.module", fromlist=["module"])
        nn, log = lib.nn, []
        replacement = nn.Parameter(lib.zeros(1))

        def record(kind):
            def hook(module, name, value):
                log.append((kind, type(module).__name__, name, type(value).__name__))
                if name == "swapped":
                    return replacement if kind == "parameter" else (nn.Tanh() if kind == "module" else lib.ones(2))
            return hook

        handles = [getattr(module_api, f"register_module_{kind}_registration_hook")(record(kind))
                   for kind in ("buffer", "module", "parameter")]
        m = nn.Module()
        m.register_parameter("p", nn.Parameter(lib.zeros(1)))
        m.register_parameter("none", None)
        m.q = nn.Parameter(lib.zeros(1))
        m.q = None
        m.register_buffer("b", lib.zeros(1))
        m.register_buffer("empty", None)
        m.b = lib.ones(1)
        m.c = nn.Buffer(lib.zeros(1))
        m.add_module("child", nn.ReLU())
        m.add_module("nothing", None)
        m.child = None
        m.register_module("other", nn.Identity())
        m.register_parameter("swapped", nn.Parameter(lib.ones(3)))
        m.register_buffer("swapped_b", lib.zeros(1))
        m.add_module("swapped_m", nn.ReLU())
        log.append(m.swapped is replacement)
        m2 = nn.Module()
        m2.swapped = nn.ReLU()
        m3 = nn.Module()
        m3.register_buffer("swapped", lib.zeros(3))
        log.append([type(m2.swapped).__name__, m3.swapped.tolist()])
        nn.Linear(2, 2, bias=False)
        for h in handles:
            h.remove()
        nn.Linear(2, 2)
        return log

    want, ours = run(torch), run(ddpc)
    assert want == ours, (want, ours)


if __name__ == "__main__":
    import torch  # noqa: F401  (before ddpc, see the module docstring)

    globals()[sys.argv[1]]()
    print("ok")
