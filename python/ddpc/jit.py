"""ddpc.jit, shaped like torch.jit, for model code that is written to be
scriptable: ``@jit.script`` functions, ``jit.is_scripting()`` branches,
``@jit.ignore``/``@jit.unused`` methods, ``jit.Final`` annotations.

Where ddpc differs: ddpc runs eagerly and has no TorchScript, so ``script``
and ``trace`` return what they are given (the function or module runs as
Python, with the same results), ``is_scripting()`` and ``is_tracing()`` are
False, and ``fork`` runs its function at once. ``save``/``load`` of a
TorchScript archive are refused: save ``model.state_dict()`` with
``ddpc.save`` instead.
"""

import contextlib
import typing

__all__ = ["Attribute", "Final", "annotate", "export", "fork", "freeze", "ignore", "interface", "is_scripting",
           "is_tracing", "load", "optimize_for_inference", "optimized_execution", "save", "script", "script_if_tracing",
           "trace", "trace_module", "unused", "wait"]

Final = typing.Final


def _same(obj, *args, **kwargs):
    return obj


script = trace = freeze = optimize_for_inference = interface = script_if_tracing = export = unused = _same


def trace_module(mod, inputs, *args, **kwargs):
    return mod


def ignore(drop=False, **kwargs):
    """``@ignore`` and ``@ignore(drop=...)``: the function itself."""
    return drop if callable(drop) else _same


def is_scripting():
    return False


def is_tracing():
    return False


def annotate(the_type, the_value):
    return the_value


def Attribute(value, the_type=None):  # noqa: N802 (torch.jit's name)
    return value


class _Done:
    """The result of ``fork``: the function already ran, ``wait`` gives its value."""

    def __init__(self, value):
        self._value = value

    def wait(self):
        return self._value


def fork(func, *args, **kwargs):
    return _Done(func(*args, **kwargs))


def wait(future):
    return future.wait()


def optimized_execution(should_optimize=True):
    return contextlib.nullcontext()


def save(m, f, _extra_files=None):
    raise RuntimeError("ddpc has no TorchScript archives; save the weights with ddpc.save(model.state_dict(), f)")


def load(f, map_location=None, _extra_files=None):
    raise RuntimeError("ddpc cannot read TorchScript archives (torch.jit.save); save the weights from PyTorch with "
                       "torch.save(model.state_dict(), f) and read them with ddpc.load")
