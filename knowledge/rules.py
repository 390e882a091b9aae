"""Diagnostic rules, shaped like Prometheus alerting rules, and their evaluation.

A rule has a name, a condition over window metrics, a ``for:`` duration (the
condition must hold that long before the rule fires), ``keep_firing_for:`` (once
firing it stays until the condition has been false that long: hysteresis, so a
finding does not flap on and off with every noisy window), a severity, the
bottleneck category, concrete actions and the source in the documents.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from .expressions import Condition, ExpressionError, check_template
from .metrics import CATALOGUE, WORDS
from .model import CATEGORIES, SEVERITIES
from .yamlio import (
    KnowledgeError,
    fail,
    kind_of,
    load_yaml_file,
    load_yaml_text,
    mappings,
    only_keys,
    require,
)

PACKAGED = "rules.yaml"

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}


def parse_duration(value: object, node: object, key: str) -> float:
    """``'30s'``, ``'2m'``, ``5`` -> seconds."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        if value < 0:
            raise fail(node, f"'{key}' must not be negative, not {value!r}")
        return float(value)
    if isinstance(value, str):
        match = _DURATION_RE.match(value)
        if match:
            return float(match[1]) * _UNITS[match[2]]
    raise fail(node, f"'{key}' must be a duration like 5s or 2m, not {value!r}")


@dataclass(frozen=True)
class GainSpec:
    """How a finding's gain is estimated.

    ``amdahl``: removing a fraction ``removable`` (low..high) of the time in
    ``metric`` (a phase fraction) bounds the speed-up at 1 / (1 - p * removable).
    ``parallel``: Amdahl with the phase ``metric`` run ``factor`` times wider.
    ``workers``: more DataLoader workers, limited by the free cores (gains.py).
    ``fewer``: the phase ``metric`` run ``times`` times less often.
    ``document``: the documents' figure for ``technique`` (resolved against the
    knowledge base's technique effects). ``none``: the benefit is not speed.
    """

    method: str
    metric: str | None = None
    removable: tuple[float, float] = (1.0, 1.0)
    technique: str | None = None
    #: For ``parallel``: the metric saying how many times wider the phase could run.
    factor: str | None = None
    #: For ``fewer``: how many times less often the action runs the phase.
    times: float = 1.0
    #: For ``fewer``: how much faster the rest of the step may run once the phase
    #: is rarer (the high end of the range; 1.0 = pure Amdahl).
    rest_speedup: float = 1.0
    note: str = ""


@dataclass(frozen=True)
class StateSpec:
    """When a row of the priority framework applies to the job."""

    id: str
    condition: Condition
    file: str
    line: int


@dataclass(frozen=True)
class Rule:
    id: str
    condition: Condition
    for_s: float
    keep_firing_for_s: float
    severity: str
    category: str
    title: str
    why: str
    actions: tuple[str, ...]
    gain: GainSpec
    source: Mapping[str, str]
    evidence: tuple[str, ...]
    snippet: str | None = None
    techniques: tuple[str, ...] = ()
    #: Whether this finding can name the bottleneck (advisory ones cannot).
    bottleneck: bool = True
    file: str = ""
    line: int = 0
    #: Rules whose finding this one explains (a symptom it is the culprit of).
    explains: tuple[str, ...] = ()
    #: One entry per action: the condition under which it applies, or None.
    actions_when: tuple[Condition | None, ...] = ()
    #: Actions and snippets in a framework's own words ("hf_trainer", "lightning"),
    #: with each action's condition as in ``actions_when``.
    actions_for: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    actions_for_when: Mapping[str, tuple[Condition | None, ...]] = field(default_factory=dict)
    snippet_for: Mapping[str, str] = field(default_factory=dict)


@dataclass
class RuleState:
    """Where one rule stands: pending since, firing since, last true."""

    pending_since: float | None = None
    firing_since: float | None = None
    last_true: float | None = None
    last_value: bool | None = None


@dataclass(frozen=True)
class RuleSet:
    rules: tuple[Rule, ...]
    states: tuple[StateSpec, ...] = ()
    files: tuple[str, ...] = field(default_factory=tuple)


def _condition(node: Any, key: str) -> Condition:
    expr = require(node, key, str)
    try:
        return Condition(expr, CATALOGUE)
    except ExpressionError as exc:
        raise fail(node, str(exc)) from exc


