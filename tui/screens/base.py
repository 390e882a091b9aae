"""Screens that draw from the app's current ``View``.

The app pushes each new view to the active screen (``update_view``); a screen
pushed later draws the app's latest view on mount, so opening a detail screen
never waits for the next tick.
"""

from __future__ import annotations

from typing import ClassVar

from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.screen import Screen

from ..widgets.header import ExitBanner, StatusHeader
from ..widgets.key_bar import KeyBar
from ..widgets.view import View


class ViewScreen(Screen[None]):
    """A screen with the status header and exit banner, fed views by the app."""

    def compose_header(self) -> ComposeResult:
        yield StatusHeader()
        yield ExitBanner()

    def current_view(self) -> View | None:
        """The app's latest view (``None`` before the first tick)."""
        view = getattr(self.app, "view", None)
        return view if isinstance(view, View) else None

    def on_mount(self) -> None:
        view = self.current_view()
        if view is not None:
            self.update_view(view)

    def on_screen_resume(self) -> None:
        # Back from a detail screen: catch up on the ticks drawn elsewhere.
        view = self.current_view()
        if view is not None:
            self.update_view(view)

    def update_view(self, view: View) -> None:
        """Redraw from ``view``; subclasses extend (and call super)."""
        for header in self.query(StatusHeader):
            header.update_view(view)
        for banner in self.query(ExitBanner):
            banner.update_view(view)


class DetailScreen(ViewScreen):
    """A drill-down screen: Escape goes back to where Enter came from."""

    BINDINGS: ClassVar[list[BindingType]] = [Binding("escape", "app.pop_screen", "Back")]

    #: The title shown above the body.
    TITLE = ""

    def compose(self) -> ComposeResult:
        yield from self.compose_header()
        yield from self.compose_body()
        yield KeyBar()

    def on_mount(self) -> None:
        # The arrow and page keys scroll the body, so it has the focus; a screen
        # whose body is a table focuses that instead (it overrides this).
        for body in self.query("#body"):
            body.focus()
            break
        super().on_mount()

    def compose_body(self) -> ComposeResult:
        """The screen's own widgets; subclasses override."""
        yield from ()
