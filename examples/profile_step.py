"""Where a training step spends its time: ddpc.profiler over a few steps,
printed as a table (per module, backward node, optimizer step and data
loader batch) and written as a Chrome trace for Perfetto or chrome://tracing.

    python examples/profile_step.py

The schedule skips step 0 (wait) and step 1 (warmup) and records steps 2 to
4; the trace lands in --trace-dir (a new temporary directory by default).
"""

import argparse
import tempfile

import ddpc
from ddpc import nn
from ddpc.data import DataLoader, TensorDataset
from ddpc.profiler import ProfilerActivity, profile, record_function, schedule, tensorboard_trace_handler

from common import make_blobs, make_model


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trace-dir", default=None, help="where the Chrome trace goes")
    args = parser.parse_args()
    trace_dir = args.trace_dir or tempfile.mkdtemp(prefix="ddpc-profile-")

    X, y = make_blobs()
    model = make_model()
    optimizer = ddpc.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(TensorDataset(X, y), batch_size=64, shuffle=True)
    steps = schedule(wait=1, warmup=1, active=3, repeat=1)
    with profile(activities=[ProfilerActivity.CPU], schedule=steps, record_shapes=True,
                 on_trace_ready=tensorboard_trace_handler(trace_dir, worker_name="profile_step")) as prof:
        for step, (xb, yb) in enumerate(loader):
            if step == 5:
                break
            optimizer.zero_grad()
            with record_function("forward"):
                loss = loss_fn(model(xb), yb)
            with record_function("backward"):
                loss.backward()
            optimizer.step()
            prof.step()
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))
    print(f"Chrome trace written to {trace_dir} (open it in https://ui.perfetto.dev or chrome://tracing)")


if __name__ == "__main__":
    main()
