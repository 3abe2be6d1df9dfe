"""The nccl backend: device checks (no GPU needed), and its collectives on one real GPU (`gpu`)."""

import threading

import numpy as np
import pytest

import ddpc
from ddpc import _C, _nccl


class DictStore:
    """A thread-safe in-memory store with waiting gets, standing in for TCPStore."""

    def __init__(self):
        self.data, self.cond = {}, threading.Condition()

    def set(self, key, value):
        with self.cond:
            self.data[key] = value
            self.cond.notify_all()

    def get(self, key):
        with self.cond:
            assert self.cond.wait_for(lambda: key in self.data, timeout=10), key
            return self.data[key]


def run_ranks(size, fn):
    results, errors = [None] * size, [None] * size

    def body(r):
        try:
            results[r] = fn(r)
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors[r] = e

    threads = [threading.Thread(target=body, args=(r,)) for r in range(size)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    return results, errors


def test_two_ranks_on_one_gpu_are_refused_with_a_fix():
    store = DictStore()
    bus = ["0000:1A:00.0", "0000:1A:00.0", "0000:1B:00.0"]

    def rank(r):
        ids = _nccl.exchange(store, "g0/bus", r, 3, bus[r].encode())
        _nccl.check_devices([b.decode() for b in ids])

    _, errors = run_ranks(3, rank)
    for e in errors:
        assert isinstance(e, _C.DistBackendError) and isinstance(e, ddpc.DistError)
        msg = str(e)
        assert "ranks 0 and 1" in msg and "0000:1A:00.0" in msg
        assert "CUDA_VISIBLE_DEVICES" in msg and "LOCAL_RANK" in msg and "device_id" in msg and "backend='cpu'" in msg


def test_same_bus_id_on_different_hosts_is_fine():
    _nccl.check_devices(["0000:1A:00.0", "0000:1A:00.0"], ["node-a", "node-b"])
    with pytest.raises(_C.DistBackendError, match="on host node-a"):
        _nccl.check_devices(["0000:1A:00.0", "0000:1A:00.0"], ["node-a", "node-a"])


def test_mixed_gpu_and_cpu_ranks_are_refused():
    with pytest.raises(_C.DistBackendError, match=r"rank\(s\) \[1\] have none.*backend='cpu'"):
        _nccl.check_devices(["0000:1A:00.0", ""])


def test_nccl_without_gpu_fails_at_the_check_not_in_nccl():
    if ddpc.cuda.is_available():
        pytest.skip("a GPU is present")
    store = DictStore()
    if not hasattr(_C, "NcclComm"):
        with pytest.raises(RuntimeError, match="built without NCCL"):
            _nccl.create_communicator(store, "g1", 0, 1, 0, 5.0)
        return
    with pytest.raises(_C.DistBackendError, match="needs a GPU on every rank"):
        _nccl.create_communicator(store, "g1", 0, 1, 0, 5.0)


def test_multi_device_fallback_reduces_cpu_replicas():
    bufs = [ddpc.full((7,), float(i + 1)) for i in range(3)]
    _C.multi_all_reduce([b._buf for b in bufs], 0)
    assert all(b.tolist() == [6.0] * 7 for b in bufs)
    for i, b in enumerate(bufs):
        b.fill_(i + 1)
    _C.multi_all_reduce([b._buf for b in bufs], 1)
    assert all(b.tolist() == [2.0] * 7 for b in bufs)
    bufs[1].fill_(9)
    _C.multi_broadcast([b._buf for b in bufs], 1)
    assert all(b.tolist() == [9.0] * 7 for b in bufs)
    with pytest.raises(ValueError, match="differs from buffer 0"):
        _C.multi_all_reduce([ddpc.ones(3)._buf, ddpc.ones(4)._buf], 0)
    with pytest.raises(ValueError, match="SUM and AVG only"):
        _C.multi_all_reduce([ddpc.ones(3)._buf, ddpc.ones(3)._buf], 3)
    assert _C.multi_release() == 0  # host replicas make no communicators
    empty = [ddpc.zeros(0) for _ in range(3)]
    _C.multi_all_reduce([b._buf for b in empty], 1)
    _C.multi_broadcast([b._buf for b in empty], 2)
    assert all(b.shape == (0,) for b in empty)


def single_rank_comm(timeout=30.0):
    return _nccl.create_communicator(DictStore(), "solo", 0, 1, 0, timeout)


@pytest.mark.gpu
@pytest.mark.parametrize("dt", [ddpc.float32, ddpc.float64, ddpc.float16, ddpc.bfloat16, ddpc.int32, ddpc.int64,
                                ddpc.uint8], ids=lambda d: d.name)
def test_every_collective_on_one_gpu(dt):
    comm = single_rank_comm()
    x = ddpc.arange(1, 4098, dtype=dt, device="cuda") if dt is not ddpc.uint8 else ddpc.full((4097,), 3, dtype=dt,
                                                                                             device="cuda")
    ref = x.cpu().to(ddpc.float64).numpy().copy()
    for op in range(5):  # SUM AVG MIN MAX PROD over one rank leave the data unchanged
        comm.all_reduce(x._buf, op).wait()
        np.testing.assert_array_equal(x.cpu().to(ddpc.float64).numpy(), ref)
    comm.broadcast(x._buf, 0).wait()
    out = ddpc.zeros(4097, dtype=dt, device="cuda")
    comm.all_gather(out._buf, x._buf).wait()
    np.testing.assert_array_equal(out.cpu().to(ddpc.float64).numpy(), ref)
    out.fill_(0)
    comm.reduce_scatter(out._buf, x._buf, 0).wait()
    np.testing.assert_array_equal(out.cpu().to(ddpc.float64).numpy(), ref)
    comm.reduce(x._buf, 3, 0).wait()
    np.testing.assert_array_equal(x.cpu().to(ddpc.float64).numpy(), ref)
    out.fill_(0)
    comm.gather(out._buf, x._buf, 0).wait()  # the root's own block: a copy on the comm stream
    np.testing.assert_array_equal(out.cpu().to(ddpc.float64).numpy(), ref)
    back = ddpc.zeros(4097, dtype=dt, device="cuda")
    comm.scatter(back._buf, out._buf, 0).wait()
    np.testing.assert_array_equal(back.cpu().to(ddpc.float64).numpy(), ref)
    with pytest.raises(ValueError, match="the root's: it must be given there"):
        comm.gather(None, x._buf, 0)
    assert "all_reduce of 4097" in comm.flight_record()


@pytest.mark.gpu
def test_wait_orders_later_kernels_after_the_collective():
    comm = single_rank_comm()
    x = ddpc.ones(1 << 22, device="cuda")
    work = comm.all_reduce(x._buf, 0)
    work.wait()
    y = x * 2  # runs on the compute stream after wait(): must see the collective's output
    assert y.sum().item() == 2 * (1 << 22)
    ddpc.cuda.synchronize()
    assert work.is_completed() and work.wait(timeout=5)


@pytest.mark.gpu
def test_coalesced_collectives_complete_together():
    comm = single_rank_comm()
    xs = [ddpc.full((1000,), float(i), device="cuda") for i in range(4)]
    comm.group_start()
    works = [comm.all_reduce(x._buf, 0) for x in xs]
    comm.group_end()
    for w in works:
        w.wait()
    assert [x.cpu().tolist()[0] for x in xs] == [0.0, 1.0, 2.0, 3.0]


@pytest.mark.gpu
def test_empty_tensors_reach_no_nccl_call_and_their_works_complete():
    comm = single_rank_comm()
    x = ddpc.ones(1 << 20, device="cuda")
    before = comm.all_reduce(x._buf, 0)
    e, out = ddpc.zeros(0, device="cuda"), ddpc.zeros(0, device="cuda")
    works = [comm.all_reduce(e._buf, 0), comm.broadcast(e._buf, 0), comm.all_gather(out._buf, e._buf),
             comm.reduce_scatter(out._buf, e._buf, 1), comm.reduce(e._buf, 0, 0), comm.gather(out._buf, e._buf, 0),
             comm.scatter(out._buf, e._buf, 0)]
    for w in works:
        assert w.wait(timeout=10) and w.is_completed()
    assert before.is_completed()  # an empty collective's work completes after those queued before it
    # Among sends and receives that move data, the empty ones are skipped on both sides and the others still pair.
    src, dst = ddpc.arange(5, dtype=ddpc.float32, device="cuda"), ddpc.zeros(5, device="cuda")
    comm.group_start()
    works = [comm.send(e._buf, 0), comm.recv(out._buf, 0), comm.send(src._buf, 0), comm.recv(dst._buf, 0)]
    comm.group_end()
    for w in works:
        assert w.wait(timeout=10)
    assert dst.cpu().tolist() == [0.0, 1.0, 2.0, 3.0, 4.0]
    assert "all_reduce of 0 float32" in comm.flight_record()


@pytest.mark.gpu
def test_multi_device_communicators_are_released_and_made_again():
    if ddpc.cuda.device_count() < 2 or not hasattr(_C, "nccl_library"):
        pytest.skip("needs two GPUs and NCCL")
    _C.nccl_library()  # raises where NCCL does not load, rather than the copies below passing for it
    _C.multi_release()
    for _ in range(2):
        bufs = [ddpc.full((5,), float(i + 1), device=f"cuda:{i}") for i in range(2)]
        _C.multi_all_reduce([b._buf for b in bufs], 0)
        assert all(b.cpu().tolist() == [3.0] * 5 for b in bufs)
        assert _C.multi_release() == 1 and _C.multi_release() == 0


@pytest.mark.gpu
def test_multi_device_all_reduce_of_empty_replicas():
    if ddpc.cuda.device_count() < 2:
        pytest.skip("needs two GPUs")
    bufs = [ddpc.zeros(0, device=f"cuda:{i}") for i in range(2)]
    _C.multi_all_reduce([b._buf for b in bufs], 0)
    _C.multi_broadcast([b._buf for b in bufs], 1)
    assert all(b.shape == (0,) for b in bufs)


@pytest.mark.gpu
def test_watchdog_aborts_a_collective_that_cannot_complete():
    """A group of two whose second rank never joins: creation or the first collective times out."""
    import time
    store = DictStore()
    store.set("pair/bus/1", b"0000:FF:00.0")  # a phantom peer on another GPU that never creates its communicator
    store.set("pair/host/1", b"")
    start = time.monotonic()
    with pytest.raises(ddpc.DistTimeoutError):
        comm = _nccl.create_communicator(store, "pair", 0, 2, 0, 3.0)
        comm.all_reduce(ddpc.ones(10, device="cuda")._buf, 0).wait(timeout=30)
    assert time.monotonic() - start < 30


def _nccl_init_worker(rank):
    import ddpc.distributed as dist
    try:
        dist.init_process_group("nccl")
    except ddpc.DistError as e:
        return str(e)
    dist.destroy_process_group()
    return "initialised"


def test_init_process_group_nccl_without_gpus_is_a_clear_error():
    if ddpc.cuda.is_available() or not hasattr(_C, "NcclComm"):
        pytest.skip("needs a CUDA build on a machine without a GPU")
    first = ddpc.spawn(_nccl_init_worker, nprocs=1)[0]
    assert "no rank has one" in first and "backend='cpu'" in first


SCRIPT = r"""
import sys
import numpy as np
import ddpc, ddpc.distributed as dist
backend, rank, world, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
out = {}
for dt in ("float32", "float64", "float16", "bfloat16", "int32", "int64", "uint8"):
    x = ddpc.full((4097,), rank + 1, dtype=dt, device="cuda:0")
    dist.all_reduce(x)
    out[dt] = x.cpu().to(ddpc.float64).numpy()[[0, -1]].tolist()
y = ddpc.arange(7, dtype=ddpc.float32, device="cuda:0") * (rank + 1)
dist.broadcast(y, src=0)
g = ddpc.zeros(7 * world, device="cuda:0")
dist.all_gather_into_tensor(g, y)
w = dist.all_reduce(ddpc.ones(3, device="cuda:0"), async_op=True)
w.wait()
dist.barrier()
print("RESULT", out, y.cpu().tolist(), g.cpu().tolist(), w.is_completed(), flush=True)
objs = [None] * world
dist.all_gather_object(objs, {"r": rank})
lst = ["from", rank]
dist.broadcast_object_list(lst, src=0)
s = ddpc.zeros(3, device="cuda:0")
dist.scatter(s, [ddpc.full((3,), float(r), device="cuda:0") for r in range(world)] if rank == 0 else None)
gl = [ddpc.zeros(2, device="cuda:0") for _ in range(world)] if rank == 0 else None
dist.gather(ddpc.full((2,), rank + 1.0, device="cuda:0"), gl)
a2a = ddpc.zeros(world, device="cuda:0")
dist.all_to_all_single(a2a, ddpc.arange(world, dtype=ddpc.float32, device="cuda:0") + 10 * rank)
red = ddpc.full((2,), rank + 1.0, device="cuda:0")
dist.reduce(red, dst=0)
print("MORE", objs, lst, s.cpu().tolist(), gl and [x.cpu().tolist() for x in gl], a2a.cpu().tolist(),
      red.cpu().tolist(), flush=True)
dist.destroy_process_group()
"""


def _run_ranks(backend, world, prefix="RESULT"):
    import socket
    import subprocess
    import sys
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    procs = [subprocess.Popen([sys.executable, "-c", SCRIPT, backend, str(r), str(world), port],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for r in range(world)]
    outs = [p.communicate(timeout=120)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    return [next(line for line in o.splitlines() if line.startswith(prefix)) for o in outs]


@pytest.mark.gpu
def test_distributed_api_on_one_nccl_rank():
    (line,) = _run_ranks("nccl", 1)
    assert "'float32': [1.0, 1.0]" in line and "'bfloat16': [1.0, 1.0]" in line
    assert "[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]" in line and line.endswith("True")


@pytest.mark.gpu
@pytest.mark.parametrize("backend,world", [("nccl", 1), ("cpu", 2)])
def test_gather_scatter_and_object_collectives_on_cuda_tensors(backend, world):
    lines = _run_ranks(backend, world, prefix="MORE")
    objs = str([{"r": r} for r in range(world)])
    gathered = str([[r + 1.0] * 2 for r in range(world)])
    for rank, line in enumerate(lines):
        a2a = str([10.0 * q + rank for q in range(world)])
        red = str([world * (world + 1) / 2] * 2 if rank == 0 else [rank + 1.0] * 2)
        want = f"MORE {objs} ['from', 0] {[float(rank)] * 3} {gathered if rank == 0 else None} {a2a} {red}"
        assert line == want, (line, want)


@pytest.mark.gpu
def test_cpu_backend_with_two_ranks_on_one_gpu_agrees_with_closed_form():
    lines = _run_ranks("cpu", 2)
    for line in lines:
        assert "'float32': [3.0, 3.0]" in line and "'uint8': [3.0, 3.0]" in line  # 1 + 2
        assert "[0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 0.0, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0]" in line


DEFAULT_BACKEND_SCRIPT = r"""
import sys
import numpy as np
import ddpc, ddpc.distributed as dist
dist.init_process_group(init_method=f"tcp://127.0.0.1:{sys.argv[1]}", rank=0, world_size=1)
x = ddpc.full((5,), 2.0, device="cuda:0")
dist.all_reduce(x)
a = np.full(3, 4.0)
dist.all_reduce(a)
h = ddpc.full((2,), 6.0)
dist.broadcast(h, src=0)
objs = [None]
dist.all_gather_object(objs, {"r": 0})
print("DEFAULT", dist.get_backend(), x.cpu().tolist(), a.tolist(), h.tolist(), objs, flush=True)
dist.destroy_process_group()
"""


@pytest.mark.gpu
def test_the_default_backend_on_a_gpu_takes_cuda_and_host_tensors():
    """One rank with a GPU of its own: the default is nccl, and host tensors
    go through its cpu companion instead of being refused."""
    import socket
    import subprocess
    import sys
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    out = subprocess.run([sys.executable, "-c", DEFAULT_BACKEND_SCRIPT, port], capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "DEFAULT nccl [2.0, 2.0, 2.0, 2.0, 2.0] [4.0, 4.0, 4.0] [6.0, 6.0] [{'r': 0}]" in out.stdout, out.stdout


STAGING_SCRIPT = r"""
import sys
import ddpc, ddpc.distributed as dist
from ddpc import _C
dist.init_process_group("cpu", init_method=f"tcp://127.0.0.1:{sys.argv[1]}", rank=0, world_size=1)
x = ddpc.ones(1000, device="cuda:0")
_C.cuda_host_empty_cache()
for _ in range(3):
    dist.all_reduce(x)
dist.broadcast(x, src=0)
cached = _C.cuda_host_empty_cache()
dist.all_reduce(x)
dist.destroy_process_group()
print("STAGED", x.cpu().tolist()[:2], cached, _C.cuda_host_empty_cache(), flush=True)
"""


@pytest.mark.gpu
def test_cpu_backend_stages_cuda_tensors_through_one_cached_pinned_block():
    """Each collective's staging block goes back to the cache and the next one
    takes it (one 4 KiB block for 4,000 bytes); closing the group frees it."""
    import socket
    import subprocess
    import sys
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    out = subprocess.run([sys.executable, "-c", STAGING_SCRIPT, port], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "STAGED [1.0, 1.0] 4096 0" in out.stdout, out.stdout
