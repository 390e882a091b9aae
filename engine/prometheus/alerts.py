"""``aitop rules --format prometheus``: the knowledge base as Prometheus alerting rules.

Each rule in force (the packaged ``rules.yaml`` plus any ``--rules`` file, read
through the same loader as an attach) becomes an alert over the series
``aitop --serve`` exports: its condition translated from the syntax tree
(``promql.py``), its ``for:`` and ``keep_firing_for:``, severity and category as
labels, title, why, actions and source as annotations. The ``{metric:.0%}``
fields of a title become Go-template queries of the same series, so the alert
reads like aitop's finding. An alert is silenced where aitop's verdict leaves
its finding out: while a culprit that explains it fires, and, for a finding of
the steady state, while a job state fires. A rule without a faithful PromQL form is listed with
its reason on stderr and as a comment in the file, never dropped silently.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import yaml
from aitop.engine.prometheus.names import Exported, exported_metrics
from aitop.engine.prometheus.promql import Translator, Untranslatable, number
from aitop.engine.prometheus.rank_rules import GROUP as RANK_GROUP
from aitop.engine.prometheus.rank_rules import rank_group
from aitop.knowledge.base.rules import Rule, RuleSet
from aitop.probes.own_version import aitop_version

GROUP = "aitop"
#: Labels an alert adds to its expression's (``ALERTS`` has these beside the job's).
ALERT_LABELS: tuple[str, ...] = ("alertname", "alertstate", "severity", "category", "rule")
#: Python's format-spec mini-language, enough to pick precision and type.
_SPEC = re.compile(r"^(?:.?[<>=^])?[-+ ]?z?#?0?\d*[,_]?(?:\.(?P<p>\d+))?(?P<t>[bcdeEfFgGnosxX%]?)$")


@dataclass(frozen=True)
class Skipped:
    """A rule that was not translated, and why."""

    rule: str
    where: str
    reason: str


def alert_name(rule_id: str) -> str:
    """``data_wait_dominant`` -> ``AitopDataWaitDominant`` (Prometheus' usual style)."""
    return "Aitop" + "".join(part[:1].upper() + part[1:] for part in rule_id.split("_") if part)


def duration(seconds: float) -> str:
    """A Prometheus duration: ``3s``, ``1500ms``, ``2m``."""
    ms = round(seconds * 1000)
    if ms % 60_000 == 0 and ms >= 60_000:
        return f"{ms // 60_000}m"
    if ms % 1000 == 0:
        return f"{ms // 1000}s"
    return f"{ms}ms"


def go_verb(spec: str) -> tuple[str, float]:
    """A Python format spec as a Go printf verb, and the factor it implies (% -> x100)."""
    match = _SPEC.match(spec)
    if match is None or not spec:
        return "%g", 1.0
    precision, kind = match["p"], match["t"]
    p = precision if precision is not None else "6"
    if kind == "%":
        return f"%.{p}f%%", 100.0
    if kind in ("f", "F"):
        return f"%.{p}f", 1.0
    if kind in ("e", "E"):
        return f"%.{p}{kind}", 1.0
    if kind == "d":
        return "%.0f", 1.0
    if precision is not None:
        return f"%.{p}g", 1.0
    return "%g", 1.0


def _go_string(text: str) -> str:
    """A Go string literal."""
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _field_template(spec: Exported, format_spec: str) -> str:
    """A Go template printing one metric of the alert's own job, in aitop's units."""
    verb, factor = go_verb(format_spec)
    factor /= spec.scale
    # The job's own series: its instance, scrape job and aitop job_id (the node
    # agent serves several jobs on one instance), filled in by printf.
    selector = spec.selector('instance=%q,job=%q,job_id=%q')
    if spec.labels:
        dropped = ", ".join(k for k, _ in spec.labels)
        selector = f"max without ({dropped}) ({selector})"
    query = selector if factor == 1.0 else f"{selector} * {number(factor)}"
    return (
        f"{{{{ with printf {_go_string(query)} $labels.instance $labels.job $labels.job_id "
        "| query }}"
        f"{{{{ . | first | value | printf {_go_string(verb)} }}}}"
        "{{ else }}?{{ end }}"
    )


def annotation(text: str) -> str:
    """An aitop text template (``{phase_data_wait:.0%}``) as a Prometheus one."""
    out: list[str] = []
    metrics = exported_metrics()
    for literal, field, spec, _conversion in string.Formatter().parse(text):
        # A literal brace must not start a Go action.
        out.append(literal.replace("{", '{{ "{" }}'))
        if field is None:
            continue
        exported = metrics.get(field)
        # A word aitop fills from the stacks (a thread's name) is not a series.
        out.append(_field_template(exported, spec or "") if exported else f"<{field}>")
    return "".join(out)


def source_text(rule: Rule) -> str:
    document = rule.source.get("document", "")
    section = rule.source.get("section")
    return f"{document}, \u00a7 {section}" if section else document


def alert_of(rule: Rule, expr: str) -> dict[str, Any]:
    alert: dict[str, Any] = {"alert": alert_name(rule.id), "expr": expr}
    if rule.for_s > 0:
        alert["for"] = duration(rule.for_s)
    if rule.keep_firing_for_s > 0:
        alert["keep_firing_for"] = duration(rule.keep_firing_for_s)
    alert["labels"] = dict(zip(ALERT_LABELS[2:], (rule.severity, rule.category, rule.id),
                               strict=True))
    annotations = {"title": annotation(rule.title)}
    if rule.why:
        annotations["description"] = annotation(rule.why)
    if rule.actions:
        annotations["actions"] = "\n".join(
            f"{i}. {annotation(a)}" for i, a in enumerate(rule.actions, 1)
        )
    annotations["source"] = source_text(rule)
    alert["annotations"] = annotations
    return alert


def explained_by(ruleset: RuleSet) -> dict[str, list[str]]:
    """For each symptom rule, the culprit rules that explain it (``explains:``)."""
    out: dict[str, list[str]] = {}
    for rule in ruleset.rules:
        for symptom in getattr(rule, "explains", ()):
            out.setdefault(symptom, []).append(rule.id)
    return out


def job_states(ruleset: RuleSet) -> list[str]:
    """The rules whose finding is a job state (``job_state: true``)."""
    return sorted(rule.id for rule in ruleset.rules if rule.job_state)


def unless_firing(expr: str, rule_ids: Sequence[str]) -> str:
    """``expr``, silenced for a job while one of ``rule_ids`` fires for it (the
    ALERTS series carries every firing alert, with the job's labels)."""
    if not rule_ids:
        return expr
    names = "|".join(sorted(set(rule_ids)))
    return (f"({expr}) unless ignoring ({', '.join(ALERT_LABELS)}) "
            f'ALERTS{{alertstate="firing",rule=~"{names}"}}')


def silenced_by(rule: Rule, culprits: dict[str, list[str]], states: Sequence[str]) -> list[str]:
    """What silences ``rule``'s alert, as aitop's verdict leaves the finding out: a
    culprit that explains it (aitop folds the symptom into the culprit), and, for
    a finding of the steady state, any job state (a job warming up or stalled has
    no step to speed up: the state is the verdict while it lasts)."""
    return culprits.get(rule.id, []) + ([] if rule.job_state else list(states))


def translate(ruleset: RuleSet, translator: Translator | None = None
              ) -> tuple[list[dict[str, Any]], list[Skipped]]:
    """The alerts for every translatable rule, and the rules that are not."""
    translator = translator or Translator()
    culprits = explained_by(ruleset)
    states = job_states(ruleset)
    alerts: list[dict[str, Any]] = []
    skipped: list[Skipped] = []
    for rule in ruleset.rules:
        try:
            expr = translator.condition(rule.condition.expr)
        except Untranslatable as exc:
            skipped.append(Skipped(rule.id, f"{rule.file or '?'}:{rule.line}", str(exc)))
            continue
        alerts.append(alert_of(rule, unless_firing(expr, silenced_by(rule, culprits, states))))
    return alerts, skipped


#: ``aitop rules --format``: a rules file, or the same groups as the Prometheus
#: Operator's ``PrometheusRule`` object (what a cluster's operator loads).
FORMATS: tuple[str, ...] = ("prometheus", "prometheus-operator")
OPERATOR_API = "monitoring.coreos.com/v1"
#: The object's name and labels (a kustomization or ``kubectl label`` adds the
#: one a Prometheus' ``ruleSelector`` asks for).
OPERATOR_NAME = "aitop"
OPERATOR_LABELS = {"app.kubernetes.io/name": "aitop", "app.kubernetes.io/component": "rules"}


def prometheus_rule(groups: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """The groups as a ``PrometheusRule``: the operator's own form of a rules file."""
    return {
        "apiVersion": OPERATOR_API,
        "kind": "PrometheusRule",
        "metadata": {"name": OPERATOR_NAME, "labels": dict(OPERATOR_LABELS)},
        "spec": {"groups": list(groups)},
    }


def render(ruleset: RuleSet, alerts: Sequence[dict[str, Any]],
           skipped: Sequence[Skipped], fmt: str = "prometheus") -> str:
    """The rules file: a comment header (sources, what was not translated), then YAML
    (``fmt`` "prometheus-operator": the same groups as a ``PrometheusRule``)."""
    if fmt not in FORMATS:
        raise ValueError(f"unknown rules format {fmt!r}")
    lines = [
        f"# Prometheus alerting rules generated by `aitop rules --format {fmt}` "
        f"(aitop {aitop_version() or 'unknown'})",
        f"# from: {', '.join(ruleset.files) or 'rules.yaml'}",
        "# over the series `aitop --pid PID --serve [ADDR:]PORT` exports. Scrape aitop and",
        "# evaluate these every few seconds (scrape_interval / evaluation_interval) so the",
        "# `for:` durations mean what they say.",
    ]
    if skipped:
        lines.append(f"# Not translated ({len(skipped)}): no faithful PromQL form")
        lines += [f"#   {s.rule} ({s.where}): {s.reason}" for s in skipped]
    groups: list[dict[str, Any]] = [{"name": GROUP, "rules": list(alerts)}]
    ranks = rank_group(ruleset)
    if ranks is not None:
        lines.append(f"# Group {RANK_GROUP}: recording rules that judge a job across its ranks "
                     "on every node (by job_id), and the straggler alert.")
        groups.append(ranks)
    document = {"groups": groups} if fmt == "prometheus" else prometheus_rule(groups)
    body = yaml.safe_dump(document, sort_keys=False, allow_unicode=True, width=10_000)
    return "\n".join(lines) + "\n" + body
