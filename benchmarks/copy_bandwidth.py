"""Copy bandwidth: host memcpy, and with a GPU host<->device (pageable and pinned)
and device-to-device, through ddpc and through numpy as the host baseline.

    python benchmarks/copy_bandwidth.py [--sizes-mib 1 16 256]

(Not named copy.py: a script directory on sys.path would shadow the standard copy module.)
"""

import argparse

import numpy as np

import ddpc
from common import best_time, machine, print_table


def gbps(nbytes, seconds):
    return f"{nbytes / seconds / 1e9:.2f}"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes-mib", type=int, nargs="+", default=[1, 16, 256])
    args = parser.parse_args()
    print(f"machine: {machine()}")
    rows = []
    for mib in args.sizes_mib:
        n = mib << 20
        src_np = np.ones(n, np.uint8)
        dst_np = np.empty_like(src_np)
        t_np = best_time(lambda: np.copyto(dst_np, src_np))
        src, dst = ddpc.from_numpy(src_np), ddpc.from_numpy(dst_np)
        t_dd = best_time(lambda: dst.copy_(src))
        rows.append((f"{mib} MiB", "host->host", "numpy copyto", gbps(n, t_np), "1.00"))
        rows.append((f"{mib} MiB", "host->host", "ddpc copy_", gbps(n, t_dd), f"{t_np / t_dd:.2f}"))
        if not ddpc.cuda.is_available():
            continue
        sync = ddpc.cuda.synchronize
        dev = ddpc.empty(n, dtype=ddpc.uint8, device="cuda")
        dev2 = ddpc.empty(n, dtype=ddpc.uint8, device="cuda")
        pinned = ddpc.empty(n, dtype=ddpc.uint8, pin_memory=True)
        cases = [
            ("host->device", "pageable", lambda: dev.copy_(src)),
            ("host->device", "pinned", lambda: dev.copy_(pinned, non_blocking=True)),
            ("device->host", "pageable", lambda: src.copy_(dev)),
            ("device->host", "pinned", lambda: pinned.copy_(dev, non_blocking=True)),
        ]
        for direction, kind, fn in cases:
            t = best_time(fn, sync=sync)
            rows.append((f"{mib} MiB", direction, kind, gbps(n, t), f"{t_np / t:.2f}"))
        t = best_time(lambda: dev2.copy_(dev), sync=sync)
        # Device-to-device moves each byte twice (read + write), reported as bytes copied per second.
        rows.append((f"{mib} MiB", "device->device", "ddpc copy_", gbps(n, t), f"{t_np / t:.2f}"))
    print_table(["size", "direction", "path", "GB/s", "vs host memcpy"], rows)
    if not ddpc.cuda.is_available():
        print(f"no GPU: {ddpc._C.cuda_unavailable_reason()}; host memcpy is the reference for later benchmarks")


if __name__ == "__main__":
    main()
