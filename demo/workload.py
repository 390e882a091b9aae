"""Small real PyTorch training jobs, each with one well-known bottleneck.

Run as ``python -m aitop.demo.workload --scenario data``. Uses CUDA when it
is present, the CPU otherwise. Every scenario is an ordinary training loop
written the way people write them; nothing in it talks to aitop. For tests and
benchmarks it can write its own ground truth (``--truth FILE``): cumulative
seconds spent in each phase, measured with timers around the DataLoader,
forward, backward, optimizer, checkpoint and evaluation code, one JSON line
every 0.5 s. The shape of each job is in ``config.py``.

Scenarios:
  data           the Dataset decodes slowly and one worker cannot keep up
  compute        data is ready in memory; the model's arithmetic dominates,
                 on a CPU squeezed onto one core (torch.set_num_threads(1))
  checkpoint     the full model and optimizer state is saved every few steps
  healthy        a prefetching DataLoader keeps up with a compute-bound model
  cpu_saturated  one CPU-bound decoding worker per usable core, and the main
                 process trains too: every core is busy, so more workers
                 cannot help (--num-workers 4 gains ~2 % on 2 cores)
  storage        each sample is many small random O_DIRECT reads of a file on
                 a real disk (past the page cache); the loop waits on the device
  producer       no DataLoader: a producer thread builds batches into a
                 queue.Queue and the loop blocks in q.get()
  validation     every few steps a long evaluate() pass (model.eval(), no_grad)
  generator      a generator wraps the DataLoader and the loop keeps no step
                 counter (for x, y in batches(loader))
  leak           keeps every step's outputs (with their autograd graph) for an
                 end-of-run metric: host memory grows with the steps
  serving        a model server: forward passes under inference_mode, one
                 request at a time from a queue that never runs dry
  hang           trains for 3 s, then waits forever on a queue whose producer
                 is gone: a job that no longer moves
  compile        compute's loop with the model under torch.compile: its first
                 steps wait tens of seconds for inductor to build the kernels
  loading        data's loop after 40 s of building its records in Python in
                 the training process: a job that has not taken a step yet
  checkpoint_durable
                 checkpoint's saves, each written to a temporary file, flushed,
                 fsync'ed and renamed into place
  data_heavy, compute_small, checkpoint_deep
                 data with 4 ms of decode per sample, batches of 16 and a
                 512-wide model; compute with a 384-wide, 8-deep model and
                 batches of 64; checkpoint with a 1536-wide, 3-deep model
                 saved every 3 steps (shapes no calibration constant was
                 fitted on)
  inline_loading data's decoding done in the training thread (no worker) while
                 torch's default threads hold every core as the step computes
  optimizer_loop 302 small Linear layers trained with AdamW's default (for-loop)
                 update on a CPU: the optimizer step is half the loop
  optimizer_loop_sgd
                 the same with SGD (momentum) over 252 layers 48 wide, batches of 16
  optimizer_loop_fixed, optimizer_loop_sgd_fixed
                 their mechanical fix: the optimizer created with fused=True
  quota          data's loop sized to the machine (torch threads and workers =
                 os.cpu_count()), meant to run under a 1-CPU cgroup quota that
                 whoever starts it makes (quota_raised: 2 CPUs; quota_sized:
                 threads and workers sized to the quota)
  fit_loop       a Lightning-style loop (trainer, fetcher one batch ahead,
                 training_step, a .item() logged a step) with torch's default
                 threads and one DataLoader worker decoding in a Python loop;
                 fit_loop_waits: the worker waits (a sleep) instead
  data_fixed, checkpoint_fixed, compute_fixed, leak_fixed, serving_batched
                 the mechanical fix of data (2 workers), checkpoint (4x less
                 often), compute (threads = usable cores), leak (keep
                 loss.item(), a float) and serving (up to 32 waiting requests
                 per forward pass: dynamic batching)
  cow, cow_fixed, sawtooth
                 DataLoader workers copying a dataset of Python dicts page by
                 page (copy-on-read), the same records in tensors, and
                 workers re-created every epoch, each caching what it decodes
                 (demo/memory_jobs.py; they record their own memory)
  recompile      a sequence model under torch.compile(dynamic=False) meeting a
                 new sequence length every 30 steps: it recompiles each time
                 (demo/compile_jobs.py); recompile_dynamic compiles with
                 dynamic=True, recompile_padded pads to one length
  epoch_workers  epochs of 8 batches whose 2 DataLoader workers start again each
                 epoch, a second of CPU in worker_init_fn each
                 (demo/epoch_jobs.py); epoch_workers_persistent keeps them
  serving_preprocess
                 a server batching up to 32 text requests and encoding each in
                 Python on its serving thread (demo/serve_jobs.py);
                 serving_preprocess_pool encodes in 2 processes a batch ahead

Their measured shapes and the fixed variants' speed-ups are in config.py.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import queue
import random
import runpy
import shutil
import signal
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, cast

import torch
from aitop.demo import SCENARIOS
from aitop.demo.config import CONFIGS, OPTIMIZER_IMPLS, Config, with_overrides
from aitop.demo.data import (
    INPUT_FEATURES,
    AugmentedImages,
    Sample,
    make_dataset,
    make_loader,
    make_val_loader,
)
from aitop.demo.diskdata import real_disk_scratch
from aitop.demo.fit_loop import fit
from aitop.demo.memory_jobs import train_records
from aitop.demo.truth import Truth
from torch import nn
from torch.utils.checkpoint import checkpoint
from torch.utils.data import DataLoader, Dataset


def make_model(width: int, depth: int, checkpointed: bool = False) -> nn.Module:
    layers: list[nn.Module] = [nn.Linear(INPUT_FEATURES, width), nn.ReLU()]
    for _ in range(depth):
        hidden = nn.Sequential(nn.Linear(width, width), nn.ReLU())
        layers.append(Checkpointed(hidden) if checkpointed else hidden)
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers)


class Checkpointed(nn.Module):
    """A block whose activations are recomputed in backward (torch.utils.checkpoint)."""

    def __init__(self, block: nn.Module) -> None:
        super().__init__()
        self.block = block

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self.training:
            return cast(torch.Tensor, self.block(x))
        return cast(torch.Tensor, checkpoint(self.block, x, use_reentrant=False))


@dataclasses.dataclass
class Setup:
    """What every loop needs before its first step."""

    cfg: Config
    model: nn.Module
    criterion: nn.Module
    optimizer: torch.optim.Optimizer
    device: torch.device
    sync: Callable[[], None]

    def parts(self) -> tuple[Config, nn.Module, nn.Module, torch.optim.Optimizer,
                             torch.device, Callable[[], None]]:
        """The fields as a tuple, unpacked into a loop's locals (not copied)."""
        return (self.cfg, self.model, self.criterion, self.optimizer, self.device,
                self.sync)


