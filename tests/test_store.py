"""The stores: the TCP rendezvous store's key-value API, timeouts, token
checks, and a server that survives garbage, oversized and unauthenticated
clients; every kind's compare_set and set_timeout, as PyTorch's; PrefixStore;
PyTorch 2.15's extended API (append, multi_get/multi_set, list_keys, barrier,
clone, the queues) on every kind, and on TCPStore and FileStore across two
processes."""

import base64
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
from datetime import timedelta

import pytest
from procs import kill_processes_with

import ddpc
from ddpc.distributed import (DistStoreError, FileStore, HashStore, PrefixStore, QueueEmptyError, Store,
                              TCPStore)


@pytest.fixture
def master():
    return TCPStore("127.0.0.1", 0, is_master=True, timeout=timedelta(seconds=5), token="secret")


def client(master, token="secret", timeout=5):
    return TCPStore("127.0.0.1", master.port, timeout=timedelta(seconds=timeout), token=token)


def test_set_get_add_check_delete(master):
    c = client(master)
    c.set("a", "hello")
    master.set("b", b"\x00\x01")
    assert master.get("a") == b"hello" and c.get("b") == b"\x00\x01"
    assert c.add("n", 5) == 5 and master.add("n", -2) == 3
    assert c.check(["a", "b", "n"]) and not c.check(["a", "missing"])
    assert c.num_keys() == 3
    assert c.delete_key("a") and not c.delete_key("a")
    assert not master.check(["a"])
    c.set("big", b"x" * (1 << 20))
    assert master.get("big") == b"x" * (1 << 20)


def test_get_waits_for_a_later_set(master):
    c = client(master)
    threading.Timer(0.2, lambda: master.set("late", "v")).start()
    t0 = time.monotonic()
    assert c.get("late") == b"v"
    assert time.monotonic() - t0 >= 0.15
    c.wait(["late"])


def test_wait_times_out_and_client_recovers(master):
    c = client(master)
    with pytest.raises(ddpc.DistTimeoutError, match="never"):
        c.wait(["never"], timeout=timedelta(milliseconds=300))
    c.set("after", "ok")
    assert c.get("after") == b"ok"


def test_wrong_token_is_refused(master):
    with pytest.raises(ddpc.DistError, match="refused"):
        client(master, token="wrong")
    assert client(master).add("still", 1) == 1


def raw_connection(master):
    s = socket.create_connection(("127.0.0.1", master.port), timeout=5)
    return s


def closed_by_server(s):
    try:
        return s.recv(1) == b""
    except ConnectionResetError:
        return True


@pytest.mark.parametrize("payload", [
    b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",                    # garbage: a huge length prefix
    struct.pack("<I", 0xFFFFFFF0) + b"\x01",                 # oversized frame
    struct.pack("<I", 64 << 20) + b"\x02" * 100,             # over the frame bound
    struct.pack("<I", 5) + b"\x02abcd",                      # a request before HELLO
    struct.pack("<I", 9) + b"\x01" + struct.pack("<I", 4) + b"nope",  # malformed HELLO
    struct.pack("<I", 0),                                   # empty frame
], ids=["http", "huge", "over-bound", "no-hello", "bad-hello", "empty"])
def test_malformed_clients_are_disconnected(master, payload):
    c = client(master)
    c.set("k", "v")
    s = raw_connection(master)
    s.sendall(payload)
    assert closed_by_server(s)
    s.close()
    assert c.get("k") == b"v"
    assert client(master).get("k") == b"v"


def test_authenticated_client_sending_garbage_is_disconnected(master):
    s = raw_connection(master)
    tok = b"secret"
    s.sendall(struct.pack("<IB I", 1 + 4 + len(tok) + 4, 1, len(tok)) + tok + struct.pack("<i", -1))
    assert s.recv(5) == struct.pack("<IB", 1, 1)
    s.sendall(struct.pack("<I", 3) + b"\x63zz")  # unknown command
    assert closed_by_server(s)
    assert client(master).add("ok", 1) == 1


def test_hello_with_an_absurd_rank_is_refused(master):
    """The server keeps a table indexed by rank: a huge rank is a disconnect, not a write out of bounds."""
    s = raw_connection(master)
    tok = b"secret"
    s.sendall(struct.pack("<IB I", 1 + 4 + len(tok) + 4, 1, len(tok)) + tok + struct.pack("<i", 0x7FFFFFFF))
    assert closed_by_server(s)
    assert client(master).add("alive", 1) == 1


