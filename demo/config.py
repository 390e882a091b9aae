"""The shape of each demo job: one frozen :class:`Config` per scenario.

Kept apart from ``workload.py`` (and free of torch) so that tests and benchmarks
can read what a scenario is, and what its "fixed" variant changes, without
importing PyTorch.
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
    loop: str = "dataloader"  # "dataloader", "producer" (thread + queue), "generator"
    gpu_scale: bool = False  # on CUDA, grow the model so the GPU has work to do


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
    # One worker per usable core, each decoding on the CPU, while the main
    # process trains with torch's default threads: the CPU is the limit.
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
    "generator": Config(
        width=768, depth=3, batch_size=32, num_workers=1, decode_ms=0.8,
        checkpoint_every=0, threads=1, decode_clock="cpu", loop="generator",
    ),
}

#: The mechanical fix of each base scenario, as the one setting it changes.
FIXES: dict[str, tuple[str, dict[str, Any]]] = {
    "data_fixed": ("data", {"num_workers": 2}),
    "checkpoint_fixed": (
        "checkpoint", {"checkpoint_every": CONFIGS["checkpoint"].checkpoint_every * 4}
    ),
    "compute_fixed": ("compute", {"threads": USABLE_CORES}),
}
for _name, (_base, _change) in FIXES.items():
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
