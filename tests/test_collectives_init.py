"""init_process_group: env:// (also from SLURM and Open MPI variables),
tcp://, file://, store= (TCPStore, FileStore, HashStore, PrefixStore),
backend choice and errors, group helpers and pickling."""

import os
import pickle
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

import ddpc
import ddpc.distributed as dist
from procs import processes_with

BODY = """
import numpy as np, ddpc, ddpc.distributed as dist
{init}
a = np.full(3, dist.get_rank() + 1.0)
dist.all_reduce(a)
import os
os.write(1, f"RANK {{dist.get_rank()}} OF {{dist.get_world_size()}} SUM {{a[0]}} BACKEND {{dist.get_backend()}}\\n".encode())
"""


# For the scripts that fork: waits for the child, bounded, killing it and failing where it hangs.
WAIT_FOR_CHILD = textwrap.dedent("""
    import os, signal, sys, time

    def wait_for_child(pid, what):
        deadline = time.monotonic() + 20
        while (done := os.waitpid(pid, os.WNOHANG)) == (0, 0):
            if time.monotonic() > deadline:
                os.kill(pid, signal.SIGKILL)
                sys.exit(f"the forked child hung {what}")
            time.sleep(0.05)
        return os.waitstatus_to_exitcode(done[1])
""")


def free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def run_code(world, code, env_of_rank, timeout=60):
    """Runs `code` in `world` processes (rank r with env_of_rank(r) added); their exit codes and outputs."""
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    procs = [subprocess.Popen([sys.executable, "-X", "faulthandler", "-c", code], env=dict(base, **env_of_rank(r)),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for r in range(world)]
    outs = [p.communicate(timeout=timeout) for p in procs]
    return [p.returncode for p in procs], outs


def run_ranks(world, init, env_of_rank, timeout=60):
    return run_code(world, textwrap.dedent(BODY.format(init=init)), env_of_rank, timeout)


def env_rank(port, world=2, **extra):
    """env_of_rank for env:// on loopback."""
    return lambda r: dict(extra, RANK=str(r), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))


def check(codes, outs, world, backend="cpu"):
    text = "".join(o + e for o, e in outs)
    assert codes == [0] * world, text
    for r in range(world):
        assert f"RANK {r} OF {world} SUM {world * (world + 1) / 2} BACKEND {backend}" in text, text


