"""From window metrics and firing rules to a Diagnosis: bottleneck, state, findings.

The facts from the documents that this needs (what each technique claims, the
rows of the priority framework, the key-metric targets) come in as a
:class:`Facts` object, so this module is pure computation and easy to test.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

from aitop.probes.session import PHASES

from ..base.catalogue import CATALOGUE
from ..base.documents import Threshold
from ..base.expressions import render, render_code
from ..base.facts import Facts
from ..base.findings import (
    COLLECTING,
    NOT_YET_CONFIRMED,
    SEVERITIES,
    BottleneckCategory,
    Citation,
    Diagnosis,
    Evidence,
    Finding,
    Gain,
    StateMatch,
)
from ..base.rules import FRAMEWORKS, Rule, RuleEngine, RuleSet
from ..base.targets import Target, target_for, target_status
from .gains import estimate_gain

__all__ = ["Diagnoser", "Facts", "build_finding", "estimate_gain", "rank"]


def display(metric: str, value: float | None) -> str:
    """A value with its unit, as people read it (fractions as %)."""
    if value is None:
        return "unknown"
    spec = CATALOGUE.get(metric)
    unit = spec.unit if spec else ""
    if unit == "fraction":
        return f"{value:.0%}"
    if unit == "0/1":
        return "yes" if value >= 0.5 else "no"
    if unit.startswith("%"):
        return f"{value:.0f}{unit}"
    if unit in ("", "samples"):
        return f"{value:.0f}" if float(value).is_integer() else f"{value:.2f}"
    return f"{value:.1f} {unit}"


def evidence_for(
    metrics: Mapping[str, float | None], names: Sequence[str], targets: Mapping[str, Target]
) -> tuple[Evidence, ...]:
    out = []
    for name in names:
        value = metrics.get(name)
        target = target_for(name, targets)
        spec = CATALOGUE.get(name)
        out.append(
            Evidence(
                metric=name,
                label=spec.description if spec else name,
                value=value,
                display=display(name, value),
                target=target.text if target else None,
                status=target_status(value, target),
            )
        )
    return tuple(out)


def phases_of(metrics: Mapping[str, float | None]) -> dict[str, float] | None:
    """The step's phase shares (exactly the session's ``PHASES``), or ``None``.

    A CPU rank's hidden wait for the other ranks (``comm_hidden``: blocked
    inside backward in DDP's all-reduce) is shown as ``comm``, taken from
    backward first, where DDP waits, then forward and the optimizer.
    """
    shares = {p: metrics.get(f"phase_{p}") for p in PHASES}
    if any(v is None for v in shares.values()):
        return None
    phases = {p: float(v) for p, v in shares.items() if v is not None}
    hidden = metrics.get("comm_hidden") or 0.0
    for phase in ("backward", "forward", "optimizer"):
        moved = min(hidden, phases[phase])
        phases[phase] -= moved
        phases["comm"] += moved
        hidden -= moved
    return phases


def _severity_rank(severity: str) -> int:
    return SEVERITIES.index(severity) if severity in SEVERITIES else 0


def rule_quote(rule: Rule, facts: Facts) -> str:
    """The rule's own quote, else the passage behind the first technique it recommends."""
    if rule.source.get("quote"):
        return rule.source["quote"]
    claims = [facts.techniques[t] for t in rule.techniques if t in facts.techniques]
    same_section = [c for c in claims if c.source.section == rule.source.get("section")]
    chosen = same_section or claims
    return chosen[0].source.quote if chosen else ""


def framework_of(metrics: Mapping[str, float | None]) -> str | None:
    """The training framework that drives the loop, as seen in its frames."""
    for name in FRAMEWORKS:
        if metrics.get(f"uses_{name}") == 1.0:
            return name
    return None


