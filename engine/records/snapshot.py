"""Session snapshots: one versioned JSON file, read back as a replay.

A snapshot holds every sample of every ring, the environment, probe status,
target exit info and the diagnoses history, so that ``aitop replay`` shows
exactly what was seen live. The sample and diagnosis dataclasses are encoded
and decoded by ``msgspec`` with their real types: a field renamed or retyped
in the model makes an old file fail loudly with one line, not half-load.

Writes are atomic (temporary file in the same directory, then ``os.replace``)
so an interrupted export never leaves a truncated snapshot behind; an export's
files are all written to temporaries before any is renamed into place, so a
failure leaves nothing, or says exactly which files landed. Reads refuse
anything but a regular file and stop at ``MAX_SNAPSHOT_BYTES``: ``aitop replay
/dev/zero`` or a FIFO must fail in one line, not eat memory or block forever.
"""

from __future__ import annotations

import heapq
import os
import tempfile
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import msgspec
from aitop.engine.files import FileError, discard, read_bounded, reason_of, refuse_non_regular
from aitop.engine.live.source import DataSource, RankPeer, ReplayInfo, ReplaySource
from aitop.knowledge.base.findings import Diagnosis
from aitop.knowledge.reading.loader import KnowledgeBase
from aitop.probes.own_version import aitop_version
from aitop.probes.ranks import Job
from aitop.probes.samples import (
    EnvironmentInfo,
    GpuSample,
    HostSample,
    LogEvent,
    ProcessTreeSample,
    StackWindow,
    StepCounterSample,
    StorageSample,
)
from aitop.probes.session import RING_KINDS, Session, sample_time
from aitop.probes.status import ProbeStatus

SCHEMA = "aitop.snapshot/1"
#: A node's recording: every job of a machine, each in this format
#: (``engine.records.node``).
NODE_SCHEMA = "aitop.node-snapshot/1"

#: The largest file ``load_snapshot`` reads. A real snapshot of a full session
#: is tens of MiB; the cap keeps a wrong path from reading until memory runs out.
MAX_SNAPSHOT_BYTES = 512 * 1024 * 1024

#: What to do when a path is not a snapshot at all.
GIVE_A_SNAPSHOT = "give a snapshot .json written by aitop"


class SnapshotError(FileError):
    """A snapshot could not be read or written; the message is one line saying why."""


class Samples(msgspec.Struct, kw_only=True):
    """Every sample of every ring, in arrival order."""

    processes: list[ProcessTreeSample] = []
    host: list[HostSample] = []
    gpu: list[GpuSample] = []
    stacks: list[StackWindow] = []
    steps: list[StepCounterSample] = []
    storage: list[StorageSample] = []
    #: Absent from snapshots written before aitop read the job's log for them.
    events: list[LogEvent] = []


class RankRecording(msgspec.Struct, kw_only=True):
    """One other rank of a multi-rank job, recorded like the lead rank."""

    label: str
    target_pid: int
    #: "watched", or why the rank could not be (then it has no samples).
    status: str
    capacity: int = 1
    started_at: float | None = None
    environment: EnvironmentInfo | None = None
    probe_status: dict[str, ProbeStatus | str] = {}
    target_exited_at: float | None = None
    target_exit_status: int | None = None
    samples: Samples = msgspec.field(default_factory=Samples)
    diagnoses: list[Diagnosis] = []


class Snapshot(msgspec.Struct, kw_only=True):
    """The file format, version ``aitop.snapshot/1``."""

    schema: str
    aitop_version: str | None
    written_at: float
    #: Whether the session was recorded live (a re-export of a replay is not).
    live: bool
    target_pid: int
    capacity: int
    started_at: float | None
    environment: EnvironmentInfo | None
    #: Typed since the states were typed; plain strings in older files.
    probe_status: dict[str, ProbeStatus | str]
    target_exited_at: float | None
    target_exit_status: int | None
    samples: Samples
    diagnoses: list[Diagnosis]
    #: The multi-process job around the target (absent in older files).
    job: Job | None = None
    #: The job's other ranks (absent in older files and for one process).
    ranks: list[RankRecording] = []


class _Header(msgspec.Struct):
    """Just enough of a file to tell which format it is."""

    schema: str | None = None
    aitop_version: str | None = None


