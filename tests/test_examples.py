"""The main job and every example run end to end (real processes, cpu backend)."""

import json
import os
import re
import subprocess
import sys

import numpy as np
import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")


def run(args, timeout=300, env=None, cwd=EXAMPLES):
    res = subprocess.run([sys.executable] + args, cwd=cwd, capture_output=True, text=True, timeout=timeout,
                         env=dict(os.environ, **(env or {})))
    return res.returncode, res.stdout + res.stderr


def launch(script, *args, nproc=2, extra=(), env=None):
    return run(["-m", "ddpc.run", "--nproc-per-node", str(nproc), *extra, script, *args], env=env)


def test_main_job_reaches_the_accuracy_bound(tmp_path):
    pytest.importorskip("sklearn")
    code, out = launch("train_digits.py", "--checkpoint", str(tmp_path / "ckpt"))
    assert code == 0, out
    accuracy = float(re.search(r"final test accuracy (\d\.\d+)", out).group(1))
    assert accuracy >= 0.95, out
    assert "training on 2 process(es), backend cpu" in out
    assert len(re.findall(r"^epoch +\d+ +loss", out, re.M)) == 12  # rank 0 reports each epoch once


def test_killed_rank_resumes_from_checkpoint_to_the_same_parameters(tmp_path):
    pytest.importorskip("sklearn")
    common = ["--epochs", "4", "--min-accuracy", "0"]
    code, out = launch("train_digits.py", "--checkpoint", str(tmp_path / "a"), "--save-params", str(tmp_path / "a.npz"),
                       *common)
    assert code == 0, out
    code, out = launch("train_digits.py", "--checkpoint", str(tmp_path / "b"), "--save-params", str(tmp_path / "b.npz"),
                       *common, extra=("--max-restarts", "1"), env={"DIGITS_FAIL_AT_EPOCH": "2"})
    assert code == 0, out
    assert "rank 1" in out and "SIGKILL" in out and "restarting the group (1/1)" in out
    assert "resumed from" in out and "after epoch 1" in out
    a, b = np.load(tmp_path / "a.npz"), np.load(tmp_path / "b.npz")
    assert sorted(a.files) == sorted(b.files)
    for k in a.files:
        np.testing.assert_array_equal(a[k], b[k], err_msg=k)


def test_killed_rank_without_restarts_fails_the_launch(tmp_path):
    pytest.importorskip("sklearn")
    code, out = launch("train_digits.py", "--checkpoint", str(tmp_path / "c"), "--epochs", "3",
                       env={"DIGITS_FAIL_AT_EPOCH": "1"})
    assert code != 0
    assert "rank 1" in out and "SIGKILL" in out


@pytest.mark.parametrize("script,expect", [
    ("single_process.py", r"epoch 4 +loss"),
    ("data_parallel.py", r"accuracy \d"),
    ("ddp_spawn.py", r"accuracy per rank \(identical models\): \[(\S+), \1\]"),
    ("model_per_device.py", r"model 1: final loss"),
    ("two_nodes.py", r"node exit codes: \[0, 0\]"),
])
def test_single_command_examples(script, expect):
    code, out = run([script])
    assert code == 0, out
    assert re.search(expect, out), out


@pytest.mark.parametrize("script,expect", [
    ("ddp_run.py", r"epoch 4 +accuracy"),
    ("grad_accumulation.py", r"epoch 2 +accuracy"),
    ("imbalanced.py", r"per-class recall"),
    ("uneven_inputs.py", r"rank 1: ran 8 batches; the group ran 13 in all"),
    ("local_sgd.py", r"epoch 2 +accuracy 0\.9\d+ +\(step 96, models averaged 19 times\)(.|\n)*"
                     r"ranks hold the same model: True"),
    ("less_memory.py", r"epoch 3 +accuracy 0\.9\d+ +optimizer state for \d+ of 36228 parameters"),
    ("fsdp_transformer.py", r"this rank holds 9256 of 18512 parameters(.|\n)*unwrapped model with the full state "
                            r"dict: accuracy (0\.9\d+|1\.000)"),
])
def test_launched_examples(script, expect):
    code, out = launch(script)
    assert code == 0, out
    assert re.search(expect, out), out


def test_gradient_penalty_example_estimates_the_distance():
    code, out = run(["gradient_penalty.py"])
    assert code == 0, out
    m = re.search(r"per rank \(identical critics\): \[(\S+), (\S+)\]; true 3.0, the penalised optimum (\S+)", out)
    assert m and m.group(1) == m.group(2), out
    assert abs(float(m.group(1)) - float(m.group(3))) < 0.25, out


def test_tensors_example():
    code, out = run(["tensors.py"])
    assert code == 0 and "round trip through DLPack" in out, out


def test_hogwild_example_trains_the_parents_shared_model():
    code, out = run(["hogwild.py"])
    assert code == 0, out
    before = re.search(r"before training: loss (\S+)  accuracy (\S+)", out)
    after = re.search(r"after 2 processes trained it: loss (\S+)  accuracy (\S+)", out)
    assert before and after, out
    assert float(after.group(1)) < float(before.group(1)) / 2, out
    assert float(after.group(2)) > float(before.group(2)), out


def test_profile_step_example(tmp_path):
    code, out = run(["profile_step.py", "--trace-dir", str(tmp_path)])
    assert code == 0, out
    # Name, then Self CPU %, Self CPU, CPU total %, CPU total, CPU time avg, and # of Calls: 3 recorded steps.
    calls = {m.group(1): int(m.group(2)) for m in re.finditer(r"^ *(\S.*?)(?:  +\S+){5}  +(\d+) *$", out, re.M)}
    assert calls["nn.Module: Linear"] == 6 and calls["LinearBackward"] == 6, out
    assert calls["Optimizer.step#SGD.step"] == calls["forward"] == calls["backward"] == 3, out
    assert calls["enumerate(DataLoader)#_ArrayBatches.__next__"] == 3, out
    (trace,) = os.listdir(tmp_path)
    assert re.fullmatch(r"profile_step\.\d+\.pt\.trace\.json", trace)
    assert {e["name"] for e in json.loads((tmp_path / trace).read_text())["traceEvents"]} >= {"ProfilerStep#4"}
