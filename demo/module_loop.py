"""A training script written the way many public ones are: the loop at module level.

No ``train()`` function: the model, the optimizer and ``iter_num`` are globals
of ``__main__`` (run through ``aitop.demo.workload --scenario module_loop``,
which hands it the command line below), batches come from a ``get_batch()``
that draws token ids in Python and looks them up in a tensor already in memory,
and the script prints every iteration, as nanoGPT does by default. py-spy shows
a module frame's locals as nothing (they are the globals), so no loop counter
can be read: steps/s comes from the step the job prints, where its stdout is a
file (``probes.job_log``), and is unknown where it is a terminal.

A step is about 0.9 s on the 2-core box with nothing else running (a 2048-wide
MLP on 768 samples, and 0.15-0.2 s of drawing tokens).
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import torch
from aitop.demo.truth import Truth
from torch import nn

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description="a module-level training loop")
    parser.add_argument("--duration", type=float, default=3600.0)
    parser.add_argument("--truth", type=Path)
    parser.add_argument("--ready-file", type=Path)
    args = parser.parse_args()

    torch.manual_seed(0)
    width, depth, batch_size = 2048, 4, 768
    model = nn.Sequential(*[nn.Sequential(nn.Linear(width, width), nn.ReLU())
                            for _ in range(depth)])
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-4, momentum=0.9)
    data = torch.randn(16 * batch_size, width)
    targets = torch.randn(16 * batch_size, width)

    def get_batch() -> tuple[torch.Tensor, torch.Tensor]:
        tokens = [random.randrange(len(data)) for _ in range(batch_size * 256)]
        ix = torch.tensor(tokens[::256])
        return data[ix], targets[ix]

    truth = Truth(args.truth)
    deadline = time.time() + args.duration
    iter_num = 0
    while time.time() < deadline:
        t0 = time.perf_counter()
        x, y = get_batch()
        t1 = time.perf_counter()
        loss = nn.functional.mse_loss(model(x), y)
        t2 = time.perf_counter()
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        t3 = time.perf_counter()
        optimizer.step()
        t4 = time.perf_counter()
        truth.add("data_wait", t1 - t0)
        truth.add("forward", t2 - t1)
        truth.add("backward", t3 - t2)
        truth.add("optimizer", t4 - t3)
        iter_num += 1
        truth.steps = iter_num
        truth.maybe_write()
        # nanoGPT's default log_interval: every iteration.
        print(f"iter {iter_num}: loss {loss.item():.4f}, time {(t4 - t0) * 1000:.2f}ms",
              flush=True)
        if iter_num == 2 and args.ready_file is not None:
            args.ready_file.touch()
    truth.maybe_write(force=True)
