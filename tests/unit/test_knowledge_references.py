"""A condition names the knowledge base's bands and targets; the number is said where it is.

``band(metric, row)`` is the documents' priority-framework row on a metric,
``target_high``/``target_low`` an edge of a metric's target. They are written out
when the file is read, so a typo fails there with file and line, and the
evaluator and the PromQL translation see plain numbers.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from aitop.engine.prometheus.promql import Translator
from aitop.knowledge.base.catalogue import CATALOGUE
from aitop.knowledge.base.expressions import Condition, ExpressionError, names_in
from aitop.knowledge.base.references import KnowledgeReferences
from aitop.knowledge.reading.loader import load_knowledge_base
from aitop.knowledge.reading.yamlio import KnowledgeError

KB = load_knowledge_base()
REFS = KnowledgeReferences(KB.documents, KB.facts.targets)
RULE = ("rules:\n  - name: mine\n    expr: {expr}\n    severity: low\n    category: host\n"
        "    title: t\n    source: {{document: diagnose}}\n")


def written_out(expr: str) -> str:
    return Condition(expr, CATALOGUE, {}, REFS).expr


@pytest.mark.parametrize(
    ("written", "expr"),
    [
        ("band(gpu_util_mean, gpu_util_above_85)", "gpu_util_mean > 85"),
        ("band(gpu_util_mean, gpu_util_70_85)", "gpu_util_mean >= 70 and gpu_util_mean <= 85"),
        ("band(accel_util, gpu_util_below_70)", "accel_util < 70"),
        # `not` before one comparison turns it round: the rest of the scale.
        ("not band(gpu_util_mean, gpu_util_above_85)", "gpu_util_mean <= 85"),
        ("has_gpu == 0 or not band(gpu_util_mean, gpu_util_below_70)",
         "has_gpu == 0 or gpu_util_mean >= 70"),
        # A band of two edges keeps its brackets where `or` would change it.
        ("has_gpu == 0 or band(gpu_util_mean, gpu_util_70_85)",
         "has_gpu == 0 or (gpu_util_mean >= 70 and gpu_util_mean <= 85)"),
        ("not band(gpu_util_mean, gpu_util_70_85)",
         "not (gpu_util_mean >= 70 and gpu_util_mean <= 85)"),
        # Targets in the metric's own unit: the documents' 5 % is a fraction here.
        ("phase_data_wait >= target_high(phase_data_wait)", "phase_data_wait >= 0.05"),
        ("gpu_util_mean < target_low(gpu_util_mean)", "gpu_util_mean < 80"),
        ("host_ram_used_mean >= target_high(host_ram_used)", "host_ram_used_mean >= 90"),
    ],
)
def test_a_reference_is_written_out_with_the_knowledge_bases_number(
    written: str, expr: str
) -> None:
    assert written_out(written) == expr


def test_the_arguments_of_a_reference_are_names_not_metrics_read() -> None:
    assert names_in("band(gpu_util_mean, gpu_util_above_85)", REFS.functions) == set()
    assert Condition("band(gpu_util_mean, gpu_util_above_85)", CATALOGUE, {}, REFS).names == {
        "gpu_util_mean"}


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("band(gpu_util_mean, gpu_util_above_58)",
         "no row 'gpu_util_above_58' in the priority framework (did you mean gpu_util_above_85?)"),
        ("band(gpu_mem_used_mean, gpu_util_above_85)",
         "gpu_mem_used_mean does not measure the documents' gpu_utilization"),
        ("band(gpu_util_mean, running_out_of_vram)", "has no conditions to measure"),
        ("band(gpu_util_mean)", "band() takes a metric and a row"),
        ("band(gpu_util_mean, 85)", "band() takes names only"),
        ("target_high(phase_data_wiat) > 0", "no target for phase_data_wiat (did you mean"),
        ("phase_data_wait >= target_low(phase_data_wait)",
         "the target of phase_data_wait ('Less than 5% of total step time') has no low edge"),
        ("target_high(a, b) > 0", "target_high() takes one metric"),
    ],
)
def test_a_bad_reference_is_a_clear_error(expr: str, message: str) -> None:
    with pytest.raises(ExpressionError) as info:
        written_out(expr)
    assert message in str(info.value)


def test_without_a_knowledge_base_a_reference_is_an_unknown_function() -> None:
    with pytest.raises(ExpressionError, match="unknown function band"):
        Condition("band(gpu_util_mean, gpu_util_above_85)", CATALOGUE)


def test_a_typo_in_a_rule_file_fails_at_load_with_file_and_line(tmp_path: Path) -> None:
    path = tmp_path / "mine.yaml"
    path.write_text(RULE.format(expr="band(gpu_util_mean, gpu_util_abve_85)"))
    with pytest.raises(KnowledgeError) as info:
        load_knowledge_base([path])
    assert len(info.value.problems) == 1
    problem = info.value.problems[0]
    assert (problem.file, problem.line) == (str(path), 3)  # the line of its expr
    assert "did you mean gpu_util_above_85?" in problem.message


def test_a_users_target_moves_every_rule_that_names_it(tmp_path: Path) -> None:
    """aitop's own targets are said once: a rule file's entry moves the rules with it."""
    path = tmp_path / "mine.yaml"
    path.write_text("targets:\n  - {metric: host_ram_used, high: 80.0, text: '< 80 % of RAM'}\n")
    kb = load_knowledge_base([path])
    rule = next(r for r in kb.rules.rules if r.id == "host_ram_pressure")
    assert rule.condition.written.startswith("host_ram_used_mean >= target_high(host_ram_used)")
    assert rule.condition.expr.startswith("host_ram_used_mean >= 80 ")
    assert kb.facts.targets["host_ram_used"].high == 80.0


def test_a_users_target_moves_the_rules_that_name_it(tmp_path: Path) -> None:
    """A user's `targets:` entry wins over the documents' key metric, for the rules that
    name the target as for the evidence; without it the documents' 5 % holds."""
    state = next(s for s in KB.rules.states if s.id == "high_data_loading_latency")
    assert state.condition.expr == "phase_data_wait >= 0.05"
    path = tmp_path / "mine.yaml"
    path.write_text("targets:\n  - {metric: phase_data_wait, high: 0.5, text: 'mine'}\n")
    kb = load_knowledge_base([path])
    state = next(s for s in kb.rules.states if s.id == "high_data_loading_latency")
    assert state.condition.expr == "phase_data_wait >= 0.5"
    assert kb.facts.targets["phase_data_wait"].high == 0.5


def test_prometheus_gets_the_number_in_the_series_unit() -> None:
    """The translation sees the written-out number and converts it like a literal."""
    rule = next(r for r in KB.rules.rules if r.id == "gpu_power_capped")
    assert "band(gpu_util_mean, gpu_util_above_85)" in rule.condition.written
    promql = Translator().condition(rule.condition.expr)
    assert "aitop_gpu_util_mean_ratio > 0.85" in promql
