"""DataLoader worker processes (``num_workers`` > 0), as torch.utils.data's.

Each worker is a process with its own copy of the data set (inherited with
``fork``, pickled with ``spawn``/``forkserver``). The loader sends it tasks
over its own pipe: the indices of a batch (map-style data sets) or "your next
batch" (an IterableDataset, which each worker iterates from its start, so it
reads the stream once per worker unless the data set splits itself with
``get_worker_info()``). Tasks go out round-robin, ``prefetch`` per worker
ahead, and the batches are handed out in task order whatever order they come
back in (or as they come, with ``in_order=False``). A worker that fails sends its exception (re-raised in the loader with
the worker's traceback); a worker that dies is noticed through its process
sentinel, so the loader raises instead of waiting for it.

Why pipes and not multiprocessing queues: the loader waits on the pipes and
the processes' sentinels together (``multiprocessing.connection.wait``), so a
dead worker wakes it at once, and no feeder threads run in either process.
Batches cross as pickle protocol 5 with their tensors' and arrays' bytes out
of band: the worker writes each from its own memory into the pipe and the
loader reads it straight into the memory the batch's tensor then wraps, one
copy each side (pickling them in band copied each batch four more times).
"""

import io
import itertools
import multiprocessing
import multiprocessing.connection
import os
import pickle
import random
import signal
import sys
import time
import traceback
import weakref

import numpy as np

from . import _C
from ._threads import set_num_threads
from .tensor import Tensor, manual_seed

_info = None  # this process's WorkerInfo while it is a worker
_POLL_S = 1.0  # how often an idle worker checks that the loader's process is alive
_IN_BAND_BYTES = 64 << 10  # smaller tensors and arrays travel inside the pickle


class WorkerInfo:
    """What ``get_worker_info()`` returns inside a worker: its ``id``
    (0 .. num_workers - 1), ``num_workers``, the ``seed`` its random number
    generators were seeded with, and its copy of the ``dataset``."""

    __slots__ = ("id", "num_workers", "seed", "dataset")

    def __init__(self, id, num_workers, seed, dataset):
        self.id, self.num_workers, self.seed, self.dataset = id, num_workers, seed, dataset

    def __repr__(self):
        return f"WorkerInfo(id={self.id}, num_workers={self.num_workers}, seed={self.seed})"


def get_worker_info():
    """The ``WorkerInfo`` of this DataLoader worker process, or None in any
    other process (and in the loading threads of ``num_workers`` None or 0),
    as torch.utils.data.get_worker_info."""
    return _info


class _Raised:
    """An exception raised in a worker, as text: its type's module and name
    and the worker's traceback (the exception itself may not pickle)."""

    def __init__(self, exc, worker_id, where="in"):
        self.module, self.name = type(exc).__module__, type(exc).__qualname__
        self.text = (f"Caught {type(exc).__name__} {where} DataLoader worker process {worker_id}.\n"
                     f"Original {''.join(traceback.format_exception(exc)).rstrip()}")

    def exception(self):
        """The exception to raise in the loader: the worker's type where it can
        be made from a message here, RuntimeError otherwise."""
        cls = sys.modules.get(self.module)
        for part in self.name.split("."):
            cls = getattr(cls, part, None)
        if isinstance(cls, type) and issubclass(cls, BaseException):
            try:
                # KeyError's str() is the repr of its argument: a str that is its own repr keeps the lines.
                return cls(_Verbatim(self.text) if issubclass(cls, KeyError) else self.text)
            except Exception:
                pass
        return RuntimeError(self.text)


class _Exhausted:
    """A worker's answer once its IterableDataset stream has ended."""


class _Verbatim(str):
    def __repr__(self):
        return str(self)


class _OutOfBand(pickle.Pickler):
    """Pickles host tensors as their bytes in a PickleBuffer, so that with a
    buffer_callback they travel out of band (arrays already do)."""

    def reducer_override(self, obj):
        if type(obj) is not Tensor or obj.is_cuda or obj.requires_grad:
            return NotImplemented
        arr = np.asarray(obj._buf)
        if arr.dtype.kind == "O":
            return NotImplemented
        if not arr.flags.c_contiguous:
            arr = arr.copy()
        return _tensor_from_bytes, (pickle.PickleBuffer(arr.reshape(-1).view(np.uint8)), arr.dtype.str, arr.shape,
                                    obj.dtype.name)


def _tensor_from_bytes(data, raw_dtype, shape, dtype_name):
    arr = np.frombuffer(data, np.uint8) if not isinstance(data, np.ndarray) else data
    return Tensor(_C.Buffer.from_object(arr.view(np.dtype(raw_dtype)).reshape(shape), dtype_name))


