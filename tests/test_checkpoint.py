"""ddpc.save / ddpc.load: round trips, damaged and foreign files, and atomic
replacement under SIGKILL."""

import os
import pickle
import select
import signal
import subprocess
import sys
import time
from collections import OrderedDict

import numpy as np
import pytest

import ddpc


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


def test_unsupported_objects_are_refused(tmp_path):
    import argparse
    with pytest.raises(TypeError, match="can't store a Namespace"):
        ddpc.save({"args": argparse.Namespace(lr=0.1)}, tmp_path / "x")
    with pytest.raises(TypeError, match="numpy array of dtype object"):
        ddpc.save(np.array([None]), tmp_path / "y")
    assert not os.listdir(tmp_path)


def test_truncated_files_raise_the_clear_error(tmp_path):
    path = tmp_path / "ck.ddpc"
    ddpc.save(sample(), path)
    data = path.read_bytes()
    cut = tmp_path / "cut.ddpc"
    for n in range(0, len(data), 10):
        cut.write_bytes(data[:n])
        with pytest.raises(ddpc.CheckpointError, match="not a loadable ddpc checkpoint"):
            ddpc.load(cut)
    assert issubclass(ddpc.CheckpointError, ValueError)


def test_flipped_bytes_raise_the_clear_error(tmp_path):
    path = tmp_path / "ck.ddpc"
    ddpc.save(sample(), path)
    data = path.read_bytes()
    bad = tmp_path / "bad.ddpc"
    # Every byte of the fixed prefix and the start of the header, then every 7th byte.
    for pos in list(range(64)) + list(range(64, len(data), 7)):
        flipped = bytearray(data)
        flipped[pos] ^= 0x5A
        bad.write_bytes(bytes(flipped))
        with pytest.raises(ddpc.CheckpointError):
            ddpc.load(bad)


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
