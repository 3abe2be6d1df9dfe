"""ddpc-run: start N worker processes per node with the process-group environment.

    ddpc-run --nproc-per-node 4 train.py --epochs 3
    python -m ddpc.run --nnodes 2 --node-rank 0 --master-addr node0 --master-port 29500 -m mypkg.train

Each worker gets RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
MASTER_PORT, DDPC_STORE_TOKEN and DDPC_RESTART_COUNT, and torchrun's
GROUP_RANK, GROUP_WORLD_SIZE, ROLE_*, TORCHELASTIC_RESTART_COUNT,
TORCHELASTIC_MAX_RESTARTS and TORCHELASTIC_RUN_ID. torchrun's --standalone
(which, as torchrun's, ignores --rdzv-endpoint and takes a free port) and
--rdzv-endpoint/--rdzv-backend/--rdzv-id are taken (on one node the endpoint
is the store's address, port 0 a free one), as are --role,
--monitor-interval, --no-python (the script is a program of its own),
--run-path and --start-method (workers are fresh processes either way). On
several nodes, each names its --node-rank, or they meet in the rendezvous
below. When a worker fails,
the others are stopped (SIGTERM, then SIGKILL after a grace period of 30 s
by default, as torchrun's, time for a handler to save a checkpoint), the
failed rank, its exit code or signal and the tail of its stderr are printed
(with the error an entry point decorated with
``ddpc.distributed.elastic.multiprocessing.errors.record`` raised: each worker
gets a TORCHELASTIC_ERROR_FILE, and the first error recorded names the rank
that failed first),
and the launcher exits non-zero, or restarts the whole group while
``--max-restarts`` allows. Where the launcher's stderr is a terminal and
nothing (-r, -t, --local-ranks-filter) changes a worker's, the worker writes
there itself, as under torchrun, so that it sees a tty, and the report has
no tail of it (the recorded error, or -t 2's file, has what it raised).
Workers die with the launcher (PR_SET_PDEATHSIG);
Ctrl-C, SIGTERM, SIGHUP and SIGQUIT stop everything in order: the workers
get the signal the launcher got (so a worker's ``except KeyboardInterrupt``
runs on Ctrl-C, as under torchrun), and the launcher exits 128 + its
number (130 for Ctrl-C, 143 for SIGTERM). Everything
after the script (or the -m module) is passed to it.

Logs, as torchrun keeps them: ``-r/--redirects`` sends workers' streams to
files instead of the console, ``-t/--tee`` to files and the console, where
each line starts with ``[<role><local rank>]:`` (``--log-line-prefix-template``
changes that); both take 0 (neither stream), 1 (stdout), 2 (stderr) or 3
(both), for every local rank or per local rank as ``0:1,1:3``. The files
are ``<log dir>/<run id>_<random>/attempt_<restart>/<local rank>/stdout.log``
and ``stderr.log`` (with ``error.json``, a recorded error), the log dir
being ``--log-dir`` or, where it is not given, a new temporary directory,
which ddpc-run names on stderr (torchrun does not); the run id is
``--rdzv-id``, else on one node a new UUID. ``--log-dir`` alone sends
nothing to files. ``--local-ranks-filter 0,2`` shows only those local
ranks' streams on the console (the files keep everything). The failure
report names the failed rank's stderr file where there is one.

Elastic jobs, as torchrun's c10d rendezvous: with ``--nnodes MIN:MAX`` (or
``--nnodes N`` with ``--rdzv-backend c10d``, or with ``--rdzv-endpoint`` and
no ``--node-rank``: MIN = MAX = N) the agents (one ddpc-run per node) meet in a store at ``--rdzv-endpoint``
(default port 29400), hosted by the agent on that machine, under
``--rdzv-id``, and --node-rank is not used. A round closes when MAX nodes
joined, or when MIN did and ``last_call_timeout`` seconds passed without a
new one (torchrun counts them from the MIN-th); node ranks follow the join
order, and the first node's address and a port of its own are the workers'
MASTER_ADDR and MASTER_PORT. A worker that fails on any node stops every
node's workers for a new round, counted in TORCHELASTIC_RESTART_COUNT
against ``--max-restarts`` (used up, every node exits non-zero); a node
that comes while the workers run (up to MAX), or one whose heartbeat stops,
stops them for a new round that is not counted. ``--rdzv-conf`` takes
``join_timeout`` (default 600: how long a node waits for a round to close;
past it the agent exits non-zero, naming how many nodes joined),
``last_call_timeout`` (30), ``keep_alive_interval`` (5),
``keep_alive_max_attempt`` (3) and ``is_host``. An agent whose workers
succeeded waits for the other nodes' before leaving, as it may host the store.
"""

