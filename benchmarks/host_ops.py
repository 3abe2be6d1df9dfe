"""Common host ops on one float32 tensor of 1000 x 1536 (6 MB): reductions,
max/min with indices, softmax, comparisons, powers, transposes and short
chains whose intermediates are new buffers, as ms per call, against numpy
and PyTorch (when importable) on the same values, each result checked
against numpy's first; then losses over its rows as logits, with their
backward pass, against PyTorch.

    PYTHONPATH=python python benchmarks/host_ops.py [--rows 1000] [--cols 1536] [--ops NAME ...] [--threads N]

Run one chain alone with DDPC_HOST_CACHE_MB=0 to see what the host block
cache (csrc/alloc.c) saves: `--ops "x.abs().sqrt()"`. (In a run of every
op, earlier frees can leave glibc's heap holding enough memory that the
chains fault less.)
"""

import argparse
import resource

import numpy as np

from common import add_host_timing_args, best_time, import_torch, print_table, start_host_timing

torch = import_torch()

import ddpc  # noqa: E402 - after torch, see import_torch


def _softmax(x):
    e = np.exp(x - x.max(1, keepdims=True))
    return e / e.sum(1, keepdims=True)


def _log_softmax(x):
    s = x - x.max(1, keepdims=True)
    return s - np.log(np.exp(s).sum(1, keepdims=True))


# name: (ddpc or torch, given the library module and the tensor; numpy, given the array)
CASES = {
    "sum": (lambda L, x: x.sum(), lambda x: x.sum(dtype=np.float64)),
    "mean": (lambda L, x: x.mean(), lambda x: x.mean(dtype=np.float64)),
    "sum(dim=1)": (lambda L, x: x.sum(1), lambda x: x.sum(1)),
    "sum(dim=0)": (lambda L, x: x.sum(0), lambda x: x.sum(0)),
    "max": (lambda L, x: x.max(), lambda x: x.max()),
    "max(dim=1)": (lambda L, x: x.max(1)[0], lambda x: x.max(1)),
    "argmax(dim=1)": (lambda L, x: x.argmax(1), lambda x: x.argmax(1)),
    "min(dim=0)": (lambda L, x: x.min(0)[0], lambda x: x.min(0)),
    "var": (lambda L, x: x.var(), lambda x: x.var(ddof=1)),
    "x ** 2": (lambda L, x: x ** 2, lambda x: x ** 2),
    "softmax(dim=1)": (lambda L, x: x.softmax(1), _softmax),
    "log_softmax(dim=1)": (lambda L, x: x.log_softmax(1), _log_softmax),
    "x > 0": (lambda L, x: x > 0, lambda x: x > 0),
    "x.t().contiguous()": (lambda L, x: x.t().contiguous(), lambda x: np.ascontiguousarray(x.T)),
    "x.abs().sqrt()": (lambda L, x: x.abs().sqrt(), lambda x: np.sqrt(np.abs(x))),
    "(x - x.mean(0)) * 2": (lambda L, x: (x - x.mean(0)) * 2, lambda x: (x - x.mean(0)) * 2),
    "x[x > 0]": (lambda L, x: x[x > 0], lambda x: x[x > 0]),
}


# Losses with their backward pass (ddpc against torch), on the tensor's rows as logits of one class each.
TRAINING = {
    "cross_entropy": lambda L, x, y: L.nn.functional.cross_entropy(x, y),
    "log_softmax + nll_loss": lambda L, x, y: L.nn.functional.nll_loss(L.log_softmax(x, 1), y),
    "(softmax * x).sum()": lambda L, x, y: (L.softmax(x, 1) * x).sum(),
}


def _with_backward(libs, y, args, clock):
    """ms per forward + backward of each TRAINING case, the gradients checked against ddpc's float64 ones."""
    rows = []
    for name, loss in TRAINING.items():
        times, ref = {}, None
        for lib, L, t in libs:
            x = t.detach().clone().requires_grad_()
            yt = L.tensor(y)

            def step(L=L, x=x, yt=yt):
                x.grad = None
                loss(L, x, yt).backward()

            step()
            got = x.grad.numpy()
            if ref is None:
                x64 = x.detach().double().requires_grad_()
                loss(L, x64, yt).backward()
                ref = x64.grad.numpy()
            np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-7, err_msg=f"{lib} {name}")
            times[lib] = best_time(step, repeat=args.repeat, clock=clock)
        row = [name, f"{times['ddpc'] * 1e3:.3f}"]
        if "torch" in times:
            row += [f"{times['torch'] * 1e3:.3f}", f"{times['torch'] / times['ddpc']:.2f}"]
        rows.append(row)
    print()
    print_table(["forward + backward", "ddpc ms"] + (["torch ms", "torch/ddpc"] if len(libs) > 1 else []), rows)


def _numpy(v):
    if isinstance(v, (np.ndarray, np.generic)):
        return np.asarray(v)
    return v.detach().cpu().numpy() if hasattr(v, "detach") else np.asarray(v)


def _faults_per_call(fn, calls=20):
    """Minor page faults per call of fn: what writing to fresh host memory costs."""
    fn()
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        fn()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / calls


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=1000)
    parser.add_argument("--cols", type=int, default=1536)
    parser.add_argument("--ops", nargs="+", choices=list(CASES), default=list(CASES), metavar="NAME",
                        help="the ops to time (default: all)")
    add_host_timing_args(parser)
    args = parser.parse_args()
    clock = start_host_timing(args, ddpc, torch, f", {args.rows} x {args.cols}")
    x = np.random.default_rng(0).standard_normal((args.rows, args.cols)).astype(np.float32)
    libs = [("ddpc", ddpc, ddpc.tensor(x))]
    if torch is not None:
        libs.append(("torch", torch, torch.tensor(x)))
    rows = []
    for name in args.ops:
        op, ref = CASES[name]
        faults = _faults_per_call(lambda: op(ddpc, libs[0][2]))  # before anything else allocates
        want = np.asarray(ref(x))
        row, times = [name], {}
        for lib, L, t in libs:
            got = _numpy(op(L, t))
            np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=2e-5, atol=1e-4,
                                       err_msg=f"{lib} {name}")
            times[lib] = best_time(lambda: op(L, t), repeat=args.repeat, clock=clock)
        times["numpy"] = best_time(lambda: ref(x), repeat=args.repeat, clock=clock)
        row += [f"{times['ddpc'] * 1e3:.3f}", f"{faults:.0f}", f"{times['numpy'] * 1e3:.3f}",
                f"{times['numpy'] / times['ddpc']:.2f}"]
        if torch is not None:
            row += [f"{times['torch'] * 1e3:.3f}", f"{times['torch'] / times['ddpc']:.2f}"]
        rows.append(row)
    headers = ["op", "ddpc ms", "ddpc faults", "numpy ms", "numpy/ddpc"]
    if torch is not None:
        headers += ["torch ms", "torch/ddpc"]
    print_table(headers, rows)
    _with_backward(libs, np.random.default_rng(1).integers(0, args.cols, args.rows), args, clock)


if __name__ == "__main__":
    main()
