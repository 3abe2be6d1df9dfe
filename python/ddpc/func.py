"""ddpc.func: ``functional_call``, as torch.func's: a module run with some of
its parameters and buffers replaced by given tensors for one call, so that
gradients flow into those tensors (MAML's fast weights, per-sample
parameters, a Hessian with respect to a module's weights)."""

from .tensor import Tensor


def _members(module):
    """name -> (owning module, table name, key) for every parameter and buffer, tied ones under each name."""
    out = {}
    for prefix, m in module.named_modules(remove_duplicate=False):
        for table in ("_parameters", "_buffers"):
            for key, value in getattr(m, table).items():
                if value is not None:
                    out[f"{prefix}.{key}" if prefix else key] = (m, table, key)
    return out


def _merged(dicts):
    dicts = (dicts,) if isinstance(dicts, dict) else tuple(dicts)
    merged = {}
    for d in dicts:
        for name, value in d.items():
            if name in merged:
                raise ValueError(f"functional_call: {name!r} appears in more than one of the given dicts")
            if not isinstance(value, Tensor):
                raise TypeError(f"functional_call: {name!r} must be a ddpc tensor, got {type(value).__name__}")
            merged[name] = value
    return merged


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *, tie_weights=True, strict=False):
    """``module(*args, **kwargs)`` with the parameters and buffers named in
    ``parameter_and_buffer_dicts`` (a dict, or a tuple of dicts, of full
    names as ``named_parameters`` gives them) replaced by the given tensors
    for this call only; the module is as before afterwards, also when the
    call raises. With ``tie_weights`` a tensor given for one of several
    names of a shared parameter replaces it under all of them; ``strict``
    requires a tensor for every parameter and buffer. A name the module does
    not have raises."""
    values = _merged(parameter_and_buffer_dicts)
    members = _members(module)
    unknown = sorted(set(values) - set(members))
    if unknown:
        raise ValueError(f"functional_call: the module has no parameter or buffer named {unknown[0]!r}")
    if tie_weights:  # a given tensor stands for every name of the same original
        originals = {name: id(getattr(m, table)[key]) for name, (m, table, key) in members.items()}
        by_original = {originals[name]: value for name, value in values.items()}
        values = {name: by_original[originals[name]] for name in members if originals[name] in by_original}
    if strict and set(values) != set(members):
        missing = sorted(set(members) - set(values))
        raise RuntimeError(f"functional_call: strict=True and no tensor was given for {missing[0]!r}")
    saved = []
    try:
        for name, value in values.items():
            m, table, key = members[name]
            saved.append((getattr(m, table), key, getattr(m, table)[key]))
            getattr(m, table)[key] = value
        args = () if args is None else args if isinstance(args, tuple) else (args,)
        return module(*args, **(kwargs or {}))
    finally:
        for table, key, original in reversed(saved):
            table[key] = original
