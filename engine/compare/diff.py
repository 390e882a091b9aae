"""Before and after: what changed between two runs of a job, and what to try next.

``compare`` puts two :class:`runs.Run` side by side:

* steps/s with 95 % intervals from the per-window rates; a change counts only
  when the intervals do not overlap and it is at least ``stats.DRIFT_PCT``
  percent, what one job drifts between two watches ("no significant change"
  otherwise);
* each phase's share of the training thread's time, a change marked when it is
  beyond sampling noise (``stats.share_tolerance``);
* findings resolved, still firing, and new;
* the attribution of a speed change to the phases that moved and the findings
  that were resolved, beside the gain aitop had estimated for them;
* what to try next, following the knowledge base's priority framework: the
  after-run's states, their priorities in order, with those the resolved
  findings already addressed marked as done.

Used by ``aitop diff`` (text or JSON) and, one line of it, by the live UI's
baseline bar. Phases, states and techniques come from the code and the
knowledge base, never from a list kept here.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aitop.engine.compare.runs import FindingBrief, Run, RunError, read_run, run_of_report
from aitop.engine.compare.stats import DRIFT_PCT, Rate, share_tolerance
from aitop.engine.errors import EXIT_USAGE, CliError
from aitop.engine.reports.schema import Report
from aitop.knowledge.base.documents import KnowledgeDocuments
from aitop.knowledge.reading.loader import KnowledgeBase
from aitop.probes.session import PHASES

SCHEMA = "aitop.diff/1"
#: Said of a finding whose condition no longer held when its run ended.
HELD_NOTE = " (its condition no longer held at the end: kept firing a while)"


@dataclass(frozen=True)
class StepsChange:
    before: Rate
    after: Rate
    #: after / before - 1, in percent; None when either is unknown.
    change_pct: float | None
    #: ``improved``, ``regressed``, ``no significant change`` or ``unknown``.
    verdict: str
    why: str


@dataclass(frozen=True)
class PhaseChange:
    phase: str
    before: float | None
    after: float | None
    #: Whether the change is beyond sampling noise.
    significant: bool

    @property
    def delta(self) -> float | None:
        if self.before is None or self.after is None:
            return None
        return self.after - self.before


@dataclass(frozen=True)
class Comparison:
    before: Run
    after: Run
    steps: StepsChange
    phases: tuple[PhaseChange, ...]
    resolved: tuple[FindingBrief, ...]
    still: tuple[FindingBrief, ...]
    new: tuple[FindingBrief, ...]
    attribution: tuple[str, ...] = ()
    next_steps: tuple[str, ...] = field(default_factory=tuple)


# ----------------------------------------------------------------- comparing


def compare_steps(before: Rate, after: Rate) -> StepsChange:
    if before.estimate is None or after.estimate is None:
        missing = " and ".join(n for n, r in (("before", before), ("after", after))
                               if r.estimate is None)
        return StepsChange(before, after, None, "unknown",
                           f"steps/s unknown {missing} (no loop counter found)")
    change = 100.0 * (after.estimate / before.estimate - 1.0) if before.estimate else None
    overlap = before.overlaps(after)
    if overlap is None:
        return StepsChange(before, after, change, "unknown",
                           "too few counter readings for an interval (run longer)")
    if overlap:
        return StepsChange(before, after, change, "no significant change",
                           "the 95 % intervals overlap")
    if change is not None and abs(change) < DRIFT_PCT:
        return StepsChange(before, after, change, "no significant change",
                           f"under {DRIFT_PCT:.0f} %, what one job drifts between two watches")
    verdict = "improved" if after.estimate > before.estimate else "regressed"
    return StepsChange(before, after, change, verdict, "the 95 % intervals do not overlap")


def phase_names(*runs: Run) -> list[str]:
    """The code's phases, then any others a run names (a newer aitop's)."""
    names = list(PHASES)
    for run in runs:
        names += [p for p in (run.phases or {}) if p not in names]
    return names


def compare_phases(before: Run, after: Run) -> tuple[PhaseChange, ...]:
    out = []
    for phase in phase_names(before, after):
        b = before.phases.get(phase, 0.0) if before.phases else None
        a = after.phases.get(phase, 0.0) if after.phases else None
        significant = False
        if a is not None and b is not None:
            tolerance = share_tolerance(b, before.phase_samples, a, after.phase_samples)
            significant = abs(a - b) > tolerance
        out.append(PhaseChange(phase, b, a, significant))
    return tuple(out)


def compare(before: Run, after: Run, *, knowledge: KnowledgeBase | None) -> Comparison:
    """Everything that changed from ``before`` to ``after``; with the run's
    ``knowledge``, what to try next by its rules and priority framework (None: no
    advice, as the live UI's one-line bar needs none)."""
    ids_before = {f.id for f in before.findings}
    ids_after = {f.id for f in after.findings}
    resolved = tuple(f for f in before.findings if f.id not in ids_after)
    still = tuple(f for f in after.findings if f.id in ids_before)
    new = tuple(f for f in after.findings if f.id not in ids_before)
    steps = compare_steps(before.steps, after.steps)
    phases = compare_phases(before, after)
    comparison = Comparison(before, after, steps, phases, resolved, still, new)
    if knowledge is None:
        return comparison
    return Comparison(
        before, after, steps, phases, resolved, still, new,
        attribution=tuple(attribute(comparison)),
        next_steps=tuple(next_steps(after, resolved, knowledge)),
    )


def step_ms(c: Comparison) -> dict[str, tuple[float, float]]:
    """Milliseconds per step in each phase, before and after (share / steps per second).

    A job that waits on data 95 % of the time still waits 95 % of the time once
    its loader is twice as fast; what moved is the time: 99 ms of data wait per
    step became 50 ms. Empty when either run lacks steps/s or phases.
    """
    b, a = c.steps.before.estimate, c.steps.after.estimate
    if not b or not a or not c.before.phases or not c.after.phases:
        return {}
    return {
        p.phase: (1000.0 * (p.before or 0.0) / b, 1000.0 * (p.after or 0.0) / a)
        for p in c.phases
    }


def attribute(c: Comparison) -> list[str]:
    """Which phases and findings a significant change of speed goes with."""
    s = c.steps
    if s.verdict not in ("improved", "regressed"):
        moved = [p for p in c.phases if p.significant]
        if moved and s.verdict == "no significant change":
            return [f"steps/s did not change significantly, though {_phase_moves(moved)}"]
        return []
    improved = s.verdict == "improved"
    lines = []
    change = f"{s.change_pct:+.0f}% steps/s" if s.change_pct is not None else "the change"
    times = step_ms(c)
    if times:
        total_b, total_a = sum(b for b, _ in times.values()), sum(a for _, a in times.values())
        # The phases whose time per step moved the same way as the whole step,
        # largest first, down to a tenth of the whole change.
        gap = abs(total_a - total_b)
        parts = sorted(
            ((p, b, a) for p, (b, a) in times.items()
             if (a < b) == improved and abs(a - b) >= 0.1 * gap),
            key=lambda item: abs(item[2] - item[1]), reverse=True,
        )
        where = ", ".join(f"{p} {b:.0f} -> {a:.0f} ms ({a - b:+.0f} ms)" for p, b, a in parts)
        lines.append(f"{change}: a step took {total_b:.0f} ms, now {total_a:.0f} ms"
                     + (f"; per step: {where}" if where else ""))
    moved = [p for p in c.phases if p.significant]
    if moved:
        lines.append(f"share of the step: {_phase_moves(moved)}")
    if improved and c.resolved:
        ratio = (s.after.estimate / s.before.estimate
                 if s.after.estimate and s.before.estimate else None)
        for f in c.resolved:
            estimate = (f"; aitop had estimated up to {f.est_speedup:.2f}x"
                        if f.est_speedup else "")
            measured = f", measured {ratio:.2f}x" if ratio and f.est_speedup else ""
            lines.append(f"resolved {f.id} [{f.severity}]: {f.title}{estimate}{measured}")
    if not improved and c.new:
        lines += [f"new {f.id} [{f.severity}]: {f.title}" for f in c.new]
    return lines


def _phase_moves(moved: Iterable[PhaseChange]) -> str:
    return ", ".join(
        f"{p.phase} {_pct(p.before)} -> {_pct(p.after)} ({(p.delta or 0.0) * 100:+.0f} pts)"
        for p in moved
    )


def _addressed(done: Mapping[str, str], technique: str, docs: KnowledgeDocuments) -> str | None:
    """The resolved finding that recommended ``technique`` (or a part of it, or a
    group it belongs to), if any: that priority has just been acted on."""
    try:
        parts = tuple(docs.technique(technique).includes)
    except KeyError:
        parts = ()
    groups = tuple(t.id for t in docs.techniques if technique in t.includes)
    return next((done[t] for t in (technique, *parts, *groups) if t in done), None)


def next_steps(after: Run, resolved: Sequence[FindingBrief],
               knowledge: KnowledgeBase) -> list[str]:
    """What to try next: the after-run's top findings, then the priority framework's
    rows that match it, Priority 1 first, skipping what was just done (a resolved
    finding's rule in ``knowledge`` names the techniques it recommended; a rule
    the file names but this knowledge base lacks simply has none)."""
    lines = []
    for f in after.findings[:2]:
        action = f" -> {f.actions[0]}" if f.actions else ""
        if f.held:
            lines.append(f"kept firing [{f.severity}]: {f.title}{HELD_NOTE}{action}")
        else:
            lines.append(f"still limiting [{f.severity}]: {f.title}{action}")
    docs = knowledge.documents
    techniques = {r.id: r.techniques for r in knowledge.rules.rules}
    done: dict[str, str] = {}  # technique -> the resolved finding that recommended it
    for f in resolved:
        for technique in techniques.get(f.id, ()):
            done.setdefault(technique, f.id)
    for state_id, name in after.states:
        try:
            row = docs.state(state_id)
        except KeyError:
            lines.append(f"priority framework, {name}: (not in this aitop's knowledge base)")
            continue
        items = []
        suggested = False
        for i, priority in enumerate(row.priorities, 1):
            by = _addressed(done, priority.technique, docs)
            if by is not None:
                items.append(f"{i}. {priority.text} (its finding {by} no longer fires)")
            elif not suggested:
                items.append(f"{i}. {priority.text} <- try next")
                suggested = True
            else:
                items.append(f"{i}. {priority.text}")
        lines.append(f"priority framework, {row.state}: " + "; ".join(items))
    if not lines:
        lines.append("no finding fires and no priority-framework state matches: "
                     "nothing to change by the knowledge base")
    return lines


# ----------------------------------------------------------------- output


def _pct(value: float | None) -> str:
    return "?" if value is None else f"{value:.0%}"


def rate_text(rate: Rate) -> str:
    if rate.estimate is None:
        return "unknown"
    if rate.low is None or rate.high is None:
        return f"{rate.estimate:.2f} (no interval: {rate.windows} window(s))"
    return f"{rate.estimate:.2f} [{rate.low:.2f}, {rate.high:.2f}]"


def steps_text(s: StepsChange) -> str:
    change = f"{s.change_pct:+.1f}%" if s.change_pct is not None else "?"
    return (f"steps/s {rate_text(s.before)} -> {rate_text(s.after)}: {change}, "
            f"{s.verdict} ({s.why})")


def _run_line(name: str, run: Run) -> str:
    pid = f"PID {run.pid}" if run.pid is not None else "PID ?"
    took = f", {run.duration_s:.0f} s" if run.duration_s else ""
    command = f": {run.command}" if run.command else ""
    return f"{name}: {run.label} ({run.kind}, {pid}{took}){command}"


def _findings_line(name: str, findings: Sequence[FindingBrief]) -> list[str]:
    if not findings:
        return [f"{name} (0)"]
    return [f"{name} ({len(findings)}):"] + [
        f"  {f.id} [{f.severity}] {f.title}{HELD_NOTE if f.held else ''}" for f in findings
    ]


def render_text(c: Comparison) -> str:
    lines = ["aitop diff", "  " + _run_line("before", c.before),
             "  " + _run_line("after ", c.after), "", steps_text(c.steps), ""]
    lines.append("Phases of the training thread (* = beyond sampling noise):")
    for p in c.phases:
        delta = "" if p.delta is None else f"{p.delta * 100:+6.1f} pts"
        mark = " *" if p.significant else ""
        lines.append(f"  {p.phase:<11} {_pct(p.before):>5} -> {_pct(p.after):>5}  {delta}{mark}")
    lines.append("")
    lines.append(f"Bottleneck: {c.before.category} -> {c.after.category}")
    lines += _findings_line("Findings resolved", c.resolved)
    lines += _findings_line("Still firing", c.still)
    lines += _findings_line("New", c.new)
    if c.attribution:
        lines += ["", "Attribution:"] + [f"  {a}" for a in c.attribution]
    if c.next_steps:
        lines += ["", "What to try next:"] + [f"  {n}" for n in c.next_steps]
    return "\n".join(lines)


def summary_line(c: Comparison) -> str:
    """One line for the live UI: speed, the phase that moved most, findings."""
    s = c.steps
    change = f"{s.change_pct:+.0f}%" if s.change_pct is not None else "?"
    verdict = {"improved": "faster", "regressed": "slower",
               "unknown": "too few readings to tell"}.get(s.verdict, s.verdict)
    parts = [f"steps/s {_short(s.before)} -> {_short(s.after)} ({change}, {verdict})"]
    moved = [p for p in c.phases if p.delta is not None]
    if moved:
        top = max(moved, key=lambda p: abs(p.delta or 0.0))
        parts.append(f"{top.phase} {_pct(top.before)} -> {_pct(top.after)}")
    parts.append(f"resolved {len(c.resolved)}, still {len(c.still)}, new {len(c.new)}")
    return "vs baseline: " + " · ".join(parts)


def _short(rate: Rate) -> str:
    if rate.estimate is None:
        return "?"
    if rate.low is None or rate.high is None:
        return f"{rate.estimate:.2f}"
    return f"{rate.estimate:.2f} [{rate.low:.2f}-{rate.high:.2f}]"


def _rate_json(rate: Rate) -> dict[str, Any]:
    return {"estimate": rate.estimate, "low": rate.low, "high": rate.high,
            "windows": rate.windows}


def _finding_json(f: FindingBrief) -> dict[str, Any]:
    return {"id": f.id, "severity": f.severity, "category": f.category, "title": f.title,
            "held": f.held}


def _run_json(run: Run) -> dict[str, Any]:
    return {"label": run.label, "kind": run.kind, "pid": run.pid, "command": run.command,
            "duration_s": run.duration_s, "bottleneck": run.category,
            "phase_samples": run.phase_samples}


def to_json(c: Comparison) -> dict[str, Any]:
    return {
        "schema": SCHEMA,
        "before": _run_json(c.before),
        "after": _run_json(c.after),
        "steps_per_s": {
            "before": _rate_json(c.steps.before), "after": _rate_json(c.steps.after),
            "change_pct": c.steps.change_pct, "verdict": c.steps.verdict, "why": c.steps.why,
        },
        "phases": {
            p.phase: {"before": p.before, "after": p.after, "delta": p.delta,
                      "significant": p.significant}
            for p in c.phases
        },
        "bottleneck": {"before": c.before.category, "after": c.after.category},
        "findings": {
            "resolved": [_finding_json(f) for f in c.resolved],
            "still_firing": [_finding_json(f) for f in c.still],
            "new": [_finding_json(f) for f in c.new],
        },
        "ms_per_step": {p: {"before": b, "after": a} for p, (b, a) in step_ms(c).items()},
        "attribution": list(c.attribution),
        "next_steps": list(c.next_steps),
    }


def baseline_of(path: Path | None) -> Run | None:
    """``--baseline FILE`` read up front, so a bad file fails before attaching."""
    if path is None:
        return None
    try:
        return read_run(path)
    except RunError as exc:
        raise CliError(f"--baseline: {exc}", EXIT_USAGE) from exc


def baseline_report(baseline: Run, report: Report, knowledge: KnowledgeBase) -> str:
    """A headless run's comparison with its baseline, as text."""
    return render_text(compare(baseline, run_of_report(report, "this run"),
                               knowledge=knowledge))
