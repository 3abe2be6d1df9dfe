"""Optional: well-known PyTorch training code ported to ddpc by changing only
its imports and device strings, run from the same weights and inputs as
PyTorch's (skipped when torch is not installed). Each model is written once
over a library module `lib` (torch or ddpc) as its authors wrote it, at small
sizes; both copies start from torch's weights (copied through numpy), and
forward outputs, losses, gradients after backward and the whole state dict
after a few optimizer steps are compared in float32, each relative to its
tensor's largest magnitude (at most 1e-4 or so). A third copy, PyTorch's in
float64, shows what float32 can resolve: a gradient that cancels to
rounding noise (a conv bias before a norm layer, a key bias under softmax)
may differ by up to 8 times PyTorch's own float32 error. The printed models
are compared too. Dropout is switched to eval where it would draw random
numbers, since the two libraries' generators differ.

Each group runs in a child process that imports torch before ddpc (see
test_nn_torch.py) and fails there, printing the largest differences.
"""

import collections
import contextlib
import copy
import functools
import math

import numpy

from procs import run_torch_group, torch_group_test


def _close(np, got, want, what, tol=1e-4, exact=None):
    """got (ddpc) against want (torch, float32): their largest difference
    relative to want's largest magnitude is at most tol or, where float32
    cannot resolve the tensor that well (a gradient that cancels to nearly
    zero), at most 8 times PyTorch's own float32 difference from `exact`
    (PyTorch's float64 result). Integer results are equal."""
    g = np.asarray(got.detach().cpu()).astype(np.float64)
    w = want.detach().cpu().double().numpy()
    assert g.shape == w.shape, f"{what}: shape {g.shape} where PyTorch has {w.shape}"
    if not want.is_floating_point():
        assert (g == w).all(), f"{what}: {g} where PyTorch has {w}"
        return
    if not w.size:
        return
    scale = np.abs(w).max() or 1.0
    err = float(np.abs(g - w).max() / scale)
    noise = float(np.abs(w - exact.detach().cpu().double().numpy()).max() / scale) if exact is not None else 0.0
    if not what.startswith("initial"):
        print(f"{what}: {err:.2e} (PyTorch's float32 against its float64: {noise:.2e})")
        if noise <= tol:
            kind = "gradient" if " grad " in what else "state" if ":" in what else "output"
            _WORST[kind] = max(_WORST.get(kind, 0.0), err)
    assert err <= max(tol, 8 * noise), f"{what}: differs from PyTorch's by {err:.3g} of its largest value"


_WORST = {}


def _reporting(group):
    """The group, then a line with its largest differences from PyTorch by
    kind, over the tensors that float32 resolves (a gradient that is zero
    but for rounding, and Adam's steps from it, are left out)."""
    def run(np, torch, ddpc):
        group(np, torch, ddpc)
        print("largest relative differences:", ", ".join(f"{k} {v:.1e}" for k, v in sorted(_WORST.items())))
    return run


def _load(np, ddpc, model, ref):
    """ddpc's model takes the reference's state dict, copied through numpy."""
    model.load_state_dict({k: ddpc.tensor(v.detach().cpu().numpy().copy()) for k, v in ref.state_dict().items()})


def _no_dropout(lib, model):
    """model, with its dropout (MultiheadAttention's and between RNN layers included) in eval mode."""
    for m in model.modules():
        if isinstance(m, (lib.nn.Dropout, lib.nn.Dropout2d, lib.nn.MultiheadAttention, lib.nn.RNNBase)):
            m.eval()
    return model


@contextlib.contextmanager
def _float64(torch):
    """PyTorch's float64 run: factories inside the model code make float64 too."""
    torch.set_default_dtype(torch.float64)
    try:
        yield
    finally:
        torch.set_default_dtype(torch.float32)


def _runs(np, torch, ddpc, build):
    """(lib, model, context factory, float dtype) for PyTorch in float32, ddpc from
    its weights and PyTorch in float64 from the same weights."""
    torch.manual_seed(0)
    ref = build(torch)
    model = build(ddpc)
    _load(np, ddpc, model, ref)
    with _float64(torch):
        exact = build(torch)
    exact.load_state_dict(ref.state_dict())
    exact.double()
    _same_state(np, model, ref, "initial", 0.0)
    assert _printed(model) == _printed(ref), f"the models print differently:\n{model}\n{ref}"
    return [(torch, ref, contextlib.nullcontext, np.float32), (ddpc, model, contextlib.nullcontext, np.float32),
            (torch, exact, lambda: _float64(torch), np.float64)]


def _printed(model):
    """print(model) but for MultiheadAttention, which ddpc prints with its
    sizes and whose out_proj PyTorch names NonDynamicallyQuantizableLinear."""
    lines = repr(model).replace("NonDynamicallyQuantizableLinear", "Linear").split("\n")
    return "\n".join(line for line in lines if "embed_dim=" not in line)


def _tensors(np, lib, arrays, dtype):
    return [lib.tensor(a.astype(dtype) if a.dtype.kind == "f" else a) for a in arrays]


def _same_state(np, model, ref, what, tol, exact=None):
    got, want = model.state_dict(), ref.state_dict()
    assert list(got) == list(want), f"{what}: state dict keys {list(got)} where PyTorch has {list(want)}"
    near = exact.state_dict() if exact is not None else {}
    for k in want:
        _close(np, got[k], want[k], f"{what}: {k}", tol, near.get(k))


def _as_tuple(outs):
    return tuple(outs) if isinstance(outs, (tuple, list)) else (outs,)


def _train_alike(np, torch, ddpc, build, batches, loss_of, make_opt, tol=1e-4):
    """build(lib) -> model; loss_of(lib, model, *batch) -> (outputs, loss) for
    each batch of numpy arrays; make_opt(lib, model) -> optimizer. Outputs,
    loss and every gradient are compared at each step and the state dict
    after each optimizer step."""
    runs = _runs(np, torch, ddpc, build)
    opts = [make_opt(lib, m) for lib, m, _, _ in runs]
    (_, ref, _, _), (_, model, _, _), (_, exact, _, _) = runs
    for step, batch in enumerate(batches):
        results = []
        for (lib, m, context, dtype), opt in zip(runs, opts):
            with context():
                opt.zero_grad()
                outs, loss = loss_of(lib, m, *_tensors(np, lib, batch, dtype))
                loss.backward()
            results.append(_as_tuple(outs) + (loss,))
        for i, (w, g, e) in enumerate(zip(*results)):
            _close(np, g, w, f"step {step} output {i}" if i < len(results[0]) - 1 else f"step {step} loss", tol, e)
        for (name, p), q, e in zip(model.named_parameters(), ref.parameters(), exact.parameters()):
            assert (p.grad is None) == (q.grad is None), f"step {step}: {name} has a gradient in one library only"
            if q.grad is not None:
                _close(np, p.grad, q.grad, f"step {step} grad {name}", tol, e.grad)
        for (lib, m, context, dtype), opt in zip(runs, opts):
            with context():
                opt.step()
        _same_state(np, model, ref, f"after step {step}", tol, exact)
    return model, ref


def _images(np, shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _labels(np, n, classes, seed=1):
    return np.random.default_rng(seed).integers(0, classes, n)


def _sgd(lib, model):
    return lib.optim.SGD(model.parameters(), lr=0.05, momentum=0.9, weight_decay=4e-5)


def _classify(lib, model, x, y):
    out = model(x)
    return out, lib.nn.functional.cross_entropy(out, y)


# torchvision's MobileNetV2 (features and classifier as torchvision builds
# them, with its weight init), at width 16.
def _mobilenet_v2(lib):
    nn = lib.nn

    class ConvBNReLU(nn.Sequential):
        def __init__(self, in_planes, out_planes, kernel_size=3, stride=1, groups=1):
            padding = (kernel_size - 1) // 2
            super().__init__(nn.Conv2d(in_planes, out_planes, kernel_size, stride, padding, groups=groups, bias=False),
                             nn.BatchNorm2d(out_planes), nn.ReLU6(inplace=True))

    class InvertedResidual(nn.Module):
        def __init__(self, inp, oup, stride, expand_ratio):
            super().__init__()
            hidden_dim = int(round(inp * expand_ratio))
            self.use_res_connect = stride == 1 and inp == oup
            layers = []
            if expand_ratio != 1:
                layers.append(ConvBNReLU(inp, hidden_dim, kernel_size=1))
            layers.extend([ConvBNReLU(hidden_dim, hidden_dim, stride=stride, groups=hidden_dim),
                           nn.Conv2d(hidden_dim, oup, 1, 1, 0, bias=False), nn.BatchNorm2d(oup)])
            self.conv = nn.Sequential(*layers)

        def forward(self, x):
            if self.use_res_connect:
                return x + self.conv(x)
            return self.conv(x)

    class MobileNetV2(nn.Module):
        def __init__(self, num_classes=10):
            super().__init__()
            settings = [(1, 8, 1, 1), (6, 12, 2, 2), (6, 16, 1, 2)]
            input_channel, last_channel = 16, 64
            features = [ConvBNReLU(3, input_channel, stride=2)]
            for t, c, n, s in settings:
                for i in range(n):
                    features.append(InvertedResidual(input_channel, c, s if i == 0 else 1, expand_ratio=t))
                    input_channel = c
            features.append(ConvBNReLU(input_channel, last_channel, kernel_size=1))
            self.features = nn.Sequential(*features)
            self.classifier = nn.Sequential(nn.Dropout(0.2), nn.Linear(last_channel, num_classes))
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight, mode="fan_out")
                    if m.bias is not None:
                        nn.init.zeros_(m.bias)
                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.ones_(m.weight)
                    nn.init.zeros_(m.bias)
                elif isinstance(m, nn.Linear):
                    nn.init.normal_(m.weight, 0, 0.01)
                    nn.init.zeros_(m.bias)

        def forward(self, x):
            x = self.features(x)
            x = nn.functional.adaptive_avg_pool2d(x, (1, 1))
            x = lib.flatten(x, 1)
            return self.classifier(x)

    return _no_dropout(lib, MobileNetV2())


def _mobilenet(np, torch, ddpc):
    batches = [(_images(np, (4, 3, 16, 16), s), _labels(np, 4, 10, s)) for s in range(3)]
    model, ref = _train_alike(np, torch, ddpc, _mobilenet_v2, batches, _classify, _sgd, tol=2e-4)
    model.eval()
    ref.eval()
    x = _images(np, (2, 3, 16, 16), 9)
    _close(np, model(ddpc.tensor(x)), ref(torch.tensor(x)), "eval output", 2e-4)


