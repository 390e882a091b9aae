"""Lightning's own demos, unmodified, trained the way Lightning's docs show.

``lightning.pytorch.demos`` ships in the ``lightning`` wheel: ``transformer.py``
is pytorch/examples' word_language_model as a LightningModule with its WikiText2
dataset, ``boring_classes.BoringModel`` the model Lightning's own tests train.
This script is only the docs' few lines around them:
``Trainer(...).fit(model, DataLoader(dataset, ...))``.

What is not Lightning's: WikiText2 reads ``./data/wikitext-2.txt`` (the demo's
``prepare_data`` asks for it there, checking first that ``requests`` imports) and
downloads it only when missing, so the text is written there, in ``--data-dir``
as the working directory (random words from a fixed vocabulary: no network);
``--sample-ms`` wraps the dataset in one that spends that much CPU per sample in
``__getitem__``, as tokenising or decoding in a dataset does (a slow worker); a
``Callback`` appends the job's own record (steps, seconds in validation) for
tests to compare with (demo/truth.py's format). Everything else (the model, its
training_step, the Trainer's loop, validation, ModelCheckpoint) is Lightning's
code as installed.
"""

from __future__ import annotations

import argparse
import os
import random
import time
from pathlib import Path
from typing import Any

import lightning as L
import torch
from aitop.demo.truth import Truth
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.demos import LightningTransformer, WikiText2
from lightning.pytorch.demos.boring_classes import BoringModel, RandomDataset
from torch.utils.data import DataLoader, Dataset


def write_corpus(path: Path, words: int = 200_000, vocabulary: int = 2_000) -> None:
    """A text in WikiText2's layout (lines of words) where the demo looks for it."""
    if path.exists():
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    rng = random.Random(0)
    vocab = [f"w{i}" for i in range(vocabulary)]
    lines = [" ".join(rng.choices(vocab, k=20)) for _ in range(words // 20)]
    path.write_text("\n".join(lines) + "\n")


def burn_cpu(seconds: float) -> None:
    """Spend ``seconds`` of this thread's CPU (not wall) time, as per-sample work does."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class CostlySamples(Dataset):
    """``dataset`` with ``cost_s`` of CPU work per sample (a transform, a tokenizer)."""

    def __init__(self, dataset: Any, cost_s: float) -> None:
        self.dataset = dataset
        self.cost_s = cost_s

    def __len__(self) -> int:
        return len(self.dataset)

    def __getitem__(self, index: int) -> Any:
        burn_cpu(self.cost_s)
        return self.dataset[index]


class Record(Callback):
    """The job's own record: training steps, and seconds inside validation counted
    batch by batch (a record written inside a validation pass counts it so far)."""

    def __init__(self, truth: Truth) -> None:
        self.truth = truth
        self.mark = time.perf_counter()

    def on_train_batch_end(self, *args: Any, **kwargs: Any) -> None:
        self.truth.steps += 1
        self.truth.maybe_write()

    def on_validation_start(self, *args: Any, **kwargs: Any) -> None:
        self.mark = time.perf_counter()

    def on_validation_batch_end(self, *args: Any, **kwargs: Any) -> None:
        now = time.perf_counter()
        self.truth.add("eval", now - self.mark)
        self.mark = now
        self.truth.maybe_write()

    def on_validation_end(self, *args: Any, **kwargs: Any) -> None:
        self.on_validation_batch_end()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", choices=("transformer", "boring"), default="transformer")
    parser.add_argument("--data-dir", type=Path, required=True)
    parser.add_argument("--truth", type=Path, required=True)
    parser.add_argument("--duration", type=float, default=120.0)
    parser.add_argument("--batch-size", type=int, default=16)
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--sample-ms", type=float, default=0.0,
                        help="CPU milliseconds of work per sample in __getitem__")
    parser.add_argument("--val-every", type=int, default=0,
                        help="validate every N training steps (0: never)")
    parser.add_argument("--val-batches", type=int, default=50)
    parser.add_argument("--ckpt-every", type=int, default=0,
                        help="ModelCheckpoint every N training steps (0: none)")
    args = parser.parse_args()

    truth = Truth(args.truth.resolve())
    args.data_dir.mkdir(parents=True, exist_ok=True)
    os.chdir(args.data_dir)
    if args.model == "transformer":
        write_corpus(Path("data") / "wikitext-2.txt")
        dataset: Any = WikiText2(data_dir=Path("data"))
        model: L.LightningModule = LightningTransformer(vocab_size=dataset.vocab_size)
    else:
        dataset = RandomDataset(32, 100_000)
        model = BoringModel()
    if args.sample_ms:
        dataset = CostlySamples(dataset, args.sample_ms / 1000)

    def loader(data: Any) -> DataLoader:
        return DataLoader(data, batch_size=args.batch_size, shuffle=True,
                          num_workers=args.workers,
                          persistent_workers=args.workers > 0)

    callbacks: list[Callback] = [Record(truth)]
    if args.ckpt_every:
        callbacks.append(ModelCheckpoint(dirpath="checkpoints",
                                         every_n_train_steps=args.ckpt_every,
                                         save_top_k=-1))
    validate = args.val_every > 0
    if validate and args.model == "transformer":
        # The demo defines no validation_step: the same loss, under no_grad.
        def validation_step(batch: Any, batch_idx: int) -> torch.Tensor:
            inputs, target = batch
            loss = torch.nn.functional.nll_loss(model(inputs, target), target.view(-1))
            model.log("val_loss", loss)
            return loss
        model.validation_step = validation_step  # type: ignore[method-assign]
    trainer = L.Trainer(
        accelerator="cpu", devices=1, max_time={"seconds": args.duration},
        max_epochs=-1, logger=False, enable_checkpointing=bool(args.ckpt_every),
        enable_model_summary=False, callbacks=callbacks,
        val_check_interval=args.val_every if validate else None,
        limit_val_batches=args.val_batches if validate else 0,
        check_val_every_n_epoch=None if validate else 1,
        num_sanity_val_steps=0,
    )
    trainer.fit(model, loader(dataset), loader(dataset) if validate else None)
    truth.maybe_write(force=True)


if __name__ == "__main__":
    main()
