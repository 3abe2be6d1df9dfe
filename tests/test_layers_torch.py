"""Optional: F.pad, the padding layers, PReLU, Threshold, CosineSimilarity,
PairwiseDistance, interpolate and the Upsample layers in every mode ddpc has,
channel dropout's shape rule and batch norm's edge batches against
PyTorch (skipped when torch is not installed). Each comparison runs in a child
process that imports torch before ddpc (see test_nn_torch.py) and fails there,
printing what differs."""

import math
import sys

import numpy as np
import pytest
from procs import run_torch_case


@pytest.mark.parametrize("case", ["pads", "layers", "resample", "dropout", "batch_norm_edges"])
def test_matches_pytorch(case):
    out = run_torch_case(__file__, case)
    assert out.strip().endswith("ok"), out


def _run(lib, make, xs, g):
    """make(lib)(*xs) in float64, backward with g: output, input and parameter gradients."""
    fn = make(lib)
    if isinstance(fn, lib.nn.Module):
        fn = fn.double()
    ts = [lib.tensor(x, requires_grad=True) for x in xs]
    out = fn(*ts)
    out.backward(lib.tensor(g))
    params = [p.grad.numpy() for p in fn.parameters()] if isinstance(fn, lib.nn.Module) else []
    return [out.detach().numpy()] + [t.grad.numpy() for t in ts] + params


def _compare(makes_and_inputs):
    import torch
    import ddpc

    rng = np.random.default_rng(0)
    for make, shapes in makes_and_inputs:
        xs = [rng.standard_normal(s) for s in shapes]
        out = make(torch)(*[torch.tensor(x) for x in xs]) if not isinstance(make(torch), torch.nn.Module) else \
            make(torch).double()(*[torch.tensor(x) for x in xs])
        g = rng.standard_normal(tuple(out.shape))
        want, ours = _run(torch, make, xs, g), _run(ddpc, make, xs, g)
        assert len(want) == len(ours), make(torch)
        for w, o in zip(want, ours):
            assert o.shape == w.shape, (make(torch), o.shape, w.shape)
            np.testing.assert_allclose(o, w, rtol=1e-9, atol=1e-12, err_msg=repr(make(torch)))


def pads():
    cases = []
    for mode in ("constant", "reflect", "replicate", "circular"):
        for shape, pad in (((2, 3, 5), (2, 1)), ((3, 5), (0, 3)), ((2, 3, 4, 5), (1, 2, 3, 0)),
                           ((3, 4, 5), (2, 2, 1, 3)), ((2, 2, 3, 4, 5), (1, 0, 2, 1, 1, 2))):
            cases.append((lambda lib, pad=pad, mode=mode: lambda t: lib.nn.functional.pad(t, pad, mode), [shape]))
    for pad in ((-1, 2), (1, -2, -1, 0), (0, 0, 0, 0, 1, 1), (-2, -3, 1, 1)):
        cases.append((lambda lib, pad=pad: lambda t: lib.nn.functional.pad(t, pad, value=-1.5), [(2, 3, 5)]))
    for name, args in (("ZeroPad1d", (2,)), ("ZeroPad2d", ((1, 0, 2, 1),)), ("ConstantPad1d", ((0, 3), 2.5)),
                       ("ConstantPad2d", (1, -4.0)), ("ReflectionPad1d", ((2, 1),)), ("ReflectionPad2d", (1,)),
                       ("ReplicationPad1d", (3,)), ("ReplicationPad2d", ((0, 2, 1, 3),)),
                       ("CircularPad1d", (2,)), ("CircularPad2d", ((1, 2, 0, 1),))):
        for shape in (((2, 3, 4), (3, 4)) if name.endswith("1d") else ((2, 3, 4, 5), (3, 4, 5))):
            cases.append((lambda lib, name=name, args=args: getattr(lib.nn, name)(*args), [shape]))
    _compare(cases)


