"""The two source documents as typed, validated data.

aitop only says what its two source documents say: every finding cites a passage.
``data/documents.yaml`` encodes those documents (diagnosis checklist, bottleneck
table, priority framework, key metrics, techniques with their claimed effects, and
principles), and this module turns it into frozen dataclasses.

Why the loader is strict: the knowledge base is edited by hand, and a typo in it
(a priority naming a technique that does not exist, a threshold written as ``70%``
instead of ``70``, a misspelt key) would otherwise silently drop advice from the
UI. So loading rejects unknown keys, unknown categories, dangling ids and
malformed numbers, and says where: every :class:`KnowledgeError` carries the file
name and line number taken from YAML's node marks.

Why ``yaml.SafeLoader`` only: the file is data, never code. The loader below is a
``SafeLoader`` subclass that only adds line bookkeeping, so tags such as
``!!python/object`` are rejected exactly as ``yaml.safe_load`` rejects them.
"""

from __future__ import annotations

import functools
import importlib.resources
import math
import re
from collections.abc import Iterator
from collections.abc import Set as AbstractSet
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from .model import CATEGORIES, Citation

# One error type for every knowledge-base file (rules, phases, documents), so the
# CLI reports them all the same way: ``file:line: problem``.
from .yamlio import KnowledgeError, Located, LocatedList, kind_of, load_yaml_text

__all__ = [
    "APPLIES_TO",
    "CHANGES",
    "KINDS",
    "OPS",
    "Action",
    "BottleneckRow",
    "Bounds",
    "Document",
    "Effect",
    "KnowledgeDocuments",
    "KnowledgeError",
    "MetricTarget",
    "Principle",
    "Priority",
    "PriorityState",
    "Range",
    "Setting",
    "SourceRef",
    "Symptom",
    "Technique",
    "Threshold",
    "find_passage",
    "headings",
    "load_documents",
    "normalize",
    "sections_containing",
    "source_text",
    "verify_sources",
]

#: What a technique can be used for.
APPLIES_TO: tuple[str, ...] = ("training", "inference")
#: ``group`` techniques are the documents' umbrella terms ("Storage optimization").
KINDS: tuple[str, ...] = ("optimization", "diagnostic", "hardware", "group")
#: Comparison operators of a threshold.
OPS: tuple[str, ...] = ("<", "<=", ">", ">=")
#: How an effect changes its quantity; see the schema comment in documents.yaml.
CHANGES: tuple[str, ...] = ("+", "-", "*", "/", "->", ">", "<")
BOUND_KINDS: tuple[str, ...] = ("range", "trend", "near")
SNIPPET_LANGS: tuple[str, ...] = ("python", "bash", "text")

_PACKAGE = __package__ or "aitop.knowledge"

_DATA_FILE = "documents.yaml"




# --------------------------------------------------------------------------------
# Data model
# --------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class SourceRef:
    """A verbatim passage of one document and the heading it sits under."""

    document: str
    section: str
    quote: str

    def as_source(self) -> Citation:
        """The same reference as the diagnosis model's :class:`Citation`."""
        return Citation(document=self.document, section=self.section, quote=self.quote)


@dataclass(frozen=True, slots=True)
class Document:
    """One source document: id, title, and its file under ``knowledge/sources/``."""

    id: str
    title: str
    file: str
    source: SourceRef


@dataclass(frozen=True, slots=True)
class Threshold:
    """A numeric condition on a metric, as a document states it (``GPU util < 70``).

    ``value_high`` is set only where the document gives a fuzzy range ("below
    70-80%"): the threshold lies somewhere between ``value`` and ``value_high``.
    """

    metric: str
    op: str
    value: float
    unit: str
    value_high: float | None = None

    def holds(self, x: float, *, lenient: bool = False) -> bool:
        """Whether ``x`` satisfies the threshold; ``lenient`` uses the far end of a fuzzy range."""
        edge = self.value_high if (lenient and self.value_high is not None) else self.value
        if self.op == "<":
            return x < edge
        if self.op == "<=":
            return x <= edge
        if self.op == ">":
            return x > edge
        return x >= edge


@dataclass(frozen=True, slots=True)
class Action:
    """A recommended action: the document's words, and the techniques they mean."""

    text: str
    techniques: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Symptom:
    """One entry of the diagnosis checklist (diagnose)."""

    id: str
    symptom: str
    culprit: str
    category: str
    thresholds: tuple[Threshold, ...]
    signals: tuple[str, ...]
    actions: tuple[Action, ...]
    source: SourceRef


