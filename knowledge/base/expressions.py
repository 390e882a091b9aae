"""Rule conditions: a small, safe expression language over metric names.

Conditions are evaluated with ``simpleeval`` (no ``eval``: only literals,
comparisons, boolean and arithmetic operators, and the few functions listed
here). Every name is checked against the metric catalogue when the rule file is
loaded, so a typo fails at load time with file and line, not silently at 3 am.

A condition comes from the user's rule file, so its cost is bounded before it is
parsed (length), while it is parsed (recursion caught) and after (depth and
size of the tree); powers are computed in floating point and ``%`` never
formats text, so no condition can take seconds or gigabytes to evaluate. Text
templates may not ask for widths or precisions over ``MAX_FORMAT_WIDTH``.
"""

from __future__ import annotations

import ast
import difflib
import functools
import operator
import re
import string
from collections.abc import Collection, Mapping
from typing import Any, Protocol

from simpleeval import DEFAULT_OPERATORS, InvalidExpression, SimpleEval, safe_power

FUNCTIONS: dict[str, Any] = {"min": min, "max": max, "abs": abs}
CONSTANTS = frozenset({"True", "False", "None", "true", "false"})

#: Longest condition accepted: the packaged ones are under 200 characters.
MAX_EXPR_CHARS = 1000
#: Deepest syntax tree (``a + b + c`` nests one level per term): ours reach 6;
#: evaluating recurses in Python per level, which ends near 300.
MAX_EXPR_DEPTH = 32
#: Most syntax-tree nodes in one condition: ours have at most 43.
MAX_EXPR_NODES = 400
#: Widest field and longest precision a text template may ask for.
MAX_FORMAT_WIDTH = 100


class ExpressionError(ValueError):
    """An expression is malformed or names something that does not exist."""


class References(Protocol):
    """Calls that name a number or band of the knowledge base instead of restating it.

    ``band(gpu_util_mean, gpu_util_above_85)`` or ``target_high(phase_data_wait)``
    are written out (``text``) when the rule file is read, so evaluation and the
    PromQL translation see plain comparisons and numbers; the arguments are
    names (a metric, a row of the documents), never values.
    ``knowledge.base.references`` is the knowledge base's.
    """

    @property
    def functions(self) -> Collection[str]: ...

    def text(self, function: str, args: tuple[str, ...]) -> str:
        """The call written out; ExpressionError says what is wrong with it."""
        ...


