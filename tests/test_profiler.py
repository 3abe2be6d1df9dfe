"""ddpc.profiler: what a few profiled training steps record (modules, backward
nodes, optimizer, loader, collectives), the times' arithmetic, schedules and
Chrome traces."""

import json
import os
import re
import threading

import numpy as np
import pytest

import ddpc
from ddpc import nn
from ddpc.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

STEPS = 3


def make_model():
    ddpc.manual_seed(0)
    return nn.Sequential(nn.Linear(6, 16), nn.ReLU(), nn.Linear(16, 16), nn.Tanh(), nn.Linear(16, 3))


def batch(seed=0):
    rng = np.random.default_rng(seed)
    return (ddpc.from_numpy(rng.standard_normal((8, 6)).astype(np.float32)),
            ddpc.from_numpy(rng.integers(0, 3, 8).astype(np.int64)))


def train(model, opt, steps, prof=None, label=None):
    loss_fn = nn.CrossEntropyLoss()
    x, y = batch()
    for i in range(steps):
        with record_function(f"{label}{i}" if label else "train_step"):
            opt.zero_grad()
            loss_fn(model(x), y).backward()
            opt.step()
        if prof is not None:
            prof.step()


def counts(prof):
    return {a.key: a.count for a in prof.key_averages()}


def grad_fn_names(loss):
    """The names of the nodes of loss's graph that backward runs, one per node
    (not the AccumulateGrad nodes standing for leaves)."""
    names, seen, todo = [], set(), [loss.grad_fn]
    while todo:
        node = todo.pop()
        if not isinstance(node, ddpc.autograd.Node) or isinstance(node, ddpc.autograd.AccumulateGrad) or \
                id(node) in seen:
            continue
        seen.add(id(node))
        names.append(node.name())
        todo.extend(fn for fn, _ in node.next_functions)
    return names


def table_rows(table):
    """{name: [column values]} of a printed table's rows."""
    rows = {}
    for line in table.splitlines():
        cells = re.split(r"\s{2,}", line.strip())
        if len(cells) >= 7 and not set(line.strip()) <= {"-", " "} and cells[0] != "Name":
            rows[cells[0]] = cells[1:]
    return rows


def test_a_training_step_shows_modules_backward_nodes_and_the_optimizer():
    model = make_model()
    opt = ddpc.optim.Adam(model.parameters(), lr=1e-3)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        train(model, opt, STEPS)
    x, y = batch()
    expected_nodes = grad_fn_names(nn.CrossEntropyLoss()(model(x), y))
    got = counts(prof)
    linears = sum(isinstance(m, nn.Linear) for m in model.modules())
    assert got["nn.Module: Linear"] == STEPS * linears
    assert got["nn.Module: Sequential"] == STEPS
    assert got["nn.Module: ReLU"] == got["nn.Module: Tanh"] == got["nn.Module: CrossEntropyLoss"] == STEPS
    for name in set(expected_nodes):
        assert got[name] == STEPS * expected_nodes.count(name), name
    assert got["LinearBackward"] == STEPS * linears
    assert got["Optimizer.step#Adam.step"] == got["Optimizer.zero_grad#Adam.zero_grad"] == STEPS
    assert got["train_step"] == STEPS

    table = prof.key_averages().table(sort_by="cpu_time_total", row_limit=100)
    header = re.split(r"\s{2,}", table.splitlines()[1].strip())
    assert header == ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg", "# of Calls"]
    rows = table_rows(table)
    for name, count in got.items():
        assert int(rows[name][-1]) == count, name
    assert rows["train_step"][2] == "100.00%"  # the outermost range holds everything else
    assert re.search(r"^Self CPU time total: \d+\.\d{3}(us|ms|s)$", table.splitlines()[-1])
    limited = table_rows(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=2))
    assert len(limited) == 2
    top_two = sorted(prof.key_averages(), key=lambda a: a.self_cpu_time_total, reverse=True)[:2]
    assert set(limited) == {a.key for a in top_two}


def test_self_times_add_up_to_the_total():
    model = make_model()
    opt = ddpc.optim.SGD(model.parameters(), lr=0.1)
    with profile() as prof:
        train(model, opt, STEPS)
    events = prof.events()
    assert events
    for e in events:
        children = sum(c.cpu_time_total for c in e.cpu_children)
        assert 0 <= e.self_cpu_time_total <= e.cpu_time_total
        assert e.self_cpu_time_total == pytest.approx(e.cpu_time_total - children, abs=1e-3)
    roots = [e for e in events if e.cpu_parent is None]
    assert sum(e.self_cpu_time_total for e in events) == pytest.approx(sum(e.cpu_time_total for e in roots), abs=1e-2)
    averages = prof.key_averages()
    assert averages.self_cpu_time_total == pytest.approx(events.self_cpu_time_total)
    for a in averages:
        assert a.self_cpu_time_total <= a.cpu_time_total + 1e-6
        assert a.cpu_time == pytest.approx(a.cpu_time_total / a.count)


