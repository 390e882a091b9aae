"""Exporting a node session: its recording, a Markdown report of every job, the screen.

``aitop --export FILE`` without ``--pid`` and ``s`` in the node view write the
node recording (``engine.records.node``) with ``FILE.md`` beside it (each job's
Markdown report under the node's table) and, from the UI, the screenshot as
``FILE.svg``; the set lands whole (``engine.files.write_all``). Each job's own
HTML page is one ``aitop --pid`` export away; the node's is not written.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from aitop.engine.errors import CliError
from aitop.engine.files import FileError, write_all
from aitop.engine.headless.export import ExportRequest
from aitop.engine.headless.source_report import report_of
from aitop.engine.live.node import NO_JOBS, NodeJob, NodeSource, conclusion_of
from aitop.engine.records.node import node_snapshot_of
from aitop.engine.records.snapshot import (
    COMPANION_SUFFIXES,
    SnapshotError,
    companion_paths,
    encode,
)
from aitop.engine.reports.build import RunFacts
from aitop.engine.reports.markdown import render_markdown, wording_of
from aitop.knowledge.judging.job_state import job_state


class NodeWriter:
    """The node's export, for ``ExportFlow`` (``s`` and ``--export`` in the node view)."""

    def __init__(self, node: NodeSource) -> None:
        self.node = node

    def stem(self) -> str:
        return f"aitop-node-{self.node.hostname}"

    def write(self, path: Path, request: ExportRequest) -> list[Path]:
        return write_node_snapshot(path, self.node, now=request.now,
                                   screenshot_svg=request.screenshot_svg)


def write_node_snapshot(path: Path, node: NodeSource, *, now: float | None = None,
                        screenshot_svg: str | None = None) -> list[Path]:
    """Write the node recording, its Markdown report and (if given) the screenshot.

    Returns the paths written, JSON first; raises ``SnapshotError`` (one line)
    naming what failed and what was written.
    """
    path = Path(path)
    if path.suffix in COMPANION_SUFFIXES:
        raise SnapshotError(
            f"cannot write {path}: the report and screenshot would overwrite it; "
            f"give a .json name such as {path.with_suffix('.json')}; nothing was written")
    snapshot = node_snapshot_of(node)
    when = now if now is not None else snapshot.written_at
    md_path, svg_path, _html = companion_paths(path)
    files = [(md_path, node_markdown(node, when, path.name).encode("utf-8"))]
    if screenshot_svg is not None:
        files.append((svg_path, screenshot_svg.encode("utf-8")))
    files.append((path, encode(snapshot)))
    try:
        written = write_all(files)
    except FileError as exc:
        raise SnapshotError(str(exc)) from exc
    return [written[-1], *written[:-1]]


def export_node(node: NodeSource, path: Path) -> None:
    """A headless run's export: the files written, or one ``CliError`` line."""
    try:
        written = write_node_snapshot(path, node)
    except (OSError, SnapshotError) as exc:
        raise CliError(f"could not write the node recording to {path}: {exc}") from exc
    print("exported: " + ", ".join(str(p) for p in written), file=sys.stderr)


def node_markdown(node: NodeSource, t: float, name: str | None = None) -> str:
    """Every job of the session in a table, then each watched job's own report."""
    jobs = node.recorded()
    stamp = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t))
    out = [f"# aitop node report: {node.hostname}", "", f"At {stamp}.", ""]
    if not jobs:
        out += [NO_JOBS, ""]
    else:
        out += ["| job | PID | user | state | verdict | command |", "|---|---|---|---|---|---|"]
        out += [_table_row(job, t, node.live) for job in jobs]
        out.append("")
    for job in jobs:
        if job.source is None:
            continue
        conclusion = conclusion_of(job.source, t, node.live)
        attached = job.source.session.started_at or t
        typed = report_of(job.source, t, conclusion, RunFacts(max(0.0, t - attached), None, None),
                          attached)
        said = [conclusion.diagnosis] if conclusion.diagnosis is not None else []
        report = render_markdown(typed, job.source.session, job.source.knowledge,
                                 wording_of(typed, [*said, *reversed(job.source.history())]))
        out += [f"## Job {job.job_id}", "", *("#" + line if line.startswith("#") else line
                                             for line in report.splitlines()), ""]
    if name:
        out += [f"_Replay it with `aitop replay {name}`._", ""]
    return "\n".join(out)


def _table_row(job: NodeJob, t: float, live: bool) -> str:
    if job.status == "not_watched":
        state, verdict = "not watched", job.reason
    elif job.source is None:
        state, verdict = job.status, ""
    else:
        diagnosis = conclusion_of(job.source, t, live).diagnosis
        state = job_state(diagnosis).replace("_", " ")
        verdict = diagnosis.summary if diagnosis is not None else ""
    if job.ended_at is not None:
        state += " (ended)"
    cells = [job.job_id, str(job.pid), job.user, state, verdict, f"`{' '.join(job.command)}`"]
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"