# torchvision's EfficientNet MBConv block: expand, depthwise, squeeze-excitation
# and project, with its stochastic depth (a no-op in eval) on the residual.
def _efficientnet_block(lib):
    nn = lib.nn

    def stochastic_depth(input, p, mode, training=True):
        if p < 0.0 or p > 1.0:
            raise ValueError(f"drop probability has to be between 0 and 1, but got {p}")
        if not training or p == 0.0:
            return input
        survival_rate = 1.0 - p
        size = [input.shape[0]] + [1] * (input.ndim - 1) if mode == "row" else [1] * input.ndim
        noise = lib.empty(size, dtype=input.dtype, device=input.device)
        noise = noise.bernoulli_(survival_rate)
        if survival_rate > 0.0:
            noise.div_(survival_rate)
        return input * noise

    class StochasticDepth(nn.Module):
        def __init__(self, p, mode):
            super().__init__()
            self.p, self.mode = p, mode

        def forward(self, input):
            return stochastic_depth(input, self.p, self.mode, self.training)

    class Conv2dNormActivation(nn.Sequential):
        def __init__(self, inp, oup, kernel_size, stride=1, groups=1, activation_layer=nn.SiLU):
            layers = [nn.Conv2d(inp, oup, kernel_size, stride, (kernel_size - 1) // 2, groups=groups, bias=False),
                      nn.BatchNorm2d(oup, eps=1e-3, momentum=0.01)]
            if activation_layer is not None:
                layers.append(activation_layer(inplace=True))
            super().__init__(*layers)

    class SqueezeExcitation(nn.Module):
        def __init__(self, input_channels, squeeze_channels, activation=nn.ReLU, scale_activation=nn.Sigmoid):
            super().__init__()
            self.avgpool = nn.AdaptiveAvgPool2d(1)
            self.fc1 = nn.Conv2d(input_channels, squeeze_channels, 1)
            self.fc2 = nn.Conv2d(squeeze_channels, input_channels, 1)
            self.activation = activation()
            self.scale_activation = scale_activation()

        def _scale(self, input):
            scale = self.avgpool(input)
            scale = self.fc1(scale)
            scale = self.activation(scale)
            scale = self.fc2(scale)
            return self.scale_activation(scale)

        def forward(self, input):
            scale = self._scale(input)
            return scale * input

    class MBConv(nn.Module):
        def __init__(self, input_channels, out_channels, expand_ratio, kernel, stride, stochastic_depth_prob):
            super().__init__()
            self.use_res_connect = stride == 1 and input_channels == out_channels
            expanded = input_channels * expand_ratio
            layers = []
            if expanded != input_channels:
                layers.append(Conv2dNormActivation(input_channels, expanded, 1))
            layers.append(Conv2dNormActivation(expanded, expanded, kernel, stride, groups=expanded))
            squeeze_channels = max(1, input_channels // 4)
            layers.append(SqueezeExcitation(expanded, squeeze_channels, activation=lambda: nn.SiLU(inplace=True)))
            layers.append(Conv2dNormActivation(expanded, out_channels, 1, activation_layer=None))
            self.block = nn.Sequential(*layers)
            self.stochastic_depth = StochasticDepth(stochastic_depth_prob, "row")

        def forward(self, input):
            result = self.block(input)
            if self.use_res_connect:
                result = self.stochastic_depth(result)
                result += input
            return result

    model = nn.Sequential(Conv2dNormActivation(3, 8, 3, stride=2), MBConv(8, 8, 1, 3, 1, 0.2),
                          MBConv(8, 12, 6, 5, 2, 0.2), MBConv(12, 12, 6, 5, 1, 0.2), nn.AdaptiveAvgPool2d(1),
                          nn.Flatten(), nn.Dropout(0.2), nn.Linear(12, 5))
    return model


def _efficientnet(np, torch, ddpc):
    def eval_mode(lib):
        return lambda: _efficientnet_block(lib).eval()

    batches = [(_images(np, (3, 3, 16, 16), s), _labels(np, 3, 5, s)) for s in range(2)]
    model, ref = _train_alike(np, torch, ddpc, lambda lib: eval_mode(lib)(), batches, _classify, _sgd, tol=2e-4)
    # In training mode stochastic depth drops whole samples of the residual
    # branch: each sample's output is either the input alone or the full sum.
    model.train()
    x = ddpc.tensor(_images(np, (64, 12, 4, 4), 5))
    block = model[3]
    ddpc.manual_seed(0)
    out = block(x)
    full = block.block(x) / 0.8 + x
    kept = [bool(((out[i] - full[i]).abs().max() < 1e-5).item()) for i in range(64)]
    dropped = [bool(((out[i] - x[i]).abs().max() < 1e-6).item()) for i in range(64)]
    assert all(k != d for k, d in zip(kept, dropped)), "stochastic depth kept part of a sample"
    assert 0 < sum(dropped) < 64


# torchvision's DenseNet: dense layers over the concatenation of every earlier
# output, with the memory-efficient (checkpointed) bottleneck, and a transition.
def _densenet(lib):
    nn = lib.nn
    F = nn.functional
    cp = lib.utils.checkpoint

    class _DenseLayer(nn.Module):
        def __init__(self, num_input_features, growth_rate, bn_size, drop_rate, memory_efficient=False):
            super().__init__()
            self.norm1 = nn.BatchNorm2d(num_input_features)
            self.relu1 = nn.ReLU(inplace=True)
            self.conv1 = nn.Conv2d(num_input_features, bn_size * growth_rate, kernel_size=1, stride=1, bias=False)
            self.norm2 = nn.BatchNorm2d(bn_size * growth_rate)
            self.relu2 = nn.ReLU(inplace=True)
            self.conv2 = nn.Conv2d(bn_size * growth_rate, growth_rate, kernel_size=3, stride=1, padding=1, bias=False)
            self.drop_rate = float(drop_rate)
            self.memory_efficient = memory_efficient

        def bn_function(self, inputs):
            concated_features = lib.cat(inputs, 1)
            return self.conv1(self.relu1(self.norm1(concated_features)))

        def any_requires_grad(self, input):
            return any(tensor.requires_grad for tensor in input)

        def call_checkpoint_bottleneck(self, input):
            def closure(*inputs):
                return self.bn_function(inputs)

            return cp.checkpoint(closure, *input, use_reentrant=False)

        def forward(self, input):
            prev_features = [input] if isinstance(input, lib.Tensor) else input
            if self.memory_efficient and self.any_requires_grad(prev_features):
                bottleneck_output = self.call_checkpoint_bottleneck(prev_features)
            else:
                bottleneck_output = self.bn_function(prev_features)
            new_features = self.conv2(self.relu2(self.norm2(bottleneck_output)))
            if self.drop_rate > 0:
                new_features = F.dropout(new_features, p=self.drop_rate, training=self.training)
            return new_features

    class _DenseBlock(nn.ModuleDict):
        def __init__(self, num_layers, num_input_features, bn_size, growth_rate, drop_rate, memory_efficient=False):
            super().__init__()
            for i in range(num_layers):
                layer = _DenseLayer(num_input_features + i * growth_rate, growth_rate=growth_rate, bn_size=bn_size,
                                    drop_rate=drop_rate, memory_efficient=memory_efficient)
                self.add_module("denselayer%d" % (i + 1), layer)

        def forward(self, init_features):
            features = [init_features]
            for name, layer in self.items():
                new_features = layer(features)
                features.append(new_features)
            return lib.cat(features, 1)

    class _Transition(nn.Sequential):
        def __init__(self, num_input_features, num_output_features):
            super().__init__()
            self.norm = nn.BatchNorm2d(num_input_features)
            self.relu = nn.ReLU(inplace=True)
            self.conv = nn.Conv2d(num_input_features, num_output_features, kernel_size=1, stride=1, bias=False)
            self.pool = nn.AvgPool2d(kernel_size=2, stride=2)

    class DenseNet(nn.Module):
        def __init__(self, memory_efficient):
            super().__init__()
            self.features = nn.Sequential()
            self.features.add_module("conv0", nn.Conv2d(3, 8, kernel_size=3, padding=1, bias=False))
            self.features.add_module("norm0", nn.BatchNorm2d(8))
            self.features.add_module("relu0", nn.ReLU(inplace=True))
            self.features.add_module("denseblock1", _DenseBlock(3, 8, 2, 4, 0, memory_efficient))
            self.features.add_module("transition1", _Transition(20, 10))
            self.features.add_module("denseblock2", _DenseBlock(2, 10, 2, 4, 0, memory_efficient))
            self.features.add_module("norm5", nn.BatchNorm2d(18))
            self.classifier = nn.Linear(18, 6)
            for m in self.modules():
                if isinstance(m, nn.Conv2d):
                    nn.init.kaiming_normal_(m.weight)
                elif isinstance(m, nn.BatchNorm2d):
                    nn.init.constant_(m.weight, 1)
                    nn.init.constant_(m.bias, 0)
                elif isinstance(m, nn.Linear):
                    nn.init.constant_(m.bias, 0)

        def forward(self, x):
            features = self.features(x)
            out = F.relu(features, inplace=True)
            out = F.adaptive_avg_pool2d(out, (1, 1))
            out = lib.flatten(out, 1)
            return self.classifier(out)

    return DenseNet


def _densenet_cat(np, torch, ddpc):
    batches = [(_images(np, (2, 3, 8, 8), s), _labels(np, 2, 6, s)) for s in range(2)]
    for memory_efficient in (False, True):
        _train_alike(np, torch, ddpc, lambda lib: _densenet(lib)(memory_efficient), batches, _classify, _sgd,
                     tol=2e-4)


# The ConvNeXt block of facebookresearch/ConvNeXt: a depthwise 7x7 conv,
# LayerNorm over channels_last through permute, an inverted MLP, layer scale
# and timm's DropPath; the stem's channels_first LayerNorm written out.
def _convnext(lib):
    nn = lib.nn
    F = nn.functional

    def drop_path(x, drop_prob=0.0, training=False, scale_by_keep=True):
        if drop_prob == 0.0 or not training:
            return x
        keep_prob = 1 - drop_prob
        shape = (x.shape[0],) + (1,) * (x.ndim - 1)
        random_tensor = x.new_empty(shape).bernoulli_(keep_prob)
        if keep_prob > 0.0 and scale_by_keep:
            random_tensor.div_(keep_prob)
        return x * random_tensor

    class DropPath(nn.Module):
        def __init__(self, drop_prob=0.0):
            super().__init__()
            self.drop_prob = drop_prob

        def forward(self, x):
            return drop_path(x, self.drop_prob, self.training)

    class LayerNorm(nn.Module):
        def __init__(self, normalized_shape, eps=1e-6, data_format="channels_last"):
            super().__init__()
            self.weight = nn.Parameter(lib.ones(normalized_shape))
            self.bias = nn.Parameter(lib.zeros(normalized_shape))
            self.eps = eps
            self.data_format = data_format
            self.normalized_shape = (normalized_shape,)

        def forward(self, x):
            if self.data_format == "channels_last":
                return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)
            u = x.mean(1, keepdim=True)
            s = (x - u).pow(2).mean(1, keepdim=True)
            x = (x - u) / lib.sqrt(s + self.eps)
            return self.weight[:, None, None] * x + self.bias[:, None, None]

    class Block(nn.Module):
        def __init__(self, dim, drop_path=0.0, layer_scale_init_value=1e-6):
            super().__init__()
            self.dwconv = nn.Conv2d(dim, dim, kernel_size=7, padding=3, groups=dim)
            self.norm = LayerNorm(dim, eps=1e-6)
            self.pwconv1 = nn.Linear(dim, 4 * dim)
            self.act = nn.GELU()
            self.pwconv2 = nn.Linear(4 * dim, dim)
            self.gamma = nn.Parameter(layer_scale_init_value * lib.ones((dim)), requires_grad=True) \
                if layer_scale_init_value > 0 else None
            self.drop_path = DropPath(drop_path) if drop_path > 0.0 else nn.Identity()

        def forward(self, x):
            input = x
            x = self.dwconv(x)
            x = x.permute(0, 2, 3, 1)
            x = self.norm(x)
            x = self.pwconv1(x)
            x = self.act(x)
            x = self.pwconv2(x)
            if self.gamma is not None:
                x = self.gamma * x
            x = x.permute(0, 3, 1, 2)
            return input + self.drop_path(x)

    class ConvNeXt(nn.Module):
        def __init__(self, dims=(8, 16), depths=(2, 1), num_classes=5, drop_path_rate=0.1):
            super().__init__()
            self.downsample_layers = nn.ModuleList()
            self.downsample_layers.append(nn.Sequential(nn.Conv2d(3, dims[0], kernel_size=2, stride=2),
                                                        LayerNorm(dims[0], eps=1e-6, data_format="channels_first")))
            self.downsample_layers.append(nn.Sequential(LayerNorm(dims[0], eps=1e-6, data_format="channels_first"),
                                                        nn.Conv2d(dims[0], dims[1], kernel_size=2, stride=2)))
            self.stages = nn.ModuleList()
            dp_rates = [x.item() for x in lib.linspace(0, drop_path_rate, sum(depths))]
            cur = 0
            for i in range(2):
                self.stages.append(nn.Sequential(*[Block(dims[i], dp_rates[cur + j], layer_scale_init_value=0.5)
                                                   for j in range(depths[i])]))
                cur += depths[i]
            self.norm = nn.LayerNorm(dims[-1], eps=1e-6)
            self.head = nn.Linear(dims[-1], num_classes)
            self.apply(self._init_weights)

        def _init_weights(self, m):
            if isinstance(m, (nn.Conv2d, nn.Linear)):
                nn.init.trunc_normal_(m.weight, std=0.02)
                nn.init.constant_(m.bias, 0)

        def forward(self, x):
            for i in range(2):
                x = self.downsample_layers[i](x)
                x = self.stages[i](x)
            return self.head(self.norm(x.mean([-2, -1])))

    return ConvNeXt()


def _convnext_block(np, torch, ddpc):
    def adamw(lib, model):
        return lib.optim.AdamW(model.parameters(), lr=4e-3, weight_decay=0.05)

    batches = [(_images(np, (2, 3, 16, 16), s), _labels(np, 2, 5, s)) for s in range(3)]
    model, _ = _train_alike(np, torch, ddpc, lambda lib: _convnext(lib).eval(), batches, _classify, adamw, tol=2e-4)
    model.train()
    block = model.stages[0][1]
    x = ddpc.tensor(_images(np, (256, 8, 4, 4), 3))
    branch = block(x) - x
    kept = (branch.flatten(1).abs().amax(1) > 0).float().mean().item()
    assert abs(kept - (1 - block.drop_path.drop_prob)) < 0.1, kept


# Swin Transformer's shifted-window block (microsoft/Swin-Transformer):
# torch.roll, the view/permute window partition, the relative position bias
# table indexed by a buffer built with in-place writes, and the shift mask.
def _swin(lib):
    nn = lib.nn

    def window_partition(x, window_size):
        B, H, W, C = x.shape
        x = x.view(B, H // window_size, window_size, W // window_size, window_size, C)
        return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(-1, window_size, window_size, C)

    def window_reverse(windows, window_size, H, W):
        B = int(windows.shape[0] / (H * W / window_size / window_size))
        x = windows.view(B, H // window_size, W // window_size, window_size, window_size, -1)
        return x.permute(0, 1, 3, 2, 4, 5).contiguous().view(B, H, W, -1)

    class Mlp(nn.Module):
        def __init__(self, in_features, hidden_features):
            super().__init__()
            self.fc1 = nn.Linear(in_features, hidden_features)
            self.act = nn.GELU()
            self.fc2 = nn.Linear(hidden_features, in_features)
            self.drop = nn.Dropout(0.0)

        def forward(self, x):
            return self.drop(self.fc2(self.drop(self.act(self.fc1(x)))))

    class WindowAttention(nn.Module):
        def __init__(self, dim, window_size, num_heads, qkv_bias=True, qk_scale=None):
            super().__init__()
            self.dim = dim
            self.window_size = window_size
            self.num_heads = num_heads
            head_dim = dim // num_heads
            self.scale = qk_scale or head_dim ** -0.5
            self.relative_position_bias_table = nn.Parameter(
                lib.zeros((2 * window_size[0] - 1) * (2 * window_size[1] - 1), num_heads))
            coords_h = lib.arange(self.window_size[0])
            coords_w = lib.arange(self.window_size[1])
            coords = lib.stack(lib.meshgrid([coords_h, coords_w], indexing="ij"))
            coords_flatten = lib.flatten(coords, 1)
            relative_coords = coords_flatten[:, :, None] - coords_flatten[:, None, :]
            relative_coords = relative_coords.permute(1, 2, 0).contiguous()
            relative_coords[:, :, 0] += self.window_size[0] - 1
            relative_coords[:, :, 1] += self.window_size[1] - 1
            relative_coords[:, :, 0] *= 2 * self.window_size[1] - 1
            relative_position_index = relative_coords.sum(-1)
            self.register_buffer("relative_position_index", relative_position_index)
            self.qkv = nn.Linear(dim, dim * 3, bias=qkv_bias)
            self.attn_drop = nn.Dropout(0.0)
            self.proj = nn.Linear(dim, dim)
            self.proj_drop = nn.Dropout(0.0)
            nn.init.trunc_normal_(self.relative_position_bias_table, std=0.02)
            self.softmax = nn.Softmax(dim=-1)

        def forward(self, x, mask=None):
            B_, N, C = x.shape
            qkv = self.qkv(x).reshape(B_, N, 3, self.num_heads, C // self.num_heads).permute(2, 0, 3, 1, 4)
            q, k, v = qkv[0], qkv[1], qkv[2]
            q = q * self.scale
            attn = (q @ k.transpose(-2, -1))
            relative_position_bias = self.relative_position_bias_table[self.relative_position_index.view(-1)].view(
                self.window_size[0] * self.window_size[1], self.window_size[0] * self.window_size[1], -1)
            relative_position_bias = relative_position_bias.permute(2, 0, 1).contiguous()
            attn = attn + relative_position_bias.unsqueeze(0)
            if mask is not None:
                nW = mask.shape[0]
                attn = attn.view(B_ // nW, nW, self.num_heads, N, N) + mask.unsqueeze(1).unsqueeze(0)
                attn = attn.view(-1, self.num_heads, N, N)
            attn = self.softmax(attn)
            attn = self.attn_drop(attn)
            x = (attn @ v).transpose(1, 2).reshape(B_, N, C)
            return self.proj_drop(self.proj(x))

    class SwinTransformerBlock(nn.Module):
        def __init__(self, dim, input_resolution, num_heads, window_size=4, shift_size=0, mlp_ratio=2.0):
            super().__init__()
            self.input_resolution = input_resolution
            self.window_size = window_size
            self.shift_size = shift_size
            self.norm1 = nn.LayerNorm(dim)
            self.attn = WindowAttention(dim, window_size=(window_size, window_size), num_heads=num_heads)
            self.drop_path = nn.Identity()
            self.norm2 = nn.LayerNorm(dim)
            self.mlp = Mlp(dim, int(dim * mlp_ratio))
            if self.shift_size > 0:
                H, W = self.input_resolution
                img_mask = lib.zeros((1, H, W, 1))
                h_slices = (slice(0, -self.window_size), slice(-self.window_size, -self.shift_size),
                            slice(-self.shift_size, None))
                w_slices = h_slices
                cnt = 0
                for h in h_slices:
                    for w in w_slices:
                        img_mask[:, h, w, :] = cnt
                        cnt += 1
                mask_windows = window_partition(img_mask, self.window_size)
                mask_windows = mask_windows.view(-1, self.window_size * self.window_size)
                attn_mask = mask_windows.unsqueeze(1) - mask_windows.unsqueeze(2)
                attn_mask = attn_mask.masked_fill(attn_mask != 0, float(-100.0)).masked_fill(attn_mask == 0, float(0.0))
            else:
                attn_mask = None
            self.register_buffer("attn_mask", attn_mask)

        def forward(self, x):
            H, W = self.input_resolution
            B, L, C = x.shape
            shortcut = x
            x = self.norm1(x)
            x = x.view(B, H, W, C)
            if self.shift_size > 0:
                shifted_x = lib.roll(x, shifts=(-self.shift_size, -self.shift_size), dims=(1, 2))
            else:
                shifted_x = x
            x_windows = window_partition(shifted_x, self.window_size)
            x_windows = x_windows.view(-1, self.window_size * self.window_size, C)
            attn_windows = self.attn(x_windows, mask=self.attn_mask)
            attn_windows = attn_windows.view(-1, self.window_size, self.window_size, C)
            shifted_x = window_reverse(attn_windows, self.window_size, H, W)
            if self.shift_size > 0:
                x = lib.roll(shifted_x, shifts=(self.shift_size, self.shift_size), dims=(1, 2))
            else:
                x = shifted_x
            x = x.view(B, H * W, C)
            x = shortcut + self.drop_path(x)
            return x + self.drop_path(self.mlp(self.norm2(x)))

    class PatchMerging(nn.Module):
        def __init__(self, input_resolution, dim):
            super().__init__()
            self.input_resolution = input_resolution
            self.reduction = nn.Linear(4 * dim, 2 * dim, bias=False)
            self.norm = nn.LayerNorm(4 * dim)

        def forward(self, x):
            H, W = self.input_resolution
            B, L, C = x.shape
            x = x.view(B, H, W, C)
            x0 = x[:, 0::2, 0::2, :]
            x1 = x[:, 1::2, 0::2, :]
            x2 = x[:, 0::2, 1::2, :]
            x3 = x[:, 1::2, 1::2, :]
            x = lib.cat([x0, x1, x2, x3], -1)
            x = x.view(B, -1, 4 * C)
            return self.reduction(self.norm(x))

    class TinySwin(nn.Module):
        def __init__(self, num_classes=4):
            super().__init__()
            self.patch_embed = nn.Conv2d(3, 16, kernel_size=2, stride=2)
            self.blocks = nn.Sequential(SwinTransformerBlock(16, (8, 8), 2, 4, 0),
                                        SwinTransformerBlock(16, (8, 8), 2, 4, 2))
            self.merge = PatchMerging((8, 8), 16)
            self.norm = nn.LayerNorm(32)
            self.avgpool = nn.AdaptiveAvgPool1d(1)
            self.head = nn.Linear(32, num_classes)

        def forward(self, x):
            x = self.patch_embed(x).flatten(2).transpose(1, 2)
            x = self.merge(self.blocks(x))
            x = self.avgpool(self.norm(x).transpose(1, 2))
            return self.head(lib.flatten(x, 1))

    return TinySwin()


def _swin_window_attention(np, torch, ddpc):
    def adamw(lib, model):
        return lib.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.05)

    batches = [(_images(np, (2, 3, 16, 16), s), _labels(np, 2, 4, s)) for s in range(3)]
    _train_alike(np, torch, ddpc, _swin, batches, _classify, adamw)


# The ResNet generator of junyanz/pytorch-CycleGAN-and-pix2pix: reflection
# padding, InstanceNorm2d without affine, strided convs, residual blocks and
# ConvTranspose2d with output_padding back up, Tanh; the CycleGAN losses
# (least-squares GAN, L1 cycle and identity) with its Adam settings.
def _cyclegan(lib):
    nn = lib.nn
    norm_layer = functools.partial(nn.InstanceNorm2d, affine=False, track_running_stats=False)

    class ResnetBlock(nn.Module):
        def __init__(self, dim, use_dropout, use_bias):
            super().__init__()
            conv_block = [nn.ReflectionPad2d(1), nn.Conv2d(dim, dim, kernel_size=3, padding=0, bias=use_bias),
                          norm_layer(dim), nn.ReLU(True)]
            if use_dropout:
                conv_block += [nn.Dropout(0.5)]
            conv_block += [nn.ReflectionPad2d(1), nn.Conv2d(dim, dim, kernel_size=3, padding=0, bias=use_bias),
                           norm_layer(dim)]
            self.conv_block = nn.Sequential(*conv_block)

        def forward(self, x):
            return x + self.conv_block(x)

    class ResnetGenerator(nn.Module):
        def __init__(self, input_nc, output_nc, ngf=8, n_blocks=2):
            super().__init__()
            use_bias = norm_layer.func == nn.InstanceNorm2d
            model = [nn.ReflectionPad2d(3), nn.Conv2d(input_nc, ngf, kernel_size=7, padding=0, bias=use_bias),
                     norm_layer(ngf), nn.ReLU(True)]
            n_downsampling = 2
            for i in range(n_downsampling):
                mult = 2 ** i
                model += [nn.Conv2d(ngf * mult, ngf * mult * 2, kernel_size=3, stride=2, padding=1, bias=use_bias),
                          norm_layer(ngf * mult * 2), nn.ReLU(True)]
            mult = 2 ** n_downsampling
            for i in range(n_blocks):
                model += [ResnetBlock(ngf * mult, use_dropout=False, use_bias=use_bias)]
            for i in range(n_downsampling):
                mult = 2 ** (n_downsampling - i)
                model += [nn.ConvTranspose2d(ngf * mult, int(ngf * mult / 2), kernel_size=3, stride=2, padding=1,
                                             output_padding=1, bias=use_bias),
                          norm_layer(int(ngf * mult / 2)), nn.ReLU(True)]
            model += [nn.ReflectionPad2d(3)]
            model += [nn.Conv2d(ngf, output_nc, kernel_size=7, padding=0)]
            model += [nn.Tanh()]
            self.model = nn.Sequential(*model)

        def forward(self, input):
            return self.model(input)

    def init_func(m):
        classname = m.__class__.__name__
        if hasattr(m, "weight") and (classname.find("Conv") != -1 or classname.find("Linear") != -1):
            nn.init.normal_(m.weight.data, 0.0, 0.02)
            if hasattr(m, "bias") and m.bias is not None:
                nn.init.constant_(m.bias.data, 0.0)

    class CycleGAN(nn.Module):
        def __init__(self):
            super().__init__()
            self.netG_A = ResnetGenerator(3, 3)
            self.netG_B = ResnetGenerator(3, 3)
            self.netD = nn.Sequential(nn.Conv2d(3, 8, 4, 2, 1), nn.LeakyReLU(0.2, True),
                                      nn.Conv2d(8, 16, 4, 2, 1), nn.InstanceNorm2d(16), nn.LeakyReLU(0.2, True),
                                      nn.Conv2d(16, 1, 4, 1, 1))
            self.apply(init_func)

    return CycleGAN()


def _cyclegan_generator(np, torch, ddpc):
    def losses(lib, model, real_A, real_B):
        F = lib.nn.functional
        fake_B = model.netG_A(real_A)
        rec_A = model.netG_B(fake_B)
        idt_A = model.netG_A(real_B)
        pred = model.netD(fake_B)
        loss_G = F.mse_loss(pred, lib.tensor(1.0).expand_as(pred)) + lib.nn.L1Loss()(rec_A, real_A) * 10.0 \
            + lib.nn.L1Loss()(idt_A, real_B) * 5.0
        return (fake_B, rec_A), loss_G

    def adam(lib, model):
        return lib.optim.Adam(model.parameters(), lr=0.0002, betas=(0.5, 0.999))

    rng = np.random.default_rng(0)
    batches = [tuple(np.tanh(rng.standard_normal((1, 3, 12, 12))).astype(np.float32) for _ in range(2))
               for _ in range(2)]
    _train_alike(np, torch, ddpc, _cyclegan, batches, losses, adam)


# WGAN-GP's critic update (eriklindernoren/PyTorch-GAN, wgan_gp.py): the
# gradient penalty on random interpolates through autograd.grad with
# create_graph=True, then backward through it.
def _wgan(lib):
    nn = lib.nn

    class Generator(nn.Module):
        def __init__(self, latent_dim=8, img_shape=(1, 6, 6)):
            super().__init__()
            self.img_shape = img_shape

            def block(in_feat, out_feat, normalize=True):
                layers = [nn.Linear(in_feat, out_feat)]
                if normalize:
                    layers.append(nn.BatchNorm1d(out_feat, 0.8))
                layers.append(nn.LeakyReLU(0.2, inplace=True))
                return layers

            self.model = nn.Sequential(*block(latent_dim, 32, normalize=False), *block(32, 64),
                                       nn.Linear(64, int(math.prod(img_shape))), nn.Tanh())

        def forward(self, z):
            img = self.model(z)
            return img.view(img.shape[0], *self.img_shape)

    class Discriminator(nn.Module):
        def __init__(self, img_shape=(1, 6, 6)):
            super().__init__()
            self.model = nn.Sequential(nn.Linear(int(math.prod(img_shape)), 32), nn.LeakyReLU(0.2, inplace=True),
                                       nn.Linear(32, 16), nn.LeakyReLU(0.2, inplace=True), nn.Linear(16, 1))

        def forward(self, img):
            img_flat = img.view(img.shape[0], -1)
            return self.model(img_flat)

    class GAN(nn.Module):
        def __init__(self):
            super().__init__()
            self.generator = Generator()
            self.discriminator = Discriminator()

    return GAN()


def _wgan_gp(np, torch, ddpc):
    lambda_gp = 10

    def compute_gradient_penalty(lib, D, real_samples, fake_samples, alpha):
        interpolates = (alpha * real_samples + ((1 - alpha) * fake_samples)).requires_grad_(True)
        d_interpolates = D(interpolates)
        fake = lib.autograd.Variable(lib.Tensor(real_samples.shape[0], 1).fill_(1.0), requires_grad=False)
        gradients = lib.autograd.grad(outputs=d_interpolates, inputs=interpolates, grad_outputs=fake,
                                      create_graph=True, retain_graph=True, only_inputs=True)[0]
        gradients = gradients.view(gradients.size(0), -1)
        return ((gradients.norm(2, dim=1) - 1) ** 2).mean()

    def critic_loss(lib, gan, real_imgs, z, alpha):
        fake_imgs = gan.generator(z)
        real_validity = gan.discriminator(real_imgs)
        fake_validity = gan.discriminator(fake_imgs.detach())
        gradient_penalty = compute_gradient_penalty(lib, gan.discriminator, real_imgs.data, fake_imgs.data, alpha)
        d_loss = -lib.mean(real_validity) + lib.mean(fake_validity) + lambda_gp * gradient_penalty
        return (fake_imgs, gradient_penalty), d_loss

    def adam(lib, gan):
        return lib.optim.Adam(gan.discriminator.parameters(), lr=0.0002, betas=(0.5, 0.999))

    rng = np.random.default_rng(0)
    batches = [(np.tanh(rng.standard_normal((8, 1, 6, 6))).astype(np.float32),
                rng.standard_normal((8, 8)).astype(np.float32),
                rng.random((8, 1, 1, 1)).astype(np.float32)) for _ in range(3)]
    _train_alike(np, torch, ddpc, _wgan, batches, critic_loss, adam)


# The PyTorch tutorial "NLP From Scratch: Translation with a Sequence to
# Sequence Network and Attention": a GRU encoder and a GRU decoder with
# Bahdanau attention (bmm, softmax), teacher forcing and greedy decoding
# with topk, NLLLoss over log_softmax.
SOS_token, MAX_LENGTH = 0, 5


def _seq2seq(lib):
    nn = lib.nn
    F = nn.functional

    class EncoderRNN(nn.Module):
        def __init__(self, input_size, hidden_size, dropout_p=0.1):
            super().__init__()
            self.hidden_size = hidden_size
            self.embedding = nn.Embedding(input_size, hidden_size)
            self.gru = nn.GRU(hidden_size, hidden_size, batch_first=True)
            self.dropout = nn.Dropout(dropout_p)

        def forward(self, input):
            embedded = self.dropout(self.embedding(input))
            output, hidden = self.gru(embedded)
            return output, hidden

    class BahdanauAttention(nn.Module):
        def __init__(self, hidden_size):
            super().__init__()
            self.Wa = nn.Linear(hidden_size, hidden_size)
            self.Ua = nn.Linear(hidden_size, hidden_size)
            self.Va = nn.Linear(hidden_size, 1)

        def forward(self, query, keys):
            scores = self.Va(lib.tanh(self.Wa(query) + self.Ua(keys)))
            scores = scores.squeeze(2).unsqueeze(1)
            weights = F.softmax(scores, dim=-1)
            context = lib.bmm(weights, keys)
            return context, weights

    class AttnDecoderRNN(nn.Module):
        def __init__(self, hidden_size, output_size, dropout_p=0.1):
            super().__init__()
            self.embedding = nn.Embedding(output_size, hidden_size)
            self.attention = BahdanauAttention(hidden_size)
            self.gru = nn.GRU(2 * hidden_size, hidden_size, batch_first=True)
            self.out = nn.Linear(hidden_size, output_size)
            self.dropout = nn.Dropout(dropout_p)

        def forward(self, encoder_outputs, encoder_hidden, target_tensor=None):
            batch_size = encoder_outputs.size(0)
            decoder_input = lib.empty(batch_size, 1, dtype=lib.long, device="cpu").fill_(SOS_token)
            decoder_hidden = encoder_hidden
            decoder_outputs = []
            attentions = []
            for i in range(MAX_LENGTH):
                decoder_output, decoder_hidden, attn_weights = self.forward_step(decoder_input, decoder_hidden,
                                                                                 encoder_outputs)
                decoder_outputs.append(decoder_output)
                attentions.append(attn_weights)
                if target_tensor is not None:
                    decoder_input = target_tensor[:, i].unsqueeze(1)
                else:
                    _, topi = decoder_output.topk(1)
                    decoder_input = topi.squeeze(-1).detach()
            decoder_outputs = lib.cat(decoder_outputs, dim=1)
            decoder_outputs = F.log_softmax(decoder_outputs, dim=-1)
            attentions = lib.cat(attentions, dim=1)
            return decoder_outputs, decoder_hidden, attentions

        def forward_step(self, input, hidden, encoder_outputs):
            embedded = self.dropout(self.embedding(input))
            query = hidden.permute(1, 0, 2)
            context, attn_weights = self.attention(query, encoder_outputs)
            input_gru = lib.cat((embedded, context), dim=2)
            output, hidden = self.gru(input_gru, hidden)
            output = self.out(output)
            return output, hidden, attn_weights

    class Seq2Seq(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = EncoderRNN(11, 16)
            self.decoder = AttnDecoderRNN(16, 9)

    return _no_dropout(lib, Seq2Seq())


def _seq2seq_attention(np, torch, ddpc):
    def train_step(lib, model, input_tensor, target_tensor):
        encoder_outputs, encoder_hidden = model.encoder(input_tensor)
        decoder_outputs, _, attentions = model.decoder(encoder_outputs, encoder_hidden, target_tensor)
        criterion = lib.nn.NLLLoss()
        loss = criterion(decoder_outputs.view(-1, decoder_outputs.size(-1)), target_tensor.view(-1))
        with lib.no_grad():
            greedy, _, _ = model.decoder(encoder_outputs, encoder_hidden)
        return (decoder_outputs, attentions, greedy.argmax(-1)), loss

    def adam(lib, model):
        return lib.optim.Adam(model.parameters(), lr=0.01)

    rng = np.random.default_rng(0)
    batches = [(rng.integers(1, 11, (3, 6)), rng.integers(1, 9, (3, MAX_LENGTH))) for _ in range(3)]
    _train_alike(np, torch, ddpc, _seq2seq, batches, train_step, adam)


# The PyTorch tutorial "Language Translation with nn.Transformer": token
# embeddings scaled by sqrt(emb_size), a sinusoidal positional encoding
# buffer, nn.Transformer with a causal mask from
# generate_square_subsequent_mask, a boolean source mask, key padding masks,
# CrossEntropyLoss(ignore_index=PAD_IDX) and greedy decoding.
PAD_IDX, BOS_IDX, EOS_IDX = 1, 2, 3


def _translation(lib):
    nn = lib.nn

    class PositionalEncoding(nn.Module):
        def __init__(self, emb_size, dropout, maxlen=64):
            super().__init__()
            den = lib.exp(- lib.arange(0, emb_size, 2) * math.log(10000) / emb_size)
            pos = lib.arange(0, maxlen).reshape(maxlen, 1)
            pos_embedding = lib.zeros((maxlen, emb_size))
            pos_embedding[:, 0::2] = lib.sin(pos * den)
            pos_embedding[:, 1::2] = lib.cos(pos * den)
            pos_embedding = pos_embedding.unsqueeze(-2)
            self.dropout = nn.Dropout(dropout)
            self.register_buffer("pos_embedding", pos_embedding)

        def forward(self, token_embedding):
            return self.dropout(token_embedding + self.pos_embedding[:token_embedding.size(0), :])

    class TokenEmbedding(nn.Module):
        def __init__(self, vocab_size, emb_size):
            super().__init__()
            self.embedding = nn.Embedding(vocab_size, emb_size)
            self.emb_size = emb_size

        def forward(self, tokens):
            return self.embedding(tokens.long()) * math.sqrt(self.emb_size)

    class Seq2SeqTransformer(nn.Module):
        def __init__(self, num_encoder_layers, num_decoder_layers, emb_size, nhead, src_vocab_size, tgt_vocab_size,
                     dim_feedforward=512, dropout=0.1):
            super().__init__()
            self.transformer = nn.Transformer(d_model=emb_size, nhead=nhead, num_encoder_layers=num_encoder_layers,
                                              num_decoder_layers=num_decoder_layers,
                                              dim_feedforward=dim_feedforward, dropout=dropout)
            self.generator = nn.Linear(emb_size, tgt_vocab_size)
            self.src_tok_emb = TokenEmbedding(src_vocab_size, emb_size)
            self.tgt_tok_emb = TokenEmbedding(tgt_vocab_size, emb_size)
            self.positional_encoding = PositionalEncoding(emb_size, dropout=dropout)

        def forward(self, src, trg, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask,
                    memory_key_padding_mask):
            src_emb = self.positional_encoding(self.src_tok_emb(src))
            tgt_emb = self.positional_encoding(self.tgt_tok_emb(trg))
            outs = self.transformer(src_emb, tgt_emb, src_mask, tgt_mask, None, src_padding_mask, tgt_padding_mask,
                                    memory_key_padding_mask)
            return self.generator(outs)

        def encode(self, src, src_mask):
            return self.transformer.encoder(self.positional_encoding(self.src_tok_emb(src)), src_mask)

        def decode(self, tgt, memory, tgt_mask):
            return self.transformer.decoder(self.positional_encoding(self.tgt_tok_emb(tgt)), memory, tgt_mask)

    model = Seq2SeqTransformer(2, 2, 16, 2, 13, 11, dim_feedforward=32)
    for p in model.parameters():
        if p.dim() > 1:
            nn.init.xavier_uniform_(p)
    return _no_dropout(lib, model)


def _translation_masks(lib, src, tgt):
    def generate_square_subsequent_mask(sz):
        mask = (lib.triu(lib.ones((sz, sz), device="cpu")) == 1).transpose(0, 1)
        mask = mask.float().masked_fill(mask == 0, float("-inf")).masked_fill(mask == 1, float(0.0))
        return mask

    src_seq_len = src.shape[0]
    tgt_seq_len = tgt.shape[0]
    tgt_mask = generate_square_subsequent_mask(tgt_seq_len)
    assert (tgt_mask == lib.nn.Transformer.generate_square_subsequent_mask(tgt_seq_len)).all()
    src_mask = lib.zeros((src_seq_len, src_seq_len), device="cpu").type(lib.bool)
    src_padding_mask = (src == PAD_IDX).transpose(0, 1)
    tgt_padding_mask = (tgt == PAD_IDX).transpose(0, 1)
    return src_mask, tgt_mask, src_padding_mask, tgt_padding_mask


def _greedy_decode(lib, model, src, src_mask, max_len, start_symbol):
    memory = model.encode(src, src_mask)
    ys = lib.ones(1, 1).fill_(start_symbol).type(lib.long).to("cpu")
    for i in range(max_len - 1):
        memory = memory.to("cpu")
        tgt_mask = (lib.nn.Transformer.generate_square_subsequent_mask(ys.size(0)).type(lib.bool)).to("cpu")
        out = model.decode(ys, memory, tgt_mask)
        out = out.transpose(0, 1)
        prob = model.generator(out[:, -1])
        _, next_word = lib.max(prob, dim=1)
        next_word = next_word.item()
        ys = lib.cat([ys, lib.ones(1, 1).type_as(src.data).fill_(next_word)], dim=0)
        if next_word == EOS_IDX:
            break
    return ys


def _transformer_translation(np, torch, ddpc):
    def train_step(lib, model, src, tgt):
        tgt_input = tgt[:-1, :]
        src_mask, tgt_mask, src_padding_mask, tgt_padding_mask = _translation_masks(lib, src, tgt_input)
        logits = model(src, tgt_input, src_mask, tgt_mask, src_padding_mask, tgt_padding_mask, src_padding_mask)
        tgt_out = tgt[1:, :]
        loss_fn = lib.nn.CrossEntropyLoss(ignore_index=PAD_IDX)
        loss = loss_fn(logits.reshape(-1, logits.shape[-1]), tgt_out.reshape(-1))
        return logits, loss

    def adam(lib, model):
        return lib.optim.Adam(model.parameters(), lr=0.0001, betas=(0.9, 0.98), eps=1e-9)

    def sentences(rng, length, vocab, n):
        out = np.full((length, n), PAD_IDX)
        for j in range(n):
            k = rng.integers(2, length - 1)
            out[0, j], out[1:k + 1, j], out[k + 1, j] = BOS_IDX, rng.integers(4, vocab, k), EOS_IDX
        return out

    rng = np.random.default_rng(0)
    batches = [(sentences(rng, 7, 13, 3), sentences(rng, 6, 11, 3)) for _ in range(3)]
    model, ref = _train_alike(np, torch, ddpc, _translation, batches, train_step, adam, tol=2e-4)
    model.eval()
    ref.eval()
    src = batches[0][0][:, :1]
    for lib, m in ((ddpc, model), (torch, ref)):
        src_mask = (lib.zeros(src.shape[0], src.shape[0])).type(lib.bool)
        ys = _greedy_decode(lib, m, lib.tensor(src), src_mask, max_len=src.shape[0] + 5, start_symbol=BOS_IDX)
        if lib is ddpc:
            got = ys
    _close(np, got, ys, "greedy translation")


# A BERT-style encoder: token, position and segment embeddings, pre-norm
# nn.TransformerEncoderLayer with gelu, a key padding mask, a tanh pooler
# and a masked-LM head tied to the token embedding; CrossEntropyLoss with
# ignore_index and label_smoothing, AdamW with no decay on biases and
# LayerNorm weights, a linear warmup through LambdaLR and clip_grad_norm_.
def _bert(lib):
    nn = lib.nn
    F = nn.functional

    class Bert(nn.Module):
        def __init__(self, vocab=20, d=16, heads=2, layers=2, max_len=12):
            super().__init__()
            self.tok = nn.Embedding(vocab, d, padding_idx=0)
            self.pos = nn.Embedding(max_len, d)
            self.seg = nn.Embedding(2, d)
            self.emb_norm = nn.LayerNorm(d, eps=1e-12)
            self.drop = nn.Dropout(0.1)
            layer = nn.TransformerEncoderLayer(d, heads, dim_feedforward=4 * d, dropout=0.1, activation="gelu",
                                               batch_first=True, norm_first=True)
            self.encoder = nn.TransformerEncoder(layer, layers, norm=nn.LayerNorm(d), enable_nested_tensor=False)
            self.pooler = nn.Sequential(nn.Linear(d, d), nn.Tanh())
            self.cls = nn.Linear(d, 2)
            self.mlm_transform = nn.Sequential(nn.Linear(d, d), nn.GELU(), nn.LayerNorm(d, eps=1e-12))
            self.mlm_decoder = nn.Linear(d, vocab)
            self.mlm_decoder.weight = self.tok.weight
            self.register_buffer("position_ids", lib.arange(max_len).expand((1, -1)), persistent=False)

        def forward(self, input_ids, token_type_ids, attention_mask):
            positions = self.position_ids[:, :input_ids.size(1)]
            x = self.tok(input_ids) + self.pos(positions) + self.seg(token_type_ids)
            x = self.drop(self.emb_norm(x))
            h = self.encoder(x, src_key_padding_mask=attention_mask == 0)
            pooled = self.pooler(h[:, 0])
            mask = attention_mask.unsqueeze(-1).to(h.dtype)
            mean_pooled = (h * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            return self.mlm_decoder(self.mlm_transform(h)), self.cls(pooled), F.normalize(mean_pooled, dim=-1)

    return _no_dropout(lib, Bert())


def _bert_encoder(np, torch, ddpc):
    def train_step(lib, model, input_ids, token_type_ids, attention_mask, mlm_labels, nsp_labels):
        mlm_logits, nsp_logits, embedding = model(input_ids, token_type_ids, attention_mask)
        loss_fct = lib.nn.CrossEntropyLoss(ignore_index=-100, label_smoothing=0.1)
        loss = loss_fct(mlm_logits.view(-1, mlm_logits.size(-1)), mlm_labels.view(-1)) \
            + loss_fct(nsp_logits, nsp_labels)
        return (mlm_logits, nsp_logits, embedding), loss

    def adamw(lib, model):
        no_decay = ["bias", "LayerNorm.weight", "norm"]
        groups = [{"params": [p for n, p in model.named_parameters() if not any(nd in n for nd in no_decay)],
                   "weight_decay": 0.01},
                  {"params": [p for n, p in model.named_parameters() if any(nd in n for nd in no_decay)],
                   "weight_decay": 0.0}]
        opt = lib.optim.AdamW(groups, lr=1e-3)
        warmup, total = 2, 6
        scheduler = lib.optim.lr_scheduler.LambdaLR(
            opt, lambda step: step / warmup if step < warmup else max(0.0, (total - step) / (total - warmup)))
        params = list(model.parameters())

        class Stepper:
            def zero_grad(self):
                opt.zero_grad(set_to_none=True)

            def step(self):
                lib.nn.utils.clip_grad_norm_(params, 0.5)
                opt.step()
                scheduler.step()

        return Stepper()

    rng = np.random.default_rng(0)
    batches = []
    for _ in range(3):
        lengths = rng.integers(5, 11, 4)
        ids = rng.integers(3, 20, (4, 10))
        attention = (np.arange(10)[None] < lengths[:, None]).astype(np.int64)
        ids = ids * attention
        segments = (np.arange(10)[None] >= lengths[:, None] // 2).astype(np.int64) * attention
        labels = np.where((rng.random((4, 10)) < 0.3) & (attention == 1), ids, -100)
        batches.append((ids, segments, attention, labels, rng.integers(0, 2, 4)))
    _train_alike(np, torch, ddpc, _bert, batches, train_step, adamw)


# The PyTorch tutorial "Reinforcement Learning (DQN)": Q(s, a) by gather on
# the actions taken, next-state values from the target network under
# no_grad written through a boolean mask, smooth_l1_loss, clip_grad_value_,
# AdamW(amsgrad=True) and the soft update of the target network through
# load_state_dict.
def _dqn_net(lib):
    nn = lib.nn
    F = nn.functional

    class DQN(nn.Module):
        def __init__(self, n_observations, n_actions):
            super().__init__()
            self.layer1 = nn.Linear(n_observations, 32)
            self.layer2 = nn.Linear(32, 32)
            self.layer3 = nn.Linear(32, n_actions)

        def forward(self, x):
            x = F.relu(self.layer1(x))
            x = F.relu(self.layer2(x))
            return self.layer3(x)

    class Agent(nn.Module):
        def __init__(self):
            super().__init__()
            self.policy_net = DQN(4, 2)
            self.target_net = DQN(4, 2)
            self.target_net.load_state_dict(self.policy_net.state_dict())

    return Agent()


def _dqn_update(np, torch, ddpc):
    GAMMA, TAU = 0.99, 0.05

    def optimize_model(lib, agent, states, actions, rewards, next_states, done):
        policy_net, target_net = agent.policy_net, agent.target_net
        non_final_mask = lib.tensor(tuple(not d for d in done.tolist()), device="cpu", dtype=lib.bool)
        non_final_next_states = lib.cat([s.unsqueeze(0) for s, d in zip(next_states, done.tolist()) if not d])
        state_action_values = policy_net(states).gather(1, actions)
        next_state_values = lib.zeros(states.shape[0], device="cpu")
        with lib.no_grad():
            next_state_values[non_final_mask] = target_net(non_final_next_states).max(1).values
        expected_state_action_values = (next_state_values * GAMMA) + rewards
        criterion = lib.nn.SmoothL1Loss()
        loss = criterion(state_action_values, expected_state_action_values.unsqueeze(1))
        with lib.no_grad():
            greedy = policy_net(states[:1]).max(1).indices.view(1, 1)
        return (state_action_values, next_state_values, greedy), loss

    def optimizer(lib, agent):
        opt = lib.optim.AdamW(agent.policy_net.parameters(), lr=1e-2, amsgrad=True)

        class Stepper:
            def zero_grad(self):
                opt.zero_grad()

            def step(self):
                lib.nn.utils.clip_grad_value_(agent.policy_net.parameters(), 0.05)
                opt.step()
                target_net_state_dict = agent.target_net.state_dict()
                policy_net_state_dict = agent.policy_net.state_dict()
                for key in policy_net_state_dict:
                    target_net_state_dict[key] = policy_net_state_dict[key] * TAU + target_net_state_dict[key] * (
                        1 - TAU)
                agent.target_net.load_state_dict(target_net_state_dict)

        return Stepper()

    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((16, 4)).astype(np.float32), rng.integers(0, 2, (16, 1)),
                rng.random(16).astype(np.float32), rng.standard_normal((16, 4)).astype(np.float32),
                rng.random(16) < 0.25) for _ in range(4)]
    _train_alike(np, torch, ddpc, _dqn_net, batches, optimize_model, optimizer)


# pytorch/examples reinforcement_learning: REINFORCE (Categorical over a
# softmax policy, normalised discounted returns, the summed -log_prob * R)
# and actor-critic (Categorical(logits=...), smooth_l1_loss on the value,
# an entropy bonus); then PPO's clipped surrogate with a Normal policy.
# Actions come from numpy: the libraries' samplers draw differently.
def _policies(lib):
    nn = lib.nn
    F = nn.functional

    class Policy(nn.Module):
        def __init__(self):
            super().__init__()
            self.affine1 = nn.Linear(4, 32)
            self.dropout = nn.Dropout(p=0.6)
            self.affine2 = nn.Linear(32, 2)

        def forward(self, x):
            x = self.affine1(x)
            x = self.dropout(x)
            x = F.relu(x)
            action_scores = self.affine2(x)
            return F.softmax(action_scores, dim=1)

    class ActorCritic(nn.Module):
        def __init__(self):
            super().__init__()
            self.affine1 = nn.Linear(4, 32)
            self.action_head = nn.Linear(32, 2)
            self.value_head = nn.Linear(32, 1)

        def forward(self, x):
            x = F.relu(self.affine1(x))
            return self.action_head(x), self.value_head(x)

    class GaussianActor(nn.Module):
        def __init__(self):
            super().__init__()
            self.mu = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 2))
            self.log_std = nn.Parameter(lib.full((2,), -0.5))
            self.critic = nn.Sequential(nn.Linear(4, 32), nn.Tanh(), nn.Linear(32, 1))

    class Agents(nn.Module):
        def __init__(self):
            super().__init__()
            self.reinforce = Policy()
            self.actor_critic = ActorCritic()
            self.ppo = GaussianActor()

    return _no_dropout(lib, Agents())


def _policy_gradients(np, torch, ddpc):
    gamma, eps = 0.99, np.finfo(np.float32).eps.item()

    def losses(lib, agents, states, actions, rewards, cont_actions, old_log_prob, advantages, returns_ppo):
        Categorical, Normal = lib.distributions.Categorical, lib.distributions.Normal
        R, returns = 0, collections.deque()
        for r in rewards.tolist()[::-1]:
            R = r + gamma * R
            returns.appendleft(R)
        returns = lib.tensor(returns)
        returns = (returns - returns.mean()) / (returns.std() + eps)
        policy_loss, saved_log_probs = [], []
        for state, action in zip(states, actions):
            probs = agents.reinforce(state.unsqueeze(0))
            m = Categorical(probs)
            assert m.sample().shape == (1,)
            saved_log_probs.append(m.log_prob(action.unsqueeze(0)))
        for log_prob, R in zip(saved_log_probs, returns):
            policy_loss.append(-log_prob * R)
        reinforce_loss = lib.cat(policy_loss).sum()

        logits, values = agents.actor_critic(states)
        dist = Categorical(logits=logits)
        log_probs, entropy = dist.log_prob(actions), dist.entropy()
        policy_losses, value_losses = [], []
        for log_prob, value, R in zip(log_probs, values, returns):
            advantage = R - value.item()
            policy_losses.append(-log_prob * advantage)
            value_losses.append(lib.nn.functional.smooth_l1_loss(value, lib.tensor([R])))
        ac_loss = lib.stack(policy_losses).sum() + lib.stack(value_losses).sum() - 0.01 * entropy.mean()

        clip = 0.2
        mu = agents.ppo.mu(states)
        dist = Normal(mu, agents.ppo.log_std.exp())
        log_prob = dist.log_prob(cont_actions).sum(-1)
        ratio = lib.exp(log_prob - old_log_prob)
        surr1 = ratio * advantages
        surr2 = lib.clamp(ratio, 1.0 - clip, 1.0 + clip) * advantages
        value = agents.ppo.critic(states).squeeze(-1)
        ppo_loss = -lib.min(surr1, surr2).mean() + 0.5 * (returns_ppo - value).pow(2).mean() \
            - 0.01 * dist.entropy().sum(-1).mean()
        return (lib.cat(saved_log_probs), log_probs, entropy, ratio), reinforce_loss + ac_loss + ppo_loss

    def adam(lib, agents):
        return lib.optim.Adam(agents.parameters(), lr=3e-2)

    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((6, 4)).astype(np.float32), rng.integers(0, 2, 6), rng.random(6),
                rng.standard_normal((6, 2)).astype(np.float32), rng.normal(-1.5, 1.0, 6).astype(np.float32),
                rng.standard_normal(6).astype(np.float32), rng.standard_normal(6).astype(np.float32))
               for _ in range(3)]
    _train_alike(np, torch, ddpc, _policies, batches, losses, adam)


# pytorch/examples time_sequence_prediction: two LSTMCells unrolled over a
# sine wave (split along time, cat of the outputs, a generated future),
# trained with LBFGS through a closure.
def _sequence(lib):
    nn = lib.nn

    class Sequence(nn.Module):
        def __init__(self):
            super().__init__()
            self.lstm1 = nn.LSTMCell(1, 12)
            self.lstm2 = nn.LSTMCell(12, 12)
            self.linear = nn.Linear(12, 1)

        def forward(self, input, future=0):
            outputs = []
            h_t = lib.zeros(input.size(0), 12, dtype=input.dtype)
            c_t = lib.zeros(input.size(0), 12, dtype=input.dtype)
            h_t2 = lib.zeros(input.size(0), 12, dtype=input.dtype)
            c_t2 = lib.zeros(input.size(0), 12, dtype=input.dtype)
            for input_t in input.split(1, dim=1):
                h_t, c_t = self.lstm1(input_t, (h_t, c_t))
                h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
                output = self.linear(h_t2)
                outputs += [output]
            for i in range(future):
                h_t, c_t = self.lstm1(output, (h_t, c_t))
                h_t2, c_t2 = self.lstm2(h_t, (h_t2, c_t2))
                output = self.linear(h_t2)
                outputs += [output]
            return lib.cat(outputs, dim=1)

    return Sequence()


def _lbfgs_pair(np, torch, ddpc, build, make_params, closure_of, steps, tol):
    """Runs optimizer.step(closure) `steps` times for PyTorch in float32,
    ddpc and PyTorch in float64; compares each step's returned loss and the
    parameters (make_params(lib, model) -> the optimized tensors)."""
    runs = _runs(np, torch, ddpc, build)
    stepping = []
    for lib, m, context, dtype in runs:
        with context():
            params = make_params(lib, m, dtype)
            optimizer, closure = closure_of(lib, m, params, dtype)
        stepping.append((params, optimizer, closure, context))
    for step in range(steps):
        losses = []
        for params, optimizer, closure, context in stepping:
            with context():
                losses.append(optimizer.step(closure))
        (want, got, exact) = losses
        _close(np, got, want, f"step {step} loss", tol, exact)
        for i, (w, g, e) in enumerate(zip(*(s[0] for s in stepping))):
            _close(np, g.grad, w.grad, f"step {step} grad of optimized tensor {i}", tol, e.grad)
            _close(np, g, w, f"after step {step}: optimized tensor {i}", tol, e)
    return runs


def _time_sequence_lbfgs(np, torch, ddpc):
    T, L, N = 20, 40, 6
    rng = np.random.default_rng(2)
    x = np.empty((N, L), np.int64)
    x[:] = np.arange(L) + rng.integers(-4 * T, 4 * T, N).reshape(N, 1)
    data = np.sin(x / 1.0 / T).astype(np.float32)

    def params(lib, model, dtype):
        return list(model.parameters())

    def closure_of(lib, seq, params, dtype):
        input, target = lib.tensor(data[1:, :-1].astype(dtype)), lib.tensor(data[1:, 1:].astype(dtype))
        criterion = lib.nn.MSELoss()
        optimizer = lib.optim.LBFGS(params, lr=0.8, max_iter=4)

        def closure():
            optimizer.zero_grad()
            out = seq(input)
            loss = criterion(out, target)
            loss.backward()
            return loss

        return optimizer, closure

    runs = _lbfgs_pair(np, torch, ddpc, _sequence, params, closure_of, steps=2, tol=2e-3)
    preds = []
    for lib, seq, context, dtype in runs:
        with context(), lib.no_grad():
            preds.append(seq(lib.tensor(data[:1, :-1].astype(dtype)), future=10))
    _close(np, preds[1], preds[0], "prediction with 10 future steps", 2e-3, preds[2])


# The PyTorch tutorial "Neural Transfer Using PyTorch": content and style
# losses (gram matrices) inserted into a copy of a VGG-like feature net
# rebuilt child by child, the net frozen with requires_grad_(False), and
# LBFGS on the input image itself, clamped under no_grad in the closure.
def _vgg_features(lib):
    nn = lib.nn
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=True), nn.Conv2d(8, 8, 3, padding=1),
                         nn.ReLU(inplace=True), nn.MaxPool2d(2, 2), nn.Conv2d(8, 16, 3, padding=1),
                         nn.ReLU(inplace=True), nn.Conv2d(16, 16, 3, padding=1), nn.ReLU(inplace=True))


