"""A training loop under torch.compile whose inputs change shape: recompilation.

Sequences of token features, batched at one length per batch, and a new length
every ``cfg.new_length_every`` steps (a curriculum, a bucketing sampler, the
last short batch of each file): the model is compiled for static shapes
(``dynamic=False``, as written for a model that was meant to see one shape),
so each new length fails dynamo's size guard and dynamo and inductor compile
the model again, forward and backward, while the steps at one length take
milliseconds. The job has raised dynamo's recompile limit, as people do once
they see "hit config.recompile_limit", so it keeps compiling rather than
falling back to eager.

The fixed variant (``cfg.dynamic_shapes``) compiles with ``dynamic=True``:
one compilation, its kernels taking the length as a symbol. Another
(``cfg.pad_sequences``) pads every batch to the longest length (masked mean
over the real tokens): one shape, one compilation, each step as long as the
longest (on this model, about twice the mean).

Inductor's on-disk caches are turned off, as for a job on a fresh machine: a
rerun on a warm cache would find most lengths compiled already.

Truth: the first forward and backward at each new length is timed as
``compile`` (compiling is nearly all of it; the one step it holds is not split
off), every other step's as ``forward``, ``backward`` and ``optimizer``.
"""

from __future__ import annotations

import time
from pathlib import Path

import torch
from aitop.demo.config import Config
from aitop.demo.truth import PHASES, Truth
from torch import nn

#: The truth's phases: the demo's own, and the compilations.
COMPILE_PHASES = (*PHASES, "compile")
#: Token features, and the range the sequence lengths move over.
TOKEN_FEATURES = 32
SHORTEST, LENGTHS = 64, 128
#: Dynamo's recompile limit as the job raised it: past every length it meets.
RECOMPILE_LIMIT = 1024


class TokenPool(nn.Module):
    """A token-wise MLP, a masked mean over the sequence, a classifier."""

    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        layers: list[nn.Module] = [nn.Linear(TOKEN_FEATURES, width), nn.ReLU()]
        for _ in range(depth):
            layers += [nn.Linear(width, width), nn.ReLU()]
        self.tokens = nn.Sequential(*layers)
        self.head = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        h = self.tokens(x) * mask.unsqueeze(-1)
        return self.head(h.sum(dim=1) / mask.sum(dim=1, keepdim=True))


def length_of(step: int, every: int) -> int:
    """The sequence length of ``step``'s batch: a new one every ``every`` steps,
    over ``LENGTHS`` lengths that do not repeat before all have come (7 and 128
    share no factor)."""
    return SHORTEST + (step // every * 7) % LENGTHS


def batch_of(cfg: Config, length: int, generator: torch.Generator,
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """A batch of sequences of ``length`` tokens, padded to the longest length when
    the job pads (its mask marks the real tokens)."""
    padded = SHORTEST + LENGTHS - 1 if cfg.pad_sequences else length
    x = torch.zeros(cfg.batch_size, padded, TOKEN_FEATURES)
    x[:, :length] = torch.randn(cfg.batch_size, length, TOKEN_FEATURES, generator=generator)
    mask = torch.zeros(cfg.batch_size, padded)
    mask[:, :length] = 1.0
    return x, mask, torch.randint(0, 10, (cfg.batch_size,), generator=generator)


def train_recompiling(cfg: Config, duration_s: float, truth_path: Path | None,
                      ready_file: Path | None = None) -> int:
    """The loop: a new sequence length every ``cfg.new_length_every`` steps."""
    import torch._dynamo.config
    import torch._inductor.config

    torch.set_num_threads(cfg.threads or torch.get_num_threads())
    torch._dynamo.config.recompile_limit = RECOMPILE_LIMIT
    torch._inductor.config.fx_graph_cache = False
    torch._functorch.config.enable_autograd_cache = False
    model = TokenPool(cfg.width, cfg.depth)
    compiled = torch.compile(model, dynamic=cfg.dynamic_shapes)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    criterion = nn.CrossEntropyLoss()
    generator = torch.Generator().manual_seed(0)
    truth = Truth(truth_path, COMPILE_PHASES)
    deadline = time.time() + duration_s
    step = 0
    last_length = None
    while time.time() < deadline:
        length = length_of(step, cfg.new_length_every)
        new_shape = length != last_length and not (
            (cfg.pad_sequences or cfg.dynamic_shapes) and last_length)
        last_length = length
        x, mask, y = batch_of(cfg, length, generator)
        t1 = time.perf_counter()
        loss = criterion(compiled(x, mask), y)
        t2 = time.perf_counter()
        loss.backward()
        t3 = time.perf_counter()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        t4 = time.perf_counter()
        if new_shape:
            truth.add("compile", t3 - t1)
        else:
            truth.add("forward", t2 - t1)
            truth.add("backward", t3 - t2)
        truth.add("optimizer", t4 - t3)
        step += 1
        truth.count(step, ready_file)
    truth.maybe_write(force=True)
    return step
