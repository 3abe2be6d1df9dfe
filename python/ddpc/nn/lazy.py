"""Lazy modules (as torch.nn.Lazy*): layers whose input size (in_features,
in_channels, num_features) is inferred from the first input. Until then their
parameters and running statistics are UninitializedParameter and
UninitializedBuffer; the first forward gives them their shapes, initialises
them as the layer's own class would, and turns the module into that class
(``cls_to_become``), so it forwards and prints as, say, a Linear from then on.

Build optimizers, DataParallel and DistributedDataParallel after that first
forward: they refuse uninitialized parameters, where most of PyTorch's
optimizers accept them and work once the forward has given them shapes. A
state dict of initialized parameters loaded into a lazy module gives them
their shapes; the sizes the layer infers from its first input are then
checked against them by the forward itself (where PyTorch leaves
``in_features`` and the like at 0).
"""

from ..autograd import no_grad
from ..tensor import full
from .modules import (BatchNorm1d, BatchNorm2d, BatchNorm3d, Conv1d, Conv2d, Conv3d, ConvTranspose1d, ConvTranspose2d,
                      ConvTranspose3d, InstanceNorm1d, InstanceNorm2d, InstanceNorm3d, Linear, UninitializedBuffer,
                      UninitializedParameter, _ConvTransposeNd, _InstanceNorm, is_lazy)

__all__ = ["LazyModuleMixin", "LazyLinear", "LazyConv1d", "LazyConv2d", "LazyConv3d", "LazyConvTranspose1d",
           "LazyConvTranspose2d", "LazyConvTranspose3d", "LazyBatchNorm1d", "LazyBatchNorm2d", "LazyBatchNorm3d",
           "LazyInstanceNorm1d", "LazyInstanceNorm2d", "LazyInstanceNorm3d"]


class LazyModuleMixin:
    """Mixed in before a layer class: a forward pre-hook calls
    ``initialize_parameters(*args, **kwargs)`` on the first input, then the
    module becomes ``cls_to_become``."""

    cls_to_become = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._initialize_hook = self.register_forward_pre_hook(self._infer_parameters, with_kwargs=True)

    def initialize_parameters(self, *args, **kwargs):
        raise NotImplementedError(f"initialize_parameters is not implemented for {type(self).__name__}")

    def has_uninitialized_params(self):
        """Whether a parameter or buffer of this module (not of its children) has no shape yet."""
        return any(is_lazy(t) for table in (self._parameters, self._buffers) for t in table.values())

    @staticmethod
    def _infer_parameters(module, args, kwargs):
        with no_grad():
            module.initialize_parameters(*args, **kwargs)
        if module.has_uninitialized_params():
            raise RuntimeError(f"module {type(module).__name__} has not been fully initialized")
        module._initialize_hook.remove()
        del module._initialize_hook
        if module.cls_to_become is not None:
            module.__class__ = module.cls_to_become


class LazyLinear(LazyModuleMixin, Linear):
    """Linear with ``in_features`` inferred from ``input.shape[-1]``."""

    cls_to_become = Linear

    def __init__(self, out_features, bias=True, device=None, dtype=None):
        super().__init__(0, 0, False)
        self.weight = UninitializedParameter(device=device, dtype=dtype)
        self.out_features = int(out_features)
        if bias:
            self.bias = UninitializedParameter(device=device, dtype=dtype)

    def reset_parameters(self):
        if not self.has_uninitialized_params() and self.in_features != 0:
            super().reset_parameters()

    def initialize_parameters(self, input):
        self.in_features = input.shape[-1]
        if self.has_uninitialized_params():
            self.weight.materialize((self.out_features, self.in_features))
            if self.bias is not None:
                self.bias.materialize((self.out_features,))
            self.reset_parameters()


