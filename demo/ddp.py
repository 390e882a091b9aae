"""A small DistributedDataParallel job on CPU (gloo), for the multi-process tests.

Run it the ways people run such jobs:

    torchrun --nproc_per_node=2 -m aitop.demo.ddp --duration 60
    python -m aitop.demo.ddp --spawn 2 --duration 60      # torch.multiprocessing.spawn

Each rank trains the same small model on batches from its own DataLoader;
DDP's reducer all-reduces the gradients inside ``backward()``. ``--slow-rank R
--slow-ms MS`` makes rank R's samples cost MS of CPU per batch to make (a
straggler slowed by its own data loading, which the others wait for).
``--truth DIR`` writes each rank's own timers (data wait, compute, and the
time it waited for the other ranks). ``--checkpoint-rank R`` makes rank R alone
save a checkpoint every ``--checkpoint-every`` steps (as rank 0 does in many
jobs), which the others wait for in the next all-reduce. ``--fail-once-after S`` makes rank 0 fail
once (an elastic restart under ``torchrun --max-restarts=1``). ``--hang-rank R
--hang-after S`` makes rank R, S seconds in, wait forever for a batch from a
producer that is gone (a hung rank), while the others wait for it in DDP's next
all-reduce. ``--accumulate N`` steps the optimizer once every N micro-batches
(the loss divided by N), each micro-batch's backward all-reducing the gradients
as DDP does unless told otherwise; ``--no-sync`` runs the forward and backward
of micro-batches 1..N-1 inside ``model.no_sync()`` (the fix), so only the last
one all-reduces. With ``--truth``, each rank also times ``dist.all_reduce`` of
its gradients' size at start (``allreduce``: that time for every micro-batch
that all-reduced) and counts its backward passes. SIGTERM/SIGINT
end every rank with 130.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import queue
import shutil
import signal
import sys
import tempfile
import threading
import time
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from aitop.demo.truth import Truth
from torch.utils.data import DataLoader, Dataset

if TYPE_CHECKING:
    import torch.distributed as dist

#: Features of a sample (of each of its tokens, with --tokens).
FEATURES = 256
#: Samples per batch.
BATCH = 64
#: Width of the hidden layer: ~10 ms of forward/backward per step on one core.
HIDDEN = 4096
#: Floats added to a checkpoint (--checkpoint-rank), so that writing it takes time.
CHECKPOINT_PADDING = 8_000_000


def _spin(ms: float) -> None:
    """Burn ``ms`` of CPU: a sample that is expensive to prepare."""
    end = time.thread_time() + ms / 1000.0
    while time.thread_time() < end:
        pass


def _runqueue_s() -> float:
    """Seconds this thread has spent runnable but waiting for a CPU (schedstat)."""
    try:
        with open(f"/proc/self/task/{threading.get_native_id()}/schedstat") as fh:
            return int(fh.read().split()[1]) / 1e9
    except (OSError, ValueError, IndexError):
        return 0.0


class StepClock:
    """The rank's own timers: data wait, and compute split into work and waiting.

    ``comm`` is the time inside forward/backward/optimizer that the training
    thread spent neither computing nor queued for a CPU: blocked in the gradient
    all-reduce, i.e. waiting for the other ranks (gloo does the exchange on its
    own threads). ``compute`` is the rest of those phases. ``allreduce`` is the
    all-reduce's own time, measured on the side (:func:`time_allreduce`), once
    for each backward pass that all-reduced; ``backward_passes`` counts them all
    (a count, not seconds), and ``steps`` the optimizer's steps.
    """

    def __init__(self, path: Path | None) -> None:
        self.truth = Truth(path, phases=("data_wait", "compute", "comm", "allreduce",
                                         "backward_passes"))
        self._wall = self._cpu = self._queued = 0.0

    def start(self) -> None:
        self._wall, self._cpu, self._queued = time.perf_counter(), time.thread_time(), _runqueue_s()

    def data(self) -> None:
        self.truth.add("data_wait", time.perf_counter() - self._wall)

    def compute(self, *, stepped: bool = True, allreduce_s: float = 0.0) -> None:
        """One micro-batch's forward and backward done (and the optimizer's step if
        ``stepped``); ``allreduce_s``: what its all-reduce takes, 0 if it had none."""
        wall = time.perf_counter() - self._wall
        busy = (time.thread_time() - self._cpu) + (_runqueue_s() - self._queued)
        comm = max(0.0, wall - busy)
        self.truth.add("comm", comm)
        self.truth.add("compute", wall - comm)
        self.truth.add("allreduce", allreduce_s)
        self.truth.add("backward_passes", 1.0)
        self.truth.steps += int(stepped)
        self.truth.maybe_write()


def time_allreduce(model: torch.nn.Module, budget_s: float = 2.0) -> float:
    """Seconds one ``dist.all_reduce`` of the model's gradients takes, every rank at it.

    What each micro-batch's backward pays in DDP outside ``no_sync()``: the same
    bytes through the same process group, timed on the side before training,
    as many times as fit in about ``budget_s`` (3 to 20; the ranks agree on
    the count, since each round is a collective).
    """
    import torch.distributed as dist

    flat = torch.zeros(sum(p.numel() for p in model.parameters()))
    started = time.perf_counter()
    dist.all_reduce(flat)
    first = torch.tensor([time.perf_counter() - started])
    dist.all_reduce(first, op=dist.ReduceOp.MAX)
    rounds = max(3, min(20, int(budget_s / max(float(first), 1e-6))))
    dist.barrier()
    started = time.perf_counter()
    for _ in range(rounds):
        dist.all_reduce(flat)
    return (time.perf_counter() - started) / rounds


class Samples(Dataset[tuple[torch.Tensor, int]]):
    """Synthetic samples: 256 features, or (``tokens`` > 1) that many token ids of a
    ``vocab``-word vocabulary; on the slow rank each costs ``slow_ms / batch`` of CPU
    to make."""

    def __init__(self, cost_ms: float, tokens: int = 1, vocab: int = 1,
                 length: int = 1 << 20) -> None:
        self.cost_ms = cost_ms
        self.tokens = tokens
        self.vocab = vocab
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self.cost_ms:
            _spin(self.cost_ms)
        if self.tokens > 1:
            return torch.randint(self.vocab, (self.tokens,)), index % 10
        return torch.randn(FEATURES), index % 10


class TokenModel(torch.nn.Module):
    """Token ids embedded (a ``vocab`` x 256 table: most of the parameters, little
    arithmetic), ``trunk`` layers applied to every token (much arithmetic, few
    parameters), pooled, classified. The embedding's gradient is the last one
    backward makes, as a language model's is, so its all-reduce follows the
    backward pass rather than overlapping it."""

    def __init__(self, vocab: int, trunk: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, FEATURES)
        self.trunk = torch.nn.Sequential(*(
            layer for _ in range(trunk)
            for layer in (torch.nn.Linear(FEATURES, FEATURES), torch.nn.ReLU())))
        self.head = torch.nn.Linear(FEATURES, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(self.embed(x)).mean(dim=1))


def make_model(args: argparse.Namespace) -> torch.nn.Module:
    """A hidden layer over 256-vector samples, or (``--tokens``) the token model."""
    if args.tokens > 1:
        return TokenModel(args.vocab, args.trunk)
    return torch.nn.Sequential(torch.nn.Linear(FEATURES, args.hidden), torch.nn.ReLU(),
                               torch.nn.Linear(args.hidden, 10))


def make_optimizer(model: torch.nn.Module, name: str) -> torch.optim.Optimizer:
    """SGD, SGD with momentum or AdamW, as torch builds them (their for-loop update on CPU)."""
    if name == "adamw":
        return torch.optim.AdamW(model.parameters(), lr=1e-4)
    return torch.optim.SGD(model.parameters(), lr=0.01,
                           momentum=0.9 if name == "sgd-momentum" else 0.0)


def _attempt_store(world_size: int, rank: int) -> dist.Store | None:
    """Under torchrun, the rendezvous store with keys of this attempt only.

    After an elastic restart the new ranks meet in the store the old ones used;
    without a prefix of their own, a new rank can read an address the old rank
    0 published and the restarted job deadlocks in its first all-reduce
    (seen under torchrun's static and c10d rendezvous alike).
    """
    import torch.distributed as dist

    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT")
    if attempt is None:
        return None
    hosted_by_agent = os.environ.get("TORCHELASTIC_USE_AGENT_STORE") == "True"
    store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                          world_size, is_master=not hosted_by_agent and rank == 0,
                          timeout=timedelta(seconds=120))
    return dist.PrefixStore(f"aitop-demo/attempt-{attempt}", store)


def save_checkpoint(model: torch.nn.Module, optimizer: torch.optim.Optimizer,
                    directory: Path) -> None:
    """What rank 0 alone does in many jobs: the others go on to the next all-reduce."""
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(),
             "padding": torch.zeros(CHECKPOINT_PADDING)}
    torch.save(state, directory / "last.pt")


def train(rank: int, world_size: int, args: argparse.Namespace) -> None:
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=rank, world_size=world_size,
                                store=_attempt_store(world_size, rank))
    model = DistributedDataParallel(make_model(args))
    optimizer = make_optimizer(model, args.optimizer)
    loss_fn = torch.nn.CrossEntropyLoss()
    cost = args.slow_ms / args.batch if rank == args.slow_rank else 0.0
    loader = DataLoader(Samples(cost, args.tokens, args.vocab), batch_size=args.batch,
                        num_workers=args.workers)
    if args.truth:
        args.truth.mkdir(parents=True, exist_ok=True)
    allreduce_s = time_allreduce(model) if args.truth else 0.0
    clock = StepClock(args.truth / f"rank{rank}.jsonl" if args.truth else None)
    deadline = time.time() + args.duration
    # torchrun counts its restarts: only the first attempt fails.
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    fail_at = (time.time() + args.fail_once_after
               if args.fail_once_after is not None and first_attempt else None)
    hang_at = time.time() + args.hang_after
    step = micro = 0
    # Only the checkpointing rank needs a directory, and it goes however the
    # rank ends (a test stops a job with SIGTERM, raised here as KeyboardInterrupt).
    checkpoints = (Path(tempfile.mkdtemp(prefix="aitop-ddp-ckpt-"))
                   if rank == args.checkpoint_rank else None)
    try:
        while time.time() < deadline:
            clock.start()
            for x, y in loader:
                clock.data()
                clock.start()
                micro += 1
                last = micro % args.accumulate == 0
                quiet = args.no_sync and not last
                with model.no_sync() if quiet else contextlib.nullcontext():
                    loss = loss_fn(model(x), y) / args.accumulate
                    loss.backward()
                if last:
                    optimizer.step()
                    optimizer.zero_grad()
                    step += 1
                clock.compute(stepped=last, allreduce_s=0.0 if quiet else allreduce_s)
                if not last:
                    clock.start()
                    continue
                if checkpoints is not None and step % args.checkpoint_every == 0:
                    save_checkpoint(model, optimizer, checkpoints)
                if time.time() >= deadline:
                    break
                if rank == 0 and fail_at is not None and time.time() >= fail_at:
                    raise SystemExit("rank 0 fails once, as asked (--fail-once-after)")
                if rank == args.hang_rank and time.time() >= hang_at:
                    clock.truth.maybe_write(force=True)
                    wait_for_a_batch_nobody_sends()
                clock.start()
        clock.truth.maybe_write(force=True)
    finally:
        if checkpoints is not None:
            shutil.rmtree(checkpoints, ignore_errors=True)
    dist.destroy_process_group()


def wait_for_a_batch_nobody_sends() -> None:
    """Block for good on a queue no thread will ever fill (its producer died)."""
    queue.Queue().get()


def _spawned(index: int, world_size: int, args: argparse.Namespace) -> None:
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    _quiet_exit_on_signals()
    try:
        train(index, world_size, args)
    except KeyboardInterrupt:
        sys.exit(130)


def _stop(signum: int, frame: Any) -> None:
    raise KeyboardInterrupt


def _quiet_exit_on_signals() -> None:
    signal.signal(signal.SIGTERM, _stop)


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--duration", type=float, default=3600.0, help="seconds to train")
    parser.add_argument("--spawn", type=int, metavar="N",
                        help="start N ranks with torch.multiprocessing.spawn")
    parser.add_argument("--port", type=int, default=29533, help="MASTER_PORT for --spawn")
    parser.add_argument("--slow-rank", type=int, default=-1, metavar="R")
    parser.add_argument("--slow-ms", type=float, default=0.0, metavar="MS",
                        help="CPU per batch that rank R spends making its samples")
    parser.add_argument("--workers", type=int, default=0, help="DataLoader workers per rank")
    parser.add_argument("--checkpoint-rank", type=int, default=-1, metavar="R",
                        help="this rank alone saves a checkpoint every --checkpoint-every steps")
    parser.add_argument("--checkpoint-every", type=int, default=4, metavar="N")
    parser.add_argument("--fail-once-after", type=float, metavar="S",
                        help="rank 0 exits with an error after S s on torchrun's first attempt "
                        "(with --max-restarts=1 torchrun then restarts every rank)")
    parser.add_argument("--hang-rank", type=int, default=-1, metavar="R",
                        help="rank R waits forever for a batch after --hang-after seconds")
    parser.add_argument("--hang-after", type=float, default=10.0, metavar="S")
    parser.add_argument("--batch", type=int, default=BATCH, metavar="B",
                        help=f"samples per (micro-)batch (default {BATCH})")
    parser.add_argument("--hidden", type=int, default=HIDDEN, metavar="H",
                        help=f"width of the hidden layer: its gradients are what is all-reduced "
                        f"(default {HIDDEN})")
    parser.add_argument("--tokens", type=int, default=1, metavar="T",
                        help="token ids per sample, embedded and through --trunk token-wise "
                        "layers (default 1: 256 features through the hidden layer)")
    parser.add_argument("--vocab", type=int, default=65536, metavar="V",
                        help="rows of the token embedding (with --tokens): its gradient is "
                        "what is all-reduced")
    parser.add_argument("--trunk", type=int, default=0, metavar="D",
                        help="token-wise Linear(256, 256) layers (with --tokens)")
    parser.add_argument("--optimizer", choices=("sgd", "sgd-momentum", "adamw"), default="sgd",
                        help="SGD (default), SGD with momentum 0.9, or AdamW")
    parser.add_argument("--accumulate", type=int, default=1, metavar="N",
                        help="micro-batches per optimizer step (each backward all-reduces)")
    parser.add_argument("--no-sync", action="store_true",
                        help="micro-batches 1..N-1 inside model.no_sync(): one all-reduce a step")
    parser.add_argument("--truth", type=Path, metavar="DIR",
                        help="write each rank's own timers to DIR/rankN.jsonl")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    for name in ("accumulate", "batch", "hidden", "tokens", "vocab"):
        if getattr(args, name) < 1:
            raise SystemExit(f"aitop.demo.ddp: --{name} must be >= 1, not {getattr(args, name)}")
    _quiet_exit_on_signals()
    try:
        if args.spawn:
            import torch.multiprocessing as mp

            os.environ["MASTER_ADDR"] = "127.0.0.1"
            os.environ["MASTER_PORT"] = str(args.port)
            mp.spawn(_spawned, args=(args.spawn, args), nprocs=args.spawn, join=True)
        else:
            train(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), args)
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