def test_counters_are_decimal_text_and_keys_too_long_are_refused(master):
    c = client(master)
    c.add("n", 5)
    assert c.get("n") == b"5"  # as torch's stores (and ddpc's FileStore) keep counters
    c.set("m", "10")
    assert c.add("m", 1) == 11 and c.get("m") == b"11"
    assert c.add("neg", -3) == -3 and c.get("neg") == b"-3"
    with pytest.raises(ValueError, match="exceed"):
        c.add("k" * (17 << 20), 1)
    assert c.get("n") == b"5"  # the connection survives


def test_set_gives_the_value_back_on_every_path(master):
    """A closed store, a refused value and a stored one all release the
    value's buffer: a bytearray whose buffer stayed exported could not grow,
    and a bytes value would keep a reference for each call."""
    closed = ddpc._C.Store.__new__(ddpc._C.Store)
    value, too_big, data = bytearray(b"v"), bytearray(17 << 20), b"some bytes"
    refs = sys.getrefcount(data)
    for _ in range(100):
        with pytest.raises(ValueError, match="the store is closed"):
            closed.set("k", value)
        with pytest.raises(ValueError, match="the store is closed"):
            closed.set("k", data)
        value.append(0)  # a BufferError where an export was left
        with pytest.raises(ValueError, match="exceed"):
            master._c.set("k", too_big)
        too_big.append(0)
        master._c.set("k", value)
        value.append(0)
    assert sys.getrefcount(data) == refs
    assert master.get("k") == bytes(value[:-1])


def _recv_exactly(s, n):
    data = b""
    while len(data) < n:
        chunk = s.recv(n - len(data))
        assert chunk, "the store closed the connection"
        data += chunk
    return data


def test_watchers_see_every_event_however_many_came_before(master):
    """Each rank that leaves a job adds an event (jobs may follow each other on one
    store); a watcher still gets the 300th."""
    tok, prefix = b"secret", b"w2i0/"

    def hello(rank):
        s = raw_connection(master)
        s.sendall(struct.pack("<IB I", 1 + 4 + len(tok) + 4, 1, len(tok)) + tok + struct.pack("<i", rank))
        assert _recv_exactly(s, 5) == struct.pack("<IB", 1, 1)
        return s

    for r in range(300):
        s = hello(r)
        s.sendall(struct.pack("<IB I", 1 + 4 + len(prefix), 10, len(prefix)) + prefix)  # LEAVE
        assert _recv_exactly(s, 5) == struct.pack("<IB", 1, 1)
        s.close()
    w = hello(1000)
    w.sendall(struct.pack("<IBq", 1 + 8, 9, 299))  # WATCH from event 299
    length, rank = struct.unpack("<Ii", _recv_exactly(w, 8))
    assert rank == 299 and _recv_exactly(w, length - 4) == b"left " + prefix
    w.close()


def test_port_in_use_is_a_clear_error(master):
    with pytest.raises(ddpc.DistError, match="in use|another process"):
        TCPStore("127.0.0.1", master.port, is_master=True, token="secret")


def test_unreachable_master_times_out_clearly():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound but not listening: connections are refused
        t0 = time.monotonic()
        with pytest.raises(ddpc.DistTimeoutError, match=f"could not connect to 127.0.0.1:{port}"):
            TCPStore("127.0.0.1", port, timeout=timedelta(seconds=1))
        assert time.monotonic() - t0 < 5


def test_unresolvable_master_is_a_clear_error():
    with pytest.raises(ddpc.DistError, match="cannot resolve"):
        TCPStore("no-such-host.invalid", 29500, timeout=timedelta(seconds=1))


def test_store_refuses_pickling(master):
    import pickle

    with pytest.raises(TypeError):
        pickle.dumps(master)


def test_file_store(tmp_path):
    path = str(tmp_path / "store")
    a, b = FileStore(path, 2), FileStore(path, 2)
    a.set("x", b"1")
    assert b.get("x") == b"1"
    assert a.add("n", 2) == 2 and b.add("n", 3) == 5
    assert b.check(["x", "n"]) and not b.check(["y"])
    assert a.delete_key("x") and not b.check(["x"])
    with pytest.raises(ddpc.DistTimeoutError):
        a.wait(["never"], timeout=0.2)


