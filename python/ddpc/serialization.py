"""ddpc.save / ddpc.load: checkpoints of tensors and of any picklable object,
loaded under PyTorch's ``weights_only`` rules.

The file format is ddpc's own:

    magic    8 bytes  b"DDPCCKPT"
    version  u32      1 or 2
    hlen     u64      length of the header
    plen     u64      length of the payload
    crc      u32      CRC-32 (zlib's) of header + payload
    header   hlen bytes of UTF-8 JSON: {"root": <value>, "tensors": [...]}
    payload  plen bytes: every tensor's raw bytes, 64-byte aligned

(all integers little-endian). Tensor entry i records dtype, shape, device,
requires_grad, its payload offset and nbytes, and "parameter": true for a
Parameter. Entries of the same memory (a tensor and its detach(), a
parameter and its state_dict() value) name one offset and load as tensors
over one buffer; a tensor the object refers to twice has one entry.
Entries at other places of one storage (a tensor and its slices, a
view(dtype)) also have "storage": [offset, nbytes], the payload's copy of
the span of that storage that holds them all, and load as views of one
buffer of it (readers that predate the field load each as a tensor of its
own). A tensor alone on its storage stores its own bytes, not the storage's
(where torch.save writes the whole storage).

Version 1 holds data and loading it runs nothing. A value in the header is
a tagged list: ["none"], ["bool", b], ["int", n], ["float", x], ["str", s],
["list", [...]], ["tuple", [...]], ["dict", [[key, value], ...]] (keys are
values too, so int keys of optimizer state survive), ["odict", [...]]
or, for one with a ``_metadata`` attribute (a state_dict()'s module
versions), ["odict", [...], metadata], which readers that predate the
third item load without it,
["set", [...]], ["frozenset", [...]] or ["tensor", i]; a sparse COO tensor
is ["sparse_coo", indices, values, size, coalesced, requires_grad] (indices
and values tensor values). A numpy array is
["ndarray", numpy dtype string, shape, i] and a bytes object ["bytes", i],
entry i holding their bytes (as a uint8 tensor). A numpy number (np.int32,
np.float32, np.bool_, np.str_, np.bytes_, ...) is its Python value with its
numpy dtype string as a third item (["int", 1, "<i4"]): it loads as that
numpy number with weights_only=False, as torch.load's, and as the Python
number under weights_only (where torch.load refuses it), as readers that
predate the third item load it. ddpc.save writes version 1 whenever the
object is such data (of exactly these types, and holding no list, dict or
set twice or inside itself), so every ddpc reads it.

Version 2 holds any picklable object: the root is ["pickle", i], entry i
holding a pickle of it in which each tensor, numpy array (but one of
objects), bytes object and numpy number is a persistent id, its version-1
value (["tensor", j], ...), so tensors stay in the payload. ddpc.load
unpickles it as torch.load does: with weights_only (the default) the only
globals are ddpc's data types (OrderedDict, Counter, set, frozenset,
bytearray, complex, dtypes, devices, Size, and the DTensors, placements and
DeviceMeshes of ddpc.distributed.tensor) and those allowlisted with
add_safe_globals or safe_globals, and REDUCE, NEWOBJ and BUILD apply only to
those, so nothing else in the file runs; weights_only=False unpickles
everything, for files from a trusted source.

A save to a path writes a temporary file in the target's directory, fsyncs
it, renames it over the target and fsyncs the directory, so a crash at any
point leaves either the old or the new checkpoint, never a torn one. A
target that exists and is not a regular file (a device, a FIFO) is written
into instead, as torch.save writes it.

ddpc.load also reads what PyTorch's torch.save writes (the zip archive it has
written since PyTorch 1.6): ``<root>/data.pkl``, a pickle of the object in
which each tensor is a call of ``torch._utils._rebuild_tensor_v2`` (or
``_rebuild_parameter``) on a storage, ``<root>/data/<key>`` the raw bytes of
each storage, and ``<root>/byteorder``. Its unpickler maps those rebuild
functions, the storage types and dtypes ddpc has, ``torch.Size`` and
``torch.device`` to ddpc stand-ins and refuses every other PyTorch global;
other globals are treated as in ddpc's own pickles (refused unless
allowlisted, or with weights_only=False, imported). PyTorch's pre-1.6
format and TorchScript archives are refused.
"""

import _compat_pickle
import functools
import inspect
import io
import json
import math
import mmap as _mmap
import os
import pickle
import pickletools
import stat
import struct
import tempfile
import zipfile
import zlib
from collections import Counter, OrderedDict

import numpy as np

from . import _C
from ._dtype import bfloat16, bool_, float16, float32, float64, get_dtype, int32, int64, uint8
from ._dtype import device as _device
from .tensor import Size, Tensor

_MAGIC = b"DDPCCKPT"
_DATA_VERSION, _PICKLE_VERSION = 1, 2
_PREFIX = struct.Struct("<8sIQQI")
_ALIGN = 64
DEFAULT_PROTOCOL = 2  # PyTorch's pickle protocol for torch.save


class CheckpointError(ValueError, RuntimeError):
    """The file is not a checkpoint ddpc reads (its own or PyTorch's), or it is
    truncated or corrupted: a RuntimeError too, as PyTorch's errors for a
    truncated or foreign file are (an empty one is also an EOFError, as
    PyTorch's; see EmptyCheckpointError), so resume code written for either
    catches it."""


class EmptyCheckpointError(CheckpointError, EOFError):
    """The file is empty."""


# ---- encoding ----------------------------------------------------------------------------

class _NotData(Exception):
    """The object is not version-1 data: the checkpoint pickles it."""


class _Table:
    """What a checkpoint's payload holds, in the order of its entries:
    tensors, and the bytes of numpy arrays, bytes objects and the pickle;
    each object once, however often the saved object refers to it."""

    def __init__(self):
        self.items, self._index, self._alive = [], {}, []
        self.containers = set()  # the ids of the lists, dicts and sets encoded so far (see _encode)

    def add(self, obj, stored=lambda obj: obj):
        """The index of obj's entry, whose item is stored(obj) (obj, or its bytes as a uint8 array)."""
        index = self._index.get(id(obj))
        if index is None:
            index = self._index[id(obj)] = len(self.items)
            self.items.append(stored(obj))
            self._alive.append(obj)  # an id names one object only while it lives (pickling makes temporaries)
        return index


