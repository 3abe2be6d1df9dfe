"""Execution settings, as torch.backends and torch's module-level switches:
whether float32 GEMMs on GPUs may use TF32 tensor cores
(``backends.cuda.matmul.allow_tf32``, ``set_float32_matmul_precision``),
the ``backends.cudnn`` flags that ported scripts set, ``compile``, and
whether ops must be deterministic (``use_deterministic_algorithms``).

Determinism: every ddpc op on the host, and every ddpc kernel on a GPU but
those below, gives the same bits on every run. The GPU paths that add
floats with atomicAdd, in an order that varies from run to run, do not:
scatter_add, index_add, index_put with accumulate, gather's and advanced
indexing's backward, scatter_reduce (sum, mean and prod of floats),
bincount, histogram and histogramdd with weights, embedding's and
embedding_bag's backward, max and average pooling's backward, and
grid_sample's backward. (Counts, as histc's, add in int64: exact in any order.)
With ``use_deterministic_algorithms(True)`` those raise RuntimeError on a
GPU (a UserWarning with ``warn_only=True``), as PyTorch does for its ops
without a deterministic implementation; ddpc has no deterministic
alternative for them, so it raises also where PyTorch switches to one
(scatter_add, index_add, index_put, embedding's backward).

Where ddpc differs: it does not use cuDNN (its convolutions are im2col and
cuBLAS GEMMs, so they follow ``cuda.matmul.allow_tf32``), so the ``cudnn``
flags are accepted and kept but change nothing; and ddpc runs eagerly, so
``compile(model)`` returns ``model`` itself.
"""

import contextlib
import sys
import warnings

from . import _C

__all__ = ["are_deterministic_algorithms_enabled", "compile", "cuda", "cudnn", "get_float32_matmul_precision", "mps",
           "is_deterministic_algorithms_warn_only_enabled", "set_float32_matmul_precision",
           "use_deterministic_algorithms"]

_PRECISIONS = ("highest", "high", "medium")
_precision = "highest"


class _Matmul:
    @property
    def allow_tf32(self):
        """Whether float32 GEMMs on GPUs may round their inputs to TF32 (10-bit mantissas; off by default)."""
        return _C.allow_tf32()

    @allow_tf32.setter
    def allow_tf32(self, value):
        global _precision
        _C.set_allow_tf32(bool(value))
        _precision = "high" if value else "highest"


class _Cuda:
    """torch.backends.cuda: the TF32 switch, and the scaled-dot-product-attention
    kernel choices, which are kept but change nothing: ddpc's attention has
    one implementation (see ``nn.attention``)."""

    matmul = _Matmul()
    _sdp = dict(flash=True, mem_efficient=True, math=True, cudnn=True)

    @staticmethod
    def is_built():
        return _C.cuda_compiled()

    def sdp_kernel(self, enable_flash=True, enable_math=True, enable_mem_efficient=True, enable_cudnn=True):
        return self._sdp_choice(dict(flash=enable_flash, math=enable_math, mem_efficient=enable_mem_efficient,
                                     cudnn=enable_cudnn))

    @contextlib.contextmanager
    def _sdp_choice(self, choice):
        before = dict(self._sdp)
        self._sdp.update((name, bool(on)) for name, on in choice.items())
        try:
            yield
        finally:
            self._sdp.update(before)


def _sdp_switches(name):
    def enable(self, enabled):
        self._sdp[name] = bool(enabled)

    def enabled(self):
        return self._sdp[name]

    return enable, enabled


for _kind in ("flash", "mem_efficient", "math", "cudnn"):
    _enable, _enabled = _sdp_switches(_kind)
    setattr(_Cuda, f"enable_{_kind}_sdp", _enable)
    setattr(_Cuda, f"{_kind}_sdp_enabled", _enabled)


class _Cudnn:
    """Accepted for ported scripts; ddpc does not use cuDNN (see the module docstring)."""

    benchmark = False
    deterministic = False
    enabled = True
    allow_tf32 = True

    @staticmethod
    def is_available():
        return False

    @staticmethod
    def version():
        return None


class _Mps:
    """Apple's GPUs, which ddpc does not drive (scripts ask before choosing a device)."""

    @staticmethod
    def is_available():
        return False

    @staticmethod
    def is_built():
        return False


cuda = _Cuda()
cudnn = _Cudnn()
mps = _Mps()
# torch.backends' submodule paths: ``import ddpc.backends.cudnn as cudnn`` gives the same object.
for _name in ("cuda", "cudnn", "mps"):
    sys.modules[f"{__name__}.{_name}"] = globals()[_name]


def set_float32_matmul_precision(precision):
    """'highest': float32 GEMMs in full float32; 'high' or 'medium': TF32 tensor cores on GPUs."""
    global _precision
    if precision not in _PRECISIONS:
        raise ValueError(f"float32 matmul precision must be one of {_PRECISIONS}, got {precision!r}")
    _C.set_allow_tf32(precision != "highest")
    _precision = precision


def get_float32_matmul_precision():
    return _precision


def compile(model=None, **kwargs):
    """Returns ``model`` unchanged (ddpc runs eagerly); also usable as
    ``@compile`` and ``@compile(mode=...)``, as torch.compile."""
    if model is None:
        return lambda fn: fn
    return model


class _Determinism:
    enabled = False
    warn_only = False


def use_deterministic_algorithms(mode, *, warn_only=False):
    """Whether ops must give the same result on every run: with ``mode`` True
    the GPU ops that add with atomics raise RuntimeError (warn with
    ``warn_only``); see the module docstring for the list."""
    _Determinism.enabled, _Determinism.warn_only = bool(mode), bool(warn_only)


def are_deterministic_algorithms_enabled():
    return _Determinism.enabled


def is_deterministic_algorithms_warn_only_enabled():
    return _Determinism.warn_only


def alert_not_deterministic(what, t):
    """Raises (warns with warn_only) when deterministic algorithms were asked
    for and ``what`` is about to add floats into t (a tensor or a _C.Buffer)
    with atomics on a GPU."""
    buf = getattr(t, "_buf", t)
    if not (_Determinism.enabled and buf.device >= 0 and buf.dtype in ("float32", "float64", "float16", "bfloat16")):
        return
    message = (f"{what} does not have a deterministic implementation on a GPU, but you set "
               "'ddpc.use_deterministic_algorithms(True)'; run it on the host or turn determinism off for it")
    if _Determinism.warn_only:
        warnings.warn(message, UserWarning, stacklevel=3)
    else:
        raise RuntimeError(message)
