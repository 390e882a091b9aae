"""A small DistributedDataParallel job on CPU (gloo), for the multi-process tests.

Run it the ways people run such jobs:

    torchrun --nproc_per_node=2 -m aitop.demo.ddp --duration 60
    python -m aitop.demo.ddp --spawn 2 --duration 60      # torch.multiprocessing.spawn

Each rank trains the same small model on its own synthetic batches; DDP's
reducer all-reduces the gradients inside ``backward()``. ``--slow-rank R
--slow-ms MS`` makes rank R spend MS of CPU per step preparing its batch (a
straggler the others wait for). SIGTERM/SIGINT end every rank with 130.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from typing import Any


def _spin(ms: float) -> None:
    """Burn ``ms`` of CPU: a batch that is expensive to prepare."""
    end = time.thread_time() + ms / 1000.0
    while time.thread_time() < end:
        pass


def train(rank: int, world_size: int, args: argparse.Namespace) -> None:
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    torch.set_num_threads(1)
    if not dist.is_initialized():
        dist.init_process_group("gloo", rank=rank, world_size=world_size)
    model = DistributedDataParallel(torch.nn.Sequential(
        torch.nn.Linear(256, 512), torch.nn.ReLU(), torch.nn.Linear(512, 10)))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    loss_fn = torch.nn.CrossEntropyLoss()
    deadline = time.time() + args.duration
    step = 0
    while time.time() < deadline:
        if rank == args.slow_rank:
            _spin(args.slow_ms)
        x, y = torch.randn(64, 256), torch.randint(0, 10, (64,))
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        optimizer.step()
        step += 1
    dist.destroy_process_group()


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
    parser.add_argument("--slow-ms", type=float, default=0.0, metavar="MS")
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