def _raw(obj):
    """The bytes of a bytes object or of a numpy array's elements, as a uint8 array."""
    if isinstance(obj, bytes):
        return np.frombuffer(obj, np.uint8)
    return np.ascontiguousarray(obj).reshape(-1).view(np.uint8)


_NUMPY_NUMBERS = (np.integer, np.floating, np.bool_, np.str_, np.bytes_)
_DATA_CONTAINERS = {tuple: "tuple", list: "list", set: "set", frozenset: "frozenset"}


def _encode(obj, table, depth=0):
    """obj as a version-1 value, its tensors and arrays added to table."""
    if depth > 500:
        raise _NotData  # a cycle, or deeper nesting than a header takes: the pickle holds it
    kind = type(obj)
    if obj is None:
        return ["none"]
    if kind in (bool, int, str):
        return [kind.__name__, obj]
    if kind is float:
        return ["float", obj if math.isfinite(obj) else repr(obj)]
    if isinstance(obj, Tensor) and obj.is_sparse:
        parts = [_encode(t, table, depth + 1) for t in (obj._indices(), obj._values().detach())]
        return ["sparse_coo", *parts, list(obj.shape), obj.is_coalesced(), bool(obj.requires_grad)]
    if isinstance(obj, Tensor):
        if getattr(obj, "materialize", None) is not None:  # an UninitializedParameter or UninitializedBuffer
            raise TypeError(f"ddpc.save can't store an uninitialized tensor ({type(obj).__name__}, of a lazy "
                            "module): run a forward pass through the module first, so it has a shape")
        return ["tensor", table.add(obj)]
    if kind in (list, dict, OrderedDict, set):
        # One the object holds twice, or inside itself: a header value can't share it, the pickle keeps it one
        # object (as torch.save's).
        if id(obj) in table.containers:
            raise _NotData
        table.containers.add(id(obj))
    if kind in _DATA_CONTAINERS:
        return [_DATA_CONTAINERS[kind], [_encode(v, table, depth + 1) for v in obj]]
    if kind in (dict, OrderedDict):
        items = [[_encode(k, table, depth + 1), _encode(v, table, depth + 1)] for k, v in obj.items()]
        if kind is dict:
            return ["dict", items]
        attrs = vars(obj)
        if attrs.keys() - {"_metadata"}:
            raise _NotData  # attributes of its own: the pickle keeps them all, as PyTorch's
        return ["odict", items] + ([_encode(attrs["_metadata"], table, depth + 1)] if attrs else [])
    if isinstance(obj, _NUMPY_NUMBERS):
        return _encode(obj.item(), table, depth + 1) + [obj.dtype.str]
    if isinstance(obj, np.ndarray) and not obj.dtype.hasobject and obj.dtype.fields is None:
        return ["ndarray", obj.dtype.str, list(obj.shape), table.add(obj, _raw)]
    if kind is bytes:
        return ["bytes", table.add(obj, _raw)]
    raise _NotData


def _pickled(obj, table, pickle_module, protocol):
    """obj pickled with its tensors, arrays, bytes and numpy numbers as persistent ids (their encoding)."""
    class Pickler(pickle_module.Pickler):  # a method: Python 3.13's pickler refuses persistent_id set on it
        def persistent_id(self, x):
            if isinstance(x, (Tensor, np.ndarray, *_NUMPY_NUMBERS)) or type(x) is bytes:
                try:
                    return tuple(_encode(x, table))
                except _NotData:  # an array of objects, a numpy number that is no Python one: pickled as it is
                    return None
            return None

    out = io.BytesIO()
    Pickler(out, protocol=protocol).dump(obj)
    return out.getvalue()


def _spans(items):
    """For each tensor of a table's items that shares its storage with another of them at other bytes or as
    another dtype (a slice, a view(dtype)): the (root, start, end) byte span of that storage, relative to its
    start, that covers them all (starting at a multiple of 16 bytes, so every dtype keeps its alignment)."""
    from ._storage import storage_root

    groups = {}
    for item in items:
        if isinstance(item, Tensor) and item.numel():
            root = storage_root(item._buf)
            groups.setdefault((str(item.device), root.data_ptr), (root, []))[1].append(item)
    spans = {}
    for root, members in groups.values():
        if len({(t._buf.data_ptr, t._buf.nbytes, t.dtype) for t in members}) > 1:
            start = min(t._buf.data_ptr - root.data_ptr for t in members) // 16 * 16
            end = max(t._buf.data_ptr - root.data_ptr + t._buf.nbytes for t in members)
            spans.update((id(t), (root, start, end)) for t in members)
    return spans


def _payload(items):
    """The header's entries and the payload chunks of a table's items; tensors
    over the same memory (device, address, size, dtype) share one chunk, and
    tensors at other places of one storage share the chunk of its span that holds them all."""
    from .nn.modules import Parameter

    entries, chunks, offset, chunk_of, spans = [], [], 0, {}, _spans(items)

    def add_chunk(data, nbytes):
        nonlocal offset
        pad = (-offset) % _ALIGN
        if pad:
            chunks.append(b"\0" * pad)
            offset += pad
        at = offset
        if nbytes:
            chunks.append(data())
            offset += nbytes
        return at

    for item in items:
        if isinstance(item, Tensor):
            nbytes = item.numel() * item.dtype.itemsize
            memory = (str(item.device), item._buf.data_ptr, nbytes, item.dtype.name)
            entry = {"dtype": item.dtype.name, "shape": list(item.shape), "device": str(item.device),
                     "requires_grad": bool(item.requires_grad)}
        else:
            nbytes, memory = item.nbytes, None
            entry = {"dtype": "uint8", "shape": [nbytes], "device": "cpu", "requires_grad": False}
        span = spans.get(id(item))
        if span is not None:
            root, start, end = span
            key = (str(item.device), root.data_ptr, start, end)
            at = chunk_of.get(key)
            if at is None:
                stored = Tensor(root.view(0, (root.storage_nbytes,), "uint8").view(start, (end - start,), "uint8"))
                at = chunk_of[key] = add_chunk(lambda: memoryview(stored.cpu()._buf).cast("B"), end - start)
            entry["storage"] = [at, end - start]
            at += item._buf.data_ptr - root.data_ptr - start
        else:
            at = chunk_of.get(memory) if nbytes else None
            if at is None:
                at = add_chunk(lambda: memoryview(item.detach().cpu()._buf).cast("B") if isinstance(item, Tensor)
                               else item, nbytes)
                if nbytes and memory is not None:
                    chunk_of[memory] = at
        entry.update(offset=at, nbytes=nbytes)
        if isinstance(item, Parameter):
            entry["parameter"] = True
        entries.append(entry)
    return entries, chunks


