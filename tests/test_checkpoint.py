"""ddpc.save / ddpc.load: round trips, damaged and foreign files, atomic
replacement under SIGKILL, and the files PyTorch's torch.save writes."""

import argparse
import io
import json
import os
import pickle
import re
import select
import signal
import stat
import struct
import subprocess
import sys
import threading
import time
import types
import zipfile
import zlib
from collections import OrderedDict, namedtuple
from dataclasses import dataclass

import numpy as np
import pytest

import ddpc
from ddpc import _C


def sample():
    ddpc.manual_seed(0)
    model = ddpc.nn.Sequential(ddpc.nn.Linear(3, 4), ddpc.nn.ReLU(), ddpc.nn.Linear(4, 2))
    opt = ddpc.optim.AdamW(model.parameters(), lr=1e-3)
    model(ddpc.randn(2, 3)).sum().backward()
    opt.step()
    return {
        "model": model.state_dict(),
        "optim": opt.state_dict(),
        "epoch": 3,
        "loss": 0.25,
        "nan": float("nan"),
        "name": "run-1",
        "flags": [True, False, None],
        "pair": (1, "two"),
        "ints": ddpc.tensor([1, 2, 3]),
        "empty": ddpc.zeros(0, 5),
        "bf16": ddpc.ones(3, dtype=ddpc.bfloat16),
        "leaf": ddpc.ones(2, requires_grad=True),
    }


def assert_same(a, b):
    assert type(a) is type(b), (type(a), type(b))
    if isinstance(a, ddpc.Tensor):
        assert a.shape == b.shape and a.dtype is b.dtype and a.device == b.device
        assert a.requires_grad == b.requires_grad
        np.testing.assert_array_equal(np.asarray(a.cpu().to(ddpc.float32 if a.dtype is ddpc.bfloat16 else a.dtype)),
                                      np.asarray(b.cpu().to(ddpc.float32 if b.dtype is ddpc.bfloat16 else b.dtype)))
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for k in a:
            assert_same(a[k], b[k])
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, float) and a != a:
        assert b != b
    else:
        assert a == b


def test_round_trip(tmp_path):
    obj = sample()
    path = tmp_path / "ck.ddpc"
    ddpc.save(obj, path)
    back = ddpc.load(path)
    assert_same(obj, back)
    assert isinstance(back["model"], OrderedDict)
    assert list(back["optim"]["state"]) == [0, 1, 2, 3]
    # A loaded state dict restores a fresh model.
    model = ddpc.nn.Sequential(ddpc.nn.Linear(3, 4), ddpc.nn.ReLU(), ddpc.nn.Linear(4, 2))
    model.load_state_dict(back["model"])
    np.testing.assert_array_equal(np.asarray(model[0].weight), np.asarray(obj["model"]["0.weight"]))
    assert list(os.listdir(tmp_path)) == ["ck.ddpc"]


def test_map_location_and_file_objects(tmp_path):
    path = tmp_path / "ck.ddpc"
    ddpc.save({"w": ddpc.arange(4)}, str(path))
    assert ddpc.load(path, map_location="cpu")["w"].device == ddpc.device("cpu")
    assert ddpc.load(path, map_location={"cpu": "cpu"})["w"].tolist() == [0, 1, 2, 3]
    assert ddpc.load(path, map_location=lambda d: "cpu")["w"].tolist() == [0, 1, 2, 3]
    seen = []

    def keep(storage, location):  # PyTorch's form: each tensor and where it was saved
        seen.append((storage.tolist(), location))
        return storage

    assert ddpc.load(path, map_location=keep)["w"].tolist() == [0, 1, 2, 3] and seen == [([0, 1, 2, 3], "cpu")]
    assert ddpc.load(path, map_location=lambda storage, loc: None)["w"].device == ddpc.device("cpu")
    doubled = ddpc.load(path, map_location=lambda storage, loc: storage * 2)["w"]
    assert doubled.tolist() == [0, 2, 4, 6]
    with open(path, "rb") as f:
        assert ddpc.load(f)["w"].tolist() == [0, 1, 2, 3]
    assert ddpc.load(path, map_location="cpu", weights_only=True)["w"].tolist() == [0, 1, 2, 3]  # PyTorch's keyword


def test_numpy_arrays_bytes_and_sets_round_trip(tmp_path):
    state = np.random.RandomState(3).get_state()  # ('MT19937', uint32 array, int, int, float)
    obj = {"rng": state, "hist": np.arange(12, dtype=">i2").reshape(3, 4), "empty": np.zeros((0, 2)),
           "raw": b"\x00\xffab", "tags": {"a", 3}, "frozen": frozenset([1.5]), "scalar": np.float64(2.5)}
    ddpc.save(obj, tmp_path / "ck")
    back = ddpc.load(tmp_path / "ck")
    assert back["rng"][0] == "MT19937" and back["rng"][1].dtype == np.uint32
    np.testing.assert_array_equal(back["rng"][1], state[1])
    assert back["hist"].dtype == np.dtype(">i2") and back["hist"].tolist() == obj["hist"].tolist()
    assert back["empty"].shape == (0, 2) and back["raw"] == b"\x00\xffab"
    assert back["tags"] == {"a", 3} and back["frozen"] == frozenset([1.5]) and back["scalar"] == 2.5
    rng = np.random.RandomState()
    rng.set_state(back["rng"])
    assert rng.randint(1 << 30) == np.random.RandomState(3).randint(1 << 30)


def test_unpicklable_objects_are_refused_and_write_nothing(tmp_path):
    with pytest.raises(TypeError, match="cannot pickle '_thread.lock' object"):
        ddpc.save({"w": ddpc.ones(2), "lock": threading.Lock()}, tmp_path / "x")
    with pytest.raises(ValueError, match="pickle_protocol must be 2 or higher"):
        ddpc.save({"args": argparse.Namespace(lr=0.1)}, tmp_path / "y", pickle_protocol=1)
    assert not os.listdir(tmp_path)


def pickled_sample():
    """sample() with an object only a pickle holds: ddpc's format 2."""
    return {**sample(), "args": argparse.Namespace(lr=0.1, tags=["a"])}


@pytest.mark.parametrize("make", [sample, pickled_sample])
def test_truncated_files_raise_the_clear_error(tmp_path, make):
    path = tmp_path / "ck.ddpc"
    ddpc.save(make(), path)
    data = path.read_bytes()
    cut = tmp_path / "cut.ddpc"
    for n in range(0, len(data), 10):
        cut.write_bytes(data[:n])
        with pytest.raises(ddpc.CheckpointError, match="not a loadable ddpc checkpoint"):
            ddpc.load(cut, weights_only=False)
    # Resume code written for PyTorch catches RuntimeError (a truncated file) and EOFError (an empty one).
    assert issubclass(ddpc.CheckpointError, ValueError) and issubclass(ddpc.CheckpointError, RuntimeError)
    cut.write_bytes(b"")
    with pytest.raises(EOFError, match=r"truncated \(0 bytes\)"):
        ddpc.load(cut)


