"""The key bar at the bottom of every screen: one widget, one line of text.

Why not Textual's ``Footer``: it composes a widget per key and recomposes all of
them whenever the focused widget's bindings change, which is on every panel
move and every screen switch. Measured with the key-latency benchmark, that
recomposition was about half of the UI thread's CPU per key (a one-widget bar:
184 → 85 ms median per key, docs/benchmarks.md). This bar renders the same
bindings (``screen.active_bindings``, ``show=True`` ones, one per action, the
disabled ones dimmed) as a single Text, and a click runs the key it lands on.
"""

from __future__ import annotations

from rich.text import Text
from textual import events
from textual.binding import Binding
from textual.screen import Screen
from textual.widget import Widget


class KeyBar(Widget):
    """The active bindings as ``key description`` pairs on one line."""

    DEFAULT_CSS = """
    KeyBar {
        height: 1;
        background: $panel;
        color: $text-muted;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        #: (first cell, last cell + 1, key) of each entry as last drawn.
        self._spans: list[tuple[int, int, str]] = []

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self._bindings_changed)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def _bindings_changed(self, screen: Screen[object]) -> None:
        self.refresh()

    def entries(self) -> list[tuple[Binding, bool]]:
        """(binding, enabled) to show, one per action, in the screen's order."""
        seen: set[str] = set()
        out = []
        for _node, binding, enabled, _tooltip in self.screen.active_bindings.values():
            if not binding.show or binding.action in seen:
                continue
            seen.add(binding.action)
            out.append((binding, enabled))
        return out

    def render(self) -> Text:
        """Every entry if it fits; else tighter; else the first ones and the last (quit)."""
        width = max(1, self.content_size.width)
        entries = self.entries()
        for pad in (1, 0):
            text, spans = self._line(entries, pad)
            if text.cell_len <= width:
                break
        if text.cell_len > width and len(entries) > 1:
            last = self._line(entries[-1:], 0)[0].cell_len
            kept: list[tuple[Binding, bool]] = []
            for entry in entries[:-1]:
                if self._line([*kept, entry], 0)[0].cell_len + last > width:
                    break
                kept.append(entry)
            text, spans = self._line([*kept, entries[-1]], 0)
        self._spans = spans
        return text

    def _line(self, entries: list[tuple[Binding, bool]], pad: int,
              ) -> tuple[Text, list[tuple[int, int, str]]]:
        """The entries as one line, ``pad`` spaces around each key, and each one's cells."""
        text = Text(no_wrap=True, overflow="ellipsis")
        spans = []
        space = " " * pad
        for binding, enabled in entries:
            start = text.cell_len
            key = self.app.get_key_display(binding)
            text.append(f"{space}{key}{space}", style="bold reverse" if enabled else "dim reverse")
            text.append(f" {binding.description} ", style="" if enabled else "dim")
            spans.append((start, text.cell_len, binding.key))
        return text, spans

    def on_click(self, event: events.Click) -> None:
        for start, end, key in self._spans:
            if start <= event.x < end:
                self.app.simulate_key(key.split(",")[0])
                return
