"""Learning-rate schedulers, as torch.optim.lr_scheduler: StepLR,
MultiStepLR, ExponentialLR, ConstantLR, LinearLR, PolynomialLR,
CosineAnnealingLR, MultiplicativeLR, CosineAnnealingWarmRestarts, CyclicLR,
OneCycleLR, LambdaLR, SequentialLR, ChainedScheduler and ReduceLROnPlateau.

As in PyTorch, StepLR, MultiStepLR, ExponentialLR, ConstantLR, LinearLR,
PolynomialLR, CosineAnnealingLR and MultiplicativeLR are chainable: step()
changes each group's current lr by the schedule's factor for this epoch, so
several of them on one optimizer compose (ChainedScheduler steps them
together) and an lr set by hand carries on scaled. step(epoch) jumps to the
closed form lr = f(base_lr, epoch) instead. The others compute the closed form
from the epoch count and overwrite the lr on every step(); ReduceLROnPlateau
scales the current lr when the metric it is given stalls. CyclicLR and
OneCycleLR also cycle the momentum (SGD's ``momentum``, Adam's beta1) against
the lr, as PyTorch's ``cycle_momentum`` does.
"""

import bisect
import collections
import math
import warnings
import types


def _per_group(name, optimizer, value):
    """One value per param group: a list or tuple as given, anything else repeated."""
    n = len(optimizer.param_groups)
    if not isinstance(value, (list, tuple)):
        return [value] * n
    if len(value) != n:
        raise ValueError(f"expected {n} {name}, one per param group, got {len(value)}")
    return list(value)


def _momentum_key(optimizer):
    """The group entry that cycle_momentum drives: Adam's betas (beta1) or SGD's momentum."""
    for key in ("betas", "momentum"):
        if key in optimizer.defaults:
            return key
    raise ValueError("optimizer must support momentum or beta1 with `cycle_momentum` option enabled")


def _set_momentum(group, key, value):
    group[key] = (value, *group["betas"][1:]) if key == "betas" else value


def _start_momentum(optimizer, key, base_momentum, max_momentum):
    """Starts every group at its max_momentum and records both bounds in it, as PyTorch does."""
    for g, low, high in zip(optimizer.param_groups, _per_group("base_momentum", optimizer, base_momentum),
                            _per_group("max_momentum", optimizer, max_momentum)):
        _set_momentum(g, key, high)
        g["max_momentum"], g["base_momentum"] = high, low


class LRScheduler:
    # What state_dict() leaves out: the optimizer, and in subclasses code (lambdas) or other schedulers.
    _unsaved = ("optimizer",)
    # True during the step the constructor takes: a chainable schedule keeps the lr it finds there.
    _is_initial = False

    def __init__(self, optimizer, last_epoch=-1):
        self.optimizer = optimizer
        if last_epoch == -1:
            for g in optimizer.param_groups:
                g.setdefault("initial_lr", g["lr"])
        else:
            for i, g in enumerate(optimizer.param_groups):
                if "initial_lr" not in g:
                    raise KeyError(f"param 'initial_lr' is not specified in param_groups[{i}] when resuming")
        self.base_lrs = [g["initial_lr"] for g in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._initial_step()

    def _initial_step(self):
        self._is_initial = True
        self._step_count = 0  # steps taken, the constructor's among them (as PyTorch's, saved with the state)
        try:
            self.step()
        finally:
            self._is_initial = False

    def _count_step(self):
        """Counts a step, and warns as PyTorch does where the first after the
        constructor's comes before any optimizer step: the schedule's first
        value is then skipped."""
        if getattr(self, "_step_count", 0) == 1 and not getattr(self.optimizer, "_opt_called", False):
            warnings.warn("Detected call of `lr_scheduler.step()` before `optimizer.step()`. In PyTorch 1.1.0 and "
                          "later, you should call them in the opposite order: `optimizer.step()` before "
                          "`lr_scheduler.step()`.  Failure to do this will result in PyTorch skipping the first value "
                          "of the learning rate schedule.", UserWarning, stacklevel=3)
        self._step_count = getattr(self, "_step_count", 0) + 1

    def get_lr(self):
        """The lrs for self.last_epoch; a chainable schedule derives them from the groups' current lrs."""
        raise NotImplementedError

    def get_last_lr(self):
        return list(self._last_lr)

    def step(self, epoch=None):
        """The next epoch's lrs; with ``epoch``, that epoch's, from the closed form where the schedule has one."""
        self._count_step()
        if epoch is None:
            self.last_epoch += 1
            self._set_lrs(self.get_lr())
        else:
            self.last_epoch = int(epoch)
            self._set_lrs(getattr(self, "_get_closed_form_lr", self.get_lr)())

    def _current_lrs(self):
        return [g["lr"] for g in self.optimizer.param_groups]

    def _set_lrs(self, lrs):
        # Strict, as PyTorch's: values computed per group the scheduler was built with (base_lrs, lr_lambdas)
        # do not reach a group added to the optimizer later, so that raises instead.
        for g, lr in zip(self.optimizer.param_groups, lrs, strict=True):
            g["lr"] = lr
        self._last_lr = self._current_lrs()

    def _step_back(self):
        """Takes back the epoch of the constructor's step (SequentialLR restarts its schedulers)."""
        self.last_epoch -= 1

    def state_dict(self):
        return {k: v for k, v in self.__dict__.items() if k not in self._unsaved}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)