@pytest.mark.parametrize("make", [sample, pickled_sample])
def test_flipped_bytes_raise_the_clear_error(tmp_path, make):
    path = tmp_path / "ck.ddpc"
    ddpc.save(make(), path)
    data = path.read_bytes()
    bad = tmp_path / "bad.ddpc"
    # Every byte of the fixed prefix and the start of the header, then every 7th byte.
    for pos in list(range(64)) + list(range(64, len(data), 7)):
        flipped = bytearray(data)
        flipped[pos] ^= 0x5A
        bad.write_bytes(bytes(flipped))
        with pytest.raises(ddpc.CheckpointError):
            ddpc.load(bad, weights_only=False)


def test_foreign_files_raise_and_never_run_code(tmp_path):
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    p = tmp_path / "evil.pt"
    p.write_bytes(pickle.dumps(Evil()))
    with pytest.raises(ddpc.CheckpointError, match="magic"):
        ddpc.load(p)
    assert not marker.exists()
    (tmp_path / "text").write_text("hello world, this is text and not a checkpoint")
    with pytest.raises(ddpc.CheckpointError, match="magic"):
        ddpc.load(tmp_path / "text")
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(ddpc.CheckpointError):
        ddpc.load(tmp_path / "empty")


_WRITER = r"""
import sys
import ddpc
path = sys.argv[1]
big = ddpc.zeros(4_000_000)
i = 0
while True:
    i += 1
    ddpc.save({"generation": i, "big": big.fill_(float(i))}, path)
    print(i, flush=True)
"""


def test_sigkill_during_save_leaves_the_previous_checkpoint(tmp_path):
    path = tmp_path / "ck.ddpc"
    ddpc.save({"generation": 0, "big": ddpc.zeros(10)}, path)
    torn = 0
    for _ in range(3):
        before = set(os.listdir(tmp_path))
        proc = subprocess.Popen([sys.executable, "-c", _WRITER, str(path)], stdout=subprocess.PIPE)
        try:
            # After the writer's first complete save, kill it as soon as its next temporary file appears.
            ready, _, _ = select.select([proc.stdout], [], [], 60)
            assert ready and proc.stdout.readline().strip() == b"1"
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline and not set(os.listdir(tmp_path)) - before:
                time.sleep(0.0002)
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=30)
            proc.stdout.close()
        ck = ddpc.load(path)  # the target is always a complete checkpoint
        gen = ck["generation"]
        assert gen >= 1 and ck["big"].shape == (4_000_000,)
        assert float(ck["big"][0]) == gen and float(ck["big"][-1]) == gen
        torn += len(set(os.listdir(tmp_path)) - before)
    # The kills landed inside saves: their temporary files were left behind.
    assert torn >= 1
    assert all(n == "ck.ddpc" or (n.startswith(".ck.ddpc.") and n.endswith(".tmp")) for n in os.listdir(tmp_path))


def _failing_checkpoint_worker(rank, path):
    import time

    import ddpc.distributed as dist

    dist.init_process_group("cpu")
    out = []
    for call in (lambda: ddpc.checkpoint.save({"w": ddpc.ones(2)}, path),
                 lambda: ddpc.checkpoint.load(os.path.dirname(os.path.dirname(path)))):  # a directory
        start = time.monotonic()
        try:
            call()
            out.append("returned")
        except Exception as e:
            out.append(f"{type(e).__name__}: {e} ({time.monotonic() - start:.0f} s)")
    dist.destroy_process_group()
    return out


def test_a_checkpoint_rank_0_cannot_write_or_read_is_an_error_on_every_rank(tmp_path):
    path = str(tmp_path / "missing-dir" / "ckpt.ddpc")
    r0, r1 = ddpc.spawn(_failing_checkpoint_worker, args=(path,), nprocs=2)
    assert r0[0].startswith("FileNotFoundError") and r0[1].startswith("IsADirectoryError"), r0
    assert r1[0].startswith("RuntimeError: rank 0 could not save the checkpoint") and "FileNotFoundError" in r1[0], r1
    assert r1[1].startswith("RuntimeError: rank 0 could not read the checkpoint") and "IsADirectoryError" in r1[1], r1
    assert all(m.endswith("(0 s)") for m in r0 + r1)  # at once, not after the collective timeout


# ---- objects beyond data: ddpc's format 2 and weights_only -------------------------------

@dataclass
class Best:
    epoch: int = 0
    accuracy: float = 0.0
    weights: object = None


Pair = namedtuple("Pair", "first second")


def _touch(path):
    """What unpickling a SideEffect runs: the file it makes shows whether it ran."""
    open(path, "w").close()
    return "ran"


class SideEffect:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (_touch, (self.marker,))


class Caller:
    """An instance that does something when called: a pickle must not call it under weights_only."""

    def __call__(self, path):
        return _touch(path)


@pytest.fixture(autouse=True)
def _no_safe_globals():
    ddpc.serialization.clear_safe_globals()
    yield
    ddpc.serialization.clear_safe_globals()


def train_step(model, optimizer, x):
    optimizer.zero_grad()
    model(x).square().mean().backward()
    optimizer.step()


def trained_model():
    ddpc.manual_seed(0)
    model = ddpc.nn.Sequential(ddpc.nn.Linear(3, 4), ddpc.nn.BatchNorm1d(4), ddpc.nn.ReLU(), ddpc.nn.Linear(4, 2))
    optimizer = ddpc.optim.Adam(model.parameters(), lr=1e-2)
    train_step(model, optimizer, ddpc.randn(5, 3))  # moves the parameters, BatchNorm's statistics and Adam's state
    return model, optimizer


MODEL_CLASSES = [ddpc.nn.Sequential, ddpc.nn.Linear, ddpc.nn.BatchNorm1d, ddpc.nn.ReLU]


def assert_same_module(a, b):
    """b is a's copy: the same classes, training flags, parameters (as Parameters) and buffers."""
    mods_a, mods_b = list(a.named_modules()), list(b.named_modules())
    assert [(n, type(m), m.training) for n, m in mods_a] == [(n, type(m), m.training) for n, m in mods_b]
    for (name, x), (name_b, y) in zip(list(a.named_parameters()) + list(a.named_buffers()),
                                      list(b.named_parameters()) + list(b.named_buffers()), strict=True):
        assert name == name_b and type(x) is type(y) and x.requires_grad == y.requires_grad, name
        assert_same(x.detach(), y.detach())


def ddpc_header(data):
    """The format version and the JSON header of a ddpc checkpoint's bytes."""
    _, version, hlen, _, _ = struct.unpack_from("<8sIQQI", data)
    return version, json.loads(data[32:32 + hlen])


def with_pickle(blob):
    """A format-2 checkpoint whose pickle is blob (a hand-made one)."""
    header = json.dumps({"root": ["pickle", 0], "tensors": [{"dtype": "uint8", "shape": [len(blob)], "device": "cpu",
                                                             "requires_grad": False, "offset": 0,
                                                             "nbytes": len(blob)}]}).encode()
    crc = zlib.crc32(blob, zlib.crc32(header))
    return struct.pack("<8sIQQI", b"DDPCCKPT", 2, len(header), len(blob), crc) + header + blob