def _send(conn, message):
    """Sends a picklable message, then its large buffers' bytes as they are
    (the pickle says how many; see the module's comment)."""
    buffers, stream = [], io.BytesIO()

    def out_of_band(buffer):  # a true answer keeps a small buffer in the pickle: one system call less
        return buffer.raw().nbytes < _IN_BAND_BYTES or buffers.append(buffer)

    _OutOfBand(stream, protocol=5, buffer_callback=out_of_band).dump(message)
    views = [b.raw() for b in buffers]
    conn.send((stream.getvalue(), [v.nbytes for v in views]))
    for v in views:
        while v:
            v = v[os.write(conn.fileno(), v):]


def _recv(conn):
    """What _send sent: each out-of-band buffer is read from the pipe straight into
    fresh memory of its own (Connection.recv_bytes_into would copy it twice more)."""
    payload, sizes = conn.recv()
    buffers = [np.empty(n, np.uint8) for n in sizes]
    for b in buffers:
        v = memoryview(b)
        while v:
            n = os.readv(conn.fileno(), [v])
            if n == 0:
                raise EOFError("a DataLoader worker's pipe closed in the middle of a batch")
            v = v[n:]
    return pickle.loads(payload, buffers=buffers)


def _seed_worker(seed):
    set_num_threads(1)  # the workers share the cores: one thread each, as PyTorch's
    manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)


def _worker_main(conn, fetcher, worker_id, num_workers, seed, init_fn, parent_pid, inherited):
    """A worker's loop: answers tasks until told to stop (None), its pipe
    closes, or the loader's process is gone."""
    global _info
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the loader's to handle; it stops the workers
    for c in inherited:  # other pipes' loader ends, copied by fork: closed so their workers see EOF
        c.close()
    _seed_worker(seed)
    _info = WorkerInfo(worker_id, num_workers, seed, fetcher.dataset)
    failed = None
    if init_fn is not None:
        try:
            init_fn(worker_id)
        except BaseException as exc:
            failed = _Raised(exc, worker_id, "in worker_init_fn of")
    stream, generation = None, None
    while True:
        try:
            if not conn.poll(_POLL_S):
                if os.getppid() != parent_pid:
                    return
                continue
            task = conn.recv()
        except (EOFError, OSError):
            return
        if task is None:
            return
        gen, number, indices = task
        if failed is not None:
            result = failed
        else:
            try:
                if indices is not None:
                    result = fetcher.fetch(indices)
                else:
                    if gen != generation:  # a new epoch: this worker reads the stream from its start
                        stream, generation = iter(fetcher.dataset), gen
                    samples = fetcher.draw(stream)
                    result = _Exhausted() if samples is fetcher.END else fetcher.collate_fn(samples)
            except BaseException as exc:
                result = _Raised(exc, worker_id)
        try:
            _send(conn, (gen, number, result))
        except (BrokenPipeError, ConnectionResetError, EOFError):
            return
        except Exception as exc:  # the batch does not pickle (nothing was sent): say so instead
            try:
                _send(conn, (gen, number, _Raised(exc, worker_id, "sending a batch from")))
            except OSError:
                return


def context(spec):
    """The multiprocessing context a DataLoader's ``multiprocessing_context`` names (None: the default one)."""
    if spec is None:
        return multiprocessing.get_context()
    if isinstance(spec, str):
        if spec not in multiprocessing.get_all_start_methods():
            raise ValueError(f"multiprocessing_context {spec!r} is not a start method here; "
                             f"expected one of {multiprocessing.get_all_start_methods()}")
        return multiprocessing.get_context(spec)
    if hasattr(spec, "Process") and hasattr(spec, "Pipe"):
        return spec
    raise TypeError(f"multiprocessing_context must be a start method name or a multiprocessing context, "
                    f"got {type(spec).__name__}")


def _describe_exit(proc):
    code = proc.exitcode
    if code is not None and code < 0:
        try:
            return f"was killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"was killed by signal {-code}"
    return f"exited unexpectedly with exit code {code}"


def _stop(procs, conns):
    """Tells every worker to stop, waits briefly, then terminates those still running."""
    for c in conns:
        try:
            c.send(None)
        except OSError:
            pass
    for c in conns:
        c.close()
    deadline = time.monotonic() + 2.0
    for p in procs:
        p.join(max(0.0, deadline - time.monotonic()))
    for p in procs:
        if p.is_alive():
            p.terminate()
            p.join()