def test_record_function_nests_as_context_manager_and_decorator():
    @record_function("leaf")
    def leaf(x):
        return x * 2

    x = ddpc.ones(4)
    with profile() as prof:
        with record_function("outer"):
            with record_function("inner", args="note"):
                leaf(x)
                leaf(x)
        leaf(x)
    by_name = {}
    for e in prof.events():
        by_name.setdefault(e.name, []).append(e)
    (outer,), (inner,), leaves = by_name["outer"], by_name["inner"], by_name["leaf"]
    assert inner.cpu_parent is outer and outer.cpu_children == [inner]
    assert [e.cpu_parent for e in leaves] == [inner, inner, None]
    assert inner.metadata == {"args": "note"}
    for child in [inner] + leaves[:2]:
        parent = child.cpu_parent
        assert parent.time_range.start <= child.time_range.start <= child.time_range.end <= parent.time_range.end
    assert ddpc.autograd.profiler.record_function is record_function


def test_schedule_reports_only_the_active_steps_once():
    model = make_model()
    opt = ddpc.optim.SGD(model.parameters(), lr=0.1)
    ready = []
    with profile(schedule=schedule(wait=1, warmup=1, active=2, repeat=1),
                 on_trace_ready=lambda p: ready.append((p.step_num, counts(p), {e.trace_name for e in p.events()}))
                 ) as prof:
        train(model, opt, 6, prof, label="step")
    assert len(ready) == 1
    step_num, got, names = ready[0]
    assert step_num == 4  # the step() after the last active step saves the cycle
    assert {k for k in names if k.startswith(("step", "ProfilerStep"))} == {"step2", "step3", "ProfilerStep#2",
                                                                          "ProfilerStep#3"}
    assert got["ProfilerStep*"] == 2 and got["Optimizer.step#SGD.step"] == 2
    assert counts(prof) == got  # nothing more was recorded after the cycle


def test_schedule_actions_follow_pytorchs_cycle():
    A = ddpc.profiler.ProfilerAction
    fn = schedule(wait=2, warmup=1, active=2, repeat=2, skip_first=1)
    assert [fn(s) for s in range(13)] == (
        [A.NONE] + 2 * [A.NONE, A.NONE, A.WARMUP, A.RECORD, A.RECORD_AND_SAVE] + [A.NONE, A.NONE])
    with pytest.raises(AssertionError):
        schedule(wait=0, warmup=0, active=0)


def test_on_trace_ready_runs_at_stop_for_a_cycle_cut_short():
    ready = []
    prof = profile(schedule=schedule(wait=0, warmup=1, active=5), on_trace_ready=ready.append)
    prof.start()
    for i in range(3):
        with record_function(f"s{i}"):
            pass
        prof.step()
    prof.stop()
    assert ready == [prof]
    assert {e.trace_name for e in prof.events()} == {"s1", "s2", "ProfilerStep#1", "ProfilerStep#2", "ProfilerStep#3"}


def assert_properly_nested(trace_events):
    """On each thread, any two ranges are disjoint or one holds the other."""
    by_thread = {}
    for e in trace_events:
        by_thread.setdefault((e["pid"], e["tid"]), []).append((e["ts"], e["ts"] + e["dur"], e["name"]))
    eps = 1e-3  # a nanosecond: ts and dur are decimal microseconds
    for ranges in by_thread.values():
        ranges.sort(key=lambda r: (r[0], -r[1]))
        open_ranges = []
        for start, end, name in ranges:
            while open_ranges and open_ranges[-1][1] <= start + eps:
                open_ranges.pop()
            if open_ranges:
                assert end <= open_ranges[-1][1] + eps, (name, open_ranges[-1][2])
            open_ranges.append((start, end, name))


