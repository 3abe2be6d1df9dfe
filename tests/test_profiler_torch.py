"""Optional: ddpc.profiler against torch.profiler (skipped when torch is not
installed): the schedule's actions, which steps each on_trace_ready sees
(also for a cycle cut short by stop), the optimizer's range names, the
table's columns, the file names of tensorboard_trace_handler, and the order
of the global module forward hooks.

Each group runs in a child process that imports torch before ddpc (see
test_nn_extra_torch.py) and fails there, printing what differs.
"""

from procs import run_torch_group, torch_group_test

SCHEDULES = [dict(wait=1, warmup=1, active=2, repeat=1), dict(wait=2, warmup=1, active=3, repeat=2, skip_first=1),
             dict(wait=0, warmup=1, active=1), dict(wait=3, warmup=2, active=1, skip_first=2, skip_first_wait=1)]


def _schedule_actions(np, torch, ddpc):
    import warnings

    for kwargs in SCHEDULES:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            ours, theirs = ddpc.profiler.schedule(**kwargs), torch.profiler.schedule(**kwargs)
        got, want = [ours(s).name for s in range(20)], [theirs(s).name for s in range(20)]
        assert got == want, f"{kwargs}: {got} where PyTorch has {want}"


def _cycles(lib, kwargs, steps):
    """The ProfilerStep rows and step labels of the tables that each on_trace_ready call sees."""
    seen = []

    def ready(prof):
        rows = prof.key_averages()
        seen.append(sorted((e.key, e.count) for e in rows if e.key.startswith(("ProfilerStep", "label"))))

    with lib.profiler.profile(activities=[lib.profiler.ProfilerActivity.CPU], schedule=lib.profiler.schedule(**kwargs),
                              on_trace_ready=ready) as prof:
        for i in range(steps):
            with lib.profiler.record_function(f"label{i}"):
                lib.ones(2).sum()
            prof.step()
    return seen


def _trace_ready_cycles(np, torch, ddpc):
    import warnings

    for kwargs in SCHEDULES:
        for steps in (3, 7, 12):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                got, want = _cycles(ddpc, kwargs, steps), _cycles(torch, kwargs, steps)
            assert got == want, f"{kwargs}, {steps} steps: {got} where PyTorch has {want}"


def _optimizer_names(np, torch, ddpc):
    for name in ("SGD", "Adam", "AdamW"):
        names = []
        for lib in (torch, ddpc):
            p = lib.nn.Parameter(lib.ones(3))
            opt = getattr(lib.optim, name)([p], lr=0.1)
            with lib.profiler.profile(activities=[lib.profiler.ProfilerActivity.CPU]) as prof:
                opt.zero_grad()
                (p * p).sum().backward()
                opt.step()
            names.append({e.key for e in prof.key_averages() if e.key.startswith("Optimizer.")})
        assert names[0] == names[1] == {f"Optimizer.step#{name}.step", f"Optimizer.zero_grad#{name}.zero_grad"}, names


def _table_columns(np, torch, ddpc):
    import re

    headers = []
    for lib in (torch, ddpc):
        with lib.profiler.profile(activities=[lib.profiler.ProfilerActivity.CPU]) as prof:
            with lib.profiler.record_function("block"):
                lib.ones(4).sum()
        lines = prof.key_averages().table(sort_by="self_cpu_time_total").splitlines()
        headers.append((re.split(r"\s{2,}", lines[1].strip()), set(lines[0]) | set(lines[2]),
                        re.sub(r"[\d.]+(us|ms|s)$", "", lines[-1])))
    assert headers[0] == headers[1], headers


def _trace_file_names(np, torch, ddpc):
    import os
    import re
    import tempfile

    for lib in (torch, ddpc):
        with tempfile.TemporaryDirectory() as d:
            handler = lib.profiler.tensorboard_trace_handler(d, worker_name="w")
            with lib.profiler.profile(activities=[lib.profiler.ProfilerActivity.CPU], on_trace_ready=handler):
                lib.ones(2).sum()
            (name,) = os.listdir(d)
            assert re.fullmatch(r"w\.\d{19}\.pt\.trace\.json", name), (lib.__name__, name)


