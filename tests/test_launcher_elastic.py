"""ddpc-run --nnodes MIN:MAX: agents on loopback, each a ddpc-run process with
one worker, meet in the rendezvous, form a world per round, restart into a
larger world when a node comes, restart after a failure (and give up past
--max-restarts), and fail clearly when too few nodes come."""

import os
import socket
import subprocess
import sys
import textwrap
import time
import uuid

import pytest

from procs import free_port, kill_processes_with, processes_left_after

# Each worker joins the round's process group and sums its ones, proving
# that the nodes agree on the world.
WORKER = """
    import os, sys, time, numpy as np
    import ddpc.distributed as dist
    env = os.environ
    {before}
    dist.init_process_group("cpu", timeout=20)
    a = np.ones(1)
    dist.all_reduce(a)
    os.write(1, (f"W rank={{env['RANK']}} world={{env['WORLD_SIZE']}} group={{env['GROUP_RANK']}}/"
                 f"{{env['GROUP_WORLD_SIZE']}} role={{env['ROLE_RANK']}} "
                 f"restart={{env['TORCHELASTIC_RESTART_COUNT']}}/{{env['TORCHELASTIC_MAX_RESTARTS']}} "
                 f"sum={{a[0]}}\\n").encode())
    dist.destroy_process_group()
"""


class Agents:
    """ddpc-run agents of one rendezvous on loopback, each with stdout and
    stderr in files; every one is killed, with its workers, at the end."""

    def __init__(self, tmp_path, before="", nnodes="1:3", conf="last_call_timeout=1,join_timeout=15", args=()):
        self.tmp_path = tmp_path
        self.marker = uuid.uuid4().hex
        self.script = tmp_path / "worker.py"
        self.script.write_text(textwrap.dedent(WORKER.format(before=textwrap.dedent(before).strip()
                                                              .replace("\n", "\n    "))))
        self.port = free_port()
        self.cmd = [sys.executable, "-m", "ddpc.run", "--nnodes", nnodes, "--nproc-per-node", "1",
                    "--rdzv-backend", "c10d", "--rdzv-endpoint", f"127.0.0.1:{self.port}", "--rdzv-id", "job",
                    "--rdzv-conf", conf, "--monitor-interval", "0.05", "--grace", "1", *args]
        self.procs = []

    def start(self):
        i = len(self.procs)
        out = open(self.tmp_path / f"agent{i}.out", "w")
        err = open(self.tmp_path / f"agent{i}.err", "w")
        with out, err:
            self.procs.append(subprocess.Popen([*self.cmd, str(self.script), self.marker], stdout=out, stderr=err,
                                               cwd=self.tmp_path,
                                               # (the temporary folders of an agent killed here stay in tmp_path)
                                               env=dict(os.environ, OMP_NUM_THREADS="1", TMPDIR=str(self.tmp_path))))

    def finish(self, timeout=60):
        """[(exit status, stdout, stderr)] of every agent."""
        results = []
        for i, p in enumerate(self.procs):
            p.wait(timeout=timeout)
            results.append((p.returncode, (self.tmp_path / f"agent{i}.out").read_text(),
                            (self.tmp_path / f"agent{i}.err").read_text()))
        return results

    def close(self):
        for p in self.procs:
            p.kill()
            p.wait()
        left = processes_left_after(self.marker, 10)
        kill_processes_with(self.marker)
        assert left == []


@pytest.fixture
def agents(tmp_path):
    made = []

    def make(**kwargs):
        made.append(Agents(tmp_path, **kwargs))
        return made[-1]

    yield make
    for a in made:
        a.close()


def worker_lines(results):
    return sorted(line for _, out, _ in results for line in out.splitlines() if line.startswith("W "))


def wait_for(path, timeout=30):
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.05)


# Should a round close before the second agent came (a loaded machine), its
# worker waits for that agent's arrival to restart it in a world of two.
ALONE_WAITS = """
    if env["WORLD_SIZE"] == "1":
        time.sleep(60)
"""


