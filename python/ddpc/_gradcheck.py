"""``ddpc.autograd.gradcheck`` and ``gradgradcheck``: a function's gradients
against finite differences, as torch.autograd's.

The numerical Jacobian of each output with respect to each input that
requires grad takes two evaluations per input element (central differences
of step ``eps``); the analytical one takes one backward pass per output
element. They must agree within ``atol + rtol * |numerical|``, and a second
analytical pass must give the same Jacobian (within ``nondet_tol``).
``fast_mode`` compares one random projection ``u^T J v`` per output and input
instead (one directional difference and one backward pass), and recomputes
the full Jacobians only to report a mismatch. Jacobians are laid out as
PyTorch's: a row per input element, a column per output element. Complex
inputs and outputs are checked as their view_as_real pairs, whose gradients
are PyTorch's complex ones (dL/dRe z + i dL/dIm z) laid out as pairs.
"""

import warnings

import numpy as np

from . import _complex
from . import autograd as _ag
from ._dtype import float64
from .tensor import Tensor, ones_like, tensor


class GradcheckError(RuntimeError):
    """A gradient that disagrees with finite differences (or with itself)."""


def _as_tuple(value):
    return (value,) if isinstance(value, Tensor) else tuple(value)


def _is_complex(t):
    return isinstance(t, Tensor) and t.dtype.is_complex


def _pairs(t):
    """A complex tensor as a new leaf of its view_as_real pairs (requiring grad as t); others as they are."""
    return _complex.view_as_real(t.detach()).clone().requires_grad_(t.requires_grad) if _is_complex(t) else t


def _real_form(func, inputs):
    """func and inputs with each complex input and output as its view_as_real pairs."""
    cplx = [_is_complex(t) for t in inputs]
    if not any(cplx):
        return func, inputs
    view_as_complex, view_as_real = _complex.view_as_complex, _complex.view_as_real

    def real_func(*values):
        out = func(*(view_as_complex(v) if c else v for v, c in zip(values, cplx)))
        return tuple(view_as_real(o) if isinstance(o, Tensor) and o.dtype.is_complex else o for o in _as_tuple(out))

    return real_func, tuple(_pairs(t) for t in inputs)


def _outputs(func, inputs):
    """func's floating outputs, as a tuple."""
    out = func(*inputs)
    return tuple(o for o in _as_tuple(out) if isinstance(o, Tensor) and o.dtype.is_floating_point)


def _host(t):
    return t.detach().cpu().numpy().astype(np.float64)


def _evaluate(func, inputs, i, values):
    """func's outputs (as float64 host arrays) with input i's values replaced (still requiring
    grad: func may differentiate by it, as gradgradcheck's does)."""
    replaced = list(inputs)
    replaced[i] = tensor(values.reshape(inputs[i].shape), dtype=inputs[i].dtype, device=inputs[i].device,
                         requires_grad=inputs[i].requires_grad)
    return [_host(o).reshape(-1) for o in _outputs(func, replaced)]


def _numerical(func, inputs, i, eps, direction=None):
    """The numerical Jacobians of every output by input i, [input numel, output numel] each;
    or, given a direction, the derivatives along it (one column per output)."""
    base = _host(inputs[i]).reshape(-1)
    steps = np.eye(base.size) if direction is None else direction.reshape(1, -1)
    columns = []
    for step in steps:
        plus = _evaluate(func, inputs, i, base + eps * step)
        minus = _evaluate(func, inputs, i, base - eps * step)
        columns.append([(p - m) / (2 * eps) for p, m in zip(plus, minus)])
    return [np.stack([c[o] for c in columns]) for o in range(len(columns[0]))] if columns else []


def _analytical(func, inputs, diff, grad_outputs_of=None):
    """The analytical Jacobians [output o][input i] = [input numel, output numel] by one backward
    pass per output element; or, given grad_outputs_of(o), one pass per output with it."""
    outputs = _outputs(func, inputs)
    jac = []
    for o, out in enumerate(outputs):
        rows = []
        units = [grad_outputs_of(o)] if grad_outputs_of else np.eye(out.numel())
        for unit in units:
            if not out.requires_grad:
                rows.append([np.zeros(inputs[i].numel()) for i in diff])
                continue
            g = tensor(unit.reshape(out.shape), dtype=out.dtype, device=out.device)
            grads = _ag.grad(out, [inputs[i] for i in diff], g, retain_graph=True, allow_unused=True)
            rows.append([np.zeros(inputs[i].numel()) if gr is None else _host(gr).reshape(-1)
                         for i, gr in zip(diff, grads)])
        jac.append([np.stack([r[k] for r in rows], 1) if rows else np.zeros((inputs[i].numel(), 0))
                    for k, i in enumerate(diff)])
    return jac


def _fail(message, raise_exception):
    if raise_exception:
        raise GradcheckError(message)
    return False


def _mismatch(o, i, numerical, analytical):
    return (f"Jacobian mismatch for output {o} with respect to input {i},\nnumerical:{tensor(numerical)}\n"
            f"analytical:{tensor(analytical)}\n")


