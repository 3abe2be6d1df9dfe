"""ddpc.utils.tensorboard.SummaryWriter and _C.crc32c: the CRC-32C check
values; event files read back by a decoder written here (record framing and
CRCs with a bit-at-a-time CRC, protocol buffer fields by number) giving the
scalars, histograms, text, images and hparams written, with their steps and
wall times; torch's default directory and file names; add_scalars'
directories; when events reach the file; and the writer's thread."""

import glob
import os
import re
import socket
import struct
import subprocess
import sys
import threading
import time
import zlib

import numpy as np
import pytest

import ddpc
from ddpc import _C
from ddpc.utils.tensorboard import SummaryWriter

THREAD_NAME = "ddpc-SummaryWriter"


# ---- an independent reader of event files -------------------------------------------

def crc32c_bitwise(data):
    crc = 0xFFFFFFFF
    for byte in data:
        crc ^= byte
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def masked(crc):
    return (((crc >> 15) | (crc << 17)) + 0xA282EAD8) & 0xFFFFFFFF


def read_records(path):
    """The data of each record in the file, checking both CRCs of each and that nothing trails."""
    with open(path, "rb") as f:
        blob = f.read()
    out, pos = [], 0
    while pos < len(blob):
        header = blob[pos:pos + 8]
        (length,), (length_crc,) = struct.unpack("<Q", header), struct.unpack("<I", blob[pos + 8:pos + 12])
        assert length_crc == masked(crc32c_bitwise(header)), f"length CRC of record {len(out)}"
        data = blob[pos + 12:pos + 12 + length]
        (data_crc,) = struct.unpack("<I", blob[pos + 12 + length:pos + 16 + length])
        assert len(data) == length and data_crc == masked(crc32c_bitwise(data)), f"data CRC of record {len(out)}"
        out.append(data)
        pos += 16 + length
    assert pos == len(blob)
    return out


def fields(data):
    """Protocol buffer fields: number -> list of values (ints for varints, bytes for the others)."""
    out, pos = {}, 0

    def varint():
        nonlocal pos
        n = shift = 0
        while True:
            b = data[pos]
            pos += 1
            n |= (b & 0x7F) << shift
            shift += 7
            if b < 0x80:
                return n

    while pos < len(data):
        key = varint()
        number, wire = key >> 3, key & 7
        if wire == 0:
            value = varint()
        elif wire == 1:
            value, pos = data[pos:pos + 8], pos + 8
        elif wire == 5:
            value, pos = data[pos:pos + 4], pos + 4
        else:
            assert wire == 2, f"wire type {wire}"
            n = varint()
            value, pos = data[pos:pos + n], pos + n
        out.setdefault(number, []).append(value)
    return out


def one(fs, number, default=None):
    values = fs.get(number, [])
    assert len(values) <= 1, (number, values)
    return values[0] if values else default


def f64(raw, default=0.0):
    return struct.unpack("<d", raw)[0] if raw is not None else default


def int64(n):
    return n - (1 << 64) if n is not None and n >= 1 << 63 else (n or 0)


def decode_value(raw):
    fs = fields(raw)
    out = {"tag": one(fs, 1, b"").decode()}
    if 2 in fs:
        out["simple_value"] = struct.unpack("<f", one(fs, 2))[0]
    if 5 in fs:
        h = fields(one(fs, 5))
        out["histo"] = {name: f64(one(h, i)) for i, name in enumerate(["min", "max", "num", "sum", "sum_squares"], 1)}
        out["histo"]["bucket_limit"] = np.frombuffer(one(h, 6, b""), "<f8").tolist()
        out["histo"]["bucket"] = np.frombuffer(one(h, 7, b""), "<f8").tolist()
    if 8 in fs:
        t = fields(one(fs, 8))
        shape = [one(fields(d), 1) for d in fields(one(t, 2, b"")).get(2, [])]
        out["tensor"] = {"dtype": one(t, 1), "shape": shape, "float_val": np.frombuffer(one(t, 5, b""), "<f4").tolist(),
                         "double_val": np.frombuffer(one(t, 6, b""), "<f8").tolist(), "string_val": t.get(8, [])}
    if 4 in fs:
        im = fields(one(fs, 4))
        out["image"] = {"height": one(im, 1), "width": one(im, 2), "colorspace": one(im, 3), "png": one(im, 4)}
    if 9 in fs:
        plugin = fields(one(fields(one(fs, 9)), 1))
        out["plugin"] = one(plugin, 1).decode()
        out["plugin_content"] = one(plugin, 2, b"")
    return out


