"""Rule conditions and text templates: three-valued logic over unknown metrics, safety."""

from __future__ import annotations

from pathlib import Path

import pytest
from aitop.knowledge.base.catalogue import CATALOGUE
from aitop.knowledge.base.expressions import (
    Condition,
    ExpressionError,
    names_in,
    render,
    template_fields,
)


def cond(expr: str) -> Condition:
    return Condition(expr, CATALOGUE)


# ----------------------------------------------------------- unknown values


def test_and_short_circuits_past_an_unknown_metric() -> None:
    c = cond("has_gpu == 0 and phase_compute > 0.8")
    # On a GPU machine the phases are never looked at: False, not unknown.
    assert c.evaluate({"has_gpu": 1.0, "phase_compute": None}) is False
    # Without a GPU the comparison reaches the unknown value: unknown.
    assert c.evaluate({"has_gpu": 0.0, "phase_compute": None}) is None
    assert c.evaluate({"has_gpu": 0.0, "phase_compute": 0.9}) is True
    assert c.evaluate({"has_gpu": 0.0, "phase_compute": 0.8}) is False


def test_or_short_circuits_past_an_unknown_metric() -> None:
    c = cond("has_gpu == 1 or phase_compute > 0.8")
    assert c.evaluate({"has_gpu": 1.0, "phase_compute": None}) is True
    assert c.evaluate({"has_gpu": 0.0, "phase_compute": None}) is None
    assert c.evaluate({"has_gpu": 0.0, "phase_compute": 0.5}) is False


@pytest.mark.parametrize(
    "expr",
    [
        "phase_compute < 0.8",
        "phase_compute > 0.8",
        "phase_compute >= 0",
        "0.05 <= phase_compute < 0.3",
        "not phase_compute > 0.5",
        "phase_compute + 0.1 > 0.8",
        "phase_compute * 2 > 0.8",
        "max(phase_compute, 0.1) > 0.05",
        "abs(phase_compute) > 0.05",
    ],
)
def test_ordering_or_arithmetic_on_unknown_is_unknown(expr: str) -> None:
    c = cond(expr)
    assert c.evaluate({"phase_compute": None}) is None
    assert c.evaluate({}) is None  # a name missing from the metrics is unknown too
    assert c.evaluate({"phase_compute": 0.2}) in (True, False)


def test_missing_lists_the_unknown_names() -> None:
    c = cond("phase_data_wait >= 0.3 and phase_samples >= 30 and has_gpu == 1")
    assert c.names == {"phase_data_wait", "phase_samples", "has_gpu"}
    assert c.missing({"phase_data_wait": 0.4, "phase_samples": None}) == [
        "has_gpu",
        "phase_samples",
    ]
    assert c.missing({"phase_data_wait": 0.4, "phase_samples": 100.0, "has_gpu": 0.0}) == []


def test_values_and_boundaries() -> None:
    c = cond("0.05 <= phase_data_wait < 0.30")
    assert c.evaluate({"phase_data_wait": 0.05}) is True
    assert c.evaluate({"phase_data_wait": 0.2999}) is True
    assert c.evaluate({"phase_data_wait": 0.30}) is False
    assert c.evaluate({"phase_data_wait": 0.049}) is False
    assert cond("max(phase_forward, phase_backward) >= 0.5").evaluate(
        {"phase_forward": 0.1, "phase_backward": 0.5}
    ) is True
    assert cond("true and not false").evaluate({}) is True
    assert cond("True and has_gpu == 1").evaluate({"has_gpu": 0.0}) is False


def test_the_same_condition_evaluates_many_times() -> None:
    c = cond("phase_data_wait >= 0.3")
    results = [c.evaluate({"phase_data_wait": v}) for v in (0.1, 0.5, None, 0.3, 0.29)]
    assert results == [False, True, None, True, False]


def test_division_by_zero_is_an_expression_error() -> None:
    c = cond("phase_data_wait / phase_compute > 1")
    with pytest.raises(ExpressionError, match="cannot evaluate"):
        c.evaluate({"phase_data_wait": 0.5, "phase_compute": 0.0})
    assert c.evaluate({"phase_data_wait": 0.5, "phase_compute": 0.25}) is True


@pytest.mark.parametrize("expr", ["num_workers != 0", "num_workers == 0"])
def test_equality_with_unknown_is_unknown(expr: str) -> None:
    assert cond(expr).evaluate({"num_workers": None}) is None


