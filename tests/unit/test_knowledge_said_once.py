"""Each threshold is said once: restating one in a rule, a state or in Python fails here.

The GPU-utilisation bands live in documents.yaml (the priority framework's own
rows), the straggler cut and the sample minimum in rules.yaml's named
conditions; everything else refers to them by name.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
from aitop.knowledge.base.facts import Facts
from aitop.knowledge.judging.diagnosis import Diagnoser, hardware_use
from aitop.knowledge.reading.loader import load_knowledge_base

ROOT = Path(__file__).resolve().parents[2]
RULES_YAML = ROOT / "knowledge" / "data" / "rules.yaml"
KB = load_knowledge_base()
#: The documents' utilisation band edges, in percent and as fractions.
BAND_EDGES = {70, 85, 0.7, 0.85}


def comparisons(expr: str) -> set[tuple[str, float]]:
    """(metric, number) of every comparison of a metric with a number in ``expr``."""
    out = set()
    for node in ast.walk(ast.parse(expr, mode="eval")):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            names = [s.id for s in sides if isinstance(s, ast.Name)]
            numbers = [s.value for s in sides if isinstance(s, ast.Constant)
                       and isinstance(s.value, (int, float)) and not isinstance(s.value, bool)]
            out |= {(name, float(n)) for name in names for n in numbers}
    return out


def written_conditions() -> list[tuple[str, str]]:
    """Every condition as its author wrote it: rules, their actions' `when`, states."""
    out = []
    for rule in KB.rules.rules:
        out.append((rule.id, rule.condition.written))
        whens = [*rule.actions_when, *(w for ws in rule.actions_for_when.values() for w in ws)]
        out += [(f"{rule.id} action", w.written) for w in whens if w is not None]
    out += [(s.id, s.condition.written) for s in KB.rules.states if not s.thresholds]
    return out


def test_no_rule_or_state_restates_a_named_condition() -> None:
    named = {name: comparisons(c.written) for name, c in KB.rules.conditions.items()}
    assert named["enough_samples"] == {("phase_samples", 20.0)}
    assert named["holds_back_job"] == {("straggler_score", 0.75)}
    for where, expr in written_conditions():
        for name, said in named.items():
            again = comparisons(expr) & said
            assert not again, f"{where} restates {name} ({again}); write `{name}` instead"


def test_the_shared_numbers_appear_once_in_the_rule_file() -> None:
    text = RULES_YAML.read_text(encoding="utf-8")
    assert text.count("phase_samples >= 20") == 1
    assert text.count("0.75") == 1
    assert sum("enough_samples" in expr for _, expr in written_conditions()) == 35


def test_no_state_restates_the_documents_utilisation_bands() -> None:
    for spec in KB.rules.states:
        if spec.thresholds:
            continue  # built from documents.yaml
        for metric, value in comparisons(spec.condition.written):
            assert not (metric in ("accel_util", "gpu_util_mean") and value in BAND_EDGES), (
                f"state {spec.id} restates a GPU-utilisation band: use measured_by")
    bands = {s.id: s for s in KB.rules.states if s.thresholds}
    assert set(bands) == {"gpu_util_below_70", "gpu_util_70_85", "gpu_util_above_85"}
    for state_id, spec in bands.items():
        assert spec.thresholds == KB.documents.state(state_id).conditions


def _python_files() -> list[Path]:
    return [p for room in ("knowledge", "engine", "tui") for p in (ROOT / room).rglob("*.py")
            if "selftest" not in p.parts]  # the selftest's own pass marks for GPU demos


@pytest.mark.parametrize("path", _python_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_python_compares_with_neither_band_edge_nor_straggler_cut(path: Path) -> None:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if not isinstance(node, ast.Compare):
            continue
        for part in ast.walk(node):
            if isinstance(part, ast.Constant) and not isinstance(part.value, bool):
                assert part.value not in (BAND_EDGES | {0.75}), (
                    f"{path.name}:{part.lineno} compares with {part.value}: a threshold of "
                    "the knowledge base, said in its YAML")
    assert "STRAGGLER_SCORE" not in path.read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("util", "row", "well_used"),
    [(69.9, "gpu_util_below_70", False), (70.0, "gpu_util_70_85", False),
     (85.0, "gpu_util_70_85", False), (85.1, "gpu_util_above_85", True)],
)
def test_exactly_85_is_in_the_70_85_band_as_the_documents_say(
    util: float, row: str, well_used: bool
) -> None:
    """optimize-server.txt: "If utilization is 70-85% ... If utilization exceeds 85%"."""
    metrics = {"has_gpu": 1.0, "accel_util": util, "gpu_util_mean": util}
    states = Diagnoser(KB.rules, Facts()).states(metrics)
    assert [s.id for s in states] == [row]
    assert hardware_use(metrics, KB.rules.well_used_band())[0] is well_used
