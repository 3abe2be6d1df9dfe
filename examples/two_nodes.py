"""Two-node launch, simulated on one machine.

On two real machines (node A at 10.0.0.1, reachable from node B), run one
command on each, the same script, the same port:

    node A:  DDPC_STORE_TOKEN=<shared secret> ddpc-run --nnodes 2 --node-rank 0 --nproc-per-node 2 --master-addr 10.0.0.1 --master-port 29500 train.py
    node B:  DDPC_STORE_TOKEN=<shared secret> ddpc-run --nnodes 2 --node-rank 1 --nproc-per-node 2 --master-addr 10.0.0.1 --master-port 29500 train.py

Ranks on one node reduce through shared memory and the nodes' leaders through
a TCP ring. This script starts both "nodes" as two ddpc-run processes on
localhost (each thinking it is a separate host) and runs examples/ddp_run.py:

    python examples/two_nodes.py
"""

import os
import secrets
import socket
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main(nproc_per_node=1, timeout=300):
    port = str(free_port())
    token = secrets.token_hex(16)  # both nodes' launchers must present the same store token
    procs = []
    for node in range(2):
        # a distinct host id per simulated node makes the ranks use the inter-host (TCP) path
        env = dict(os.environ, DDPC_HOST_ID=f"simulated-node-{node}", DDPC_STORE_TOKEN=token)
        cmd = [sys.executable, "-m", "ddpc.run", "--nnodes", "2", "--node-rank", str(node), "--nproc-per-node",
               str(nproc_per_node), "--master-addr", "127.0.0.1", "--master-port", port,
               os.path.join(HERE, "ddp_run.py")]
        procs.append(subprocess.Popen(cmd, env=env))
    codes = [p.wait(timeout=timeout) for p in procs]
    print("node exit codes:", codes)
    return max(codes)


if __name__ == "__main__":
    sys.exit(main())
