"""The Markdown report written beside a snapshot, to paste into an issue or PR.

Plain text a reviewer can read without aitop: what ran, over which window, what
limits it, which optimisations the documents rank first for that state, each
finding with its evidence, estimated gain and source, the step phases and the
key metrics. It is rendered from the typed report (engine/reports/schema.py),
the one the JSON and HTML reports are, so the three cannot disagree; the
session adds only what the report does not hold (the documents' key-metrics
table, judged against the run's knowledge base, and the other measurements read
from the samples, as the HTML page draws
its charts from them), and :class:`Wording` the words the report names without
quoting (a finding's passage, an evidence metric's label). No Textual.
"""

from __future__ import annotations

import shlex
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from aitop.engine.live.series import latest, recent, tree_cpu, values
from aitop.engine.reports import humanize as fmt
from aitop.engine.reports.gain import gain_text
from aitop.engine.reports.key_metrics import key_metric_rows, read_key_metric
from aitop.engine.reports.schema import Evidence, Finding, Report, StepsSource
from aitop.knowledge.base.catalogue import CATALOGUE
from aitop.knowledge.base.findings import COLLECTING, UNKNOWN, Diagnosis
from aitop.knowledge.evaluator import DEFAULT_WINDOW_S
from aitop.knowledge.reading.loader import KnowledgeBase
from aitop.probes.session import Session

#: What a finding's ``source`` reads as in the typed report: ``document, § section``.
SECTION_MARK = ", \u00a7 "


@dataclass(frozen=True)
class Wording:
    """The words the typed report names but does not hold, as the diagnoses said them."""

    #: The passage each finding cites, by finding id.
    quotes: Mapping[str, str] = field(default_factory=dict)
    #: Each evidence metric's label, by (finding id, metric).
    labels: Mapping[tuple[str, str], str] = field(default_factory=dict)

    def label(self, finding: str, metric: str) -> str:
        """The label the finding gave the metric, else the catalogue's description."""
        said = self.labels.get((finding, metric))
        if said is not None:
            return said
        spec = CATALOGUE.get(metric)
        return spec.description if spec else metric


def wording_of(report: Report, diagnoses: Iterable[Diagnosis]) -> Wording:
    """The report's findings' words, from the first of ``diagnoses`` holding each
    (give the newest first: the search stops once every finding is found)."""
    wanted = {f.id for f in report.findings}
    quotes: dict[str, str] = {}
    labels: dict[tuple[str, str], str] = {}
    for diagnosis in diagnoses:
        if len(quotes) == len(wanted):
            break
        for finding in diagnosis.findings:
            if finding.id in wanted and finding.id not in quotes:
                quotes[finding.id] = finding.source.quote
                labels.update(((finding.id, e.metric), e.label) for e in finding.evidence)
    return Wording(quotes, labels)


def cell(value: object) -> str:
    """A table cell: pipes escaped, newlines flattened."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(headers: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """A GitHub-flavoured Markdown table."""
    lines = ["| " + " | ".join(headers) + " |", "|" + "|".join("---" for _ in headers) + "|"]
    lines += ["| " + " | ".join(cell(v) for v in row) + " |" for row in rows]
    return lines


def _status(status: str) -> str:
    return f"{fmt.STATUS_SYMBOL.get(status, '?')} {status}"


def _time(report: Report, session: Session) -> float:
    """The time the report describes: its attach time plus its duration."""
    if report.attached_at is None or report.duration_s is None:
        return session.latest_time() or 0.0
    return report.attached_at + report.duration_s


def _after(report: Report, seconds: float | None) -> float | None:
    """The epoch time ``seconds`` after the report's attach (None: unknown)."""
    if seconds is None or report.attached_at is None:
        return None
    return report.attached_at + seconds


def render_markdown(
    report: Report,
    session: Session,
    knowledge: KnowledgeBase,
    wording: Wording | None = None,
    *,
    snapshot_name: str | None = None,
) -> str:
    """The whole report as Markdown text; ``session`` is the one it was built from, its
    key metrics judged against ``knowledge``'s targets (the run's, with its ``--rules``)."""
    wording = wording or Wording()
    now = _time(report, session)
    window = report.window_s or DEFAULT_WINDOW_S
    out: list[str] = []
    out += _target(report, now, window)
    out += _bottleneck(report)
    out += _states(report)
    out += _findings(report, wording)
    out += _phases(report)
    out += _metrics(report, session, now, window, knowledge)
    out += _probes(report)
    version = "(development)" if report.aitop_version == "unknown" else report.aitop_version
    tail = f"Generated by aitop {version}"
    if snapshot_name:
        tail += f" from snapshot `{snapshot_name}` (replay it with `aitop replay {snapshot_name}`)"
    out += ["", f"_{tail}._", ""]
    return "\n".join(out)


