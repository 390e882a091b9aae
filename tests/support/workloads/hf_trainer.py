"""An HF ``transformers.Trainer`` job as its docs write one, offline.

A GPT-2 built from a small ``GPT2Config`` (no weights from a hub), a dataset of
random token sequences, and ``Trainer(model, args, train_dataset,
eval_dataset).train()``: the Trainer's loop, its DataLoader, evaluation every
``--eval-steps`` and checkpoints every ``--save-steps`` are transformers' code as
installed. Not the Trainer's: ``--sample-ms`` of CPU work per sample in the
dataset's ``__getitem__`` (a tokenizer or a transform, in the DataLoader's
workers: a slow worker), and a ``TrainerCallback`` that appends the job's own
record (steps, seconds in evaluation and in saving, demo/truth.py's format) and
stops the run after ``--duration`` seconds.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
from pathlib import Path
from typing import Any

# No hub: the config is built here and nothing is downloaded.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch
from aitop.demo.truth import Truth
from torch.utils.data import Dataset
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    Trainer,
    TrainerCallback,
    TrainingArguments,
)


def burn_cpu(seconds: float) -> None:
    """Spend ``seconds`` of this thread's CPU (not wall) time, as per-sample work does."""
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


class RandomTokens(Dataset):
    """Sequences of random tokens, labels = inputs (causal LM), ``cost_s`` CPU each."""

    def __init__(self, length: int, seq_len: int, vocab: int, cost_s: float, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.tokens = torch.randint(0, vocab, (length, seq_len), generator=generator)
        self.cost_s = cost_s

    def __len__(self) -> int:
        return len(self.tokens)

    def __getitem__(self, index: int) -> dict[str, torch.Tensor]:
        if self.cost_s:
            burn_cpu(self.cost_s)
        ids = self.tokens[index]
        return {"input_ids": ids, "labels": ids}


class Record(TrainerCallback):
    """The job's own record; stops training after ``duration_s``.

    Evaluation is timed batch by batch (``on_prediction_step``) and saving from
    the step's end to ``on_save``, so a record written inside either (every
    0.5 s, by a thread: the loop calls no hook while it saves) counts what
    was done so far.
    """

    def __init__(self, truth: Truth, duration_s: float) -> None:
        self.truth = truth
        self.deadline = time.time() + duration_s
        self.mark = time.perf_counter()
        threading.Thread(target=self._write_often, daemon=True).start()

    def _write_often(self) -> None:
        while True:
            time.sleep(0.5)
            self.truth.maybe_write()

    def _spent(self, phase: str) -> None:
        now = time.perf_counter()
        self.truth.add(phase, now - self.mark)
        self.mark = now

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self.truth.steps += 1
        self.truth.maybe_write()
        self.mark = time.perf_counter()
        if time.time() >= self.deadline:
            control.should_training_stop = True
        return control

    def on_prediction_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self._spent("eval")
        return control

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self._spent("eval")
        self.truth.maybe_write(force=True)  # the block's end, for whole-cycle rates
        return control

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> Any:
        self._spent("checkpoint")
        self.truth.maybe_write(force=True)
        return control


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output-dir", type=Path, required=True)
    parser.add_argument("--truth", type=Path, required=True)
    parser.add_argument("--duration", type=float, default=120.0)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--seq-len", type=int, default=64)
    parser.add_argument("--vocab", type=int, default=2000,
                        help="GPT-2's own 50257 makes a checkpoint about 80 MB")
    parser.add_argument("--workers", type=int, default=0)
    parser.add_argument("--sample-ms", type=float, default=0.0,
                        help="CPU milliseconds of work per training sample in __getitem__")
    parser.add_argument("--eval-steps", type=int, default=0, help="0: no evaluation")
    parser.add_argument("--eval-samples", type=int, default=512)
    parser.add_argument("--save-steps", type=int, default=0, help="0: no checkpoints")
    args = parser.parse_args()

    config = GPT2Config(n_layer=2, n_embd=128, n_head=2, vocab_size=args.vocab,
                        n_positions=args.seq_len)
    model = GPT2LMHeadModel(config)
    train = RandomTokens(200_000, args.seq_len, config.vocab_size, args.sample_ms / 1000, 0)
    evaluation = RandomTokens(args.eval_samples, args.seq_len, config.vocab_size, 0.0, 1)
    training_args = TrainingArguments(
        output_dir=str(args.output_dir),
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=args.batch_size,
        max_steps=1_000_000,
        learning_rate=3e-4,
        logging_steps=20,
        eval_strategy="steps" if args.eval_steps else "no",
        eval_steps=args.eval_steps or None,
        save_strategy="steps" if args.save_steps else "no",
        save_steps=args.save_steps or 500,
        save_total_limit=2,
        dataloader_num_workers=args.workers,
        dataloader_persistent_workers=args.workers > 0,
        report_to=[],
        use_cpu=True,
    )
    truth = Truth(args.truth)
    trainer = Trainer(model=model, args=training_args, train_dataset=train,
                      eval_dataset=evaluation if args.eval_steps else None,
                      callbacks=[Record(truth, args.duration)])
    trainer.train()
    truth.maybe_write(force=True)


if __name__ == "__main__":
    main()
