"""A diagnosis's metrics as history keeps them: one array of floats, names shared.

The evaluator keeps every diagnosis of a session (hours of them) for exports,
replay and the step-rate sparkline. As a dict, a history entry's ~80 metrics
cost ~4 kB (the dict's table and one float object per value), most of what a
long session's memory grew by. Packed, they cost the array's 8 bytes a value:
the names live once per distinct key set, shared by every entry that has it.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Iterator, Mapping

#: Each distinct tuple of names, once, with where each name sits in it. A
#: session's metrics come in a handful of key sets; the cap only guards against
#: a caller with ever-new ones.
_INDEXES: dict[tuple[str, ...], tuple[tuple[str, ...], dict[str, int]]] = {}
_MAX_INDEXES = 64


def _index_of(names: tuple[str, ...]) -> tuple[tuple[str, ...], dict[str, int]]:
    """The shared copy of ``names`` and its index, so entries share one of each."""
    known = _INDEXES.get(names)
    if known is not None:
        return known
    known = (names, {name: i for i, name in enumerate(names)})
    if len(_INDEXES) < _MAX_INDEXES:
        _INDEXES[names] = known
    return known


class PackedMetrics(Mapping[str, "float | None"]):
    """Read-only metrics: ``None`` is stored as NaN (a metric is never NaN: an
    unknown value is ``None``), so a NaN reads back as ``None``."""

    __slots__ = ("_index", "_names", "_values")

    def __init__(self, metrics: Mapping[str, float | None]) -> None:
        self._names, self._index = _index_of(tuple(metrics))
        self._values = array("d", (math.nan if v is None else float(v) for v in metrics.values()))

    def __getitem__(self, name: str) -> float | None:
        value = self._values[self._index[name]]
        return None if math.isnan(value) else value

    def __iter__(self) -> Iterator[str]:
        return iter(self._names)

    def __len__(self) -> int:
        return len(self._names)

    def __repr__(self) -> str:
        return f"PackedMetrics({dict(self)!r})"
