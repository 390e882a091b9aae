"""The knowledge base's bands and targets, named in a condition instead of restated.

A rule that asks "is the GPU well used?" names the documents' row rather than
copying its number, so the number is said once, where the documents say it:

``band(gpu_util_mean, gpu_util_above_85)``
    the priority framework's row (documents.yaml ``priority_framework``) on that
    metric, with the row's own operators: ``gpu_util_mean > 85``. ``not band(...)``
    is the rest of the scale (``gpu_util_mean <= 85``).
``target_high(phase_data_wait)``, ``target_low(gpu_util)``
    an edge of the metric's target: the documents' key metrics, else aitop's own
    ``targets:`` (as the evidence and the panels judge it): ``0.05``, ``80``.

Each is written out when the rule file is read (``expressions.expand``), so the
evaluator, the UI and the PromQL translation see plain comparisons and numbers
in the metric's own unit (``METRIC_NAMES`` converts the documents' percent);
a row, metric or target that is not there fails then, with file and line.

Where a band's edge falls is the documents' operators' to say, in one place
(documents.yaml): "below 70%" leaves 70.0 to "70-85%", and "above 85%" leaves
85.0 there too, so at exactly 85.0 the GPU is not yet well used, for the rules,
the states and the UI alike.
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping

from .documents import KnowledgeDocuments, PriorityState, Threshold
from .expressions import ExpressionError
from .facts import METRIC_NAMES
from .targets import Target, target_for


def number(value: float) -> str:
    """A number as a condition writes it: ``85``, ``0.05`` (reads back as exactly ``value``)."""
    return str(int(value)) if value.is_integer() and abs(value) < 1e15 else repr(value)


def _scale(threshold: Threshold, metric: str) -> float | None:
    """The factor from the documents' unit to ``metric``'s, if ``metric`` measures it
    (``gpu_util_mean`` measures what ``gpu_util`` does: an aggregate of the series)."""
    measures = dict(METRIC_NAMES.get(threshold.metric, ()))
    if metric in measures:
        return measures[metric]
    return measures.get(metric.rsplit("_", 1)[0])


def band_text(row: PriorityState, metric: str) -> str:
    """The row's own conditions on ``metric``: ``gpu_util_mean >= 70 and gpu_util_mean <= 85``."""
    if not row.conditions:
        raise ExpressionError(f"the priority framework's row '{row.id}' has no conditions "
                              "to measure")
    parts = []
    for threshold in row.conditions:
        scale = _scale(threshold, metric)
        if scale is None:
            raise ExpressionError(f"{metric} does not measure the documents' {threshold.metric}")
        parts.append(f"{metric} {threshold.op} {number(threshold.value * scale)}")
    return " and ".join(parts)


class KnowledgeReferences:
    """What ``band``, ``target_low`` and ``target_high`` stand for in one knowledge base."""

    functions = frozenset({"band", "target_low", "target_high"})

    def __init__(self, documents: KnowledgeDocuments, targets: Mapping[str, Target]) -> None:
        self.rows = {row.id: row for row in documents.priority_framework}
        self.targets = targets

    def text(self, function: str, args: tuple[str, ...]) -> str:
        if function == "band":
            if len(args) != 2:
                raise ExpressionError("band() takes a metric and a row of the priority "
                                      "framework: band(gpu_util_mean, gpu_util_above_85)")
            metric, row_id = args
            row = self.rows.get(row_id)
            if row is None:
                raise ExpressionError(f"no row '{row_id}' in the priority framework"
                                      f"{_close(row_id, self.rows)}")
            return band_text(row, metric)
        if len(args) != 1:
            raise ExpressionError(f"{function}() takes one metric: {function}(phase_data_wait)")
        return number(self.edge(args[0], function.removeprefix("target_")))

    def edge(self, metric: str, side: str) -> float:
        """The ``low`` or ``high`` edge of ``metric``'s target."""
        target = target_for(metric, self.targets)
        if target is None:
            raise ExpressionError(f"no target for {metric}{_close(metric, self.targets)}")
        value = target.low if side == "low" else target.high
        if value is None:
            raise ExpressionError(f"the target of {metric} ('{target.text}') has no {side} edge")
        return value


def _close(name: str, known: Mapping[str, object]) -> str:
    """`` (did you mean x?)`` where a known name is close to ``name``."""
    close = difflib.get_close_matches(name, list(known), n=1)
    return f" (did you mean {close[0]}?)" if close else ""
