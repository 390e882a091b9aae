"""The node view: every PyTorch job of the machine, one row a job, judged.

Each row: the job, its user and command, how long it has run, what it is doing
(training, evaluating, serving, warming up, stalled, or still collecting), its
bottleneck in one sentence, steps/s, CPU cores, memory, GPU and the predicted
gain of its lead action. A multi-rank job's ranks unfold beneath it (``r``).
Enter opens the job's full view (what ``aitop --pid`` shows), Escape returns.
What aitop may not watch is listed below the table with the reason and what to
do; an empty machine says how to start the demo.
"""

from __future__ import annotations

from typing import ClassVar

from aitop.engine.fleet.rows import JobRow, NodeTable
from aitop.engine.live.job import Rank
from aitop.engine.live.node import NO_JOBS
from aitop.engine.reports.gain import gain_text
from aitop.probes import cadence
from rich.text import Text
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Static

from ..widgets import fmt
from ..widgets.grouped_table import GroupedTable, Row
from ..widgets.key_bar import KeyBar
from ..widgets.sortable import Cell, num_cell

#: (key, title, width); the bottleneck takes what the others leave.
COLUMNS: tuple[tuple[str, str, int], ...] = (
    ("job", "Job", 18),
    ("user", "User", 7),
    ("command", "Command", 16),
    ("age", "Age", 6),
    ("state", "State", 11),
    ("verdict", "Bottleneck", 0),
    ("steps", "Steps/s", 7),
    ("cpu", "CPU", 5),
    ("mem", "Mem", 6),
    ("gpu", "GPU", 4),
    ("gpumem", "GPU mem", 7),
    ("gain", "Gain", 6),
)
#: The bottleneck column never narrower than this: on a narrow terminal these
#: columns give way first, in this order (then the table scrolls).
MIN_VERDICT = 40
GIVE_WAY = ("command", "user", "gpumem", "age", "mem")


def visible_columns(width: int) -> tuple[list[tuple[str, str, int]], int]:
    """The columns that fit ``width`` with the bottleneck at least ``MIN_VERDICT`` wide,
    and the bottleneck's width (what the others leave; 2 cells of padding each)."""
    shown = list(COLUMNS)
    for key in (None, *GIVE_WAY):
        shown = [c for c in shown if c[0] != key]
        fixed = sum(w + 2 for k, _t, w in shown if k != "verdict") + 6
        if width - fixed >= MIN_VERDICT:
            break
    return shown, max(MIN_VERDICT, width - fixed)

#: What each state is called, and its status colour: a job that does not move is
#: an alarm, one not judged yet a warning; what a job does is no verdict.
STATE_WORDS: dict[str, tuple[str, str]] = {
    "training": ("training", ""),
    "evaluating": ("evaluating", ""),
    "serving": ("serving", ""),
    "warming_up": ("warming up", fmt.STATUS_STYLE["near"]),
    "stalled": ("STALLED", fmt.STATUS_STYLE["outside"]),
    "collecting": ("collecting…", "dim"),
}
WAITING_WORDS = {"attaching": "attaching…", "waiting": "waiting for ranks"}


def state_cell(row: JobRow) -> Cell:
    if row.status in WAITING_WORDS:
        return Cell(WAITING_WORDS[row.status], row.status, "dim")
    word, style = STATE_WORDS[row.state]
    return Cell(word, row.state, style)


def verdict_text(row: JobRow) -> str:
    if row.status != "watched":
        return row.reason
    if row.category is None or row.category in ("collecting", "unknown"):
        return row.verdict or "collecting samples; judged once a window fills"
    if row.category in ("warming_up", "stalled"):
        return row.verdict  # a job state says itself ("Stalled: no progress for 40 s ...")
    # The report's category, as the report names it ("memory" is the host's or the GPU's).
    return f"{row.category.replace('_', ' ').upper()}: {row.verdict}"


def job_cells(row: JobRow, expanded: bool) -> dict[str, Cell]:
    marker = ("▾ " if expanded else "▸ ") if row.ranks else "  "
    return {
        "job": Cell(marker + row.job_id, row.job_id, "bold"),
        "user": Cell(row.user, row.user),
        "command": Cell(row.command, row.command, "dim"),
        "age": num_cell(row.age_s, fmt.duration(row.age_s) if row.age_s is not None else "—"),
        "state": state_cell(row),
        "verdict": Cell(verdict_text(row), row.category or ""),
        "steps": num_cell(row.steps_per_s, fmt.num(row.steps_per_s, ".1f")),
        "cpu": num_cell(row.cpu_cores, fmt.num(row.cpu_cores, ".1f")),
        "mem": num_cell(row.rss_bytes, fmt.human_bytes(row.rss_bytes)),
        "gpu": num_cell(row.gpu_util_percent, fmt.pct(row.gpu_util_percent)),
        "gpumem": num_cell(row.gpu_mem_bytes, fmt.human_bytes(row.gpu_mem_bytes)),
        "gain": num_cell(row.gain.speedup if row.gain else None,
                         gain_text(row.gain, brief=True).strip() if row.gain else "—"),
    }