@dataclass(frozen=True, slots=True)
class BottleneckRow:
    """One row of the bottleneck-location table (diagnose)."""

    id: str
    location: str
    primary_symptom: str
    key_fix: str
    key_fixes: tuple[Action, ...]
    category: str
    source: SourceRef


@dataclass(frozen=True, slots=True)
class Priority:
    """One cell of the priority framework: its text and the technique it names."""

    technique: str
    text: str


@dataclass(frozen=True, slots=True)
class PriorityState:
    """One "current state" row of the priority framework, priorities in order 1, 2, 3."""

    id: str
    state: str
    conditions: tuple[Threshold, ...]
    signals: tuple[str, ...]
    priorities: tuple[Priority, ...]
    source: SourceRef

    @property
    def technique_ids(self) -> tuple[str, ...]:
        """The priorities as technique ids, Priority 1 first."""
        return tuple(p.technique for p in self.priorities)


@dataclass(frozen=True, slots=True)
class Bounds:
    """Machine-readable form of a metric's target range.

    ``kind`` is ``range`` (``low``/``high``, either may be open), ``trend``
    (``trend``, e.g. ``stable_or_decreasing``) or ``near`` (close to ``of``).
    ``prefer`` names a device-reported limit that replaces the document's number
    when available (the GPU's own slowdown temperature).
    """

    kind: str
    low: float | None = None
    high: float | None = None
    unit: str | None = None
    of: str | None = None
    during: str | None = None
    trend: str | None = None
    prefer: str | None = None

    def contains(self, x: float) -> bool | None:
        """Whether ``x`` is within a ``range``; ``None`` for kinds that need more context."""
        if self.kind != "range":
            return None
        if self.low is not None and x < self.low:
            return False
        return not (self.high is not None and x > self.high)


@dataclass(frozen=True, slots=True)
class MetricTarget:
    """One row of the key-metrics table (optimize)."""

    id: str
    metric: str
    tool: str
    tools: tuple[str, ...]
    target: str
    bounds: Bounds
    tells: str
    source: SourceRef


@dataclass(frozen=True, slots=True)
class Range:
    """A ``low..high`` pair (either end may be open)."""

    low: float | None
    high: float | None


@dataclass(frozen=True, slots=True)
class Effect:
    """A number a document claims for a technique (see ``change`` in documents.yaml)."""

    quantity: str
    change: str
    low: float | None
    high: float | None
    unit: str
    source: SourceRef
    before: Range | None = None
    hedge: str | None = None
    condition: str | None = None


@dataclass(frozen=True, slots=True)
class Setting:
    """A value a document recommends (``num_workers`` 2-4x per GPU, scheduler none...)."""

    name: str
    source: SourceRef
    low: float | None = None
    high: float | None = None
    unit: str | None = None
    per: str | None = None
    values: tuple[str, ...] = ()
    condition: str | None = None


@dataclass(frozen=True, slots=True)
class Technique:
    """A technique either document names, with what it claims and how to apply it."""

    id: str
    name: str
    kind: str
    category: str
    applies_to: tuple[str, ...]
    summary: str
    how: str
    source: SourceRef
    snippet: str | None = None
    snippet_lang: str | None = None
    effects: tuple[Effect, ...] = ()
    settings: tuple[Setting, ...] = ()
    includes: tuple[str, ...] = ()
    also_in: tuple[SourceRef, ...] = ()

    @property
    def sources(self) -> tuple[SourceRef, ...]:
        """The primary source followed by every further one."""
        return (self.source, *self.also_in)


@dataclass(frozen=True, slots=True)
class Principle:
    """Something else the documents assert that a diagnosis should respect."""

    id: str
    statement: str
    source: SourceRef
    thresholds: tuple[Threshold, ...] = ()
    also_in: tuple[SourceRef, ...] = ()


