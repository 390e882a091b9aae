"""Session snapshots: one versioned JSON file, read back as a replay.

A snapshot holds every sample of every ring, the environment, probe status,
target exit info and the diagnoses history, so that ``aitop replay`` shows
exactly what was seen live. The sample and diagnosis dataclasses are encoded
and decoded by ``msgspec`` with their real types: a field renamed or retyped
in the model makes an old file fail loudly with one line, not half-load.

Writes are atomic (temporary file in the same directory, then ``os.replace``)
so an interrupted export never leaves a truncated snapshot behind.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path
from typing import Any

import msgspec
from aitop.knowledge.model import Diagnosis
from aitop.probes.samples import (
    EnvironmentInfo,
    GpuSample,
    HostSample,
    ProcessTreeSample,
    StackWindow,
    StepCounterSample,
    StorageSample,
)
from aitop.probes.session import RING_KINDS, Session
from aitop.probes.status import ProbeStatus

from .report_md import render_report
from .source import DataSource, ReplayInfo, ReplaySource
from .version import aitop_version

SCHEMA = "aitop.snapshot/1"


class SnapshotError(Exception):
    """A snapshot could not be read or written; the message is one line saying why."""


class Samples(msgspec.Struct, kw_only=True):
    """Every sample of every ring, in arrival order."""

    processes: list[ProcessTreeSample] = []
    host: list[HostSample] = []
    gpu: list[GpuSample] = []
    stacks: list[StackWindow] = []
    steps: list[StepCounterSample] = []
    storage: list[StorageSample] = []


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


class _Header(msgspec.Struct):
    """Just enough of a file to tell which format it is."""

    schema: str | None = None
    aitop_version: str | None = None


def snapshot_of(source: DataSource, *, written_at: float | None = None) -> Snapshot:
    """A consistent copy of everything the source holds now."""
    s = source.session
    return Snapshot(
        schema=SCHEMA,
        aitop_version=aitop_version(),
        written_at=time.time() if written_at is None else written_at,
        live=bool(source.live),
        target_pid=s.target_pid,
        capacity=s.capacity,
        started_at=s.started_at,
        environment=s.environment,
        probe_status=dict(s.probe_status),
        target_exited_at=s.target_exited_at,
        target_exit_status=s.target_exit_status,
        samples=Samples(**{name: ring.items() for name, ring in s.rings().items()}),
        diagnoses=list(source.history()),
    )


def encode(snapshot: Snapshot) -> bytes:
    """The JSON bytes of a snapshot (NaN/inf become null: they are unknowns)."""
    return msgspec.json.encode(snapshot) + b"\n"


def companion_paths(path: Path) -> tuple[Path, Path]:
    """The Markdown report and SVG screenshot written beside a snapshot."""
    return path.with_suffix(".md"), path.with_suffix(".svg")


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new, never half.

    Raises ``SnapshotError`` with one line saying why the write failed.
    """
    directory = path.parent if str(path.parent) else Path(".")
    tmp_name: str | None = None
    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=directory)
        # mkstemp makes 0600 files; an export should get the usual permissions.
        os.fchmod(fd, _file_mode(path))
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp_name, path)
        tmp_name = None
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise SnapshotError(f"cannot write {path}: {reason}") from exc
    finally:
        if tmp_name is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp_name)


def _file_mode(path: Path) -> int:
    """The mode an ordinary ``open(path, "w")`` would give: the old file's, else umask's."""
    try:
        return path.stat().st_mode & 0o777
    except OSError:
        pass
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


def write_snapshot(
    path: Path,
    source: DataSource,
    *,
    now: float | None = None,
    diagnosis: Diagnosis | None = None,
    screenshot_svg: str | None = None,
) -> list[Path]:
    """Write the snapshot JSON, its Markdown report and (if given) the SVG screenshot.

    ``now`` is the time the report describes (a replay's cursor; default the
    newest sample) and ``diagnosis`` the conclusion it reports (default: the
    last one in the history at or before ``now``; the rules are never re-run
    just to write a report). Returns the paths written, JSON first. Raises
    ``SnapshotError`` (one line) when any of them cannot be written; files
    already written stay, and the session in memory is untouched.
    """
    path = Path(path)
    snapshot = snapshot_of(source)
    report_now = now if now is not None else (source.session.latest_time() or time.time())
    if diagnosis is None:
        diagnosis = _latest_before(snapshot.diagnoses, report_now)
    md_path, svg_path = companion_paths(path)
    write_atomic(path, encode(snapshot))
    written = [path]
    report = render_report(
        source.session,
        diagnosis,
        report_now,
        aitop_version=snapshot.aitop_version,
        snapshot_name=path.name,
    )
    write_atomic(md_path, report.encode("utf-8"))
    written.append(md_path)
    if screenshot_svg is not None:
        write_atomic(svg_path, screenshot_svg.encode("utf-8"))
        written.append(svg_path)
    return written


def _latest_before(diagnoses: list[Diagnosis], now: float) -> Diagnosis | None:
    before = [d for d in diagnoses if d.t <= now]
    return max(before, key=lambda d: d.t) if before else None


def load_snapshot(path: Path) -> ReplaySource:
    """Read a snapshot file as a replay source.

    Raises ``SnapshotError`` with one line saying what is wrong and what to do.
    """
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise SnapshotError(f"cannot read {path}: {exc.strerror or exc}") from exc
    try:
        header = msgspec.json.decode(data, type=_Header)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        raise SnapshotError(
            f"{path} is not an aitop snapshot (not a JSON object: {_first_line(exc)}); "
            "export one with `s` in aitop"
        ) from exc
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
        snap = msgspec.json.decode(data, type=Snapshot)
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        by = f" (written by aitop {header.aitop_version})" if header.aitop_version else ""
        raise SnapshotError(
            f"{path} is a damaged or incompatible {SCHEMA} file{by}: {_first_line(exc)}; "
            "re-export it, or replay it with the aitop version that wrote it"
        ) from exc
    return ReplaySource(
        session_from(snap),
        snap.diagnoses,
        ReplayInfo(
            path=path,
            aitop_version=snap.aitop_version,
            written_at=snap.written_at,
            recorded_live=snap.live,
        ),
    )


def session_from(snap: Snapshot) -> Session:
    """Rebuild a session holding every sample of a snapshot."""
    recorded: list[list[Any]] = [getattr(snap.samples, name) for name in RING_KINDS]
    biggest = max(len(samples) for samples in recorded)
    session = Session(snap.target_pid, capacity=max(snap.capacity, biggest, 1))
    for samples in recorded:
        for sample in samples:
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
    return session


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__