def test_a_whole_module_round_trips_and_still_trains(tmp_path):
    model, _ = trained_model()
    model[1].eval()  # one submodule in eval mode: each module's flag comes back
    path = tmp_path / "model.pt"
    ddpc.save(model, path)
    back = ddpc.load(path, weights_only=False)
    assert_same_module(model, back)
    assert back[0].training and not back[1].training
    # Under weights_only (the default) the module's classes must be allowlisted.
    refused = re.escape(f"GLOBAL {ddpc.nn.Sequential.__module__}.Sequential was not an allowed global by default")
    with pytest.raises(pickle.UnpicklingError, match=refused):
        ddpc.load(path)
    with ddpc.serialization.safe_globals(MODEL_CLASSES):
        assert_same_module(model, ddpc.load(path))
    x = ddpc.randn(6, 3)
    np.testing.assert_array_equal(back(x).detach().numpy(), model(x).detach().numpy())
    # It trains as the saved model does: the same step takes both to the same parameters.
    before = back[0].weight.detach().numpy().copy()
    for m in (model, back):
        train_step(m, ddpc.optim.SGD(m.parameters(), lr=0.1), x)
    assert not np.array_equal(back[0].weight.detach().numpy(), before)
    assert_same_module(model, back)


def test_a_module_its_optimizer_and_scheduler_stay_linked_and_continue(tmp_path):
    model, optimizer = trained_model()
    scheduler = ddpc.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
    ddpc.save({"model": model, "optimizer": optimizer, "scheduler": scheduler, "epoch": 3}, tmp_path / "ck.pt")
    ck = ddpc.load(tmp_path / "ck.pt", weights_only=False)
    params = list(ck["model"].parameters())
    assert len(ck["optimizer"].param_groups[0]["params"]) == len(params) == 6
    assert all(p is q for p, q in zip(ck["optimizer"].param_groups[0]["params"], params))
    assert all(p is q for p, q in zip(ck["optimizer"].state, params))  # the state is keyed by the same Parameters
    assert ck["scheduler"].optimizer is ck["optimizer"] and ck["epoch"] == 3
    x = ddpc.randn(5, 3)
    for m, opt, sched in ((model, optimizer, scheduler), (ck["model"], ck["optimizer"], ck["scheduler"])):
        train_step(m, opt, x)
        sched.step()
    assert ck["optimizer"].param_groups[0]["lr"] == optimizer.param_groups[0]["lr"] == 0.005
    assert_same_module(model, ck["model"])
    for saved, loaded in zip(optimizer.state.values(), ck["optimizer"].state.values(), strict=True):
        assert saved["step"] == loaded["step"] == 2
        assert_same(saved["exp_avg_sq"], loaded["exp_avg_sq"])


def test_a_namespace_a_dataclass_and_a_namedtuple_round_trip(tmp_path):
    model, _ = trained_model()
    ck = {"args": argparse.Namespace(lr=0.1, layers=[4, 2]), "best": Best(3, 0.75, model[0].weight),
          "pair": Pair(1, "two"), "model": model.state_dict(), "epoch": 3}
    path = tmp_path / "ck.pt"
    ddpc.save(ck, path)
    back = ddpc.load(path, weights_only=False)
    assert back["args"] == ck["args"] and type(back["pair"]) is Pair and back["pair"] == (1, "two")
    assert type(back["best"]) is Best and (back["best"].epoch, back["best"].accuracy) == (3, 0.75)
    assert type(back["best"].weights) is ddpc.nn.Parameter and back["best"].weights.requires_grad
    assert_same(back["model"], ck["model"])
    # The Parameter and the state dict's tensor were one memory, and are again.
    assert back["best"].weights._buf.data_ptr == back["model"]["0.weight"]._buf.data_ptr
    with pytest.raises(pickle.UnpicklingError, match=r"GLOBAL argparse\.Namespace was not an allowed global by "
                                                     r"default.*add_safe_globals\(\[argparse\.Namespace\]\)"):
        ddpc.load(path)
    ddpc.serialization.add_safe_globals([argparse.Namespace, Best, Pair])
    assert ddpc.serialization.get_safe_globals() == [argparse.Namespace, Best, Pair]
    again = ddpc.load(path)
    assert again["args"] == ck["args"] and again["best"].epoch == 3 and type(again["pair"]) is Pair
    ddpc.serialization.clear_safe_globals()
    assert ddpc.serialization.get_safe_globals() == []
    with pytest.raises(pickle.UnpicklingError, match="argparse.Namespace"):
        ddpc.load(path)


def test_weights_only_refuses_a_global_without_running_it(tmp_path):
    marker = tmp_path / "ran"
    path = tmp_path / "ck.pt"
    ddpc.save({"w": ddpc.ones(2), "x": SideEffect(str(marker))}, path)
    refused = re.escape(f"GLOBAL {_touch.__module__}._touch was not an allowed global by default")
    for weights_only in (None, True):
        with pytest.raises(pickle.UnpicklingError, match=refused):
            ddpc.load(path, weights_only=weights_only)
    assert not marker.exists()
    assert ddpc.load(path, weights_only=False)["x"] == "ran" and marker.exists()  # trusted, it runs
    marker.unlink()
    with ddpc.serialization.safe_globals([_touch]):  # functions are allowlisted as classes are
        assert ddpc.load(path)["x"] == "ran" and marker.exists()


def test_weights_only_calls_and_sets_state_only_of_allowed_globals(tmp_path):
    marker = tmp_path / "ran"
    ddpc.serialization.add_safe_globals([Caller, argparse.Namespace])
    # Caller() is allowed, but calling the instance (REDUCE on it) is not.
    name = f"{Caller.__module__}\nCaller\n".encode()
    call = b"\x80\x02c" + name + b")\x81X" + struct.pack("<I", len(str(marker))) + str(marker).encode() + b"\x85R."
    (tmp_path / "call.pt").write_bytes(with_pickle(call))
    with pytest.raises(pickle.UnpicklingError, match="the pickle calls <.*Caller object"):
        ddpc.load(tmp_path / "call.pt")
    assert not marker.exists()
    assert ddpc.load(tmp_path / "call.pt", weights_only=False) == "ran" and marker.exists()
    # BUILD on the allowed class itself would set a class attribute for every later Namespace.
    build = b"\x80\x02cargparse\nNamespace\nN}X\x03\x00\x00\x00fooK\x01s\x86b."
    (tmp_path / "build.pt").write_bytes(with_pickle(build))
    with pytest.raises(pickle.UnpicklingError, match="sets the state of an object of <class 'type'>"):
        ddpc.load(tmp_path / "build.pt")
    assert not hasattr(argparse.Namespace, "foo")