def _actions(value: Any, node: Any) -> tuple[tuple[str, ...], tuple[Condition | None, ...]]:
    """Actions: text, or ``{text: ..., when: condition}`` for one that applies only then."""
    if value is None or value == "":
        return (), ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list):
        raise fail(node, "'actions' must be a list")
    texts: list[str] = []
    whens: list[Condition | None] = []
    for item in value:
        if isinstance(item, str):
            texts.append(item)
            whens.append(None)
            continue
        if not isinstance(item, dict):
            raise fail(node, "each action must be text or {text, when}")
        only_keys(item, ("text", "when"), "action")
        texts.append(require(item, "text", str))
        whens.append(_condition(item, "when"))
    return tuple(texts), tuple(whens)


def _snippet_text(value: Any, node: Any) -> str:
    if not isinstance(value, str):
        raise fail(node, f"a snippet must be text, not {kind_of(value)}")
    return value


def _by_framework(node: Any, key: str, parse: Any) -> dict[str, Any]:
    value = node.get(key)
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise fail(node, f"'{key}' must map a framework ({', '.join(FRAMEWORKS)}) to text")
    unknown = [k for k in value if k not in FRAMEWORKS]
    if unknown:
        raise fail(value, f"unknown framework '{unknown[0]}' in '{key}' "
                          f"(one of {', '.join(FRAMEWORKS)})")
    return {k: parse(v, value) for k, v in value.items()}


def _strings(node: Any, key: str) -> tuple[str, ...]:
    value = node.get(key)
    if value is None or value == "":
        return ()
    if isinstance(value, str):
        value = [value]
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise fail(node, f"'{key}' must be a list of strings")
    return tuple(value)


def _text(node: Any, key: str, default: str | None = "") -> Any:
    """An optional text field (empty means ``default``); a list there would crash rendering."""
    value = node.get(key)
    if value is None:
        return default
    if not isinstance(value, str):
        raise fail(node, f"'{key}' must be text, not {kind_of(value)}")
    return value


def _check_templates(node: Any, *texts: str) -> None:
    for text in texts:
        try:
            unknown = sorted(
                f for f in check_template(text) if f not in CATALOGUE and f not in WORDS
            )
        except ExpressionError as exc:
            raise fail(node, str(exc)) from exc
        if unknown:
            raise fail(node, f"unknown metric {', '.join(unknown)} in text '{text}'")


def _fraction(value: object) -> float | None:
    """A number from YAML (not a bool, not text), as a float; None otherwise."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def _removable(spec: Any) -> tuple[float, float]:
    """``removable``: a fraction or ``[low, high]``, each a number in (0, 1]."""
    value = spec.get("removable", 1.0)
    pair = value if isinstance(value, list) and len(value) == 2 else [value, value]
    low, high = _fraction(pair[0]), _fraction(pair[1])
    if low is None or high is None:
        raise fail(spec, "'removable' must be a fraction or [low, high]")
    if not (0 < low <= high <= 1):
        raise fail(spec, "'removable' must lie in (0, 1] with low <= high")
    return low, high


def _gain(node: Any) -> GainSpec:
    spec = node.get("gain")
    if spec is None:
        return GainSpec("none")
    if not isinstance(spec, dict):
        raise fail(node, "'gain' must be a mapping with 'method'")
    only_keys(spec, GAIN_KEYS, "gain")
    method = require(spec, "method", str)
    note = _text(spec, "note")
    if method == "amdahl":
        metric = require(spec, "metric", str)
        if metric not in CATALOGUE:
            raise fail(spec, f"unknown metric {metric} in gain")
        return GainSpec("amdahl", metric=metric, removable=_removable(spec), note=note)
    if method == "parallel":
        metric = require(spec, "metric", str)
        factor = require(spec, "factor", str)
        for name in (metric, factor):
            if name not in CATALOGUE:
                raise fail(spec, f"unknown metric {name} in gain")
        return GainSpec("parallel", metric=metric, factor=factor, note=note)
    if method == "workers":
        metric = spec.get("metric", "phase_data_wait")
        if metric not in CATALOGUE:
            raise fail(spec, f"unknown metric {metric} in gain")
        return GainSpec("workers", metric=metric, note=note)
    if method == "fewer":
        metric = require(spec, "metric", str)
        if metric not in CATALOGUE:
            raise fail(spec, f"unknown metric {metric} in gain")
        times = _fraction(spec.get("times"))
        if times is None or times <= 1:
            raise fail(spec, "'times' must be a number above 1")
        rest = _fraction(spec.get("rest_speedup", 1.0))
        if rest is None or not 1.0 <= rest <= 2.0:
            raise fail(spec, "'rest_speedup' must be a number from 1 to 2")
        return GainSpec("fewer", metric=metric, times=times, rest_speedup=rest, note=note)
    if method == "document":
        return GainSpec("document", technique=require(spec, "technique", str), note=note)
    if method == "none":
        return GainSpec("none", note=note)
    raise fail(spec, f"unknown gain method '{method}' "
                     "(amdahl, parallel, workers, fewer, document or none)")


def _source(node: Any) -> dict[str, str]:
    """The rule's ``source``: document, section and quote, each a scalar (kept as text)."""
    source = node.get("source") or {}
    if not isinstance(source, dict) or "document" not in source:
        raise fail(node, "'source' must name the document (and section) the rule comes from")
    only_keys(source, SOURCE_KEYS, "source")
    for key, value in source.items():
        if isinstance(value, (dict, list)):
            raise fail(source, f"source '{key}' must be text, not {kind_of(value)}")
    return {k: str(v) for k, v in source.items()}


