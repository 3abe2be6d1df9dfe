"""Collectives on the cpu backend against closed-form results: every op x
dtype x size {0, 1, 7, 4097, 1Mi+3} on world sizes 1 to 4 (one job per world
size loops over all cases), async work, new_group, send/recv, mismatched
calls and pickling refusal. Ranks are real processes started by ddpc-run."""

import os
import re
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "comm_worker.py")


def run_job(nproc, scenario, *args, timeout=240, env=None):
    cmd = [sys.executable, "-m", "ddpc.run", "--nproc-per-node", str(nproc), WORKER, scenario, *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=dict(os.environ, **(env or {})))


@pytest.mark.parametrize("world", [1, 2, 3, 4])
def test_all_collectives(world):
    before = set(os.listdir("/dev/shm"))
    res = run_job(world, "all")
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    for r in range(world):
        assert f"RANK {r} PASS" in res.stdout, out
    if world > 1:
        for r in range(world):
            assert f"RANK {r} MISMATCH collective mismatch" in res.stdout, out
        assert "all_reduce(10 x float32, sum)" in res.stdout and "all_reduce(12 x float32, sum)" in res.stdout, out
    assert not {f for f in os.listdir("/dev/shm") if f.startswith("ddpc-")} - before


def test_failure_reported_at_a_later_collective_spares_earlier_ones():
    res = run_job(4, "late", env={"TEST_HOSTS": "a,a,b,b"})
    assert res.returncode == 0, res.stdout + res.stderr
    for r in range(4):
        assert f"RANK {r} MISMATCH collective mismatch" in res.stdout, res.stdout
        assert f"RANK {r} PASS" in res.stdout, res.stdout


@pytest.mark.parametrize("world,hosts", [(2, ""), (3, ""), (4, ""), (4, "a,a,b,b"), (3, "a,b,b")],
                         ids=["2", "3", "4", "hier2x2", "alone+2"])
def test_all_reduce_in_shared_buffers(world, hosts):
    """dist.shared_buffer: all_reduce in place, on one host and on the hierarchical path
    (a rank alone on its host gets None), and mismatches reported, not hung on."""
    before = set(os.listdir("/dev/shm"))
    res = run_job(world, "shared", env={"TEST_HOSTS": hosts} if hosts else None)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    # Rank 0 asks for another size than the others: its host's ranks hear of it, other hosts do not.
    on = hosts.split(",") if hosts else ["a"] * world
    told = [r for r in range(world) if on[r] == on[0] and on.count(on[0]) > 1]
    for r in range(world):
        assert f"RANK {r} PASS" in res.stdout, out
        assert (f"RANK {r} SIZES " in res.stdout) == (r in told), out
    assert ("shared buffers differ in size" in res.stdout) == bool(told), out
    assert not {f for f in os.listdir("/dev/shm") if f.startswith("ddpc-")} - before
    if hosts:
        return
    res = run_job(world, "shared_mismatch")
    assert res.returncode == 0, res.stdout + res.stderr
    for r in range(world):
        assert f"RANK {r} MISMATCH collective mismatch" in res.stdout, res.stdout
    assert "shared buffer #" in res.stdout, res.stdout


@pytest.mark.parametrize("world", [2, 3])
def test_signals_in_shared_buffers(world):
    """SharedBuffer.peer/signal and ProcessGroup.await_value (what
    DistributedDataParallel's gradient exchange is built on)."""
    res = run_job(world, "signals")
    assert res.returncode == 0, res.stdout + res.stderr
    for r in range(world):
        assert f"RANK {r} PASS" in res.stdout, res.stdout + res.stderr


