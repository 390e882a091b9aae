"""A model server bound by its own request preprocessing.

Requests arrive as text; the server already batches them (up to 32 of those
waiting) but encodes each one in Python on the serving thread (split into
words, look each up in a vocabulary, pad) before one forward pass over the
batch: the model is a fraction of the time, building its inputs the rest.

The fixed variant (``cfg.preprocess_workers``) encodes in a pool of worker
processes, a batch ahead: while the model runs batch N, the workers encode
batch N + 1, and the serving thread only waits for what they have not
finished.

Truth: ``data_wait`` is waiting for requests (and, fixed, for the workers'
encodings), ``preprocess`` encoding on the serving thread, ``forward`` the
model; steps count requests answered.
"""

from __future__ import annotations

import multiprocessing
import queue
import random
import threading
import time
from concurrent.futures import Future, ProcessPoolExecutor
from pathlib import Path

import torch
from aitop.demo.config import Config
from aitop.demo.truth import PHASES, Truth
from torch import nn

#: The truth's phases: the demo's own, and encoding on the serving thread.
SERVE_PHASES = (*PHASES, "preprocess")
#: Words per request, the vocabulary's size, the longest request in tokens.
WORDS, VOCABULARY, MAX_TOKENS = 96, 30_000, 96
#: Requests the client keeps waiting (a busy server), and distinct texts it sends.
WAITING, TEXTS = 500, 256

_VOCAB: dict[str, int] = {}


def vocabulary() -> dict[str, int]:
    """The word -> id table (built once per process: the workers build their own)."""
    if not _VOCAB:
        _VOCAB.update({f"w{i}": i for i in range(VOCABULARY)})
    return _VOCAB


def encode(text: str) -> list[int]:
    """One request's token ids, as a hand-written tokenizer does it: normalise,
    split, look up, pad or cut to MAX_TOKENS."""
    table = vocabulary()
    ids = []
    for word in text.lower().replace(",", " ").replace(".", " ").split():
        stem = word.strip()
        for suffix in ("ing", "ed", "s"):
            if stem.endswith(suffix) and len(stem) > len(suffix) + 2:
                stem = stem[: -len(suffix)]
        ids.append(table.get(stem, 1))
    ids = ids[:MAX_TOKENS]
    return ids + [0] * (MAX_TOKENS - len(ids))


def encode_batch(texts: list[str]) -> torch.Tensor:
    """A batch's token ids, one row per request."""
    return torch.tensor([encode(t) for t in texts])


class BagModel(nn.Module):
    """Token embeddings, averaged, then an MLP: a small text classifier."""

    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.embed = nn.EmbeddingBag(VOCABULARY, width, mode="mean")
        layers: list[nn.Module] = []
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.ReLU()]
        self.body = nn.Sequential(*layers, nn.Linear(width, 10))

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.body(self.embed(ids))


def send_texts(requests: queue.Queue[str], stop: threading.Event) -> None:
    """A client keeping the queue full of text requests (made once, sent again)."""
    rng = random.Random(0)
    texts = [" ".join(f"W{rng.randrange(VOCABULARY)}ing," for _ in range(WORDS))
             for _ in range(TEXTS)]
    i = 0
    while not stop.is_set():
        if requests.qsize() >= WAITING:
            time.sleep(0.005)
            continue
        for _ in range(50):
            requests.put(texts[i % TEXTS])
            i += 1


def take_batch(requests: queue.Queue[str], size: int) -> list[str]:
    batch = [requests.get()]
    while len(batch) < size and not requests.empty():
        batch.append(requests.get_nowait())
    return batch


def serve_texts(cfg: Config, duration_s: float, truth_path: Path | None,
                ready_file: Path | None = None) -> int:
    """Answer text requests in batches, encoding them here or in a worker pool."""
    torch.set_num_threads(cfg.threads or torch.get_num_threads())
    model = BagModel(cfg.width, cfg.depth).eval()
    requests: queue.Queue[str] = queue.Queue()
    stop = threading.Event()
    client = threading.Thread(target=send_texts, args=(requests, stop), name="client",
                              daemon=True)
    client.start()
    pool = (ProcessPoolExecutor(cfg.preprocess_workers,
                                mp_context=multiprocessing.get_context("fork"))
            if cfg.preprocess_workers else None)
    truth = Truth(truth_path, SERVE_PHASES)
    deadline = time.time() + duration_s
    served = 0
    ahead: Future[torch.Tensor] | None = None
    try:
        with torch.inference_mode():
            while time.time() < deadline:
                t0 = time.perf_counter()
                texts = take_batch(requests, cfg.serve_batch)
                if pool is None:
                    t1 = time.perf_counter()
                    ids = encode_batch(texts)
                    t2 = time.perf_counter()
                    truth.add("preprocess", t2 - t1)
                else:
                    # Hand this batch to the workers; answer the one handed over last.
                    handed = pool.submit(encode_batch, texts)
                    if ahead is None:
                        ahead = handed
                        continue
                    ids, ahead = ahead.result(), handed
                    t1 = t2 = time.perf_counter()
                truth.add("data_wait", t1 - t0)
                model(ids)
                truth.add("forward", time.perf_counter() - t2)
                served += len(ids)
                truth.count(served, ready_file)
    finally:
        stop.set()
        client.join(timeout=10)
        if pool is not None:
            pool.shutdown(cancel_futures=True)
    truth.maybe_write(force=True)
    return served
