"""Where the UI's data comes from: the ``DataSource`` contract and its replay side.

The UI never touches probes or rules directly. It reads ``source.session`` (filled
continuously by probe threads when live, loaded from a file for a replay) and
asks ``source.evaluate(now)`` for a diagnosis. ``Evaluation`` is how it asks
without ever blocking the event loop or the process's exit.
"""

from __future__ import annotations

import bisect
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, runtime_checkable

from aitop.engine.live.series import typical_interval
from aitop.knowledge.model import Diagnosis
from aitop.probes.session import Session, sample_time


@runtime_checkable
class DataSource(Protocol):
    """What the UI needs from a live attachment or a recording."""

    session: Session
    #: ``False`` for a replay (the UI then shows a time cursor).
    live: bool

    def evaluate(self, now: float) -> Diagnosis | None:
        """The diagnosis for the window ending at ``now``.

        Live: runs the rules (may take ~10 ms; the UI calls it off the event loop).
        Replay: the recorded diagnosis at or before ``now``.
        """
        ...

    def history(self) -> Sequence[Diagnosis]:
        """Diagnoses so far (bounded), for export: findings and when they fired.

        Never waits for an evaluation in progress: the UI calls it on its event
        loop every frame.
        """
        ...

    def close(self) -> None:
        """Stop collecting; idempotent."""
        ...


@dataclass
class RankPeer:
    """One other rank of a multi-rank job: how it is named, and what watches it."""

    label: str
    pid: int
    #: None when the rank could not be watched at all (``status`` says why).
    source: DataSource | None
    #: "watched", or why not ("gone", "not a Python process", ...).
    status: str = "watched"


@dataclass
class ReplayInfo:
    """Facts about a recording that are not samples."""

    path: Path | None = None
    aitop_version: str | None = None
    written_at: float | None = None
    #: Whether the recording was made from a live attachment.
    recorded_live: bool = True


class ReplaySource:
    """A recorded session: samples plus the diagnoses that were made at the time.

    ``evaluate`` does not re-run rules: a replay shows what aitop concluded then,
    so that a report and its recording always agree.
    """

    live = False

    def __init__(
        self,
        session: Session,
        diagnoses: list[Diagnosis],
        info: ReplayInfo | None = None,
        peers: Sequence[RankPeer] = (),
    ) -> None:
        self.session = session
        #: The job's other ranks, each replayed from its own recording.
        self.peers = list(peers)
        self._diagnoses = sorted(diagnoses, key=lambda d: d.t)
        self._times = [d.t for d in self._diagnoses]
        self.info = info or ReplayInfo()

    def evaluate(self, now: float) -> Diagnosis | None:
        i = bisect.bisect_right(self._times, now)
        return self._diagnoses[i - 1] if i else None

    def history(self) -> Sequence[Diagnosis]:
        return tuple(self._diagnoses)

    def close(self) -> None:
        """Nothing to release: a replay holds only memory."""

    # ---------------------------------------------------------- time cursor

    def sample_times(self) -> list[float]:
        """Every distinct time at which something was recorded, ascending."""
        times: set[float] = set(self._times)
        for ring in self.session.rings().values():
            times.update(sample_time(s) for s in ring.items())
        return sorted(times)

    def time_range(self) -> tuple[float, float] | None:
        """The first and last recorded times, or ``None`` for an empty recording."""
        times = self.sample_times()
        return (times[0], times[-1]) if times else None

    def step_s(self) -> float:
        """One cursor step: the typical sampling period of the recording."""
        host = [s.t for s in self.session.host.items()]
        return typical_interval(host or self.sample_times())


@dataclass
class Evaluation:
    """One ``evaluate`` call running on a daemon thread.

    Why not just call it from the Textual thread worker: thread workers run on
    asyncio's default executor, which ``asyncio.run`` joins at exit, so an
    evaluation that hangs (a stuck py-spy, a rule in a loop) would keep aitop
    from quitting. The worker waits on this instead and can give up on it.
    """

    source: DataSource
    now: float
    started: float = field(default_factory=time.monotonic)
    result: Diagnosis | None = None
    error: BaseException | None = None
    done: threading.Event = field(default_factory=threading.Event)

    def start(self) -> Evaluation:
        thread = threading.Thread(target=self._run, name="aitop-evaluate", daemon=True)
        thread.start()
        return self

    def _run(self) -> None:
        try:
            self.result = self.source.evaluate(self.now)
        except BaseException as exc:  # reported in the UI, never raised in a thread
            self.error = exc
        finally:
            self.done.set()

    def elapsed(self) -> float:
        return time.monotonic() - self.started