@dataclass(frozen=True, slots=True)
class KnowledgeDocuments:
    """Everything encoded from the two documents, as loaded from one file."""

    path: str
    version: int
    documents: tuple[Document, ...]
    symptoms: tuple[Symptom, ...]
    bottlenecks: tuple[BottleneckRow, ...]
    priority_framework: tuple[PriorityState, ...]
    metrics: tuple[MetricTarget, ...]
    techniques: tuple[Technique, ...]
    principles: tuple[Principle, ...]

    def document(self, id: str) -> Document:
        """The document with this id (``KeyError`` if none)."""
        return _by_id(self.documents, id, "document")

    def technique(self, id: str) -> Technique:
        """The technique with this id (``KeyError`` if none)."""
        return _by_id(self.techniques, id, "technique")

    def metric(self, id: str) -> MetricTarget:
        """The key metric with this id (``KeyError`` if none)."""
        return _by_id(self.metrics, id, "metric")

    def state(self, id: str) -> PriorityState:
        """The priority-framework state with this id (``KeyError`` if none)."""
        return _by_id(self.priority_framework, id, "priority state")

    def source_refs(self) -> Iterator[tuple[str, SourceRef]]:
        """Every source reference in the file, labelled by where it is used."""
        for d in self.documents:
            yield f"documents.{d.id}", d.source
        for s in self.symptoms:
            yield f"symptoms.{s.id}", s.source
        for b in self.bottlenecks:
            yield f"bottlenecks.{b.id}", b.source
        for p in self.priority_framework:
            yield f"priority_framework.{p.id}", p.source
        for m in self.metrics:
            yield f"metrics.{m.id}", m.source
        for t in self.techniques:
            yield f"techniques.{t.id}", t.source
            for i, ref in enumerate(t.also_in):
                yield f"techniques.{t.id}.also_in[{i}]", ref
            for i, e in enumerate(t.effects):
                yield f"techniques.{t.id}.effects[{i}]", e.source
            for i, st in enumerate(t.settings):
                yield f"techniques.{t.id}.settings[{i}]", st.source
        for pr in self.principles:
            yield f"principles.{pr.id}", pr.source
            for i, ref in enumerate(pr.also_in):
                yield f"principles.{pr.id}.also_in[{i}]", ref


def _by_id(items: tuple[Any, ...], id: str, what: str) -> Any:
    for item in items:
        if item.id == id:
            return item
    raise KeyError(f"no {what} {id!r}")


# --------------------------------------------------------------------------------
# YAML with line numbers (SafeLoader only)
# --------------------------------------------------------------------------------


# The line-annotated YAML tree comes from the one loader all knowledge files share.
_Map = Located
_Seq = LocatedList


def _parse(text: str, file: str) -> Any:
    return load_yaml_text(text, file)


# --------------------------------------------------------------------------------
# Validation
# --------------------------------------------------------------------------------

_ID = re.compile(r"^[a-z][a-z0-9_]*$")
_SOURCE_KEYS = frozenset({"document", "section", "quote"})


