"""The one front door to the knowledge base: packaged files plus the user's ``--rules``.

``load_knowledge_base(rule_files)`` is the only way the knowledge base is loaded:
the packaged ``rules.yaml``, ``phases.yaml`` and ``documents.yaml`` and any rule
files, read once, checked together, and returned as one immutable
:class:`KnowledgeBase` that the evaluator, the UI and the Prometheus export all
use. A user's file may carry any section of the packaged ones (rules, states,
named conditions, targets, phase signatures, stack reading); it is read once and
handed to each section's reader, so no two readers can see different versions of
a file that changes while aitop starts. Targets a user's file gives win over the
documents' and aitop's own.

It is called where a run starts (``engine/commands``, ``engine/live/attach.py``)
and the one ``KnowledgeBase`` is handed to every reader from there (the
evaluator, the sources, the panels through their view, the reports, ``aitop
diff``); nothing else loads one (tests/quality/test_knowledge_loading.py).

Every problem of every file is reported at once (``KnowledgeError``, one
``file:line: ...`` per problem), as Prometheus' rule checker does.

The result is cached per set of rule files (by path and a digest of the content:
an edited file is read again), so every caller in a process shares one object.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from ..base.documents import KnowledgeDocuments
from ..base.facts import Facts, facts_from
from ..base.references import KnowledgeReferences
from ..base.rules import Rule, RuleSet, StateSpec
from ..base.targets import Target
from . import phase_reader as phase_sections
from . import rules_reader
from .documents_reader import documents_text
from .file_schema import Reader, in_order
from .phase_reader import PhaseConfig, merge, read_phase_sections
from .rules_reader import (
    Context,
    NamedCondition,
    RulesRead,
    read_conditions,
    read_rule_sections,
    read_targets,
    resolve_conditions,
)
from .yamlio import (
    MAX_FILE_BYTES,
    KnowledgeError,
    Located,
    Problem,
    load_yaml_file,
    load_yaml_text,
)

PACKAGED_RULES = "rules.yaml"
PACKAGED_PHASES = "phases.yaml"
PACKAGED_DOCUMENTS = "documents.yaml"
#: Every top-level key a knowledge file (packaged or a user's) may have.
FILE_KEYS = (*rules_reader.SECTIONS, *phase_sections.SECTIONS)


@dataclass(frozen=True)
class KnowledgeBase:
    """Everything aitop knows, for one run: what it judges with and what it cites."""

    rules: RuleSet
    phases: PhaseConfig
    documents: KnowledgeDocuments
    facts: Facts

    @property
    def files(self) -> tuple[str, ...]:
        """The rule files read, the packaged one first."""
        return self.rules.files


def load_knowledge_base(rule_files: Iterable[Path] = ()) -> KnowledgeBase:
    """The packaged knowledge base plus ``rule_files``; raises KnowledgeError listing
    every problem of every file, each with file and line."""
    paths = tuple(Path(p) for p in rule_files)
    return _load(tuple((str(p), _stamp(p)) for p in paths))


def _stamp(path: Path) -> str | None:
    """What the file holds, for the cache key (a modification time can repeat within
    the file system's clock tick; the content cannot look the same and differ)."""
    try:
        with path.open("rb") as handle:
            return hashlib.blake2b(handle.read(MAX_FILE_BYTES + 1), digest_size=16).hexdigest()
    except OSError:
        return None  # reading it says why


def _packaged(name: str) -> str:
    return resources.files("aitop.knowledge").joinpath(f"data/{name}").read_text("utf-8")


@functools.cache
def _packaged_yaml(name: str) -> Any:
    """A packaged file's YAML, parsed once a process: the readers only read it, and
    each set of rule files combines it afresh (``_load``)."""
    return load_yaml_text(_packaged(name), name)


@functools.cache
def _packaged_documents() -> KnowledgeDocuments:
    """The packaged documents, read once a process (they are immutable)."""
    return documents_text(
        _packaged(PACKAGED_DOCUMENTS),
        str(resources.files("aitop.knowledge").joinpath(f"data/{PACKAGED_DOCUMENTS}")),
    )


@functools.lru_cache(maxsize=8)
def _load(key: tuple[tuple[str, str | None], ...]) -> KnowledgeBase:
    """The knowledge base for rule files ``(path, digest)``: the packaged files are
    aitop's own and must read cleanly; the user's are collected, problems and all."""
    problems: list[Problem] = []
    documents = _packaged_documents()
    files: list[tuple[str, Any]] = [
        (PACKAGED_RULES, _packaged_yaml(PACKAGED_RULES)),
        (PACKAGED_PHASES, _packaged_yaml(PACKAGED_PHASES)),
    ]
    for path, _when in key:
        try:
            files.append((path, load_yaml_file(Path(path))))
        except KnowledgeError as exc:
            problems += exc.problems
    return _combine(files, documents, user_from=2, problems=problems)


def _top_level(r: Reader, doc: Any, user: bool) -> Located | None:
    """The file's mapping, its keys checked; None when it is not a mapping."""
    if not isinstance(doc, Located):
        r.report(1, "expected a mapping with top-level 'rules:' (or 'phases:', 'states:', ...)")
        return None
    r.keys(doc, "rule file", (), FILE_KEYS)
    if user and not set(FILE_KEYS) & doc.keys():
        r.report(doc, "expected top-level 'rules:' (or any of "
                      f"{', '.join(k for k in FILE_KEYS if k != 'rules')})")
    return doc


def _combine(
    files: list[tuple[str, Any]], documents: KnowledgeDocuments, *, user_from: int,
    problems: list[Problem],
) -> KnowledgeBase:
    """Read every file's targets and conditions first (a condition may name any file's
    target or condition), then every file's sections against them, then merge."""
    read: list[tuple[rules_reader.RulesReader, Located]] = []
    named: list[NamedCondition] = []
    targets: dict[str, Target] = {}
    users: dict[str, Target] = {}  # the targets of the user's --rules files
    placeholder = Context({}, documents, KnowledgeReferences(documents, {}))
    for index, (file, doc) in enumerate(files):
        r = rules_reader.RulesReader(file, placeholder)
        top = _top_level(r, doc, user=index >= user_from)
        if top is None:
            problems += r.problems
            continue
        named += read_conditions(r, top)
        read_here = read_targets(r, top)
        targets.update(read_here)  # a later file's replaces an earlier one's
        if index >= user_from:
            users.update(read_here)
        read.append((r, top))
    facts = facts_from(documents, targets)
    # The documents' numbers win over aitop's own targets, a user's over both: a
    # --rules file that moves the data-loading target moves it everywhere, in the
    # rules that name it too.
    if users:
        facts = dataclasses.replace(facts, targets={**facts.targets, **users})
    references = KnowledgeReferences(documents, facts.targets)
    context = Context(resolve_conditions(named, references), documents, references)
    rule_files: list[str] = []
    sections: list[RulesRead] = []
    configs: list[PhaseConfig] = []
    for r, doc in read:
        r.use(context)
        sections.append(read_rule_sections(r, doc))
        configs.append(read_phase_sections(r, doc))
        if r.file != PACKAGED_PHASES:
            rule_files.append(r.file)
    ruleset = _merge_rules(sections, context, rule_files)
    problems += _dangling_explains(ruleset.rules) + _conditionless(ruleset.states)
    for r, _doc in read:
        problems += r.problems
    if problems:
        raise KnowledgeError.of(in_order(problems))
    return KnowledgeBase(ruleset, merge(configs), documents, facts)


def _merge_rules(sections: list[RulesRead], context: Context, files: list[str]) -> RuleSet:
    """Later files replace earlier entries of the same name (a user's replaces ours)."""
    rules: dict[str, Rule] = {}
    states: dict[str, StateSpec] = {}
    for section in sections:
        rules.update({rule.id: rule for rule in section.rules})
        for state in section.states:
            states[state.id] = _over(states.get(state.id), state)
    return RuleSet(explained_through(tuple(rules.values())), tuple(states.values()),
                   tuple(files), dict(context.conditions))


def explained_through(rules: tuple[Rule, ...]) -> tuple[Rule, ...]:
    """Each rule's ``explains`` closed over the symptoms its symptoms explain.

    A culprit that explains a culprit explains that one's symptoms too: the
    cores other processes hold explain "every core is busy", and with it "the
    loop waits for data". Said once for the evaluator and for the PromQL
    translation, which then silence the same alerts.
    """
    direct = {rule.id: rule.explains for rule in rules}

    def closure(rule_id: str) -> tuple[str, ...]:
        # A rule's own names stay as written (an unknown one is reported on its
        # line); only known rules' symptoms are added.
        seen = list(direct[rule_id])
        todo = [n for n in seen if n in direct]
        while todo:
            for name in direct[todo.pop(0)]:
                if name in direct and name not in seen and name != rule_id:
                    seen.append(name)
                    todo.append(name)
        return tuple(seen)

    return tuple(dataclasses.replace(rule, explains=closure(rule.id))
                 if rule.explains else rule for rule in rules)


#: StateSpec fields each state key sets.
_STATE_FIELDS = {"expr": ("condition", "thresholds"), "measured_by": ("condition", "thresholds"),
                 "gpu_only": ("gpu_only",), "leads_for": ("leads_for",), "last": ("last",),
                 "well_used": ("well_used",)}


def _over(earlier: StateSpec | None, later: StateSpec) -> StateSpec:
    """``later`` where it gave a key, ``earlier`` (the packaged row) where it did not."""
    if earlier is None:
        return later
    changed = {f: getattr(later, f) for key in later.given for f in _STATE_FIELDS.get(key, ())}
    return dataclasses.replace(earlier, file=later.file, line=later.line,
                               given=earlier.given | later.given, **changed)


def _conditionless(states: Iterable[StateSpec]) -> list[Problem]:
    """States that no file gave a condition (a row of its own needs one)."""
    return [Problem(f"state '{s.id}': give 'expr' or 'measured_by' (the documents' own "
                    "conditions)", s.file, s.line)
            for s in states if not {"expr", "measured_by"} & s.given]


def _dangling_explains(rules: Iterable[Rule]) -> list[Problem]:
    """``explains`` naming a rule no file defines (checked once all files are merged)."""
    rules = list(rules)
    by_id = {rule.id for rule in rules}
    return [Problem(f"rule '{rule.id}' {verb} unknown rule '{name}'", rule.file, rule.line)
            for rule in rules
            for verb, names in (("explains", rule.explains),
                                ("is ruled out by", rule.ruled_out_by))
            for name in names if name not in by_id]


def rules_in_document(doc: Any, packaged: KnowledgeBase) -> RuleSet:
    """The rules and states of one parsed rule file alone, read against the packaged
    knowledge base ``packaged`` (its named conditions, targets and documents), for checking
    one file."""
    file = doc.file if isinstance(doc, Located) else "<string>"
    references = KnowledgeReferences(packaged.documents, packaged.facts.targets)
    r = rules_reader.RulesReader(
        file, Context(packaged.rules.conditions, packaged.documents, references))
    top = _top_level(r, doc, user=True)
    if top is None:
        r.done()
    assert top is not None
    # The file's own targets, under the documents' (which win, as in a whole load).
    own = facts_from(packaged.documents, {**packaged.facts.targets, **read_targets(r, top)})
    references = KnowledgeReferences(packaged.documents, own.targets)
    named = resolve_conditions(
        [NamedCondition(n, c.written, r, 0) for n, c in packaged.rules.conditions.items()]
        + read_conditions(r, top), references)
    r.use(Context(named, packaged.documents, references))
    section = read_rule_sections(r, top)
    packaged_states = {s.id for s in packaged.rules.states}
    r.problems += _conditionless(s for s in section.states if s.id not in packaged_states)
    r.done()
    return RuleSet(tuple(section.rules), tuple(section.states), (file,), named)
