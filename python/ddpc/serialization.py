"""ddpc.save / ddpc.load: checkpoints of nested containers of tensors.

The file format is ddpc's own, so loading never executes code from the file
(unlike pickle):

    magic    8 bytes  b"DDPCCKPT"
    version  u32      1
    hlen     u64      length of the header
    plen     u64      length of the payload
    crc      u32      CRC-32 of header + payload
    header   hlen bytes of UTF-8 JSON: {"root": <value>, "tensors": [...]}
    payload  plen bytes: every tensor's raw bytes, 64-byte aligned

(all integers little-endian). A value in the header is a tagged list:
["none"], ["bool", b], ["int", n], ["float", x], ["str", s], ["list", [...]],
["tuple", [...]], ["dict", [[key, value], ...]] (keys are values too, so int
keys of optimizer state survive), ["set", [...]], ["frozenset", [...]] or
["tensor", i]; tensor entry i records dtype, shape, device, requires_grad
and its payload offset. A numpy array is ["ndarray", numpy dtype string,
shape, i] and a bytes object ["bytes", i], tensor i holding their bytes.

A save writes a temporary file in the target's directory, fsyncs it, renames
it over the target and fsyncs the directory, so a crash at any point leaves
either the old or the new checkpoint, never a torn one.

ddpc.load also reads what PyTorch's torch.save writes (the zip archive it has
written since PyTorch 1.6): ``<root>/data.pkl``, a pickle of the object in
which each tensor is a call of ``torch._utils._rebuild_tensor_v2`` (or
``_rebuild_parameter``) on a storage, ``<root>/data/<key>`` the raw bytes of
each storage, and ``<root>/byteorder``. The pickle is read by an unpickler
that knows only those rebuild functions, the storage types and dtypes ddpc
has, ``torch.Size``, ``torch.device`` and the standard containers, each
mapped to a ddpc stand-in; it refuses every other global before looking it
up, so, like torch.load(weights_only=True), loading runs no code from the
file. PyTorch's pre-1.6 format and TorchScript archives are refused.
"""

import inspect
import io
import json
import math
import os
import pickle
import pickletools
import struct
import tempfile
import zipfile
import zlib
from collections import OrderedDict

import numpy as np

from . import _C
from ._dtype import bfloat16, float16, float32, float64, get_dtype, int32, int64, uint8
from ._dtype import device as _device
from .tensor import Tensor

_MAGIC = b"DDPCCKPT"
_VERSION = 1
_PREFIX = struct.Struct("<8sIQQI")
_ALIGN = 64


class CheckpointError(ValueError):
    """The file is not a checkpoint ddpc reads (its own or PyTorch's), or it is
    truncated or corrupted."""


# ---- encoding ----------------------------------------------------------------------------

def _encode(obj, tensors, depth=0):
    if depth > 500:
        raise ValueError("ddpc.save: the object nests too deeply (or contains itself)")
    if obj is None:
        return ["none"]
    if isinstance(obj, bool):
        return ["bool", obj]
    if isinstance(obj, int):
        return ["int", obj]
    if isinstance(obj, float):
        return ["float", obj if math.isfinite(obj) else repr(obj)]
    if isinstance(obj, str):
        return ["str", obj]
    if isinstance(obj, Tensor):
        if getattr(obj, "materialize", None) is not None:  # an UninitializedParameter or UninitializedBuffer
            raise TypeError(f"ddpc.save can't store an uninitialized tensor ({type(obj).__name__}, of a lazy "
                            "module): run a forward pass through the module first, so it has a shape")
        tensors.append(obj)
        return ["tensor", len(tensors) - 1]
    if isinstance(obj, tuple):
        return ["tuple", [_encode(v, tensors, depth + 1) for v in obj]]
    if isinstance(obj, list):
        return ["list", [_encode(v, tensors, depth + 1) for v in obj]]
    if isinstance(obj, dict):
        kind = "odict" if isinstance(obj, OrderedDict) else "dict"
        return [kind, [[_encode(k, tensors, depth + 1), _encode(v, tensors, depth + 1)] for k, v in obj.items()]]
    if isinstance(obj, (np.integer, np.floating, np.bool_)):
        return _encode(obj.item(), tensors, depth)
    if isinstance(obj, np.ndarray):
        if obj.dtype.hasobject or obj.dtype.fields is not None:
            raise TypeError(f"ddpc.save can't store a numpy array of dtype {obj.dtype} (objects or fields)")
        return ["ndarray", obj.dtype.str, list(obj.shape), _bytes_tensor(np.ascontiguousarray(obj), tensors)]
    if isinstance(obj, (bytes, bytearray)):
        return ["bytes", _bytes_tensor(np.frombuffer(bytes(obj), np.uint8), tensors)]
    if isinstance(obj, (set, frozenset)):
        return ["set" if isinstance(obj, set) else "frozenset", [_encode(v, tensors, depth + 1) for v in obj]]
    raise TypeError(f"ddpc.save can't store a {type(obj).__name__}: it stores tensors, numpy arrays, numbers, "
                    "strings, bytes, None, and lists, tuples, dicts and sets of them")


