"""ddpc.func, as torch.func: function transforms (``grad``,
``grad_and_value``, ``vjp``, ``jvp``, ``linearize``, ``jacrev``, ``jacfwd``,
``hessian``, ``vmap``) and ``functional_call``, a module run with some of its
parameters and buffers replaced by given tensors for one call, so that
gradients flow into those tensors (MAML's fast weights, per-sample
parameters, a Hessian with respect to a module's weights, ensembles with
``stack_module_state``)."""

import contextlib
import functools
import threading

from . import _autograd_functional as _fn
from . import _pytree
from . import autograd as _ag
from ._forward_ad import check_linked
from ._function import forward_mode_pass
from .tensor import Tensor, default_generator, zeros


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


def _untied(values, members):
    """``values`` with a tensor given for one name of a shared parameter or
    buffer put under all its names; different tensors given for two names of
    one raise, as in PyTorch."""
    names_of = {}
    for name, (m, table, key) in members.items():
        names_of.setdefault(id(getattr(m, table)[key]), []).append(name)
    untied = dict(values)
    for names in names_of.values():
        given = [n for n in names if n in values]
        if len({id(values[n]) for n in given}) > 1:
            raise ValueError(f"functional_call got multiple values for keys {sorted(names)}, which are tied. "
                             "Consider using tie_weights=False")
        if given:
            untied.update((n, values[given[0]]) for n in names)
    return untied


def _swap(module, name, value):
    """Puts ``value`` under the dotted ``name`` in ``module``, as PyTorch's
    functional_call does: into the parameter or buffer table that holds the
    name, else as a plain attribute (which must not be anything but a tensor
    already); returns the function that undoes it."""
    prefix, _, attr = name.rpartition(".")
    m = module.get_submodule(prefix)
    for table in (m._parameters, m._buffers):
        if attr in table:
            original = table[attr]
            table[attr] = value
            return lambda: table.__setitem__(attr, original)
    if not hasattr(m, attr):
        setattr(m, attr, value)
        return lambda: delattr(m, attr)
    original = getattr(m, attr)
    if not isinstance(original, Tensor):
        raise TypeError(f"functional_call: {name!r} names a {type(original).__name__} attribute of "
                        f"{type(m).__name__}, not a tensor")
    setattr(m, attr, value)
    return lambda: setattr(m, attr, original)


def functional_call(module, parameter_and_buffer_dicts, args=None, kwargs=None, *, tie_weights=True, strict=False):
    """``module(*args, **kwargs)`` with the parameters and buffers named in
    ``parameter_and_buffer_dicts`` (a dict, or a tuple of dicts, of full
    names as ``named_parameters`` gives them) replaced by the given tensors
    for this call only; the module is as before afterwards, also when the
    call raises. With ``tie_weights`` a tensor given for one of several
    names of a shared parameter replaces it under all of them (two different
    tensors for names of one raise); ``strict`` requires a tensor for every
    parameter and buffer and no other names. Without it, as in PyTorch, a
    name that is not a parameter or buffer becomes a plain attribute of its
    submodule for the call."""
    values = _merged(parameter_and_buffer_dicts)
    members = _members(module)
    if tie_weights:
        values = _untied(values, members)
    if strict:
        errors = [f"{what} key(s): {', '.join(map(repr, sorted(keys)))}." for what, keys in
                  (("Unexpected", set(values) - set(members)), ("Missing", set(members) - set(values))) if keys]
        if errors:
            raise RuntimeError(f"Error(s) in reparametrizing for {type(module).__name__}:\n\t" + "\n\t".join(errors))
    undo = []
    try:
        for name, value in values.items():
            undo.append(_swap(module, name, value))
        args = () if args is None else args if isinstance(args, tuple) else (args,)
        return module(*args, **(kwargs or {}))
    finally:
        for restore in reversed(undo):
            restore()