def _style_model(lib, cnn, style_img, content_img):
    nn = lib.nn
    F = nn.functional

    class ContentLoss(nn.Module):
        def __init__(self, target):
            super().__init__()
            self.target = target.detach()

        def forward(self, input):
            self.loss = F.mse_loss(input, self.target)
            return input

    def gram_matrix(input):
        a, b, c, d = input.size()
        features = input.view(a * b, c * d)
        G = lib.mm(features, features.t())
        return G.div(a * b * c * d)

    class StyleLoss(nn.Module):
        def __init__(self, target_feature):
            super().__init__()
            self.target = gram_matrix(target_feature).detach()

        def forward(self, input):
            G = gram_matrix(input)
            self.loss = F.mse_loss(G, self.target)
            return input

    class Normalization(nn.Module):
        def __init__(self, mean, std):
            super().__init__()
            self.mean = lib.tensor(mean).view(-1, 1, 1)
            self.std = lib.tensor(std).view(-1, 1, 1)

        def forward(self, img):
            return (img - self.mean) / self.std

    content_layers, style_layers = ["conv_3"], ["conv_1", "conv_2", "conv_3", "conv_4"]
    normalization = Normalization([0.485, 0.456, 0.406], [0.229, 0.224, 0.225])
    content_losses, style_losses = [], []
    model = nn.Sequential(normalization)
    i = 0
    for layer in cnn.children():
        if isinstance(layer, nn.Conv2d):
            i += 1
            name = "conv_{}".format(i)
        elif isinstance(layer, nn.ReLU):
            name = "relu_{}".format(i)
            layer = nn.ReLU(inplace=False)
        elif isinstance(layer, nn.MaxPool2d):
            name = "pool_{}".format(i)
        else:
            raise RuntimeError("Unrecognized layer: {}".format(layer.__class__.__name__))
        model.add_module(name, layer)
        if name in content_layers:
            target = model(content_img).detach()
            content_loss = ContentLoss(target)
            model.add_module("content_loss_{}".format(i), content_loss)
            content_losses.append(content_loss)
        if name in style_layers:
            target_feature = model(style_img).detach()
            style_loss = StyleLoss(target_feature)
            model.add_module("style_loss_{}".format(i), style_loss)
            style_losses.append(style_loss)
    for i in range(len(model) - 1, -1, -1):
        if isinstance(model[i], ContentLoss) or isinstance(model[i], StyleLoss):
            break
    model = model[:(i + 1)]
    return model, style_losses, content_losses


