"""A ``--rules`` file that moves a target moves it on screen and in the exported report.

The replay is loaded as ``aitop replay FILE --rules R`` loads it: the command's
knowledge base (``engine.commands.rule_files.knowledge_of``) handed to the
source, from which the view hands it to every panel. The recording is the
fixture's data-starved job: its GPU at 13 % now (48 % over the window) and 42 %
of its steps waiting for data, outside the documents' 80-95 % and 5 %, within
the moved bands of ``MOVED_TARGETS``.
"""

from __future__ import annotations

from pathlib import Path

from aitop.engine.commands.rule_files import knowledge_of
from aitop.engine.headless.export import write_snapshot
from aitop.engine.live.source import DataSource
from aitop.engine.records.snapshot import load_snapshot
from aitop.tui.widgets import fmt
from aitop.tui.widgets.gpu_panel import GpuPanel
from aitop.tui.widgets.step_panel import StepPanel
from rich.text import Text
from support.rule_files import MOVED_TARGETS, write_rule_file
from support.tui_pilot import make_app, settle
from support.tui_session import replay_source


def replays(tmp_path: Path) -> tuple[DataSource, DataSource]:
    """The same recording replayed without and with the moved targets."""
    recording = write_snapshot(tmp_path / "run.json", replay_source())[0]
    rules = write_rule_file(tmp_path, MOVED_TARGETS)
    return (load_snapshot(recording, knowledge_of([])),
            load_snapshot(recording, knowledge_of([rules])))


def style_of(text: Text, part: str) -> str:
    """The style a line draws ``part`` in (its first occurrence)."""
    at = text.plain.index(part)
    styles = [str(s.style) for s in text.spans if s.start <= at < s.end]
    return styles[-1] if styles else str(text.style)


async def drawn_styles(source: DataSource) -> tuple[str, str]:
    """The GPU panel's utilisation and the step panel's data wait, as drawn."""
    app = make_app(source)
    async with app.run_test(size=(120, 40)) as pilot:
        await settle(pilot)
        view = app.view
        assert view is not None
        gpu = next(line.text for line in app.screen.query_one(GpuPanel).lines(view, 100)
                   if line.text.plain.startswith("util"))
        step = next(line.text for line in app.screen.query_one(StepPanel).lines(view, 100)
                    if "data wait 42%" in line.text.plain)
        return style_of(gpu, "13%"), style_of(step, "42%")


async def test_the_panels_colour_by_the_moved_targets(tmp_path: Path) -> None:
    packaged, moved = replays(tmp_path)
    outside, within = fmt.STATUS_STYLE["outside"], fmt.STATUS_STYLE["within"]
    assert await drawn_styles(packaged) == (outside, outside)
    assert await drawn_styles(moved) == (within, within)


def key_metric_row(markdown: str, name: str) -> str:
    return next(line for line in markdown.splitlines() if line.startswith(f"| {name} |"))


def test_the_exported_key_metrics_judge_by_the_moved_targets(tmp_path: Path) -> None:
    packaged, moved = replays(tmp_path)
    before = write_snapshot(tmp_path / "before.json", packaged)[1].read_text(encoding="utf-8")
    after = write_snapshot(tmp_path / "after.json", moved)[1].read_text(encoding="utf-8")
    assert "80-95% during training" in key_metric_row(before, "GPU utilization")
    assert "outside" in key_metric_row(before, "GPU utilization")
    assert "outside" in key_metric_row(before, "Data loading time")
    gpu, data = key_metric_row(after, "GPU utilization"), key_metric_row(after, "Data loading time")
    assert "10-100 % (this team's band)" in gpu and "within" in gpu, gpu
    assert "< 50 % of step time" in data and "within" in data, data
