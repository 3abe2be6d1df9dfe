"""ddpc.profiler: where a training step spends its time, shaped like torch.profiler.

``profile`` records ranges, each on the thread that ran it, from these points:

- every Module forward, named ``nn.Module: <class name>`` (through the global
  module forward hooks, so a module's own forward hooks are outside its range);
- every autograd node's backward, named as ``tensor.grad_fn.name()`` names the
  node (``LinearBackward``, ``CrossEntropyLossBackward``, ...);
- ``Optimizer.step#Adam.step`` and ``Optimizer.zero_grad#Adam.zero_grad``, as
  PyTorch names them;
- each batch a DataLoader iterator hands out,
  ``enumerate(DataLoader)#<iterator class>.__next__`` (for a prefetched loader:
  the time the training loop waits for the batch), and each batch its
  background thread fetches, ``DataLoader.fetch`` (on that thread);
- each collective of ddpc.distributed, named as PyTorch's profiler names the
  torch.distributed function's (``c10d::allreduce_`` for ``all_reduce``,
  ``c10d::_allgather_base_`` for ``all_gather_into_tensor``, ...), with its
  size in bytes, and each ``Work.wait()`` of an asynchronous one,
  ``ddpc.distributed.Work.wait``;
- DistributedDataParallel's ``DistributedDataParallel.launch_bucket`` (the
  comm hook starting one bucket's all-reduce) and
  ``DistributedDataParallel.finish_reduction`` (waiting for every bucket's
  reduction at the end of backward and installing the reduced gradients);
- ``ProfilerStep#N`` for each step when a schedule is given (one
  ``ProfilerStep*`` row in the table, as PyTorch's), and the ranges of
  ``record_function``.

A range's self time is its time minus that of the ranges nested in it on
the same thread. Where no profile is recording, each of these points costs
one check of a module-level flag.

Differences from PyTorch's profiler: ddpc records its Python-level
operations and modules, not each C op or CUDA kernel: the time of the C ops
(matmuls, elementwise kernels, collectives' C work) is in the self time of
the module, node or call that ran them, and there are no ``aten::`` rows.
CUDA ops are asynchronous, so with ``ProfilerActivity.CUDA`` the times of
work on a GPU are the host's launch times unless the code synchronizes
(``ddpc.cuda.synchronize()``); there is no device timeline, and the device
time columns are zero. An asynchronous collective's range is its launch; the
time it then takes shows in the ``Work.wait`` range that waits for it (for
DistributedDataParallel, inside ``finish_reduction``); ``all_to_all`` ranges
enclose a ``c10d::send`` and a ``c10d::recv_`` range per peer, the messages it
is made of. ``profile_memory`` records nothing on the host; with
``ProfilerActivity.CUDA`` on a machine with a GPU, each range records how
``ddpc.cuda.memory_allocated()`` of the current device changed across it (the
"CUDA Mem" columns). With ``with_flops``, each matmul, linear and batched 2-d
convolution records a range named as the PyTorch op that does its work
(``aten::mm``, ``aten::bmm``, ``aten::addmm``, ``aten::conv2d``) with its FLOPs
by PyTorch's formulas (the table's "Total FLOPs" column; operations PyTorch
counts none of record none), forward calls only: backward's products are
C calls. ``with_modules`` (module ranges are always recorded) and
``experimental_config`` change nothing, and PyTorch's
``execution_trace_observer``, ``custom_trace_id_callback`` and
``post_processing_timeout_s`` are not taken. Warmup steps record nothing
(PyTorch records them and drops the result). One profile records at a time
in a process. This module is also ``ddpc.autograd.profiler`` (for
``record_function``); its ``profile`` is this one, which does not take the
legacy ``torch.autograd.profiler.profile`` arguments (``enabled``,
``use_device``, ``use_kineto``, ...).
"""

import enum
import functools
import gzip
import itertools
import json
import math
import os
import socket
import sys
import threading
import time
import warnings

import numpy as np

__all__ = ["EventList", "FunctionEvent", "FunctionEventAvg", "ProfilerAction", "ProfilerActivity", "profile",
           "record_function", "schedule", "supported_activities", "tensorboard_trace_handler"]

# True while a profile records: the one check every hook point makes (as
# torch.autograd.profiler._is_profiler_enabled).
_is_profiler_enabled = False
# True while a profile with with_flops records: the check of the ops that count FLOPs.
_counting_flops = False
# The recording profile's _Window (None when none records).
_window = None
# Per thread: the window its stack of open ranges belongs to, the stack, its thread id.
_local = threading.local()
_frame_ids = itertools.count(1)
_PACKAGE_DIR = os.path.dirname(os.path.abspath(__file__)) + os.sep


