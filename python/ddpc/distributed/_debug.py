"""Debugging helpers shaped like torch.distributed's: the debug level
(``DebugLevel``, ``get_debug_level``, ``set_debug_level``,
``set_debug_level_from_env``) and ``breakpoint``.

What each level does in ddpc:

- ``OFF`` (the default): nothing is logged. DistributedDataParallel's error
  for parameters that got no gradient names the first ten of them.
- ``INFO``: DistributedDataParallel logs its bucket layout when it is made,
  on rank 0 of its group (logger ``ddpc.nn.parallel``: each bucket's
  parameters, bytes, dtype and device, and the gradients kept out of the
  buckets); its error for parameters that got no gradient names every one,
  with its shape and index, and the rank.
- ``DETAIL``: INFO's, and every collective on the cpu backend is logged as
  it is launched (logger ``ddpc.distributed``): the rank, the collective's
  sequence number in its group (as the group's errors number it), the call,
  dtype and shapes. Sends and receives, which have no sequence number, are
  not. PyTorch's DETAIL also checks that the ranks' collectives match; ddpc
  checks that at every level.

The records are logging INFO records. At INFO and DETAIL both loggers log
at INFO, and while logging is not configured (the root logger has no
handler) they write to stderr themselves.

The level starts from the environment when ddpc.distributed is imported:
``DDPC_DISTRIBUTED_DEBUG``, else ``TORCH_DISTRIBUTED_DEBUG`` (OFF, INFO or
DETAIL, in any case), as ddpc names its other variables and as PyTorch
reads it. Another value there warns and leaves the level OFF (PyTorch fails
the import); ``set_debug_level_from_env()`` raises ValueError for it.
"""

import collections
import enum
import logging
import os
import pdb
import sys
import warnings

_ENV_NAMES = ("DDPC_DISTRIBUTED_DEBUG", "TORCH_DISTRIBUTED_DEBUG")
_LOGGER_NAMES = ("ddpc.distributed", "ddpc.nn.parallel")
_logger = logging.getLogger("ddpc.distributed")


class DebugLevel(enum.IntEnum):
    """How much ddpc.distributed and DistributedDataParallel tell (see
    ``ddpc.distributed._debug`` for what each level does), as torch.distributed.DebugLevel."""

    OFF = 0
    INFO = 1
    DETAIL = 2


_level = DebugLevel.OFF
detail = False  # whether the level is DETAIL: read on every collective, so a plain attribute


class _StderrUnlessConfigured(logging.StreamHandler):
    """Writes records to this moment's sys.stderr while the root logger has
    no handler: the levels show without any logging setup, and once there is
    one the records go there alone."""

    def __init__(self):
        super().__init__()
        self.setFormatter(logging.Formatter("%(name)s: %(message)s"))

    def emit(self, record):
        if not logging.getLogger().handlers:
            self.stream = sys.stderr
            super().emit(record)


_handler = _StderrUnlessConfigured()
_saved_levels = {}  # logger name -> its level before a debug level raised it


def _as_level(level):
    if isinstance(level, str):
        try:
            return DebugLevel[level.strip().upper()]
        except KeyError:
            raise ValueError(f"unknown debug level {level!r}: use OFF, INFO or DETAIL") from None
    if isinstance(level, bool) or not isinstance(level, int):
        raise TypeError(f"set_debug_level takes a DebugLevel, got {type(level).__name__}")
    try:
        return DebugLevel(level)
    except ValueError:
        raise ValueError(f"unknown debug level {level!r}: use DebugLevel.OFF, INFO or DETAIL") from None


def get_debug_level():
    """The current ``DebugLevel``."""
    return _level


def set_debug_level(level):
    """Sets the debug level: a ``DebugLevel`` (or its name). At INFO and
    DETAIL the loggers ``ddpc.distributed`` and ``ddpc.nn.parallel`` log at
    INFO; back at OFF they get the levels they had."""
    global _level, detail
    _level = _as_level(level)
    detail = _level is DebugLevel.DETAIL
    for name in _LOGGER_NAMES:
        logger = logging.getLogger(name)
        if _level is DebugLevel.OFF:
            if name in _saved_levels:
                logger.setLevel(_saved_levels.pop(name))
            logger.removeHandler(_handler)
        else:
            _saved_levels.setdefault(name, logger.level)
            logger.setLevel(logging.INFO)
            if _handler not in logger.handlers:
                logger.addHandler(_handler)


def _level_from_env():
    """The level the environment names, or None where it names none."""
    for name in _ENV_NAMES:
        value = os.environ.get(name, "").strip()
        if value:
            try:
                return DebugLevel[value.upper()]
            except KeyError:
                raise ValueError(f"the value of {name} must be OFF, INFO or DETAIL, got {value!r}") from None
    return None


def set_debug_level_from_env():
    """Sets the debug level from ``DDPC_DISTRIBUTED_DEBUG``, else
    ``TORCH_DISTRIBUTED_DEBUG`` (OFF where neither is set); another value is
    a ValueError."""
    set_debug_level(_level_from_env() or DebugLevel.OFF)