def layers():
    import torch
    import ddpc

    for lib in (torch, ddpc):
        for name in ("ZeroPad2d", "ConstantPad1d", "ReflectionPad2d", "CircularPad1d"):
            args = (1, 2.0) if name.startswith("Constant") else (1,)
            assert repr(getattr(lib.nn, name)(*args)) == repr(getattr(torch.nn, name)(*args))
    for m in ("PReLU(3)", "Threshold(0.1, 20)", "Upsample(scale_factor=2)", "Upsample(size=(3, 4))",
              "Dropout2d(0.3)", "CosineSimilarity()", "PairwiseDistance()"):
        assert repr(eval("ddpc.nn." + m)) == repr(eval("torch.nn." + m)), m
    cases = [
        (lambda lib: lib.nn.PReLU(), [(2, 3, 4)]),
        (lambda lib: lib.nn.PReLU(3, init=-0.3), [(2, 3, 4, 2)]),
        (lambda lib: lib.nn.PReLU(), [(5,)]),
        (lambda lib: lib.nn.Threshold(0.2, -3.0), [(3, 4)]),
        (lambda lib: lib.nn.CosineSimilarity(), [(4, 5), (4, 5)]),
        (lambda lib: lib.nn.CosineSimilarity(dim=-1, eps=1e-3), [(3, 1, 6), (2, 6)]),
        (lambda lib: lib.nn.CosineSimilarity(dim=0), [(4, 5), (4, 1)]),
        (lambda lib: lib.nn.PairwiseDistance(), [(4, 5), (4, 5)]),
        (lambda lib: lib.nn.PairwiseDistance(p=1.0, keepdim=True), [(4, 5), (1, 5)]),
        (lambda lib: lib.nn.PairwiseDistance(p=3.0, eps=0.1), [(3, 2, 5), (3, 2, 5)]),
        (lambda lib: lib.nn.PairwiseDistance(p=float("inf")), [(4, 5), (4, 5)]),
    ]
    # Not scale_factor=2.1 on 5 elements: PyTorch's host backward reads element i // 2 where out is twice in, its
    # forward floor(i / 2.1), so its gradient is not that of its output; ddpc's follows the forward.
    for kwargs, shape in (({"scale_factor": 2}, (2, 3, 5)), ({"scale_factor": 1.7}, (2, 3, 5)),
                          ({"scale_factor": 0.6}, (2, 3, 9)),
                          ({"size": 3}, (2, 3, 7)), ({"size": 11}, (2, 3, 4)),
                          ({"scale_factor": (2, 3)}, (2, 3, 4, 5)), ({"scale_factor": 1.3}, (1, 2, 7, 6)),
                          ({"size": (6, 4)}, (2, 3, 4, 5)), ({"size": (2, 9)}, (1, 1, 5, 4)),
                          ({"scale_factor": 1.5, "recompute_scale_factor": True}, (1, 2, 5, 3))):
        cases.append((lambda lib, kwargs=kwargs: lib.nn.Upsample(**kwargs), [shape]))
        cases.append((lambda lib, kwargs=kwargs: lambda t: lib.nn.functional.interpolate(t, **kwargs), [shape]))
    _compare(cases)