def _hook_order(lib):
    """What the global and a module's own forward hooks see, in order, for a
    model whose last layer fails (the always_call hooks still run)."""
    hooks = lib.nn.modules.module
    order = []

    class Fails(lib.nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    model = lib.nn.Sequential(lib.nn.Linear(2, 2), lib.nn.ReLU(), Fails())
    model[0].register_forward_pre_hook(lambda m, args: order.append("own pre"))
    model[0].register_forward_hook(lambda m, args, out: order.append("own post"))
    handles = [hooks.register_module_forward_pre_hook(lambda m, args: order.append(("pre", type(m).__name__))),
               hooks.register_module_forward_hook(lambda m, args, out: order.append(("post", type(m).__name__))),
               hooks.register_module_forward_hook(lambda m, args, out: order.append(("always", type(m).__name__,
                                                                                     out is None)),
                                                  always_call=True)]
    try:
        model(lib.ones(1, 2))
    except ValueError:
        order.append("raised")
    for h in handles:
        h.remove()
    return order


def _global_module_hooks(np, torch, ddpc):
    got, want = _hook_order(ddpc), _hook_order(torch)
    assert got == want, f"{got} where PyTorch has {want}"


def _collective_ranges(lib, port):
    """The names of the collectives' ranges when one rank runs each collective once."""
    dist = lib.distributed
    dist.init_process_group("gloo" if lib.__name__ == "torch" else "cpu", init_method=f"tcp://127.0.0.1:{port}",
                            rank=0, world_size=1)
    t = lib.ones(4)
    with lib.profiler.profile(activities=[lib.profiler.ProfilerActivity.CPU]) as prof:
        dist.all_reduce(t)
        dist.broadcast(t, 0)
        dist.reduce(t, 0)
        dist.all_gather([lib.zeros(4)], t)
        dist.all_gather_into_tensor(lib.zeros(4), t)
        dist.gather(t, [lib.zeros(4)], 0)
        dist.scatter(t, [lib.zeros(4)], 0)
        dist.reduce_scatter_tensor(lib.zeros(4), t)
        dist.reduce_scatter(lib.zeros(4), [t])
        dist.all_to_all_single(lib.zeros(4), t)
        dist.barrier()
    dist.destroy_process_group()
    return [e.name for e in prof.events() if e.name.startswith("c10d::")]


def _collective_names(np, torch, ddpc):
    from ddpc._procs import free_port

    got, want = _collective_ranges(ddpc, free_port()), _collective_ranges(torch, free_port())
    assert got == want, f"{got} where PyTorch has {want}"


def _counted(lib):
    """(name, FLOPs) of the ranges that count FLOPs, and the table's FLOPs header, for the same calls."""
    F = lib.nn.functional
    with lib.profiler.profile(activities=[lib.profiler.ProfilerActivity.CPU], with_flops=True) as prof:
        lib.randn(8, 16) @ lib.randn(16, 4)
        lib.matmul(lib.randn(2, 1, 8, 16), lib.randn(3, 16, 4))
        lib.randn(3, 8, 16) @ lib.randn(16, 4)
        lib.randn(16) @ lib.randn(2, 16, 4)
        lib.randn(16) @ lib.randn(16, 4)
        lib.randn(4, 16) @ lib.randn(16)
        lib.nn.Linear(16, 4)(lib.randn(3, 5, 16))
        lib.nn.Linear(16, 4, bias=False)(lib.randn(5, 16))
        F.linear(lib.randn(16), lib.randn(4, 16), lib.randn(4))
        lib.nn.Conv2d(3, 5, 3, padding=1)(lib.randn(2, 3, 8, 8))
        F.conv2d(lib.randn(2, 4, 9, 9), lib.randn(6, 2, 3, 3), stride=2, groups=2, dilation=(1, 2))
        F.conv2d(lib.randn(1, 3, 6, 6), lib.randn(4, 3, 3, 3), padding="same")
        F.conv2d(lib.randn(1, 3, 6, 6), lib.randn(4, 3, 3, 3), padding="valid")
        F.conv2d(lib.randn(1, 3, 6, 6), lib.randn(4, 3, 3, 3), padding=(2, 0))
        F.conv1d(lib.randn(2, 3, 8), lib.randn(5, 3, 3))
    header = next(line for line in prof.key_averages().table().splitlines() if "Name" in line)
    return [(e.name, e.flops) for e in prof.events() if e.flops], header.split()[-1]


def _flops(np, torch, ddpc):
    got, want = _counted(ddpc), _counted(torch)
    assert got == want, f"{got} where PyTorch has {want}"


GROUPS = {"schedule_actions": _schedule_actions, "trace_ready_cycles": _trace_ready_cycles,
          "optimizer_names": _optimizer_names, "table_columns": _table_columns, "trace_file_names": _trace_file_names,
          "global_module_hooks": _global_module_hooks, "collective_names": _collective_names,
          "flops": _flops}


test_matches_pytorch = torch_group_test(__file__, GROUPS)


if __name__ == "__main__":
    run_torch_group(GROUPS)
