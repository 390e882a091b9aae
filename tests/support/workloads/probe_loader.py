"""A tiny CPU training loop with a multi-process DataLoader, for the probe tests.

Usage: probe_loader.py --ctx {fork,spawn,forkserver} [--workers N] [--pin] [--token T]
Prints ``READY`` once the first batch came back from the workers (so they exist
and carry their ``pt_data_worker`` name), then trains until killed. ``--token`` is
accepted and ignored: tests check that it never leaks out of the probes.
"""

from __future__ import annotations

import argparse
import time

import torch
from torch.utils.data import DataLoader, Dataset


class Numbers(Dataset):
    """Random features with a little pure-Python work, so workers use CPU."""

    def __len__(self) -> int:
        return 10_000_000

    def __getitem__(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        acc = 0
        for k in range(3000):
            acc += k * k
        return torch.randn(32), torch.tensor(i % 2)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctx", default="fork", choices=["fork", "spawn", "forkserver"])
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--pin", action="store_true")
    ap.add_argument("--token", default=None)
    args = ap.parse_args()
    torch.set_num_threads(1)
    model = torch.nn.Linear(32, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    loader = DataLoader(
        Numbers(),
        batch_size=16,
        num_workers=args.workers,
        multiprocessing_context=args.ctx if args.workers else None,
        pin_memory=args.pin,
        persistent_workers=args.workers > 0,
    )
    ready = False
    for x, y in loader:
        loss = torch.nn.functional.cross_entropy(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        if not ready:
            print("READY", flush=True)
            ready = True
        time.sleep(0.05)


if __name__ == "__main__":
    main()
