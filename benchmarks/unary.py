"""Elementwise functions on the host: ddpc's unary ops, forward and gradient,
against numpy's ufuncs and PyTorch's (when importable) on the same float32
values, one million by default, as ms per call. Each result is checked
against a float64 reference first (float32 within a few units in the last place).

    PYTHONPATH=python python benchmarks/unary.py [--numel 1000000] [--threads N] [--cpu-time]

--threads sets ddpc's and torch's threads (default: theirs); with
--cpu-time give --threads 1, so that the CPU seconds are one thread's.
"""

import argparse
import math

import numpy as np

from common import add_host_timing_args, best_time, import_torch, print_table, start_host_timing

torch = import_torch()

import ddpc  # noqa: E402 - after torch, see import_torch

_erf = np.vectorize(math.erf, otypes=[np.float64])
_erfc = np.vectorize(math.erfc, otypes=[np.float64])

# name: (float64 reference, range of the inputs)
FUNCTIONS = {
    "exp": (np.exp, (-20, 20)), "log": (np.log, (1e-3, 1e3)), "tanh": (np.tanh, (-5, 5)),
    "sigmoid": (lambda x: 1 / (1 + np.exp(-x)), (-10, 10)), "sin": (np.sin, (-100, 100)),
    "cos": (np.cos, (-100, 100)), "relu": (lambda x: np.maximum(x, 0), (-1, 1)), "sqrt": (np.sqrt, (0, 100)),
    "gelu": (lambda x: 0.5 * x * _erfc(-x / np.sqrt(2)), (-5, 5)), "silu": (lambda x: x / (1 + np.exp(-x)), (-10, 10)),
    "softplus": (lambda x: np.logaddexp(x, 0), (-10, 10)), "elu": (lambda x: np.where(x > 0, x, np.expm1(x)), (-5, 5)),
    "mish": (lambda x: x * np.tanh(np.logaddexp(x, 0)), (-10, 10)), "atan": (np.arctan, (-10, 10)),
    "tan": (np.tan, (-1.5, 1.5)), "expm1": (np.expm1, (-5, 5)), "log1p": (np.log1p, (-0.9, 10)),
    "erf": (_erf, (-3, 3)), "erfc": (_erfc, (-3, 9)),
    "sinh": (np.sinh, (-10, 10)), "cosh": (np.cosh, (-10, 10)), "asinh": (np.arcsinh, (-100, 100)),
    "acosh": (np.arccosh, (1, 100)), "atanh": (np.arctanh, (-0.99, 0.99)), "asin": (np.arcsin, (-1, 1)),
    "acos": (np.arccos, (-1, 1)),
}
# numpy's own ufunc for the numpy column (the other references are compositions)
NUMPY = {"exp", "log", "tanh", "sin", "cos", "sqrt", "atan", "tan", "expm1", "log1p", "sinh", "cosh", "asinh",
         "acosh", "atanh", "asin", "acos"}


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--numel", type=int, default=1_000_000)
    add_host_timing_args(parser)
    args = parser.parse_args()
    clock = start_host_timing(args, ddpc, torch, f", {args.numel} values")
    rng = np.random.default_rng(0)
    rows = []
    for name, (ref, (low, high)) in FUNCTIONS.items():
        x = rng.uniform(low, high, args.numel).astype(np.float32)
        t = ddpc.tensor(x, requires_grad=True)
        fn = getattr(ddpc.nn.functional, name, None) or getattr(ddpc, name)
        if ref is not None:
            np.testing.assert_allclose(fn(t).detach().numpy(), ref(x.astype(np.float64)), rtol=3e-6, atol=1e-6)
        g = ddpc.ones(args.numel)

        def train(fn=fn, t=t, g=g):
            t.grad = None
            fn(t).backward(g)

        with ddpc.no_grad():
            d_fwd = best_time(lambda: fn(t), repeat=args.repeat, clock=clock)
        d_train = best_time(train, repeat=args.repeat, clock=clock)
        row = [name, f"{d_fwd * 1e3:.2f}", f"{d_train * 1e3:.2f}"]
        row.append(f"{best_time(lambda: ref(x), repeat=args.repeat, clock=clock) * 1e3:.2f}" if name in NUMPY else "-")
        if torch is not None:
            tt = torch.tensor(x, requires_grad=True)
            tfn = getattr(torch.nn.functional, name, None) or getattr(torch, name)
            tg = torch.ones(args.numel)

            def ttrain():
                tt.grad = None
                tfn(tt).backward(tg)

            with torch.no_grad():
                p_fwd = best_time(lambda: tfn(tt), repeat=args.repeat, clock=clock)
            p_train = best_time(ttrain, repeat=args.repeat, clock=clock)
            row += [f"{p_fwd * 1e3:.2f}", f"{p_train * 1e3:.2f}", f"{p_fwd / d_fwd:.2f}", f"{p_train / d_train:.2f}"]
        rows.append(row)
    headers = ["function", "ddpc fwd ms", "ddpc fwd+bwd ms", "numpy ms"]
    if torch is not None:
        headers += ["torch fwd ms", "torch fwd+bwd ms", "torch/ddpc fwd", "torch/ddpc fwd+bwd"]
    print_table(headers, rows)


if __name__ == "__main__":
    main()
