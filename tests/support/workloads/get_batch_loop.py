"""A character-level language model trained the way nanoGPT's train.py and
pytorch/examples' word_language_model do it: no DataLoader, a loop at module
level, and ``X, Y = get_batch("train")`` building each batch in the training
thread, here with per-sample Python work (a list of token ids sliced and
checked sample by sample). ``--workers N`` is the fix aitop's lead names: the
same ``get_batch`` run in N DataLoader worker processes (an IterableDataset
that yields its batches), the loop taking them with ``next()``.

Ground truth (steps, and seconds in get_batch / forward / backward / optimizer)
goes to the file named by ``--truth``.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Iterator
from pathlib import Path

import torch
import torch.nn.functional as F
from aitop.demo.truth import Truth
from torch import nn

parser = argparse.ArgumentParser()
parser.add_argument("--truth", type=Path, required=True)
parser.add_argument("--duration", type=float, default=120.0)
parser.add_argument("--workers", type=int, default=0)
args = parser.parse_args()

torch.manual_seed(0)
random.seed(0)
torch.set_num_threads(1)
BLOCK, BATCH, WIDTH = 48, 32, 64
text = "the quick brown fox jumps over the lazy dog. " * 20000
vocab = sorted(set(text))
data = [vocab.index(c) for c in text[:200_000]]


def get_batch(split: str) -> tuple[torch.Tensor, torch.Tensor]:
    """``BATCH`` random windows of the token list, each checked in Python."""
    xs, ys = [], []
    for _ in range(BATCH):
        i = random.randint(0, len(data) - BLOCK - 2)
        chunk = data[i:i + BLOCK + 1]
        for _ in range(2500):  # a per-sample check, as tokenizers' Python does
            _ = sum(chunk) % 7
        xs.append(torch.tensor(chunk[:-1]))
        ys.append(torch.tensor(chunk[1:]))
    return torch.stack(xs), torch.stack(ys)


class Batches(torch.utils.data.IterableDataset):
    """get_batch in a worker process, batch after batch."""

    def __iter__(self) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
        while True:
            yield get_batch("train")


class CharModel(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(len(vocab), WIDTH)
        self.layers = nn.TransformerEncoder(
            nn.TransformerEncoderLayer(WIDTH, 4, 4 * WIDTH, batch_first=True), 2)
        self.head = nn.Linear(WIDTH, len(vocab))

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.layers(self.embed(idx)))


model = CharModel()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
truth = Truth(args.truth)
batches = (iter(torch.utils.data.DataLoader(Batches(), batch_size=None,
                                            num_workers=args.workers,
                                            persistent_workers=True, prefetch_factor=2))
           if args.workers else None)
deadline = time.time() + args.duration
iter_num = 0
while time.time() < deadline:
    t0 = time.perf_counter()
    if batches is None:
        X, Y = get_batch("train")
    else:
        X, Y = next(batches)
    t1 = time.perf_counter()
    logits = model(X)
    loss = F.cross_entropy(logits.view(-1, logits.size(-1)), Y.view(-1))
    t2 = time.perf_counter()
    loss.backward()
    t3 = time.perf_counter()
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    t4 = time.perf_counter()
    for phase, seconds in (("data_wait", t1 - t0), ("forward", t2 - t1),
                           ("backward", t3 - t2), ("optimizer", t4 - t3)):
        truth.add(phase, seconds)
    iter_num += 1
    truth.count(iter_num)
    if iter_num % 100 == 0:
        print(f"iter {iter_num}: loss {loss.item():.4f}", flush=True)
truth.maybe_write(force=True)
