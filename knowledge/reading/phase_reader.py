"""Reading how stacks and threads are read (``phases.yaml``) into the probes' types.

Frame signatures per phase, techniques seen in frames, a framework's loop frames,
step counters, the functions of a parked thread, the files that say where a data
wait went, and the names of helper threads: the knowledge an expert extends for a
new loader library or framework, so all of it is data a ``--rules`` file can add
to. The probes get it as values (``PhaseClassifier``, ``StackReading``); they
never import the knowledge base.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from aitop.probes.phases import (
    DATA_SOURCES,
    DataSourceRule,
    FrameSignature,
    PhaseClassifier,
    PhaseRule,
    StackReading,
    TechniqueRule,
)
from aitop.probes.process_tree import PIN_THREAD_NAME
from aitop.probes.session import PHASES

from .file_schema import Reader
from .yamlio import Located, LocatedList

#: The sections of a file this module reads (rules_reader.py reads the others).
SECTIONS = ("phases", "techniques_seen", "loop_frames", "step_counters", "idle_frames",
            "data_sources", "helper_threads")


@dataclass(frozen=True)
class PhaseConfig:
    rules: tuple[PhaseRule, ...]
    techniques: tuple[TechniqueRule, ...]
    step_counters: tuple[str, ...]
    #: Frames known to drive a training step (a framework's loop).
    loop_frames: tuple[FrameSignature, ...] = ()
    reading: StackReading = field(default_factory=StackReading)
    #: Thread-name prefixes of threads that are busy without being compute
    #: parallelism (communication, pin memory): not counted as compute threads.
    helper_threads: tuple[str, ...] = ()

    def classifier(self) -> PhaseClassifier:
        return PhaseClassifier(self.rules, self.techniques, self.loop_frames, self.reading)


def _signatures(r: Reader, m: Located, key: str, what: str) -> tuple[FrameSignature, ...]:
    sigs = []
    for item, label in r.items(m, key, what):
        r.keys(item, "signature", (), ("function", "file"))
        function, file = item.get("function", "*"), item.get("file", "*")
        if not isinstance(function, str) or not isinstance(file, str):
            r.report(item, f"{label}: signature 'function' and 'file' must be strings")
            continue
        sigs.append(FrameSignature(function=function, file=file))
    return tuple(sigs)


def _names(r: Reader, doc: Located, key: str) -> tuple[str, ...]:
    value = doc.get(key)
    if value is None:
        return ()
    if not isinstance(value, LocatedList) or not all(isinstance(v, str) for v in value):
        r.report(r.line(doc, key), f"'{key}' must be a list of names")
        return ()
    return tuple(value)


def read_phase_sections(r: Reader, doc: Located) -> PhaseConfig:
    """The phase sections of one file (packaged or a user's)."""
    rules = []
    for node, label in r.items(doc, "phases", ""):
        r.keys(node, "phase", ("phase", "rank", "signatures"))
        phase = r.text(node, "phase", "phase")
        if phase and (phase not in PHASES or phase == "other"):
            r.report(r.line(node, "phase"),
                     f"phase: unknown phase '{phase}' (one of {', '.join(PHASES[:-1])})")
        rules.append(PhaseRule(phase, r.integer(node, "rank", "phase"),
                               _signatures(r, node, "signatures", label)))
    techniques = []
    for node, label in r.items(doc, "techniques_seen", ""):
        r.keys(node, "technique", ("technique", "signatures"))
        techniques.append(TechniqueRule(r.text(node, "technique", "technique"),
                                        _signatures(r, node, "signatures", label)))
    sources = []
    for node, label in r.items(doc, "data_sources", ""):
        r.keys(node, label, ("source", "files"))
        source = r.choice(node, "source", DATA_SOURCES, label)
        sources.append(DataSourceRule(source, r.text_list(node, "files", label, "file globs")))
    return PhaseConfig(
        rules=tuple(rules),
        techniques=tuple(techniques),
        step_counters=_names(r, doc, "step_counters"),
        loop_frames=_signatures(r, doc, "loop_frames", ""),
        reading=StackReading(frozenset(_names(r, doc, "idle_frames")), tuple(sources)),
        helper_threads=_names(r, doc, "helper_threads"),
    )


def _once(items: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(items))


def merge(configs: Iterable[PhaseConfig]) -> PhaseConfig:
    """User files add to the packaged signatures, counters, idle frames and sources.

    The data sources keep the packaged file's order (the first that matches names
    the wait); a user's files join the source they name.
    """
    configs = list(configs)
    files: dict[str, list[str]] = {}
    for cfg in configs:
        for rule in cfg.reading.data_sources:
            files.setdefault(rule.source, []).extend(rule.files)
    reading = StackReading(
        frozenset(name for cfg in configs for name in cfg.reading.idle_functions),
        tuple(DataSourceRule(source, _once(globs)) for source, globs in files.items()),
    )
    return PhaseConfig(
        rules=tuple(rule for cfg in configs for rule in cfg.rules),
        techniques=tuple(t for cfg in configs for t in cfg.techniques),
        step_counters=_once(c for cfg in configs for c in cfg.step_counters),
        loop_frames=tuple(sig for cfg in configs for sig in cfg.loop_frames),
        reading=reading,
        # The pin-memory thread is the one the process probe recognises by name.
        helper_threads=_once([*(h for cfg in configs for h in cfg.helper_threads),
                              PIN_THREAD_NAME]),
    )
