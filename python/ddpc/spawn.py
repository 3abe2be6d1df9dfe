"""ddpc.spawn: run a function in N processes that form a process group.

Children are forked, so a function defined in a notebook cell works, unless
this process has already used CUDA: the driver does not survive a fork, so
then they start as fresh interpreters, as torch.multiprocessing.spawn's do,
and ``fn`` must be importable. Each
child keeps the parent's environment, with what ``init_process_group()``
reads filled in where the parent has none (``_child_env`` says which), so
``fn(rank, *args)`` may call it with no arguments, and children of several
parents that name one MASTER_ADDR and MASTER_PORT meet there, as
torch.multiprocessing.spawn's do. Tensors in ``args`` are the parent's, as
under torch.multiprocessing.spawn (see ``spawn``). Return values come back
to the parent by rank (None, with a warning from the child, for one that
cannot be pickled; torch.multiprocessing.spawn returns none); a child's
exception is re-raised in the parent with the child's rank and traceback,
after the other children have been stopped.
"""

import multiprocessing
import multiprocessing.connection
import os
import pickle
import signal
import sys
import threading
import time
import traceback
import warnings
from multiprocessing.reduction import ForkingPickler

from . import _C
from ._procs import describe_exit, die_with_parent, free_port, new_token, remove_shm_segments
from ._threads import per_rank_threads, set_num_threads, user_chose_threads


class ProcessException(Exception):
    """A spawned process failed: its ``rank`` (PyTorch's ``error_index``) and ``pid``."""

    def __init__(self, msg, rank, pid):
        super().__init__(msg)
        self.rank = self.error_index = rank
        self.pid = pid


class ProcessRaisedException(ProcessException):
    """A spawned process raised; the child's ``child_traceback`` is attached."""

    def __init__(self, msg, rank, child_traceback, pid=None):
        super().__init__(msg, rank, pid)
        self.child_traceback = child_traceback


class ProcessExitedException(ProcessException):
    """A spawned process ended without returning (killed, os._exit, or sys.exit
    with a nonzero code): its ``exit_code`` (negative: the signal's number)
    and, where a signal killed it, ``signal_name``."""

    def __init__(self, msg, rank, exit_code, pid=None):
        super().__init__(msg, rank, pid)
        self.exit_code = exit_code
        self.error_pid = pid
        self.signal_name = None
        if exit_code is not None and exit_code < 0:
            try:
                self.signal_name = signal.Signals(-exit_code).name
            except ValueError:
                pass


def _exit_code(e):
    """The exit status of a process that SystemExit ``e`` ends (the OS keeps 8 bits)."""
    if e.code is None:
        return 0
    return e.code & 0xFF if isinstance(e.code, int) else 1


def _child_env(rank, nprocs, port, token, own_rendezvous):
    """The variables that child ``rank`` gets on top of the parent's environment.

    What the parent has set is kept, as torch.multiprocessing.spawn keeps
    it (it sets none of these), so that a multi-node script, whose parents
    each name the master and whose children pass their global rank and the
    world size, rendezvous as under PyTorch: RANK and WORLD_SIZE (the
    child's rank and ``nprocs``) come only where the parent has neither,
    LOCAL_RANK and LOCAL_WORLD_SIZE likewise, MASTER_ADDR (127.0.0.1) and
    MASTER_PORT (``port``) each where missing. The store's token: the
    parent's DDPC_STORE_TOKEN, else ``token`` where spawn picked the port
    (the rendezvous is these children's alone), else none, as ddpc-run's on
    several nodes, so that other parents' children are let in. With
    ``own_rendezvous`` (the parent is a rank of a running group, whose store
    holds MASTER_PORT) every one of them is spawn's."""
    env = {} if own_rendezvous else os.environ
    out = {}
    if "RANK" not in env and "WORLD_SIZE" not in env:
        out.update(RANK=str(rank), WORLD_SIZE=str(nprocs))
    if "LOCAL_RANK" not in env and "LOCAL_WORLD_SIZE" not in env:
        out.update(LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(nprocs))
    if not env.get("MASTER_ADDR"):
        out["MASTER_ADDR"] = "127.0.0.1"
    if not env.get("MASTER_PORT"):
        out["MASTER_PORT"] = str(port)
    if not env.get("DDPC_STORE_TOKEN"):
        out["DDPC_STORE_TOKEN"] = token if "MASTER_PORT" in out else ""
    if "DDPC_RESTART_COUNT" not in env:
        out["DDPC_RESTART_COUNT"] = "0"
    return out


def _fresh_random_state():
    """A forked child draws numbers of its own, as a fresh interpreter (torch's
    spawned children) does: ddpc's global generator and numpy's get seeds of
    the operating system's entropy (Python's random reseeds itself after a fork)."""
    import numpy as np

    from .tensor import seed

    seed()
    np.random.seed()


