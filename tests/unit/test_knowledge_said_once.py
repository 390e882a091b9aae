"""Each threshold is said once: restating one in a rule, a state, the UI or Python fails here.

Where each number lives, and how the rest refers to it:

* the documents' (the priority framework's GPU-utilisation bands, the key
  metrics' targets): documents.yaml; a condition names them with
  ``band(metric, row)``, ``target_high(metric)``, ``target_low(metric)``;
* aitop's own targets: rules.yaml ``targets:``, named the same way;
* aitop's own cuts: rules.yaml ``conditions:``, each once, used by name;
* the UI's own cuts, where the knowledge base has no target: tui/widgets/cuts.py.

So a rule's condition, its actions' ``when`` and a state's ``expr`` hold no
number but the few of ``NOT_THRESHOLDS`` (a flag, a count, a half), and no
widget compares a value with a number of its own. Each check is a function over
a rule set or a source text, and the last tests feed it a restatement to show
that it fails.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from aitop.knowledge.base.catalogue import CATALOGUE
from aitop.knowledge.base.facts import METRIC_NAMES, Facts
from aitop.knowledge.base.rules import RuleSet
from aitop.knowledge.base.targets import target_for
from aitop.knowledge.judging.diagnosis import Diagnoser, hardware_use
from aitop.knowledge.reading.loader import KnowledgeBase, load_knowledge_base
from aitop.probes.session import Session
from aitop.tui.screens.knowledge import priority_table
from aitop.tui.widgets import cuts
from aitop.tui.widgets.advisor_panel import AdvisorPanel
from aitop.tui.widgets.view import View

ROOT = Path(__file__).resolve().parents[2]
RULES_YAML = ROOT / "knowledge" / "data" / "rules.yaml"
KB = load_knowledge_base()
#: The documents' utilisation band edges, in percent and as fractions.
BAND_EDGES = {70, 85, 0.7, 0.85}


# ------------------------------------------------------------------ the allow-list

@dataclass(frozen=True)
class NotAThreshold:
    """A number a condition may write: what it means, and what it may stand beside."""

    why: str
    #: Units (the catalogue's) of a metric it may be compared with; None: any.
    units: frozenset[str] | None
    #: Whether it may appear in arithmetic (``x / 2``, ``x / 100 + 1``).
    arithmetic: bool


FLAG, COUNT, SHARE, CORES = "0/1", "", "fraction", "cores"
#: Every number a rule, an action's ``when`` or a state may write: none is a cut.
NOT_THRESHOLDS: dict[float, NotAThreshold] = {
    0.0: NotAThreshold("none at all: a flag's no, no worker, no step yet, no margin left",
                       None, False),
    1.0: NotAThreshold("a flag's yes, or at least one (a worker; a thread beyond the cores)",
                       frozenset({FLAG, COUNT}), True),
    2.0: NotAThreshold("more than one (rank, device, core), or half of a share (x / 2)",
                       frozenset({COUNT}), True),
    0.5: NotAThreshold("half: most of a share's time, or half a core (it rounds to one)",
                       frozenset({SHARE, CORES}), False),
    100.0: NotAThreshold("percent of a core as cores (100 % is one core)", frozenset(), True),
}


def _numbers(tree: ast.AST) -> Iterator[tuple[ast.Constant, ast.AST | None]]:
    """Every numeric literal of ``tree`` with the node it sits in (a sign looked through)."""
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) \
                and not isinstance(node.value, bool):
            parent = parents.get(node)
            while isinstance(parent, ast.UnaryOp):
                parent = parents.get(parent)
            yield node, parent


def _compared_with(number: ast.Constant, compare: ast.Compare) -> list[str]:
    """The metric names a literal is compared with directly in ``compare``."""
    sides = [compare.left, *compare.comparators]
    at = next(i for i, side in enumerate(sides) if number in ast.walk(side))
    return [s.id for s in (sides[at - 1:at] + sides[at + 1:at + 2]) if isinstance(s, ast.Name)]


def stray_numbers(expr: str) -> list[str]:
    """The numbers of ``expr`` that are cuts, not flags, counts or halves: each should be
    a named condition, or a band or target of the knowledge base."""
    out = []
    for number, parent in _numbers(ast.parse(expr, mode="eval")):
        allowed = NOT_THRESHOLDS.get(float(number.value))
        if allowed is None:
            out.append(f"{number.value}")
        elif isinstance(parent, ast.BinOp):
            if not allowed.arithmetic:
                out.append(f"{number.value} in arithmetic")
        elif isinstance(parent, ast.Compare):
            for name in _compared_with(number, parent):
                unit = CATALOGUE[name].unit if name in CATALOGUE else None
                if allowed.units is not None and unit not in allowed.units:
                    out.append(f"{name} against {number.value}")
        else:
            out.append(f"{number.value} as a value")
    return out


def written_conditions(ruleset: RuleSet) -> list[tuple[str, str]]:
    """Every condition as its author wrote it: rules, their actions' `when`, states."""
    out = []
    for rule in ruleset.rules:
        out.append((rule.id, rule.condition.written))
        whens = [*rule.actions_when, *(w for ws in rule.actions_for_when.values() for w in ws)]
        out += [(f"{rule.id} action", w.written) for w in whens if w is not None]
    out += [(s.id, s.condition.written) for s in ruleset.states if not s.thresholds]
    return out