class ProfilerActivity(enum.Enum):
    """What a profile records: CPU (host) ranges; CUDA is taken, and records
    the host's launch times of GPU work (see the module docstring)."""

    CPU = 0
    CUDA = 1


class ProfilerAction(enum.Enum):
    """What a schedule asks for at a step, as torch.profiler.ProfilerAction."""

    NONE = 0
    WARMUP = 1
    RECORD = 2
    RECORD_AND_SAVE = 3


def supported_activities():
    """The activities a profile here can be asked for: CPU, and CUDA where a GPU is usable."""
    from . import cuda

    return {ProfilerActivity.CPU, ProfilerActivity.CUDA} if cuda.is_available() else {ProfilerActivity.CPU}


def schedule(*, wait, warmup, active, repeat=0, skip_first=0, skip_first_wait=0):
    """A profile's ``schedule``, as torch.profiler.schedule: skip ``skip_first``
    steps, then cycle through ``wait`` steps, ``warmup`` steps and ``active``
    recorded steps, ``repeat`` times (0: until the profile stops). The last
    active step of a cycle is RECORD_AND_SAVE: ``on_trace_ready`` runs after it.
    ``skip_first_wait`` skips the first cycle's wait."""

    def schedule_fn(step):
        if step < 0:
            raise AssertionError(f"Step must be non-negative. Got {step}.")
        if step < skip_first:
            return ProfilerAction.NONE
        step -= skip_first
        if skip_first_wait != 0:
            step += wait
        num_steps = wait + warmup + active
        if repeat > 0 and step / num_steps >= repeat:
            return ProfilerAction.NONE
        mod_step = step % num_steps
        if mod_step < wait:
            return ProfilerAction.NONE
        if mod_step < wait + warmup:
            return ProfilerAction.WARMUP
        return ProfilerAction.RECORD if mod_step < num_steps - 1 else ProfilerAction.RECORD_AND_SAVE

    if wait < 0 or warmup < 0 or active <= 0 or repeat < 0 or skip_first < 0:
        raise AssertionError(
            f"Invalid profiler schedule arguments. Got wait={wait} (need >= 0), warmup={warmup} (need >= 0), "
            f"active={active} (need > 0), repeat={repeat} (need >= 0), skip_first={skip_first} (need >= 0).")
    if warmup == 0:
        warnings.warn("Profiler won't be using warmup, this can skew profiler results", stacklevel=2)
    return schedule_fn


def _record_every_step(_step):
    return ProfilerAction.RECORD


def tensorboard_trace_handler(dir_name, worker_name=None, use_gzip=False):
    """An ``on_trace_ready`` that writes each cycle's Chrome trace to
    ``dir_name/<worker_name>.<time in ns>.pt.trace.json`` (``.gz`` with
    ``use_gzip``), the files TensorBoard's profiler plugin and Perfetto read.
    ``worker_name`` defaults to ``<hostname>_<pid>``; give each rank its own."""

    def handler_fn(prof):
        nonlocal worker_name
        try:
            os.makedirs(dir_name, exist_ok=True)
        except OSError as e:
            raise RuntimeError(f"Can't create directory: {dir_name}") from e
        if not worker_name:
            worker_name = f"{socket.gethostname()}_{os.getpid()}"
        file_name = f"{worker_name}.{time.time_ns()}.pt.trace.json" + (".gz" if use_gzip else "")
        prof.export_chrome_trace(os.path.join(dir_name, file_name))

    return handler_fn


# ---- recording -----------------------------------------------------------------------


class _Window:
    """One recording window: its finished ranges and what each range records."""

    def __init__(self, record_shapes, with_stack, memory):
        self.records = []
        self.thread_names = {}
        self.record_shapes, self.with_stack, self.memory = record_shapes, with_stack, memory
        self.start_ns = time.perf_counter_ns()


class _Frame:
    """An open range."""

    __slots__ = ("id", "name", "category", "owner", "shapes", "metadata", "stack", "memory", "start",
                 "children_ns", "children_memory")

    def __init__(self, name, category, owner, shapes, metadata, stack, memory):
        self.id = next(_frame_ids)
        self.name, self.category, self.owner = name, category, owner
        self.shapes, self.metadata, self.stack, self.memory = shapes, metadata, stack, memory
        self.children_ns = self.children_memory = 0


def _shapes(inputs):
    return [list(s) if (s := getattr(x, "shape", None)) is not None else [] for x in inputs]


def _user_stack():
    """The Python stack that opened a range, innermost first, without ddpc's own frames."""
    out = []
    frame = sys._getframe(2)
    while frame is not None:
        code = frame.f_code
        if not code.co_filename.startswith(_PACKAGE_DIR):
            out.append(f"{code.co_filename}({frame.f_lineno}): {code.co_name}")
        frame = frame.f_back
    return out