import argparse
import collections
import contextlib
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from string import Template

from . import _C
from ._elastic import read_error_file
from ._procs import describe_exit, die_with_parent, free_port, new_token, remove_shm_segments
from ._C import DistError
from ._rendezvous import CONF_DEFAULTS, Rendezvous, RendezvousClosed, RendezvousError, Round
from ._threads import per_rank_threads, user_chose_threads

_TAIL_LINES = 40
_STDOUT, _STDERR = 1, 2  # the bits of -r and -t, as torchrun's Std
_PREFIX_TEMPLATE = "[${role_name}${local_rank}]:"  # torchrun's, before each console line of a tee'd stream


def _pump(pipe, log, console, prefix, tail):
    """Copies a worker's stream line by line to its ``log`` file and to the
    ``console`` (each line after ``prefix``), either of which may be None,
    keeping the last lines in ``tail`` (None: none kept).

    A destination that fails (whoever read the launcher's output went away,
    the log's disk is full) is dropped, but the pipe is still drained: a
    worker whose pipe fills up blocks for good."""
    for line in iter(pipe.readline, b""):
        if tail is not None:
            tail.append(line.decode(errors="replace").rstrip("\n"))
        if log is not None:
            try:
                log.write(line)
                log.flush()
            except OSError:
                log = None
        if console is not None:
            try:
                console.write(prefix + line)
                console.flush()
            except OSError:
                console = None
    pipe.close()
    if log is not None:
        with contextlib.suppress(OSError):
            log.close()


def _is_terminal(stream):
    """Whether ``stream`` (the launcher's sys.stderr, say) writes to a terminal."""
    try:
        return os.isatty(stream.fileno())
    except (AttributeError, OSError, ValueError):  # None, or a stream with no descriptor (a notebook's)
        return False


def _stream(bit, redirects, tee, shown):
    """Where a worker's stdout (``bit`` _STDOUT) or stderr goes, as torchrun
    sends it: (to its log file, to the console, with the line prefix)."""
    to_file = bool((redirects | tee) & bit)
    return to_file, shown and (bool(tee & bit) or not to_file), bool(tee & bit)


class _Worker:
    """A running worker. ``log_dir``: its folder of logs; ``redirects`` and
    ``tee``: its bits of -r and -t; ``shown``: whether --local-ranks-filter
    lets the console show it; ``prefix``: of its tee'd console lines."""

    def __init__(self, cmd, env, local_rank, rank, log_dir, redirects, tee, shown, prefix):
        self.rank = rank
        self.local_rank = local_rank
        self.error_file = env["TORCHELASTIC_ERROR_FILE"]
        self.tail = collections.deque(maxlen=_TAIL_LINES)
        out_file, out_console, out_prefixed = _stream(_STDOUT, redirects, tee, shown)
        err_file, err_console, err_prefixed = _stream(_STDERR, redirects, tee, shown)
        self.stderr_log = os.path.join(log_dir, "stderr.log") if err_file else None
        stdout_log = open(os.path.join(log_dir, "stdout.log"), "wb") if out_file else None
        stderr_log = open(self.stderr_log, "wb") if err_file else None
        # Stdout is piped only where it goes to both places. Stderr is piped,
        # for the tail the failure report shows, unless it goes unchanged to
        # the launcher's terminal: the worker then writes there itself, as
        # under torchrun, and sees a tty (live progress bars, coloured logs).
        if out_file and out_console:
            stdout = subprocess.PIPE
        else:
            stdout = stdout_log if out_file else None if out_console else subprocess.DEVNULL
        self.stderr_on_terminal = err_console and not err_file and _is_terminal(sys.stderr)
        try:
            self.proc = subprocess.Popen(cmd, env=env, stdout=stdout,
                                         stderr=None if self.stderr_on_terminal else subprocess.PIPE,
                                         preexec_fn=die_with_parent)
        except BaseException:
            for f in (stdout_log, stderr_log):
                if f is not None:
                    f.close()
            raise
        prefix = prefix.encode()
        pumps = []
        if not self.stderr_on_terminal:
            pumps.append((self.proc.stderr, stderr_log, sys.stderr.buffer if err_console else None,
                          prefix if err_prefixed else b"", self.tail))
        if stdout is subprocess.PIPE:
            pumps.append((self.proc.stdout, stdout_log, sys.stdout.buffer, prefix if out_prefixed else b"", None))
        elif stdout_log is not None:
            stdout_log.close()
        self.readers = [threading.Thread(target=_pump, args=args, daemon=True) for args in pumps]
        for t in self.readers:
            t.start()

    def join_readers(self, timeout):
        for t in self.readers:
            t.join(timeout=timeout)

    def signal(self, sig):
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except (ProcessLookupError, PermissionError):
                pass