def _serialize(obj, pickle_module, pickle_protocol):
    """The checkpoint as a list of pieces, the prefix and header and then the payload's chunks
    (views of the tensors' own memory), so a save writes them out without first joining them
    into a copy as large as the file."""
    table = _Table()
    try:
        root, version = _encode(obj, table), _DATA_VERSION
    except _NotData:
        table = _Table()
        blob = _pickled(obj, table, pickle_module, pickle_protocol)
        root, version = ["pickle", table.add(blob, _raw)], _PICKLE_VERSION
    entries, chunks = _payload(table.items)
    header = json.dumps({"root": root, "tensors": entries}, separators=(",", ":")).encode("utf-8")
    crc, plen = _C.crc32(header), 0
    for chunk in chunks:
        crc = _C.crc32(chunk, crc)
        plen += memoryview(chunk).nbytes
    return [_PREFIX.pack(_MAGIC, version, len(header), plen, crc) + header] + chunks


# ---- decoding ----------------------------------------------------------------------------

def _fail(path, why, kind="ddpc", error=CheckpointError):
    raise error(f"{path}: not a loadable {kind} checkpoint: {why}")


def _takes_storage(fn):
    """Whether a map_location callable has PyTorch's form fn(storage, location)."""
    try:
        inspect.signature(fn).bind(None, None)
    except TypeError:
        return False
    except ValueError:  # no signature to read (some builtins): PyTorch's form
        return True
    return True


def _resolve_device(saved, map_location):
    if map_location is None:
        return saved
    if callable(map_location):
        return map_location(saved)
    if isinstance(map_location, dict):
        return map_location.get(saved, saved)
    return str(_device(map_location))


def _placed(t, saved_device, map_location):
    """The fresh host tensor t on the device map_location gives a tensor saved on saved_device."""
    if callable(map_location) and _takes_storage(map_location):
        # PyTorch's form: given the tensor (on the host) and its saved device,
        # returns it moved (or as it is), or None for its saved device.
        moved = map_location(t, saved_device)
        target = saved_device if moved is None else (None if isinstance(moved, Tensor) else moved)
        t = moved if isinstance(moved, Tensor) else t
    else:
        target = _resolve_device(saved_device, map_location)
    if target is not None and str(target) != "cpu":
        t = t.to(device=target)
    return t


def _leaf(buf, requires_grad, parameter=False):
    """A tensor over buf requiring grad as saved (if it is floating or complex), a Parameter if saved as one."""
    dt = get_dtype(buf.dtype)
    requires_grad = bool(requires_grad) and (dt.is_floating_point or dt.is_complex)
    if parameter:
        from .nn.modules import Parameter

        return Parameter(Tensor(buf), requires_grad)
    return Tensor(buf, requires_grad=requires_grad)


class _Stored:
    """The entries of a ddpc checkpoint: raw bytes, and tensors, each made
    once when first asked for, on the device map_location gives; entries at
    one offset (one memory when saved) share one buffer."""

    def __init__(self, entries, payload, map_location, path, numpy_numbers=False):
        self._entries, self._payload, self._map_location, self._path = entries, payload, map_location, path
        self._tensors, self._buffers = {}, {}
        self.numpy_numbers = numpy_numbers  # whether numpy numbers load as such (else as Python numbers)

    def _entry(self, i):
        try:
            if type(i) is not int or not 0 <= i < len(self._entries):
                raise IndexError
            entry = self._entries[i]
            dt = get_dtype(entry["dtype"])
            shape = tuple(int(s) for s in entry["shape"])
            offset, nbytes = int(entry["offset"]), int(entry["nbytes"])
            saved_device = str(entry["device"])
            requires_grad, parameter = bool(entry["requires_grad"]), bool(entry.get("parameter", False))
        except (IndexError, KeyError, TypeError, ValueError, AttributeError):
            _fail(self._path, "malformed tensor entry")
        if any(s < 0 for s in shape):
            _fail(self._path, "negative tensor dimension")
        if nbytes != math.prod(shape) * dt.itemsize or offset < 0 or offset + nbytes > len(self._payload):
            _fail(self._path, "a tensor's size disagrees with the payload")
        return dt, shape, offset, nbytes, saved_device, requires_grad, parameter

    def raw(self, i):
        """Entry i's bytes (a view of the payload)."""
        _, _, offset, nbytes, *_ = self._entry(i)
        return self._payload[offset:offset + nbytes]

    def _storage(self, i, offset, nbytes, saved_device):
        """The buffer (uint8, on the device map_location gives) of the storage span entry i lies in, made once
        for all of its entries, and entry i's place in it; None where entry i has no storage span."""
        span = self._entries[i].get("storage")
        if span is None:
            return None
        try:
            start, length = (int(n) for n in span)
        except (TypeError, ValueError):
            _fail(self._path, "malformed tensor entry")
        if not (0 <= start <= offset and offset + nbytes <= start + length <= len(self._payload)):
            _fail(self._path, "a tensor's storage disagrees with the payload")
        key = ("storage", start, length)
        buf = self._buffers.get(key)
        if buf is None:
            host = _C.Buffer((length,), "uint8")
            np.asarray(host)[:] = np.frombuffer(self._payload, np.uint8, length, start)
            buf = self._buffers[key] = _placed(Tensor(host), saved_device, self._map_location)._buf
        return buf, offset - start

    def tensor(self, i):
        if i not in self._tensors:
            dt, shape, offset, nbytes, saved_device, requires_grad, parameter = self._entry(i)
            memory = (offset, nbytes, dt.name)
            buf = self._buffers.get(memory) if nbytes else None
            storage = self._storage(i, offset, nbytes, saved_device) if nbytes and buf is None else None
            if storage is not None:  # a view into a storage other entries view too
                buf = self._buffers[memory] = storage[0].view(storage[1], shape, dt.name)
            elif buf is None:
                host = _C.Buffer(shape, dt.name)
                if nbytes:
                    np.asarray(host).reshape(-1).view(np.uint8)[:] = np.frombuffer(self._payload, np.uint8, nbytes,
                                                                                   offset)
                buf = _placed(Tensor(host), saved_device, self._map_location)._buf
                if nbytes:
                    self._buffers[memory] = buf
            elif buf.shape != shape:
                buf = buf.view(0, shape)
            self._tensors[i] = _leaf(buf, requires_grad, parameter)
        return self._tensors[i]


