"""ddpc-run: the worker environment, scripts and -m modules, torchrun's module
paths, failure reports, restarts, log files, Ctrl-C, and no process left
behind; ddpc.spawn."""

import glob
import os
import pty
import resource
import select
import shutil
import signal
import socket
import subprocess
import sys
import textwrap
import threading
import time
import uuid

import pytest

import ddpc
from procs import kill_processes_with, processes_left_after, processes_with


def launch(tmp_path, body, *launcher_args, timeout=60, script_args=()):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(body))
    cmd = [sys.executable, "-m", "ddpc.run", *launcher_args, str(script), *script_args]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, cwd=tmp_path)


def test_environment_of_every_worker(tmp_path):
    res = launch(tmp_path, """
        import os, sys
        keys = ["RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                "DDPC_STORE_TOKEN", "DDPC_RESTART_COUNT"]
        os.write(1, ("ENV " + " ".join(f"{k}={os.environ[k]}" for k in keys) + f" ARGS {sys.argv[1:]}\\n").encode())
    """, "--nproc-per-node", "3", script_args=("--flag", "x"))
    assert res.returncode == 0, res.stderr
    lines = sorted(line for line in res.stdout.splitlines() if line.startswith("ENV"))
    assert len(lines) == 3
    tokens = set()
    for r, line in enumerate(lines):
        env = dict(kv.split("=", 1) for kv in line.split(" ARGS ")[0].split()[1:])
        assert env["RANK"] == env["LOCAL_RANK"] == str(r)
        assert env["WORLD_SIZE"] == env["LOCAL_WORLD_SIZE"] == "3"
        assert env["MASTER_ADDR"] == "127.0.0.1" and int(env["MASTER_PORT"]) > 0
        assert env["DDPC_RESTART_COUNT"] == "0" and len(env["DDPC_STORE_TOKEN"]) >= 16
        tokens.add(env["DDPC_STORE_TOKEN"])
        assert "['--flag', 'x']" in line
    assert len(tokens) == 1


def test_multi_node_ranks(tmp_path):
    res = launch(tmp_path, """
        import os
        os.write(1, f"R {os.environ['RANK']} {os.environ['WORLD_SIZE']} {os.environ['LOCAL_RANK']}\\n".encode())
    """, "--nproc-per-node", "2", "--nnodes", "3", "--node-rank", "1", "--master-addr", "127.0.0.1",
                 "--master-port", "29999")
    assert res.returncode == 0, res.stderr
    assert sorted(line for line in res.stdout.splitlines() if line.startswith("R")) == ["R 2 6 0", "R 3 6 1"]


def test_module_mode(tmp_path):
    (tmp_path / "mymod.py").write_text("import os\nos.write(1, ('MOD ' + os.environ['RANK'] + '\\n').encode())\n")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    res = subprocess.run([sys.executable, "-m", "ddpc.run", "--nproc-per-node", "2", "-m", "mymod"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.split()) == ["0", "1", "MOD", "MOD"]


def test_everything_after_the_module_goes_to_it(tmp_path):
    (tmp_path / "mymod.py").write_text("import os, sys\nos.write(1, f'ARGS {sys.argv[1:]}\\n'.encode())\n")
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    res = subprocess.run([sys.executable, "-m", "ddpc.run", "-m", "mymod", "--lr", "1", "--nproc-per-node", "2"],
                         capture_output=True, text=True, timeout=60, env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["ARGS ['--lr', '1', '--nproc-per-node', '2']"]


def test_torchruns_module_paths(tmp_path):
    """``python -m ddpc.distributed.run`` and its ``main`` are ddpc-run, as
    torch.distributed.run is torchrun."""
    import ddpc.distributed.run
    import ddpc.run

    assert ddpc.distributed.run.main is ddpc.run.main
    script = tmp_path / "job.py"
    script.write_text("import os, sys\nos.write(1, f'RANK {os.environ[\"RANK\"]} {sys.argv[1:]}\\n'.encode())\n")
    by_module = subprocess.run([sys.executable, "-m", "ddpc.distributed.run", "--nproc-per-node", "2", str(script),
                                "x"], capture_output=True, text=True, timeout=60)
    by_main = subprocess.run([sys.executable, "-c", "import sys; from ddpc.distributed.run import main; "
                              f"sys.exit(main(['--nproc-per-node', '2', {str(script)!r}, 'x']))"],
                             capture_output=True, text=True, timeout=60)
    for res in (by_module, by_main):
        assert res.returncode == 0, res.stderr
        assert sorted(res.stdout.splitlines()) == ["RANK 0 ['x']", "RANK 1 ['x']"]


def test_deprecated_launch_module_passes_the_local_rank(tmp_path):
    script = tmp_path / "job.py"
    script.write_text("import os, sys\nos.write(1, f'{os.environ[\"LOCAL_RANK\"]} {sys.argv[1:]}\\n'.encode())\n")

    def launch_module(*args):
        return subprocess.run([sys.executable, "-m", "ddpc.distributed.launch", "--nproc-per-node", "2", *args],
                              capture_output=True, text=True, timeout=60)

    res = launch_module(str(script), "x")
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.splitlines()) == ["0 ['--local-rank=0', 'x']", "1 ['--local-rank=1', 'x']"]
    assert "FutureWarning" in res.stderr and "deprecated" in res.stderr
    res = launch_module("--use-env", str(script), "x")
    assert res.returncode == 0, res.stderr
    assert sorted(res.stdout.splitlines()) == ["0 ['x']", "1 ['x']"]
    res = launch_module("--no-python", str(script))
    assert res.returncode == 2 and "--no-python needs --use-env" in res.stderr and not res.stdout


def test_nproc_per_node_by_device(monkeypatch, capsys):
    from ddpc.run import parse_args

    # As torchrun: the cores this process may use, without a GPU for auto too.
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 2, 5})
    assert parse_args(["--nproc-per-node", "cpu", "job.py"]).nproc_per_node == 3
    monkeypatch.setattr(ddpc._C, "cuda_device_count", lambda: 0)
    assert parse_args(["--nproc-per-node", "auto", "job.py"]).nproc_per_node == 3
    monkeypatch.setattr(ddpc._C, "cuda_device_count", lambda: 2)
    assert parse_args(["--nproc-per-node", "gpu", "job.py"]).nproc_per_node == 2
    assert parse_args(["--nproc-per-node", "auto", "job.py"]).nproc_per_node == 2
    monkeypatch.setattr(ddpc._C, "cuda_device_count", lambda: 0)
    with pytest.raises(SystemExit):
        parse_args(["--nproc-per-node", "gpu", "job.py"])
    assert "--nproc-per-node gpu:" in capsys.readouterr().err