def stop_all(workers, grace, sig=signal.SIGTERM):
    """``sig`` to every live worker's process group, SIGKILL what is left after `grace` seconds."""
    for w in workers:
        w.signal(sig)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline and any(w.proc.poll() is None for w in workers):
        time.sleep(0.02)
    for w in workers:
        w.signal(signal.SIGKILL)
    for w in workers:
        w.proc.wait()
        # Anything the worker started in its process group goes too.
        try:
            os.killpg(w.proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        w.join_readers(timeout=2)
    remove_shm_segments((w.proc.pid for w in workers), stopped=True)


def _recorded_at(w):
    """When ``w`` recorded its error (the file's time), or None where it recorded none."""
    try:
        return os.stat(w.error_file).st_mtime_ns
    except OSError:
        return None


def _first_failure(workers, codes):
    """The failed worker whose failure caused the others', and its exit code,
    among those that had ended with an error when it was seen (``codes``;
    None for the running) and those that had recorded one: a worker killed
    by a signal, else the first error recorded, else the lowest rank."""
    def order(wc):
        w, code = wc
        at = _recorded_at(w)
        return (code is None or code >= 0, at is None, at or 0, w.rank)

    w, code = min(((w, c) for w, c in zip(workers, codes) if c not in (None, 0) or (c is None and _recorded_at(w))),
                  key=order)
    return w, w.proc.returncode if code is None else code


def _report(w, code, out):
    print(f"ddpc-run: rank {w.rank} (local rank {w.local_rank}, pid {w.proc.pid}) failed: {describe_exit(code)}",
          file=out)
    message = read_error_file(w.error_file)
    if message:
        print(f"ddpc-run: rank {w.rank} raised {message}", file=out)
    if w.tail:
        print(f"ddpc-run: last lines of rank {w.rank}'s stderr:", file=out)
        for line in w.tail:
            print(f"  [rank {w.rank}] {line}", file=out)
    elif w.stderr_on_terminal:
        print(f"ddpc-run: rank {w.rank}'s stderr went to the terminal, above (with -r 2 or -t 2 it is kept in a "
              "file, and this report shows its last lines)", file=out)
    if w.stderr_log:
        print(f"ddpc-run: rank {w.rank}'s stderr is in {w.stderr_log}", file=out)
    out.flush()


def _cpu_count():
    """The cores this process may run on (its affinity mask, which taskset and
    cgroups narrow), as torchrun counts them."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def _nproc_per_node(p, value):
    """--nproc-per-node: a number; or, as in torchrun, cpu (one worker per
    core this process may use), gpu (one per GPU), auto (one per GPU, or one
    per core where there is none)."""
    if value == "cpu":
        return _cpu_count()
    if value in ("gpu", "auto"):
        gpus = _C.cuda_device_count()
        if value == "gpu" and gpus == 0:
            p.error(f"--nproc-per-node gpu: {_C.cuda_unavailable_reason() or 'no GPU found'}")
        return gpus or _cpu_count()
    try:
        return int(value)
    except ValueError:
        p.error(f"--nproc-per-node must be a number, cpu, gpu or auto; got {value!r}")


def _std(p, flag, value):
    """-r/--redirects or -t/--tee: 0 (neither stream), 1 (stdout), 2 (stderr)
    or 3 (both) for every local rank, or per local rank as "0:1,1:3" (a dict;
    local ranks not named get 0). torchrun takes one-digit local ranks there."""
    if re.fullmatch(r"[0-3]", value):
        return int(value)
    if re.fullmatch(r"\d+:[0-3](,\d+:[0-3])*", value):
        return {int(r): int(bits) for r, bits in (item.split(":") for item in value.split(","))}
    p.error(f"{flag} takes 0 (neither stream), 1 (stdout), 2 (stderr) or 3 (both), or one of them per local rank "
            f"as 0:1,1:3; got {value!r}")


def _bits(std, local_rank):
    """The bits that a value of -r or -t gives ``local_rank``."""
    return std if isinstance(std, int) else std.get(local_rank, 0)


def get_args_parser():
    """The launcher's argument parser (torch.distributed.run's name for it)."""
    p = argparse.ArgumentParser(prog="ddpc-run", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--nproc-per-node", "--nproc_per_node", default="1",
                   help="workers on this node: a number, cpu (one per core), gpu (one per GPU) or auto (one per "
                        "GPU, or one per core without GPUs)")
    p.add_argument("--nnodes", default="1",
                   help="nodes in the job: N (or N:N), each naming its --node-rank (or meeting in the rendezvous, see "
                        "--rdzv-backend); or MIN:MAX, elastic: the nodes "
                        "meet at --rdzv-endpoint and get their ranks there, and the workers restart when nodes come "
                        "or go")
    p.add_argument("--node-rank", "--node_rank", type=int, default=None,
                   help="this node's rank among --nnodes N (default 0); not used where the rendezvous assigns the "
                        "node ranks (--nnodes MIN:MAX, --rdzv-backend c10d, or --rdzv-endpoint without --node-rank)")
    p.add_argument("--standalone", action="store_true", help="one node with a store of its own (the default on "
                                                             "one node; taken for torchrun's command lines)")
    p.add_argument("--rdzv-endpoint", "--rdzv_endpoint", default=None,
                   help="HOST[:PORT] of the store: the same as --master-addr and --master-port, or, where the "
                        "rendezvous assigns the node ranks, where the nodes meet (default port 29400); port 0 on "
                        "one node: a free port; ignored with --standalone")
    p.add_argument("--rdzv-backend", "--rdzv_backend", default="static", choices=["static", "c10d"],
                   help="c10d: with --nnodes > 1 the nodes meet at --rdzv-endpoint, which assigns their ranks; "
                        "static: each node names its --node-rank (unless --rdzv-endpoint is given without it)")
    p.add_argument("--rdzv-conf", "--rdzv_conf", default="",
                   help="with --nnodes MIN:MAX, KEY=VALUE,...: join_timeout (seconds to wait for MIN nodes, default "
                        "600), last_call_timeout (seconds with MIN nodes and no new one before a round closes, "
                        "default 30), keep_alive_interval (seconds between heartbeats, default 5), "
                        "keep_alive_max_attempt (heartbeats missed before a node counts as dead, default 3), "
                        "is_host (whether this node hosts the store; default: where the endpoint is local)")
    p.add_argument("--rdzv-id", "--rdzv_id", default=None,
                   help="the job's id (TORCHELASTIC_RUN_ID; default: a new UUID on one node, none on several)")
    p.add_argument("--master-addr", "--master_addr", default=None,
                   help="address of the node hosting rank 0 (default 127.0.0.1 on one node)")
    p.add_argument("--master-port", "--master_port", type=int, default=None,
                   help="store port (default: a free port on one node, 29500 otherwise)")
    p.add_argument("--max-restarts", "--max_restarts", type=int, default=0)
    p.add_argument("--log-dir", "--log_dir", default=None,
                   help="where -r and -t write the workers' logs, in a folder per job (default: a new temporary "
                        "directory)")
    p.add_argument("-r", "--redirects", default="0",
                   help="send streams to log files instead of the console: 0 (none), 1 (stdout), 2 (stderr), 3 "
                        "(both), or per local rank as 0:1,1:3")
    p.add_argument("-t", "--tee", default="0", help="send streams to log files and the console (as -r)")
    p.add_argument("--log-line-prefix-template", "--log_line_prefix_template", default=None,
                   help="prefix of each console line of a tee'd stream, with ${role_name}, ${rank}, ${local_rank} "
                        "and ${hostname} (default: TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, else "
                        "'[${role_name}${local_rank}]:')")
    p.add_argument("--local-ranks-filter", "--local_ranks_filter", default="",
                   help="show only these local ranks' output on the console, as 0,1 (log files keep everything)")
    p.add_argument("--grace", type=float, default=30.0,
                   help="seconds between SIGTERM (or the signal the launcher got) and SIGKILL when stopping")
    p.add_argument("-m", "--module", action="store_true", help="run the script argument as a module, like python -m")
    p.add_argument("--no-python", "--no_python", action="store_true",
                   help="run the script argument as a program of its own, not with python")
    p.add_argument("--run-path", "--run_path", action="store_true",
                   help="taken for torchrun's command lines: the script runs in a fresh interpreter either way")
    p.add_argument("--start-method", "--start_method", default="spawn", choices=["spawn", "fork", "forkserver"],
                   help="taken for torchrun's command lines: workers are always fresh processes")
    p.add_argument("--role", default="default", help="the workers' role name (ROLE_NAME)")
    p.add_argument("--monitor-interval", "--monitor_interval", type=float, default=0.05,
                   help="seconds between looks at the workers' state")
    p.add_argument("script", help="the training script (with -m: the module)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments: everything after the script")
    # ddpc.distributed.launch passes --local-rank=N to the script, as torch.distributed.launch did.
    p.set_defaults(pass_local_rank=False)
    return p


def parse_args(argv, parser=None):
    """The launch that ``argv`` describes (checked; on a bad argument the
    parser exits with status 2), parsed by ``parser`` (default: get_args_parser())."""
    p = parser or get_args_parser()
    a = p.parse_args(argv)
    a.nproc_per_node = _nproc_per_node(p, a.nproc_per_node)
    if a.no_python and a.module:
        p.error("--no-python and -m don't go together")
    if not a.monitor_interval > 0:
        p.error("--monitor-interval must be > 0")
    low, colon, high = a.nnodes.partition(":")
    if not low.isdigit() or (colon and not high.isdigit()) or int(high or low) < int(low):
        p.error(f"--nnodes must be a number N, or MIN:MAX with MIN <= MAX; got {a.nnodes!r}")
    a.min_nodes, a.max_nodes = int(low), int(high or low)
    # As torchrun's c10d rendezvous, which assigns the node ranks: with MIN < MAX,
    # with --rdzv-backend c10d, or with an endpoint and no --node-rank.
    a.elastic = a.min_nodes < a.max_nodes or (a.max_nodes > 1 and (
        a.rdzv_backend == "c10d" or (a.rdzv_endpoint is not None and a.node_rank is None)))
    a.node_rank = a.node_rank or 0
    a.nnodes = a.max_nodes
    a.rdzv_conf = _rdzv_conf(p, a.rdzv_conf)
    if a.standalone and a.nnodes != 1:
        p.error("--standalone is for one node")
    if a.rdzv_endpoint:
        host, _, port = a.rdzv_endpoint.rpartition(":") if ":" in a.rdzv_endpoint else (a.rdzv_endpoint, "", "")
        if (a.master_addr or a.master_port) or (port and not port.isdigit()):
            p.error("--rdzv-endpoint is HOST[:PORT] and replaces --master-addr/--master-port")
        a.master_addr, a.master_port = host, int(port) if port else None
    if a.standalone:  # as torchrun, which then meets at localhost:0 whatever --rdzv-endpoint says
        a.master_addr = a.master_port = None
    if a.master_port == 0:
        if a.nnodes > 1:
            p.error("port 0 (a free port) is for one node: the other nodes could not know it")
        a.master_port = None  # a free port, as torchrun's localhost:0
    if a.nproc_per_node < 1 or a.min_nodes < 1 or not (a.elastic or 0 <= a.node_rank < a.nnodes):
        p.error("need --nproc-per-node >= 1, --nnodes >= 1 and 0 <= --node-rank < --nnodes")
    if a.max_restarts < 0:
        p.error("--max-restarts must be >= 0")
    if a.elastic and a.master_addr is None:
        p.error("--nnodes MIN:MAX needs --rdzv-endpoint (or --master-addr): where the nodes meet (as does "
                "--rdzv-backend c10d on several nodes)")
    if a.nnodes > 1 and a.master_addr is None:
        p.error("--master-addr is required with --nnodes > 1")
    a.redirects = _std(p, "--redirects", a.redirects)
    a.tee = _std(p, "--tee", a.tee)
    if a.local_ranks_filter:
        if not re.fullmatch(r"\d+(,\d+)*", a.local_ranks_filter):
            p.error(f"--local-ranks-filter must be local ranks separated by commas, as 0,1; got "
                    f"{a.local_ranks_filter!r}")
        a.local_ranks_filter = {int(r) for r in a.local_ranks_filter.split(",")}
    else:
        a.local_ranks_filter = None
    if a.log_line_prefix_template is None:
        a.log_line_prefix_template = os.environ.get("TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE") or _PREFIX_TEMPLATE
    return a


def _rdzv_conf(p, text):
    """--rdzv-conf: the settings of the elastic rendezvous, as a dict of CONF_DEFAULTS's keys and is_host."""
    conf = dict(CONF_DEFAULTS, is_host=None)
    for item in filter(None, text.split(",")):
        key, eq, value = item.partition("=")
        key = key.strip()
        if key == "is_host" and value.strip().lower() in ("1", "true", "0", "false"):
            conf[key] = value.strip().lower() in ("1", "true")
            continue
        try:
            number = float(value) if eq and key in CONF_DEFAULTS else None
        except ValueError:
            number = None
        if number is None or not number > 0:
            p.error(f"--rdzv-conf takes KEY=VALUE,... with keys {', '.join(CONF_DEFAULTS)} (numbers > 0) and "
                    f"is_host (true or false); got {item!r}")
        conf[key] = number
    return conf


