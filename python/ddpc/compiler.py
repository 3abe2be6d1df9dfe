"""ddpc.compiler, shaped like torch.compiler. ddpc runs eagerly, so nothing
is ever being compiled: ``is_compiling()`` is False, ``disable`` and the
graph-marking decorators return their function, and ``compile`` returns
its model (as ``ddpc.compile``)."""

from .backends import compile

__all__ = ["allow_in_graph", "assume_constant_result", "compile", "disable", "is_compiling", "is_dynamo_compiling",
           "is_exporting", "reset"]


def is_compiling():
    return False


is_dynamo_compiling = is_exporting = is_compiling


def disable(fn=None, recursive=True, *, reason=None):
    """``@disable`` and ``@disable(recursive=...)``: the function itself."""
    return fn if fn is not None else (lambda f: f)


def allow_in_graph(fn):
    return fn


assume_constant_result = allow_in_graph


def reset():
    """Clears compiled code: there is none."""
