"""Node recordings: every job of a node session in one versioned JSON file.

``aitop --export FILE`` without ``--pid`` writes one at exit (and ``s`` in the
node view): the machine, and for each job aitop saw its identity, the span it
was seen in, why it was not watched, and its whole recording in the job
snapshot format (``aitop.snapshot/1``, :mod:`aitop.engine.records.snapshot`),
so ``aitop replay FILE`` reopens the node view and any job's full view. The
node format has a version of its own (``aitop.node-snapshot/1``); a job
snapshot keeps its version, so every snapshot written before reads as it did.
"""

from __future__ import annotations

import time
from pathlib import Path

import msgspec
from aitop.engine.live.node import NodeJob, NodeReplay, NodeSource, WatchStatus
from aitop.engine.live.source import ReplayInfo, ReplaySource
from aitop.engine.records.snapshot import (
    NODE_SCHEMA,
    SCHEMA,
    Snapshot,
    SnapshotError,
    first_line,
    read_snapshot_bytes,
    replay_of,
    snapshot_of,
)
from aitop.knowledge.reading.loader import KnowledgeBase
from aitop.probes.own_version import aitop_version

__all__ = ["NODE_SCHEMA", "JobRecording", "NodeSnapshot", "load_recording",
           "node_snapshot_of"]


class JobRecording(msgspec.Struct, kw_only=True):
    """One job of the node: who ran what, when aitop saw it, and its recording."""

    key: str
    job_id: str
    pid: int
    user: str
    command: list[str]
    started_at: float | None
    found_at: float
    ended_at: float | None
    status: WatchStatus
    reason: str = ""
    #: The job's recording (``aitop.snapshot/1``); None when it was never attached.
    recording: Snapshot | None = None


class NodeSnapshot(msgspec.Struct, kw_only=True):
    """The file format, version ``aitop.node-snapshot/1``."""

    schema: str
    aitop_version: str | None
    written_at: float
    live: bool
    hostname: str
    #: How many times slower than its cadence each job was watched when written.
    pace: float
    jobs: list[JobRecording]


class _Header(msgspec.Struct):
    schema: str | None = None


def node_snapshot_of(node: NodeSource, *, written_at: float | None = None) -> NodeSnapshot:
    """A copy of every job ``node`` holds now, ended ones included."""
    when = time.time() if written_at is None else written_at
    return NodeSnapshot(
        schema=NODE_SCHEMA, aitop_version=aitop_version(), written_at=when,
        live=bool(node.live), hostname=node.hostname, pace=node.pace(),
        jobs=[_job(job, when) for job in node.recorded()])


def _job(job: NodeJob, when: float) -> JobRecording:
    return JobRecording(
        key=job.key, job_id=job.job_id, pid=job.pid, user=job.user, command=list(job.command),
        started_at=job.started_at, found_at=job.found_at, ended_at=job.ended_at,
        status=job.status, reason=job.reason,
        recording=snapshot_of(job.source, written_at=when) if job.source is not None else None)


def is_node_recording(data: bytes) -> bool:
    """Whether a file's bytes declare the node format (anything else is left to the job
    snapshot reader, which says what is wrong with it)."""
    try:
        return msgspec.json.decode(data, type=_Header).schema == NODE_SCHEMA
    except (msgspec.DecodeError, msgspec.ValidationError):
        return False


def load_recording(path: Path, knowledge: KnowledgeBase) -> ReplaySource | NodeReplay:
    """A snapshot file as a replay judged with ``knowledge``: one job's (``aitop
    --pid``) or a node's.

    Raises ``SnapshotError`` with one line saying what is wrong and what to do.
    """
    path = Path(path)
    data = read_snapshot_bytes(path)
    if not is_node_recording(data):
        return replay_of(path, data, knowledge)
    try:
        snap = msgspec.json.decode(data, type=NodeSnapshot)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise SnapshotError(
            f"{path} is a damaged or incompatible {NODE_SCHEMA} file: {first_line(exc)}; "
            "re-export it, or replay it with the aitop version that wrote it") from exc
    jobs = []
    for job in snap.jobs:
        source = None
        if job.recording is not None:
            if job.recording.schema != SCHEMA:
                raise SnapshotError(f"{path}: job {job.job_id} is recorded as "
                                    f"{job.recording.schema}; this aitop reads {SCHEMA}")
            info = ReplayInfo(path=path, aitop_version=snap.aitop_version,
                              written_at=snap.written_at, recorded_live=snap.live)
            source = replay_of(path, None, knowledge, job.recording, info)
        jobs.append(NodeJob(
            key=job.key, job_id=job.job_id, pid=job.pid, user=job.user,
            command=tuple(job.command), started_at=job.started_at, found_at=job.found_at,
            status=job.status, reason=job.reason, ended_at=job.ended_at, source=source))
    return NodeReplay(snap.hostname, jobs, knowledge, recorded_pace=snap.pace,
                      written_at=snap.written_at)