# ---- derivative transforms -----------------------------------------------------------
#
# Each transform runs ``func`` on fresh leaves that require grad and asks
# ``autograd.grad`` for the derivatives. Results keep their graph only where
# something outside can still differentiate them: inside another transform
# (grad of grad, a Hessian), where an argument already required grad, or,
# with grad mode on, where a result depends on a tensor that requires grad
# which func captured (a module's parameters: a physics-informed loss on
# vmap(grad(model)) trains the model). Elsewhere they come back detached, as
# torch.func's do.

_state = threading.local()


@contextlib.contextmanager
def _transform():
    _state.depth = getattr(_state, "depth", 0) + 1
    try:
        yield
    finally:
        _state.depth -= 1


def _keeps_graph(leaves):
    return getattr(_state, "depth", 0) > 0 or any(isinstance(t, Tensor) and t.requires_grad for t in leaves)


def _reaches_outside(tree, inner):
    """Whether the graph of a tensor in ``tree`` reaches a tensor that
    requires grad other than the leaves ``inner``: one the function captured,
    whose gradient an outer backward must still get through the result."""
    inner = {id(t) for t in inner}
    stack, seen = [], set()
    for t in _pytree.flatten(tree)[0]:
        if isinstance(t, Tensor) and t.requires_grad:
            if t.grad_fn is None and id(t) not in inner:
                return True
            stack.append(t.grad_fn)
    while stack:
        node = stack.pop()
        if node is None or id(node) in seen:
            continue
        seen.add(id(node))
        for e in node.edges:
            if isinstance(e, Tensor):
                if id(e) not in inner:
                    return True
            elif e is not None:
                stack.append(e)
    return False


def _tensor_leaves(tree, what):
    leaves, structure = _pytree.flatten(tree)
    for t in leaves:
        if not isinstance(t, Tensor):
            raise TypeError(f"{what}: expected ddpc tensors (or tuples, lists, dicts of them), got "
                            f"{type(t).__name__}")
    return leaves, structure


def _argnums(argnums, nargs, what):
    """(the positions, whether argnums was a single int)."""
    single = isinstance(argnums, int)
    positions = (argnums,) if single else tuple(argnums) if isinstance(argnums, tuple) else None
    if not positions or not all(isinstance(i, int) for i in positions):
        raise TypeError(f"{what}: argnums must be an int or a non-empty tuple of ints, got {argnums!r}")
    if any(not -nargs <= i < nargs for i in positions):
        raise RuntimeError(f"{what}: argnums {argnums!r} is out of range for a function called with {nargs} "
                           "positional arguments")
    positions = tuple(i % nargs for i in positions)
    if len(set(positions)) != len(positions):
        raise RuntimeError(f"{what}: argnums {argnums!r} names an argument twice")
    return positions, single


class _Differentiated:
    """The arguments at ``argnums`` made differentiable: their tensor leaves,
    the arguments to call ``func`` with, and the derivatives put back into
    the arguments' structure."""

    def __init__(self, args, argnums, what):
        self.positions, self.single = _argnums(argnums, len(args), what)
        self.structures, leaves = [], []
        for i in self.positions:
            found, structure = _tensor_leaves(args[i], what)
            self.structures.append((len(leaves), len(found), structure))
            leaves.extend(found)
        self.keep = _keeps_graph(leaves)
        self.grad_enabled = _ag.is_grad_enabled()
        self.captures = False
        self.leaves = _fn._differentiable(leaves, self.keep)
        self.inner = list(self.leaves)  # the tensors whose graph ends with the transform
        self.args = list(args)
        for i, (start, n, structure) in zip(self.positions, self.structures):
            self.args[i] = _pytree.unflatten(self.leaves[start:start + n], structure)

    def capture(self, outputs):
        """Notes, once func ran, whether its outputs depend on captured
        tensors that require grad; returns whether the derivatives must be
        taken with ``create_graph`` for results to keep their graph."""
        self.captures = not self.keep and self.grad_enabled and _reaches_outside(outputs, self.inner)
        return self.keep or self.captures

    def arranged(self, per_leaf):
        """``per_leaf`` (one value per leaf) in the structure of the arguments at argnums."""
        trees = tuple(_pytree.unflatten(per_leaf[start:start + n], structure)
                      for start, n, structure in self.structures)
        return trees[0] if self.single else trees

    def finish(self, tree):
        if self.keep:
            return tree
        if self.captures:
            return _pytree.tree_map(lambda v: v if _reaches_outside(v, self.inner) else _detached(v), tree)
        return _pytree.tree_map(_detached, tree)