class _Reader:
    """Turns the line-annotated tree into dataclasses, failing with file:line."""

    def __init__(self, file: str) -> None:
        self.file = file
        # (technique id, line, where) and (metric id, line, where) checked at the end,
        # because priorities may name techniques defined further down the file.
        self.technique_refs: list[tuple[str, int, str]] = []
        self.metric_refs: list[tuple[str, int, str]] = []
        self.document_refs: list[tuple[str, int]] = []

    def fail(self, line: int, message: str) -> NoReturn:
        raise KnowledgeError(message, self.file, line)

    # -- structure ---------------------------------------------------------------
    def mapping(self, value: Any, line: int, what: str) -> _Map:
        if not isinstance(value, _Map):
            self.fail(line, f"{what}: expected a mapping, got {kind_of(value)}")
        return value

    def sequence(self, value: Any, line: int, what: str) -> _Seq:
        if not isinstance(value, _Seq):
            self.fail(line, f"{what}: expected a list, got {kind_of(value)}")
        return value

    def keys(
        self,
        m: _Map,
        what: str,
        required: AbstractSet[str],
        optional: AbstractSet[str] = frozenset(),
    ) -> None:
        missing = sorted(required - m.keys())
        if missing:
            self.fail(m.line, f"{what}: missing key {missing[0]!r}")
        unknown = sorted(m.keys() - required - optional)
        if unknown:
            self.fail(m.lines[unknown[0]], f"{what}: unknown key {unknown[0]!r}")

    def line(self, m: _Map, key: str) -> int:
        return m.lines.get(key, m.line)

    # -- scalars -----------------------------------------------------------------
    def text(self, m: _Map, key: str, what: str) -> str:
        value = m[key]
        if not isinstance(value, str) or not value.strip():
            self.fail(self.line(m, key), f"{what}.{key}: expected non-empty text, got {value!r}")
        return value

    def opt_text(self, m: _Map, key: str, what: str) -> str | None:
        if m.get(key) is None:
            return None
        return self.text(m, key, what)

    def number(self, value: Any, line: int, what: str) -> float:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.fail(line, f"{what}: malformed number {value!r} (write a bare number, e.g. 70)")
        if not math.isfinite(value):
            self.fail(line, f"{what}: malformed number {value!r} (must be finite)")
        return float(value)

    def opt_number(self, m: _Map, key: str, what: str) -> float | None:
        if m.get(key) is None:
            return None
        return self.number(m[key], self.line(m, key), f"{what}.{key}")

    def choice(self, m: _Map, key: str, allowed: tuple[str, ...], what: str) -> str:
        value = m[key]
        if value not in allowed:
            label = "category" if key == "category" else key
            self.fail(
                self.line(m, key),
                f"{what}: unknown {label} {value!r} (expected one of {', '.join(allowed)})",
            )
        return str(value)

    def ident(self, m: _Map, key: str, what: str) -> str:
        value = self.text(m, key, what)
        if not _ID.match(value):
            self.fail(self.line(m, key), f"{what}.{key}: {value!r} is not a snake_case id")
        return value

    def text_list(self, m: _Map, key: str, what: str) -> tuple[str, ...]:
        if m.get(key) is None:
            return ()
        seq = self.sequence(m[key], self.line(m, key), f"{what}.{key}")
        out: list[str] = []
        for item, line in zip(seq, seq.lines, strict=True):
            if isinstance(item, bool) or not isinstance(item, (str, int, float)):
                self.fail(line, f"{what}.{key}: expected text items, got {kind_of(item)}")
            out.append(str(item))
        return tuple(out)

    def items(self, m: _Map, key: str, what: str) -> Iterator[tuple[_Map, str]]:
        """The mappings of a list-of-mappings value, each with a label for messages."""
        if m.get(key) is None:
            return
        seq = self.sequence(m[key], self.line(m, key), f"{what}.{key}")
        for i, (item, line) in enumerate(zip(seq, seq.lines, strict=True)):
            label = f"{what}.{key}[{i}]"
            yield self.mapping(item, line, label), label

    def technique_ids(self, m: _Map, key: str, what: str) -> tuple[str, ...]:
        ids = self.text_list(m, key, what)
        seq = m.get(key)
        lines = seq.lines if isinstance(seq, _Seq) else [self.line(m, key)] * len(ids)
        for tid, line in zip(ids, lines, strict=True):
            self.technique_refs.append((tid, line, f"{what}.{key}"))
        return ids

    # -- composite ---------------------------------------------------------------
    def source(self, value: Any, line: int, what: str) -> SourceRef:
        m = self.mapping(value, line, what)
        self.keys(m, what, set(_SOURCE_KEYS))
        document = self.text(m, "document", what)
        self.document_refs.append((document, self.line(m, "document")))
        return SourceRef(
            document=document,
            section=self.text(m, "section", what),
            quote=self.text(m, "quote", what),
        )

    def sources(self, m: _Map, key: str, what: str) -> tuple[SourceRef, ...]:
        if m.get(key) is None:
            return ()
        seq = self.sequence(m[key], self.line(m, key), f"{what}.{key}")
        return tuple(
            self.source(item, line, f"{what}.{key}[{i}]")
            for i, (item, line) in enumerate(zip(seq, seq.lines, strict=True))
        )

    def thresholds(self, m: _Map, key: str, what: str) -> tuple[Threshold, ...]:
        out: list[Threshold] = []
        for t, label in self.items(m, key, what):
            self.keys(t, label, {"metric", "op", "value", "unit"}, {"value_high"})
            metric = self.text(t, "metric", label)
            self.metric_refs.append((metric, self.line(t, "metric"), label))
            value = self.number(t["value"], self.line(t, "value"), f"{label}.value")
            value_high = self.opt_number(t, "value_high", label)
            if value_high is not None and value_high < value:
                self.fail(self.line(t, "value_high"), f"{label}: value_high < value")
            out.append(
                Threshold(
                    metric=metric,
                    op=self.choice(t, "op", OPS, label),
                    value=value,
                    unit=self.text(t, "unit", label),
                    value_high=value_high,
                )
            )
        return tuple(out)

    def actions(self, m: _Map, key: str, what: str) -> tuple[Action, ...]:
        out: list[Action] = []
        for a, label in self.items(m, key, what):
            self.keys(a, label, {"text", "techniques"})
            ids = self.technique_ids(a, "techniques", label)
            if not ids:
                self.fail(a.line, f"{label}: names no technique")
            out.append(Action(text=self.text(a, "text", label), techniques=ids))
        if not out:
            self.fail(self.line(m, key), f"{what}.{key}: must not be empty")
        return tuple(out)

    def low_high(self, m: _Map, what: str) -> tuple[float | None, float | None]:
        low = self.opt_number(m, "low", what)
        high = self.opt_number(m, "high", what)
        if low is not None and high is not None and low > high:
            self.fail(self.line(m, "low"), f"{what}: low {low:g} > high {high:g}")
        return low, high


