"""Setting up the nccl backend: device checks through the store, the unique id, the communicator.

The checks run before NCCL sees the ranks, so two ranks on one GPU or a rank
without a GPU give a clear DistBackendError (a DistError) instead of an NCCL hang or crash. They
take a store-like object (``set(key, bytes)``, ``get(key) -> bytes`` waiting
for the key), so tests can drive them without GPUs.
"""

from . import _C
from ._C import DistBackendError

_FIX = ("give each rank its own GPU: set CUDA_VISIBLE_DEVICES per process, launch with ddpc-run (which sets "
        "LOCAL_RANK), pass device_id= to init_process_group, or use backend='cpu'")


def exchange(store, prefix, rank, size, value):
    """Every rank publishes `value` (bytes) and gets all ranks' values, by rank."""
    store.set(f"{prefix}/{rank}", value)
    return [store.get(f"{prefix}/{r}") for r in range(size)]


def check_devices(bus_ids, hosts=None):
    """Raises DistBackendError when a rank has no GPU or two ranks share one.

    bus_ids[r] is rank r's PCI bus id ('' for no GPU); hosts[r] its host name,
    so equal bus ids on different hosts are different GPUs.
    """
    hosts = hosts or [""] * len(bus_ids)
    missing = [r for r, b in enumerate(bus_ids) if not b]
    if len(missing) == len(bus_ids):
        raise DistBackendError("backend 'nccl' needs a GPU on every rank, but no rank has one; use backend='cpu'")
    if missing:
        have = [r for r, b in enumerate(bus_ids) if b]
        raise DistBackendError(f"backend 'nccl' needs a GPU on every rank, but rank(s) {missing} have none "
                        f"(rank(s) {have} do); use backend='cpu' for groups that mix GPU and CPU-only processes")
    seen = {}
    for r, key in enumerate(zip(hosts, bus_ids)):
        if key in seen:
            host = f" on host {key[0]}" if key[0] else ""
            raise DistBackendError(f"ranks {seen[key]} and {r} both use the GPU at PCI bus id {key[1]}{host}; NCCL cannot run "
                            f"two ranks on one GPU. To fix it, {_FIX}")
        seen[key] = r


def local_bus_id(device):
    """PCI bus id of this rank's GPU, or '' when there is none."""
    if device is None or _C.cuda_device_count() <= device:
        return ""
    return _C.cuda_properties(device)["pci_bus_id"]


def create_communicator(store, prefix, rank, size, device, timeout_s, host=""):
    """Checks the group's devices through the store, shares rank 0's unique id, and builds the NcclComm."""
    if not hasattr(_C, "NcclComm"):
        raise RuntimeError("backend 'nccl' is not available: this ddpc was built without NCCL "
                           "(install NCCL or the nvidia-nccl wheel and rebuild), use backend='cpu'")
    _C.nccl_library()  # loads NCCL, or raises saying why, on every rank before any rank waits on the store
    bus = exchange(store, f"{prefix}/bus", rank, size, local_bus_id(device).encode())
    hosts = exchange(store, f"{prefix}/host", rank, size, host.encode())
    check_devices([b.decode() for b in bus], [h.decode() for h in hosts])
    if rank == 0:
        store.set(f"{prefix}/uid", _C.nccl_unique_id())
    uid = store.get(f"{prefix}/uid")
    return _C.NcclComm(uid, rank, size, device, float(timeout_s))


class NcclGroup:
    """The nccl backend behind ddpc.distributed's process-group calls.

    Collectives take CUDA buffers (no staging) and are queued on the
    communicator's stream; a blocking call returns once the compute stream is
    ordered after the collective (as in PyTorch, the host does not wait), and
    ``async_op`` returns the NcclWork. ``barrier`` does wait on the host.
    A collective's ``timeout`` (seconds; None: the group's at the time it is
    enqueued) is what the watchdog gives it once it can start.
    """

    def __init__(self, store, prefix, rank, size, device, timeout_s, host=""):
        self.rank, self.size, self.device, self.timeout_s = rank, size, device, timeout_s
        self._comm = create_communicator(store, prefix, rank, size, device, timeout_s, host)
        _C.cuda_set_device(device)
        self._scratch = _C.Buffer((1,), "float32", device)

    def _finish(self, work, async_op):
        if async_op:
            return work
        work.wait()
        return None

    def all_reduce(self, buf, code, op, async_op, timeout=None):
        return self._finish(self._comm.all_reduce(buf, op, timeout=timeout), async_op)

    def broadcast(self, buf, code, root, async_op, timeout=None):
        return self._finish(self._comm.broadcast(buf, root, timeout=timeout), async_op)

    def all_gather(self, out, inp, code, async_op, timeout=None):
        return self._finish(self._comm.all_gather(out, inp, timeout=timeout), async_op)

    def reduce_scatter(self, out, inp, code, op, async_op, timeout=None):
        return self._finish(self._comm.reduce_scatter(out, inp, op, timeout=timeout), async_op)

    def reduce(self, buf, code, op, root, async_op, timeout=None):
        return self._finish(self._comm.reduce(buf, op, root, timeout=timeout), async_op)

    def gather(self, out, inp, code, root, async_op, timeout=None):
        return self._finish(self._comm.gather(out, inp, root, timeout=timeout), async_op)

    def scatter(self, out, inp, code, root, async_op, timeout=None):
        return self._finish(self._comm.scatter(out, inp, root, timeout=timeout), async_op)

    def send(self, buf, code, peer, tag, async_op):
        return self._finish(self._comm.send(buf, peer), async_op)

    def recv(self, buf, code, peer, tag, async_op):
        return self._finish(self._comm.recv(buf, peer), async_op)

    def barrier(self, async_op, timeout=None):
        if timeout is None:
            timeout = self.timeout_s
        work = self._comm.all_reduce(self._scratch, 0, timeout=timeout)
        if async_op:
            return work
        work.wait(timeout=timeout)
        return None

    def set_timeout(self, seconds):
        self.timeout_s = seconds
        self._comm.set_timeout(seconds)

    def coalesce_start(self):
        self._comm.group_start()

    def coalesce_end(self):
        self._comm.group_end()

    def close(self):
        self._comm = None
