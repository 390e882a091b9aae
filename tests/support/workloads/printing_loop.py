"""A script whose training loop runs at module level (its variables are globals,
which py-spy's locals do not show) and prints its progress every step: plainly
(``step 120 | loss 0.8312 | 41.7 ms``) or through ``logging`` with a prefix
(``2024-05-01 12:00:01,234 [rank0]: INFO step 120 | loss ...``). Its output is
whatever the caller made of stdout: a file, or a pipe to ``tee`` or a timestamper.
Ground truth (steps and their times) goes to the file named by ``--truth``.
"""

from __future__ import annotations

import argparse
import logging
import sys
import time
from pathlib import Path

import torch
from aitop.demo.truth import Truth
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--truth", type=Path, required=True)
parser.add_argument("--duration", type=float, default=120.0)
parser.add_argument("--style", choices=("print", "logging"), default="print")
args = parser.parse_args()
torch.set_num_threads(1)
logging.basicConfig(stream=sys.stdout, level=logging.INFO,
                    format="%(asctime)s [rank0]: %(levelname)s %(message)s")
log = logging.getLogger("train")

model = nn.Sequential(nn.Linear(256, 512), nn.ReLU(), nn.Linear(512, 256))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
truth = Truth(args.truth)
deadline = time.time() + args.duration
step = 0
while time.time() < deadline:
    started = time.perf_counter()
    x = torch.randn(64, 256)
    loss = (model(x) - x).pow(2).mean()
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    time.sleep(0.08)
    step += 1
    truth.steps = step
    truth.maybe_write()
    ms = (time.perf_counter() - started) * 1000
    if args.style == "print":
        print(f"step {step} | loss {loss.item():.4f} | {ms:.1f} ms", flush=True)
    else:
        log.info("step %d | loss %.4f | %.1f ms", step, loss.item(), ms)
        sys.stdout.flush()
