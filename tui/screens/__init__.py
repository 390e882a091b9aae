"""Screens: the main screen and one detail screen per drill-down.

A detail screen's module is imported when the screen is first opened, or by
:func:`prefetch` on a thread once the first frame is up: together they cost
more to import than anything else the first frame waits for (docs/benchmarks.md,
Where aitop's CPU goes), and none of them is on it.
"""

from __future__ import annotations

import importlib
from typing import Any

from textual.screen import Screen

#: Each detail screen's module (in this package) and class.
DETAIL_SCREENS: dict[str, tuple[str, str]] = {
    "finding": ("finding", "FindingScreen"),
    "gpu": ("gpu", "GpuScreen"),
    "processes": ("processes", "ProcessScreen"),
    "stacks": ("stacks", "StacksScreen"),
    "io": ("io_detail", "IoScreen"),
    "knowledge": ("knowledge", "KnowledgeScreen"),
    "help": ("help", "HelpScreen"),
}

#: Screens that do not depend on a parameter, so one instance can be kept.
REUSABLE_SCREENS: frozenset[str] = frozenset(
    {"gpu", "processes", "stacks", "io", "knowledge", "help"}
)


def screen_class(name: str) -> type[Screen[None]] | None:
    """The detail screen ``name``'s class (its module imported now if not yet)."""
    where = DETAIL_SCREENS.get(name)
    if where is None:
        return None
    module, cls = where
    found: type[Screen[None]] = getattr(importlib.import_module(f"{__name__}.{module}"), cls)
    return found


def prefetch() -> None:
    """Import every detail screen's module, so that no key waits for one."""
    for name in DETAIL_SCREENS:
        screen_class(name)


def make_screen(name: str, app: Any, finding_id: str | None = None) -> Screen[None] | None:
    """Build the detail screen ``name``; ``None`` (with a notice) when it cannot open."""

    if name == "finding":
        view = getattr(app, "view", None)
        diagnosis = view.diagnosis if view is not None else None
        findings = diagnosis.findings if diagnosis is not None else ()
        finding = next((f for f in findings if f.id == finding_id), None)
        if finding is None and findings and finding_id is None:
            finding = findings[0]
        if finding is None:
            app.notify("No finding to open: no rule is firing.", timeout=3)
            return None
        from .finding import FindingScreen

        return FindingScreen(finding)
    factory = screen_class(name) if name in REUSABLE_SCREENS else None
    return factory() if factory is not None else None
