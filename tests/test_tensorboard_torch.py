"""Optional: ddpc.utils.tensorboard.SummaryWriter against
torch.utils.tensorboard's (skipped without torch, and without tensorboard,
which torch's writer needs). A child process that imports torch before ddpc
makes the same calls on both writers, with the same wall times, and then:

- both runs have the same directories, each with one event file named alike;
- every event after each file's first holds the same bytes, but for the
  wall time of events stamped when they are added (purge_step's and
  add_hparams'), images (the same pixels; torch's PNG comes from pillow) and
  the hparams plugin's data (the same message; protobuf writes a map in no
  set order);
- tensorboard's EventAccumulator reads from both the same tags, scalars,
  histograms, tensors (text and new-style scalars), images and hparams;
- the methods torch's writer has are there, those written with its
  arguments and defaults, and the default directories are named alike.
"""

import inspect
import os
import re
import socket
import sys

import pytest
from procs import run_torch_case

NO_TENSORBOARD = "tensorboard is not installed"


def test_matches_torchs_writer(tmp_path):
    out = run_torch_case(__file__, str(tmp_path))
    if NO_TENSORBOARD in out:
        pytest.skip(NO_TENSORBOARD)
    assert out.strip().endswith("ok"), out


def _log(lib, SummaryWriter, logdir):
    """The same calls on either writer (lib is torch or ddpc), steps rising so that no event is purged."""
    import numpy as np

    rng = np.random.default_rng(0)
    weights = rng.standard_normal((64, 32)).astype(np.float32)
    with SummaryWriter(logdir, purge_step=-10, filename_suffix=".s") as w:
        w.add_scalar("np", np.float32(0.1), -4, walltime=99.0)
        for step in range(3):
            w.add_scalar("loss", 1.0 / (step + 1), step, walltime=100.0 + step)
        w.add_scalar("tensor", lib.tensor(2.5), 3, walltime=103.0)
        w.add_scalar("huge", 1e40, 4, walltime=104.0)
        w.add_scalar("new", 1 / 3, 7, walltime=107.0, new_style=True)
        w.add_scalar("new64", 1 / 3, 8, walltime=108.0, new_style=True, double_precision=True)
        w.add_scalars("run/a", {"train": 1.0, "val": lib.tensor(2.0)}, 9, walltime=109.0)
        w.add_histogram("weights", lib.tensor(weights), 10, walltime=110.0)
        w.add_histogram("tiny", weights * 1e-8, 11, walltime=111.0)
        w.add_histogram("auto", weights, 12, bins="auto", walltime=112.0)
        w.add_histogram("max_bins", lib.tensor(weights), 13, bins=100, max_bins=7, walltime=113.0)
        w.add_histogram("ints", lib.tensor(rng.integers(-5, 5, 100)), 14, walltime=114.0)
        w.add_histogram_raw("raw", 0.0, 3.0, 4, 6.0, 11.0, [1.0, 2.0, 3.0], [1.0, 2.0, 1.0], 15, walltime=115.0)
        w.add_text("notes", "**bold** é", 16, walltime=116.0)
        w.add_image("img", lib.tensor(rng.random((3, 8, 10)).astype(np.float32)), 17, walltime=117.0)
        w.add_images("imgs", rng.integers(0, 256, (5, 1, 4, 6)).astype(np.uint8), 18, walltime=118.0)
        w.add_hparams({"lr": 0.1, "bsize": 32, "opt": "adam", "bn": True}, {"hp/acc": 0.9},
                      hparam_domain_discrete={"opt": ["adam", "sgd"]}, run_name="trial", global_step=19)
        w.add_scalar("last", 1.0, 1 << 40, walltime=120.0)


def _pixels(png):
    import io

    import numpy as np
    from PIL import Image

    return np.asarray(Image.open(io.BytesIO(png)))