def set_up(cfg: Config) -> Setup:
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda" and cfg.gpu_scale:
        # A GPU finishes the CPU-sized model in microseconds and would sit idle
        # between kernel launches; scale the arithmetic up so it is busy.
        cfg = dataclasses.replace(cfg, width=cfg.width * 4, batch_size=cfg.batch_size * 16)
    model = make_model(cfg.width, cfg.depth, cfg.checkpoint_activations).to(device)
    if cfg.compile_model:
        # Compiled on its first call: the loop's first steps wait for inductor.
        model = cast(nn.Module, torch.compile(model))
    optimizer: torch.optim.Optimizer
    impl = {cfg.optimizer_impl: True} if cfg.optimizer_impl else {}
    if cfg.optimizer == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9, **impl)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, **impl)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    return Setup(cfg, model, nn.CrossEntropyLoss(), optimizer, device, sync)


def evaluate(model: nn.Module, val_loader: DataLoader, device: torch.device) -> float:
    """Accuracy on the held-out set: forward passes only, no gradients."""
    model.eval()
    correct = 0
    total = 0
    with torch.no_grad():
        for x, y in val_loader:
            x, y = x.to(device), y.to(device)
            correct += int((model(x).argmax(dim=1) == y).sum())
            total += len(y)
    model.train()
    return correct / max(total, 1)


def wait_for_a_producer_that_is_gone(feeder_works_s: float = 2.0) -> None:
    """Block on a queue whose feeder thread dies without filling it.

    The feeder works a while (blurring images, as a producer does) and then
    raises, as one does on a corrupt record: Python prints its traceback to
    the job's log, and the loop waits on.
    """
    batches: queue.Queue[object] = queue.Queue()

    def feed() -> None:
        images = AugmentedImages(10**6, passes=4)
        deadline = time.time() + feeder_works_s
        index = 0
        while time.time() < deadline:
            images[index]
            index += 1
        raise RuntimeError(f"record {index} is truncated (the hang demo's feeder fails)")

    threading.Thread(target=feed, name="feeder", daemon=True).start()
    batches.get()


