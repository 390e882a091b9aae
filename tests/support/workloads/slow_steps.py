"""Slow steps, as a large model trains: ``for step in range(...)`` where each
step takes ``--step-s`` seconds (0.5 to 10 of them a second is usual for
billion-parameter models), most of it waiting on the device
(``device_time.DeviceTime``). The counter is the loop's own ``step``.
``--faster-after S``: steps take half as long from S seconds after the start
(a pace that changes late in a watch). Ground truth (each step's end) goes to
the file named by ``--truth``.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
from aitop.demo.truth import Truth
from device_time import DeviceTime
from torch import nn
from torch.utils.data import DataLoader, TensorDataset


def train(loader: DataLoader, step_s: float, truth: Truth, deadline: float,
          faster_at: float) -> None:
    model = nn.Sequential(nn.Linear(256, 1024), nn.GELU(), DeviceTime(0.35 * step_s, 0.55 * step_s),
                          nn.Linear(1024, 256))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batches = iter(loader)
    for step in range(1_000_000):
        try:
            x, y = next(batches)
        except StopIteration:
            batches = iter(loader)
            x, y = next(batches)
        for group in optimizer.param_groups:  # linear warm-up over the first 100 steps
            group["lr"] = 1e-4 * min(1.0, (step + 1) / 100)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        truth.steps += 1
        truth.maybe_write(force=True)
        if time.time() > deadline:
            break
        if time.time() >= faster_at:
            step_s /= 2
            faster_at = float("inf")
            for layer in model:
                if isinstance(layer, DeviceTime):
                    layer.forward_s, layer.backward_s = layer.forward_s / 2, layer.backward_s / 2
        time.sleep(0.1 * step_s)  # the host's own share: logging, the scheduler


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--truth", type=Path, required=True)
    parser.add_argument("--duration", type=float, default=120.0)
    parser.add_argument("--step-s", type=float, default=2.0)
    parser.add_argument("--faster-after", type=float, default=float("inf"))
    args = parser.parse_args()
    torch.set_num_threads(1)
    data = TensorDataset(torch.randn(4096, 256), torch.randn(4096, 256))
    truth = Truth(args.truth)
    train(DataLoader(data, batch_size=64, shuffle=True), args.step_s, truth,
          time.time() + args.duration, time.time() + args.faster_after)