def _flag(node: Any, key: str, default: bool) -> bool:
    """A true/false field; ``"no"`` in quotes would otherwise count as true."""
    value = node.get(key, default)
    if not isinstance(value, bool):
        raise fail(node, f"'{key}' must be true or false, not {kind_of(value)}")
    return value


#: Every key a rule, its gain and its source may have.
RULE_KEYS = (
    "name", "expr", "for", "keep_firing_for", "severity", "category", "title", "why",
    "actions", "evidence", "snippet", "techniques", "gain", "source", "bottleneck",
    "explains", "actions_for", "snippet_for",
)
GAIN_KEYS = ("method", "metric", "removable", "factor", "technique", "times", "rest_speedup",
             "note")
#: Frameworks whose own words a rule may use for its actions.
FRAMEWORKS = ("hf_trainer", "lightning", "accelerate")
SOURCE_KEYS = ("document", "section", "quote")
STATE_KEYS = ("id", "expr")
#: A user's --rules file may also carry phase signatures (``phases.py``).
FILE_KEYS = ("rules", "states", "phases", "techniques_seen", "step_counters", "loop_frames")


def parse_rule(node: Any) -> Rule:
    rule_id = require(node, "name", str)
    only_keys(node, RULE_KEYS, f"rule '{rule_id}'")
    severity = require(node, "severity", str)
    if severity not in SEVERITIES:
        raise fail(node, f"unknown severity '{severity}' (one of {', '.join(SEVERITIES)})")
    category = require(node, "category", str)
    if category not in CATEGORIES:
        raise fail(node, f"unknown category '{category}' (one of {', '.join(CATEGORIES)})")
    title = require(node, "title", str)
    why = _text(node, "why")
    actions, actions_when = _actions(node.get("actions"), node)
    _check_templates(node, title, why, *actions)
    parsed_for = _by_framework(node, "actions_for", _actions)
    actions_for = {name: texts for name, (texts, _whens) in parsed_for.items()}
    actions_for_when = {name: whens for name, (_texts, whens) in parsed_for.items()}
    snippet_for = _by_framework(node, "snippet_for", _snippet_text)
    for texts in actions_for.values():
        _check_templates(node, *texts)
    evidence = _strings(node, "evidence")
    unknown = [m for m in evidence if m not in CATALOGUE]
    if unknown:
        raise fail(node, f"unknown metric {', '.join(unknown)} in evidence")
    source = _source(node)
    return Rule(
        id=rule_id,
        condition=_condition(node, "expr"),
        for_s=parse_duration(node.get("for", 0), node, "for"),
        keep_firing_for_s=parse_duration(node.get("keep_firing_for", 0), node, "keep_firing_for"),
        severity=severity,
        category=category,
        title=title,
        why=why,
        actions=actions,
        gain=_gain(node),
        source=source,
        evidence=evidence,
        snippet=_text(node, "snippet", None),
        techniques=_strings(node, "techniques"),
        bottleneck=_flag(node, "bottleneck", True),
        file=getattr(node, "file", ""),
        line=getattr(node, "line", 0),
        explains=_strings(node, "explains"),
        actions_when=actions_when,
        actions_for=actions_for,
        actions_for_when=actions_for_when,
        snippet_for=snippet_for,
    )