def _open(name, inputs=(), metadata=None, owner=None, category="cpu_op"):
    """Opens a range on this thread; returns what ``_close`` takes, or None
    when no profile records. ``inputs`` are the objects whose shapes
    ``record_shapes`` keeps; ``owner`` is what ``_close_owned`` finds it by."""
    window = _window
    if window is None:
        return None
    local = _local
    if getattr(local, "window", None) is not window:
        # Ranges left open by an earlier recording window (or by an exception) are dropped here.
        local.window, local.stack, local.tid = window, [], threading.get_native_id()
        window.thread_names[local.tid] = threading.current_thread().name
    frame = _Frame(name, category, owner, _shapes(inputs) if window.record_shapes else None, metadata,
                   _user_stack() if window.with_stack else None,
                   window.memory() if window.memory is not None else 0)
    local.stack.append(frame)
    frame.start = time.perf_counter_ns()
    return frame


def _close(frame):
    """Closes ``frame`` (and any range opened above it that an exception left open)
    and records it, unless the window it was opened in has stopped."""
    end = time.perf_counter_ns()
    window = _window
    local = _local
    if window is None or getattr(local, "window", None) is not window:
        return
    stack = local.stack
    if stack and stack[-1] is frame:
        stack.pop()
    else:
        for i in range(len(stack) - 1, -1, -1):
            if stack[i] is frame:
                del stack[i:]
                break
        else:
            return
    elapsed = end - frame.start
    memory = window.memory() - frame.memory if window.memory is not None else 0
    parent = stack[-1] if stack else None
    if parent is not None:
        parent.children_ns += elapsed
        parent.children_memory += memory
    window.records.append((frame, local.tid, end, elapsed - frame.children_ns, memory,
                            None if parent is None else parent.id))


def _close_owned(owner):
    """Closes the innermost open range of this thread that ``owner`` opened."""
    if getattr(_local, "window", None) is not _window:
        return
    for frame in reversed(_local.stack):
        if frame.owner is owner:
            _close(frame)
            return


def _module_pre_hook(module, args):
    _open("nn.Module: " + type(module).__name__, args, owner=module, category="python_function")


def _module_hook(module, args, output):
    _close_owned(module)


# The range of each ddpc.distributed collective, named as PyTorch's profiler
# names it (after the c10d op that the torch.distributed function calls).
_COLLECTIVE_NAMES = {
    "all_reduce": "c10d::allreduce_", "broadcast": "c10d::broadcast_", "reduce": "c10d::reduce_",
    "all_gather": "c10d::allgather_", "all_gather_into_tensor": "c10d::_allgather_base_", "gather": "c10d::gather_",
    "scatter": "c10d::scatter_", "reduce_scatter": "c10d::reduce_scatter_",
    "reduce_scatter_tensor": "c10d::_reduce_scatter_base_", "all_to_all": "c10d::alltoall_",
    "all_to_all_single": "c10d::alltoall_base_", "barrier": "c10d::barrier", "send": "c10d::send",
    "recv": "c10d::recv_", "recv_any_source": "c10d::recv_any_source_",
}


def _open_collective(api, group, buffer):
    """Opens the range of collective ``api`` (a ddpc.distributed function's
    name) of ``group`` on ``buffer`` (a list of them: a list's blocks; None:
    none); None when no profile records."""
    buffers = () if buffer is None else tuple(buffer) if isinstance(buffer, list) else (buffer,)
    return _open(_COLLECTIVE_NAMES[api], buffers, {"bytes": sum(b.nbytes for b in buffers),
                                                   "group size": group.size()})


def _collective(c_call, group, args, api):
    """``c_call`` (a C collective of ``group``, called with ``args``, that
    runs ddpc.distributed's ``api``) made to record its range."""
    # The first buffer or list of them: the output, or the input of a rank that has no output (gather's other ranks).
    buffer = next((a for a in args if hasattr(a, "nbytes") or isinstance(a, list)), None)

    @functools.wraps(c_call)
    def call(*a, **kw):
        frame = _open_collective(api, group, buffer)
        try:
            return c_call(*a, **kw)
        finally:
            if frame is not None:
                _close(frame)

    return call


def _open_wait():
    """Opens the range of a ``Work.wait()``: where an asynchronous collective's time shows."""
    return _open("ddpc.distributed.Work.wait")


