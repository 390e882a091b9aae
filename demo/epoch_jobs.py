"""A training loop over short epochs whose DataLoader workers start again every epoch.

``persistent_workers=False`` (DataLoader's default): each ``for x, y in loader``
forks new workers and ends them when the epoch is done, and each new worker runs
``worker_init_fn`` before its first batch: here it builds a vocabulary, a
second of CPU work (loading a tokenizer, opening shards, seeding augmentations
are the usual ones). With a few batches per epoch, the loop spends most of
each epoch waiting for its new workers. The fixed variant keeps them alive
(``persistent_workers=True``): they start once.

Truth: the wait for each epoch's first batch (``iter()`` and the first
``next()``, the new workers' start-up) is timed as ``epoch_start``; the waits
for the other batches as ``data_wait``.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from aitop.demo.config import Config
from aitop.demo.data import INPUT_FEATURES
from aitop.demo.truth import PHASES, Truth
from torch import nn
from torch.utils.data import DataLoader, Dataset, get_worker_info

#: The truth's phases: the demo's own, and the waits for an epoch's first batch.
EPOCH_PHASES = (*PHASES, "epoch_start")


def mlp(width: int, depth: int) -> nn.Module:
    """The model: an MLP over the samples' features."""
    layers: list[nn.Module] = [nn.Linear(INPUT_FEATURES, width), nn.ReLU()]
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    return nn.Sequential(*layers, nn.Linear(width, 10))


class SmallDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """A few batches' worth of cheap samples: short epochs."""

    def __init__(self, size: int) -> None:
        self.x = torch.randn(size, INPUT_FEATURES)
        self.y = torch.randint(0, 10, (size,))

    def __len__(self) -> int:
        return len(self.x)

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        return self.x[index], self.y[index]


class BuildVocabulary:
    """``worker_init_fn``: ``seconds`` of CPU spent building a vocabulary, per worker."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def __call__(self, worker_id: int) -> None:
        deadline = time.thread_time() + self.seconds
        vocabulary: dict[str, int] = {}
        while time.thread_time() < deadline:
            for _ in range(1000):
                word = f"w{len(vocabulary) % 50_000}-{worker_id}"
                vocabulary[word] = len(vocabulary)
        info = get_worker_info()
        assert info is not None and info.id == worker_id


def train_epochs(cfg: Config, duration_s: float, truth_path: Path | None,
                 ready_file: Path | None = None) -> int:
    """Epoch after epoch over a small dataset, workers started per ``cfg``."""
    torch.set_num_threads(cfg.threads or torch.get_num_threads())
    model = mlp(cfg.width, cfg.depth)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    criterion = torch.nn.CrossEntropyLoss()
    loader = DataLoader(SmallDataset(cfg.epoch_samples), batch_size=cfg.batch_size,
                        shuffle=True, num_workers=cfg.num_workers,
                        persistent_workers=cfg.persistent_workers,
                        worker_init_fn=BuildVocabulary(cfg.worker_init_s))
    truth = Truth(truth_path, EPOCH_PHASES)
    deadline = time.time() + duration_s
    step = 0
    t0 = time.perf_counter()
    while time.time() < deadline:
        first = True  # its wait holds the last epoch's end (its workers stopped) too
        for x, y in loader:
            t1 = time.perf_counter()
            truth.add("epoch_start" if first else "data_wait", t1 - t0)
            first = False
            loss = criterion(model(x), y)
            t2 = time.perf_counter()
            loss.backward()
            t3 = time.perf_counter()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            t4 = time.perf_counter()
            for phase, seconds in (("forward", t2 - t1), ("backward", t3 - t2),
                                   ("optimizer", t4 - t3)):
                truth.add(phase, seconds)
            step += 1
            truth.count(step, ready_file)
            if time.time() >= deadline:
                break
            t0 = time.perf_counter()
    truth.maybe_write(force=True)
    return step
