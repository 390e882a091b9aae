"""A loop shaped like pytorch/examples' word_language_model's evaluation loop:
``for i in range(0, n, bptt)``, so its only integer local ``i`` is the offset
into the data, stepping by ``bptt``; it prints ``| epoch 1 |   40/  300 batches
| ...`` (``i // bptt``) every few batches.

The frame's counter reads ``bptt`` times the step rate; the printed count is the
step's.
Ground truth (steps and their times) goes to the file named by ``--truth``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from aitop.demo.truth import Truth
from torch import nn

BPTT = 35


def train(truth: Truth, deadline: float) -> None:
    model = nn.Sequential(nn.Linear(512, 1024), nn.Tanh(), nn.Linear(1024, 512))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    data = torch.randn(300 * BPTT + 1, 64, 512)
    epoch = 0
    while time.time() < deadline:
        epoch += 1
        start = time.perf_counter()
        for i in range(0, data.size(0) - 1, BPTT):
            x = data[i:i + BPTT].reshape(-1, 512)
            loss = (model(x) - x).pow(2).mean()
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            truth.steps += 1
            truth.maybe_write()
            if (i // BPTT) % 5 == 0 and i > 0:
                ms = (time.perf_counter() - start) * 1000 / 5
                print(f"| epoch {epoch:3d} | {i // BPTT:5d}/{300:5d} batches | ms/batch {ms:5.2f} "
                      f"| loss {loss.item():5.2f}", flush=True)
                start = time.perf_counter()
            if time.time() >= deadline:
                break


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--truth", type=Path, required=True)
    parser.add_argument("--duration", type=float, default=120.0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    truth = Truth(args.truth)
    train(truth, time.time() + args.duration)
    truth.maybe_write(force=True)
