"""The two-line header and the target-exited banner.

Line one says what is watched (PID, redacted command line, uptime) and how
(live / paused / replay cursor, refresh rate); line two says what each probe is
doing, and why one is unavailable, so a blank panel is never a mystery.
"""

from __future__ import annotations

import shlex

from aitop.engine.live.series import latest
from aitop.probes.status import ProbeState
from rich.text import Text
from textual.widget import Widget

from . import fmt
from .view import View


def command(view: View) -> str:
    env = view.session.environment
    if env is not None and env.cmdline:
        return shlex.join(env.cmdline)
    tree = latest(view.session.processes, view.now)
    main = tree.main if tree is not None else None
    return shlex.join(main.cmdline) if main is not None and main.cmdline else ""


def rank_label(view: View) -> str:
    """"rank 0 of 2 " when the watched process is one rank of a multi-rank job."""
    job = view.session.job
    if job is None or not job.multi_rank:
        return ""
    me = next((r for r in job.ranks if r.pid == view.session.target_pid), None)
    number = "?" if me is None or me.rank is None else str(me.rank)
    return f"rank {number} of {len(job.ranks)} "


class StatusHeader(Widget):
    """What is being watched, and how."""

    DEFAULT_CSS = """
    StatusHeader { height: 2; background: $panel; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.view: View | None = None

    def update_view(self, view: View) -> None:
        self.view = view
        self.refresh()

    def render(self) -> Text:
        view = self.view
        width = max(1, self.content_size.width)
        if view is None:
            return Text(" aitop", style="bold")
        right = self._mode(view)
        left = Text(" aitop ", style="bold reverse")
        left.append(f" PID {view.session.target_pid} ", style="bold")
        left.append(rank_label(view))
        left.append(command(view))
        room = width - right.cell_len - 1
        left.truncate(max(0, room), overflow="ellipsis")
        left.pad_right(max(0, room - left.cell_len))
        first = left + Text(" ") + right
        first.truncate(width, overflow="ellipsis")
        out = Text("\n", no_wrap=True, overflow="ellipsis").join(
            [first, self._probes(view, width)])
        out.no_wrap = True
        return out

    def _mode(self, view: View) -> Text:
        env = view.session.environment
        out = Text()
        started = env.start_time if env is not None and env.start_time else view.session.started_at
        end = view.session.target_exited_at if view.target_exited else view.now
        # An empty recording has no time to be "up" at (its cursor is 0, the epoch).
        empty_replay = not view.live and view.replay_range is None
        if started is not None and end is not None and not empty_replay:
            out.append(f"up {fmt.duration(end - started)}  ", style="dim")
        if not view.live:
            out.append(self._replay(view))
        elif view.paused:
            out.append(" PAUSED ", style="bold reverse")
            out.append(f" at {fmt.clock(view.now)}", style="bold")
        else:
            out.append(" LIVE ", style="bold reverse")
            out.append(f" {fmt.clock(view.now)}")
        out.append(f"  refresh {view.refresh_s:g}s ", style="dim")
        return out

    @staticmethod
    def _replay(view: View) -> Text:
        """The replay cursor; decided by ``view.live``, not by the range, because a
        recording with no samples has no range and must still not read as LIVE."""
        out = Text(" REPLAY ", style="bold reverse")
        if view.replay_range is None:
            out.append(" empty recording: nothing was sampled ", style="bold")
            return out
        lo, hi = view.replay_range
        out.append(f" {fmt.clock(view.now)} ", style="bold")
        out.append(f"+{fmt.duration(view.now - lo)}/{fmt.duration(hi - lo)} ", style="dim")
        out.append("▶ playing" if view.playing else "⏸", style="bold")
        return out

    def _probes(self, view: View, width: int) -> Text:
        text = Text(" ")
        # Probe threads update this dict while we draw: take a copy in one C call.
        status = dict(view.session.probe_status)
        if view.evaluating_for is not None:
            text.append(f"rules: evaluating for {fmt.duration(view.evaluating_for)}…",
                        style=fmt.STATUS_STYLE["near"])
            text.append("  ")
        if not status:
            text.append("probes: starting…" if view.live else "probes: none recorded",
                        style="dim")
        for i, (name, msg) in enumerate(status.items()):
            if i:
                text.append(" · ", style="dim")
            state = PROBE_VERDICT[msg.state]
            text.append(f"{name} ", style="bold")
            text.append(fmt.STATUS_SYMBOL[state] + " ", style=fmt.STATUS_STYLE[state])
            text.append(msg.text, style="dim" if state == "within" else fmt.STATUS_STYLE[state])
        text.truncate(width, overflow="ellipsis")
        return text


#: How a probe's state is drawn: sampling is fine, starting or a value it cannot
#: read is a warning, failing or unable to run is an alarm.
PROBE_VERDICT: dict[ProbeState, str] = {
    "ok": "within", "starting": "near", "partial": "near",
    "error": "outside", "unavailable": "outside", "off": "unknown",
}


class ExitBanner(Widget):
    """Says that (and when, and how) the target exited; hidden until it has."""

    DEFAULT_CSS = """
    ExitBanner { height: 1; display: none; background: $error; color: $text; }
    ExitBanner.-shown { display: block; }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self.view: View | None = None

    def update_view(self, view: View) -> None:
        self.view = view
        self.set_class(view.target_exited, "-shown")
        self.refresh()

    def render(self) -> Text:
        view = self.view
        if view is None or not view.target_exited:
            return Text()
        at = view.session.target_exited_at
        status = view.session.target_exit_status
        text = Text(" ✗ target exited ", style="bold")
        text.append(f"at {fmt.clock(at)} with status "
                    f"{status if status is not None else 'unknown'}")
        if at is not None and view.now > at:
            text.append(f" ({fmt.duration(view.now - at)} ago)")
        text.append(". The data stays; s exports it.")
        return text
