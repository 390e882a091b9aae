"""DataLoader workers started again and again: each epoch's new workers.

With ``persistent_workers=False`` (DataLoader's default) every ``iter(loader)``
forks new workers and the end of the epoch stops them; each new worker imports
what it needs and runs ``worker_init_fn`` before its first batch, while the
training loop waits for that batch. The process tree shows it as worker PIDs
that change: a sample in which new workers replace ones that are gone (or
follow a sample with none) is a restart. The first workers aitop sees are no
restart: their start was not seen.
"""

from __future__ import annotations

from aitop.probes.session import Session

from .units import Values


def worker_restart_metrics(session: Session, now: float, window_s: float) -> Values:
    """``worker_restarts``: restarts in the window; ``worker_restart_every_s``: the
    mean time between them (an epoch's length, where a restart is an epoch's
    start), known from two restarts on. Epochs shorter than the process tree's
    interval are undercounted: the count is a floor."""
    known: set[int] | None = None
    restarts: list[float] = []
    # From a window back: the workers before the window's first sample are known.
    for tree in session.processes.window(now - 2 * window_s, now):
        if tree.error is not None or not tree.alive:
            continue
        pids = {p.pid for p in tree.workers}
        if known is not None and pids - known and (not known or not known <= pids):
            restarts.append(tree.t)  # new workers, and the last ones gone (or none left)
        if pids or known is not None:
            known = pids
    recent = [t for t in restarts if t > now - window_s]
    every = ((recent[-1] - recent[0]) / (len(recent) - 1)) if len(recent) >= 2 else None
    return {"worker_restarts": float(len(recent)), "worker_restart_every_s": every}
