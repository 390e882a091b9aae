"""The node as a table: one row a job, its ranks beneath it, at a time ``t``.

What the node view draws (and its recording replays), computed here from each
job's ``DataSource`` so that the terminal only formats: the job's state and
verdict from its diagnosis (``knowledge.base.findings.job_state``), and what it
uses now from the newest samples of every rank (CPU cores, resident memory,
the GPUs its processes are on). Live, each job's published conclusion; in a
replay, the one recorded at ``t``.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from aitop.engine.live.job import Rank, rank_rows
from aitop.engine.live.node import NodeJob, NodeSource, WatchStatus, conclusion_of
from aitop.engine.live.series import latest
from aitop.engine.live.source import DataSource
from aitop.knowledge.base.findings import Gain, JobState
from aitop.knowledge.judging.job_state import job_state
from aitop.probes.session import Session


@dataclass(frozen=True)
class JobRow:
    """One job as the node view lists it."""

    key: str
    job_id: str
    pid: int
    user: str
    #: The root's command line, secrets redacted, as one string.
    command: str
    #: Seconds since the root process started.
    age_s: float | None
    status: WatchStatus
    #: Why it is not (fully) watched and what to do: a not-watched job's reason,
    #: or, for a watched one, why its stacks are off.
    reason: str
    state: JobState
    #: The diagnosis's bottleneck category and its first sentence ("" before one).
    category: str | None
    verdict: str
    steps_per_s: float | None
    #: CPU of every process of the job (all ranks, their workers), in cores.
    cpu_cores: float | None
    rss_bytes: int | None
    #: The busiest GPU the job's processes are on, and the memory they hold there.
    gpu_util_percent: float | None
    gpu_mem_bytes: int | None
    #: What the lead finding's first action is estimated to buy.
    gain: Gain | None
    #: Every rank of a multi-rank job, the lead first (empty for one process).
    ranks: tuple[Rank, ...] = ()


@dataclass(frozen=True)
class NodeTable:
    """The node at one time: its watched jobs, and what aitop may not watch."""

    hostname: str
    t: float
    live: bool
    pace: float
    rows: tuple[JobRow, ...]
    not_watched: tuple[JobRow, ...]

    @property
    def empty(self) -> bool:
        return not self.rows and not self.not_watched


def node_table(node: NodeSource, t: float) -> NodeTable:
    """Every job ``node`` knows at ``t`` as a row (live: each job's newest)."""
    rows = [job_row(job, t, node.live) for job in node.jobs(None if node.live else t)]
    return NodeTable(
        hostname=node.hostname, t=t, live=node.live, pace=node.pace(),
        rows=tuple(r for r in rows if r.status != "not_watched"),
        not_watched=tuple(r for r in rows if r.status == "not_watched"))


def job_row(job: NodeJob, t: float, live: bool) -> JobRow:
    source = job.source
    conclusion = conclusion_of(source, t, live) if source is not None else None
    diagnosis = conclusion.diagnosis if conclusion is not None else None
    sessions = _sessions(source) if source is not None else []
    cpu, rss = _processes(sessions, t)
    util, gpu_mem = _gpus(sessions, t)
    top = diagnosis.top if diagnosis is not None else None
    return JobRow(
        key=job.key, job_id=job.job_id, pid=job.pid, user=job.user,
        command=command_line(job.command),
        age_s=max(0.0, t - job.started_at) if job.started_at is not None else None,
        status=job.status,
        reason=job.reason or (_stacks_off(source.session) if source is not None else ""),
        state=job_state(diagnosis),
        category=diagnosis.category if diagnosis is not None else None,
        verdict=first_sentence(diagnosis.summary) if diagnosis is not None else "",
        steps_per_s=diagnosis.steps_per_s if diagnosis is not None else None,
        cpu_cores=cpu, rss_bytes=rss, gpu_util_percent=util, gpu_mem_bytes=gpu_mem,
        gain=top.gain if top is not None and top.gain.speedup is not None else None,
        ranks=tuple(rank_rows(source, conclusion, t))
        if source is not None and conclusion is not None else (),
    )


def command_line(command: tuple[str, ...]) -> str:
    """The command as one line: the program by its name (``python``, not its venv's
    path), whitespace folded (a ``-c`` program's newlines too)."""
    if not command:
        return ""
    return " ".join(" ".join((os.path.basename(command[0]), *command[1:])).split())


def first_sentence(text: str) -> str:
    """Up to the first sentence's full stop (a title is one sentence already)."""
    end = text.find(". ")
    return text if end < 0 else text[: end + 1]


def _sessions(source: DataSource) -> list[Session]:
    """The lead rank's session and every watched peer's."""
    return [source.session, *(p.source.session for p in source.peers if p.source is not None)]


def _processes(sessions: Sequence[Session], t: float) -> tuple[float | None, int | None]:
    """CPU (cores) and resident memory of every process of every rank, newest at ``t``."""
    cpu: list[float] = []
    rss: list[int] = []
    for session in sessions:
        tree = latest(session.processes, t)
        if tree is None or not tree.alive:
            continue
        cpu += [p.cpu_percent for p in tree.processes if p.cpu_percent is not None]
        rss += [p.rss_bytes for p in tree.processes if p.rss_bytes is not None]
    return (sum(cpu) / 100.0 if cpu else None), (sum(rss) if rss else None)


def _gpus(sessions: Sequence[Session], t: float) -> tuple[float | None, int | None]:
    """The busiest GPU any rank's processes are on, and the memory they hold on GPUs."""
    util: list[float] = []
    held: dict[tuple[int, int], int] = {}
    for session in sessions:
        sample = latest(session.gpu, t)
        if sample is None:
            continue
        for device in sample.devices:
            mine = [p for p in device.processes if p.in_target]
            if not mine:
                continue
            if device.util_percent is not None:
                util.append(device.util_percent)
            for p in mine:
                if p.used_memory_bytes is not None:
                    held[(device.index, p.pid)] = p.used_memory_bytes
    return (max(util) if util else None), (sum(held.values()) if held else None)


def _stacks_off(session: Session) -> str:
    """Why the job's stacks are off (py-spy denied, not Python), else ""."""
    status = session.probe_status.get("stacks")
    if status is not None and status.state == "unavailable":
        return f"watched without stacks: {status.detail}"
    return ""