def rank_cells(rank: Rank, last: bool) -> dict[str, Cell]:
    flag = Cell("straggler", style=fmt.STATUS_STYLE["outside"]) if rank.straggler \
        else Cell(rank.status if rank.status != "watched" else "", style="dim")
    cores = rank.cpu_percent / 100.0 if rank.cpu_percent is not None else None
    return {
        "job": Cell(("  └ " if last else "  ├ ") + rank.label),
        "command": Cell(f"PID {rank.pid}", style="dim"),
        "state": flag,
        "verdict": Cell(rank.cause or "", style="dim"),
        "steps": num_cell(rank.steps_per_s, fmt.num(rank.steps_per_s, ".1f")),
        "cpu": num_cell(cores, fmt.num(cores, ".1f")),
        "gpu": num_cell(rank.gpu_util_percent, fmt.pct(rank.gpu_util_percent)),
        "gpumem": num_cell(rank.gpu_mem_percent, fmt.pct(rank.gpu_mem_percent)),
    }


def groups_of(table: NodeTable, expanded: set[str], columns: list[str]) -> list[list[Row]]:
    """One group a job: its row, then (unfolded) a row per rank; ``columns``' cells."""
    def cells(by_key: dict[str, Cell]) -> list[Cell]:
        return [by_key.get(key, BLANK) for key in columns]

    groups = []
    for row in table.rows:
        group: list[Row] = [(row.key, cells(job_cells(row, row.key in expanded)))]
        if row.key in expanded:
            group += [(f"{row.key}/{rank.pid}", cells(rank_cells(rank, i == len(row.ranks) - 1)))
                      for i, rank in enumerate(row.ranks)]
        groups.append(group)
    return groups


BLANK = Cell("")


class JobTable(GroupedTable):
    """The jobs' table: Enter opens the job under the cursor (shown in the key bar)."""

    ASCENDING = frozenset({"job", "user", "command", "state", "verdict"})

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "select_cursor", "Open job",
                tooltip="the job's full view, what aitop --pid shows (Escape returns)"),
    ]


