"""The whole knowledge base for one run: packaged rules and phases plus the user's files.

A ``--rules`` file may carry rules, states and phase signatures together; it is
read and parsed once here and handed to both parsers, so the two can never see
different versions of a file that changes while aitop starts.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from .phases import PhaseConfig, phases_from
from .rules import RuleSet, rules_from
from .yamlio import load_yaml_file


@dataclass(frozen=True)
class Knowledge:
    rules: RuleSet
    phases: PhaseConfig


def load_knowledge(rule_files: Iterable[Path] = ()) -> Knowledge:
    """Rules and phase signatures; a bad file raises ``KnowledgeError`` with file:line."""
    user_docs = [(str(path), load_yaml_file(path)) for path in rule_files]
    return Knowledge(rules_from(user_docs), phases_from(user_docs))