class StepLR(LRScheduler):
    """lr *= gamma every step_size epochs: lr = base_lr * gamma ** (epoch // step_size) alone. Chainable."""

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        self.step_size, self.gamma = int(step_size), gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return self._current_lrs()
        return [g["lr"] * self.gamma for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self):
        return [base * self.gamma ** (self.last_epoch // self.step_size) for base in self.base_lrs]


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2 alone. Chainable: each step
    scales lr - eta_min by the ratio of consecutive cosine terms (PyTorch's recursive form)."""

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self._is_initial:
            return self._current_lrs()
        if (self.last_epoch - 1 - self.T_max) % (2 * self.T_max) == 0:
            # Leaving the minimum, where the ratio's denominator is 0: add the first step up instead.
            return [g["lr"] + (base - self.eta_min) * (1 - math.cos(math.pi / self.T_max)) / 2
                    for base, g in zip(self.base_lrs, self.optimizer.param_groups, strict=True)]
        ratio = (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / (
            1 + math.cos(math.pi * (self.last_epoch - 1) / self.T_max))
        return [ratio * (g["lr"] - self.eta_min) + self.eta_min for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self):
        return [self.eta_min + (base - self.eta_min) * (1 + math.cos(math.pi * self.last_epoch / self.T_max)) / 2
                for base in self.base_lrs]


class CosineAnnealingWarmRestarts(LRScheduler):
    """SGDR: lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * T_cur / T_i)) / 2,
    restarting at base_lr after T_i epochs; T_i starts at T_0 and grows by
    T_mult at each restart. step(epoch) also takes a fractional epoch (epoch +
    batch / batches) to anneal within an epoch."""

    def __init__(self, optimizer, T_0, T_mult=1, eta_min=0.0, last_epoch=-1):
        if not isinstance(T_0, int) or T_0 <= 0:
            raise ValueError(f"Expected positive integer T_0, but got {T_0}")
        if not isinstance(T_mult, int) or T_mult < 1:
            raise ValueError(f"Expected integer T_mult >= 1, but got {T_mult}")
        self.T_0, self.T_i, self.T_mult, self.eta_min = T_0, T_0, T_mult, eta_min
        self.T_cur = last_epoch
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        c = (1 + math.cos(math.pi * self.T_cur / self.T_i)) / 2
        return [self.eta_min + (base - self.eta_min) * c for base in self.base_lrs]

    def step(self, epoch=None):
        if epoch is None and self.last_epoch < 0:
            epoch = 0
        if epoch is None:
            epoch = self.last_epoch + 1
            self.T_cur += 1
            if self.T_cur >= self.T_i:
                self.T_cur %= self.T_i
                self.T_i *= self.T_mult
        elif epoch < 0:
            raise ValueError(f"Expected non-negative epoch, but got {epoch}")
        elif epoch < self.T_0:
            self.T_i, self.T_cur = self.T_0, epoch
        elif self.T_mult == 1:
            self.T_cur = epoch % self.T_0
        else:
            # Restarts so far: the n with T_0 * (T_mult^n - 1) / (T_mult - 1) <= epoch.
            n = int(math.log(epoch / self.T_0 * (self.T_mult - 1) + 1, self.T_mult))
            self.T_cur = epoch - self.T_0 * (self.T_mult ** n - 1) / (self.T_mult - 1)
            self.T_i = self.T_0 * self.T_mult ** n
        self.last_epoch = math.floor(epoch)
        self._set_lrs(self.get_lr())


class CyclicLR(LRScheduler):
    """Cyclical learning rates: lr climbs from base_lr to max_lr in step_size_up
    batches and back in step_size_down (default the same), the swing scaled by
    mode ("triangular": 1, "triangular2": halved every cycle, "exp_range":
    gamma ** batch) or by scale_fn(cycle or batch, per scale_mode). With
    cycle_momentum the momentum moves the other way, max_momentum to
    base_momentum. Step it after every batch. base_lr replaces the groups' lr.
    scale_fn is code, so state_dict() leaves it out."""

    _unsaved = ("optimizer", "scale_fn_custom")

    def __init__(self, optimizer, base_lr, max_lr, step_size_up=2000, step_size_down=None, mode="triangular",
                 gamma=1.0, scale_fn=None, scale_mode="cycle", cycle_momentum=True, base_momentum=0.8,
                 max_momentum=0.9, last_epoch=-1):
        base_lrs = _per_group("base_lr", optimizer, base_lr)
        if last_epoch == -1:
            for g, lr in zip(optimizer.param_groups, base_lrs):
                g["lr"] = lr
        self.max_lrs = _per_group("max_lr", optimizer, max_lr)
        up = float(step_size_up)
        down = float(step_size_down) if step_size_down is not None else up
        self.total_size, self.step_ratio = up + down, up / (up + down)
        if scale_fn is None and mode not in ("triangular", "triangular2", "exp_range"):
            raise ValueError("mode is invalid and scale_fn is None")
        self.mode, self.gamma, self.scale_fn_custom = mode, gamma, scale_fn
        if scale_fn is None:
            scale_mode = "iterations" if mode == "exp_range" else "cycle"
        self.scale_mode = scale_mode
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self._momentum = _momentum_key(optimizer)
            self.base_momentums = _per_group("base_momentum", optimizer, base_momentum)
            self.max_momentums = _per_group("max_momentum", optimizer, max_momentum)
            if last_epoch == -1:
                _start_momentum(optimizer, self._momentum, base_momentum, max_momentum)
        super().__init__(optimizer, last_epoch)
        self.base_lrs = base_lrs

    def scale_fn(self, x):
        if self.scale_fn_custom is not None:
            return self.scale_fn_custom(x)
        if self.mode == "triangular":
            return 1.0
        if self.mode == "triangular2":
            return 1 / (2.0 ** (x - 1))
        return self.gamma ** x

    def get_lr(self):
        cycle = math.floor(1 + self.last_epoch / self.total_size)
        x = 1.0 + self.last_epoch / self.total_size - cycle
        rise = x / self.step_ratio if x <= self.step_ratio else (x - 1) / (self.step_ratio - 1)
        scale = self.scale_fn(cycle if self.scale_mode == "cycle" else self.last_epoch)
        if self.cycle_momentum:
            for g, low, high in zip(self.optimizer.param_groups, self.base_momentums, self.max_momentums,
                                    strict=True):
                _set_momentum(g, self._momentum, high - (high - low) * rise * scale)
        return [base + (top - base) * rise * scale for base, top in zip(self.base_lrs, self.max_lrs)]


class OneCycleLR(LRScheduler):
    """The 1cycle policy: lr rises from max_lr / div_factor to max_lr over the
    first pct_start of total_steps (or epochs * steps_per_epoch), then anneals
    ("cos" or "linear") to that start / final_div_factor; with three_phase it
    first comes back down to the start, symmetrically, and anneals to the
    minimum in a third phase. With cycle_momentum the momentum moves the other
    way, max_momentum to base_momentum. Step it after every batch; stepping
    past total_steps raises."""

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None, pct_start=0.3,
                 anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85, max_momentum=0.95, div_factor=25.0,
                 final_div_factor=1e4, three_phase=False, last_epoch=-1):
        if total_steps is None:
            if epochs is None or steps_per_epoch is None:
                raise ValueError("You must define either total_steps OR (epochs AND steps_per_epoch)")
            if not isinstance(epochs, int) or epochs <= 0:
                raise ValueError(f"Expected positive integer epochs, but got {epochs}")
            if not isinstance(steps_per_epoch, int) or steps_per_epoch <= 0:
                raise ValueError(f"Expected positive integer steps_per_epoch, but got {steps_per_epoch}")
            total_steps = epochs * steps_per_epoch
        if not isinstance(total_steps, int) or total_steps <= 0:
            raise ValueError(f"Expected positive integer total_steps, but got {total_steps}")
        if not 0 <= pct_start <= 1:
            raise ValueError(f"Expected float between 0 and 1 pct_start, but got {pct_start}")
        if anneal_strategy not in ("cos", "linear"):
            raise ValueError(f"anneal_strategy must be one of 'cos' or 'linear', instead got {anneal_strategy}")
        self.total_steps, self.anneal_strategy = total_steps, anneal_strategy
        # Phases: (last step, lr from, lr to, momentum from, momentum to), the values named by group entries.
        rise = float(pct_start * total_steps) - 1
        if three_phase:
            self._phases = [(rise, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                            (float(2 * pct_start * total_steps) - 2, "max_lr", "initial_lr", "base_momentum",
                             "max_momentum"),
                            (total_steps - 1, "initial_lr", "min_lr", "max_momentum", "max_momentum")]
        else:
            self._phases = [(rise, "initial_lr", "max_lr", "max_momentum", "base_momentum"),
                            (total_steps - 1, "max_lr", "min_lr", "base_momentum", "max_momentum")]
        if last_epoch == -1:
            for g, top in zip(optimizer.param_groups, _per_group("max_lr", optimizer, max_lr)):
                g["initial_lr"], g["max_lr"] = top / div_factor, top
                g["min_lr"] = g["initial_lr"] / final_div_factor
        self.cycle_momentum = cycle_momentum
        if cycle_momentum:
            self._momentum = _momentum_key(optimizer)
            if last_epoch == -1:
                _start_momentum(optimizer, self._momentum, base_momentum, max_momentum)
        super().__init__(optimizer, last_epoch)

    def _anneal(self, start, end, pct):
        if self.anneal_strategy == "cos":
            return end + (start - end) / 2.0 * (math.cos(math.pi * pct) + 1)
        return (end - start) * pct + start

    def get_lr(self):
        step = self.last_epoch
        if step > self.total_steps:
            raise ValueError(f"Tried to step {step} times. The specified number of total steps is {self.total_steps}")
        begin = 0.0
        for end, lr0, lr1, m0, m1 in self._phases[:-1]:
            if step <= end:
                break
            begin = end
        else:
            end, lr0, lr1, m0, m1 = self._phases[-1]
        pct = (step - begin) / (end - begin)
        lrs = []
        for g in self.optimizer.param_groups:  # group by group, lr first: a group added later fails as in PyTorch
            lrs.append(self._anneal(g[lr0], g[lr1], pct))
            if self.cycle_momentum:
                _set_momentum(g, self._momentum, self._anneal(g[m0], g[m1], pct))
        return lrs


def _lambdas(optimizer, lr_lambda):
    lambdas = _per_group("lr_lambdas", optimizer, lr_lambda)
    for f in lambdas:
        if not callable(f):
            raise TypeError(f"lr_lambda should be a function, but got {type(f).__name__}")
    return lambdas


class _LambdaScheduler(LRScheduler):
    """A schedule driven by one lr_lambda per group. Lambdas are code, so, as
    in PyTorch, state_dict() saves under ``lr_lambdas`` None for a plain
    function and a copy of the ``__dict__`` of a callable object, and
    load_state_dict() restores only those ``__dict__`` entries."""

    _unsaved = ("optimizer", "lr_lambdas")

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        self.lr_lambdas = _lambdas(optimizer, lr_lambda)
        super().__init__(optimizer, last_epoch)

    def state_dict(self):
        state = super().state_dict()
        state["lr_lambdas"] = [None if isinstance(f, types.FunctionType) else f.__dict__.copy()
                               for f in self.lr_lambdas]
        return state

    def load_state_dict(self, state_dict):
        state = dict(state_dict)
        for f, saved in zip(self.lr_lambdas, state.pop("lr_lambdas", ())):
            if saved is not None:
                f.__dict__.update(saved)
        super().load_state_dict(state)


class LambdaLR(_LambdaScheduler):
    """lr = base_lr * lr_lambda(epoch), one function for all groups or one per group."""

    def get_lr(self):
        return [base * f(self.last_epoch) for base, f in zip(self.base_lrs, self.lr_lambdas)]


class MultiplicativeLR(_LambdaScheduler):
    """lr *= lr_lambda(epoch) on every step, one function for all groups or one per group. Chainable, with
    no closed form: step(epoch) scales the current lr by lr_lambda(epoch)."""

    def get_lr(self):
        if self._is_initial:
            return self._current_lrs()
        return [g["lr"] * f(self.last_epoch) for f, g in zip(self.lr_lambdas, self.optimizer.param_groups,
                                                             strict=True)]


class MultiStepLR(LRScheduler):
    """lr *= gamma at each milestone (once per time it is listed): lr = base_lr * gamma ** (milestones
    reached) alone. Chainable."""

    def __init__(self, optimizer, milestones, gamma=0.1, last_epoch=-1):
        self.milestones, self.gamma = sorted(int(m) for m in milestones), gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        hits = (bisect.bisect_right(self.milestones, self.last_epoch)
                - bisect.bisect_left(self.milestones, self.last_epoch))
        if not hits:
            return self._current_lrs()
        return [g["lr"] * self.gamma ** hits for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self):
        return [base * self.gamma ** bisect.bisect_right(self.milestones, self.last_epoch) for base in self.base_lrs]

    def load_state_dict(self, state_dict):
        """Also takes PyTorch's state, whose milestones are a collections.Counter (ddpc keeps a sorted list)."""
        milestones = state_dict.get("milestones")
        if isinstance(milestones, collections.Counter):
            state_dict = {**state_dict, "milestones": sorted(milestones.elements())}
        super().load_state_dict(state_dict)


class ExponentialLR(LRScheduler):
    """lr *= gamma every epoch: lr = base_lr * gamma ** epoch alone. Chainable."""

    def __init__(self, optimizer, gamma, last_epoch=-1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self._is_initial:
            return self._current_lrs()
        return [g["lr"] * self.gamma for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self):
        return [base * self.gamma ** self.last_epoch for base in self.base_lrs]


class ConstantLR(LRScheduler):
    """lr = base_lr * factor for the first total_iters epochs, then base_lr, alone. Chainable: the lr is
    multiplied by factor at epoch 0 and divided by it at total_iters (so factor=0 fails there, as in PyTorch)."""

    def __init__(self, optimizer, factor=1.0 / 3, total_iters=5, last_epoch=-1):
        if not 0 <= factor <= 1:
            raise ValueError(f"ConstantLR: factor must be between 0 and 1, got {factor}")
        self.factor, self.total_iters = factor, int(total_iters)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0:
            return [g["lr"] * self.factor for g in self.optimizer.param_groups]
        if self.last_epoch != self.total_iters:
            return self._current_lrs()
        return [g["lr"] * (1.0 / self.factor) for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self):
        f = self.factor if self.last_epoch < self.total_iters else 1.0
        return [base * f for base in self.base_lrs]


class LinearLR(LRScheduler):
    """lr = base_lr * a factor going linearly from start_factor to end_factor over total_iters epochs (a
    warm-up) alone. Chainable: each step scales the lr by the ratio of consecutive factors."""

    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5, last_epoch=-1):
        if not 0 < start_factor <= 1 or not 0 <= end_factor <= 1:
            raise ValueError("LinearLR: start_factor must be in (0, 1] and end_factor in [0, 1]")
        self.start_factor, self.end_factor, self.total_iters = start_factor, end_factor, int(total_iters)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0:
            return [g["lr"] * self.start_factor for g in self.optimizer.param_groups]
        if self._is_initial or self.last_epoch > self.total_iters:
            return self._current_lrs()
        slope = self.end_factor - self.start_factor
        ratio = 1.0 + slope / (self.total_iters * self.start_factor + (self.last_epoch - 1) * slope)
        return [g["lr"] * ratio for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self):
        f = self.start_factor + (self.end_factor - self.start_factor) * min(self.total_iters, self.last_epoch) \
            / self.total_iters
        return [base * f for base in self.base_lrs]


class PolynomialLR(LRScheduler):
    """lr = base_lr * (1 - min(epoch, total_iters) / total_iters) ** power alone. Chainable: each step
    scales the lr by the ratio of consecutive factors."""

    def __init__(self, optimizer, total_iters=5, power=1.0, last_epoch=-1):
        self.total_iters, self.power = int(total_iters), power
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self._is_initial or self.last_epoch > self.total_iters:
            return self._current_lrs()
        ratio = ((1.0 - self.last_epoch / self.total_iters)
                 / (1.0 - (self.last_epoch - 1) / self.total_iters)) ** self.power
        return [g["lr"] * ratio for g in self.optimizer.param_groups]

    def _get_closed_form_lr(self):
        f = (1 - min(self.last_epoch, self.total_iters) / self.total_iters) ** self.power
        return [base * f for base in self.base_lrs]


class _Composite(LRScheduler):
    """A scheduler that steps others on one optimizer; its state holds theirs."""

    _unsaved = ("optimizer", "_schedulers")

    def _adopt(self, schedulers, optimizer):
        name = type(self).__name__
        if not schedulers:
            raise ValueError(f"{name} needs at least one scheduler")
        optimizer = schedulers[0].optimizer if optimizer is None else optimizer
        for i, s in enumerate(schedulers):
            if isinstance(s, ReduceLROnPlateau):
                why = f"{name}: ReduceLROnPlateau (at index {i}) takes a metric in step(), so it cannot be stepped"
                raise ValueError(why)  # noqa: TRY004  (a ValueError, as PyTorch raises)
            if s.optimizer is not optimizer:
                raise ValueError(f"{name}: every scheduler must drive the same optimizer")
        self.optimizer, self._schedulers = optimizer, list(schedulers)

    def _step_back(self):
        for s in self._schedulers:
            s._step_back()

    def state_dict(self):
        state = super().state_dict()
        state["_schedulers"] = [s.state_dict() for s in self._schedulers]
        return state

    def load_state_dict(self, state_dict):
        state = dict(state_dict)
        for s, sd in zip(self._schedulers, state.pop("_schedulers")):
            s.load_state_dict(sd)
        self.__dict__.update(state)


class SequentialLR(_Composite):
    """Runs ``schedulers[i]`` from ``milestones[i - 1]`` on (e.g. LinearLR warm-up, then cosine): at its
    milestone a scheduler jumps to its own epoch 0 (its closed form), then steps from there."""

    def __init__(self, optimizer, schedulers, milestones, last_epoch=-1):
        self._adopt(schedulers, optimizer)
        if len(milestones) != len(schedulers) - 1:
            raise ValueError(f"SequentialLR: {len(schedulers)} schedulers need {len(schedulers) - 1} milestones, "
                             f"got {len(milestones)}")
        self._milestones, self.last_epoch = [int(m) for m in milestones], last_epoch + 1
        # Every scheduler stepped the lrs when it was built: start again from the initial lrs, with each of
        # them an epoch back, and let the first one alone take its constructor's step.
        for g in optimizer.param_groups:
            g["lr"] = g["initial_lr"]
        self._step_back()
        first = self._schedulers[bisect.bisect_right(self._milestones, 0)]
        first._initial_step()
        self._last_lr = first.get_last_lr()

    def step(self, epoch=None):
        self.last_epoch = self.last_epoch + 1 if epoch is None else int(epoch)
        k = bisect.bisect_right(self._milestones, self.last_epoch)
        start = self._milestones[k - 1] if k else 0
        if epoch is not None or (k and self.last_epoch == start):
            self._schedulers[k].step(self.last_epoch - start)
        else:
            self._schedulers[k].step()
        self._last_lr = self._schedulers[k].get_last_lr()


class ChainedScheduler(_Composite):
    """Steps every scheduler of ``schedulers`` on each step(), in order, so that chainable ones compose
    (e.g. a ConstantLR warm-up on top of an ExponentialLR decay); ``optimizer`` defaults to theirs."""

    def __init__(self, schedulers, optimizer=None):
        self._adopt(schedulers, optimizer)
        self._last_lr = self._current_lrs()

    def step(self):
        for s in self._schedulers:
            s.step()
        self._last_lr = self._current_lrs()


class ReduceLROnPlateau(LRScheduler):
    """Scales every group's lr by ``factor`` once the metric passed to
    ``step(metric)`` has not improved for ``patience`` epochs (improved:
    below the best by ``threshold``, relative or absolute, in mode "min";
    above it in mode "max"), then waits ``cooldown`` epochs; never below ``min_lr``.
    A group added to the optimizer later gets a single ``min_lr``; one per group refuses it.
    An LRScheduler, as PyTorch's, though it takes no ``base_lrs``: it follows the groups' current lrs."""

    def __init__(self, optimizer, mode="min", factor=0.1, patience=10, threshold=1e-4, threshold_mode="rel",
                 cooldown=0, min_lr=0, eps=1e-8):
        if factor >= 1.0:
            raise ValueError("ReduceLROnPlateau: factor must be < 1")
        if mode not in ("min", "max") or threshold_mode not in ("rel", "abs"):
            raise ValueError("ReduceLROnPlateau: mode is min or max, threshold_mode rel or abs")
        self.min_lrs = _per_group("min_lrs", optimizer, min_lr)
        self.default_min_lr = None if isinstance(min_lr, (list, tuple)) else min_lr
        self.optimizer, self.mode, self.factor, self.patience = optimizer, mode, factor, int(patience)
        self.threshold, self.threshold_mode, self.cooldown, self.eps = threshold, threshold_mode, int(cooldown), eps
        self.best = math.inf if mode == "min" else -math.inf
        self.num_bad_epochs = self.cooldown_counter = self.last_epoch = 0
        self._last_lr = [g["lr"] for g in optimizer.param_groups]

    def _better(self, a):
        if self.mode == "min":
            return a < (self.best * (1 - self.threshold) if self.threshold_mode == "rel" else self.best - self.threshold)
        return a > (self.best * (1 + self.threshold) if self.threshold_mode == "rel" else self.best + self.threshold)

    def step(self, metrics, epoch=None):
        current = float(metrics)
        self.last_epoch = self.last_epoch + 1 if epoch is None else int(epoch)
        if self._better(current):
            self.best, self.num_bad_epochs = current, 0
        else:
            self.num_bad_epochs += 1
        if self.cooldown_counter > 0:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            self._cover_added_groups()
            for g, low in zip(self.optimizer.param_groups, self.min_lrs):
                new = max(g["lr"] * self.factor, low)
                if g["lr"] - new > self.eps:
                    g["lr"] = new
            self.cooldown_counter, self.num_bad_epochs = self.cooldown, 0
        self._last_lr = [g["lr"] for g in self.optimizer.param_groups]

    def _cover_added_groups(self):
        n = len(self.optimizer.param_groups)
        if n == len(self.min_lrs):
            return
        if self.default_min_lr is None:
            raise RuntimeError(f"The number of param groups in the `optimizer` ({n}) differs from when "
                               f"`ReduceLROnPlateau` was initialized ({len(self.min_lrs)}), usually due to a new "
                               "param group being added to the optimizer. Please modify the `min_lrs` field to "
                               "match the length of the `optimizer` param groups.")
        self.min_lrs = [self.default_min_lr] * n


_LRScheduler = LRScheduler