def test_safe_globals_blocks_and_renamed_globals(tmp_path, monkeypatch):
    path = tmp_path / "best.pt"
    ddpc.save({"best": Best(1, 0.5)}, path)
    with ddpc.serialization.safe_globals([Best]):
        assert ddpc.serialization.get_safe_globals() == [Best]
        assert ddpc.load(path)["best"] == Best(1, 0.5)
    assert ddpc.serialization.get_safe_globals() == []
    with pytest.raises(pickle.UnpicklingError, match="Best was not an allowed global"):
        ddpc.load(path)
    ddpc.serialization.add_safe_globals([Best])
    with ddpc.serialization.safe_globals([Best, Pair]):
        assert ddpc.serialization.get_safe_globals() == [Best, Pair]
    assert ddpc.serialization.get_safe_globals() == [Best]  # allowed before the block, so after it too
    # A file that names a class by a path since renamed loads with the (class, "old.path") form.
    legacy = types.ModuleType("legacy_checkpoint_classes")
    old_class = type("Old", (), {"__module__": legacy.__name__})
    legacy.Old = old_class
    monkeypatch.setitem(sys.modules, legacy.__name__, legacy)
    old = old_class()
    old.epoch = 7
    ddpc.save({"best": old}, tmp_path / "old.pt")
    monkeypatch.delitem(sys.modules, legacy.__name__)
    with ddpc.serialization.safe_globals([(Best, "legacy_checkpoint_classes.Old")]):
        got = ddpc.load(tmp_path / "old.pt")["best"]
    assert type(got) is Best and got.epoch == 7
    with pytest.raises(ValueError, match="Expected tuple of length 2"):
        ddpc.serialization.add_safe_globals([(Best, "a", "b")])
    with pytest.raises(TypeError, match="str of callable full path"):
        ddpc.serialization.add_safe_globals([(Best, 3)])


def format1_object():
    """What tests/data/ddpc_v1.ddpc holds; ddpc.save wrote it before format 2 existed."""
    return {"w": ddpc.arange(6, dtype=ddpc.float32).reshape(2, 3), "step": ddpc.tensor(7),
            "half": ddpc.tensor([0.5, -2.0], dtype=ddpc.bfloat16), "leaf": ddpc.ones(2, requires_grad=True),
            "meta": OrderedDict(epoch=3, loss=0.25, nan=float("nan"), name="run-1", flags=[True, None],
                                pair=(1, "two"), tags={"a"}, raw=b"\x00\xff",
                                hist=np.arange(4, dtype=">i2").reshape(2, 2)),
            5: frozenset([1.5])}


def test_format_1_files_still_load_and_data_is_still_written_in_format_1():
    path = os.path.join(DATA, "ddpc_v1.ddpc")
    assert_same(ddpc.load(path), format1_object())
    out = io.BytesIO()
    ddpc.save(format1_object(), out)
    assert out.getvalue() == open(path, "rb").read()  # so an older ddpc reads a checkpoint of data


def test_the_checksum_is_zlibs_crc32_at_every_length_offset_and_running_value():
    data = np.random.default_rng(0).integers(0, 256, 1 << 20, dtype=np.uint8).tobytes()
    for off in range(16):
        for n in list(range(0, 200)) + [255, 256, 1000, 4097]:
            piece = memoryview(data)[off:off + n]
            assert _C.crc32(piece) == zlib.crc32(piece), (off, n)
            assert _C.crc32(piece, 0xDEADBEEF) == zlib.crc32(piece, 0xDEADBEEF), (off, n)
    assert _C.crc32(data) == zlib.crc32(data)  # large enough to run without the GIL
    assert _C.crc32(data[7:], _C.crc32(data[:7])) == zlib.crc32(data)
    assert _C.crc32(b"123456789") == 0xCBF43926 and _C.crc32(b"", 1 << 32 | 5) == 5
    with pytest.raises(ValueError, match="not C-contiguous"):
        _C.crc32(np.arange(8, dtype=np.uint8)[::2])


def test_a_pickled_checkpoint_keeps_its_tensors_in_the_payload(tmp_path):
    model = ddpc.nn.Linear(256, 256)
    path = tmp_path / "ck.pt"
    ddpc.save({"model": model, "args": argparse.Namespace(lr=0.1)}, path)
    data = path.read_bytes()
    version, header = ddpc_header(data)
    assert version == 2 and header["root"][0] == "pickle"
    entries = header["tensors"]
    assert [(e["dtype"], e["shape"], e.get("parameter")) for e in entries[:2]] == [
        ("float32", [256, 256], True), ("float32", [256], True)]
    assert entries[header["root"][1]]["nbytes"] < 4096  # the module's structure, not its weights
    assert len(data) < 1.05 * 4 * (256 * 256 + 256)
    newer = bytearray(data)
    newer[8:12] = struct.pack("<I", 3)
    (tmp_path / "newer.pt").write_bytes(bytes(newer))
    with pytest.raises(ddpc.CheckpointError, match="format version 3 is not supported"):
        ddpc.load(tmp_path / "newer.pt")


@pytest.mark.parametrize("extra", [{}, {"args": argparse.Namespace(lr=0.1)}], ids=["format1", "format2"])
def test_tensors_saved_twice_or_over_one_memory_come_back_shared(tmp_path, extra):
    big, param = ddpc.randn(1000), ddpc.nn.Parameter(ddpc.randn(3, 4))
    ddpc.save({"a": big, "b": [big], "p": param, "d": param.detach(), **extra}, tmp_path / "shared")
    ddpc.save({"a": big, "b": [big.clone()], "p": param, "d": param.detach().clone(), **extra}, tmp_path / "copies")
    assert os.path.getsize(tmp_path / "copies") - os.path.getsize(tmp_path / "shared") >= 4000
    ck = ddpc.load(tmp_path / "shared", weights_only=False)
    assert ck["b"][0] is ck["a"]
    assert type(ck["p"]) is ddpc.nn.Parameter and ck["p"].requires_grad
    assert type(ck["d"]) is ddpc.Tensor and not ck["d"].requires_grad
    ck["d"].add_(1)  # one memory, as saved: a write through one shows in the other
    np.testing.assert_array_equal(ck["p"].detach().numpy(), param.detach().numpy() + 1)
    copies = ddpc.load(tmp_path / "copies", weights_only=False)
    copies["d"].add_(1)
    np.testing.assert_array_equal(copies["p"].detach().numpy(), param.detach().numpy())
    assert copies["b"][0] is not copies["a"]


@pytest.mark.parametrize("extra", [{}, {"args": argparse.Namespace(lr=0.1)}], ids=["format1", "format2"])
def test_slices_and_dtype_views_of_one_storage_come_back_views_of_one_storage(tmp_path, extra):
    x = ddpc.arange(10.0)
    ddpc.save({"x": x, "v": x[2:5], "w": x[6:8].view(2, 1), "i": x.view(ddpc.int32)[8:9], **extra}, tmp_path / "ck")
    data = (tmp_path / "ck").read_bytes()
    _, header = ddpc_header(data)
    spans = {tuple(e["storage"]) for e in header["tensors"] if e["dtype"] != "uint8"}
    assert len(spans) == 1 and next(iter(spans))[1] == 40  # the storage's 40 bytes, once
    ck = ddpc.load(tmp_path / "ck", weights_only=False)
    ck["x"].add_(1000)
    assert ck["v"].tolist() == [1002.0, 1003.0, 1004.0] and ck["w"].tolist() == [[1006.0], [1007.0]]
    assert ck["i"].tolist() == [int(np.array(1008.0, np.float32).view(np.int32))]
    assert ck["v"].storage_offset() == 2
    assert ck["v"].untyped_storage().data_ptr() == ck["x"].untyped_storage().data_ptr()
    # Each entry also names its own bytes, as files without the storage field (older ddpc) have them.
    payload = data[32 + len(json.dumps(header, separators=(",", ":")).encode()):]
    entry = header["tensors"][1]
    assert "storage" in entry and np.frombuffer(payload, np.float32, 3, entry["offset"]).tolist() == [2.0, 3.0, 4.0]
    lone = io.BytesIO()
    ddpc.save(x[2:5], lone)  # alone on its storage: its own bytes, not the storage's
    assert "storage" not in ddpc_header(lone.getvalue())[1]["tensors"][0] and len(lone.getvalue()) < 32 + 200 + 12


