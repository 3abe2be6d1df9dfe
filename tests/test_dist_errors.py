"""torch.distributed's error classes: DistBackendError, DistNetworkError,
DistStoreError and QueueEmptyError under DistError, each raised where it
belongs (a store that cannot be reached or whose server dies, a store wait
or get that times out, a refused client, a rank SIGKILLed mid all_reduce),
every one also a DistError and a RuntimeError, and the timeouts still
DistTimeoutErrors."""

import os
import signal
import socket
import subprocess
import sys
import textwrap
import threading
from datetime import timedelta

import pytest

import ddpc
import ddpc.distributed as dist
from ddpc.distributed import FileStore, HashStore, PrefixStore, TCPStore


def test_the_classes_and_their_bases():
    assert dist.DistError is ddpc.DistError and dist.DistTimeoutError is ddpc.DistTimeoutError
    for cls in (dist.DistBackendError, dist.DistNetworkError, dist.DistStoreError):
        assert cls.__bases__ == (dist.DistError,), cls
        assert cls.__module__ == "ddpc.distributed" and getattr(dist, cls.__name__) is cls
        assert issubclass(cls, RuntimeError) and not issubclass(cls, dist.DistTimeoutError)
    assert dist.QueueEmptyError.__bases__ == (dist.DistStoreError,)
    assert dist.DistStoreTimeoutError.__bases__ == (dist.DistStoreError, dist.DistTimeoutError)
    assert dist.DistNetworkTimeoutError.__bases__ == (dist.DistNetworkError, dist.DistTimeoutError)
    assert dist.DistBackendTimeoutError.__bases__ == (dist.DistBackendError, dist.DistTimeoutError)
    for cls in (dist.DistStoreTimeoutError, dist.DistNetworkTimeoutError, dist.DistBackendTimeoutError):
        assert issubclass(cls, TimeoutError) and issubclass(cls, RuntimeError)
    assert not issubclass(dist.DistBackendError, dist.DistStoreError)
    for name in ("DistBackendError", "DistBackendTimeoutError", "DistNetworkError", "DistStoreError",
                 "QueueEmptyError"):
        assert name in dist.__all__


def raises_as(cls, call):
    """The error ``call`` raises: a ``cls``, hence a DistError and a RuntimeError."""
    with pytest.raises(cls) as info:
        call()
    assert isinstance(info.value, dist.DistError) and isinstance(info.value, RuntimeError)
    return info.value


