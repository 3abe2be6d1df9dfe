"""ddpc.spawn from a real Jupyter notebook: a cell defines a function and
runs it on two ranks with ddpc.spawn; the results come back to the kernel."""

import os

import pytest

import ddpc

nbformat = pytest.importorskip("nbformat", reason="nbformat is not installed")
nbclient = pytest.importorskip("nbclient", reason="nbclient is not installed")
pytest.importorskip("ipykernel", reason="ipykernel is not installed")

# The kernel imports the ddpc under test (from the checkout, or site-packages).
CELLS = [
    f"import sys; sys.path.insert(0, {os.path.dirname(os.path.dirname(ddpc.__file__))!r})\nimport ddpc",
    """\
def train(rank, scale):
    import numpy as np
    import ddpc.distributed as dist
    dist.init_process_group()
    g = np.full(4, float(rank + 1)) * scale
    dist.all_reduce(g, op=dist.ReduceOp.AVG)
    return rank, dist.get_world_size(), g.tolist()

results = ddpc.spawn(train, args=(2.0,), nprocs=2)
print(results)""",
    """\
def broken(rank):
    if rank == 1:
        raise RuntimeError("cell function failed on purpose")
    return rank

try:
    ddpc.spawn(broken, nprocs=2)
    print("NO ERROR")
except Exception as e:
    print("RAISED", type(e).__name__, "rank", e.rank, "on purpose" in str(e))""",
]


def test_spawn_from_a_notebook_cell():
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(src) for src in CELLS]
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3")
    client.execute()
    out = "".join(o.get("text", "") for o in nb.cells[1].outputs)
    assert out.strip() == "[(0, 2, [3.0, 3.0, 3.0, 3.0]), (1, 2, [3.0, 3.0, 3.0, 3.0])]"
    out = "".join(o.get("text", "") for o in nb.cells[2].outputs)
    assert out.strip() == "RAISED ProcessRaisedException rank 1 True"