def applicable_actions(
    rule: Rule, metrics: Mapping[str, float | None], framework: str | None
) -> tuple[str, ...]:
    """The rule's actions for this job: in its framework's words, those whose condition holds."""
    texts, whens = rule.actions, rule.actions_when
    if framework is not None and framework in rule.actions_for:
        texts, whens = rule.actions_for[framework], rule.actions_for_when.get(framework, ())
    out = []
    for index, text in enumerate(texts):
        when = whens[index] if index < len(whens) else None
        if when is not None:
            try:
                if not when.evaluate(metrics):
                    continue
            except ValueError:
                continue  # unknown: leave the conditional action out rather than guess
        out.append(text)
    return tuple(out)


def build_finding(
    rule: Rule,
    fired_at: float,
    metrics: Mapping[str, float | None],
    facts: Facts,
    words: Mapping[str, str] | None = None,
    explains: tuple[str, ...] = (),
    last_held_at: float | None = None,
) -> Finding:
    framework = framework_of(metrics)
    snippet = rule.snippet_for.get(framework, rule.snippet) if framework else rule.snippet
    if snippet is not None:
        snippet = render_code(snippet, metrics, CATALOGUE)
    return Finding(
        id=rule.id,
        title=render(rule.title, metrics, words),
        severity=rule.severity,
        category=rule.category,
        why=render(rule.why, metrics, words),
        evidence=evidence_for(metrics, rule.evidence, facts.targets),
        actions=tuple(
            render(a, metrics, words) for a in applicable_actions(rule, metrics, framework)
        ),
        gain=estimate_gain(rule.gain, metrics, facts),
        source=Citation(
            document=facts.documents.get(rule.source.get("document", ""), rule.source["document"]),
            section=rule.source.get("section", ""),
            quote=rule_quote(rule, facts),
        ),
        expr=rule.condition.expr,
        fired_at=fired_at,
        last_held_at=last_held_at,
        snippet=snippet,
        techniques=rule.techniques,
        explains=explains,
    )


def ruled_out(finding: Finding, because: str) -> Finding:
    """The finding with no gain: another firing finding rules out its mechanism."""
    gain = Gain(None, method=finding.gain.method,
                explanation=f"no figure while this holds: {because}")
    return dataclasses.replace(finding, gain=gain)


def finding_text(f: Finding) -> tuple[object, ...]:
    """Everything a person reads of a finding (values as displayed, not raw)."""
    return (
        f.title, f.why, f.actions, f.fired_at, f.last_held_at, f.gain.explanation, f.explains,
        None if f.gain.speedup is None else round(f.gain.speedup, 2),
        tuple((e.display, e.status) for e in f.evidence),
    )


#: The word a job state's text names its duration by: "(38 s so far)".
STATE_SEEN = "state_seen"
#: A job state that began this soon after the samples sufficed began before
#: them: rules are judged once a tick (1-2 s).
STATE_FROM_ATTACH_SLACK_S = 2.5
#: The rule file's named condition that says when the phase shares can be trusted.
ENOUGH_SAMPLES = "enough_samples"
#: How much a gain's kind counts when ranking: a prediction for this machine
#: above an Amdahl ceiling above the documents' general figure.
_GAIN_KIND_ORDER = {"predicted": 3, "amdahl": 2, "document": 1}


def rank(
    findings: Sequence[tuple[Finding, bool]], holding: frozenset[str] = frozenset()
) -> list[tuple[Finding, bool]]:
    """Culprits that name the bottleneck first (by severity), then the rest.

    A culprit whose condition holds now (``holding``) leads one that is only
    kept firing by its ``keep_firing_for`` hysteresis. Within each group,
    measured estimates (predictions, then ceilings) outrank the documents'
    general figures, then the larger gain; unknown counts as none.
    """
    return sorted(
        findings,
        key=lambda fb: (
            not fb[1],
            fb[0].id not in holding if fb[1] else False,
            -_severity_rank(fb[0].severity) if fb[1] else 0,
            -_GAIN_KIND_ORDER.get(fb[0].gain.method, 0),
            -(fb[0].gain.speedup or 1.0),
            -_severity_rank(fb[0].severity),
        ),
    )