def _counts_flops(flops_of):
    """Decorates an op that, while a ``with_flops`` profile records, records
    its range under the name and FLOPs that ``flops_of(*args, **kwargs)``
    gives, as (name, flops), or None for a call that PyTorch counts none of.
    The op's calls of counted ops (a matmul on reshaped operands) are its own
    work, not counted again."""

    def wrap(fn):
        @functools.wraps(fn)
        def op(*args, **kwargs):
            if not _counting_flops or getattr(_local, "in_counted_op", False):
                return fn(*args, **kwargs)
            counted = flops_of(*args, **kwargs)
            frame = None if counted is None else _open(counted[0], [a for a in args if hasattr(a, "shape")],
                                                       {"flops": counted[1]})
            _local.in_counted_op = True
            try:
                return fn(*args, **kwargs)
            finally:
                _local.in_counted_op = False
                if frame is not None:
                    _close(frame)

        return op

    return wrap


def _well_formed(shapes_ok):
    """FLOPs for well-formed arguments only: a call the op itself refuses counts nothing."""
    @functools.wraps(shapes_ok)
    def flops_of(*args, **kwargs):
        try:
            return shapes_ok(*args, **kwargs)
        except (AttributeError, IndexError, TypeError, ValueError):
            return None

    return flops_of


@_well_formed
def _matmul_flops(input, other):
    """torch.matmul's: 2*M*K*N per product, as aten::mm where ``other`` is a
    matrix (``input``'s leading dims fold into M) and aten::bmm where it has
    batch dims; matrix-vector and vector products count none."""
    if input.ndim == 0 or other.ndim < 2 or input.shape[-1] != other.shape[-2]:
        return None
    k, n = other.shape[-2:]
    if other.ndim == 2:
        return "aten::mm", 2 * math.prod(input.shape[:-1]) * k * n
    m = input.shape[-2] if input.ndim > 1 else 1
    batch = math.prod(np.broadcast_shapes(tuple(input.shape[:-2]), tuple(other.shape[:-2])))
    return "aten::bmm", 2 * batch * m * k * n


@_well_formed
def _linear_flops(input, weight, bias=None):
    """F.linear's: aten::addmm with a bias, aten::mm without, 2*M*K*N."""
    if weight.ndim != 2 or input.ndim == 0 or input.shape[-1] != weight.shape[1]:
        return None
    return ("aten::mm" if bias is None else "aten::addmm"), 2 * math.prod(input.shape[:-1]) * math.prod(weight.shape)


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


