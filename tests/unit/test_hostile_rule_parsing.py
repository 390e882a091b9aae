"""Hostile rule text read in-process: YAML bombs measured, not built; caps, line
numbers, bounded expressions and templates."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from aitop.knowledge.base.catalogue import CATALOGUE
from aitop.knowledge.base.expressions import (
    MAX_EXPR_CHARS,
    MAX_EXPR_DEPTH,
    MAX_FORMAT_WIDTH,
    Condition,
    ExpressionError,
    check_template,
    names_in,
    render,
)
from aitop.knowledge.reading.yamlio import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    KnowledgeError,
    load_yaml_file,
    load_yaml_text,
)
from support.rule_files import alias_bomb, write_rule_file


def test_an_alias_bomb_is_measured_not_built() -> None:
    started = time.monotonic()
    with pytest.raises(KnowledgeError, match="alias bomb") as info:
        load_yaml_text(alias_bomb(levels=30), "bomb.yaml")
    assert time.monotonic() - started < 2.0
    assert info.value.file == "bomb.yaml" and info.value.line is not None


def test_a_few_aliases_still_work() -> None:
    doc = load_yaml_text("src: &s {document: diagnose}\nrules: [{source: *s}, {source: *s}]\n",
                         "f")
    assert doc["rules"][0]["source"] == {"document": "diagnose"}
    merged = load_yaml_text("a: &a {x: 1}\nb: {<<: *a, y: 2}\n", "f")
    assert merged["b"] == {"x": 1, "y": 2}


def test_nesting_just_under_the_cap_loads() -> None:
    lists = MAX_DEPTH - 1  # inside the document's mapping, the first level
    assert load_yaml_text("a: " + "[" * lists + "]" * lists + "\n", "f") is not None
    with pytest.raises(KnowledgeError, match="nested more than") as info:
        load_yaml_text("a: " + "[" * (lists + 1) + "]" * (lists + 1) + "\n", "f")
    assert info.value.line == 1


def test_the_size_cap_reads_no_more_than_it_allows(tmp_path: Path) -> None:
    path = write_rule_file(tmp_path, b"a: 1\n" + b" " * MAX_FILE_BYTES)
    with pytest.raises(KnowledgeError, match="larger than 1 MiB") as info:
        load_yaml_file(path)
    assert info.value.file == str(path)
    just_under = b"a: 1\n" + b"#" * (MAX_FILE_BYTES - 6) + b"\n"
    assert load_yaml_file(write_rule_file(tmp_path, just_under))


def test_non_utf8_reports_line_and_column(tmp_path: Path) -> None:
    path = write_rule_file(tmp_path, b"a: 1\nb: x\xff\n")
    with pytest.raises(KnowledgeError, match=r"byte 0xff at column 5") as info:
        load_yaml_file(path)
    assert info.value.line == 2


def test_a_control_character_after_multibyte_text_is_at_its_line() -> None:
    text = "# " + "é" * 50 + "\n" * 3 + "a: \x01\n"
    with pytest.raises(KnowledgeError, match="#x0001") as info:
        load_yaml_text(text, "f")
    assert info.value.line == 4


def test_messages_are_one_printable_line() -> None:
    error = KnowledgeError("first\nsecond\x1b[31m" + "x" * 5000, "f", 3)
    text = str(error)
    assert "\n" not in text and "\x1b" not in text and "\\x1b" in text
    assert len(text) < 600


def test_expression_length_is_checked_before_parsing() -> None:
    with pytest.raises(ExpressionError, match="characters long"):
        names_in("x + " * MAX_EXPR_CHARS)


def test_expression_depth_is_capped() -> None:
    assert names_in(" + ".join(["phase_data_wait"] * 10)) == {"phase_data_wait"}
    with pytest.raises(ExpressionError, match=f"over the limit of {MAX_EXPR_DEPTH}"):
        names_in(" + ".join(["phase_data_wait"] * (MAX_EXPR_DEPTH + 1)))
    with pytest.raises(ExpressionError, match="nested"):
        names_in("not " * 200 + "has_gpu")
    with pytest.raises(ExpressionError):
        names_in("-" * (MAX_EXPR_CHARS - 1) + "1")


def test_powers_are_bounded_in_time() -> None:
    started = time.monotonic()
    condition = Condition("phase_samples ** 3999999 > 1", CATALOGUE)
    with pytest.raises(ExpressionError, match="cannot evaluate"):
        condition.evaluate({"phase_samples": 3999999.0})
    with pytest.raises(ExpressionError, match="cannot evaluate"):
        Condition("3999999 ** 3999999 > 1", CATALOGUE).evaluate({})
    assert time.monotonic() - started < 2.0
    assert Condition("phase_samples ** 2 >= 4", CATALOGUE).evaluate({"phase_samples": 2.0})


def test_modulo_still_works_on_numbers() -> None:
    assert Condition("phase_samples % 2 == 1", CATALOGUE).evaluate({"phase_samples": 7.0})


@pytest.mark.parametrize("spec", [">300000000", ".101f", "0101", "x^1000", ">" + "9" * 5000])
def test_template_widths_are_refused_at_load(spec: str) -> None:
    with pytest.raises(ExpressionError, match="over the limit"):
        check_template("{phase_samples:" + spec + "}")


def test_template_widths_are_clamped_when_rendered() -> None:
    assert len(render("{x:>300000000}", {"x": 1.0})) == MAX_FORMAT_WIDTH
    assert render("{x:.999999999f}", {"x": 1.0}) == format(1.0, f".{MAX_FORMAT_WIDTH}f")
    assert render("{x:>{y}}", {"x": 1.0}) == "1.0"  # nested specs: the plain value, as before
    assert render("{x:.0%} {x:>8.2f}", {"x": 0.5}) == "50%     0.50"
