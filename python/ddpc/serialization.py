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
"""

import inspect
import json
import math
import os
import struct
import tempfile
import zlib
from collections import OrderedDict

import numpy as np

from . import _C
from ._dtype import device as _device
from ._dtype import get_dtype
from .tensor import Tensor

_MAGIC = b"DDPCCKPT"
_VERSION = 1
_PREFIX = struct.Struct("<8sIQQI")
_ALIGN = 64


class CheckpointError(ValueError):
    """The file is not a ddpc checkpoint, or it is truncated or corrupted."""


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

def _fail(path, why):
    raise CheckpointError(f"{path}: not a loadable ddpc checkpoint: {why}")


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
    t = Tensor(buf)
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
    t.requires_grad = requires_grad and dt.is_floating_point
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
    """Reads a checkpoint written by ddpc.save. (``weights_only`` is taken for
    PyTorch's signature: a ddpc checkpoint holds only tensors and plain
    values, and loading never runs code from the file.)

    map_location: None (tensors return to the device they were saved from),
    a device ("cpu", "cuda:1"), a dict mapping saved device strings to new
    ones, a callable taking the saved device string, or PyTorch's callable
    ``fn(storage, location)``, given each tensor on the host and its saved
    device, returning it (moved or not), or None for its saved device
    (``lambda storage, loc: storage`` keeps everything on the host). Raises
    CheckpointError for files that are not intact ddpc checkpoints.
    """
    del weights_only
    if hasattr(f, "read"):
        data, path = f.read(), getattr(f, "name", "<file>")
    else:
        path = os.fspath(f)
        with open(path, "rb") as fh:
            data = fh.read()
    return _deserialize(bytes(data), map_location, path)
