"""Small real CUDA training jobs for ``aitop selftest --gpu``, each its own ground truth.

Run as ``python -m aitop.demo.gpu_jobs --job NAME --truth FILE --duration S``;
``--info`` prints PyTorch's and CUDA's facts as JSON. Without CUDA a job ends
at once with one line on stderr and exit status 3. Nothing here talks to
aitop: the self-test attaches to these processes from outside, as a user would.

Jobs (each one ordinary training loop, written the way people write them):
  matmul  GPU-bound: an MLP of 8192-wide bf16 matmuls on data already on the
          GPU; aitop should say compute, with high utilisation
  data    data-starved: a Dataset that decodes slowly behind two workers feeds
          a small model; aitop should say data_loading, with low utilisation
  item    the matmul job calling ``loss.item()`` every step: the loop waits
          for the GPU there, which aitop should read as phase sync (device
          time), not as Python overhead (other)
  memory  a small model training next to a buffer that fills the GPU to ~98 %
          of its memory; aitop should say memory
  pcie    no model: copies a pinned 256 MiB buffer to the GPU over and over,
          counting bytes, for checking NVML's PCIe counters

Ground truth: every 0.5 s the job appends one JSON line to ``--truth`` with
cumulative counters since training started: host seconds the training thread
spent in each phase (timers around the DataLoader, forward, backward,
optimizer and ``.item()`` calls), GPU seconds of forward, backward and
optimizer from CUDA events recorded between them, steps, bytes copied, and
the device memory in use. The GPU's share is measured with CUDA events, read
back once the GPU has passed them, and not with ``torch.cuda.synchronize()``
after each phase: a synchronize in the loop would itself be what aitop sees
(the thread waiting in it reads as phase ``sync``) and would change the very
behaviour being measured. Events are the GPU's own timestamps and cost the
loop nothing.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import signal
import sys
import time
import warnings
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

JOBS: tuple[str, ...] = ("matmul", "data", "item", "memory", "pcie")
#: Exit status when PyTorch or CUDA is missing (argparse uses 2 for usage errors).
EXIT_NO_CUDA = 3
HOST_PHASES = ("data_wait", "forward", "backward", "optimizer", "sync")
DEVICE_PHASES = ("forward", "backward", "optimizer")
#: Steps run before the first truth record (cuBLAS handles, allocator, autotuning).
WARMUP_STEPS = 3
#: Share of the GPU's memory the memory job leaves free.
MEMORY_JOB_FREE = 0.012


class Truth:
    """Cumulative phase timers and counters, appended as JSON lines."""

    def __init__(self, path: Path | None, job: str, gauges: Callable[[], dict[str, float]]) -> None:
        self.path = path
        self.job = job
        self.gauges = gauges
        self.counters: dict[str, float] = {f"host_{p}": 0.0 for p in HOST_PHASES}
        self.counters.update({f"dev_{p}": 0.0 for p in DEVICE_PHASES})
        self.counters.update(dev_busy=0.0, h2d_bytes=0.0)
        self.steps = 0
        self.started: float | None = None
        self._last_write = 0.0

    @property
    def running(self) -> bool:
        return self.started is not None

    def begin(self, info: dict[str, Any]) -> None:
        """Start counting now; the first record (with the job's facts) marks 'training'."""
        self.started = time.time()
        self.write(force=True, info=info)

    def add(self, key: str, value: float) -> None:
        if self.running:
            self.counters[key] += value

    def write(self, force: bool = False, info: dict[str, Any] | None = None) -> None:
        now = time.time()
        if self.path is None or self.started is None:
            return
        if not force and now - self._last_write < 0.5:
            return
        self._last_write = now
        record: dict[str, Any] = {"t": now, "elapsed": now - self.started, "steps": self.steps,
                                  **self.counters, **self.gauges()}
        if info is not None:
            record["info"] = info
        with self.path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")


class DeviceTimer:
    """CUDA events between a step's phases, read back once the GPU has passed them."""

    def __init__(self, truth: Truth) -> None:
        import torch

        self._event = torch.cuda.Event
        self.truth = truth
        self.pending: deque[list[torch.cuda.Event]] = deque()

    def mark(self, events: list[torch.cuda.Event] | None = None) -> list[torch.cuda.Event]:
        event = self._event(enable_timing=True)
        event.record()
        if events is None:
            return [event]
        events.append(event)
        return events

    def finish(self, events: list[torch.cuda.Event]) -> None:
        self.pending.append(events)
        while self.pending and self.pending[0][-1].query():  # never blocks
            done = self.pending.popleft()
            for i, phase in enumerate(DEVICE_PHASES):
                self.truth.add(f"dev_{phase}", done[i].elapsed_time(done[i + 1]) / 1000.0)
            self.truth.add("dev_busy", done[0].elapsed_time(done[-1]) / 1000.0)


@dataclass
class Job:
    """What differs between the training jobs; the loop in :func:`train` is shared."""

    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    next_batch: Callable[[], tuple[torch.Tensor, torch.Tensor]]
    #: A loss *module*, as people write it: its frames read as forward.
    criterion: torch.nn.Module
    #: Whether next_batch waits on a DataLoader (its time is data_wait, else other).
    uses_loader: bool = False
    #: Call loss.item() every step (the host waits for the GPU there).
    item_every_step: bool = False
    #: Called once after warm-up (the memory job fills the GPU then).
    after_warmup: Callable[[], None] | None = None


class PhaseClock:
    """Host seconds of each phase: a lap ends a phase, a skip leaves time uncounted.

    Recording an event is a stream operation that can block like a kernel
    launch; it happens in this file's frames, which aitop reads as ``other``,
    so its time is skipped rather than added to the phase around it.
    """

    def __init__(self, truth: Truth) -> None:
        self.truth = truth
        self.last = time.perf_counter()

    def lap(self, phase: str | None) -> None:
        now = time.perf_counter()
        if phase is not None:
            self.truth.add(f"host_{phase}", now - self.last)
        self.last = now

    def skip(self) -> None:
        self.last = time.perf_counter()


def train(job: Job, truth: Truth, deadline: float, info: dict[str, Any]) -> int:
    """The training loop every job shares: timed phases, CUDA events, a step counter."""
    timer = DeviceTimer(truth)
    clock = PhaseClock(truth)
    running_loss = 0.0
    step = 0
    while time.time() < deadline:
        if step == WARMUP_STEPS:
            if job.after_warmup is not None:
                job.after_warmup()
            truth.begin(info)
        clock.skip()
        x, y = job.next_batch()
        clock.lap("data_wait" if job.uses_loader else None)
        events = timer.mark()
        clock.skip()
        loss = job.criterion(job.model(x), y)
        clock.lap("forward")
        timer.mark(events)
        clock.skip()
        loss.backward()
        clock.lap("backward")
        timer.mark(events)
        clock.skip()
        job.optimizer.step()
        job.optimizer.zero_grad(set_to_none=True)
        clock.lap("optimizer")
        timer.mark(events)
        clock.skip()
        if job.item_every_step:
            running_loss += loss.item()  # waits for this step's kernels
            clock.lap("sync")
        timer.finish(events)
        step += 1
        truth.steps = max(0, step - WARMUP_STEPS)
        truth.write()
    truth.write(force=True)
    return step


def mlp(width: int, depth: int, inputs: int, outputs: int) -> torch.nn.Module:
    from torch import nn

    layers: list[nn.Module] = [nn.Linear(inputs, width), nn.GELU()]
    for _ in range(depth - 1):
        layers += [nn.Linear(width, width), nn.GELU()]
    layers.append(nn.Linear(width, outputs))
    return nn.Sequential(*layers)


def matmul_job(item_every_step: bool = False) -> Job:
    """Large bf16 matmuls on data already on the GPU: the GPU is the limit."""
    import torch

    width, batch = 8192, 8192
    model = mlp(width, 4, width, width).to("cuda", torch.bfloat16)
    data = torch.randn(4, batch, width, device="cuda", dtype=torch.bfloat16)
    batches = itertools.cycle(data.unbind())

    def next_batch() -> tuple[torch.Tensor, torch.Tensor]:
        x = next(batches)
        return x, x

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5, foreach=True)
    return Job(model, optimizer, next_batch, torch.nn.MSELoss(),
               item_every_step=item_every_step)