def _detached(value):
    return value.detach() if isinstance(value, Tensor) else value


def _split_aux(out, has_aux, what):
    if not has_aux:
        return out, None
    if not isinstance(out, tuple) or len(out) != 2:
        raise RuntimeError(f"{what}(f, has_aux=True): f must return a (output, aux) tuple")
    return out


def grad_and_value(func, argnums=0, has_aux=False):
    """A function that returns ``(gradient, value)`` of ``func``, which must
    return a one-element tensor (with ``has_aux``, an ``(output, aux)``
    pair, and then ``(gradient, (value, aux))``). The gradient is taken with
    respect to the positional arguments at ``argnums`` and has their
    structure (a tuple of them for a tuple of argnums). Composes with itself
    and the other transforms here (``grad(grad(f))``, ``vmap(grad(f))``)."""

    def wrapper(*args, **kwargs):
        d = _Differentiated(args, argnums, "grad")
        with _ag.enable_grad(), _transform():
            out, aux = _split_aux(func(*d.args, **kwargs), has_aux, "grad")
            if not isinstance(out, Tensor) or out.numel() != 1:
                got = f"a tensor of shape {tuple(out.shape)}" if isinstance(out, Tensor) else type(out).__name__
                raise RuntimeError(f"grad(f)(*args): expected f(*args) to return a one-element tensor, got {got}")
            grads = _fn._grads_of_scalar(out, d.leaves, d.capture(out), False, "grad")
        value = d.finish(out if not has_aux else (out, aux))
        return d.finish(d.arranged(grads)), value

    return functools.wraps(func)(wrapper)


def grad(func, argnums=0, has_aux=False):
    """The gradient of ``func`` (as ``grad_and_value``, without the value;
    with ``has_aux``, ``(gradient, aux)``)."""
    both = grad_and_value(func, argnums, has_aux)

    def wrapper(*args, **kwargs):
        grads, value = both(*args, **kwargs)
        return (grads, value[1]) if has_aux else grads

    return functools.wraps(func)(wrapper)


class _Traced:
    """``func`` run once on the arguments at ``argnums`` made differentiable:
    its output and aux, the output's tensor leaves, and whether derivatives
    of them must be taken with ``create_graph``."""

    def __init__(self, func, args, argnums, has_aux, what, kwargs=None):
        self.d = _Differentiated(args, argnums, what)
        self.what = what
        with _ag.enable_grad(), _transform():
            self.out, self.aux = _split_aux(func(*self.d.args, **(kwargs or {})), has_aux, what)
        self.outputs, self.structure = _tensor_leaves(self.out, f"{what}: the output of f")
        self.create_graph = self.d.capture(self.outputs)


def vjp(func, *primals, has_aux=False):
    """``(func(*primals), vjp_fn)`` (and ``aux`` with ``has_aux``):
    ``vjp_fn(cotangents)``, with cotangents shaped as the output, returns the
    vector-Jacobian product as a tuple with one entry per primal. It can be
    called any number of times; func runs once."""
    if not primals:
        raise RuntimeError("vjp(f, *primals): expected at least one primal")
    run = _Traced(func, primals, tuple(range(len(primals))), has_aux, "vjp")
    d, outputs = run.d, run.outputs

    def vjp_fn(cotangents):
        vectors, structure = _tensor_leaves(cotangents, "vjp_fn: the cotangents")
        if structure != run.structure or any(v.shape != o.shape for v, o in zip(vectors, outputs)):
            raise RuntimeError(f"vjp_fn: the cotangents must have the output's structure and shapes "
                               f"{[tuple(o.shape) for o in outputs]}, got {[tuple(v.shape) for v in vectors]}")
        outer = _keeps_graph(vectors)
        grads = d.arranged(_fn._grads(outputs, d.leaves, vectors, run.create_graph or outer, False, "vjp"))
        return grads if outer else d.finish(grads)  # a tuple: argnums covers every primal

    res = (d.finish(run.out), vjp_fn)
    return res + (d.finish(run.aux),) if has_aux else res


