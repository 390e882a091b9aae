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
all-reduce. SIGTERM/SIGINT
end every rank with 130.
"""

from __future__ import annotations

import argparse
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
    own threads). ``compute`` is the rest of those phases.
    """

    def __init__(self, path: Path | None) -> None:
        self.truth = Truth(path, phases=("data_wait", "compute", "comm"))
        self._wall = self._cpu = self._queued = 0.0

    def start(self) -> None:
        self._wall, self._cpu, self._queued = time.perf_counter(), time.thread_time(), _runqueue_s()

    def data(self) -> None:
        self.truth.add("data_wait", time.perf_counter() - self._wall)

    def compute(self) -> None:
        wall = time.perf_counter() - self._wall
        busy = (time.thread_time() - self._cpu) + (_runqueue_s() - self._queued)
        comm = max(0.0, wall - busy)
        self.truth.add("comm", comm)
        self.truth.add("compute", wall - comm)
        self.truth.steps += 1
        self.truth.maybe_write()


class Samples(Dataset[tuple[torch.Tensor, int]]):
    """Synthetic samples; on the slow rank each costs ``slow_ms / batch`` of CPU to make."""

    def __init__(self, cost_ms: float, length: int = 1 << 20) -> None:
        self.cost_ms = cost_ms
        self.length = length

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> tuple[torch.Tensor, int]:
        if self.cost_ms:
            _spin(self.cost_ms)
        return torch.randn(256), index % 10


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
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(256, HIDDEN), torch.nn.ReLU(), torch.nn.Linear(HIDDEN, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    cost = args.slow_ms / BATCH if rank == args.slow_rank else 0.0
    loader = DataLoader(Samples(cost), batch_size=BATCH, num_workers=args.workers)
    if args.truth:
        args.truth.mkdir(parents=True, exist_ok=True)
    clock = StepClock(args.truth / f"rank{rank}.jsonl" if args.truth else None)
    deadline = time.time() + args.duration
    # torchrun counts its restarts: only the first attempt fails.
    first_attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    fail_at = (time.time() + args.fail_once_after
               if args.fail_once_after is not None and first_attempt else None)
    hang_at = time.time() + args.hang_after
    step = 0
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
                optimizer.zero_grad()
                loss = loss_fn(model(x), y)
                loss.backward()
                optimizer.step()
                clock.compute()
                step += 1
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
    parser.add_argument("--truth", type=Path, metavar="DIR",
                        help="write each rank's own timers to DIR/rankN.jsonl")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
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
