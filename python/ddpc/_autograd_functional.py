"""``ddpc.autograd.functional``: torch.autograd.functional's derivatives of a
whole function, built on ``autograd.grad``.

``vjp`` and ``vhp`` take one backward pass; ``jvp`` and ``hvp`` two, by the
double-vjp trick (J v is the gradient in u of <J^T u, v>, which needs
``create_graph``); ``jacobian`` and ``hessian`` take one pass per output
element (or per input element with ``strategy="forward-mode"``), as
PyTorch's do without ``vectorize``. ``vectorize=True`` is accepted and gives
the same results the same way.
"""

import math

from . import autograd as _ag
from .tensor import Tensor, zeros


def _as_tuple(value, what):
    """(tuple of tensors, whether value was a single tensor)."""
    single = isinstance(value, Tensor)
    values = (value,) if single else tuple(value) if isinstance(value, (tuple, list)) else None
    if values is None or not all(isinstance(t, Tensor) for t in values):
        raise TypeError(f"the {what} must be a ddpc tensor or a tuple of them, got {type(value).__name__}")
    return values, single


def _differentiable(inputs, create_graph):
    """The inputs as the variables to differentiate by: fresh leaves, or with
    create_graph an alias that keeps an input's own graph."""
    return tuple(_ag.alias(t) if create_graph and t.requires_grad else t.detach().requires_grad_(True)
                 for t in inputs)


def _check_vectors(v, like, what):
    v, _ = _as_tuple(v, what)
    if len(v) != len(like) or any(a.shape != b.shape for a, b in zip(v, like)):
        raise RuntimeError(f"the {what} must match the shapes {[tuple(t.shape) for t in like]}, got "
                           f"{[tuple(t.shape) for t in v]}")
    return v


def _default_vectors(v, outputs, what):
    if v is not None:
        return _check_vectors(v, outputs, what)
    if len(outputs) != 1 or outputs[0].numel() != 1:
        raise RuntimeError(f"the {what} can be left out only when the function returns a single element")
    return (_ag._like_scalar(1.0, outputs[0]).reshape(outputs[0].shape),)


def _grads(outputs, inputs, vectors, create_graph, strict, what):
    """grad(outputs, inputs, vectors), zeros (or, with strict, an error) for an
    input that no output depends on."""
    live = [(o, v) for o, v in zip(outputs, vectors) if o.requires_grad]
    got = _ag.grad([o for o, _ in live], inputs, [v for _, v in live], retain_graph=True, create_graph=create_graph,
                   allow_unused=True) if live else (None,) * len(inputs)
    out = []
    for i, (g, t) in enumerate(zip(got, inputs)):
        if g is None:
            if strict:
                raise RuntimeError(f"{what}: the output is independent of input {i}, which strict=True does not "
                                   "allow")
            g = zeros(t.shape, dtype=t.dtype, device=t.device)
        out.append(g if create_graph else g.detach())
    return tuple(out)


def _batched_grad(outputs, inputs, grad_outputs, retain_graph, create_graph, allow_unused, materialize_grads):
    """``autograd.grad`` with ``is_grads_batched``: each of ``grad_outputs``
    has a leading batch dim, one backward pass runs per index of it (PyTorch
    vmaps a single one), and the gradients come back stacked along a new
    leading dim (None where an input is unused)."""
    outputs, _ = _as_tuple(outputs, "outputs")
    if grad_outputs is None:
        raise RuntimeError("grad: is_grads_batched=True needs grad_outputs, each with a leading batch dim")
    vectors, _ = _as_tuple(grad_outputs, "grad_outputs")
    if len(vectors) != len(outputs) or any(v.ndim != o.ndim + 1 or v.shape[1:] != o.shape
                                           for v, o in zip(vectors, outputs)):
        raise RuntimeError(f"grad: with is_grads_batched=True each grad_output must be its output's shape "
                           f"{[tuple(o.shape) for o in outputs]} after a batch dim, got "
                           f"{[tuple(v.shape) for v in vectors]}")
    sizes = {v.shape[0] for v in vectors}
    if len(sizes) != 1:
        raise RuntimeError(f"grad: with is_grads_batched=True the grad_outputs' batch dims must agree, got "
                           f"{sorted(sizes)}")
    batch = sizes.pop()
    if batch == 0:
        raise RuntimeError("grad: with is_grads_batched=True the grad_outputs' batch dim must not be empty")
    retain_graph = create_graph if retain_graph is None else retain_graph
    per_index = [_ag.grad(outputs, inputs, [v[b] for v in vectors], retain_graph=retain_graph or b + 1 < batch,
                          create_graph=create_graph, allow_unused=allow_unused, materialize_grads=materialize_grads)
                 for b in range(batch)]
    return tuple(None if g is None else _ag.stack([p[i] for p in per_index]) for i, g in enumerate(per_index[0]))


