"""DataLoader worker processes (``num_workers`` > 0), as torch.utils.data's.

Each worker is a process with its own copy of the data set (inherited with
``fork``, pickled with ``spawn``/``forkserver``). The loader sends it tasks
over its own pipe: the indices of a batch (map-style data sets) or "your next
batch" (an IterableDataset, which each worker iterates from its start, so it
reads the stream once per worker unless the data set splits itself with
``get_worker_info()``). Tasks go out round-robin, ``prefetch`` per worker
ahead, and the batches are handed out in task order whatever order they come
back in (or as they come, with ``in_order=False``). A worker that fails sends
its exception, re-raised in the loader with the worker's traceback in the
failed batch's place (the pass goes on after it); a worker that dies is
noticed through its process sentinel, so the loader raises instead of waiting
for it.

A pass that resumes one taken mid-way (DataLoader.load_state_dict) gives
each worker of an IterableDataset, with its first task, where its stream
stood: the worker restores the data set's state, or draws and drops the
batches it had made; its batches come back with the data set's state after
them. The first tasks go to the workers that had them in flight, and the
round-robin goes on from where it was, so with ``in_order`` the batches come
in the order an uninterrupted pass would have handed them out.

Each answer also carries the worker's random number generators as the task
left them (ddpc's, Python's ``random`` and numpy's global one: those a worker
seeds), so that a loader's state can say where each worker's draws stood
before the first of its batches not yet handed out (a worker's batches are
handed out in the order it made them, in order or not). The workers of a
resumed pass are set there before their first task (a stream's once it is
opened), so random augmentation draws what it would have drawn
uninterrupted. Batch b of a map-style pass goes to worker b % num_workers
(the round-robin of a pass from its start), so a resumed pass gives every
batch to the worker that made it before.

Why pipes and not multiprocessing queues: the loader waits on the pipes and
the processes' sentinels together (``multiprocessing.connection.wait``), so a
dead worker wakes it at once, and no feeder threads run in either process.
Batches cross as pickle protocol 5 with their tensors' and arrays' bytes of
64 KiB and more out of band, in shared memory: each worker keeps blocks of it
(memfds: anonymous, no name in /dev/shm), mapped in both processes, and passes
a block's descriptor over its pipe (a Unix socket) the first time it uses the
block. The worker copies a batch's buffers into a free block and the batch's
tensors in the loader wrap that block, so the bytes are copied once; through
the pipe they were copied once into it and once out of it. A block is the
worker's to fill again only after nothing in the loader's process refers to
the batch in it any more (weak references say when; the loader tells the
worker with its next task), so a batch stays as it was however long it is
kept. A loop that keeps more batches than a few per worker gets the further
ones copied out of their blocks (each mapping holds a descriptor: both stay
bounded). A worker keeps a few free blocks for the batches to come and unmaps
the rest; the kernel frees a block once neither process maps it, whichever
process dies when, so nothing is left behind.
"""

import array
import contextlib
import ctypes
import io
import mmap
import multiprocessing
import multiprocessing.connection
import os
import pickle
import random
import signal
import socket
import sys
import time
import traceback
import weakref

import numpy as np

from . import _C
from ._threads import set_num_threads
from .tensor import Tensor, default_generator, manual_seed

_info = None  # this process's WorkerInfo while it is a worker
_POLL_S = 1.0  # how often an idle worker checks that the loader's process is alive
_IN_BAND_BYTES = 64 << 10  # smaller tensors and arrays travel inside the pickle
_SPARE_BLOCKS = 2  # free blocks of shared memory a worker keeps mapped for its next batches
# Blocks per worker that batches in the loader's process may hold; a batch beyond
# them is copied out of its block at once, so a loop that keeps its batches holds
# neither blocks (their descriptors: each mmap keeps one) nor memory without bound.
_LEASED_BLOCKS = 8


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
    and the worker's traceback (the exception itself may not pickle).
    ``ends_pass``: the worker can make no batch (its worker_init_fn failed);
    otherwise the exception is one batch's and the pass goes on after it."""

    def __init__(self, exc, worker_id, where="in", ends_pass=False):
        self.module, self.name = type(exc).__module__, type(exc).__qualname__
        self.text = caught_text(exc, f"{where} DataLoader worker process {worker_id}")
        self.ends_pass = ends_pass

    def exception(self):
        """The exception to raise in the loader: the worker's type where it can
        be made from a message here, RuntimeError otherwise."""
        cls = sys.modules.get(self.module)
        for part in self.name.split("."):
            cls = getattr(cls, part, None)
        return exception_like(cls, self.text)


