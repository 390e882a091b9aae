"""Demo jobs whose DataLoader workers make the job's memory move: the ``records`` loop.

* ``cow``: the dataset is a list of 1.5 M Python dicts, read at random by two
  persistent workers. Reading a record writes its reference counts, so each
  page of the dataset a worker touches turns from a page shared with the
  training process (copy-on-write after ``fork``) into a private copy: every
  worker's private memory (USS) grows while its RSS stays flat
  (pytorch/pytorch#13246).
* ``cow_fixed``: the same records in tensors (a few large objects whose
  reference counts live on a handful of pages, as NumPy arrays or Arrow
  buffers would): the workers' USS stays flat.
* ``sawtooth``: two workers that the DataLoader re-creates every epoch
  (``persistent_workers=False``), each caching the images it decodes for an
  epoch that never comes to it: each worker's memory rises through its epoch
  and is freed when it exits; the job's memory is a sawtooth whose floor holds.

Besides the usual phase timers (``truth.py``) the job records its own memory:
every second, each of its processes' RSS, USS and PSS (psutil), and each epoch's
start, as JSON lines in ``<truth stem>.memory.jsonl`` beside the truth file.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import TypedDict

import psutil
import torch
from aitop.demo.config import Config
from aitop.demo.truth import Truth, memory_truth_path
from torch import nn
from torch.utils.data import DataLoader, Dataset

Sample = tuple[torch.Tensor, torch.Tensor]
FEATURES = 64
#: Bytes of one decoded ``sawtooth`` image.
IMAGE_BYTES = 64 << 10
#: Seconds between two memory records.
MEMORY_EVERY_S = 1.0
WORDS = ("the", "a", "model", "token", "batch", "worker", "page", "shared", "copy", "read")


def _features(values: list[int], label: int) -> Sample:
    x = torch.tensor(values[:FEATURES] + [0] * (FEATURES - len(values[:FEATURES])),
                     dtype=torch.float32) / 50257
    return x, torch.tensor(label % 10)


def _text(i: int) -> str:
    return " ".join(WORDS[(i * k) % len(WORDS)] for k in range(1, 13)) + f" #{i}"


class Record(TypedDict):
    id: int
    label: int
    weight: float
    text: str


class PythonRecords(Dataset[Sample]):
    """Records as a list of dicts, as a script builds them from a JSON-lines file;
    each sample waits ``read_ms`` besides (its image read from storage)."""

    def __init__(self, count: int, read_ms: float) -> None:
        self.records: list[Record] = [
            {"id": i, "label": i % 10, "weight": i / count, "text": _text(i)}
            for i in range(count)]
        self.read_s = read_ms / 1000.0

    def __len__(self) -> int:
        return len(self.records)

    def __getitem__(self, index: int) -> Sample:
        time.sleep(self.read_s)
        record = self.records[index]
        ids = [hash(word) % 50257 for word in record["text"].split()]
        ids.append(int(record["weight"] * 50257))
        return _features(ids, record["label"])


class ArrayRecords(Dataset[Sample]):
    """The same records in tensors: the text as one byte buffer and its offsets."""

    def __init__(self, count: int, read_ms: float) -> None:
        self.read_s = read_ms / 1000.0
        texts = [_text(i).encode() for i in range(count)]
        lengths = torch.tensor([0] + [len(t) for t in texts], dtype=torch.int64)
        self.offsets = lengths.cumsum(0)
        self.text = torch.frombuffer(bytearray(b"".join(texts)), dtype=torch.uint8)
        self.labels = torch.arange(count, dtype=torch.int64) % 10
        self.weights = torch.arange(count, dtype=torch.float64) / count

    def __len__(self) -> int:
        return len(self.labels)

    def __getitem__(self, index: int) -> Sample:
        time.sleep(self.read_s)
        start, end = int(self.offsets[index]), int(self.offsets[index + 1])
        text = bytes(self.text[start:end].tolist()).decode()
        ids = [hash(word) % 50257 for word in text.split()]
        ids.append(int(self.weights[index] * 50257))
        return _features(ids, int(self.labels[index]))


class CachingImages(Dataset[Sample]):
    """``length`` samples an epoch, each decoded to a 64-KB image and kept, keyed by
    index, for the next epoch; each waits ``read_ms`` besides (its file read). With
    workers re-created every epoch the cache dies with them, never hit."""

    def __init__(self, length: int, read_ms: float) -> None:
        self.length = length
        self.read_s = read_ms / 1000.0
        self.cache: dict[int, torch.Tensor] = {}

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, index: int) -> Sample:
        time.sleep(self.read_s)
        image = self.cache.get(index)
        if image is None:
            generator = torch.Generator().manual_seed(index)
            image = torch.randint(0, 255, (IMAGE_BYTES,), dtype=torch.uint8,
                                  generator=generator)
            self.cache[index] = image
        sums = image.view(FEATURES, -1).sum(dim=1, dtype=torch.int64)
        return sums.float() / (255 * IMAGE_BYTES / FEATURES), torch.tensor(index % 10)


def make_records(cfg: Config) -> Dataset[Sample]:
    if cfg.records == "objects":
        return PythonRecords(cfg.record_count, cfg.decode_ms)
    if cfg.records == "arrays":
        return ArrayRecords(cfg.record_count, cfg.decode_ms)
    return CachingImages(cfg.record_count, cfg.decode_ms)


class MemoryRecorder:
    """Every second, the job's processes' RSS, USS and PSS, as JSON lines."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.epoch = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="memory-truth", daemon=True)

    def __enter__(self) -> MemoryRecorder:
        if self.path is not None:
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def epoch_started(self, epoch: int) -> None:
        self.epoch = epoch
        self._write({"t": time.time(), "epoch_start": epoch})

    def _write(self, record: dict[str, object]) -> None:
        if self.path is not None:
            with self.path.open("a") as fh:
                fh.write(json.dumps(record) + "\n")

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(MEMORY_EVERY_S):
            processes = []
            for proc in [me, *me.children(recursive=True)]:
                try:
                    full = proc.memory_full_info()
                    name = proc.name()
                except psutil.Error:
                    continue
                role = "main" if proc.pid == me.pid else (
                    "worker" if name == "pt_data_worker" else "child")
                processes.append({"pid": proc.pid, "role": role, "rss": full.rss,
                                  "uss": full.uss, "pss": full.pss})
            self._write({"t": time.time(), "epoch": self.epoch, "processes": processes})