class _Linearized(_Traced):
    """func at the arguments at ``argnums``, with the graph of its
    vector-Jacobian product against zero cotangents ``us`` that require
    grad: J v is then the gradient in u of <J^T u, v> (forward mode by
    reverse mode twice; a custom Function's part is its jvp, see _forward_ad)."""

    def __init__(self, func, args, argnums, has_aux, what, kwargs=None):
        super().__init__(func, args, argnums, has_aux, what, kwargs)
        with _ag.enable_grad(), forward_mode_pass():
            self.us = tuple(zeros(o.shape, dtype=o.dtype, device=o.device, requires_grad=True)
                            for o in self.outputs)
            self.transposed = _fn._grads(self.outputs, self.d.leaves, self.us, True, False, what)
            check_linked(self.outputs, self.d.leaves, self.transposed, what)
        self.d.inner.extend(self.us)

    def column(self, vectors):
        """J v, one tensor per output leaf, for ``vectors`` one per differentiated leaf."""
        with _ag.enable_grad():
            dot = [(t * v).sum() for t, v in zip(self.transposed, vectors) if t.requires_grad]
            if not dot:
                return [zeros(o.shape, dtype=o.dtype, device=o.device) for o in self.outputs]
            keep = self.create_graph or _keeps_graph(vectors)
            return list(_fn._grads((_ag.stack(dot).sum(),), self.us, (None,), keep, False, self.what))

    def product(self, tangents):
        vectors, structure = _tensor_leaves(tangents, f"{self.what}: the tangents")
        _, primal_structure = _pytree.flatten(tuple(self.d.args))
        if structure != primal_structure or any(v.shape != x.shape for v, x in zip(vectors, self.d.leaves)):
            raise RuntimeError(f"{self.what}: the tangents must have the primals' structure and shapes "
                               f"{[tuple(x.shape) for x in self.d.leaves]}, got {[tuple(v.shape) for v in vectors]}")
        res = _pytree.unflatten(self.column(vectors), self.structure)
        return res if _keeps_graph(vectors) else self.d.finish(res)


def _linearized(func, primals, has_aux, what):
    if not isinstance(primals, tuple) or not primals:
        raise RuntimeError(f"{what}: expected primals to be a non-empty tuple")
    return _Linearized(func, primals, tuple(range(len(primals))), has_aux, what)


def jvp(func, primals, tangents, *, strict=False, has_aux=False):
    """``(func(*primals), J tangents)`` (and ``aux`` with ``has_aux``): the
    Jacobian-vector product, primals and tangents being tuples of the same
    structure. ddpc carries no tangents through its ops: this takes two
    backward passes (the double-vjp trick, as ddpc.autograd.forward_ad) and
    gives the same values; a custom autograd.Function's tangent is its
    ``jvp`` (NotImplementedError without one, as in PyTorch). ``strict`` is
    accepted for PyTorch's signature."""
    lin = _linearized(func, primals, has_aux, "jvp")
    if not isinstance(tangents, tuple):
        raise RuntimeError("jvp: expected tangents to be a tuple")
    res = (lin.d.finish(lin.out), lin.product(tangents))
    return res + (lin.d.finish(lin.aux),) if has_aux else res


def linearize(func, *primals):
    """``(func(*primals), jvp_fn)``: ``jvp_fn(*tangents)`` gives the
    Jacobian-vector product at the primals without running func again."""
    lin = _linearized(func, primals, False, "linearize")

    def jvp_fn(*tangents):
        return lin.product(tangents)

    return lin.d.finish(lin.out), jvp_fn