def test_file_store_reads_a_file_from_before_the_queues(tmp_path):
    """A file an earlier ddpc wrote (the keys alone, even one named "keys") still loads."""
    path = tmp_path / "store"
    path.write_text(json.dumps({"x": base64.b64encode(b"1").decode(), "keys": base64.b64encode(b"2").decode()}))
    s = FileStore(str(path))
    assert s.get("x") == b"1" and s.get("keys") == b"2"
    s.queue_push("q", b"a")
    assert s.queue_len("q") == 1 and s.multi_get(["x", "keys"]) == [b"1", b"2"]


@pytest.fixture(params=["tcp", "file", "hash", "prefix"])
def any_store(request, master, tmp_path):
    """A store of each kind; a PrefixStore's keys land in a HashStore under its prefix."""
    if request.param == "tcp":
        return client(master)
    if request.param == "file":
        return FileStore(str(tmp_path / "store"))
    if request.param == "hash":
        return HashStore()
    return PrefixStore("job", HashStore())


def test_compare_set_as_in_pytorch(any_store):
    s = any_store
    assert s.compare_set("k", "", "v1") == b"v1"      # missing, expected empty: set
    assert s.compare_set("k", "other", "v2") == b"v1"  # no match: the value it holds
    assert s.compare_set("k", b"v1", b"v3") == b"v3"   # match: set
    assert s.get("k") == b"v3"
    assert s.compare_set("m", "x", "y") == b"x" and not s.check(["m"])  # missing, expected not empty
    assert isinstance(s, Store)


def test_set_timeout_bounds_waits(any_store):
    s = any_store
    assert s.timeout == timedelta(seconds=300 if not isinstance(s, TCPStore) else 5)
    s.set_timeout(timedelta(milliseconds=200))
    assert s.timeout == timedelta(milliseconds=200)
    t0 = time.monotonic()
    with pytest.raises(ddpc.DistTimeoutError):
        s.get("never")
    with pytest.raises(ddpc.DistTimeoutError):
        s.wait(["never"])
    assert time.monotonic() - t0 < 4
    s.set("late", "v")
    assert s.get("late") == b"v" and s.add("n", 2) == 2 and s.get("n") == b"2"


def test_prefix_store_keeps_its_keys_under_the_prefix():
    base = HashStore()
    outer = PrefixStore("a", PrefixStore("b", base))
    outer.set("k", "v")
    assert base.get("b/a/k") == b"v" and outer.check(["k"]) and not base.check(["k"])
    assert outer.add("n", 3) == 3 and base.get("b/a/n") == b"3"
    assert outer.delete_key("k") and not base.check(["b/a/k"])
    assert outer.num_keys() == base.num_keys() == 1
    outer.set_timeout(timedelta(seconds=7))
    assert base.timeout == outer.timeout == timedelta(seconds=7)
    with pytest.raises(TypeError, match="ddpc.distributed store"):
        PrefixStore("p", {})


def test_tcp_store_takes_pytorchs_arguments(master):
    s = TCPStore("127.0.0.1", master.port, 2, False, timedelta(seconds=5), True, False, None, True, token="secret")
    s.set("k", "v")
    assert master.get("k") == b"v"
    with pytest.raises(ValueError, match="master_listen_fd is not supported"):
        TCPStore("127.0.0.1", 0, is_master=True, master_listen_fd=3)


def test_compare_set_wakes_a_waiting_get(master):
    c = client(master)
    threading.Timer(0.2, lambda: master.compare_set("late", "", "v")).start()
    assert c.get("late") == b"v"


def test_extended_api_as_in_pytorch(any_store):
    s = any_store
    assert s.has_extended_api()
    s.append("greeting", "po")  # a missing key is created
    s.append("greeting", b"tato")
    assert s.get("greeting") == b"potato"
    s.multi_set(["a", "b"], ["1", b"2"])
    assert s.multi_get(["b", "a", "greeting"]) == [b"2", b"1", b"potato"]
    assert s.multi_get([]) == []
    with pytest.raises(DistStoreError, match="same length"):
        s.multi_set(["x", "y"], ["1"])
    assert not s.check(["x"])
    assert sorted(s.list_keys()) == ["a", "b", "greeting"]
    s.barrier("alone", 1)
    assert s.get("alone") == b"1"
    with pytest.raises(ValueError, match="world_size"):
        s.barrier("none", 0)
    assert s.clone().get("a") == b"1"