class SlowDecodeDataset:
    """Samples that cost CPU time to produce, as JPEG decoding does (a map-style Dataset)."""

    def __init__(self, features: int, decode_ms: float) -> None:
        self.features = features
        self.decode_s = decode_ms / 1000.0

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        import torch

        deadline = time.perf_counter() + self.decode_s
        while time.perf_counter() < deadline:  # busy work, as a decoder would do
            pass
        generator = torch.Generator().manual_seed(index)
        return torch.randn(self.features, generator=generator), torch.tensor(index % 10)


def data_job() -> Job:
    """Two workers decode 4 ms per sample for a model that needs a fraction of that."""
    import torch
    from torch.utils.data import DataLoader

    dataset: Any = SlowDecodeDataset(1024, 4.0)  # map-style: __getitem__ and __len__
    loader: DataLoader[Any] = DataLoader(dataset, batch_size=32, shuffle=True, num_workers=2,
                                         pin_memory=True, persistent_workers=True,
                                         prefetch_factor=2)
    model = mlp(1024, 2, 1024, 10).to("cuda")
    iterator: Iterator[Any] = iter(loader)

    def next_batch() -> tuple[torch.Tensor, torch.Tensor]:
        nonlocal iterator
        try:
            x, y = next(iterator)
        except StopIteration:
            iterator = iter(loader)
            x, y = next(iterator)
        return x.to("cuda", non_blocking=True), y.to("cuda", non_blocking=True)

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return Job(model, optimizer, next_batch, torch.nn.CrossEntropyLoss(), uses_loader=True)