def _document(r: _Reader, m: _Map, what: str) -> Document:
    r.keys(m, what, {"id", "title", "file", "source"})
    return Document(
        id=r.ident(m, "id", what),
        title=r.text(m, "title", what),
        file=r.text(m, "file", what),
        source=r.source(m["source"], r.line(m, "source"), f"{what}.source"),
    )


def _symptom(r: _Reader, m: _Map, what: str) -> Symptom:
    r.keys(
        m,
        what,
        {"id", "symptom", "culprit", "category", "actions", "source"},
        {"thresholds", "signals"},
    )
    return Symptom(
        id=r.ident(m, "id", what),
        symptom=r.text(m, "symptom", what),
        culprit=r.text(m, "culprit", what),
        category=r.choice(m, "category", CATEGORIES, what),
        thresholds=r.thresholds(m, "thresholds", what),
        signals=r.text_list(m, "signals", what),
        actions=r.actions(m, "actions", what),
        source=r.source(m["source"], r.line(m, "source"), f"{what}.source"),
    )


def _bottleneck(r: _Reader, m: _Map, what: str) -> BottleneckRow:
    r.keys(
        m, what, {"id", "location", "primary_symptom", "key_fix", "key_fixes", "category", "source"}
    )
    return BottleneckRow(
        id=r.ident(m, "id", what),
        location=r.text(m, "location", what),
        primary_symptom=r.text(m, "primary_symptom", what),
        key_fix=r.text(m, "key_fix", what),
        key_fixes=r.actions(m, "key_fixes", what),
        category=r.choice(m, "category", CATEGORIES, what),
        source=r.source(m["source"], r.line(m, "source"), f"{what}.source"),
    )


def _priority_state(r: _Reader, m: _Map, what: str) -> PriorityState:
    r.keys(m, what, {"id", "state", "priorities", "source"}, {"conditions", "signals"})
    priorities: list[Priority] = []
    for p, label in r.items(m, "priorities", what):
        r.keys(p, label, {"technique", "text"})
        tid = r.text(p, "technique", label)
        r.technique_refs.append((tid, r.line(p, "technique"), label))
        priorities.append(Priority(technique=tid, text=r.text(p, "text", label)))
    if len(priorities) != 3:
        r.fail(r.line(m, "priorities"), f"{what}: expected 3 priorities, got {len(priorities)}")
    return PriorityState(
        id=r.ident(m, "id", what),
        state=r.text(m, "state", what),
        conditions=r.thresholds(m, "conditions", what),
        signals=r.text_list(m, "signals", what),
        priorities=tuple(priorities),
        source=r.source(m["source"], r.line(m, "source"), f"{what}.source"),
    )


def _bounds(r: _Reader, value: Any, line: int, what: str) -> Bounds:
    m = r.mapping(value, line, what)
    r.keys(m, what, {"kind"}, {"low", "high", "unit", "of", "during", "trend", "prefer"})
    kind = r.choice(m, "kind", BOUND_KINDS, what)
    low, high = r.low_high(m, what)
    bounds = Bounds(
        kind=kind,
        low=low,
        high=high,
        unit=r.opt_text(m, "unit", what),
        of=r.opt_text(m, "of", what),
        during=r.opt_text(m, "during", what),
        trend=r.opt_text(m, "trend", what),
        prefer=r.opt_text(m, "prefer", what),
    )
    if kind == "range" and ((low is None and high is None) or bounds.unit is None):
        r.fail(m.line, f"{what}: a range needs low and/or high, and a unit")
    if kind == "trend" and bounds.trend is None:
        r.fail(m.line, f"{what}: a trend needs 'trend'")
    if kind == "near" and bounds.of is None:
        r.fail(m.line, f"{what}: 'near' needs 'of' (what the value should be near)")
    return bounds