def decode_event(raw):
    fs = fields(raw)
    event = {"wall_time": f64(one(fs, 1)), "step": int64(one(fs, 2))}
    if 3 in fs:
        event["file_version"] = one(fs, 3).decode()
    if 5 in fs:
        event["values"] = [decode_value(v) for v in fields(one(fs, 5)).get(1, [])]
    if 7 in fs:
        event["session_log_status"] = one(fields(one(fs, 7)), 1)
    if 10 in fs:
        event["writer"] = one(fields(one(fs, 10)), 1).decode()
    return event


def event_files(logdir):
    return sorted(glob.glob(os.path.join(str(logdir), "events.out.tfevents.*")))


def events_in(logdir):
    (path,) = event_files(logdir)
    return [decode_event(r) for r in read_records(path)]


def summaries(logdir):
    """(step, wall_time, value) of each summary event after the file's first."""
    events = events_in(logdir)
    assert events[0]["file_version"] == "brain.Event:2"
    return [(e["step"], e["wall_time"], v) for e in events[1:] for v in e.get("values", [])]


def writer_threads():
    return [t for t in threading.enumerate() if t.name == THREAD_NAME]


# ---- CRC-32C --------------------------------------------------------------------------

def test_crc32c_check_values():
    assert _C.crc32c(b"123456789") == 0xE3069283
    assert _C.crc32c(bytes(32)) == 0x8A9136AA
    assert _C.crc32c(b"\xff" * 32) == 0x62A8AB43  # RFC 3720, B.4
    assert _C.crc32c(b"") == 0 and _C.crc32c(b"", 0xDEADBEEF) == 0xDEADBEEF