def test_a_file_without_storage_fields_loads_each_entry_by_itself():
    header = json.dumps({"root": ["list", [["tensor", 0], ["tensor", 1]]], "tensors": [
        {"dtype": "float32", "shape": [4], "device": "cpu", "requires_grad": False, "offset": 0, "nbytes": 16},
        {"dtype": "float32", "shape": [2], "device": "cpu", "requires_grad": False, "offset": 4, "nbytes": 8}]},
        separators=(",", ":")).encode()
    payload = np.arange(4, dtype=np.float32).tobytes()
    crc = zlib.crc32(payload, zlib.crc32(header))
    prefix = struct.pack("<8sIQQI", b"DDPCCKPT", 1, len(header), len(payload), crc)
    ck = ddpc.load(io.BytesIO(prefix + header + payload))
    ck[0].add_(10)
    assert ck[0].tolist() == [10.0, 11.0, 12.0, 13.0] and ck[1].tolist() == [1.0, 2.0]


def test_containers_held_twice_or_inside_themselves_keep_their_identity():
    a = []
    a.append(a)
    shared = [1, ddpc.ones(1)]
    buf = io.BytesIO()
    ddpc.save({"a": a, "l": shared, "m": shared, "d": {}, "e": {}}, buf)
    buf.seek(0)
    back = ddpc.load(buf)
    assert back["a"][0] is back["a"] and back["l"] is back["m"] and back["l"][0] == 1
    assert back["d"] == {} and back["d"] is not back["e"]


@pytest.mark.parametrize("zipfile_format", [True, False])
def test_save_takes_torch_saves_format_keywords(zipfile_format):
    buf = io.BytesIO()
    ddpc.save({"w": ddpc.ones(2)}, buf, _use_new_zipfile_serialization=zipfile_format, _disable_byteorder_record=True)
    assert buf.getvalue()[:8] == b"DDPCCKPT"
    buf.seek(0)
    assert ddpc.load(buf)["w"].tolist() == [1.0, 1.0]


def test_load_takes_torch_loads_pickle_module_weights_only_and_mmap(tmp_path):
    used = []

    class Pickler(pickle.Pickler):
        def dump(self, obj):
            used.append("dump")
            return super().dump(obj)

    class Unpickler(pickle.Unpickler):
        def load(self):
            used.append("load")
            return super().load()

    module = types.SimpleNamespace(Pickler=Pickler, Unpickler=Unpickler)
    args = argparse.Namespace(lr=0.1)
    path = tmp_path / "ck.pt"
    ddpc.save({"args": args, "w": ddpc.ones(2)}, path, pickle_module=module, pickle_protocol=4)
    back = ddpc.load(path, pickle_module=module)  # weights_only then defaults to False, as in torch.load
    assert back["args"] == args and back["w"].tolist() == [1.0, 1.0] and used == ["dump", "load"]
    with pytest.raises(RuntimeError, match="Can not safely load weights when explicit pickle_module is specified"):
        ddpc.load(path, pickle_module=module, weights_only=True)
    assert ddpc.load(path, weights_only=False, mmap=True, encoding="latin1")["args"] == args


def test_checkpoint_load_takes_weights_only(tmp_path):
    model, _ = trained_model()
    path = str(tmp_path / "ck.pt")
    ddpc.checkpoint.save({"model": model, "epoch": 2}, path)
    with pytest.raises(pickle.UnpicklingError, match="Sequential was not an allowed global"):
        ddpc.checkpoint.load(path)
    state = ddpc.checkpoint.load(path, weights_only=False)
    assert state["epoch"] == 2
    assert_same_module(model, state["model"])


@pytest.mark.gpu
def test_a_cuda_module_round_trips(tmp_path):
    model = ddpc.nn.Linear(3, 2).cuda()
    ddpc.save({"model": model, "sd": model.state_dict()}, tmp_path / "m.pt")
    back = ddpc.load(tmp_path / "m.pt", weights_only=False)
    assert back["model"].weight.is_cuda and type(back["model"].weight) is ddpc.nn.Parameter
    assert back["sd"]["weight"]._buf.data_ptr == back["model"].weight._buf.data_ptr
    host = ddpc.load(tmp_path / "m.pt", weights_only=False, map_location="cpu")
    assert not host["model"].weight.is_cuda and not host["sd"]["bias"].is_cuda
    np.testing.assert_array_equal(host["model"].weight.detach().numpy(), model.weight.detach().cpu().numpy())


# ---- PyTorch's checkpoints ---------------------------------------------------------------
#
# tests/data/torch_*.pt were written by PyTorch 2.15's torch.save with write_torch_files below
# (`python tests/test_checkpoint_torch.py write tests/data`, where torch is installed); the .npz
# beside each holds the values of its tensors by path, written by numpy in the same run, so
# these tests run without torch.

DATA = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")


def tensors_by_path(obj, is_tensor, path=""):
    """The tensors in obj's nested dicts, lists and tuples, by path ("optim/state/0/exp_avg")."""
    if is_tensor(obj):
        return {path: obj}
    items = obj.items() if isinstance(obj, dict) else enumerate(obj) if isinstance(obj, (list, tuple)) else ()
    found = {}
    for key, value in items:
        found.update(tensors_by_path(value, is_tensor, f"{path}/{key}" if path else str(key)))
    return found