def _resample_cases():
    """(interpolate kwargs, input shape): up and down, by size and by scale, for every mode ddpc has."""
    cases = []
    for n in (1, 2, 3, 5, 8, 13):
        for out in (1, 2, 4, 7, 9, 16, 26):
            cases.append(({"size": out}, (2, 2, n)))
        for s in (0.3, 0.5, 0.75, 1.0, 1.3, 1.5, 2.0, 2.5, 3.7):
            if math.floor(n * s) > 0:
                cases.append(({"scale_factor": s}, (1, 2, n)))
                cases.append(({"scale_factor": s, "recompute_scale_factor": True}, (1, 2, n)))
    for shape in ((2, 3, 4, 5), (1, 2, 7, 3), (1, 1, 1, 6)):
        for size in ((8, 10), (2, 3), (5, 5), (1, 11), (4, 2)):
            cases.append(({"size": size}, shape))
        for s in (2, (1.5, 0.7), (0.5, 2.5), (3.0, 1.0)):
            if all(math.floor(n * f) > 0 for n, f in zip(shape[2:], s if isinstance(s, tuple) else (s, s))):
                cases.append(({"scale_factor": s}, shape))
        cases.append(({"scale_factor": (1.6, 2.2), "recompute_scale_factor": True}, shape))
    for shape in ((1, 2, 3, 4, 5), (1, 1, 2, 1, 3)):
        for size in ((5, 2, 7), (3, 4, 5), (1, 6, 2)):
            cases.append(({"size": size}, shape))
        for s in (2, (1.5, 0.7, 2.5), (1.3, 2.0, 1.0)):
            if all(math.floor(n * f) > 0 for n, f in zip(shape[2:], s if isinstance(s, tuple) else (s,) * 3)):
                cases.append(({"scale_factor": s}, shape))
    cases.append(({"scale_factor": 1.02}, (1, 1, 30)))  # out equals in, yet nearest-exact reads other elements
    # sizes kept or doubled by other factors than 1 and 2: 4-d 'nearest' reads element i or i // 2 there
    for s, shape in ((1.33, (1, 2, 3)), (2.05, (1, 2, 10)), ((1.33, 2.05), (1, 2, 3, 10)), ((2.1, 1.1), (2, 1, 7, 4)),
                     (1.2, (1, 1, 4, 5)), ((1.33, 2.05, 1.5), (1, 1, 3, 10, 2))):
        cases.append(({"scale_factor": s}, shape))
    return cases


def _nearest_grad_differs(kwargs, shape):
    """Whether 3-d or 5-d input has a dim that keeps or doubles its size under
    a scale_factor other than 1 or 2: there PyTorch's nearest forward reads
    element floor(i / scale_factor), its host backward element i or i // 2
    (as its 4-d forward and backward do), so its gradient is not that of its
    output; ddpc's follows the forward."""
    if len(shape) == 4 or "scale_factor" not in kwargs or kwargs.get("recompute_scale_factor"):
        return False
    factors = kwargs["scale_factor"] if isinstance(kwargs["scale_factor"], tuple) else \
        (kwargs["scale_factor"],) * (len(shape) - 2)
    return any(math.floor(n * f) == k * n and f != k for n, f in zip(shape[2:], factors) for k in (1, 2))


def resample():
    import torch
    import ddpc

    cases = []
    for kwargs, shape in _resample_cases():
        modes = [("nearest", None), ("nearest-exact", None)]
        linear = {3: "linear", 4: "bilinear", 5: "trilinear"}[len(shape)]
        modes += [(linear, None), (linear, False), (linear, True), ("area", None)]
        if len(shape) == 4:
            modes += [("bicubic", None), ("bicubic", False), ("bicubic", True)]
        for mode, corners in modes:
            if mode == "nearest" and _nearest_grad_differs(kwargs, shape):
                continue  # compared forward only, below
            kw = dict(kwargs, mode=mode, align_corners=corners)
            cases.append((lambda lib, kw=kw: lambda t: lib.nn.functional.interpolate(t, **kw), [shape]))
    for kwargs in ({"scale_factor": 2}, {"size": (3, 7)}, {"scale_factor": 0.6}):
        for name in ("UpsamplingNearest2d", "UpsamplingBilinear2d"):
            cases.append((lambda lib, name=name, kwargs=kwargs: getattr(lib.nn, name)(**kwargs), [(2, 3, 4, 5)]))
        cases.append((lambda lib, kwargs=kwargs: lib.nn.Upsample(mode="bilinear", **kwargs), [(2, 3, 4, 5)]))
    cases.append((lambda lib: lib.nn.Upsample(scale_factor=1.5, mode="linear", align_corners=True), [(2, 3, 5)]))
    cases.append((lambda lib: lib.nn.Upsample(size=(2, 3, 4), mode="area"), [(2, 3, 5, 7, 6)]))
    _compare(cases)
    # In float32 PyTorch computes positions and weights in float32: the same elements are read.
    rng = np.random.default_rng(1)
    for kwargs, shape in _resample_cases():
        x = rng.standard_normal(shape).astype(np.float32)
        interpolating = {3: ("linear",), 4: ("bilinear", "bicubic"), 5: ("trilinear",)}[len(shape)]
        for mode in ("nearest", "nearest-exact", "area") + interpolating:
            want = torch.nn.functional.interpolate(torch.tensor(x), mode=mode, **kwargs).numpy()
            got = ddpc.nn.functional.interpolate(ddpc.tensor(x), mode=mode, **kwargs).numpy()
            # bicubic sums its 16 terms in another order than PyTorch's
            tol = 1e-5 if mode == "bicubic" else 1e-6
            np.testing.assert_allclose(got, want, rtol=tol, atol=tol, err_msg=f"{mode} {kwargs} {shape}")
    for m in ("Upsample(scale_factor=2, mode='bilinear')", "UpsamplingNearest2d(size=(3, 4))",
              "UpsamplingBilinear2d(scale_factor=1.5)", "Upsample(size=5, mode='nearest-exact')"):
        assert repr(eval("ddpc.nn." + m)) == repr(eval("torch.nn." + m)), m