@pytest.mark.parametrize("scheme", ["plain", "slurm", "ompi"])
def test_env_init(scheme):
    port = free_port()
    names = {"plain": ("RANK", "WORLD_SIZE"), "slurm": ("SLURM_PROCID", "SLURM_NTASKS"),
             "ompi": ("OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE")}[scheme]
    codes, outs = run_ranks(3, "ddpc.init_process_group()", lambda r: {
        names[0]: str(r), names[1]: "3", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    check(codes, outs, 3)


def test_tcp_init_with_gloo_alias():
    port = free_port()
    codes, outs = run_ranks(2, f"ddpc.init_process_group('gloo', init_method='tcp://127.0.0.1:{port}', "
                               "rank=int(__import__('os').environ['R']), world_size=2)", lambda r: {"R": str(r)})
    check(codes, outs, 2, backend="gloo")  # get_backend() says the name the job asked for


def test_file_init(tmp_path):
    path = tmp_path / "rendezvous"
    for _ in range(2):  # a second job on the same path does not find the first one's address
        codes, outs = run_ranks(2, f"ddpc.init_process_group(init_method='file://{path}', "
                                   "rank=int(__import__('os').environ['R']), world_size=2)", lambda r: {"R": str(r)})
        check(codes, outs, 2)
        assert not path.exists()


def test_missing_rank_is_a_clear_error():
    res = subprocess.run([sys.executable, "-c", "import ddpc; ddpc.init_process_group()"], capture_output=True,
                         text=True, timeout=30, env={k: v for k, v in os.environ.items()
                                                     if k not in ("RANK", "WORLD_SIZE")})
    assert res.returncode != 0 and "RANK and WORLD_SIZE" in res.stderr


@pytest.fixture
def single_rank(monkeypatch):
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    yield
    dist.destroy_process_group()


def test_nccl_backend_without_a_gpu_is_a_clear_error(single_rank):
    if ddpc.cuda.is_available():
        pytest.skip("a GPU is present")
    expected = (dist.DistBackendError, "no rank has one") if "nccl" in ddpc._C.backends() else (RuntimeError, "without NCCL")
    with pytest.raises(expected[0], match=expected[1]):
        ddpc.init_process_group("nccl", rank=0, world_size=1)
    assert not dist.is_initialized()


def test_recv_from_any_rank_needs_another_rank(single_rank):
    ddpc.init_process_group("cpu", rank=0, world_size=1)
    with pytest.raises(ValueError, match="no other rank"):
        dist.recv(ddpc.zeros(2))
    with pytest.raises(RuntimeError, match="irecv"):
        dist.Work(None).source_rank()

    class FailedRecv:  # what a recv from any rank that failed reports
        def source(self):
            return -1

    with pytest.raises(RuntimeError, match="irecv failed"):
        dist.Work(FailedRecv(), ranks=[0, 1]).source_rank()
    assert dist.Work(None, source=3).source_rank() == 3


def test_single_rank_group_and_helpers(single_rank):
    assert not dist.is_initialized()
    ddpc.init_process_group(rank=0, world_size=1)
    assert dist.is_initialized() and dist.get_rank() == 0 and dist.get_world_size() == 1
    # By default a rank with a GPU of its own gets nccl, which takes only CUDA tensors: start afresh on cpu.
    on_gpu = ddpc.cuda.is_available() and "nccl" in ddpc._C.backends()
    assert dist.get_backend() == ("nccl" if on_gpu else "cpu")
    assert dist.collective_device() == ("cuda:0" if on_gpu else "cpu")
    dist.destroy_process_group()
    ddpc.init_process_group("cpu", rank=0, world_size=1)
    assert dist.get_global_rank(None, 0) == 0 and dist.collective_device() == "cpu"
    with pytest.raises(RuntimeError, match="already initialised"):
        ddpc.init_process_group(rank=0, world_size=1)
    with pytest.raises(TypeError, match="pickle"):
        pickle.dumps(dist.GroupMember.WORLD)
    t = ddpc.tensor([1.0, 2.0])
    w = dist.all_reduce(t, op=dist.ReduceOp.MAX, async_op=True)
    assert w.wait() and w.is_completed()
    with pytest.raises(TypeError, match="pickle"):
        pickle.dumps(w)
    with pytest.raises(ValueError, match="reduce op"):
        dist.all_reduce(t, op=99)
    with pytest.raises(ValueError, match="src 3"):
        dist.broadcast(t, src=3)
    with pytest.raises(TypeError):
        dist.all_reduce([1.0, 2.0])
    with pytest.raises(ValueError, match="output has"):
        dist.all_gather_into_tensor(ddpc.zeros(3), ddpc.zeros(2))
    assert dist.get_backend() == dist.get_backend(dist.new_group([0])) == "cpu"
    assert dist.get_backend(dist.new_group([0], backend="gloo")) == "gloo"
    late = dist.all_reduce(ddpc.ones(1000), async_op=True)
    dist.destroy_process_group()
    assert not dist.is_initialized()
    assert late.wait() and late.is_completed()  # a handle outlives its group
    ddpc.init_process_group("gloo", rank=0, world_size=1)  # the cpu backend, named as the caller named it
    assert dist.get_backend() == dist.get_backend(dist.new_group([0])) == "gloo"
    assert dist.get_backend(dist.new_group([0], backend="cpu")) == "cpu"
    assert dist.shared_buffer(64) is None  # (a group of one shares nothing: the cpu backend's rule)
    dist.destroy_process_group()
    with pytest.raises(RuntimeError, match="has not been initialized"):
        dist.barrier()


def test_a_waited_collective_no_longer_pins_its_tensors(single_rank):
    ddpc.init_process_group("cpu", rank=0, world_size=1)
    out, inp = ddpc.zeros(4), ddpc.arange(4, dtype=ddpc.float32)
    work = dist.all_gather_into_tensor(out, inp, async_op=True)
    with pytest.raises(BufferError, match="export"):
        out._buf.release_storage_()  # the collective may still write there
    work.wait()
    assert out.tolist() == [0.0, 1.0, 2.0, 3.0]
    out._buf.release_storage_()  # the group still holds the handle, but not the memory
    assert out._buf.storage_released


@pytest.mark.parametrize("call", [dist.get_rank, dist.get_world_size, dist.get_backend, dist.barrier, dist.new_group,
                                  lambda: dist.all_reduce(ddpc.ones(2))],
                         ids=["get_rank", "get_world_size", "get_backend", "barrier", "new_group", "all_reduce"])
def test_calls_before_init_raise_pytorchs_value_error(call):
    """PyTorch raises ValueError there; ddpc's error stays a RuntimeError too, as it was."""
    assert not dist.is_initialized()
    with pytest.raises(ValueError, match="^Default process group has not been initialized, please make sure to call "
                                         "init_process_group.$") as info:
        call()
    assert isinstance(info.value, RuntimeError)
    assert dist.get_rank(dist.GroupMember.NON_GROUP_MEMBER) == -1
    assert dist.get_world_size(dist.GroupMember.NON_GROUP_MEMBER) == -1


STORE_JOBS = """
import os
from datetime import timedelta
import numpy as np, ddpc.distributed as dist
rank, world = int(os.environ["R"]), int(os.environ["W"])
store = {store}
for job in range(2):  # a second init on the same store makes a rendezvous of its own
    dist.init_process_group("gloo", store=store, rank=rank, world_size=world, timeout=30)
    a = np.full(3, (job + 1) * (rank + 1.0))
    dist.all_reduce(a)
    first = dist.new_group([0])
    os.write(1, f"JOB {{job}} RANK {{dist.get_rank()}} OF {{dist.get_world_size()}} SUM {{a[0]}} "
                f"IN FIRST {{dist.get_rank(first)}} {{dist.get_world_size(first)}}\\n".encode())
    dist.destroy_process_group()
"""


@pytest.mark.parametrize("kind, world", [("tcp", 3), ("file", 3), ("prefix-tcp", 2), ("prefix-file", 2)])
def test_init_with_a_store(tmp_path, kind, world):
    tcp = f"dist.TCPStore('127.0.0.1', {free_port()}, world, rank == 0, timeout=timedelta(seconds=30))"
    made = {"tcp": tcp, "file": f"dist.FileStore({str(tmp_path / 'store')!r}, world)"}
    kind_of_store = kind.split("-")[-1]
    store = made[kind_of_store] if kind == kind_of_store else f"dist.PrefixStore('trainer', {made[kind_of_store]})"
    codes, outs = run_code(world, textwrap.dedent(STORE_JOBS.format(store=store)),
                           lambda r: {"R": str(r), "W": str(world)})
    text = "".join(o + e for o, e in outs)
    assert codes == [0] * world, text
    for job in range(2):
        for r in range(world):
            member = "0 1" if r == 0 else "-1 -1"
            assert (f"JOB {job} RANK {r} OF {world} SUM {(job + 1) * world * (world + 1) / 2} IN FIRST {member}"
                    in text), text


def test_init_with_a_hash_store_is_for_one_rank(single_rank):
    with pytest.raises(ValueError, match="cannot join 2 ranks: it lives in one process"):
        ddpc.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=2)
    assert not dist.is_initialized()
    ddpc.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    t = ddpc.full((3,), 2.0)
    dist.all_reduce(t)
    assert t.tolist() == [2.0] * 3 and dist.get_world_size() == 1


@pytest.mark.parametrize("kwargs, error, message", [
    ({"world_size": 2}, ValueError, "with store=, pass rank= and world_size= too"),
    ({"rank": 0}, ValueError, "with store=, pass rank= and world_size= too"),
    ({"rank": 2, "world_size": 2}, ValueError, r"rank 2 is not in \[0, 2\)"),
    ({"rank": 0, "world_size": 1, "init_method": "env://"}, ValueError, "pass init_method or store=, not both"),
    ({"rank": 0, "world_size": 1, "store": {}}, TypeError, "store= must be a ddpc.distributed store"),
])
def test_bad_store_arguments(kwargs, error, message):
    kwargs = dict({"store": dist.HashStore()}, **kwargs)
    with pytest.raises(error, match=message):
        ddpc.init_process_group("gloo", **kwargs)
    assert not dist.is_initialized()


@pytest.mark.parametrize("env, message", [
    ({"RANK": "abc", "WORLD_SIZE": "2"}, "RANK='abc' is not an integer >= 0"),
    ({"RANK": "-1", "WORLD_SIZE": "2"}, "RANK='-1' is not an integer >= 0"),
    ({"RANK": "0", "WORLD_SIZE": "x"}, "WORLD_SIZE='x' is not an integer >= 1"),
    ({"RANK": "0", "WORLD_SIZE": "1", "MASTER_PORT": "abc"}, "MASTER_PORT='abc' is not an integer from 1 to 65535"),
    ({"SLURM_PROCID": "0", "SLURM_NTASKS": "two"}, "SLURM_NTASKS='two' is not an integer >= 1"),
])
def test_bad_environment_variable_is_named(monkeypatch, env, message):
    for k in ("RANK", "WORLD_SIZE", "SLURM_PROCID", "SLURM_NTASKS", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE"):
        monkeypatch.delenv(k, raising=False)
    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    monkeypatch.setenv("MASTER_PORT", str(free_port()))
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    with pytest.raises(ValueError, match=message):
        ddpc.init_process_group()
    assert not dist.is_initialized()


def test_forked_child_leaves_the_parents_group_alone():
    """A child forked by a rank starts with no group, can make its own, and
    exits normally without closing what it inherited: the parent's group and
    the store it hosts keep working."""
    port, child_port = free_port(), free_port()
    code = WAIT_FOR_CHILD + textwrap.dedent(f"""
        import numpy as np
        import ddpc.distributed as dist
        dist.init_process_group("cpu", init_method="tcp://127.0.0.1:{port}", rank=0, world_size=1)
        dist.all_reduce(np.ones(2), async_op=True).wait()  # the group has a worker thread now
        pid = os.fork()
        if pid == 0:
            assert not dist.is_initialized()
            dist.init_process_group("cpu", init_method="tcp://127.0.0.1:{child_port}", rank=0, world_size=1)
            dist.destroy_process_group()
            sys.exit(0)  # through atexit handlers and the interpreter's cleanup
        wait_for_child(pid, "on exit")
        a = np.ones(2)
        dist.all_reduce(a)
        store = dist.TCPStore("127.0.0.1", {port}, timeout=5)
        store.set("k", "v")
        print("PARENT OK", a[0], store.get("k"))
        dist.destroy_process_group()
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "PARENT OK 1.0 b'v'" in res.stdout


def test_forked_child_dropping_its_copy_of_a_store_leaves_the_parents_alone():
    """A store the parent made outside any group (so the child keeps its copy
    as a plain object) and the child drops: the child waits for no server
    thread (there is none in the child) and stops nothing of the parent's,
    whose store goes on serving."""
    code = WAIT_FOR_CHILD + textwrap.dedent("""
        import gc
        from datetime import timedelta
        import ddpc.distributed as dist
        store = dist.TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=5))
        store.set("k", "v")
        pid = os.fork()
        if pid == 0:
            del store
            gc.collect()
            os._exit(0)
        wait_for_child(pid, "dropping its copy of the store")
        client = dist.TCPStore("127.0.0.1", store.port, timeout=timedelta(seconds=5))
        client.set("k2", "w")
        print("PARENT OK", store.get("k"), store.get("k2"))
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    assert "PARENT OK b'v' b'w'" in res.stdout


def test_forked_child_waiting_on_its_copy_of_an_async_collective_is_told_at_once():
    """Rank 0 forks while its all-reduce waits for rank 1: the child's copy of
    the handle belongs to a collective that runs in the parent only, so its
    wait() raises at once, naming that, instead of waiting for ever; the
    parent's all-reduce completes."""
    port = free_port()
    code = WAIT_FOR_CHILD + textwrap.dedent("""
        import numpy as np
        import ddpc.distributed as dist
        dist.init_process_group("cpu", timeout=30)
        a = np.full(2, dist.get_rank() + 1.0)
        if dist.get_rank() == 1:
            time.sleep(2)  # rank 0's all-reduce is in flight when it forks
            dist.all_reduce(a)
        else:
            work = dist.all_reduce(a, async_op=True)
            pid = os.fork()
            if pid == 0:
                try:
                    work.wait()
                except Exception as e:
                    os._exit(0 if "forked from" in str(e) else 3)
                os._exit(4)
            assert wait_for_child(pid, "in wait()") == 0
            work.wait()
        os.write(1, f"SUM {a[0]}\\n".encode())
        dist.destroy_process_group()
    """)
    codes, outs = run_code(2, code, env_rank(port), timeout=60)
    assert codes == [0, 0], outs
    assert all("SUM 3.0" in out for out, _ in outs), outs


def test_forked_child_does_not_keep_a_dead_rank_alive():
    """The others learn of a rank's death when its connection to the store
    closes; a child it forked must not hold that connection open."""
    port, marker = free_port(), uuid.uuid4().hex
    code = textwrap.dedent(f"""
        import os, time, numpy as np
        import ddpc, ddpc.distributed as dist
        dist.init_process_group("cpu", timeout=60)
        dist.all_reduce(np.ones(2))
        if dist.get_rank() == 1:
            if os.fork() == 0:
                devnull = os.open(os.devnull, os.O_WRONLY)
                os.dup2(devnull, 1), os.dup2(devnull, 2)
                time.sleep(60)  # {marker}
            os._exit(1)
        t0 = time.monotonic()
        try:
            dist.barrier()
        except ddpc.DistError as e:
            os.write(1, f"NOTICED {{time.monotonic() - t0:.1f}} {{e}}\\n".encode())
    """)
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=dict(base, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                                       MASTER_PORT=str(port))) for r in range(2)]
    try:
        out = procs[0].communicate(timeout=120)[0]
    finally:
        for pid in processes_with(marker):
            os.kill(pid, signal.SIGKILL)
        for p in procs:
            p.kill()
            p.communicate()
    assert "NOTICED" in out, out
    assert float(out.split("NOTICED ")[1].split()[0]) < 10 and "rank 1 died" in out


