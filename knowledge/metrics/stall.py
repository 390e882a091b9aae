"""A stalled training thread: how long it has stood in one frame, and the job's
activity meanwhile."""

from __future__ import annotations

from aitop.probes.samples import HotFrame
from aitop.probes.session import Session

from .processes import PROC_CPU, PROC_READ
from .units import Values

#: How far back a stall is traced: a longer one reads as this long.
STALL_LOOKBACK_S = 300.0
#: A stall is judged on the job's activity over its last seconds, at most this many.
STALL_QUIET_S = 10.0
#: A window is "in one place" when this share of its samples stands in one frame.
STALL_SHARE = 0.95


def stall(session: Session, now: float) -> tuple[float, HotFrame | None]:
    """How long the training thread has stood in one innermost frame, and which.

    Walks the stack windows back from the newest while each has (nearly) all
    its samples in the same frame; the seconds from the oldest such window's
    start to ``now``. A loop that progresses moves between frames every step.
    """
    windows = [w for w in session.stacks.window(now - STALL_LOOKBACK_S, now)
               if w.error is None and w.total_samples > 0]
    frame: HotFrame | None = None
    since: float | None = None
    for w in reversed(windows):
        top = max(w.hot_frames, key=lambda f: f.count, default=None)
        if top is None or top.count < STALL_SHARE * w.total_samples:
            break
        if frame is not None and (top.function, top.location) != (frame.function,
                                                                   frame.location):
            break
        frame, since = frame or top, w.t_start
    return (0.0 if since is None else max(0.0, now - since)), frame


def stall_metrics(session: Session, now: float) -> Values:
    """How long the loop has stood still, and the job's CPU and reads over the
    stall's last seconds (``STALL_QUIET_S`` at most).

    A loop that stands in one frame while its producer works is slow, not
    stalled; one whose producer worked as the loop began to wait and then quit
    is stalled, though the window's mean CPU still holds the producer's work.
    """
    stalled = stall(session, now)[0] if session.stacks.last() else None
    quiet = min(stalled or 0.0, STALL_QUIET_S)
    values: Values = {"stalled_s": stalled}
    for name, value in (("stall_cpu", PROC_CPU), ("stall_read", PROC_READ)):
        agg = session.aggregate(session.processes, value, now, quiet) if quiet > 0 else None
        values[name] = None if agg is None else agg.mean
    return values
