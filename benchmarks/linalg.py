"""ddpc.linalg's factorizations on the host against numpy.linalg (the LAPACK
calls they wrap: the ratio is ddpc's overhead) and PyTorch's CPU kernels when
torch is importable, on one batch of square matrices; and inv's forward plus
backward against PyTorch's. Results are checked to agree before timing.

    PYTHONPATH=python python benchmarks/linalg.py [--batch 64] [--n 128] [--dtype float64] [--cpu-time]

Run it with an interpreter that has torch to get the PyTorch column.
"""

import argparse
import time

import numpy as np

from common import add_layer_timing_args, best_time, import_torch, machine, print_table

torch = import_torch()

import ddpc  # noqa: E402 - after torch, see import_torch
from ddpc import linalg as LA  # noqa: E402 - after torch


def cases(a, spd, b):
    """(name, ddpc, numpy or None, torch or None) on the same matrices, each a closure returning its result."""
    da, ds, db = ddpc.from_numpy(a), ddpc.from_numpy(spd), ddpc.from_numpy(b)
    ta, ts, tb = (torch.from_numpy(x) for x in (a, spd, b)) if torch is not None else (None, None, None)
    tl = torch.linalg if torch is not None else None
    small = a * 0.05
    ds_small = ddpc.from_numpy(small)
    ts_small = torch.from_numpy(small) if torch is not None else None
    return [
        ("inv", lambda: LA.inv(da), lambda: np.linalg.inv(a), tl and (lambda: tl.inv(ta))),
        ("solve (4 columns)", lambda: LA.solve(da, db), lambda: np.linalg.solve(a, b),
         tl and (lambda: tl.solve(ta, tb))),
        ("det", lambda: LA.det(da), lambda: np.linalg.det(a), tl and (lambda: tl.det(ta))),
        ("cholesky", lambda: LA.cholesky(ds), lambda: np.linalg.cholesky(spd), tl and (lambda: tl.cholesky(ts))),
        ("qr", lambda: LA.qr(da).R, lambda: np.linalg.qr(a)[1], tl and (lambda: tl.qr(ta).R)),
        ("svdvals", lambda: LA.svdvals(da), lambda: np.linalg.svd(a, compute_uv=False),
         tl and (lambda: tl.svdvals(ta))),
        ("eigh", lambda: LA.eigvalsh(ds), lambda: np.linalg.eigvalsh(spd), tl and (lambda: tl.eigvalsh(ts))),
        ("lu_factor", lambda: LA.lu_factor(da).LU, None, tl and (lambda: tl.lu_factor(ta).LU)),
        ("matrix_exp", lambda: LA.matrix_exp(ds_small), None, tl and (lambda: tl.matrix_exp(ts_small))),
    ]


def inv_backward(lib, a):
    x = lib.tensor(a, requires_grad=True)

    def step():
        x.grad = None
        lib.linalg.inv(x).sum().backward()
    return step


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_layer_timing_args(parser)
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--n", type=int, default=128)
    parser.add_argument("--dtype", default="float64", choices=("float32", "float64"))
    args = parser.parse_args()
    clock = time.process_time if args.cpu_time else time.perf_counter
    print(f"machine: {machine()}")
    print(f"{args.batch} matrices of {args.n} x {args.n}, {args.dtype}, numpy and ddpc on the host"
          + (f", torch threads {torch.get_num_threads()}" if torch is not None else " (no torch column)"))
    rng = np.random.default_rng(0)
    a = rng.standard_normal((args.batch, args.n, args.n)).astype(args.dtype)
    spd = (a @ np.swapaxes(a, -1, -2) + args.n * np.eye(args.n)).astype(args.dtype)
    b = rng.standard_normal((args.batch, args.n, 4)).astype(args.dtype)
    tol = 1e-3 if args.dtype == "float32" else 1e-8
    rows = []
    for name, fd, fn, ft in cases(a, spd, b):
        ref = ft() if ft is not None else fn() if fn is not None else None
        if ref is not None:
            ref = ref.numpy() if torch is not None and isinstance(ref, torch.Tensor) else ref
            np.testing.assert_allclose(np.abs(fd().numpy()), np.abs(ref), rtol=tol, atol=tol, err_msg=name)
        times = [best_time(f, repeat=args.repeat, min_time=args.min_time, clock=clock) if f else None
                 for f in (fd, fn, ft)]
        td, tn, tt = times
        rows.append([name, f"{td * 1e3:.2f}", f"{tn * 1e3:.2f}" if tn else "-", f"{td / tn:.2f}" if tn else "-",
                     f"{tt * 1e3:.2f}" if tt else "-", f"{td / tt:.2f}" if tt else "-"])
    td = best_time(inv_backward(ddpc, a), repeat=args.repeat, min_time=args.min_time, clock=clock)
    tt = best_time(inv_backward(torch, a), repeat=args.repeat, min_time=args.min_time, clock=clock) if torch else None
    rows.append(["inv forward + backward", f"{td * 1e3:.2f}", "-", "-", f"{tt * 1e3:.2f}" if tt else "-",
                 f"{td / tt:.2f}" if tt else "-"])
    print_table(["op", "ddpc ms", "numpy ms", "ddpc/numpy", "torch ms", "ddpc/torch"], rows)


if __name__ == "__main__":
    main()
