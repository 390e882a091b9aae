"""A DataTable whose columns sort by their real values, not their display text.

Cells are ``Cell`` objects: drawn as styled text, sorted by a raw key (numbers
as numbers, unknowns last). Clicking a header or calling ``sort_by`` sorts; the
same column again reverses.
"""

from __future__ import annotations

from dataclasses import dataclass

from rich.text import Text
from textual.coordinate import Coordinate
from textual.widgets import DataTable


@dataclass(frozen=True)
class Cell:
    """A table cell: what to show, and what to sort by."""

    text: str
    key: float | str | None = None
    style: str = ""
    justify: str = "left"

    def __rich__(self) -> Text:
        return Text(self.text, style=self.style, justify=self.justify,  # type: ignore[arg-type]
                    no_wrap=True, overflow="ellipsis")

    def sort_key(self) -> tuple[int, float | str]:
        k = self.key if self.key is not None else (None if self.text in ("", "—") else self.text)
        if k is None:
            return (1, 0.0)
        return (0, k)


def num_cell(value: float | None, text: str, style: str = "") -> Cell:
    """A right-aligned numeric cell."""
    return Cell(text, value, style, "right")


class SortableTable(DataTable[Cell]):
    """DataTable that remembers its sort column and keeps it across refreshes."""

    #: Columns that sort ascending when first chosen: names read alphabetically,
    #: numbers largest-first.
    ASCENDING: frozenset[str] = frozenset({"name", "pid", "kind", "role", "mount", "path"})

    def __init__(self, *, id: str | None = None, default_sort: str | None = None,
                 reverse: bool = True) -> None:
        super().__init__(id=id, zebra_stripes=True, cursor_type="row")
        self.sort_column: str | None = default_sort
        self.sort_reverse = reverse
        self._last_rows: list[tuple[str, list[Cell]]] | None = None

    def sort_by(self, column: str, *, toggle: bool = True) -> None:
        """Sort by a column key; the same column again reverses the order."""
        if toggle and column == self.sort_column:
            self.sort_reverse = not self.sort_reverse
        elif toggle:
            self.sort_column = column
            # Numbers read best largest-first; names alphabetically.
            self.sort_reverse = column not in self.ASCENDING
        self.apply_sort()

    def apply_sort(self) -> None:
        if self.sort_column is None or self.sort_column not in self.columns:
            return

        def key(cell: Cell) -> tuple[int, float | str]:
            k = cell.sort_key() if isinstance(cell, Cell) else (0, str(cell))
            # Unknowns stay last whichever direction.
            return (k[0] if not self.sort_reverse else -k[0], k[1])

        self.sort(self.sort_column, key=key, reverse=self.sort_reverse)

    def set_rows(self, rows: list[tuple[str, list[Cell]]]) -> None:
        """Replace the rows (keyed), keeping sort, cursor row and scroll.

        Unchanged rows are not redrawn, so a live refresh does not flicker.
        """
        if rows == self._last_rows:
            return
        self._last_rows = rows
        cursor_key = None
        if self.row_count and 0 <= self.cursor_row < self.row_count:
            cursor_key = self.coordinate_to_cell_key(Coordinate(self.cursor_row, 0)).row_key.value
        scroll = self.scroll_y
        self.clear()
        for key, cells in rows:
            self.add_row(*cells, key=key)
        self.apply_sort()
        if cursor_key is not None and cursor_key in {k for k, _ in rows}:
            self.move_cursor(row=self.get_row_index(cursor_key), scroll=False)
        self.scroll_y = scroll

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        event.stop()
        self.sort_by(str(event.column_key.value))