def train_records(cfg: Config, duration_s: float, truth_path: Path | None,
                  ready_file: Path | None = None) -> int:
    """Epochs over the scenario's records, with its workers, until the deadline."""
    if cfg.threads:
        torch.set_num_threads(cfg.threads)
    dataset = make_records(cfg)
    loader = DataLoader(dataset, batch_size=cfg.batch_size, shuffle=True,
                        num_workers=cfg.num_workers,
                        persistent_workers=cfg.persistent_workers and cfg.num_workers > 0)
    model = nn.Sequential(nn.Linear(FEATURES, cfg.width), nn.ReLU(), nn.Linear(cfg.width, 10))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()
    truth = Truth(truth_path)
    deadline = time.time() + duration_s
    epoch = 0
    memory = memory_truth_path(truth_path) if truth_path is not None else None
    with MemoryRecorder(memory) as recorder:
        while time.time() < deadline:
            recorder.epoch_started(epoch)
            t0 = time.perf_counter()
            for x, y in loader:
                t1 = time.perf_counter()
                loss = criterion(model(x), y)
                t2 = time.perf_counter()
                loss.backward()
                t3 = time.perf_counter()
                optimizer.step()
                optimizer.zero_grad(set_to_none=True)
                t4 = time.perf_counter()
                for phase, seconds in (("data_wait", t1 - t0), ("forward", t2 - t1),
                                       ("backward", t3 - t2), ("optimizer", t4 - t3)):
                    truth.add(phase, seconds)
                truth.count(truth.steps + 1, ready_file)
                if time.time() >= deadline:
                    break
                t0 = time.perf_counter()
            epoch += 1
    truth.maybe_write(force=True)
    return truth.steps