def caught_text(exc, where):
    """The message of an exception raised again elsewhere, as PyTorch words it: where it was
    caught, then its original traceback."""
    return f"Caught {type(exc).__name__} {where}.\nOriginal {''.join(traceback.format_exception(exc)).rstrip()}"


def exception_like(cls, text):
    """An exception of class cls (if it is one, and can be made from a message) with message
    text, else a RuntimeError."""
    if isinstance(cls, type) and issubclass(cls, BaseException):
        try:
            # KeyError's str() is the repr of its argument: a str that is its own repr keeps the lines.
            return cls(_Verbatim(text) if issubclass(cls, KeyError) else text)
        except Exception:
            pass
    return RuntimeError(text)


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


def _layout(sizes):
    """Where each out-of-band buffer lies in a block (each at a multiple of 64
    bytes, as the host allocator aligns tensors) and the bytes they take in all."""
    offsets, end = [], 0
    for n in sizes:
        offsets.append(end)
        end += -(-n // 64) * 64
    return offsets, end


class _Blocks:
    """A worker's blocks of shared memory: those mapped (number -> mmap), those
    free to fill, and those unmapped since its last message (for the loader to unmap too)."""

    def __init__(self):
        self.mapped, self.free, self.retired, self._made = {}, set(), [], 0

    def release(self, numbers):
        """Takes back the blocks whose batches the loader let go of, keeping the
        _SPARE_BLOCKS largest free ones mapped."""
        self.free.update(numbers)
        for b in sorted(self.free, key=lambda b: len(self.mapped[b]))[:-_SPARE_BLOCKS]:
            self.free.remove(b)
            self.mapped.pop(b).close()
            self.retired.append(b)

    def take(self, nbytes):
        """(number, mmap, descriptor): the smallest free block that holds nbytes, or a
        new one (sized with room to spare, so batches a little larger fit it too) and
        its descriptor to pass to the loader (None for a block it has)."""
        fits = [b for b in self.free if len(self.mapped[b]) >= nbytes]
        if fits:
            b = min(fits, key=lambda b: len(self.mapped[b]))
            self.free.remove(b)
            return b, self.mapped[b], None
        step = max(mmap.PAGESIZE, 1 << max(nbytes.bit_length() - 3, 0))
        size = -(-nbytes // step) * step
        fd = os.memfd_create("ddpc-batch", os.MFD_CLOEXEC)
        try:
            os.posix_fallocate(fd, 0, size)  # the pages now: no memory is an error here, not a SIGBUS when written
            memory = mmap.mmap(fd, size)
        except BaseException:
            os.close(fd)
            raise
        b, self._made = self._made, self._made + 1
        self.mapped[b] = memory
        return b, memory, fd


def _send(conn, blocks, message):
    """Sends a picklable message; its large buffers' bytes go into one of the
    worker's blocks (see the module's comment)."""
    buffers, stream = [], io.BytesIO()

    def out_of_band(buffer):  # a true answer keeps a small buffer in the pickle
        return buffer.raw().nbytes < _IN_BAND_BYTES or buffers.append(buffer)

    _OutOfBand(stream, protocol=5, buffer_callback=out_of_band).dump(message)
    views = [b.raw() for b in buffers]
    sizes = [v.nbytes for v in views]
    block, fd = None, None
    if views:
        offsets, nbytes = _layout(sizes)
        b, memory, fd = blocks.take(nbytes)
        for v, at in zip(views, offsets):
            memory[at:at + v.nbytes] = v
        block = (b, len(memory), fd is not None)
    try:
        retired, blocks.retired = blocks.retired, []
        conn.send((stream.getvalue(), sizes, block, retired))
        if fd is not None:
            try:
                with _socket(conn) as sock:
                    socket.send_fds(sock, [b"\0"], [fd])
            except OSError as exc:  # the message went without its block: nothing can follow it
                raise BrokenPipeError(f"could not pass a block of shared memory to the loader: {exc}") from exc
    finally:
        if fd is not None:
            os.close(fd)  # the mapping keeps the block


def _recv(conn, mapped):
    """(pickle, sizes of its out-of-band buffers, number of the block they are in
    or None) of what _send sent; a new block is mapped into ``mapped`` (number ->
    mmap) as it comes, and those the worker unmapped are dropped from it."""
    payload, sizes, block, retired = conn.recv()
    for b in retired:
        del mapped[b]  # unmapped once no batch in it is left either
    if block is None:
        return payload, sizes, None
    b, size, new = block
    if new:
        with _socket(conn) as sock:
            data, fds, _, _ = socket.recv_fds(sock, 1, 1, socket.MSG_CMSG_CLOEXEC)
        if not data:
            raise EOFError("a DataLoader worker's pipe closed in the middle of a batch")
        try:
            if not fds:  # the kernel drops a descriptor the process has no room for
                raise OSError("no descriptor came with it (is the process out of file descriptors?)")
            mapped[b] = mmap.mmap(fds[0], size)
        except OSError as exc:  # the pipe is fine but the batch is lost: an error of its own, not a dead worker
            raise RuntimeError(f"could not map a DataLoader worker's block of shared memory: {exc}") from exc
        finally:
            for fd in fds:
                os.close(fd)
    return payload, sizes, b


@contextlib.contextmanager
def _socket(conn):
    """The connection's descriptor as a socket, to pass descriptors over; it stays the connection's."""
    sock = socket.socket(fileno=conn.fileno())
    try:
        yield sock
    finally:
        sock.detach()


def _seed_worker(seed):
    set_num_threads(1)  # the workers share the cores: one thread each, as PyTorch's
    manual_seed(seed)
    random.seed(seed)
    np.random.seed(seed % 2**32)


_WORDS = 4 * 625  # Python's random: 624 words and the index into them
_KEY = 4 * 624  # numpy's MT19937


def _numpy_words():
    """The words and position of numpy's global generator read in place (its
    ``state`` copies them one by one, some hundred times slower), or None where
    it is not numpy's MT19937 (numpy.random.set_bit_generator)."""
    bitgen = np.random.mtrand._rand._bit_generator
    if type(bitgen) is not np.random.MT19937:
        return None
    return ctypes.string_at(bitgen.ctypes.state_address, _KEY + 4)  # uint32_t key[624]; int pos


class _Generators:
    """The generators _seed_worker seeds, followed from task to task in a worker.
    ``moved()`` is a snapshot of them, a tuple that pickles small and fast
    (ddpc's seed and offset; Python's words as bytes and its spare gauss;
    numpy's words as bytes, position, spare gauss, or None for another
    generator), or None where none moved since the last call: most tasks of a
    data set without random augmentation cost a comparison of the words, and
    numpy's state, slow to read, is read only after it moved."""

    def __init__(self):
        self._ddpc = self._random = self._words = self._python_part = self._numpy_part = None
        self._spare = False  # numpy's holds a spare gauss, which a draw can take without moving its words
        self.moved()

    def moved(self):
        ddpc_state = (default_generator._seed, default_generator.offset)
        python, words = random.getstate(), _numpy_words()
        if ddpc_state == self._ddpc and python == self._random and words == self._words and not self._spare:
            return None
        if python != self._random:
            self._random, self._python_part = python, (array.array("I", python[1]).tobytes(), python[2])
        if words is None:
            self._numpy_part = (None, 0, 0, 0.0)
        elif words != self._words or self._spare:
            _, key, pos, has_gauss, gauss = np.random.get_state()
            self._numpy_part = (key.tobytes(), pos, has_gauss, gauss)
            self._spare = bool(has_gauss)
        self._ddpc, self._words = ddpc_state, words
        return ddpc_state + self._python_part + self._numpy_part


def _restore_rng(snapshot):
    seed, offset, words, gauss_next, key, pos, has_gauss, gauss = snapshot
    default_generator._seed, default_generator.offset = seed, offset
    random.setstate((3, tuple(array.array("I", words)), gauss_next))
    if key is not None:
        np.random.set_state(("MT19937", np.frombuffer(key, np.uint32), pos, has_gauss, gauss))


def rng_state(snapshot):
    """A worker's generators (a snapshot _Generators.moved gave) as a loader's state holds
    them: plain data, the words as little-endian bytes, for ddpc.save."""
    if snapshot is None:
        return None
    seed, offset, words, gauss_next, key, pos, has_gauss, gauss = snapshot
    little = "<u4"
    return {"ddpc": [seed, offset],
            "random": [np.frombuffer(words, np.uintc).astype(little).tobytes(), gauss_next],  # array "I": a C uint
            "numpy": None if key is None else [np.frombuffer(key, np.uint32).astype(little).tobytes(), pos,
                                               has_gauss, gauss]}


def rng_snapshot(state, owner):
    """The snapshot a worker restores from a state's entry (rng_state's form);
    ValueError for anything else."""
    if state is None:
        return None
    try:
        (seed, offset), (words, gauss_next) = state["ddpc"], state["random"]
        key, pos, has_gauss, gauss = state["numpy"] or (None, 0, 0, 0.0)
        ok = (sorted(state) == ["ddpc", "numpy", "random"] and isinstance(words, bytes) and len(words) == _WORDS
              and (key is None or isinstance(key, bytes) and len(key) == _KEY)
              and all(isinstance(v, int) and not isinstance(v, bool) for v in (seed, offset, pos, has_gauss))
              and 0 <= seed < 2**64 and offset >= 0 and 0 <= pos <= 624 and has_gauss in (0, 1)
              and (gauss_next is None or isinstance(gauss_next, float)) and isinstance(gauss, float)
              and np.frombuffer(words, "<u4")[-1] <= 624)
    except (TypeError, ValueError, KeyError):
        ok = False
    if not ok:
        raise ValueError(f"{owner}.load_state_dict: a worker's generator state must be what state_dict() gave "
                         f"(ddpc's seed and offset, Python's and numpy's Mersenne Twister words), got {state!r:.200}")
    return (seed, offset, np.frombuffer(words, "<u4").astype(np.uintc).tobytes(), gauss_next,
            None if key is None else np.frombuffer(key, "<u4").astype(np.uint32).tobytes(), pos, has_gauss, gauss)


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
            failed = _Raised(exc, worker_id, "in worker_init_fn of", ends_pass=True)
    generators = _Generators()  # as seeded (and as worker_init_fn left them): what the loader takes None for
    stream, generation, stream_state, blocks = None, None, None, _Blocks()
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
        gen, number, indices, start, rng, released = task
        blocks.release(released)
        if failed is not None:
            result = failed
        else:
            try:
                if indices is None and gen != generation:
                    # A new epoch: the stream from its start, or from where a resumed one was.
                    stream, generation = fetcher.open(*(start or (0, None))), gen
                if rng is not None:  # after opening, so drawing and dropping a resumed stream's batches moves nothing
                    _restore_rng(rng)
                if indices is not None:
                    result = fetcher.fetch(indices)
                else:
                    samples = fetcher.draw(stream)
                    result = _Exhausted() if samples is fetcher.END else fetcher.collate_fn(samples)
                    stream_state = fetcher.stream_state()
            except BaseException as exc:
                result = _Raised(exc, worker_id)
        rng = generators.moved()
        try:
            _send(conn, blocks, (gen, number, result, stream_state, rng))
        except (BrokenPipeError, ConnectionResetError, EOFError):
            return
        except Exception as exc:  # the batch does not pickle (nothing was sent): say so instead
            try:
                _send(conn, blocks, (gen, number, _Raised(exc, worker_id, "sending a batch from"), None, rng))
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


def _stop(procs, conns, mapped):
    """Tells every worker to stop, waits briefly, then terminates those still
    running; unmaps their blocks of shared memory but those of batches still held."""
    for m in mapped:
        m.clear()
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

    def __init__(self, fetcher, num_workers, seed, init_fn, context, rng=None):
        ctx = context
        fork = ctx.get_start_method() == "fork"
        self.seed = seed
        self.procs, self.conns = [], []
        self.mapped = [{} for _ in range(num_workers)]  # each worker's blocks of shared memory: number -> mmap
        self._leases = {}  # (worker, block) -> weak reference to the array a batch in the block is made of
        self._let_go = []  # (worker, block) of the batches gone since the last task, appended by the references
        self._released = [[] for _ in range(num_workers)]  # each worker's blocks to tell it of with its next task
        self._finalizer = weakref.finalize(self, _stop, self.procs, self.conns, self.mapped)
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
        self.rng = [None] * num_workers  # each worker's generators after the last task it answered (None: as seeded)
        self._rng_next = list(rng or self.rng)  # generators to set in each worker before its next task (resuming)

    def _collect(self):
        """Moves the blocks of the batches gone since the last call to their workers' lists to release."""
        while self._let_go:
            w, b = self._let_go.pop()
            del self._leases[w, b]
            self._released[w].append(b)

    def _lease(self, w, b, sizes):
        """The out-of-band buffers of a batch in worker w's block b: views of it,
        the block in use while any is, or copies once _LEASED_BLOCKS per worker are."""
        offsets, nbytes = _layout(sizes)
        lease = np.frombuffer(self.mapped[w][b], np.uint8, nbytes)
        self._collect()
        if len(self._leases) < _LEASED_BLOCKS * len(self.procs):
            self._leases[w, b] = weakref.ref(lease, lambda _, key=(w, b), let_go=self._let_go: let_go.append(key))
        else:
            lease = lease.copy()
            self._released[w].append(b)
        return [lease[at:at + n] for n, at in zip(sizes, offsets)]

    def send(self, w, task):
        """Sends worker w a task, with the generators to set first and the blocks it may fill again (their
        batches are gone)."""
        self._collect()
        try:
            self.conns[w].send(task + (self._rng_next[w], self._released[w]))
        except OSError:  # its end of the pipe is closed: it died (its exit status may take a moment)
            self.procs[w].join(5)
            self._report_dead([(w, self.procs[w])])
        self._rng_next[w] = None
        self._released[w] = []
        self.outstanding[w] += 1

    def receive(self, timeout):
        """[(worker, (generation, number, result, stream state, generators))] of the results ready within
        ``timeout`` seconds (None: until one is); raises RuntimeError if a worker has died."""
        sentinels = {p.sentinel: w for w, p in enumerate(self.procs)}
        ready = multiprocessing.connection.wait(self.conns + list(sentinels), timeout)
        got = []
        for r in ready:
            if r in sentinels:
                continue
            w = self.conns.index(r)
            try:
                payload, sizes, b = _recv(r, self.mapped[w])
            except (EOFError, OSError):
                continue  # its process ended: reported below
            message = pickle.loads(payload, buffers=None if b is None else self._lease(w, b, sizes))
            if message[4] is None:  # the worker's generators did not move: as after its last answer
                message = message[:4] + (self.rng[w],)
            got.append((w, message))
            self.outstanding[w] -= 1
            self.rng[w] = message[4]
        if not got:
            dead = [(w, p) for w, p in enumerate(self.procs) if p.exitcode is not None]
            if dead:
                self._report_dead(dead)
        return got

    def _report_dead(self, dead):
        """Closes the pool and raises RuntimeError naming the dead workers ((worker, process) pairs) and how each ended."""
        self.close()
        raise RuntimeError("; ".join(f"DataLoader worker {w} (pid {p.pid}) {_describe_exit(p)}" for w, p in dead))

    @property
    def alive(self):
        return self._finalizer.alive

    def close(self):
        self._finalizer()


class WorkerBatches:
    """The tasks of one pass over a data set, spread over a WorkerPool, and
    their results in order (or, with ``in_order=False``, as they come).
    ``tasks`` yields each batch's (batch number, indices), batch b going to
    worker b % num_workers, or is None for an IterableDataset (each worker
    streams its own copy). ``finish`` turns a worker's batch into what the
    loader hands out (device, pinning). Stale results of an earlier pass over
    a persistent pool are waited for and dropped before the pass begins, so
    that ``starts`` holds each worker's generators as the pass finds them.

    A resumed pass over an IterableDataset passes ``start``, each worker's
    (batches handed out, data set state), and ``schedule``, what
    ``schedule()`` said when the last of them was handed out."""

    def __init__(self, pool, tasks, prefetch, timeout, finish, owns_pool, remaining, in_order=True, start=None,
                 schedule=None):
        self._pool, self._finish, self._remaining = pool, finish, remaining
        self._timeout = timeout
        self._owns_pool = owns_pool
        self._drain()
        self.starts = list(pool.rng)
        pool.generation += 1
        self._gen = pool.generation
        self._tasks = None if tasks is None else iter(tasks)
        self._active = list(range(len(pool.procs)))  # workers still given tasks, in round-robin order
        self._turn = 0  # the index in _active of the worker the next task goes to
        self._results, self._sent, self._taken = {}, 0, 0
        self._worker_of = {}  # task number -> worker, for the tasks not yet taken
        self._start, self._started = start, set()
        self._in_order = in_order
        self._done = False
        if schedule is None:
            for _ in range(prefetch * len(pool.procs)):
                if not self._send():
                    break
            return
        self._active = list(schedule["active"])
        for w in schedule["pending"]:  # a task in flight to a worker that has run dry only comes back empty
            if w in self._active:
                self._send(w)
        self._turn = schedule["turn"]

    def _drain(self):
        """Waits for the answers to tasks of an earlier pass still in flight (a
        persistent pool's, of a pass dropped mid-way): the workers draw from their
        generators for them before they come to this pass's tasks."""
        deadline = None if not self._timeout else time.monotonic() + self._timeout
        while any(self._pool.outstanding):
            wait = None if deadline is None else deadline - time.monotonic()
            if wait is not None and wait <= 0:
                raise RuntimeError(f"DataLoader timed out after {self._timeout} seconds waiting for the batches of "
                                   "an earlier pass still in its workers")
            self._pool.receive(wait)

    def _send(self, worker=None):
        if not self._active:
            return False
        indices = None
        if self._tasks is not None:
            task = next(self._tasks, None)
            if task is None:
                self._tasks = iter(())
                return False
            batch, indices = task
            worker = batch % len(self._pool.procs)
        if worker is None:
            self._turn %= len(self._active)
            worker = self._active[self._turn]
            self._turn += 1
        start = None
        if self._start is not None and worker not in self._started:
            start = self._start[worker]
            self._started.add(worker)
        self._pool.send(worker, (self._gen, self._sent, indices, start))
        self._worker_of[self._sent] = worker
        self._sent += 1
        return True

    def schedule(self):
        """Where the round-robin stands: the workers still given tasks, the index
        among them of the next one, and the workers of the tasks in flight, in order."""
        return {"active": list(self._active), "turn": self._turn % len(self._active) if self._active else 0,
                "pending": [self._worker_of[t] for t in sorted(self._worker_of)]}

    def _next(self):
        """(the next batch, (its task number, its worker, the worker's stream state
        after it, the schedule after it, the worker's generators after it));
        StopIteration at the end of the pass."""
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
                try:
                    got = self._pool.receive(wait)
                except BaseException:  # a dead worker, a batch that could not be mapped, an interrupt: the pass ends
                    self.close()
                    raise
                for w, (gen, number, result, state, rng) in got:
                    if gen == self._gen:
                        self._results[number] = (w, result, state, rng)
            w, result, state, rng = self._results.pop(number)
            del self._worker_of[number]
            self._taken += 1
            if isinstance(result, _Raised):
                if result.ends_pass:
                    self.close()
                else:  # one batch failed: as in PyTorch, the next next() goes on with the batch after it
                    self._send()
                    self._remaining = max(self._remaining - 1, 0)
                raise result.exception()
            if isinstance(result, _Exhausted):
                if w in self._active:  # its later tasks come back exhausted too: skipped
                    self._active.remove(w)
                    self._turn = 0
                continue
            self._send()
            self._remaining = max(self._remaining - 1, 0)
            return self._finish(result), (number, w, state, self.schedule() if self._tasks is None else None, rng)

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
