"""The one front door to the knowledge base: one loader, one cache, every problem at once.

Unit-level (the packaged files are read once per process); the same three
mistakes through the real command are in cli/test_bad_input.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from aitop.knowledge.reading.loader import KnowledgeBase, load_knowledge_base, rules_in_document
from aitop.knowledge.reading.yamlio import KnowledgeError, load_yaml_file
from support.rule_files import THREE_MISTAKES


def _write(tmp_path: Path, text: str, name: str = "bad.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return path


def test_every_caller_gets_the_same_knowledge_base() -> None:
    kb = load_knowledge_base()
    assert isinstance(kb, KnowledgeBase)
    assert load_knowledge_base() is kb and load_knowledge_base([]) is kb
    assert kb.files == ("rules.yaml",)
    # Everything a diagnosis needs comes from this one object.
    assert kb.rules.rules and kb.rules.states and kb.phases.rules and kb.documents.techniques
    assert "phase_data_wait" in kb.facts.targets and "phase_checkpoint" in kb.facts.targets


def test_the_cache_is_keyed_on_the_rule_files_and_sees_an_edit(tmp_path: Path) -> None:
    path = _write(tmp_path, "rules: []\nconditions:\n  enough_samples: phase_samples >= 30\n",
                  "mine.yaml")
    first = load_knowledge_base([path])
    assert load_knowledge_base([path]) is first
    assert first is not load_knowledge_base()
    path.write_text("rules: []\nconditions:\n  enough_samples: phase_samples >= 40\n")
    os.utime(path, ns=(1, 1))  # the same size, and a time that says nothing: the content tells
    edited = load_knowledge_base([path])
    assert edited is not first
    assert edited.rules.conditions["enough_samples"].expr == "phase_samples >= 40"


def test_three_mistakes_are_three_located_problems(tmp_path: Path) -> None:
    path = _write(tmp_path, THREE_MISTAKES)
    with pytest.raises(KnowledgeError) as info:
        load_knowledge_base([path])
    problems = info.value.problems
    assert [(p.file, p.line) for p in problems] == [(str(path), 3), (str(path), 4),
                                                    (str(path), 7)]
    lines = str(info.value).splitlines()
    assert len(lines) == 3 and all(ln.startswith(f"{path}:") for ln in lines)
    assert "unknown metric phase_data_wiat" in lines[0]
    assert "did you mean phase_data_wait" in lines[0]
    assert "unknown severity 'urgent'" in lines[1]
    assert "'for' must be a duration" in lines[2]


def test_problems_of_several_files_are_reported_together(tmp_path: Path) -> None:
    first = _write(tmp_path, "rules:\n  - name: a\n    expr: nope > 1\n", "first.yaml")
    second = _write(tmp_path, "phases:\n  - phase: forwrd\n    rank: 5\n    signatures: []\n",
                    "second.yaml")
    with pytest.raises(KnowledgeError) as info:
        load_knowledge_base([first, second])
    files = {p.file for p in info.value.problems}
    assert files == {str(first), str(second)}
    assert any("unknown phase 'forwrd'" in p.message for p in info.value.problems)


def test_a_yaml_error_in_one_file_does_not_hide_the_problems_of_another(tmp_path: Path) -> None:
    broken = _write(tmp_path, "rules: [unclosed\n", "broken.yaml")
    wrong = _write(tmp_path, "rules:\n  - name: a\n    expr: nope > 1\n", "wrong.yaml")
    with pytest.raises(KnowledgeError) as info:
        load_knowledge_base([broken, wrong])
    assert {p.file for p in info.value.problems} == {str(broken), str(wrong)}


def test_a_misspelt_required_key_is_one_problem_not_two(tmp_path: Path) -> None:
    path = _write(tmp_path, "phases:\n  - phase: forward\n    rank: 5\n    signature: []\n")
    with pytest.raises(KnowledgeError) as info:
        load_knowledge_base([path])
    assert len(info.value.problems) == 1
    assert "unknown key 'signature' (did you mean 'signatures'?)" in str(info.value)


def test_a_file_wrong_everywhere_is_capped(tmp_path: Path) -> None:
    rules = "".join(f"  - name: r{i}\n    expr: nope{i} > 1\n" for i in range(200))
    with pytest.raises(KnowledgeError) as info:
        load_knowledge_base([_write(tmp_path, "rules:\n" + rules)])
    assert len(info.value.problems) <= 51
    assert "more problems" in info.value.problems[-1].message


# ------------------------------------------------------------ named conditions


def test_a_named_condition_is_written_out_where_it_is_used() -> None:
    rules = {r.id: r for r in load_knowledge_base().rules.rules}
    dominant = rules["data_wait_dominant"].condition
    assert dominant.written == "data_wait_dominates and enough_samples"
    assert dominant.expr == "phase_data_wait >= 0.30 and phase_samples >= 20"
    assert "enough_samples" not in dominant.names and "phase_samples" in dominant.names
    # Under `not` the written-out condition is bracketed; the meaning is Python's.
    assert rules["communication_dominates"].condition.expr.endswith(
        "and not (straggler_score < 0.75)")


def test_a_rule_file_redefines_a_condition_for_every_rule_that_uses_it(tmp_path: Path) -> None:
    path = _write(tmp_path, "conditions:\n  enough_samples: phase_samples >= 100\n", "mine.yaml")
    kb = load_knowledge_base([path])
    users = [r for r in kb.rules.rules if "enough_samples" in r.condition.written]
    assert len(users) == 42
    assert all("phase_samples >= 100" in r.condition.expr for r in users)
    rule = next(r for r in kb.rules.rules if r.id == "data_wait_dominant")
    assert rule.condition.evaluate({"phase_data_wait": 0.5, "phase_samples": 50.0}) is False


@pytest.mark.parametrize(
    ("text", "line", "message"),
    [
        ("rules:\n  - name: a\n    expr: enough_sampels and phase_data_wait > 0.5\n"
         "    severity: low\n    category: host\n    title: t\n    source: {document: diagnose}\n",
         3, "unknown metric enough_sampels"),
        ("conditions:\n  busy: gpu_util_mena > 50\n", 2, "conditions: 'busy': unknown metric"),
        ("conditions:\n  a: b and has_gpu == 1\n  b: a\n", 2, "'a' refers to itself (a -> b -> a)"),
        ("conditions:\n  has_gpu: gpu_count >= 1\n", 2, "'has_gpu' is a metric's name"),
        ("conditions:\n  two words: has_gpu == 1\n", 2, "is not a name"),
        ("conditions: [enough_samples]\n", 1, "conditions: expected a mapping"),
    ],
)
def test_named_condition_errors_carry_file_and_line(
    tmp_path: Path, text: str, line: int, message: str
) -> None:
    path = _write(tmp_path, text)
    with pytest.raises(KnowledgeError) as info:
        load_knowledge_base([path])
    assert len(info.value.problems) == 1, str(info.value)
    assert info.value.file == str(path) and info.value.line == line
    assert message in str(info.value)


def test_one_file_is_read_against_the_packaged_conditions(tmp_path: Path) -> None:
    path = _write(tmp_path, "rules:\n  - name: mine\n"
                  "    expr: phase_other > 0.5 and enough_samples\n"
                  "    severity: low\n    category: host\n    title: t\n"
                  "    source: {document: diagnose}\n")
    ruleset = rules_in_document(load_yaml_file(path), load_knowledge_base())
    assert ruleset.rules[0].condition.expr == "phase_other > 0.5 and phase_samples >= 20"


def test_the_documents_reader_reports_every_problem_too(tmp_path: Path) -> None:
    """Same reader, same dialect: two mistakes in documents.yaml are two located lines."""
    from aitop.knowledge.base import documents as kdoc
    from aitop.knowledge.reading.documents_reader import read_documents

    text = (Path(kdoc.__file__).parents[1] / "data" / "documents.yaml").read_text(encoding="utf-8")
    first = text.index("category: data_loading")
    second = text.index('op: "<", value: 70,')
    broken = (text[:first] + "category: gpu_starved" + text[first + 22 : second]
              + 'op: "<", value: "70%",' + text[second + 19 :])
    path = _write(tmp_path, broken, "documents.yaml")
    with pytest.raises(KnowledgeError) as info:
        read_documents(path)
    lines = [text.count("\n", 0, at) + 1 for at in (first, second)]
    assert [(p.line, p.file) for p in info.value.problems] == [(n, str(path)) for n in lines]
    assert "unknown category 'gpu_starved'" in info.value.problems[0].message
    assert "malformed number '70%'" in info.value.problems[1].message


def test_explanations_are_closed_over_chains() -> None:
    """A culprit explaining a culprit explains its symptoms: the evaluator and the
    PromQL translation (which silences by ALERTS) then agree on what is listed."""
    rules = {r.id: r for r in load_knowledge_base().rules.rules}
    neighbours = rules["cores_taken_by_other_processes"].explains
    assert "host_cpu_saturated" in neighbours
    assert {"data_wait_dominant", "data_wait_elevated"} <= set(neighbours)
    assert "cores_taken_by_other_processes" not in neighbours
