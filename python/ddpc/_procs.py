"""Process helpers shared by the launcher (run.py) and ddpc.spawn."""

import ctypes
import glob
import os
import secrets
import signal
import socket

_PR_SET_PDEATHSIG = 1
_libc = ctypes.CDLL(None, use_errno=True)


def free_port():
    """A TCP port that was free a moment ago (for single-node jobs)."""
    with socket.socket() as s:
        s.bind(("", 0))
        return s.getsockname()[1]


def new_token():
    return secrets.token_hex(16)


def die_with_parent():
    """In a child right after fork: its own process group (so the launcher can
    signal the worker and everything it starts) and SIGKILL when the parent dies."""
    os.setpgid(0, 0)
    _libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def remove_shm_segments(pids):
    """Removes shared-memory segments that workers with these pids created and
    could not unlink because they were killed while setting them up."""
    for pid in pids:
        for path in glob.glob(f"/dev/shm/ddpc-{pid}-*"):
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