def test_init_again_after_destroy():
    """Rank 0 is late to leave, so rank 1 would init again while rank 0's
    old store still runs."""
    port = free_port()
    code = textwrap.dedent("""
        import os, time, numpy as np
        import ddpc.distributed as dist
        for i in range(3):
            dist.init_process_group("cpu", timeout=20)
            a = np.full(2, dist.get_rank() + 1.0)
            dist.all_reduce(a)
            os.write(1, f"ROUND {i} SUM {a[0]}\\n".encode())
            if dist.get_rank() == 0:
                time.sleep(1)
            dist.destroy_process_group()
    """)
    codes, outs = run_code(2, code, env_rank(port), timeout=120)
    assert codes == [0, 0], outs
    for out, _ in outs:
        assert out.split("\n")[:3] == [f"ROUND {i} SUM 3.0" for i in range(3)]


def test_init_again_at_once_after_destroy_many_times():
    """The ranks init again as soon as destroy returns: the old store stops
    listening before it drops its clients, so none of them reaches it."""
    port = free_port()
    code = textwrap.dedent("""
        import os, numpy as np
        import ddpc.distributed as dist
        for i in range(8):
            dist.init_process_group("cpu", timeout=20)
            a = np.ones(1)
            dist.all_reduce(a)
            assert a[0] == dist.get_world_size(), a
            dist.destroy_process_group()
        os.write(1, b"DONE\\n")
    """)
    codes, outs = run_code(3, code, env_rank(port, world=3), timeout=120)
    assert codes == [0, 0, 0], outs
    assert all(out == "DONE\n" for out, _ in outs), outs


