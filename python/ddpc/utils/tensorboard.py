"""TensorBoard logging shaped like torch.utils.tensorboard: ``SummaryWriter``
writes the event files TensorBoard reads, with neither tensorboard nor
protobuf installed.

An event file is a sequence of records, each one ``Event`` protocol buffer
framed as TFRecord frames it: the data's length (uint64, little endian), a
masked CRC-32C of those 8 bytes, the data, a masked CRC-32C of the data
(the CRC is ``_C.crc32c``). The few messages written here (Event, Summary,
HistogramProto, TensorProto, Summary.Image and the hparams plugin's data)
are encoded by hand, their fields in the order protobuf writes them, so an
event holds the bytes torch's writer gives it for the same call.

Where ddpc differs from PyTorch:

- Events wait in memory and are written together once ``max_queue`` of them
  wait for one file, every ``flush_secs`` (a background thread), and at
  ``flush()``, ``close()``, when the writer is collected and at exit; torch's
  writer hands each event to a background thread that appends it at once.
- A process forked from the one that made a writer writes to an event file
  of its own (its first event opens one).
- Images are encoded as PNG here, without pillow: the same pixels as
  torch's, in other bytes.
- Graphs, embeddings, audio, video, figures, meshes, PR curves, custom
  scalar layouts, raw tensors and images with boxes are not written: those
  methods raise NotImplementedError.
- bfloat16 values are converted exactly (torch rounds them to float16 first).
"""

import itertools
import math
import os
import socket
import struct
import threading
import time
import weakref
import zlib
from datetime import datetime

import numpy as np

from .. import _C
from ..tensor import Tensor

__all__ = ["SummaryWriter"]

# The writer named in each file's first event, as tensorboard names its own.
_WRITER_NAME = "ddpc.utils.tensorboard"
# Numbers the event files of this process, as tensorboard's global counter does.
_file_numbers = itertools.count()


# ---- protocol buffer fields -------------------------------------------------------
# proto3 leaves out a field without presence that holds its default (0, empty);
# present=True writes it anyway, as protobuf does for a member of a oneof.

def _varint(n):
    if n < 0x80:  # field keys and short lengths: most varints written
        return bytes((n,))
    out = bytearray()
    while n > 0x7F:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _message(number, data):
    """A length-delimited field: a submessage, a packed array, bytes or a string."""
    return _varint(number << 3 | 2) + _varint(len(data)) + data


def _bytes(number, data, present=False):
    if isinstance(data, str):
        data = data.encode("utf_8")
    return _message(number, data) if data or present else b""


def _int(number, n, present=False):
    """An int32, int64 or enum field (negative numbers take ten bytes, as int64's do)."""
    return _varint(number << 3) + _varint(n & 0xFFFFFFFFFFFFFFFF) if n or present else b""


def _fixed(number, wire, bits, present):
    return _varint(number << 3 | wire) + bits if present or any(bits) else b""


def _double(number, x, present=False):
    return _fixed(number, 1, struct.pack("<d", x), present)


def _float32_bits(x):
    """x rounded to float32 as protobuf rounds it: out of range is infinity, not an error."""
    try:
        return struct.pack("<f", x)
    except OverflowError:
        return struct.pack("<f", math.copysign(math.inf, x))


def _float(number, x, present=False):
    return _fixed(number, 5, _float32_bits(x), present)


def _doubles(number, values):
    """A packed repeated double field."""
    data = np.ascontiguousarray(values, dtype="<f8").reshape(-1).tobytes()
    return _message(number, data) if data else b""


# ---- events and summaries ---------------------------------------------------------

def _step(global_step):
    step = int(global_step)
    if not -(1 << 63) <= step < 1 << 63:
        raise ValueError(f"global_step {global_step} does not fit in an int64")
    return step


def _event(wall_time, step=None, what=b""):
    """An Event: `what` is its encoded member of the oneof (file_version, summary, session_log) and what follows."""
    return _double(1, float(wall_time)) + (b"" if step is None else _int(2, _step(step))) + what


def _file_version_event(step=None):
    return _event(time.time(), step, _bytes(3, "brain.Event:2"))


def _summary(value):
    """The `what` of an Event holding a Summary of one Value."""
    return _message(5, _message(1, value))


