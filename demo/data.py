"""The demo jobs' data: datasets whose samples cost what real ones cost, and their loaders.

A sample can be slow to decode (wall-clock or real CPU time), an image blurred by
torch ops, scattered 4 KiB O_DIRECT reads of a file on a real disk, or a tensor
already in memory; ``make_loader`` wraps the scenario's in a DataLoader the way
training scripts do.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from pathlib import Path

import torch
from aitop.demo.config import Config
from aitop.demo.diskdata import DirectReader, write_sample_file
from torch import nn
from torch.utils.data import DataLoader, Dataset, TensorDataset

Sample = tuple[torch.Tensor, torch.Tensor]
STORAGE_FILE_BYTES = 256 << 20  # big enough that random reads do not share blocks


class SlowDecodeDataset(Dataset[Sample]):
    """A dataset whose samples cost time to produce, like JPEG decoding does.

    ``clock=time.thread_time`` makes the cost CPU time actually spent (the
    decoder needs the CPU); the default wall clock only makes it take so long.
    """

    def __init__(self, size: int, features: int, decode_ms: float,
                 clock: Callable[[], float] = time.perf_counter) -> None:
        self.size = size
        self.features = features
        self.decode_s = decode_ms / 1000.0
        self.clock = clock

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> Sample:
        deadline = self.clock() + self.decode_s
        acc = 0
        while self.clock() < deadline:  # busy work, as a decoder would do
            for _ in range(100):  # reading the CPU clock is a system call: not too often
                acc += 1
        generator = torch.Generator().manual_seed(index)
        x = torch.randn(self.features, generator=generator)
        return x, torch.tensor(index % 10)


class SlowDecodeImages(SlowDecodeDataset):
    """The same, with 8-bit pixels, as an image decoder hands them over."""

    def __getitem__(self, index: int) -> Sample:
        x, y = super().__getitem__(index)
        return (x.sigmoid() * 255).to(torch.uint8), y


class WaitingDataset(SlowDecodeDataset):
    """Samples that take their time without the CPU: each waits ``decode_ms``
    (a fetch from object storage or a remote service, a rate limit)."""

    def __getitem__(self, index: int) -> Sample:
        time.sleep(self.decode_s)
        generator = torch.Generator().manual_seed(index)
        return torch.randn(self.features, generator=generator), torch.tensor(index % 10)


class AugmentedImages(Dataset[Sample]):
    """Samples made by CPU-heavy augmentation in torch (a blur, ``passes`` times).

    Each torch op releases the GIL while it runs, so a producer *thread* doing
    this work leaves the training thread free to run between batches.
    """

    def __init__(self, size: int, passes: int) -> None:
        self.size = size
        self.passes = passes
        self.kernel = torch.full((3, 3, 5, 5), 1.0 / 75)

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int) -> Sample:
        generator = torch.Generator().manual_seed(index)
        image = torch.rand(1, 3, 96, 96, generator=generator)
        for _ in range(self.passes):
            image = nn.functional.conv2d(image, self.kernel, padding=2)
        x = nn.functional.adaptive_avg_pool2d(image, (4, 4)).flatten()[:64]
        return torch.cat([x, x.new_zeros(64 - len(x))]), torch.tensor(index % 10)


class DiskBlockDataset(Dataset[Sample]):
    """Samples stored as scattered 4 KiB records in one big file on disk.

    Little CPU per sample: the time goes to ``blocks`` reads from the device.
    """

    def __init__(self, reader: DirectReader, file_blocks: int, blocks: int,
                 features: int) -> None:
        self.reader = reader
        self.file_blocks = file_blocks
        self.blocks = blocks
        self.features = features

    def __len__(self) -> int:
        return 1_000_000

    def __getitem__(self, index: int) -> Sample:
        where = random.Random(index)
        records = [self.reader.read_block(where.randrange(self.file_blocks))
                   for _ in range(self.blocks)]
        raw = bytearray(b"".join(record[:4] for record in records)[: self.features])
        raw.extend(bytes(self.features - len(raw)))
        x = torch.frombuffer(raw, dtype=torch.uint8).float() / 255
        return x, torch.tensor(index % 10)


#: Features of one input sample (every scenario's model takes these).
INPUT_FEATURES = 64


def make_dataset(cfg: Config, data_dir: Path | None) -> Dataset:
    """Where the scenario's samples come from: disk, a slow decoder, or memory."""
    if cfg.storage_blocks > 0:
        assert data_dir is not None, "the storage scenario needs a data directory"
        path = data_dir / "samples.bin"
        blocks = write_sample_file(path, STORAGE_FILE_BYTES)
        return DiskBlockDataset(DirectReader(path), blocks, cfg.storage_blocks, 64)
    if cfg.augment_passes > 0:
        return AugmentedImages(1_000_000, cfg.augment_passes)
    if cfg.decode_ms > 0:
        if cfg.decode_clock == "sleep":
            return WaitingDataset(1_000_000, 64, cfg.decode_ms)
        clock = time.thread_time if cfg.decode_clock == "cpu" else time.perf_counter
        kind = SlowDecodeImages if cfg.loop == "generator" else SlowDecodeDataset
        return kind(1_000_000, 64, cfg.decode_ms, clock)
    n = cfg.batch_size * 64
    return TensorDataset(torch.randn(n, 64), torch.randint(0, 10, (n,)))


def make_loader(cfg: Config, data_dir: Path | None = None) -> DataLoader:
    kwargs: dict = {}
    if cfg.num_workers > 0:
        kwargs = {"persistent_workers": True, "prefetch_factor": 4}
    return DataLoader(
        make_dataset(cfg, data_dir),
        batch_size=cfg.batch_size,
        shuffle=True,
        num_workers=cfg.num_workers,
        pin_memory=torch.cuda.is_available(),
        **kwargs,
    )


def make_val_loader(cfg: Config) -> DataLoader:
    """A held-out set in memory, as many batches as one evaluation pass covers."""
    n = cfg.batch_size * cfg.eval_batches
    return DataLoader(TensorDataset(torch.randn(n, 64), torch.randint(0, 10, (n,))),
                      batch_size=cfg.batch_size)
