"""A rule condition, translated to PromQL over the series ``aitop --serve`` exports.

The condition is translated from its syntax tree (``ast``, bounded by
``knowledge.expressions.parse_bounded``), never by rewriting its text: a metric
name becomes the selector of its exported series (``prom_names``), a number
compared with it is converted to the series' base unit (``gpu_util_mean < 70``
becomes ``aitop_gpu_util_mean_ratio < 0.7``), and the operators become PromQL's.

aitop's conditions have three answers: true, false, and unknown (a metric has
no value yet, e.g. no GPU or no step counter), with ``and``/``or`` evaluated
left to right and short-circuiting (``has_gpu == 1 and gpu_util_mean < 70`` is
false without a GPU, not unknown). A missing series is PromQL's unknown, but
PromQL's ``or`` would treat it like false. So each sub-condition is translated
twice, to the instances where it is true (``T``) and where it is false (``F``):

    T(a and b) = T(a) and T(b)          F(a and b) = F(a) or (T(a) and F(b))
    T(a or b)  = T(a) or (F(a) and T(b))  F(a or b)  = F(a) and F(b)
    T(not a)   = F(a)                   F(not a)   = T(a)
    T(x < c)   = x < c                  F(x < c)   = x >= c

and an alert fires where ``T`` of the whole condition is non-empty. Every
operand has only the target's identity labels (``instance``, ``job``; a
phase's ``phase`` label is aggregated away), so ``and``/``or`` match per
attached job. What has no faithful PromQL form (``%``, comparing truth values,
``x if c else y``) raises :class:`Untranslatable` with the reason.
"""

from __future__ import annotations

import ast
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from aitop.engine.prometheus.names import Exported, base_value, exported_metrics
from aitop.knowledge.base.expressions import ExpressionError, parse_bounded

#: Every attached job has this series: "all instances", for conditions that are
#: constant (``true``) in part.
EVERY_INSTANCE = "aitop_up"
#: The longest PromQL text produced; conditions are bounded, but T/F doubling
#: of deeply nested ``and``/``or`` could still grow past what anyone can read.
MAX_PROMQL_CHARS = 8000

# PromQL operator precedence, lowest first (prometheus.io/docs/prometheus/latest/
# querying/operators/#binary-operator-precedence); atoms bind tightest.
P_OR, P_AND, P_CMP, P_ADD, P_MUL, P_UNARY, P_POW, P_ATOM = range(1, 9)

_CMP = {
    ast.Lt: ("<", ">="), ast.LtE: ("<=", ">"), ast.Gt: (">", "<="),
    ast.GtE: (">=", "<"), ast.Eq: ("==", "!="), ast.NotEq: ("!=", "=="),
}
_ARITH: dict[type, tuple[str, int, Callable[[float, float], float]]] = {
    ast.Add: ("+", P_ADD, lambda a, b: a + b),
    ast.Sub: ("-", P_ADD, lambda a, b: a - b),
    ast.Mult: ("*", P_MUL, lambda a, b: a * b),
    ast.Div: ("/", P_MUL, lambda a, b: a / b),
    ast.Pow: ("^", P_POW, lambda a, b: float(a) ** float(b)),
}
_BOOL_NAMES = {"True": 1.0, "False": 0.0, "true": 1.0, "false": 0.0}


class Untranslatable(Exception):
    """A condition with no faithful PromQL form; the message says why."""


@dataclass(frozen=True)
class Piece:
    """PromQL text and the precedence of its outermost operator."""

    text: str
    prec: int

    def at(self, prec: int) -> str:
        """The text, parenthesised if it binds less tightly than ``prec``."""
        return self.text if self.prec >= prec else f"({self.text})"


@dataclass(frozen=True)
class Value:
    """A number-valued part: PromQL in aitop's units, or a constant folded here."""

    piece: Piece | None = None
    constant: float | None = None
    #: Set when the part is one bare metric (its comparisons convert the number instead).
    leaf: Exported | None = None


@dataclass(frozen=True)
class Logic:
    """A truth-valued part: where it is true and where false (None: nowhere)."""

    true: Piece | None
    false: Piece | None


def number(value: float) -> str:
    """A PromQL number literal that reads back as exactly ``value``."""
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "Inf" if value > 0 else "-Inf"
    if value.is_integer() and abs(value) < 1e15:
        return str(int(value))
    return repr(value)  # the shortest text that reads back as exactly this float


def _binary(left: Piece | None, op: str, right: Piece | None, prec: int) -> Piece | None:
    if left is None or right is None:
        return None
    return Piece(f"{left.at(prec)} {op} {right.at(prec + 1)}", prec)


def _union(a: Piece | None, b: Piece | None) -> Piece | None:
    if a is None or (b is not None and b.text == EVERY_INSTANCE):
        return b
    if b is None or a.text == EVERY_INSTANCE:
        return a
    return _binary(a, "or", b, P_OR)