def numbers_out_of_place(ruleset: RuleSet) -> list[str]:
    """``where: number`` for every cut a rule, an action or a state writes as a number."""
    return [f"{where}: {stray}" for where, expr in written_conditions(ruleset)
            for stray in stray_numbers(expr)]


# ------------------------------------------------------- the knowledge base's numbers

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


def knowledge_numbers(kb: KnowledgeBase, metric: str) -> set[float]:
    """The numbers the knowledge base says for ``metric``: its target's edges, and the
    priority framework's band edges where it measures GPU utilisation."""
    target = target_for(metric, kb.facts.targets)
    said = {edge for edge in (target.low, target.high) if edge is not None} if target else set()
    series = {metric, metric.rsplit("_", 1)[0]}
    for row in kb.documents.priority_framework:
        for threshold in row.conditions:
            scale = {n: s for n, s in METRIC_NAMES.get(threshold.metric, ())}
            said |= {threshold.value * scale[n] for n in series & scale.keys()}
    return said


def restated_in_conditions(kb: KnowledgeBase) -> list[str]:
    """Named conditions that write a band edge or a target edge instead of naming it."""
    return [f"{name}: {metric} against {value:g}, the knowledge base's number"
            for name, condition in kb.rules.conditions.items()
            for metric, value in comparisons(condition.written)
            if value in knowledge_numbers(kb, metric) and value not in NOT_THRESHOLDS]


# ------------------------------------------------------------------ the UI

#: Numbers a widget compares with that judge no value: sizes of the screen.
VISUAL: dict[tuple[str, float], str] = {
    ("tui/screens/main.py", 34): "rows below which the main screen goes compact",
    ("tui/widgets/panel.py", 6): "columns a sparkline needs beside its label",
    ("tui/widgets/ranks_panel.py", 4): "columns the phase bar needs",
    ("tui/widgets/host_panel.py", 8): "the per-core chart's label column",
    ("tui/app.py", 1e-9): "float tolerance between two refresh periods",
}
#: The UI's own cuts (tui/widgets/cuts.py), each said there once.
UI_CUTS = {"SLOW_CLOCK_SHARE", "SATURATED_CORE_PERCENT"}


def ui_numbers(source: str, path: str) -> list[str]:
    """``path:line: number`` for every number a comparison in ``source`` is made against,
    other than 0, 1, 2 (indices, counts, doubling) and the screen sizes of ``VISUAL``."""
    out = []
    for node in ast.walk(ast.parse(source)):
        if not isinstance(node, ast.Compare):
            continue
        for number, _parent in _numbers(node):
            value = number.value
            if isinstance(value, int) and value in (-1, 0, 1, 2):
                continue
            if (path, value) not in VISUAL:
                out.append(f"{path}:{number.lineno}: compares with {value}")
    return sorted(out)


def _tui_files() -> list[Path]:
    return sorted((ROOT / "tui").rglob("*.py"))


# ------------------------------------------------------------------ the tests

def test_every_number_in_a_rule_is_a_flag_a_count_or_a_half() -> None:
    """Every cut a condition needs is a name: a named condition, a band, a target."""
    assert numbers_out_of_place(KB.rules) == []


def test_the_allow_list_is_short_and_every_entry_is_used() -> None:
    used = {float(n.value) for _, expr in written_conditions(KB.rules)
            for n, _ in _numbers(ast.parse(expr, mode="eval"))}
    assert used == set(NOT_THRESHOLDS), "drop an entry no condition needs"
    assert len(NOT_THRESHOLDS) <= 5


def test_no_named_condition_restates_a_band_or_a_target() -> None:
    assert restated_in_conditions(KB) == []