class WorkerPool:
    """``num_workers`` processes serving one DataLoader's tasks: a pool per
    iterator, or one for the loader's life with ``persistent_workers``.
    Stopping it (``close()``, or dropping it) stops and reaps every worker."""

    def __init__(self, fetcher, num_workers, seed, init_fn, context):
        ctx = context
        fork = ctx.get_start_method() == "fork"
        self.procs, self.conns = [], []
        self._finalizer = weakref.finalize(self, _stop, self.procs, self.conns)
        for w in range(num_workers):
            ours, theirs = ctx.Pipe()
            self.conns.append(ours)
            proc = ctx.Process(target=_worker_main, name=f"ddpc-data-worker-{w}", daemon=True,
                               args=(theirs, fetcher, w, num_workers, (seed + w) & (2**64 - 1), init_fn,
                                     os.getpid(), list(self.conns) if fork else []))
            try:
                proc.start()
            finally:
                theirs.close()
            self.procs.append(proc)
        self.generation = 0
        self.outstanding = [0] * num_workers

    def send(self, w, task):
        self.conns[w].send(task)
        self.outstanding[w] += 1

    def receive(self, timeout):
        """[(worker, (generation, number, result))] of the results ready within
        ``timeout`` seconds (None: until one is); raises RuntimeError if a worker has died."""
        sentinels = {p.sentinel: w for w, p in enumerate(self.procs)}
        ready = multiprocessing.connection.wait(self.conns + list(sentinels), timeout)
        got = []
        for r in ready:
            if r in sentinels:
                continue
            w = self.conns.index(r)
            try:
                got.append((w, _recv(r)))
            except (EOFError, OSError):
                continue  # its process ended: reported below
            self.outstanding[w] -= 1
        if not got:
            dead = [(w, p) for w, p in enumerate(self.procs) if p.exitcode is not None]
            if dead:
                self.close()
                raise RuntimeError("; ".join(f"DataLoader worker {w} (pid {p.pid}) {_describe_exit(p)}"
                                             for w, p in dead))
        return got

    @property
    def alive(self):
        return self._finalizer.alive

    def close(self):
        self._finalizer()


class WorkerBatches:
    """The tasks of one pass over a data set, spread over a WorkerPool, and
    their results in order (or, with ``in_order=False``, as they come). ``tasks`` yields each batch's indices, or is None
    for an IterableDataset (each worker streams its own copy). ``finish``
    turns a worker's batch into what the loader hands out (device, pinning).
    Stale results of an earlier pass over a persistent pool are dropped."""

    def __init__(self, pool, tasks, prefetch, timeout, finish, owns_pool, remaining, in_order=True):
        self._pool, self._finish, self._remaining = pool, finish, remaining
        pool.generation += 1
        self._gen = pool.generation
        self._tasks = None if tasks is None else iter(tasks)
        self._active = list(range(len(pool.procs)))  # workers still given tasks, in round-robin order
        self._turn = itertools.cycle(self._active)
        self._results, self._sent, self._taken = {}, 0, 0
        self._in_order = in_order
        self._timeout = timeout
        self._owns_pool = owns_pool
        self._done = False
        for _ in range(prefetch * len(pool.procs)):
            if not self._send():
                break

    def _send(self):
        if not self._active:
            return False
        indices = None
        if self._tasks is not None:
            indices = next(self._tasks, None)
            if indices is None:
                self._tasks = iter(())
                return False
        w = next(self._turn)
        self._pool.send(w, (self._gen, self._sent, indices))
        self._sent += 1
        return True

    def _next(self):
        """The next batch; StopIteration at the end of the pass."""
        if self._done:
            raise StopIteration
        if self._gen != self._pool.generation:
            self.close()
            raise RuntimeError("a newer pass over this DataLoader's persistent workers began (iter() was called "
                               "again): this one can't go on; finish or drop an iterator before starting the next")
        while True:
            deadline = None if not self._timeout else time.monotonic() + self._timeout
            while (number := self._ready()) is None:
                if self._taken >= self._sent:
                    self.close()
                    raise StopIteration
                wait = None if deadline is None else deadline - time.monotonic()
                if wait is not None and wait <= 0:
                    self.close()
                    raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds waiting for a batch")
                for w, (gen, number, result) in self._pool.receive(wait):
                    if gen == self._gen:
                        self._results[number] = (w, result)
            w, result = self._results.pop(number)
            self._taken += 1
            if isinstance(result, _Raised):
                self.close()
                raise result.exception()
            if isinstance(result, _Exhausted):
                if w in self._active:  # its later tasks come back exhausted too: skipped
                    self._active.remove(w)
                    self._turn = itertools.cycle(self._active)
                continue
            self._send()
            self._remaining = max(self._remaining - 1, 0)
            return self._finish(result)

    def _ready(self):
        """The number of the result to hand out next, None until it has come: the
        next in order, or with in_order=False the first of those here."""
        if self._in_order:
            return self._taken if self._taken in self._results else None
        return min(self._results, default=None)

    def __length_hint__(self):
        return self._remaining

    def close(self):
        """Ends this pass: a pool of its own is stopped; a persistent pool stays."""
        self._done = True
        self._active = []
        self._tasks = iter(())
        if self._owns_pool:
            self._pool.close()
