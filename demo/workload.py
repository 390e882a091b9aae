"""Small real PyTorch training jobs, each with one well-known bottleneck.

Run as ``python -m aitop.demo.workload --scenario data``. Uses CUDA when it
is present, the CPU otherwise. Every scenario is an ordinary training loop
written the way people write them; nothing in it talks to aitop. For tests and
benchmarks it can write its own ground truth (``--truth FILE``): cumulative
seconds spent in each phase, measured with timers around the DataLoader,
forward, backward, optimizer and checkpoint code, one JSON line every 0.5 s.

Scenarios:
  data        the Dataset decodes slowly and one worker cannot keep up
  compute     data is ready in memory; the model's arithmetic dominates,
              on a CPU squeezed onto one core (torch.set_num_threads(1))
  checkpoint  the full model and optimizer state is saved every few steps
  healthy     a prefetching DataLoader keeps up with a compute-bound model
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import torch
from aitop.demo import SCENARIOS
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset


@dataclass(frozen=True)
class Config:
    """Per-scenario shape of the job."""

    width: int
    depth: int
    batch_size: int
    num_workers: int
    decode_ms: float  # CPU time per sample spent in __getitem__
    checkpoint_every: int  # steps; 0 = never
    threads: int  # torch intra-op threads (0 = leave torch's default)
    optimizer: str = "adamw"  # or "sgd" (momentum: one state tensor per parameter)


CONFIGS: dict[str, Config] = {
    "data": Config(
        width=256, depth=3, batch_size=32, num_workers=1, decode_ms=2.0,
        checkpoint_every=0, threads=1,
    ),
    "compute": Config(
        width=1024, depth=6, batch_size=128, num_workers=0, decode_ms=0.0,
        checkpoint_every=0, threads=1,
    ),
    "checkpoint": Config(
        width=2048, depth=2, batch_size=2, num_workers=0, decode_ms=0.0,
        checkpoint_every=2, threads=0, optimizer="sgd",
    ),
    "healthy": Config(
        width=2048, depth=4, batch_size=128, num_workers=1, decode_ms=0.02,
        checkpoint_every=0, threads=0,
    ),
}


class SlowDecodeDataset(Dataset[tuple[torch.Tensor, torch.Tensor]]):
    """A dataset whose samples cost CPU time to produce, like JPEG decoding does."""

    def __init__(self, size: int, features: int, decode_ms: float) -> None:
        self.size = size
        self.features = features
        self.decode_s = decode_ms / 1000.0

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        deadline = time.perf_counter() + self.decode_s
        acc = 0
        while time.perf_counter() < deadline:  # busy work, as a decoder would do
            acc += 1
        generator = torch.Generator().manual_seed(index)
        x = torch.randn(self.features, generator=generator)
        return x, torch.tensor(index % 10)


def make_model(width: int, depth: int) -> nn.Module:
    layers: list[nn.Module] = [nn.Linear(64, width), nn.ReLU()]
    for _ in range(depth):
        layers += [nn.Linear(width, width), nn.ReLU()]
    layers.append(nn.Linear(width, 10))
    return nn.Sequential(*layers)


def make_loader(cfg: Config) -> DataLoader:
    if cfg.decode_ms > 0:
        dataset: Dataset = SlowDecodeDataset(1_000_000, 64, cfg.decode_ms)
    else:
        n = cfg.batch_size * 64
        dataset = TensorDataset(torch.randn(n, 64), torch.randint(0, 10, (n,)))
    kwargs: dict = {}
    if cfg.num_workers > 0:
        kwargs = {"persistent_workers": True, "prefetch_factor": 4}
    return DataLoader(
        dataset,
        batch_size=cfg.batch_size,
        shuffle=True,
        num_workers=cfg.num_workers,
        pin_memory=torch.cuda.is_available(),
        **kwargs,
    )


class Truth:
    """Cumulative phase timers, appended as JSON lines for tests to read."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.totals = dict.fromkeys(
            ("data_wait", "forward", "backward", "optimizer", "checkpoint"), 0.0
        )
        self.steps = 0
        self.started = time.time()
        self._last_write = 0.0

    def add(self, phase: str, seconds: float) -> None:
        self.totals[phase] += seconds

    def maybe_write(self, force: bool = False) -> None:
        now = time.time()
        if self.path is None or (not force and now - self._last_write < 0.5):
            return
        self._last_write = now
        record = {"t": now, "steps": self.steps, "elapsed": now - self.started, **self.totals}
        with self.path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")


def train(
    scenario: str,
    duration_s: float,
    truth_path: Path | None,
    checkpoint_dir: Path,
    ready_file: Path | None = None,
) -> int:
    cfg = CONFIGS[scenario]
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.type == "cuda" and scenario in ("compute", "healthy"):
        # A GPU finishes the CPU-sized model in microseconds and would sit idle
        # between kernel launches; scale the arithmetic up so it is busy.
        cfg = dataclasses.replace(cfg, width=cfg.width * 4, batch_size=cfg.batch_size * 16)
    model = make_model(cfg.width, cfg.depth).to(device)
    criterion = nn.CrossEntropyLoss()
    optimizer: torch.optim.Optimizer
    if cfg.optimizer == "sgd":
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)
    else:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    loader = make_loader(cfg)
    truth = Truth(truth_path)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    deadline = time.time() + duration_s
    step = 0
    epoch = 0
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
            truth.add("data_wait", t1 - t0)
            truth.add("forward", t2 - t1)
            truth.add("backward", t3 - t2)
            truth.add("optimizer", t4 - t3)
            step += 1
            if cfg.checkpoint_every and step % cfg.checkpoint_every == 0:
                state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
                torch.save(state, checkpoint_dir / "last.pt")
                truth.add("checkpoint", time.perf_counter() - t4)
            truth.steps = step
            truth.maybe_write()
            if step == 2 and ready_file is not None:
                ready_file.touch()  # past start-up and the first step's lazy imports
        epoch += 1
    truth.maybe_write(force=True)
    return step


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--scenario", choices=SCENARIOS, default="data")
    parser.add_argument("--duration", type=float, default=3600.0, help="seconds to train")
    parser.add_argument("--truth", type=Path, help="append ground-truth phase timers here")
    parser.add_argument("--checkpoint-dir", type=Path, help="where checkpoints go")
    parser.add_argument("--ready-file", type=Path,
                        help="touch this file once training is under way")
    args = parser.parse_args(argv)
    checkpoint_dir = args.checkpoint_dir or Path(tempfile.mkdtemp(prefix="aitop-demo-ckpt-"))
    checkpoint_dir.mkdir(parents=True, exist_ok=True)
    # `aitop demo` stops the job with SIGTERM: end like Ctrl-C so the finally
    # below removes the checkpoints instead of leaving them in /tmp.
    signal.signal(signal.SIGTERM, _interrupt)
    signal.signal(signal.SIGHUP, _interrupt)
    try:
        train(args.scenario, args.duration, args.truth, checkpoint_dir, args.ready_file)
    except KeyboardInterrupt:
        return 130
    finally:
        if args.checkpoint_dir is None:
            shutil.rmtree(checkpoint_dir, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
