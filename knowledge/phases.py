"""Loading the phase signatures from the knowledge base into the stack probe's types."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any

from aitop.probes.phases import FrameSignature, PhaseClassifier, PhaseRule, TechniqueRule
from aitop.probes.session import PHASES

from .yamlio import fail, load_yaml_file, load_yaml_text, mappings, only_keys, require

PACKAGED = "phases.yaml"


@dataclass(frozen=True)
class PhaseConfig:
    rules: tuple[PhaseRule, ...]
    techniques: tuple[TechniqueRule, ...]
    step_counters: tuple[str, ...]
    #: Frames known to drive a training step (a framework's loop).
    loop_frames: tuple[FrameSignature, ...] = ()

    def classifier(self) -> PhaseClassifier:
        return PhaseClassifier(self.rules, self.techniques, self.loop_frames)


def _signatures(node: object, key: str = "signatures") -> tuple[FrameSignature, ...]:
    items = require(node, key, list)
    sigs = []
    for item in items:
        if not isinstance(item, dict):
            raise fail(node, "each signature must be a mapping {function, file}")
        only_keys(item, ("function", "file"), "signature")
        function = item.get("function", "*")
        file = item.get("file", "*")
        if not isinstance(function, str) or not isinstance(file, str):
            raise fail(item, "signature 'function' and 'file' must be strings")
        sigs.append(FrameSignature(function=function, file=file))
    return tuple(sigs)


def parse_phase_document(doc: object) -> PhaseConfig:
    """Validate one phases document (packaged or a user's)."""
    if not isinstance(doc, dict):
        raise fail(doc, "expected a mapping with 'phases'")
    rules = []
    for node in mappings(doc, "phases"):
        only_keys(node, ("phase", "rank", "signatures"), "phase")
        phase = require(node, "phase", str)
        if phase not in PHASES or phase == "other":
            raise fail(node, f"unknown phase '{phase}' (one of {', '.join(PHASES[:-1])})")
        rank = require(node, "rank", int)
        if isinstance(rank, bool):
            raise fail(node, "'rank' must be int, not bool")
        rules.append(PhaseRule(phase, rank, _signatures(node)))
    techniques = []
    for node in mappings(doc, "techniques_seen"):
        only_keys(node, ("technique", "signatures"), "technique")
        techniques.append(TechniqueRule(require(node, "technique", str), _signatures(node)))
    counters = doc.get("step_counters") or []
    if not isinstance(counters, list) or not all(isinstance(c, str) for c in counters):
        raise fail(doc, "'step_counters' must be a list of names")
    loops = _signatures(doc, "loop_frames") if "loop_frames" in doc else ()
    return PhaseConfig(tuple(rules), tuple(techniques), tuple(counters), loops)


def merge(configs: Iterable[PhaseConfig]) -> PhaseConfig:
    """User files add signatures and counters to the packaged ones."""
    rules: list[PhaseRule] = []
    techniques: list[TechniqueRule] = []
    counters: list[str] = []
    loops: list[FrameSignature] = []
    for cfg in configs:
        rules += cfg.rules
        techniques += cfg.techniques
        counters += [c for c in cfg.step_counters if c not in counters]
        loops += cfg.loop_frames
    return PhaseConfig(tuple(rules), tuple(techniques), tuple(counters), tuple(loops))


def phases_from(user_docs: Sequence[tuple[str, Any]]) -> PhaseConfig:
    """The packaged phase signatures plus those of already-parsed user files."""
    text = resources.files("aitop.knowledge").joinpath(f"data/{PACKAGED}").read_text("utf-8")
    configs = [parse_phase_document(load_yaml_text(text, PACKAGED))]
    for _path, doc in user_docs:
        if isinstance(doc, dict) and ({"phases", "techniques_seen", "loop_frames"} & doc.keys()):
            configs.append(parse_phase_document(doc))
    return merge(configs)


def load_phase_config(extra_files: Iterable[Path] = ()) -> PhaseConfig:
    """The packaged phase signatures plus the user's ``--rules`` files."""
    return phases_from([(str(path), load_yaml_file(path)) for path in extra_files])