def _bytes_tensor(arr, tensors):
    """The index of a uint8 tensor holding ``arr``'s bytes (a numpy array's, or a bytes object's)."""
    tensors.append(Tensor(_C.Buffer.from_object(arr.reshape(-1).view(np.uint8).copy())))
    return len(tensors) - 1


def _serialize(obj):
    tensors = []
    root = _encode(obj, tensors)
    entries, chunks, offset = [], [], 0
    for t in tensors:
        host = t.detach().cpu()
        data = bytes(memoryview(host._buf).cast("B")) if host.numel() else b""
        pad = (-offset) % _ALIGN
        if pad:
            chunks.append(b"\0" * pad)
            offset += pad
        entries.append({"dtype": t.dtype.name, "shape": list(t.shape), "device": str(t.device),
                        "requires_grad": bool(t.requires_grad), "offset": offset, "nbytes": len(data)})
        chunks.append(data)
        offset += len(data)
    header = json.dumps({"root": root, "tensors": entries}, separators=(",", ":")).encode("utf-8")
    payload = b"".join(chunks)
    crc = zlib.crc32(payload, zlib.crc32(header))
    return _PREFIX.pack(_MAGIC, _VERSION, len(header), len(payload), crc) + header + payload


# ---- decoding ----------------------------------------------------------------------------

def _fail(path, why, kind="ddpc"):
    raise CheckpointError(f"{path}: not a loadable {kind} checkpoint: {why}")


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


def _decode(v, tensors, path, depth=0):
    if depth > 500 or not isinstance(v, list) or not v or not isinstance(v[0], str):
        _fail(path, "malformed header")
    tag = v[0]
    try:
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
            return tensors[v[1]]
        if tag in ("list", "tuple"):
            items = [_decode(x, tensors, path, depth + 1) for x in v[1]]
            return items if tag == "list" else tuple(items)
        if tag in ("dict", "odict"):
            out = OrderedDict() if tag == "odict" else {}
            for k, x in v[1]:
                out[_decode(k, tensors, path, depth + 1)] = _decode(x, tensors, path, depth + 1)
            return out
        if tag in ("set", "frozenset"):
            items = (_decode(x, tensors, path, depth + 1) for x in v[1])
            return set(items) if tag == "set" else frozenset(items)
        if tag == "bytes":
            return tensors[v[1]].cpu().numpy().tobytes()
        if tag == "ndarray":
            dt = np.dtype(v[1])
            if dt.hasobject or dt.fields is not None:
                _fail(path, "a numpy array of objects")
            return tensors[v[3]].cpu().numpy().view(dt).reshape([int(n) for n in v[2]]).copy()
    except (IndexError, TypeError, ValueError) as e:
        if isinstance(e, CheckpointError):
            raise
        _fail(path, f"malformed {tag} entry")
    _fail(path, f"unknown value tag {tag!r}")


def _build_tensor(entry, payload, map_location, path):
    try:
        dt = get_dtype(entry["dtype"])
        shape = tuple(int(s) for s in entry["shape"])
        offset, nbytes = int(entry["offset"]), int(entry["nbytes"])
        saved_device = str(entry["device"])
        requires_grad = bool(entry["requires_grad"])
    except (KeyError, TypeError, ValueError):
        _fail(path, "malformed tensor entry")
    numel = 1
    for s in shape:
        if s < 0:
            _fail(path, "negative tensor dimension")
        numel *= s
    if nbytes != numel * dt.itemsize or offset < 0 or offset + nbytes > len(payload):
        _fail(path, "a tensor's size disagrees with the payload")
    buf = _C.Buffer(shape, dt.name)
    if nbytes:
        np.asarray(buf).reshape(-1).view(np.uint8)[:] = np.frombuffer(payload, np.uint8, nbytes, offset)
    return _placed(Tensor(buf), saved_device, requires_grad, map_location)