# The tags of a numpy number's value, and the kinds of numpy dtypes it may have.
_NUMPY_NUMBER_TAGS, _NUMPY_NUMBER_KINDS = ("bool", "int", "float", "str", "bytes"), "biufSU"


def _decode(v, stored, path, depth=0):
    if depth > 500 or not isinstance(v, list) or not v or not isinstance(v[0], str):
        _fail(path, "malformed header")
    tag = v[0]
    try:
        if len(v) > 2 and tag in _NUMPY_NUMBER_TAGS:
            value = _decode(v[:2], stored, path, depth + 1)
            dt = np.dtype(v[2])
            if dt.kind not in _NUMPY_NUMBER_KINDS:
                _fail(path, f"a {tag} value of numpy dtype {dt}")
            return dt.type(value) if stored.numpy_numbers else value
        if tag == "none":
            return None
        if tag in ("bool", "int", "str"):
            want = {"bool": bool, "int": int, "str": str}[tag]
            if not isinstance(v[1], want) or (tag == "int" and isinstance(v[1], bool)):
                _fail(path, f"malformed {tag} value")
            return v[1]
        if tag == "float":
            return float(v[1])
        if tag == "tensor":
            return stored.tensor(v[1])
        if tag == "sparse_coo":
            from ._sparse_coo import SparseTensor

            indices, values = (_decode(x, stored, path, depth + 1) for x in v[1:3])
            return SparseTensor(indices.to(values.device), values, [int(n) for n in v[3]], bool(v[4]), bool(v[5]))
        if tag in ("list", "tuple"):
            items = [_decode(x, stored, path, depth + 1) for x in v[1]]
            return items if tag == "list" else tuple(items)
        if tag in ("dict", "odict"):
            out = OrderedDict() if tag == "odict" else {}
            for k, x in v[1]:
                out[_decode(k, stored, path, depth + 1)] = _decode(x, stored, path, depth + 1)
            if tag == "odict" and len(v) > 2:
                out._metadata = _decode(v[2], stored, path, depth + 1)
            return out
        if tag in ("set", "frozenset"):
            items = (_decode(x, stored, path, depth + 1) for x in v[1])
            return set(items) if tag == "set" else frozenset(items)
        if tag == "bytes":
            return bytes(stored.raw(v[1]))
        if tag == "ndarray":
            dt = np.dtype(v[1])
            if dt.hasobject or dt.fields is not None:
                _fail(path, "a numpy array of objects")
            return np.frombuffer(stored.raw(v[3]), dt).reshape([int(n) for n in v[2]]).copy()
    except (IndexError, TypeError, ValueError) as e:
        if isinstance(e, CheckpointError):
            raise
        _fail(path, f"malformed {tag} entry")
    _fail(path, f"unknown value tag {tag!r}")


# Version-1 values a pickle's persistent ids are (what _pickled makes one of).
_PERSISTENT_TAGS = ("tensor", "sparse_coo", "ndarray", "bytes", "bool", "int", "float", "str")


class _DdpcPickle:
    """The pickle of a version-2 checkpoint: its persistent ids are stored
    tensors and data; its globals are the real ones (no stand-ins), and
    with weights_only, ddpc's data types are allowed."""

    def __init__(self, stored, path):
        self._stored, self._path, self._loaded = stored, path, {}
        self.data_globals = _DDPC_GLOBALS

    def stand_in(self, module, name):
        return None

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and pid and pid[0] in _PERSISTENT_TAGS):
            _fail(self._path, f"unknown persistent id {pid!r:.80}")
        key = repr(pid)  # an array the object holds twice comes back as one array
        if key not in self._loaded:
            self._loaded[key] = _decode(list(pid), self._stored, self._path)
        return self._loaded[key]


def _deserialize(data, map_location, path, unpickle, numpy_numbers=False):
    if len(data) < _PREFIX.size:
        if not data:
            _fail(path, "the file is truncated (0 bytes)", error=EmptyCheckpointError)
        if not _MAGIC.startswith(data[:8]):
            _fail(path, "wrong magic bytes (this is not a ddpc checkpoint)")
        _fail(path, f"the file is truncated ({len(data)} bytes)")
    magic, version, hlen, plen, crc = _PREFIX.unpack_from(data)
    if magic != _MAGIC:
        _fail(path, "wrong magic bytes (this is not a ddpc checkpoint)")
    if version not in (_DATA_VERSION, _PICKLE_VERSION):
        _fail(path, f"format version {version} is not supported (this ddpc reads versions {_DATA_VERSION} "
                    f"and {_PICKLE_VERSION})")
    if _PREFIX.size + hlen + plen != len(data):
        _fail(path, f"the file is {len(data)} bytes but its header announces {_PREFIX.size + hlen + plen} "
                    "(truncated or extended)")
    header = data[_PREFIX.size:_PREFIX.size + hlen]
    payload = memoryview(data)[_PREFIX.size + hlen:]
    if _C.crc32(payload, _C.crc32(header)) != crc:
        _fail(path, "checksum mismatch (the file is corrupted)")
    try:
        meta = json.loads(header.decode("utf-8"))
        root, entries = meta["root"], meta["tensors"]
        if not isinstance(entries, list):
            raise TypeError
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        _fail(path, "malformed header")
    stored = _Stored(entries, payload, map_location, path, numpy_numbers)
    if version == _DATA_VERSION:
        return _decode(root, stored, path)
    if not (isinstance(root, list) and len(root) == 2 and root[0] == "pickle"):
        _fail(path, "malformed header (a version 2 root is a pickle)")
    return unpickle(stored.raw(root[1]), _DdpcPickle(stored, path))