def write_torch_files(torch, directory):
    """Writes the PyTorch checkpoints the tests read (and their .npz) into directory."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.BatchNorm1d(4), torch.nn.ReLU(),
                                torch.nn.Linear(4, 2))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model(torch.randn(5, 3)).sum().backward()  # a training step: BatchNorm's running stats and count move
    optimizer.step()
    base = torch.arange(12.0).reshape(3, 4)
    mixed = {
        "half": torch.randn(3).half(), "bf16": torch.randn(2, 2).bfloat16(), "double": torch.randn(2).double(),
        "int32": torch.arange(-2, 2, dtype=torch.int32), "bool": torch.tensor([True, False, True]),
        "uint8": torch.tensor([0, 7, 255], dtype=torch.uint8), "scalar": torch.tensor(3.5),
        "count": torch.tensor(7), "empty": torch.empty(0, 3),
        # Five views of one storage: the whole, a transposed slice, a row, every 5th element, a broadcast.
        "base": base, "view": base.t()[1:], "row": base[2], "strided": base.view(-1)[::5],
        "expanded": base[0, :2].view(2, 1).expand(2, 3),
        "negated": torch.tensor([1 + 2j, 3 - 4j]).conj().imag,  # a view with PyTorch's lazy negation bit
        "param": torch.nn.Parameter(torch.randn(2, 2)),
        "frozen": torch.nn.Parameter(torch.randn(2), requires_grad=False),
        "leaf": torch.randn(3).requires_grad_(),
        "optim": optimizer.state_dict(),
        "meta": {"epoch": 3, "loss": 0.25, "name": "run-1", "none": None, "pair": (1, "two"), "tags": {"a"},
                 "raw": b"\x00\xff", "big": 2 ** 70, 5: [1.5, None], "size": torch.Size([2, 3]),
                 "dtype": torch.float16, "device": torch.device("cuda", 1)},
    }

    def save(obj, name):
        torch.save(obj, os.path.join(directory, name + ".pt"))
        np.savez_compressed(os.path.join(directory, name + ".npz"),
                            **{p: (t.float() if t.dtype == torch.bfloat16 else t).detach().resolve_neg().numpy()
                               for p, t in tensors_by_path(obj, torch.is_tensor).items()})

    save(model.state_dict(), "torch_model")
    save(mixed, "torch_mixed")
    save({"args": argparse.Namespace(lr=0.1, epochs=3, name="run-1"), "w": torch.arange(3.0)}, "torch_namespace")
    torch.save({"w": torch.ones(2)}, os.path.join(directory, "torch_legacy.pt"), _use_new_zipfile_serialization=False)
    torch.save({"q": torch.tensor([1, -2], dtype=torch.int8)}, os.path.join(directory, "torch_int8.pt"))
    torch.jit.save(torch.jit.script(torch.nn.Linear(1, 1)), os.path.join(directory, "torch_script.pt"))
    # As a GPU machine writes it: torch.save asks the registered taggers (lowest priority
    # first) where each storage lives; this one says cuda:0, as PyTorch's own does on a GPU.
    torch.serialization.register_package(0, lambda storage: "cuda:0", lambda storage, location: None)
    save({"w": torch.arange(3.0), "p": torch.nn.Parameter(torch.ones(2))}, "torch_cuda")


def torch_file(name):
    return os.path.join(DATA, name + ".pt")


def expected(name):
    with np.load(os.path.join(DATA, name + ".npz")) as npz:
        return {p: npz[p] for p in npz.files}


def assert_tensors_match(obj, name):
    """obj's tensors are those of tests/data/<name>.npz: the same paths, shapes, values and matching dtypes."""
    got, want = tensors_by_path(obj, lambda x: isinstance(x, ddpc.Tensor)), expected(name)
    assert sorted(got) == sorted(want)
    for path, t in got.items():
        assert t.dtype is (ddpc.bfloat16 if path == "bf16" else ddpc._dtype.get_dtype(want[path].dtype)), path
        assert t.shape == want[path].shape, path
        np.testing.assert_array_equal(np.asarray(t.detach().cpu().float() if path == "bf16" else t.detach().cpu()),
                                      want[path], err_msg=path)


def rewritten(src, dst, change):
    """Copies the zip archive src to dst with each record's bytes replaced by change(name, data)."""
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w") as zout:
        for name in zin.namelist():
            zout.writestr(name, change(name, zin.read(name)))
    return dst


def test_a_torch_state_dict_loads_into_a_ddpc_model():
    sd = ddpc.load(torch_file("torch_model"))
    assert isinstance(sd, OrderedDict) and list(sd) == list(expected("torch_model"))
    assert_tensors_match(sd, "torch_model")
    assert sd["1.num_batches_tracked"].dtype is ddpc.int64 and int(sd["1.num_batches_tracked"]) == 1
    assert not any(t.requires_grad for t in sd.values())  # state_dict() holds detached tensors
    model = ddpc.nn.Sequential(ddpc.nn.Linear(3, 4), ddpc.nn.BatchNorm1d(4), ddpc.nn.ReLU(), ddpc.nn.Linear(4, 2))
    result = model.load_state_dict(sd)
    assert not result.missing_keys and not result.unexpected_keys
    np.testing.assert_array_equal(np.asarray(model[1].running_var), expected("torch_model")["1.running_var"])


def test_torch_dtypes_views_parameters_and_plain_values():
    obj = ddpc.load(torch_file("torch_mixed"))
    assert_tensors_match(obj, "torch_mixed")  # also the views of one storage, each with its own values
    assert obj["bool"].tolist() == [1, 0, 1] and obj["negated"].tolist() == [-2.0, 4.0]
    assert obj["view"].is_contiguous() and obj["view"].tolist() == [[1.0, 5.0, 9.0], [2.0, 6.0, 10.0],
                                                                    [3.0, 7.0, 11.0]]
    assert type(obj["param"]) is ddpc.nn.Parameter and obj["param"].requires_grad
    assert type(obj["frozen"]) is ddpc.nn.Parameter and not obj["frozen"].requires_grad
    assert type(obj["leaf"]) is ddpc.Tensor and obj["leaf"].requires_grad and obj["leaf"].is_leaf
    assert type(obj["base"]) is ddpc.Tensor and not obj["base"].requires_grad
    obj["base"].add_(1)  # the views are copies: PyTorch's sharing of one storage does not carry over
    assert obj["row"].tolist() == [8.0, 9.0, 10.0, 11.0]
    assert obj["meta"] == {"epoch": 3, "loss": 0.25, "name": "run-1", "none": None, "pair": (1, "two"),
                           "tags": {"a"}, "raw": b"\x00\xff", "big": 2 ** 70, 5: [1.5, None], "size": (2, 3),
                           "dtype": ddpc.float16, "device": ddpc.device("cuda", 1)}
    optim = obj["optim"]
    assert list(optim["state"]) == [0, 1, 2, 3, 4, 5] and optim["param_groups"][0]["betas"] == (0.9, 0.999)
    assert optim["param_groups"][0]["params"] == [0, 1, 2, 3, 4, 5] and float(optim["state"][0]["step"]) == 1.0


def test_torch_map_location():
    path = torch_file("torch_cuda")  # saved from cuda:0
    assert_tensors_match(ddpc.load(path, map_location="cpu"), "torch_cuda")
    for where in ("cpu", ddpc.device("cpu"), {"cuda:0": "cpu"}, lambda saved: "cpu",
                  lambda storage, location: storage):
        obj = ddpc.load(path, map_location=where)
        assert obj["w"].device == ddpc.device("cpu") and obj["w"].tolist() == [0.0, 1.0, 2.0]
        assert type(obj["p"]) is ddpc.nn.Parameter and obj["p"].requires_grad
    seen = []
    ddpc.load(path, map_location=lambda storage, location: seen.append(location) or storage)
    assert seen == ["cuda:0", "cuda:0"]
    with open(path, "rb") as f:
        assert ddpc.load(f, map_location="cpu", weights_only=True)["w"].tolist() == [0.0, 1.0, 2.0]
    if ddpc.cuda.is_available():
        assert ddpc.load(path)["w"].device == ddpc.device("cuda:0")
    else:  # map_location None: the saved device, which this machine does not have
        with pytest.raises(RuntimeError, match="cuda:0"):
            ddpc.load(path)