def _style_transfer(np, torch, ddpc):
    rng = np.random.default_rng(0)
    content, style = rng.random((2, 1, 3, 8, 8)).astype(np.float32)

    def image(lib, model, dtype):
        input_img = lib.tensor(content.astype(dtype)).clone()
        input_img.requires_grad_(True)
        return [input_img]

    def closure_of(lib, cnn, params, dtype):
        input_img, = params
        model, style_losses, content_losses = _style_model(lib, cnn, lib.tensor(style.astype(dtype)),
                                                           lib.tensor(content.astype(dtype)))
        model.eval()
        model.requires_grad_(False)
        assert not any(p.requires_grad for p in model.parameters())
        optimizer = lib.optim.LBFGS([input_img], max_iter=5)
        style_weight, content_weight = 1000, 1

        def closure():
            with lib.no_grad():
                input_img.clamp_(0, 1)
            optimizer.zero_grad()
            model(input_img)
            style_score = 0
            content_score = 0
            for sl in style_losses:
                style_score += sl.loss
            for cl in content_losses:
                content_score += cl.loss
            style_score *= style_weight
            content_score *= content_weight
            loss = style_score + content_score
            loss.backward()
            return style_score + content_score

        return optimizer, closure

    runs = _lbfgs_pair(np, torch, ddpc, _vgg_features, image, closure_of, steps=2, tol=1e-3)
    for lib, cnn, _, _ in runs:
        assert all(p.grad is None for p in cnn.parameters()), "the frozen net got gradients"


# The PyTorch tutorial "Spatial Transformer Networks": a localization net
# regresses an affine theta (its last layer starting at the identity), the
# input is resampled with affine_grid and grid_sample, then classified.
def _stn(lib):
    nn = lib.nn
    F = nn.functional

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 10, kernel_size=5)
            self.conv2 = nn.Conv2d(10, 20, kernel_size=5)
            self.conv2_drop = nn.Dropout2d()
            self.fc1 = nn.Linear(320, 50)
            self.fc2 = nn.Linear(50, 10)
            self.localization = nn.Sequential(nn.Conv2d(1, 8, kernel_size=7), nn.MaxPool2d(2, stride=2),
                                              nn.ReLU(True), nn.Conv2d(8, 10, kernel_size=5),
                                              nn.MaxPool2d(2, stride=2), nn.ReLU(True))
            self.fc_loc = nn.Sequential(nn.Linear(10 * 3 * 3, 32), nn.ReLU(True), nn.Linear(32, 3 * 2))
            self.fc_loc[2].weight.data.zero_()
            self.fc_loc[2].bias.data.copy_(lib.tensor([1, 0, 0, 0, 1, 0], dtype=lib.float))

        def stn(self, x):
            xs = self.localization(x)
            xs = xs.view(-1, 10 * 3 * 3)
            theta = self.fc_loc(xs)
            theta = theta.view(-1, 2, 3)
            grid = F.affine_grid(theta, x.size(), align_corners=False)
            return F.grid_sample(x, grid, align_corners=False)

        def forward(self, x):
            x = self.stn(x)
            x = F.relu(F.max_pool2d(self.conv1(x), 2))
            x = F.relu(F.max_pool2d(self.conv2_drop(self.conv2(x)), 2))
            x = x.view(-1, 320)
            x = F.relu(self.fc1(x))
            x = F.dropout(x, training=self.training)
            x = self.fc2(x)
            return F.log_softmax(x, dim=1)

    net = Net().eval()
    # At the identity theta every sampling point falls on a pixel centre,
    # where grid_sample's gradient with respect to the grid jumps: rounding
    # alone would pick the side. A theta a little off the identity keeps
    # the comparison about the arithmetic.
    nn.init.normal_(net.fc_loc[2].weight, std=0.01)
    net.fc_loc[2].bias.data.add_(lib.tensor([-0.1, 0.03, 0.02, -0.04, 0.05, -0.01]))
    return net


def _spatial_transformer(np, torch, ddpc):
    def train_step(lib, model, data, target):
        output = model(data)
        return (output, model.stn(data)), lib.nn.functional.nll_loss(output, target)

    def sgd(lib, model):
        return lib.optim.SGD(model.parameters(), lr=0.05)

    batches = [(_images(np, (3, 1, 28, 28), s), _labels(np, 3, 10, s)) for s in range(3)]
    _train_alike(np, torch, ddpc, _stn, batches, train_step, sgd)


# The PyTorch tutorial "Adversarial Example Generation": FGSM from the sign
# of the input's gradient, on the denormalised image, clamped to [0, 1],
# normalised again and classified.
def _lenet(lib):
    nn = lib.nn
    F = nn.functional

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 8, 3, 1)
            self.conv2 = nn.Conv2d(8, 16, 3, 1)
            self.dropout1 = nn.Dropout(0.25)
            self.dropout2 = nn.Dropout(0.5)
            self.fc1 = nn.Linear(16 * 5 * 5, 32)
            self.fc2 = nn.Linear(32, 10)

        def forward(self, x):
            x = F.relu(self.conv1(x))
            x = F.relu(self.conv2(x))
            x = F.max_pool2d(x, 2)
            x = self.dropout1(x)
            x = lib.flatten(x, 1)
            x = F.relu(self.fc1(x))
            x = self.dropout2(x)
            return F.log_softmax(self.fc2(x), dim=1)

    return Net().eval()


def _fgsm(np, torch, ddpc):
    def fgsm_attack(lib, image, epsilon, data_grad):
        sign_data_grad = data_grad.sign()
        perturbed_image = image + epsilon * sign_data_grad
        return lib.clamp(perturbed_image, 0, 1)

    def denorm(lib, batch, mean=[0.1307], std=[0.3081]):
        if isinstance(mean, list):
            mean = lib.tensor(mean).to("cpu")
        if isinstance(std, list):
            std = lib.tensor(std).to("cpu")
        return batch * std.view(1, -1, 1, 1) + mean.view(1, -1, 1, 1)

    def attack(lib, model, data, target):
        F = lib.nn.functional
        data.requires_grad = True
        output = model(data)
        init_pred = output.max(1, keepdim=True)[1]
        loss = F.nll_loss(output, target)
        model.zero_grad()
        loss.backward()
        data_grad = data.grad.data
        data_denorm = denorm(lib, data)
        perturbed_data = fgsm_attack(lib, data_denorm, 0.1, data_grad)
        perturbed_data_normalized = (perturbed_data - 0.1307) / 0.3081
        output = model(perturbed_data_normalized)
        final_pred = output.max(1, keepdim=True)[1]
        # Adversarial training: the step then descends on the perturbed loss.
        return (data_grad.clone(), perturbed_data, output, init_pred, final_pred), F.nll_loss(output, target)

    def sgd(lib, model):
        return lib.optim.SGD(model.parameters(), lr=0.05)

    rng = np.random.default_rng(0)
    images = ((rng.random((4, 1, 14, 14)) - 0.1307) / 0.3081).astype(np.float32)
    _train_alike(np, torch, ddpc, _lenet, [(images, _labels(np, 4, 10))] * 3, attack, sgd)


# pytorch/examples super_resolution: the sub-pixel CNN with orthogonal
# init (gain for relu), PixelShuffle, MSELoss and its PSNR.
def _sub_pixel(lib):
    nn = lib.nn
    init = nn.init

    class Net(nn.Module):
        def __init__(self, upscale_factor):
            super().__init__()
            self.relu = nn.ReLU()
            self.conv1 = nn.Conv2d(1, 16, (5, 5), (1, 1), (2, 2))
            self.conv2 = nn.Conv2d(16, 16, (3, 3), (1, 1), (1, 1))
            self.conv3 = nn.Conv2d(16, 8, (3, 3), (1, 1), (1, 1))
            self.conv4 = nn.Conv2d(8, upscale_factor ** 2, (3, 3), (1, 1), (1, 1))
            self.pixel_shuffle = nn.PixelShuffle(upscale_factor)
            self._initialize_weights()

        def forward(self, x):
            x = self.relu(self.conv1(x))
            x = self.relu(self.conv2(x))
            x = self.relu(self.conv3(x))
            return self.pixel_shuffle(self.conv4(x))

        def _initialize_weights(self):
            init.orthogonal_(self.conv1.weight, init.calculate_gain("relu"))
            init.orthogonal_(self.conv2.weight, init.calculate_gain("relu"))
            init.orthogonal_(self.conv3.weight, init.calculate_gain("relu"))
            init.orthogonal_(self.conv4.weight)

    return Net(upscale_factor=3)