_WORDS = {"<": "below", "<=": "at most", ">": "above", ">=": "at least"}


def hardware_use(
    metrics: Mapping[str, float | None], band: Sequence[Threshold] = ()
) -> tuple[bool | None, str]:
    """Whether the computing hardware is well used, said apart from the bottleneck.

    ``band`` is the documents' own condition for it, the priority framework's row
    marked ``well_used`` (GPU utilisation above 85 %: "the GPU is already
    well-utilized; further gains come from memory, storage, distribution").
    Without a GPU the same band is asked of the share of the CPU cores the job
    may use that it keeps busy.
    """
    if not band:
        return None, ""
    target = " and ".join(f"{_WORDS[t.op]} {t.value:g}%" for t in band)
    if metrics.get("has_gpu") == 1.0:
        util = metrics.get("gpu_util_mean")
        if util is None:
            return None, ""
        if all(t.holds(util) for t in band):
            return True, (f"GPU well used ({util:.0f}% busy): further gains come from "
                          "doing the arithmetic more efficiently, memory, storage, distribution")
        return False, f"GPU underused ({util:.0f}% busy; target {target})"
    cores = metrics.get("cpu_count")
    used = metrics.get("proc_cpu_mean")
    if cores is None or used is None or not cores:
        return None, ""
    busy = used / 100.0
    if all(t.holds(100.0 * busy / cores) for t in band):
        return True, f"CPU cores well used ({busy:.1f} of {cores:.0f} busy with this job)"
    return False, f"CPU cores underused ({busy:.1f} of {cores:.0f} busy with this job)"


def _without_states_left(firing: list[tuple[Rule, float]],
                         engine: RuleEngine) -> list[tuple[Rule, float]]:
    """The firing rules less any job state the job has left for another.

    ``keep_firing_for`` holds a state through a tick or two where its condition
    flickers false; it is no reason to say the job is still loading once the
    newest stack window shows it compiling. A job state held only that way
    gives way to a job state whose condition holds now.
    """
    def holds_now(rule: Rule) -> bool:
        return engine.state[rule.id].last_value is True

    if not any(rule.job_state and holds_now(rule) for rule, _ in firing):
        return firing
    return [(rule, at) for rule, at in firing if not rule.job_state or holds_now(rule)]


def held_text(held: float, for_s: float) -> str:
    """How far a pending rule's hold has come: "held 3 s of its 5 s", or past it,
    waiting for the next stack window to confirm the phase shares it read."""
    if held < for_s:
        return f"held {held:.0f} s of its {for_s:g} s"
    return f"held {held:.0f} s; the next stack window confirms it"


@dataclasses.dataclass(frozen=True, slots=True)
class Held:
    """A firing rule's metrics and words where its condition last held, and when."""

    metrics: Mapping[str, float | None]
    words: Mapping[str, str]
    at: float