def refused_port():
    """A loopback port bound to no listener: connections to it are refused."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    return s, s.getsockname()[1]


def test_an_unreachable_store_is_a_network_error():
    s, port = refused_port()
    with s:
        e = raises_as(dist.DistNetworkError,
                      lambda: TCPStore("127.0.0.1", port, timeout=timedelta(milliseconds=500), token="t"))
    assert f"could not connect to 127.0.0.1:{port}" in str(e)
    assert isinstance(e, dist.DistTimeoutError)  # as ddpc raised it before: a timeout too
    assert type(e) is dist.DistNetworkTimeoutError


def test_an_unresolvable_host_and_a_port_in_use_are_network_errors():
    e = raises_as(dist.DistNetworkError, lambda: TCPStore("no-such-host.invalid", 29500, timeout=1))
    assert "cannot resolve" in str(e) and not isinstance(e, dist.DistTimeoutError)
    master = TCPStore("127.0.0.1", 0, is_master=True, timeout=5, token="t")
    e = raises_as(dist.DistNetworkError, lambda: TCPStore("127.0.0.1", master.port, is_master=True, token="t"))
    assert "in use" in str(e)


MASTER = """
import os, time
from ddpc.distributed import TCPStore
store = TCPStore("127.0.0.1", 0, is_master=True, timeout=5, token="t")
os.write(1, f"{store.port}\\n".encode())
time.sleep(60)
"""


def test_a_store_whose_server_dies_is_a_network_error():
    """A client waiting for a key when the process hosting the store is SIGKILLed."""
    master = subprocess.Popen([sys.executable, "-c", MASTER], stdout=subprocess.PIPE, text=True)
    try:
        port = int(master.stdout.readline())
        client = TCPStore("127.0.0.1", port, timeout=timedelta(seconds=30), token="t")
        client.set("k", "v")
        threading.Timer(0.3, master.kill).start()
        e = raises_as(dist.DistNetworkError, lambda: client.wait(["never"], timedelta(seconds=30)))
        assert "connection to the store" in str(e) and not isinstance(e, dist.DistTimeoutError), e
    finally:
        master.kill()
        master.wait(timeout=30)


@pytest.mark.parametrize("kind", ["tcp", "file", "hash", "prefix"])
def test_a_store_wait_or_get_that_times_out_is_a_store_error(kind, tmp_path):
    master = TCPStore("127.0.0.1", 0, is_master=True, timeout=5, token="t")
    store = {"tcp": lambda: TCPStore("127.0.0.1", master.port, timeout=5, token="t"),
             "file": lambda: FileStore(str(tmp_path / "store")),
             "hash": HashStore,
             "prefix": lambda: PrefixStore("job", HashStore())}[kind]()
    e = raises_as(dist.DistStoreError, lambda: store.wait(["never"], timedelta(milliseconds=200)))
    assert isinstance(e, dist.DistTimeoutError) and isinstance(e, TimeoutError) and "never" in str(e)
    store.set_timeout(timedelta(milliseconds=200))
    e = raises_as(dist.DistStoreError, lambda: store.get("missing"))
    assert isinstance(e, dist.DistTimeoutError) and "missing" in str(e)
    store.set("k", "v")
    assert store.get("k") == b"v"  # the store goes on


def test_a_refused_client_is_a_store_error():
    master = TCPStore("127.0.0.1", 0, is_master=True, timeout=5, token="secret")
    e = raises_as(dist.DistStoreError, lambda: TCPStore("127.0.0.1", master.port, timeout=5, token="wrong"))
    assert "refused" in str(e) and not isinstance(e, dist.DistTimeoutError)


def test_a_key_deleted_under_a_get_is_a_store_error():
    class Vanishing(HashStore):
        def check(self, keys):
            return True  # the wait sees the key, which is gone when get reads it

    e = raises_as(dist.DistStoreError, lambda: Vanishing().get("k"))
    assert "vanished" in str(e)


KILLED = """
import os, signal, sys, threading, time
import numpy as np
import ddpc.distributed as dist
dist.init_process_group("cpu", timeout=__import__("datetime").timedelta(seconds=60))
rank = dist.get_rank()
a = np.ones(1 << 18, np.float32)
dist.all_reduce(a)
if rank == 1:
    threading.Timer(0.3, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
start = time.monotonic()
try:
    while time.monotonic() - start < 60:
        dist.all_reduce(a)
except dist.DistError as e:
    checks = [isinstance(e, c) for c in (dist.DistBackendError, RuntimeError, dist.DistTimeoutError,
                                          dist.DistNetworkError, dist.DistStoreError)]
    os.write(1, f"RANK {rank} CAUGHT {type(e).__name__} {checks}: {e}\\n".encode())
    os._exit(3)
"""


def test_a_rank_killed_mid_all_reduce_is_a_backend_error_for_the_survivor():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    base = {k: v for k, v in os.environ.items() if k not in ("RANK", "WORLD_SIZE")}
    procs = [subprocess.Popen([sys.executable, "-c", textwrap.dedent(KILLED)], stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True,
                              env=dict(base, RANK=str(r), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                                       MASTER_PORT=str(port), DDPC_STORE_TOKEN="t"))
             for r in range(2)]
    try:
        outs = [p.communicate(timeout=90) for p in procs]
    finally:
        for p in procs:
            p.kill()
    assert procs[1].returncode == -signal.SIGKILL, outs[1]
    assert procs[0].returncode == 3, outs[0]
    assert "RANK 0 CAUGHT DistBackendError [True, True, False, False, False]: " in outs[0][0], outs[0]
    assert "rank 1" in outs[0][0], outs[0]
