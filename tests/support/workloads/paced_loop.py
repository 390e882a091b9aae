"""A training loop that sleeps after every step, as a script pacing itself (a
rate limit, a poll for new data, a "let the GPU cool" pause) does: ``--pause``
seconds of ``time.sleep`` per step, none with ``--pause 0`` (the fix).

Ground truth (steps and their times) goes to the file named by ``--truth``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from aitop.demo.truth import Truth
from torch import nn


def train(truth: Truth, pause_s: float, deadline: float) -> None:
    model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    while time.time() < deadline:
        x = torch.randn(64, 256)
        loss = (model(x) - x).pow(2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        truth.steps += 1
        truth.maybe_write()
        if pause_s:
            time.sleep(pause_s)


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--truth", type=Path, required=True)
    parser.add_argument("--duration", type=float, default=120.0)
    parser.add_argument("--pause", type=float, default=0.02)
    args = parser.parse_args()
    torch.set_num_threads(1)
    truth = Truth(args.truth)
    train(truth, args.pause, time.time() + args.duration)
    truth.maybe_write(force=True)