def test_crc32c_matches_a_bitwise_crc_and_extends_like_zlib():
    rng = np.random.default_rng(0)
    for n in (1, 7, 8, 9, 63, 200):
        data = rng.integers(0, 256, n, dtype=np.uint8).tobytes()
        assert _C.crc32c(data) == crc32c_bitwise(data), n
        for cut in (0, 1, n // 2, n):
            assert _C.crc32c(data[cut:], _C.crc32c(data[:cut])) == _C.crc32c(data), (n, cut)
            assert _C.crc32c(data=data[cut:], value=_C.crc32c(data[:cut])) == _C.crc32c(data)
    big = rng.integers(0, 256, 1 << 17, dtype=np.uint8)  # long enough to run without the GIL
    assert _C.crc32c(big) == _C.crc32c(big[1000:].tobytes(), _C.crc32c(memoryview(big[:1000])))
    assert _C.crc32c(bytearray(b"123456789")) == 0xE3069283
    with pytest.raises(TypeError):
        _C.crc32c("123456789")


# ---- names and framing --------------------------------------------------------------

def test_default_log_dir_and_file_names_are_torchs(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with SummaryWriter(comment="_lr0.1", filename_suffix=".v2") as w:
        logdir = w.get_logdir()
        host = re.escape(socket.gethostname())
        assert re.fullmatch(r"runs/[A-Z][a-z]{2}\d{2}_\d{2}-\d{2}-\d{2}_" + host + r"_lr0\.1", logdir), logdir
        (path,) = event_files(logdir)
        name = os.path.basename(path)
        m = re.fullmatch(r"events\.out\.tfevents\.(\d{10})\." + host + r"\.(\d+)\.(\d+)\.v2", name)
        assert m and int(m.group(2)) == os.getpid(), name
        assert abs(int(m.group(1)) - time.time()) < 3600
        # The first event is on disk before anything is added or flushed.
        (first,) = [decode_event(r) for r in read_records(path)]
        assert first["file_version"] == "brain.Event:2" and first["writer"] == "ddpc.utils.tensorboard"
        with SummaryWriter(str(tmp_path / "other")) as w2:
            (path2,) = event_files(w2.get_logdir())
        number = int(re.search(r"\.(\d+)\.v2$", name).group(1))
        assert path2.endswith(f".{number + 1}"), "files of one process are numbered in turn"


def test_a_log_dir_path_object_is_kept_as_given(tmp_path):
    with SummaryWriter(tmp_path / "run") as w:
        assert w.get_logdir() == tmp_path / "run"
        w.add_scalar("x", 1.0, 0)
    assert [v["tag"] for _, _, v in summaries(tmp_path / "run")] == ["x"]


# ---- what is written ------------------------------------------------------------------

def test_scalars_read_back_with_steps_and_wall_times(tmp_path):
    grad = ddpc.tensor(2.5, requires_grad=True) * 2
    # (value, step, the float32 read back)
    cases = [(0.1, 0, 0.1), (3, 1, 3.0), (True, 2, 1.0), (np.float32(1.5), 3, 1.5), (np.int64(-7), 4, -7.0),
             (ddpc.tensor(0.25), 5, 0.25), (ddpc.tensor([[4.0]], dtype=ddpc.float64), 6, 4.0), (grad, 7, 5.0),
             (np.array([2.0]), -3, 2.0), (1e40, 1 << 40, np.inf), (-0.0, 8, -0.0), (float("nan"), 9, np.nan)]
    with SummaryWriter(tmp_path) as w:
        for k, (value, step, _) in enumerate(cases):
            w.add_scalar("loss/train", value, step, walltime=1000.0 + k)
        w.add_scalar("nostep", 2.0, walltime=5.0)
    got = summaries(tmp_path)
    assert len(got) == len(cases) + 1
    for k, ((_, step, want), (got_step, wall, v)) in enumerate(zip(cases, got)):
        assert (got_step, wall, v["tag"]) == (step, 1000.0 + k, "loss/train")
        np.testing.assert_array_equal(np.float32(v["simple_value"]), np.float32(want))
        assert np.signbit(v["simple_value"]) == np.signbit(want)
    assert got[-1][:2] == (0, 5.0) and got[-1][2]["tag"] == "nostep"


def test_scalar_new_style_is_a_float_or_double_tensor(tmp_path):
    with SummaryWriter(tmp_path) as w:
        w.add_scalar("f", 1 / 3, 1, walltime=1.0, new_style=True)
        w.add_scalar("d", 1 / 3, 2, walltime=2.0, new_style=True, double_precision=True)
    (_, _, f), (_, _, d) = summaries(tmp_path)
    assert f["plugin"] == d["plugin"] == "scalars" and "simple_value" not in f
    assert f["tensor"]["dtype"] == 1 and f["tensor"]["float_val"] == [float(np.float32(1 / 3))]
    assert d["tensor"]["dtype"] == 2 and d["tensor"]["double_val"] == [1 / 3] and d["tensor"]["shape"] == []


def test_scalar_errors_are_torchs(tmp_path):
    with SummaryWriter(tmp_path) as w:
        with pytest.raises(AssertionError, match="one element"):
            w.add_scalar("x", ddpc.ones(2), 0)
        with pytest.raises(NotImplementedError, match="list"):
            w.add_scalar("x", [1.0], 0)
        with pytest.raises(ValueError, match="int64"):
            w.add_scalar("x", 1.0, 1 << 63)
    assert summaries(tmp_path) == []


def test_histograms_closed_form(tmp_path):
    with SummaryWriter(tmp_path) as w:
        w.add_histogram("four", np.array([0.5, 1.5, 1.5, 2.5]), 3, bins=[0, 1, 2, 3], walltime=7.0)
        # The first bin holding values is not the first: the one to its left stays, empty.
        w.add_histogram("two", ddpc.tensor([1.5, 1.5]), 4, bins=[0, 1, 2, 3])
        w.add_histogram_raw("raw", min=-1, max=2, num=3, sum=1.5, sum_squares=5.25, bucket_limits=[0.0, 2.0],
                            bucket_counts=ddpc.tensor([1.0, 2.0]), global_step=5, walltime=8.0)
        with pytest.raises(ValueError, match="bucket"):
            w.add_histogram_raw("bad", 0, 1, 1, 1, 1, [1.0], [1.0, 2.0])
        with pytest.raises(ValueError, match="no element"):
            w.add_histogram("empty", np.zeros(0))
    (s1, t1, four), (s2, _, two), (s3, t3, raw) = summaries(tmp_path)
    assert (s1, t1, s2, s3, t3) == (3, 7.0, 4, 5, 8.0)
    assert four["histo"] == {"min": 0.5, "max": 2.5, "num": 4.0, "sum": 6.0, "sum_squares": 11.0,
                             "bucket_limit": [0.0, 1.0, 2.0, 3.0], "bucket": [0.0, 1.0, 2.0, 1.0]}
    assert two["histo"]["bucket_limit"] == [1.0, 2.0] and two["histo"]["bucket"] == [0.0, 2.0]
    assert raw["histo"] == {"min": -1.0, "max": 2.0, "num": 3.0, "sum": 1.5, "sum_squares": 5.25,
                            "bucket_limit": [0.0, 2.0], "bucket": [1.0, 2.0]}


def test_histogram_default_bins_hold_every_value(tmp_path):
    values = ddpc.randn(500, 3) * 10
    flat = values.numpy().astype(np.float64).ravel()
    with SummaryWriter(tmp_path) as w:
        w.add_histogram("w", values, 0)
        w.add_histogram("few", flat, 1, max_bins=30)
        w.add_histogram("auto", flat, 2, bins="auto")
    for _, _, v in summaries(tmp_path):
        h = v["histo"]
        assert (h["min"], h["max"], h["num"]) == (flat.min(), flat.max(), flat.size)
        np.testing.assert_allclose([h["sum"], h["sum_squares"]], [flat.sum(), flat @ flat], rtol=1e-12)
        limits, counts = np.array(h["bucket_limit"]), np.array(h["bucket"])
        assert counts[0] == 0 and counts.sum() == flat.size and len(limits) == len(counts)
        np.testing.assert_array_equal(np.histogram(flat, bins=limits)[0], counts[1:])
    # TensorBoard's edges: 0 and +-1e-12 * 1.1**k; a value near 1 falls between two of them.
    h = summaries(tmp_path)[0][2]["histo"]
    positive = [x for x in h["bucket_limit"] if x > 0]
    np.testing.assert_allclose(np.diff(np.log(positive)), np.log(1.1), rtol=1e-9)


@pytest.mark.gpu
def test_gpu_tensors_are_read_on_the_host(tmp_path):
    x = ddpc.tensor([0.5, 1.5, 1.5, 2.5], device="cuda")
    with SummaryWriter(tmp_path) as w:
        w.add_scalar("sum", x.sum(), 0)
        w.add_histogram("x", x, 1, bins=[0, 1, 2, 3])
    (_, _, total), (_, _, h) = summaries(tmp_path)
    assert total["simple_value"] == 6.0 and h["histo"]["bucket"] == [0.0, 1.0, 2.0, 1.0]


def test_text_reads_back_as_the_text_plugins_string_tensor(tmp_path):
    with SummaryWriter(tmp_path) as w:
        w.add_text("notes", "**lr** = 0.1, é", 10, walltime=3.0)
    ((step, wall, v),) = summaries(tmp_path)
    assert (step, wall, v["tag"], v["plugin"], v["plugin_content"]) == (10, 3.0, "notes/text_summary", "text", b"")
    assert v["tensor"]["dtype"] == 7 and v["tensor"]["shape"] == [1]
    assert v["tensor"]["string_val"] == ["**lr** = 0.1, é".encode()]


def png_pixels(png):
    """The pixels of an 8-bit, non-interlaced PNG whose rows are unfiltered (what the writer makes)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, chunks = 8, {}
    while pos < len(png):
        (n,) = struct.unpack(">I", png[pos:pos + 4])
        kind, data = png[pos + 4:pos + 8], png[pos + 8:pos + 8 + n]
        assert struct.unpack(">I", png[pos + 8 + n:pos + 12 + n])[0] == zlib.crc32(kind + data)
        chunks[kind] = chunks.get(kind, b"") + data
        pos += 12 + n
    width, height, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", chunks[b"IHDR"])
    assert depth == 8 and interlace == 0 and b"IEND" in chunks
    channels = {0: 1, 4: 2, 2: 3, 6: 4}[color]
    rows = np.frombuffer(zlib.decompress(chunks[b"IDAT"]), np.uint8).reshape(height, 1 + width * channels)
    assert not rows[:, 0].any()
    return rows[:, 1:].reshape(height, width, channels)


def test_images_read_back_as_pngs(tmp_path):
    chw = np.linspace(-0.2, 1.2, 3 * 4 * 5, dtype=np.float32).reshape(3, 4, 5)
    hwc_rgba = np.arange(4 * 2 * 4, dtype=np.uint8).reshape(4, 2, 4) * 7
    batch = ddpc.tensor(np.arange(3 * 1 * 2 * 2, dtype=np.float32).reshape(3, 1, 2, 2) / 11)
    with SummaryWriter(tmp_path) as w:
        w.add_image("chw", ddpc.tensor(chw), 1, walltime=2.0)
        w.add_image("rgba", hwc_rgba, 2, dataformats="HWC")
        w.add_image("gray", chw[0], 3, dataformats="HW")
        w.add_images("batch", batch, 4)
        with pytest.raises(AssertionError, match="format"):
            w.add_image("bad", chw, 5, dataformats="HWC" + "N")
    (s1, t1, a), (_, _, b), (_, _, c), (_, _, d) = summaries(tmp_path)
    assert (s1, t1) == (1, 2.0)
    want_a = (chw.transpose(1, 2, 0) * 255).clip(0, 255).astype(np.uint8)
    assert (a["image"]["height"], a["image"]["width"], a["image"]["colorspace"]) == (4, 5, 3)
    np.testing.assert_array_equal(png_pixels(a["image"]["png"]), want_a)
    assert b["image"]["colorspace"] == 4
    np.testing.assert_array_equal(png_pixels(b["image"]["png"]), hwc_rgba)
    np.testing.assert_array_equal(png_pixels(c["image"]["png"]), np.repeat(want_a[:, :, :1], 3, axis=2))
    # Three 2x2 gray images side by side in one row, as RGB.
    tiles = (batch.numpy()[:, 0] * 255).astype(np.uint8)
    np.testing.assert_array_equal(png_pixels(d["image"]["png"])[:, :, 1], np.concatenate(list(tiles), axis=1))


def test_pngs_open_with_pillow(tmp_path):
    pil = pytest.importorskip("PIL.Image")
    import io

    image = np.random.default_rng(1).integers(0, 256, (3, 6, 7), dtype=np.uint8)
    with SummaryWriter(tmp_path) as w:
        w.add_image("x", image, 0)
    ((_, _, v),) = summaries(tmp_path)
    opened = pil.open(io.BytesIO(v["image"]["png"]))
    assert opened.mode == "RGB"
    np.testing.assert_array_equal(np.asarray(opened), image.transpose(1, 2, 0))


def test_hparams_are_the_plugins_three_summaries_and_the_metrics(tmp_path):
    with SummaryWriter(tmp_path) as w:
        w.add_hparams({"lr": 0.1, "bsize": 32, "opt": "adam", "bn": True, "skip": None},
                      {"hparam/accuracy": 0.9}, hparam_domain_discrete={"opt": ["adam", "sgd"]}, run_name="trial",
                      global_step=3)
        with pytest.raises(TypeError, match="dictionary"):
            w.add_hparams([("lr", 0.1)], {})
        with pytest.raises(ValueError, match="value should be"):
            w.add_hparams({"lr": [0.1]}, {})
    events = events_in(tmp_path / "trial")
    exp, start, end = (e["values"][0] for e in events[1:4])
    assert all(e["step"] == 3 for e in events[1:])
    assert [exp["tag"], start["tag"], end["tag"]] == ["_hparams_/experiment", "_hparams_/session_start_info",
                                                      "_hparams_/session_end_info"]
    assert {exp["plugin"], start["plugin"], end["plugin"]} == {"hparams"}
    experiment = fields(one(fields(exp["plugin_content"]), 2))
    infos = [fields(i) for i in experiment[4]]
    assert [(one(i, 1).decode(), one(i, 4)) for i in infos] == [("lr", 3), ("bsize", 3), ("opt", 1), ("bn", 3)]
    discrete = fields(one(infos[2], 5))[1]
    assert [one(fields(d), 3) for d in discrete] == [b"adam", b"sgd"]
    assert [one(fields(one(fields(m), 1)), 2) for m in experiment[5]] == [b"hparam/accuracy"]
    entries = {}
    for entry in fields(one(fields(start["plugin_content"]), 3))[1]:
        e = fields(entry)
        value = fields(one(e, 2))
        entries[one(e, 1).decode()] = f64(one(value, 2)) if 2 in value else one(value, 3).decode()
    assert entries == {"lr": 0.1, "bsize": 32.0, "opt": "adam", "bn": 1.0}
    assert one(fields(one(fields(end["plugin_content"]), 4)), 1) == 1  # STATUS_SUCCESS
    (metric,) = events[4]["values"]
    assert (metric["tag"], metric["simple_value"], events[4]["step"]) == ("hparam/accuracy", np.float32(0.9), 3)
    assert summaries(tmp_path) == []


def test_add_scalars_writes_each_tag_to_a_directory_of_its_own(tmp_path):
    with SummaryWriter(tmp_path) as w:
        w.add_scalars("loss/run", {"train": 1.0, "val": ddpc.tensor(2.0)}, 4)
        w.add_scalars("loss/run", {"train": 0.5}, 5, walltime=9.0)
    assert sorted(d.name for d in tmp_path.iterdir() if d.is_dir()) == ["loss_run_train", "loss_run_val"]
    train, val = summaries(tmp_path / "loss_run_train"), summaries(tmp_path / "loss_run_val")
    assert [(s, v["tag"], v["simple_value"]) for s, _, v in train] == [(4, "loss/run", 1.0), (5, "loss/run", 0.5)]
    assert [(s, v["tag"], v["simple_value"]) for s, _, v in val] == [(4, "loss/run", 2.0)]
    assert train[0][1] == val[0][1] and train[1][1] == 9.0, "one wall time for the tags of a call"
    assert summaries(tmp_path) == []


def test_purge_step_starts_a_session_at_that_step(tmp_path):
    with SummaryWriter(tmp_path, purge_step=42) as w:
        w.add_scalar("x", 1.0, 42)
    events = events_in(tmp_path)
    assert events[1]["file_version"] == "brain.Event:2" and events[1]["step"] == 42
    assert events[2]["session_log_status"] == 1 and events[2]["step"] == 42  # START
    assert events[3]["values"][0]["tag"] == "x"


def test_methods_it_does_not_write_say_so(tmp_path):
    with SummaryWriter(tmp_path) as w:
        for name in ("add_graph", "add_embedding", "add_audio", "add_pr_curve", "add_mesh", "add_figure"):
            with pytest.raises(NotImplementedError, match=name):
                getattr(w, name)("tag", None)


# ---- when events reach the file, and the thread --------------------------------------

def test_events_wait_for_max_queue_flush_and_close(tmp_path):
    w = SummaryWriter(tmp_path, max_queue=3, flush_secs=3600)
    (path,) = event_files(tmp_path)
    w.add_scalar("x", 1.0, 1)
    w.add_scalar("x", 2.0, 2)
    assert len(read_records(path)) == 1, "two events wait"
    w.add_scalar("x", 3.0, 3)
    assert len(read_records(path)) == 4, "the third fills the queue"
    w.add_scalar("x", 4.0, 4)
    w.flush()
    assert len(read_records(path)) == 5
    w.add_scalar("x", 5.0, 5)
    w.close()
    assert [s for s, _, _ in summaries(tmp_path)] == [1, 2, 3, 4, 5]
    w.close()  # a second close does nothing
    w.flush()


def test_the_thread_writes_every_flush_secs(tmp_path):
    with SummaryWriter(tmp_path, max_queue=1000, flush_secs=0.05) as w:
        (path,) = event_files(tmp_path)
        w.add_scalar("x", 1.0, 1)
        deadline = time.monotonic() + 30
        while len(read_records(path)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(read_records(path)) == 2


def test_no_thread_is_left_after_close_and_reopening_starts_a_new_file(tmp_path):
    before = len(writer_threads())
    w = SummaryWriter(tmp_path)
    w.add_scalars("m", {"a": 1.0, "b": 2.0}, 0)
    assert len(writer_threads()) == before + 1, "one thread for all of a writer's files"
    w.close()
    assert len(writer_threads()) == before
    w.add_scalar("x", 1.0, 1)  # after close, as torch's writer, a new event file
    assert len(event_files(tmp_path)) == 2 and len(writer_threads()) == before + 1
    w.close()
    assert len(writer_threads()) == before
    assert sorted(len(read_records(p)) for p in event_files(tmp_path)) == [1, 2]


def test_a_dropped_writer_is_written_and_its_thread_ends(tmp_path):
    import gc

    before = len(writer_threads())
    w = SummaryWriter(tmp_path)
    w.add_scalar("x", 1.0, 1)
    del w
    gc.collect()
    assert len(writer_threads()) == before
    assert [s for s, _, _ in summaries(tmp_path)] == [1]


def test_a_writer_never_closed_is_written_at_exit(tmp_path):
    script = ("import sys; from ddpc.utils.tensorboard import SummaryWriter\n"
              "w = SummaryWriter(sys.argv[1])\n"
              "for i in range(3): w.add_scalar('x', float(i), i)\n"
              "sys.exit(0)\n")
    subprocess.run([sys.executable, "-c", script, str(tmp_path)], check=True, timeout=120,
                   env=dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path)))
    assert [(s, v["simple_value"]) for s, _, v in summaries(tmp_path)] == [(0, 0.0), (1, 1.0), (2, 2.0)]


def test_a_forked_child_writes_a_file_of_its_own(tmp_path):
    w = SummaryWriter(tmp_path, max_queue=100)
    w.add_scalar("x", 1.0, 1)  # waits at the fork: the parent's to write
    pid = os.fork()
    if pid == 0:
        try:
            w.add_scalar("x", 2.0, 2)
            w.close()
        finally:
            os._exit(0 if len(writer_threads()) == 0 else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    w.add_scalar("x", 3.0, 3)
    w.close()
    files = {int(p.split(".")[-2]): p for p in event_files(tmp_path)}
    assert sorted(files) == sorted([os.getpid(), pid])
    steps = {p: [decode_event(r)["step"] for r in read_records(path)[1:]] for p, path in files.items()}
    assert steps == {os.getpid(): [1, 3], pid: [2]}


def test_torchs_import_path():
    import ddpc.utils.tensorboard as tb

    assert ddpc.utils.tensorboard is tb and tb.SummaryWriter is SummaryWriter
