"""Order statistics on the host: ddpc's kthvalue, median and sort along the
last dim against numpy (partition, median, sort) and PyTorch (when
importable) on the same float32 values, as ms per call. Each ddpc result is
checked against numpy's first.

    PYTHONPATH=python python benchmarks/order_stats.py [--threads N] [--cpu-time]

--threads sets ddpc's and torch's threads (default: theirs); with
--cpu-time give --threads 1, so that the CPU seconds are one thread's.
"""

import argparse

import numpy as np

from common import add_host_timing_args, best_time, import_torch, print_table, start_host_timing

torch = import_torch()

import ddpc  # noqa: E402 - after torch, see import_torch

SHAPES = [(1_000_000,), (1000, 1000), (100_000, 16)]


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_host_timing_args(parser)
    args = parser.parse_args()
    clock = start_host_timing(args, ddpc, torch)
    rng = np.random.default_rng(0)
    rows = []
    for shape in SHAPES:
        x = rng.standard_normal(shape).astype(np.float32)
        t = ddpc.tensor(x)
        n = shape[-1]
        k = n // 2
        np.testing.assert_array_equal(t.kthvalue(k + 1, -1).values.numpy(), np.partition(x, k, axis=-1)[..., k])
        np.testing.assert_array_equal(t.sort(-1).values.numpy(), np.sort(x, axis=-1, kind="stable"))
        cases = [
            ("kthvalue", lambda: t.kthvalue(k + 1, -1), lambda: np.partition(x, k, axis=-1),
             lambda tt: tt.kthvalue(k + 1, -1)),
            ("median", lambda: t.median(-1), lambda: np.median(x, axis=-1), lambda tt: tt.median(-1)),
            ("sort", lambda: t.sort(-1), lambda: np.sort(x, axis=-1, kind="stable"), lambda tt: tt.sort(-1)),
        ]
        tt = torch.tensor(x) if torch is not None else None
        for name, ours, numpy_fn, torch_fn in cases:
            d = best_time(ours, repeat=args.repeat, clock=clock)
            m = best_time(numpy_fn, repeat=args.repeat, clock=clock)
            row = ["x".join(map(str, shape)), name, f"{d * 1e3:.2f}", f"{m * 1e3:.2f}", f"{m / d:.2f}"]
            if torch is not None:
                p = best_time(lambda: torch_fn(tt), repeat=args.repeat, clock=clock)
                row += [f"{p * 1e3:.2f}", f"{p / d:.2f}"]
            rows.append(row)
    headers = ["shape", "op", "ddpc ms", "numpy ms", "numpy/ddpc"]
    if torch is not None:
        headers += ["torch ms", "torch/ddpc"]
    print_table(headers, rows)


if __name__ == "__main__":
    main()
