"""The base of the optimizers whose update is one kind of _C.optim_step
(RMSprop, Adagrad, Adamax, NAdam, RAdam, Adadelta): state creation in
PyTorch's names and order, and one fused multi-tensor call per group.

Float16 and bfloat16 parameters are updated in float32 and rounded once, with
their state in their own dtype. ``foreach`` and ``fused`` are accepted for
PyTorch's signatures: every step is one fused multi-tensor call.
"""

from .. import _C
from .._dtype import real_pairs
from ..tensor import full_like
from .optimizer import Optimizer


class _FusedOptimizer(Optimizer):
    _kind = None  # the _C.optim_step kind
    _complex_params = True

    def _state_names(self, group):
        """The names of the state tensors handed to the step as state1..3, None where unused."""
        raise NotImplementedError

    def _step_args(self, group):
        """The hyper-parameters of _C.optim_step besides lr, eps, weight_decay and maximize."""
        return {}

    def _initial_state(self, group):
        """The value the state tensors start at."""
        return 0.0

    def _init_state(self, p, group):
        s = self.state[p]
        if not s:
            s["step"] = 0
        value = self._initial_state(group)
        for name in self._state_names(group):
            if name is not None and name not in s:
                s[name] = full_like(p, value)

    def _dense_grads(self, group):
        """The parameters this group's fused call updates."""
        return [p for p in group["params"] if p.grad is not None]

    def _step_group(self, group):
        params = self._dense_grads(group)
        if not params:
            return
        names = self._state_names(group)
        # Parameters at different steps (added to a group later) get a call each until caught up.
        batches = {}
        for p in params:
            self._init_state(p, group)
            s = self.state[p]
            batches.setdefault((s["step"] + 1, s.get("mu_product")), []).append(p)
        for (step, mu_product), batch in batches.items():
            st = [self.state[p] for p in batch]
            lists = [None if n is None else [real_pairs(s[n]._buf) for s in st] for n in names]
            lists += [None] * (3 - len(lists))
            extra = self._step_args(group)
            if mu_product is not None:
                extra["mu_product"] = float(mu_product)
            out = _C.optim_step(self._kind, [real_pairs(p._buf) for p in batch],
                                [real_pairs(p.grad._buf) for p in batch], *lists, step,
                                float(group["lr"]), float(group["eps"]), float(group["weight_decay"]),
                                bool(group["maximize"]), **extra)
            # Counted only once taken: after a step that raised, the next one is still this step.
            for s in st:
                s["step"] = step
                if mu_product is not None:
                    s["mu_product"] = out