def _value(tag, payload=b"", plugin=None, plugin_content=b""):
    """A Summary.Value: its tag, the encoded member of its oneof, and the metadata naming a plugin."""
    metadata = b""
    if plugin is not None:
        metadata = _message(9, _message(1, _bytes(1, plugin) + _bytes(2, plugin_content)))
    return _bytes(1, tag) + payload + metadata


def _record(data):
    """One TFRecord: length, masked CRC of the length, data, masked CRC of the data."""
    length = struct.pack("<Q", len(data))
    return b"".join((length, struct.pack("<I", _masked_crc(length)), data, struct.pack("<I", _masked_crc(data))))


def _masked_crc(data):
    # Masked because a CRC computed over data that holds CRCs is weak (TFRecord's reason).
    crc = _C.crc32c(data)
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


# ---- values -----------------------------------------------------------------------

def _numpy(x):
    """x as a numpy array, as torch's make_np: arrays as they are, numbers as 1-element arrays, tensors on the host."""
    if isinstance(x, np.ndarray):
        return x
    if np.isscalar(x):
        return np.array([x])
    if isinstance(x, Tensor):
        return x.detach().cpu().numpy()
    raise NotImplementedError(f"Got {type(x)}, but numpy array or ddpc tensor are expected.")


def _scalar(value):
    array = _numpy(value).squeeze()
    if array.ndim != 0:
        raise AssertionError(f"Tensor should contain one element (0 dimensions). "
                             f"Was given size: {array.size} and {array.ndim} dimensions.")
    return float(array)


def _scalar_value(tag, value, new_style=False, double_precision=False):
    x = _scalar(value)
    if not new_style:
        return _value(tag, _float(2, x, present=True))
    # A TensorProto of dtype DT_DOUBLE (2) with double_val, or DT_FLOAT (1) with float_val.
    tensor = _int(1, 2) + _doubles(6, [x]) if double_precision else _int(1, 1) + _message(5, _float32_bits(x))
    return _value(tag, _message(8, tensor), plugin="scalars")


def _tensorflow_bins():
    """TensorBoard's default histogram edges, as torch's writer makes them: 0 and +-1e-12 growing by 10% to 1e20."""
    v, edges = 1e-12, []
    while v < 1e20:
        edges.append(v)
        v *= 1.1
    return np.array([-e for e in reversed(edges)] + [0.0] + edges)


_TENSORFLOW_BINS = _tensorflow_bins()


def _histogram_value(tag, min, max, num, sum, sum_squares, bucket_limits, bucket_counts):
    histo = (_double(1, min) + _double(2, max) + _double(3, num) + _double(4, sum) + _double(5, sum_squares) +
             _doubles(6, bucket_limits) + _doubles(7, bucket_counts))
    return _value(tag, _message(5, histo))


def _histogram(values, bins, max_bins):
    """The HistogramProto fields of `values`, step for step as torch's make_histogram."""
    values = values.astype(float).reshape(-1)
    if values.size == 0:
        raise ValueError("The input has no element.")
    counts, limits = np.histogram(values, bins=bins)
    num_bins = len(counts)
    if max_bins is not None and num_bins > max_bins:
        subsampling = num_bins // max_bins
        subsampling_remainder = num_bins % subsampling
        if subsampling_remainder != 0:
            counts = np.pad(counts, pad_width=[[0, subsampling - subsampling_remainder]], mode="constant",
                            constant_values=0)
        counts = counts.reshape(-1, subsampling).sum(axis=-1)
        new_limits = np.empty((counts.size + 1,), limits.dtype)
        new_limits[:-1] = limits[:-1:subsampling]
        new_limits[-1] = limits[-1]
        limits = new_limits
    # Keep the bins from the first to the last that hold values, and one empty bin to their left: TensorBoard
    # reads only each bin's right edge, so the empty bin's gives the left edge of the first.
    cum_counts = np.cumsum(np.greater(counts, 0))
    start, end = np.searchsorted(cum_counts, [0, cum_counts[-1] - 1], side="right")
    start, end = int(start), int(end) + 1
    counts = counts[start - 1:end] if start > 0 else np.concatenate([[0], counts[:end]])
    limits = limits[start:end + 1]
    if counts.size == 0 or limits.size == 0:
        raise ValueError("add_histogram: no value falls inside the bins")
    return values.min(), values.max(), len(values), values.sum(), values.dot(values), limits, counts


