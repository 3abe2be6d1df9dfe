"""Optional: ddpc-run's logs against torchrun's (skipped when torch is not
installed): for the same script and -r/-t/--local-ranks-filter/--role/
prefix flags, the workers' lines on the console and the log files under the
job's folder; the error of group queries before init_process_group; the
stores' key-value semantics (compare_set, add, PrefixStore's keys).

Each group runs in a child process that imports torch before ddpc (see
test_nn_extra_torch.py) and fails there, printing what differs.
"""

from procs import run_torch_group, torch_group_test

# Each line in one write: the workers share the launcher's console, and a
# line printed in pieces (print's arguments, unbuffered stderr) can be split
# by the other worker's.
PRINTS = """
import os, sys
sys.stdout.write(f"out {os.environ['LOCAL_RANK']}\\n")
sys.stderr.write(f"err {os.environ['LOCAL_RANK']}\\n")
"""

FLAG_SETS = [
    ["-t", "3"],
    ["-r", "0:1,1:2", "-t", "0:2"],
    ["-r", "3"],
    ["-t", "3", "--local-ranks-filter", "0"],
    ["--local-ranks-filter", "1"],
    ["--role", "trainer", "-t", "1"],
    ["-t", "2", "--log-line-prefix-template", "${rank}|"],
]


def _launch(module, flags, folder, with_log_dir):
    """(the workers' console lines on stdout and on stderr, sorted; the log
    files under the job's folder, relative, with their texts)."""
    import os
    import re
    import subprocess
    import sys

    os.makedirs(folder)
    script = os.path.join(folder, "job.py")
    with open(script, "w") as f:
        f.write(PRINTS)
    logs = os.path.join(folder, "logs")
    cmd = [sys.executable, "-m", module, "--nproc-per-node", "2", *flags]
    cmd += ["--log-dir", logs, script] if with_log_dir else [script]
    # TMPDIR: the temporary log folders that both make without --log-dir go where the caller removes them.
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=folder,
                         env=dict(os.environ, TMPDIR=folder))
    assert res.returncode == 0, f"{module} {flags}: {res.stderr}"

    def worker_lines(text):  # launcher messages and warnings left out
        return sorted(line for line in text.splitlines() if re.search(r"(out|err) \d$", line))

    files = {}
    for root, _, names in os.walk(logs):
        for name in names:
            if name.endswith(".log"):
                path = os.path.join(root, name)
                with open(path) as f:
                    files[os.path.relpath(path, logs).split(os.sep, 1)[1]] = f.read()
    return worker_lines(res.stdout), worker_lines(res.stderr), files


def _console_and_log_files(np, torch, ddpc):
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        for i, flags in enumerate(FLAG_SETS):
            for with_log_dir in (True, False):
                want = _launch("torch.distributed.run", flags, f"{tmp}/torch{i}{with_log_dir}", with_log_dir)
                got = _launch("ddpc.run", flags, f"{tmp}/ddpc{i}{with_log_dir}", with_log_dir)
                assert got == want, f"{flags} (log dir: {with_log_dir}): ddpc-run gives {got}, torchrun {want}"


def _queries_before_init(np, torch, ddpc):
    import torch.distributed as tdist

    import ddpc.distributed as dist

    for name in ("get_rank", "get_world_size", "get_backend", "barrier"):
        errors = []
        for lib in (tdist, dist):
            try:
                getattr(lib, name)()
            except Exception as e:
                errors.append(e)
        assert len(errors) == 2, f"{name}: {errors}"
        assert isinstance(errors[1], type(errors[0])) and str(errors[1]) == str(errors[0]), (name, errors)
    for lib in (tdist, dist):
        assert lib.get_rank(lib.GroupMember.NON_GROUP_MEMBER) == -1
        assert lib.get_world_size(lib.GroupMember.NON_GROUP_MEMBER) == -1


def _store_calls(store):
    """What a sequence of calls on ``store`` returns, by call."""
    out = {"cas missing": store.compare_set("k", "", "v1"), "cas other": store.compare_set("k", "x", "v2"),
           "cas match": store.compare_set("k", "v1", "v3"), "cas missing, expected": store.compare_set("m", "x", "y"),
           "check after": store.check(["m"]), "add": store.add("n", 5), "add again": store.add("n", -2),
           "counter": store.get("n")}
    store.set("s", "text")
    out.update({"get": store.get("s"), "get cas'd": store.get("k"), "num_keys": store.num_keys(),
                "delete": store.delete_key("s"), "delete again": store.delete_key("s"),
                "check": store.check(["k", "n"])})
    return out


def _store_semantics(np, torch, ddpc):
    import os
    import tempfile

    import torch.distributed as tdist

    import ddpc.distributed as dist

    with tempfile.TemporaryDirectory() as tmp:
        for kind in ("HashStore", "FileStore", "PrefixStore"):
            results = []
            for i, lib in enumerate((tdist, dist)):
                if kind == "HashStore":
                    store = lib.HashStore()
                elif kind == "FileStore":
                    store = lib.FileStore(os.path.join(tmp, f"store{i}"), 1)
                else:
                    base = lib.HashStore()
                    store = lib.PrefixStore("a", lib.PrefixStore("b", base))
                results.append(_store_calls(store))
                if kind == "PrefixStore":
                    results[-1]["under both prefixes"] = base.get("b/a/k")
                if kind == "FileStore":
                    # PyTorch's counts a key of its own bookkeeping and says a missing key was deleted.
                    del results[-1]["num_keys"], results[-1]["delete again"]
            assert results[1] == results[0], f"{kind}: ddpc {results[1]}, torch {results[0]}"


GROUPS = {"console_and_log_files": _console_and_log_files, "queries_before_init": _queries_before_init,
          "store_semantics": _store_semantics}


test_matches_pytorch = torch_group_test(__file__, GROUPS)


if __name__ == "__main__":
    run_torch_group(GROUPS)
