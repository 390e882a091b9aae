"""One source of truth: a panel, a finding and the Markdown report judge alike.

Every verdict the UI shows comes from ``aitop.knowledge.judging.verdicts``, which asks
the same targets and the same ``judge`` that a finding's evidence uses.
"""

from __future__ import annotations

import pytest
from aitop.knowledge.judging import verdicts
from aitop.knowledge.judging.diagnosis import evidence_for
from aitop.knowledge.metrics.gpu import (
    FALLBACK_TEMPERATURE_LIMIT_C,
    POWER_REASONS,
    THERMAL_REASONS,
)
from aitop.knowledge.reading.loader import load_knowledge_base

TARGETS = load_knowledge_base().facts.targets


def finding_status(metric: str, value: float) -> str:
    """How a finding's evidence judges ``value`` of ``metric``."""
    return evidence_for({metric: value}, [metric], TARGETS)[0].status


@pytest.mark.parametrize("util", [50.0, 69.0, 75.0, 79.0, 80.0, 90.0, 96.0, 100.0])
def test_gpu_utilisation_reads_the_same_in_panel_and_finding(util: float) -> None:
    assert verdicts.gpu_util(util, TARGETS) == finding_status("gpu_util_mean", util)


def test_the_cases_that_used_to_disagree() -> None:
    """A GPU at 75 % and data wait at 7 % were "near" in panels, "outside" in findings."""
    assert verdicts.gpu_util(75.0, TARGETS) == "outside" == finding_status("gpu_util_mean", 75.0)
    assert verdicts.data_wait(0.07, TARGETS) == "outside" == finding_status("phase_data_wait", 0.07)


@pytest.mark.parametrize("fraction", [0.02, 0.05, 0.055, 0.07, 0.5])
def test_data_wait_reads_the_same(fraction: float) -> None:
    assert verdicts.data_wait(fraction, TARGETS) == finding_status("phase_data_wait", fraction)


@pytest.mark.parametrize("used", [0.3, 0.69, 0.8, 0.9, 0.95, 1.0])
def test_gpu_memory_reads_the_same(used: float) -> None:
    assert verdicts.gpu_memory(used, TARGETS) == finding_status("gpu_mem_used_mean", used * 100)


@pytest.mark.parametrize(("temp", "slowdown"), [(60, None), (82, None), (84, None), (86, 87),
                                                (88, 87), (80, 90)])
def test_temperature_reads_the_same(temp: float, slowdown: float | None) -> None:
    limit = slowdown if slowdown is not None else FALLBACK_TEMPERATURE_LIMIT_C
    assert verdicts.gpu_temperature(temp, slowdown, TARGETS) == finding_status(
        "gpu_temp_margin_mean", limit - temp
    )


def test_the_temperature_fallback_is_the_documents_figure() -> None:
    row = next(m for m in load_knowledge_base().documents.metrics if m.id == "gpu_temperature")
    assert row.bounds.high == FALLBACK_TEMPERATURE_LIMIT_C
    assert row.bounds.prefer == "gpu_slowdown_temperature"


def test_clock_reasons_use_the_metrics_reason_sets() -> None:
    for reason in THERMAL_REASONS:
        assert verdicts.clock_reasons((reason,)) == "outside"
    for reason in POWER_REASONS:
        assert verdicts.clock_reasons((reason,)) == "near"
    # Neither set: shown in words, not judged (see knowledge/metrics/gpu.py).
    assert verdicts.clock_reasons(("hw_slowdown",)) == "within"
    assert verdicts.clock_reasons(("gpu_idle",)) == "within"
    assert verdicts.clock_reasons(()) == "within"


def test_unknown_values_are_unknown() -> None:
    assert verdicts.gpu_util(None, TARGETS) == "unknown"
    assert verdicts.gpu_temperature(None, 87.0, TARGETS) == "unknown"
    assert verdicts.iowait(None, TARGETS) == "unknown"