def _job_log_dir(a, run_id):
    """The job's folder of logs, ``<log dir>/<run id>_<random>``, or None
    where neither -r nor -t sends anything to files."""
    if not any(_bits(std, r) for std in (a.redirects, a.tee) for r in range(a.nproc_per_node)):
        return None
    base = a.log_dir
    if base is None:
        base = tempfile.mkdtemp(prefix="ddpc-run-logs-")
    else:
        os.makedirs(base, exist_ok=True)
    job_dir = os.path.abspath(tempfile.mkdtemp(prefix=f"{run_id}_", dir=base))
    if a.log_dir is None:
        print(f"ddpc-run: the workers' logs go to {job_dir}", file=sys.stderr, flush=True)
    return job_dir


def _attempt_dir(job_dir, restart):
    """The folder of an attempt's logs and error files: in ``job_dir`` (a
    restart's own), or a temporary one where there is no job folder."""
    if job_dir is None:
        return tempfile.mkdtemp(prefix="ddpc-run-errors-")
    path = os.path.join(job_dir, f"attempt_{restart}")
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)
    return path


def _run_group(a, restart, interrupted, run_id, job_dir, rnd=None, rdzv=None):
    """Runs one attempt; returns (exit status, failed worker or None). With
    --nnodes MIN:MAX ``rnd`` is the rendezvous round it runs in, which
    ``rdzv`` is asked about as the workers run: the status is None where the
    workers were stopped for a new round."""
    if rnd is None:
        port = a.master_port if a.master_port is not None else (free_port() if a.nnodes == 1 else 29500)
        rnd = Round(0, a.node_rank, a.nnodes, a.master_addr or "127.0.0.1", port, restart, None)
    token = os.environ.get("DDPC_STORE_TOKEN") or (new_token() if a.nnodes == 1 else "")
    world = rnd.nnodes * a.nproc_per_node
    if a.no_python:
        program = [a.script]
    else:
        program = [sys.executable, "-u"] + (["-m", a.script] if a.module else [a.script])
    attempt_dir = _attempt_dir(job_dir, restart)
    workers = []
    try:
        for local_rank in range(a.nproc_per_node):
            rank = rnd.node_rank * a.nproc_per_node + local_rank
            log_dir = os.path.join(attempt_dir, str(local_rank))
            os.mkdir(log_dir)
            env = dict(os.environ, RANK=str(rank), LOCAL_RANK=str(local_rank), WORLD_SIZE=str(world),
                       LOCAL_WORLD_SIZE=str(a.nproc_per_node), GROUP_RANK=str(rnd.node_rank),
                       GROUP_WORLD_SIZE=str(rnd.nnodes), ROLE_NAME=a.role, ROLE_RANK=str(rank),
                       ROLE_WORLD_SIZE=str(world), MASTER_ADDR=rnd.master_addr, MASTER_PORT=str(rnd.master_port),
                       DDPC_STORE_TOKEN=token, DDPC_RESTART_COUNT=str(restart),
                       TORCHELASTIC_RESTART_COUNT=str(restart), TORCHELASTIC_MAX_RESTARTS=str(a.max_restarts),
                       TORCHELASTIC_RUN_ID=run_id, TORCHELASTIC_ERROR_FILE=os.path.join(log_dir, "error.json"))
            if not user_chose_threads():
                threads = str(per_rank_threads(a.nproc_per_node))
                env.update(OMP_NUM_THREADS=threads, OPENBLAS_NUM_THREADS=threads, DDPC_NUM_THREADS=threads)
            cmd = program + ([f"--local-rank={local_rank}"] if a.pass_local_rank else []) + a.args
            prefix = Template(a.log_line_prefix_template).safe_substitute(
                role_name=a.role, rank=rank, local_rank=local_rank, hostname=socket.gethostname())
            shown = a.local_ranks_filter is None or local_rank in a.local_ranks_filter
            workers.append(_Worker(cmd, env, local_rank, rank, log_dir, _bits(a.redirects, local_rank),
                                   _bits(a.tee, local_rank), shown, prefix))
        while True:
            if interrupted.is_set():
                stop_all(workers, a.grace, interrupted.signum)
                return 128 + interrupted.signum, None
            codes = [w.proc.poll() for w in workers]
            failed = [(w, c) for w, c in zip(workers, codes) if c not in (None, 0)]
            if failed:
                stop_all(workers, a.grace)
                w, code = _first_failure(workers, codes)
                w.join_readers(timeout=2)
                _report(w, code, sys.stderr)
                return 1, w
            if all(c == 0 for c in codes):
                for w in workers:
                    w.join_readers(timeout=2)
                remove_shm_segments(w.proc.pid for w in workers)
                return 0, None
            reason = rdzv.changed(rnd) if rdzv is not None else None
            if reason:
                print(f"ddpc-run: stopping the workers of round {rnd.number}: {reason}", file=sys.stderr, flush=True)
                stop_all(workers, a.grace)
                return None, None
            time.sleep(a.monitor_interval)
    except BaseException:
        stop_all(workers, a.grace)
        raise
    finally:
        if job_dir is None:
            shutil.rmtree(attempt_dir, ignore_errors=True)