def test_each_cut_is_said_in_one_named_condition() -> None:
    said: dict[tuple[str, float], str] = {}
    for name, condition in KB.rules.conditions.items():
        for metric, value in comparisons(condition.written):
            if value in NOT_THRESHOLDS:
                continue
            assert (metric, value) not in said, (
                f"{name} and {said[(metric, value)]} both compare {metric} with {value:g}")
            said[(metric, value)] = name


def test_no_rule_or_state_restates_a_named_condition() -> None:
    named = {name: comparisons(c.written) - {(m, v) for m, v in comparisons(c.written)
                                              if v in NOT_THRESHOLDS}
             for name, c in KB.rules.conditions.items()}
    assert named["enough_samples"] == {("phase_samples", 20.0)}
    assert named["holds_back_job"] == {("straggler_score", 0.75)}
    for where, expr in written_conditions(KB.rules):
        for name, said in named.items():
            again = comparisons(expr) & said
            assert not again, f"{where} restates {name} ({again}); write `{name}` instead"


def test_the_shared_numbers_appear_once_in_the_rule_file() -> None:
    text = RULES_YAML.read_text(encoding="utf-8")
    assert text.count("phase_samples >= 20") == 1
    assert text.count("0.75") == 1
    assert sum("enough_samples" in expr for _, expr in written_conditions(KB.rules)) == 42


def test_the_rules_on_gpu_utilisation_name_the_documents_bands() -> None:
    """The eight rules that judge GPU utilisation by the priority framework's edges."""
    naming = sorted(r.id for r in KB.rules.rules if "band(gpu_util_mean" in r.condition.written)
    assert naming == sorted([
        "gpu_taken_by_other_processes", "gpu_compute_bound", "gpu_compute_bound_amp",
        "try_torch_compile", "python_overhead", "loop_waits_in_own_code", "host_sync_stalls",
        "gpu_power_capped"])
    for rule in KB.rules.rules:
        for metric, value in comparisons(rule.condition.expr):
            if metric in ("gpu_util_mean", "accel_util") and value in BAND_EDGES:
                assert rule.id in naming, f"{rule.id} compares {metric} with {value:g}"


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


@pytest.mark.parametrize("path", _tui_files(), ids=lambda p: str(p.relative_to(ROOT)))
def test_the_ui_judges_with_the_knowledge_base_or_a_named_cut(path: Path) -> None:
    """A widget's verdict comes from ``verdicts`` (the knowledge base's targets) or a
    cut of tui/widgets/cuts.py; only sizes of the screen are numbers of its own."""
    rel = str(path.relative_to(ROOT))
    assert ui_numbers(path.read_text(encoding="utf-8"), rel) == []


def test_every_screen_size_allowed_is_still_compared_with() -> None:
    """The allow-list of screen sizes stays short: an entry no widget needs goes."""
    for (rel, value), why in VISUAL.items():
        tree = ast.parse((ROOT / rel).read_text(encoding="utf-8"))
        found = [n for node in ast.walk(tree) if isinstance(node, ast.Compare)
                 for n, _ in _numbers(node) if n.value == value]
        assert found, f"{rel} no longer compares with {value} ({why})"


def test_the_ui_cuts_are_the_known_ones() -> None:
    named = {n for n in vars(cuts) if n.isupper()}
    assert named == UI_CUTS, "a new UI cut: say why the knowledge base has no target for it"
    for path in _tui_files():
        text = path.read_text(encoding="utf-8")
        for name in UI_CUTS:
            if path.name != "cuts.py":
                assert f"{name} =" not in text, f"{path.name} defines {name} again"


# ------------------------------------------------------- the 70.0 and 85.0 edges

def _judged(util: float) -> tuple[list[str], bool | None, list[str], list[str], list[str]]:
    """What a GPU at ``util`` % is, for the states, the rules and the screen."""
    metrics = {"has_gpu": 1.0, "accel_util": util, "gpu_util_mean": util,
               "phase_device": 0.9, "phase_compute": 0.9, "phase_other": 0.0,
               "phase_sync": 0.3, "phase_samples": 100.0, "uses_amp": 0.0,
               "amp_in_source": 0.0, "uses_compile": 0.0, "gpu_throttle_power": 1.0,
               "window_s": 20.0}
    diagnoser = Diagnoser(KB.rules, KB.facts)
    for t in range(30):
        diagnosis = diagnoser.diagnose(metrics, 1000.0 + t)
    view = View(Session(4242), diagnosis, 1029.0, live=True, knowledge=KB)
    shown = [line.text.plain for line in AdvisorPanel().lines(view, 120)]
    table = priority_table(KB.documents, view)
    marked = [cell.plain for cell, now in zip(table.columns[1].cells, table.columns[0].cells,
                                              strict=True) if now.plain]
    firing = [f.id for f in diagnosis.findings]
    return [s.id for s in diagnosis.states], diagnosis.hardware_well_used, firing, shown, marked