def _call(func, inputs, what):
    outputs, single = _as_tuple(func(*inputs), f"output of the function given to {what}")
    return outputs, single


def _finish(values, single, create_graph):
    values = tuple(v if create_graph else v.detach() for v in values)
    return values[0] if single else values


def vjp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), v^T J): the vector-Jacobian product at ``inputs``."""
    inputs, in_single = _as_tuple(inputs, "inputs")
    xs = _differentiable(inputs, create_graph)
    with _ag.enable_grad():
        outputs, out_single = _call(func, xs, "vjp")
        vectors = _default_vectors(v, outputs, "v")
        res = _grads(outputs, xs, vectors, create_graph, strict, "vjp")
    return _finish(outputs, out_single, create_graph), _finish(res, in_single, create_graph)


def jvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), J v): the Jacobian-vector product at ``inputs``, as the
    gradient in u of <J^T u, v> (u a zero vector that requires grad)."""
    inputs, in_single = _as_tuple(inputs, "inputs")
    if v is None:
        if len(inputs) != 1 or inputs[0].numel() != 1:
            raise RuntimeError("jvp: v can be left out only when the input is a single element")
        v = (_ag._like_scalar(1.0, inputs[0]).reshape(inputs[0].shape),)
    v = _check_vectors(v, inputs, "v")
    xs = _differentiable(inputs, create_graph)
    with _ag.enable_grad():
        outputs, out_single = _call(func, xs, "jvp")
        us = tuple(zeros(o.shape, dtype=o.dtype, device=o.device, requires_grad=True) for o in outputs)
        transposed = _grads(outputs, xs, us, True, strict, "jvp")
        dot = [(t * w).sum() for t, w in zip(transposed, v) if t.requires_grad]
        res = _grads((_ag.stack(dot).sum(),), us, (None,), create_graph, strict, "jvp") if dot else \
            tuple(zeros(o.shape, dtype=o.dtype, device=o.device) for o in outputs)
    return _finish(outputs, out_single, create_graph), _finish(res, out_single, create_graph)


def _grads_of_scalar(out, xs, create_graph, strict, what):
    one = _ag._like_scalar(1.0, out).reshape(out.shape)
    return _grads((out,), xs, (one,), create_graph, strict, what)


def jacobian(func, inputs, create_graph=False, strict=False, vectorize=False, strategy="reverse-mode"):
    """d func / d inputs at ``inputs``: for output i and input j a tensor of
    shape output_i.shape + input_j.shape (a tensor when both are single
    tensors, else tuples of them, as PyTorch nests them)."""
    if strategy not in ("reverse-mode", "forward-mode"):
        raise ValueError(f"jacobian: strategy must be 'reverse-mode' or 'forward-mode', got {strategy!r}")
    inputs, in_single = _as_tuple(inputs, "inputs")
    xs = _differentiable(inputs, create_graph)
    with _ag.enable_grad():
        outputs, out_single = _call(func, xs, "jacobian")
        if strategy == "reverse-mode":
            blocks = _reverse_blocks(outputs, xs, create_graph, strict)
        else:
            def column(v):
                res = jvp(func, inputs, v, create_graph, strict)[1]
                return (res,) if isinstance(res, Tensor) else res

            blocks = _forward_blocks(column, inputs, outputs)
    blocks = [[b if create_graph else b.detach() for b in row] for row in blocks]
    if out_single:
        return blocks[0][0] if in_single else tuple(blocks[0])
    return tuple(row[0] if in_single else tuple(row) for row in blocks)