def _fork_payloads(args, nprocs):
    """What forked children get of ``args``: a pickle each, made by
    multiprocessing's pickler as for a 'spawn' child (torch.multiprocessing.spawn's
    default), which moves cpu tensors into shared memory so that the
    children's writes reach the parent's tensors and modules; or None where
    ``args`` hold no tensor (forked children then inherit them, large arrays
    included, without a copy) or cannot be pickled (a lambda, a lock), which
    forked children can do without: they inherit copy-on-write copies,
    sharing only the tensors already in shared memory."""
    from .multiprocessing import _recording_sends, _tensors_to_send

    try:
        if not _tensors_to_send(args):
            return None
    except (pickle.PicklingError, AttributeError, TypeError):
        return None
    payloads = []
    for _ in range(nprocs):
        with _recording_sends() as sent:
            payloads.append((ForkingPickler.dumps(args), sent))
    return payloads


def _child(fn, rank, nprocs, args, pickled, env, conn, forked_by_main_thread):
    die_with_parent(forked_by_main_thread)
    if not user_chose_threads():  # the ranks share the machine's cores
        set_num_threads(per_rank_threads(nprocs))
    os.environ.update(env)
    _fresh_random_state()
    exit_exc = None
    try:
        if pickled:
            args = pickle.loads(args)
        result = ("ok", fn(rank, *args))
    except SystemExit as e:
        # As in torch.multiprocessing.spawn: sys.exit(0) is a success (the
        # return value is None), any other code a failure with that code.
        exit_exc = e
        result = ("ok", None) if _exit_code(e) == 0 else ("exit", _exit_code(e))
    except BaseException as e:
        result = ("error", f"{type(e).__name__}: {e}", traceback.format_exc())
    # Leave the group cleanly (forked children skip atexit handlers). After a
    # failure the other ranks may be waiting for this one, so it does not
    # wait for them to leave.
    from . import distributed

    try:
        distributed._leave(wait_for_others=result[0] == "ok")
    except Exception:
        pass
    try:
        payload = pickle.dumps(result)
    except Exception as e:
        # torch.multiprocessing.spawn drops every return value; ddpc keeps the ones it can send.
        warnings.warn(f"ddpc.spawn: the return value of rank {rank} ({type(result[1]).__name__}) cannot be sent to "
                      f"the parent ({type(e).__name__}: {e}); the parent gets None for it", RuntimeWarning)
        payload = pickle.dumps(("ok", None))
    conn.send_bytes(payload)
    conn.close()
    if exit_exc is not None:
        raise exit_exc


def _time_left(deadline):
    """Seconds until ``deadline`` (a time.monotonic() value; None: no limit)."""
    return None if deadline is None else max(0.0, deadline - time.monotonic())


class SpawnContext:
    """The running children of ``spawn(..., join=False)``; ``join()`` returns their results."""

    def __init__(self, processes, conns, sends=None):
        self.processes = processes
        self._conns = conns
        self._results = {}
        self._sends = sends or [[] for _ in processes]  # by rank: the shared buffers sent to it by name

    def pids(self):
        return [p.pid for p in self.processes]

    def _stop(self):
        for p in self.processes:
            if p.is_alive():
                p.terminate()
        for p in self.processes:
            p.join(5)
            if p.is_alive():
                p.kill()
                p.join()
        remove_shm_segments(self.pids(), stopped=True)
        self._release_sends()

    def _release_sends(self):
        """Drops the references to this process's shared tensors (a model's
        parameters in ``args``, say) taken for each child that a signal
        ended: it never drops them, and they would keep the segments in
        /dev/shm after this process ends."""
        for p, sent in zip(self.processes, self._sends):
            if p.exitcode is not None and p.exitcode < 0:
                for buf in sent:
                    buf.unsend_shared()
                sent.clear()

    def join(self, timeout=None):
        """Waits for every child; returns the return values by rank, or raises
        the first failure (after stopping the others). With a timeout, returns
        None if the children are still running when it passes. An interrupt
        (Ctrl-C, a notebook's stop button) stops the children."""
        try:
            return self._join(timeout)
        except BaseException:
            self._stop()
            raise

    def _join(self, timeout):
        deadline = None if timeout is None else time.monotonic() + timeout
        pending = {c: r for r, c in enumerate(self._conns) if r not in self._results}
        sentinels = {p.sentinel: r for r, p in enumerate(self.processes)}
        while pending:
            ready = multiprocessing.connection.wait(list(pending) + list(sentinels), _time_left(deadline))
            if not ready:
                return None
            for obj in ready:
                if obj in pending:
                    rank = pending.pop(obj)
                    try:
                        self._results[rank] = pickle.loads(obj.recv_bytes())
                    except EOFError:
                        self._results[rank] = None
                elif obj in sentinels:
                    rank = sentinels.pop(obj)
                    conn = self._conns[rank]
                    if rank not in self._results and conn in pending and not conn.poll():
                        pending.pop(conn)
                        self._results[rank] = None
            self._raise_failure()
        for p in self.processes:
            p.join(_time_left(deadline))
            if p.is_alive():
                return None
        remove_shm_segments(self.pids())
        self._release_sends()
        return [self._results[r][1] for r in range(len(self.processes))]

    def _raise_failure(self):
        for rank in sorted(self._results):
            res = self._results[rank]
            if res is not None and res[0] == "ok":
                continue
            self._stop()
            pid = self.processes[rank].pid
            if res is None:
                code = self.processes[rank].exitcode
                raise ProcessExitedException(f"process {rank} ended without a result ({describe_exit(code)})",
                                             rank, code, pid)
            if res[0] == "exit":
                raise ProcessExitedException(f"process {rank} exited with {describe_exit(res[1])}", rank, res[1],
                                             pid)
            raise ProcessRaisedException(f"\n\n-- process {rank} raised {res[1]}\n\n{res[2]}", rank, res[2], pid)


