"""Learning-rate scheduler state dicts in PyTorch's shape: MultiStepLR's
milestones saved as a collections.Counter, and LambdaLR / MultiplicativeLR's
``lr_lambdas`` (None for a plain function, the ``__dict__`` of a callable
object); schedulers over a param group added after them; and the warning
for a schedule stepped before its optimizer, as PyTorch's."""

import collections
import warnings

import pytest

import ddpc
from ddpc import optim
from ddpc.optim import lr_scheduler


def sgd(lr=1.0):
    return optim.SGD([ddpc.zeros(1, requires_grad=True)], lr=lr)


def lrs_of(o, s, steps):
    out = []
    for _ in range(steps):
        o.step()
        s.step()
        out.append(s.get_last_lr()[0])
    return out


@pytest.mark.parametrize("milestones", [collections.Counter([3, 6, 9, 9]), [3, 6, 9, 9]])
def test_multistep_lr_loads_milestones_as_a_counter_or_a_sorted_list(milestones):
    saved = lr_scheduler.MultiStepLR(sgd(), milestones=[3, 6, 9, 9], gamma=0.1).state_dict()
    saved.update(milestones=milestones, last_epoch=2, _last_lr=[1.0])
    o = sgd()
    s = lr_scheduler.MultiStepLR(o, milestones=[1], gamma=0.1)  # the loaded milestones replace [1]
    s.load_state_dict(saved)
    # epochs 3..10: gamma once at 3 and 6, twice at 9 (listed twice)
    assert lrs_of(o, s, 8) == pytest.approx([1e-1, 1e-1, 1e-1, 1e-2, 1e-2, 1e-2, 1e-4, 1e-4])
    s.step(7)  # the closed form counts the milestones reached: 3 and 6
    assert s.get_last_lr() == pytest.approx([1e-2])
    assert s.state_dict()["milestones"] == [3, 6, 9, 9]  # ddpc's own form, whichever was loaded


class HalfLife:
    """A callable object whose state (its rate) a state dict carries."""

    def __init__(self, rate):
        self.rate = rate

    def __call__(self, epoch):
        return self.rate ** epoch


@pytest.mark.parametrize("cls", [lr_scheduler.LambdaLR, lr_scheduler.MultiplicativeLR])
def test_lambda_schedulers_keep_plain_functions_on_a_saved_none(cls):
    o = sgd()
    s = cls(o, lambda e: 0.5)
    # as PyTorch saves it after one step of lambda e: 0.5
    s.load_state_dict({"base_lrs": [1.0], "last_epoch": 1, "_step_count": 2, "_last_lr": [0.5],
                       "lr_lambdas": [None]})
    o.param_groups[0]["lr"] = 0.5
    o.step()
    s.step()
    # LambdaLR: 1.0 * 0.5; MultiplicativeLR: 0.5 * 0.5
    assert s.get_last_lr() == [0.5 if cls is lr_scheduler.LambdaLR else 0.25]
    assert callable(s.lr_lambdas[0])


@pytest.mark.parametrize("cls", [lr_scheduler.LambdaLR, lr_scheduler.MultiplicativeLR])
def test_lambda_schedulers_save_and_restore_a_callable_objects_state(cls):
    o = optim.SGD([{"params": [ddpc.zeros(1, requires_grad=True)]},
                   {"params": [ddpc.zeros(1, requires_grad=True)]}], lr=1.0)
    s = cls(o, [HalfLife(0.5), lambda e: 1.0])
    saved = s.state_dict()
    assert saved["lr_lambdas"] == [{"rate": 0.5}, None]
    o2 = optim.SGD([{"params": [ddpc.zeros(1, requires_grad=True)]},
                    {"params": [ddpc.zeros(1, requires_grad=True)]}], lr=1.0)
    s2 = cls(o2, [HalfLife(0.1), lambda e: 1.0])
    s2.load_state_dict(saved)
    assert s2.lr_lambdas[0].rate == 0.5 and s2.lr_lambdas[1](3) == 1.0
    assert "lr_lambdas" in saved  # the caller's dict is left as it was
    o2.step()
    s2.step()
    assert s2.get_last_lr() == [0.5, 1.0]  # LambdaLR: 1 * 0.5 ** 1; MultiplicativeLR: 1 * 0.5 ** 1