def _super_resolution(np, torch, ddpc):
    def train_step(lib, model, input, target):
        criterion = lib.nn.MSELoss()
        prediction = model(input)
        mse = criterion(prediction, target)
        psnr = 10 * math.log10(1 / mse.item())
        return (prediction, lib.tensor(psnr)), mse

    def adam(lib, model):
        return lib.optim.Adam(model.parameters(), lr=0.01)

    rng = np.random.default_rng(0)
    batches = [(rng.random((2, 1, 6, 6)).astype(np.float32), rng.random((2, 1, 18, 18)).astype(np.float32))
               for _ in range(3)]
    _train_alike(np, torch, ddpc, _sub_pixel, batches, train_step, adam)


# MAML on sine regression (as learn2learn's and the functorch tutorial's):
# inner SGD steps on a dict of fast weights through func.functional_call
# and autograd.grad(create_graph=True), the meta-loss over the query sets
# backpropagated through the inner steps into the initial weights.
def _sine_mlp(lib):
    nn = lib.nn
    return nn.Sequential(nn.Linear(1, 24), nn.ReLU(), nn.Linear(24, 24), nn.Tanh(), nn.Linear(24, 1))


def _maml(np, torch, ddpc):
    inner_lr, inner_steps = 0.1, 2

    def meta_loss(lib, model, x_support, y_support, x_query, y_query):
        F = lib.nn.functional
        params = dict(model.named_parameters())
        total, adapted = 0.0, []
        for task in range(x_support.shape[0]):
            fast = params
            for _ in range(inner_steps):
                loss = F.mse_loss(lib.func.functional_call(model, fast, (x_support[task],)), y_support[task])
                grads = lib.autograd.grad(loss, fast.values(), create_graph=True)
                fast = {name: p - inner_lr * g for (name, p), g in zip(fast.items(), grads)}
            prediction = lib.func.functional_call(model, fast, (x_query[task],))
            total = total + F.mse_loss(prediction, y_query[task])
            adapted.append(prediction)
        return lib.stack(adapted), total / x_support.shape[0]

    def adam(lib, model):
        return lib.optim.Adam(model.parameters(), lr=1e-3)

    rng = np.random.default_rng(0)
    batches = []
    for _ in range(3):
        amp, phase = rng.uniform(0.1, 5.0, (3, 1, 1)), rng.uniform(0, np.pi, (3, 1, 1))
        xs, xq = rng.uniform(-5, 5, (3, 5, 1)), rng.uniform(-5, 5, (3, 5, 1))
        batches.append(tuple(a.astype(np.float32) for a in (xs, amp * np.sin(xs - phase), xq,
                                                            amp * np.sin(xq - phase))))
    _train_alike(np, torch, ddpc, _sine_mlp, batches, meta_loss, adam)


# Custom autograd Functions as ported code writes them: the LinearFunction
# of PyTorch's "Extending PyTorch" notes (needs_input_grad), DANN's gradient
# reversal layer, and a once_differentiable op imported from
# torch.autograd.function as detectron2's and mmcv's custom ops do.
def _custom_functions(lib):
    nn = lib.nn
    from importlib import import_module
    once_differentiable = import_module(lib.__name__ + ".autograd.function").once_differentiable
    Function = lib.autograd.Function

    class LinearFunction(Function):
        @staticmethod
        def forward(ctx, input, weight, bias=None):
            ctx.save_for_backward(input, weight, bias)
            output = input.mm(weight.t())
            if bias is not None:
                output += bias.unsqueeze(0).expand_as(output)
            return output

        @staticmethod
        def backward(ctx, grad_output):
            input, weight, bias = ctx.saved_tensors
            grad_input = grad_weight = grad_bias = None
            if ctx.needs_input_grad[0]:
                grad_input = grad_output.mm(weight)
            if ctx.needs_input_grad[1]:
                grad_weight = grad_output.t().mm(input)
            if bias is not None and ctx.needs_input_grad[2]:
                grad_bias = grad_output.sum(0)
            return grad_input, grad_weight, grad_bias

    class GradReverse(Function):
        @staticmethod
        def forward(ctx, x, alpha):
            ctx.alpha = alpha
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad_output):
            return grad_output.neg() * ctx.alpha, None

    class SwishFunction(Function):
        @staticmethod
        def forward(ctx, x):
            result = x * lib.sigmoid(x)
            ctx.save_for_backward(x)
            return result

        @staticmethod
        @once_differentiable
        def backward(ctx, grad_output):
            x, = ctx.saved_tensors
            s = lib.sigmoid(x)
            return grad_output * (s * (1 + x * (1 - s)))

    class Linear(nn.Module):
        def __init__(self, input_features, output_features):
            super().__init__()
            self.weight = nn.Parameter(lib.empty(output_features, input_features))
            self.bias = nn.Parameter(lib.empty(output_features))
            self.weight.data.uniform_(-0.1, 0.1)
            self.bias.data.uniform_(-0.1, 0.1)

        def forward(self, input):
            return LinearFunction.apply(input, self.weight, self.bias)

    class DANN(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = Linear(6, 16)
            self.label = nn.Linear(16, 3)
            self.domain = nn.Sequential(nn.Linear(16, 8), nn.ReLU(), nn.Linear(8, 2))

        def forward(self, x, alpha=0.5):
            h = SwishFunction.apply(self.features(x))
            return self.label(h), self.domain(GradReverse.apply(h, alpha))

    return DANN()


def _custom_autograd_functions(np, torch, ddpc):
    def train_step(lib, model, x, y, domain):
        F = lib.nn.functional
        class_logits, domain_logits = model(x)
        return (class_logits, domain_logits), F.cross_entropy(class_logits, y) + F.cross_entropy(domain_logits, domain)

    def sgd(lib, model):
        return lib.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((8, 6)).astype(np.float32), rng.integers(0, 3, 8), rng.integers(0, 2, 8))
               for _ in range(3)]
    _train_alike(np, torch, ddpc, _custom_functions, batches, train_step, sgd)
    x = ddpc.randn(4, 6, requires_grad=True)
    y = _custom_functions(ddpc).features(x).sum()
    g, = ddpc.autograd.grad(y, x, create_graph=True)
    assert g.shape == (4, 6)


