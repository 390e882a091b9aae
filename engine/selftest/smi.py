"""Reading ``nvidia-smi``: the independent reference for aitop's NVML readings.

``nvidia-smi`` is NVIDIA's own reader of the same driver counters, so where it
and aitop's probe disagree beyond a tolerance, aitop reads something wrong (a
unit, a scale, the wrong entry point, the wrong device). It is run with
argument lists only, and its text is parsed defensively: field names differ
between driver generations (``clocks_event_reasons`` was ``clocks_throttle_reasons``),
and a field the driver does not know makes the whole query fail, so such a field
is replaced by its older name or dropped and the query retried.

Every raw output is kept (:attr:`SmiRun.raw`) so a real GPU run leaves the
recordings that the unit tests' fixtures should be replaced with.
"""

from __future__ import annotations

import csv
import re
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

#: Seconds one nvidia-smi call may take (it is normally well under one).
SMI_TIMEOUT_S = 15.0

#: Our name for each value → the ``--query-gpu`` names to try, newest first.
GPU_FIELDS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("index", ("index",)),
    ("uuid", ("uuid",)),
    ("name", ("name",)),
    ("driver_version", ("driver_version",)),
    ("util_percent", ("utilization.gpu",)),
    ("mem_util_percent", ("utilization.memory",)),
    ("mem_used_mib", ("memory.used",)),
    ("mem_total_mib", ("memory.total",)),
    ("temperature_c", ("temperature.gpu",)),
    ("power_w", ("power.draw",)),
    ("power_limit_w", ("enforced.power.limit", "power.limit")),
    ("sm_clock_mhz", ("clocks.sm",)),
    ("sm_clock_max_mhz", ("clocks.max.sm",)),
    ("clock_event_reasons", ("clocks_event_reasons.active", "clocks_throttle_reasons.active")),
)

_TEXT_FIELDS = frozenset({"uuid", "name", "driver_version"})
_INVALID_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query')
_TEMPERATURE_LINE = re.compile(r"^\s*(GPU [A-Za-z. ]+?)\s*:\s*(-?[0-9.]+)\s*C\s*$", re.MULTILINE)
#: What nvidia-smi prints where it has no value.
_BLANKS = ("[n/a]", "n/a", "[not supported]", "not supported", "[unknown error]",
           "[insufficient permissions]", "")


class SmiError(Exception):
    """nvidia-smi is missing or could not answer; the message says what happened."""


@dataclass(frozen=True)
class SmiGpu:
    """One GPU as ``nvidia-smi --query-gpu`` printed it (``None`` = no value)."""

    index: int
    uuid: str | None = None
    name: str | None = None
    driver_version: str | None = None
    util_percent: float | None = None
    mem_util_percent: float | None = None
    mem_used_mib: float | None = None
    mem_total_mib: float | None = None
    temperature_c: float | None = None
    power_w: float | None = None
    power_limit_w: float | None = None
    sm_clock_mhz: float | None = None
    sm_clock_max_mhz: float | None = None
    clock_event_reasons: int | None = None


@dataclass
class SmiRun:
    """Calls nvidia-smi and keeps each raw answer, keyed by what was asked."""

    binary: str
    raw: dict[str, str] = field(default_factory=dict)
    #: Query names the driver refused, so later queries do not ask again.
    refused: set[str] = field(default_factory=set)

    @classmethod
    def find(cls) -> SmiRun | None:
        binary = shutil.which("nvidia-smi")
        return cls(binary) if binary else None

    def _run(self, key: str, args: Sequence[str]) -> subprocess.CompletedProcess[str]:
        command = [self.binary, *args]
        try:
            result = subprocess.run(command, capture_output=True, text=True,
                                    timeout=SMI_TIMEOUT_S, check=False, stdin=subprocess.DEVNULL)
        except subprocess.TimeoutExpired as exc:
            raise SmiError(f"nvidia-smi {args[0]} took over {SMI_TIMEOUT_S:.0f} s") from exc
        except OSError as exc:
            raise SmiError(f"cannot run nvidia-smi: {exc}") from exc
        self.raw[key] = (result.stdout or "") + (result.stderr or "")
        return result

    def query_gpus(self) -> list[SmiGpu]:
        """Every GPU's ``--query-gpu`` values, falling back to older field names."""
        chosen = {ours: [n for n in names if n not in self.refused]
                  for ours, names in GPU_FIELDS}
        for _ in range(len(GPU_FIELDS) * 2 + 1):
            wanted = [(ours, names[0]) for ours, names in chosen.items() if names]
            query = ",".join(name for _, name in wanted)
            result = self._run("query-gpu", [f"--query-gpu={query}",
                                             "--format=csv,noheader,nounits"])
            bad = _INVALID_FIELD.search((result.stdout or "") + (result.stderr or ""))
            if result.returncode != 0 and bad:
                self.refused.add(bad.group(1))
                for names in chosen.values():
                    if bad.group(1) in names:
                        names.remove(bad.group(1))
                continue
            if result.returncode != 0:
                raise SmiError(_first_line(result, "nvidia-smi --query-gpu failed"))
            return parse_gpu_csv(result.stdout, [ours for ours, _ in wanted])
        raise SmiError("nvidia-smi refused every field name tried")

    def slowdown_temperature(self, index: int) -> tuple[float | None, str]:
        """The slowdown threshold from ``nvidia-smi -q -d TEMPERATURE`` (not in --query-gpu).

        See :func:`parse_slowdown_temperature`; the text says how it was found.
        """
        result = self._run(f"temperature-{index}", ["-q", "-d", "TEMPERATURE", "-i", str(index)])
        if result.returncode != 0:
            return None, _first_line(result, "nvidia-smi -q -d TEMPERATURE failed")
        return parse_slowdown_temperature(result.stdout)

    def compute_apps(self) -> dict[int, float | None]:
        """PID → used GPU memory (MiB) from ``--query-compute-apps``."""
        result = self._run("compute-apps", ["--query-compute-apps=pid,used_memory",
                                            "--format=csv,noheader,nounits"])
        if result.returncode != 0:
            raise SmiError(_first_line(result, "nvidia-smi --query-compute-apps failed"))
        return parse_compute_apps(result.stdout)

    def pcie_dmon(self, index: int) -> tuple[float | None, float | None]:
        """(rx, tx) MB/s from one ``nvidia-smi dmon -s t`` line (about a second)."""
        result = self._run(f"dmon-{index}", ["dmon", "-s", "t", "-c", "1", "-i", str(index)])
        if result.returncode != 0:
            return None, None
        return parse_dmon_pcie(result.stdout)


