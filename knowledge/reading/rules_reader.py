"""Reading rule files: rules, the priority framework's states, named conditions, targets.

A rule file is the packaged ``data/rules.yaml`` or one a user passes with
``--rules``; both are read by the same code, against the same catalogue, and a
user's entry replaces the packaged one of the same name. Every problem is
reported with file and line (``schema.Reader``), all of them at once.

Named conditions (``conditions:``) are how a threshold shared by many rules is
said once, as Prometheus' recording rules name an expression: ``enough_samples:
phase_samples >= 20`` is written ``... and enough_samples`` in each rule, and a
rule file may redefine it for every rule that uses it. A threshold of the
documents or a target is named the same way, from where it is said
(``band(gpu_util_mean, gpu_util_above_85)``, ``target_high(phase_data_wait)``:
``knowledge.base.references``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

from ..base.catalogue import CATALOGUE, WORDS
from ..base.documents import KnowledgeDocuments, PriorityState, Threshold
from ..base.expressions import Condition, ExpressionError, check_template, names_in
from ..base.findings import CATEGORIES, SEVERITIES, Category, Severity
from ..base.references import KnowledgeReferences, band_text
from ..base.rules import FRAMEWORKS, EstimateMethod, GainSpec, Rule, StateSpec
from ..base.targets import Target
from .file_schema import Reader
from .yamlio import Located, LocatedList

#: Every key a rule, its gain and its source may have.
RULE_KEYS = (
    "name", "expr", "for", "keep_firing_for", "severity", "category", "title", "why",
    "actions", "evidence", "snippet", "techniques", "gain", "source", "bottleneck",
    "explains", "actions_for", "snippet_for", "ruled_out_by", "job_state",
)
GAIN_KEYS = ("method", "metric", "removable", "factor", "technique", "times", "rest_speedup",
             "samples", "also_removes", "note")
GAIN_METHODS = ("amdahl", "parallel", "workers", "worker_core", "offload", "quota", "fewer",
                "shrink", "no_sync", "document", "none")
SOURCE_KEYS = ("document", "section", "quote")
STATE_KEYS = ("id", "expr", "measured_by", "gpu_only", "leads_for", "last", "well_used")
TARGET_KEYS = ("metric", "low", "high", "text", "source")
#: The sections of a file this module reads (phases.py reads the others).
SECTIONS = ("rules", "states", "conditions", "targets")

#: Stands in for a condition that could not be read (never evaluated: the reader
#: raises before a rule set with problems is built).
_UNREADABLE = Condition("False", {})


@dataclass
class NamedCondition:
    """One entry of ``conditions:`` as written, and where."""

    name: str
    text: str
    reader: Reader
    line: int


@dataclass
class RulesRead:
    """What one rule file says (its rules and states replace the packaged ones by id)."""

    rules: list[Rule] = field(default_factory=list)
    states: list[StateSpec] = field(default_factory=list)


def read_conditions(r: Reader, doc: Located) -> list[NamedCondition]:
    """The ``conditions:`` map of a file: name -> expression text."""
    value = doc.get("conditions")
    if value is None:
        return []
    m = r.mapping(value, r.line(doc, "conditions"), "conditions")
    if m is None:
        return []
    out = []
    for name, text in m.items():
        line = r.line(m, name)
        if not name.isidentifier():
            r.report(line, f"conditions: '{name}' is not a name (letters, digits, _)")
        elif name in CATALOGUE or name in WORDS:
            r.report(line, f"conditions: '{name}' is a metric's name; name the condition apart")
        elif isinstance(text, bool) or not isinstance(text, (str, int, float)):
            r.report(line, f"conditions: '{name}' must be an expression, not {type(text).__name__}")
        else:
            out.append(NamedCondition(name, str(text), r, line))
    return out


def resolve_conditions(
    named: Sequence[NamedCondition], references: KnowledgeReferences
) -> dict[str, Condition]:
    """Every named condition written out over metrics only (later entries replace earlier).

    A name may use other names and the knowledge base's bands and targets; a
    circle of names is reported where it closes, and an entry that cannot be read
    is reported once, not again by each user of it.
    """
    latest = {c.name: c for c in named}
    written: dict[str, str] = {}
    resolved: dict[str, Condition] = {}
    visiting: list[str] = []
    failed: set[str] = set()

    def resolve(name: str) -> str | None:
        if name in written:
            return written[name]
        if name in failed:
            return None
        entry = latest[name]
        if name in visiting:
            circle = " -> ".join([*visiting[visiting.index(name):], name])
            entry.reader.report(entry.line, f"conditions: '{name}' refers to itself ({circle})")
            failed.add(name)
            return None
        visiting.append(name)
        try:
            uses = [n for n in names_in(entry.text, references.functions) if n in latest]
            parts = {n: resolve(n) for n in uses}
            if any(p is None for p in parts.values()):
                failed.add(name)
                return None
            condition = Condition(entry.text, CATALOGUE, cast(dict[str, str], parts), references)
        except ExpressionError as exc:
            entry.reader.report(entry.line, f"conditions: '{name}': {exc}")
            failed.add(name)
            return None
        finally:
            visiting.pop()
        written[name] = condition.expr
        resolved[name] = condition
        return condition.expr

    for name in latest:
        resolve(name)
    return resolved


@dataclass(frozen=True)
class Context:
    """What a rule file is read against: the named conditions, the documents, and the
    bands and targets a condition may name."""

    conditions: Mapping[str, Condition]
    documents: KnowledgeDocuments
    references: KnowledgeReferences

    @property
    def named(self) -> dict[str, str]:
        return {name: c.expr for name, c in self.conditions.items()}


class RulesReader(Reader):
    """The schema reader with what rule files add: conditions, templates, metrics."""

    def __init__(self, file: str, context: Context) -> None:
        super().__init__(file)
        self.use(context)

    def use(self, context: Context) -> None:
        """Read from now on against ``context`` (once every file's conditions are known)."""
        self.context = context
        self._named = context.named

    def condition(self, m: Located, key: str, what: str) -> Condition:
        text = self.text(m, key, what)
        if not text:
            return _UNREADABLE
        try:
            return Condition(text, CATALOGUE, self._named, self.context.references)
        except ExpressionError as exc:
            self.report(self.line(m, key), f"{what}: {exc}")
            return _UNREADABLE

    def templates(self, at: object, what: str, *texts: str) -> None:
        for text in texts:
            try:
                unknown = sorted(
                    f for f in check_template(text) if f not in CATALOGUE and f not in WORDS
                )
            except ExpressionError as exc:
                self.report(at, f"{what}: {exc}")
                continue
            if unknown:
                self.report(at, f"{what}: unknown metric {', '.join(unknown)} in text '{text}'")

    def metric(self, m: Located, key: str, what: str, default: str | None = None) -> str:
        name = m.get(key, default)
        if key not in m and default is None:
            self.report(m, f"{what}: missing key '{key}'")
            return ""
        if not isinstance(name, str) or name not in CATALOGUE:
            self.report(self.line(m, key), f"{what}: unknown metric {name} in gain")
            return ""
        return name

    def metrics(self, m: Located, key: str, what: str) -> tuple[str, ...]:
        """A list of metric names (one name counts as a list of one); absent: none."""
        names = self.text_list(m, key, what, noun="metric names")
        unknown = [name for name in names if name not in CATALOGUE]
        if unknown:
            self.report(self.line(m, key), f"{what}: unknown metric {', '.join(unknown)} in gain")
            return ()
        return names

    def fraction(self, value: object) -> float | None:
        """A number from YAML (not a bool, not text), as a float; None otherwise."""
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        return float(value)


def _actions(
    r: RulesReader, value: Any, at: int, what: str
) -> tuple[tuple[str, ...], tuple[Condition | None, ...]]:
    """Actions: text, or ``{text: ..., when: condition}`` for one that applies only then."""
    if value is None or value == "":
        return (), ()
    if isinstance(value, str):
        return (value,), (None,)
    if not isinstance(value, LocatedList):
        r.report(at, f"{what}: 'actions' must be a list")
        return (), ()
    texts: list[str] = []
    whens: list[Condition | None] = []
    for item, line in zip(value, value.lines, strict=True):
        if isinstance(item, str):
            texts.append(item)
            whens.append(None)
        elif isinstance(item, Located):
            r.keys(item, f"{what} action", ("text", "when"))
            texts.append(r.text(item, "text", f"{what} action"))
            whens.append(r.condition(item, "when", f"{what} action"))
        else:
            r.report(line, f"{what}: each action must be text or {{text, when}}")
    return tuple(texts), tuple(whens)


def _by_framework(
    r: RulesReader, m: Located, key: str, what: str, parse: Callable[[Any, int], Any]
) -> dict[str, Any]:
    value = m.get(key)
    if value is None:
        return {}
    if not isinstance(value, Located):
        r.report(r.line(m, key),
                 f"{what}: '{key}' must map a framework ({', '.join(FRAMEWORKS)}) to text")
        return {}
    out = {}
    for name, item in value.items():
        if name not in FRAMEWORKS:
            r.report(r.line(value, name), f"{what}: unknown framework '{name}' in '{key}' "
                                          f"(one of {', '.join(FRAMEWORKS)})")
        else:
            out[name] = parse(item, r.line(value, name))
    return out


def _removable(r: RulesReader, spec: Located, what: str) -> tuple[float, float]:
    """``removable``: a fraction or ``[low, high]``, each a number in (0, 1]."""
    value = spec.get("removable", 1.0)
    pair = value if isinstance(value, list) and len(value) == 2 else [value, value]
    low, high = r.fraction(pair[0]), r.fraction(pair[1])
    if low is None or high is None:
        r.report(r.line(spec, "removable"),
                 f"{what}: 'removable' must be a fraction or [low, high]")
        return 1.0, 1.0
    if not (0 < low <= high <= 1):
        r.report(r.line(spec, "removable"),
                 f"{what}: 'removable' must lie in (0, 1] with low <= high")
    return low, high


def _gain(r: RulesReader, node: Located, what: str) -> GainSpec:
    spec = node.get("gain")
    if spec is None:
        return GainSpec("none")
    what = f"{what} gain"
    if not isinstance(spec, Located):
        r.report(r.line(node, "gain"), f"{what}: 'gain' must be a mapping with 'method'")
        return GainSpec("none")
    r.keys(spec, what, ("method",), GAIN_KEYS)
    method = spec.get("method")
    note = r.opt_text(spec, "note", what, empty=True) or ""
    if "method" in spec and method not in GAIN_METHODS:
        known = ", ".join(GAIN_METHODS[:-1]) + f" or {GAIN_METHODS[-1]}"
        r.report(r.line(spec, "method"), f"{what}: unknown gain method '{method}' ({known})")
        return GainSpec("none")
    if method in ("amdahl", "shrink"):
        return GainSpec(method, metric=r.metric(spec, "metric", what),
                        removable=_removable(r, spec, what), note=note,
                        samples=r.metric(spec, "samples", what) if "samples" in spec else None,
                        also_removes=r.metrics(spec, "also_removes", what))
    if method == "no_sync":
        return GainSpec("no_sync", note=note)
    if method == "parallel":
        return GainSpec("parallel", metric=r.metric(spec, "metric", what),
                        factor=r.metric(spec, "factor", what), note=note)
    if method == "quota":
        return GainSpec("quota", note=note)
    if method in ("workers", "worker_core"):
        return GainSpec(method, metric=r.metric(spec, "metric", what, "phase_data_wait"),
                        note=note)
    if method == "offload":
        return GainSpec("offload", metric=r.metric(spec, "metric", what), note=note)
    if method == "fewer":
        metric = r.metric(spec, "metric", what)
        times = r.fraction(spec.get("times"))
        if times is None or times <= 1:
            r.report(r.line(spec, "times"), f"{what}: 'times' must be a number above 1")
            times = 2.0
        rest = r.fraction(spec.get("rest_speedup", 1.0))
        if rest is None or not 1.0 <= rest <= 2.0:
            r.report(r.line(spec, "rest_speedup"),
                     f"{what}: 'rest_speedup' must be a number from 1 to 2")
            rest = 1.0
        return GainSpec("fewer", metric=metric, times=times, rest_speedup=rest, note=note)
    if method == "document":
        if "technique" not in spec:
            r.report(spec, f"{what}: missing key 'technique'")
        return GainSpec("document", technique=r.text(spec, "technique", what) or None,
                        note=note)
    return GainSpec(cast(EstimateMethod, "none"), note=note)


def _source(r: RulesReader, node: Located, what: str) -> dict[str, str]:
    """The rule's ``source``: document, section and quote, each a scalar (kept as text)."""
    source = node.get("source") or {}
    if not isinstance(source, dict) or "document" not in source:
        r.report(r.line(node, "source"),
                 f"{what}: 'source' must name the document (and section) the rule comes from")
        return {}
    assert isinstance(source, Located)
    r.keys(source, f"{what} source", (), SOURCE_KEYS)
    for key, value in source.items():
        if isinstance(value, (dict, list)):
            r.report(r.line(source, key), f"{what} source: '{key}' must be text, not "
                                          f"{'a mapping' if isinstance(value, dict) else 'a list'}")
    return {k: str(v) for k, v in source.items() if k in SOURCE_KEYS}


def _rule(r: RulesReader, node: Located, what: str) -> Rule:
    rule_id = r.text(node, "name", what)
    what = f"rule '{rule_id}'" if rule_id else what
    r.keys(node, what, ("name", "expr", "severity", "category", "title"), RULE_KEYS)
    title = r.text(node, "title", what)
    why = r.opt_text(node, "why", what, empty=True) or ""
    actions, actions_when = _actions(r, node.get("actions"), r.line(node, "actions"), what)
    r.templates(r.line(node, "title"), what, title)
    r.templates(r.line(node, "why"), what, why)
    r.templates(r.line(node, "actions"), what, *actions)
    parsed_for = _by_framework(r, node, "actions_for", what,
                               lambda v, at: _actions(r, v, at, what))
    for texts, _whens in parsed_for.values():
        r.templates(r.line(node, "actions_for"), what, *texts)

    def snippet_text(value: Any, at: int) -> str:
        if not isinstance(value, str):
            r.report(at, f"{what}: a snippet must be text, not "
                         f"{'a list' if isinstance(value, list) else type(value).__name__}")
            return ""
        return value

    evidence = r.text_list(node, "evidence", what, "strings")
    unknown = [m for m in evidence if m not in CATALOGUE]
    if unknown:
        r.report(r.line(node, "evidence"),
                 f"{what}: unknown metric {', '.join(unknown)} in evidence")
    return Rule(
        id=rule_id,
        condition=r.condition(node, "expr", what),
        for_s=r.duration(node, "for", what),
        keep_firing_for_s=r.duration(node, "keep_firing_for", what),
        severity=cast(Severity, r.choice(node, "severity", SEVERITIES, what)),
        category=cast(Category, r.choice(node, "category", CATEGORIES, what)),
        title=title,
        why=why,
        actions=actions,
        gain=_gain(r, node, what),
        source=_source(r, node, what),
        evidence=evidence,
        snippet=r.opt_text(node, "snippet", what, empty=True),
        techniques=r.text_list(node, "techniques", what, "strings"),
        bottleneck=r.flag(node, "bottleneck", what, True),
        job_state=r.flag(node, "job_state", what, False),
        file=node.file,
        line=node.line,
        explains=r.text_list(node, "explains", what, "strings"),
        ruled_out_by=r.text_list(node, "ruled_out_by", what, "strings"),
        actions_when=actions_when,
        actions_for={name: texts for name, (texts, _whens) in parsed_for.items()},
        actions_for_when={name: whens for name, (_texts, whens) in parsed_for.items()},
        snippet_for=_by_framework(r, node, "snippet_for", what, snippet_text),
    )


def _framework_condition(
    r: RulesReader, node: Located, what: str, row: PriorityState | None
) -> tuple[Condition, tuple[Threshold, ...]]:
    """The priority-framework row's own conditions (documents.yaml) on ``measured_by``.

    Said once, in the documents' terms ("GPU utilization 70-85%"): the row's
    thresholds name a key metric, and ``measured_by`` names the rule metric that
    measures it, as ``band(metric, row)`` does in a rule.
    """
    metric = r.text(node, "measured_by", what)
    if row is None or not metric:
        if row is None and metric:
            r.report(r.line(node, "id"), f"{what}: 'measured_by' takes the conditions of "
                                         "the priority framework's row of this id: there is none")
        return _UNREADABLE, ()
    try:
        return Condition(band_text(row, metric), CATALOGUE), row.conditions
    except ExpressionError as exc:
        r.report(r.line(node, "measured_by"), f"{what}: {exc}")
        return _UNREADABLE, ()


def _state(r: RulesReader, node: Located, what: str) -> StateSpec:
    state_id = r.text(node, "id", what)
    what = f"state '{state_id}'" if state_id else what
    r.keys(node, what, ("id",), STATE_KEYS)
    row = next((p for p in r.context.documents.priority_framework if p.id == state_id), None)
    thresholds: tuple[Threshold, ...] = ()
    if "expr" in node and "measured_by" in node:
        r.report(node, f"{what}: give 'expr' or 'measured_by' (the documents' own conditions), "
                       "not both")
        condition = _UNREADABLE
    elif "expr" not in node and "measured_by" not in node:
        condition = _UNREADABLE  # a change to an earlier file's row (the loader checks)
    elif "expr" in node:
        condition = r.condition(node, "expr", what)
    else:
        condition, thresholds = _framework_condition(r, node, what, row)
    leads_for = r.text_list(node, "leads_for", what, "categories")
    for category in leads_for:
        if category not in CATEGORIES:
            r.report(r.line(node, "leads_for"), f"{what}: unknown category '{category}' in "
                                                f"leads_for (one of {', '.join(CATEGORIES)})")
    well_used = r.flag(node, "well_used", what, False)
    if well_used and not thresholds:
        r.report(r.line(node, "well_used"),
                 f"{what}: 'well_used' needs 'measured_by' (the documents' thresholds)")
    return StateSpec(
        id=state_id, condition=condition, file=node.file, line=node.line,
        gpu_only=r.flag(node, "gpu_only", what, False),
        leads_for=tuple(cast(Category, c) for c in leads_for if c in CATEGORIES),
        last=r.flag(node, "last", what, False),
        thresholds=thresholds,
        well_used=well_used,
        given=frozenset(k for k in node if k in STATE_KEYS),
    )


def _target(r: Reader, node: Located, what: str) -> tuple[str, Target]:
    r.keys(node, what, ("metric", "text"), TARGET_KEYS)
    metric = r.text(node, "metric", what)
    if metric and metric not in CATALOGUE and f"{metric}_mean" not in CATALOGUE:
        r.report(r.line(node, "metric"), f"{what}: unknown metric {metric}")
    low, high = r.low_high(node, what)
    if low is None and high is None:
        r.report(node, f"{what}: a target needs low and/or high")
    source = r.opt_text(node, "source", what) or "aitop default"
    return metric, Target(low, high, r.text(node, "text", what), source)


def read_targets(r: Reader, doc: Located) -> dict[str, Target]:
    """The ``targets:`` of one file (read before any condition, which may name them)."""
    out: dict[str, Target] = {}
    for m, label in r.items(doc, "targets", ""):
        name, target = _target(r, m, label)
        out[name] = target
    return out


def read_rule_sections(r: RulesReader, doc: Located) -> RulesRead:
    """The rules and states of one file (its conditions and targets are read apart)."""
    out = RulesRead()
    out.rules = [_rule(r, m, label) for m, label in r.items(doc, "rules", "")]
    seen: set[str] = set()
    for rule in out.rules:
        if rule.id in seen:
            r.report(rule.line, f"duplicate rule name '{rule.id}'")
        seen.add(rule.id)
    out.states = [_state(r, m, label) for m, label in r.items(doc, "states", "")]
    return out