@pytest.mark.parametrize("call", ["recv", "all_reduce", "subgroup"])
def test_destroy_while_another_thread_waits_in_a_call(call):
    """A thread blocked in a call on the group (its peer never takes part)
    gets an error once the main thread destroys the group; nothing crashes."""
    port = free_port()
    code = textwrap.dedent("""
        import os, threading, time, numpy as np
        import ddpc.distributed as dist
        dist.init_process_group("cpu", timeout=60)
        call = os.environ["CALL"]
        group = dist.new_group([0, 1]) if call == "subgroup" else None
        if dist.get_rank() == 0:
            result = []
            def waiter():
                buf = np.zeros(1 << 16, np.float32)
                try:
                    if call == "recv":
                        dist.recv(buf, src=1)
                    else:
                        dist.all_reduce(buf, group=group)
                    result.append("returned")
                except Exception as e:
                    result.append(f"{type(e).__name__}: {e}")
            t = threading.Thread(target=waiter)
            t.start()
            time.sleep(0.5)
            start = time.monotonic()
            dist.destroy_process_group(group)
            t.join(10)
            os.write(1, f"ALIVE {t.is_alive()} AFTER {time.monotonic() - start:.1f} RESULT {result}\\n".encode())
            if group is not None:
                dist.destroy_process_group()
        else:
            time.sleep(1.5)
            dist.destroy_process_group()
    """)
    codes, outs = run_code(2, code, env_rank(port, CALL=call), timeout=120)
    assert codes == [0, 0], outs
    line = outs[0][0]
    assert "ALIVE False" in line, outs
    assert float(line.split("AFTER ")[1].split()[0]) < 5, outs
    assert "destroyed" in line and "returned" not in line, outs