def snapshot_of(source: DataSource, *, written_at: float | None = None) -> Snapshot:
    """A consistent copy of everything the source holds now."""
    return Snapshot(
        schema=SCHEMA,
        aitop_version=aitop_version(),
        written_at=time.time() if written_at is None else written_at,
        live=bool(source.live),
        job=source.session.job,
        ranks=[_rank_recording(peer) for peer in source.peers],
        **_recorded(source),
    )


def _recorded(source: DataSource) -> dict[str, Any]:
    """What a snapshot and each of its ranks record of one source's session."""
    s = source.session
    return {
        "target_pid": s.target_pid,
        "capacity": s.capacity,
        "started_at": s.started_at,
        "environment": s.environment,
        "probe_status": dict(s.probe_status),
        "target_exited_at": s.target_exited_at,
        "target_exit_status": s.target_exit_status,
        "samples": Samples(**{name: ring.items() for name, ring in s.rings().items()}),
        "diagnoses": list(source.history()),
    }


def _rank_recording(peer: RankPeer) -> RankRecording:
    if peer.source is None:
        return RankRecording(label=peer.label, target_pid=peer.pid, status=peer.status)
    return RankRecording(label=peer.label, status=peer.status, **_recorded(peer.source))


def encode(snapshot: msgspec.Struct) -> bytes:
    """The JSON bytes of a snapshot (NaN/inf become null: they are unknowns)."""
    return msgspec.json.encode(snapshot, enc_hook=_encode_other) + b"\n"


def _encode_other(obj: object) -> object:
    """History's packed metrics are written as the object they read as."""
    if isinstance(obj, Mapping):
        return dict(obj)
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


#: Suffixes of the files written beside a snapshot: none may name the snapshot itself.
COMPANION_SUFFIXES = (".md", ".svg", ".html")


def companion_paths(path: Path) -> tuple[Path, Path, Path]:
    """The Markdown report, SVG screenshot and HTML report written beside a snapshot."""
    return path.with_suffix(".md"), path.with_suffix(".svg"), path.with_suffix(".html")


def check_export_path(path: Path) -> None:
    """Fail now, in one line, if an export to ``path`` could not be written.

    Called when aitop starts, so that a typo in ``--export`` is found before a
    long session, not at its end. Checks that the path names a file (not a
    directory, not a companion's suffix), that its directory exists, and that a
    file can really be created there (a probe file, removed at once: permission
    bits alone say nothing for root or a read-only mount).
    """
    path = Path(path)
    if path.suffix in COMPANION_SUFFIXES:
        raise SnapshotError(
            f"cannot export to {path}: the reports and screenshot are written beside the "
            f"snapshot as .md, .html and .svg; give a .json name such as "
            f"{path.with_suffix('.json')}"
        )
    for target in (path, *companion_paths(path)):
        if target.is_dir():
            raise SnapshotError(
                f"cannot export to {target}: it is a directory; give a file name such as "
                f"{target / 'aitop.json'}"
            )
        refuse_non_regular(target)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        what = ("is not a directory; choose another path" if directory.exists()
                else "does not exist; create it or choose another path")
        raise SnapshotError(f"cannot export to {path}: {directory} {what}")
    _probe_writable(path, directory)


def _probe_writable(path: Path, directory: Path) -> None:
    """Create and remove a file in ``directory``: the only test that tells the truth."""
    try:
        fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".probe", dir=directory)
    except OSError as exc:
        raise SnapshotError(
            f"cannot export to {path}: cannot create a file in {directory} ({reason_of(exc)}); "
            "choose a writable directory"
        ) from exc
    os.close(fd)
    discard([name])


def latest_before(diagnoses: list[Diagnosis], now: float) -> Diagnosis | None:
    before = [d for d in diagnoses if d.t <= now]
    return max(before, key=lambda d: d.t) if before else None


def load_snapshot(path: Path, knowledge: KnowledgeBase) -> ReplaySource:
    """Read a snapshot file as a replay source judged with ``knowledge`` (the
    replaying run's knowledge base: its straggler cut, its targets).

    Raises ``SnapshotError`` with one line saying what is wrong and what to do.
    """
    path = Path(path)
    return replay_of(path, read_snapshot_bytes(path), knowledge)


