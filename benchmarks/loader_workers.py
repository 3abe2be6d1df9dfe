"""Loader throughput for a generic Dataset whose ``__getitem__`` does Python work per sample.

The data set is CIFAR-shaped (32x32x3 uint8 images and int64 labels in
memory); each sample is augmented in numpy as a typical image pipeline does
(random crop after 4 pixels of padding, random horizontal flip, float32
normalisation, HWC -> CHW), so loading is bound by the interpreter. ddpc's
DataLoader reads it in the caller (``num_workers=0``), in its background
thread (``num_workers`` left out) and in worker processes; PyTorch's
DataLoader (when torch is importable) with the same numbers of workers. The
baseline is the same samples fetched and stacked in a plain loop, no loader.
Workers are persistent, so epochs are timed without their start-up.

    python benchmarks/loader_workers.py [--samples 32768] [--batch 128] [--workers 2 4]
"""

import argparse

import numpy as np

from common import import_torch, machine, print_table

torch = import_torch()

import ddpc  # noqa: E402,F401 - after torch, see import_torch
from ddpc.data import DataLoader  # noqa: E402

from loader import epoch_rates  # noqa: E402

MEAN = np.array([125.3, 123.0, 113.9], np.float32)
STD = np.array([63.0, 62.1, 66.7], np.float32)


class Augmented:
    """CIFAR-shaped images, each read with a random padded crop, a random flip and normalisation."""

    def __init__(self, n, seed=0):
        rng = np.random.default_rng(seed)
        self.images = rng.integers(0, 256, size=(n, 32, 32, 3), dtype=np.uint8)
        self.labels = rng.integers(0, 10, size=n).astype(np.int64)

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, i):
        padded = np.pad(self.images[i], ((4, 4), (4, 4), (0, 0)), mode="reflect")
        top, left, flip = np.random.randint(0, 9), np.random.randint(0, 9), np.random.rand() < 0.5
        img = padded[top:top + 32, left:left + 32]
        if flip:
            img = img[:, ::-1]
        img = (img.astype(np.float32) - MEAN) / STD
        return np.ascontiguousarray(img.transpose(2, 0, 1)), self.labels[i]


def plain_epoch(ds, batch):
    def run():
        for start in range(0, len(ds), batch):
            samples = [ds[i] for i in range(start, min(start + batch, len(ds)))]
            np.stack([s[0] for s in samples]), np.array([s[1] for s in samples])
    return run


def loader_epoch(loader):
    def run():
        for _ in loader:
            pass
    return run


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--samples", type=int, default=32768)
    p.add_argument("--batch", type=int, default=128)
    p.add_argument("--workers", type=int, nargs="+", default=[2])
    p.add_argument("--repeat", type=int, default=5)
    args = p.parse_args()
    print(f"machine: {machine()}")
    ds = Augmented(args.samples)
    print(f"data: {args.samples} CIFAR-shaped samples, augmented per sample in numpy; batch {args.batch}")

    cases = [("plain loop, no loader (baseline)", plain_epoch(ds, args.batch)),
             ("ddpc, num_workers=0 (caller)", loader_epoch(DataLoader(ds, batch_size=args.batch, num_workers=0))),
             ("ddpc, background thread (default)", loader_epoch(DataLoader(ds, batch_size=args.batch)))]
    for w in args.workers:
        cases.append((f"ddpc, num_workers={w}", loader_epoch(
            DataLoader(ds, batch_size=args.batch, num_workers=w, persistent_workers=True))))
    if torch is not None:
        from torch.utils.data import DataLoader as TorchLoader
        cases.append(("torch, num_workers=0", loader_epoch(TorchLoader(ds, batch_size=args.batch))))
        for w in args.workers:
            cases.append((f"torch, num_workers={w}", loader_epoch(
                TorchLoader(ds, batch_size=args.batch, num_workers=w, persistent_workers=True))))
    rates = epoch_rates([(run, args.samples) for _, run in cases], args.repeat)
    base = rates[0]
    torch_rate = {name.split("=")[1]: r for (name, _), r in zip(cases, rates) if name.startswith("torch")}
    rows = []
    for (name, _), rate in zip(cases, rates):
        same = torch_rate.get(name.split("=")[1].split(" ")[0]) if name.startswith("ddpc, num_workers") else None
        rows.append((name, f"{rate:,.0f}", f"{rate / base:.2f}", "" if same is None else f"{rate / same:.2f}"))
    print_table(["path", "samples/s", "vs plain loop", "vs torch, same workers"], rows)
    if torch is None:
        print("PyTorch not importable: no PyTorch comparison")


if __name__ == "__main__":
    main()