def test_a_big_endian_torch_file(tmp_path):
    def to_big_endian(name, data):  # torch_cuda's storages are all float32
        if name.endswith("/byteorder"):
            return b"big"
        return np.frombuffer(data, "<f4").astype(">f4").tobytes() if "/data/" in name else data

    big = rewritten(torch_file("torch_cuda"), tmp_path / "big.pt", to_big_endian)
    assert_tensors_match(ddpc.load(big, map_location="cpu"), "torch_cuda")
    odd = rewritten(big, tmp_path / "odd.pt", lambda name, data: b"middle" if name.endswith("/byteorder") else data)
    with pytest.raises(ddpc.CheckpointError, match="unknown byte order b'middle'"):
        ddpc.load(odd)


def test_a_torch_file_with_a_forbidden_global_runs_nothing(tmp_path):
    marker = tmp_path / "ran"

    class Evil:
        def __reduce__(self):
            return (os.system, (f"touch {marker}",))

    evil = rewritten(torch_file("torch_cuda"), tmp_path / "evil.pt",
                     lambda name, data: pickle.dumps({"w": Evil()}, protocol=2) if name.endswith("data.pkl")
                     else data)
    blocked = r"GLOBAL (posix|os)\.system whose module (posix|os) is blocked"
    with pytest.raises(pickle.UnpicklingError, match=blocked):
        ddpc.load(evil)
    with ddpc.serialization.safe_globals([os.system]), pytest.raises(pickle.UnpicklingError, match=blocked):
        ddpc.load(evil)  # never allowed, as in PyTorch
    assert not marker.exists()
    # A PyTorch object ddpc has no counterpart for is refused whether weights_only or not.
    linear = b"\x80\x02ctorch.nn.modules.linear\nLinear\n)\x81."
    module = rewritten(torch_file("torch_cuda"), tmp_path / "module.pt",
                       lambda name, data: linear if name.endswith("data.pkl") else data)
    for weights_only in (True, False):
        with pytest.raises(ddpc.CheckpointError, match=r"torch\.nn\.modules\.linear\.Linear, a PyTorch object ddpc "
                                                       r"has no counterpart for .*state_dict\(\)"):
            ddpc.load(module, weights_only=weights_only)


def test_a_torch_checkpoint_with_a_namespace_loads_once_namespace_is_allowlisted():
    path = torch_file("torch_namespace")
    with pytest.raises(pickle.UnpicklingError, match=r"GLOBAL argparse\.Namespace was not an allowed global"):
        ddpc.load(path)
    args = argparse.Namespace(lr=0.1, epochs=3, name="run-1")
    with ddpc.serialization.safe_globals([argparse.Namespace]):
        obj = ddpc.load(path)
    assert obj["args"] == args
    assert_tensors_match(obj, "torch_namespace")
    assert ddpc.load(path, weights_only=False)["args"] == args


def test_damaged_torch_files_raise_the_clear_error(tmp_path):
    data = open(torch_file("torch_cuda"), "rb").read()
    cut = tmp_path / "cut.pt"
    for n in range(4, len(data), 37):
        cut.write_bytes(data[:n])
        with pytest.raises(ddpc.CheckpointError, match="not a loadable PyTorch checkpoint: a damaged zip"):
            ddpc.load(cut)
    flipped = bytearray(data)
    flipped[data.index(np.arange(3, dtype="<f4").tobytes()) + 5] ^= 0x10  # inside the storage of "w"
    cut.write_bytes(bytes(flipped))
    with pytest.raises(ddpc.CheckpointError, match="Bad CRC-32"):
        ddpc.load(cut)
    short = rewritten(torch_file("torch_cuda"), tmp_path / "short.pt",
                      lambda name, data: data[:4] if name.endswith("/data/0") else data)
    with pytest.raises(ddpc.CheckpointError, match="storage 0 holds 4 bytes, fewer than its 3 elements need"):
        ddpc.load(short)
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as z:
        z.writestr("notes/readme.txt", "not a checkpoint")
    with pytest.raises(ddpc.CheckpointError, match="without a <root>/data.pkl"):
        ddpc.load(tmp_path / "other.zip")


def test_torch_files_ddpc_does_not_read_are_refused_with_what_to_do():
    with pytest.raises(ddpc.CheckpointError, match=r"PyTorch's format before 1\.6 .* save it again with a recent "
                                                   r"torch\.save"):
        ddpc.load(torch_file("torch_legacy"))
    with pytest.raises(ddpc.CheckpointError, match=r"a TorchScript archive \(torch\.jit\.save\).*state_dict"):
        ddpc.load(torch_file("torch_script"))
    with pytest.raises(ddpc.CheckpointError, match=r"torch\.CharStorage, and ddpc reads tensors of float32.*int32"):
        ddpc.load(torch_file("torch_int8"))
    with pytest.raises(ddpc.CheckpointError, match="PyTorch"):
        ddpc.checkpoint.load(torch_file("torch_int8"))
    assert ddpc.checkpoint.load(torch_file("torch_model"))["0.bias"].shape == (4,)


def test_a_pytorch_optimizer_state_continues_in_ddpc():
    """PyTorch keeps Adam's step as a 0-d tensor; ddpc's optimizer takes it as its count."""
    model = ddpc.nn.Sequential(ddpc.nn.Linear(3, 4), ddpc.nn.BatchNorm1d(4), ddpc.nn.ReLU(), ddpc.nn.Linear(4, 2))
    model.load_state_dict(ddpc.load(os.path.join(DATA, "torch_model.pt")))
    saved = ddpc.load(os.path.join(DATA, "torch_mixed.pt"))["optim"]
    opt = ddpc.optim.Adam(model.parameters(), lr=1e-2)
    opt.load_state_dict(saved)
    first = model[0].weight
    assert opt.state[first]["step"] == 1
    np.testing.assert_array_equal(opt.state[first]["exp_avg"].numpy(), saved["state"][0]["exp_avg"].numpy())
    before = first.detach().numpy().copy()
    model(ddpc.randn(5, 3)).sum().backward()
    opt.step()
    assert opt.state[first]["step"] == 2 and not np.array_equal(first.detach().numpy(), before)


def test_files_are_written_as_open_would_write_them(tmp_path):
    """torch.save's file modes: 0666 less the umask for a new file, an existing
    file's own when it is written over (the temporary file starts at 0600),
    and a symbolic link written through, not replaced."""
    old = os.umask(0o027)
    try:
        ddpc.save({"a": ddpc.ones(2)}, tmp_path / "new.ckpt")
        assert stat.S_IMODE(os.stat(tmp_path / "new.ckpt").st_mode) == 0o640
        (tmp_path / "kept.ckpt").write_bytes(b"")
        os.chmod(tmp_path / "kept.ckpt", 0o604)
        ddpc.save({"a": ddpc.ones(2)}, tmp_path / "kept.ckpt")
        assert stat.S_IMODE(os.stat(tmp_path / "kept.ckpt").st_mode) == 0o604
    finally:
        os.umask(old)
    os.symlink("target.ckpt", tmp_path / "latest.ckpt")
    ddpc.save({"a": ddpc.full((2,), 7.0)}, tmp_path / "latest.ckpt")
    assert os.path.islink(tmp_path / "latest.ckpt")
    assert ddpc.load(tmp_path / "target.ckpt")["a"].tolist() == [7.0, 7.0]