def test_chrome_trace_is_json_with_nested_complete_events(tmp_path):
    model = make_model()
    opt = ddpc.optim.SGD(model.parameters(), lr=0.1)
    with profile(record_shapes=True) as prof:
        train(model, opt, 2)
    path = tmp_path / "trace.json"
    prof.export_chrome_trace(str(path))
    trace = json.loads(path.read_text())
    complete = [e for e in trace["traceEvents"] if e["ph"] == "X"]
    assert len(complete) == len(prof.events())
    for e in complete:
        assert {"name", "ts", "dur", "pid", "tid"} <= set(e) and e["dur"] >= 0 and e["pid"] == os.getpid()
    assert_properly_nested(complete)
    linear = next(e for e in complete if e["name"] == "nn.Module: Linear")
    assert linear["args"]["Input Dims"] == [[8, 6]]
    sequential = [e for e in complete if e["name"] == "nn.Module: Sequential"]
    assert any(s["ts"] <= linear["ts"] and linear["ts"] + linear["dur"] <= s["ts"] + s["dur"] for s in sequential)
    names = {e["tid"]: e["args"]["name"] for e in trace["traceEvents"] if e["name"] == "thread_name"}
    assert threading.get_native_id() in names


def test_tensorboard_trace_handler_writes_a_trace_per_cycle(tmp_path):
    handler = tensorboard_trace_handler(str(tmp_path / "logs"), worker_name="rank0")
    with profile(schedule=schedule(wait=0, warmup=1, active=1, repeat=2), on_trace_ready=handler) as prof:
        for i in range(5):
            with record_function(f"s{i}"):
                pass
            prof.step()
    files = sorted(os.listdir(tmp_path / "logs"))
    assert len(files) == 2 and all(re.fullmatch(r"rank0\.\d+\.pt\.trace\.json", f) for f in files), files
    names = [{e["name"] for e in json.loads((tmp_path / "logs" / f).read_text())["traceEvents"]} for f in files]
    assert "s1" in names[0] and "s3" in names[1] and "s1" not in names[1]


def test_nothing_is_recorded_outside_the_profile():
    model = make_model()
    opt = ddpc.optim.SGD(model.parameters(), lr=0.1)
    train(model, opt, 1)
    with profile() as prof:
        train(model, opt, 1)
    before = [(e.name, e.time_range.start) for e in prof.events()]
    train(model, opt, 2)
    with record_function("after"):
        pass
    assert [(e.name, e.time_range.start) for e in prof.events()] == before
    assert not ddpc.profiler._is_profiler_enabled
    modules = nn.modules.module
    assert not modules._global_forward_pre_hooks and not modules._global_forward_hooks


def test_one_profile_records_at_a_time():
    with profile():
        with pytest.raises(RuntimeError, match="one profile at a time"):
            profile().start()
    with profile() as again:
        with record_function("fine"):
            pass
    assert [e.name for e in again.events()] == ["fine"]


def test_input_shapes_group_the_averages():
    model = nn.Linear(5, 2)
    with profile(record_shapes=True) as prof:
        model(ddpc.ones(3, 5))
        model(ddpc.ones(4, 5))
        model(ddpc.ones(4, 5))
    plain = {a.key: a for a in prof.key_averages()}
    assert plain["nn.Module: Linear"].count == 3 and plain["nn.Module: Linear"].input_shapes == ""
    grouped = {(a.key, str(a.input_shapes)): a.count for a in prof.key_averages(group_by_input_shape=True)}
    assert grouped == {("nn.Module: Linear", "[[3, 5]]"): 1, ("nn.Module: Linear", "[[4, 5]]"): 2}
    assert "Input Shapes" in prof.key_averages(group_by_input_shape=True).table()


def test_with_stack_points_at_the_calling_line():
    model = nn.Linear(5, 2)
    with profile(with_stack=True) as prof:
        model(ddpc.ones(3, 5))
    (event,) = prof.events()
    assert event.stack and event.stack[0].startswith(__file__) and "test_with_stack_points" in event.stack[0]
    assert "Source Location" in prof.key_averages(group_by_stack_n=1).table()


def test_a_module_that_raises_closes_its_range():
    class Fails(nn.Module):
        def forward(self, x):
            raise ValueError("boom")

    outer = nn.Sequential(nn.Linear(2, 2), Fails())
    with profile() as prof:
        with record_function("step"):
            with pytest.raises(ValueError, match="boom"):
                outer(ddpc.ones(1, 2))
            nn.Linear(2, 2)(ddpc.ones(1, 2))
    by_name = {e.name: e for e in prof.events()}
    assert {"nn.Module: Sequential", "nn.Module: Fails", "step"} <= set(by_name)
    assert by_name["nn.Module: Fails"].cpu_parent is by_name["nn.Module: Sequential"]
    later = [e for e in prof.events() if e.name == "nn.Module: Linear"][-1]
    assert later.cpu_parent is by_name["step"]


class Squares(ddpc.data.Dataset):
    def __len__(self):
        return 12

    def __getitem__(self, i):
        return np.full(3, i * i, np.float32)