def test_reduce_lr_on_plateau_reduces_groups_added_later_to_its_min_lr():
    o = sgd(1.0)
    s = lr_scheduler.ReduceLROnPlateau(o, patience=0, factor=0.5, min_lr=0.3)
    o.add_param_group({"params": [ddpc.zeros(1, requires_grad=True)], "lr": 2.0})
    for _ in range(3):  # the first metric is the best; each later one halves every group's lr, to min_lr at least
        s.step(1.0)
    assert s.get_last_lr() == [0.3, 0.5] and s.min_lrs == [0.3, 0.3]


def test_reduce_lr_on_plateau_is_an_lr_scheduler_and_takes_an_epoch():
    o = sgd(1.0)
    s = lr_scheduler.ReduceLROnPlateau(o, patience=0, factor=0.5)
    assert isinstance(s, lr_scheduler.LRScheduler)  # code that sorts schedulers by isinstance, as Lightning does
    s.step(1.0)
    s.step(2.0, epoch=7)
    assert s.last_epoch == 7 and s.get_last_lr() == [0.5]
    assert "optimizer" not in s.state_dict() and s.state_dict()["num_bad_epochs"] == 0


def test_reduce_lr_on_plateau_with_a_min_lr_per_group_refuses_groups_added_later():
    o = sgd()
    s = lr_scheduler.ReduceLROnPlateau(o, patience=0, min_lr=[0.0])
    o.add_param_group({"params": [ddpc.zeros(1, requires_grad=True)]})
    s.step(1.0)  # nothing to reduce yet
    with pytest.raises(RuntimeError, match="differs from when `ReduceLROnPlateau` was initialized"):
        s.step(1.0)


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before:UserWarning")  # stepped alone
@pytest.mark.parametrize("make", [lambda o: lr_scheduler.LambdaLR(o, lambda e: 0.5 ** e),
                                  lambda o: lr_scheduler.MultiplicativeLR(o, lambda e: 0.9),
                                  lambda o: lr_scheduler.CyclicLR(o, 0.1, 1.0, step_size_up=2),
                                  lambda o: lr_scheduler.CosineAnnealingWarmRestarts(o, 2)],
                         ids=["LambdaLR", "MultiplicativeLR", "CyclicLR", "CosineAnnealingWarmRestarts"])
def test_schedulers_with_values_per_group_refuse_groups_added_later(make):
    o = sgd()
    s = make(o)
    o.add_param_group({"params": [ddpc.zeros(1, requires_grad=True)], "lr": 0.2})
    with pytest.raises(ValueError, match="zip"):  # PyTorch's strict zip of the groups and their values
        s.step()


@pytest.mark.filterwarnings("ignore:Detected call of `lr_scheduler.step\\(\\)` before:UserWarning")  # stepped alone
def test_chainable_schedulers_drive_groups_added_later_but_not_their_closed_form():
    o = sgd()
    s = lr_scheduler.StepLR(o, 1, gamma=0.5)
    o.add_param_group({"params": [ddpc.zeros(1, requires_grad=True)], "lr": 0.2})
    s.step()
    assert s.get_last_lr() == [0.5, 0.1]
    with pytest.raises(ValueError, match="zip"):  # the closed form reads base_lrs, one per group it was built with
        s.step(3)


@pytest.mark.parametrize("optimizer_first", [True, False])
def test_stepping_the_schedule_before_the_optimizer_warns_once(optimizer_first):
    p = ddpc.nn.Parameter(ddpc.ones(2))
    opt = ddpc.optim.SGD([p], lr=0.1)
    sched = ddpc.optim.lr_scheduler.StepLR(opt, 2)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(3):
            if optimizer_first:
                opt.step()
            sched.step()
            if not optimizer_first:
                opt.step()
    order = [w for w in caught if "before `optimizer.step()`" in str(w.message)]
    assert len(order) == (0 if optimizer_first else 1)
    assert sched.state_dict()["_step_count"] == 4  # the constructor's step and three
