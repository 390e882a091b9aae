"""Reading ``documents.yaml`` into the documents' dataclasses, every problem at its line.

Why strict: the knowledge base is edited by hand, and a typo in it (a priority
naming a technique that does not exist, a threshold written as ``70%`` instead of
``70``, a misspelt key) would otherwise silently drop advice from the UI. So the
reader rejects unknown keys, unknown categories, dangling ids and malformed
numbers, and says where (``schema.Reader``: every problem, each with file:line).
The file is data, never code: it is parsed with the safe loader of ``yamlio``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..base.documents import (
    APPLIES_TO,
    BOUND_KINDS,
    CHANGES,
    KINDS,
    OPS,
    SNIPPET_LANGS,
    Action,
    BottleneckRow,
    Bounds,
    Document,
    Effect,
    KnowledgeDocuments,
    MetricTarget,
    Principle,
    Priority,
    PriorityState,
    Range,
    Setting,
    SourceRef,
    Symptom,
    Technique,
    Threshold,
)
from ..base.findings import CATEGORIES
from .file_schema import Reader, unique
from .yamlio import Located, LocatedList, load_yaml_file, load_yaml_text

_SOURCE_KEYS = ("document", "section", "quote")

_SECTIONS = (
    "documents",
    "symptoms",
    "bottlenecks",
    "priority_framework",
    "metrics",
    "techniques",
    "principles",
)


class _DocumentsReader(Reader):
    """The schema reader plus the references checked once every section is read."""

    def __init__(self, file: str) -> None:
        super().__init__(file)
        # (id, line, where): priorities may name techniques defined further down.
        self.technique_refs: list[tuple[str, int, str]] = []
        self.metric_refs: list[tuple[str, int, str]] = []
        self.document_refs: list[tuple[str, int]] = []

    def source(self, value: Any, at: object, what: str) -> SourceRef:
        m = self.mapping(value, at, what)
        if m is None:
            return SourceRef("", "", "")
        self.keys(m, what, _SOURCE_KEYS)
        document = self.text(m, "document", what)
        self.document_refs.append((document, self.line(m, "document")))
        return SourceRef(document, self.text(m, "section", what), self.text(m, "quote", what))

    def own_source(self, m: Located, what: str) -> SourceRef:
        return self.source(m.get("source"), self.line(m, "source"), f"{what}.source")

    def sources(self, m: Located, key: str, what: str) -> tuple[SourceRef, ...]:
        seq = self.sequence(m, key, what)
        if seq is None:
            return ()
        return tuple(self.source(item, line, f"{what}.{key}[{i}]")
                     for i, (item, line) in enumerate(zip(seq, seq.lines, strict=True)))

    def technique_ids(self, m: Located, key: str, what: str) -> tuple[str, ...]:
        ids = self.text_list(m, key, what)
        seq = m.get(key)
        lines = seq.lines if isinstance(seq, LocatedList) else [self.line(m, key)] * len(ids)
        for tid, line in zip(ids, lines, strict=False):
            self.technique_refs.append((tid, line, f"{what}.{key}"))
        return ids

    def thresholds(self, m: Located, key: str, what: str) -> tuple[Threshold, ...]:
        out: list[Threshold] = []
        for t, label in self.items(m, key, what):
            self.keys(t, label, ("metric", "op", "value", "unit"), ("value_high",))
            metric = self.text(t, "metric", label)
            self.metric_refs.append((metric, self.line(t, "metric"), label))
            value = self.number(t, "value", label)
            value_high = self.opt_number(t, "value_high", label)
            if value_high is not None and value_high < value:
                self.report(self.line(t, "value_high"), f"{label}: value_high < value")
            out.append(Threshold(metric, self.choice(t, "op", OPS, label), value,
                                 self.text(t, "unit", label), value_high))
        return tuple(out)

    def actions(self, m: Located, key: str, what: str) -> tuple[Action, ...]:
        out: list[Action] = []
        for a, label in self.items(m, key, what):
            self.keys(a, label, ("text", "techniques"))
            ids = self.technique_ids(a, "techniques", label)
            if not ids and "techniques" in a:
                self.report(a, f"{label}: names no technique")
            out.append(Action(text=self.text(a, "text", label), techniques=ids))
        if not out and key in m:
            self.report(self.line(m, key), f"{what}.{key}: must not be empty")
        return tuple(out)


def _document(r: _DocumentsReader, m: Located, what: str) -> Document:
    r.keys(m, what, ("id", "title", "file", "source"))
    return Document(r.ident(m, "id", what), r.text(m, "title", what), r.text(m, "file", what),
                    r.own_source(m, what))


def _symptom(r: _DocumentsReader, m: Located, what: str) -> Symptom:
    r.keys(m, what, ("id", "symptom", "culprit", "category", "actions", "source"),
           ("thresholds", "signals"))
    return Symptom(
        id=r.ident(m, "id", what),
        symptom=r.text(m, "symptom", what),
        culprit=r.text(m, "culprit", what),
        category=r.choice(m, "category", CATEGORIES, what),
        thresholds=r.thresholds(m, "thresholds", what),
        signals=r.text_list(m, "signals", what),
        actions=r.actions(m, "actions", what),
        source=r.own_source(m, what),
    )


def _bottleneck(r: _DocumentsReader, m: Located, what: str) -> BottleneckRow:
    r.keys(m, what,
           ("id", "location", "primary_symptom", "key_fix", "key_fixes", "category", "source"))
    return BottleneckRow(
        id=r.ident(m, "id", what),
        location=r.text(m, "location", what),
        primary_symptom=r.text(m, "primary_symptom", what),
        key_fix=r.text(m, "key_fix", what),
        key_fixes=r.actions(m, "key_fixes", what),
        category=r.choice(m, "category", CATEGORIES, what),
        source=r.own_source(m, what),
    )


def _priority_state(r: _DocumentsReader, m: Located, what: str) -> PriorityState:
    r.keys(m, what, ("id", "state", "priorities", "source"), ("conditions", "signals"))
    priorities: list[Priority] = []
    for p, label in r.items(m, "priorities", what):
        r.keys(p, label, ("technique", "text"))
        tid = r.text(p, "technique", label)
        r.technique_refs.append((tid, r.line(p, "technique"), label))
        priorities.append(Priority(technique=tid, text=r.text(p, "text", label)))
    if "priorities" in m and len(priorities) != 3:
        r.report(r.line(m, "priorities"),
                 f"{what}: expected 3 priorities, got {len(priorities)}")
    return PriorityState(
        id=r.ident(m, "id", what),
        state=r.text(m, "state", what),
        conditions=r.thresholds(m, "conditions", what),
        signals=r.text_list(m, "signals", what),
        priorities=tuple(priorities),
        source=r.own_source(m, what),
    )


def _bounds(r: _DocumentsReader, value: Any, at: object, what: str) -> Bounds:
    m = r.mapping(value, at, what)
    if m is None:
        return Bounds("range")
    r.keys(m, what, ("kind",), ("low", "high", "unit", "of", "during", "trend", "prefer"))
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
        r.report(m, f"{what}: a range needs low and/or high, and a unit")
    if kind == "trend" and bounds.trend is None:
        r.report(m, f"{what}: a trend needs 'trend'")
    if kind == "near" and bounds.of is None:
        r.report(m, f"{what}: 'near' needs 'of' (what the value should be near)")
    return bounds


def _metric(r: _DocumentsReader, m: Located, what: str) -> MetricTarget:
    r.keys(m, what, ("id", "metric", "tool", "tools", "target", "bounds", "tells", "source"))
    tools = r.text_list(m, "tools", what)
    if not tools and "tools" in m:
        r.report(r.line(m, "tools"), f"{what}.tools: must not be empty")
    return MetricTarget(
        id=r.ident(m, "id", what),
        metric=r.text(m, "metric", what),
        tool=r.text(m, "tool", what),
        tools=tools,
        target=r.text(m, "target", what),
        bounds=_bounds(r, m.get("bounds"), r.line(m, "bounds"), f"{what}.bounds"),
        tells=r.text(m, "tells", what),
        source=r.own_source(m, what),
    )


def _effect(r: _DocumentsReader, m: Located, what: str) -> Effect:
    r.keys(m, what, ("quantity", "change", "unit", "source"),
           ("low", "high", "before", "hedge", "condition"))
    change = r.choice(m, "change", CHANGES, what)
    low, high = r.low_high(m, what)
    if low is None and high is None:
        r.report(m, f"{what}: an effect needs a number (low and/or high)")
    if change == ">" and low is None:
        r.report(m, f"{what}: change '>' needs low")
    if change == "<" and high is None:
        r.report(m, f"{what}: change '<' needs high")
    before: Range | None = None
    if m.get("before") is not None:
        b = r.mapping(m["before"], r.line(m, "before"), f"{what}.before")
        if b is not None:
            r.keys(b, f"{what}.before", (), ("low", "high"))
            before = Range(*r.low_high(b, f"{what}.before"))
            if before.low is None and before.high is None:
                r.report(b, f"{what}.before: needs low and/or high")
    if change and (change == "->") != ("before" in m):
        r.report(m, f"{what}: 'before' goes with change '->' and only with it")
    return Effect(
        quantity=r.ident(m, "quantity", what),
        change=change,
        low=low,
        high=high,
        unit=r.text(m, "unit", what),
        before=before,
        hedge=r.opt_text(m, "hedge", what),
        condition=r.opt_text(m, "condition", what),
        source=r.own_source(m, what),
    )


def _setting(r: _DocumentsReader, m: Located, what: str) -> Setting:
    r.keys(m, what, ("name", "source"), ("low", "high", "unit", "per", "values", "condition"))
    low, high = r.low_high(m, what)
    values = r.text_list(m, "values", what)
    if low is None and high is None and not values:
        r.report(m, f"{what}: a setting needs low/high or values")
    return Setting(
        name=r.text(m, "name", what),
        low=low,
        high=high,
        unit=r.opt_text(m, "unit", what),
        per=r.opt_text(m, "per", what),
        values=values,
        condition=r.opt_text(m, "condition", what),
        source=r.own_source(m, what),
    )


def _technique(r: _DocumentsReader, m: Located, what: str) -> Technique:
    r.keys(m, what, ("id", "name", "kind", "category", "applies_to", "summary", "how", "source"),
           ("snippet", "snippet_lang", "effects", "settings", "includes", "also_in"))
    applies_to = r.text_list(m, "applies_to", what)
    if not applies_to and "applies_to" in m:
        r.report(r.line(m, "applies_to"), f"{what}.applies_to: must not be empty")
    seq = m.get("applies_to")
    lines = seq.lines if isinstance(seq, LocatedList) else [r.line(m, "applies_to")] * 99
    for value, line in zip(applies_to, lines, strict=False):
        if value not in APPLIES_TO:
            r.report(line, f"{what}.applies_to: unknown value {value!r} "
                           "(expected training|inference)")
    kind = r.choice(m, "kind", KINDS, what)
    includes = r.technique_ids(m, "includes", what)
    if kind == "group" and not includes:
        r.report(m, f"{what}: a group must list the techniques it includes")
    snippet = r.opt_text(m, "snippet", what)
    snippet_lang = None
    if m.get("snippet_lang") is not None:
        snippet_lang = r.choice(m, "snippet_lang", SNIPPET_LANGS, what)
    if (snippet is None) != (m.get("snippet_lang") is None):
        r.report(m, f"{what}: snippet and snippet_lang go together")
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
        source=r.own_source(m, what),
        also_in=r.sources(m, "also_in", what),
    )


def _principle(r: _DocumentsReader, m: Located, what: str) -> Principle:
    r.keys(m, what, ("id", "statement", "source"), ("thresholds", "also_in"))
    return Principle(
        id=r.ident(m, "id", what),
        statement=r.text(m, "statement", what),
        thresholds=r.thresholds(m, "thresholds", what),
        source=r.own_source(m, what),
        also_in=r.sources(m, "also_in", what),
    )


_BUILDERS: dict[str, Any] = {
    "documents": _document,
    "symptoms": _symptom,
    "bottlenecks": _bottleneck,
    "priority_framework": _priority_state,
    "metrics": _metric,
    "techniques": _technique,
    "principles": _principle,
}


def documents_from(tree: Any, file: str) -> KnowledgeDocuments:
    """The documents from a parsed ``documents.yaml``; every problem in one KnowledgeError."""
    r = _DocumentsReader(file)
    root = r.mapping(tree, 1, "top level")
    if root is None:
        r.done()
    assert root is not None
    r.keys(root, "top level", ("version", *_SECTIONS))
    version = r.number(root, "version", "top level")
    if isinstance(root.get("version"), (int, float)) and version != 1:
        r.report(r.line(root, "version"),
                 f"unsupported version {version:g} (this reader reads 1)")

    def section(name: str) -> tuple[Any, ...]:
        entries = r.items(root, name, "")
        items = tuple(_BUILDERS[name](r, m, label) for m, label in entries)
        if not items and name in root:
            r.report(r.line(root, name), f"{name}: must not be empty")
        # Ids must be unique within a section: they are how everything refers to items.
        unique(r, ((item.id, r.line(m, "id")) for item, (m, _) in zip(items, entries,
                                                                       strict=True)), name)
        return items

    sections = {name: section(name) for name in _SECTIONS}
    known = {
        "document": {d.id for d in sections["documents"]},
        "technique": {t.id for t in sections["techniques"]},
        "metric": {m.id for m in sections["metrics"]},
    }
    for doc, line in r.document_refs:
        if doc and doc not in known["document"]:
            r.report(line, f"source.document: unknown document {doc!r}")
    for tid, line, where in r.technique_refs:
        if tid and tid not in known["technique"]:
            r.report(line, f"{where}: unknown technique {tid!r}")
    for mid, line, where in r.metric_refs:
        if mid and mid not in known["metric"]:
            r.report(line, f"{where}: unknown metric {mid!r}")
    r.done()
    return KnowledgeDocuments(path=file, version=int(version), **sections)


def documents_text(text: str, file: str) -> KnowledgeDocuments:
    """The documents from YAML text (the packaged file, read as a resource)."""
    return documents_from(load_yaml_text(text, file), file)


def read_documents(path: Path) -> KnowledgeDocuments:
    """A documents file from disk, checked as the packaged one is (no cache)."""
    return documents_from(load_yaml_file(Path(path)), str(path))
