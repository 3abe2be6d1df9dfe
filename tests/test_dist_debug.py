"""torch.distributed's debugging helpers: the debug level (from
DDPC_DISTRIBUTED_DEBUG or TORCH_DISTRIBUTED_DEBUG, or set) and what it
does (DistributedDataParallel's bucket layout and unused-parameter error at
INFO, each cpu collective logged at DETAIL); breakpoint() with skip and with
pdb reading standard input, alone and under ddpc-run; and the small names
(get_pg_count, is_ucc_available, is_xccl_available, supports_complex,
default_pg_timeout). Ranks are real processes (ddpc.spawn, ddpc-run)."""

import logging
import os
import re
import subprocess
import sys
import textwrap
from datetime import timedelta

import numpy as np
import pytest

import ddpc
import ddpc.distributed as dist
from ddpc.distributed import DebugLevel


@pytest.fixture(autouse=True)
def level_off_after():
    yield
    dist.set_debug_level(DebugLevel.OFF)


class Records(logging.Handler):
    """The messages of the records that reach the ``ddpc`` loggers."""

    def __init__(self):
        super().__init__()
        self.messages = []
        logging.getLogger("ddpc").addHandler(self)

    def emit(self, record):
        self.messages.append(f"{record.name}: {record.getMessage()}")


def run_python(code, env=None, stdin="", timeout=120, args=()):
    base = {k: v for k, v in os.environ.items() if not k.endswith("_DISTRIBUTED_DEBUG")}
    return subprocess.run([sys.executable, *args, "-c", textwrap.dedent(code)] if not args or args[0] != "-m"
                          else [sys.executable, *args], input=stdin, capture_output=True, text=True,
                          timeout=timeout, env=dict(base, OMP_NUM_THREADS="1", **(env or {})))


# ---- the level ---------------------------------------------------------------------------


def test_levels_set_get_and_bad_values():
    assert list(DebugLevel.__members__) == ["OFF", "INFO", "DETAIL"]
    assert [int(v) for v in DebugLevel] == [0, 1, 2]
    for level in (DebugLevel.INFO, "detail", 0, DebugLevel.DETAIL):
        dist.set_debug_level(level)
        assert dist.get_debug_level() is DebugLevel(level if not isinstance(level, str) else 2)
    with pytest.raises(ValueError, match="OFF, INFO or DETAIL"):
        dist.set_debug_level("VERBOSE")
    with pytest.raises(ValueError):
        dist.set_debug_level(3)
    with pytest.raises(TypeError):
        dist.set_debug_level(1.0)
    assert dist.get_debug_level() is DebugLevel.DETAIL  # a refused value changes nothing


def test_the_loggers_log_at_info_and_get_their_levels_back_at_off():
    parallel = logging.getLogger("ddpc.nn.parallel")
    parallel.setLevel(logging.ERROR)
    try:
        dist.set_debug_level(DebugLevel.INFO)
        assert parallel.isEnabledFor(logging.INFO) and logging.getLogger("ddpc.distributed").isEnabledFor(logging.INFO)
        dist.set_debug_level(DebugLevel.DETAIL)
        dist.set_debug_level(DebugLevel.OFF)
        assert parallel.level == logging.ERROR and not parallel.handlers
    finally:
        parallel.setLevel(logging.NOTSET)


