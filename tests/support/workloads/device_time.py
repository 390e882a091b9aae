"""Device time on a CPU-only box: a layer whose forward and backward wait as a
host waits for a GPU kernel (``torch.cuda.synchronize``, a ``.item()``), so a
loop takes the slow steps of a large model without burning a core for them.

The waits sit where a real model's would: inside ``Module.forward`` (so stack
samples read as forward) and inside an autograd ``Function.backward`` (run by
``loss.backward()``, so they read as backward).
"""

from __future__ import annotations

import time

import torch
from torch import nn


class _Wait(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, forward_s: float, backward_s: float):  # type: ignore[override]
        ctx.backward_s = backward_s
        time.sleep(forward_s)
        return x.clone()

    @staticmethod
    def backward(ctx, grad):  # type: ignore[override]
        time.sleep(ctx.backward_s)
        return grad, None, None


class DeviceTime(nn.Module):
    """Passes its input through, taking ``forward_s`` and ``backward_s`` of device time."""

    def __init__(self, forward_s: float, backward_s: float) -> None:
        super().__init__()
        self.forward_s = forward_s
        self.backward_s = backward_s

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Wait.apply(x, self.forward_s, self.backward_s)
