"""``for x, y in loader:``: a training loop that keeps no step counter of its own.

Epochs run until the deadline; ``--workers`` DataLoader workers (none: batches
are built in the loop's own process), ``--batches`` batches an epoch (a short
epoch makes the DataLoader start a new iterator often), ``--no-persistent``
workers that start afresh each epoch (the DataLoader's default), ``--read-ms``
of storage wait per sample (the workers then fetch all the time),
``--val-batches`` batches of validation after each epoch, from a second
DataLoader with as many workers (under ``no_grad``, not counted as steps).
Ground truth (steps and their times) goes to the file named by ``--truth``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from aitop.demo.truth import Truth
from torch import nn
from torch.utils.data import DataLoader, Dataset


class Features(Dataset):
    """Random features with a little pure-Python work per sample, as a decoder has,
    and ``read_s`` of waiting per sample, as a read from storage has."""

    def __init__(self, size: int, read_s: float = 0.0) -> None:
        self.size = size
        self.read_s = read_s

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        acc = 0
        for k in range(400):
            acc += k * k
        if self.read_s:
            time.sleep(self.read_s)
        return torch.randn(128), torch.randn(16)


def train(loader: DataLoader, truth: Truth, deadline: float,
          val_loader: DataLoader | None = None) -> None:
    model = nn.Sequential(nn.Linear(128, 256), nn.ReLU(), nn.Linear(256, 16))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    loss_fn = nn.MSELoss()
    while time.time() < deadline:
        for x, y in loader:
            optimizer.zero_grad()
            loss = loss_fn(model(x), y)
            loss.backward()
            optimizer.step()
            truth.steps += 1
            truth.maybe_write()
            time.sleep(0.03)
        if val_loader is not None:
            with torch.no_grad():
                for x, y in val_loader:
                    loss_fn(model(x), y)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--truth", type=Path, required=True)
    parser.add_argument("--duration", type=float, default=120.0)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--batches", type=int, default=100_000)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--no-persistent", action="store_true")
    parser.add_argument("--read-ms", type=float, default=0.0)
    parser.add_argument("--val-batches", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    loader = DataLoader(Features(args.batches * args.batch_size, args.read_ms / 1000),
                        batch_size=args.batch_size,
                        shuffle=True, num_workers=args.workers,
                        persistent_workers=args.workers > 0 and not args.no_persistent)
    val_loader = DataLoader(Features(args.val_batches * args.batch_size, args.read_ms / 1000),
                            batch_size=args.batch_size, num_workers=args.workers,
                            persistent_workers=args.workers > 0 and not args.no_persistent
                            ) if args.val_batches else None
    truth = Truth(args.truth)
    train(loader, truth, time.time() + args.duration, val_loader)
    truth.maybe_write(force=True)