def run(a):
    """Runs the launch that parse_args() gave; returns the exit status."""
    if a.nnodes > 1 and not os.environ.get("DDPC_STORE_TOKEN"):
        print("ddpc-run: warning: DDPC_STORE_TOKEN is not set; with several nodes set the same secret on every "
              "node, or the store accepts any client", file=sys.stderr)
    # As torchrun's: a single-node job without an id gets a fresh one (it names the job's log folder).
    run_id = a.rdzv_id or (str(uuid.uuid4()) if a.nnodes == 1 else "none")
    try:
        job_dir = _job_log_dir(a, run_id)
    except OSError as e:
        print(f"ddpc-run: cannot make the folder for the workers' logs: {e}", file=sys.stderr)
        return 1
    interrupted = threading.Event()
    interrupted.signum = signal.SIGINT  # the first signal caught: passed on to the workers

    def on_signal(signum, frame):
        if not interrupted.is_set():
            interrupted.signum = signum
        interrupted.set()

    # A hangup (the terminal closed) or a quit stops the workers in order too:
    # left to the default action, the launcher would die at once and
    # PR_SET_PDEATHSIG would kill the workers, orphaning what they started.
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, on_signal)
    if a.elastic:
        return _run_elastic(a, interrupted, run_id, job_dir)
    for restart in range(a.max_restarts + 1):
        status, failed = _run_group(a, restart, interrupted, run_id, job_dir)
        if status == 0 or interrupted.is_set():
            if interrupted.is_set():
                print("ddpc-run: interrupted; all workers stopped", file=sys.stderr)
            return status
        if restart < a.max_restarts:
            print(f"ddpc-run: restarting the group ({restart + 1}/{a.max_restarts})", file=sys.stderr, flush=True)
    print(f"ddpc-run: giving up: rank {failed.rank} failed", file=sys.stderr)
    return status