def _target(report: Report, now: float, window: float) -> list[str]:
    target, env = report.target, report.environment
    out = [f"# aitop report: PID {target.pid}", ""]
    command = shlex.join(target.cmdline) if target.cmdline else "?"
    out.append(f"- **Command:** `{command}`")
    if env is not None:
        versions = [
            f"Python {env.python}" if env.python else None,
            f"PyTorch {env.torch}" if env.torch else None,
            f"host {env.hostname}" if env.hostname else None,
        ]
        known = [v for v in versions if v]
        if known:
            out.append(f"- **Environment:** {', '.join(known)}")
    if report.attached_at is not None:
        out.append(
            f"- **Recorded:** {fmt.stamp(report.attached_at)} to {fmt.stamp(now)} "
            f"({fmt.duration(now - report.attached_at)})"
        )
    # The window the verdict was judged over ends when it was made.
    end = report.evaluated_at if report.evaluated_at is not None else now
    out.append(
        f"- **Window:** the {fmt.duration(window)} ending {fmt.stamp(end)} "
        f"({fmt.stamp(end - window)} to {fmt.clock(end)})"
    )
    exited = _after(report, target.exited_after_s)
    # A replay's report at a cursor knows of an exit still to come: not said here.
    if not target.alive and exited is not None and exited <= now:
        status = target.exit_status
        out.append(
            f"- **Target exited** at {fmt.stamp(exited)}"
            f" with status {status if status is not None else 'unknown'}"
        )
    return [*out, ""]


def _bottleneck(report: Report) -> list[str]:
    if report.evaluated_at is None:
        return ["## Bottleneck", "", "No diagnosis yet (not enough samples).", ""]
    b = report.bottleneck
    out = [
        "## Bottleneck",
        "",
        f"**{b.category}** on {report.compute_device}: {b.summary}",
        "",
    ]
    if report.waiting_for and b.category not in (COLLECTING, UNKNOWN):
        out += [f"Rules still missing a metric: {', '.join(report.waiting_for)}", ""]
    return out


def _states(report: Report) -> list[str]:
    if not report.states:
        return []
    out = ["## Current state (optimization priority framework)", ""]
    rows = []
    for state in report.states:
        prios = list(state.priorities) + ["—"] * (3 - len(state.priorities))
        rows.append([state.name or state.id, *prios[:3]])
    out += table(["Current state", "Priority 1", "Priority 2", "Priority 3"], rows)
    return [*out, ""]


def _findings(report: Report, wording: Wording) -> list[str]:
    if report.evaluated_at is None:
        return []
    if not report.findings and report.bottleneck.category in (COLLECTING, UNKNOWN):
        return ["## Findings", "", "Nothing judged yet (see the bottleneck above).", ""]
    if not report.findings:
        return ["## Findings", "", "No rule is firing.", ""]
    out = ["## Findings (the culprit first, then by estimated gain)", ""]
    for i, f in enumerate(report.findings, 1):
        out += _finding(i, f, report, wording)
    return out


def _finding(i: int, f: Finding, report: Report, wording: Wording) -> list[str]:
    fired = fmt.stamp(_after(report, f.fired_after_s))
    held = ("" if f.last_held_after_s is None else
            f" · **Condition last held:** {fmt.stamp(_after(report, f.last_held_after_s))} "
            "(kept firing since; the numbers are that moment's)")
    out = [
        f"### {i}. {f.title}",
        "",
        f"**Severity:** {f.severity} · **Category:** {f.category} · "
        f"**Estimated gain:** {gain_text(f.gain)} · **Fired at:** {fired}{held}",
        "",
        f.why,
        "",
    ]
    if f.explains:
        out += [f"*Explains:* {'; '.join(f.explains)}", ""]
    if f.evidence:
        out += table(["Evidence", "Value", "Target", "Status"],
                     _evidence_rows(f.id, f.evidence, wording))
        out.append("")
    if f.actions:
        out += ["**What to change:**", ""]
        out += [f"- {a}" for a in f.actions]
        out.append("")
    if f.snippet:
        out += ["```python", f.snippet.rstrip("\n"), "```", ""]
    if f.gain_explanation:
        out += [f"**How the gain was estimated ({f.gain_method}):** {f.gain_explanation}", ""]
    document, _mark, section = f.source.partition(SECTION_MARK)
    out.append(f"**Source:** {document}, “{section}”" if section else f"**Source:** {document}")
    quote = wording.quotes.get(f.id, "")
    if quote:
        out += ["", *[f"> {line}" for line in quote.strip().splitlines()]]
    out += ["", f"Rule: `{f.rule}`", ""]
    return out