def _set_from_env_at_import():
    """As set_debug_level_from_env, but a bad value warns instead of failing the import."""
    try:
        set_debug_level_from_env()
    except ValueError as e:
        warnings.warn(f"{e}; the debug level stays OFF", RuntimeWarning, stacklevel=2)


def log_collective(g, api, args, dtype_name):
    """At DETAIL: a collective of group ``g`` (cpu backend) about to be
    launched; its C call's ``args`` are its buffers (a complex tensor's as
    its real pairs, see real_pairs), then its dtype code."""
    buffers = [a for a in args if hasattr(a, "shape")]
    code = next((a for a in args[len(buffers):] if isinstance(a, int)), None)
    what = ""
    if buffers and code is not None:
        name = dtype_name(code)
        pairs = name.startswith("complex")
        shapes = [tuple(a.shape)[:-1] if pairs and isinstance(a.dtype, str) else tuple(a.shape) for a in buffers]
        what = f" {name} {', '.join(map(str, shapes))}"
    _logger.info("rank %d: collective #%d %s%s in a group of %d (ranks %s)", g.ranks[g.rank()], g._c.next_seq,
                 api, what, g.size(), g.ranks)


# ---- breakpoint ----------------------------------------------------------------------

_skipped = collections.Counter()  # call site -> calls seen, for skip=
_breaks = collections.Counter()   # the job's key prefix -> breakpoints this rank reached in it
_stdin = None                     # a text stream over fd 0, made once


def _terminal_input():
    """What the debugger reads: sys.stdin where it reads fd 0 (under
    ddpc-run, workers read the launcher's standard input), else a stream
    over fd 0 (multiprocessing's children, ddpc.spawn's, have sys.stdin
    reading /dev/null but fd 0 still open), kept for the next session since
    it reads ahead."""
    global _stdin
    try:
        if sys.stdin is not None and not sys.stdin.closed and sys.stdin.fileno() == 0:
            return sys.stdin
    except (OSError, ValueError):
        pass
    if _stdin is None:
        try:
            _stdin = open(0, closefd=False)  # noqa: SIM115  (kept open: it outlives each session)
        except OSError:
            return sys.stdin
    return _stdin


class _DistributedPdb(pdb.Pdb):
    """pdb reading this process's standard input even where sys.stdin was replaced."""

    def interaction(self, *args, **kwargs):
        saved = sys.stdin
        sys.stdin = _terminal_input()
        try:
            super().interaction(*args, **kwargs)
        finally:
            sys.stdin = saved


def breakpoint(rank=0, skip=0, timeout_s=3600):  # noqa: A001  (torch.distributed's name)
    """Stops rank ``rank`` in pdb while the other ranks wait for it to go on,
    as torch.distributed.breakpoint; every rank calls it. ``skip``: the first
    ``skip`` calls from this line return at once (on every rank alike).
    The other ranks wait at most ``timeout_s`` seconds (None: the default
    group's timeout), then raise DistStoreTimeoutError; they wait on the
    store, not in a collective, so the group's own timeout does not cut the
    session short and is left as it is (PyTorch raises every group's
    timeout to ``timeout_s`` instead). pdb reads this process's standard
    input, also under ddpc-run (the launcher's) and ddpc.spawn. Without a
    process group this process is rank 0 and nothing waits."""
    from .. import distributed as dist

    if isinstance(rank, bool) or not isinstance(rank, int) or isinstance(skip, bool) or not isinstance(skip, int):
        raise TypeError("breakpoint: rank and skip must be integers")
    if skip < 0:
        raise ValueError(f"breakpoint: skip must be >= 0, got {skip}")
    if timeout_s is not None and not timeout_s > 0:
        raise ValueError(f"breakpoint: timeout_s must be a positive number of seconds or None, got {timeout_s!r}")
    initialized = dist.is_initialized()
    world = dist.get_world_size() if initialized else 1
    if not 0 <= rank < world:
        raise ValueError(f"breakpoint: rank {rank} is not in [0, {world})")
    if skip:
        caller = sys._getframe(1)
        site = (caller.f_code.co_filename, caller.f_lineno)
        _skipped[site] += 1
        if _skipped[site] <= skip:
            _logger.info("breakpoint skipped (call %d of the %d to skip)", _skipped[site], skip)
            return
    me = dist.get_rank() if initialized else 0
    if me == rank:
        debugger = _DistributedPdb()
        debugger.message(f"\n!!! ATTENTION !!!\n\nType 'up' to get to the frame that called "
                         f"ddpc.distributed.breakpoint(rank={rank})\n")
        debugger.set_trace(sys._getframe())
    if initialized:
        _leave_breakpoint(dist._world, me == rank, rank, timeout_s)


def _leave_breakpoint(world, debugged, rank, timeout_s):
    """The debugged rank says it went on; the others wait for that."""
    _breaks[world.prefix] += 1
    key = f"{world.prefix}breakpoint/{_breaks[world.prefix]}"
    if debugged:
        world.store.set(key, b"")
        return
    timeout = world.timeout if timeout_s is None else float(timeout_s)
    from .._C import DistTimeoutError

    try:
        world.store.wait([key], timeout)
    except DistTimeoutError as e:
        raise type(e)(f"breakpoint: rank {rank} did not leave the debugger within {timeout:g} s") from None


_set_from_env_at_import()
