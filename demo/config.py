"""The shape of each demo job: one frozen :class:`Config` per scenario.

Kept apart from ``workload.py`` (and free of torch) so that tests and benchmarks
can read what a scenario is, and what its "fixed" variant changes, without
importing PyTorch.

Measured on the 2-core, GPU-less development VM, one job at a time, steps/s
and shares from the job's own truth file over 20 s, 3 runs (median first),
while other processes used < 0.1 core:

  cpu_saturated  2 workers (= usable cores) 18.75 steps/s (18.75, 18.72,
                 19.45), data wait 89-91 %; 3 workers 19.20 (19.20, 18.88,
                 19.43), +2.4 %; 4 workers 19.13 (19.11, 19.13, 19.19), +2.0 %.
                 Both cores are busy (job 1.93-1.99 cores): workers cannot help.
  storage        20.7 steps/s (20.2, 22.9, 20.7), data wait 93-95 %; host
                 iowait 23-25 % of all CPU time, vda busy (io_ticks) 67-68 %,
                 15.6-17.6 k reads/s of 4 KiB; the job uses ~0.55 core.
  producer       34.1 steps/s (33.7, 34.1, 34.3), data wait (q.get) 90-91 %.
  validation     8.9 steps/s (8.7, 9.5, 8.9), eval 56-61 % of wall time.
  generator      29.8 steps/s, data wait 29 % (decode 0.9 ms; at 0.55 ms this
                 box ran it at 38-40 steps/s with its worker keeping up: 9 %).

  data_fixed       1.95x data: 29.05 (28.99, 29.05, 29.12) vs 14.91 (14.86,
                   14.91, 14.98) steps/s
  checkpoint_fixed 1.61x checkpoint: 32.10 (34.12, 32.10, 31.62) vs 19.92
                   (19.28, 19.92, 20.65); checkpoint share 45-48 % -> 19-21 %
  compute_fixed    1.72x compute: 17.41 (17.03, 19.37, 17.41) vs 10.13 (10.04,
                   10.13, 10.70)

The same fixes while other jobs used 0.5-1 of the two cores: data_fixed
0.83-1.47x, checkpoint_fixed 0.65-2.4x, compute_fixed 0.14-0.27x (two libgomp
threads spin-wait at every parallel op for a core that is not free). A
predicted speed-up holds only where the cores it needs are idle.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Any

#: Cores this process may run on: what "every core is already busy" means.
USABLE_CORES = len(os.sched_getaffinity(0))


@dataclass(frozen=True)
class Config:
    """Per-scenario shape of the job."""

    width: int
    depth: int
    batch_size: int
    num_workers: int
    decode_ms: float  # time per sample spent in __getitem__ (see decode_clock)
    checkpoint_every: int  # steps; 0 = never
    threads: int  # torch intra-op threads (0 = leave torch's default)
    optimizer: str = "adamw"  # or "sgd" (momentum: one state tensor per parameter)
    # "wall": decode spins until a wall-clock deadline (the original demo jobs).
    # "cpu": until the thread has used decode_ms of CPU, so the cost is real CPU
    # work that more workers cannot conjure up on a busy machine.
    decode_clock: str = "wall"
    augment_passes: int = 0  # >0: samples are images blurred this many times (torch ops)
    storage_blocks: int = 0  # >0: each sample is this many 4 KiB O_DIRECT disk reads
    eval_every: int = 0  # training steps between evaluation passes; 0 = never
    eval_batches: int = 0  # batches in one evaluation pass
    # "dataloader", "producer" (thread + queue), "generator", "serve" (inference
    # on requests from a queue; truth counts requests as steps), "module" (the
    # script demo/module_loop.py, its loop at module level and sized there)
    loop: str = "dataloader"
    gpu_scale: bool = False  # on CUDA, grow the model so the GPU has work to do
    # Each checkpoint goes to a temporary file, flushed, fsync'ed and renamed
    # into place: the save is only done once it is on the disk.
    durable_checkpoints: bool = False
    compile_model: bool = False  # torch.compile the model (inductor compiles on the first call)
    # What the loop keeps of every step for an end-of-run metric: "outputs" (the
    # logits, autograd graph and all: memory grows with the steps), "numbers"
    # (loss.item(), a float), or nothing.
    keep_per_step: str = ""
    # Seconds of training after which the loop waits forever on a queue whose
    # producer is gone (a hung job); 0 = never.
    hang_after_s: float = 0.0
    serve_batch: int = 1  # loop "serve": requests answered per forward pass, at most
    # Seconds the training process spends building its records in Python before
    # the first step (a script tokenizing its corpus at start): no step is taken.
    prepare_s: float = 0.0


CONFIGS: dict[str, Config] = {
    "data": Config(
        width=256, depth=3, batch_size=32, num_workers=1, decode_ms=2.0,
        checkpoint_every=0, threads=1,
    ),
    "compute": Config(
        width=1024, depth=6, batch_size=128, num_workers=0, decode_ms=0.0,
        checkpoint_every=0, threads=1, gpu_scale=True,
    ),
    "checkpoint": Config(
        width=2048, depth=2, batch_size=2, num_workers=0, decode_ms=0.0,
        checkpoint_every=2, threads=0, optimizer="sgd",
    ),
    "healthy": Config(
        width=2048, depth=4, batch_size=128, num_workers=1, decode_ms=0.02,
        checkpoint_every=0, threads=0, gpu_scale=True,
    ),
    # One worker per usable core, each decoding with real CPU time, while the
    # main process trains too: the CPU is the limit. The main process keeps one
    # torch thread: with torch's default (2) the job's shape depended on the
    # neighbours' load: 15.9 steps/s and 78 % data wait on an idle box, but
    # 4.7-5.4 steps/s and 9-10 % data wait (libgomp spin-waits) when other jobs
    # used a core, i.e. a different bottleneck (oversubscription).
    "cpu_saturated": Config(
        width=512, depth=2, batch_size=32, num_workers=USABLE_CORES, decode_ms=3.0,
        checkpoint_every=0, threads=1, decode_clock="cpu",
    ),
    "storage": Config(
        width=256, depth=3, batch_size=32, num_workers=1, decode_ms=0.0,
        checkpoint_every=0, threads=1, storage_blocks=24,
    ),
    # The producer thread's work is torch ops, which release the GIL: a busy
    # pure-Python producer would instead starve the training thread of the GIL
    # (measured: forward/backward ~15x slower, data wait ~1 %) and the job
    # would look compute-bound.
    "producer": Config(
        width=256, depth=3, batch_size=32, num_workers=0, decode_ms=0.0,
        checkpoint_every=0, threads=1, augment_passes=3, loop="producer",
    ),
    "validation": Config(
        width=1024, depth=4, batch_size=64, num_workers=0, decode_ms=0.0,
        checkpoint_every=0, threads=1, eval_every=10, eval_batches=90,
    ),
    "leak": Config(
        width=1024, depth=4, batch_size=128, num_workers=0, decode_ms=0.0,
        checkpoint_every=0, threads=1, keep_per_step="outputs",
    ),
    "serving": Config(
        width=1024, depth=4, batch_size=1, num_workers=0, decode_ms=0.0,
        checkpoint_every=0, threads=1, loop="serve",
    ),
    # Sizes live in demo/module_loop.py (a script has no Config): these only
    # say what the loop is for readers of the table.
    "module_loop": Config(
        width=2048, depth=4, batch_size=768, num_workers=0, decode_ms=0.0,
        checkpoint_every=0, threads=0, optimizer="sgd", loop="module",
    ),
    "hang": Config(
        width=256, depth=3, batch_size=32, num_workers=0, decode_ms=0.0,
        checkpoint_every=0, threads=1, hang_after_s=3.0,
    ),
    "generator": Config(
        width=768, depth=3, batch_size=32, num_workers=1, decode_ms=0.9,
        checkpoint_every=0, threads=1, decode_clock="cpu", loop="generator",
    ),
}

#: Scenarios that are another's loop with one thing changed (the base's shape,
#: measured, holds for them too).
VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    # compute's model under torch.compile, at its CPU size on a GPU too, and 40
    # layers deep: inductor takes tens of seconds over it even on a quiet box.
    "compile": ("compute", {"compile_model": True, "gpu_scale": False, "depth": 40}),
    "checkpoint_durable": ("checkpoint", {"durable_checkpoints": True}),
    # data's loop after 40 s of building its records in the training process.
    "loading": ("data", {"prepare_s": 40.0}),
    # Shapes no calibration constant was fitted on (benchmarks/predictions.py's
    # check set): data with twice the decode per sample, half the batch and a
    # wider model; compute with a narrower, deeper model and half the batch
    # (smaller matrix products, which spread worse over threads).
    "data_heavy": ("data", {"decode_ms": 4.0, "batch_size": 16, "width": 512}),
    "compute_small": ("compute", {"width": 384, "depth": 8, "batch_size": 64}),
    # checkpoint with a deeper, narrower model (a third less state per save),
    # saved every third step.
    "checkpoint_deep": ("checkpoint", {"width": 1536, "depth": 3, "checkpoint_every": 3}),
    # data's loop with its decoding (CPU time) in the training thread and torch's
    # default threads, which hold every core while the step computes: a worker
    # alone competes with them; one compute thread fewer gives it a core.
    "inline_loading": ("data", {"num_workers": 0, "threads": 0, "decode_clock": "cpu",
                                "width": 1024, "batch_size": 64, "decode_ms": 0.5}),
}
#: The mechanical fix of each base scenario, as the one setting it changes.
FIXES: dict[str, tuple[str, dict[str, Any]]] = {
    "data_fixed": ("data", {"num_workers": 2}),
    "checkpoint_fixed": (
        "checkpoint", {"checkpoint_every": CONFIGS["checkpoint"].checkpoint_every * 4}
    ),
    "compute_fixed": ("compute", {"threads": USABLE_CORES}),
    "leak_fixed": ("leak", {"keep_per_step": "numbers"}),
    "serving_batched": ("serving", {"serve_batch": 32}),
}
for _name, (_base, _change) in (VARIANTS | FIXES).items():
    CONFIGS[_name] = dataclasses.replace(CONFIGS[_base], **_change)


def with_overrides(
    cfg: Config,
    *,
    num_workers: int | None = None,
    checkpoint_every: int | None = None,
    threads: int | None = None,
) -> Config:
    """The scenario's config with the command line's overrides (None = keep)."""
    changes: dict[str, Any] = {
        "num_workers": num_workers, "checkpoint_every": checkpoint_every, "threads": threads,
    }
    for name, value in changes.items():
        if value is not None and value < 0:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 0, not {value}")
    return dataclasses.replace(cfg, **{k: v for k, v in changes.items() if v is not None})