# A spectrally normalised GAN discriminator (SNGAN, as in
# christiancosgrove/pytorch-spectral-normalization-gan): nn.utils.spectral_norm
# on every conv and linear layer; its weight_orig, weight_u and weight_v live
# in the state dict, and each training forward does one power iteration.
def _sngan(lib):
    nn = lib.nn
    SN = nn.utils.spectral_norm
    leak = 0.1

    class Discriminator(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv1 = SN(nn.Conv2d(3, 8, 3, stride=1, padding=(1, 1)))
            self.conv2 = SN(nn.Conv2d(8, 8, 4, stride=2, padding=(1, 1)))
            self.conv3 = SN(nn.Conv2d(8, 16, 3, stride=1, padding=(1, 1)))
            self.fc = SN(nn.Linear(4 * 4 * 16, 1))

        def forward(self, x):
            m = x
            m = nn.LeakyReLU(leak)(self.conv1(m))
            m = nn.LeakyReLU(leak)(self.conv2(m))
            m = nn.LeakyReLU(leak)(self.conv3(m))
            return self.fc(m.view(-1, 4 * 4 * 16))

    return Discriminator()


def _spectral_norm_gan(np, torch, ddpc):
    def hinge(lib, disc, real, fake):
        F = lib.nn.functional
        d_real, d_fake = disc(real), disc(fake)
        return (d_real, d_fake), F.relu(1.0 - d_real).mean() + F.relu(1.0 + d_fake).mean()

    def adam(lib, disc):
        return lib.optim.Adam(filter(lambda p: p.requires_grad, disc.parameters()), lr=2e-4, betas=(0.0, 0.9))

    batches = [(_images(np, (4, 3, 8, 8), s), _images(np, (4, 3, 8, 8), s + 10)) for s in range(3)]
    model, ref = _train_alike(np, torch, ddpc, _sngan, batches, hinge, adam)
    model.eval()
    ref.eval()
    x = _images(np, (2, 3, 8, 8), 7)
    _close(np, model(ddpc.tensor(x)), ref(torch.tensor(x)), "eval output (no power iteration)")
    _same_state(np, model, ref, "after eval", 1e-4)


# VQ-VAE's vector quantiser with EMA codebook updates (as in zalandoresearch's
# and the DeepMind Sonnet port): distances to the codebook, argmin,
# one-hot through scatter_, the straight-through estimator, the commitment
# loss, perplexity, and the EMA buffers updated in place under no_grad.
def _vqvae(lib):
    nn = lib.nn
    F = nn.functional

    class VectorQuantizerEMA(nn.Module):
        def __init__(self, num_embeddings, embedding_dim, commitment_cost, decay, epsilon=1e-5):
            super().__init__()
            self._embedding_dim = embedding_dim
            self._num_embeddings = num_embeddings
            self._embedding = nn.Embedding(self._num_embeddings, self._embedding_dim)
            self._embedding.weight.data.normal_()
            self._commitment_cost = commitment_cost
            self.register_buffer("_ema_cluster_size", lib.zeros(num_embeddings))
            self._ema_w = nn.Parameter(lib.Tensor(num_embeddings, self._embedding_dim))
            self._ema_w.data.normal_()
            self._decay = decay
            self._epsilon = epsilon

        def forward(self, inputs):
            inputs = inputs.permute(0, 2, 3, 1).contiguous()
            input_shape = inputs.shape
            flat_input = inputs.view(-1, self._embedding_dim)
            distances = (lib.sum(flat_input ** 2, dim=1, keepdim=True) + lib.sum(self._embedding.weight ** 2, dim=1)
                         - 2 * lib.matmul(flat_input, self._embedding.weight.t()))
            encoding_indices = lib.argmin(distances, dim=1).unsqueeze(1)
            encodings = lib.zeros(encoding_indices.shape[0], self._num_embeddings, device=inputs.device)
            encodings.scatter_(1, encoding_indices, 1)
            quantized = lib.matmul(encodings, self._embedding.weight).view(input_shape)
            if self.training:
                self._ema_cluster_size = self._ema_cluster_size * self._decay + \
                    (1 - self._decay) * lib.sum(encodings, 0)
                n = lib.sum(self._ema_cluster_size.data)
                self._ema_cluster_size = ((self._ema_cluster_size + self._epsilon)
                                          / (n + self._num_embeddings * self._epsilon) * n)
                dw = lib.matmul(encodings.t(), flat_input)
                self._ema_w = nn.Parameter(self._ema_w * self._decay + (1 - self._decay) * dw)
                self._embedding.weight = nn.Parameter(self._ema_w / self._ema_cluster_size.unsqueeze(1))
            e_latent_loss = F.mse_loss(quantized.detach(), inputs)
            loss = self._commitment_cost * e_latent_loss
            quantized = inputs + (quantized - inputs).detach()
            avg_probs = lib.mean(encodings, dim=0)
            perplexity = lib.exp(-lib.sum(avg_probs * lib.log(avg_probs + 1e-10)))
            return loss, quantized.permute(0, 3, 1, 2).contiguous(), perplexity, encoding_indices

    class VQVAE(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Sequential(nn.Conv2d(1, 8, 4, 2, 1), nn.ReLU(), nn.Conv2d(8, 4, 3, 1, 1))
            self.vq = VectorQuantizerEMA(6, 4, 0.25, 0.9)
            self.decoder = nn.Sequential(nn.ConvTranspose2d(4, 8, 4, 2, 1), nn.ReLU(), nn.Conv2d(8, 1, 3, 1, 1))

        def forward(self, x):
            z = self.encoder(x)
            loss, quantized, perplexity, indices = self.vq(z)
            return loss, self.decoder(quantized), perplexity, indices

    return VQVAE()


def _vq_vae(np, torch, ddpc):
    def train_step(lib, model, x):
        vq_loss, recon, perplexity, indices = model(x)
        recon_error = lib.nn.functional.mse_loss(recon, x)
        return (recon, perplexity, indices), recon_error + vq_loss

    def adam(lib, model):
        # the EMA module swaps its Parameters each forward, so the optimizer
        # takes the trained ones only (as the original filters them).
        return lib.optim.Adam(list(model.encoder.parameters()) + list(model.decoder.parameters()), lr=1e-3)

    batches = [(np.random.default_rng(s).random((2, 1, 8, 8)).astype(np.float32),) for s in range(3)]
    _train_alike(np, torch, ddpc, _vqvae, batches, train_step, adam)


# PointNet's classifier (fxia22/pointnet.pytorch): the input and feature
# transform nets (Conv1d over points, max over points, an identity added
# through repeat), bmm with the predicted transforms and the feature
# transform regulariser's Frobenius norm over dims (1, 2).
def _pointnet(lib):
    nn = lib.nn
    F = nn.functional

    class STNkd(nn.Module):
        def __init__(self, k=3):
            super().__init__()
            self.conv1 = nn.Conv1d(k, 16, 1)
            self.conv2 = nn.Conv1d(16, 32, 1)
            self.fc1 = nn.Linear(32, 16)
            self.fc2 = nn.Linear(16, k * k)
            self.relu = nn.ReLU()
            self.bn1 = nn.BatchNorm1d(16)
            self.bn2 = nn.BatchNorm1d(32)
            self.bn3 = nn.BatchNorm1d(16)
            self.k = k

        def forward(self, x):
            batchsize = x.size()[0]
            x = F.relu(self.bn1(self.conv1(x)))
            x = F.relu(self.bn2(self.conv2(x)))
            x = lib.max(x, 2, keepdim=True)[0]
            x = x.view(-1, 32)
            x = F.relu(self.bn3(self.fc1(x)))
            x = self.fc2(x)
            iden = lib.autograd.Variable(lib.from_numpy(numpy.eye(self.k).flatten().astype(numpy.float32))).view(
                1, self.k * self.k).repeat(batchsize, 1)
            x = x + iden
            return x.view(-1, self.k, self.k)

    class PointNetfeat(nn.Module):
        def __init__(self):
            super().__init__()
            self.stn = STNkd(3)
            self.conv1 = nn.Conv1d(3, 16, 1)
            self.conv2 = nn.Conv1d(16, 32, 1)
            self.bn1 = nn.BatchNorm1d(16)
            self.bn2 = nn.BatchNorm1d(32)
            self.fstn = STNkd(k=16)

        def forward(self, x):
            trans = self.stn(x)
            x = x.transpose(2, 1)
            x = lib.bmm(x, trans)
            x = x.transpose(2, 1)
            x = F.relu(self.bn1(self.conv1(x)))
            trans_feat = self.fstn(x)
            x = x.transpose(2, 1)
            x = lib.bmm(x, trans_feat)
            x = x.transpose(2, 1)
            x = self.bn2(self.conv2(x))
            x = lib.max(x, 2, keepdim=True)[0]
            return x.view(-1, 32), trans, trans_feat

    class PointNetCls(nn.Module):
        def __init__(self, k=4):
            super().__init__()
            self.feat = PointNetfeat()
            self.fc1 = nn.Linear(32, 16)
            self.fc2 = nn.Linear(16, k)
            self.dropout = nn.Dropout(p=0.3)
            self.bn1 = nn.BatchNorm1d(16)
            self.relu = nn.ReLU()

        def forward(self, x):
            x, trans, trans_feat = self.feat(x)
            x = F.relu(self.bn1(self.dropout(self.fc1(x))))
            return F.log_softmax(self.fc2(x), dim=1), trans, trans_feat

    return _no_dropout(lib, PointNetCls())


def _point_net(np, torch, ddpc):
    def feature_transform_regularizer(lib, trans):
        d = trans.size()[1]
        identity = lib.eye(d)[None, :, :]
        return lib.mean(lib.norm(lib.bmm(trans, trans.transpose(2, 1)) - identity, dim=(1, 2)))

    def train_step(lib, model, points, target):
        pred, trans, trans_feat = model(points)
        loss = lib.nn.functional.nll_loss(pred, target) + feature_transform_regularizer(lib, trans_feat) * 0.001
        return (pred, trans, trans_feat), loss

    def adam(lib, model):
        return lib.optim.Adam(model.parameters(), lr=0.001, betas=(0.9, 0.999))

    batches = [(_images(np, (4, 3, 20), s), _labels(np, 4, 4, s)) for s in range(3)]
    _train_alike(np, torch, ddpc, _pointnet, batches, train_step, adam)


# The PyTorch tutorial "Advanced: Making Dynamic Decisions and the Bi-LSTM
# CRF": the forward algorithm with log_sum_exp over broadcast scores, the
# gold path score, Viterbi decoding with backpointers, item writes into
# init_alphas and the transition matrix's constraints.
START_TAG, STOP_TAG = "<START>", "<STOP>"


def _bilstm_crf(lib):
    nn = lib.nn
    tag_to_ix = {"B": 0, "I": 1, "O": 2, START_TAG: 3, STOP_TAG: 4}

    def argmax(vec):
        _, idx = lib.max(vec, 1)
        return idx.item()

    def log_sum_exp(vec):
        max_score = vec[0, argmax(vec)]
        max_score_broadcast = max_score.view(1, -1).expand(1, vec.size()[1])
        return max_score + lib.log(lib.sum(lib.exp(vec - max_score_broadcast)))

    class BiLSTM_CRF(nn.Module):
        def __init__(self, vocab_size, tag_to_ix, embedding_dim, hidden_dim):
            super().__init__()
            self.embedding_dim = embedding_dim
            self.hidden_dim = hidden_dim
            self.vocab_size = vocab_size
            self.tag_to_ix = tag_to_ix
            self.tagset_size = len(tag_to_ix)
            self.word_embeds = nn.Embedding(vocab_size, embedding_dim)
            self.lstm = nn.LSTM(embedding_dim, hidden_dim // 2, num_layers=1, bidirectional=True)
            self.hidden2tag = nn.Linear(hidden_dim, self.tagset_size)
            self.transitions = nn.Parameter(lib.randn(self.tagset_size, self.tagset_size))
            self.transitions.data[tag_to_ix[START_TAG], :] = -10000
            self.transitions.data[:, tag_to_ix[STOP_TAG]] = -10000
            self.hidden = self.init_hidden()

        def init_hidden(self):
            return (lib.zeros(2, 1, self.hidden_dim // 2), lib.zeros(2, 1, self.hidden_dim // 2))

        def _forward_alg(self, feats):
            init_alphas = lib.full((1, self.tagset_size), -10000.)
            init_alphas[0][self.tag_to_ix[START_TAG]] = 0.
            forward_var = init_alphas
            for feat in feats:
                alphas_t = []
                for next_tag in range(self.tagset_size):
                    emit_score = feat[next_tag].view(1, -1).expand(1, self.tagset_size)
                    trans_score = self.transitions[next_tag].view(1, -1)
                    next_tag_var = forward_var + trans_score + emit_score
                    alphas_t.append(log_sum_exp(next_tag_var).view(1))
                forward_var = lib.cat(alphas_t).view(1, -1)
            terminal_var = forward_var + self.transitions[self.tag_to_ix[STOP_TAG]]
            return log_sum_exp(terminal_var)

        def _get_lstm_features(self, sentence):
            self.hidden = self.init_hidden()
            embeds = self.word_embeds(sentence).view(len(sentence), 1, -1)
            lstm_out, self.hidden = self.lstm(embeds, self.hidden)
            lstm_out = lstm_out.view(len(sentence), self.hidden_dim)
            return self.hidden2tag(lstm_out)

        def _score_sentence(self, feats, tags):
            score = lib.zeros(1)
            tags = lib.cat([lib.tensor([self.tag_to_ix[START_TAG]], dtype=lib.long), tags])
            for i, feat in enumerate(feats):
                score = score + self.transitions[tags[i + 1], tags[i]] + feat[tags[i + 1]]
            return score + self.transitions[self.tag_to_ix[STOP_TAG], tags[-1]]

        def _viterbi_decode(self, feats):
            backpointers = []
            init_vvars = lib.full((1, self.tagset_size), -10000.)
            init_vvars[0][self.tag_to_ix[START_TAG]] = 0
            forward_var = init_vvars
            for feat in feats:
                bptrs_t = []
                viterbivars_t = []
                for next_tag in range(self.tagset_size):
                    next_tag_var = forward_var + self.transitions[next_tag]
                    best_tag_id = argmax(next_tag_var)
                    bptrs_t.append(best_tag_id)
                    viterbivars_t.append(next_tag_var[0][best_tag_id].view(1))
                forward_var = (lib.cat(viterbivars_t) + feat).view(1, -1)
                backpointers.append(bptrs_t)
            terminal_var = forward_var + self.transitions[self.tag_to_ix[STOP_TAG]]
            best_tag_id = argmax(terminal_var)
            path_score = terminal_var[0][best_tag_id]
            best_path = [best_tag_id]
            for bptrs_t in reversed(backpointers):
                best_tag_id = bptrs_t[best_tag_id]
                best_path.append(best_tag_id)
            start = best_path.pop()
            assert start == self.tag_to_ix[START_TAG]
            best_path.reverse()
            return path_score, best_path

        def neg_log_likelihood(self, sentence, tags):
            feats = self._get_lstm_features(sentence)
            forward_score = self._forward_alg(feats)
            gold_score = self._score_sentence(feats, tags)
            return forward_score - gold_score

        def forward(self, sentence):
            lstm_feats = self._get_lstm_features(sentence)
            score, tag_seq = self._viterbi_decode(lstm_feats)
            return score, tag_seq

    return BiLSTM_CRF(10, tag_to_ix, 5, 4)


def _bilstm_crf_tagger(np, torch, ddpc):
    def train_step(lib, model, sentence, tags):
        loss = model.neg_log_likelihood(sentence, tags)
        with lib.no_grad():
            score, path = model(sentence)
        return (score, lib.tensor(path)), loss.sum()

    def sgd(lib, model):
        return lib.optim.SGD(model.parameters(), lr=0.01, weight_decay=1e-4)

    rng = np.random.default_rng(0)
    batches = [(rng.integers(0, 10, 6), rng.integers(0, 3, 6)) for _ in range(3)]
    _train_alike(np, torch, ddpc, _bilstm_crf, batches, train_step, sgd)


# The PyTorch chatbot tutorial: a bidirectional GRU encoder over
# pack_padded_sequence / pad_packed_sequence, Luong "general" and "concat"
# attention, a masked NLL (gather, masked_select) summed over decoder steps,
# and clip_grad_norm_ on encoder and decoder.
def _chatbot(lib):
    nn = lib.nn
    F = nn.functional

    class EncoderRNN(nn.Module):
        def __init__(self, hidden_size, embedding, n_layers=1, dropout=0):
            super().__init__()
            self.n_layers = n_layers
            self.hidden_size = hidden_size
            self.embedding = embedding
            self.gru = nn.GRU(hidden_size, hidden_size, n_layers, dropout=(0 if n_layers == 1 else dropout),
                              bidirectional=True)

        def forward(self, input_seq, input_lengths, hidden=None):
            embedded = self.embedding(input_seq)
            packed = nn.utils.rnn.pack_padded_sequence(embedded, input_lengths)
            outputs, hidden = self.gru(packed, hidden)
            outputs, _ = nn.utils.rnn.pad_packed_sequence(outputs)
            outputs = outputs[:, :, :self.hidden_size] + outputs[:, :, self.hidden_size:]
            return outputs, hidden

    class Attn(nn.Module):
        def __init__(self, method, hidden_size):
            super().__init__()
            self.method = method
            self.hidden_size = hidden_size
            if self.method == "general":
                self.attn = nn.Linear(self.hidden_size, hidden_size)
            elif self.method == "concat":
                self.attn = nn.Linear(self.hidden_size * 2, hidden_size)
                self.v = nn.Parameter(lib.FloatTensor(hidden_size))
                nn.init.normal_(self.v)

        def dot_score(self, hidden, encoder_output):
            return lib.sum(hidden * encoder_output, dim=2)

        def general_score(self, hidden, encoder_output):
            energy = self.attn(encoder_output)
            return lib.sum(hidden * energy, dim=2)

        def concat_score(self, hidden, encoder_output):
            energy = self.attn(lib.cat((hidden.expand(encoder_output.size(0), -1, -1), encoder_output), 2)).tanh()
            return lib.sum(self.v * energy, dim=2)

        def forward(self, hidden, encoder_outputs):
            if self.method == "general":
                attn_energies = self.general_score(hidden, encoder_outputs)
            elif self.method == "concat":
                attn_energies = self.concat_score(hidden, encoder_outputs)
            else:
                attn_energies = self.dot_score(hidden, encoder_outputs)
            attn_energies = attn_energies.t()
            return F.softmax(attn_energies, dim=1).unsqueeze(1)

    class LuongAttnDecoderRNN(nn.Module):
        def __init__(self, attn_model, embedding, hidden_size, output_size, n_layers=1, dropout=0.1):
            super().__init__()
            self.embedding = embedding
            self.embedding_dropout = nn.Dropout(dropout)
            self.gru = nn.GRU(hidden_size, hidden_size, n_layers, dropout=(0 if n_layers == 1 else dropout))
            self.concat = nn.Linear(hidden_size * 2, hidden_size)
            self.out = nn.Linear(hidden_size, output_size)
            self.attn = Attn(attn_model, hidden_size)

        def forward(self, input_step, last_hidden, encoder_outputs):
            embedded = self.embedding(input_step)
            embedded = self.embedding_dropout(embedded)
            rnn_output, hidden = self.gru(embedded, last_hidden)
            attn_weights = self.attn(rnn_output, encoder_outputs)
            context = attn_weights.bmm(encoder_outputs.transpose(0, 1))
            rnn_output = rnn_output.squeeze(0)
            context = context.squeeze(1)
            concat_input = lib.cat((rnn_output, context), 1)
            concat_output = lib.tanh(self.concat(concat_input))
            output = self.out(concat_output)
            return F.softmax(output, dim=1), hidden

    class ChatBot(nn.Module):
        def __init__(self, attn_model):
            super().__init__()
            self.embedding = nn.Embedding(12, 8)
            self.encoder = EncoderRNN(8, self.embedding, 2, 0.1)
            self.decoder = LuongAttnDecoderRNN(attn_model, self.embedding, 8, 12, 2, 0.1)

    return ChatBot


def _chatbot_packed(np, torch, ddpc):
    def maskNLLLoss(lib, inp, target, mask):
        nTotal = mask.sum()
        crossEntropy = -lib.log(lib.gather(inp, 1, target.view(-1, 1)).squeeze(1))
        loss = crossEntropy.masked_select(mask).mean()
        return loss, nTotal.item()

    def train_step(lib, model, input_variable, lengths, target_variable, mask):
        mask = mask.bool()
        encoder_outputs, encoder_hidden = model.encoder(input_variable, lengths)
        decoder_input = lib.LongTensor([[1 for _ in range(input_variable.shape[1])]])
        decoder_hidden = encoder_hidden[:model.decoder.gru.num_layers]
        loss, outputs = 0, []
        for t in range(target_variable.shape[0]):
            decoder_output, decoder_hidden = model.decoder(decoder_input, decoder_hidden, encoder_outputs)
            decoder_input = target_variable[t].view(1, -1)
            mask_loss, nTotal = maskNLLLoss(lib, decoder_output, target_variable[t], mask[t])
            loss += mask_loss
            outputs.append(decoder_output)
        return (encoder_outputs, lib.stack(outputs)), loss

    def optimizer(lib, model):
        encoder_optimizer = lib.optim.Adam(model.encoder.parameters(), lr=1e-2)
        decoder_optimizer = lib.optim.Adam(model.decoder.parameters(), lr=5e-2)

        class Stepper:
            def zero_grad(self):
                encoder_optimizer.zero_grad()
                decoder_optimizer.zero_grad()

            def step(self):
                lib.nn.utils.clip_grad_norm_(model.encoder.parameters(), 0.5)
                lib.nn.utils.clip_grad_norm_(model.decoder.parameters(), 0.5)
                encoder_optimizer.step()
                decoder_optimizer.step()

        return Stepper()

    rng = np.random.default_rng(0)
    batches = []
    for _ in range(2):
        lengths = np.array([6, 5, 3, 2])
        inputs = np.where(np.arange(6)[:, None] < lengths[None], rng.integers(3, 12, (6, 4)), 0)
        tlen = np.array([4, 2, 3, 4])
        mask = (np.arange(4)[:, None] < tlen[None]).astype(np.uint8)
        batches.append((inputs, lengths, np.where(mask, rng.integers(3, 12, (4, 4)), 0), mask))
    for attn_model in ("dot", "general", "concat"):
        _train_alike(np, torch, ddpc, lambda lib: _no_dropout(lib, _chatbot(lib)(attn_model)), batches, train_step,
                     optimizer)


# Grad-CAM (jacobgil/pytorch-grad-cam's way): a forward hook keeps the
# target layer's activations and a full backward hook its output gradient;
# the class score is backpropagated, the gradients averaged over space weight
# the activations, relu, upsampled with bilinear interpolate and normalised.
def _gradcam(np, torch, ddpc):
    def cam_of(lib, model, x):
        F = lib.nn.functional
        store = {}
        layer = model.features[3]
        h1 = layer.register_forward_hook(lambda m, i, o: store.__setitem__("act", o.detach()))
        h2 = layer.register_full_backward_hook(lambda m, gi, go: store.__setitem__("grad", go[0].detach()))
        model.zero_grad()
        out = model(x)
        score = out[lib.arange(out.shape[0]), out.argmax(1)].sum()
        score.backward()
        h1.remove()
        h2.remove()
        weights = store["grad"].mean(dim=(2, 3), keepdim=True)
        cam = F.relu((weights * store["act"]).sum(1, keepdim=True))
        cam = F.interpolate(cam, size=x.shape[2:], mode="bilinear", align_corners=False)
        flat = cam.view(cam.shape[0], -1)
        cam = (flat - flat.min(1, keepdim=True)[0]) / (flat.max(1, keepdim=True)[0] - flat.min(1, keepdim=True)[0]
                                                       + 1e-7)
        return cam.view_as(x[:, :1]), store["grad"]

    def build(lib):
        nn = lib.nn
        m = nn.Module()
        m.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                   nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2))
        m.classifier = nn.Linear(8, 5)
        m.forward = lambda x: m.classifier(nn.functional.adaptive_avg_pool2d(m.features(x), 1).flatten(1))
        return m.eval()

    runs = _runs(np, torch, ddpc, build)
    x = _images(np, (2, 3, 12, 12), 4)
    results = []
    for lib, model, context, dtype in runs:
        with context():
            results.append(cam_of(lib, model, lib.tensor(x.astype(dtype))))
    for i, (want, got, exact) in enumerate(zip(*results)):
        _close(np, got, want, f"grad-cam output {i}", 1e-4, exact)


# Contrastive learning: SimCLR's NT-Xent loss (normalised projections, a
# similarity matrix with the diagonal masked out by an eye mask, positives
# picked by index, cross entropy against label 0) and MoCo's momentum
# encoder with its queue of keys written in place through a slice and the
# einsum logits.
def _contrastive(lib):
    nn = lib.nn
    F = nn.functional

    class Encoder(nn.Module):
        def __init__(self):
            super().__init__()
            self.backbone = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
                                          nn.AdaptiveAvgPool2d(1), nn.Flatten())
            self.projector = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 8))

        def forward(self, x):
            return self.projector(self.backbone(x))

    class MoCo(nn.Module):
        def __init__(self, dim=8, K=12, m=0.9, T=0.07):
            super().__init__()
            self.K, self.m, self.T = K, m, T
            self.encoder_q = Encoder()
            self.encoder_k = Encoder()
            for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
                param_k.data.copy_(param_q.data)
                param_k.requires_grad = False
            self.register_buffer("queue", lib.randn(dim, K))
            self.queue = nn.functional.normalize(self.queue, dim=0)
            self.register_buffer("queue_ptr", lib.zeros(1, dtype=lib.long))

        @lib.no_grad()
        def _momentum_update_key_encoder(self):
            for param_q, param_k in zip(self.encoder_q.parameters(), self.encoder_k.parameters()):
                param_k.data = param_k.data * self.m + param_q.data * (1.0 - self.m)

        @lib.no_grad()
        def _dequeue_and_enqueue(self, keys):
            batch_size = keys.shape[0]
            ptr = int(self.queue_ptr)
            assert self.K % batch_size == 0
            self.queue[:, ptr:ptr + batch_size] = keys.T
            ptr = (ptr + batch_size) % self.K
            self.queue_ptr[0] = ptr

        def forward(self, im_q, im_k):
            q = self.encoder_q(im_q)
            q = F.normalize(q, dim=1)
            with lib.no_grad():
                self._momentum_update_key_encoder()
                k = self.encoder_k(im_k)
                k = F.normalize(k, dim=1)
            l_pos = lib.einsum("nc,nc->n", [q, k]).unsqueeze(-1)
            l_neg = lib.einsum("nc,ck->nk", [q, self.queue.clone().detach()])
            logits = lib.cat([l_pos, l_neg], dim=1)
            logits /= self.T
            labels = lib.zeros(logits.shape[0], dtype=lib.long)
            self._dequeue_and_enqueue(k)
            return logits, labels

    return MoCo()


def _simclr_moco(np, torch, ddpc):
    def info_nce_loss(lib, features, batch_size, n_views=2, temperature=0.5):
        F = lib.nn.functional
        labels = lib.cat([lib.arange(batch_size) for i in range(n_views)], dim=0)
        labels = (labels.unsqueeze(0) == labels.unsqueeze(1)).float()
        features = F.normalize(features, dim=1)
        similarity_matrix = lib.matmul(features, features.T)
        mask = lib.eye(labels.shape[0], dtype=lib.bool)
        labels = labels[~mask].view(labels.shape[0], -1)
        similarity_matrix = similarity_matrix[~mask].view(similarity_matrix.shape[0], -1)
        positives = similarity_matrix[labels.bool()].view(labels.shape[0], -1)
        negatives = similarity_matrix[~labels.bool()].view(similarity_matrix.shape[0], -1)
        logits = lib.cat([positives, negatives], dim=1)
        labels = lib.zeros(logits.shape[0], dtype=lib.long)
        return logits / temperature, labels

    def train_step(lib, model, view1, view2):
        F = lib.nn.functional
        features = model.encoder_q(lib.cat([view1, view2], dim=0))
        logits, labels = info_nce_loss(lib, features, view1.shape[0])
        simclr = F.cross_entropy(logits, labels)
        moco_logits, moco_labels = model(view1, view2)
        return (logits, moco_logits, model.queue.clone()), simclr + F.cross_entropy(moco_logits, moco_labels)

    def sgd(lib, model):
        return lib.optim.SGD(filter(lambda p: p.requires_grad, model.parameters()), lr=0.06, momentum=0.9,
                             weight_decay=5e-4)

    batches = [(_images(np, (4, 3, 6, 6), s), _images(np, (4, 3, 6, 6), s + 20)) for s in range(4)]
    _train_alike(np, torch, ddpc, _contrastive, batches, train_step, sgd)


