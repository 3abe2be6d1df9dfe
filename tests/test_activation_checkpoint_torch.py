"""Optional: ddpc.utils.checkpoint against torch.utils.checkpoint (skipped
when torch is not installed): the keyword arguments checkpoint takes, which
calls of them raise and with what, and the contexts context_fn gives."""

import inspect
import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import ddpc  # noqa: E402
import ddpc.utils.checkpoint  # noqa: E402
import torch.utils.checkpoint  # noqa: E402


def test_checkpoint_takes_pytorchs_keyword_arguments():
    def keywords(fn):
        return {n: p.default for n, p in inspect.signature(fn).parameters.items() if p.kind is p.KEYWORD_ONLY}

    ours, theirs = keywords(ddpc.utils.checkpoint.checkpoint), keywords(torch.utils.checkpoint.checkpoint)
    assert set(ours) == set(theirs)
    assert {n: d for n, d in ours.items() if n != "context_fn"} == {n: d for n, d in theirs.items()
                                                                     if n != "context_fn"}
    for lib in (ddpc, torch):
        forward, recompute = lib.utils.checkpoint.noop_context_fn()
        with forward, recompute, lib.utils.checkpoint.set_checkpoint_debug_enabled(True):
            pass


def _outcome(lib, **kwargs):
    x = lib.tensor(np.array([[0.5, -1.0, 2.0]]), requires_grad=True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            lib.utils.checkpoint.checkpoint(lambda t: t.sin(), x, **kwargs).sum().backward()
    except Exception as e:  # noqa: BLE001  (the type is what is compared)
        return type(e).__name__
    return x.grad.numpy().round(12).tolist()


@pytest.mark.parametrize("kwargs", [
    dict(use_reentrant=False, determinism_check="default"),
    dict(use_reentrant=False, determinism_check="none", debug=False, early_stop=False),
    dict(use_reentrant=False, determinism_check="sometimes"),
    dict(use_reentrant=True, debug=True),
    dict(use_reentrant=False, respect_saved_tensors_hooks=True),
    dict(use_reentrant=True, respect_saved_tensors_hooks=True),
    dict(use_reentrant=True, context_fn="custom"),
    dict(use_reentrant=None, context_fn="custom"),
    dict(use_reentrant=False, context_fn="custom"),
    dict(use_reentrant=False, context_fn="custom", debug=True),
])
def test_the_same_calls_work_and_raise(kwargs):
    def run(lib):
        kw = dict(kwargs)
        if kw.get("context_fn") == "custom":
            kw["context_fn"] = lambda: lib.utils.checkpoint.noop_context_fn()
        return _outcome(lib, **kw)

    assert run(ddpc) == run(torch)


def test_a_recompute_saving_other_shapes_raises_a_checkpoint_error():
    def outcome(lib):
        scales = [lib.ones(3, dtype=lib.float64), lib.ones(1, dtype=lib.float64)]
        runs = []

        def fn(t):
            runs.append(1)
            return (t * scales[len(runs) - 1]).sin()

        x = lib.tensor(np.array([[0.5, -1.0, 2.0]]), requires_grad=True)
        out = lib.utils.checkpoint.checkpoint(fn, x, use_reentrant=False)
        with pytest.raises(RuntimeError) as info:
            out.sum().backward()
        return type(info.value).__name__

    assert outcome(ddpc) == outcome(torch) == "CheckpointError"