def test_bare_unknown_flag_is_unknown() -> None:
    assert cond("checkpoint_writing and phase_checkpoint > 0.01").evaluate(
        {"checkpoint_writing": None, "phase_checkpoint": 0.5}
    ) is None


def test_unsupported_syntax_fails_at_load_time() -> None:
    with pytest.raises(ExpressionError):
        cond("num_workers in (0, 1)")


# ------------------------------------------------------------------ safety


@pytest.mark.parametrize(
    ("expr", "message"),
    [
        ("phase_data_wait.__class__ == 1", "only metric names"),
        ("(1).__class__.__bases__ == 1", "only metric names"),
        ("phase_data_wait[0] > 1", "only metric names"),
        ("(lambda: 1)() == 1", "only metric names"),
        ("[x for x in (1, 2)] == 1", "only metric names"),
        ("__import__('os').system('true') == 0", "only metric names"),
        ("eval('1') == 1", "unknown function eval"),
        ("open('/etc/passwd') == 1", "unknown function open"),
        ("getattr(phase_data_wait, 'real') == 1", "unknown function getattr"),
        ("__builtins__ == 1", "unknown metric __builtins__"),
        ("import os", "syntax error"),
        ("phase_data_wait >= 0.3; 1", "syntax error"),
        ("phase_data_wiat >= 0.3", "unknown metric phase_data_wiat"),
    ],
)
def test_only_metrics_numbers_and_operators(expr: str, message: str) -> None:
    with pytest.raises(ExpressionError, match=message):
        cond(expr)


def test_arbitrary_code_is_never_run(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    attempts = [
        f"__import__('pathlib').Path('{marker}').touch() == 1",
        f"open('{marker}', 'w') == 1",
        f"exec(\"open('{marker}', 'w')\") == 1",
    ]
    for expr in attempts:
        with pytest.raises(ExpressionError):
            cond(expr).evaluate({})
    assert not marker.exists()


def test_huge_numbers_are_refused_not_computed() -> None:
    with pytest.raises(ExpressionError, match="cannot evaluate"):
        cond("9 ** 9 ** 9 > 1").evaluate({})
    with pytest.raises(ExpressionError, match="cannot evaluate"):
        cond("'a' * 100000000 == 1").evaluate({})


def test_names_in_excludes_functions_and_constants() -> None:
    assert names_in("max(phase_forward, 0.1) > 0.5 and true and not False") == {"phase_forward"}
    with pytest.raises(ExpressionError):
        names_in("sorted(phase_forward)")


# ------------------------------------------------------------------ render


def test_render_fills_values_and_marks_unknown() -> None:
    text = "waits {phase_data_wait:.0%} with {num_workers:.0f} workers on {cpu_count} cores"
    assert render(text, {"phase_data_wait": 0.64, "num_workers": 4.0, "cpu_count": None}) == (
        "waits 64% with 4 workers on ? cores"
    )
    assert render(text, {}) == "waits ? with ? workers on ? cores"
    assert render("{{literal}} {x}", {"x": 1.5}) == "{literal} 1.5"
    assert render("no fields", {}) == "no fields"


def test_an_empty_sentence_word_leaves_one_space() -> None:
    text = "nothing is written. {feeder} A loop moves."
    assert render(text, {}, {"feeder": ""}) == "nothing is written. A loop moves."
    assert render(text, {}, {"feeder": "It exited."}) == (
        "nothing is written. It exited. A loop moves.")


def test_render_with_a_bad_spec_falls_back_to_the_plain_value() -> None:
    assert render("{x:not-a-spec}", {"x": 0.25}) == "0.25"


@pytest.mark.parametrize("text", ["{x.__class__}", "{x[0]}", "{0}", "{}", "{x.__class__.__mro__}"])
def test_render_refuses_anything_but_plain_names(text: str) -> None:
    with pytest.raises(ExpressionError, match="only plain metric names"):
        render(text, {"x": 1.0})


def test_template_fields() -> None:
    assert template_fields("{a:.0%} and {b} {{c}}") == {"a", "b"}
    assert template_fields("{x.__class__}") == {"x.__class__"}  # rejected by the loader
    with pytest.raises(ExpressionError, match="bad template"):
        template_fields("{unclosed")
