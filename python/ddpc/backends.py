"""Execution settings, as torch.backends and torch's module-level switches:
whether float32 GEMMs on GPUs may use TF32 tensor cores
(``backends.cuda.matmul.allow_tf32``, ``set_float32_matmul_precision``),
the ``backends.cudnn`` flags that ported scripts set, and ``compile``.

Where ddpc differs: it does not use cuDNN (its convolutions are im2col and
cuBLAS GEMMs, so they follow ``cuda.matmul.allow_tf32``), so the ``cudnn``
flags are accepted and kept but change nothing; and ddpc runs eagerly, so
``compile(model)`` returns ``model`` itself.
"""

from . import _C

__all__ = ["compile", "cuda", "cudnn", "get_float32_matmul_precision", "set_float32_matmul_precision"]

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
    matmul = _Matmul()

    @staticmethod
    def is_built():
        return bool(_C.build_info()["cuda"])


class _Cudnn:
    """Accepted for ported scripts; ddpc does not use cuDNN (see the module docstring)."""

    benchmark = False
    deterministic = False
    enabled = True
    allow_tf32 = True

    @staticmethod
    def is_available():
        return False


cuda = _Cuda()
cudnn = _Cudnn()


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
