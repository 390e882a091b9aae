"""Screens: the main screen and one detail screen per drill-down."""

from __future__ import annotations

from typing import Any

from textual.screen import Screen

from .finding import FindingScreen
from .gpu import GpuScreen
from .help import HelpScreen
from .io_detail import IoScreen
from .knowledge import KnowledgeScreen
from .processes import ProcessScreen
from .stacks import StacksScreen

#: Screens that do not depend on a parameter, so one instance can be kept.
REUSABLE_SCREENS: frozenset[str] = frozenset(
    {"gpu", "processes", "stacks", "io", "knowledge", "help"}
)


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
        return FindingScreen(finding)
    factories: dict[str, type[Screen[None]]] = {
        "gpu": GpuScreen,
        "processes": ProcessScreen,
        "stacks": StacksScreen,
        "io": IoScreen,
        "knowledge": KnowledgeScreen,
        "help": HelpScreen,
    }
    factory = factories.get(name)
    return factory() if factory is not None else None