# ---- weights_only: the allowlist and its unpickler ----------------------------------------

_safe_globals = {}  # what add_safe_globals allowed, in order (a dict as an ordered set)
_BLOCKED_MODULES = ("sys", "os", "posix", "nt")  # never allowed, even when allowlisted (as in PyTorch)
_UNSAFE_ADVICE = ("Re-running `ddpc.load` with `weights_only` set to `False` will likely succeed, but it can result "
                  "in arbitrary code execution. Do it only if you got the file from a trusted source.")


def _global_name(obj):
    return f"{obj.__module__}.{obj.__qualname__}"


def _by_name(*objects):
    return {_global_name(obj): obj for obj in objects}


def _latin1_bytes(text, encoding):
    """_codecs.encode as protocol 2 pickles a bytes object: encode(text, "latin1")."""
    if not isinstance(text, str) or encoding != "latin1":
        raise TypeError("_codecs.encode is loaded only to rebuild bytes (text, 'latin1')")
    return text.encode("latin1")


# The globals of plain data in a pickle, in ddpc's and in PyTorch's, as torch.load's weights_only allows them.
_DATA_GLOBALS = {**_by_name(OrderedDict, Counter, set, frozenset, bytearray, complex), "_codecs.encode": _latin1_bytes}
_DDPC_GLOBALS = {**_DATA_GLOBALS, **_by_name(get_dtype, _device, Size)}


def _add_ddpc_globals(*objects):
    """Allows ddpc's own objects of a module that loads after this one (a
    DTensor's, a DeviceMesh's) in weights_only loading, as PyTorch allows its
    DTensor's once torch.distributed.tensor is imported. They are not the
    user's safe globals (get_safe_globals does not list them)."""
    _DDPC_GLOBALS.update(_by_name(*objects))


def _check_safe_global(entry):
    if isinstance(entry, tuple):
        if len(entry) != 2:
            raise ValueError("Expected tuple of length 2 (global, str of callable full path), but got tuple of "
                             f"length: {len(entry)}")
        if type(entry[1]) is not str:
            raise TypeError(f"Expected second item in tuple to be str of callable full path, but got: "
                            f"{type(entry[1])}")
    elif not (hasattr(entry, "__module__") and hasattr(entry, "__qualname__")):
        raise TypeError(f"add_safe_globals takes classes and functions, or (object, 'module.name') pairs; "
                        f"got {entry!r:.80}")


def add_safe_globals(safe_globals):
    """Marks globals (classes, functions) as safe for ``weights_only``
    loading, as ``torch.serialization.add_safe_globals``: a file may then
    name them, so classes are instantiated and their state set, functions
    called. Each is an object, which a file names by its
    ``{__module__}.{__qualname__}``, or a pair ``(object, "module.name")``
    for a file that names it otherwise. Globals of the modules sys, os,
    posix and nt stay refused."""
    safe_globals = list(safe_globals)
    for entry in safe_globals:
        _check_safe_global(entry)
    _safe_globals.update(dict.fromkeys(safe_globals))


def get_safe_globals():
    """The globals add_safe_globals (or a safe_globals block) allowed, in the order they were added."""
    return list(_safe_globals)


def clear_safe_globals():
    """Forgets every global add_safe_globals allowed."""
    _safe_globals.clear()


class safe_globals:
    """``with ddpc.serialization.safe_globals([cls, ...]):`` allows these
    globals for ``weights_only`` loading inside the block, as
    ``torch.serialization.safe_globals``. Where ddpc differs: a global that
    was allowed before the block stays allowed after it."""

    def __init__(self, safe_globals):
        self.safe_globals = list(safe_globals)
        self._added = []

    def __enter__(self):
        self._added = [g for g in self.safe_globals if g not in _safe_globals]
        add_safe_globals(self._added)

    def __exit__(self, exc_type, exc_value, traceback):
        for entry in self._added:
            _safe_globals.pop(entry, None)


class _WeightsOnlyError(pickle.UnpicklingError):
    """A refusal of weights_only loading; ddpc.load raises it as a pickle.UnpicklingError, as torch.load does."""


def _allowlisted(module, name, path):
    """The allowlisted global module.name, or the refusal that names it and says how to allow it."""
    full = f"{module}.{name}"
    if module in _BLOCKED_MODULES:
        raise _WeightsOnlyError(f"Weights only load failed for {path}: Trying to load unsupported GLOBAL {full} "
                                f"whose module {module} is blocked. {_UNSAFE_ADVICE}")
    user = {(entry[1] if isinstance(entry, tuple) else _global_name(entry)):
            (entry[0] if isinstance(entry, tuple) else entry) for entry in _safe_globals}
    if full in user:
        return user[full]
    shown = name if module == "builtins" else full
    raise _WeightsOnlyError(
        f"Weights only load failed for {path}: Unsupported global: GLOBAL {shown} was not an allowed global by "
        "default. This file can still be loaded; do one of these only if you trust its source: (1) "
        f"{_UNSAFE_ADVICE} (2) Use `ddpc.serialization.add_safe_globals([{shown}])` or the "
        f"`ddpc.serialization.safe_globals([{shown}])` context manager to allowlist this global if you trust "
        "this class/function.")


def _python3_name(module, name):
    """The Python 3 module and name of a global as a protocol-2 pickle names it (builtins as __builtin__)."""
    return _compat_pickle.NAME_MAPPING.get((module, name), (_compat_pickle.IMPORT_MAPPING.get(module, module), name))