def _jacobian_transform(func, argnums, has_aux, strategy, what):
    def wrapper(*args, **kwargs):
        if strategy == "reverse-mode":
            run = _Traced(func, args, argnums, has_aux, what, kwargs)
            with _ag.enable_grad():
                blocks = _fn._reverse_blocks(run.outputs, run.d.leaves, run.create_graph, False)
        else:
            run = _Linearized(func, args, argnums, has_aux, what, kwargs)
            blocks = _fn._forward_blocks(run.column, run.d.leaves, run.outputs)
        d = run.d
        jac = _pytree.unflatten([d.arranged(list(row)) for row in blocks], run.structure)
        return (d.finish(jac), d.finish(run.aux)) if has_aux else d.finish(jac)

    return functools.wraps(func)(wrapper)


def jacrev(func, argnums=0, *, has_aux=False, chunk_size=None):
    """A function that returns the Jacobian of ``func`` with respect to the
    arguments at ``argnums``, one backward pass per output element: for each
    output leaf, entries shaped ``output.shape + input.shape`` in the
    arguments' structure. ``chunk_size`` is accepted for PyTorch's signature."""
    _check_chunk_size(chunk_size, "jacrev")
    return _jacobian_transform(func, argnums, has_aux, "reverse-mode", "jacrev")


def jacfwd(func, argnums=0, has_aux=False, *, randomness="error"):
    """As ``jacrev``, column by column with ``jvp`` (one column per input
    element): the same values, and cheaper than jacrev where the inputs have
    fewer elements than the outputs. ``randomness`` is accepted for
    PyTorch's signature."""
    _check_randomness(randomness, "jacfwd")
    return _jacobian_transform(func, argnums, has_aux, "forward-mode", "jacfwd")


def hessian(func, argnums=0):
    """The Hessian of ``func`` (one-element output) with respect to the
    arguments at ``argnums``: the Jacobian of its gradient. PyTorch takes it
    with jacfwd over jacrev; ddpc, whose jvp costs two backward passes, with
    jacrev over jacrev (one backward pass per input element), which gives the
    same values."""
    return jacrev(jacrev(func, argnums), argnums)


# ---- vmap ------------------------------------------------------------------------------

def _check_chunk_size(chunk_size, what):
    if chunk_size is not None and (not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"{what}: chunk_size must be None or a positive int, got {chunk_size!r}")


def _check_randomness(randomness, what):
    if randomness not in ("error", "different", "same"):
        raise RuntimeError(f"{what}: randomness must be 'error', 'different' or 'same', got {randomness!r}")


def _normal_dim(dim, ndim, what):
    if not isinstance(dim, int) or not -ndim <= dim < ndim:
        raise ValueError(f"vmap: {what} {dim!r} is out of range for a tensor of {ndim} dims")
    return dim % ndim


def _zero_slice(leaf, dim):
    """A slice of ``leaf`` (empty along ``dim``) as vmap would pass it: zeros,
    in the graph of leaf where it is a floating tensor."""
    if leaf.dtype.is_floating_point:
        return leaf.sum(dim)
    return zeros(leaf.shape[:dim] + leaf.shape[dim + 1:], dtype=leaf.dtype, device=leaf.device)