def _first_line(result: subprocess.CompletedProcess[str], fallback: str) -> str:
    text = ((result.stderr or "") + (result.stdout or "")).strip()
    return text.splitlines()[0] if text else f"{fallback} (exit {result.returncode})"


def _value(text: str) -> str | None:
    stripped = text.strip()
    return None if stripped.lower() in _BLANKS else stripped


def _number(text: str | None) -> float | None:
    if text is None:
        return None
    try:
        return float(text.split()[0])
    except (ValueError, IndexError):
        return None


def _mask(text: str | None) -> int | None:
    if text is None:
        return None
    try:
        return int(text, 16) if text.lower().startswith("0x") else int(text)
    except ValueError:
        return None


def parse_gpu_csv(text: str, names: Sequence[str]) -> list[SmiGpu]:
    """Rows of ``--format=csv,noheader,nounits`` for the fields ``names``, in order."""
    gpus = []
    for row in csv.reader(line for line in text.splitlines() if line.strip()):
        if len(row) != len(names):
            continue
        values: dict[str, str | None] = {n: _value(v) for n, v in zip(names, row, strict=True)}
        index = _number(values.get("index"))
        if index is None:
            continue
        kwargs: dict[str, object] = {"index": int(index)}
        for name, value in values.items():
            if name == "index":
                continue
            if name in _TEXT_FIELDS:
                kwargs[name] = value
            elif name == "clock_event_reasons":
                kwargs[name] = _mask(value)
            else:
                kwargs[name] = _number(value)
        gpus.append(SmiGpu(**kwargs))  # type: ignore[arg-type]
    return gpus


def parse_slowdown_temperature(text: str) -> tuple[float | None, str]:
    """The absolute slowdown temperature, and how it was read.

    Older drivers print ``GPU Slowdown Temp : 89 C``. Newer ones print only the
    T.Limit family: ``GPU T.Limit Temp`` is the current headroom to T.Limit and
    ``GPU Slowdown T.Limit Temp`` the headroom at which slowdown starts, so the
    threshold is current + headroom - slowdown headroom.
    """
    temps = {name.strip(): float(value) for name, value in _TEMPERATURE_LINE.findall(text)}
    if "GPU Slowdown Temp" in temps:
        return temps["GPU Slowdown Temp"], "GPU Slowdown Temp"
    needed = ("GPU Current Temp", "GPU T.Limit Temp", "GPU Slowdown T.Limit Temp")
    if all(name in temps for name in needed):
        current, headroom, at = (temps[name] for name in needed)
        return current + headroom - at, (
            f"GPU Current Temp + T.Limit Temp - Slowdown T.Limit Temp = "
            f"{current:g} + {headroom:g} - ({at:g})")
    return None, "nvidia-smi -q shows no slowdown temperature"


def parse_compute_apps(text: str) -> dict[int, float | None]:
    """PID → MiB; several rows of one PID (several GPUs or MIG slices) add up."""
    apps: dict[int, float | None] = {}
    for row in csv.reader(line for line in text.splitlines() if line.strip()):
        if len(row) < 2:
            continue
        pid = _number(_value(row[0]))
        if pid is None:
            continue
        used = _number(_value(row[1]))
        old = apps.get(int(pid))
        apps[int(pid)] = used if old is None else (old if used is None else old + used)
    return apps


def parse_dmon_pcie(text: str) -> tuple[float | None, float | None]:
    """(rxpci, txpci) MB/s from ``dmon -s t`` output, by its header's column names."""
    columns: list[str] = []
    for line in text.splitlines():
        if line.startswith("#"):
            words = line.lstrip("#").split()
            if "rxpci" in words:
                columns = words
            continue
        if not columns or not line.strip():
            continue
        values: Mapping[str, str] = dict(zip(columns, line.split(), strict=False))
        return _number(_value(values.get("rxpci", ""))), _number(_value(values.get("txpci", "")))
    return None, None
