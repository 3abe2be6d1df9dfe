"""PyTorch's ``torch._foreach_*`` list forms, which EMA helpers and
hand-written optimizers call: each applies a Tensor method to every tensor of
a list, pairing it with the matching entry of the other arguments where
those are lists (of tensors or numbers), else with the same value. The
``_`` forms write in place and return None; the others return a list.
ddpc runs them as a loop over the tensors (PyTorch fuses them into fewer
kernels on GPUs)."""

from ._C import ArgumentError

# Methods taking (self, *others) that have _foreach_ forms; a name ending in "_" is in-place.
_METHODS = ("add", "sub", "mul", "div", "lerp", "addcmul", "addcdiv", "maximum", "minimum", "pow", "clamp_min",
            "clamp_max", "abs", "neg", "sqrt", "rsqrt", "exp", "log", "reciprocal", "sigmoid", "sign", "zero_", "copy_")
_OUT_OF_PLACE_ONLY = ("maximum", "minimum")
_IN_PLACE_ONLY = ("zero_", "copy_")


def _each(args, n):
    """The i-th value of each argument: lists (and tuples) are paired by position, anything else is shared."""
    for a in args:
        if isinstance(a, (list, tuple)) and len(a) != n:
            raise ArgumentError(f"_foreach: argument lists must be as long as the tensor list ({n}), got {len(a)}")
    return [[a[i] if isinstance(a, (list, tuple)) else a for a in args] for i in range(n)]


def _form(method, in_place):
    def apply(tensors, *args, **kwargs):
        tensors = list(tensors)
        results = [getattr(t, method)(*row, **kwargs) for t, row in zip(tensors, _each(args, len(tensors)))]
        return None if in_place else results

    apply.__name__ = apply.__qualname__ = f"_foreach_{method}"
    apply.__doc__ = f"``t.{method}(...)`` for each tensor t of the list (see ddpc._foreach)."
    return apply


def _forms():
    forms = {}
    for name in _METHODS:
        if name in _IN_PLACE_ONLY:
            forms[f"_foreach_{name}"] = _form(name, True)
            continue
        forms[f"_foreach_{name}"] = _form(name, False)
        if name not in _OUT_OF_PLACE_ONLY:
            forms[f"_foreach_{name}_"] = _form(name + "_", True)
    forms["_foreach_norm"] = lambda tensors, ord=2: [t.norm(ord) for t in tensors]
    return forms