def _reverse_blocks(outputs, xs, create_graph, strict):
    """The Jacobian blocks, [output][input], by one backward pass per output element."""
    rows = [[] for _ in xs]  # per input, the gradient of each output element
    for o in outputs:
        flat = o.reshape(-1)
        for k in range(flat.numel()):
            for j, g in enumerate(_grads_of_scalar(flat[k], xs, create_graph, strict, "jacobian")):
                rows[j].append(g)
    return [[_block(rows[j], outputs, i, xs[j], False) for j in range(len(xs))] for i in range(len(outputs))]


def _forward_blocks(column, inputs, outputs):
    """The Jacobian blocks, [output][input], one column per input element:
    ``column(v)`` gives J v (one tensor per output) for one-hot tangents v."""
    cols = [[] for _ in outputs]  # per output, its derivative along each input element
    for j, x in enumerate(inputs):
        for k in range(x.numel()):
            v = tuple(_one_hot(t, k) if n == j else zeros(t.shape, dtype=t.dtype, device=t.device)
                      for n, t in enumerate(inputs))
            for i, r in enumerate(column(v)):
                cols[i].append(r)
    return [[_block(cols[i], inputs, j, outputs[i], True) for j in range(len(inputs))] for i in range(len(outputs))]


def _one_hot(t, k):
    v = zeros(t.numel(), dtype=t.dtype, device=t.device)
    v[k] = 1.0
    return v.reshape(t.shape)


def _block(parts, along, index, other, by_column):
    """The Jacobian block of output ``index`` of ``along`` (rows) against ``other`` from the
    per-element gradients ``parts``; by_column: ``parts`` are columns over ``along``'s elements."""
    start = sum(t.numel() for t in along[:index])
    n = along[index].numel()
    if n:
        stacked = _ag.stack(parts[start:start + n])
    else:
        stacked = zeros((0,) + tuple(other.shape), dtype=other.dtype, device=other.device)
    if not by_column:
        return stacked.reshape(tuple(along[index].shape) + tuple(other.shape))
    return stacked.reshape(math.prod(along[index].shape), other.numel()).T.reshape(
        tuple(other.shape) + tuple(along[index].shape))


def hessian(func, inputs, create_graph=False, strict=False, vectorize=False, outer_jacobian_strategy="reverse-mode"):
    """The second derivatives of a function returning one element: the
    Jacobian of its gradient (for tuple inputs, a tuple of tuples)."""
    inputs, in_single = _as_tuple(inputs, "inputs")

    def gradient(*xs):
        out = _scalar_output(func, xs, "hessian")
        return _grads_of_scalar(out, xs, True, strict, "hessian")

    res = jacobian(gradient, inputs, create_graph, strict, vectorize, outer_jacobian_strategy)
    return res[0][0] if in_single else res


def _scalar_output(func, xs, what):
    outputs, _ = _call(func, xs, what)
    if len(outputs) != 1 or outputs[0].numel() != 1:
        raise RuntimeError(f"{what}: the function must return a single element")
    return outputs[0]


def vhp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), v^T H) for a function returning one element."""
    inputs, in_single = _as_tuple(inputs, "inputs")
    v = _check_vectors(v, inputs, "v") if v is not None else _default_vectors(None, inputs, "v")
    xs = _differentiable(inputs, create_graph)
    with _ag.enable_grad():
        out = _scalar_output(func, xs, "vhp")
        grads = _grads_of_scalar(out, xs, True, strict, "vhp")
        dot = [(g * w).sum() for g, w in zip(grads, v) if g.requires_grad]
        res = _grads((_ag.stack(dot).sum(),), xs, (None,), create_graph, strict, "vhp") if dot else \
            tuple(zeros(t.shape, dtype=t.dtype, device=t.device) for t in inputs)
    return (out if create_graph else out.detach()), _finish(res, in_single, create_graph)


def hvp(func, inputs, v=None, create_graph=False, strict=False):
    """(func(inputs), H v) for a function returning one element. H is
    symmetric where the function is twice continuously differentiable, so
    this is vhp's product, which takes one backward pass fewer than PyTorch's
    double-vjp."""
    return vhp(func, inputs, v, create_graph, strict)
