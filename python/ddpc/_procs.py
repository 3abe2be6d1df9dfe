"""Process helpers shared by the launcher (run.py) and ddpc.spawn."""

import ctypes
import glob
import multiprocessing
import os
import secrets
import signal
import socket
import threading

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def free_port():
    """A TCP port that was free a moment ago (for single-node jobs)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def new_token():
    return secrets.token_hex(16)


def die_with_parent(forked_by_main_thread=True):
    """In a child right after fork: a session of its own, whose process group
    is the child's pid (so the launcher can signal the worker and everything
    it starts), and SIGKILL when the parent dies.

    A new session, as torchrun's workers get (start_new_session), rather than
    a process group in the launcher's: a background group of the terminal's
    session is stopped (SIGTTIN) when it reads the terminal (``input()``, pdb),
    where a process of another session reads the inherited terminal as a file.
    Either way, Ctrl-C at the terminal reaches only the launcher, which passes
    it on.

    The kernel sends PR_SET_PDEATHSIG's signal when the thread that forked
    ends, which for any thread but the main one can be long before its
    process does; a multiprocessing child forked by another thread watches
    its parent process from a thread instead."""
    os.setsid()
    if forked_by_main_thread:
        _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    else:
        threading.Thread(target=_kill_self_when_parent_exits, daemon=True).start()


def _kill_self_when_parent_exits():
    multiprocessing.parent_process().join()
    os.kill(os.getpid(), signal.SIGKILL)


def remove_shm_segments(pids, stopped=False):
    """Removes shared-memory segments that workers with these pids created and
    could not unlink because they were killed while setting them up. With
    ``stopped`` (the workers were terminated, their job failed) also their
    tensors' segments (``share_memory_``): a killed worker never drops its
    references, and a name it sent that nobody opened holds one too."""
    patterns = ("ddpc-{}-*", "ddpc_{}_*") if stopped else ("ddpc-{}-*",)
    for pid in pids:
        for path in (p for pattern in patterns for p in glob.glob("/dev/shm/" + pattern.format(pid))):
            try:
                os.unlink(path)
            except OSError:
                pass


def describe_exit(code):
    if code < 0:
        try:
            return f"killed by signal {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exit code {code}"