def _same_events(ours, theirs, where):
    """Compares two files' records after the first; returns the tags of the events whose bytes differ
    (their messages must not), and a name for each event that differs only in its wall time."""
    from tensorboard.compat.proto.event_pb2 import Event
    from tensorboard.plugins.hparams.plugin_data_pb2 import HParamsPluginData

    assert len(ours) == len(theirs), (where, len(ours), len(theirs))
    differing, stamped = set(), set()
    for k, (raw_ours, raw_theirs) in enumerate(zip(ours, theirs)):
        a, b = Event.FromString(raw_ours), Event.FromString(raw_theirs)
        if raw_ours[:1] == raw_theirs[:1] == b"\x09" and raw_ours[:9] != raw_theirs[:9] and \
                raw_ours[9:] == raw_theirs[9:]:
            # Only wall_time (field 1, a double) differs: events the writers stamp with the time they are added.
            assert a.wall_time > 1e9 and b.wall_time > 1e9, (where, k)
            stamped.add(f"{where}/{k}")
            continue
        if raw_ours == raw_theirs:
            continue
        for va, vb in zip(a.summary.value, b.summary.value):
            differing.add(va.tag)
            if va.HasField("image"):
                assert (_pixels(va.image.encoded_image_string) == _pixels(vb.image.encoded_image_string)).all(), va.tag
                va.image.encoded_image_string = vb.image.encoded_image_string = b""
            if va.metadata.plugin_data.plugin_name == "hparams":
                content_a, content_b = va.metadata.plugin_data.content, vb.metadata.plugin_data.content
                assert HParamsPluginData.FromString(content_a) == HParamsPluginData.FromString(content_b), va.tag
                va.metadata.plugin_data.content = vb.metadata.plugin_data.content = b""
        a.wall_time = b.wall_time = 0
        assert a == b, (where, k, a, b)
    return differing, stamped


def _hparams_contents(acc):
    from tensorboard.plugins.hparams import metadata

    try:
        return acc.PluginTagToContent(metadata.PLUGIN_NAME)
    except KeyError:  # no hparams in this run
        return {}


def _same_accumulated(ours, theirs, where):
    """Compares what tensorboard's EventAccumulator reads from two runs; returns the tags it read, by kind."""
    import dataclasses

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import metadata

    accs = []
    for path in (ours, theirs):
        acc = EventAccumulator(path, size_guidance={"scalars": 0, "histograms": 0, "tensors": 0, "images": 0})
        acc.Reload()
        accs.append(acc)
    a, b = accs
    assert a.Tags() == b.Tags(), (where, a.Tags(), b.Tags())
    tags = a.Tags()

    def events(acc, kind, tag):  # the hparams run's events are stamped with the time they are added
        return [dataclasses.replace(e, wall_time=0) if where == "trial" else e for e in getattr(acc, kind)(tag)]

    for kind, key in (("Scalars", "scalars"), ("Histograms", "histograms"), ("Tensors", "tensors")):
        for tag in tags[key]:
            assert events(a, kind, tag) == events(b, kind, tag), (where, tag)
    for tag in tags["images"]:
        ia, ib = a.Images(tag), b.Images(tag)
        assert [(i.step, i.wall_time, i.width, i.height) for i in ia] == [(i.step, i.wall_time, i.width, i.height)
                                                                          for i in ib], (where, tag)
    # The plugin's own parsers, each checking the data's version and kind.
    parsers = {metadata.EXPERIMENT_TAG: metadata.parse_experiment_plugin_data,
               metadata.SESSION_START_INFO_TAG: metadata.parse_session_start_info_plugin_data,
               metadata.SESSION_END_INFO_TAG: metadata.parse_session_end_info_plugin_data}
    hparams, want = ({tag: parsers[tag](content) for tag, content in contents.items()}
                     for contents in map(_hparams_contents, (a, b)))
    assert hparams == want, where
    read = {kind: set(v) for kind, v in tags.items() if isinstance(v, list) and v}
    if hparams:
        read["hparams"] = set(hparams)
    return read


