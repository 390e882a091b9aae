"""A sortable table of row groups: a job's row with its ranks beneath it.

Groups sort by their first row's cell in the sort column (as ``SortableTable``
sorts rows: real values, unknowns last either way); the rows under it keep
their place, so a rank never leaves its job whatever the order.
"""

from __future__ import annotations

from textual.coordinate import Coordinate

from .sortable import Cell, SortableTable

#: One row: its key and cells.
Row = tuple[str, list[Cell]]


class GroupedTable(SortableTable):
    """``SortableTable`` whose rows come in groups that sort by their head row."""

    def __init__(self, *, id: str | None = None, default_sort: str | None = None,
                 reverse: bool = True) -> None:
        super().__init__(id=id, default_sort=default_sort, reverse=reverse)
        self._groups: list[list[Row]] = []

    def set_groups(self, groups: list[list[Row]]) -> None:
        """Replace the rows, each group's head first; sort, cursor and scroll are kept."""
        self._groups = [g for g in groups if g]
        self._fill(self._ordered())

    def set_rows(self, rows: list[Row]) -> None:
        self.set_groups([[row] for row in rows])

    def apply_sort(self) -> None:
        self._last_rows = None
        self._fill(self._ordered())

    def _ordered(self) -> list[Row]:
        keys = [str(k.value) for k in self.columns]
        column = keys.index(self.sort_column) if self.sort_column in keys else None
        groups = list(self._groups)
        if column is not None:
            def key(group: list[Row]) -> tuple[int, float | str]:
                k = group[0][1][column].sort_key()
                # Unknowns stay last whichever direction.
                return (k[0] if not self.sort_reverse else -k[0], k[1])

            groups.sort(key=key, reverse=self.sort_reverse)
        return [row for group in groups for row in group]

    def _fill(self, rows: list[Row]) -> None:
        """Redraw only when the rows changed, so a live refresh does not flicker."""
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
        if cursor_key is not None and cursor_key in {k for k, _ in rows}:
            self.move_cursor(row=self.get_row_index(cursor_key), scroll=False)
        self.scroll_y = scroll

    def selected_key(self) -> str | None:
        """The key of the row under the cursor, None on an empty table."""
        if not self.row_count or not 0 <= self.cursor_row < self.row_count:
            return None
        value = self.coordinate_to_cell_key(Coordinate(self.cursor_row, 0)).row_key.value
        return str(value) if value is not None else None
