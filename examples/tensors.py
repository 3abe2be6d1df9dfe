"""Tensors on the host and (when present) a GPU, and zero-copy exchange with numpy.

    python examples/tensors.py
"""

import numpy as np

import ddpc


def main():
    ddpc.manual_seed(0)
    device = "cuda" if ddpc.cuda.is_available() else "cpu"
    x = ddpc.randn(4, 3, device=device)
    y = (x * 2 + 1).to(ddpc.bfloat16)
    print(f"x on {x.device}: mean {x.mean().item():+.4f}; y is {y.dtype} on {y.device}")

    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    t = ddpc.from_numpy(a)  # shares a's memory
    t += 10
    print("numpy sees the in-place add:", a.tolist())
    print("round trip through DLPack:", np.from_dlpack(t).sum())


if __name__ == "__main__":
    main()
