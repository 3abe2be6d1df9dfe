"""Module full backward hooks: autograd nodes around one call of a module's
forward that gather the gradients with respect to its tensor inputs and
outputs, as torch's BackwardHook does.

ddpc's engine gives every node a single incoming gradient, so each wrapped
tensor gets its own one-input ``_Slot`` node that parks its gradient with a
``_Gather`` node shared by all tensors of the call. The gather node was
created before the slots, so the engine runs it after every slot that a
gradient reaches; it then sees all the gradients together, runs the hooks
(which may replace them) and sends them on to the tensors' own histories.
"""

import warnings

from ..autograd import Node, _attach, is_grad_enabled
from ..tensor import Tensor, zeros


class _Arrived:
    """What a slot sends its gather node. The engine adds up what reaches a
    node; this marker absorbs additions and only says 'a slot holds a gradient'."""

    def __add__(self, other):
        return self


_ARRIVED = _Arrived()


class _Gather(Node):
    passes_through = True
    double_backward = True

    def __init__(self, tensors, on_ready):
        super().__init__(tensors)
        self.grads = [None] * len(tensors)
        self.on_ready = on_ready

    def backward(self, _arrived):
        grads, self.grads = tuple(self.grads), [None] * len(self.grads)
        return self.on_ready(grads)


class _Slot(Node):
    passes_through = True
    double_backward = True

    def __init__(self, gather, index):
        super().__init__(())
        self.edges = (gather,)
        self.gather, self.index = gather, index

    def backward(self, g):
        self.gather.grads[self.index] = g
        return (_ARRIVED,)


def _items(value):
    """The positions a forward's arguments or result have for the hooks: a
    tuple's (or list's) items, or the value alone."""
    return list(value) if isinstance(value, (tuple, list)) else [value]


def _checked(what, new, old, index):
    """A hook's replacement for the gradient tuple ``old``: a tuple or list of
    the same length, as in PyTorch. Only the tensor positions ``index`` are
    read back; what a hook puts at the others (non-tensor values) is
    ignored, as PyTorch ignores it."""
    expected = f"a {what} hook must return None or a tuple of {len(old)} gradients"
    if not isinstance(new, (tuple, list)):
        raise RuntimeError(f"{expected}, got {type(new).__name__}")
    if len(new) != len(old):
        kind, grads = ("Backward pre", "grad_output") if what == "backward pre" else ("Backward", "grad_input")
        raise RuntimeError(f"{kind} hook returned an invalid number of {grads}, got {len(new)}, but expected "
                           f"{len(old)} ({expected})")
    for i in index:
        n, o = new[i], old[i]
        if n is not None and (not isinstance(n, Tensor) or (o is not None and n.shape != o.shape)):
            expected = "a tensor" if o is None else f"shape {o.shape}"
            raise RuntimeError(f"a {what} hook returned a gradient of shape "
                               f"{getattr(n, 'shape', type(n).__name__)} at position {i} where {expected} "
                               "was expected")
    return tuple(new)


class BackwardHook:
    """The full backward (pre-)hooks of one module call: ``setup_input_hook``
    wraps the forward's tensor arguments, ``setup_output_hook`` its result.

    As torch's BackwardHook, the hooks see one gradient per position:
    grad_input has one per positional argument, None where the argument is
    not a tensor and zeros where a tensor argument got no gradient (also one
    that does not require grad); grad_output has one per returned value,
    None where it is not a tensor or got no gradient. A result that is not a
    tensor or a tuple is one position; unlike PyTorch, which warns and calls
    no hook then, a list is taken as a tuple."""

    def __init__(self, module, hooks, pre_hooks):
        self.module, self.hooks, self.pre_hooks = module, list(hooks), list(pre_hooks)
        self.grad_output = None
        self.n_inputs, self.n_outputs = 0, 0
        self.input_index = self.output_index = None
        self.input_specs = ()

    @staticmethod
    def _wrap(value, on_ready):
        """``value`` with its tensors that require grad routed through one
        gather node, and the positions of its tensors (None when nothing was
        wrapped)."""
        items = _items(value)
        index = [i for i, v in enumerate(items) if isinstance(v, Tensor)]
        tensors = [items[i] for i in index]
        if not is_grad_enabled() or not any(t.requires_grad for t in tensors):
            return value, None
        gather = _Gather(tensors, on_ready)
        for slot, i in enumerate(index):
            if items[i].requires_grad:
                items[i] = _attach(Tensor(items[i]._buf.view(0, items[i].shape)), _Slot(gather, slot))
        if isinstance(value, Tensor):
            return items[0], index
        return (items if isinstance(value, list) else tuple(items)), index

    @staticmethod
    def _packed(index, grads, size):
        """The gradients of the tensors at positions ``index``, as one tuple of ``size`` with None elsewhere."""
        out = [None] * size
        for i, g in zip(index, grads):
            out[i] = g
        return tuple(out)

    def setup_input_hook(self, args):
        self.n_inputs = len(args)
        args, self.input_index = self._wrap(args, self._inputs_ready)
        if self.input_index is not None:
            self.input_specs = tuple((args[i].shape, args[i].dtype, args[i].device) for i in self.input_index)
        return args

    def setup_output_hook(self, result):
        self.n_outputs = len(_items(result))
        result, self.output_index = self._wrap(result, self._outputs_ready)
        return result

    def _outputs_ready(self, grads):
        grad_output = self._packed(self.output_index, grads, self.n_outputs)
        for hook in self.pre_hooks:
            res = hook(self.module, grad_output)
            if res is not None:
                grad_output = _checked("backward pre", res, grad_output, self.output_index)
        if self.input_index is None:
            self._hooks_without_inputs(grad_output)
        else:
            self.grad_output = grad_output
        return tuple(grad_output[i] for i in self.output_index)

    def _hooks_without_inputs(self, grad_output):
        """No input needs a gradient: the hooks run now, with a grad_input of
        Nones, and may not replace it (PyTorch's rule and warning)."""
        if not self.hooks:
            return
        warnings.warn("Full backward hook is firing when gradients are computed with respect to module outputs "
                      "since no inputs require gradients. See "
                      "https://docs.pytorch.org/docs/main/generated/torch.nn.Module.html"
                      "#torch.nn.Module.register_full_backward_hook for more details.", stacklevel=2)
        grad_input = (None,) * self.n_inputs
        for hook in self.hooks:
            res = hook(self.module, grad_input, grad_output)
            if res is not None and not (isinstance(res, tuple) and all(g is None for g in res)):
                raise RuntimeError("Backward hook for Modules where no input requires gradient should always "
                                   "return None or None for all gradients.")

    def _inputs_ready(self, grads):
        if self.grad_output is None:
            # The gradient reached the inputs without passing the outputs (as in a
            # double backward): PyTorch runs no hook then.
            return grads
        grads = [zeros(shape, dtype=dtype, device=device) if g is None else g
                 for g, (shape, dtype, device) in zip(grads, self.input_specs)]
        grad_input = self._packed(self.input_index, grads, self.n_inputs)
        for hook in self.hooks:
            res = hook(self.module, grad_input, self.grad_output)
            if res is not None:
                grad_input = _checked("full backward", res, grad_input, self.input_index)
        self.grad_output = None
        return tuple(grad_input[i] for i in self.input_index)