class _LazyConvNd(LazyModuleMixin):
    """``in_channels`` from dim 1 of a batched input, dim 0 of an unbatched one."""

    def _lazy_init(self, out_channels, bias, device, dtype):
        self.weight = UninitializedParameter(device=device, dtype=dtype)
        self.out_channels = int(out_channels)
        if bias:
            self.bias = UninitializedParameter(device=device, dtype=dtype)

    def reset_parameters(self):
        if not self.has_uninitialized_params() and self.in_channels != 0:
            super().reset_parameters()

    def initialize_parameters(self, input, *args, **kwargs):
        batched = self._dims + 2
        if input.ndim not in (batched - 1, batched):
            raise ValueError(f"{type(self).__name__}: expected a {batched - 1}-d (unbatched) or {batched}-d "
                             f"(batched) input, got shape {input.shape}")
        self.in_channels = input.shape[1] if input.ndim == batched else input.shape[0]
        if self.in_channels % self.groups:
            raise ValueError(f"{type(self).__name__}: in_channels ({self.in_channels}) must be divisible by groups "
                             f"({self.groups})")
        if self.has_uninitialized_params():
            if isinstance(self, _ConvTransposeNd):
                shape = (self.in_channels, self.out_channels // self.groups)
            else:
                shape = (self.out_channels, self.in_channels // self.groups)
            self.weight.materialize(shape + self.kernel_size)
            if self.bias is not None:
                self.bias.materialize((self.out_channels,))
            self.reset_parameters()


class _LazyConv(_LazyConvNd):
    def __init__(self, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1, bias=True,
                 padding_mode="zeros", device=None, dtype=None):
        super().__init__(0, 0, kernel_size, stride, padding, dilation, groups, False, padding_mode)
        self._lazy_init(out_channels, bias, device, dtype)


class _LazyConvTranspose(_LazyConvNd):
    def __init__(self, out_channels, kernel_size, stride=1, padding=0, output_padding=0, groups=1, bias=True,
                 dilation=1, padding_mode="zeros", device=None, dtype=None):
        super().__init__(0, 0, kernel_size, stride, padding, output_padding, groups, False, dilation, padding_mode)
        self._lazy_init(out_channels, bias, device, dtype)


class LazyConv1d(_LazyConv, Conv1d):
    cls_to_become = Conv1d


class LazyConv2d(_LazyConv, Conv2d):
    cls_to_become = Conv2d


class LazyConv3d(_LazyConv, Conv3d):
    cls_to_become = Conv3d


class LazyConvTranspose1d(_LazyConvTranspose, ConvTranspose1d):
    cls_to_become = ConvTranspose1d


class LazyConvTranspose2d(_LazyConvTranspose, ConvTranspose2d):
    cls_to_become = ConvTranspose2d


class LazyConvTranspose3d(_LazyConvTranspose, ConvTranspose3d):
    cls_to_become = ConvTranspose3d


class _LazyNorm(LazyModuleMixin):
    """``num_features`` from dim 1 of the input (dim 0 of an unbatched
    instance norm's, where PyTorch takes dim 1 too). As PyTorch's, the lazy
    instance norms default to affine=True and track_running_stats=True (the
    batch norms' defaults, not InstanceNorm's)."""

    def __init__(self, eps=1e-5, momentum=0.1, affine=True, track_running_stats=True, device=None, dtype=None, *,
                 bias=True):
        # Built with one feature and neither weights nor statistics; those it gets are set uninitialized below.
        super().__init__(1, eps, momentum, False, False, device, dtype, bias=False)
        self._set_num_features(0)
        self.affine, self.track_running_stats = bool(affine), bool(track_running_stats)
        if self.affine:
            self.weight = UninitializedParameter(device=device, dtype=dtype)
            if bias:
                self.bias = UninitializedParameter(device=device, dtype=dtype)
        if self.track_running_stats:
            self.running_mean = UninitializedBuffer(device=device, dtype=dtype)
            self.running_var = UninitializedBuffer(device=device, dtype=dtype)
            self.num_batches_tracked = full((), 0, dtype="int64", device=device)

    def _set_num_features(self, n):
        self.num_features = n

    def initialize_parameters(self, input):
        unbatched = isinstance(self, _InstanceNorm) and input.ndim == self._dims[0]
        self._set_num_features(input.shape[0] if unbatched else input.shape[1])
        if not self.has_uninitialized_params():
            return
        for name in ("weight", "bias", "running_mean", "running_var"):
            t = getattr(self, name)
            if is_lazy(t):
                t.materialize((self.num_features,))
        # The values the layer's own class starts with.
        for name, value in (("weight", 1.0), ("bias", 0.0), ("running_mean", 0.0), ("running_var", 1.0),
                            ("num_batches_tracked", 0)):
            if getattr(self, name) is not None:
                getattr(self, name).fill_(value)


class LazyBatchNorm1d(_LazyNorm, BatchNorm1d):
    cls_to_become = BatchNorm1d


class LazyBatchNorm2d(_LazyNorm, BatchNorm2d):
    cls_to_become = BatchNorm2d


class LazyBatchNorm3d(_LazyNorm, BatchNorm3d):
    cls_to_become = BatchNorm3d


class LazyInstanceNorm1d(_LazyNorm, InstanceNorm1d):
    cls_to_become = InstanceNorm1d


class LazyInstanceNorm2d(_LazyNorm, InstanceNorm2d):
    cls_to_become = InstanceNorm2d


class LazyInstanceNorm3d(_LazyNorm, InstanceNorm3d):
    cls_to_become = InstanceNorm3d