def vmap(func, in_dims=0, out_dims=0, randomness="error", *, chunk_size=None):
    """``func`` mapped over a dim of its inputs, as torch.func.vmap:
    ``in_dims`` gives, per positional argument (or once for all), the dim to
    map over (None: pass the argument whole to every call); the outputs are
    stacked along ``out_dims``. Keyword arguments are passed whole.

    ddpc has no batching rules: the mapped function runs once per index of
    the mapped dim, on that slice, and the results are stacked, so a vmap
    costs as many calls of ``func`` as the batch has entries (still recorded
    by autograd: gradients flow through it, and ``vmap(grad(f))`` gives
    per-sample gradients). ``randomness="error"`` raises if ``func`` draws
    from the global generator, ``"same"`` gives every slice the same draws,
    ``"different"`` different ones. With ``out_dims=None`` for an output,
    the first slice's value of it is returned. Over an empty batch ``func``
    runs once on zeros, for the shapes of its outputs, which come back empty
    along their mapped dims."""
    _check_randomness(randomness, "vmap")
    _check_chunk_size(chunk_size, "vmap")

    def wrapper(*args, **kwargs):
        leaves, structure = _pytree.flatten(args)
        dims = _pytree.leaves_for(in_dims if isinstance(in_dims, tuple) else (in_dims,) * len(args), args,
                                  "vmap: in_dims")
        sizes = set()
        for i, (leaf, dim) in enumerate(zip(leaves, dims)):
            if dim is None:
                continue
            if not isinstance(leaf, Tensor):
                raise ValueError(f"vmap: got in_dim={dim!r} for an input of type {type(leaf).__name__}; only "
                                 "tensors can be mapped over (use None for other inputs)")
            dims[i] = _normal_dim(dim, leaf.ndim, "in_dim")
            sizes.add(leaf.shape[dims[i]])
        if not sizes:
            raise ValueError("vmap: at least one input must be mapped over (in_dims are all None)")
        if len(sizes) != 1:
            raise ValueError(f"vmap: the mapped dims must have one size, got sizes {sorted(sizes)}")
        batch = sizes.pop()
        start = default_generator.get_state()
        results = []
        for b in range(batch or 1):  # an empty batch: one call on a slice of zeros gives the outputs' shapes
            if randomness == "same":
                default_generator.set_state(start)
            call = [leaf if dim is None else leaf.select(dim, b) if batch else _zero_slice(leaf, dim)
                    for leaf, dim in zip(leaves, dims)]
            drawn_before = default_generator.offset
            results.append(func(*_pytree.unflatten(call, structure), **kwargs))
            if randomness == "error" and default_generator.offset != drawn_before:
                raise RuntimeError("vmap: the function drew random numbers while randomness='error'; pass "
                                   "randomness='different' or 'same'")
        if not batch:
            default_generator.set_state(start)
        outs, out_structure = _tensor_leaves(results[0], "vmap: the output of the function")
        per_call = [_tensor_leaves(r, "vmap: the output of the function")[0] for r in results]
        out_dim_leaves = _pytree.leaves_for(out_dims, results[0], "vmap: out_dims")
        stacked = []
        for k, (first, dim) in enumerate(zip(outs, out_dim_leaves)):
            if dim is None:
                stacked.append(first)
            else:
                dim = _normal_dim(dim, first.ndim + 1, "out_dim")
                stacked.append(_ag.stack([p[k] for p in per_call], dim) if batch else
                               first.unsqueeze(dim).narrow(dim, 0, 0))
        return _pytree.unflatten(stacked, out_structure)

    return functools.wraps(func)(wrapper)


# ---- ensembles ---------------------------------------------------------------------------

def stack_module_state(models):
    """``(params, buffers)``: each parameter and buffer of equally built
    ``models`` stacked along a new dim 0, by name, for ``functional_call``
    under ``vmap`` (a model ensemble). The stacked parameters are new leaves
    that require grad as the originals do; the buffers are copies."""
    models = list(models)
    if not models:
        raise RuntimeError("stack_module_state: expected at least one model")
    if len({m.training for m in models}) != 1:
        raise RuntimeError("stack_module_state: expected all models to be in the same training/eval mode")
    names = [(list(dict(m.named_parameters())), list(dict(m.named_buffers()))) for m in models]
    if any(n != names[0] for n in names[1:]):
        raise RuntimeError("stack_module_state: expected all models to have the same parameters and buffers")

    def stacked(tables, keep_grad):
        out = {}
        for name in tables[0]:
            values = [t[name] for t in tables]
            s = _ag.stack([v.detach() for v in values])
            out[name] = s.requires_grad_(values[0].requires_grad) if keep_grad else s
        return out

    return (stacked([dict(m.named_parameters()) for m in models], True),
            stacked([dict(m.named_buffers()) for m in models], False))


def replace_all_batch_norm_modules_(root):
    """Makes every batch norm in ``root`` use its batch's statistics and keep
    no running ones (as needed under vmap, where each call sees one slice);
    returns root."""
    from .nn.modules import _BatchNorm

    for m in root.modules():
        if isinstance(m, _BatchNorm):
            m.running_mean = m.running_var = m.num_batches_tracked = None
            m.track_running_stats = False
    return root