def test_a_fifo_is_written_into_not_replaced(tmp_path):
    """As torch.save: a FIFO (or a device, os.devnull) at the path, or behind
    a symbolic link there, gets the bytes; a rename over it would replace it."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    os.symlink("pipe", tmp_path / "link")
    expected = io.BytesIO()
    ddpc.save({"a": ddpc.arange(3)}, expected)
    for target in (fifo, tmp_path / "link"):
        got = []
        reader = threading.Thread(target=lambda: got.append(open(fifo, "rb").read()), daemon=True)
        reader.start()
        ddpc.save({"a": ddpc.arange(3)}, target)
        reader.join(30)
        assert stat.S_ISFIFO(os.stat(fifo).st_mode) and os.path.islink(tmp_path / "link")
        assert got == [expected.getvalue()]
        assert ddpc.load(io.BytesIO(got[0]))["a"].tolist() == [0, 1, 2]
    assert sorted(os.listdir(tmp_path)) == ["link", "pipe"]  # no temporary file left


class Transposed(ddpc.nn.Module):
    """A module whose version 1 stored its weight transposed: loading a state
    dict of an older version (or of none) converts it."""

    _version = 2

    def __init__(self):
        super().__init__()
        self.lin = ddpc.nn.Linear(2, 2)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        if local_metadata.get("version", 1) < 2:
            state_dict[prefix + "lin.weight"] = state_dict[prefix + "lin.weight"].t()
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                                      error_msgs)


@pytest.mark.parametrize("extra", [{}, {"z": 1j}], ids=["format1", "format2"])
def test_a_state_dicts_module_versions_survive_save_and_load(tmp_path, extra):
    model = Transposed()
    with ddpc.no_grad():
        model.lin.weight.copy_(ddpc.tensor([[1.0, 2.0], [3.0, 4.0]]))
    ddpc.save({"model": model.state_dict(), **extra}, tmp_path / "ck")
    back = ddpc.load(tmp_path / "ck")["model"]
    assert back._metadata == model.state_dict()._metadata == OrderedDict([("", {"version": 2}),
                                                                          ("lin", {"version": 1})])
    fresh = Transposed()
    fresh.load_state_dict(back)
    assert fresh.lin.weight.tolist() == [[1.0, 2.0], [3.0, 4.0]]  # not converted a second time
    # A state dict without versions (a file written before they were kept) is converted.
    old = OrderedDict(back)
    fresh.load_state_dict(old)
    assert fresh.lin.weight.tolist() == [[1.0, 3.0], [2.0, 4.0]]


def test_an_ordered_dict_with_other_attributes_is_pickled_whole(tmp_path):
    d = OrderedDict(a=ddpc.ones(1))
    d._metadata, d.note = OrderedDict(x={"version": 3}), "kept"
    ddpc.save(d, tmp_path / "ck")
    back = ddpc.load(tmp_path / "ck", weights_only=False)
    assert (back._metadata, back.note, back["a"].tolist()) == (d._metadata, "kept", [1.0])


class ComplexScale(ddpc.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = ddpc.nn.Parameter(ddpc.ones(2, dtype=ddpc.complex64))

    def forward(self, x):
        return (self.w * x).abs().sum()


def test_complex_tensors_and_parameters_keep_requires_grad(tmp_path):
    ddpc.save({"z": ddpc.ones(2, dtype=ddpc.complex64, requires_grad=True),
               "p": ddpc.nn.Parameter(ddpc.ones(2, dtype=ddpc.complex128))}, tmp_path / "ck")
    back = ddpc.load(tmp_path / "ck")
    assert back["z"].requires_grad and back["p"].requires_grad and isinstance(back["p"], ddpc.nn.Parameter)
    ddpc.save(ComplexScale(), tmp_path / "model")
    model = ddpc.load(tmp_path / "model", weights_only=False)
    assert model.w.requires_grad
    model(ddpc.ones(2, dtype=ddpc.complex64)).backward()
    assert model.w.grad is not None


def test_checkpoint_load_gives_none_only_for_a_missing_file(tmp_path):
    assert ddpc.checkpoint.load(tmp_path / "none-yet.ddpc") is None
    (tmp_path / "empty.ddpc").write_bytes(b"")
    with pytest.raises(ddpc.serialization.CheckpointError, match=r"empty\.ddpc: .*truncated \(0 bytes\)"):
        ddpc.checkpoint.load(tmp_path / "empty.ddpc")
    (tmp_path / "damaged.ddpc").write_bytes(b"DDPCCK")
    with pytest.raises(ddpc.serialization.CheckpointError, match=r"damaged\.ddpc: .*truncated \(6 bytes\)"):
        ddpc.checkpoint.load(str(tmp_path / "damaged.ddpc"))


def _load_missing_and_empty_worker(rank, directory):
    import ddpc.distributed as dist

    dist.init_process_group("cpu")
    out = [ddpc.checkpoint.load(os.path.join(directory, "missing"))]
    try:
        ddpc.checkpoint.load(os.path.join(directory, "empty"))
        out.append("returned")
    except Exception as e:
        out.append(f"{type(e).__name__}: {e}")
    dist.destroy_process_group()
    return out


def test_an_empty_checkpoint_is_an_error_on_every_rank(tmp_path):
    (tmp_path / "empty").write_bytes(b"")
    for missing, error in ddpc.spawn(_load_missing_and_empty_worker, args=(str(tmp_path),), nprocs=2):
        assert missing is None
        assert error.startswith("EmptyCheckpointError: ") and "empty: not a loadable ddpc checkpoint" in error, error


@pytest.mark.parametrize("extra", [{}, {"z": 1j}], ids=["format1", "format2"])
def test_numpy_numbers_keep_their_type_with_weights_only_false(tmp_path, extra):
    numbers = {"i": np.int32(-3), "u": np.uint64(2**63), "f": np.float32(0.1), "h": np.float16("nan"),
               "b": np.bool_(True), "s": np.str_("x"), "y": np.bytes_(b"\x00a")}
    ddpc.save({**numbers, **extra}, tmp_path / "ck")
    back = ddpc.load(tmp_path / "ck", weights_only=False)
    for k, v in numbers.items():
        assert type(back[k]) is type(v) and (back[k] == v or v != v), k
    # Under weights_only (where torch.load refuses numpy numbers) they load as Python's, as before.
    plain = ddpc.load(tmp_path / "ck")
    assert [type(plain[k]) for k in numbers] == [int, int, float, float, bool, str, bytes]
    assert plain["f"] == float(np.float32(0.1))


def test_a_numpy_number_of_a_forged_dtype_is_refused():
    out = io.BytesIO()
    ddpc.save({"n": np.int32(1)}, out)
    _, header = ddpc_header(out.getvalue())
    header["root"][1][0][1][2] = "O"
    blob = json.dumps(header).encode()
    data = struct.pack("<8sIQQI", b"DDPCCKPT", 1, len(blob), 0, zlib.crc32(blob)) + blob
    with pytest.raises(ddpc.serialization.CheckpointError, match="numpy dtype object"):
        ddpc.load(io.BytesIO(data), weights_only=False)