def parse_rules_document(doc: Any) -> RuleSet:
    if not isinstance(doc, dict):
        raise fail(doc, "expected a mapping with 'rules:'")
    only_keys(doc, FILE_KEYS, "rule file")
    rule_nodes, state_nodes = mappings(doc, "rules"), mappings(doc, "states")
    rules = [parse_rule(n) for n in rule_nodes]
    seen: set[str] = set()
    for rule in rules:
        if rule.id in seen:
            raise KnowledgeError(f"duplicate rule name '{rule.id}'", rule.file, rule.line)
        seen.add(rule.id)
    states = []
    for n in state_nodes:
        only_keys(n, STATE_KEYS, "state")
        states.append(StateSpec(require(n, "id", str), _condition(n, "expr"), n.file, n.line))
    return RuleSet(tuple(rules), tuple(states))


def rules_from(user_docs: Sequence[tuple[str, Any]]) -> RuleSet:
    """The packaged rules plus already-parsed user files (theirs may replace ours)."""
    text = resources.files("aitop.knowledge").joinpath(f"data/{PACKAGED}").read_text("utf-8")
    base = parse_rules_document(load_yaml_text(text, PACKAGED))
    rules = {r.id: r for r in base.rules}
    states = {s.id: s for s in base.states}
    files = [PACKAGED]
    for path, doc in user_docs:
        if not isinstance(doc, dict) or not ({"rules", "states", "phases"} & doc.keys()):
            raise KnowledgeError("expected top-level 'rules:' (or 'states:', 'phases:')", path)
        extra = parse_rules_document(doc)
        rules.update({r.id: r for r in extra.rules})
        states.update({s.id: s for s in extra.states})
        files.append(path)
    for rule in rules.values():
        unknown = [name for name in rule.explains if name not in rules]
        if unknown:
            raise KnowledgeError(
                f"rule '{rule.id}' explains unknown rule '{unknown[0]}'", rule.file, rule.line
            )
    return RuleSet(tuple(rules.values()), tuple(states.values()), tuple(files))


def load_rules(extra_files: Iterable[Path] = ()) -> RuleSet:
    """The packaged rules plus the user's ``--rules`` files."""
    return rules_from([(str(path), load_yaml_file(path)) for path in extra_files])


class RuleEngine:
    """Evaluates a rule set tick by tick, keeping each rule's for/keep-firing state."""

    def __init__(self, ruleset: RuleSet) -> None:
        self.ruleset = ruleset
        self.state: dict[str, RuleState] = {r.id: RuleState() for r in ruleset.rules}

    def step(self, metrics: Mapping[str, float | None], now: float) -> list[tuple[Rule, float]]:
        """Advance every rule to ``now``; return the firing ones with when they fired."""
        firing: list[tuple[Rule, float]] = []
        for rule in self.ruleset.rules:
            st = self.state[rule.id]
            try:
                value = rule.condition.evaluate(metrics)
            except ExpressionError:
                value = None
            st.last_value = value
            if value:
                st.last_true = now
                if st.pending_since is None:
                    st.pending_since = now
                if st.firing_since is None and now - st.pending_since >= rule.for_s:
                    st.firing_since = now
            else:
                st.pending_since = None
                # Unknown (None) data does not clear a firing rule by itself: a
                # probe hiccup is not evidence that the problem went away.
                if st.firing_since is not None and value is False and (
                    st.last_true is None or now - st.last_true >= rule.keep_firing_for_s
                ):
                    st.firing_since = None
            if st.firing_since is not None:
                firing.append((rule, st.firing_since))
        return firing

    def pending(self, now: float) -> list[tuple[Rule, float]]:
        """Rules whose condition holds but whose ``for:`` has not elapsed yet, with
        how long it has held."""
        out = []
        for rule in self.ruleset.rules:
            st = self.state[rule.id]
            if st.firing_since is None and st.pending_since is not None:
                out.append((rule, now - st.pending_since))
        return out

    def waiting(self, metrics: Mapping[str, float | None]) -> list[str]:
        """Rules whose last evaluation was unknown, with the metrics they lack."""
        out = []
        for rule in self.ruleset.rules:
            if self.state[rule.id].last_value is None:
                missing = rule.condition.missing(metrics)
                out.append(f"{rule.id}: needs {', '.join(missing) or 'data'}")
        return out
