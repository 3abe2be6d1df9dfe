"""The single-process baseline every data-parallel example is compared with.

    python examples/single_process.py
"""

import ddpc
from ddpc import nn
from ddpc.data import DataLoader, TensorDataset

from common import accuracy, make_blobs, make_model


def main(epochs=5):
    X, y = make_blobs()
    model = make_model()
    optimizer = ddpc.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    loss_fn = nn.CrossEntropyLoss()
    loader = DataLoader(TensorDataset(X, y), batch_size=64, shuffle=True)
    for epoch in range(epochs):
        for xb, yb in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(xb), yb)
            loss.backward()
            optimizer.step()
        print(f"epoch {epoch}  loss {loss.item():.4f}  accuracy {accuracy(model, X, y):.3f}")
    return accuracy(model, X, y)


if __name__ == "__main__":
    main()
