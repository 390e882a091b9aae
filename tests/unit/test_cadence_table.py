"""The cadence table: one place for UI, headless and peer cadences, each with its basis.

Unit-level. The pinned values are the ones aitop had before the table existed:
moving a cadence is a decision (re-measure docs/benchmarks.md), not a side effect.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
from aitop.engine.cli import build_parser
from aitop.engine.headless.options import options_from
from aitop.engine.live.attach import AttachOptions, options_for_peers, peer_config
from aitop.probes import cadence
from aitop.probes.collector import CollectorConfig

BENCHMARKS = Path(__file__).resolve().parents[2] / "docs" / "benchmarks.md"


def test_every_profile_field_is_a_row_and_every_row_cites_a_measured_section() -> None:
    assert set(cadence.TABLE) == {f.name for f in dataclasses.fields(cadence.Profile)}
    assert {f.name for f in dataclasses.fields(CollectorConfig)} <= set(cadence.TABLE)
    headings = {line.lstrip("#").strip() for line in BENCHMARKS.read_text().splitlines()
                if line.startswith("#")}
    for name, row in cadence.TABLE.items():
        assert row.rule, name
        cited = [part.strip() for part in row.basis.split(";") if "benchmarks.md" in part]
        assert cited, f"{name} cites no section of docs/benchmarks.md"
        for part in cited:
            section = part.split(",", 1)[1].strip()
            assert any(h.startswith(section) for h in headings), (name, section)


def test_the_collector_reads_its_columns_from_the_table() -> None:
    assert CollectorConfig() == CollectorConfig.of(cadence.UI)
    assert CollectorConfig.headless() == CollectorConfig.of(cadence.HEADLESS)
    assert AttachOptions().evaluate_every_s == cadence.UI.evaluate_every_s


@pytest.mark.parametrize(("flags", "profile"), [([], cadence.UI),
                                                (["--headless"], cadence.HEADLESS)],
                         ids=["ui", "headless"])
def test_the_command_line_evaluates_at_its_columns_cadence(flags: list[str],
                                                           profile: cadence.Profile) -> None:
    """``--headless`` (and the exporter, which sets it) evaluates at the headless
    column's pace, the UI at the UI's."""
    args = build_parser().parse_args(["--pid", "1", *flags])
    options = options_from(args)
    assert (options.evaluate_every_s, options.evaluate_warmup_s) == (
        profile.evaluate_every_s, profile.evaluate_warmup_s)
    assert options.collector == (CollectorConfig.headless() if flags else CollectorConfig())


def test_the_columns_keep_the_cadences_aitop_was_measured_with() -> None:
    ui, headless = CollectorConfig(), CollectorConfig.headless()
    assert (ui.interval_s, ui.gpu_interval_s, ui.storage_interval_s, ui.environment_interval_s,
            ui.stack_rate_hz, ui.stack_window_s, ui.first_stack_window_s, ui.steps_interval_s,
            ui.steps_warmup_readings, ui.steps_warmup_interval_s) == (
        1.0, 1.0, 2.0, 30.0, 10, 10, 3, 10.0, 6, 2.0)
    assert (headless.interval_s, headless.gpu_interval_s, headless.storage_interval_s,
            headless.stack_window_s, headless.steps_interval_s) == (2.0, 2.0, 4.0, 15, 15.0)
    assert [ui.stack_window(i) for i in range(4)] == [3, 6, 10, 10]
    assert (cadence.UI.evaluate_every_s, cadence.UI.evaluate_warmup_s) == (2.0, 30.0)
    assert (cadence.HEADLESS.evaluate_every_s, cadence.HEADLESS.evaluate_warmup_s) == (3.0, 30.0)


@pytest.mark.parametrize("lead", [CollectorConfig(), CollectorConfig.headless()],
                         ids=["ui", "headless"])
def test_a_peers_cadences_follow_the_peer_rules(lead: CollectorConfig) -> None:
    peer = peer_config(lead, 4)
    assert peer.stack_rate_hz == 2  # 10 Hz / 4, rounded, at least 2 Hz
    assert isinstance(peer.stack_rate_hz, int) and isinstance(peer.stack_window_s, int)
    assert peer.stack_window_s == min(2 * lead.stack_window_s, 20)
    assert peer.first_stack_window_s == 5 and peer.steps_warmup_readings == 1
    assert peer.steps_interval_s == 60.0 and peer.gpu_interval_s == lead.gpu_interval_s
    assert (peer.interval_s, peer.storage_interval_s, peer.environment_interval_s) == (
        2 * lead.interval_s, 8 * lead.storage_interval_s, 4 * lead.environment_interval_s)
    options = options_for_peers(AttachOptions(collector=lead), 4)
    assert (options.evaluate_every_s, options.evaluate_warmup_s) == (5.0, 0.0)
    assert cadence.peer(cadence.UI, 4).stack_rate_hz == 2