def _placed(t, saved_device, requires_grad, map_location):
    """The fresh host tensor t on the device map_location gives a tensor saved
    on saved_device, requiring grad if it was saved so (and is floating)."""
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
    t.requires_grad = requires_grad and t.dtype.is_floating_point
    return t


def _deserialize(data, map_location, path):
    if len(data) < _PREFIX.size:
        if not _MAGIC.startswith(data[:8]):
            _fail(path, "wrong magic bytes (this is not a ddpc checkpoint)")
        _fail(path, f"the file is truncated ({len(data)} bytes)")
    magic, version, hlen, plen, crc = _PREFIX.unpack_from(data)
    if magic != _MAGIC:
        _fail(path, "wrong magic bytes (this is not a ddpc checkpoint)")
    if version != _VERSION:
        _fail(path, f"format version {version} is not supported (this ddpc reads version {_VERSION})")
    if _PREFIX.size + hlen + plen != len(data):
        _fail(path, f"the file is {len(data)} bytes but its header announces {_PREFIX.size + hlen + plen} "
                    "(truncated or extended)")
    header = data[_PREFIX.size:_PREFIX.size + hlen]
    payload = memoryview(data)[_PREFIX.size + hlen:]
    if zlib.crc32(payload, zlib.crc32(header)) != crc:
        _fail(path, "checksum mismatch (the file is corrupted)")
    try:
        meta = json.loads(header.decode("utf-8"))
        root, entries = meta["root"], meta["tensors"]
        if not isinstance(entries, list):
            raise TypeError
    except (UnicodeDecodeError, ValueError, KeyError, TypeError):
        _fail(path, "malformed header")
    tensors = [_build_tensor(e, payload, map_location, path) for e in entries]
    return _decode(root, tensors, path)


# ---- PyTorch's checkpoints ---------------------------------------------------------------

_ZIP_MAGIC = b"PK\x03\x04"
# torch.save before PyTorch 1.6 began with a pickled magic number: PROTO 2, then LONG1 of these 10 bytes.
_LEGACY_TORCH_MAGIC = b"\x8a\nl\xfc\x9cF\xf9 j\xa8P\x19"
_SUPPORTED = "float32, float64, float16, bfloat16, int32, int64, uint8 and bool (read as uint8)"

# torch.<name>Storage -> the ddpc dtype of its elements (a bool becomes ddpc's uint8 mask, as get_dtype(bool)).
_TORCH_STORAGES = {"FloatStorage": float32, "DoubleStorage": float64, "HalfStorage": float16,
                   "BFloat16Storage": bfloat16, "IntStorage": int32, "LongStorage": int64, "ByteStorage": uint8,
                   "BoolStorage": uint8}


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


def _latin1_bytes(text, encoding):
    """_codecs.encode as protocol 2 pickles a bytes object: encode(text, "latin1")."""
    if not isinstance(text, str) or encoding != "latin1":
        raise TypeError("_codecs.encode is loaded only to rebuild bytes (text, 'latin1')")
    return text.encode("latin1")