def save_durably(state: dict[str, Any], path: Path) -> None:
    """Save, flush, fsync, rename: the checkpoint is whole on the disk or not there."""
    partial = path.with_name(path.name + ".partial")
    # Saved by path, so torch writes it in C++: written through a Python file
    # object, a SIGTERM inside a write broke torch's writer ("unexpected pos")
    # and the job ended with 1 instead of 130.
    torch.save(state, partial)
    with partial.open("rb+") as f:
        f.flush()
        os.fsync(f.fileno())
    os.replace(partial, path)


def prepare_records(seconds: float) -> int:
    """Tokenize a synthetic corpus in Python for ``seconds``, as a script builds its
    dataset before training: the CPU is busy and no step is taken. Returns the
    tokens made (only counted, so memory stays flat)."""
    rng = random.Random(0)
    deadline = time.time() + seconds
    tokens = 0
    while time.time() < deadline:
        line = " ".join(str(rng.random()) for _ in range(64))
        tokens += len([hash(word) % 50257 for word in line.split()])
    return tokens


def train(
    cfg: Config,
    duration_s: float,
    truth_path: Path | None,
    checkpoint_dir: Path,
    ready_file: Path | None = None,
    data_dir: Path | None = None,
) -> int:
    """The usual loop: DataLoader, forward, backward, step; checkpoints and evals."""
    if cfg.prepare_s:
        prepare_records(cfg.prepare_s)
    job = set_up(cfg)
    cfg, model, criterion, optimizer, device, sync = job.parts()
    loader = make_loader(cfg, data_dir)
    val_loader = make_val_loader(cfg) if cfg.eval_every else None
    truth = Truth(truth_path)
    deadline = time.time() + duration_s
    step = 0
    epoch = 0
    kept: list[object] = []  # per step, for an end-of-run metric (cfg.keep_per_step)
    hang_at = time.time() + cfg.hang_after_s if cfg.hang_after_s else None
    while time.time() < deadline:
        batches = iter(loader)
        while time.time() < deadline:
            t0 = time.perf_counter()
            try:
                x, y = next(batches)
            except StopIteration:
                truth.add("data_wait", time.perf_counter() - t0)
                break
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            t1 = time.perf_counter()
            out = model(x)
            loss = criterion(out, y)
            if cfg.keep_per_step == "outputs":
                kept.append(out)
            elif cfg.keep_per_step == "numbers":
                kept.append(loss.item())
            sync()
            t2 = time.perf_counter()
            loss.backward()
            sync()
            t3 = time.perf_counter()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            sync()
            t4 = time.perf_counter()
            truth.add("data_wait", t1 - t0)
            truth.add("forward", t2 - t1)
            truth.add("backward", t3 - t2)
            truth.add("optimizer", t4 - t3)
            step += 1
            if cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
                with truth.timing("checkpoint"):
                    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
                    if cfg.durable_checkpoints:
                        save_durably(state, checkpoint_dir / "last.pt")
                    else:
                        torch.save(state, checkpoint_dir / "last.pt")
            if val_loader is not None and step % cfg.eval_every == 0:
                with truth.timing("eval"):
                    evaluate(model, val_loader, device)
            truth.steps = step
            truth.maybe_write()
            if hang_at is not None and time.time() >= hang_at:
                wait_for_a_producer_that_is_gone()
            if step == 2 and ready_file is not None:
                ready_file.touch()  # past start-up and the first step's lazy imports
        epoch += 1
    truth.maybe_write(force=True)
    return step


def produce_batches(dataset: Dataset, batch_size: int,
                    out: queue.Queue[Sample], stop: threading.Event) -> None:
    """The producer thread: decode samples, stack them, hand batches over."""
    while not stop.is_set():
        samples = [dataset[random.randrange(1_000_000)] for _ in range(batch_size)]
        batch = torch.stack([x for x, _ in samples]), torch.stack([y for _, y in samples])
        while not stop.is_set():
            try:
                out.put(batch, timeout=0.2)
                break
            except queue.Full:
                continue


@contextlib.contextmanager
def running_beside(target: Callable[..., None], name: str, *args: object) -> Iterator[None]:
    """A daemon thread running ``target(*args, stop)`` for the block, then stopped.

    Waited for: a daemon thread still inside a torch op when the interpreter
    exits aborts the process ("terminate called ...").
    """
    stop = threading.Event()
    thread = threading.Thread(target=target, name=name, daemon=True, args=(*args, stop))
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(timeout=10)


