"""Every PyTorch job of a machine as readers see it: the ``NodeSource`` contract.

The node view and the node report read one ``NodeSource``: the jobs on the
machine at a time, each a ``NodeJob`` that names it (its id, user, command,
when it started) and, once attached, carries the job's own ``DataSource`` (the
one ``aitop --pid`` would show). Live, the engine's fleet
(``engine.fleet.model``) finds, attaches and drops jobs; replayed, a node
recording (``NodeReplay``) holds each job's recording and the span it was seen
in, so a time cursor shows the jobs that ran then.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from aitop.engine.live.source import Conclusion, DataSource, ReplaySource, Timeline
from aitop.knowledge.reading.loader import KnowledgeBase
from aitop.probes.session import Session

#: What the node view and report say on a machine without a PyTorch job.
NO_JOBS = ("No PyTorch job runs on this machine (aitop looks for processes that loaded "
           "libtorch). Start one, or try the demo: `aitop demo`")

#: "watched", "attaching", "waiting" (a launcher before its ranks) or "not_watched".
WatchStatus = Literal["watched", "attaching", "waiting", "not_watched"]


@dataclass(frozen=True)
class NodeJob:
    """One job of the machine: who runs what since when, and how aitop watches it."""

    #: Unique within a session: the job root's PID and start time ("1234-5678").
    key: str
    #: The job's identity (``probes.job_identity``): torchrun's run id, Slurm's job, or a
    #: digest of its command line; the same on every node.
    job_id: str
    #: The job root's PID: the training process, or its launcher.
    pid: int
    user: str
    #: The root's command line, secrets redacted.
    command: tuple[str, ...]
    #: When the root process started (epoch seconds), None when unknown.
    started_at: float | None
    #: When aitop found it, and when it ended (None while it runs).
    found_at: float
    status: WatchStatus
    #: Why it is not watched, then what to do (``status`` not_watched).
    reason: str = ""
    ended_at: float | None = None
    #: What ``aitop --pid`` would show of it; None until attached (or never).
    source: DataSource | None = None

    def seen_at(self, t: float) -> bool:
        """Whether aitop knew the job at ``t``: found by then and not yet ended."""
        return self.found_at <= t and (self.ended_at is None or t < self.ended_at)


@runtime_checkable
class NodeSource(Protocol):
    """What the node view and report need from a live fleet or a node recording."""

    #: ``False`` for a recording (the UI then shows a time cursor over ``timeline()``).
    live: bool
    #: The machine's name.
    hostname: str
    #: The run's knowledge base, every job judged with it.
    knowledge: KnowledgeBase

    def jobs(self, t: float | None = None) -> list[NodeJob]:
        """The jobs on the machine at ``t`` (None: now, or a recording's end), by key."""
        ...

    def recorded(self) -> list[NodeJob]:
        """Every job of the session, those that ended included (what an export keeps)."""
        ...

    def timeline(self) -> Timeline | None:
        """The recorded span a cursor moves over; None when live or empty."""
        ...

    def focus(self, key: str | None) -> None:
        """Watch the job ``key`` at its own cadence while a person looks at it (None:
        none); the others keep the fleet's pace. A recording reads nothing."""
        ...

    def pace(self) -> float:
        """How many times slower than its own cadence each job is watched."""
        ...

    def close(self) -> None:
        """Stop watching every job; idempotent."""
        ...


class NodeReplay:
    """A node recording: each job with the span it was seen in and its own recording."""

    live = False

    def __init__(self, hostname: str, jobs: Sequence[NodeJob], knowledge: KnowledgeBase, *,
                 recorded_pace: float = 1.0, written_at: float | None = None) -> None:
        self.hostname = hostname
        self.knowledge = knowledge
        self._jobs = sorted(jobs, key=lambda j: (j.found_at, j.key))
        self._pace = recorded_pace
        self.written_at = written_at
        self._timeline: tuple[Timeline | None] | None = None

    def jobs(self, t: float | None = None) -> list[NodeJob]:
        if t is None:
            span = self.timeline()
            t = span.end if span is not None else None
        if t is None:
            return list(self._jobs)
        return [j for j in self._jobs if j.seen_at(t)]

    def recorded(self) -> list[NodeJob]:
        return list(self._jobs)

    def timeline(self) -> Timeline | None:
        if self._timeline is None:
            self._timeline = (self._span(),)
        return self._timeline[0]

    def focus(self, key: str | None) -> None:
        """Nothing to pace: a recording samples nothing."""

    def pace(self) -> float:
        return self._pace

    def close(self) -> None:
        """Nothing to release: a recording holds only memory."""

    def _span(self) -> Timeline | None:
        starts = [j.found_at for j in self._jobs]
        ends = [j.ended_at for j in self._jobs if j.ended_at is not None]
        steps = []
        for job in self._jobs:
            span = job.source.timeline() if job.source is not None else None
            if span is not None:
                starts.append(span.start)
                ends.append(span.end)
                steps.append(span.step_s)
        if not steps and self.written_at is not None:
            ends.append(self.written_at)  # no job has samples: the session ran until then
        if not starts:
            return None
        start = min(starts)
        end = max([*ends, start])
        return Timeline(start, end, min(steps) if steps else 1.0)


def conclusion_of(source: DataSource, t: float, live: bool) -> Conclusion:
    """A job's conclusion as a node reader shows it: live, its newest published; in a
    recording, the one made at ``t``."""
    return source.latest() if live else source.at(t)


def no_job_source(knowledge: KnowledgeBase) -> ReplaySource:
    """What a view holds before a job is opened: an empty recording of no process."""
    return ReplaySource(Session(0), (), knowledge=knowledge)