def _inter(a: Piece | None, b: Piece | None) -> Piece | None:
    if a is not None and a.text == EVERY_INSTANCE:
        return b
    if b is not None and b.text == EVERY_INSTANCE:
        return a
    return _binary(a, "and", b, P_AND)


class Translator:
    """Translates conditions over one set of exported series (default: all of them)."""

    def __init__(self, exported: Mapping[str, Exported] | None = None) -> None:
        self.exported = exported if exported is not None else exported_metrics()

    def condition(self, expr: str) -> str:
        """PromQL that returns the jobs for which ``expr`` is true; raises Untranslatable."""
        try:
            tree = parse_bounded(expr)
        except ExpressionError as exc:
            raise Untranslatable(str(exc)) from exc
        logic = self._logic(tree.body)
        if logic.true is None:
            raise Untranslatable("the condition can never be true")
        if len(logic.true.text) > MAX_PROMQL_CHARS:
            raise Untranslatable(
                f"its PromQL form would be {len(logic.true.text):,} characters long "
                f"(limit {MAX_PROMQL_CHARS:,}); split the rule"
            )
        return logic.true.text

    # ------------------------------------------------------------- truth

    def _logic(self, node: ast.expr) -> Logic:
        if isinstance(node, ast.BoolOp):
            parts = [self._logic(v) for v in node.values]
            result = parts[0]
            for part in parts[1:]:
                result = self._and(result, part) if isinstance(node.op, ast.And) \
                    else self._or(result, part)
            return result
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not):
            inner = self._logic(node.operand)
            return Logic(inner.false, inner.true)
        if isinstance(node, ast.Compare):
            return self._compare(node)
        value = self._value(node)
        if value.constant is not None:
            every = Piece(EVERY_INSTANCE, P_ATOM)
            return Logic(every, None) if value.constant else Logic(None, every)
        # A number used as a truth value: true when non-zero, like Python's bool().
        return self._relation(value, ast.NotEq(), Value(constant=0.0))

    @staticmethod
    def _and(a: Logic, b: Logic) -> Logic:
        return Logic(_inter(a.true, b.true), _union(a.false, _inter(a.true, b.false)))

    @staticmethod
    def _or(a: Logic, b: Logic) -> Logic:
        return Logic(_union(a.true, _inter(a.false, b.true)), _inter(a.false, b.false))

    def _compare(self, node: ast.Compare) -> Logic:
        """``a < b <= c`` is ``a < b and b <= c``, as in Python."""
        operands = [node.left, *node.comparators]
        result: Logic | None = None
        for left, op, right in zip(operands, node.ops, operands[1:], strict=False):
            part = self._relation(self._value(left), op, self._value(right))
            result = part if result is None else self._and(result, part)
        assert result is not None  # a Compare has at least one operator
        return result

    def _relation(self, left: Value, op: ast.cmpop, right: Value) -> Logic:
        if type(op) not in _CMP:
            raise Untranslatable(f"the operator {type(op).__name__} has no PromQL form")
        yes, no = _CMP[type(op)]
        if left.constant is not None and right.constant is not None:
            holds = _fold_compare(left.constant, yes, right.constant)
            every = Piece(EVERY_INSTANCE, P_ATOM)
            return Logic(every, None) if holds else Logic(None, every)
        lhs, rhs = self._operands(left, right)
        return Logic(Piece(f"{lhs.at(P_ADD)} {yes} {rhs.at(P_ADD)}", P_CMP),
                     Piece(f"{lhs.at(P_ADD)} {no} {rhs.at(P_ADD)}", P_CMP))

    def _operands(self, left: Value, right: Value) -> tuple[Piece, Piece]:
        """Both sides of a comparison; a bare metric against a number is compared in
        the series' own unit (the number converted), not the series rescaled."""
        if left.leaf is not None and right.constant is not None:
            converted = base_value(right.constant, left.leaf.scale)
            return self._raw(left.leaf), Piece(number(converted), P_ATOM)
        if right.leaf is not None and left.constant is not None:
            converted = base_value(left.constant, right.leaf.scale)
            return Piece(number(converted), P_ATOM), self._raw(right.leaf)
        return self._piece(left), self._piece(right)

    # ------------------------------------------------------------- numbers

    def _value(self, node: ast.expr) -> Value:
        if isinstance(node, ast.Constant):
            if isinstance(node.value, (bool, int, float)):
                return Value(constant=float(node.value))
            raise Untranslatable(f"the constant {node.value!r} is not a number")
        if isinstance(node, ast.Name):
            return self._name(node.id)
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
            inner = self._value(node.operand)
            if isinstance(node.op, ast.UAdd):
                return inner
            if inner.constant is not None:
                return Value(constant=-inner.constant)
            return Value(Piece(f"-{self._piece(inner).at(P_POW)}", P_UNARY))
        if isinstance(node, ast.BinOp):
            return self._arith(node)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
            return self._call(node.func.id, [self._value(a) for a in node.args])
        if isinstance(node, (ast.Compare, ast.BoolOp)) or (
            isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.Not)
        ):
            raise Untranslatable("it uses a truth value (a comparison, and/or/not) as a number")
        raise Untranslatable(f"'{ast.unparse(node)}' ({type(node).__name__}) has no PromQL form")

    def _name(self, name: str) -> Value:
        if name in _BOOL_NAMES:
            return Value(constant=_BOOL_NAMES[name])
        spec = self.exported.get(name)
        if spec is None:
            raise Untranslatable(f"the metric {name} is not among the exported series")
        return Value(leaf=spec)

    def _arith(self, node: ast.BinOp) -> Value:
        if type(node.op) not in _ARITH:
            raise Untranslatable(
                f"the operator {type(node.op).__name__} has no PromQL form with the same "
                "meaning (Python's % and // differ from PromQL's on negative numbers)"
            )
        op, prec, fold = _ARITH[type(node.op)]
        left, right = self._value(node.left), self._value(node.right)
        if left.constant is not None and right.constant is not None:
            try:
                return Value(constant=fold(left.constant, right.constant))
            except (ArithmeticError, ValueError) as exc:
                raise Untranslatable(f"a constant part cannot be computed: {exc}") from exc
        lhs, rhs = self._piece(left), self._piece(right)
        if op == "^":  # right-associative
            return Value(Piece(f"{lhs.at(P_POW + 1)} ^ {rhs.at(P_POW)}", P_POW))
        return Value(Piece(f"{lhs.at(prec)} {op} {rhs.at(prec + 1)}", prec))

    def _call(self, name: str, args: list[Value]) -> Value:
        if name == "abs" and len(args) == 1:
            arg = args[0]
            if arg.constant is not None:
                return Value(constant=abs(arg.constant))
            return Value(Piece(f"abs({self._piece(arg).text})", P_ATOM))
        if name in ("min", "max") and len(args) >= 2:
            result = args[0]
            for arg in args[1:]:
                result = self._extreme(name, result, arg)
            return result
        raise Untranslatable(f"{name}() with {len(args)} argument(s) has no PromQL form")

    def _extreme(self, name: str, a: Value, b: Value) -> Value:
        """Element-wise min/max; with a constant, PromQL's clamp_max/clamp_min."""
        pick = min if name == "min" else max
        if a.constant is not None and b.constant is not None:
            return Value(constant=pick(a.constant, b.constant))
        if a.constant is not None or b.constant is not None:
            const = a.constant if a.constant is not None else b.constant
            other = b if a.constant is not None else a
            clamp = "clamp_max" if name == "min" else "clamp_min"
            return Value(Piece(f"{clamp}({self._piece(other).text}, {number(const or 0.0)})",
                               P_ATOM))
        # (a <= b) keeps a where it is the smaller, (b < a) keeps b: each job once,
        # and nothing where either is unknown (as in aitop).
        first, second = ("<=", "<") if name == "min" else (">=", ">")
        pa, pb = self._piece(a), self._piece(b)
        text = (f"{pa.at(P_ADD)} {first} {pb.at(P_ADD)} or "
                f"{pb.at(P_ADD)} {second} {pa.at(P_ADD)}")
        return Value(Piece(text, P_OR))

    # ------------------------------------------------------------- leaves

    @staticmethod
    def _raw(spec: Exported) -> Piece:
        """The series in its exported unit, with only the job's identity labels."""
        if spec.labels:
            dropped = ", ".join(k for k, _ in spec.labels)
            return Piece(f"max without ({dropped}) ({spec.selector()})", P_ATOM)
        return Piece(spec.selector(), P_ATOM)

    def _piece(self, value: Value) -> Piece:
        """A number-valued part as PromQL in aitop's units (series converted back)."""
        if value.constant is not None:
            return Piece(number(value.constant), P_ATOM)
        if value.leaf is not None:
            raw = self._raw(value.leaf)
            scale = value.leaf.scale
            if scale == 1.0:
                return raw
            inverse = 1.0 / scale
            if float(inverse).is_integer():
                return Piece(f"{raw.text} * {number(inverse)}", P_MUL)
            return Piece(f"{raw.text} / {number(scale)}", P_MUL)
        assert value.piece is not None
        return value.piece


def _fold_compare(a: float, op: str, b: float) -> bool:
    return {
        "<": a < b, "<=": a <= b, ">": a > b, ">=": a >= b, "==": a == b, "!=": a != b,
    }[op]