class _TorchUnpickler(pickle.Unpickler):
    """Unpickles a PyTorch checkpoint's data.pkl with ddpc stand-ins for the
    globals a checkpoint of tensors needs; any other global is refused
    before it is looked up, so nothing in the file runs."""

    def __init__(self, archive, root, byteorder, map_location, path):
        self._archive, self._root, self._map_location, self._path = archive, root, map_location, path
        self._order = ">" if byteorder == b"big" else "<"
        self._records = {}  # storage key -> the record's bytes, read once for every tensor that views it
        data = archive.read(root + "data.pkl")
        # The C unpickler grows its memo to twice the largest index a PUT names, so a forged
        # index would claim gigabytes (honest ones count the PUTs before it); out-of-band
        # buffers are not in what torch.save writes.
        for op, arg, _ in pickletools.genops(data):
            if (op.name.endswith("PUT") and arg > len(data)) or op.name in ("NEXT_BUFFER", "READONLY_BUFFER"):
                self._fail(f"data.pkl has a {op.name} that torch.save does not write")
        super().__init__(io.BytesIO(data))

    def _fail(self, why):
        _fail(self._path, why, "PyTorch")

    def find_class(self, module, name):
        if module == "torch._utils" and name in ("_rebuild_tensor_v2", "_rebuild_parameter",
                                                 "_rebuild_parameter_with_state"):
            return getattr(self, name)
        if module == "collections" and name == "OrderedDict":
            return OrderedDict
        if module in ("builtins", "__builtin__") and name in ("set", "frozenset", "bytearray", "complex"):
            return {"set": set, "frozenset": frozenset, "bytearray": bytearray, "complex": complex}[name]
        if module == "_codecs" and name == "encode":
            return _latin1_bytes
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
        self._fail(f"data.pkl refers to {module}.{name}, which ddpc does not load (it loads tensors and dtypes "
                   f"of {_SUPPORTED}, Parameters, devices, numbers, strings, bytes and containers of them)")

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
            return _placed(-t if negate else t, storage.location, bool(requires_grad), self._map_location)
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


def _torch_deserialize(data, map_location, path):
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
        return _TorchUnpickler(archive, root, byteorder, map_location, path).load()
    except _PlacementError as e:
        raise e.__cause__ from None
    except CheckpointError:
        raise
    except (pickle.UnpicklingError, zipfile.BadZipFile, zlib.error, EOFError, AttributeError, IndexError,
            KeyError, OverflowError, TypeError, ValueError) as e:
        _fail(path, f"{type(e).__name__}: {e}", "PyTorch")


# ---- public API --------------------------------------------------------------------------

def save(obj, f):
    """Writes obj (tensors, numbers, strings, None, and nested lists/tuples/dicts
    of them) to the path f atomically, or to a writable binary file object."""
    data = _serialize(obj)
    if hasattr(f, "write"):
        f.write(data)
        return
    path = os.fspath(f)
    directory = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(path) + ".", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
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


def load(f, map_location=None, weights_only=None):
    """Reads a checkpoint written by ddpc.save, or by PyTorch's torch.save
    (1.6 or later), from a path or a binary file object. (``weights_only``
    is taken for PyTorch's signature: loading never runs code from the
    file, as PyTorch's weights_only=True.)

    From a PyTorch file come ddpc tensors of the same dtypes (bool as
    uint8), ``ddpc.nn.Parameter`` for Parameters, requires_grad as saved,
    tuples for ``torch.Size``, and ddpc dtypes and devices. Where ddpc
    differs: tensors that shared a storage in PyTorch (views, tied weights)
    come back as separate contiguous tensors with the same values. Refused
    with a CheckpointError naming the cause: int8, int16, complex and
    quantized tensors, objects other than tensors, numbers, strings, bytes
    and containers of them (a numpy array, a custom class), PyTorch's format
    before 1.6, and TorchScript archives.

    map_location: None (tensors return to the device they were saved from),
    a device ("cpu", "cuda:1"), a dict mapping saved device strings to new
    ones, a callable taking the saved device string, or PyTorch's callable
    ``fn(storage, location)``, given each tensor on the host and its saved
    device, returning it (moved or not), or None for its saved device
    (``lambda storage, loc: storage`` keeps everything on the host). Raises
    CheckpointError for files that are not intact checkpoints.
    """
    del weights_only
    if hasattr(f, "read"):
        data, path = f.read(), getattr(f, "name", "<file>")
    else:
        path = os.fspath(f)
        with open(path, "rb") as fh:
            data = fh.read()
    data = bytes(data)
    if data.startswith(_ZIP_MAGIC):
        return _torch_deserialize(data, map_location, path)
    if data[2:14] == _LEGACY_TORCH_MAGIC:
        _fail(path, "it is in PyTorch's format before 1.6 (or _use_new_zipfile_serialization=False), which "
                    "ddpc does not read: load it with torch.load and save it again with a recent torch.save",
              "PyTorch")
    return _deserialize(data, map_location, path)