def _metric(r: _Reader, m: _Map, what: str) -> MetricTarget:
    r.keys(m, what, {"id", "metric", "tool", "tools", "target", "bounds", "tells", "source"})
    tools = r.text_list(m, "tools", what)
    if not tools:
        r.fail(r.line(m, "tools"), f"{what}.tools: must not be empty")
    return MetricTarget(
        id=r.ident(m, "id", what),
        metric=r.text(m, "metric", what),
        tool=r.text(m, "tool", what),
        tools=tools,
        target=r.text(m, "target", what),
        bounds=_bounds(r, m["bounds"], r.line(m, "bounds"), f"{what}.bounds"),
        tells=r.text(m, "tells", what),
        source=r.source(m["source"], r.line(m, "source"), f"{what}.source"),
    )


def _effect(r: _Reader, m: _Map, what: str) -> Effect:
    r.keys(
        m,
        what,
        {"quantity", "change", "unit", "source"},
        {"low", "high", "before", "hedge", "condition"},
    )
    change = r.choice(m, "change", CHANGES, what)
    low, high = r.low_high(m, what)
    if low is None and high is None:
        r.fail(m.line, f"{what}: an effect needs a number (low and/or high)")
    if change == ">" and low is None:
        r.fail(m.line, f"{what}: change '>' needs low")
    if change == "<" and high is None:
        r.fail(m.line, f"{what}: change '<' needs high")
    before: Range | None = None
    if m.get("before") is not None:
        b = r.mapping(m["before"], r.line(m, "before"), f"{what}.before")
        r.keys(b, f"{what}.before", set(), {"low", "high"})
        before = Range(*r.low_high(b, f"{what}.before"))
        if before.low is None and before.high is None:
            r.fail(b.line, f"{what}.before: needs low and/or high")
    if (change == "->") != (before is not None):
        r.fail(m.line, f"{what}: 'before' goes with change '->' and only with it")
    return Effect(
        quantity=r.ident(m, "quantity", what),
        change=change,
        low=low,
        high=high,
        unit=r.text(m, "unit", what),
        before=before,
        hedge=r.opt_text(m, "hedge", what),
        condition=r.opt_text(m, "condition", what),
        source=r.source(m["source"], r.line(m, "source"), f"{what}.source"),
    )


def _setting(r: _Reader, m: _Map, what: str) -> Setting:
    r.keys(m, what, {"name", "source"}, {"low", "high", "unit", "per", "values", "condition"})
    low, high = r.low_high(m, what)
    values = r.text_list(m, "values", what)
    if low is None and high is None and not values:
        r.fail(m.line, f"{what}: a setting needs low/high or values")
    return Setting(
        name=r.text(m, "name", what),
        low=low,
        high=high,
        unit=r.opt_text(m, "unit", what),
        per=r.opt_text(m, "per", what),
        values=values,
        condition=r.opt_text(m, "condition", what),
        source=r.source(m["source"], r.line(m, "source"), f"{what}.source"),
    )