class _WeightsOnlyUnpickler(pickle._Unpickler):
    """Unpickles with weights_only=True, as PyTorch's weights-only unpickler:
    a global is one of the checkpoint's stand-ins (source.stand_in), one of
    the globals of its data (source.data_globals) or an allowlisted one, and
    REDUCE, NEWOBJ and BUILD, which run code, apply only to those globals
    (and their instances), so nothing else in the file runs. It is Python's
    pure-Python unpickler because that one's opcodes can be overridden; the
    pickles it reads hold no tensor data (those are persistent ids), so its
    speed does not matter."""

    dispatch = dict(pickle._Unpickler.dispatch)

    def __init__(self, file, source, path, **load_args):
        super().__init__(file, **load_args)
        self._source, self._path, self._allowed = source, path, {}

    def persistent_load(self, pid):
        return self._source.persistent_load(pid)

    def find_class(self, module, name):
        module, name = _python3_name(module, name)
        found = self._source.stand_in(module, name)
        if found is None:
            found = self._source.data_globals.get(f"{module}.{name}") or _allowlisted(module, name, self._path)
        self._allowed[id(found)] = found
        return found

    def _check(self, obj, what):
        if id(obj) not in self._allowed:
            raise _WeightsOnlyError(f"Weights only load failed for {self._path}: the pickle {what} {obj!r:.80}, "
                                    f"which is not an allowed global. {_UNSAFE_ADVICE}")

    def load_reduce(self):
        self._check(self.stack[-2], "calls")
        super().load_reduce()

    def load_newobj(self):
        self._check(self.stack[-2], "creates an object of")
        super().load_newobj()

    def load_newobj_ex(self):
        self._check(self.stack[-3], "creates an object of")
        super().load_newobj_ex()

    def load_build(self):
        self._check(type(self.stack[-2]), "sets the state of an object of")
        super().load_build()

    def refuse_instance_opcodes(self):
        raise _WeightsOnlyError(f"Weights only load failed for {self._path}: the pickle builds an object with "
                                f"protocol 0 and 1 opcodes (INST, OBJ), which this unpickler refuses. "
                                f"{_UNSAFE_ADVICE}")

    dispatch[pickle.REDUCE[0]] = load_reduce
    dispatch[pickle.NEWOBJ[0]] = load_newobj
    dispatch[pickle.NEWOBJ_EX[0]] = load_newobj_ex
    dispatch[pickle.BUILD[0]] = load_build
    dispatch[pickle.INST[0]] = dispatch[pickle.OBJ[0]] = refuse_instance_opcodes


def _unpickle(data, source, *, weights_only, pickle_module, load_args, path):
    """The object pickled in data, its persistent ids and stand-in globals
    given by source; with weights_only, under PyTorch's rules, otherwise
    with pickle_module's Unpickler, as pickle.load."""
    file = io.BytesIO(data)
    if weights_only:
        return _WeightsOnlyUnpickler(file, source, path, **load_args).load()

    class Unpickler(pickle_module.Unpickler):
        def find_class(self, module, name):
            found = source.stand_in(*_python3_name(module, name))
            return super().find_class(module, name) if found is None else found

        def persistent_load(self, pid):
            return source.persistent_load(pid)

    return Unpickler(file, **load_args).load()


# ---- PyTorch's checkpoints ---------------------------------------------------------------

_ZIP_MAGIC = b"PK\x03\x04"
# torch.save before PyTorch 1.6 began with a pickled magic number: PROTO 2, then LONG1 of these 10 bytes.
_LEGACY_TORCH_MAGIC = b"\x8a\nl\xfc\x9cF\xf9 j\xa8P\x19"
_SUPPORTED = "float32, float64, float16, bfloat16, int32, int64, uint8 and bool"

# torch.<name>Storage -> the ddpc dtype of its elements.
_TORCH_STORAGES = {"FloatStorage": float32, "DoubleStorage": float64, "HalfStorage": float16,
                   "BFloat16Storage": bfloat16, "IntStorage": int32, "LongStorage": int64, "ByteStorage": uint8,
                   "BoolStorage": bool_}


class _Storage:
    """One storage of a PyTorch checkpoint: its elements as a numpy array over
    the record's bytes (in the file's byte order; bfloat16 as uint16), its
    ddpc dtype and the device it was saved from."""

    __slots__ = ("array", "dtype", "location")

    def __init__(self, array, dtype, location):
        self.array, self.dtype, self.location = array, dtype, location


class _PlacementError(Exception):
    """Carries an error of map_location, or of moving a tensor to its device,
    out of the unpickler, so it is raised as it is and not as a damaged file."""


