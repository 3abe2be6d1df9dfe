"""Optimizer hooks, as PyTorch's: step pre and post hooks (per optimizer and
global, for every optimizer class, also one defined outside ddpc), state_dict
and load_state_dict pre and post hooks, their order, prepend, removal
through the returned handles, and copies and pickles that leave them behind."""

import copy
import pickle

import pytest

import ddpc
from ddpc import optim
from ddpc.optim import optimizer as optimizer_module
from ddpc.utils.hooks import RemovableHandle


def sgd(lr=0.5):
    p = ddpc.tensor([1.0], requires_grad=True)
    p.grad = ddpc.tensor([2.0])
    return p, optim.SGD([p], lr=lr)


def test_step_hooks_run_around_the_step_with_its_arguments_and_are_removable():
    p, opt = sgd()
    calls = []
    pre = opt.register_step_pre_hook(lambda o, args, kwargs: calls.append(("pre", o, args, kwargs, p.item())))
    post = opt.register_step_post_hook(lambda o, args, kwargs: calls.append(("post", o, args, kwargs, p.item())))
    assert isinstance(pre, RemovableHandle) and isinstance(post, RemovableHandle)
    opt.step(closure=None)
    # args hold the optimizer first, as PyTorch passes them; the step moves p by -0.5 * 2
    assert calls == [("pre", opt, (opt,), {"closure": None}, 1.0), ("post", opt, (opt,), {"closure": None}, 0.0)]
    pre.remove()
    post.remove()
    opt.step()
    assert len(calls) == 2 and p.item() == -1.0


def test_a_step_pre_hook_may_replace_the_arguments():
    p, opt = sgd()
    seen = []

    def closure():
        seen.append("closure")
        return 7.0

    opt.register_step_pre_hook(lambda o, args, kwargs: ((o,), {"closure": closure}))
    opt.register_step_post_hook(lambda o, args, kwargs: seen.append(kwargs["closure"] is closure))
    assert opt.step() == 7.0 and seen == ["closure", True]
    opt.register_step_pre_hook(lambda o, args, kwargs: 5)
    with pytest.raises(RuntimeError, match="must return None or a tuple"):
        opt.step()


class Doubling(optim.Optimizer):
    """An optimizer defined outside ddpc whose step calls its base's."""

    def __init__(self, params):
        super().__init__(params, {})

    def _step_group(self, group):
        for p in group["params"]:
            p.data = p.detach() * 2

    def step(self, closure=None):
        return super().step(closure)


class Wrapping(optim.Optimizer):
    """An optimizer that skips Optimizer.__init__ and steps a wrapped one (as PostLocalSGDOptimizer does)."""

    def __init__(self, params):
        self.inner = optim.SGD(params, lr=0.1)
        self.param_groups = self.inner.param_groups

    def step(self, closure=None):
        return self.inner.step(closure)


MAKERS = {"SGD": lambda ps: optim.SGD(ps, lr=0.1), "Adam": optim.Adam, "NAdam": optim.NAdam,
          "Adafactor": optim.Adafactor, "ASGD": optim.ASGD, "Rprop": optim.Rprop, "LBFGS": optim.LBFGS,
          "Doubling": Doubling, "Wrapping": Wrapping}


@pytest.mark.parametrize("name", list(MAKERS))
def test_global_and_own_step_hooks_run_once_per_step_of_every_optimizer_class(name):
    p = ddpc.tensor([1.0, 2.0], requires_grad=True)
    opt = MAKERS[name]([p])
    order = []
    handles = [optimizer_module.register_optimizer_step_pre_hook(lambda o, a, k: order.append(("global pre", o))),
               opt.register_step_pre_hook(lambda o, a, k: order.append("pre")),
               opt.register_step_post_hook(lambda o, a, k: order.append("post")),
               optimizer_module.register_optimizer_step_post_hook(lambda o, a, k: order.append(("global post", o)))]

    def closure():
        opt.zero_grad()
        loss = (p * p).sum()
        loss.backward()
        return loss

    try:
        before = p.tolist()
        opt.step(closure)
    finally:
        for h in handles:
            h.remove()
    assert p.tolist() != before  # it stepped
    # a wrapped optimizer's step is a step of its own: the global hooks run for it too
    inner = [("global pre", opt.inner)] if name == "Wrapping" else []
    inner_post = [("global post", opt.inner)] if name == "Wrapping" else []
    assert order == [("global pre", opt), "pre"] + inner + inner_post + ["post", ("global post", opt)]
    opt.step(closure)
    assert len(order) == 4 + 2 * len(inner)  # removed


def test_state_dict_hooks_run_in_order_and_may_replace_the_state_dict():
    p, opt = sgd()
    opt.step()
    order = []
    opt.register_state_dict_pre_hook(lambda o: order.append("pre"))
    opt.register_state_dict_pre_hook(lambda o: order.append("pre first"), prepend=True)

    def tag(o, sd):
        sd["tag"] = 1  # in place, returning None

    opt.register_state_dict_post_hook(tag)
    opt.register_state_dict_post_hook(lambda o, sd: {**sd, "tag": sd["tag"] + 1})
    sd = opt.state_dict()
    assert order == ["pre first", "pre"] and sd["tag"] == 2 and sd["param_groups"][0]["lr"] == 0.5


def test_load_state_dict_hooks_see_a_shallow_copy_and_may_replace_it():
    p, opt = sgd()
    saved = opt.state_dict()
    saved["param_groups"][0]["lr"] = 0.25
    order = []

    def pre(o, sd):
        order.append("pre")
        sd["extra"] = True  # changes the copy only
        return {**sd, "param_groups": [{**sd["param_groups"][0], "lr": 0.125}]}

    opt.register_load_state_dict_pre_hook(pre)
    opt.register_load_state_dict_pre_hook(lambda o, sd: order.append("pre first"), prepend=True)
    handle = opt.register_load_state_dict_post_hook(lambda o: order.append(("post", o.param_groups[0]["lr"])))
    opt.load_state_dict(saved)
    assert order == ["pre first", "pre", ("post", 0.125)] and "extra" not in saved
    assert opt.param_groups[0]["lr"] == 0.125
    handle.remove()
    opt.load_state_dict(saved)
    assert len(order) == 5 and opt.param_groups[0]["lr"] == 0.125  # the pre hooks still replace lr


class _Restoring(optim.SGD):
    """A subclass that extends __setstate__, as PyTorch's optimizers do to fill in defaults."""

    def __setstate__(self, state):
        super().__setstate__(state)
        self.restored = True


@pytest.mark.parametrize("duplicate", [copy.deepcopy, lambda opt: pickle.loads(pickle.dumps(opt))],
                         ids=["deepcopy", "pickle"])
def test_copies_and_pickles_leave_the_hooks_behind(duplicate):
    p, _ = sgd()
    opt = _Restoring([p], lr=0.5)
    opt.register_step_post_hook(lambda o, args, kwargs: None)  # a lambda: it could not be pickled
    opt.register_state_dict_pre_hook(lambda o: None)
    twin = duplicate(opt)
    assert twin.restored and twin.param_groups[0]["lr"] == 0.5
    assert not twin._optimizer_step_post_hooks and not twin._optimizer_state_dict_pre_hooks
    assert len(opt._optimizer_step_post_hooks) == 1  # the original keeps them
    q = twin.param_groups[0]["params"][0]
    q.grad = ddpc.tensor([2.0])
    twin.step()
    assert q.item() == 0.0 and p.item() == 1.0
