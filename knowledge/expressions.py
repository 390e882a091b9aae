"""Rule conditions: a small, safe expression language over metric names.

Conditions are evaluated with ``simpleeval`` (no ``eval``: only literals,
comparisons, boolean and arithmetic operators, and the few functions listed
here). Every name is checked against the metric catalogue when the rule file is
loaded, so a typo fails at load time with file and line, not silently at 3 am.
"""

from __future__ import annotations

import ast
import string
from collections.abc import Mapping
from typing import Any

from simpleeval import InvalidExpression, SimpleEval

FUNCTIONS: dict[str, Any] = {"min": min, "max": max, "abs": abs}
CONSTANTS = frozenset({"True", "False", "None", "true", "false"})


class ExpressionError(ValueError):
    """An expression is malformed or names something that does not exist."""


def names_in(expr: str) -> set[str]:
    """The variable names an expression reads (functions and constants excluded)."""
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"syntax error in '{expr}': {exc.msg}") from exc
    for node in ast.walk(tree):
        if isinstance(node, (ast.Attribute, ast.Subscript, ast.Lambda, ast.comprehension)):
            raise ExpressionError(f"only metric names, numbers and operators are allowed: '{expr}'")
    called = {
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    unknown_calls = called - FUNCTIONS.keys()
    if unknown_calls:
        raise ExpressionError(
            f"unknown function {', '.join(sorted(unknown_calls))} in '{expr}' "
            f"(allowed: {', '.join(FUNCTIONS)})"
        )
    return {
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and node.id not in called and node.id not in CONSTANTS
    }


class _UnknownValue(Exception):
    """Raised by any use of an unknown metric inside a condition."""


class _Unknown:
    """Stands for a metric with no value yet.

    Every comparison, arithmetic or truth test on it raises, so the condition's
    answer becomes "unknown" whatever the operator: ``num_workers != 0`` is not
    True merely because ``num_workers`` is not known. ``and``/``or`` still
    short-circuit before reaching it.
    """

    __slots__ = ()

    def _raise(self, *_: object) -> Any:
        raise _UnknownValue

    __eq__ = __ne__ = __lt__ = __le__ = __gt__ = __ge__ = _raise
    __bool__ = __add__ = __radd__ = __sub__ = __rsub__ = _raise
    __mul__ = __rmul__ = __truediv__ = __rtruediv__ = __neg__ = __abs__ = _raise
    __hash__ = None  # type: ignore[assignment]


UNKNOWN = _Unknown()


class Condition:
    """A parsed condition, checked against the known metric names."""

    def __init__(self, expr: str, known: Mapping[str, object]) -> None:
        self.expr = expr.strip()
        self.names = names_in(self.expr)
        unknown = sorted(n for n in self.names if n not in known)
        if unknown:
            raise ExpressionError(
                f"unknown metric {', '.join(unknown)} in '{self.expr}' "
                "(run `aitop metrics` for the list)"
            )
        self._evaluator = SimpleEval(functions=dict(FUNCTIONS), names={})
        try:
            self._parsed = self._evaluator.parse(self.expr)
        except (SyntaxError, InvalidExpression) as exc:
            raise ExpressionError(f"cannot parse '{self.expr}': {exc}") from exc
        # Evaluate once with every metric at 1.0: syntax that parses but that the
        # evaluator does not support (tuples, `in`, min(1)) fails now, at load
        # time, instead of leaving the rule waiting forever.
        self._evaluator.names = {**dict.fromkeys(self.names, 1.0), "true": True, "false": False}
        try:
            self._evaluator.eval(self.expr, previously_parsed=self._parsed)
        except ArithmeticError:
            pass
        except Exception as exc:
            raise ExpressionError(f"cannot evaluate '{self.expr}': {exc}") from exc

    def missing(self, values: Mapping[str, float | None]) -> list[str]:
        """Names this condition needs that have no value yet."""
        return sorted(n for n in self.names if values.get(n) is None)

    def evaluate(self, values: Mapping[str, float | None]) -> bool | None:
        """True/False, or None when the answer depends on a metric that is unknown.

        ``and``/``or`` short-circuit, so ``has_gpu == 0 and phase_compute > 0.8``
        is False on a GPU machine even though it never looks at the phases; any
        operation that reaches an unknown value (``==`` included) makes it None.
        """
        names: dict[str, Any] = {}
        for name in self.names:
            value = values.get(name)
            names[name] = UNKNOWN if value is None else value
        names.update(true=True, false=False)
        self._evaluator.names = names
        try:
            return bool(self._evaluator.eval(self.expr, previously_parsed=self._parsed))
        except (_UnknownValue, TypeError):
            return None  # the answer depends on a metric that is not known yet
        except (InvalidExpression, ArithmeticError) as exc:
            raise ExpressionError(f"cannot evaluate '{self.expr}': {exc}") from exc


class _PlainNamesFormatter(string.Formatter):
    """str.format that allows only plain field names: no ``{x.__class__}`` tricks."""

    def get_field(self, field_name: str, args: Any, kwargs: Any) -> Any:
        if not field_name.isidentifier():
            raise ExpressionError(f"only plain metric names may appear in text: '{field_name}'")
        return super().get_field(field_name, args, kwargs)


_FORMATTER = _PlainNamesFormatter()


def template_fields(text: str) -> set[str]:
    """Field names used in a ``{name:.0%}`` text template."""
    try:
        return {f for _, f, _, _ in _FORMATTER.parse(text) if f}
    except ValueError as exc:
        raise ExpressionError(f"bad template '{text}': {exc}") from exc


def render(text: str, values: Mapping[str, float | None]) -> str:
    """Fill a ``{name:.0%}`` template with metric values; unknown ones print as '?'."""
    out: list[str] = []
    for literal, field, spec, _conversion in _FORMATTER.parse(text):
        out.append(literal)
        if field is None:
            continue
        if not field.isidentifier():
            raise ExpressionError(f"only plain metric names may appear in text: '{field}'")
        value = values.get(field)
        if value is None:
            out.append("?")
            continue
        try:
            out.append(format(value, spec or ""))
        except (ValueError, TypeError):
            out.append(str(value))
    return "".join(out)