def test_shared_buffer_larger_than_dev_shm_is_an_error_on_every_rank():
    """Its pages are allocated up front: a full /dev/shm is an error, not a SIGBUS at first touch."""
    st = os.statvfs("/dev/shm")
    if st.f_blocks == 0:
        pytest.skip("/dev/shm has no size limit")
    before = set(os.listdir("/dev/shm"))
    res = run_job(3, "shared_full", st.f_blocks * st.f_frsize + (1 << 30), timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    # Each rank's message, cut at the next "RANK ": ranks' lines may interleave at their newlines.
    said = re.findall(r"RANK (\d) FULL (.*?)(?=RANK \d|\Z)", res.stdout, re.S)
    assert sorted(r for r, _ in said) == ["0", "1", "2"], res.stdout
    assert all("no room for a shared buffer" in msg for _, msg in said), res.stdout
    for r in range(3):
        assert f"RANK {r} PASS" in res.stdout, res.stdout
    assert "rank 0 could not make its shared buffer" in res.stdout, res.stdout
    assert not {f for f in os.listdir("/dev/shm") if f.startswith("ddpc-")} - before


@pytest.mark.parametrize("hosts", ["a,a", "a,b"], ids=["one-host", "two-hosts"])
def test_a_barrier_against_an_all_reduce_is_a_mismatch(hosts):
    res = run_job(2, "barrier_mismatch", env={"TEST_HOSTS": hosts})
    assert res.returncode == 0, res.stdout + res.stderr
    for r in range(2):
        assert f"RANK {r} MISMATCH collective mismatch" in res.stdout, res.stdout
    assert "barrier" in res.stdout, res.stdout


def test_errors_in_a_subgroup_name_global_ranks():
    res = run_job(3, "subgroup_timeout")
    assert res.returncode == 0, res.stdout + res.stderr
    assert re.search(r"RANK 1 TIMEOUT all_reduce \(collective #0 of rank 1\) timed out .* waiting for ranks \[2\]",
                     res.stdout), res.stdout


def test_work_exception_is_the_error_of_a_failed_async_collective():
    res = run_job(2, "work_exception")
    assert res.returncode == 0, res.stdout + res.stderr
    assert re.search(r"RANK 0 EXCEPTION DistBackendTimeoutError: all_reduce \(collective #0 of rank 0\) timed out .* "
                     r"waiting for ranks \[1\]", res.stdout), res.stdout
    for r in range(2):
        assert f"RANK {r} PASS" in res.stdout, res.stdout + res.stderr


def test_a_mismatched_recv_is_described_as_a_recv():
    res = run_job(2, "p2p_mismatch")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "RANK 1 MISMATCH collective mismatch: rank 1 called recv(12 x float32" in res.stdout, res.stdout
    assert "rank 0 called send(10 x float32" in res.stdout, res.stdout


@pytest.mark.parametrize("world", [2, 3])
def test_objects_between_two_ranks_and_subgroups_by_enumeration(world):
    res = run_job(world, "p2p_objects", timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    for r in range(world):
        assert f"RANK {r} PASS" in res.stdout, res.stdout + res.stderr


def test_gather_object_and_scatter_object_list_move_each_pickle_to_its_destination_alone():
    res = run_job(3, "object_traffic", timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    for r in range(3):
        assert f"RANK {r} PASS" in res.stdout, res.stdout + res.stderr


def test_recv_object_list_of_another_length_than_the_senders_is_a_mismatch():
    res = run_job(2, "p2p_objects_mismatch", timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "RANK 1 MISMATCH collective mismatch: rank 1 called recv(4 x int64" in res.stdout, res.stdout
    assert "rank 0 called send(3 x int64" in res.stdout, res.stdout


@pytest.mark.parametrize("scenario,world", [("p2p_tag_order", 2), ("p2p_tag_fifo", 2), ("p2p_tag_any", 2),
                                            ("p2p_tag_any", 3)])
def test_p2p_messages_are_matched_by_tag(scenario, world):
    """A recv takes the oldest message from its peer with its tag, as in gloo:
    messages sent before it with other tags wait for their own recvs, in order."""
    res = run_job(world, scenario, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    for r in range(world):
        assert f"RANK {r} PASS" in res.stdout, res.stdout + res.stderr


def test_p2p_recv_for_a_tag_never_sent_times_out_naming_it():
    res = run_job(2, "p2p_tag_timeout", timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    said = re.findall(r"RANK 1 TIMEOUT DistBackendTimeoutError after ([\d.]+) s: (.*)", res.stdout)
    assert len(said) == 3, res.stdout + res.stderr
    assert all(1.0 < float(t) < 10 for t, _ in said), said
    (_, nothing), (_, other), (_, from_any) = said
    assert "timed out after 1.5 s in recv from rank 0 (tag 3): no message with tag 3 came from rank 0" in nothing, \
        nothing
    assert ("timed out after 1.5 s in recv from rank 0 (tag 3): no message with tag 3 came from rank 0 "
            "(it sent 1 with other tags, kept for their recvs)") in other, other
    assert "timed out after 1.5 s in recv from any rank (tag 3): no rank sent a message with tag 3" in from_any, \
        from_any


@pytest.mark.parametrize("what,theirs", [("size", "recv(12 x float32, tag 1)"), ("dtype", "recv(10 x int32, tag 1)")])
def test_p2p_message_read_ahead_is_checked_against_its_recv(what, theirs):
    res = run_job(2, "p2p_tag_mismatch", what, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"RANK 1 MISMATCH collective mismatch: rank 1 called {theirs}" in res.stdout, res.stdout
    assert "rank 0 called send(10 x float32, tag 1)" in res.stdout, res.stdout


@pytest.mark.parametrize("hosts", ["a,b,c", "a,a,b,b", "a,b,b,a"], ids=["ring3", "hier2x2", "hier-interleaved"])
def test_collectives_across_simulated_hosts(hosts):
    """Ranks told they run on different hosts (DDPC_HOST_ID) use the TCP ring
    (one rank per host) or the hierarchical path (shared memory within a host)."""
    world = len(hosts.split(","))
    # The full sizes run on one host above; here the largest is 64 Ki + 1 to bound the runtime.
    res = run_job(world, "topology+matrix+rooted+async+groups+p2p+p2p_any+mismatch",
                  env={"TEST_HOSTS": hosts, "TEST_SMALL_SIZES": "1"})
    assert res.returncode == 0, res.stdout + res.stderr
    for r in range(world):
        assert f"RANK {r} PASS" in res.stdout
        assert f"RANK {r} MISMATCH collective mismatch" in res.stdout, res.stdout


@pytest.mark.parametrize("wait_all", ["first", "all"])
def test_monitored_barrier_names_the_ranks_that_stay_away(wait_all):
    res = run_job(4, "monitored", wait_all, timeout=120)
    out = res.stdout + res.stderr
    assert res.returncode == 0, out
    missing = "ranks 2, 3 did not" if wait_all == "all" else "rank 2 did not"
    assert f"RANK 0 MONITORED monitored_barrier: {missing} reach the barrier within 2 s" in res.stdout, out
    assert "RANK 1 MONITORED monitored_barrier: rank 0 did not release rank 1 within 2 s" in res.stdout, out
    assert "NO ERROR" not in res.stdout, out


@pytest.mark.parametrize("hosts", ["a,a,a", "a,b,b"], ids=["shm3", "alone+2"])
def test_rooted_collectives_on_small_sizes(hosts):
    """reduce, gather and scatter in shared memory and across hosts (test_all_collectives runs them too, on
    larger sizes); test_c_units runs this one on the build with AddressSanitizer."""
    res = run_job(3, "rooted", env={"TEST_HOSTS": hosts, "TEST_SMALL_SIZES": "1"})
    assert res.returncode == 0, res.stdout + res.stderr
    for r in range(3):
        assert f"RANK {r} PASS" in res.stdout, res.stdout + res.stderr


@pytest.mark.parametrize("hosts", ["", "a,b"], ids=["shm", "ring"])
@pytest.mark.parametrize("what,theirs", [
    ("roots", "rank 1 called reduce(4 x float32, sum to rank 1)"),
    ("reduce", "rank 1 called all_reduce(4 x float32, sum)"),
    ("gather", "rank 1 called all_gather(4 x float32)"),
])
def test_rooted_collectives_that_differ_are_mismatches(what, theirs, hosts):
    """reduce and gather are collectives of their own (not an all_reduce or an
    all_gather that only the root keeps): a rank in another collective, or
    with another root, is a mismatch, not a silently wrong result."""
    res = run_job(2, "rooted_mismatch", what, timeout=120, env={"TEST_HOSTS": hosts} if hosts else None)
    assert res.returncode == 0, res.stdout + res.stderr
    for r in range(2):
        assert f"RANK {r} MISMATCH collective mismatch" in res.stdout, res.stdout
    if not hosts or what != "gather":  # across hosts an all_gather travels as bytes
        assert theirs in res.stdout, res.stdout


def test_a_broadcast_from_different_roots_names_them():
    res = run_job(2, "broadcast_mismatch", timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    # The rank that reached the collective first is named first.
    line = next(ln for ln in res.stdout.splitlines() if ln.startswith("RANK 0 MISMATCH collective mismatch: "))
    assert "rank 0 called broadcast(4 x float32, from rank 0) as collective #0" in line, res.stdout
    assert "rank 1 called broadcast(4 x float32, from rank 1)" in line, res.stdout