def dropout():
    """Which elements share one mask value: the same channels as PyTorch's."""
    import torch
    import ddpc

    for name, shape in (("dropout1d", (4, 3, 6)), ("dropout1d", (5, 6)), ("dropout2d", (4, 3, 2, 3))):
        outs = [getattr(lib.nn.functional, name)(lib.ones(*shape, dtype=lib.float64), 0.5).numpy()
                for lib in (torch, ddpc)]
        for out in outs:
            kept = 1 if len(shape) == 2 else 2
            flat = out.reshape(shape[:kept] + (-1,))
            assert (flat == flat[..., :1]).all() and set(np.unique(flat)) <= {0.0, 2.0}, name
        assert getattr(ddpc.nn.functional, name)(ddpc.ones(*shape), 0.5, training=False).numpy().min() == 1


def batch_norm_edges():
    """Training on an empty batch: an empty result, zero parameter gradients
    and the running statistics left alone (the batch still counted); one
    value per channel: ValueError."""
    import torch
    import ddpc

    for name, shape in (("BatchNorm1d", (0, 3)), ("BatchNorm1d", (0, 3, 4)), ("BatchNorm1d", (5, 3, 0)),
                        ("BatchNorm2d", (0, 3, 2, 2)), ("BatchNorm3d", (0, 3, 1, 2, 2))):
        for momentum in (0.1, None):
            results = []
            for lib in (torch, ddpc):
                bn = getattr(lib.nn, name)(3, momentum=momentum)
                with lib.no_grad():
                    bn.running_mean.fill_(0.5)
                    bn.running_var.fill_(2.0)
                x = lib.zeros(*shape, requires_grad=True)
                out = bn(x)
                out.sum().backward()
                results.append([tuple(out.shape), tuple(x.grad.shape), bn.weight.grad.tolist(), bn.bias.grad.tolist(),
                                bn.running_mean.tolist(), bn.running_var.tolist(), int(bn.num_batches_tracked.item())])
            assert results[0] == results[1], (name, shape, momentum, results)
    for name, shape in (("BatchNorm1d", (1, 3)), ("BatchNorm2d", (1, 3, 1, 1)), ("BatchNorm3d", (1, 3, 1, 1, 1))):
        errors = []
        for lib in (torch, ddpc):
            with pytest.raises(ValueError) as err:
                getattr(lib.nn, name)(3)(lib.zeros(*shape))
            errors.append(str(err.value).split(" got ")[0])
        assert errors[0] == errors[1], errors
    assert tuple(ddpc.nn.functional.batch_norm(ddpc.zeros(0, 3), None, None, training=True).shape) == (0, 3)


if __name__ == "__main__":
    import torch  # noqa: F401  (before ddpc, see the module docstring)

    globals()[sys.argv[1]]()
    print("ok")
