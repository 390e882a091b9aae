"""Exporting a session: the snapshot with its Markdown and HTML reports and screenshot, as one set.

The snapshot format (:mod:`aitop.engine.records.snapshot`) knows nothing of the
report written beside it; ``write_snapshot`` renders the report, stages every
file and renames them into place together (:func:`aitop.engine.files.write_all`),
and says in one line what landed. ``ExportFlow`` is an interactive session's
exports: written in the background on request, in the foreground at exit, and
what became of each (a UI draws it; nothing here knows of one).
"""

from __future__ import annotations

import dataclasses
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol, runtime_checkable

from aitop.engine.compare.runs import Run
from aitop.engine.errors import CliError
from aitop.engine.files import FileError, write_all
from aitop.engine.headless.source_report import report_of
from aitop.engine.live.source import DataSource
from aitop.engine.records.snapshot import (
    COMPANION_SUFFIXES,
    SnapshotError,
    companion_paths,
    encode,
    latest_before,
    snapshot_of,
)
from aitop.engine.reports.build import RunFacts
from aitop.engine.reports.schema import Report
from aitop.knowledge.base.findings import Diagnosis


def report_at(source: DataSource, now: float, diagnosis: Diagnosis | None) -> Report:
    """The typed report of ``source`` as of ``now``, with ``diagnosis`` as its conclusion."""
    conclusion = dataclasses.replace(source.at(now), diagnosis=diagnosis)
    started = source.session.started_at or now
    return report_of(source, now, conclusion, RunFacts(max(0.0, now - started), None, None),
                     started)


def write_snapshot(
    path: Path,
    source: DataSource,
    *,
    now: float | None = None,
    diagnosis: Diagnosis | None = None,
    screenshot_svg: str | None = None,
    report: Report | None = None,
    baseline: Run | None = None,
) -> list[Path]:
    """Write the snapshot JSON, its Markdown and HTML reports and (if given) the SVG screenshot.

    ``now`` is the time the report describes (a replay's cursor; default the
    newest sample) and ``diagnosis`` the conclusion it reports (default: the
    last one in the history at or before ``now``; the rules are never re-run
    just to write a report). ``report`` is the typed report a headless run
    already made (default: built here for ``now``): the Markdown and HTML
    reports are both rendered from it, the HTML page with ``baseline``'s
    comparison if given. Returns the paths written, JSON first
    (then Markdown, HTML, SVG). The set
    lands whole (see ``write_all``): everything is rendered in memory, then
    staged, then renamed, the JSON last so that a snapshot on disk means its
    report landed too. Raises ``SnapshotError`` (one line) naming the file that
    failed and what was written; the session in memory is untouched.
    """
    # The renderers (jinja2's templates among them) load with the first export,
    # not with the UI that may never write one.
    from aitop.engine.headless.html_report import html_of
    from aitop.engine.reports.markdown import render_markdown, wording_of

    path = Path(path)
    if path.suffix in COMPANION_SUFFIXES:
        raise SnapshotError(
            f"cannot write {path}: the reports and screenshot would overwrite it; "
            f"give a .json name such as {path.with_suffix('.json')}; nothing was written"
        )
    snapshot = snapshot_of(source)
    report_now = now if now is not None else (source.session.latest_time() or time.time())
    if diagnosis is None:
        diagnosis = latest_before(snapshot.diagnoses, report_now)
    md_path, svg_path, html_path = companion_paths(path)
    if report is None:
        report = report_at(source, report_now, diagnosis)
    said = [diagnosis] if diagnosis is not None else []
    wording = wording_of(report, [*said, *reversed(snapshot.diagnoses)])
    markdown = render_markdown(report, source.session, source.knowledge, wording,
                               snapshot_name=path.name)
    files = [(md_path, markdown.encode("utf-8")),
             (html_path, html_of(report, source, baseline).encode("utf-8"))]
    if screenshot_svg is not None:
        files.append((svg_path, screenshot_svg.encode("utf-8")))
    files.append((path, encode(snapshot)))
    try:
        written = write_all(files)
    except FileError as exc:
        raise SnapshotError(str(exc)) from exc
    return [written[-1], *written[:-1]]



def export_snapshot(source: DataSource, path: Path, report: Report | None = None,
                    baseline: Run | None = None) -> None:
    """A headless command's export: the files written, or one ``CliError`` line."""
    try:
        written = write_snapshot(path, source, report=report, baseline=baseline)
    except (OSError, SnapshotError) as exc:
        raise CliError(f"could not write the snapshot to {path}: {exc}") from exc
    print("exported: " + ", ".join(str(p) for p in written), file=sys.stderr)


#: Exit status when the user quits while the last export failed.
EXIT_UNSAVED = 1


@dataclass(frozen=True)
class ExportRequest:
    """What to export: the time the report describes, its conclusion, the screen."""

    now: float | None = None
    diagnosis: Diagnosis | None = None
    screenshot_svg: str | None = None


@dataclass(frozen=True)
class Exported:
    """How one export went: the paths written (JSON first), or why nothing was."""

    path: Path
    paths: tuple[Path, ...] = ()
    #: One line, None when the export landed.
    error: str | None = None


@dataclass(frozen=True)
class Quit:
    """What quitting comes to: exit with ``code``, or (``code`` None) stay open once
    after a failed export at exit, saying ``notice``."""

    code: int | None
    notice: str | None = None


