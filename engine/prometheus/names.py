"""How aitop's metric names appear in Prometheus: names, labels and units.

The exporter (``exporter.py``) and the alert-rule translator (``promql.py``)
must agree on every exported series, so both read this one mapping. It is
derived from the code's own lists, never a copy of them: every name in the
metric catalogue (``knowledge.catalogue.CATALOGUE``) and every step phase
(``probes.session.PHASES``), so a metric or phase added there is exported, and
usable in a translated rule, without touching this file.

Prometheus conventions (https://prometheus.io/docs/practices/naming/): an
``aitop_`` prefix, base units with the unit as the last word of the name
(seconds, bytes, ``ratio`` for 0-1 instead of percent, ``celsius``), and labels
only where summing or averaging across them means something. The catalogue's
own units (``%``, ``MB/s``, ``% of a core``) are converted by ``scale``: the
exported value is ``catalogue value * scale``.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache

from aitop.knowledge.base.catalogue import CATALOGUE, MetricSpec
from aitop.probes.session import PHASES

PREFIX = "aitop_"

#: The labelled family the step phases share (``phase_<name>`` in the catalogue).
PHASE_METRIC = "aitop_phase_ratio"
PHASE_LABEL = "phase"

#: aitop's unit words -> (Prometheus unit suffix, factor to the base unit).
#: A unit not listed here is exported unscaled and without a suffix; its HELP
#: text still names it.
UNITS: Mapping[str, tuple[str, float]] = {
    "%": ("ratio", 0.01),
    "fraction": ("ratio", 1.0),
    "% of a core": ("cores", 0.01),
    "MB": ("bytes", 1e6),
    "MB/s": ("bytes_per_second", 1e6),
    "°C": ("celsius", 1.0),
    "s": ("seconds", 1.0),
    "1/s": ("per_second", 1.0),
    "0/1": ("", 1.0),
    "": ("", 1.0),
    "x": ("", 1.0),
    "threads": ("", 1.0),
    "samples": ("", 1.0),
}

#: The catalogue's trends are per minute; Prometheus' base unit of time is the second.
PER_MINUTE = "/min"

_NAME_OK = re.compile(r"^[a-zA-Z_:][a-zA-Z0-9_:]*$")


@dataclass(frozen=True)
class Exported:
    """One catalogue metric as a Prometheus series."""

    #: The catalogue name (what rules and the report say).
    metric: str
    #: The Prometheus metric family name.
    name: str
    #: Label matchers that pick this metric out of its family (phases only).
    labels: tuple[tuple[str, str], ...]
    #: exported value = catalogue value * scale.
    scale: float
    #: HELP text.
    help: str

    def selector(self, extra: str = "") -> str:
        """A PromQL selector for this series, e.g. ``aitop_phase_ratio{phase="x"}``.

        ``extra`` is more matchers, already written (``instance="a"``).
        """
        matchers = [f'{k}="{v}"' for k, v in self.labels]
        if extra:
            matchers.append(extra)
        return f"{self.name}{{{','.join(matchers)}}}" if matchers else self.name


def base_value(value: float, scale: float) -> float:
    """``value`` in the base unit, to 12 significant digits.

    The exporter and the rule translator both convert with this, so a rule's
    ``gpu_util_mean >= 85`` and an exported 85 % meet at exactly the same float
    (``85 * 0.01`` alone is 0.8500000000000001, and a threshold printed as 0.85
    would then miss it).
    """
    return float(f"{value * scale:.12g}")


def unit_of(spec: MetricSpec) -> tuple[str, float]:
    """(unit suffix, scale) of a catalogue metric, per second for trends."""
    unit = spec.unit
    per_minute = unit.endswith(PER_MINUTE)
    if per_minute:
        unit = unit[: -len(PER_MINUTE)]
    suffix, scale = UNITS.get(unit, ("", 1.0))
    if per_minute:
        suffix = f"{suffix}_per_second" if suffix else "per_second"
        scale /= 60.0
    return suffix, scale


def family_name(metric: str, suffix: str) -> str:
    """``aitop_<metric>_<unit>``; a name that already says its unit is not doubled.

    ``steps_per_s`` becomes ``aitop_steps_per_second``, ``window_s`` becomes
    ``aitop_window_seconds``.
    """
    base = metric
    if suffix == "per_second" and base.endswith("_per_s"):
        base = base[: -len("_per_s")]
    elif suffix == "seconds" and base.endswith("_s"):
        base = base[: -len("_s")]
    name = f"{PREFIX}{base}"
    if suffix and not name.endswith(f"_{suffix}"):
        name = f"{name}_{suffix}"
    return name


def _help(spec: MetricSpec) -> str:
    unit = f" (aitop unit: {spec.unit})" if spec.unit else ""
    window = " over aitop's evaluation window" if spec.series else ""
    return f"{spec.description}{window}{unit}"


@lru_cache(maxsize=1)
def exported_metrics() -> dict[str, Exported]:
    """Every catalogue metric by its catalogue name, as exported."""
    phase_names = {f"phase_{p}": p for p in PHASES}
    out: dict[str, Exported] = {}
    for metric, spec in CATALOGUE.items():
        if metric in phase_names:
            out[metric] = Exported(
                metric, PHASE_METRIC, ((PHASE_LABEL, phase_names[metric]),), 1.0,
                "share of the training thread's time in each step phase over aitop's "
                "evaluation window (0-1; the phases sum to 1)",
            )
            continue
        suffix, scale = unit_of(spec)
        name = family_name(metric, suffix)
        if not _NAME_OK.match(name):
            continue  # not representable (never for the catalogue's snake_case names)
        out[metric] = Exported(metric, name, (), scale, _help(spec))
    return out


def exported(metric: str) -> Exported | None:
    """The export of one catalogue metric, or None if it is not exported."""
    return exported_metrics().get(metric)