def test_torchrun_command_lines_are_taken(tmp_path):
    """The DDP tutorial's torchrun lines: --standalone, and --rdzv-* naming the store."""
    from ddpc.run import parse_args

    a = parse_args(["--nnodes=2:2", "--node_rank=1", "--rdzv_id=100", "--rdzv_backend=c10d",
                    "--rdzv_endpoint=node0:29400", "job.py"])
    assert (a.nnodes, a.master_addr, a.master_port, a.rdzv_id) == (2, "node0", 29400, "100")
    res = launch(tmp_path, """
        import os
        keys = ["GROUP_RANK", "GROUP_WORLD_SIZE", "ROLE_RANK", "TORCHELASTIC_RESTART_COUNT",
                "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID"]
        os.write(1, ("ENV " + " ".join(os.environ[k] for k in keys) + "\\n").encode())
    """, "--standalone", "--nproc_per_node=2", "--rdzv-id", "job7")
    assert res.returncode == 0, res.stderr
    assert sorted(line for line in res.stdout.splitlines() if line.startswith("ENV")) == [
        "ENV 0 1 0 0 0 job7", "ENV 0 1 1 0 0 job7"]


def test_port_zero_and_standalone_take_a_free_port_as_torchrun(tmp_path):
    """torchrun's single-node c10d line, --rdzv-endpoint localhost:0; --standalone ignores the endpoint."""
    from ddpc.run import parse_args

    a = parse_args(["--standalone", "--rdzv-endpoint", "node0:29400", "job.py"])
    assert (a.master_addr, a.master_port) == (None, None)
    body = """
        import os, numpy as np
        import ddpc.distributed as dist
        dist.init_process_group()
        a = np.ones(1)
        dist.all_reduce(a)
        os.write(1, f"SUM {a[0]} PORT {os.environ['MASTER_PORT']} ADDR {os.environ['MASTER_ADDR']}\\n".encode())
    """
    for args in (["--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0"],
                 ["--standalone", "--rdzv-endpoint", "localhost:1"]):
        res = launch(tmp_path, body, "--nproc-per-node", "2", *args)
        assert res.returncode == 0, res.stderr
        lines = sorted(line for line in res.stdout.splitlines() if line.startswith("SUM"))
        assert len(lines) == 2 and all(line.startswith("SUM 2.0 PORT ") for line in lines), lines
        assert int(lines[0].split()[3]) not in (0, 1) and lines[0] == lines[1]
    res = launch(tmp_path, "print('RAN')\n", "--nnodes", "2", "--node-rank", "0", "--rdzv-endpoint", "h:0")
    assert res.returncode == 2 and "port 0 (a free port) is for one node" in res.stderr