def _compare(directory):
    """Runs the comparison (torch is imported before ddpc, as in the other comparisons)."""
    import torch
    from tensorboard.backend.event_processing.event_file_loader import RawEventFileLoader
    from torch.utils.tensorboard import SummaryWriter as TorchWriter

    import ddpc
    from ddpc.utils.tensorboard import SummaryWriter

    _log(torch, TorchWriter, os.path.join(directory, "torch"))
    _log(ddpc, SummaryWriter, os.path.join(directory, "ddpc"))
    runs = {}
    for lib in ("torch", "ddpc"):
        root = os.path.join(directory, lib)
        runs[lib] = {os.path.relpath(d, root): files for d, _, files in os.walk(root) if files}
    assert sorted(runs["ddpc"]) == sorted(runs["torch"]) == [".", "run_a_train", "run_a_val", "trial"], runs
    differing, stamped, accumulated = set(), set(), {}
    for rel in sorted(runs["ddpc"]):
        (ours,), (theirs,) = runs["ddpc"][rel], runs["torch"][rel]
        pattern = rf"events\.out\.tfevents\.\d{{10}}\.{re.escape(socket.gethostname())}\.{os.getpid()}\.\d+"
        pattern += r"\.s" if rel != "trial" else ""  # the hparams run's writer takes no suffix
        assert re.fullmatch(pattern, ours) and re.fullmatch(pattern, theirs), (ours, theirs)
        paths = [os.path.join(directory, lib, rel, name) for lib, name in (("ddpc", ours), ("torch", theirs))]
        records = [list(RawEventFileLoader(p).Load()) for p in paths]
        assert len(records[0]) > 1, rel
        tags, times = _same_events(records[0][1:], records[1][1:], rel)
        differing, stamped = differing | tags, stamped | times
        accumulated[rel] = _same_accumulated(os.path.dirname(paths[0]), os.path.dirname(paths[1]), rel)
    hparams_tags = {"_hparams_/experiment", "_hparams_/session_start_info", "_hparams_/session_end_info"}
    assert differing <= {"img", "imgs"} | hparams_tags, differing
    # Stamped at the time they are added: the purge step's two events and the hparams run's four, of which the
    # session start info may differ in more (its map, which protobuf writes in no set order).
    assert {"./0", "./1", "trial/0", "trial/2", "trial/3"} <= stamped <= {"./0", "./1", "trial/0", "trial/1",
                                                                          "trial/2", "trial/3"}, stamped
    assert accumulated == {
        ".": {"scalars": {"np", "loss", "tensor", "huge", "last"},
              "histograms": {"weights", "tiny", "auto", "max_bins", "ints", "raw"},
              "distributions": {"weights", "tiny", "auto", "max_bins", "ints", "raw"},
              "tensors": {"new", "new64", "notes/text_summary"}, "images": {"img", "imgs"}},
        "run_a_train": {"scalars": {"run/a"}}, "run_a_val": {"scalars": {"run/a"}},
        "trial": {"scalars": {"hp/acc"}, "hparams": hparams_tags}}, accumulated
    # Every public method of torch's writer is there; those written take torch's arguments, defaults included.
    public = [n for n in dir(TorchWriter) if not n.startswith("_") and callable(getattr(TorchWriter, n))]
    assert [n for n in public if not hasattr(SummaryWriter, n)] == []
    for name in ("__init__", "add_scalar", "add_scalars", "add_histogram", "add_histogram_raw", "add_text",
                 "add_image", "add_images", "add_hparams", "flush", "close", "get_logdir"):
        ours, theirs = (inspect.signature(getattr(w, name)).parameters for w in (SummaryWriter, TorchWriter))
        assert [(p.name, p.default) for p in ours.values()] == [(p.name, p.default) for p in theirs.values()], name
    # Default directory: runs/<date>_<host><comment> (the digits may differ, taken a moment apart).
    os.chdir(directory)
    names = []
    for writer in (TorchWriter(comment="_c"), SummaryWriter(comment="_c")):
        names.append(re.sub(r"\d", "0", str(writer.get_logdir())))
        writer.close()
    assert names[0] == names[1], names


if __name__ == "__main__":
    import importlib.util

    if importlib.util.find_spec("tensorboard") is None:
        print(NO_TENSORBOARD)
        sys.exit(0)
    _compare(sys.argv[1])
    print("ok")
