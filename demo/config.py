"""The shape of each demo job: one frozen :class:`Config` per scenario.

Kept apart from ``workload.py`` (and free of torch) so that tests and benchmarks
can read what a scenario is, and what its "fixed" variant changes, without
importing PyTorch.

Each scenario is sized so that its one bottleneck dominates on a small machine
(the 2-core, GPU-less development VM) while nothing else runs, and each fix in
``FIXES`` changes only the setting its lead finding's action names. A fix's
speed-up holds only where the cores it needs are idle (beside other jobs the
same fixes measured anything from a slow-down to more than the quiet figure),
so they are measured one job at a time: docs/predictions.md and
docs/predictions-check.md hold the measured speed-ups against aitop's
predictions, docs/benchmarks.md the scenarios' rates with and without aitop.
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
    # work that more workers cannot conjure up on a busy machine. "sleep": the
    # sample waits decode_ms without the CPU (a remote read).
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
    # Each hidden layer through torch.utils.checkpoint (non-reentrant): its forward
    # runs again inside backward, as activation checkpointing does.
    checkpoint_activations: bool = False
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
    # Loop "records" (demo/memory_jobs.py; decode_ms there is a sleep, a read
    # from storage, not CPU): the dataset's records as Python
    # "objects" (a list of dicts), "arrays" (tensors), or "images" decoded and
    # cached by each worker; record_count of them (samples an epoch).
    records: str = ""
    record_count: int = 0
    # False: the DataLoader re-creates its workers every epoch (its own default, which
    # loops "records" and "epochs" follow).
    persistent_workers: bool = True
    # loop "sequences" (demo/compile_jobs.py): a new sequence length every this
    # many steps under torch.compile(dynamic=False); pad_sequences pads every
    # batch to the longest length instead (one shape); dynamic_shapes compiles
    # with dynamic=True instead (one compilation for every length).
    new_length_every: int = 0
    pad_sequences: bool = False
    dynamic_shapes: bool = False
    # loop "epochs" (demo/epoch_jobs.py): epochs of this many samples, each new
    # worker spending worker_init_s of CPU in worker_init_fn.
    epoch_samples: int = 0
    worker_init_s: float = 0.0
    # loop "serve_texts" (demo/serve_jobs.py): worker processes that encode the
    # requests a batch ahead (0: the serving thread encodes them itself).
    preprocess_workers: int = 0
    # The optimizer's implementation: "" (torch's default: the per-tensor
    # for-loop on CPU, foreach on CUDA), "foreach" or "fused" (foreach=True or
    # fused=True).
    optimizer_impl: str = ""
    # CPUs of the cgroup CPU quota the job is meant to run under (0: none), as a
    # container's limit. A job does not give itself a quota: whoever starts it
    # makes the cgroup (benchmarks/jobs.py start_job, tests/support/cgroups.py).
    cpu_quota: float = 0.0


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
    # main process trains too: the CPU is the limit, and more workers cannot
    # help. The main process keeps one torch thread: with torch's default the
    # job's bottleneck would depend on the neighbours' load (libgomp threads
    # spin-wait for a core another job holds: oversubscription, not data).
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
    # demo/memory_jobs.py: two persistent workers reading 1.5 M records kept as
    # Python dicts (copy-on-read), and two workers re-created every epoch, each
    # caching the images it decodes (a sawtooth whose floor holds).
    "cow": Config(
        width=64, depth=1, batch_size=64, num_workers=2, decode_ms=1.0,
        checkpoint_every=0, threads=1, loop="records", records="objects",
        record_count=1_500_000,
    ),
    "sawtooth": Config(
        width=64, depth=1, batch_size=32, num_workers=2, decode_ms=2.0,
        checkpoint_every=0, threads=1, loop="records", records="images",
        record_count=2000, persistent_workers=False,
    ),
    # A sequence model under torch.compile(dynamic=False) meeting a new
    # sequence length every 30 steps: each compiles it again (demo/compile_jobs.py).
    "recompile": Config(
        width=256, depth=2, batch_size=16, num_workers=0, decode_ms=0.0,
        checkpoint_every=0, threads=1, loop="sequences", new_length_every=30,
    ),
    # Epochs of 8 batches whose 2 workers start again each epoch, each spending a
    # second of CPU in worker_init_fn first (demo/epoch_jobs.py).
    "epoch_workers": Config(
        width=1024, depth=3, batch_size=32, num_workers=2, decode_ms=0.0,
        checkpoint_every=0, threads=1, loop="epochs", epoch_samples=256, worker_init_s=1.0,
        persistent_workers=False,
    ),
    # A server batching up to 32 text requests and encoding each in Python on
    # its serving thread before one forward pass (demo/serve_jobs.py).
    "serving_preprocess": Config(
        width=256, depth=2, batch_size=1, num_workers=0, decode_ms=0.0,
        checkpoint_every=0, threads=1, loop="serve_texts", serve_batch=32,
    ),
    # Hundreds of small layers (302 Linear, 604 parameter tensors of at most
    # 32x32) trained with AdamW's default implementation on a CPU: the per-tensor
    # for-loop update takes about half the step, on one thread.
    "optimizer_loop": Config(
        width=32, depth=300, batch_size=32, num_workers=0, decode_ms=0.0,
        checkpoint_every=0, threads=1,
    ),
    # Sized to the machine, as a script that asks os.cpu_count(): a torch thread
    # and a decoding worker per CPU, in a container allowed 1 CPU. The quota
    # stops all of it for most of each period; the machine's other core idles.
    "quota": Config(
        width=256, depth=3, batch_size=32, num_workers=USABLE_CORES, decode_ms=3.0,
        checkpoint_every=0, threads=USABLE_CORES, decode_clock="cpu", cpu_quota=1.0,
    ),
    # A Lightning-style loop (demo/fit_loop.py) with torch's default threads and
    # one DataLoader worker decoding in a Python loop: the loop waits for it.
    "fit_loop": Config(
        width=512, depth=3, batch_size=32, num_workers=1, decode_ms=1.5,
        checkpoint_every=0, threads=0, decode_clock="cpu", loop="fit",
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
    # optimizer_loop with another optimizer and shape: SGD with momentum (one
    # state tensor, fewer ops per tensor) over 252 layers half as wide again,
    # batches of 16.
    "optimizer_loop_sgd": ("optimizer_loop", {"optimizer": "sgd", "width": 48, "depth": 250,
                                              "batch_size": 16}),
    # compute's loop with every hidden layer checkpointed (activation
    # checkpointing, with far more memory free than it saves), the fused update
    # and a torch thread per core: the recompute is what there is to take out.
    "recompute": ("compute", {"checkpoint_activations": True, "optimizer_impl": "fused",
                              "threads": USABLE_CORES, "width": 768, "depth": 8}),
    # quota with its torch threads and workers sized to its 1-CPU quota.
    "quota_sized": ("quota", {"threads": 1, "num_workers": 1}),
    # fit_loop whose one worker waits for each sample instead of computing it.
    "fit_loop_waits": ("fit_loop", {"decode_clock": "sleep"}),
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
    "cow_fixed": ("cow", {"records": "arrays"}),
    "recompile_dynamic": ("recompile", {"dynamic_shapes": True}),
    "recompile_padded": ("recompile", {"pad_sequences": True}),
    "epoch_workers_persistent": ("epoch_workers", {"persistent_workers": True}),
    "serving_preprocess_pool": ("serving_preprocess", {"preprocess_workers": 2}),
    "optimizer_loop_fixed": ("optimizer_loop", {"optimizer_impl": "fused"}),
    "quota_raised": ("quota", {"cpu_quota": 2.0}),
    "fit_loop_fixed": ("fit_loop", {"num_workers": 2}),
}
#: Variants that fix a variant (its base is itself in VARIANTS).
FIXES_OF_VARIANTS: dict[str, tuple[str, dict[str, Any]]] = {
    "optimizer_loop_sgd_fixed": ("optimizer_loop_sgd", {"optimizer_impl": "fused"}),
    "recompute_fixed": ("recompute", {"checkpoint_activations": False}),
}
for _name, (_base, _change) in (VARIANTS | FIXES | FIXES_OF_VARIANTS).items():
    CONFIGS[_name] = dataclasses.replace(CONFIGS[_base], **_change)


#: The optimizer implementations ``--optimizer-impl`` may ask for.
OPTIMIZER_IMPLS = ("foreach", "fused")


def with_overrides(
    cfg: Config,
    *,
    num_workers: int | None = None,
    checkpoint_every: int | None = None,
    threads: int | None = None,
    optimizer_impl: str | None = None,
) -> Config:
    """The scenario's config with the command line's overrides (None = keep)."""
    changes: dict[str, Any] = {
        "num_workers": num_workers, "checkpoint_every": checkpoint_every, "threads": threads,
    }
    for name, value in changes.items():
        if value is not None and value < 0:
            raise ValueError(f"--{name.replace('_', '-')} must be >= 0, not {value}")
    if optimizer_impl is not None and optimizer_impl not in OPTIMIZER_IMPLS:
        raise ValueError(f"--optimizer-impl must be one of {', '.join(OPTIMIZER_IMPLS)}, "
                         f"not {optimizer_impl}")
    changes["optimizer_impl"] = optimizer_impl
    return dataclasses.replace(cfg, **{k: v for k, v in changes.items() if v is not None})