@_well_formed
def _conv2d_flops(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """F.conv2d's: 2 * N * Hout * Wout * weight elements, for a batched input
    and numeric padding, as PyTorch counts ('same' and 'valid' count none)."""
    if input.ndim != 4 or weight.ndim != 4 or isinstance(padding, str):
        return None
    out = [(size + 2 * p - d * (k - 1) - 1) // s + 1 for size, p, d, k, s in
           zip(input.shape[2:], _pair(padding), _pair(dilation), weight.shape[2:], _pair(stride))]
    if min(out) <= 0:
        return None
    return "aten::conv2d", 2 * input.shape[0] * math.prod(out) * math.prod(weight.shape)


class record_function:
    """Context manager and decorator that records a named range, as
    torch.profiler.record_function (``args``, a string, is kept with the range)."""

    def __init__(self, name, args=None):
        self.name, self.args = name, args
        self._frame = None

    def __enter__(self):
        if _is_profiler_enabled:
            self._frame = _open(self.name, metadata=None if self.args is None else {"args": self.args},
                                category="user_annotation")
        return self

    def __exit__(self, *exc):
        frame, self._frame = self._frame, None
        if frame is not None:
            _close(frame)
        return False

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapped(*args, **kwargs):
            with record_function(self.name, self.args):
                return fn(*args, **kwargs)

        return wrapped


# ---- events --------------------------------------------------------------------------


def _format_time(time_us):
    if time_us >= 1e6:
        return f"{time_us / 1e6:.3f}s"
    if time_us >= 1e3:
        return f"{time_us / 1e3:.3f}ms"
    return f"{time_us:.3f}us"


def _format_time_share(time_us, total_us):
    return "NaN" if total_us == 0 else f"{time_us * 100.0 / total_us:.2f}%"


def _format_memory(nbytes):
    for unit, size in (("GB", 1 << 30), ("MB", 1 << 20), ("KB", 1 << 10)):
        if abs(nbytes) >= size:
            return f"{nbytes / size:.2f} {unit}"
    return f"{nbytes} B"


class _Stats:
    """What events and averages share: the device columns (zero here: no device
    timeline) and the formatted times the table prints."""

    device_time_total = self_device_time_total = 0.0
    cpu_memory_usage = self_cpu_memory_usage = 0
    is_async = False
    node_id = -1

    @property
    def device_time(self):
        return 0.0

    @property
    def cpu_time_str(self):
        return _format_time(self.cpu_time)

    @property
    def cpu_time_total_str(self):
        return _format_time(self.cpu_time_total)

    @property
    def self_cpu_time_total_str(self):
        return _format_time(self.self_cpu_time_total)


class Interval:
    """A range's start and end, in microseconds since its recording window began."""

    def __init__(self, start, end):
        self.start, self.end = start, end

    def elapsed_us(self):
        return self.end - self.start


class FunctionEvent(_Stats):
    """One recorded range: ``name`` (= ``key``; ``ProfilerStep*`` for every
    step, whose ``trace_name`` is ``ProfilerStep#N``), ``thread`` (the OS thread id),
    ``time_range``, ``cpu_time_total`` and ``self_cpu_time_total`` (microseconds),
    ``input_shapes`` (with record_shapes), ``stack`` (with with_stack),
    ``cpu_parent``/``cpu_children`` (the ranges it is nested in and encloses),
    ``device_memory_usage``/``self_device_memory_usage`` (bytes; see
    profile_memory) and ``metadata`` (ddpc's: e.g. a collective's bytes)."""

    count = 1

    def __init__(self, frame, thread, thread_name, end_ns, self_ns, memory, window_start_ns):
        self.id, self.thread, self._thread_name = frame.id, thread, thread_name
        self.flops = (frame.metadata or {}).get("flops", 0)
        # As PyTorch's: the steps are one row of the table, and keep their numbers in the trace.
        self.trace_name = frame.name
        self.name = "ProfilerStep*" if frame.name.startswith("ProfilerStep#") else frame.name
        self._category, self._start_ns, self._end_ns = frame.category, frame.start, end_ns
        self.time_range = Interval((frame.start - window_start_ns) / 1e3, (end_ns - window_start_ns) / 1e3)
        self.cpu_time_total = (end_ns - frame.start) / 1e3
        self.self_cpu_time_total = self_ns / 1e3
        self.input_shapes = frame.shapes or []
        self.stack = frame.stack or []
        self.metadata = frame.metadata or {}
        self.device_memory_usage = memory
        self.self_device_memory_usage = memory - frame.children_memory
        self.cpu_parent = None
        self.cpu_children = []

    @property
    def key(self):
        return self.name

    @property
    def cpu_time(self):
        return self.cpu_time_total

    def __repr__(self):
        return (f"<FunctionEvent id={self.id} name={self.name} thread={self.thread} "
                f"cpu_time={self.cpu_time_str} self_cpu_time={self.self_cpu_time_total_str} "
                f"input_shapes={self.input_shapes}>")


class FunctionEventAvg(_Stats):
    """The events of one key added up: ``key``, ``count``, ``cpu_time_total``,
    ``self_cpu_time_total``, ``cpu_time`` (the average), and ``input_shapes``
    and ``stack`` where the averages were grouped by them."""

    def __init__(self):
        self.key = None
        self.count = 0
        self.cpu_time_total = self.self_cpu_time_total = 0.0
        self.device_memory_usage = self.self_device_memory_usage = 0
        self.flops = 0
        self.input_shapes = self.stack = self.cpu_parent = None

    def add(self, other):
        if self.key is None:
            self.key, self.input_shapes, self.stack, self.cpu_parent = (other.key, other.input_shapes, other.stack,
                                                                        other.cpu_parent)
        self.count += other.count
        self.cpu_time_total += other.cpu_time_total
        self.self_cpu_time_total += other.self_cpu_time_total
        self.device_memory_usage += other.device_memory_usage
        self.self_device_memory_usage += other.self_device_memory_usage
        self.flops += other.flops
        return self

    @property
    def cpu_time(self):
        return self.cpu_time_total / self.count if self.count else 0.0

    def __repr__(self):
        return (f"<FunctionEventAvg key={self.key} self_cpu_time={self.self_cpu_time_total_str} "
                f"cpu_time={self.cpu_time_str} input_shapes={self.input_shapes}>")


class EventList(list):
    """A list of FunctionEvent (or of FunctionEventAvg, from key_averages)."""

    @property
    def self_cpu_time_total(self):
        return sum(e.self_cpu_time_total for e in self)

    def key_averages(self, group_by_input_shapes=False, group_by_stack_n=0):
        """One FunctionEventAvg per name (and input shapes, and innermost
        ``group_by_stack_n`` stack entries, where asked), in order of first appearance."""
        stats = {}
        for e in self:
            key = (e.key, str(e.input_shapes) if group_by_input_shapes else None,
                   tuple(e.stack[:group_by_stack_n]) if group_by_stack_n > 0 else None)
            if key not in stats:
                stats[key] = FunctionEventAvg()
            stats[key].add(e)
        averages = EventList(stats.values())
        for avg in averages:
            avg.stack = avg.stack[:group_by_stack_n]
            if not group_by_input_shapes:
                avg.input_shapes = ""
        return averages

    def table(self, sort_by=None, row_limit=100, max_src_column_width=75, max_name_column_width=55,
              max_shapes_column_width=80, header=None, top_level_events_only=False, time_unit=None):
        """The events as PyTorch's profiler prints them: a row per event, sorted
        by the attribute ``sort_by`` (largest first; ``cuda`` in a name reads as
        ``device``), at most ``row_limit`` rows (-1: all), and the total self CPU time."""
        return _table(self, sort_by, row_limit, max_src_column_width, max_name_column_width,
                      max_shapes_column_width, header, top_level_events_only, time_unit)

    def export_chrome_trace(self, path, metadata=None):
        """Writes the events as a Chrome trace (JSON, gzipped where ``path`` ends in .gz)."""
        _write_chrome_trace(self, path, metadata or {})

    def __str__(self):
        return self.table()


def _trimmed(path, width):
    return path if len(path) <= width else "..." + path[len(path) - width + 3:]


def _time_in(unit, time_us, default):
    scale = {"s": 1e6, "ms": 1e3, "us": 1.0}.get(unit)
    return default if scale is None else f"{time_us / scale:.3f}{unit}"


def _table(events, sort_by, row_limit, max_src_column_width, max_name_column_width, max_shapes_column_width,
           header, top_level_events_only, time_unit):
    if not events:
        return ""
    if sort_by is not None:
        attribute = sort_by.replace("cuda", "device")
        events = sorted(events, key=lambda e: getattr(e, attribute), reverse=True)
    has_shapes = any(e.input_shapes for e in events)
    has_stack = any(e.stack for e in events)
    has_memory = any(e.device_memory_usage or e.self_device_memory_usage for e in events)
    flops = [e.flops for e in events if e.flops > 0]
    name_width = max(len(e.key) for e in events) + 4
    if max_name_column_width is not None:
        name_width = min(name_width, max_name_column_width)
    headers = ["Name", "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg"]
    if has_memory:
        headers += ["CUDA Mem", "Self CUDA Mem"]
    headers.append("# of Calls")
    widths = [name_width] + [12] * (len(headers) - 1)
    aligns = [">"] * len(headers)
    if has_shapes:
        headers.append("Input Shapes")
        widths.append(min(max(len(str(e.input_shapes)) for e in events) + 4, max_shapes_column_width or 1 << 30))
        aligns.append(">")
    if flops:
        flops_scale, flops_unit = _flops_unit(min(flops))
        headers.append(f"Total {flops_unit}")
        widths.append(12)
        aligns.append(">")
    if has_stack:
        headers.append("Source Location")
        widths.append(min(max(len(s) for e in events for s in e.stack) + 4, max_src_column_width or 1 << 30))
        aligns.append("<")
    row_format = "".join(f"{{: {a}{w}}}  " for a, w in zip(aligns, widths))
    separator = "".join("-" * w + "  " for w in widths)
    line_length = sum(w + 2 for w in widths) - 2
    total_self = sum(e.self_cpu_time_total for e in events)
    lines = []
    if header is not None:
        lines += ["=" * line_length, header]
    if top_level_events_only:
        lines += ["=" * line_length, "This report only display top-level ops statistics"]
    lines += [separator, row_format.format(*headers), separator]
    shown = 0
    for e in events:
        if shown == row_limit:
            break
        if top_level_events_only and e.cpu_parent is not None:
            continue
        shown += 1
        name = e.key
        if max_name_column_width is not None and len(name) >= max_name_column_width - 3:
            name = name[:max_name_column_width - 3] + "..."
        row = [name, _format_time_share(e.self_cpu_time_total, total_self),
               _time_in(time_unit, e.self_cpu_time_total, e.self_cpu_time_total_str),
               _format_time_share(e.cpu_time_total, total_self),
               _time_in(time_unit, e.cpu_time_total, e.cpu_time_total_str),
               _time_in(time_unit, e.cpu_time, e.cpu_time_str)]
        if has_memory:
            row += [_format_memory(e.device_memory_usage), _format_memory(e.self_device_memory_usage)]
        row.append(e.count)
        if has_shapes:
            row.append(str(e.input_shapes)[:widths[len(row)]])
        if flops:
            row.append(f"{e.flops * flops_scale:8.3f}" if e.flops > 0 else "--")
        if has_stack:
            row.append(_trimmed(e.stack[0], widths[-1]) if e.stack else "")
        lines.append(row_format.format(*row))
        if has_stack:  # the rest of the stack on rows of its own, then an empty row, as PyTorch prints it
            blank = [""] * (len(headers) - 1)
            lines += [row_format.format(*blank, _trimmed(entry, widths[-1])) for entry in e.stack[1:]]
            lines.append(row_format.format(*blank, ""))
    lines += [separator, f"Self CPU time total: {_time_in(time_unit, total_self, _format_time(total_self))}"]
    return "\n".join(lines) + "\n"


def _flops_unit(smallest):
    """The scale and unit of the FLOPs column, as PyTorch picks them: the
    thousands of the smallest count (FLOPs, KFLOPs, ... PFLOPs)."""
    units = ["FLOPs", "KFLOPs", "MFLOPs", "GFLOPs", "TFLOPs", "PFLOPs"]
    power = int(max(0.0, min(math.log10(smallest) / 3, len(units) - 1)))
    return 10.0 ** (-3 * power), units[power]


def _write_chrome_trace(events, path, metadata):
    """Complete ("X") events with ts and dur in microseconds of the monotonic
    clock, which every process on a host shares, so the traces of several
    ranks line up; baseTimeNanoseconds is that clock's zero in Unix time."""
    pid = os.getpid()
    threads = {}
    for e in events:
        threads.setdefault(e.thread, e._thread_name)
    trace = [{"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": "python"}}]
    for tid, name in threads.items():
        trace.append({"ph": "M", "name": "thread_name", "pid": pid, "tid": tid,
                      "args": {"name": f"thread {tid} ({name})" if name else f"thread {tid}"}})
    for e in sorted(events, key=lambda e: e._start_ns):
        args = dict(e.metadata)
        if e.input_shapes:
            args["Input Dims"] = e.input_shapes
        if e.device_memory_usage:
            args["CUDA Mem"] = e.device_memory_usage
        event = {"ph": "X", "cat": e._category, "name": e.trace_name, "pid": pid, "tid": e.thread,
                 "ts": e._start_ns / 1e3, "dur": (e._end_ns - e._start_ns) / 1e3}
        if args:
            event["args"] = args
        trace.append(event)
    document = {"schemaVersion": 1, "deviceProperties": [], "displayTimeUnit": "ms",
                "baseTimeNanoseconds": time.time_ns() - time.perf_counter_ns(), **metadata, "traceEvents": trace}
    with (gzip.open if path.endswith(".gz") else open)(path, "wt") as f:
        json.dump(document, f)