# PixelCNN's masked convolutions (type A and B masks kept in a buffer and
# applied with weight.data *= mask before each forward), trained with a
# 256-way cross entropy over pixel values, then one pixel sampled greedily.
def _pixelcnn(lib):
    nn = lib.nn

    class MaskedConv2d(nn.Conv2d):
        def __init__(self, mask_type, *args, **kwargs):
            super().__init__(*args, **kwargs)
            assert mask_type in {"A", "B"}
            self.register_buffer("mask", self.weight.data.clone())
            _, _, kH, kW = self.weight.size()
            self.mask.fill_(1)
            self.mask[:, :, kH // 2, kW // 2 + (mask_type == "B"):] = 0
            self.mask[:, :, kH // 2 + 1:] = 0

        def forward(self, x):
            self.weight.data *= self.mask
            return super().forward(x)

    fm = 8
    return nn.Sequential(MaskedConv2d("A", 1, fm, 7, 1, 3, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True),
                         MaskedConv2d("B", fm, fm, 5, 1, 2, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True),
                         MaskedConv2d("B", fm, fm, 3, 1, 1, bias=False), nn.BatchNorm2d(fm), nn.ReLU(True),
                         nn.Conv2d(fm, 256, 1))


def _pixel_cnn(np, torch, ddpc):
    def train_step(lib, model, input, target):
        out = model(input)
        loss = lib.nn.functional.cross_entropy(out, target)
        return (out, ), loss

    def adam(lib, model):
        return lib.optim.Adam(model.parameters(), lr=1e-3)

    rng = np.random.default_rng(0)
    pixels = [rng.integers(0, 256, (2, 1, 8, 8)) for _ in range(3)]
    batches = [((p / 255.0).astype(np.float32), p[:, 0]) for p in pixels]
    model, ref = _train_alike(np, torch, ddpc, _pixelcnn, batches, train_step, adam)
    model.eval()
    ref.eval()
    model(ddpc.zeros(1, 1, 8, 8))
    for conv in (model[0], model[3]):
        assert (conv.weight * (1 - conv.mask)).abs().max().item() == 0, "a forward left masked weights"
    samples = []
    for lib, m in ((ddpc, model), (torch, ref)):
        sample = lib.zeros(1, 1, 8, 8)
        with lib.no_grad():
            for i in range(2):
                for j in range(8):
                    sample[:, :, i, j] = m(sample)[:, :, i, j].argmax(1).float() / 255.0
        samples.append(sample)
    _close(np, samples[0], samples[1], "greedy sample")


# Soft actor-critic's update (OpenAI Spinning Up's sac/core.py): a squashed
# Gaussian actor (rsample, the tanh correction written with softplus),
# twin Q-networks, a no_grad target from the target networks, and Polyak
# averaging in place through mul_ and add_ on the target parameters.
def _sac(lib):
    nn = lib.nn
    F = nn.functional
    LOG_STD_MAX, LOG_STD_MIN = 2, -20

    def mlp(sizes, activation, output_activation=nn.Identity):
        layers = []
        for j in range(len(sizes) - 1):
            act = activation if j < len(sizes) - 2 else output_activation
            layers += [nn.Linear(sizes[j], sizes[j + 1]), act()]
        return nn.Sequential(*layers)

    class SquashedGaussianMLPActor(nn.Module):
        def __init__(self, obs_dim, act_dim, hidden_sizes, activation, act_limit):
            super().__init__()
            self.net = mlp([obs_dim] + list(hidden_sizes), activation, activation)
            self.mu_layer = nn.Linear(hidden_sizes[-1], act_dim)
            self.log_std_layer = nn.Linear(hidden_sizes[-1], act_dim)
            self.act_limit = act_limit

        def forward(self, obs, eps, deterministic=False, with_logprob=True):
            net_out = self.net(obs)
            mu = self.mu_layer(net_out)
            log_std = self.log_std_layer(net_out)
            log_std = lib.clamp(log_std, LOG_STD_MIN, LOG_STD_MAX)
            std = lib.exp(log_std)
            pi_distribution = lib.distributions.Normal(mu, std)
            assert pi_distribution.rsample().shape == mu.shape
            pi_action = mu if deterministic else mu + std * eps
            if with_logprob:
                logp_pi = pi_distribution.log_prob(pi_action).sum(axis=-1)
                logp_pi -= (2 * (math.log(2) - pi_action - F.softplus(-2 * pi_action))).sum(axis=1)
            else:
                logp_pi = None
            pi_action = lib.tanh(pi_action)
            return self.act_limit * pi_action, logp_pi

    class MLPQFunction(nn.Module):
        def __init__(self, obs_dim, act_dim, hidden_sizes, activation):
            super().__init__()
            self.q = mlp([obs_dim + act_dim] + list(hidden_sizes) + [1], activation)

        def forward(self, obs, act):
            q = self.q(lib.cat([obs, act], dim=-1))
            return lib.squeeze(q, -1)

    class MLPActorCritic(nn.Module):
        def __init__(self):
            super().__init__()
            self.pi = SquashedGaussianMLPActor(3, 2, (16, 16), nn.ReLU, 2.0)
            self.q1 = MLPQFunction(3, 2, (16, 16), nn.ReLU)
            self.q2 = MLPQFunction(3, 2, (16, 16), nn.ReLU)

    class Agent(nn.Module):
        def __init__(self):
            super().__init__()
            self.ac = MLPActorCritic()
            self.ac_targ = copy.deepcopy(self.ac)
            for p in self.ac_targ.parameters():
                p.requires_grad = False

    return Agent()


def _soft_actor_critic(np, torch, ddpc):
    gamma, alpha, polyak = 0.99, 0.2, 0.9

    def losses(lib, agent, o, a, r, o2, d, eps, eps2):
        ac, ac_targ = agent.ac, agent.ac_targ
        q1 = ac.q1(o, a)
        q2 = ac.q2(o, a)
        with lib.no_grad():
            a2, logp_a2 = ac.pi(o2, eps2)
            q1_pi_targ = ac_targ.q1(o2, a2)
            q2_pi_targ = ac_targ.q2(o2, a2)
            q_pi_targ = lib.min(q1_pi_targ, q2_pi_targ)
            backup = r + gamma * (1 - d) * (q_pi_targ - alpha * logp_a2)
        loss_q = ((q1 - backup) ** 2).mean() + ((q2 - backup) ** 2).mean()
        pi, logp_pi = ac.pi(o, eps)
        q_pi = lib.min(ac.q1(o, pi), ac.q2(o, pi))
        loss_pi = (alpha * logp_pi - q_pi).mean()
        return (q1, q2, backup, pi, logp_pi), loss_q + loss_pi

    def optimizer(lib, agent):
        opt = lib.optim.Adam(agent.ac.parameters(), lr=1e-3)

        class Stepper:
            def zero_grad(self):
                opt.zero_grad()

            def step(self):
                opt.step()
                with lib.no_grad():
                    for p, p_targ in zip(agent.ac.parameters(), agent.ac_targ.parameters()):
                        p_targ.data.mul_(polyak)
                        p_targ.data.add_((1 - polyak) * p.data)

        return Stepper()

    rng = np.random.default_rng(0)
    batches = [tuple(rng.standard_normal(shape).astype(np.float32) for shape in ((8, 3), (8, 2), (8,), (8, 3)))
               + ((rng.random(8) < 0.2).astype(np.float32),)
               + tuple(rng.standard_normal((8, 2)).astype(np.float32) for _ in range(2)) for _ in range(3)]
    _train_alike(np, torch, ddpc, _sac, batches, losses, optimizer)


# A LLaMA-style decoder as Hugging Face's modeling_llama writes it: RMSNorm
# in float32, rotary embeddings through rotate_half (cos/sin caches from an
# outer product), grouped-query attention with repeat_kv (expand+reshape),
# scaled_dot_product_attention with is_causal, SwiGLU, tied embeddings;
# then greedy generation.
def _llama(lib):
    nn = lib.nn
    F = nn.functional

    class LlamaRMSNorm(nn.Module):
        def __init__(self, hidden_size, eps=1e-6):
            super().__init__()
            self.weight = nn.Parameter(lib.ones(hidden_size))
            self.variance_epsilon = eps

        def forward(self, hidden_states):
            input_dtype = hidden_states.dtype
            hidden_states = hidden_states.to(lib.float32)
            variance = hidden_states.pow(2).mean(-1, keepdim=True)
            hidden_states = hidden_states * lib.rsqrt(variance + self.variance_epsilon)
            return self.weight * hidden_states.to(input_dtype)

    class LlamaRotaryEmbedding(nn.Module):
        def __init__(self, dim, base=10000):
            super().__init__()
            inv_freq = 1.0 / (base ** (lib.arange(0, dim, 2, dtype=lib.int64).float() / dim))
            self.register_buffer("inv_freq", inv_freq, persistent=False)

        @lib.no_grad()
        def forward(self, x, position_ids):
            inv_freq_expanded = self.inv_freq[None, :, None].float().expand(position_ids.shape[0], -1, 1)
            position_ids_expanded = position_ids[:, None, :].float()
            freqs = (inv_freq_expanded.float() @ position_ids_expanded.float()).transpose(1, 2)
            emb = lib.cat((freqs, freqs), dim=-1)
            return emb.cos().to(dtype=x.dtype), emb.sin().to(dtype=x.dtype)

    def rotate_half(x):
        x1 = x[..., : x.shape[-1] // 2]
        x2 = x[..., x.shape[-1] // 2:]
        return lib.cat((-x2, x1), dim=-1)

    def apply_rotary_pos_emb(q, k, cos, sin, unsqueeze_dim=1):
        cos = cos.unsqueeze(unsqueeze_dim)
        sin = sin.unsqueeze(unsqueeze_dim)
        return (q * cos) + (rotate_half(q) * sin), (k * cos) + (rotate_half(k) * sin)

    def repeat_kv(hidden_states, n_rep):
        batch, num_key_value_heads, slen, head_dim = hidden_states.shape
        if n_rep == 1:
            return hidden_states
        hidden_states = hidden_states[:, :, None, :, :].expand(batch, num_key_value_heads, n_rep, slen, head_dim)
        return hidden_states.reshape(batch, num_key_value_heads * n_rep, slen, head_dim)

    class LlamaAttention(nn.Module):
        def __init__(self, hidden_size=16, num_heads=4, num_key_value_heads=2):
            super().__init__()
            self.head_dim = hidden_size // num_heads
            self.num_heads, self.num_key_value_heads = num_heads, num_key_value_heads
            self.num_key_value_groups = num_heads // num_key_value_heads
            self.q_proj = nn.Linear(hidden_size, num_heads * self.head_dim, bias=False)
            self.k_proj = nn.Linear(hidden_size, num_key_value_heads * self.head_dim, bias=False)
            self.v_proj = nn.Linear(hidden_size, num_key_value_heads * self.head_dim, bias=False)
            self.o_proj = nn.Linear(num_heads * self.head_dim, hidden_size, bias=False)

        def forward(self, hidden_states, position_embeddings):
            input_shape = hidden_states.shape[:-1]
            hidden_shape = (*input_shape, -1, self.head_dim)
            query_states = self.q_proj(hidden_states).view(hidden_shape).transpose(1, 2)
            key_states = self.k_proj(hidden_states).view(hidden_shape).transpose(1, 2)
            value_states = self.v_proj(hidden_states).view(hidden_shape).transpose(1, 2)
            cos, sin = position_embeddings
            query_states, key_states = apply_rotary_pos_emb(query_states, key_states, cos, sin)
            key_states = repeat_kv(key_states, self.num_key_value_groups)
            value_states = repeat_kv(value_states, self.num_key_value_groups)
            attn_output = F.scaled_dot_product_attention(query_states, key_states, value_states, is_causal=True)
            attn_output = attn_output.transpose(1, 2).contiguous()
            attn_output = attn_output.reshape(*input_shape, -1).contiguous()
            return self.o_proj(attn_output)

    class LlamaMLP(nn.Module):
        def __init__(self, hidden_size=16, intermediate_size=40):
            super().__init__()
            self.gate_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
            self.up_proj = nn.Linear(hidden_size, intermediate_size, bias=False)
            self.down_proj = nn.Linear(intermediate_size, hidden_size, bias=False)
            self.act_fn = nn.SiLU()

        def forward(self, x):
            return self.down_proj(self.act_fn(self.gate_proj(x)) * self.up_proj(x))

    class LlamaDecoderLayer(nn.Module):
        def __init__(self):
            super().__init__()
            self.self_attn = LlamaAttention()
            self.mlp = LlamaMLP()
            self.input_layernorm = LlamaRMSNorm(16)
            self.post_attention_layernorm = LlamaRMSNorm(16)

        def forward(self, hidden_states, position_embeddings):
            residual = hidden_states
            hidden_states = self.input_layernorm(hidden_states)
            hidden_states = self.self_attn(hidden_states, position_embeddings)
            hidden_states = residual + hidden_states
            residual = hidden_states
            hidden_states = self.post_attention_layernorm(hidden_states)
            hidden_states = self.mlp(hidden_states)
            return residual + hidden_states

    class LlamaForCausalLM(nn.Module):
        def __init__(self, vocab_size=24):
            super().__init__()
            self.embed_tokens = nn.Embedding(vocab_size, 16)
            self.layers = nn.ModuleList([LlamaDecoderLayer() for _ in range(2)])
            self.norm = LlamaRMSNorm(16)
            self.rotary_emb = LlamaRotaryEmbedding(4)
            self.lm_head = nn.Linear(16, vocab_size, bias=False)
            self.lm_head.weight = self.embed_tokens.weight
            self.apply(self._init_weights)

        def _init_weights(self, module):
            if isinstance(module, (nn.Linear, nn.Embedding)):
                module.weight.data.normal_(mean=0.0, std=0.2)

        def forward(self, input_ids):
            inputs_embeds = self.embed_tokens(input_ids)
            position_ids = lib.arange(0, inputs_embeds.shape[1]).unsqueeze(0)
            position_embeddings = self.rotary_emb(inputs_embeds, position_ids)
            hidden_states = inputs_embeds
            for decoder_layer in self.layers:
                hidden_states = decoder_layer(hidden_states, position_embeddings)
            return self.lm_head(self.norm(hidden_states))

    return LlamaForCausalLM()


def _llama_decoder(np, torch, ddpc):
    def train_step(lib, model, input_ids):
        logits = model(input_ids)
        shift_logits = logits[..., :-1, :].contiguous()
        shift_labels = input_ids[..., 1:].contiguous()
        loss = lib.nn.functional.cross_entropy(shift_logits.view(-1, shift_logits.size(-1)), shift_labels.view(-1))
        return logits, loss

    def adamw(lib, model):
        return lib.optim.AdamW(model.parameters(), lr=3e-3, betas=(0.9, 0.95), weight_decay=0.1, fused=False)

    rng = np.random.default_rng(0)
    batches = [(rng.integers(0, 24, (2, 7)),) for _ in range(3)]
    model, ref = _train_alike(np, torch, ddpc, _llama, batches, train_step, adamw)
    generated = []
    for lib, m in ((ddpc, model), (torch, ref)):
        ids = lib.tensor([[1, 2]])
        with lib.no_grad():
            for _ in range(5):
                next_token = m(ids)[:, -1, :].argmax(dim=-1, keepdim=True)
                ids = lib.cat([ids, next_token], dim=-1)
        generated.append(ids)
    _close(np, generated[0], generated[1], "greedy generation")


# A sparse mixture-of-experts layer as Mixtral's (Hugging Face): a router,
# softmax and topk over experts, renormalised weights, one_hot expert mask
# permuted to experts first, torch.where to pick each expert's tokens and
# index_add_ of the weighted outputs; with the load-balancing loss.
def _moe(lib):
    nn = lib.nn
    F = nn.functional

    class BlockSparseTop2MLP(nn.Module):
        def __init__(self, hidden_dim=8, ffn_dim=16):
            super().__init__()
            self.w1 = nn.Linear(hidden_dim, ffn_dim, bias=False)
            self.w2 = nn.Linear(ffn_dim, hidden_dim, bias=False)
            self.w3 = nn.Linear(hidden_dim, ffn_dim, bias=False)
            self.act_fn = nn.SiLU()

        def forward(self, hidden_states):
            return self.w2(self.act_fn(self.w1(hidden_states)) * self.w3(hidden_states))

    class SparseMoeBlock(nn.Module):
        def __init__(self, hidden_dim=8, num_experts=4, top_k=2):
            super().__init__()
            self.hidden_dim, self.num_experts, self.top_k = hidden_dim, num_experts, top_k
            self.gate = nn.Linear(hidden_dim, num_experts, bias=False)
            self.experts = nn.ModuleList([BlockSparseTop2MLP() for _ in range(num_experts)])

        def forward(self, hidden_states):
            batch_size, sequence_length, hidden_dim = hidden_states.shape
            hidden_states = hidden_states.view(-1, hidden_dim)
            router_logits = self.gate(hidden_states)
            routing_weights = F.softmax(router_logits, dim=1, dtype=lib.float)
            routing_weights, selected_experts = lib.topk(routing_weights, self.top_k, dim=-1)
            routing_weights /= routing_weights.sum(dim=-1, keepdim=True)
            routing_weights = routing_weights.to(hidden_states.dtype)
            final_hidden_states = lib.zeros((batch_size * sequence_length, hidden_dim), dtype=hidden_states.dtype,
                                            device=hidden_states.device)
            expert_mask = F.one_hot(selected_experts, num_classes=self.num_experts).permute(2, 1, 0)
            expert_hit = lib.greater(expert_mask.sum(dim=(-1, -2)), 0).nonzero()
            for expert_idx in expert_hit:
                expert_layer = self.experts[expert_idx]
                idx, top_x = lib.where(expert_mask[expert_idx].squeeze(0))
                current_state = hidden_states[None, top_x].reshape(-1, hidden_dim)
                current_hidden_states = expert_layer(current_state) * routing_weights[top_x, idx, None]
                final_hidden_states.index_add_(0, top_x, current_hidden_states.to(hidden_states.dtype))
            final_hidden_states = final_hidden_states.reshape(batch_size, sequence_length, hidden_dim)
            return final_hidden_states, router_logits

    return SparseMoeBlock()


def _mixture_of_experts(np, torch, ddpc):
    def load_balancing_loss_func(lib, gate_logits, num_experts, top_k=2):
        F = lib.nn.functional
        routing_weights = F.softmax(gate_logits, dim=-1)
        _, selected_experts = lib.topk(routing_weights, top_k, dim=-1)
        expert_mask = F.one_hot(selected_experts, num_experts)
        tokens_per_expert = lib.mean(expert_mask.float(), dim=0)
        router_prob_per_expert = lib.mean(routing_weights, dim=0)
        return lib.sum(tokens_per_expert * router_prob_per_expert.unsqueeze(0)) * num_experts

    def train_step(lib, moe, x, target):
        out, router_logits = moe(x)
        aux = load_balancing_loss_func(lib, router_logits, moe.num_experts)
        return (out, router_logits), lib.nn.functional.mse_loss(out, target) + 0.01 * aux

    def adam(lib, moe):
        return lib.optim.Adam(moe.parameters(), lr=1e-2)

    batches = [(_images(np, (2, 5, 8), s), _images(np, (2, 5, 8), s + 9)) for s in range(3)]
    _train_alike(np, torch, ddpc, _moe, batches, train_step, adam)


# Prototypical networks (jakesnell/prototypical-networks): class prototypes
# as means of support embeddings, squared euclidean distances written with
# expand, log_softmax over negative distances and a gather of the true
# class; the classic char-RNN name classifier of the PyTorch tutorial
# (one-hot letters written into a zero tensor, an nn.RNN, NLLLoss); and
# Hinton's knowledge distillation loss (KL of temperature-softened outputs
# with log_target, times T squared).
def _few_shot(lib):
    nn = lib.nn

    def conv_block(in_channels, out_channels):
        return nn.Sequential(nn.Conv2d(in_channels, out_channels, 3, padding=1), nn.BatchNorm2d(out_channels),
                             nn.ReLU(), nn.MaxPool2d(2))

    class Models(nn.Module):
        def __init__(self):
            super().__init__()
            self.encoder = nn.Sequential(conv_block(1, 8), conv_block(8, 8), nn.Flatten())
            self.rnn = nn.RNN(8, 16)
            self.h2o = nn.Linear(16, 3)
            self.softmax = nn.LogSoftmax(dim=1)
            self.student = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 4))
            self.teacher = nn.Sequential(nn.Linear(6, 24), nn.ReLU(), nn.Linear(24, 4))

    return Models()


def _protonet_charrnn_distill(np, torch, ddpc):
    letters = "abcdefgh"

    def euclidean_dist(lib, x, y):
        n, m, d = x.size(0), y.size(0), x.size(1)
        assert d == y.size(1)
        x = x.unsqueeze(1).expand(n, m, d)
        y = y.unsqueeze(0).expand(n, m, d)
        return lib.pow(x - y, 2).sum(2)

    def line_to_tensor(lib, line):
        tensor = lib.zeros(len(line), 1, len(letters))
        for li, letter in enumerate(line):
            tensor[li][0][letters.find(letter)] = 1
        return tensor

    def losses(lib, models, xs, xq, x_distill):
        F = lib.nn.functional
        n_class, n_support, n_query = xs.size(0), xs.size(1), xq.size(1)
        target_inds = lib.arange(0, n_class).view(n_class, 1, 1).expand(n_class, n_query, 1).long()
        x = lib.cat([xs.view(n_class * n_support, *xs.size()[2:]), xq.view(n_class * n_query, *xq.size()[2:])], 0)
        z = models.encoder(x)
        z_dim = z.size(-1)
        z_proto = z[:n_class * n_support].view(n_class, n_support, z_dim).mean(1)
        zq = z[n_class * n_support:]
        dists = euclidean_dist(lib, zq, z_proto)
        log_p_y = F.log_softmax(-dists, dim=1).view(n_class, n_query, -1)
        loss_proto = -log_p_y.gather(2, target_inds).squeeze().view(-1).mean()
        _, y_hat = log_p_y.max(2)
        acc_val = lib.eq(y_hat, target_inds.squeeze()).float().mean()

        rnn_losses = []
        for name, category in (("abba", 0), ("hedge", 1), ("cafe", 2)):
            output, hidden = models.rnn(line_to_tensor(lib, name))
            output = models.softmax(models.h2o(hidden[0]))
            rnn_losses.append(lib.nn.NLLLoss()(output, lib.tensor([category], dtype=lib.long)))

        T = 4.0
        with lib.no_grad():
            teacher_logits = models.teacher(x_distill)
        student_logits = models.student(x_distill)
        soft_targets = F.log_softmax(teacher_logits / T, dim=-1)
        soft_prob = F.log_softmax(student_logits / T, dim=-1)
        distill = F.kl_div(soft_prob, soft_targets, reduction="batchmean", log_target=True) * T ** 2
        loss = loss_proto + sum(rnn_losses) + distill
        return (dists, acc_val, lib.stack(rnn_losses), distill), loss

    def adam(lib, models):
        return lib.optim.Adam(models.parameters(), lr=1e-3)

    rng = np.random.default_rng(0)
    batches = [(rng.standard_normal((3, 2, 1, 8, 8)).astype(np.float32),
                rng.standard_normal((3, 4, 1, 8, 8)).astype(np.float32),
                rng.standard_normal((5, 6)).astype(np.float32)) for _ in range(3)]
    _train_alike(np, torch, ddpc, _few_shot, batches, losses, adam)


# A graph convolutional network on a small random graph, in two forms:
# tkipf/pygcn's dense normalised adjacency through mm, and the message
# passing that PyG-style code writes with index_select, scatter_add_ over
# edge targets and degree normalisation from index_add_.
def _gcn(lib):
    nn = lib.nn
    F = nn.functional

    class GraphConvolution(nn.Module):
        def __init__(self, in_features, out_features, bias=True):
            super().__init__()
            self.weight = nn.Parameter(lib.FloatTensor(in_features, out_features))
            self.bias = nn.Parameter(lib.FloatTensor(out_features)) if bias else None
            stdv = 1.0 / math.sqrt(self.weight.size(1))
            self.weight.data.uniform_(-stdv, stdv)
            if self.bias is not None:
                self.bias.data.uniform_(-stdv, stdv)

        def forward(self, input, adj):
            support = lib.mm(input, self.weight)
            output = lib.mm(adj, support)
            return output + self.bias if self.bias is not None else output

    class MessagePassing(nn.Module):
        def __init__(self, in_channels, out_channels):
            super().__init__()
            self.lin = nn.Linear(in_channels, out_channels, bias=False)
            self.bias = nn.Parameter(lib.zeros(out_channels))

        def forward(self, x, edge_index):
            num_nodes = x.size(0)
            loops = lib.arange(num_nodes).unsqueeze(0).repeat(2, 1)
            edge_index = lib.cat([edge_index, loops], dim=1)
            x = self.lin(x)
            row, col = edge_index
            deg = lib.zeros(num_nodes, dtype=x.dtype).index_add_(0, col, lib.ones(col.size(0), dtype=x.dtype))
            deg_inv_sqrt = deg.pow(-0.5)
            deg_inv_sqrt[deg_inv_sqrt == float("inf")] = 0
            norm = deg_inv_sqrt[row] * deg_inv_sqrt[col]
            messages = norm.view(-1, 1) * x.index_select(0, row)
            out = lib.zeros_like(x).scatter_add_(0, col.unsqueeze(-1).expand_as(messages), messages)
            return out + self.bias

    class GCN(nn.Module):
        def __init__(self, nfeat=5, nhid=8, nclass=3, dropout=0.5):
            super().__init__()
            self.gc1 = GraphConvolution(nfeat, nhid)
            self.gc2 = GraphConvolution(nhid, nclass)
            self.mp1 = MessagePassing(nfeat, nhid)
            self.mp2 = MessagePassing(nhid, nclass)
            self.dropout = dropout

        def forward(self, x, adj, edge_index):
            h = F.relu(self.gc1(x, adj))
            h = F.dropout(h, self.dropout, training=self.training)
            dense = F.log_softmax(self.gc2(h, adj), dim=1)
            h = F.relu(self.mp1(x, edge_index))
            return dense, F.log_softmax(self.mp2(h, edge_index), dim=1)

    return GCN().eval()


def _graph_convolution(np, torch, ddpc):
    rng = np.random.default_rng(0)
    n = 7
    a = np.triu((rng.random((n, n)) < 0.4).astype(np.float32), 1)
    a = a + a.T
    edge_index = np.array(np.nonzero(a), dtype=np.int64)
    adj = a + np.eye(n, dtype=np.float32)
    d = 1.0 / np.sqrt(adj.sum(1))
    adj = (adj * d[:, None] * d[None, :]).astype(np.float32)

    def train_step(lib, model, features, adj, edge_index, labels, idx_train):
        F = lib.nn.functional
        dense, passed = model(features, adj, edge_index)
        loss = F.nll_loss(dense[idx_train], labels[idx_train]) + F.nll_loss(passed[idx_train], labels[idx_train])
        return (dense, passed), loss

    def adam(lib, model):
        return lib.optim.Adam(model.parameters(), lr=0.01, weight_decay=5e-4)

    batches = [(rng.standard_normal((n, 5)).astype(np.float32), adj, edge_index, rng.integers(0, 3, n),
                np.array([0, 2, 3, 5]))] * 3
    model, ref = _train_alike(np, torch, ddpc, _gcn, batches, train_step, adam)
    features = torch.tensor(batches[0][0])
    lin, bias = ref.mp1.lin, ref.mp1.bias
    _close(np, model.mp1(ddpc.tensor(features.numpy()), ddpc.tensor(edge_index)),
           torch.mm(torch.tensor(adj), lin(features)) + bias, "message passing against the normalised adjacency")


# RealNVP-style normalising flow (as in the widely copied 2D "moons"
# examples): affine coupling layers with alternating masks, scale through
# tanh, the log-determinant summed over dims, and the base density from
# MultivariateNormal; then sampling by inverting the couplings.
def _realnvp(lib):
    nn = lib.nn

    class RealNVP(nn.Module):
        def __init__(self, nets, nett, mask, prior):
            super().__init__()
            self.prior = prior
            self.mask = nn.Parameter(mask, requires_grad=False)
            self.t = lib.nn.ModuleList([nett() for _ in range(len(mask))])
            self.s = lib.nn.ModuleList([nets() for _ in range(len(mask))])

        def g(self, z):
            x = z
            for i in range(len(self.t)):
                x_ = x * self.mask[i]
                s = self.s[i](x_) * (1 - self.mask[i])
                t = self.t[i](x_) * (1 - self.mask[i])
                x = x_ + (1 - self.mask[i]) * (x * lib.exp(s) + t)
            return x

        def f(self, x):
            log_det_J, z = x.new_zeros(x.shape[0]), x
            for i in reversed(range(len(self.t))):
                z_ = self.mask[i] * z
                s = self.s[i](z_) * (1 - self.mask[i])
                t = self.t[i](z_) * (1 - self.mask[i])
                z = (1 - self.mask[i]) * (z - t) * lib.exp(-s) + z_
                log_det_J -= s.sum(dim=1)
            return z, log_det_J

        def log_prob(self, x):
            z, logp = self.f(x)
            return self.prior.log_prob(z) + logp

    def nets():
        return nn.Sequential(nn.Linear(2, 16), nn.LeakyReLU(), nn.Linear(16, 16), nn.LeakyReLU(), nn.Linear(16, 2),
                             nn.Tanh())

    def nett():
        return nn.Sequential(nn.Linear(2, 16), nn.LeakyReLU(), nn.Linear(16, 16), nn.LeakyReLU(), nn.Linear(16, 2))

    masks = lib.from_numpy(numpy.array([[0, 1], [1, 0]] * 3).astype(numpy.float32))
    prior = lib.distributions.MultivariateNormal(lib.zeros(2), lib.eye(2))
    return RealNVP(nets, nett, masks.to(lib.get_default_dtype()), prior)


def _normalizing_flow(np, torch, ddpc):
    def train_step(lib, flow, x, z):
        loss = -flow.log_prob(x).mean()
        return (flow.f(x)[0], flow.g(z)), loss

    def adam(lib, flow):
        return lib.optim.Adam([p for p in flow.parameters() if p.requires_grad], lr=1e-3)

    rng = np.random.default_rng(0)
    batches = [((rng.standard_normal((16, 2)) * [1.0, 0.3] + [0.5, 0.0]).astype(np.float32),
                rng.standard_normal((4, 2)).astype(np.float32)) for _ in range(3)]
    model, _ = _train_alike(np, torch, ddpc, _realnvp, batches, train_step, adam)
    x = ddpc.tensor(batches[0][0])
    _close(np, model.g(model.f(x)[0]), torch.tensor(batches[0][0]), "g inverts f")


# mixup and CutMix as the timm and CutMix-PyTorch training loops write them:
# a permutation of the batch, the box's pixels copied in from the permuted
# images through slice assignment, and the two-target cross entropy.
def _mixing(lib):
    nn = lib.nn
    return nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(), nn.AdaptiveAvgPool2d(1),
                         nn.Flatten(), nn.Linear(8, 5))


def _mixup_cutmix(np, torch, ddpc):
    def rand_bbox(size, lam, cx, cy):
        W, H = size[2], size[3]
        cut_rat = np.sqrt(1.0 - lam)
        cut_w, cut_h = int(W * cut_rat), int(H * cut_rat)
        bbx1, bby1 = np.clip(cx - cut_w // 2, 0, W), np.clip(cy - cut_h // 2, 0, H)
        bbx2, bby2 = np.clip(cx + cut_w // 2, 0, W), np.clip(cy + cut_h // 2, 0, H)
        return bbx1, bby1, bbx2, bby2

    def train_step(lib, model, input, target, rand_index, params):
        criterion = lib.nn.CrossEntropyLoss()
        lam, cx, cy = params.tolist()
        target_a, target_b = target, target[rand_index]
        bbx1, bby1, bbx2, bby2 = rand_bbox(input.size(), lam, int(cx), int(cy))
        input = input.clone()
        input[:, :, bbx1:bbx2, bby1:bby2] = input[rand_index, :, bbx1:bbx2, bby1:bby2]
        lam = 1 - ((bbx2 - bbx1) * (bby2 - bby1) / (input.size()[-1] * input.size()[-2]))
        output = model(input)
        cutmix = criterion(output, target_a) * lam + criterion(output, target_b) * (1.0 - lam)
        mixed_x = lam * input + (1 - lam) * input[rand_index, :]
        out = model(mixed_x)
        mixup = lam * criterion(out, target_a) + (1 - lam) * criterion(out, target_b)
        return (input, output, out), cutmix + mixup

    rng = np.random.default_rng(0)
    batches = [(_images(np, (4, 3, 8, 8), s), _labels(np, 4, 5, s), rng.permutation(4),
                np.array([rng.beta(1.0, 1.0), rng.integers(8), rng.integers(8)])) for s in range(3)]
    _train_alike(np, torch, ddpc, _mixing, batches, train_step, _sgd)


# Capsule networks' dynamic routing (gram-ai/capsule-networks): primary
# capsules from convolutions, squash, routing weights through 5-d
# broadcast matmul, softmax over the routing logits and their updates, and
# the margin loss on capsule lengths; T5's relative position buckets (log
# of float distances, where, full_like, min) as a learnt attention bias;
# and WaveNet's stack of dilated causal Conv1d (left padding), gated
# tanh * sigmoid units with residual and skip outputs over mu-law input.
def _capsules_t5_wavenet(lib):
    nn = lib.nn
    F = nn.functional

    def squash(tensor, dim=-1):
        squared_norm = (tensor ** 2).sum(dim=dim, keepdim=True)
        scale = squared_norm / (1 + squared_norm)
        return scale * tensor / lib.sqrt(squared_norm)

    class CapsuleLayer(nn.Module):
        def __init__(self, num_capsules, num_route_nodes, in_channels, out_channels, kernel_size=None, stride=None,
                     num_iterations=3):
            super().__init__()
            self.num_route_nodes = num_route_nodes
            self.num_iterations = num_iterations
            self.num_capsules = num_capsules
            if num_route_nodes != -1:
                self.route_weights = nn.Parameter(0.1 * lib.randn(num_capsules, num_route_nodes, in_channels,
                                                                  out_channels))
            else:
                self.capsules = nn.ModuleList([nn.Conv2d(in_channels, out_channels, kernel_size=kernel_size,
                                                         stride=stride, padding=0) for _ in range(num_capsules)])

        def forward(self, x):
            if self.num_route_nodes != -1:
                priors = x[None, :, :, None, :] @ self.route_weights[:, None, :, :, :]
                logits = lib.zeros(*priors.size())
                for i in range(self.num_iterations):
                    probs = F.softmax(logits, dim=2)
                    outputs = squash((probs * priors).sum(dim=2, keepdim=True))
                    if i != self.num_iterations - 1:
                        delta_logits = (priors * outputs).sum(dim=-1, keepdim=True)
                        logits = logits + delta_logits
            else:
                outputs = [capsule(x).view(x.size(0), -1, 1) for capsule in self.capsules]
                outputs = lib.cat(outputs, dim=-1)
                outputs = squash(outputs)
            return outputs

    class CapsuleNet(nn.Module):
        def __init__(self, num_classes=3):
            super().__init__()
            self.conv1 = nn.Conv2d(1, 8, kernel_size=3, stride=1)
            self.primary_capsules = CapsuleLayer(num_capsules=4, num_route_nodes=-1, in_channels=8, out_channels=2,
                                                 kernel_size=3, stride=2)
            self.digit_capsules = CapsuleLayer(num_capsules=num_classes, num_route_nodes=2 * 2 * 2, in_channels=4,
                                               out_channels=6)

        def forward(self, x):
            x = F.relu(self.conv1(x), inplace=True)
            x = self.primary_capsules(x)
            x = self.digit_capsules(x).squeeze().transpose(0, 1)
            classes = (x ** 2).sum(dim=-1) ** 0.5
            return F.softmax(classes, dim=-1)

    class T5Attention(nn.Module):
        def __init__(self, d_model=8, n_heads=2, num_buckets=8, max_distance=16):
            super().__init__()
            self.n_heads, self.d_kv = n_heads, d_model // n_heads
            self.num_buckets, self.max_distance = num_buckets, max_distance
            self.q = nn.Linear(d_model, d_model, bias=False)
            self.k = nn.Linear(d_model, d_model, bias=False)
            self.v = nn.Linear(d_model, d_model, bias=False)
            self.o = nn.Linear(d_model, d_model, bias=False)
            self.relative_attention_bias = nn.Embedding(num_buckets, n_heads)

        @staticmethod
        def _relative_position_bucket(relative_position, bidirectional=True, num_buckets=32, max_distance=128):
            relative_buckets = 0
            if bidirectional:
                num_buckets //= 2
                relative_buckets += (relative_position > 0).to(lib.long) * num_buckets
                relative_position = lib.abs(relative_position)
            else:
                relative_position = -lib.min(relative_position, lib.zeros_like(relative_position))
            max_exact = num_buckets // 2
            is_small = relative_position < max_exact
            relative_position_if_large = max_exact + (
                lib.log(relative_position.float() / max_exact) / math.log(max_distance / max_exact)
                * (num_buckets - max_exact)).to(lib.long)
            relative_position_if_large = lib.min(relative_position_if_large,
                                                 lib.full_like(relative_position_if_large, num_buckets - 1))
            relative_buckets += lib.where(is_small, relative_position, relative_position_if_large)
            return relative_buckets

        def compute_bias(self, query_length, key_length):
            context_position = lib.arange(query_length, dtype=lib.long)[:, None]
            memory_position = lib.arange(key_length, dtype=lib.long)[None, :]
            relative_position = memory_position - context_position
            relative_position_bucket = self._relative_position_bucket(relative_position, bidirectional=True,
                                                                      num_buckets=self.num_buckets,
                                                                      max_distance=self.max_distance)
            values = self.relative_attention_bias(relative_position_bucket)
            return values.permute([2, 0, 1]).unsqueeze(0)

        def forward(self, hidden_states):
            batch_size, seq_length = hidden_states.shape[:2]

            def shape(states):
                return states.view(batch_size, -1, self.n_heads, self.d_kv).transpose(1, 2)

            query_states, key_states = shape(self.q(hidden_states)), shape(self.k(hidden_states))
            value_states = shape(self.v(hidden_states))
            scores = lib.matmul(query_states, key_states.transpose(3, 2))
            scores += self.compute_bias(seq_length, seq_length)
            attn_weights = F.softmax(scores.float(), dim=-1).type_as(scores)
            attn_output = lib.matmul(attn_weights, value_states)
            attn_output = attn_output.transpose(1, 2).contiguous().view(batch_size, -1, self.n_heads * self.d_kv)
            return self.o(attn_output)

    class CausalConv1d(nn.Conv1d):
        def __init__(self, in_channels, out_channels, kernel_size, dilation=1):
            super().__init__(in_channels, out_channels, kernel_size, dilation=dilation)
            self.left_padding = (kernel_size - 1) * dilation

        def forward(self, x):
            return super().forward(F.pad(x, (self.left_padding, 0)))

    class ResidualBlock(nn.Module):
        def __init__(self, residual_channels, skip_channels, dilation):
            super().__init__()
            self.filter = CausalConv1d(residual_channels, residual_channels, 2, dilation)
            self.gate = CausalConv1d(residual_channels, residual_channels, 2, dilation)
            self.residual = nn.Conv1d(residual_channels, residual_channels, 1)
            self.skip = nn.Conv1d(residual_channels, skip_channels, 1)

        def forward(self, x):
            out = lib.tanh(self.filter(x)) * lib.sigmoid(self.gate(x))
            return x + self.residual(out), self.skip(out)

    class WaveNet(nn.Module):
        def __init__(self, quantization=16, residual_channels=8, skip_channels=8, dilations=(1, 2, 4, 8)):
            super().__init__()
            self.quantization = quantization
            self.start = CausalConv1d(quantization, residual_channels, 2)
            self.blocks = nn.ModuleList([ResidualBlock(residual_channels, skip_channels, d) for d in dilations])
            self.end = nn.Sequential(nn.ReLU(), nn.Conv1d(skip_channels, skip_channels, 1), nn.ReLU(),
                                     nn.Conv1d(skip_channels, quantization, 1))

        def forward(self, audio):
            mu = self.quantization - 1
            companded = lib.sign(audio) * lib.log1p(mu * lib.abs(audio)) / math.log1p(mu)
            classes = ((companded + 1) / 2 * mu + 0.5).long().clamp(0, mu)
            x = F.one_hot(classes, self.quantization).transpose(1, 2).to(audio.dtype)
            x = self.start(x)
            skips = 0
            for block in self.blocks:
                x, skip = block(x)
                skips = skips + skip
            return self.end(skips), classes

    class Models(nn.Module):
        def __init__(self):
            super().__init__()
            self.capsnet = CapsuleNet()
            self.t5 = T5Attention()
            self.wavenet = WaveNet()

    return Models()


def _capsules_t5_and_wavenet(np, torch, ddpc):
    def losses(lib, models, images, labels, hidden, audio):
        F = lib.nn.functional
        classes = models.capsnet(images)
        one_hot = lib.eye(3).index_select(dim=0, index=labels)
        left = F.relu(0.9 - classes, inplace=True) ** 2
        right = F.relu(classes - 0.1, inplace=True) ** 2
        margin_loss = (one_hot * left + 0.5 * (1.0 - one_hot) * right).sum() / images.size(0)
        attended = models.t5(hidden)
        logits, quantized = models.wavenet(audio)
        wave_loss = F.cross_entropy(logits[:, :, :-1], quantized[:, 1:])
        return (classes, attended, logits), margin_loss + attended.pow(2).mean() + wave_loss

    def adam(lib, models):
        return lib.optim.Adam(models.parameters(), lr=1e-3)

    batches = [(_images(np, (2, 1, 8, 8), s), _labels(np, 2, 3, s), _images(np, (2, 20, 8), s + 5),
                np.sin(np.linspace(0, 12, 40) * (s + 1))[None].repeat(2, 0).astype(np.float32) * [[0.9], [0.4]])
               for s in range(3)]
    batches = [tuple(a.astype(np.float32) if a.dtype.kind == "f" else a for a in b) for b in batches]
    _train_alike(np, torch, ddpc, _capsules_t5_wavenet, batches, losses, adam)


GROUPS = {"mobilenet_v2": _mobilenet, "efficientnet_mbconv": _efficientnet, "densenet": _densenet_cat,
          "convnext": _convnext_block,
          "swin": _swin_window_attention, "cyclegan": _cyclegan_generator, "wgan_gp": _wgan_gp,
          "seq2seq_attention": _seq2seq_attention, "transformer_translation": _transformer_translation,
          "bert": _bert_encoder, "dqn": _dqn_update, "policy_gradients": _policy_gradients,
          "time_sequence_lbfgs": _time_sequence_lbfgs, "style_transfer": _style_transfer,
          "spatial_transformer": _spatial_transformer, "fgsm": _fgsm, "super_resolution": _super_resolution,
          "maml": _maml, "custom_functions": _custom_autograd_functions, "sngan": _spectral_norm_gan,
          "vq_vae": _vq_vae, "pointnet": _point_net,
          "bilstm_crf": _bilstm_crf_tagger, "chatbot": _chatbot_packed, "gradcam": _gradcam,
          "simclr_moco": _simclr_moco, "pixelcnn": _pixel_cnn, "sac": _soft_actor_critic,
          "llama": _llama_decoder, "mixture_of_experts": _mixture_of_experts,
          "protonet_charrnn_distill": _protonet_charrnn_distill, "gcn": _graph_convolution,
          "realnvp": _normalizing_flow, "mixup_cutmix": _mixup_cutmix,
          "capsules_t5_wavenet": _capsules_t5_and_wavenet}
GROUPS = {name: _reporting(group) for name, group in GROUPS.items()}
test_matches_pytorch = torch_group_test(__file__, GROUPS)

if __name__ == "__main__":
    run_torch_group(GROUPS)
