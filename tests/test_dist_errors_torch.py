"""Optional: torch.distributed's error classes and debugging names against
ddpc.distributed's (skipped when torch is not installed): the subclass
relations among DistError, DistBackendError, DistNetworkError,
DistStoreError and QueueEmptyError; DebugLevel's names and values and the
environment variable read; supports_complex, default_pg_timeout and
get_pg_count on a group of one; the newer calls' signatures and their
results on a group of one (gloo in PyTorch: the single-tensor and
coalesced collectives, the coalesced ones' FutureWarning and futures,
get_backend_config, split_group, rendezvous).

Each group runs in a child process that imports torch before ddpc (see
test_nn_extra_torch.py) and fails there, printing what differs.
"""

from procs import run_torch_group, torch_group_test

ERRORS = ["DistError", "DistBackendError", "DistNetworkError", "DistStoreError", "QueueEmptyError"]


def hierarchy(np, torch, ddpc):
    import torch.distributed as td

    import ddpc.distributed as dd

    for a in ERRORS:
        for base in (RuntimeError, TimeoutError, Exception):
            assert issubclass(getattr(dd, a), base) == issubclass(getattr(td, a), base), (a, base)
        for b in ERRORS:
            assert issubclass(getattr(dd, a), getattr(dd, b)) == issubclass(getattr(td, a), getattr(td, b)), (a, b)
    # ddpc's timeouts are DistTimeoutErrors besides: of the store's class and the network's
    assert issubclass(dd.DistStoreTimeoutError, dd.DistStoreError) and not issubclass(td.DistStoreError, TimeoutError)
    assert issubclass(dd.DistNetworkTimeoutError, dd.DistNetworkError)


def debug_level(np, torch, ddpc):
    import os

    import torch.distributed as td

    import ddpc.distributed as dd

    assert list(dd.DebugLevel.__members__) == list(td.DebugLevel.__members__)
    for name in td.DebugLevel.__members__:
        assert int(getattr(dd.DebugLevel, name)) == int(getattr(td.DebugLevel, name)), name
        td.set_debug_level(getattr(td.DebugLevel, name))
        dd.set_debug_level(getattr(dd.DebugLevel, name))
        assert dd.get_debug_level().name == td.get_debug_level().name
    for value in ("detail", "INFO", "Off"):
        os.environ["TORCH_DISTRIBUTED_DEBUG"] = value
        td.set_debug_level_from_env()
        dd.set_debug_level_from_env()
        assert dd.get_debug_level().name == td.get_debug_level().name, value
    os.environ["TORCH_DISTRIBUTED_DEBUG"] = "verbose"
    for module in (td, dd):
        try:
            module.set_debug_level_from_env()
        except ValueError:
            continue
        raise AssertionError(f"{module.__name__}.set_debug_level_from_env took 'verbose'")
    del os.environ["TORCH_DISTRIBUTED_DEBUG"]
    td.set_debug_level_from_env()
    dd.set_debug_level_from_env()
    assert dd.get_debug_level().name == td.get_debug_level().name == "OFF"


def small_names(np, torch, ddpc):
    import torch.distributed as td

    import ddpc.distributed as dd

    for op in ("SUM", "AVG", "MIN", "MAX", "PRODUCT", "BAND", "BOR", "BXOR"):
        assert dd.supports_complex(getattr(dd.ReduceOp, op)) == td.supports_complex(getattr(td.ReduceOp, op)), op
    assert dd.default_pg_timeout == td.default_pg_timeout
    assert dd.is_ucc_available() is False and dd.is_xccl_available() is False
    for name in ("breakpoint", "get_pg_count", "is_ucc_available", "is_xccl_available", "supports_complex",
                 "get_debug_level", "set_debug_level", "set_debug_level_from_env", "DebugLevel", *ERRORS):
        assert callable(getattr(td, name)) and callable(getattr(dd, name)), name


def pg_count(np, torch, ddpc):
    import torch.distributed as td

    import ddpc.distributed as dd

    counts = []
    for module, backend in ((td, "gloo"), (dd, "cpu")):
        seen = [module.get_pg_count()]
        module.init_process_group(backend, store=module.HashStore(), rank=0, world_size=1)
        seen.append(module.get_pg_count())
        module.new_group([0])
        module.new_group([0])
        seen.append(module.get_pg_count())
        module.destroy_process_group()
        seen.append(module.get_pg_count())
        counts.append(seen)
    assert counts[0] == counts[1], counts


NEWER = ["all_gather_coalesced", "all_gather_single", "all_reduce_coalesced", "gather_into_tensor", "gather_single",
         "get_backend_config", "reduce_scatter_single", "register_rendezvous_handler", "rendezvous", "set_timeout",
         "split_group"]


def newer_calls(np, torch, ddpc):
    import inspect
    import socket
    import warnings
    from datetime import timedelta

    import torch.distributed as td

    import ddpc.distributed as dd

    for name in NEWER:
        want = list(inspect.signature(getattr(td, name)).parameters)
        assert list(inspect.signature(getattr(dd, name)).parameters) == want, name
    results = []
    for module, lib, backend in ((td, torch, "gloo"), (dd, ddpc, "gloo")):
        module.init_process_group(backend, store=module.HashStore(), rank=0, world_size=1)
        got = {"config": module.get_backend_config()}
        out = lib.zeros(3)
        module.all_gather_single(out, lib.ones(3) * 2)
        part = lib.zeros(3)
        module.reduce_scatter_single(part, lib.ones(3) * 5, async_op=True).wait()
        got["single"] = (out.tolist(), part.tolist())
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            tensors = [lib.ones(2), lib.ones(3) * 4]
            values = module.all_reduce_coalesced(tensors, async_op=True).wait()
            outs = [[lib.zeros(2), lib.zeros(1)]]
            gathered = module.all_gather_coalesced(outs, [lib.ones(2) * 3, lib.ones(1) * 7], async_op=True).wait()
        got["coalesced"] = ([t.tolist() for t in values], [t.tolist() for t in gathered],
                            [[t.tolist() for t in row] for row in outs], [w.category for w in seen])
        module.set_timeout(timedelta(seconds=30))
        split = module.split_group(split_ranks=[[0]])
        got["split"] = (module.get_process_group_ranks(split), module.get_rank(split), module.get_backend_config(split))
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        store, rank, world = next(module.rendezvous(f"tcp://127.0.0.1:{port}", 0, 1))
        store.set("k", b"v")
        got["rendezvous"] = (rank, world, store.get("k"))
        module.destroy_process_group()
        results.append(got)
    assert results[0] == results[1], results


GROUPS = {f.__name__: f for f in (hierarchy, debug_level, small_names, pg_count, newer_calls)}

test_matches_pytorch = torch_group_test(__file__, GROUPS)

if __name__ == "__main__":
    run_torch_group(GROUPS)