def test_queues_as_in_pytorch(any_store):
    s = any_store
    assert s.queue_len("q") == 0 and not s.check(["q"])
    for item in ("first", b"second", "third"):
        s.queue_push("q", item)
    assert s.queue_len("q") == 3 and s.check(["q"])
    s.wait(["q"])
    assert s.list_keys() == [] and s.num_keys() == 0  # queues are kept apart from the keys
    assert [s.queue_pop("q"), s.queue_pop("q", block=False), s.queue_pop("q")] == [b"first", b"second", b"third"]
    assert s.queue_len("q") == 0 and not s.check(["q"])
    with pytest.raises(QueueEmptyError, match="'(job/)?q' is empty") as info:
        s.queue_pop("q", block=False)
    assert isinstance(info.value, DistStoreError)
    s.queue_push("q", "again")
    assert s.queue_pop("q", False) == b"again"


def test_queue_pop_and_barrier_time_out(any_store):
    s = any_store
    s.set_timeout(timedelta(milliseconds=200))
    with pytest.raises(ddpc.DistTimeoutError, match="queue_pop from '(job/)?empty'") as info:
        s.queue_pop("empty")
    assert isinstance(info.value, DistStoreError) and not isinstance(info.value, QueueEmptyError)
    with pytest.raises(ddpc.DistTimeoutError, match="'(job/)?gate'"):
        s.barrier("gate", 2)
    with pytest.raises(ddpc.DistTimeoutError, match="never"):
        s.multi_get(["never"])
    # the item pushed after a pop gave up is still there
    s.queue_push("empty", "kept")
    assert s.queue_len("empty") == 1 and s.queue_pop("empty") == b"kept"
    s.barrier("gate", 2, timedelta(seconds=5))  # the second arrival opens it


def test_tcp_blocked_pops_take_one_item_each(master):
    """Each push wakes one of the pops parked on the server; a pop that timed out takes nothing."""
    popped = []

    def pop(store):
        popped.append(store.queue_pop("jobs"))

    clients = [client(master, timeout=30) for _ in range(2)]
    threads = [threading.Thread(target=pop, args=(c,)) for c in clients]
    for t in threads:
        t.start()
    master.queue_push("jobs", "one")
    deadline = time.monotonic() + 30
    while not popped and time.monotonic() < deadline:
        time.sleep(0.01)
    assert popped == [b"one"] and master.queue_len("jobs") == 0
    master.queue_push("jobs", "two")
    for t in threads:
        t.join(30)
    assert sorted(popped) == [b"one", b"two"] and master.queue_len("jobs") == 0


def test_tcp_store_properties_and_clone(master):
    c = client(master)
    assert c.host == "127.0.0.1" and c.libuvBackend is False
    clone = c.clone()
    assert clone is not c and isinstance(clone, TCPStore) and clone.port == c.port
    assert clone.timeout == c.timeout
    clone.set("k", "from the clone")
    assert c.get("k") == b"from the clone"
    master_clone = master.clone()
    del master_clone  # a clone does not own the server
    assert c.get("k") == b"from the clone"
    hash_store = HashStore()
    assert hash_store.clone() is hash_store


def test_tcp_values_past_the_limits_are_refused(master):
    c = client(master)
    c.set("big", b"x" * (9 << 20))
    with pytest.raises(ValueError, match="past the"):
        c.append("big", b"y" * (9 << 20))
    assert len(c.get("big")) == 9 << 20
    with pytest.raises(ValueError, match="exceeds"):
        c.multi_set(["m", "n"], [b"x" * (9 << 20), b"y" * (9 << 20)])
    c.set("big2", b"y" * (9 << 20))
    with pytest.raises(DistStoreError, match="reply limit"):
        c.multi_get(["big", "big2"])
    assert c.multi_get(["big2"]) == [b"y" * (9 << 20)]