def _technique(r: _Reader, m: _Map, what: str) -> Technique:
    r.keys(
        m,
        what,
        {"id", "name", "kind", "category", "applies_to", "summary", "how", "source"},
        {"snippet", "snippet_lang", "effects", "settings", "includes", "also_in"},
    )
    applies_to = r.text_list(m, "applies_to", what)
    if not applies_to:
        r.fail(r.line(m, "applies_to"), f"{what}.applies_to: must not be empty")
    for value, line in zip(applies_to, m["applies_to"].lines, strict=True):
        if value not in APPLIES_TO:
            r.fail(
                line, f"{what}.applies_to: unknown value {value!r} (expected training|inference)"
            )
    kind = r.choice(m, "kind", KINDS, what)
    includes = r.technique_ids(m, "includes", what)
    if kind == "group" and not includes:
        r.fail(m.line, f"{what}: a group must list the techniques it includes")
    snippet = r.opt_text(m, "snippet", what)
    snippet_lang = None
    if m.get("snippet_lang") is not None:
        snippet_lang = r.choice(m, "snippet_lang", SNIPPET_LANGS, what)
    if (snippet is None) != (snippet_lang is None):
        r.fail(m.line, f"{what}: snippet and snippet_lang go together")
    return Technique(
        id=r.ident(m, "id", what),
        name=r.text(m, "name", what),
        kind=kind,
        category=r.choice(m, "category", CATEGORIES, what),
        applies_to=applies_to,
        summary=r.text(m, "summary", what),
        how=r.text(m, "how", what),
        snippet=snippet,
        snippet_lang=snippet_lang,
        effects=tuple(_effect(r, e, label) for e, label in r.items(m, "effects", what)),
        settings=tuple(_setting(r, s, label) for s, label in r.items(m, "settings", what)),
        includes=includes,
        source=r.source(m["source"], r.line(m, "source"), f"{what}.source"),
        also_in=r.sources(m, "also_in", what),
    )


def _principle(r: _Reader, m: _Map, what: str) -> Principle:
    r.keys(m, what, {"id", "statement", "source"}, {"thresholds", "also_in"})
    return Principle(
        id=r.ident(m, "id", what),
        statement=r.text(m, "statement", what),
        thresholds=r.thresholds(m, "thresholds", what),
        source=r.source(m["source"], r.line(m, "source"), f"{what}.source"),
        also_in=r.sources(m, "also_in", what),
    )


_SECTIONS = (
    "documents",
    "symptoms",
    "bottlenecks",
    "priority_framework",
    "metrics",
    "techniques",
    "principles",
)


def _build(tree: Any, file: str) -> KnowledgeDocuments:
    r = _Reader(file)
    root = r.mapping(tree, 1, "top level")
    r.keys(root, "top level", {"version", *_SECTIONS})
    version = r.number(root["version"], r.line(root, "version"), "version")
    if version != 1:
        r.fail(r.line(root, "version"), f"unsupported version {version:g} (this loader reads 1)")

    def section(name: str, build: Any) -> tuple[Any, ...]:
        items = tuple(
            build(r, m, f"{name}[{i}]") for i, (m, _) in enumerate(r.items(root, name, name))
        )
        if not items:
            r.fail(r.line(root, name), f"{name}: must not be empty")
        # Ids must be unique within a section: they are how everything refers to items.
        seen: dict[str, int] = {}
        seq = root[name]
        for item, item_map in zip(items, seq, strict=True):
            line = item_map.lines.get("id", item_map.line)
            if item.id in seen:
                r.fail(line, f"{name}: duplicate id {item.id!r} (first on line {seen[item.id]})")
            seen[item.id] = line
        return items

    kd = KnowledgeDocuments(
        path=file,
        version=int(version),
        documents=section("documents", _document),
        symptoms=section("symptoms", _symptom),
        bottlenecks=section("bottlenecks", _bottleneck),
        priority_framework=section("priority_framework", _priority_state),
        metrics=section("metrics", _metric),
        techniques=section("techniques", _technique),
        principles=section("principles", _principle),
    )

    documents = {d.id for d in kd.documents}
    for doc, line in r.document_refs:
        if doc not in documents:
            r.fail(line, f"source.document: unknown document {doc!r}")
    techniques = {t.id for t in kd.techniques}
    for tid, line, where in r.technique_refs:
        if tid not in techniques:
            r.fail(line, f"{where}: unknown technique {tid!r}")
    metrics = {m.id for m in kd.metrics}
    for mid, line, where in r.metric_refs:
        if mid not in metrics:
            r.fail(line, f"{where}: unknown metric {mid!r}")
    return kd


# --------------------------------------------------------------------------------
# Public API
# --------------------------------------------------------------------------------


def load_documents(path: Path | None = None) -> KnowledgeDocuments:
    """Load and validate the knowledge file (the packaged one when ``path`` is None).

    Raises :class:`KnowledgeError` (``file:line: problem``) on any structural
    error. The packaged file is parsed once per process; the result is immutable.
    """
    if path is None:
        return _load_packaged()
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise KnowledgeError(f"cannot read: {exc}", str(path), 0) from exc
    return _build(_parse(text, str(path)), str(path))