def test_more_torchrun_flags(tmp_path):
    """--role names the workers' role, --monitor-interval paces the launcher,
    --run-path and --start-method are taken, --no-python runs a program."""
    res = launch(tmp_path, """
        import os
        os.write(1, ("ROLE " + os.environ["ROLE_NAME"] + "\\n").encode())
    """, "--nproc_per_node=2", "--role", "trainer", "--monitor_interval=0.2", "--run_path", "--start_method=fork")
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("ROLE trainer") == 2
    program = tmp_path / "prog.sh"
    program.write_text("#!/bin/sh\necho PROGRAM $RANK $1\n")
    program.chmod(0o755)
    res = subprocess.run([sys.executable, "-m", "ddpc.run", "--nproc-per-node", "2", "--no-python", str(program), "x"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    lines = sorted(line for line in res.stdout.splitlines() if line.startswith("PROGRAM"))
    assert lines == ["PROGRAM 0 x", "PROGRAM 1 x"]


@pytest.mark.parametrize("args, message", [
    (["--no-python", "-m"], "--no-python and -m don't go together"),
    (["--monitor-interval", "0"], "--monitor-interval must be > 0"),
    (["--max-restarts", "-1"], "--max-restarts must be >= 0"),
    (["--nproc-per-node", "many"], "--nproc-per-node must be a number, cpu, gpu or auto; got 'many'"),
    (["--nnodes", "2:1"], "--nnodes must be a number N, or MIN:MAX with MIN <= MAX"),
    (["--standalone", "--nnodes", "2", "--master-addr", "h"], "--standalone is for one node"),
    (["--rdzv-endpoint", "h:x"], "--rdzv-endpoint is HOST[:PORT]"),
    (["-r", "4"], "--redirects takes 0 (neither stream), 1 (stdout), 2 (stderr) or 3 (both)"),
    (["--tee", "0:1,x"], "--tee takes 0"),
    (["--local-ranks-filter", "0;1"], "--local-ranks-filter must be local ranks separated by commas"),
])
def test_bad_launcher_arguments(tmp_path, args, message):
    res = launch(tmp_path, "print('RAN')\n", *args)
    assert res.returncode == 2 and message in res.stderr and "RAN" not in res.stdout


def test_collectives_through_the_launcher(tmp_path):
    res = launch(tmp_path, """
        import os, numpy as np, ddpc
        import ddpc.distributed as dist
        ddpc.init_process_group()
        a = np.full(10, dist.get_rank() + 1.0)
        dist.all_reduce(a)
        os.write(1, f"SUM {a[0]}\\n".encode())
    """, "--nproc-per-node", "2")
    assert res.returncode == 0, res.stderr
    assert res.stdout.split().count("3.0") == 2


def test_failure_is_reported_with_traceback_and_others_stopped(tmp_path):
    marker = uuid.uuid4().hex
    t0 = time.monotonic()
    res = launch(tmp_path, """
        import os, sys, time
        if os.environ["RANK"] == "1":
            def inner():
                raise ValueError("bad batch in rank one")
            inner()
        time.sleep(120)
    """, "--nproc-per-node", "3", "--grace", "1", script_args=(marker,))
    assert time.monotonic() - t0 < 30
    assert res.returncode != 0
    assert "rank 1 (local rank 1" in res.stderr and "exit code 1" in res.stderr
    assert "[rank 1] ValueError: bad batch in rank one" in res.stderr
    assert "in inner" in res.stderr
    assert processes_with(marker) == []


def test_worker_ignoring_sigterm_is_killed(tmp_path):
    marker = uuid.uuid4().hex
    res = launch(tmp_path, """
        import os, signal, sys, time
        if os.environ["RANK"] == "0":
            sys.exit(7)
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        time.sleep(120)
    """, "--nproc-per-node", "2", "--grace", "0.5", script_args=(marker,))
    assert res.returncode != 0 and "rank 0" in res.stderr and "exit code 7" in res.stderr
    assert processes_with(marker) == []


def test_max_restarts(tmp_path):
    res = launch(tmp_path, """
        import os, sys
        attempt = int(os.environ["DDPC_RESTART_COUNT"])
        os.write(1, f"ATTEMPT {os.environ['RANK']} {attempt}\\n".encode())
        if attempt < 2 and os.environ["RANK"] == "1":
            sys.exit(5)
    """, "--nproc-per-node", "2", "--max-restarts", "3", "--grace", "0.5")
    assert res.returncode == 0, res.stderr
    assert "ATTEMPT 1 2" in res.stdout and "ATTEMPT 1 3" not in res.stdout
    assert res.stderr.count("restarting the group") == 2


def test_restarts_exhausted(tmp_path):
    res = launch(tmp_path, "import sys; sys.exit(4)\n", "--nproc-per-node", "1", "--max-restarts", "1")
    assert res.returncode != 0
    assert res.stderr.count("restarting the group") == 1 and "giving up" in res.stderr


PRINTS_BOTH_STREAMS = """
    import os, sys
    print("out of", os.environ["RANK"], os.environ["TORCHELASTIC_ERROR_FILE"])
    print("err of", os.environ["RANK"], file=sys.stderr)
"""


def worker_logs(job_dir, attempt, local_rank):
    """The texts of a worker's stdout.log and stderr.log under a job's log folder (None where missing)."""
    folder = os.path.join(job_dir, f"attempt_{attempt}", str(local_rank))
    texts = []
    for name in ("stdout.log", "stderr.log"):
        path = os.path.join(folder, name)
        texts.append(open(path).read() if os.path.exists(path) else None)
    return texts


def test_tee_writes_torchruns_layout_and_prefixes_the_console(tmp_path):
    res = launch(tmp_path, PRINTS_BOTH_STREAMS, "--nproc-per-node", "2", "--log-dir", str(tmp_path / "logs"), "-t",
                 "3", "--rdzv-id", "job7")
    assert res.returncode == 0, res.stderr
    [job_dir] = glob.glob(str(tmp_path / "logs" / "job7_*"))
    for r in range(2):
        error_file = os.path.join(job_dir, "attempt_0", str(r), "error.json")
        assert worker_logs(job_dir, 0, r) == [f"out of {r} {error_file}\n", f"err of {r}\n"]
        assert f"[default{r}]:out of {r} {error_file}\n" in res.stdout
        assert f"[default{r}]:err of {r}\n" in res.stderr
    assert "out of" not in res.stderr and "err of" not in res.stdout


def test_redirects_and_tee_per_local_rank(tmp_path):
    """As torchrun: rank 0's stdout goes to its file only and its stderr is
    tee'd; rank 1's stderr goes to its file only and its stdout, sent
    nowhere else, reaches the console as it is."""
    res = launch(tmp_path, PRINTS_BOTH_STREAMS, "--nproc-per-node", "2", "--log-dir", str(tmp_path / "logs"), "-r",
                 "0:1,1:2", "-t", "0:2", "--log-line-prefix-template", "${hostname}/${rank}: ")
    assert res.returncode == 0, res.stderr
    [job_dir] = glob.glob(str(tmp_path / "logs" / "*_*"))
    out0, err0 = worker_logs(job_dir, 0, 0)
    assert out0.startswith("out of 0 ") and err0 == "err of 0\n"
    assert worker_logs(job_dir, 0, 1) == [None, "err of 1\n"]
    assert "out of 0" not in res.stdout and f"{socket.gethostname()}/0: err of 0\n" in res.stderr
    assert [line for line in res.stdout.splitlines() if "out of 1" in line][0].startswith("out of 1 ")
    assert "err of 1" not in res.stderr


def test_local_ranks_filter(tmp_path):
    shown = launch(tmp_path, PRINTS_BOTH_STREAMS, "--nproc-per-node", "2", "--local-ranks-filter", "1")
    assert shown.returncode == 0, shown.stderr
    assert "out of 1" in shown.stdout and "err of 1" in shown.stderr
    assert "of 0" not in shown.stdout + shown.stderr
    # Tee'd streams of the ranks left out still reach the files.
    teed = launch(tmp_path, PRINTS_BOTH_STREAMS, "--nproc-per-node", "2", "--local-ranks-filter", "0", "-t", "3",
                  "--log-dir", str(tmp_path / "logs"))
    assert teed.returncode == 0, teed.stderr
    assert "[default0]:out of 0" in teed.stdout and "of 1" not in teed.stdout + teed.stderr
    [job_dir] = glob.glob(str(tmp_path / "logs" / "*_*"))
    assert worker_logs(job_dir, 0, 1)[1] == "err of 1\n"


def test_redirects_without_a_log_dir_go_to_a_temporary_one(tmp_path):
    res = launch(tmp_path, PRINTS_BOTH_STREAMS, "--nproc-per-node", "2", "-r", "3")
    assert res.returncode == 0, res.stderr
    assert "of" not in res.stdout
    job_dir = res.stderr.split("the workers' logs go to ")[1].split()[0]
    try:
        assert os.path.basename(os.path.dirname(job_dir)).startswith("ddpc-run-logs-")
        assert worker_logs(job_dir, 0, 1)[1] == "err of 1\n"
        assert worker_logs(job_dir, 0, 0)[0].startswith("out of 0 ")
    finally:
        shutil.rmtree(os.path.dirname(job_dir))


def test_log_dir_alone_sends_nothing_to_files(tmp_path):
    res = launch(tmp_path, PRINTS_BOTH_STREAMS, "--nproc-per-node", "2", "--log-dir", str(tmp_path / "logs"))
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("out of") == 2 and res.stderr.count("err of") == 2
    assert not glob.glob(str(tmp_path / "logs" / "**" / "*.log"), recursive=True)


def test_each_restart_logs_to_an_attempt_folder_and_the_report_names_the_file(tmp_path):
    res = launch(tmp_path, """
        import os, sys
        attempt = os.environ["TORCHELASTIC_RESTART_COUNT"]
        print("attempt", attempt, "rank", os.environ["RANK"])
        if os.environ["RANK"] == "1":
            sys.exit(f"rank one gives up in attempt {attempt}")
    """, "--nproc-per-node", "2", "--max-restarts", "1", "--grace", "0.5", "--log-dir", str(tmp_path / "logs"),
                 "-r", "3", "--rdzv-id", "job")
    assert res.returncode != 0
    [job_dir] = glob.glob(str(tmp_path / "logs" / "job_*"))
    for attempt in range(2):
        out, err = worker_logs(job_dir, attempt, 1)
        assert out == f"attempt {attempt} rank 1\n" and err == f"rank one gives up in attempt {attempt}\n"
        stderr_file = os.path.join(job_dir, f"attempt_{attempt}", "1", "stderr.log")
        assert f"ddpc-run: rank 1's stderr is in {stderr_file}" in res.stderr
    assert "[rank 1] rank one gives up in attempt 1" in res.stderr and "giving up: rank 1 failed" in res.stderr


NOISY_WORKER = """
    import sys
    for i in range(20000):
        print(f"line {i} " + "x" * 70, file=sys.stderr)
    open("done", "w").close()
"""


def test_workers_finish_when_the_launchers_stderr_breaks(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(NOISY_WORKER))
    p = subprocess.Popen([sys.executable, "-m", "ddpc.run", str(script)], cwd=tmp_path, stdout=subprocess.DEVNULL,
                         stderr=subprocess.PIPE)
    try:
        p.stderr.read(100)
        p.stderr.close()  # whoever read the launcher's output went away
        assert p.wait(timeout=60) == 0
    finally:
        p.kill()
    assert (tmp_path / "done").exists()


def test_workers_finish_when_the_log_cannot_be_written(tmp_path):
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(NOISY_WORKER))

    def small_files():  # writes past 64 KiB fail (EFBIG: Python ignores SIGXFSZ), as on a full disk
        resource.setrlimit(resource.RLIMIT_FSIZE, (1 << 16, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))

    res = subprocess.run([sys.executable, "-m", "ddpc.run", "-r", "2", "--log-dir", str(tmp_path / "logs"),
                          str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path,
                         preexec_fn=small_files)
    assert res.returncode == 0, res.stderr
    assert (tmp_path / "done").exists()
    [log] = glob.glob(str(tmp_path / "logs" / "*" / "attempt_0" / "0" / "stderr.log"))
    assert os.path.getsize(log) <= 1 << 16


@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGQUIT])
def test_hangup_and_quit_stop_workers_and_what_they_started(tmp_path, sig):
    marker = uuid.uuid4().hex
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(f"""
        import os, subprocess, sys, time
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "{marker}"])
        os.write(1, b"UP\\n")
        time.sleep(120)
    """))
    p = subprocess.Popen([sys.executable, "-m", "ddpc.run", "--nproc-per-node", "2", "--grace", "1", str(script)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        for _ in range(2):
            assert p.stdout.readline().strip() == "UP"
        p.send_signal(sig)
        out, err = p.communicate(timeout=30)
        assert p.returncode == 128 + sig and "interrupted" in err
        assert processes_left_after(marker, 5) == []
    finally:
        p.kill()
        kill_processes_with(marker)


def on_a_terminal(tmp_path, body, *launcher_args, answer=None, timeout=30):
    """Runs the launcher on a new pseudo-terminal (its stdin, stdout, stderr and
    controlling terminal, as in an interactive shell), typing ``answer`` once
    the output shows PROMPT; returns (exit status, output), the status None
    where it did not end within ``timeout`` (it is then killed, with its workers)."""
    marker = uuid.uuid4().hex
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent(body))
    cmd = [sys.executable, "-m", "ddpc.run", *launcher_args, str(script), marker]
    pid, fd = pty.fork()
    if pid == 0:
        try:
            os.chdir(tmp_path)
            os.execv(cmd[0], cmd)
        finally:
            os._exit(127)
    out, status = b"", None
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    data = os.read(fd, 4096)
                except OSError:  # the terminal's last writer is gone
                    data = b""
                out += data
                if answer is not None and b"PROMPT" in out:
                    os.write(fd, answer)
                    answer = None
            done, code = os.waitpid(pid, os.WNOHANG)
            if done:
                status, pid = os.waitstatus_to_exitcode(code), None
                break
    finally:
        if pid is not None:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
        left = processes_left_after(marker, 10)
        kill_processes_with(marker)
        os.close(fd)
    assert left == []
    return status, out.decode(errors="replace")


def test_a_worker_reads_the_terminal(tmp_path):
    """As under torchrun, whose workers start in a session of their own: in the
    launcher's session they would be a background process group, stopped
    (SIGTTIN) when they read the terminal."""
    status, out = on_a_terminal(tmp_path, """
        line = input("PROMPT\\n")
        print("GOT", line[::-1], flush=True)
    """, answer=b"hello\n")
    assert status == 0 and "GOT olleh" in out, out


_STDERR_IS_A_TTY = """
    import os, sys
    print("ERR-TTY", os.environ["RANK"], sys.stderr.isatty(), file=sys.stderr, flush=True)
    if os.environ["RANK"] == "1":
        sys.exit(3)
"""


def test_a_worker_writes_its_stderr_to_the_launchers_terminal(tmp_path):
    """As under torchrun: a progress bar or coloured log sees a tty, unless -r or -t
    passes the stream through the launcher (or --local-ranks-filter hides it)."""
    status, out = on_a_terminal(tmp_path, _STDERR_IS_A_TTY, "--nproc-per-node", "2", "--grace", "1")
    assert status == 1 and "ERR-TTY 0 True" in out and "ERR-TTY 1 True" in out, out
    assert "rank 1's stderr went to the terminal, above" in out and "last lines of rank 1's stderr" not in out
    status, out = on_a_terminal(tmp_path, _STDERR_IS_A_TTY, "--nproc-per-node", "2", "--grace", "1", "-t", "0:2")
    assert status == 1 and "[default0]:ERR-TTY 0 False" in out and "ERR-TTY 1 True" in out, out
    status, out = on_a_terminal(tmp_path, _STDERR_IS_A_TTY, "--nproc-per-node", "2", "--grace", "1",
                                "--local-ranks-filter", "1")
    assert status == 1 and "ERR-TTY 0" not in out and "ERR-TTY 1 True" in out, out


def test_rank_zero_failure_is_reported_promptly(tmp_path):
    res = launch(tmp_path, """
        import os, time, numpy as np
        import ddpc.distributed as dist
        dist.init_process_group("cpu", timeout=60)
        if dist.get_rank() == 0:
            os.write(1, f"RAISING {time.time()}\\n".encode())
            raise ValueError("bad batch on rank 0")
        dist.all_reduce(np.ones(2))
    """, "--nproc-per-node", "2")
    # Rank 0 used to wait 10 s for rank 1, which waited for rank 0, before exiting.
    assert time.time() - float(res.stdout.split("RAISING ")[1].split()[0]) < 5
    assert res.returncode != 0 and "ValueError: bad batch on rank 0" in res.stderr


@pytest.mark.parametrize("then", ["time.sleep(30)", "dist.barrier()"])
def test_a_rank_calling_sys_exit_is_reported_promptly_and_blamed(tmp_path, then):
    res = launch(tmp_path, f"""
        import os, sys, time
        import ddpc.distributed as dist
        dist.init_process_group("cpu", timeout=60)
        if dist.get_rank() == 1:
            os.write(1, f"EXITING {{time.time()}}\\n".encode())
            sys.exit(3)
        {then}
    """, "--nproc-per-node", "2")
    # sys.exit sets no sys.last_value: rank 1 used to wait 10 s at exit for rank 0, which blamed it meanwhile.
    assert time.time() - float(res.stdout.split("EXITING ")[1].split()[0]) < 5
    assert res.returncode != 0 and "rank 1 (local rank 1" in res.stderr and "exit code 3" in res.stderr, res.stderr


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_reach_the_workers_which_may_save_before_stopping(tmp_path, sig):
    """The workers get the launcher's signal, as under torchrun: Ctrl-C is a
    KeyboardInterrupt in them; a handler has the grace period (30 s by
    default) to save; the launcher exits 128 + the signal's number."""
    marker = uuid.uuid4().hex
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import os, signal, sys, time
        def save(*_):
            time.sleep(5.5)  # (a checkpoint being written: longer than the 5 s grace of before)
            open(os.path.join(sys.argv[1], "saved_" + os.environ["RANK"]), "w").close()
            sys.exit(0)
        signal.signal(signal.SIGTERM, save)
        try:
            os.write(1, b"UP\\n")  # one write: two workers share the pipe
            time.sleep(120)
        except KeyboardInterrupt:
            open(os.path.join(sys.argv[1], "interrupted_" + os.environ["RANK"]), "w").close()
    """))
    p = subprocess.Popen([sys.executable, "-m", "ddpc.run", "--nproc-per-node", "2", str(script), str(tmp_path),
                          marker], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    for _ in range(2):
        assert p.stdout.readline().strip() == "UP"
    p.send_signal(sig)
    out, err = p.communicate(timeout=30)
    assert p.returncode == 128 + sig
    assert "interrupted" in err
    kind = "interrupted" if sig == signal.SIGINT else "saved"
    assert sorted(f for f in os.listdir(tmp_path) if f != "job.py") == [f"{kind}_0", f"{kind}_1"]
    assert processes_with(marker) == []


def test_launcher_killed_takes_workers_with_it(tmp_path):
    marker = uuid.uuid4().hex
    script = tmp_path / "job.py"
    script.write_text("import os, time\nos.write(1, b'UP\\n')\ntime.sleep(120)\n")  # one write: two workers share the pipe
    p = subprocess.Popen([sys.executable, "-m", "ddpc.run", "--nproc-per-node", "2", str(script), marker],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         env=dict(os.environ, TMPDIR=str(tmp_path)))  # (its temporary folders stay in tmp_path)
    for _ in range(2):
        assert p.stdout.readline().strip() == "UP"
    p.kill()
    p.wait(timeout=10)
    assert processes_left_after(marker, 10) == []


# ---- ddpc.spawn ---------------------------------------------------------------------


def _allreduce_rank(rank, scale):
    import numpy as np

    import ddpc.distributed as dist

    dist.init_process_group()
    a = np.full(1000, float(rank + 1))
    dist.all_reduce(a)
    return {"rank": dist.get_rank(), "sum": float(a[0]) * scale}


def test_spawn_returns_values_by_rank():
    out = ddpc.spawn(_allreduce_rank, args=(2,), nprocs=3)
    assert out == [{"rank": r, "sum": 12.0} for r in range(3)]


def _draws(rank):
    import numpy as np

    return ddpc.rand(2).tolist(), np.random.rand(2).tolist(), ddpc.initial_seed()


def test_spawned_children_draw_numbers_of_their_own():
    """As the fresh interpreters of torch's spawn: forked children do not repeat the parent's (or each other's)
    ddpc and numpy draws, also after the parent seeded."""
    ddpc.manual_seed(0)
    out = ddpc.spawn(_draws, nprocs=2)
    assert out[0][0] != out[1][0] and out[0][1] != out[1][1] and out[0][2] != out[1][2]
    assert ddpc.rand(2).tolist() not in (out[0][0], out[1][0])


def _fail_on_rank_two(rank):
    import time

    if rank == 2:
        raise KeyError("missing feature in rank two")
    time.sleep(60)


def test_spawn_reraises_child_exception_with_rank_and_traceback():
    from ddpc.spawn import ProcessRaisedException

    t0 = time.monotonic()
    with pytest.raises(ProcessRaisedException) as info:
        ddpc.spawn(_fail_on_rank_two, nprocs=3)
    assert time.monotonic() - t0 < 30
    assert info.value.rank == 2
    assert "KeyError" in str(info.value) and "missing feature in rank two" in str(info.value)
    assert "_fail_on_rank_two" in info.value.child_traceback


def _die(rank):
    if rank == 1:
        os.kill(os.getpid(), signal.SIGKILL)
    return rank


def test_spawn_reports_a_killed_child():
    from ddpc.spawn import ProcessExitedException

    with pytest.raises(ProcessExitedException, match="process 1 .*SIGKILL") as info:
        ddpc.spawn(_die, nprocs=2)
    e = info.value  # PyTorch's attributes too
    assert (e.error_index, e.exit_code, e.signal_name) == (1, -9, "SIGKILL") and e.pid == e.error_pid > 0
    assert isinstance(e, ddpc.multiprocessing.ProcessException)


def _share_then_fail(rank, where):
    t = ddpc.zeros(1000).share_memory_()
    if rank == 0:
        # A name sent and never opened keeps its segment after this process
        # drops its own reference on the way out.
        t._buf.send_shared()
        while not (where / "1").exists():
            time.sleep(0.01)
    (where / f"{rank}.tmp").write_text(str(os.getpid()))
    (where / f"{rank}.tmp").rename(where / str(rank))
    if rank == 0:
        raise RuntimeError("rank 0 fails after sharing a tensor")
    time.sleep(60)


def test_a_failed_spawn_leaves_no_shared_memory_behind(tmp_path):
    """Rank 0 shares a tensor, sends its name and fails; rank 1 shares one and
    is stopped: neither's segment stays in /dev/shm."""
    from ddpc.spawn import ProcessRaisedException

    with pytest.raises(ProcessRaisedException, match="rank 0 fails after sharing"):
        ddpc.spawn(_share_then_fail, args=(tmp_path,), nprocs=2)
    pids = [int((tmp_path / str(r)).read_text()) for r in range(2)]
    left = [f for f in os.listdir("/dev/shm") for pid in pids if f.startswith((f"ddpc_{pid}_", f"ddpc-{pid}-"))]
    assert not left


@pytest.mark.parametrize("start_method", ["fork", "spawn"])
def test_the_parents_tensors_sent_to_a_failed_spawn_leave_no_shared_memory_behind(tmp_path, start_method):
    """A model in spawn's args moves into the parent's shared memory; a
    failed run whose other rank is stopped by a signal (it never drops its
    references) leaves the segments to the parent alone: there while it
    holds the model (a next run sends them again), gone when it ends."""
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import glob, os, sys
        import ddpc
        import ddpc.distributed as dist
        import ddpc.multiprocessing

        def fn(rank, model):
            dist.init_process_group("cpu", timeout=60)
            if rank == 1:
                raise RuntimeError("boom")
            dist.barrier()

        def ok(rank, model):
            return float(model.weight.sum())

        if __name__ == "__main__":
            model = ddpc.nn.Linear(300, 300)
            try:
                ddpc.spawn(fn, args=(model,), nprocs=2, start_method=sys.argv[1])
            except ddpc.multiprocessing.ProcessRaisedException:
                pass
            print(len(glob.glob(f"/dev/shm/ddpc_{os.getpid()}_*")), os.getpid())
            print(ddpc.spawn(ok, args=(model,), nprocs=2, start_method=sys.argv[1]) == [float(model.weight.sum())] * 2)
    """))
    res = subprocess.run([sys.executable, str(script), start_method], capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    (held, pid), again = res.stdout.split("\n")[0].split(), res.stdout.split("\n")[1]
    assert held == "2" and again == "True"  # weight and bias, sent again to the second run
    assert not [f for f in os.listdir("/dev/shm") if f.startswith(f"ddpc_{pid}_")]


def test_spawning_fresh_interpreters_refuses_a_function_of_an_interactive_session_up_front():
    """A function typed into a REPL or a notebook cell can't be imported by
    a fresh interpreter: refused before any child starts, with what to do;
    forked children (the default) run it."""
    session = textwrap.dedent("""
        import ddpc
        def f(rank):
            return rank * 10
        for method in ("spawn", "forkserver"):
            try:
                ddpc.spawn(f, nprocs=2, start_method=method)
            except RuntimeError as e:
                print(method, "refused:", "defined in an interactive session" in str(e))
        print(ddpc.spawn(f, nprocs=2))
    """)
    res = subprocess.run([sys.executable, "-"], input=session, capture_output=True, text=True, timeout=120)
    assert res.stdout.split("\n")[:3] == ["spawn refused: True", "forkserver refused: True", "[0, 10]"], res.stderr


def test_spawn_gives_none_with_a_warning_for_a_return_value_that_cannot_be_pickled(tmp_path):
    """torch.multiprocessing.spawn ignores return values; ddpc returns the ones it can send."""
    script = tmp_path / "ret.py"
    script.write_text(textwrap.dedent("""
        import threading
        import ddpc

        def lock_on_rank_zero(rank):
            return threading.Lock() if rank == 0 else rank

        if __name__ == "__main__":
            print("RESULT", ddpc.spawn(lock_on_rank_zero, nprocs=2))
    """))
    r = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert r.returncode == 0, r.stderr
    assert "RESULT [None, 1]" in r.stdout
    assert "RuntimeWarning: ddpc.spawn: the return value of rank 0 (lock) cannot be sent" in r.stderr
    assert "rank 1" not in r.stderr


def test_spawn_join_false():
    ctx = ddpc.spawn(_allreduce_rank, args=(1,), nprocs=2, join=False)
    assert len(ctx.pids()) == 2
    assert [r["sum"] for r in ctx.join()] == [3.0, 3.0]


_SPAWN_ENV_KEYS = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                   "DDPC_STORE_TOKEN")


def _environment(rank):
    return {k: os.environ.get(k) for k in _SPAWN_ENV_KEYS}


def test_spawn_fills_in_only_what_the_parent_has_not_set(monkeypatch):
    for k in _SPAWN_ENV_KEYS:
        monkeypatch.delenv(k, raising=False)
    own = ddpc.spawn(_environment, nprocs=2)
    assert [(e["RANK"], e["LOCAL_RANK"], e["WORLD_SIZE"], e["LOCAL_WORLD_SIZE"]) for e in own] == [
        ("0", "0", "2", "2"), ("1", "1", "2", "2")]
    assert own[0]["MASTER_ADDR"] == "127.0.0.1" and own[0]["MASTER_PORT"] == own[1]["MASTER_PORT"]
    assert len(own[0]["DDPC_STORE_TOKEN"]) >= 16 and own[0]["DDPC_STORE_TOKEN"] == own[1]["DDPC_STORE_TOKEN"]
    # As torch.multiprocessing.spawn, which sets none of them: a master the
    # parent names is kept, with no token, so other parents' children get in.
    monkeypatch.setenv("MASTER_ADDR", "10.1.2.3")
    monkeypatch.setenv("MASTER_PORT", "23456")
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    assert ddpc.spawn(_environment, nprocs=2) == [
        {"RANK": "2", "WORLD_SIZE": "4", "LOCAL_RANK": str(r), "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "10.1.2.3",
         "MASTER_PORT": "23456", "DDPC_STORE_TOKEN": ""} for r in range(2)]
    monkeypatch.setenv("DDPC_STORE_TOKEN", "the-job-secret")
    assert {e["DDPC_STORE_TOKEN"] for e in ddpc.multiprocessing.spawn(_environment, nprocs=2)} == {"the-job-secret"}


_TWO_PARENTS = """
    import sys
    import numpy as np
    import ddpc.distributed as dist
    import ddpc.multiprocessing as mp

    def work(local_rank, node, init_method):
        dist.init_process_group("cpu", init_method=init_method, rank=node + local_rank, world_size=2, timeout=30)
        a = np.full(4, float(node + 1))
        dist.all_reduce(a)
        dist.destroy_process_group()
        return float(a[0])

    if __name__ == "__main__":
        node, init_method = int(sys.argv[1]), sys.argv[2]
        print("SUM", mp.spawn(work, args=(node, init_method), nprocs=1)[0], flush=True)
"""


@pytest.mark.parametrize("init_method, parents_set", [("env://", "master"), ("tcp://127.0.0.1:{port}", "master"),
                                                      ("tcp://127.0.0.1:{port}", "token")])
def test_children_of_two_parents_meet(tmp_path, init_method, parents_set):
    """Two parents (two nodes, say) spawn one child each, and the children
    pass their global rank, as PyTorch's multi-node spawn scripts do."""
    from procs import free_port

    script = tmp_path / "node.py"
    script.write_text(textwrap.dedent(_TWO_PARENTS))
    env = {k: v for k, v in os.environ.items() if k not in _SPAWN_ENV_KEYS}
    if parents_set == "master":
        env.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(free_port()))
    else:
        env.update(DDPC_STORE_TOKEN="shared-secret")
    url = init_method.format(port=free_port())
    nodes = [subprocess.Popen([sys.executable, str(script), str(node), url], env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True) for node in range(2)]
    try:
        outs = [p.communicate(timeout=90) for p in nodes]
    finally:
        for p in nodes:
            p.kill()
    for p, (out, err) in zip(nodes, outs):
        assert p.returncode == 0 and "SUM 3.0" in out, err


def test_spawn_starts_fresh_interpreters_once_cuda_is_up(monkeypatch):
    monkeypatch.setattr(ddpc._C, "cuda_fork_unsafe", lambda: True)
    # Asked for, forked children still work on the host (the GPU test checks that they see no GPU).
    assert ddpc.spawn(_exit_on_rank_one, args=(0,), nprocs=2, start_method="fork") == [0, None]
    # By default the children are fresh interpreters then, which import fn.
    results = ddpc.spawn(_allreduce_rank, args=(1,), nprocs=2)
    assert [r["sum"] for r in results] == [3.0, 3.0]
    with pytest.raises(RuntimeError, match="cannot be pickled.*top level of an importable module"):
        ddpc.spawn(lambda rank: rank, nprocs=2)
    with pytest.raises(ValueError, match="start_method must be"):
        ddpc.spawn(_die, nprocs=2, start_method="thread")


def test_spawn_with_an_explicit_start_method():
    assert ddpc.spawn(_exit_on_rank_one, args=(0,), nprocs=2, start_method="spawn") == [0, None]
    assert ddpc.spawn(_exit_on_rank_one, args=(0,), nprocs=2, start_method="forkserver") == [0, None]


def _exit_on_rank_one(rank, code):
    if rank == 1:
        sys.exit(code)
    return rank


def test_spawn_child_calling_sys_exit():
    from ddpc.spawn import ProcessExitedException

    assert ddpc.spawn(_exit_on_rank_one, args=(0,), nprocs=2) == [0, None]
    with pytest.raises(ProcessExitedException, match="process 1 exited with exit code 3") as info:
        ddpc.spawn(_exit_on_rank_one, args=(3,), nprocs=2)
    assert info.value.rank == 1 and info.value.exit_code == 3


def _sleep_and_return(rank, seconds):
    time.sleep(seconds[rank])
    return rank


def test_spawn_join_false_from_a_thread_that_ends():
    box = {}
    t = threading.Thread(target=lambda: box.setdefault("ctx", ddpc.spawn(_sleep_and_return, args=([1.0, 1.0],),
                                                                          nprocs=2, join=False)))
    t.start()
    t.join()
    assert box["ctx"].join(timeout=60) == [0, 1]


def test_children_spawned_by_a_thread_die_with_their_parent(tmp_path):
    marker = uuid.uuid4().hex
    script = tmp_path / "job.py"
    script.write_text(textwrap.dedent("""
        import threading, time, ddpc
        def work(rank):
            time.sleep(120)
        t = threading.Thread(target=lambda: ddpc.spawn(work, nprocs=2, join=False))
        t.start()
        t.join()
        print("UP", flush=True)
        time.sleep(120)
    """))
    p = subprocess.Popen([sys.executable, str(script), marker], stdout=subprocess.PIPE, text=True)
    try:
        assert p.stdout.readline().strip() == "UP"
        assert len(processes_with(marker)) == 3
        p.kill()
        p.wait(timeout=10)
        assert processes_left_after(marker, 10) == []
    finally:
        p.kill()
        kill_processes_with(marker)


def test_spawn_join_timeout_is_one_deadline():
    # Ranks 0-2 finish 1.2 s apart: each used to restart the timeout.
    ctx = ddpc.spawn(_sleep_and_return, args=([1.2, 2.4, 3.6, 6.0],), nprocs=4, join=False)
    t0 = time.monotonic()
    assert ctx.join(timeout=1.5) is None
    assert time.monotonic() - t0 < 3.5
    assert ctx.join(timeout=60) == [0, 1, 2, 3]


def _rank_zero_fails_while_rank_one_waits(rank):
    import numpy as np

    import ddpc.distributed as dist

    dist.init_process_group("cpu", timeout=60)
    if rank == 0:
        raise ValueError("bad batch on rank 0")
    try:
        dist.all_reduce(np.ones(2))
    except ddpc.DistError:
        time.sleep(60)  # the parent stops this rank once it has rank 0's failure


def test_spawn_reports_a_rank_zero_failure_promptly():
    from ddpc.spawn import ProcessRaisedException

    t0 = time.monotonic()
    with pytest.raises(ProcessRaisedException, match="bad batch on rank 0") as info:
        ddpc.spawn(_rank_zero_fails_while_rank_one_waits, nprocs=2)
    # Rank 0 used to wait 10 s for rank 1 to leave before reporting.
    assert time.monotonic() - t0 < 5
    assert info.value.rank == 0


def test_spawn_from_a_rank_of_a_running_group(tmp_path):
    res = launch(tmp_path, """
        import os, time, numpy as np
        import ddpc, ddpc.distributed as dist

        def work(rank):
            assert not dist.is_initialized()
            dist.init_process_group("cpu")
            a = np.ones(2)
            dist.all_reduce(a)
            return float(a[0])

        dist.init_process_group("cpu", timeout=60)
        if dist.get_rank() == 0:
            os.write(1, f"SPAWNED {ddpc.spawn(work, nprocs=2)}\\n".encode())
        a = np.ones(2)
        dist.all_reduce(a)
        os.write(1, f"SUM {a[0]}\\n".encode())
        if dist.get_rank() == 1:
            os._exit(0)  # without leaving: rank 0 must notice
        t0 = time.monotonic()
        try:
            dist.barrier()
        except ddpc.DistError as e:
            os.write(1, f"NOTICED {time.monotonic() - t0:.1f} {e}\\n".encode())
        os._exit(0)
    """, "--nproc-per-node", "2")
    assert res.returncode == 0, res.stderr
    assert "SPAWNED [2.0, 2.0]" in res.stdout and res.stdout.count("SUM 2.0") == 2
    seconds = float(res.stdout.split("NOTICED ")[1].split()[0])
    assert seconds < 5 and "rank 1 died" in res.stdout


def test_the_first_error_recorded_names_the_failure(tmp_path):
    """Entry points under @record write TORCHELASTIC_ERROR_FILE: rank 1
    raises first but is slow to exit, rank 0's error follows and it exits at
    once; the report names rank 1 and its error, not rank 0's consequence."""
    res = launch(tmp_path, """
        import atexit, os, time
        from ddpc.distributed.elastic.multiprocessing.errors import record

        @record
        def main():
            if os.environ["RANK"] == "1":
                atexit.register(time.sleep, 3)
                raise ValueError("first failure, in rank one")
            time.sleep(0.5)
            raise RuntimeError("a consequence, in rank zero")

        main()
    """, "--nproc-per-node", "2", "--grace", "1")
    assert res.returncode != 0
    assert "ddpc-run: rank 1 raised ValueError: first failure, in rank one" in res.stderr, res.stderr
    assert "ddpc-run: rank 1 (local rank 1" in res.stderr and "ddpc-run: rank 0 (" not in res.stderr, res.stderr
    assert "giving up: rank 1 failed" in res.stderr
