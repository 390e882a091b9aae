"""A training job whose evaluation is written inline, with no function named for it.

``--style module``: the loop at module level, as a short script has it; every
``--eval-every`` steps one line scores the model on batches already in memory,
``sum(... for a, b in val)`` under ``torch.no_grad()`` (no DataLoader, no fetch).
``--style epoch``: a ``train()`` function with an epoch loop; after each
epoch's training loop, a validation loop over a DataLoader written in the same
function under ``torch.no_grad()``, as tutorials write it.

Ground truth (training steps, and seconds in data / forward / backward /
optimizer / evaluation) goes to the file named by ``--truth``. Evaluating
half as often (``--eval-every`` twice as large) is the fix.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from aitop.demo.truth import Truth
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

parser = argparse.ArgumentParser()
parser.add_argument("--truth", type=Path, required=True)
parser.add_argument("--duration", type=float, default=120.0)
parser.add_argument("--style", choices=("module", "epoch"), default="module")
parser.add_argument("--eval-every", type=int, default=20)
args = parser.parse_args()

torch.manual_seed(0)
torch.set_num_threads(1)
WIDTH, BATCH = 1024, 128
model = nn.Sequential(nn.Linear(WIDTH, WIDTH), nn.ReLU(), nn.Linear(WIDTH, WIDTH), nn.ReLU(),
                      nn.Linear(WIDTH, 10))
optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
train_set = TensorDataset(torch.randn(BATCH * 64, WIDTH), torch.randint(0, 10, (BATCH * 64,)))
val = [(torch.randn(BATCH * 4, WIDTH), torch.randint(0, 10, (BATCH * 4,))) for _ in range(12)]
truth = Truth(args.truth)
deadline = time.time() + args.duration


def train() -> None:
    """The ``epoch`` style: a training loop, then a validation loop, in one function.
    An epoch holds ``--eval-every`` steps."""
    steps = 0
    train_loader = DataLoader(train_set, batch_size=BATCH, shuffle=True)
    val_loader = DataLoader(TensorDataset(torch.cat([a for a, _ in val]),
                                          torch.cat([b for _, b in val])), batch_size=BATCH * 4)
    for epoch in range(10**6):
        model.train()
        t0 = time.perf_counter()
        for i, (x, y) in enumerate(train_loader):
            if i == args.eval_every:
                break
            t1 = time.perf_counter()
            loss = F.cross_entropy(model(x), y)
            t2 = time.perf_counter()
            optimizer.zero_grad()
            loss.backward()
            t3 = time.perf_counter()
            optimizer.step()
            t4 = time.perf_counter()
            for phase, seconds in (("data_wait", t1 - t0), ("forward", t2 - t1),
                                   ("backward", t3 - t2), ("optimizer", t4 - t3)):
                truth.add(phase, seconds)
            steps += 1
            truth.count(steps)
            t0 = time.perf_counter()
        model.eval()
        correct = 0
        with truth.timing("eval"), torch.no_grad():
            for x, y in val_loader:
                out = model(x)
                correct += int((out.argmax(1) == y).sum().item())
        print(f"epoch {epoch}: {correct} correct", flush=True)
        if time.time() >= deadline:
            return


if args.style == "epoch":
    train()
else:
    step = 0
    while time.time() < deadline:
        t0 = time.perf_counter()
        i = torch.randint(0, len(train_set), (BATCH,))
        x, y = train_set.tensors[0][i], train_set.tensors[1][i]
        t1 = time.perf_counter()
        loss = F.cross_entropy(model(x), y)
        t2 = time.perf_counter()
        optimizer.zero_grad()
        loss.backward()
        t3 = time.perf_counter()
        optimizer.step()
        t4 = time.perf_counter()
        for phase, seconds in (("data_wait", t1 - t0), ("forward", t2 - t1),
                               ("backward", t3 - t2), ("optimizer", t4 - t3)):
            truth.add(phase, seconds)
        step += 1
        truth.count(step)
        if step % args.eval_every == 0:
            t5 = time.perf_counter()
            with torch.no_grad():
                vl = sum(F.cross_entropy(model(a), b).item() for a, b in val)
            truth.add("eval", time.perf_counter() - t5)
            print(f"step {step}: val loss {vl / len(val):.3f}", flush=True)
truth.maybe_write(force=True)
