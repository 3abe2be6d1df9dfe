"""The host block cache (csrc/alloc.c): freed host buffers of 1 MiB and more
are reused for later buffers of their size class instead of going back to
the system, up to DDPC_HOST_CACHE_MB."""

import os
import subprocess
import sys

import numpy as np
import pytest

import ddpc
from ddpc import _C

MIB = 1 << 20
ASAN = "DDPC_SANITIZE" in os.environ or "libasan" in os.environ.get("LD_PRELOAD", "")
pytestmark = pytest.mark.skipif(ASAN, reason="the cache is compiled out under AddressSanitizer")


def _floats(mib):
    return mib * MIB // 4


def test_a_freed_buffer_is_reused_for_the_next_of_its_size():
    _C.host_empty_cache()
    t = ddpc.ones(_floats(2))
    ptr = t.data_ptr()
    del t
    cached, limit = _C.host_cache_info()
    assert cached == 2 * MIB and limit == 256 * MIB
    u = ddpc.zeros(_floats(2) - 100)  # the same size class: whole MiB
    assert u.data_ptr() == ptr
    assert _C.host_cache_info()[0] == 0
    assert float(u.sum()) == 0.0  # a reused block is written like a new one


def test_small_buffers_and_other_size_classes_are_not_taken_from_it():
    _C.host_empty_cache()
    del_me = ddpc.ones(_floats(3))
    del del_me
    a = ddpc.ones(_floats(2))
    b = ddpc.ones(1000)
    assert _C.host_cache_info()[0] == 3 * MIB
    del a, b
    assert _C.host_cache_info()[0] == 5 * MIB


def test_empty_cache_returns_what_it_freed():
    _C.host_empty_cache()
    ts = [ddpc.empty(_floats(1)) for _ in range(3)]
    del ts
    assert _C.host_empty_cache() == 3 * MIB
    assert _C.host_cache_info()[0] == 0


def test_a_numpy_view_keeps_its_memory_out_of_the_cache():
    _C.host_empty_cache()
    t = ddpc.full((_floats(2),), 7.0)
    a = t.numpy()
    del t
    assert _C.host_cache_info()[0] == 0
    u = ddpc.zeros(_floats(2))
    assert (a == 7.0).all() and not np.shares_memory(a, u.numpy())
    del a
    assert _C.host_cache_info()[0] == 2 * MIB


def _run(env_mb, code):
    env = dict(os.environ, DDPC_HOST_CACHE_MB=env_mb)
    out = subprocess.run([sys.executable, "-c", "import ddpc\nfrom ddpc import _C\n" + code], env=env,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    return out.stdout.split()


@pytest.mark.parametrize("mb", ["0", "5"])
def test_the_limit_comes_from_the_environment(mb):
    cached, limit = _run(mb, "ts = [ddpc.empty(2 << 18) for _ in range(4)]\ndel ts\n"
                             "print(*_C.host_cache_info())")
    assert int(limit) == int(mb) * MIB
    assert int(cached) == {"0": 0, "5": 4 * MIB}[mb]  # two blocks of 2 MiB fit in 5 MiB, a third does not


def test_a_forked_child_allocates_from_its_own_copy_of_the_cache():
    got = _run("256", "import os\nt = ddpc.ones(1 << 19); p = t.data_ptr(); del t\n"
                      "pid = os.fork()\n"
                      "if pid == 0:\n"
                      "    u = ddpc.full((1 << 19,), 3.0); ok = u.data_ptr() == p and float(u.sum()) == 3 * (1 << 19)\n"
                      "    os._exit(0 if ok else 1)\n"
                      "_, status = os.waitpid(pid, 0)\n"
                      "v = ddpc.zeros(1 << 19)\n"
                      "print(os.waitstatus_to_exitcode(status), v.data_ptr() == p, float(v.sum()))")
    assert got == ["0", "True", "0.0"]