def test_loader_batches_and_background_fetches_are_recorded_on_their_threads():
    arrays = ddpc.data.TensorDataset(np.zeros((12, 3), np.float32))
    with profile() as prof:
        threaded = list(ddpc.data.DataLoader(Squares(), batch_size=4))
        gathered = list(ddpc.data.DataLoader(arrays, batch_size=4))
    assert len(threaded) == len(gathered) == 3
    got = counts(prof)
    assert got["enumerate(DataLoader)#_ThreadedBatches.__next__"] == 4  # the last one ends the epoch
    assert got["enumerate(DataLoader)#_ArrayBatches.__next__"] == 4
    assert got["DataLoader.fetch"] == 3
    main = threading.get_native_id()
    threads = {e.name: e.thread for e in prof.events()}
    assert threads["enumerate(DataLoader)#_ThreadedBatches.__next__"] == main
    assert threads["DataLoader.fetch"] != main


def ddp_worker(rank, steps, exchange):
    import ddpc.distributed as dist

    dist.init_process_group("cpu")
    # hidden 600: more than the first bucket's 1 MB, so there are several buckets
    # when every gradient is all-reduced (else the 600 x 600 weight's is exchanged)
    model = nn.Sequential(nn.Linear(6, 600), nn.ReLU(), nn.Linear(600, 600), nn.ReLU(), nn.Linear(600, 3))
    ddp = nn.parallel.DistributedDataParallel(model, bucket_cap_mb=0.2)
    if not exchange:  # the default all-reduce under another name: every gradient goes through the buckets
        ddp.register_comm_hook(None, lambda state, bucket: nn.parallel.allreduce_hook(state, bucket))
    opt = ddpc.optim.SGD(ddp.parameters(), lr=0.1)
    with profile() as prof:
        train(ddp, opt, steps)
    buckets = [b.flat.nbytes for b in ddp._buckets]
    reduced = [e.metadata["bytes"] for e in prof.events() if e.name == "c10d::allreduce_"]
    dist.destroy_process_group()
    return buckets, reduced, counts(prof)


@pytest.mark.parametrize("exchange", [False, True])
def test_ddp_bucket_all_reduces_show_under_the_profiler(exchange):
    steps = 2
    for buckets, reduced, got in ddpc.spawn(ddp_worker, args=(steps, exchange), nprocs=2):
        assert len(buckets) == 1 if exchange else len(buckets) > 1
        assert reduced == buckets * steps  # launched in bucket order, each with its bytes
        assert got["DistributedDataParallel.launch_bucket"] == steps * len(buckets)
        assert got["DistributedDataParallel.finish_reduction"] == steps
        assert got.get("DistributedDataParallel.exchange_gradients", 0) == (steps if exchange else 0)
        assert got["nn.Module: DistributedDataParallel"] == steps


def test_cpu_backend_collectives_are_named_as_pytorchs_with_their_sizes():
    for rank, (top, nested) in enumerate(ddpc.spawn(collectives_worker, nprocs=2)):
        assert top[:4] == [("c10d::allreduce_", 40), ("c10d::broadcast_", 24), ("c10d::_allgather_base_", 16),
                           ("c10d::barrier", 0)]
        assert [name for name, _ in top[4:]] == [
            "c10d::allgather_", "c10d::gather_", "c10d::scatter_", "c10d::reduce_", "c10d::reduce_",
            "c10d::reduce_scatter_", "c10d::_reduce_scatter_base_", "c10d::alltoall_base_", "c10d::alltoall_",
            "c10d::send" if rank == 0 else "c10d::recv_", "c10d::allreduce_", "ddpc.distributed.Work.wait"]
        # An all_to_all is made of messages to and from each peer, and waits for them.
        for outer in ("c10d::alltoall_base_", "c10d::alltoall_"):
            assert sorted(name for parent, name in nested if parent == outer) == [
                "c10d::recv_", "c10d::send", "ddpc.distributed.Work.wait", "ddpc.distributed.Work.wait"]