def _text_value(tag, text):
    # A TensorProto of dtype DT_STRING (7), shape [1]; the text plugin's data (version 0) encodes to nothing.
    tensor = _int(1, 7) + _message(2, _message(2, _int(1, 1))) + _bytes(8, text, present=True)
    return _value(tag + "/text_summary", _message(8, tensor), plugin="text")


def _make_grid(images, ncols=8):
    """(N, C, H, W) images with C 1 or 3 tiled on a (3, H*rows, W*cols) canvas, as torch's writer tiles them."""
    if images.shape[1] == 1:
        images = np.concatenate([images, images, images], 1)
    if images.ndim != 4 or images.shape[1] != 3:
        raise AssertionError("Input should be a 4D numpy array with 3 channels")
    n, _, h, w = images.shape
    ncols = min(n, ncols)
    nrows = (n + ncols - 1) // ncols
    canvas = np.zeros((3, h * nrows, w * ncols), dtype=images.dtype)
    for i in range(n):
        y, x = divmod(i, ncols)
        canvas[:, y * h:(y + 1) * h, x * w:(x + 1) * w] = images[i]
    return canvas


def _to_hwc(array, dataformats):
    """An image array laid out as `dataformats` (NCHW, CHW, HWC, HW, ...) as one (H, W, C) image."""
    if len(set(dataformats)) != len(dataformats):
        raise AssertionError(f"You can not use the same dimension shorthand twice. input_format: {dataformats}")
    if array.ndim != len(dataformats):
        raise AssertionError(f"size of input tensor and input format are different. "
                             f"tensor shape: {array.shape}, input_format: {dataformats}")
    dataformats = dataformats.upper()
    if len(dataformats) == 4:
        return _make_grid(array.transpose([dataformats.find(c) for c in "NCHW"])).transpose(1, 2, 0)
    if len(dataformats) == 3:
        hwc = array.transpose([dataformats.find(c) for c in "HWC"])
        return np.concatenate([hwc, hwc, hwc], 2) if hwc.shape[2] == 1 else hwc
    hw = array.transpose([dataformats.find(c) for c in "HW"])
    return np.stack([hw, hw, hw], 2)


def _png(image):
    """PNG bytes of an (H, W, C) uint8 image, C 1 to 4 (gray, gray and alpha, RGB, RGBA), its rows unfiltered."""
    height, width, channels = image.shape
    if not 1 <= channels <= 4 or height == 0 or width == 0:
        raise ValueError(f"add_image: cannot encode an image of {height}x{width} pixels with {channels} channels")
    rows = np.concatenate([np.zeros((height, 1), np.uint8), image.reshape(height, width * channels)], axis=1)

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, (0, 4, 2, 6)[channels - 1], 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(rows.tobytes())) +
            chunk(b"IEND", b""))


def _image_value(tag, img_tensor, dataformats):
    image = _to_hwc(_numpy(img_tensor), dataformats)
    # uint8 images are taken as 0..255, all others as 0..1, and cut to that range.
    scale = 1 if image.dtype == np.uint8 else 255
    image = (image.astype(np.float32) * scale).clip(0, 255).astype(np.uint8)
    height, width, channels = image.shape
    encoded = _int(1, height) + _int(2, width) + _int(3, channels) + _bytes(4, _png(image))
    return _value(tag, _message(4, encoded))


# The hparams plugin's tags and enums (tensorboard/plugins/hparams: metadata.py, api.proto).
_HPARAMS_TAGS = ("_hparams_/experiment", "_hparams_/session_start_info", "_hparams_/session_end_info")
_DATA_TYPE_STRING, _DATA_TYPE_FLOAT64, _STATUS_SUCCESS = 1, 3, 1


def _struct_value(v):
    """A google.protobuf.Value: number_value for numbers, string_value for strings."""
    return _bytes(3, v, present=True) if isinstance(v, str) else _double(2, float(v), present=True)