@pytest.mark.parametrize(
    ("util", "row", "well_used"),
    [(69.9, "gpu_util_below_70", False), (70.0, "gpu_util_70_85", False),
     (85.0, "gpu_util_70_85", False), (85.1, "gpu_util_above_85", True)],
)
def test_exactly_70_and_85_read_the_same_in_rule_state_and_screen(
    util: float, row: str, well_used: bool
) -> None:
    """optimize-server.txt: "below 70%", "70-85%", "If utilization exceeds 85%".

    documents.yaml's rows say where an edge falls, once; the states, the rules
    (``band()``), the hardware line and both screens read it from there.
    """
    metrics = {"has_gpu": 1.0, "accel_util": util, "gpu_util_mean": util}
    assert [s.id for s in Diagnoser(KB.rules, Facts()).states(metrics)] == [row]
    assert hardware_use(metrics, KB.rules.well_used_band())[0] is well_used
    states, hardware_well_used, firing, shown, marked = _judged(util)
    assert row in states and hardware_well_used is well_used
    # The rules that need a well-used GPU fire exactly where the state says so...
    assert ("gpu_compute_bound" in firing) is well_used
    assert ("gpu_power_capped" in firing) is well_used
    # ...the ones that need the lowest band exactly below 70.0...
    assert ("host_sync_stalls" in firing) is (row == "gpu_util_below_70")
    # ...and compile advice from the 70-85 band on (70.0 included).
    rules = {r.id: r for r in KB.rules.rules}
    compile_band = rules["try_torch_compile"].condition.evaluate(
        {**metrics, "uses_compile": 0.0, "phase_compute": 0.9, "phase_samples": 100.0})
    assert compile_band is (row != "gpu_util_below_70")
    name = KB.facts.states[row].name
    assert f"State {name}" in shown and name in marked  # the advisor, and "now ▶"
    assert any(line.startswith("GPU well used" if well_used else "GPU underused")
               for line in shown)


# ------------------------------------------------------- the checks can fail

def _user_file(tmp_path: Path, text: str) -> KnowledgeBase:
    path = tmp_path / "mine.yaml"
    path.write_text(text, encoding="utf-8")
    return load_knowledge_base([path])


def test_a_rule_that_restates_85_fails_the_check(tmp_path: Path) -> None:
    kb = _user_file(tmp_path, (
        "rules:\n  - name: busy_gpu\n    expr: has_gpu == 1 and gpu_util_mean >= 85\n"
        "    severity: low\n    category: compute\n    title: t\n"
        "    source: {document: optimize}\n"
        "    actions:\n      - {text: a, when: proc_read_mean >= 1}\n"))
    assert numbers_out_of_place(kb.rules) == [
        "busy_gpu: 85", "busy_gpu action: proc_read_mean against 1"]


def test_a_named_condition_that_restates_a_target_fails_the_check(tmp_path: Path) -> None:
    kb = _user_file(tmp_path, "conditions:\n  ram_full: host_ram_used_mean >= 90\n"
                              "  well_used: accel_util > 85\n")
    assert sorted(restated_in_conditions(kb)) == [
        "ram_full: host_ram_used_mean against 90, the knowledge base's number",
        "well_used: accel_util against 85, the knowledge base's number"]


def test_a_widget_with_a_cut_of_its_own_fails_the_check() -> None:
    source = "style = 'red' if util >= 0.9 else ''\nhot = temp > 83\nfirst = i == 0\n"
    assert ui_numbers(source, "tui/widgets/made_up.py") == [
        "tui/widgets/made_up.py:1: compares with 0.9",
        "tui/widgets/made_up.py:2: compares with 83"]


@pytest.mark.parametrize(
    ("expr", "stray"),
    [("phase_data_wait >= 0.10", ["0.1"]),
     ("num_workers >= 1 and has_gpu == 0", []),
     ("stall_read < 1", ["stall_read against 1"]),           # 1 MB/s is a cut
     ("free_cores >= 0.5 and phase_compute >= 0.5", []),
     ("main_cpu_mean >= 0.5", ["main_cpu_mean against 0.5"]),
     ("main_cpu_mean / 100 + 1 > cpu_count", []),
     ("max(phase_forward, 0.2) > 0", ["0.2"]),
     ("phase_data_wait >= target_high(phase_data_wait)", [])],
)
def test_stray_numbers_tell_a_cut_from_a_flag_a_count_or_a_half(
    expr: str, stray: list[str]
) -> None:
    assert stray_numbers(expr) == stray