def read_snapshot(path: Path) -> Snapshot:
    """A snapshot file decoded (what ``aitop diff`` compares needs no replay of it).

    Raises ``SnapshotError`` with one line saying what is wrong and what to do.
    """
    path = Path(path)
    return decode_snapshot(path, read_snapshot_bytes(path))


def replay_of(path: Path, data: bytes | None, knowledge: KnowledgeBase,
              snap: Snapshot | None = None, info: ReplayInfo | None = None) -> ReplaySource:
    """A job snapshot as a replay judged with ``knowledge``: decoded from ``data``, or
    ``snap`` already decoded (one job of a node recording, with the node file's
    ``info``)."""
    if snap is None:
        assert data is not None
        snap = decode_snapshot(path, data)
    if info is None:
        info = ReplayInfo(path=path, aitop_version=snap.aitop_version,
                          written_at=snap.written_at, recorded_live=snap.live)
    peers = []
    for rank in snap.ranks:
        replayed = None
        if rank.status == "watched" or rank.diagnoses:
            session = session_from(rank)
            session.job = snap.job
            replayed = ReplaySource(session, rank.diagnoses, info, knowledge=knowledge)
        peers.append(RankPeer(rank.label, rank.target_pid, replayed, rank.status))
    return ReplaySource(session_from(snap), snap.diagnoses, info, peers, knowledge=knowledge)


def decode_snapshot(path: Path, data: bytes) -> Snapshot:
    """A job snapshot's bytes decoded, or one ``SnapshotError`` line saying why not."""
    try:
        header = msgspec.json.decode(data, type=_Header)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise SnapshotError(
            f"{path} is not an aitop snapshot (not a JSON object: {first_line(exc)}); "
            "export one with `s` in aitop"
        ) from exc
    if header.schema == NODE_SCHEMA:
        raise SnapshotError(
            f"{path} is a node recording ({NODE_SCHEMA}, every job of a machine): open it "
            f"with `aitop replay {path}`; this command takes one job's snapshot "
            "(`aitop --pid PID --export FILE`)")
    if header.schema != SCHEMA:
        if header.schema is None:
            raise SnapshotError(
                f"{path} is not an aitop snapshot (no \"schema\" field); "
                "export one with `s` in aitop"
            )
        by = f" (written by aitop {header.aitop_version})" if header.aitop_version else ""
        raise SnapshotError(
            f"{path} uses snapshot format {header.schema}{by}; this aitop "
            f"({aitop_version() or '?'}) reads {SCHEMA}: replay it with the aitop version "
            "that wrote it"
        )
    try:
        return msgspec.json.decode(data, type=Snapshot)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        by = f" (written by aitop {header.aitop_version})" if header.aitop_version else ""
        raise SnapshotError(
            f"{path} is a damaged or incompatible {SCHEMA} file{by}: {first_line(exc)}; "
            "re-export it, or replay it with the aitop version that wrote it"
        ) from exc


def read_snapshot_bytes(path: Path) -> bytes:
    """A snapshot file's bytes, refused in one line if it cannot be one."""
    try:
        return read_bounded(path, MAX_SNAPSHOT_BYTES, verb="replay", what="a snapshot",
                            hint=GIVE_A_SNAPSHOT)
    except FileError as exc:
        raise SnapshotError(str(exc)) from exc


def session_from(snap: Snapshot | RankRecording) -> Session:
    """Rebuild a session holding every sample of a snapshot (or of one of its ranks)."""
    recorded: list[list[Any]] = [getattr(snap.samples, name) for name in RING_KINDS]
    biggest = max(len(samples) for samples in recorded)
    session = Session(snap.target_pid, capacity=max(snap.capacity, biggest, 1))
    # In time order across kinds, as the probes added them: what a sample
    # proves (a step counter that moved ends the first compilation) depends on
    # what came before it.
    for sample in heapq.merge(*recorded, key=sample_time):
        session.add(sample)
    if snap.environment is not None:
        session.add(snap.environment)
    session.probe_status = {
        name: status if isinstance(status, ProbeStatus) else ProbeStatus.parse(status)
        for name, status in snap.probe_status.items()
    }
    session.started_at = snap.started_at if snap.started_at is not None else session.started_at
    session.target_exited_at = snap.target_exited_at
    session.target_exit_status = snap.target_exit_status
    session.job = snap.job if isinstance(snap, Snapshot) else None
    return session


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