def gradcheck(func, inputs, *, eps=1e-6, atol=1e-5, rtol=1e-3, raise_exception=True, nondet_tol=0.0,
              check_undefined_grad=True, check_grad_dtypes=False, check_batched_grad=False,
              check_batched_forward_grad=False, check_forward_ad=False, check_backward_ad=True, fast_mode=False,
              masked=None):
    """True when ``func``'s gradients by the ``inputs`` that require grad match
    finite differences; otherwise raises GradcheckError (or returns False
    without ``raise_exception``). Inputs should be float64: a warning says so
    otherwise. The batched and forward-mode checks are not available in
    ddpc; asking for them raises NotImplementedError."""
    del check_undefined_grad, masked
    if check_batched_grad or check_batched_forward_grad or check_forward_ad or not check_backward_ad:
        raise NotImplementedError("gradcheck: ddpc checks reverse-mode gradients only (no batched or forward-mode "
                                  "checks)")
    func, inputs = _real_form(func, _as_tuple(inputs))
    diff = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    if not diff:
        raise ValueError("gradcheck expects at least one input tensor to require gradient, but none of them have "
                         "requires_grad=True.")
    for i in diff:
        if inputs[i].dtype is not float64:
            warnings.warn(f"Input #{i} requires gradient and is not a double precision floating point. This check "
                          "will likely fail if all the inputs are not of double precision floating point.")
    if check_grad_dtypes:
        outputs = _outputs(func, inputs)
        for i in diff:
            grads = _ag.grad([o for o in outputs if o.requires_grad], [inputs[i]],
                             [ones_like(o) for o in outputs if o.requires_grad], allow_unused=True)
            if grads[0] is not None and (grads[0].dtype is not inputs[i].dtype or grads[0].device != inputs[i].device):
                return _fail(f"Gradient has dtype mismatch or device mismatch for input {i}", raise_exception)
    if fast_mode:
        rng = np.random.default_rng(0)
        us = [rng.standard_normal(o.numel()) for o in _outputs(func, inputs)]
        for i in diff:
            v = rng.standard_normal(inputs[i].numel())
            along = _numerical(func, inputs, i, eps, v)  # (J_o v) per output o
            rows = _analytical(func, inputs, [i], lambda o: us[o])  # (u_o^T J_o) per output o
            for o, u in enumerate(us):
                n, a = float(along[o][0] @ u), float(rows[o][0][:, 0] @ v)
                if not abs(a - n) <= atol + rtol * abs(n):
                    full_n, full_a = _numerical(func, inputs, i, eps)[o], _analytical(func, inputs, [i])[o][0]
                    return _fail(f"Jacobian mismatch for output {o} with respect to input {i},\nnumerical:{n}\n"
                                 f"analytical:{a}\n\nThe above quantities are computed in fast mode, a random "
                                 f"projection u^T J v; the full Jacobians:\n\n"
                                 + _mismatch(o, i, full_n, full_a), raise_exception)
        return True
    analytical = _analytical(func, inputs, diff)
    for k, i in enumerate(diff):
        numerical = _numerical(func, inputs, i, eps)
        for o, (n, a) in enumerate(zip(numerical, (jac[k] for jac in analytical))):
            if n.shape != a.shape or not np.allclose(a, n, rtol=rtol, atol=atol):
                return _fail(_mismatch(o, i, n, a), raise_exception)
    again = _analytical(func, inputs, diff)
    for o, (first, second) in enumerate(zip(analytical, again)):
        for k, i in enumerate(diff):
            if not np.allclose(first[k], second[k], rtol=0.0, atol=nondet_tol):
                return _fail(f"Backward is not reentrant, i.e., running backward with same input and grad_output "
                             f"multiple times gives different values, although analytical gradient matches "
                             f"numerical gradient. The tolerance for nondeterminism was {nondet_tol}. "
                             f"(output {o}, input {i})", raise_exception)
    return True


def gradgradcheck(func, inputs, grad_outputs=None, *, eps=1e-6, atol=1e-5, rtol=1e-3,
                  gen_non_contig_grad_outputs=False, raise_exception=True, nondet_tol=0.0,
                  check_undefined_grad=True, check_grad_dtypes=False, check_batched_grad=False,
                  check_fwd_over_rev=False, check_rev_over_rev=True, fast_mode=False, masked=False):
    """gradcheck of the gradients themselves: the second derivatives of
    ``func``, through ``autograd.grad(..., create_graph=True)`` with
    ``grad_outputs`` (random normal ones, requiring grad, when None)."""
    del gen_non_contig_grad_outputs, masked
    if check_fwd_over_rev or not check_rev_over_rev:
        raise NotImplementedError("gradgradcheck: ddpc checks reverse-over-reverse gradients only")
    func, inputs = _real_form(func, _as_tuple(inputs))
    diff = [i for i, t in enumerate(inputs) if isinstance(t, Tensor) and t.requires_grad]
    if grad_outputs is None:
        rng = np.random.default_rng(0)
        grad_outputs = tuple(tensor(rng.standard_normal(o.shape), dtype=o.dtype, device=o.device,
                                    requires_grad=True) for o in _outputs(func, inputs))
    grad_outputs = tuple(_pairs(g) for g in _as_tuple(grad_outputs))
    n_in = len(inputs)

    def first_derivatives(*values):
        ins, gos = values[:n_in], values[n_in:]
        used = [(o, g) for o, g in zip(_outputs(func, ins), gos) if o.requires_grad]
        grads = _ag.grad([o for o, _ in used], [ins[i] for i in diff], [g for _, g in used], create_graph=True,
                         allow_unused=True)
        return tuple(g for g in grads if g is not None)

    return gradcheck(first_derivatives, inputs + grad_outputs, eps=eps, atol=atol, rtol=rtol,
                     raise_exception=raise_exception, nondet_tol=nondet_tol, check_grad_dtypes=check_grad_dtypes,
                     check_batched_grad=check_batched_grad, fast_mode=fast_mode)
