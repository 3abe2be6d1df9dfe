"""Builds the communicator's pure-logic C tests (ring schedule, shared-memory
slices, reduction kernels) with AddressSanitizer and -Werror and runs them."""

import os
import subprocess

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CC = os.environ.get("CC", "cc")


def test_ring_schedule_and_reductions_under_asan(tmp_path):
    exe = str(tmp_path / "test_ring_schedule")
    cmd = [CC, "-fsanitize=address,undefined", "-fno-sanitize-recover=all", "-fno-omit-frame-pointer", "-Wall",
           "-Wextra", "-Werror", "-Wno-missing-field-initializers", "-std=c11", "-D_GNU_SOURCE", "-g", "-O1",
           "-I", f"{ROOT}/csrc", f"{ROOT}/tests/c/test_ring_schedule.c", f"{ROOT}/csrc/comm/reduce.c",
           f"{ROOT}/csrc/dtype.c", "-o", exe, "-lm"]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, "compile failed:\n" + res.stderr
    res = subprocess.run([exe], capture_output=True, text=True, timeout=300,
                         env=dict(os.environ, ASAN_OPTIONS="detect_leaks=1"))
    assert res.returncode == 0, res.stdout + res.stderr
    assert "all comm schedule tests passed" in res.stdout