def test_destroy_lets_a_call_whose_handle_was_dropped_finish_with_a_late_peer():
    """Rank 0 sends more than the socket buffers hold, drops the handle and
    leaves; rank 1 comes 2 s later: the send still arrives (as with gloo),
    and a second close from another thread meanwhile changes nothing."""
    port = free_port()
    code = textwrap.dedent("""
        import os, threading, time, numpy as np
        import ddpc.distributed as dist
        dist.init_process_group("cpu", timeout=30)
        n = 16 << 20
        if dist.get_rank() == 0:
            dist.isend(np.arange(n, dtype=np.float32), 1)
            dist.all_reduce(np.ones(4), async_op=True)
            g = dist.GroupMember.WORLD._c
            other = threading.Thread(target=lambda: (time.sleep(0.5), g.close()))
            other.start()
            dist.destroy_process_group()
            other.join()
            os.write(1, b"LEFT\\n")
        else:
            time.sleep(2)
            got = np.zeros(n, np.float32)
            dist.recv(got, 0)
            total = np.ones(4)
            dist.all_reduce(total)
            ok = np.array_equal(got, np.arange(n, dtype=np.float32)) and total.tolist() == [2.0] * 4
            os.write(1, f"RECEIVED {ok}\\n".encode())
            dist.destroy_process_group()
    """)
    codes, outs = run_code(2, code, env_rank(port), timeout=120)
    assert codes == [0, 0], outs
    assert "LEFT" in outs[0][0] and "RECEIVED True" in outs[1][0], outs