class _TorchPickle:
    """A PyTorch checkpoint's data.pkl: its storages are persistent ids, and
    ddpc's rebuild functions, storage types, dtypes, Size and device stand in
    for PyTorch's globals; any other PyTorch global is refused before it is
    looked up."""

    def __init__(self, archive, root, byteorder, map_location, path):
        self._archive, self._root, self._map_location, self._path = archive, root, map_location, path
        self.data_globals = _DATA_GLOBALS
        self._order = ">" if byteorder == b"big" else "<"
        self._records = {}  # storage key -> the record's bytes, read once for every tensor that views it
        self.data = archive.read(root + "data.pkl")
        # The C unpickler grows its memo to twice the largest index a PUT names, so a forged
        # index would claim gigabytes (honest ones count the PUTs before it); out-of-band
        # buffers are not in what torch.save writes.
        for op, arg, _ in pickletools.genops(self.data):
            if (op.name.endswith("PUT") and arg > len(self.data)) or op.name in ("NEXT_BUFFER", "READONLY_BUFFER"):
                self._fail(f"data.pkl has a {op.name} that torch.save does not write")

    def _fail(self, why):
        _fail(self._path, why, "PyTorch")

    def stand_in(self, module, name):
        if module == "torch._utils" and name in ("_rebuild_tensor_v2", "_rebuild_parameter",
                                                 "_rebuild_parameter_with_state"):
            return getattr(self, name)
        if module == "torch":
            if name == "Size":
                return tuple  # ddpc's shapes are tuples
            if name == "device":
                return _device
            if name in _TORCH_STORAGES:
                return _TORCH_STORAGES[name]
            if name.endswith("Storage"):
                self._fail(f"it holds a torch.{name}, and ddpc reads tensors of {_SUPPORTED}: "
                           "convert the others in PyTorch (for example t.to(torch.int32)) and save again")
            try:
                return get_dtype(name)  # torch.float32, torch.long, ...
            except TypeError:
                pass
        if module == "torch" or module.startswith("torch."):
            self._fail(f"data.pkl refers to {module}.{name}, a PyTorch object ddpc has no counterpart for (it "
                       f"reads PyTorch's tensors and dtypes of {_SUPPORTED}, Parameters, devices and sizes): "
                       "save its state_dict() in PyTorch instead, or what else it holds as plain data")
        return None

    def persistent_load(self, pid):
        if not (isinstance(pid, tuple) and len(pid) == 5 and pid[0] == "storage"):
            self._fail(f"unknown persistent id {pid!r:.80}")
        _, dtype, key, location, numel = pid
        if not (dtype in _TORCH_STORAGES.values() and isinstance(key, str) and isinstance(location, str)
                and isinstance(numel, int) and numel >= 0):
            self._fail(f"malformed storage reference {pid!r:.80}")
        if key not in self._records:
            try:
                self._records[key] = self._archive.read(f"{self._root}data/{key}")
            except KeyError:
                self._fail(f"the archive has no record {self._root}data/{key}")
        record = self._records[key]
        raw = np.dtype(np.uint16 if dtype is bfloat16 else dtype._np).newbyteorder(self._order)
        if len(record) < numel * raw.itemsize:
            self._fail(f"storage {key} holds {len(record)} bytes, fewer than its {numel} elements need")
        return _Storage(np.frombuffer(record, raw, numel), dtype, location)

    def _rebuild_tensor_v2(self, storage, storage_offset, size, stride, requires_grad, backward_hooks,
                           metadata=None):
        """A contiguous ddpc tensor with the values PyTorch's view (size, stride
        from storage_offset) of the storage shows; backward hooks are never
        saved (PyTorch writes an empty OrderedDict), and the one metadata
        flag a real tensor can carry, PyTorch's lazy negation, is applied."""
        del backward_hooks
        shape, strides = tuple(size), tuple(stride)
        if not (isinstance(storage, _Storage) and len(shape) == len(strides)
                and all(isinstance(n, int) and n >= 0 for n in (storage_offset, *shape, *strides))):
            self._fail("malformed tensor")
        flags = dict(metadata or {})
        negate = flags.pop("neg", False)
        if any(flags.values()):
            self._fail(f"a tensor carries PyTorch metadata ddpc does not apply: {flags}")
        values = storage.array
        if all(shape):
            if storage_offset + sum((n - 1) * s for n, s in zip(shape, strides)) >= len(values):
                self._fail("a tensor reaches past the end of its storage")
            values = np.lib.stride_tricks.as_strided(values[storage_offset:], shape,
                                                     [s * values.itemsize for s in strides], writeable=False)
        buf = _C.Buffer(shape, storage.dtype.name)
        if all(shape):
            np.asarray(buf)[...] = values  # the one copy: gathers the view, swaps bytes if the file is big-endian
        t = Tensor(buf)
        try:
            return _leaf(_placed(-t if negate else t, storage.location, self._map_location)._buf, requires_grad)
        except Exception as e:
            raise _PlacementError from e

    def _rebuild_parameter(self, data, requires_grad, backward_hooks):
        """A ddpc Parameter over the tensor data (rebuilt, placed), as PyTorch's."""
        from .nn.modules import Parameter

        del backward_hooks
        if not isinstance(data, Tensor):
            self._fail("a Parameter without a tensor")
        return Parameter(data, bool(requires_grad))

    def _rebuild_parameter_with_state(self, data, requires_grad, backward_hooks, state):
        """A Parameter with the Python attributes a user gave it in PyTorch
        (state is its __dict__, or (__dict__, slots)); none may replace an
        attribute a ddpc Parameter has."""
        param = self._rebuild_parameter(data, requires_grad, backward_hooks)
        for attrs in state if isinstance(state, tuple) else (state,):
            for name, value in (attrs or {}).items():
                if not isinstance(name, str) or hasattr(param, name):
                    self._fail(f"a Parameter's saved attribute {name!r:.40} would replace one of ddpc's")
                setattr(param, name, value)
        return param


def _torch_deserialize(data, map_location, path, unpickle):
    try:
        archive = zipfile.ZipFile(io.BytesIO(data))
        names = archive.namelist()
    except (zipfile.BadZipFile, EOFError, ValueError) as e:
        _fail(path, f"a damaged zip archive ({e})", "PyTorch")
    if any(n.rsplit("/", 1)[-1] == "constants.pkl" for n in names):
        _fail(path, "it is a TorchScript archive (torch.jit.save), and ddpc loads what torch.save wrote: "
                    "in PyTorch, torch.save(torch.jit.load(path).state_dict(), new_path) and load that", "PyTorch")
    pickles = [n for n in names if n.count("/") == 1 and n.endswith("/data.pkl")]
    if len(pickles) != 1:
        _fail(path, "a zip archive without a <root>/data.pkl (not written by torch.save)", "PyTorch")
    root = pickles[0][:-len("data.pkl")]
    try:
        byteorder = archive.read(root + "byteorder") if root + "byteorder" in names else b"little"
        if byteorder not in (b"little", b"big"):
            _fail(path, f"unknown byte order {byteorder[:20]!r}", "PyTorch")
        source = _TorchPickle(archive, root, byteorder, map_location, path)
        return unpickle(source.data, source)
    except _PlacementError as e:
        raise e.__cause__ from None
    except (CheckpointError, _WeightsOnlyError):
        raise
    except (pickle.UnpicklingError, zipfile.BadZipFile, zlib.error, EOFError, AttributeError, IndexError,
            KeyError, OverflowError, TypeError, ValueError) as e:
        _fail(path, f"{type(e).__name__}: {e}", "PyTorch")


# ---- public API --------------------------------------------------------------------------

def _file_mode(path):
    """The permissions a file written at ``path`` gets, as open() would give
    it: an existing file's own, else 0666 less the umask (the temporary file
    the write goes through starts at 0600)."""
    try:
        return stat.S_IMODE(os.stat(path).st_mode)
    except FileNotFoundError:
        pass
    try:  # (read, not set: os.umask would change it for every thread a moment)
        with open("/proc/self/status") as status:
            umask = next((int(line.split()[1], 8) for line in status if line.startswith("Umask:")), None)
    except OSError:
        umask = None
    if umask is None:
        umask = os.umask(0o022)
        os.umask(umask)
    return 0o666 & ~umask


