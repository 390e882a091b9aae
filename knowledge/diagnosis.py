"""From window metrics and firing rules to a Diagnosis: bottleneck, state, findings.

The facts from the documents that this needs (what each technique claims, the
rows of the priority framework, the key-metric targets) come in as a
:class:`Facts` object, so this module is pure computation and easy to test.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from aitop.probes.session import PHASES

from .expressions import render
from .facts import Facts
from .metrics import CATALOGUE
from .model import SEVERITIES, Citation, Diagnosis, Evidence, Finding, Gain, StateMatch
from .rules import GainSpec, Rule, RuleEngine, RuleSet
from .targets import Target, judge, target_for


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
                status=judge(value, target),
            )
        )
    return tuple(out)


def estimate_gain(
    spec: GainSpec, metrics: Mapping[str, float | None], facts: Facts
) -> Gain:
    """Amdahl bounds from the measured phases, or the documents' figure."""
    if spec.method == "amdahl" and spec.metric:
        p = metrics.get(spec.metric)
        if p is None:
            return Gain(None, method="amdahl", explanation=f"{spec.metric} is not known yet")
        p = min(max(p, 0.0), 0.99)
        lo_r, hi_r = spec.removable
        low, high = 1 / (1 - p * lo_r), 1 / (1 - p * hi_r)
        removed = "removing it" if hi_r == 1.0 else f"removing {lo_r:.0%}-{hi_r:.0%} of it"
        return Gain(
            speedup=high,
            low=low,
            high=high,
            method="amdahl",
            explanation=(
                f"{spec.metric.removeprefix('phase_').replace('_', ' ')} is {p:.0%} of the step: "
                f"{removed} bounds the speed-up at {high:.1f}x (Amdahl: 1 / (1 - {p:.2f}"
                f"{'' if hi_r == 1.0 else f' x {hi_r:.2f}'}))"
            ),
        )
    if spec.method == "parallel" and spec.metric:
        p = metrics.get(spec.metric)
        factor = metrics.get(spec.factor or "")
        if p is None or factor is None:
            return Gain(None, method="amdahl", explanation="compute share or CPU headroom unknown")
        bound = 1 / ((1 - p) + p / factor)
        return Gain(
            speedup=bound,
            low=1.0,
            high=bound,
            method="amdahl",
            explanation=(
                f"compute is {p:.0%} of the step; run {factor:.1f}x wider it bounds the "
                f"speed-up at {bound:.1f}x (Amdahl: 1 / ((1 - {p:.2f}) + {p:.2f} / {factor:.1f}))"
            ),
        )
    if spec.method == "document" and spec.technique:
        claim = facts.techniques.get(spec.technique)
        if claim is None or claim.speedup_low is None:
            text = claim.text if claim else f"technique '{spec.technique}'"
            return Gain(None, method="document", explanation=text)
        mid = (claim.speedup_low + (claim.speedup_high or claim.speedup_low)) / 2
        return Gain(
            speedup=mid,
            low=claim.speedup_low,
            high=claim.speedup_high,
            method="document",
            explanation=f"the documents' figure for {claim.name}: {claim.text}",
        )
    return Gain(None, method="none", explanation=spec.note or "not a speed gain")


def phases_of(metrics: Mapping[str, float | None]) -> dict[str, float] | None:
    """The step's phase shares (exactly the session's ``PHASES``), or ``None``."""
    shares = {p: metrics.get(f"phase_{p}") for p in PHASES}
    if any(v is None for v in shares.values()):
        return None
    return {p: float(v) for p, v in shares.items() if v is not None}


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


def build_finding(
    rule: Rule, fired_at: float, metrics: Mapping[str, float | None], facts: Facts
) -> Finding:
    return Finding(
        id=rule.id,
        title=render(rule.title, metrics),
        severity=rule.severity,
        category=rule.category,
        why=render(rule.why, metrics),
        evidence=evidence_for(metrics, rule.evidence, facts.targets),
        actions=tuple(render(a, metrics) for a in rule.actions),
        gain=estimate_gain(rule.gain, metrics, facts),
        source=Citation(
            document=facts.documents.get(rule.source.get("document", ""), rule.source["document"]),
            section=rule.source.get("section", ""),
            quote=rule_quote(rule, facts),
        ),
        expr=rule.condition.expr,
        fired_at=fired_at,
        snippet=rule.snippet,
        techniques=rule.techniques,
    )


def finding_text(f: Finding) -> tuple[object, ...]:
    """Everything a person reads of a finding (values as displayed, not raw)."""
    return (
        f.title, f.why, f.actions, f.fired_at, f.gain.explanation,
        None if f.gain.speedup is None else round(f.gain.speedup, 2),
        tuple((e.display, e.status) for e in f.evidence),
    )


def rank(findings: Sequence[tuple[Finding, bool]]) -> list[tuple[Finding, bool]]:
    """By estimated speed-up (unknown counts as none), then severity."""
    return sorted(
        findings,
        key=lambda fb: (-(fb[0].gain.speedup or 1.0), -_severity_rank(fb[0].severity)),
    )


class Diagnoser:
    """Stateful evaluator: one per session (rules keep their for/keep-firing state)."""

    def __init__(self, ruleset: RuleSet, facts: Facts) -> None:
        self.ruleset = ruleset
        self.facts = facts
        self.engine = RuleEngine(ruleset)
        self._previous: dict[str, Finding] = {}

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

    def diagnose(self, metrics: Mapping[str, float | None], now: float) -> Diagnosis:
        firing = self.engine.step(metrics, now)
        built = [
            (self._reuse(build_finding(rule, fired_at, metrics, self.facts)), rule.bottleneck)
            for rule, fired_at in firing
        ]
        ranked = rank(built)
        findings = tuple(f for f, _ in ranked)
        # The bottleneck: the most severe finding that can name one; ties go to
        # the larger estimated gain (the ranking order).
        candidates = [f for f, is_bottleneck in ranked if is_bottleneck]
        top = max(candidates, key=lambda f: _severity_rank(f.severity), default=None)
        has_gpu = metrics.get("has_gpu") == 1.0
        pending = tuple(
            f"{render(rule.title, metrics)} (held {held:.0f} s of its {rule.for_s:g} s)"
            for rule, held in self.engine.pending(now) if rule.bottleneck
        )
        if top is not None:
            category, summary = top.category, top.title
        elif pending:
            category = "none"
            summary = f"Not yet confirmed: {pending[0]}"
        elif metrics.get("phase_samples"):
            category = "none"
            summary = "No bottleneck: every measured signal is within its target"
        else:
            category = "none"
            summary = "Collecting: no stack samples yet"
        return Diagnosis(
            t=now,
            window_s=float(metrics.get("window_s") or 0.0),
            category=category,
            summary=summary,
            compute_device="gpu" if has_gpu else "cpu",
            states=self.states(metrics),
            findings=findings,
            phases=phases_of(metrics),
            steps_per_s=metrics.get("steps_per_s"),
            metrics=dict(metrics),
            waiting_for=tuple(self.engine.waiting(metrics)),
            pending=pending,
        )

    def states(self, metrics: Mapping[str, float | None]) -> tuple[StateMatch, ...]:
        out = []
        for spec in self.ruleset.states:
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
        return tuple(out)