def _init_rounds_on_one_store(rank):
    """Three jobs of 2 ranks, then one of 3 ranks and one of 2 on a store made for 3.
    Rank 1 comes late to each all_reduce, so rank 0 waits past its spinning
    (where a rank that left an earlier job would count as gone)."""
    import numpy as np

    store = dist.TCPStore("127.0.0.1", int(os.environ["MASTER_PORT"]), 3, rank == 0, timeout=20)
    sums = []
    for world in (2, 2, 2, 3, 2):
        if rank >= world:
            continue
        dist.init_process_group("cpu", store=store, rank=rank, world_size=world, timeout=20)
        a = np.full(2, rank + 1.0)
        if rank == 1:
            time.sleep(0.3)
        dist.all_reduce(a)
        sums.append(float(a[0]))
        dist.destroy_process_group()
    return sums


def test_init_again_on_the_same_store():
    assert ddpc.spawn(_init_rounds_on_one_store, nprocs=3) == [[3.0, 3.0, 3.0, 6.0, 3.0]] * 2 + [[6.0]]


def test_a_new_job_after_a_rank_died_in_an_earlier_one():
    """Rank 2 dies in a first job; ranks 0 and 1 start a second job afterwards,
    which the death in the first one must not fail."""
    port1, port2 = free_port(), free_port()
    code = textwrap.dedent(f"""
        import os, numpy as np, ddpc.distributed as dist
        rank = int(os.environ["R"])
        dist.init_process_group("cpu", init_method="tcp://127.0.0.1:{port1}", rank=rank, world_size=3, timeout=20)
        if rank == 2:
            os._exit(0)
        try:
            dist.all_reduce(np.ones(2))
        except dist.DistError:
            pass
        dist.destroy_process_group()
        dist.init_process_group("cpu", init_method="tcp://127.0.0.1:{port2}", rank=rank, world_size=2, timeout=20)
        a = np.ones(2)
        dist.all_reduce(a)
        print("SECOND JOB SUM", a[0])
        dist.destroy_process_group()
    """)
    procs = [subprocess.Popen([sys.executable, "-c", code], env=dict(os.environ, R=str(r)), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for r in range(3)]
    outs = [p.communicate(timeout=60) for p in procs]
    for r in (0, 1):
        assert procs[r].returncode == 0 and "SECOND JOB SUM 2.0" in outs[r][0], outs[r]


def test_arrays_in_the_other_byte_order_are_refused():
    code = textwrap.dedent(f"""
        import numpy as np, ddpc, ddpc.distributed as dist
        dist.init_process_group("cpu", init_method="tcp://127.0.0.1:{free_port()}", rank=0, world_size=1)
        try:
            dist.all_reduce(np.ones(4, ">f4"))
        except TypeError as e:
            print("REFUSED", e)
        dist.destroy_process_group()
    """)
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert "REFUSED the array's bytes are in the other byte order" in res.stdout, res.stdout + res.stderr


class _KeyStore(dict):
    """The two store calls the backend choice makes."""

    def set(self, key, value):
        self[key] = value

    def get(self, key, timeout):
        return self[key]


@pytest.mark.parametrize("ranks,want", [
    ([("here", 0), ("here", 1)], "nccl"),
    ([("here", 0), ("here", 0)], "cpu"),     # two ranks, one GPU: NCCL would refuse them
    ([("here", 0), ("here", 2)], "cpu"),     # rank 1's GPU does not exist (2 GPUs here)
    ([("here", 0), ("there", 0)], "nccl"),   # the same bus id on another host is another GPU
    ([("here", 1), ("there", None)], "cpu"),  # a rank without a GPU
], ids=["own-gpus", "shared-gpu", "missing-gpu", "two-hosts", "no-gpu"])
def test_the_default_backend_is_nccl_only_when_every_rank_has_a_gpu_of_its_own(monkeypatch, ranks, want):
    if "nccl" not in ddpc._C.backends():
        pytest.skip("this ddpc was built without NCCL")
    monkeypatch.setattr(ddpc._C, "cuda_device_count", lambda: 2)
    monkeypatch.setattr(ddpc._C, "cuda_properties", lambda d: {"pci_bus_id": f"0000:0{d}:00.0"})
    host = {"here": socket.gethostname(), "there": "another-host"}
    store = _KeyStore()
    for r, (h, d) in enumerate(ranks[1:], 1):  # what the other ranks published
        store[f"p/gpus/{r}"] = (f"{host[h]}/0000:0{d}:00.0" if d is not None and d < 2 else "").encode()
    assert dist._pick_backend(None, store, "p/", 0, len(ranks), 5.0, ranks[0][1]) == want
    assert dist._pick_backend("gloo", store, "p/", 0, len(ranks), 5.0, 0) == "cpu"


# Stands in for NCCL where there is no GPU: the backend choice says nccl, and
# any collective that reaches the nccl communicator fails the rank.
FAKE_NCCL = """
import numpy as np, ddpc, ddpc.distributed as dist

class FakeNccl:
    def __init__(self, rank, size):
        self.rank, self.size = rank, size
    def close(self):
        pass
    def __getattr__(self, name):
        raise AssertionError(f"{name} reached the nccl group")

real_make_group = dist._make_group
def make_group(store, prefix, rank, size, ranks, backend, timeout_s):
    if backend == "nccl":
        return FakeNccl(rank, size)
    return real_make_group(store, prefix, rank, size, ranks, backend, timeout_s)
dist._make_group = make_group
dist._pick_backend = lambda backend, *rest: "cpu" if backend in ("cpu", "gloo") else "nccl"
"""

HOST_TENSORS_ON_DEFAULT_NCCL = FAKE_NCCL + """
dist.init_process_group({backend})
r, n = dist.get_rank(), dist.get_world_size()
assert dist.get_backend() == "nccl"
a = np.full(3, r + 1.0)
dist.all_reduce(a)
assert a.tolist() == [3.0] * 3, a
t = ddpc.full((4,), float(r))
dist.broadcast(t, src=1)
assert t.tolist() == [1.0] * 4, t
parts = [ddpc.zeros(2) for _ in range(n)]
dist.all_gather(parts, ddpc.full((2,), float(r)))
assert [p.tolist() for p in parts] == [[0.0, 0.0], [1.0, 1.0]]
whole = ddpc.zeros(2 * n)
dist.all_gather_into_tensor(whole, ddpc.full((2,), r + 5.0))
assert whole.tolist() == [5.0, 5.0, 6.0, 6.0]
mine = ddpc.zeros(2)
dist.reduce_scatter_tensor(mine, ddpc.arange(2.0 * n))
assert mine.tolist() == [4.0 * r, 4.0 * r + 2], mine
swapped = ddpc.zeros(2)
dist.all_to_all_single(swapped, ddpc.tensor([10.0 * r, 10.0 * r + 1]))
assert swapped.tolist() == [r, 10.0 + r], swapped
work = dist.all_reduce(ddpc.ones(5), async_op=True)
assert work.wait() and work.result()[0].tolist() == [2.0] * 5
if r == 0:
    dist.send(ddpc.tensor([7.0, 8.0]), dst=1)
else:
    got = ddpc.zeros(2)
    dist.recv(got, src=0)
    assert got.tolist() == [7.0, 8.0]
objects = [None] * n
dist.all_gather_object(objects, {"rank": r})
assert objects == [{"rank": 0}, {"rank": 1}]
assert dist.shared_buffer(64) is not None  # host buckets for DDP
pair = dist.new_group([0, 1])
assert dist.get_backend(pair) == "nccl"
b = np.ones(2)
dist.all_reduce(b, group=pair)
assert b.tolist() == [2.0, 2.0]
model = ddpc.nn.Linear(3, 1)
ddp = ddpc.nn.parallel.DistributedDataParallel(model)
ddp(ddpc.full((2, 3), r + 1.0)).sum().backward()
assert model.weight.grad.tolist() == [[3.0, 3.0, 3.0]], model.weight.grad
assert model.bias.grad.tolist() == [2.0]
dist.destroy_process_group()
print("RANK", r, "HOST TENSORS OK", flush=True)
"""

HOST_TENSORS_ON_EXPLICIT_NCCL = FAKE_NCCL + """
dist.init_process_group("nccl")
try:
    dist.all_reduce(np.ones(2))
except TypeError as e:
    print("RANK", dist.get_rank(), "REFUSED", e, flush=True)
dist.destroy_process_group()
"""


@pytest.mark.parametrize("backend", ["", "'cpu:gloo,cuda:nccl'"], ids=["default", "device-form"])
def test_the_default_nccl_group_takes_host_tensors_through_a_cpu_companion(backend):
    """As PyTorch's default pairs gloo with nccl: with nccl chosen by default
    (or asked for with a cpu backend beside it), host tensors and arrays,
    objects, DDP's host buckets and groups made with new_group go through a
    cpu group of the same ranks; none reaches NCCL."""
    code = HOST_TENSORS_ON_DEFAULT_NCCL.replace("{backend}", backend)
    codes, outs = run_code(2, code, env_rank(free_port()))
    text = "".join(o + e for o, e in outs)
    assert codes == [0, 0], text
    for r in range(2):
        assert f"RANK {r} HOST TENSORS OK" in text, text


def test_an_explicit_nccl_group_refuses_host_tensors():
    codes, outs = run_code(2, HOST_TENSORS_ON_EXPLICIT_NCCL, env_rank(free_port()))
    text = "".join(o + e for o, e in outs)
    assert codes == [0, 0], text
    for r in range(2):
        assert f"RANK {r} REFUSED the nccl backend reduces CUDA tensors" in text, text


BITWISE = """
import numpy as np, ddpc, ddpc.distributed as dist
dist.init_process_group("gloo")
r = dist.get_rank()
bits = [0b0110, 0b0011, 0b1010][r]
out = []
for dt in ("int32", "int64", "uint8"):
    for op in (dist.ReduceOp.BAND, dist.ReduceOp.BOR, dist.ReduceOp.BXOR):
        t = ddpc.full((5,), bits, dtype=dt)
        dist.all_reduce(t, op=op)
        out.append(int(t[4].item()))
big = np.full(3, -(2**40) + bits, np.int64)  # every byte takes part
dist.all_reduce(big, op=dist.ReduceOp.BXOR)
part = ddpc.zeros(2, dtype="int64")
dist.reduce_scatter_tensor(part, ddpc.full((6,), bits, dtype="int64"), op=dist.ReduceOp.BOR)
p = ddpc.full((2,), r + 2.0)
dist.all_reduce(p, op=dist.ReduceOp.PRODUCT)
try:
    dist.all_reduce(ddpc.ones(2), op=dist.ReduceOp.BAND)
except TypeError as e:
    refused = str(e)
print("RANK", r, out, int(big[0]), part.tolist(), p.tolist(), refused, flush=True)
dist.destroy_process_group()
"""


def test_bitwise_reductions_and_product_alias():
    codes, outs = run_code(3, BITWISE, env_rank(free_port(), world=3))
    text = "".join(o + e for o, e in outs)
    assert codes == [0, 0, 0], text
    per_dtype = [0b0110 & 0b0011 & 0b1010, 0b0110 | 0b0011 | 0b1010, 0b0110 ^ 0b0011 ^ 0b1010]
    xor = (-(2**40) + 0b0110) ^ (-(2**40) + 0b0011) ^ (-(2**40) + 0b1010)
    for r in range(3):
        assert (f"RANK {r} {per_dtype * 3} {xor} {[0b1111, 0b1111]} [24.0, 24.0] bitwise reductions take integer "
                "tensors, got float32") in text, text


@pytest.mark.parametrize("backend,want", [
    (None, (None, True)), ("gloo", ("gloo", False)), ("nccl", ("nccl", False)),
    ("cpu:gloo,cuda:nccl", ("nccl", True)), ("cuda:nccl", ("nccl", False)), ("cuda:gloo", ("cpu", False)),
    ("CPU:gloo, cuda:NCCL", ("nccl", True)),
])
def test_pytorchs_per_device_backend_form(backend, want):
    assert dist._backend_request(backend) == want


@pytest.mark.parametrize("backend,message", [("cpu:nccl", "nccl reduces CUDA tensors only"),
                                             ("tpu:gloo", "unknown backend"), ("cpu:gloo,cuda", "unknown backend")])
def test_bad_per_device_backends_are_refused(backend, message):
    with pytest.raises(ValueError, match=message):
        dist._backend_request(backend)


LOCAL_GROUPS = """
import ddpc, ddpc.distributed as dist
dist.init_process_group("gloo")
r = dist.get_rank()
sums = []
if r < 2:  # rank 2 takes no part in making this one
    pair = dist.new_group([0, 1], use_local_synchronization=True, group_desc="pair")
    t = ddpc.tensor([r + 1.0])
    dist.all_reduce(t, group=pair)
    again = dist.new_group([1, 0], use_local_synchronization=True)  # a second group of the same members
    u = ddpc.tensor([10.0 * (r + 1)])
    dist.all_reduce(u, group=again)
    sums += [t.item(), u.item()]
late = dist.new_group([1, 2])  # every rank calls this one, and the counts still agree
if late is not dist.GroupMember.NON_GROUP_MEMBER:
    v = ddpc.tensor([r * 1.0])
    dist.all_reduce(v, group=late)
    sums.append(v.item())
print("RANK", r, sums, flush=True)
dist.destroy_process_group()
"""


def test_groups_made_by_their_members_only():
    codes, outs = run_code(3, LOCAL_GROUPS, env_rank(free_port(), world=3))
    text = "".join(o + e for o, e in outs)
    assert codes == [0, 0, 0], text
    assert "RANK 0 [3.0, 30.0]" in text and "RANK 1 [3.0, 30.0, 3.0]" in text and "RANK 2 [3.0]" in text, text