def _hparams_values(hparam_dict, metric_dict, hparam_domain_discrete):
    """The experiment, session start and session end Summary.Values of add_hparams, as torch's hparams() makes them."""
    if not isinstance(hparam_dict, dict):
        raise TypeError("parameter: hparam_dict should be a dictionary, nothing logged.")
    if not isinstance(metric_dict, dict):
        raise TypeError("parameter: metric_dict should be a dictionary, nothing logged.")
    hparam_domain_discrete = hparam_domain_discrete or {}
    if not isinstance(hparam_domain_discrete, dict):
        raise TypeError("parameter: hparam_domain_discrete should be a dictionary, nothing logged.")
    for k, v in hparam_domain_discrete.items():
        if k not in hparam_dict or not isinstance(v, list) or not all(isinstance(d, type(hparam_dict[k])) for d in v):
            raise TypeError(f"parameter: hparam_domain_discrete[{k}] should be a list of same type as "
                            f"hparam_dict[{k}].")
    infos, values = [], []
    for k, v in hparam_dict.items():
        if v is None:
            continue
        if isinstance(v, Tensor):
            v = float(_numpy(v).reshape(-1)[0])
        # bool is an int, so bools are numbers here, as in torch's writer.
        if not isinstance(v, (int, float, str)):
            raise ValueError("value should be one of int, float, str, bool, or ddpc.Tensor")
        info = _bytes(1, k) + _int(4, _DATA_TYPE_STRING if isinstance(v, str) else _DATA_TYPE_FLOAT64)
        if k in hparam_domain_discrete:
            info += _message(5, b"".join(_message(1, _struct_value(d)) for d in hparam_domain_discrete[k]))
        infos.append(_message(4, info))
        values.append(_message(1, _bytes(1, k, present=True) + _message(2, _struct_value(v))))
    metrics = [_message(5, _message(1, _bytes(2, k))) for k in metric_dict]
    contents = (_message(2, b"".join(infos + metrics)), _message(3, b"".join(values)),
                _message(4, _int(1, _STATUS_SUCCESS)))
    return [_value(tag, plugin="hparams", plugin_content=content) for tag, content in zip(_HPARAMS_TAGS, contents)]


# ---- files ------------------------------------------------------------------------

class _EventFile:
    """One event file, named as tensorboard names them, and the records that wait to be written to it."""

    def __init__(self, logdir, filename_suffix):
        os.makedirs(logdir, exist_ok=True)
        name = "events.out.tfevents.%010d.%s.%s.%s" % (time.time(), socket.gethostname(), os.getpid(),
                                                       next(_file_numbers))
        self.path = os.path.join(logdir, name) + filename_suffix
        self._file = open(self.path, "wb")
        header = _file_version_event() + _message(10, _bytes(1, _WRITER_NAME))
        self.pending = [_record(header)]
        try:
            self.write_pending()
        except BaseException:
            self._file.close()
            raise

    def write_pending(self):
        if self.pending:
            data, self.pending = b"".join(self.pending), []
            self._file.write(data)
            self._file.flush()

    def close(self):
        try:
            self.write_pending()
        finally:
            self._file.close()


class _EventFiles:
    """The event files of one SummaryWriter, by directory, and the thread that
    writes what waits in them every flush_secs. Kept apart from the writer so
    that this thread and the exit hook hold these and not the writer, which a
    program may drop unclosed: it is then collected and its files closed."""

    def __init__(self, max_queue, flush_secs, filename_suffix):
        self._max_queue, self._flush_secs, self._suffix = max_queue, flush_secs, filename_suffix
        self.forget()
        _all_files.add(self)

    def forget(self):
        """Drops the files and what waits for them without writing: in a forked child, where they are the
        parent's to write (the lock may have been held by a thread that does not exist here). The child's next
        event opens a file of its own."""
        self._files = {}
        self._lock = threading.Lock()
        self._thread = None  # (thread, its stop event) while files are open and flush_secs > 0
        self._error = None  # what the thread's last write raised, for the caller's next call

    def open(self, logdir):
        """Opens the file of `logdir` unless it is open; whether it opened it."""
        with self._lock:
            if logdir in self._files:
                return False
            self._open(logdir)
            return True

    def _open(self, logdir):
        f = self._files[logdir] = _EventFile(logdir, self._suffix)
        if self._thread is None and self._flush_secs > 0:
            stop = threading.Event()
            thread = threading.Thread(target=self._write_every, args=(stop,), name="ddpc-SummaryWriter", daemon=True)
            thread.start()
            self._thread = thread, stop
        return f

    def add(self, logdir, event):
        record = _record(event)
        with self._lock:
            self._raise_thread_error()
            f = self._files.get(logdir) or self._open(logdir)
            f.pending.append(record)
            if len(f.pending) >= self._max_queue or self._flush_secs <= 0:
                f.write_pending()

    def flush(self):
        with self._lock:
            self._raise_thread_error()
            for f in self._files.values():
                f.write_pending()

    def close(self):
        with self._lock:
            thread, self._thread = self._thread, None
        if thread is not None:
            thread[1].set()
            thread[0].join()
        with self._lock:
            files, self._files = list(self._files.values()), {}
            error, self._error = self._error, None
            for f in files:
                try:
                    f.close()
                except OSError as e:
                    error = error or e
        if error is not None:
            raise error

    def _raise_thread_error(self):
        if self._error is not None:
            error, self._error = self._error, None
            raise error

    def _write_every(self, stop):
        while not stop.wait(self._flush_secs):
            with self._lock:
                try:
                    for f in self._files.values():
                        f.write_pending()
                except OSError as e:
                    self._error = e


