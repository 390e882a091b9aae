"""GPU probe: what each NVIDIA GPU and the target's processes on it are doing.

Reads NVML through :mod:`pynvml` (the ``nvidia-ml-py`` package) once per tick
and returns an immutable :class:`~aitop.probes.samples.GpuSample`. Design
choices, and why:

* **Never raise, never stall the tick.** A machine without a driver gets
  ``available=False`` and a reason; initialisation is retried at most every
  :data:`INIT_RETRY_S` seconds because a failed ``nvmlInit`` (dlopen, driver
  handshake) is not free. Per-device failures go through
  :class:`~aitop.probes.nvml_guard.DeviceGuard`, which blanks one field, learns
  what a device cannot answer, and turns a lost GPU into ``lost=True`` for that
  GPU only.
* **Cheap calls only.** PCIe traffic comes from the cumulative byte counters in
  ``nvmlDeviceGetFieldValues`` differentiated over time, not from
  ``nvmlDeviceGetPcieThroughput``, which sleeps ~20 ms inside the driver per
  call. Static facts (name, UUID) are read once; slow-moving ones (max SM clock,
  slowdown temperature, enforced power limit) every :data:`STATIC_REFRESH_S`.
* **Per-process SM%** comes from ``nvmlDeviceGetProcessUtilization`` called
  with the newest sample timestamp seen so far, so each call returns only new
  samples; a process's last sample is shown until it is :data:`SM_SAMPLE_MAX_AGE_S`
  old, after which its SM% is unknown (``None``) rather than guessed.
* **PID namespaces.** NVML reports PIDs as the driver sees them (the host's
  namespace). :func:`nspid_pid_map` translates them through ``NSpid:`` lines
  when our view of ``/proc`` allows it; otherwise PIDs are used as they are.

Labels recorded in ``GpuDevice.unsupported`` are ``GpuDevice`` field names,
plus ``"processes.graphics"`` and ``"processes.sm_percent"`` for the parts of
``processes`` that come from separate NVML calls.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pynvml

from .kernel.procfs import PROC, list_pids, read_comm, read_nspid
from .nvml_guard import DeviceGuard, DeviceLostError
from .samples import GpuDevice, GpuProcess, GpuSample

_log = logging.getLogger(__name__)

#: Seconds between attempts to initialise NVML after a failure.
INIT_RETRY_S = 60.0
#: Seconds between re-reads of slow-moving device facts (power limit, ...).
STATIC_REFRESH_S = 30.0
#: A process utilisation sample older than this no longer describes the process.
SM_SAMPLE_MAX_AGE_S = 5.0
#: Minimum seconds between rebuilds of the host→our PID map.
PID_MAP_REFRESH_S = 2.0

_US = 1_000_000

#: nvmlInit failures that mean there is no usable driver here at all.
_NO_DRIVER_ERRORS: tuple[type[BaseException], ...] = (
    pynvml.NVMLError_LibraryNotFound,
    pynvml.NVMLError_DriverNotLoaded,
)

#: Clock event reason bits → short words. The values are the NVML ABI, taken
#: from pynvml; the last two exist only under their older "throttle" names.
CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (pynvml.nvmlClocksEventReasonGpuIdle, "gpu_idle"),
    (pynvml.nvmlClocksEventReasonApplicationsClocksSetting, "applications_clocks_setting"),
    (pynvml.nvmlClocksEventReasonSwPowerCap, "sw_power_cap"),
    (pynvml.nvmlClocksEventReasonHwSlowdown, "hw_slowdown"),
    (pynvml.nvmlClocksEventReasonSyncBoost, "sync_boost"),
    (pynvml.nvmlClocksEventReasonSwThermalSlowdown, "sw_thermal_slowdown"),
    (pynvml.nvmlClocksEventReasonHwThermalSlowdown, "hw_thermal_slowdown"),
    (pynvml.nvmlClocksEventReasonHwPowerBrakeSlowdown, "hw_power_brake_slowdown"),
    (pynvml.nvmlClocksEventReasonDisplayClockSetting, "display_clock_setting"),
    (getattr(pynvml, "nvmlClocksThrottleReasonBoardLimit", 0x200), "board_limit"),
    (getattr(pynvml, "nvmlClocksThrottleReasonReliability", 0x400), "reliability"),
)

_PCIE_FIELDS: tuple[tuple[str, int], ...] = (
    ("pcie_tx_bps", pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES),
    ("pcie_rx_bps", pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES),
)

# Entry points, newest first: older ones are used only where the newer are missing.
_CLOCK_REASON_FNS = (
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
)
_COMPUTE_PROC_FNS = (
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetComputeRunningProcesses",
)
_GRAPHICS_PROC_FNS = (
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses_v2",
    "nvmlDeviceGetGraphicsRunningProcesses",
)


# ------------------------------------------------------------ pure helpers


def decode_clock_event_reasons(mask: int) -> tuple[str, ...]:
    """Turn NVML's clock event bitmask into short words, unknown bits as hex.

    Unknown bits are kept (``"0x800"``) rather than dropped so a newer driver's
    reason is visible instead of silently reading as "no reason".
    """
    words = [word for bit, word in CLOCK_EVENT_REASONS if mask & bit]
    known = 0
    for bit, _ in CLOCK_EVENT_REASONS:
        known |= bit
    rest = mask & ~known
    bit = 1
    while rest:
        if rest & bit:
            words.append(hex(bit))
            rest &= ~bit
        bit <<= 1
    return tuple(words)


def nspid_depth(proc_root: str | os.PathLike[str] = PROC) -> int:
    """How many PID namespaces deep we are, counted from ``proc_root``'s own.

    1 means ``proc_root`` numbers processes as we do (the usual case: a procfs
    mounted in our own namespace); 2 or more means it is an outer view, such as
    the host's ``/proc`` bind-mounted into our container.
    """
    nspid = read_nspid("self", os.fspath(proc_root))
    return len(nspid) if nspid else 1


def nspid_pid_map(
    proc_root: str | os.PathLike[str] = PROC, depth: int | None = None
) -> dict[int, int]:
    """Map PIDs as ``proc_root`` numbers them to PIDs in our namespace.

    The kernel lists ``NSpid:`` from the namespace of the procfs being read
    (first entry, the PID the driver and NVML report when that procfs is the
    host's) down to the process's innermost namespace. Our own PID for a
    process is the entry at our depth (:func:`nspid_depth`). At depth 1 the
    first entry already *is* our PID, so the map is empty (identity).

    Processes that are not in our namespace but sit at the same depth in a
    sibling one (another container) cannot be told apart from ours by
    ``NSpid`` alone; they would map onto PIDs that may collide with ours.
    """
    root = os.fspath(proc_root)
    if depth is None:
        depth = nspid_depth(root)
    if depth < 2:
        return {}
    mapping: dict[int, int] = {}
    for pid in list_pids(root):
        nspid = read_nspid(pid, root)
        if nspid is not None and len(nspid) >= depth:
            mapping[nspid[0]] = nspid[depth - 1]
    return mapping


def merge_running_processes(
    compute: Iterable[Any] | None, graphics: Iterable[Any] | None
) -> dict[int, int | None]:
    """PID → used GPU memory over NVML's compute and graphics process lists.

    Several entries for one PID in one list are separate allocations (e.g. MIG
    instances) and add up; a PID in both lists (a "C+G" process) reports the
    same memory twice, so the larger of the two totals is kept, not the sum.
    """
    totals: list[dict[int, int | None]] = []
    for procs in (compute or (), graphics or ()):
        per_pid: dict[int, int | None] = {}
        for proc in procs:
            pid = int(proc.pid)
            used = proc.usedGpuMemory
            if used is None or used == pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value:
                per_pid.setdefault(pid, None)
            else:
                per_pid[pid] = (per_pid.get(pid) or 0) + int(used)
        totals.append(per_pid)
    merged: dict[int, int | None] = {}
    for per_pid in totals:
        for pid, used in per_pid.items():
            old = merged.get(pid)
            merged[pid] = used if old is None else (old if used is None else max(old, used))
    return merged


@dataclass
class CounterRate:
    """Rate of a cumulative counter from successive (value, timestamp) readings.

    A reading with an unchanged timestamp is the driver's cached value, so the
    previous rate stands; a counter that went backwards wrapped or was reset,
    so that interval has no rate.
    """

    value: int | None = None
    ts_us: int | None = None
    rate: float | None = None

    def update(self, value: int, ts_us: int) -> float | None:
        if self.value is None or self.ts_us is None:
            self.value, self.ts_us = value, ts_us
            return None
        dt_us = ts_us - self.ts_us
        if dt_us <= 0:
            return self.rate
        delta = value - self.value
        self.value, self.ts_us = value, ts_us
        self.rate = delta * _US / dt_us if delta >= 0 else None
        return self.rate


# ------------------------------------------------------------ device state


@dataclass
class _DeviceState:
    """What the probe keeps between ticks for one GPU."""

    guard: DeviceGuard
    name: str | None = None
    uuid: str | None = None
    lost: bool = False
    static_due: float = 0.0
    temperature_slowdown_c: float | None = None
    power_limit_w: float | None = None
    sm_clock_max_mhz: float | None = None
    pcie: dict[str, CounterRate] = field(default_factory=dict)
    #: Newest process utilisation sample timestamp seen (µs), passed back to NVML.
    util_last_seen_us: int = 0
    #: pid → (sample timestamp µs, SM %) of its newest sample.
    sm_by_pid: dict[int, tuple[int, int]] = field(default_factory=dict)

    @property
    def index(self) -> int:
        return self.guard.index

    def lost_device(self) -> GpuDevice:
        return GpuDevice(
            index=self.index,
            name=self.name,
            uuid=self.uuid,
            lost=True,
            unsupported=tuple(self.guard.unsupported),
        )


def _as_float(value: Any, scale: float = 1.0) -> float | None:
    return None if value is None else float(value) / scale


# ------------------------------------------------------------------ probe


class GpuProbe:
    """Samples every NVIDIA GPU once per call to :meth:`sample`.

    ``nvml`` defaults to the real :mod:`pynvml`; tests pass the fake from
    ``tests/support/fake_nvml.py``. ``proc_root`` is where process names and ``NSpid``
    lines are read (pass a host procfs mounted in a container to map host PIDs);
    ``clock`` returns wall-clock seconds, like ``time.time``.
    """

    def __init__(
        self,
        nvml: ModuleType | None = None,
        *,
        proc_root: str | os.PathLike[str] = PROC,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self._nvml: ModuleType = nvml if nvml is not None else pynvml
        self._proc_root = os.fspath(proc_root)
        self._clock = clock
        self._initialised = False
        self._devices: list[_DeviceState] = []
        self._driver_version: str | None = None
        self._unavailable_reason: str | None = None
        self._next_init_at = 0.0
        self._pid_depth: int | None = None
        self._pid_map: dict[int, int] = {}
        self._pid_map_at = float("-inf")

    # -------------------------------------------------------------- public

    def sample(self, target_pids: set[int]) -> GpuSample:
        """Read all GPUs now. Never raises: failures become blanks or a reason."""
        t = self._clock()
        try:
            return self._sample(t, frozenset(target_pids))
        except Exception as exc:  # last line of defence: the UI must keep ticking
            _log.exception("GPU probe failed")
            return GpuSample(
                t, available=False, reason=f"GPU probe error: {type(exc).__name__}: {exc}"
            )

    def close(self) -> None:
        """Release NVML (balances our ``nvmlInit``); a later sample re-initialises."""
        self._next_init_at = 0.0
        if self._initialised:
            self._initialised = False
            self._devices = []
            try:
                self._nvml.nvmlShutdown()
            except pynvml.NVMLError as exc:
                _log.debug("nvmlShutdown failed: %s", exc)

    # ------------------------------------------------------------ internals

    def _sample(self, t: float, targets: frozenset[int]) -> GpuSample:
        if not self._initialised and not self._try_init(t):
            return GpuSample(t, available=False, reason=self._unavailable_reason)
        pid_map = self._current_pid_map(t)
        devices = tuple(self._read_device(dev, t, targets, pid_map) for dev in self._devices)
        return GpuSample(t, available=True, devices=devices, driver_version=self._driver_version)

    def _try_init(self, t: float) -> bool:
        """Initialise NVML and enumerate devices, at most once per retry period."""
        if t < self._next_init_at:
            return False
        self._next_init_at = t + INIT_RETRY_S
        try:
            self._nvml.nvmlInit()
        except _NO_DRIVER_ERRORS as exc:
            self._unavailable_reason = f"no NVIDIA driver: {exc}"
            return False
        except pynvml.NVMLError as exc:  # e.g. driver upgraded without a reboot
            self._unavailable_reason = f"NVML init failed: {exc}"
            return False
        try:
            count = int(self._nvml.nvmlDeviceGetCount())
        except pynvml.NVMLError as exc:
            self._unavailable_reason = f"NVML cannot count GPUs: {exc}"
            self._shutdown_quietly()
            return False
        if count == 0:
            self._unavailable_reason = "no NVIDIA GPU visible to NVML"
            self._shutdown_quietly()
            return False
        self._driver_version = self._driver_version_or_none()
        self._devices = [_DeviceState(guard=DeviceGuard(self._nvml, i)) for i in range(count)]
        self._initialised = True
        self._unavailable_reason = None
        return True

    def _shutdown_quietly(self) -> None:
        try:
            self._nvml.nvmlShutdown()
        except pynvml.NVMLError as exc:
            _log.debug("nvmlShutdown failed: %s", exc)

    def _driver_version_or_none(self) -> str | None:
        try:
            version = self._nvml.nvmlSystemGetDriverVersion()
        except pynvml.NVMLError:
            return None
        return version.decode() if isinstance(version, bytes) else str(version)

    def _open_handle(self, dev: _DeviceState) -> bool:
        """Get the device handle and the facts that never change, once.

        Goes through the guard like every device call: a lost GPU raises
        :class:`DeviceLostError`, a refused one (``NoPermission``) is recorded
        as ``"handle"`` and not asked again, a transient failure is retried
        next tick.
        """
        if dev.guard.handle is not None:
            return True
        g = dev.guard
        handle = g.call(("handle",), ("nvmlDeviceGetHandleByIndex",), dev.index, answers=False)
        if handle is None:
            return False
        g.handle = handle
        dev.name = _text(g.call(("name",), ("nvmlDeviceGetName",), handle))
        dev.uuid = _text(g.call(("uuid",), ("nvmlDeviceGetUUID",), handle))
        return True

    def _read_device(
        self, dev: _DeviceState, t: float, targets: frozenset[int], pid_map: Mapping[int, int]
    ) -> GpuDevice:
        if dev.lost:
            return dev.lost_device()
        try:
            if not self._open_handle(dev):
                return GpuDevice(dev.index, None, None, unsupported=tuple(dev.guard.unsupported))
            if t >= dev.static_due:
                self._refresh_static(dev)
                dev.static_due = t + STATIC_REFRESH_S
            return self._read_live(dev, t, targets, pid_map)
        except DeviceLostError as exc:
            _log.warning("GPU %d lost: %s", dev.index, exc)
            dev.lost = True
            return dev.lost_device()

    def _refresh_static(self, dev: _DeviceState) -> None:
        g, h = dev.guard, dev.guard.handle
        dev.sm_clock_max_mhz = _as_float(
            g.call(("sm_clock_max_mhz",), ("nvmlDeviceGetMaxClockInfo",), h, pynvml.NVML_CLOCK_SM)
        )
        dev.temperature_slowdown_c = _as_float(
            g.call(
                ("temperature_slowdown_c",),
                ("nvmlDeviceGetTemperatureThreshold",),
                h,
                pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
            )
        )
        dev.power_limit_w = _as_float(
            g.call(("power_limit_w",), ("nvmlDeviceGetEnforcedPowerLimit",), h), 1000.0
        )

    def _read_live(
        self, dev: _DeviceState, t: float, targets: frozenset[int], pid_map: Mapping[int, int]
    ) -> GpuDevice:
        g, h = dev.guard, dev.guard.handle
        util = g.call(("util_percent", "mem_util_percent"), ("nvmlDeviceGetUtilizationRates",), h)
        mem = g.call(("mem_used_bytes", "mem_total_bytes"), ("nvmlDeviceGetMemoryInfo",), h)
        temp = g.call(
            ("temperature_c",), ("nvmlDeviceGetTemperature",), h, pynvml.NVML_TEMPERATURE_GPU
        )
        power = g.call(("power_w",), ("nvmlDeviceGetPowerUsage",), h)
        clock = g.call(("sm_clock_mhz",), ("nvmlDeviceGetClockInfo",), h, pynvml.NVML_CLOCK_SM)
        reasons = g.call(("clock_event_reasons",), _CLOCK_REASON_FNS, h)
        pcie = self._read_pcie(dev, t)
        processes = self._read_processes(dev, t, targets, pid_map)
        return GpuDevice(
            index=dev.index,
            name=dev.name,
            uuid=dev.uuid,
            util_percent=_as_float(util.gpu) if util is not None else None,
            mem_util_percent=_as_float(util.memory) if util is not None else None,
            mem_used_bytes=int(mem.used) if mem is not None else None,
            mem_total_bytes=int(mem.total) if mem is not None else None,
            temperature_c=_as_float(temp),
            temperature_slowdown_c=dev.temperature_slowdown_c,
            power_w=_as_float(power, 1000.0),
            power_limit_w=dev.power_limit_w,
            sm_clock_mhz=_as_float(clock),
            sm_clock_max_mhz=dev.sm_clock_max_mhz,
            clock_event_reasons=decode_clock_event_reasons(int(reasons)) if reasons else (),
            pcie_tx_bps=pcie.get("pcie_tx_bps"),
            pcie_rx_bps=pcie.get("pcie_rx_bps"),
            processes=processes,
            unsupported=tuple(g.unsupported),
        )

    def _read_pcie(self, dev: _DeviceState, t: float) -> dict[str, float | None]:
        """PCIe bytes/s from the cumulative TX/RX counters (one cheap call for both)."""
        wanted = [
            (label, fid) for label, fid in _PCIE_FIELDS if not dev.guard.is_unsupported(label)
        ]
        if not wanted:
            return {}
        labels = tuple(label for label, _ in wanted)
        values = dev.guard.call(
            labels, ("nvmlDeviceGetFieldValues",), dev.guard.handle, [fid for _, fid in wanted]
        )
        if values is None:
            return {}
        rates: dict[str, float | None] = {}
        for (label, _), fv in zip(wanted, values, strict=True):
            rates[label] = self._pcie_rate(dev, label, fv, t)
        return rates

    def _pcie_rate(self, dev: _DeviceState, label: str, fv: Any, t: float) -> float | None:
        ret = int(fv.nvmlReturn)
        if ret in (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_NO_PERMISSION):
            dev.guard.mark_unsupported(label)
            return None
        if ret != pynvml.NVML_SUCCESS:
            return None
        ts_us = int(fv.timestamp) or int(t * _US)
        return dev.pcie.setdefault(label, CounterRate()).update(int(fv.value.ullVal), ts_us)

    def _read_processes(
        self, dev: _DeviceState, t: float, targets: frozenset[int], pid_map: Mapping[int, int]
    ) -> tuple[GpuProcess, ...]:
        g, h = dev.guard, dev.guard.handle
        compute = g.call(("processes",), _COMPUTE_PROC_FNS, h)
        graphics = g.call(("processes.graphics",), _GRAPHICS_PROC_FNS, h)
        memory = merge_running_processes(compute, graphics)
        sm = self._process_sm(dev, t)
        procs = []
        for nvml_pid in sorted(set(memory) | set(sm)):
            pid = pid_map.get(nvml_pid, nvml_pid)
            procs.append(
                GpuProcess(
                    pid=pid,
                    used_memory_bytes=memory.get(nvml_pid),
                    sm_percent=sm.get(nvml_pid),
                    in_target=pid in targets,
                    name=self._process_name(nvml_pid),
                )
            )
        procs.sort(key=lambda p: (not p.in_target, -(p.used_memory_bytes or 0), p.pid))
        return tuple(procs)

    def _process_sm(self, dev: _DeviceState, t: float) -> dict[int, float]:
        """SM % per NVML PID from the newest sample that is still recent."""
        samples = dev.guard.call(
            ("processes.sm_percent",),
            ("nvmlDeviceGetProcessUtilization",),
            dev.guard.handle,
            dev.util_last_seen_us,
            not_found=[],
        )
        for s in samples or ():
            ts, pid = int(s.timeStamp), int(s.pid)
            dev.util_last_seen_us = max(dev.util_last_seen_us, ts)
            if ts >= dev.sm_by_pid.get(pid, (-1, 0))[0]:
                dev.sm_by_pid[pid] = (ts, int(s.smUtil))
        oldest = int((t - SM_SAMPLE_MAX_AGE_S) * _US)
        dev.sm_by_pid = {p: v for p, v in dev.sm_by_pid.items() if v[0] >= oldest}
        return {p: float(sm) for p, (_, sm) in dev.sm_by_pid.items() if 0 <= sm <= 100}

    def _process_name(self, nvml_pid: int) -> str | None:
        return (read_comm(nvml_pid, proc_root=self._proc_root) or "").strip() or None

    def _current_pid_map(self, t: float) -> dict[int, int]:
        """The host→our PID map, rebuilt at most every few seconds and only if nested."""
        if self._pid_depth is None:
            self._pid_depth = nspid_depth(self._proc_root)
        if self._pid_depth < 2:
            return {}
        if t - self._pid_map_at >= PID_MAP_REFRESH_S:
            self._pid_map = nspid_pid_map(self._proc_root, self._pid_depth)
            self._pid_map_at = t
        return self._pid_map


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return value.decode() if isinstance(value, bytes) else str(value)