def train_from_queue(
    cfg: Config, duration_s: float, truth_path: Path | None, ready_file: Path | None = None,
) -> int:
    """A loop fed by a hand-written producer thread through a bounded queue."""
    job = set_up(cfg)
    cfg, model, criterion, optimizer, device, sync = job.parts()
    batches: queue.Queue[Sample] = queue.Queue(maxsize=4)
    truth = Truth(truth_path)
    deadline = time.time() + duration_s
    step = 0
    with running_beside(produce_batches, "batch-producer",
                        make_dataset(cfg, None), cfg.batch_size, batches):
        while time.time() < deadline:
            t0 = time.perf_counter()
            x, y = batches.get()
            x, y = x.to(device), y.to(device)
            t1 = time.perf_counter()
            loss = criterion(model(x), y)
            sync()
            t2 = time.perf_counter()
            loss.backward()
            sync()
            t3 = time.perf_counter()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)
            sync()
            t4 = time.perf_counter()
            for phase, seconds in (("data_wait", t1 - t0), ("forward", t2 - t1),
                                   ("backward", t3 - t2), ("optimizer", t4 - t3)):
                truth.add(phase, seconds)
            step += 1
            truth.count(step, ready_file)
    truth.maybe_write(force=True)
    return step


def batches(loader: DataLoader) -> Iterator[Sample]:
    """Normalised batches, epoch after epoch: the loader behind a generator."""
    while True:
        for x, y in loader:
            yield x.float() / 255, y


def train_streaming(
    cfg: Config, deadline: float, truth_path: Path | None, ready_file: Path | None = None,
) -> int:
    """A loop over a generator that keeps no step counter of its own.

    The time between the end of one iteration and the start of the next is the
    ``for`` statement's ``next()`` on the generator: that is the data wait. It
    takes the wall-clock ``deadline`` rather than a duration, which py-spy would
    show as a whole number (``duration_s: 20``) in this frame.
    """
    job = set_up(cfg)
    cfg, model, criterion, optimizer, device, sync = job.parts()
    truth = Truth(truth_path)
    waiting_since = time.perf_counter()
    for x, y in batches(make_loader(cfg)):
        t1 = time.perf_counter()
        loss = criterion(model(x.to(device)), y.to(device))
        sync()
        t2 = time.perf_counter()
        loss.backward()
        sync()
        t3 = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        sync()
        t4 = time.perf_counter()
        for phase, seconds in (("data_wait", t1 - waiting_since), ("forward", t2 - t1),
                               ("backward", t3 - t2), ("optimizer", t4 - t3)):
            truth.add(phase, seconds)
        truth.count(truth.steps + 1, ready_file)
        if time.time() >= deadline:
            break
        waiting_since = time.perf_counter()
    truth.maybe_write(force=True)
    return truth.steps


#: Requests a serving demo's client keeps waiting in the queue (a busy server).
REQUESTS_WAITING = 2000


def send_requests(width: int, requests: queue.Queue[torch.Tensor], stop: threading.Event) -> None:
    """A client that keeps the server's queue full of single-input requests."""
    pool = torch.randn(256, width)
    i = 0
    while not stop.is_set():
        if requests.qsize() >= REQUESTS_WAITING:
            time.sleep(0.01)
            continue
        for _ in range(100):
            requests.put(pool[i % len(pool)])
            i += 1


def serve(cfg: Config, duration_s: float, truth_path: Path | None,
          ready_file: Path | None = None) -> int:
    """A model server: forward passes under inference_mode, requests from a queue.

    ``cfg.serve_batch`` 1 answers one request per forward pass; more takes up to
    that many of the waiting requests into one pass (dynamic batching).
    """
    job = set_up(cfg)
    model, device = job.model, job.device
    model.eval()
    requests: queue.Queue[torch.Tensor] = queue.Queue()
    truth = Truth(truth_path)
    deadline = time.time() + duration_s
    served = 0
    with (running_beside(send_requests, "client", INPUT_FEATURES, requests),
          torch.inference_mode()):
        while time.time() < deadline:
            t0 = time.perf_counter()
            batch = [requests.get()]
            while len(batch) < cfg.serve_batch and not requests.empty():
                batch.append(requests.get_nowait())
            t1 = time.perf_counter()
            model(torch.stack(batch).to(device))
            job.sync()
            truth.add("data_wait", t1 - t0)
            truth.add("forward", time.perf_counter() - t1)
            served += len(batch)
            truth.count(served, ready_file)
    truth.maybe_write(force=True)
    return served