def _run_elastic(a, interrupted, run_id, job_dir):
    """Runs the workers of --nnodes MIN:MAX round after round of the
    rendezvous until they succeed, fail past --max-restarts, the job ends on
    another node or the rendezvous fails; returns the exit status."""
    port = a.master_port if a.master_port is not None else 29400  # torchrun's c10d port
    try:
        rdzv = Rendezvous(a.master_addr, port, run_id, a.min_nodes, a.max_nodes, a.rdzv_conf, a.monitor_interval)
    except DistError as e:
        print(f"ddpc-run: cannot reach the rendezvous store at {a.master_addr}:{port}: {e}", file=sys.stderr)
        return 1
    try:
        while True:
            rnd = rdzv.next_round(interrupted)
            if rnd is None:
                print("ddpc-run: interrupted; all workers stopped", file=sys.stderr)
                return 128 + interrupted.signum
            print(f"ddpc-run: round {rnd.number} of rendezvous {run_id}: node rank {rnd.node_rank} of "
                  f"{rnd.nnodes}", file=sys.stderr, flush=True)
            status, failed = _run_group(a, rnd.restarts, interrupted, run_id, job_dir, rnd, rdzv)
            if interrupted.is_set():
                print("ddpc-run: interrupted; all workers stopped", file=sys.stderr)
                return status
            if status == 0:
                rdzv.finish(rnd)
                return 0
            if failed is None:
                continue
            if not rdzv.fail(rnd, a.max_restarts):
                print(f"ddpc-run: giving up: rank {failed.rank} failed", file=sys.stderr)
                return status
            print(f"ddpc-run: restarting the group in a new round ({rnd.restarts + 1}/{a.max_restarts})",
                  file=sys.stderr, flush=True)
    except RendezvousClosed as e:
        print(f"ddpc-run: the job {'finished' if e.finished else 'was given up'} on another node"
              f"{'' if e.finished else f': {e}'}", file=sys.stderr)
        return 0 if e.finished else 1
    except RendezvousError as e:
        print(f"ddpc-run: rendezvous {run_id}: {e}", file=sys.stderr)
        return 1
    except DistError as e:
        print(f"ddpc-run: lost the rendezvous store at {a.master_addr}:{port}: {e}", file=sys.stderr)
        return 1
    finally:
        rdzv.leave()


def main(args=None):
    """ddpc-run's command line: ``args`` (default sys.argv[1:]); returns the exit status."""
    return run(parse_args(sys.argv[1:] if args is None else args))


if __name__ == "__main__":
    sys.exit(main())