class NodeScreen(Screen[None]):
    """Every job of the machine; Enter opens one."""

    AUTO_FOCUS = "#jobs"

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("enter", "open_job", "Open job", tooltip="the job's full view (Escape returns)"),
        Binding("r", "toggle_ranks", "Ranks", tooltip="unfold / fold a multi-rank job's ranks"),
        Binding("c", "sort('cpu')", "Sort CPU", show=False),
        Binding("m", "sort('mem')", "Sort memory", show=False),
        Binding("a", "sort('age')", "Sort age", show=False),
        Binding("n", "sort('job')", "Sort job", show=False),
        Binding("u", "sort('gpu')", "Sort GPU", show=False),
        Binding("t", "sort('state')", "Sort state", show=False),
        # A recording's time cursor before the table's own keys (live, they fall through).
        Binding("left", "app.cursor_step(-1)", "Back", show=False, priority=True),
        Binding("right", "app.cursor_step(1)", "Fwd", show=False, priority=True),
        Binding("home", "app.cursor_home", "Start", show=False, priority=True),
        Binding("end", "app.cursor_end", "End", show=False, priority=True),
    ]

    class OpenJob(Message):
        """The user asked for one job's full view (at one of its ranks, if ``pid``)."""

        def __init__(self, key: str, pid: int | None = None) -> None:
            super().__init__()
            self.key = key
            self.pid = pid

    def __init__(self) -> None:
        super().__init__()
        self.table_state: NodeTable | None = None
        #: Jobs whose ranks are unfolded, by key.
        self.expanded: set[str] = set()
        #: The columns shown and the bottleneck's width, as last laid out.
        self._layout: tuple[list[str], int] = ([], 0)

    def compose(self) -> ComposeResult:
        yield Static(id="node-header")
        yield Static(id="node-empty")
        yield JobTable(id="jobs", default_sort="cpu")
        yield Static(id="node-limits")
        yield KeyBar()

    def on_mount(self) -> None:
        current = getattr(self.app, "node_table", None)
        if isinstance(current, NodeTable):
            self.update_node(current)

    def on_screen_resume(self) -> None:
        redraw = getattr(self.app, "redraw", None)
        if redraw is not None:
            redraw()

    def on_resize(self) -> None:
        self._build_columns()
        if self.table_state is not None:
            self.update_node(self.table_state)

    def _build_columns(self) -> None:
        """The columns that fit; the bottleneck gets the width the others leave."""
        shown, width = visible_columns(self.size.width)
        layout = ([key for key, _t, _w in shown], width)
        if layout == self._layout:
            return
        self._layout = layout
        table = self.query_one(GroupedTable)
        table.clear(columns=True)
        for key, title, w in shown:
            table.add_column(title, key=key, width=w or width)
        table.apply_sort()

    def update_node(self, table: NodeTable) -> None:
        self.table_state = table
        if not self._layout[0]:
            self._build_columns()
        self.query_one("#node-header", Static).update(self._header(table))
        jobs = self.query_one(GroupedTable)
        empty = self.query_one("#node-empty", Static)
        empty.display = table.empty
        jobs.display = not table.empty
        if table.empty:
            empty.update(Text(NO_JOBS, style="bold"))
        jobs.set_groups(groups_of(table, self.expanded, self._layout[0]))
        if jobs.display and self.focused is None:
            jobs.focus()  # the first job of a machine that had none
        limits = self.query_one("#node-limits", Static)
        lines = self._limits(table)
        limits.display = bool(lines)
        limits.update(Text("\n").join(lines))

    def _header(self, table: NodeTable) -> Text:
        app = self.app
        text = Text()
        text.append(" aitop ", style="bold reverse")
        text.append(f" node {table.hostname} ", style="bold")
        watched = sum(r.status == "watched" for r in table.rows)
        text.append(f" {len(table.rows)} PyTorch job{'s' if len(table.rows) != 1 else ''}"
                    f" · {watched} watched")
        if table.not_watched:
            text.append(f" · {len(table.not_watched)} not watched",
                        style=fmt.STATUS_STYLE["near"])
        if table.pace > cadence.OWN_PACE:
            text.append(f" · each sampled {table.pace:.2g}x less often", style="dim")
        mode = Text()
        if not table.live:
            mode.append(" REPLAY ", style="bold reverse")
            mode.append(f" {fmt.clock(table.t)} ", style="bold")
        elif getattr(app, "paused", False):
            mode.append(" PAUSED ", style="bold reverse")
            mode.append(f" at {fmt.clock(table.t)}", style="bold")
        else:
            mode.append(" LIVE ", style="bold reverse")
            mode.append(f" {fmt.clock(table.t)}")
        mode.append(f"  refresh {getattr(app, 'refresh_s', 0):g}s ", style="dim")
        width = max(1, self.size.width)
        room = width - mode.cell_len - 1
        text.truncate(max(0, room), overflow="ellipsis")
        text.pad_right(max(0, room - text.cell_len))
        first = text + Text(" ") + mode
        grid = self.query_one(GroupedTable)
        order = "descending" if grid.sort_reverse else "ascending"
        second = Text(f" Enter: a job's full view · r: its ranks · sorted by {grid.sort_column} "
                      f"({order}); c m a n u t or a click on a header sorts", style="dim")
        return Text("\n").join([first, second])

    @staticmethod
    def _limits(table: NodeTable) -> list[Text]:
        """What aitop may not watch (or watches without stacks): why, and what to do."""
        lines = []
        partial = [r for r in table.rows if r.status == "watched" and r.reason]
        if table.not_watched or partial:
            lines.append(Text(f" Not watched ({len(table.not_watched)})"
                              + (f", watched without stacks ({len(partial)})" if partial else ""),
                              style="bold"))
        for row in (*table.not_watched, *partial):
            line = Text()
            line.append(f"  ✗ PID {row.pid} ", style=fmt.STATUS_STYLE["outside"])
            line.append(f"{row.user}  {fmt.ellipsize(row.command, 40)}  ", style="dim")
            line.append(row.reason)
            lines.append(line)
        return lines

    # -------------------------------------------------------------- keys

    def _selected(self) -> tuple[str, int | None] | None:
        key = self.query_one(GroupedTable).selected_key()
        if key is None:
            return None
        job, _, rank = key.partition("/")
        return job, int(rank) if rank else None

    def action_open_job(self) -> None:
        selected = self._selected()
        if selected is not None:
            self.post_message(self.OpenJob(*selected))

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_open_job()

    def action_toggle_ranks(self) -> None:
        selected = self._selected()
        if selected is None or self.table_state is None:
            return
        key = selected[0]
        row = next((r for r in self.table_state.rows if r.key == key), None)
        if row is None or not row.ranks:
            self.notify("One process: this job has no other ranks.", timeout=3)
            return
        self.expanded ^= {key}
        self.update_node(self.table_state)

    def action_sort(self, column: str) -> None:
        self.query_one(GroupedTable).sort_by(column)
        if self.table_state is not None:
            self.update_node(self.table_state)
