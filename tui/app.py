"""The aitop application: ticks, keys, and the screens they draw.

The app owns three pieces of state and nothing else: the time ``now`` it draws
at (the clock when live, frozen when paused, the cursor in a replay), the
conclusion it shows, and the refresh rate. Every tick it reads what the source
has concluded (live: the value its evaluation thread last published, a
reference read that never waits, so a slow or hung evaluation never delays a
key press, a redraw or quitting; replay: the recorded one at the cursor),
builds a ``View`` from the source's session and pushes it to the active
screen. Exports are the engine's ``ExportFlow``; the app only draws them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from aitop.engine.compare.runs import Run
from aitop.engine.headless.export import EXIT_UNSAVED, Exported, ExportFlow, ExportRequest
from aitop.engine.live.job import rank_rows
from aitop.engine.live.source import NOTHING, Conclusion, DataSource, RankPeer
from aitop.knowledge.base.findings import Diagnosis
from textual.app import App
from textual.binding import Binding, BindingType
from textual.driver import Driver
from textual.message import Message
from textual.screen import Screen
from textual.timer import Timer

from .heap import freeze_start_up_objects
from .screens import REUSABLE_SCREENS, make_screen, prefetch
from .screens.base import DetailScreen, ViewScreen
from .screens.export_path import ExportPathScreen
from .screens.main import MainScreen
from .widgets.key_bar import KeyBar
from .widgets.panel import Panel
from .widgets.ranks_panel import RanksPanel
from .widgets.view import View

__all__ = ["EXIT_UNSAVED", "REFRESH_STEPS", "AitopApp", "run_app"]

#: The refresh intervals ``+``/``-`` step through, in seconds.
REFRESH_STEPS: tuple[float, ...] = (0.25, 0.5, 1.0, 2.0, 5.0, 10.0)

#: An evaluation still running after this long (or two refreshes, if longer) is
#: flagged in the header, so a stale diagnosis is never mistaken for a fresh one.
SLOW_EVALUATION_S = 2.0


class ExportLanded(Message):
    """An export written in the background finished (posted from its thread)."""

    def __init__(self, outcome: Exported) -> None:
        super().__init__()
        self.outcome = outcome


class AitopApp(App[int]):
    """Full-screen view of one training process (live) or one recording (replay)."""

    CSS_PATH = "app.tcss"
    TITLE = "aitop"
    ENABLE_COMMAND_PALETTE = False

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("left", "cursor_step(-1)", "Back", key_display="←",
                tooltip="move the time cursor back one sampling period"),
        Binding("right", "cursor_step(1)", "Fwd", key_display="→",
                tooltip="move the time cursor forward one sampling period"),
        Binding("shift+left", "cursor_step(-10)", "Back ×10", show=False),
        Binding("shift+right", "cursor_step(10)", "Fwd ×10", show=False),
        Binding("home", "cursor_home", "Start", show=False, tooltip="jump to the first sample"),
        Binding("end", "cursor_end", "End", show=False, tooltip="jump to the last sample"),
        Binding("space", "play", "Play",
                tooltip="play the recording (one period per refresh) / pause"),
        Binding("question_mark", "help", "Help", key_display="?", tooltip="this screen"),
        Binding("k", "open_detail('knowledge')", "Knowledge",
                tooltip="the documents' priority framework and key metrics, this job in them"),
        Binding("s", "export", "Export",
                tooltip="write snapshot JSON + Markdown report + SVG screenshot"),
        Binding("p", "pause", "Pause", tooltip="freeze the display; collection continues"),
        Binding("plus,equals_sign", "faster", "Faster", key_display="+",
                tooltip="refresh the display more often"),
        Binding("minus", "slower", "Slower", key_display="-",
                tooltip="refresh the display less often"),
        Binding("q", "quit_app", "Quit", tooltip="quit (exports first if asked to at exit)"),
        Binding("ctrl+c", "quit_app", "Quit", show=False, priority=True),
        Binding("ctrl+q", "quit_app", "Quit", show=False, priority=True),
        Binding("g", "open_detail('gpu')", "GPU detail", show=False,
                tooltip="charts over the session, throttle reasons, GPU processes"),
        Binding("w", "open_detail('processes')", "Processes", show=False,
                tooltip="every process and thread of the target tree, sortable"),
        Binding("f", "open_detail('stacks')", "Stacks", show=False,
                tooltip="hottest frames per phase: which line is stalling"),
        Binding("i", "open_detail('io')", "I/O detail", show=False,
                tooltip="read/write rates, filesystems, checkpoint writes"),
    ]

    #: Actions that only make sense for one kind of source.
    REPLAY_ONLY = frozenset({"cursor_step", "cursor_home", "cursor_end", "play"})
    LIVE_ONLY = frozenset({"pause"})

    def __init__(
        self,
        source: DataSource,
        *,
        refresh_s: float = 1.0,
        export_path: Path | None = None,
        export_on_exit: bool = False,
        clock: Callable[[], float] = time.time,
        baseline: Run | None = None,
    ) -> None:
        # NO_COLOR (no-color.org): Textual would still draw its theme in grey
        # shades (a Monochrome filter); with native ANSI colours it strips colour
        # altogether, and the status symbols carry the meaning alone.
        super().__init__(ansi_color=True if "NO_COLOR" in os.environ else None)
        self.source = source
        self.refresh_s = float(refresh_s)
        #: Snapshots on ``s``, at exit and on signals, and how each went.
        self.export_flow = ExportFlow(source, path=export_path, on_exit=export_on_exit)
        #: An earlier run to compare with (``--baseline``); a bar shows it when given.
        self.baseline = baseline
        self.clock = clock
        self.paused = False
        self.paused_at: float | None = None
        #: What the source had concluded when last read (frozen while paused).
        self.conclusion: Conclusion = NOTHING
        #: The rank shown instead of the lead one (a peer's PID), or None.
        self.viewed_pid: int | None = None
        self.view: View | None = None
        #: Monotonic time the first frame was drawn (for start-up measurements).
        self.first_frame_at: float | None = None
        self._timer: Timer | None = None
        self._last_error: str | None = None
        self._signals: list[int] = []
        #: Set by run_app: a signalled exit that hangs ends the process anyway.
        self.exit_watchdog = False
        #: Set once App.run has returned (the watchdog then stands down).
        self.shut_down = threading.Event()
        # Replay: a time cursor over the recording, starting at its end.
        self.replay_range: tuple[float, float] | None = None
        self.cursor: float = 0.0
        self.playing = False
        self._step = 1.0
        timeline = source.timeline()
        if timeline is not None:
            self.replay_range = (timeline.start, timeline.end)
            self._step = timeline.step_s
            self.cursor = timeline.end

    # ------------------------------------------------- what the flow records

    @property
    def diagnosis(self) -> Diagnosis | None:
        """The lead rank's diagnosis on screen."""
        return self.conclusion.diagnosis

    @property
    def export_path(self) -> Path | None:
        return self.export_flow.path

    @property
    def exports(self) -> list[list[Path]]:
        return self.export_flow.exports

    @property
    def export_errors(self) -> list[str]:
        return self.export_flow.errors

    @property
    def unsaved_failure(self) -> str | None:
        """Why the last export failed, until one succeeds (quitting then exits 1)."""
        return self.export_flow.unsaved_failure

    @property
    def exit_messages(self) -> list[str]:
        """Lines for run_app to print after the screen is restored (stdout)."""
        return self.export_flow.messages

    @property
    def exit_errors(self) -> list[str]:
        """Lines for run_app to print after the screen is restored (stderr)."""
        return self.export_flow.exit_errors

    # ----------------------------------------------------------- lifecycle

    def get_driver_class(self) -> type[Driver]:
        """Textual's terminal driver, with Escape answered when due (``tui.driver``)."""
        default = super().get_driver_class()
        from textual import constants
        from textual.drivers.linux_driver import LinuxDriver

        if default is not LinuxDriver or constants.DRIVER is not None:
            return default  # another platform, or the driver TEXTUAL_DRIVER names
        from .driver import Driver as PromptEscape

        return PromptEscape

    def get_default_screen(self) -> Screen[None]:
        return MainScreen()

    def on_mount(self) -> None:
        self._install_signal_handlers()
        self._tick()
        self.call_after_refresh(self._mark_first_frame)
        if self.baseline is not None:
            self.call_after_refresh(self._mount_baseline)

    def _mount_baseline(self) -> None:
        """The baseline bar, above the main screen's footer (once it is composed)."""
        from .widgets.baseline_bar import BaselineBar  # the comparison: only with --baseline

        assert self.baseline is not None
        screen = self.screen
        footers = screen.query(KeyBar)
        screen.mount(BaselineBar(self.baseline, id="baseline"),
                     before=footers.first() if footers else None)

    def _mark_first_frame(self) -> None:
        if self.first_frame_at is None:
            self.first_frame_at = time.monotonic()
            # The detail screens' modules, off the first frame's path and before
            # a key asks for one (``screens.prefetch``); then what start-up built
            # is set aside from full garbage collections (``tui.heap``).
            threading.Thread(target=_settle, name="aitop-screens", daemon=True).start()

    def on_unmount(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in self._signals:
            with contextlib.suppress(Exception):
                loop.remove_signal_handler(sig)

    def _install_signal_handlers(self) -> None:
        """SIGTERM/SIGHUP/SIGINT: export if asked to, then leave cleanly."""
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            try:
                loop.add_signal_handler(sig, self._on_signal, sig)
            except (NotImplementedError, RuntimeError, ValueError):
                continue  # not the main thread, or no such signal here
            self._signals.append(sig)

    def _on_signal(self, sig: int) -> None:
        code = self.export_flow.on_signal(signal.Signals(sig).name, self._exit_export_request)
        if sig in (signal.SIGHUP, signal.SIGTERM):
            # The terminal may be gone (SIGHUP: window closed, ssh dropped). Do not
            # trust the UI to shut down: Textual's writer thread can block forever
            # on a vanished terminal, which once left an aitop attached to a job
            # long after its window was closed. The watchdog starts first, so it
            # also bounds stopping the probes (joining their threads, ending
            # py-spy), which takes seconds on a loaded box.
            if self.exit_watchdog:
                threading.Thread(
                    target=_exit_unless_done,
                    args=(self.shut_down, code),
                    name="aitop-exit-watchdog",
                    daemon=True,
                ).start()
            self.stop_sampling()
        self.exit(code)

    def stop_sampling(self) -> None:
        """Stop sampling the job now, ahead of the UI's own shutdown."""
        self.source.close()

    # ---------------------------------------------------------------- time

    @property
    def live(self) -> bool:
        return bool(self.source.live)

    def current_now(self) -> float:
        """The time the screen describes."""
        if not self.live:
            return self.cursor
        if self.paused and self.paused_at is not None:
            return self.paused_at
        return self.clock()

    # ---------------------------------------------------------------- ticks

    def _tick(self) -> None:
        """One refresh: advance a playing cursor, read the conclusion, redraw, re-arm.

        The next tick is armed only after this one ran, so ticks never pile up.
        """
        self._timer = None
        if self.playing:
            self._move_cursor(self.cursor + self._step, keep_playing=True)
        self.read_conclusion()
        self.redraw()
        self._timer = self.set_timer(self.refresh_s, self._tick)

    def _rearm(self) -> None:
        if self._timer is not None:
            self._timer.stop()
        self._timer = self.set_timer(self.refresh_s, self._tick)

    def read_conclusion(self) -> None:
        """Take what the source concluded: live, its published value (kept as it was
        while paused); in a replay, the recorded one at the cursor."""
        if not self.live:
            self.conclusion = self.source.at(self.cursor)
            return
        published = self.source.latest()
        self._report_error(published.error)
        if not self.paused:
            self.conclusion = published

    def _report_error(self, error: str | None) -> None:
        """A failed evaluation, said once (the source keeps evaluating, backing off)."""
        if error is not None and error != self._last_error:
            self.notify(f"rules failed: {error}".splitlines()[0], severity="error", timeout=8)
        self._last_error = error

    def evaluating_for(self) -> float | None:
        """Seconds the source's evaluation in progress has taken, once it counts as slow."""
        since = self.source.latest().evaluating_since if self.live else None
        if since is None:
            return None
        elapsed = time.monotonic() - since
        return elapsed if elapsed >= max(SLOW_EVALUATION_S, 2 * self.refresh_s) else None

    def viewed_peer(self) -> RankPeer | None:
        """The other rank shown now, when one is (and it is watched)."""
        if self.viewed_pid is None:
            return None
        return next((p for p in self.source.peers
                     if p.pid == self.viewed_pid and p.source is not None), None)

    def make_view(self) -> View:
        now = self.current_now()
        peer = self.viewed_peer()
        shown = peer.source if peer is not None and peer.source is not None else self.source
        history = tuple(shown.history())
        diagnosis = self.diagnosis
        if peer is not None:
            diagnosis = (shown.latest() if self.live else shown.at(now)).diagnosis
        return View(
            session=shown.session,
            diagnosis=diagnosis,
            now=now,
            live=self.live,
            knowledge=self.source.knowledge,
            paused=self.paused,
            refresh_s=self.refresh_s,
            history=history,
            evaluating_for=self.evaluating_for(),
            replay_range=self.replay_range,
            playing=self.playing,
            ranks=tuple(rank_rows(self.source, self.conclusion, now)),
            viewing=peer.label if peer is not None else None,
        )

    def action_view_rank(self, pid: int) -> None:
        """Show one rank's own view (0 or the lead rank's PID: back to the lead)."""
        lead = pid in (0, self.source.session.target_pid)
        self.viewed_pid = None if lead else pid
        peer = self.viewed_peer()
        if not lead and peer is None:
            self.viewed_pid = None
            self.notify("That rank is not watched (see its status in the Ranks panel).",
                        timeout=3)
        elif peer is not None:
            self.notify(f"Showing {peer.label} (PID {peer.pid}); Escape returns to the lead rank.",
                        timeout=3)
        self.refresh_bindings()
        self.redraw()

    def on_ranks_panel_view_rank(self, message: RanksPanel.ViewRank) -> None:
        self.action_view_rank(message.pid)

    def redraw(self) -> None:
        """Push a fresh view to the active screen."""
        if not self.is_running or not self.screen_stack:
            return  # shutting down: there is no screen to draw on
        self.view = self.make_view()
        screen = self.screen
        # A screen pushed but not yet mounted has no widgets to update; it draws
        # the app's latest view itself on mount (ViewScreen.on_mount).
        if isinstance(screen, ViewScreen) and screen.is_mounted:
            screen.update_view(self.view)

    # -------------------------------------------------------------- actions

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action == "view_rank" and parameters == (0,):
            return self.viewed_pid is not None  # "back to the lead rank"
        if action in self.REPLAY_ONLY:
            return not self.live
        if action in self.LIVE_ONLY:
            return self.live
        return True

    def action_pause(self) -> None:
        """Freeze the display; probes keep collecting and rules keep evaluating."""
        self.paused = not self.paused
        self.paused_at = self.clock() if self.paused else None
        self.read_conclusion()
        self.notify("Display paused; collection continues. p resumes." if self.paused
                    else "Display resumed.", timeout=2)
        self.refresh_bindings()
        self.redraw()

    def _set_refresh(self, value: float) -> None:
        self.refresh_s = value
        self._rearm()
        self.redraw()

    def action_faster(self) -> None:
        faster = [s for s in REFRESH_STEPS if s < self.refresh_s - 1e-9]
        self._set_refresh(faster[-1] if faster else REFRESH_STEPS[0])

    def action_slower(self) -> None:
        slower = [s for s in REFRESH_STEPS if s > self.refresh_s + 1e-9]
        self._set_refresh(slower[0] if slower else REFRESH_STEPS[-1])

    def action_help(self) -> None:
        self.open_detail("help")

    def on_panel_open_detail(self, message: Panel.OpenDetail) -> None:
        self.open_detail(message.detail, message.finding_id)

    def action_open_detail(self, name: str) -> None:
        self.open_detail(name)

    def open_detail(self, name: str, finding_id: str | None = None) -> None:
        """Open a detail screen; from another detail screen, replace it.

        Screens other than a finding's are built once and kept (installed), so
        opening one again is instant and keeps its scroll and sort order.
        """
        target: Screen[None] | str
        if name in REUSABLE_SCREENS:
            if not self.is_screen_installed(name):
                built = make_screen(name, self)
                if built is None:
                    return
                self.install_screen(built, name)
            target = name
            if self.screen is self.get_screen(name):
                return
        else:
            screen = make_screen(name, self, finding_id)
            if screen is None:
                return
            target = screen
        if isinstance(self.screen, DetailScreen):
            self.switch_screen(target)
        else:
            self.push_screen(target)

    # -------------------------------------------------------------- replay

    def _move_cursor(self, t: float, *, keep_playing: bool = False) -> None:
        if self.replay_range is None:
            return
        lo, hi = self.replay_range
        self.cursor = min(hi, max(lo, t))
        if not keep_playing or self.cursor >= hi:
            self.playing = self.playing and keep_playing and self.cursor < hi
        self.read_conclusion()
        self.redraw()

    def action_cursor_step(self, steps: int) -> None:
        self._move_cursor(self.cursor + steps * self._step)

    def action_cursor_home(self) -> None:
        if self.replay_range is not None:
            self._move_cursor(self.replay_range[0])

    def action_cursor_end(self) -> None:
        if self.replay_range is not None:
            self._move_cursor(self.replay_range[1])

    def action_play(self) -> None:
        """Play the recording one sampling period per refresh; again to pause."""
        if self.replay_range is None:
            return
        if not self.playing and self.cursor >= self.replay_range[1]:
            self.cursor = self.replay_range[0]
        self.playing = not self.playing
        self._rearm()
        self.redraw()

    # -------------------------------------------------------------- export

    def export_target(self) -> Path:
        """Where ``s`` writes: ``export_path``, else a timestamped file here."""
        return self.export_flow.target()

    def _export_request(self, svg: str | None) -> ExportRequest:
        view = self.view or self.make_view()
        return ExportRequest(view.now, view.diagnosis, svg)

    def _exit_export_request(self) -> ExportRequest:
        """What an export at exit writes (without the screenshot if it cannot be had)."""
        try:
            svg = self.export_screenshot()
        except Exception:
            svg = None
        return self._export_request(svg)

    def action_export(self) -> None:
        """Write snapshot, report and screenshot in the background; notify when done."""
        request = self._export_request(self.export_screenshot())

        def landed(outcome: Exported) -> None:
            self.post_message(ExportLanded(outcome))

        self.export_flow.start(request, landed)

    def on_export_landed(self, message: ExportLanded) -> None:
        outcome = message.outcome
        if outcome.error is None:
            extra = ", ".join(p.suffix for p in outcome.paths[1:])
            self.notify(f"Saved {outcome.paths[0]} (+ {extra})", timeout=6)
            return
        # Keep the session and ask for another path (Escape keeps the old one).
        self.push_screen(ExportPathScreen(outcome.error, self.export_target()), self._export_to)

    def _export_to(self, path: Path | None) -> None:
        if path is None:
            self.notify("Not saved. Nothing is lost; press s to try again.",
                        severity="warning", timeout=8)
            return
        self.export_flow.retry_at(path)
        self.action_export()

    def action_quit_app(self) -> None:
        """Quit; export first when asked to. A failed export keeps the app open once.

        Quitting while the last export failed (and none succeeded since) exits
        with status 1 and says so: a script must not take it for a saved run.
        """
        step = self.export_flow.quit(self._exit_export_request)
        if step.code is None:
            self.notify(step.notice or "", severity="error", timeout=15)
        elif step.code:
            self.exit(step.code, return_code=step.code)
        else:
            self.exit(0)


#: How long a signalled shutdown may take before the process exits regardless.
SHUTDOWN_LIMIT_S = 5.0


def _settle() -> None:
    """After the first frame: what a key will need, then the heap set aside."""
    prefetch()
    freeze_start_up_objects()


def _exit_unless_done(done: threading.Event, code: int) -> None:
    """Exit the process if the UI has not finished shutting down in time."""
    if not done.wait(SHUTDOWN_LIMIT_S):
        os._exit(code)


def run_app(
    source: DataSource,
    *,
    refresh_s: float = 1.0,
    export_path: Path | None = None,
    export_on_exit: bool = False,
    baseline: Run | None = None,
) -> int:
    """Run the UI on a source until the user quits; returns the exit code.

    The source is closed on the way out. Exports written at exit, and failures
    to write them, are printed once the terminal is restored.
    """
    app = AitopApp(source, refresh_s=refresh_s, export_path=export_path,
                   export_on_exit=export_on_exit, baseline=baseline)
    # Only the process that owns the terminal may be cut short by the watchdog
    # (never a test runner hosting the app).
    app.exit_watchdog = True
    try:
        result = app.run()
    finally:
        app.shut_down.set()
        app.export_flow.finish(SHUTDOWN_LIMIT_S)  # an export on its way lands first
        source.close()
    for line in app.exit_messages:
        print(line)
    for line in app.exit_errors:
        print(line, file=sys.stderr)
    if result is not None:
        return int(result)
    return int(app.return_code or 0)