def two_agents_form_a_world_of_two(job):
    """Starts two agents of ``job``; their results, each agent's rank and worker checked."""
    job.start()
    job.start()
    results = job.finish()
    assert [r[0] for r in results] == [0, 0], results
    assert worker_lines(results) == ["W rank=0 world=2 group=0/2 role=0 restart=0/0 sum=2.0",
                                     "W rank=1 world=2 group=1/2 role=1 restart=0/0 sum=2.0"]
    return results


def test_two_agents_of_one_to_three_form_a_world_of_two(agents):
    results = two_agents_form_a_world_of_two(agents(before=ALONE_WAITS))
    assert all("round 0 of rendezvous job" in err for _, _, err in results)


def test_two_agents_of_a_c10d_job_of_two_nodes_get_their_node_ranks_from_the_rendezvous(agents):
    """As torchrun: --nnodes 2 --rdzv-backend c10d, no --node-rank."""
    two_agents_form_a_world_of_two(agents(nnodes="2", conf="join_timeout=15"))


def test_which_launches_meet_in_the_rendezvous():
    from ddpc.run import parse_args

    def parsed(*args):
        a = parse_args([*args, "job.py"])
        return a.elastic, a.min_nodes, a.max_nodes, a.master_addr, a.master_port

    assert parsed("--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1") == (True, 2, 2, "h", 1)
    assert parsed("--nnodes", "2", "--rdzv-backend", "c10d", "--node-rank", "1", "--rdzv-endpoint", "h") == (
        True, 2, 2, "h", None)
    assert parsed("--nnodes", "2", "--rdzv-endpoint", "h:1") == (True, 2, 2, "h", 1)
    assert parsed("--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", "h:1") == (False, 2, 2, "h", 1)
    assert parsed("--nnodes", "2", "--node-rank", "1", "--master-addr", "h") == (False, 2, 2, "h", None)
    assert parsed("--nnodes", "1", "--rdzv-backend", "c10d", "--rdzv-endpoint", "h:1") == (False, 1, 1, "h", 1)


def test_a_late_node_restarts_the_others_into_a_larger_world(agents, tmp_path):
    # In a world of two the workers only wait; the third node's arrival stops them.
    job = agents(before=f"""
        if env["WORLD_SIZE"] != "3":
            open(r"{tmp_path}/up" + env["RANK"], "w").close()
            time.sleep(60)
    """)
    job.start()
    job.start()
    # up1 comes from a world of two (where up0 may come from a world of one).
    wait_for(tmp_path / "up0")
    wait_for(tmp_path / "up1")
    job.start()
    results = job.finish()
    assert [r[0] for r in results] == [0, 0, 0], results
    # A node joining is no restart: the count stays 0.
    assert worker_lines(results) == [f"W rank={r} world=3 group={r}/3 role={r} restart=0/0 sum=3.0" for r in range(3)]
    for _, _, err in results[:2]:
        assert "a node is waiting to join" in err or "another node opened a new round" in err
        assert "round 1 of rendezvous job" in err


def test_a_failed_worker_starts_a_new_round_and_counts_a_restart(agents):
    job = agents(nnodes="1:2", conf="last_call_timeout=3,join_timeout=15", args=("--max-restarts", "2"),
                 before=textwrap.dedent(ALONE_WAITS) + textwrap.dedent("""
        if env["TORCHELASTIC_RESTART_COUNT"] == "0" and env["GROUP_RANK"] == "1":
            sys.exit(3)
    """))
    job.start()
    job.start()
    results = job.finish()
    assert [r[0] for r in results] == [0, 0], results
    assert worker_lines(results) == ["W rank=0 world=2 group=0/2 role=0 restart=1/2 sum=2.0",
                                     "W rank=1 world=2 group=1/2 role=1 restart=1/2 sum=2.0"]
    errs = "".join(err for _, _, err in results)
    assert errs.count("restarting the group") >= 1 and "exit code 3" in errs