@runtime_checkable
class ExportWriter(Protocol):
    """What an interactive session exports, and the name its files get by default."""

    def stem(self) -> str:
        """The default file name's start (``aitop-4242``)."""
        ...

    def write(self, path: Path, request: ExportRequest) -> list[Path]:
        """Write the export; the paths written, JSON first. Raises ``SnapshotError``."""
        ...


class SourceWriter:
    """One job's session: its snapshot, reports and screenshot (``write_snapshot``)."""

    def __init__(self, source: DataSource) -> None:
        self.source = source

    def stem(self) -> str:
        return f"aitop-{self.source.session.target_pid}"

    def write(self, path: Path, request: ExportRequest) -> list[Path]:
        return write_snapshot(path, self.source, now=request.now, diagnosis=request.diagnosis,
                              screenshot_svg=request.screenshot_svg)


class ExportFlow:
    """An interactive session's exports: on request, at exit, and after a failure.

    ``start`` writes on a daemon thread (a hung disk never holds up the
    session or quitting) and calls back with the outcome on that thread;
    ``quit`` and ``on_signal`` write at once, at exit, when asked to. A failed
    export is remembered until one succeeds: quitting then exits
    ``EXIT_UNSAVED``, so that a script does not take it for a saved run.
    """

    def __init__(self, source: DataSource | ExportWriter, *, path: Path | None = None,
                 on_exit: bool = False, clock: Callable[[], float] = time.time) -> None:
        #: What is exported: a job's session (a DataSource), or a writer of another kind.
        self.writer = source if isinstance(source, ExportWriter) else SourceWriter(source)
        #: Where exports go (``--export``, or the path given after a failure).
        self.path = Path(path) if path is not None else None
        self.on_exit = on_exit
        self.clock = clock
        #: Written exports (each: JSON, MD, HTML, SVG paths) and one-line failures.
        self.exports: list[list[Path]] = []
        self.errors: list[str] = []
        #: Why the last export failed, until one succeeds.
        self.unsaved_failure: str | None = None
        #: Lines for after the screen is restored (to stdout / to stderr).
        self.messages: list[str] = []
        self.exit_errors: list[str] = []
        self._exit_failed = False
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []

    def target(self) -> Path:
        """Where the next export goes: ``path``, else a timestamped file here."""
        if self.path is not None:
            return self.path
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(self.clock()))
        return Path.cwd() / f"{self.writer.stem()}-{stamp}.json"

    @property
    def wants_exit_export(self) -> bool:
        return self.on_exit or self.path is not None

    def write(self, request: ExportRequest, path: Path | None = None, *,
              at_exit: bool = False) -> Exported:
        """Export now, on this thread, and remember how it went."""
        path = path or self.target()
        try:
            paths = self.writer.write(path, request)
        except SnapshotError as exc:
            outcome = Exported(path, error=str(exc))
        except Exception as exc:  # an encoding bug must not kill the session
            outcome = Exported(path, error=f"{type(exc).__name__}: {exc}")
        else:
            outcome = Exported(path, tuple(paths))
        with self._lock:
            if outcome.error is not None:
                self.errors.append(outcome.error)
                self.unsaved_failure = outcome.error
            else:
                self.exports.append(list(outcome.paths))
                self.unsaved_failure = None
                if at_exit:
                    self.messages.append(f"aitop: saved {outcome.paths[0]}")
        return outcome

    def start(self, request: ExportRequest, done: Callable[[Exported], None]) -> threading.Thread:
        """Export on a daemon thread; ``done`` gets the outcome, on that thread."""
        path = self.target()
        thread = threading.Thread(target=lambda: done(self.write(request, path)),
                                  name="aitop-export", daemon=True)
        self._threads = [t for t in self._threads if t.is_alive()] + [thread]
        thread.start()
        return thread

    def retry_at(self, path: Path) -> None:
        """Export there from now on (the path given after a failure)."""
        self.path = Path(path)

    def quit(self, request: Callable[[], ExportRequest]) -> Quit:
        """Quitting: export first when asked to; a failed export at exit keeps the
        session open once (to save elsewhere), the second quit leaves unsaved."""
        if self.wants_exit_export and not self._exit_failed:
            outcome = self.write(request(), at_exit=True)
            if outcome.error is not None:
                self._exit_failed = True
                return Quit(None, f"Export at exit failed: {outcome.error}. Press s to save "
                                  "elsewhere, or q again to quit without saving.")
        if self.unsaved_failure is not None:
            self.exit_errors.append(f"aitop: quit without saving: {self.unsaved_failure}")
            return Quit(EXIT_UNSAVED)
        return Quit(0)

    def on_signal(self, name: str, request: Callable[[], ExportRequest]) -> int:
        """A signal ends the session: export first when asked to; the exit status."""
        if not self.wants_exit_export:
            return 0
        outcome = self.write(request(), at_exit=True)
        if outcome.error is None:
            return 0
        self.exit_errors.append(f"aitop: export on {name} failed: {outcome.error}")
        return 1

    def finish(self, timeout_s: float) -> None:
        """Let exports still being written land (up to ``timeout_s`` in all)."""
        deadline = time.monotonic() + timeout_s
        for thread in self._threads:
            thread.join(max(0.0, deadline - time.monotonic()))
