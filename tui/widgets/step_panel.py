"""Data loader & step panel: where the training thread's time goes, and how fast.

The stacked bar is the phase breakdown over the window from the stack samples
(``session.phase_fractions``); data wait is judged against the documents'
target of under 5 % of step time. Steps/s comes from the readings the session
chooses (the loop counter the step probe reads, or the step the job prints),
or from the engine's diagnoses when there are none.
"""

from __future__ import annotations

from aitop.engine.live.series import latest
from aitop.knowledge.judging import verdicts
from aitop.knowledge.judging.verdicts import Targets
from aitop.probes.session import PHASES
from aitop.probes.steps import step_rates
from rich.text import Text

from . import fmt
from .panel import Line, Panel, label, spark_line
from .view import View

HISTORY_S = 300.0


#: Phases most loops never have (evaluation; communication, for one rank of several;
#: torch.compile at work): listed only when they took some time.
SHOWN_WHEN_SEEN = frozenset({"eval", "comm", "compile"})


def ordered_phases(fractions: dict[str, float]) -> list[str]:
    """Known phases in pipeline order, then any the classifier added."""
    known = [p for p in PHASES if p in fractions
             and (p not in SHOWN_WHEN_SEEN or fractions[p] > 0)]
    return known + [p for p in fractions if p not in PHASES]


def phase_bar(fractions: dict[str, float], width: int) -> Text:
    """A stacked bar, one colour and letter per phase, cells by largest remainder."""
    phases = ordered_phases(fractions)
    total = sum(max(0.0, fractions[p]) for p in phases) or 1.0
    exact = [max(0.0, fractions[p]) / total * width for p in phases]
    cells = [int(x) for x in exact]
    for i in sorted(range(len(phases)), key=lambda i: -(exact[i] - cells[i]))[
        : width - sum(cells)
    ]:
        cells[i] += 1
    text = Text()
    for phase, n in zip(phases, cells, strict=True):
        if n <= 0:
            continue
        letter = fmt.PHASE_LETTER.get(phase, phase[:1].upper())
        name = fmt.PHASE_LABEL.get(phase, phase)
        inner = name if n >= len(name) + 2 else letter
        body = inner.center(n) if n >= len(inner) else letter * n
        text.append(body[:n], style=fmt.PHASE_STYLE.get(phase, "reverse"))
    return text


def phase_legend(fractions: dict[str, float], targets: Targets) -> list[Text]:
    """``D data wait 42% ✗`` entries, the data wait one judged."""
    out = []
    for phase in ordered_phases(fractions):
        frac = fractions[phase]
        letter = fmt.PHASE_LETTER.get(phase, "?")
        entry = Text()
        entry.append(f" {letter} ", style=fmt.PHASE_STYLE.get(phase, "reverse"))
        entry.append(f" {fmt.PHASE_LABEL.get(phase, phase)} ")
        if phase == "data_wait":
            status = verdicts.data_wait(frac, targets)
            entry.append(f"{frac * 100:.0f}% {fmt.STATUS_SYMBOL[status]}",
                         style=fmt.STATUS_STYLE[status])
        else:
            entry.append(f"{frac * 100:.0f}%")
        out.append(entry)
    return out


def wrap_entries(entries: list[Text], width: int, gap: str = "  ") -> list[Text]:
    """Lay legend entries out in as few lines as fit ``width``."""
    lines: list[Text] = []
    cur = Text()
    for e in entries:
        need = e.cell_len + (len(gap) if cur.cell_len else 0)
        if cur.cell_len and cur.cell_len + need > width:
            lines.append(cur)
            cur = Text()
        if cur.cell_len:
            cur.append(gap)
        cur.append_text(e)
    if cur.cell_len:
        lines.append(cur)
    return lines


class StepPanel(Panel):
    """Phase breakdown bar, steps/s with history, workers and pin-memory."""

    TITLE = "Data loader & step"
    DETAIL = "stacks"

    def subtitle(self, view: View) -> str:
        return f"window {fmt.duration(view.window_s)}"

    def lines(self, view: View, width: int) -> list[Line]:
        out: list[Line] = []
        fractions = view.session.phase_fractions(view.now, view.window_s)
        d = view.diagnosis
        if d is not None and d.phases and (fractions is None or d.metrics.get("comm_hidden")):
            # A CPU rank's wait inside backward is the diagnosis's ``comm`` phase.
            fractions = d.phases
        if fractions:
            out.append(Line(phase_bar(fractions, width), 0))
            for i, line in enumerate(wrap_entries(phase_legend(fractions, view.targets), width)):
                out.append(Line(line, 1 + 2 * i))
        else:
            status = view.session.probe_text("stacks", "waiting for py-spy…")
            out.append(Line(Text(f"phases: no stack samples yet ({status})", style="dim"), 0))

        rates = step_rates(view.session.step_readings(view.now - HISTORY_S, view.now).readings)
        current = view.diagnosis.steps_per_s if view.diagnosis is not None else None
        if current is None and rates:
            current = rates[-1][1]
        series = [r for _, r in rates]
        if not series:
            series = [d.steps_per_s for d in view.history
                      if d.steps_per_s is not None and d.t <= view.now]
        steps = label("steps/s", 9) + Text(f"{fmt.num(current, '.2f'):<10}")
        out.append(Line(spark_line(steps, series, width, lo=0), 1))

        tree = latest(view.session.processes, view.now)
        env = view.session.environment
        workers = len(tree.workers) if tree is not None and tree.processes else None
        if workers is None and env is not None:
            workers = env.num_workers
        pin = tree.pin_memory_thread if tree is not None else None
        if pin is None and env is not None:
            pin = env.pin_memory_thread
        info = label("loader", 9)
        info.append(f"{workers if workers is not None else '?'} workers",
                    style=fmt.STATUS_STYLE["near"] if workers == 0 else "")
        info.append(" · pin-memory thread ")
        if pin is None:
            info.append("unknown", style="dim")
        else:
            info.append("yes" if pin else "no",
                        style=fmt.STATUS_STYLE["within" if pin else "near"])
        out.append(Line(info, 2))
        window = latest(view.session.stacks, view.now)
        if window is not None and (window.thread_name or window.loop_frame):
            loop = getattr(window, "loop_frame", None)
            text = label("thread", 9)
            text.append(f"{window.thread_name or window.thread_id or '?'}", style="dim")
            if loop:
                text.append(f" · loop {loop}", style="dim")
            out.append(Line(text, 6))
        return out