def _events_of(window):
    """The FunctionEvents of a finished window, linked to their parents."""
    events = EventList()
    by_id = {}
    for frame, thread, end_ns, self_ns, memory, _ in window.records:
        event = FunctionEvent(frame, thread, window.thread_names.get(thread, ""), end_ns, self_ns, memory,
                              window.start_ns)
        by_id[event.id] = event
        events.append(event)
    for event, (*_, parent_id) in zip(events, window.records):
        parent = by_id.get(parent_id)
        if parent is not None:
            event.cpu_parent = parent
            parent.cpu_children.append(event)
    events.sort(key=lambda e: e._start_ns)
    for event in events:
        event.cpu_children.sort(key=lambda e: e._start_ns)
    return events


def _distributed_info():
    """The trace's distributedInfo, as PyTorch writes it, where a process group is up."""
    from . import distributed

    if not distributed.is_initialized():
        return {}
    return {"distributedInfo": {"backend": distributed.get_backend(), "rank": distributed.get_rank(),
                                "world_size": distributed.get_world_size()}}


# ---- the profiler --------------------------------------------------------------------


def _parse_activities(activities):
    chosen = set(activities)
    unknown = [a for a in chosen if not isinstance(a, ProfilerActivity)]
    if unknown:
        raise ValueError(f"unknown profiler activities {unknown!r}: use ddpc.profiler.ProfilerActivity.CPU or .CUDA")
    if not chosen:
        raise AssertionError("No valid profiler activities found")
    return chosen


