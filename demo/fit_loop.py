"""A loop in the style of PyTorch Lightning's: a trainer fits a module's ``training_step``.

Lightning drives the step from its own loops: ``Trainer.fit`` runs a fit loop,
which runs an epoch loop over a fetcher that keeps one batch ahead of the step
(``_PrefetchDataFetcher``); the module's ``training_step`` returns the loss, the
trainer runs backward and the optimizer step, logs the loss (``self.log``: a
``.item()`` a step) and refreshes a progress bar. torch's threads are left at
their default and the DataLoader is the user's, as Lightning leaves them.
Nothing here imports Lightning: the shape of the loop and of its threads and
processes is what aitop judges, and the job times its own phases (``Truth``).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import torch
from aitop.demo.truth import Truth
from torch import nn
from torch.utils.data import DataLoader

#: Steps between progress-bar refreshes (tqdm's default refresh is a few a second).
REFRESH_EVERY = 20


class PrefetchFetcher:
    """The loader's batches, one fetched ahead of the step that takes them."""

    def __init__(self, loader: DataLoader) -> None:
        self.iterator: Iterator[tuple[torch.Tensor, torch.Tensor]] = iter(loader)
        self.ahead: tuple[torch.Tensor, torch.Tensor] | None = next(self.iterator, None)

    def __iter__(self) -> PrefetchFetcher:
        return self

    def __next__(self) -> tuple[torch.Tensor, torch.Tensor]:
        batch = self.ahead
        if batch is None:
            raise StopIteration
        self.ahead = next(self.iterator, None)
        return batch


class Module(nn.Module):
    """A LightningModule's part: the model, its ``training_step`` and ``log``."""

    def __init__(self, model: nn.Module, criterion: nn.Module) -> None:
        super().__init__()
        self.model = model
        self.criterion = criterion
        self.logged: dict[str, float] = {}

    def training_step(self, batch: tuple[torch.Tensor, torch.Tensor],
                      batch_idx: int) -> torch.Tensor:
        x, y = batch
        return self.criterion(self.model(x), y)

    def log(self, name: str, value: torch.Tensor) -> None:
        self.logged[name] = value.item()


class Trainer:
    """Fits a module for a while: fit loop, epoch loop, step, as Lightning nests them."""

    def __init__(self, optimizer: torch.optim.Optimizer, truth: Truth, deadline: float,
                 ready_file: Path | None) -> None:
        self.optimizer = optimizer
        self.truth = truth
        self.deadline = deadline
        self.ready_file = ready_file
        self.global_step = 0

    def fit(self, module: Module, loader: DataLoader) -> int:
        while time.time() < self.deadline:
            self.run_epoch(module, PrefetchFetcher(loader))
        self.truth.maybe_write(force=True)
        return self.global_step

    def run_epoch(self, module: Module, fetcher: PrefetchFetcher) -> None:
        batch_idx = 0
        while time.time() < self.deadline:
            t0 = time.perf_counter()
            try:
                batch = next(fetcher)
            except StopIteration:
                self.truth.add("data_wait", time.perf_counter() - t0)
                return
            t1 = time.perf_counter()
            loss = module.training_step(batch, batch_idx)
            t2 = time.perf_counter()
            loss.backward()
            t3 = time.perf_counter()
            self.optimizer.step()
            self.optimizer.zero_grad(set_to_none=True)
            t4 = time.perf_counter()
            for phase, seconds in (("data_wait", t1 - t0), ("forward", t2 - t1),
                                   ("backward", t3 - t2), ("optimizer", t4 - t3)):
                self.truth.add(phase, seconds)
            module.log("train_loss", loss)
            batch_idx += 1
            self.global_step += 1
            self.truth.steps = self.global_step
            self.truth.maybe_write()
            if batch_idx % REFRESH_EVERY == 0:
                sys.stdout.write(f"\rEpoch: {batch_idx} it, loss={module.logged['train_loss']:.3f}")
                sys.stdout.flush()
            if self.global_step == 2 and self.ready_file is not None:
                self.ready_file.touch()


def fit(model: nn.Module, criterion: nn.Module, optimizer: torch.optim.Optimizer,
        loader: DataLoader, duration_s: float, truth_path: Path | None,
        ready_file: Path | None = None) -> int:
    """Fit ``model`` on ``loader`` for ``duration_s`` seconds, Lightning-style."""
    trainer = Trainer(optimizer, Truth(truth_path), time.time() + duration_s, ready_file)
    return trainer.fit(Module(model, criterion), loader)