_all_files = weakref.WeakSet()


def _forget_parent_files():
    for files in list(_all_files):
        files.forget()


os.register_at_fork(after_in_child=_forget_parent_files)


# ---- the writer -------------------------------------------------------------------

class SummaryWriter:
    """Writes entries to event files in ``log_dir`` for TensorBoard, as
    ``torch.utils.tensorboard.SummaryWriter``: ``add_scalar``,
    ``add_scalars``, ``add_histogram``, ``add_histogram_raw``, ``add_text``,
    ``add_image``, ``add_images`` and ``add_hparams`` with PyTorch's
    arguments. Values may be Python numbers, numpy scalars and arrays, and
    ddpc tensors (on any device).

    ``log_dir`` defaults to ``runs/<CURRENT_DATETIME>_<HOSTNAME><comment>``.
    Events wait in memory until ``max_queue`` of them wait for one file or
    ``flush_secs`` pass (a background thread then writes them), and are
    written by ``flush()``, ``close()`` (which ends the thread), when the
    writer is collected, and at exit. After ``close()`` the next ``add_*``
    opens a new event file, as PyTorch's writer does; so does the first in a
    process forked from the one that made the writer (the parent writes what
    waited at the fork).
    """

    def __init__(self, log_dir=None, comment="", purge_step=None, max_queue=10, flush_secs=120, filename_suffix=""):
        if not log_dir:
            log_dir = os.path.join("runs", datetime.now().strftime("%b%d_%H-%M-%S") + "_" + socket.gethostname() +
                                   comment)
        self.log_dir = log_dir
        self.purge_step = purge_step
        self.max_queue = max_queue
        self.flush_secs = flush_secs
        self.filename_suffix = filename_suffix
        self._files = _EventFiles(max_queue, flush_secs, filename_suffix)
        weakref.finalize(self, self._files.close)
        self._main_logdir()

    def _main_logdir(self):
        """The directory of the main event file, opening the file where it is closed (as after close())."""
        logdir = str(self.log_dir)
        if self._files.open(logdir) and self.purge_step is not None:
            # TensorBoard hides the events of earlier runs at steps from the START session log's on.
            step, self.purge_step = self.purge_step, None
            self._files.add(logdir, _file_version_event(step))
            self._files.add(logdir, _event(time.time(), step, _message(7, _int(1, 1))))
        return logdir

    def _add(self, value, global_step, walltime, logdir=None):
        wall_time = time.time() if walltime is None else walltime
        self._files.add(logdir or self._main_logdir(), _event(wall_time, global_step, _summary(value)))

    def get_logdir(self):
        """The directory where event files are written."""
        return self.log_dir

    def add_scalar(self, tag, scalar_value, global_step=None, walltime=None, new_style=False,
                   double_precision=False):
        """Adds a scalar: a number, a numpy scalar or a one-element array or tensor. ``new_style`` writes it as a
        tensor (float64 with ``double_precision``) rather than a float32 ``simple_value``."""
        self._add(_scalar_value(tag, scalar_value, new_style, double_precision), global_step, walltime)

    def add_scalars(self, main_tag, tag_scalar_dict, global_step=None, walltime=None):
        """Adds several scalars to one chart: each ``tag``'s value goes, under ``main_tag``, to an event file
        of its own in ``<log_dir>/<main_tag>_<tag>`` (``/`` in ``main_tag`` becomes ``_``)."""
        walltime = time.time() if walltime is None else walltime
        main = self._main_logdir()
        for tag, scalar_value in tag_scalar_dict.items():
            logdir = main + "/" + main_tag.replace("/", "_") + "_" + tag
            self._add(_scalar_value(main_tag, scalar_value), global_step, walltime, logdir)

    def add_histogram(self, tag, values, global_step=None, bins="tensorflow", walltime=None, max_bins=None):
        """Adds a histogram of ``values`` (a tensor or array of any shape). ``bins`` is ``"tensorflow"``
        (TensorBoard's default edges) or anything ``numpy.histogram`` takes."""
        if isinstance(bins, str) and bins == "tensorflow":
            bins = _TENSORFLOW_BINS
        self._add(_histogram_value(tag, *_histogram(_numpy(values), bins, max_bins)), global_step, walltime)

    def add_histogram_raw(self, tag, min, max, num, sum, sum_squares, bucket_limits, bucket_counts, global_step=None,
                          walltime=None):
        """Adds a histogram given by its statistics and buckets (each bucket's upper limit and count)."""
        if len(bucket_limits) != len(bucket_counts):
            raise ValueError("len(bucket_limits) != len(bucket_counts), see the document.")
        limits, counts = (_numpy(x) if isinstance(x, Tensor) else x for x in (bucket_limits, bucket_counts))
        self._add(_histogram_value(tag, min, max, num, sum, sum_squares, limits, counts), global_step, walltime)

    def add_text(self, tag, text_string, global_step=None, walltime=None):
        """Adds text (TensorBoard shows it as markdown) under ``<tag>/text_summary``."""
        self._add(_text_value(tag, text_string), global_step, walltime)

    def add_image(self, tag, img_tensor, global_step=None, walltime=None, dataformats="CHW"):
        """Adds an image, encoded as PNG (with zlib; PyTorch's writer needs pillow): uint8 values are 0..255,
        other dtypes 0..1. ``dataformats`` is its layout: CHW, HWC, HW, ..."""
        self._add(_image_value(tag, img_tensor, dataformats), global_step, walltime)

    def add_images(self, tag, img_tensor, global_step=None, walltime=None, dataformats="NCHW"):
        """Adds a batch of images, tiled eight to a row in one image, as ``add_image``."""
        self._add(_image_value(tag, img_tensor, dataformats), global_step, walltime)

    def add_hparams(self, hparam_dict, metric_dict, hparam_domain_discrete=None, run_name=None, global_step=None):
        """Adds a set of hyperparameters and the metrics they gave, for TensorBoard's HParams dashboard: written,
        with each metric as a scalar, by a writer of their own in ``<log_dir>/<run_name>`` (by default the
        current time)."""
        if type(hparam_dict) is not dict or type(metric_dict) is not dict:
            raise TypeError("hparam_dict and metric_dict should be dictionary.")
        values = _hparams_values(hparam_dict, metric_dict, hparam_domain_discrete)
        logdir = os.path.join(self._main_logdir(), run_name or str(time.time()))
        with SummaryWriter(log_dir=logdir) as w_hp:
            for value in values:
                w_hp._add(value, global_step, None)
            for k, v in metric_dict.items():
                w_hp.add_scalar(k, v, global_step)

    def flush(self):
        """Writes the events that wait to their files."""
        self._files.flush()

    def close(self):
        """Writes what waits, closes the files and ends the writer's thread."""
        self._files.close()

    def __enter__(self):
        return self

    def __exit__(self, exc_type, exc_val, exc_tb):
        self.close()


def _not_written(name, what):
    def method(self, *args, **kwargs):
        raise NotImplementedError(f"SummaryWriter.{name}: ddpc's SummaryWriter does not write {what}")

    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"Not available: ddpc's SummaryWriter does not write {what} (raises NotImplementedError)."
    return method


for _name, _what in {"add_tensor": "raw tensors", "add_image_with_boxes": "images with boxes",
                     "add_figure": "matplotlib figures", "add_video": "video", "add_audio": "audio",
                     "add_graph": "model graphs", "add_onnx_graph": "model graphs", "add_embedding": "embeddings",
                     "add_pr_curve": "PR curves", "add_pr_curve_raw": "PR curves",
                     "add_custom_scalars": "custom scalar layouts",
                     "add_custom_scalars_multilinechart": "custom scalar layouts",
                     "add_custom_scalars_marginchart": "custom scalar layouts", "add_mesh": "meshes"}.items():
    setattr(SummaryWriter, _name, _not_written(_name, _what))
del _name, _what