class profile:
    """Records where a block of code spends its time, as torch.profiler.profile.

    Use it as a context manager, or call ``start()`` and ``stop()``; call
    ``step()`` at the end of each training step when a ``schedule`` (see
    ``ddpc.profiler.schedule``) says which steps to record; ``on_trace_ready(prof)``
    runs at the end of each recorded cycle (and at ``stop()`` for a cycle cut
    short), where ``prof.key_averages().table()``, ``prof.events()`` and
    ``prof.export_chrome_trace(path)`` give that cycle's ranges (all cycles'
    with ``acc_events``). Without a schedule everything between start and stop
    is recorded. See the module docstring for what is recorded and for what
    differs from PyTorch.
    """

    def __init__(self, *, activities=None, schedule=None, on_trace_ready=None, record_shapes=False,
                 profile_memory=False, with_stack=False, with_flops=False, with_modules=False,
                 experimental_config=None, acc_events=False):
        del with_modules, experimental_config  # see the module docstring
        self.with_flops = with_flops
        self.activities = supported_activities() if activities is None else _parse_activities(activities)
        self.record_shapes, self.profile_memory, self.with_stack = record_shapes, profile_memory, with_stack
        self.acc_events = acc_events
        self.record_steps = schedule is not None
        self.schedule = schedule or _record_every_step
        self.on_trace_ready = on_trace_ready
        self.step_num = 0
        self.current_action = self.schedule(0)
        self.step_rec_fn = None
        self._events = EventList()
        self._metadata = {}
        self._hooks = ()
        self._recording = False

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()
        return False

    def start(self):
        self._transit(ProfilerAction.NONE, self.current_action)
        self._enter_step()

    def stop(self):
        self._exit_step()
        self._transit(self.current_action, None)

    def step(self):
        """Marks the end of a step: the schedule's action for the next one takes effect."""
        self._exit_step()
        prev_action = self.current_action
        self.step_num += 1
        self.current_action = self.schedule(self.step_num)
        self._transit(prev_action, self.current_action)
        self._enter_step()

    def _enter_step(self):
        if self.record_steps:
            self.step_rec_fn = record_function(f"ProfilerStep#{self.step_num}")
            self.step_rec_fn.__enter__()

    def _exit_step(self):
        if self.step_rec_fn is not None:
            self.step_rec_fn.__exit__(None, None, None)
            self.step_rec_fn = None

    def _transit(self, prev, current):
        """PyTorch's transitions between the actions of two steps (current None: at stop)."""
        A = ProfilerAction
        recording = (A.RECORD, A.RECORD_AND_SAVE)
        if prev == A.RECORD_AND_SAVE and current is not None:
            self._stop_trace()
            self._trace_ready()
        elif prev in recording and current is None:
            self._stop_trace()
            self._trace_ready()
            return
        elif prev == A.RECORD and current in (A.NONE, A.WARMUP):
            warnings.warn(f"Incorrect schedule: RECORD followed by {current.name}")
            self._stop_trace()
        elif prev == A.WARMUP and current in (A.NONE, None):
            if current is A.NONE:
                warnings.warn("Incorrect schedule: WARMUP followed by NONE")
            return
        if current in recording and not self._recording:
            self._start_trace()

    def _start_trace(self):
        global _window, _is_profiler_enabled, _counting_flops
        if _window is not None:
            raise RuntimeError("another ddpc.profiler.profile is recording: ddpc records one profile at a time")
        from .nn import modules

        memory = None
        if self.profile_memory and ProfilerActivity.CUDA in self.activities:
            from . import cuda

            if cuda.is_available():
                memory = functools.partial(cuda.memory_allocated, cuda.current_device())
        _window = _Window(self.record_shapes, self.with_stack, memory)
        self._hooks = (modules.register_module_forward_pre_hook(_module_pre_hook),
                       modules.register_module_forward_hook(_module_hook, always_call=True))
        self._recording = True
        _is_profiler_enabled = True
        _counting_flops = self.with_flops

    def _stop_trace(self):
        global _window, _is_profiler_enabled, _counting_flops
        if not self._recording:
            return
        _is_profiler_enabled = _counting_flops = False
        window, _window = _window, None
        for handle in self._hooks:
            handle.remove()
        self._hooks = ()
        self._recording = False
        events = _events_of(window)
        self._events = EventList(self._events + events) if self.acc_events else events

    def _trace_ready(self):
        if self.on_trace_ready is not None:
            self.on_trace_ready(self)

    def events(self):
        """The ranges of the last recorded cycle (of all cycles with acc_events), by start time."""
        return self._events

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0):
        """The events averaged per name (and input shapes, and innermost stack entries, where asked)."""
        return self._events.key_averages(group_by_input_shape, group_by_stack_n)

    def export_chrome_trace(self, path):
        """Writes the events as a Chrome trace (chrome://tracing, Perfetto, TensorBoard); gzipped for .gz."""
        self._events.export_chrome_trace(path, {**_distributed_info(), **self._metadata})

    def add_metadata(self, key, value):
        """Adds a string entry to the top level of exported traces."""
        self._metadata[key] = str(value)

    def add_metadata_json(self, key, value):
        """Adds an entry given as JSON text to the top level of exported traces."""
        self._metadata[key] = json.loads(value)