def memory_job() -> Job:
    """A small model training while a buffer holds all but ~1 % of the GPU's memory."""
    import torch

    model = mlp(2048, 3, 1024, 10).to("cuda")
    x = torch.randn(512, 1024, device="cuda")
    y = torch.randint(0, 10, (512,), device="cuda")
    ballast: list[torch.Tensor] = []

    def fill() -> None:
        free, total = torch.cuda.mem_get_info()
        size = int(free - MEMORY_JOB_FREE * total)
        for _ in range(8):  # the allocator may need a little more room than asked
            if size <= 0:
                return
            try:
                ballast.append(torch.empty(size, dtype=torch.uint8, device="cuda").fill_(1))
                return
            except torch.cuda.OutOfMemoryError:
                size = int(size * 0.97)

    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    return Job(model, optimizer, lambda: (x, y), torch.nn.CrossEntropyLoss(),
               after_warmup=fill)


def pcie_copies(truth: Truth, deadline: float, info: dict[str, Any]) -> int:
    """Copy a pinned buffer to the GPU until the deadline, counting the bytes."""
    import torch

    host = torch.empty(256 << 20, dtype=torch.uint8, pin_memory=True)
    device = torch.empty_like(host, device="cuda")
    device.copy_(host, non_blocking=True)
    torch.cuda.synchronize()
    truth.begin(info)
    step = 0
    while time.time() < deadline:
        device.copy_(host, non_blocking=True)
        torch.cuda.synchronize()  # so the byte count is exact (py-spy is not attached)
        truth.add("h2d_bytes", float(host.numel()))
        step += 1
        truth.steps = step
        truth.write()
    truth.write(force=True)
    return step


def cuda_facts() -> dict[str, Any]:
    """PyTorch's and CUDA's facts: what the self-test reports about the machine."""
    import torch

    facts: dict[str, Any] = {
        "torch": torch.__version__,
        "cuda_build": torch.version.cuda,
        "cuda_available": torch.cuda.is_available(),
        "devices": [],
    }
    if facts["cuda_available"]:
        for index in range(torch.cuda.device_count()):
            props = torch.cuda.get_device_properties(index)
            uuid = getattr(props, "uuid", None)
            facts["devices"].append({
                "index": index,
                "name": props.name,
                "capability": f"{props.major}.{props.minor}",
                "total_memory_bytes": props.total_memory,
                "uuid": f"GPU-{uuid}" if uuid is not None else None,
            })
    return facts


def memory_gauges() -> dict[str, float]:
    import torch

    free, total = torch.cuda.mem_get_info()
    return {"mem_used_frac": 1.0 - free / total,
            "torch_reserved_bytes": float(torch.cuda.memory_reserved())}


def run_job(name: str, truth_path: Path | None, duration_s: float) -> int:
    truth = Truth(truth_path, name, memory_gauges)
    info = {"job": name, "pid": os.getpid(), **cuda_facts()}
    deadline = time.time() + duration_s
    if name == "pcie":
        return pcie_copies(truth, deadline, info)
    builders: dict[str, Callable[[], Job]] = {
        "matmul": matmul_job,
        "item": lambda: matmul_job(item_every_step=True),
        "data": data_job,
        "memory": memory_job,
    }
    return train(builders[name](), truth, deadline, info)


def _stop(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m aitop.demo.gpu_jobs",
        description="Small CUDA training jobs that time themselves (for aitop selftest --gpu).",
    )
    parser.add_argument("--job", choices=JOBS, help="which job to run")
    parser.add_argument("--truth", type=Path, help="append ground-truth JSON lines here")
    parser.add_argument("--duration", type=float, default=60.0, help="seconds to train")
    parser.add_argument("--info", action="store_true",
                        help="print PyTorch's and CUDA's facts as JSON and exit")
    args = parser.parse_args(argv)
    if not args.info and args.job is None:
        parser.error("give --job NAME (or --info)")
    try:
        with warnings.catch_warnings():  # import-time chatter (no NumPy...) is not ours to print
            warnings.simplefilter("ignore")
            import torch
    except ImportError:
        print("gpu_jobs: PyTorch is not installed here; these jobs need PyTorch with CUDA",
              file=sys.stderr)
        return EXIT_NO_CUDA
    if args.info:
        print(json.dumps(cuda_facts()))
        return 0
    if not torch.cuda.is_available():
        why = "built without CUDA" if torch.version.cuda is None else "no GPU visible"
        print(f"gpu_jobs: CUDA is not available (torch {torch.__version__}, {why}); "
              "these jobs need an NVIDIA GPU", file=sys.stderr)
        return EXIT_NO_CUDA
    signal.signal(signal.SIGTERM, _stop)
    signal.signal(signal.SIGHUP, _stop)
    try:
        run_job(args.job, args.truth, args.duration)
    except KeyboardInterrupt:
        return 0  # the self-test stops jobs with SIGTERM: a normal end
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