def save(obj, f, pickle_module=pickle, pickle_protocol=DEFAULT_PROTOCOL, _use_new_zipfile_serialization=True,
         _disable_byteorder_record=False):
    """Writes obj to the path f atomically (a device or FIFO there is written
    into), or to a writable binary file object, as torch.save: a state dict,
    or any picklable object (a whole Module, an optimizer or lr scheduler, an
    argparse.Namespace, a dataclass, a dict of these).

    Tensors are never pickled: each is stored once in ddpc's format with its
    dtype, shape, device, requires_grad and whether it is a Parameter (not
    its grad or hooks, as in PyTorch), and tensors over the same memory load
    sharing it. An object of only tensors, numpy arrays, numbers, strings,
    bytes, None, and lists, tuples, dicts, OrderedDicts and sets of them is
    written without pickle (format 1, which every ddpc reads); anything else
    is pickled with ``pickle_module`` at ``pickle_protocol`` (2 or higher,
    or negative for the highest)
    and loads with ``weights_only=False``, or with its classes allowlisted
    (``ddpc.serialization.add_safe_globals``). ``_use_new_zipfile_serialization``
    and ``_disable_byteorder_record``, which pick among PyTorch's formats, are
    taken (as scripts written for PyTorch pass them) and change nothing: the
    file is in ddpc's format either way."""
    if 0 <= pickle_protocol < 2:
        raise ValueError(f"ddpc.save: pickle_protocol must be 2 or higher (tensors are persistent ids, which "
                         f"protocols 0 and 1 write only as text), got {pickle_protocol}")
    pieces = _serialize(obj, pickle_module, pickle_protocol)
    if hasattr(f, "write"):
        for piece in pieces:
            f.write(piece)
        return
    path = os.path.realpath(os.fspath(f))  # through a symbolic link, as torch.save writes
    try:
        special = not stat.S_ISREG(os.stat(path).st_mode)
    except FileNotFoundError:
        special = False
    if special:
        # A device or a FIFO (os.devnull, a pipe to a compressor) is written
        # into, as torch.save writes it: renaming a file over it would replace it.
        with open(path, "wb") as out:
            for piece in pieces:
                out.write(piece)
        return
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        os.fchmod(fd, _file_mode(path))
        with os.fdopen(fd, "wb") as out:
            for piece in pieces:
                out.write(piece)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise
    dfd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(dfd)
    finally:
        os.close(dfd)


def _read_file(path):
    """The bytes of the file at path. A ddpc checkpoint is mapped instead of read: its tensors are
    copied out of the page cache once, not first into a bytes object as large as the file."""
    with open(path, "rb") as fh:
        if fh.read(len(_MAGIC)) == _MAGIC and os.fstat(fh.fileno()).st_size >= _PREFIX.size:
            return _mmap.mmap(fh.fileno(), 0, access=_mmap.ACCESS_READ)
        fh.seek(0)
        return fh.read()


def load(f, map_location=None, pickle_module=None, *, weights_only=None, mmap=None, **pickle_load_args):
    """Reads a checkpoint written by ddpc.save, or by PyTorch's torch.save
    (1.6 or later), from a path or a binary file object.

    weights_only: as torch.load since PyTorch 2.6, True unless False is
    given (or a pickle_module, with weights_only left None). Data (tensors,
    numbers, strings, containers) always loads; any other global a file
    names must be allowlisted with ``ddpc.serialization.add_safe_globals``
    or the ``safe_globals`` context manager, or loading raises
    ``pickle.UnpicklingError`` naming it, and nothing from the file runs.
    weights_only=False unpickles everything with ``pickle_module``
    (``pickle`` by default), which can run any code: only for files from a
    trusted source. ``pickle_load_args`` (``encoding=``, ...) go to the
    unpickler. ``mmap`` is taken for PyTorch's signature and changes
    nothing: ddpc reads the file and copies each tensor out of it either way.

    From a PyTorch file come ddpc tensors of the same dtypes,
    ``ddpc.nn.Parameter`` for Parameters, requires_grad as saved,
    tuples for ``torch.Size``, and ddpc dtypes and devices. Where ddpc
    differs: tensors that shared a storage in PyTorch (views, tied weights)
    come back as separate contiguous tensors with the same values. Refused
    with a CheckpointError naming the cause: int8, int16, complex and
    quantized tensors, other PyTorch objects (a whole torch.nn.Module),
    PyTorch's format before 1.6, and TorchScript archives.

    map_location: None (tensors return to the device they were saved from),
    a device ("cpu", "cuda:1"), a dict mapping saved device strings to new
    ones, a callable taking the saved device string, or PyTorch's callable
    ``fn(storage, location)``, given each tensor on the host and its saved
    device, returning it (moved or not), or None for its saved device
    (``lambda storage, loc: storage`` keeps everything on the host). Raises
    CheckpointError for files that are not intact checkpoints.
    """
    del mmap
    if weights_only is None:
        weights_only = pickle_module is None
    elif weights_only and pickle_module is not None:
        raise RuntimeError("Can not safely load weights when explicit pickle_module is specified")
    if hasattr(f, "read"):
        data, path = bytes(f.read()), getattr(f, "name", "<file>")
    else:
        path = os.fspath(f)
        data = _read_file(path)
    unpickle = functools.partial(_unpickle, weights_only=weights_only, pickle_module=pickle_module or pickle,
                                 load_args={"encoding": "utf-8", **pickle_load_args}, path=path)
    try:
        if data[:len(_ZIP_MAGIC)] == _ZIP_MAGIC:
            return _torch_deserialize(data, map_location, path, unpickle)
        if data[2:14] == _LEGACY_TORCH_MAGIC:
            _fail(path, "it is in PyTorch's format before 1.6 (or _use_new_zipfile_serialization=False), which "
                        "ddpc does not read: load it with torch.load and save it again with a recent torch.save",
                  "PyTorch")
        return _deserialize(data, map_location, path, unpickle, numpy_numbers=not weights_only)
    except _WeightsOnlyError as e:
        raise pickle.UnpicklingError(str(e)) from None