def clip(text: str, limit: int = 80) -> str:
    """The start of ``text``, cut with "…" to ``limit`` characters (the whole of it
    may be huge: a condition quoted in an error, an exception in a sentence)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _tree_shape(tree: ast.AST) -> tuple[int, int]:
    """Node count and depth of a syntax tree, walked without recursion."""
    count, deepest = 0, 0
    stack = [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        count += 1
        deepest = max(deepest, depth)
        stack += [(child, depth + 1) for child in ast.iter_child_nodes(node)]
    return count, deepest


def parse_bounded(expr: str) -> ast.Expression:
    """``ast.parse`` of a condition, refused when too long, deep or large to evaluate.

    The length is checked first because the parser itself recurses and
    allocates per term: 50,000 ``+`` terms raise RecursionError and 100,000
    ``not`` a MemoryError inside ``ast.parse``.
    """
    if len(expr) > MAX_EXPR_CHARS:
        raise ExpressionError(
            f"condition is {len(expr):,} characters long, over the limit of {MAX_EXPR_CHARS:,}: "
            f"'{clip(expr)}'"
        )
    try:
        tree = ast.parse(expr, mode="eval")
    except SyntaxError as exc:
        raise ExpressionError(f"syntax error in '{expr}': {exc.msg}") from exc
    except (RecursionError, MemoryError) as exc:
        raise ExpressionError(f"condition is nested too deeply: '{clip(expr)}'") from exc
    count, depth = _tree_shape(tree)
    if depth > MAX_EXPR_DEPTH:
        raise ExpressionError(
            f"condition is nested {depth} levels deep, over the limit of {MAX_EXPR_DEPTH} "
            f"(split it with and/or): '{clip(expr)}'"
        )
    if count > MAX_EXPR_NODES:
        raise ExpressionError(
            f"condition has {count} parts, over the limit of {MAX_EXPR_NODES}: '{clip(expr)}'"
        )
    return tree


#: What a condition may not contain: attribute access, indexing, functions
#: defined inline, comprehensions, and f-strings (their format spec can ask for
#: a field hundreds of megabytes wide).
_FORBIDDEN = (
    ast.Attribute, ast.Subscript, ast.Lambda, ast.comprehension, ast.JoinedStr, ast.FormattedValue,
)


def _reference_args(tree: ast.AST, references: Collection[str]) -> set[ast.AST]:
    """The argument nodes of every call of a reference (names of things, not metrics read)."""
    return {
        arg
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
        and node.func.id in references
        for arg in node.args
    }


def names_in(expr: str, references: Collection[str] = ()) -> set[str]:
    """The variable names an expression reads (functions, constants and the
    arguments of ``references`` calls excluded)."""
    tree = parse_bounded(expr)
    for node in ast.walk(tree):
        if isinstance(node, _FORBIDDEN):
            raise ExpressionError(f"only metric names, numbers and operators are allowed: '{expr}'")
    called = {
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
    }
    unknown_calls = called - FUNCTIONS.keys() - set(references)
    if unknown_calls:
        raise ExpressionError(
            f"unknown function {', '.join(sorted(unknown_calls))} in '{expr}' "
            f"(allowed: {', '.join([*FUNCTIONS, *references])})"
        )
    args = _reference_args(tree, references)
    return {
        node.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and node.id not in called and node.id not in CONSTANTS
        and node not in args
    }


def _offset(lines: list[str], lineno: int, col: int) -> int:
    """Character offset of an ``ast`` position (its column counts UTF-8 bytes)."""
    before = sum(len(line) + 1 for line in lines[: lineno - 1])
    return before + len(lines[lineno - 1].encode("utf-8")[:col].decode("utf-8", "ignore"))


#: What a named condition may be written out as without brackets: atoms anywhere.
_ATOMS = (ast.Name, ast.Constant, ast.Call)


def _needs_brackets(text: str, parent: ast.AST | None) -> bool:
    """Whether ``text`` put where a name stood, under ``parent``, would change meaning.

    Under ``and``/``or`` any comparison or arithmetic binds tighter, so
    ``rate > 1 and enough_samples`` reads ``rate > 1 and phase_samples >= 20``;
    only a nested ``and``/``or`` of the other kind needs brackets there (``a and
    (b and c)`` is ``a and b and c``, short-circuits included), and, for the
    reader, anything but an atom after ``not``.
    """
    top = parse_bounded(text).body
    if isinstance(top, _ATOMS) or isinstance(parent, ast.Expression):
        return False
    if not isinstance(parent, ast.BoolOp):
        return True
    if isinstance(top, ast.BoolOp):
        return type(top.op) is not type(parent.op)
    return isinstance(top, ast.IfExp)


#: A comparison's operator turned round, for ``not`` before a reference.
_NEGATED = {ast.Lt: ">=", ast.LtE: ">", ast.Gt: "<=", ast.GtE: "<", ast.Eq: "!=", ast.NotEq: "=="}


def _negated(text: str) -> str | None:
    """``not (x > 85)`` as ``x <= 85`` when ``text`` is one comparison; else None.

    The same answer for every value, an unknown one included (both raise), and
    it reads as the number's own edge.
    """
    top = parse_bounded(text).body
    if not (isinstance(top, ast.Compare) and len(top.ops) == 1 and type(top.ops[0]) in _NEGATED):
        return None
    left = ast.get_source_segment(text, top.left)
    right = ast.get_source_segment(text, top.comparators[0])
    return f"{left} {_NEGATED[type(top.ops[0])]} {right}"


def _reference_text(node: ast.Call, references: References) -> str:
    assert isinstance(node.func, ast.Name)
    if node.keywords or not all(isinstance(a, ast.Name) for a in node.args):
        raise ExpressionError(
            f"{node.func.id}() takes names only, as in {node.func.id}(gpu_util_mean, ...)"
        )
    return references.text(node.func.id, tuple(a.id for a in node.args if isinstance(a, ast.Name)))


def expand(expr: str, named: Mapping[str, str], references: References | None = None) -> str:
    """``expr`` with every named condition and every reference it uses written out in full.

    The text is replaced in place, not printed again from the syntax tree, so the
    rest of the condition reads exactly as its author wrote it; ``not`` before a
    reference that is one comparison turns the comparison round
    (``not band(...)`` reads ``gpu_util_mean <= 85``).
    """
    tree = parse_bounded(expr)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    calls = references.functions if references is not None else ()
    args = _reference_args(tree, calls)
    lines = expr.split("\n")

    def span(node: ast.AST, text: str) -> tuple[int, int, str]:
        assert isinstance(node, ast.expr)
        assert node.end_lineno is not None and node.end_col_offset is not None
        return (_offset(lines, node.lineno, node.col_offset),
                _offset(lines, node.end_lineno, node.end_col_offset), text)

    spans: list[tuple[int, int, str]] = []
    for node in ast.walk(tree):
        parent = parents.get(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) \
                and node.func.id in calls:
            assert references is not None
            text = _reference_text(node, references)
            turned = _negated(text) if isinstance(parent, ast.UnaryOp) \
                and isinstance(parent.op, ast.Not) else None
            if turned is not None:
                assert parent is not None
                outer = parents.get(parent)
                spans.append(span(parent, f"({turned})" if _needs_brackets(turned, outer)
                                  else turned))
            else:
                spans.append(span(node, f"({text})" if _needs_brackets(text, parent) else text))
            continue
        if not isinstance(node, ast.Name) or node.id not in named or node in args:
            continue
        if isinstance(parent, ast.Call) and parent.func is node:
            continue
        text = named[node.id]
        spans.append(span(node, f"({text})" if _needs_brackets(text, parent) else text))
    out = expr
    for start, end, text in sorted(spans, reverse=True):
        out = out[:start] + text + out[end:]
    return out


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


class _TextFormatting(InvalidExpression):
    """``'%0300000000d' % x``: text formatting has no place in a condition."""


def _power(a: Any, b: Any) -> Any:
    """``a ** b`` in floating point: an overflow error, never minutes of big-integer work.

    simpleeval's own guard still allows ``3999999 ** 3999999``, 30 s of CPU.
    """
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return safe_power(float(a), float(b))
    return safe_power(a, b)


def _modulo(a: Any, b: Any) -> Any:
    """``a % b`` for numbers only: on text it would format, to any width."""
    if isinstance(a, (str, bytes)):
        raise _TextFormatting("text formatting (%) is not allowed in a condition")
    return operator.mod(a, b)


#: simpleeval's operators, with ``**`` and ``%`` bounded as above.
OPERATORS: dict[type, Any] = {**DEFAULT_OPERATORS, ast.Pow: _power, ast.Mod: _modulo}


def _evaluator() -> SimpleEval:
    """An evaluator of its own for each condition: each sets its names before it
    evaluates, so two conditions must never share one."""
    return SimpleEval(operators=dict(OPERATORS), functions=dict(FUNCTIONS), names={})


@functools.lru_cache(maxsize=4096)
def _names(expr: str) -> frozenset[str]:
    """``names_in`` of a written-out condition, cached by its text."""
    return frozenset(names_in(expr))


@functools.lru_cache(maxsize=4096)
def _parsed(expr: str) -> ast.AST:
    """The tree of a written-out condition, once it has been evaluated with every
    name at 1.0: syntax that parses but that the evaluator does not support
    (tuples, ``in``, ``min(1)``) fails at load time instead of leaving the rule
    waiting forever.

    Both are cached by text: every rule file loaded writes the packaged
    conditions out the same way, and the tree is only read (the evaluator walks
    it, never changes it), so conditions of the same text share one.
    """
    evaluator = _evaluator()
    try:
        parsed = evaluator.parse(expr)
    except (SyntaxError, InvalidExpression) as exc:
        raise ExpressionError(f"cannot parse '{expr}': {exc}") from exc
    evaluator.names = {**dict.fromkeys(_names(expr), 1.0), "true": True, "false": False}
    try:
        evaluator.eval(expr, previously_parsed=parsed)
    except ArithmeticError:
        pass
    except Exception as exc:
        raise ExpressionError(f"cannot evaluate '{expr}': {exc}") from exc
    return parsed


class Condition:
    """A parsed condition, checked against the known metric names.

    ``named`` maps names of shared conditions (a rule file's ``conditions:``) to
    their metric-only text, and ``references`` writes out the calls that name the
    knowledge base's bands and targets; a condition that uses either is stored
    written out (``expr``), so evaluation, the UI and the PromQL export see
    metrics and numbers only, while ``written`` keeps it as its author wrote it.
    """

    def __init__(
        self, expr: str, known: Mapping[str, object], named: Mapping[str, str] | None = None,
        references: References | None = None,
    ) -> None:
        self.written = expr.strip()
        self.expr = (expand(self.written, named or {}, references) if named or references
                     else self.written)
        self.names = _names(self.expr)
        unknown = sorted(n for n in self.names if n not in known)
        if unknown:
            close = difflib.get_close_matches(unknown[0], [*known, *(named or {})], n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            hint += "run `aitop metrics` for the list"
            if named:
                hint += f"; named conditions: {', '.join(sorted(named))}"
            raise ExpressionError(
                f"unknown metric {', '.join(unknown)} in '{clip(self.written, 200)}' ({hint})"
            )
        self._parsed = _parsed(self.expr)
        self._evaluator = _evaluator()

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

#: Python's format-spec mini-language, with width and precision captured.
_SPEC = re.compile(
    r"(?P<head>(?:.?[<>=^])?[-+ ]?z?#?0?)(?P<width>\d*)(?P<group>[,_]?)"
    r"(?:\.(?P<precision>\d*))?(?P<type>[bcdeEfFgGnosxX%]?)",
    re.DOTALL,
)


def _spec_number(digits: str | None) -> int:
    """A width or precision from a spec; absurdly long digit strings count as huge."""
    if not digits:
        return 0
    return int(digits) if len(digits) <= 6 else 10**6


def check_format_spec(spec: str) -> None:
    """Refuse a template spec whose width or precision is over MAX_FORMAT_WIDTH.

    ``{phase_samples:>300000000}`` is a valid spec that renders 300 MB on every
    refresh; a spec that is not valid is left alone (it renders the plain value).
    """
    match = _SPEC.fullmatch(spec)
    if match is None:
        return
    for part in ("width", "precision"):
        number = _spec_number(match[part])
        if number > MAX_FORMAT_WIDTH:
            raise ExpressionError(
                f"format {part} {clip(match[part], 12)} in '{{…:{clip(spec, 20)}}}' is over "
                f"the limit of {MAX_FORMAT_WIDTH}"
            )


def _clamped_spec(spec: str) -> str | None:
    """``spec`` with width and precision cut to MAX_FORMAT_WIDTH; None when it is not valid."""
    match = _SPEC.fullmatch(spec)
    if match is None:
        return None
    width = match["width"] and str(min(_spec_number(match["width"]), MAX_FORMAT_WIDTH))
    precision = "" if match["precision"] is None else (
        "." + str(min(_spec_number(match["precision"]), MAX_FORMAT_WIDTH))
    )
    return f"{match['head']}{width}{match['group']}{precision}{match['type']}"


#: A name filled into a text is cut here (a frame from the job's code could be long).
MAX_WORD_CHARS = 120


def template_fields(text: str) -> set[str]:
    """Field names used in a ``{name:.0%}`` text template."""
    try:
        return {f for _, f, _, _ in _FORMATTER.parse(text) if f}
    except ValueError as exc:
        raise ExpressionError(f"bad template '{clip(text)}': {exc}") from exc


def check_template(text: str) -> set[str]:
    """``template_fields`` of a text, after checking that no field asks to be too wide."""
    fields = template_fields(text)
    for _, field, spec, _ in _FORMATTER.parse(text):
        if field is not None and spec:
            check_format_spec(spec)
    return fields


def _format(value: float, spec: str) -> str:
    """One filled field: never wider than MAX_FORMAT_WIDTH, the plain value for a bad spec."""
    clamped = _clamped_spec(spec)
    if clamped is None:
        return str(value)
    try:
        return format(value, clamped)
    except (ValueError, TypeError):
        return str(value)


def render(
    text: str, values: Mapping[str, float | None], words: Mapping[str, str] | None = None
) -> str:
    """Fill a ``{name:.0%}`` template with metric values; unknown ones print as '?'.

    ``words`` are the few facts that are names, not numbers (the producer
    thread, its hottest frame): ``{producer}`` prints as the name itself. A
    word may be a whole sentence or nothing: the gap an empty one leaves
    between two words closes to one space.
    """
    out: list[str] = []
    gap = False  # an empty word left a space before it: drop the one after it
    for literal, field, spec, _conversion in _FORMATTER.parse(text):
        out.append(literal[1:] if gap and literal.startswith(" ") else literal)
        gap = False
        if field is None:
            continue
        if not field.isidentifier():
            raise ExpressionError(f"only plain metric names may appear in text: '{field}'")
        if words is not None and field in words:
            word = words[field][:MAX_WORD_CHARS]
            gap = not word and out[-1].endswith(" ")
            out.append(word)
            continue
        value = values.get(field)
        out.append("?" if value is None else _format(value, spec or ""))
    return "".join(out)


#: A ``{name}`` or ``{name:spec}`` field in a code snippet.
_CODE_FIELD = re.compile(r"\{([A-Za-z_]\w*)(?::([^{}]*))?\}")


def render_code(text: str, values: Mapping[str, float | None], known: Mapping[str, object]) -> str:
    """Fill a snippet's ``{metric:.0f}`` fields, leaving all other braces as code.

    A snippet is Python, whose braces are dicts, sets and f-strings: only a field
    naming a metric of ``known`` is filled (so the code says the number its
    action says: ``num_workers={suggested_workers:.0f}``); an unknown value prints
    as '?', as in titles.
    """
    def fill(match: re.Match[str]) -> str:
        name, spec = match[1], match[2] or ""
        if name not in known:
            return match[0]
        value = values.get(name)
        return "?" if value is None else _format(value, spec)

    return _CODE_FIELD.sub(fill, text)

