"""DataParallel: one process, a replica per device, inputs split along dim 0.

    python examples/data_parallel.py

Uses every GPU when there are several, else two CPU replicas.
"""

import ddpc
from ddpc import nn
from ddpc.data import DataLoader, TensorDataset

from common import accuracy, make_blobs, make_model


def main(epochs=5):
    X, y = make_blobs()
    n = ddpc.cuda.device_count()
    devices = list(range(n)) if n > 1 else ["cpu", "cpu"]
    model = nn.DataParallel(make_model(), device_ids=devices)
    optimizer = ddpc.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(TensorDataset(X, y), batch_size=128, shuffle=True)
    for epoch in range(epochs):
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(xb), yb.to(model.output_device))
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}  loss {loss.item():.4f}")
    model.eval()
    return accuracy(model, X, y)


if __name__ == "__main__":
    print(f"accuracy {main():.3f}")