def test_restarts_used_up_fail_every_node(agents):
    job = agents(nnodes="1:2", conf="last_call_timeout=3,join_timeout=15", args=("--max-restarts", "1"),
                 before=textwrap.dedent(ALONE_WAITS) + textwrap.dedent("""
        if env["GROUP_RANK"] == "1":
            sys.exit(3)
    """))
    job.start()
    job.start()
    results = job.finish()
    assert all(r[0] != 0 for r in results), results
    errs = "".join(err for _, _, err in results)
    assert "restarting the group in a new round (1/1)" in errs and "giving up" in errs
    assert "the job was given up on another node" in errs
    assert worker_lines(results) == []


def test_a_node_that_dies_is_dropped_by_its_heartbeat(agents, tmp_path):
    job = agents(conf="last_call_timeout=1,join_timeout=15,keep_alive_interval=0.2,keep_alive_max_attempt=3",
                 before=f"""
        if env["WORLD_SIZE"] == "2":
            open(r"{tmp_path}/up" + env["RANK"], "w").close()
            time.sleep(60)
        while not os.path.exists(r"{tmp_path}/killed"):
            time.sleep(0.05)
    """)
    job.start()
    # The first agent hosts the store (and lives on): the second starts once it listens.
    deadline = time.monotonic() + 30
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", job.port)) == 0:
                break
        assert time.monotonic() < deadline, "the first agent's store never listened"
        time.sleep(0.05)
    job.start()
    wait_for(tmp_path / "up1")
    job.procs[1].kill()
    (tmp_path / "killed").touch()
    status, out, err = job.finish()[0]
    assert status == 0, err
    assert worker_lines([(status, out, err)]) == ["W rank=0 world=1 group=0/1 role=0 restart=0/0 sum=1.0"]
    assert "stopping the workers of round" in err and "1 node(s) left" in err


def test_join_timeout_with_fewer_than_min_nodes(agents):
    job = agents(nnodes="2:3", conf="join_timeout=1")
    job.start()
    [(status, out, err)] = job.finish()
    assert status == 1
    assert "join_timeout (1 s) passed with 1 node(s) joined of the 2 needed (--nnodes 2:3)" in err
    assert out == ""


@pytest.mark.parametrize("args, message", [
    (["--nnodes", "3:2"], "--nnodes must be a number N, or MIN:MAX with MIN <= MAX; got '3:2'"),
    (["--nnodes", "0:2", "--rdzv-endpoint", "h"], "--nnodes >= 1"),
    (["--nnodes", "1:2"], "--nnodes MIN:MAX needs --rdzv-endpoint"),
    (["--nnodes", "1:2", "--rdzv-endpoint", "h", "--rdzv-conf", "join_timeout=x"], "--rdzv-conf takes KEY=VALUE"),
    (["--nnodes", "1:2", "--rdzv-endpoint", "h", "--rdzv-conf", "wait=3"], "got 'wait=3'"),
])
def test_bad_elastic_arguments(args, message):
    res = subprocess.run([sys.executable, "-m", "ddpc.run", *args, "job.py"], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 2 and message in res.stderr, res.stderr


def test_elastic_arguments_are_parsed():
    from ddpc.run import parse_args

    a = parse_args(["--nnodes", "1:4", "--rdzv-endpoint", "node0:29400", "--rdzv-conf",
                    "last_call_timeout=2, join_timeout=60,is_host=false", "job.py"])
    assert (a.min_nodes, a.max_nodes, a.elastic, a.master_addr, a.master_port) == (1, 4, True, "node0", 29400)
    assert a.rdzv_conf["last_call_timeout"] == 2 and a.rdzv_conf["join_timeout"] == 60
    assert a.rdzv_conf["is_host"] is False and a.rdzv_conf["keep_alive_interval"] == 5
    a = parse_args(["--nnodes", "2:2", "--node-rank", "1", "--master-addr", "h", "job.py"])
    assert (a.nnodes, a.elastic, a.node_rank) == (2, False, 1)
