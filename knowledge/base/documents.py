"""The two source documents as typed data: what ``data/documents.yaml`` encodes.

aitop only says what its two source documents say: every finding cites a passage.
``data/documents.yaml`` encodes those documents (diagnosis checklist, bottleneck
table, priority framework, key metrics, techniques with their claimed effects, and
principles) as the frozen dataclasses below; ``documents_reader`` checks the file
and builds them, ``passages`` finds quotes in the documents' own text.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from .findings import Citation

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