def _check_importable(fn, start_method):
    """Refuses, before any child starts, an ``fn`` that a fresh interpreter
    could not import: one defined in an interactive session (a notebook, a
    REPL, ``python -c``), whose ``__main__`` has no file; each child would
    otherwise die unpickling it, with the reason on its stderr only."""
    path = getattr(sys.modules.get("__main__"), "__file__", None)  # '<stdin>' for python -
    if getattr(fn, "__module__", None) == "__main__" and not (path and os.path.isfile(path)):
        raise RuntimeError(f"start_method={start_method!r} starts fresh interpreters, which must import fn, and "
                           f"{getattr(fn, '__qualname__', fn)!r} is defined in an interactive session (a notebook or "
                           "a REPL), which they cannot import. Move fn into a module file and import it, or call "
                           "ddpc.spawn before any CUDA call (ddpc.cuda.is_available() included) so that the "
                           "children can be forked.")


def spawn(fn, args=(), nprocs=1, join=True, daemon=False, start_method=None):
    """Runs ``fn(rank, *args)`` in ``nprocs`` processes with RANK, LOCAL_RANK,
    WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT and a store token
    set where the parent's environment has none, and returns
    ``[fn(0, ...), fn(1, ...), ...]``.

    Where ddpc differs: torch.multiprocessing.spawn sets none of them.
    A parent that is a rank of a running process group gives its children
    a rendezvous of their own (its group's store holds its MASTER_PORT).

    ``args`` reach the children pickled as by torch.multiprocessing.spawn, forked
    children's included: a cpu tensor, a module's parameters among them, is
    moved into shared memory in place and the children map it, so what they
    write into it (a model they train) is the parent's (see
    ddpc.multiprocessing); a forked child is given ``args`` that cannot be
    pickled as copies.

    ``start_method``: 'fork', or 'spawn'/'forkserver' (fresh interpreters that
    import ``fn`` and unpickle ``args``). The default forks, and starts fresh
    interpreters once this process has used CUDA (``ddpc.cuda.is_available()``
    included), since a forked child could not. Children forked after that
    anyway (``'fork'``) work on the host, and see no GPU, with a reason that
    says why."""
    if start_method is None:
        start_method = "spawn" if _C.cuda_fork_unsafe() else "fork"
    if start_method not in ("fork", "spawn", "forkserver"):
        raise ValueError(f"start_method must be 'fork', 'spawn' or 'forkserver', got {start_method!r}")
    if nprocs < 1:
        raise ValueError("nprocs must be at least 1")
    if start_method != "fork":
        _check_importable(fn, start_method)
    ctx = multiprocessing.get_context(start_method)
    from . import distributed
    from .multiprocessing import _recording_sends

    port, token, in_group = free_port(), new_token(), distributed.is_initialized()
    forked_by_main_thread = threading.current_thread() is threading.main_thread()
    payloads = _fork_payloads(args, nprocs) if start_method == "fork" else None
    processes, conns, sends = [], [], []
    for rank in range(nprocs):
        env = _child_env(rank, nprocs, port, token, in_group)
        reader, writer = ctx.Pipe(duplex=False)
        child_args = (args, False) if payloads is None else (payloads[rank][0], True)
        p = ctx.Process(target=_child, args=(fn, rank, nprocs, *child_args, env, writer, forked_by_main_thread),
                        daemon=daemon)
        try:
            with _recording_sends() as sent:  # a fresh interpreter's args are pickled here
                p.start()
        except (pickle.PicklingError, AttributeError, TypeError) as e:
            reader.close()
            writer.close()
            if start_method == "fork":
                raise
            raise RuntimeError(f"start_method={start_method!r} starts fresh interpreters, which must import fn and "
                               f"unpickle args, and these cannot be pickled ({type(e).__name__}: {e}). Define fn at "
                               "the top level of an importable module, or call ddpc.spawn before any CUDA call "
                               "so that the children can be forked.") from e
        writer.close()
        processes.append(p)
        conns.append(reader)
        sends.append(sent + (payloads[rank][1] if payloads is not None else []))
    context = SpawnContext(processes, conns, sends)
    return context.join() if join else context
