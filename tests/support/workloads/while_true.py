"""``while True:`` around a large model's step, with no step counter: the loop
stops on a wall-clock budget, as a time-boxed run does. Each step spends most of
its time waiting on the device (``device_time.DeviceTime``), ``--step-s`` in all.
Ground truth (each step's end) goes to the file named by ``--truth``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from aitop.demo.truth import Truth
from device_time import DeviceTime
from torch import nn


def train(step_s: float, truth: Truth, deadline: float) -> None:
    model = nn.Sequential(nn.Linear(512, 512), nn.GELU(), DeviceTime(0.3 * step_s, 0.5 * step_s),
                          nn.Linear(512, 512))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    while True:
        x = torch.randn(64, 512)
        loss = model(x).pow(2).mean()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
        truth.steps += 1
        truth.maybe_write(force=True)
        if time.time() > deadline:
            break
        time.sleep(0.2 * step_s)  # host-side work between steps: logging, a scheduler


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--truth", type=Path, required=True)
    parser.add_argument("--duration", type=float, default=120.0)
    parser.add_argument("--step-s", type=float, default=0.7)
    args = parser.parse_args()
    torch.set_num_threads(1)
    truth = Truth(args.truth)
    train(args.step_s, truth, time.time() + args.duration)