def run_module_level_script(duration_s: float, truth_path: Path | None,
                            ready_file: Path | None) -> int:
    """demo/module_loop.py run as ``__main__``, as ``python module_loop.py`` would."""
    argv = ["module_loop.py", "--duration", str(duration_s)]
    argv += ["--truth", str(truth_path)] if truth_path else []
    argv += ["--ready-file", str(ready_file)] if ready_file else []
    saved, sys.argv = sys.argv, argv
    try:
        runpy.run_module("aitop.demo.module_loop", run_name="__main__", alter_sys=True)
    finally:
        sys.argv = saved
    return 0


def run(cfg: Config, duration_s: float, truth_path: Path | None, checkpoint_dir: Path,
        ready_file: Path | None = None) -> int:
    """Train with the scenario's loop; storage data lives (and dies) beside the checkpoints."""
    if cfg.loop == "serve":
        return serve(cfg, duration_s, truth_path, ready_file)
    if cfg.loop == "producer":
        return train_from_queue(cfg, duration_s, truth_path, ready_file)
    if cfg.loop == "generator":
        return train_streaming(cfg, time.time() + duration_s, truth_path, ready_file)
    if cfg.loop == "module":
        return run_module_level_script(duration_s, truth_path, ready_file)
    if cfg.loop == "records":
        return train_records(cfg, duration_s, truth_path, ready_file)
    if cfg.loop == "sequences":
        from aitop.demo.compile_jobs import train_recompiling
        return train_recompiling(cfg, duration_s, truth_path, ready_file)
    if cfg.loop == "epochs":
        from aitop.demo.epoch_jobs import train_epochs
        return train_epochs(cfg, duration_s, truth_path, ready_file)
    if cfg.loop == "serve_texts":
        from aitop.demo.serve_jobs import serve_texts
        return serve_texts(cfg, duration_s, truth_path, ready_file)
    if cfg.loop == "fit":
        job = set_up(cfg)
        return fit(job.model, job.criterion, job.optimizer, make_loader(job.cfg), duration_s,
                   truth_path, ready_file)
    scratch: contextlib.AbstractContextManager[Path | None] = (
        real_disk_scratch(checkpoint_dir.parent) if cfg.storage_blocks
        else contextlib.nullcontext()
    )
    with scratch as data_dir:
        return train(cfg, duration_s, truth_path, checkpoint_dir, ready_file, data_dir)


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenario", choices=SCENARIOS, default="data")
    parser.add_argument("--duration", type=float, default=3600.0, help="seconds to train")
    parser.add_argument("--truth", type=Path, help="append ground-truth phase timers here")
    parser.add_argument("--checkpoint-dir", type=Path, help="where checkpoints go")
    parser.add_argument("--ready-file", type=Path,
                        help="touch this file once training is under way")
    parser.add_argument("--num-workers", type=int, metavar="N",
                        help="override the scenario's DataLoader workers")
    parser.add_argument("--checkpoint-every", type=int, metavar="N",
                        help="override the scenario's steps between checkpoints (0 = never)")
    parser.add_argument("--threads", type=int, metavar="N",
                        help="override the scenario's torch threads (0 = torch's default)")
    parser.add_argument("--optimizer-impl", choices=OPTIMIZER_IMPLS,
                        help="create the optimizer with foreach=True or fused=True")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        cfg = with_overrides(CONFIGS[args.scenario], num_workers=args.num_workers,
                             checkpoint_every=args.checkpoint_every, threads=args.threads,
                             optimizer_impl=args.optimizer_impl)
    except ValueError as exc:
        raise SystemExit(f"aitop.demo.workload: {exc}") from None
    checkpoint_dir = args.checkpoint_dir or Path(tempfile.mkdtemp(prefix="aitop-demo-ckpt-"))
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    # `aitop demo` stops the job with SIGTERM: end like Ctrl-C so the finally
    # below removes the checkpoints (and the storage data) instead of leaving
    # them in /tmp.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    try:
        run(cfg, args.duration, args.truth, checkpoint_dir, args.ready_file)
    except KeyboardInterrupt:
        return 130
    finally:
        if args.checkpoint_dir is None:
            shutil.rmtree(checkpoint_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