def test_prefix_store_prefixes_the_extended_api():
    base = HashStore()
    outer = PrefixStore("a", PrefixStore("b", base))
    base.set("elsewhere", "v")
    outer.append("k", "v")
    outer.multi_set(["m"], ["1"])
    assert base.multi_get(["b/a/k", "b/a/m"]) == [b"v", b"1"]
    assert sorted(outer.list_keys()) == ["k", "m"] and sorted(PrefixStore("b", base).list_keys()) == ["a/k", "a/m"]
    outer.queue_push("q", "item")
    assert base.queue_len("b/a/q") == 1 and outer.queue_len("q") == 1 and outer.check(["q"])
    assert outer.queue_pop("q") == b"item" and base.queue_len("b/a/q") == 0
    outer.barrier("bar", 1)
    assert base.get("b/a/bar") == b"1"
    clone = outer.clone()
    assert clone.prefix == outer.prefix and clone.get("k") == b"v"


RANK1 = """
import sys, time
from datetime import timedelta
from ddpc.distributed import FileStore, TCPStore
kind, where = sys.argv[1], sys.argv[2]
if kind == "tcp":
    s = TCPStore("127.0.0.1", int(where), timeout=timedelta(seconds=60), token="secret")
else:
    s = FileStore(where)
s.multi_set(["from1/a", "from1/b"], ["x", "y"])
s.append("shared", "1")
for i in range(3):
    s.queue_push("fifo", str(i))
s.barrier("b1", 2, timedelta(seconds=60))
s.wait(["popping"], timedelta(seconds=60))
time.sleep(0.3)  # most likely after rank 0's pop is parked; the test holds either way
s.queue_push("wake", "pushed by rank 1")
assert s.queue_pop("reply") == b"done"
print("rank 1 ok")
"""


@pytest.mark.parametrize("kind", ["tcp", "file"])
def test_extended_api_across_two_processes(master, tmp_path, kind):
    """A second process sets, appends and pushes, meets this one at a barrier,
    and pushes the item this one's blocked pop is waiting for."""
    master.set_timeout(timedelta(seconds=60))
    s = master if kind == "tcp" else FileStore(str(tmp_path / "store"))
    s.set_timeout(timedelta(seconds=60))
    where = str(master.port) if kind == "tcp" else str(tmp_path / "store")
    marker = f"ddpc-store-rank1-{os.getpid()}-{kind}"
    script = tmp_path / f"{marker}.py"
    script.write_text(RANK1)
    proc = subprocess.Popen([sys.executable, str(script), kind, where], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    try:
        s.append("shared", "0")
        s.barrier("b1", 2)
        assert s.multi_get(["from1/a", "from1/b"]) == [b"x", b"y"]
        assert s.get("shared") in (b"01", b"10")
        assert sorted(s.list_keys()) == ["b1", "from1/a", "from1/b", "shared"]
        assert [s.queue_pop("fifo") for _ in range(3)] == [b"0", b"1", b"2"]
        s.set("popping", "1")
        assert s.queue_pop("wake") == b"pushed by rank 1"
        s.queue_push("reply", "done")
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 0 and "rank 1 ok" in out, out
    finally:
        proc.kill()
        proc.wait()
        kill_processes_with(marker)


BODIES = {
    "append": struct.pack("<BI", 14, 5) + b"ab",                           # a key shorter than its length
    "multi_get": struct.pack("<BI", 15, 0xFFFFFFFF),                        # 4 billion keys, none sent
    "multi_set": struct.pack("<BII", 16, 2, 1) + b"k" + struct.pack("<I", 1) + b"v",  # the second pair missing
    "list_keys": struct.pack("<Bx", 17),                                    # a byte too many
    "queue_push": struct.pack("<BI", 18, 1) + b"q",                         # no value
    "queue_pop": struct.pack("<BI", 19, 1) + b"q" + b"\x01",               # no deadline
    "queue_len": struct.pack("<BI", 20, 1) + b"q" + b"extra",
    "barrier": struct.pack("<BI", 21, 1) + b"b" + struct.pack("<q", 2),     # no deadline
}


@pytest.mark.parametrize("name", sorted(BODIES))
def test_malformed_extended_requests_are_disconnected(master, name):
    c = client(master)
    c.queue_push("q", "kept")
    s = raw_connection(master)
    tok = b"secret"
    s.sendall(struct.pack("<IB I", 1 + 4 + len(tok) + 4, 1, len(tok)) + tok + struct.pack("<i", -1))
    assert _recv_exactly(s, 5) == struct.pack("<IB", 1, 1)
    body = BODIES[name]
    s.sendall(struct.pack("<I", len(body)) + body)
    assert closed_by_server(s)
    s.close()
    assert c.queue_len("q") == 1 and c.queue_pop("q") == b"kept" and not c.check(["b"])
