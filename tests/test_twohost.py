"""Two hosts for real: two network namespaces joined by a veth pair, one
ddpc-run per namespace. With one rank per host the collectives run on the
TCP ring; with two per host on the hierarchical path (shared memory within a
namespace, the ring between them). Skipped where namespaces can't be made."""

import os
import re
import select
import shutil
import subprocess
import sys
import time
import uuid

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "comm_worker.py")
ADDR = {"a": "10.231.77.1", "b": "10.231.77.2"}


def sh(*cmd):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=30)


@pytest.fixture(scope="module")
def namespaces():
    if shutil.which("ip") is None:
        pytest.skip("iproute2 ('ip') is not installed")
    if os.geteuid() != 0:
        pytest.skip("network namespaces need root")
    tag = uuid.uuid4().hex[:6]
    ns = {h: f"ddpc{tag}{h}" for h in "ab"}
    veth = {h: f"vd{tag}{h}" for h in "ab"}
    made = []
    try:
        for h in "ab":
            r = sh("ip", "netns", "add", ns[h])
            if r.returncode:
                pytest.skip(f"cannot create a network namespace: {r.stderr.strip()}")
            made.append(ns[h])
        steps = [("ip", "link", "add", veth["a"], "type", "veth", "peer", "name", veth["b"])]
        for h in "ab":
            steps += [("ip", "link", "set", veth[h], "netns", ns[h]),
                      ("ip", "-n", ns[h], "addr", "add", f"{ADDR[h]}/24", "dev", veth[h]),
                      ("ip", "-n", ns[h], "link", "set", veth[h], "up"),
                      ("ip", "-n", ns[h], "link", "set", "lo", "up")]
        for step in steps:
            r = sh(*step)
            if r.returncode:
                pytest.skip(f"cannot set up the veth pair ({' '.join(step)}): {r.stderr.strip()}")
        # A refused connection proves the other namespace answers.
        probe = ("import socket\ntry:\n socket.create_connection((%r, 9), timeout=3)\nexcept ConnectionRefusedError:\n"
                 " pass\n" % ADDR["b"])
        if sh("ip", "netns", "exec", ns["a"], sys.executable, "-c", probe).returncode:
            pytest.skip("the namespaces cannot reach each other")
        yield ns, veth
    finally:
        for name in made:
            sh("ip", "netns", "del", name)


def start_two_hosts(ns, nproc, scenario, port, extra_env):
    procs = []
    for node, h in enumerate("ab"):
        env = dict(os.environ, DDPC_HOST_ID=f"host-{h}", DDPC_STORE_TOKEN="twohost-secret", **extra_env)
        cmd = ["ip", "netns", "exec", ns[h], sys.executable, "-m", "ddpc.run", "--nnodes", "2", "--node-rank",
               str(node), "--nproc-per-node", str(nproc), "--master-addr", ADDR["a"], "--master-port", str(port),
               WORKER, scenario]
        procs.append(subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def finish(procs):
    outs = []
    for p in procs:
        try:
            outs.append(p.communicate(timeout=180))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            raise
    return [p.returncode for p in procs], outs


def wait_for_output(proc, text, timeout=120):
    """What ``proc`` writes to stdout up to ``text``, read from the pipe itself
    so that communicate() later returns the rest."""
    fd, seen, deadline = proc.stdout.fileno(), b"", time.monotonic() + timeout
    while text.encode() not in seen:
        left = deadline - time.monotonic()
        if left <= 0 or proc.poll() is not None:
            raise AssertionError(f"{text!r} did not come within {timeout} s; stdout so far: {seen.decode()}")
        if select.select([fd], [], [], min(left, 1.0))[0]:
            seen += os.read(fd, 1 << 16)
    return seen.decode()


def run_two_hosts(ns, nproc, scenario, port, extra_env):
    return finish(start_two_hosts(ns, nproc, scenario, port, extra_env))


@pytest.mark.parametrize("nproc", [1, 2], ids=["ring", "hierarchical"])
def test_collectives_between_two_namespaces(namespaces, nproc):
    hosts = ",".join(["a"] * nproc + ["b"] * nproc)
    codes, outs = run_two_hosts(namespaces[0], nproc, "topology+matrix+async+groups+p2p+mismatch", 29611 + nproc,
                                {"TEST_EXPECT_HOSTS": hosts, "TEST_SMALL_SIZES": "1"})
    text = "\n".join(o + e for o, e in outs)
    assert codes == [0, 0], text
    for r in range(2 * nproc):
        assert f"RANK {r} PASS" in text, text
        assert f"RANK {r} MISMATCH collective mismatch" in text, text


def test_host_that_goes_silent_is_reported_dead(namespaces):
    """Host b's link goes down without any socket being closed: keepalive on
    the store connections must turn the silence into a DistBackendError naming the
    lost rank on host a, within 10 seconds."""
    ns, veth = namespaces
    procs = start_two_hosts(ns, 1, "until_error", 29641, {})
    try:  # the link goes down only once both ranks are in the group and reducing, however slowly they started
        before = wait_for_output(procs[0], "RANK 0 RUNNING")
        wait_for_output(procs[1], "RANK 1 RUNNING")
    except AssertionError:
        for p in procs:
            p.kill()
        raise
    assert sh("ip", "-n", ns["b"], "link", "set", veth["b"], "down").returncode == 0
    try:
        codes, outs = finish(procs)
    finally:
        sh("ip", "-n", ns["b"], "link", "set", veth["b"], "up")
    out_a = before + outs[0][0] + outs[0][1]
    m = re.search(r"RANK 0 CAUGHT DistBackendError after ([\d.]+)s: (.*)", out_a)
    assert m, out_a
    assert float(m.group(1)) < 10 and "rank 1 died" in m.group(2), out_a
    assert codes[0] != 0 and "rank 0" in outs[0][1]
