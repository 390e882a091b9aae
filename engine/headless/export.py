"""Exporting a session: the snapshot with its Markdown report and screenshot, as one set.

The snapshot format (:mod:`aitop.engine.records.snapshot`) knows nothing of the
report written beside it; this flow renders the report, stages every file and
renames them into place together (:func:`aitop.engine.files.write_all`), and
says in one line what landed.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from aitop.engine.errors import CliError
from aitop.engine.files import FileError, write_all
from aitop.engine.live.source import DataSource
from aitop.engine.records.snapshot import (
    SnapshotError,
    companion_paths,
    encode,
    latest_before,
    snapshot_of,
)
from aitop.engine.reports.markdown import render_report
from aitop.knowledge.model import Diagnosis


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
    just to write a report). Returns the paths written, JSON first. The set
    lands whole (see ``write_all``): everything is rendered in memory, then
    staged, then renamed, the JSON last so that a snapshot on disk means its
    report landed too. Raises ``SnapshotError`` (one line) naming the file that
    failed and what was written; the session in memory is untouched.
    """
    path = Path(path)
    if path.suffix in (".md", ".svg"):
        raise SnapshotError(
            f"cannot write {path}: the report and screenshot would overwrite it; "
            f"give a .json name such as {path.with_suffix('.json')}; nothing was written"
        )
    snapshot = snapshot_of(source)
    report_now = now if now is not None else (source.session.latest_time() or time.time())
    if diagnosis is None:
        diagnosis = latest_before(snapshot.diagnoses, report_now)
    md_path, svg_path = companion_paths(path)
    report = render_report(
        source.session,
        diagnosis,
        report_now,
        aitop_version=snapshot.aitop_version,
        snapshot_name=path.name,
    )
    files = [(md_path, report.encode("utf-8"))]
    if screenshot_svg is not None:
        files.append((svg_path, screenshot_svg.encode("utf-8")))
    files.append((path, encode(snapshot)))
    try:
        written = write_all(files)
    except FileError as exc:
        raise SnapshotError(str(exc)) from exc
    return [written[-1], *written[:-1]]



def export_snapshot(source: DataSource, path: Path) -> None:
    """A headless command's export: the files written, or one ``CliError`` line."""
    try:
        written = write_snapshot(path, source)
    except (OSError, SnapshotError) as exc:
        raise CliError(f"could not write the snapshot to {path}: {exc}") from exc
    print("exported: " + ", ".join(str(p) for p in written), file=sys.stderr)
