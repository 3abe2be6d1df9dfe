"""Failures become errors, never hangs: a SIGKILLed rank, a rank that never
arrives, a store disturbed by garbage and strangers, a port in use and an
unreachable master."""

import os
import re
import socket
import struct
import subprocess
import sys
import time
import uuid

import pytest

from procs import processes_with

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "comm_worker.py")


def free_port():
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def start_ranks(world, scenario, *args, port=None, token="t0k3n", timeout_s=60):
    """Starts the ranks directly (no launcher, so nobody stops the survivors)."""
    port = port or free_port()
    procs = []
    for r in range(world):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   DDPC_STORE_TOKEN=token, TEST_DIST_TIMEOUT=str(timeout_s))
        procs.append(subprocess.Popen([sys.executable, WORKER, scenario, *map(str, args)], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs, port


def finish(procs, timeout=60):
    outs = []
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
        outs.append((p.returncode, out, err))
    return outs


def shm_segments():
    return {f for f in os.listdir("/dev/shm") if f.startswith("ddpc-")}


def assert_survivors_caught(results, within_s, says):
    """Ranks 0 and 2 (rank 1 is the one that failed) caught a DistBackendError (a DistError) saying `says`
    within `within_s`."""
    for r in (0, 2):
        code, out, err = results[r]
        assert code == 3, out + err
        m = re.search(r"CAUGHT DistBackendError after ([\d.]+)s: (.*)", out)
        assert m and float(m.group(1)) < within_s, out + err
        assert says in m.group(2), out


def test_sigkill_mid_allreduce_raises_dist_error_naming_the_rank():
    before = shm_segments()
    procs, _ = start_ranks(3, "kill", 1, 64)
    results = finish(procs)
    assert results[1][0] == -9, results[1]
    assert_survivors_caught(results, 10.3, "rank 1 died")
    assert shm_segments() - before == set()


def test_a_rank_that_left_fails_the_collectives_waiting_for_it_at_once():
    """A rank ends its script (leaving the group) while the others, launched without
    a launcher to stop them, wait for it in an all_reduce on one host."""
    procs, _ = start_ranks(3, "leaver", 1)
    results = finish(procs)
    assert results[1][0] == 0, results[1]
    assert_survivors_caught(results, 10, "rank 1 left the process group")  # the timeout is 60 s


@pytest.mark.parametrize("how,says", [("kill", "rank 1 died"), ("leave", "rank 1 left the process group")])
def test_ddp_survivors_of_a_rank_lost_mid_exchange_raise(how, says):
    procs, _ = start_ranks(3, "ddp_victim", 1, how)
    results = finish(procs)
    assert results[1][0] == (-9 if how == "kill" else 0), results[1]
    assert_survivors_caught(results, 10, says)  # the timeout is 60 s


@pytest.mark.parametrize("when", ["before", "during"])
def test_a_group_made_with_a_dead_rank_fails_at_once(when):
    procs, _ = start_ranks(3, "new_group_with_the_dead", 1, when)
    results = finish(procs)
    assert results[1][0] == -9, results[1]
    assert_survivors_caught(results, 10, "rank 1 died")  # the timeout is 60 s


def test_launcher_names_the_killed_rank_and_leaves_nothing():
    before = shm_segments()
    marker = uuid.uuid4().hex
    t0 = time.monotonic()
    res = subprocess.run([sys.executable, "-m", "ddpc.run", "--nproc-per-node", "3", "--grace", "2", WORKER, "kill",
                          "1", "64", marker], capture_output=True, text=True, timeout=120)
    assert time.monotonic() - t0 < 60
    assert res.returncode != 0
    assert re.search(r"rank 1 .*failed: killed by signal SIGKILL", res.stderr), res.stderr
    assert processes_with(marker) == []
    assert shm_segments() - before == set()


def test_rank_that_never_arrives_gives_timeout_naming_it():
    procs, _ = start_ranks(3, "absent", 1, 8, timeout_s=2)
    results = finish(procs)
    for r in (0, 2):
        code, out, err = results[r]
        assert code == 0, out + err
        assert re.search(r"TIMEOUT all_reduce .*timed out after 2.0 s waiting for ranks \[1\]", out), out + err
    assert results[1][0] == 0


def disturb_store(port):
    """Garbage, an oversized frame and a wrong token: each connection must be closed by the server."""
    hello = b"\x01" + struct.pack("<I", 5) + b"wrong" + struct.pack("<i", -1)
    for payload in (b"\x00garbage\xff" * 50, struct.pack("<I", 0x7FFFFFFF) + b"x" * 1000,
                    struct.pack("<I", len(hello)) + hello):
        s = socket.create_connection(("127.0.0.1", port), timeout=5)
        s.sendall(payload)
        try:
            assert s.recv(16) == b""
        except ConnectionResetError:
            pass
        s.close()


def test_store_disturbed_by_garbage_and_strangers_leaves_the_job_unaffected(tmp_path):
    stop = tmp_path / "stop"
    procs, port = start_ranks(2, "loop", stop)
    deadline = time.monotonic() + 60
    while True:  # wait for rank 0's store to listen
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            assert time.monotonic() < deadline and all(p.poll() is None for p in procs)
            time.sleep(0.05)
    for _ in range(3):
        disturb_store(port)
        time.sleep(0.2)
    stop.touch()
    for r, (code, out, err) in enumerate(finish(procs)):
        assert code == 0 and f"RANK {r} PASS" in out, out + err


def run_init(env_extra, timeout=30):
    env = dict(os.environ, **env_extra)
    return subprocess.run([sys.executable, "-c", "import ddpc, datetime; "
                           "ddpc.init_process_group(timeout=datetime.timedelta(seconds=2))"],
                          env=env, capture_output=True, text=True, timeout=timeout)


def test_port_in_use_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("", 0))
        s.listen()
        port = s.getsockname()[1]
        res = run_init({"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    assert res.returncode != 0
    assert re.search(rf"DistNetworkError: cannot listen on .*:{port}: Address already in use", res.stderr), res.stderr


def test_unreachable_master_is_a_clear_error():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
        t0 = time.monotonic()
        res = run_init({"RANK": "1", "WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port)})
    assert time.monotonic() - t0 < 20
    assert res.returncode != 0
    assert re.search(rf"DistNetworkTimeoutError: could not connect to 127.0.0.1:{port}", res.stderr), res.stderr