def _evidence_rows(finding: str, evidence: Mapping[str, Evidence],
                   wording: Wording) -> list[list[str]]:
    return [[wording.label(finding, metric), e.display, e.target or "—", _status(e.status)]
            for metric, e in evidence.items()]


def _phases(report: Report) -> list[str]:
    out = ["## Step phases", ""]
    if not report.phases:
        return [*out, "No stack samples in the window (py-spy unavailable or no steps).", ""]
    rows = [[fmt.PHASE_LABEL.get(p, p), fmt.pct(share * 100, digits=1)]
            for p, share in report.phases.items()]
    out += table(["Phase", "Share of the training thread's time"], rows)
    if report.steps_per_s is not None:
        rate = f"{report.steps_per_s:.2f}{_steps_from(report.steps_source)}"
        out += ["", f"Steps per second: {rate}"]
    elif report.steps_source is not None and report.steps_source.tried:
        out += ["", "Steps per second: unknown; sources tried:", ""]
        out += [f"- {cell(why)}" for why in report.steps_source.tried]
    return [*out, ""]


def _steps_from(source: StepsSource | None) -> str:
    """Where the rate was read, and the counter set aside for it if one was."""
    if source is None or source.counter is None:
        return ""
    where = f" in `{source.frame}`" if source.frame else ""
    text = f" (from `{source.counter}`{where}"
    return text + (f"; {source.rejected})" if source.rejected else ")")


def _metrics(report: Report, session: Session, now: float, window: float,
             knowledge: KnowledgeBase) -> list[str]:
    judged = report if report.evaluated_at is not None else None
    key_rows = []
    for metric_id, name, target in key_metric_rows(knowledge):
        reading = read_key_metric(metric_id, session, judged, now, window,
                                  knowledge.facts.targets)
        key_rows.append([name, target, reading.display, _status(reading.status)])
    out = ["## Key metrics (the documents' table, this job now)", ""]
    out += table(["Metric", "Target range", "This job", "Status"], key_rows)
    rows: list[list[str]] = []
    last_gpu = latest(session.gpu, now)
    if last_gpu is not None and not last_gpu.available:
        rows.append(["GPU", f"unavailable: {last_gpu.reason or 'unknown reason'}"])
    hosts = recent(session.host, now, window)
    cpu = values(hosts, lambda h: h.cpu_percent)
    iowait = values(hosts, lambda h: h.iowait_percent)
    if cpu:
        rows.append(["Host CPU (mean)", fmt.pct(sum(cpu) / len(cpu))])
    if iowait:
        rows.append(["Host iowait (mean)", fmt.pct(sum(iowait) / len(iowait), digits=1)])
    tree = latest(session.processes, now)
    if tree is not None and tree.processes:
        rows.append(["Target tree CPU (100% = one core)", fmt.pct(tree_cpu(tree))])
        rows.append(["DataLoader workers", str(len(tree.workers))])
        pin = tree.pin_memory_thread
        rows.append(["Pin-memory thread", "unknown" if pin is None else ("yes" if pin else "no")])
    if report.steps_per_s is not None:
        rows.append(["Steps per second", f"{report.steps_per_s:.2f}"])
    storage = latest(session.storage, now)
    if storage is not None:
        for m in storage.mounts:
            kind = "network" if m.is_network else "local"
            rows.append([f"Filesystem {m.mountpoint}",
                         f"{m.fstype} ({kind}), {m.open_files} files open"])
    if rows:
        out += ["", *table(["Also measured", "Value"], rows)]
    return [*out, ""]


def _probes(report: Report) -> list[str]:
    if not report.probes:
        return []
    rows = [[name, status] for name, status in sorted(report.probes.items())]
    return ["## Probes", "", *table(["Probe", "Status"], rows), ""]