class Diagnoser:
    """Stateful evaluator: one per session (rules keep their for/keep-firing state)."""

    def __init__(self, ruleset: RuleSet, facts: Facts) -> None:
        self.ruleset = ruleset
        self.facts = facts
        self.engine = RuleEngine(ruleset)
        self._previous: dict[str, Finding] = {}
        #: Each firing rule's metrics and words from the last evaluation where its
        #: condition held: a finding kept alive by ``keep_firing_for`` is told
        #: with the numbers that made it fire, not today's ("data loading takes
        #: 3 %, above target" was a held finding read with the current window),
        #: and when that was.
        self._last_held: dict[str, Held] = {}
        #: When the stack samples first reached the rules' minimum: a job state
        #: whose condition held from then on held when aitop attached.
        self._judgeable_since: float | None = None

    def _reuse(self, finding: Finding) -> Finding:
        """The previous tick's finding when it reads the same.

        A diagnosis a second is kept as history; a firing rule's finding usually
        renders identically tick after tick (values are shown rounded), so the
        history shares one object instead of storing a copy every second.
        """
        old = self._previous.get(finding.id)
        if old is not None and finding_text(old) == finding_text(finding):
            return old
        self._previous[finding.id] = finding
        return finding

    def diagnose(
        self,
        metrics: Mapping[str, float | None],
        now: float,
        words: Mapping[str, str] | None = None,
    ) -> Diagnosis:
        firing = _without_states_left(self.engine.step(metrics, now), self.engine)
        if self._judgeable_since is None and self._enough_samples(metrics):
            self._judgeable_since = now
        by_id = {rule.id: rule for rule, _ in firing}
        seen = [self._seen_for(rule.id, by_id, now, metrics.get("watched_s"))
                for rule, _ in firing if rule.job_state]
        if seen:
            longest = max(seen, key=lambda s: s[0])
            words = {**(words or {}),
                     STATE_SEEN: f"{'at least ' if longest[1] else ''}{longest[0]:.0f} s"}
        holding = frozenset(
            rule.id for rule, _ in firing if self.engine.state[rule.id].last_value is True
        )
        for rule_id in holding:
            self._last_held[rule_id] = Held(metrics, words or {}, now)
        for rule_id in set(self._last_held) - set(by_id):
            del self._last_held[rule_id]

        def values(rule_id: str) -> tuple[Mapping[str, float | None], Mapping[str, str] | None]:
            held = self._last_held.get(rule_id)
            return (metrics, words) if held is None else (held.metrics, held.words)

        def last_held_at(rule_id: str) -> float | None:
            held = self._last_held.get(rule_id)
            return None if rule_id in holding or held is None else held.at

        # A symptom that a firing culprit explains is not listed as a rival: the
        # culprit leads and carries it ("data wait 62 %") as its evidence.
        explained = {name for rule, _ in firing for name in rule.explains if name in by_id}
        built: list[tuple[Finding, bool]] = []
        for rule, fired_at in firing:
            if rule.id in explained:
                continue
            held_metrics, held_words = values(rule.id)
            symptoms = tuple(render(by_id[n].title, *values(n))
                             for n in rule.explains if n in by_id)
            finding = build_finding(rule, fired_at, held_metrics, self.facts, held_words,
                                    symptoms, last_held_at(rule.id))
            ruler = next((by_id[n] for n in rule.ruled_out_by if n in by_id), None)
            if ruler is not None:
                finding = ruled_out(finding, render(ruler.title, *values(ruler.id)))
            built.append((self._reuse(finding), rule.bottleneck and ruler is None))
        ranked = rank(built, holding)
        job_states = [(f, b) for f, b in ranked if by_id[f.id].job_state]
        if job_states:
            # Not in steady state: the state is the verdict, and what would be
            # judged of a steady state (and predicted) waits until it ends.
            ranked = job_states
        findings = tuple(f for f, _ in ranked)
        # The bottleneck: the first culprit in ranking order (most severe, then
        # the best-founded and largest gain).
        top = next((f for f, is_bottleneck in ranked if is_bottleneck), None)
        has_gpu = metrics.get("has_gpu") == 1.0
        pending = tuple(
            f"{render(rule.title, metrics, words)} ({held_text(held, rule.for_s)})"
            for rule, held in self.engine.pending(now) if rule.bottleneck
        )
        category: BottleneckCategory
        if top is not None:
            category, summary = top.category, top.title
        elif pending:
            category = COLLECTING
            summary = NOT_YET_CONFIRMED + pending[0]
        elif self._enough_samples(metrics):
            category = "none"
            summary = "No bottleneck: every measured signal is within its target"
        else:
            category = COLLECTING
            summary = self._collecting_summary(metrics)
        well_used, hardware = hardware_use(metrics, self.ruleset.well_used_band())
        return Diagnosis(
            t=now,
            window_s=float(metrics.get("window_s") or 0.0),
            category=category,
            summary=summary,
            compute_device="gpu" if has_gpu else "cpu",
            states=() if job_states else self.states(metrics, category),
            findings=findings,
            phases=phases_of(metrics),
            steps_per_s=metrics.get("steps_per_s"),
            metrics=dict(metrics),
            waiting_for=tuple(self.engine.waiting(metrics)),
            pending=pending,
            hardware_well_used=well_used,
            hardware=hardware,
        )

    def _seen_for(self, rule_id: str, by_id: Mapping[str, Rule], now: float,
                  watched_s: float | None) -> tuple[float, bool]:
        """Seconds since the state's condition first held (its ``for:`` included),
        and whether it held from the first moment it could be judged.

        A state that held as soon as there were enough samples to see it (a job
        found compiling) held when aitop attached: its time counts from then
        ("at least"), not from the first judgement seconds later (a compilation
        20 s old read "8 s so far").
        """
        since = self.engine.state[rule_id].firing_since
        if since is None:
            return 0.0, False
        began = since - by_id[rule_id].for_s
        seen = max(0.0, now - began)
        start = self._judgeable_since
        if (watched_s is not None and start is not None
                and began <= start + STATE_FROM_ATTACH_SLACK_S and watched_s > seen):
            return watched_s, True
        return seen, False

    def _enough_samples(self, metrics: Mapping[str, float | None]) -> bool:
        """Whether the stack samples behind the phases reach the rules' own minimum.

        "No bottleneck" from a handful of samples would clear a job that waits
        for data most of its time: below the minimum the rules would not fire,
        so the verdict is "collecting", not "none". A rule file without an
        ``enough_samples`` condition asks for one sample.
        """
        condition = self.ruleset.conditions.get(ENOUGH_SAMPLES)
        if condition is None:
            return bool(metrics.get("phase_samples"))
        try:
            return condition.evaluate(metrics) is True
        except ValueError:
            return False

    def _collecting_summary(self, metrics: Mapping[str, float | None]) -> str:
        samples = metrics.get("phase_samples") or 0.0
        if not samples:
            return "Collecting: no stack samples yet"
        condition = self.ruleset.conditions.get(ENOUGH_SAMPLES)
        needed = f" ({condition.written})" if condition is not None else ""
        return (f"Collecting: {samples:.0f} stack samples so far, too few to judge{needed}")

    def states(
        self, metrics: Mapping[str, float | None], category: str | None = None
    ) -> tuple[StateMatch, ...]:
        """Rows of the priority framework that match, the bottleneck's own row first.

        The row follows the bottleneck, not the other way round: a data-starved
        job whose allocator fills the GPU's memory is in "high data loading
        latency" first; "running out of VRAM" leads only when memory is the
        bottleneck (NVML counts the allocator's cache as used). Which row leads
        for which category, which come last and which need a GPU is the rule
        file's (``leads_for``, ``last``, ``gpu_only``).
        """
        out = []
        order: dict[str, int] = {}
        for spec in self.ruleset.states:
            if spec.gpu_only and metrics.get("has_gpu") != 1.0:
                continue
            try:
                matched = spec.condition.evaluate(metrics)
            except ValueError:
                matched = None
            if not matched:
                continue
            row = self.facts.states.get(spec.id)
            out.append(
                StateMatch(
                    id=spec.id,
                    name=row.name if row else spec.id,
                    priorities=row.priorities if row else (),
                    evidence=evidence_for(
                        metrics, sorted(spec.condition.names), self.facts.targets
                    ),
                )
            )
            leads = category is not None and category in spec.leads_for
            order[spec.id] = 0 if leads else (2 if spec.last else 1)
        out.sort(key=lambda state: order[state.id])  # stable: equal rows keep the file's order
        return tuple(out)
