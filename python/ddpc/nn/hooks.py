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

from ..autograd import Node, _attach, is_grad_enabled
from ..tensor import Tensor


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
        self.next_functions = (gather,)
        self.gather, self.index = gather, index

    def backward(self, g):
        self.gather.grads[self.index] = g
        return (_ARRIVED,)


def _tensors_of(value):
    """The tensors a forward takes or returns: a tensor, or those at the top level of a tuple or list."""
    if isinstance(value, Tensor):
        return [value]
    if isinstance(value, (tuple, list)):
        return [v for v in value if isinstance(v, Tensor)]
    return []


def _checked(what, new, old):
    """A hook's replacement for the gradient tuple ``old``: a tuple or list of the same length."""
    if not isinstance(new, (tuple, list)) or len(new) != len(old):
        got = f"{len(new)} values" if isinstance(new, (tuple, list)) else type(new).__name__
        raise RuntimeError(f"a {what} hook must return None or a tuple of {len(old)} gradients, got {got}")
    for n, o in zip(new, old):
        if n is not None and (not isinstance(n, Tensor) or (o is not None and n.shape != o.shape)):
            raise RuntimeError(f"a {what} hook returned a gradient of shape "
                               f"{getattr(n, 'shape', type(n).__name__)} where {o.shape} was expected")
    return tuple(new)


class BackwardHook:
    """The full backward (pre-)hooks of one module call: ``setup_input_hook``
    wraps the forward's tensor arguments, ``setup_output_hook`` its result."""

    def __init__(self, module, hooks, pre_hooks):
        self.module, self.hooks, self.pre_hooks = module, list(hooks), list(pre_hooks)
        self.grad_output = None
        self.n_inputs = 0
        self.inputs_wrapped = False

    def _wrap(self, value, on_ready):
        tensors = _tensors_of(value)
        if not is_grad_enabled() or not any(t.requires_grad for t in tensors):
            return value, len(tensors), False
        gather = _Gather(tensors, on_ready)
        wrapped = {}
        for i, t in enumerate(tensors):
            if t.requires_grad:
                wrapped[id(t)] = _attach(Tensor(t._buf.view(0, t.shape)), _Slot(gather, i))
        if isinstance(value, Tensor):
            return wrapped[id(value)], 1, True
        items = [wrapped.get(id(v), v) for v in value]
        return (items if isinstance(value, list) else tuple(items)), len(tensors), True

    def setup_input_hook(self, args):
        args, self.n_inputs, self.inputs_wrapped = self._wrap(args, self._inputs_ready)
        return args

    def setup_output_hook(self, result):
        return self._wrap(result, self._outputs_ready)[0]

    def _outputs_ready(self, grad_output):
        for hook in self.pre_hooks:
            res = hook(self.module, grad_output)
            if res is not None:
                grad_output = _checked("backward pre", res, grad_output)
        self.grad_output = grad_output
        if not self.inputs_wrapped:
            # No input needs a gradient: the hooks run now, with no grad_input.
            self._run_hooks((None,) * self.n_inputs)
        return grad_output

    def _inputs_ready(self, grad_input):
        return self._run_hooks(grad_input)

    def _run_hooks(self, grad_input):
        for hook in self.hooks:
            res = hook(self.module, grad_input, self.grad_output)
            if res is not None:
                grad_input = _checked("full backward", res, grad_input)
        return grad_input