@pytest.mark.parametrize("env,level", [
    ({}, "OFF"),
    ({"TORCH_DISTRIBUTED_DEBUG": "detail"}, "DETAIL"),
    ({"TORCH_DISTRIBUTED_DEBUG": "INFO"}, "INFO"),
    ({"DDPC_DISTRIBUTED_DEBUG": "Info", "TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, "INFO"),  # ddpc's name first
    ({"DDPC_DISTRIBUTED_DEBUG": "", "TORCH_DISTRIBUTED_DEBUG": "DETAIL"}, "DETAIL"),
])
def test_the_environment_sets_the_level_at_import(env, level):
    res = run_python("import ddpc.distributed as d; print(d.get_debug_level().name)", env)
    assert res.returncode == 0 and res.stdout.strip() == level, res.stdout + res.stderr


def test_a_bad_value_in_the_environment_warns_at_import_and_raises_when_asked():
    res = run_python("""
        import ddpc.distributed as d
        print(d.get_debug_level().name)
        try:
            d.set_debug_level_from_env()
        except ValueError as e:
            print("RAISED", e)
        """, {"TORCH_DISTRIBUTED_DEBUG": "loud"})
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0] == "OFF", res.stdout
    assert "RAISED the value of TORCH_DISTRIBUTED_DEBUG must be OFF, INFO or DETAIL, got 'loud'" in res.stdout
    assert "RuntimeWarning" in res.stderr and "stays OFF" in res.stderr, res.stderr


def test_set_debug_level_from_env(monkeypatch):
    monkeypatch.delenv("DDPC_DISTRIBUTED_DEBUG", raising=False)
    monkeypatch.setenv("TORCH_DISTRIBUTED_DEBUG", "DETAIL")
    dist.set_debug_level_from_env()
    assert dist.get_debug_level() is DebugLevel.DETAIL
    monkeypatch.setenv("DDPC_DISTRIBUTED_DEBUG", "off")
    dist.set_debug_level_from_env()
    assert dist.get_debug_level() is DebugLevel.OFF
    monkeypatch.setenv("DDPC_DISTRIBUTED_DEBUG", "everything")
    with pytest.raises(ValueError, match="DDPC_DISTRIBUTED_DEBUG"):
        dist.set_debug_level_from_env()


# ---- what the levels do -------------------------------------------------------------------


def _model():
    from ddpc import nn

    class WithUnused(nn.Module):
        def __init__(self):
            super().__init__()
            ddpc.manual_seed(0)
            self.body = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
            self.unused = nn.Linear(3, 4)

        def forward(self, x):
            return self.body(x)

    return WithUnused()


def ddp_worker(rank, level):
    dist.set_debug_level(level)
    records = Records()
    dist.init_process_group("cpu")
    try:
        ddp = ddpc.nn.parallel.DistributedDataParallel(_model(), bucket_cap_mb=1e-4)
        error = None
        try:
            for _ in range(2):
                ddp(ddpc.randn(4, 6)).sum().backward()
        except RuntimeError as e:
            error = str(e)
    finally:
        dist.destroy_process_group()
    return [m for m in records.messages if m.startswith("ddpc.nn.parallel")], error


def test_ddp_at_info_logs_its_buckets_on_rank_zero_and_names_every_unused_parameter():
    (logs0, error0), (logs1, error1) = ddpc.spawn(ddp_worker, args=(DebugLevel.INFO,), nprocs=2)
    assert logs1 == [], logs1
    assert len(logs0) == 1, logs0
    layout = logs0[0]
    assert layout.startswith("ddpc.nn.parallel: DistributedDataParallel over 2 ranks: "), layout
    # bucket_cap_mb=1e-4 (104 bytes) holds for every bucket (a cap the caller gives has no small first
    # bucket): the last two parameters (64 bytes) share bucket 0, the rest follow in reverse order
    assert re.search(r"bucket 0: \d+ bytes of float32 on cpu, \d+ parameter\(s\): unused.bias, unused.weight",
                     layout), layout
    for name in ("body.0.weight", "body.0.bias", "body.2.weight", "body.2.bias"):
        assert name in layout, layout
    for rank, error in ((0, error0), (1, error1)):
        assert f"got no gradient on rank {rank}: unused.weight (4, 3) (index 4), unused.bias (4,) (index 5)" in error, \
            error


def test_ddp_at_off_logs_nothing_and_names_the_unused_parameters_with_a_hint():
    for logs, error in ddpc.spawn(ddp_worker, args=(DebugLevel.OFF,), nprocs=2):
        assert logs == []
        assert "got no gradient on rank" in error and "['unused.weight', 'unused.bias'] (2 in all; with " \
            "TORCH_DISTRIBUTED_DEBUG=INFO this error names each, with its shape)" in error, error


DDP_SCRIPT = """
import ddpc, ddpc.distributed as dist
from ddpc import nn
dist.init_process_group("cpu")
ddp = nn.parallel.DistributedDataParallel(nn.Sequential(nn.Linear(4, 4), nn.ReLU(), nn.Linear(4, 2)))
dist.all_reduce(ddpc.ones(2, 3))
print(f"RANK {dist.get_rank()} PASS", flush=True)
dist.destroy_process_group()
"""


@pytest.mark.parametrize("level", ["INFO", "DETAIL"])
def test_the_log_lines_show_in_a_launched_jobs_output(tmp_path, level):
    """Without any logging setup, under ddpc-run: the layout once (rank 0's), the collectives at DETAIL."""
    script = tmp_path / "job.py"
    script.write_text(DDP_SCRIPT)
    res = run_python("", {"TORCH_DISTRIBUTED_DEBUG": level},
                     args=("-m", "ddpc.run", "--nproc-per-node", "2", str(script)))
    assert res.returncode == 0 and "RANK 0 PASS" in res.stdout and "RANK 1 PASS" in res.stdout, \
        res.stdout + res.stderr
    assert res.stderr.count("ddpc.nn.parallel: DistributedDataParallel over 2 ranks: 1 bucket(s)") == 1, res.stderr
    assert "  bucket 0: 120 bytes of float32 on cpu, 4 parameter(s): 2.bias, 2.weight, 0.bias, 0.weight" in res.stderr
    collectives = re.findall(r"ddpc.distributed: rank (\d): collective #\d+ all_reduce float32 \(2, 3\)", res.stderr)
    assert sorted(collectives) == (["0", "1"] if level == "DETAIL" else []), res.stderr


def collectives_worker(rank, level):
    dist.set_debug_level(level)
    dist.init_process_group("cpu")
    records = Records()
    try:
        dist.all_reduce(np.ones((3, 4), np.float32))
        dist.broadcast(np.zeros(5, np.int64), src=0)
        dist.all_gather_into_tensor(np.zeros(4, np.float64), np.ones(2, np.float64))
        dist.barrier()
        sub = dist.new_group([1])
        if rank == 1:
            dist.all_reduce(ddpc.ones(2, dtype=ddpc.complex64), group=sub)
    finally:
        dist.destroy_process_group()
    return [m for m in records.messages if m.startswith("ddpc.distributed")]


def test_detail_logs_each_collective_with_its_sequence_number_op_dtype_and_shape():
    logs = ddpc.spawn(collectives_worker, args=(DebugLevel.DETAIL,), nprocs=2)
    for rank, lines in enumerate(logs):
        world = [line for line in lines if "group of 2" in line]
        assert len(world) == 4, lines
        first = int(re.search(r"collective #(\d+)", world[0]).group(1))
        expected = ["all_reduce float32 (3, 4)", "broadcast int64 (5,)", "all_gather_into_tensor float64 (4,), (2,)",
                    "barrier"]
        for k, (line, what) in enumerate(zip(world, expected)):
            assert line == f"ddpc.distributed: rank {rank}: collective #{first + k} {what} in a group of 2 " \
                           "(ranks [0, 1])", line
    assert logs[0][4:] == []
    assert logs[1][4:] == ["ddpc.distributed: rank 1: collective #0 all_reduce complex64 (2,) in a group of 1 "
                           "(ranks [1])"], logs[1]


def test_info_does_not_log_collectives():
    assert ddpc.spawn(collectives_worker, args=(DebugLevel.INFO,), nprocs=2) == [[], []]


# ---- breakpoint ----------------------------------------------------------------------------


ALONE = """
import ddpc.distributed as dist
x = 41
for i in range(3):
    dist.breakpoint(skip=2)
print("AFTER", x, flush=True)
"""


def test_breakpoint_reads_its_commands_from_stdin_and_skips_the_first_calls():
    """Without a process group: the third call stops (skip=2), and pdb takes its commands from stdin."""
    res = run_python(ALONE, stdin="up\np ('VALUE', x + 1, i)\nc\n", timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "('VALUE', 42, 2)" in res.stdout and "AFTER 41" in res.stdout, res.stdout + res.stderr
    assert res.stdout.count("(Pdb) ") == 3, res.stdout  # one stop: three commands
    assert "Type 'up' to get to the frame that called ddpc.distributed.breakpoint(rank=0)" in res.stdout


RANKS = """
import os, sys
import ddpc.distributed as dist
marker = sys.argv[1]
dist.init_process_group("cpu")
rank = dist.get_rank()
for i in range(2):
    dist.breakpoint(rank=1, skip=1, timeout_s=60)
# the others waited for rank 1's session, which wrote the marker
assert os.path.exists(marker), "rank 0 went on before rank 1 left the debugger"
print(f"RANK {rank} PASS", flush=True)
dist.destroy_process_group()
"""


def test_breakpoint_stops_one_rank_under_the_launcher_while_the_others_wait(tmp_path):
    script, marker = tmp_path / "job.py", tmp_path / "left"
    script.write_text(RANKS)
    commands = f"up\np ('VALUE', i, rank)\n!open({str(marker)!r}, 'w').close()\nc\n"
    res = run_python("", stdin=commands, args=("-m", "ddpc.run", "--nproc-per-node", "2", str(script), str(marker)))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "('VALUE', 1, 1)" in res.stdout, res.stdout + res.stderr
    assert "RANK 0 PASS" in res.stdout and "RANK 1 PASS" in res.stdout, res.stdout + res.stderr


TIMEOUT = """
import os, sys, time
import ddpc.distributed as dist
marker = sys.argv[1]
dist.init_process_group("cpu")
if dist.get_rank() == 1:
    try:
        dist.breakpoint(rank=0, timeout_s=0.5)
    except dist.DistError as e:
        print(f"RANK 1 {type(e).__name__} {isinstance(e, dist.DistTimeoutError)}: {e}", flush=True)
    open(marker, "w").close()
else:
    dist.breakpoint(rank=0, timeout_s=0.5)
print(f"RANK {dist.get_rank()} DONE", flush=True)
"""


def test_the_other_ranks_wait_at_most_timeout_s(tmp_path):
    """Rank 0 stays in the debugger until rank 1 gave up waiting (its marker is there)."""
    script, marker = tmp_path / "job.py", tmp_path / "gave-up"
    script.write_text(TIMEOUT)
    commands = ("!import os, time; end = time.monotonic() + 60\n"
                f"!while not os.path.exists({str(marker)!r}) and time.monotonic() < end: time.sleep(0.05)\nc\n")
    res = run_python("", stdin=commands, args=("-m", "ddpc.run", "--nproc-per-node", "2", str(script), str(marker)))
    assert res.returncode == 0, res.stdout + res.stderr
    assert ("RANK 1 DistStoreTimeoutError True: breakpoint: rank 0 did not leave the debugger within 0.5 s"
            in res.stdout), res.stdout + res.stderr
    assert "RANK 0 DONE" in res.stdout and "RANK 1 DONE" in res.stdout, res.stdout


def test_breakpoint_refuses_bad_arguments():
    with pytest.raises(ValueError, match="skip"):
        dist.breakpoint(skip=-1)
    with pytest.raises(ValueError, match="rank 1 is not in"):
        dist.breakpoint(rank=1)  # no process group: one rank
    with pytest.raises(ValueError, match="timeout_s"):
        dist.breakpoint(timeout_s=0)
    with pytest.raises(TypeError):
        dist.breakpoint(rank="0")


# ---- the small names ------------------------------------------------------------------------


def test_backends_complex_reductions_and_the_default_timeout():
    assert dist.is_ucc_available() is False and dist.is_xccl_available() is False
    ops = dist.ReduceOp
    assert [dist.supports_complex(op) for op in (ops.SUM, ops.AVG, ops.MIN, ops.MAX, ops.PRODUCT, ops.BAND,
                                                 ops.BOR, ops.BXOR)] == [True, True] + [False] * 6
    with pytest.raises(ValueError, match="unknown reduce op"):
        dist.supports_complex(12345)
    assert dist.default_pg_timeout == timedelta(minutes=30)


def pg_count_worker(rank):
    counts = [dist.get_pg_count()]
    dist.init_process_group("cpu")
    counts.append(dist.get_pg_count())
    dist.new_group([0])
    dist.new_group([0, 1])
    counts.append(dist.get_pg_count())  # rank 1 counts the group it is not in, as PyTorch does
    if rank == 1:
        dist.new_group([1], use_local_synchronization=True)
    counts.append(dist.get_pg_count())
    dist.destroy_process_group()
    counts.append(dist.get_pg_count())
    return counts


def test_get_pg_count():
    assert ddpc.spawn(pg_count_worker, nprocs=2) == [[0, 1, 3, 3, 0], [0, 1, 3, 4, 0]]
