"""The documents' facts that a diagnosis needs (placeholder until the KB loader lands)."""

from __future__ import annotations

from .diagnosis import Facts


def load_facts() -> Facts:
    return Facts()
