"""`python -m ddpc doctor` (also the `ddpc` console script): what this install can do."""

import argparse
import platform
import sys


def _version(v, kind):
    if v is None:
        return "not available"
    if kind == "cuda":
        return f"{v // 1000}.{v % 1000 // 10}"
    return f"{v // 10000}.{v // 100 % 100}.{v % 100}"


def _library(compiled, version, library):
    """(what to print for a library loaded at run time, whether it loads): its version and file, or why it
    cannot be used."""
    if not compiled:
        return "not compiled in", False
    try:
        path = library()
    except RuntimeError as e:
        return "does not load: " + str(e).replace("\n", "\n" + " " * 21), False
    return f"{_version(version, 'library')} ({path})", True


def doctor(out=None):
    import ddpc
    from ddpc import _C

    out = sys.stdout if out is None else out  # the stream of the call, not of the import

    info = ddpc.build_info()
    p = lambda *a: print(*a, file=out)  # noqa: E731
    p(f"ddpc {ddpc.__version__} on Python {platform.python_version()}, {platform.machine()} {platform.system()}")
    p(f"  CUDA compiled in:  {'yes' if info['cuda'] else 'no'}")
    p(f"  CUDA runtime:      {_version(info['cuda_runtime_version'], 'cuda')}")
    p(f"  CUDA driver:       {_version(info['cuda_driver_version'], 'cuda')}")
    p(f"  cuBLAS:            {_library(info['cuda'], info['cublas_version'], _C.cublas_library)[0]}")
    p(f"  cuFFT:             {_library(info['cuda'], info['cufft_version'], _C.cufft_library)[0]}")
    nccl, nccl_loads = _library(info["nccl"], info["nccl_version"], getattr(_C, "nccl_library", None))
    p(f"  NCCL:              {nccl}")
    n = ddpc.cuda.device_count()
    p(f"GPUs: {n}")
    if n == 0:
        p(f"  none usable: {_C.cuda_unavailable_reason()}")
    for i in range(n):
        props = ddpc.cuda.get_device_properties(i)
        p(f"  cuda:{i}  {props.name}  {props.total_memory / 2**30:.1f} GiB  "
          f"compute capability {props.major}.{props.minor}  {props.multi_processor_count} SMs  PCI {props.pci_bus_id}")
        host = _C.cuda_properties(i)  # what the loader's direct gather needs of the device
        p(f"          host memory mapped: {'yes' if host['can_map_host_memory'] else 'no'}, registered read-only: "
          f"{'yes' if host['host_register_read_only'] else 'no'}")
    backends = ["cpu (shared memory within a host, TCP ring across hosts)"]
    if info["nccl"] and not nccl_loads:
        backends.append("nccl (compiled in; NCCL does not load, see above)")
    elif info["nccl"] and n > 0:
        backends.append("nccl")
    elif info["nccl"]:
        backends.append("nccl (compiled in; needs a GPU)")
    p("Communication backends: " + ", ".join(backends))
    return 0


def main(argv=None):
    parser = argparse.ArgumentParser(prog="ddpc", description="ddpc utilities")
    sub = parser.add_subparsers(dest="command")
    sub.add_parser("doctor", help="print the build, the GPUs and the communication backends")
    args = parser.parse_args(argv)
    if args.command == "doctor":
        return doctor()
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