def collectives_worker(rank):
    import ddpc.distributed as dist

    dist.init_process_group("cpu")
    pair = [ddpc.ones(2), ddpc.ones(2)]
    with profile() as prof:
        dist.all_reduce(ddpc.ones(10))
        dist.broadcast(ddpc.ones(3, dtype=ddpc.float64), src=0)
        dist.all_gather_into_tensor(ddpc.zeros(4), ddpc.ones(2))
        dist.barrier()
        dist.all_gather([ddpc.zeros(2), ddpc.zeros(2)], ddpc.ones(2))
        dist.gather(ddpc.ones(2), pair if rank == 0 else None, dst=0)
        dist.scatter(ddpc.zeros(2), pair if rank == 0 else None, src=0)
        for dst in (0, 1):  # each rank's reduce as the destination and not
            dist.reduce(ddpc.ones(2), dst=dst)
        dist.reduce_scatter(ddpc.zeros(2), pair)
        dist.reduce_scatter_tensor(ddpc.zeros(2), ddpc.ones(4))
        dist.all_to_all_single(ddpc.zeros(4), ddpc.ones(4))
        dist.all_to_all([ddpc.zeros(2), ddpc.zeros(2)], pair)
        dist.send(ddpc.ones(2), dst=1) if rank == 0 else dist.recv(ddpc.zeros(2), src=0)
        dist.all_reduce(ddpc.ones(2), async_op=True).wait()
    dist.destroy_process_group()
    events = prof.events()
    return ([(e.name, e.metadata.get("bytes")) for e in events if e.cpu_parent is None],
            [(e.cpu_parent.name, e.name) for e in events if e.cpu_parent is not None])


def test_with_flops_counts_matmuls_linears_and_2d_convolutions_by_pytorchs_formulas():
    F = nn.functional
    with profile(with_flops=True, record_shapes=True) as prof:
        ddpc.randn(8, 16) @ ddpc.randn(16, 4)  # 2 * 8 * 16 * 4
        ddpc.randn(2, 8, 16) @ ddpc.randn(2, 16, 4)  # per batch entry
        ddpc.randn(3, 8, 16) @ ddpc.randn(16, 4)  # the batch folds into the rows
        nn.Linear(16, 4)(ddpc.randn(3, 5, 16))  # 2 * 15 * 16 * 4, the bias not counted
        F.linear(ddpc.randn(16), ddpc.randn(4, 16))
        nn.Conv2d(3, 5, 3, padding=1)(ddpc.randn(2, 3, 8, 8))  # 2 * N * Hout * Wout * weight elements
        F.conv2d(ddpc.randn(2, 4, 9, 9), ddpc.randn(6, 2, 3, 3), stride=2, groups=2)
        ddpc.randn(16) @ ddpc.randn(16)  # PyTorch counts none of these
        ddpc.randn(4, 16) @ ddpc.randn(16)
        F.conv1d(ddpc.randn(2, 3, 8), ddpc.randn(5, 3, 3))
        F.conv2d(ddpc.randn(3, 8, 8), ddpc.randn(5, 3, 3, 3))
    counted = [(e.name, e.flops, e.input_shapes) for e in prof.events() if e.flops]
    assert counted == [("aten::mm", 1024, [[8, 16], [16, 4]]), ("aten::bmm", 2048, [[2, 8, 16], [2, 16, 4]]),
                       ("aten::mm", 3072, [[3, 8, 16], [16, 4]]), ("aten::addmm", 1920, [[3, 5, 16], [4, 16], [4]]),
                       ("aten::mm", 128, [[16], [4, 16]]), ("aten::conv2d", 34560, [[2, 3, 8, 8], [5, 3, 3, 3], [5]]),
                       ("aten::conv2d", 6912, [[2, 4, 9, 9], [6, 2, 3, 3]])]
    assert not any(e.name.startswith("aten::") and not e.flops for e in prof.events())
    table = prof.key_averages().table()
    assert "Total KFLOPs" in table  # the unit of the smallest row's count, aten::addmm's 1920
    rows = table_rows(table)
    assert [rows[name][-1] for name in ("aten::mm", "aten::bmm", "aten::addmm", "aten::conv2d")] == [
        "4.224", "2.048", "1.920", "41.472"]
    assert rows["nn.Module: Linear"][-1] == "--"


def test_without_with_flops_nothing_is_counted():
    with profile() as prof:
        nn.Linear(4, 2)(ddpc.randn(3, 4)) @ ddpc.randn(2, 2)
    assert all(e.flops == 0 and not e.name.startswith("aten::") for e in prof.events())
    assert "FLOPs" not in prof.key_averages().table()


@pytest.mark.gpu
def test_profile_memory_records_cuda_allocations():
    model = nn.Linear(256, 1024).cuda()
    x = ddpc.ones(512, 256, device="cuda")
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], profile_memory=True) as prof:
        y = model(x)
    (event,) = prof.events()
    assert event.device_memory_usage >= y.nbytes
    assert "CUDA Mem" in prof.key_averages().table()


def test_profile_memory_on_the_host_records_nothing_more():
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        nn.Linear(4, 4)(ddpc.ones(2, 4))
    assert [e.device_memory_usage for e in prof.events()] == [0]
    assert "Mem" not in prof.key_averages().table()