@functools.lru_cache(maxsize=1)
def _load_packaged() -> KnowledgeDocuments:
    resource = importlib.resources.files(_PACKAGE) / "data" / _DATA_FILE
    file = str(resource)
    return _build(_parse(resource.read_text(encoding="utf-8"), file), file)


def source_text(document_id: str, documents: KnowledgeDocuments | None = None) -> str:
    """The full text of a source document, read from the packaged ``sources/`` folder.

    ``KeyError`` for an unknown document id. (The ``sources/*.txt`` files must be
    listed in the package data for installed, non-editable copies.)
    """
    kd = documents if documents is not None else load_documents()
    file = kd.document(document_id).file
    return _read_source(file)


@functools.lru_cache(maxsize=8)
def _read_source(file: str) -> str:
    return (importlib.resources.files(_PACKAGE) / "sources" / file).read_text(encoding="utf-8")


def normalize(text: str) -> str:
    """Collapse every run of whitespace to one space: the documents' tables use tabs."""
    return " ".join(text.split())


def _is_heading(line: str) -> bool:
    """A heading is a short stand-alone line that is not a sentence, list item or table row.

    The documents are plain text, so their headings are recognised by shape:
    paragraphs end with '.', lead-ins ("Practical Memory Management Steps:") with
    ':', list items start with a bullet, and table rows contain tabs.
    """
    s = line.strip()
    return (
        bool(s)
        and "\t" not in line
        and not s.startswith("•")
        and s[-1] not in ".:"
        and len(s.split()) <= 15
    )


@functools.lru_cache(maxsize=8)
def _outline(text: str) -> tuple[str, tuple[tuple[int, str], ...]]:
    """The normalised text and (offset, heading) of every heading in it."""
    parts: list[str] = []
    marks: list[tuple[int, str]] = []
    offset = 0
    for line in text.splitlines():
        norm = normalize(line)
        if not norm:
            continue
        if _is_heading(line):
            marks.append((offset, norm))
        parts.append(norm)
        offset += len(norm) + 1
    return " ".join(parts), tuple(marks)


def headings(document_id: str, documents: KnowledgeDocuments | None = None) -> tuple[str, ...]:
    """The headings of a document, in order (what a ``source.section`` may be)."""
    return tuple(h for _, h in _outline(source_text(document_id, documents))[1])


def _section_at(marks: tuple[tuple[int, str], ...], offset: int) -> str:
    section = ""
    for start, heading in marks:
        if start > offset:
            break
        section = heading
    return section


def sections_containing(
    document_id: str, quote: str, documents: KnowledgeDocuments | None = None
) -> tuple[str, ...]:
    """Every section of a document in which ``quote`` occurs (whitespace-normalised)."""
    norm_text, marks = _outline(source_text(document_id, documents))
    needle = normalize(quote)
    if not needle:
        return ()
    found: list[str] = []
    start = norm_text.find(needle)
    while start != -1:
        section = _section_at(marks, start)
        if section not in found:
            found.append(section)
        start = norm_text.find(needle, start + 1)
    return tuple(found)


def find_passage(quote: str, documents: KnowledgeDocuments | None = None) -> tuple[str, str] | None:
    """``(document id, section)`` of the first place ``quote`` occurs, or ``None``.

    For the UI's "source passage" display: given a quote, say where it comes from.
    """
    kd = documents if documents is not None else load_documents()
    for doc in kd.documents:
        sections = sections_containing(doc.id, quote, kd)
        if sections:
            return doc.id, sections[0]
    return None


def verify_sources(documents: KnowledgeDocuments | None = None) -> list[str]:
    """Problems with the file's citations: quotes not verbatim, or under another heading.

    Kept out of :func:`load_documents` so that loading does not depend on the source
    texts; tests and CI call this to keep every citation honest.
    """
    kd = documents if documents is not None else load_documents()
    problems: list[str] = []
    for where, ref in kd.source_refs():
        sections = sections_containing(ref.document, ref.quote, kd)
        if not sections:
            problems.append(f"{where}: quote is not verbatim in {ref.document}: {ref.quote!r}")
        elif ref.section not in sections:
            problems.append(
                f"{where}: quote is under {' / '.join(map(repr, sections))}, not {ref.section!r}"
            )
    return problems
