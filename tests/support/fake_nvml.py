"""A fake NVML: the only fake in the project, so it is built to be faithful.

``FakeNvml`` is a real :class:`types.ModuleType` exposing the subset of the
``pynvml`` API that the GPU probe calls, with the same function names and
signatures (a test checks them against the installed ``pynvml``). It raises the
real ``pynvml.NVMLError`` subclasses, built the way ``pynvml`` builds them
(``NVMLError(code)``), and returns the real ``pynvml`` ctypes structures
(``c_nvmlMemory_t``, ``c_nvmlUtilization_t``, ``c_nvmlFieldValue_t``,
``c_nvmlProcessUtilizationSample_t``) or the same friendly objects
(``nvmlStructToFriendlyObject``) that ``pynvml`` returns, so attribute names
cannot drift from the real ones.

Behaviour follows the real library where it matters to a caller: nothing works
before ``nvmlInit``; ``nvmlDeviceGetFieldValues`` reports per-field failures in
``nvmlReturn`` instead of raising; ``nvmlDeviceGetProcessUtilization`` returns
only samples newer than the timestamp passed and raises ``NotFound`` when there
are none; cumulative PCIe counters advance with the fake clock.

Scenarios (:data:`SCENARIOS`, built by :func:`make_fake`): ``healthy`` (one GPU),
``no_driver``, ``not_supported``, ``gpu_lost``, ``two_gpus``, ``processes``,
``leaking`` (the target's GPU memory grows with the clock, as a job that keeps
every step's loss tensor does), ``shared`` (the target's GPU busy, half of it
with another process's kernels).
Every call is recorded in :attr:`FakeNvml.calls` so tests can count them.
"""

from __future__ import annotations

import dataclasses
import types
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import pynvml

SCENARIOS: tuple[str, ...] = (
    "healthy",
    "no_driver",
    "not_supported",
    "gpu_lost",
    "two_gpus",
    "processes",
    "leaking",
    "shared",
)

GIB = 1024**3
MIB = 1024**2

#: Functions implemented here; each must match ``pynvml``'s signature.
IMPLEMENTED: tuple[str, ...] = (
    "nvmlInit",
    "nvmlShutdown",
    "nvmlSystemGetDriverVersion",
    "nvmlDeviceGetCount",
    "nvmlDeviceGetHandleByIndex",
    "nvmlDeviceGetName",
    "nvmlDeviceGetUUID",
    "nvmlDeviceGetUtilizationRates",
    "nvmlDeviceGetMemoryInfo",
    "nvmlDeviceGetTemperature",
    "nvmlDeviceGetTemperatureThreshold",
    "nvmlDeviceGetPowerUsage",
    "nvmlDeviceGetEnforcedPowerLimit",
    "nvmlDeviceGetClockInfo",
    "nvmlDeviceGetMaxClockInfo",
    "nvmlDeviceGetCurrentClocksEventReasons",
    "nvmlDeviceGetCurrentClocksThrottleReasons",
    "nvmlDeviceGetFieldValues",
    "nvmlDeviceGetComputeRunningProcesses",
    "nvmlDeviceGetComputeRunningProcesses_v2",
    "nvmlDeviceGetComputeRunningProcesses_v3",
    "nvmlDeviceGetGraphicsRunningProcesses",
    "nvmlDeviceGetGraphicsRunningProcesses_v2",
    "nvmlDeviceGetGraphicsRunningProcesses_v3",
    "nvmlDeviceGetProcessUtilization",
)


def nvml_error(code: int) -> pynvml.NVMLError:
    """The exception ``pynvml`` would raise for return code ``code``."""
    return pynvml.NVMLError(code)


class FakeClock:
    """Wall-clock seconds under test control (shared by the fake and the probe)."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds

    @property
    def us(self) -> int:
        return int(self.now * 1_000_000)


@dataclass(frozen=True)
class FakeHandle:
    """Opaque device handle (pynvml's is a ``c_nvmlDevice_t`` pointer)."""

    index: int


@dataclass
class FakeProc:
    pid: int
    used_memory: int | None
    #: Bytes per second the process's memory grows from ``since`` on the clock.
    growth_bps: float = 0.0
    since: float = 0.0

    def used_at(self, now: float) -> int | None:
        if self.used_memory is None:
            return None
        return self.used_memory + round(self.growth_bps * max(0.0, now - self.since))


@dataclass
class FakeUtilSample:
    pid: int
    ts_us: int
    sm: int
    mem: int = 0


@dataclass
class FakeGpu:
    """One simulated GPU; change attributes between samples to change readings."""

    index: int
    name: str = "NVIDIA H100 80GB HBM3"
    uuid: str = "GPU-00000000-0000-0000-0000-000000000000"
    util_gpu: int = 97
    util_mem: int = 41
    mem_total: int = 80 * GIB
    mem_used: int = 61 * GIB
    temperature: int = 64
    slowdown_temperature: int = 90
    power_mw: int = 612_000
    power_limit_mw: int = 700_000
    sm_clock: int = 1755
    sm_clock_max: int = 1980
    clock_reasons: int = pynvml.nvmlClocksEventReasonNone
    #: PCIe traffic in bytes/s; the fake's cumulative counters grow at these rates.
    pcie_tx_bps: float = 2.0e9
    pcie_rx_bps: float = 12.0e9
    pcie_base: int = 10**12
    compute: list[FakeProc] = field(default_factory=list)
    graphics: list[FakeProc] = field(default_factory=list)
    #: pid → current SM %: the fake's driver records one sample per pid per call.
    sm_util: dict[int, int] = field(default_factory=dict)
    #: Samples held in the driver's buffer (explicit ones may be added by tests).
    util_history: list[FakeUtilSample] = field(default_factory=list)
    #: Function names that raise NotSupported on this device.
    not_supported: set[str] = field(default_factory=set)
    #: Field ids whose entries come back with ``nvmlReturn = NOT_SUPPORTED``.
    fields_not_supported: set[int] = field(default_factory=set)
    #: Function name → exception to raise on every call (any exception type).
    errors: dict[str, BaseException] = field(default_factory=dict)
    #: After this many calls on this device, every call raises GpuIsLost.
    lost_after_calls: int | None = None
    calls: int = 0


class FakeNvml(types.ModuleType):
    """A module object standing in for ``pynvml`` (see the module docstring)."""

    def __init__(self, gpus: list[FakeGpu], clock: FakeClock | None = None) -> None:
        super().__init__("fake_pynvml")
        for name, value in vars(pynvml).items():
            if name.startswith(("NVMLError", "NVML_", "nvmlClocks")):
                setattr(self, name, value)
        self.gpus = gpus
        self.clock = clock or FakeClock()
        self.driver_version = "570.86.15"
        self.init_error: int | None = None
        #: Names reported missing from the module (an older binding).
        self.absent: set[str] = set()
        #: Names whose C symbol is missing (an older driver): FunctionNotFound.
        self.function_not_found: set[str] = set()
        self.initialised = 0
        self.calls: list[tuple[str, int | None, tuple[Any, ...]]] = []
        self._t0 = self.clock.now

    def __getattribute__(self, name: str) -> Any:
        if name in object.__getattribute__(self, "__dict__").get("absent", ()):
            raise AttributeError(name)
        return object.__getattribute__(self, name)

    # ---------------------------------------------------------- bookkeeping

    def count(self, fn_name: str, index: int | None = None) -> int:
        """How many times ``fn_name`` was called (on device ``index`` if given)."""
        return sum(1 for n, i, _ in self.calls if n == fn_name and (index is None or i == index))

    def args_of(self, fn_name: str, index: int | None = None) -> list[tuple[Any, ...]]:
        return [a for n, i, a in self.calls if n == fn_name and (index is None or i == index)]

    def _enter(self, fn_name: str, handle: FakeHandle | None = None, *args: Any) -> FakeGpu | None:
        """Record a call and apply the failure knobs, like the real entry points."""
        self.calls.append((fn_name, handle.index if handle else None, args))
        if fn_name in self.function_not_found:
            raise nvml_error(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)
        if fn_name != "nvmlInit" and not self.initialised:
            raise nvml_error(pynvml.NVML_ERROR_UNINITIALIZED)
        if handle is None:
            return None
        if not isinstance(handle, FakeHandle) or not 0 <= handle.index < len(self.gpus):
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        gpu = self.gpus[handle.index]
        gpu.calls += 1
        if gpu.lost_after_calls is not None and gpu.calls > gpu.lost_after_calls:
            raise nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)
        if fn_name in gpu.errors:
            raise gpu.errors[fn_name]
        if fn_name in gpu.not_supported:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu

    def _gpu(self, fn_name: str, handle: FakeHandle, *args: Any) -> FakeGpu:
        gpu = self._enter(fn_name, handle, *args)
        assert gpu is not None
        return gpu

    # ------------------------------------------------------------- library

    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        if self.init_error is not None:
            raise nvml_error(self.init_error)
        self.initialised += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeHandle:
        self._enter("nvmlDeviceGetHandleByIndex", None, index)
        if not 0 <= index < len(self.gpus):
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        error = self.gpus[index].errors.get("nvmlDeviceGetHandleByIndex")
        if error is not None:
            raise error
        return FakeHandle(index)

    # -------------------------------------------------------------- device

    def nvmlDeviceGetName(self, handle: FakeHandle) -> str:
        return self._gpu("nvmlDeviceGetName", handle).name

    def nvmlDeviceGetUUID(self, handle: FakeHandle) -> str:
        return self._gpu("nvmlDeviceGetUUID", handle).uuid

    def nvmlDeviceGetUtilizationRates(self, handle: FakeHandle) -> pynvml.c_nvmlUtilization_t:
        gpu = self._gpu("nvmlDeviceGetUtilizationRates", handle)
        return pynvml.c_nvmlUtilization_t(gpu=gpu.util_gpu, memory=gpu.util_mem)

    def nvmlDeviceGetMemoryInfo(
        self, handle: FakeHandle, version: int | None = None
    ) -> pynvml.c_nvmlMemory_t | pynvml.c_nvmlMemory_v2_t:
        gpu = self._gpu("nvmlDeviceGetMemoryInfo", handle, version)
        # What the processes' memory grew by is in use on the device too.
        grown = sum((p.used_at(self.clock.now) or 0) - (p.used_memory or 0)
                    for p in gpu.compute)
        gpu = dataclasses.replace(gpu, mem_used=min(gpu.mem_total, gpu.mem_used + grown))
        if version:
            if version != pynvml.nvmlMemory_v2:
                raise nvml_error(pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH)
            return pynvml.c_nvmlMemory_v2_t(
                version=version,
                total=gpu.mem_total,
                reserved=0,
                free=gpu.mem_total - gpu.mem_used,
                used=gpu.mem_used,
            )
        return pynvml.c_nvmlMemory_t(
            total=gpu.mem_total, free=gpu.mem_total - gpu.mem_used, used=gpu.mem_used
        )

    def nvmlDeviceGetTemperature(self, handle: FakeHandle, sensor: int) -> int:
        gpu = self._gpu("nvmlDeviceGetTemperature", handle, sensor)
        if sensor != pynvml.NVML_TEMPERATURE_GPU:
            raise nvml_error(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return gpu.temperature

    def nvmlDeviceGetTemperatureThreshold(self, handle: FakeHandle, threshold: int) -> int:
        gpu = self._gpu("nvmlDeviceGetTemperatureThreshold", handle, threshold)
        if threshold == pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN:
            return gpu.slowdown_temperature
        if threshold == pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN:
            return gpu.slowdown_temperature + 5
        raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)

    def nvmlDeviceGetPowerUsage(self, handle: FakeHandle) -> int:
        return self._gpu("nvmlDeviceGetPowerUsage", handle).power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: FakeHandle) -> int:
        return self._gpu("nvmlDeviceGetEnforcedPowerLimit", handle).power_limit_mw

    def nvmlDeviceGetClockInfo(self, handle: FakeHandle, type: int) -> int:
        gpu = self._gpu("nvmlDeviceGetClockInfo", handle, type)
        if type != pynvml.NVML_CLOCK_SM:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.sm_clock

    def nvmlDeviceGetMaxClockInfo(self, handle: FakeHandle, type: int) -> int:
        gpu = self._gpu("nvmlDeviceGetMaxClockInfo", handle, type)
        if type != pynvml.NVML_CLOCK_SM:
            raise nvml_error(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return gpu.sm_clock_max

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: FakeHandle) -> int:
        return self._gpu("nvmlDeviceGetCurrentClocksEventReasons", handle).clock_reasons

    def nvmlDeviceGetCurrentClocksThrottleReasons(self, handle: FakeHandle) -> int:
        return self._gpu("nvmlDeviceGetCurrentClocksThrottleReasons", handle).clock_reasons

    def nvmlDeviceGetFieldValues(self, handle: FakeHandle, fieldIds: list[int]) -> Any:
        gpu = self._gpu("nvmlDeviceGetFieldValues", handle, tuple(fieldIds))
        values = (pynvml.c_nvmlFieldValue_t * len(fieldIds))()
        counters = {
            pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES: gpu.pcie_tx_bps,
            pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES: gpu.pcie_rx_bps,
        }
        for slot, field_id in zip(values, fieldIds, strict=True):
            slot.fieldId = field_id
            slot.timestamp = self.clock.us
            slot.valueType = pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG
            if field_id in gpu.fields_not_supported:
                slot.nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
            elif field_id in counters:
                elapsed = self.clock.now - self._t0
                slot.value.ullVal = gpu.pcie_base + int(counters[field_id] * elapsed)
                slot.nvmlReturn = pynvml.NVML_SUCCESS
            else:
                slot.nvmlReturn = pynvml.NVML_ERROR_INVALID_ARGUMENT
        return values

    def _procs(self, fn_name: str, handle: FakeHandle, which: str) -> list[Any]:
        gpu = self._gpu(fn_name, handle)
        out = []
        for proc in getattr(gpu, which):
            used = proc.used_at(self.clock.now)
            raw = pynvml.c_nvmlProcessInfo_v3_t(
                pid=proc.pid,
                usedGpuMemory=pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value
                if used is None
                else used,
            )
            obj = pynvml.nvmlStructToFriendlyObject(raw)
            # pynvml turns "not available" into None itself.
            if obj.usedGpuMemory == pynvml.NVML_VALUE_NOT_AVAILABLE_ulonglong.value:
                obj.usedGpuMemory = None
            out.append(obj)
        return out

    def nvmlDeviceGetComputeRunningProcesses_v3(self, handle: FakeHandle) -> list[Any]:
        return self._procs("nvmlDeviceGetComputeRunningProcesses_v3", handle, "compute")

    def nvmlDeviceGetComputeRunningProcesses_v2(self, handle: FakeHandle) -> list[Any]:
        return self._procs("nvmlDeviceGetComputeRunningProcesses_v2", handle, "compute")

    def nvmlDeviceGetComputeRunningProcesses(self, handle: FakeHandle) -> list[Any]:
        return self._procs("nvmlDeviceGetComputeRunningProcesses", handle, "compute")

    def nvmlDeviceGetGraphicsRunningProcesses_v3(self, handle: FakeHandle) -> list[Any]:
        return self._procs("nvmlDeviceGetGraphicsRunningProcesses_v3", handle, "graphics")

    def nvmlDeviceGetGraphicsRunningProcesses_v2(self, handle: FakeHandle) -> list[Any]:
        return self._procs("nvmlDeviceGetGraphicsRunningProcesses_v2", handle, "graphics")

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle: FakeHandle) -> list[Any]:
        return self._procs("nvmlDeviceGetGraphicsRunningProcesses", handle, "graphics")

    def nvmlDeviceGetProcessUtilization(self, handle: FakeHandle, timeStamp: int) -> list[Any]:
        gpu = self._gpu("nvmlDeviceGetProcessUtilization", handle, timeStamp)
        now_us = self.clock.us
        for pid, sm in gpu.sm_util.items():
            if not any(s.pid == pid and s.ts_us == now_us for s in gpu.util_history):
                gpu.util_history.append(FakeUtilSample(pid, now_us, sm, sm // 2))
        fresh = [s for s in gpu.util_history if s.ts_us > timeStamp]
        if not fresh:
            raise nvml_error(pynvml.NVML_ERROR_NOT_FOUND)
        return [
            pynvml.c_nvmlProcessUtilizationSample_t(
                pid=s.pid, timeStamp=s.ts_us, smUtil=s.sm, memUtil=s.mem, encUtil=0, decUtil=0
            )
            for s in fresh
        ]


# --------------------------------------------------------------- scenarios

#: pids used by the ``processes`` scenario.
TARGET_PID = 4242
TARGET_CHILD_PID = 4250
OTHER_PID = 9999
XORG_PID = 777


def _healthy(clock: FakeClock) -> FakeNvml:
    return FakeNvml([FakeGpu(0, uuid="GPU-aaaaaaaa-0000-0000-0000-000000000000")], clock)


def _no_driver(clock: FakeClock) -> FakeNvml:
    fake = FakeNvml([], clock)
    fake.init_error = pynvml.NVML_ERROR_LIBRARY_NOT_FOUND
    return fake


def _not_supported(clock: FakeClock) -> FakeNvml:
    """A GPU (think consumer card in a VM) that will not tell power or PCIe traffic."""
    gpu = FakeGpu(
        0, name="NVIDIA GeForce RTX 3060", uuid="GPU-cccccccc-0000-0000-0000-000000000000"
    )
    gpu.not_supported = {"nvmlDeviceGetPowerUsage", "nvmlDeviceGetEnforcedPowerLimit"}
    gpu.fields_not_supported = {
        pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,
        pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES,
    }
    return FakeNvml([gpu], clock)


def _two_gpus(clock: FakeClock) -> FakeNvml:
    return FakeNvml(
        [
            FakeGpu(0, uuid="GPU-aaaaaaaa-0000-0000-0000-000000000000", util_gpu=97),
            FakeGpu(
                1,
                name="NVIDIA A100-SXM4-40GB",
                uuid="GPU-bbbbbbbb-0000-0000-0000-000000000000",
                util_gpu=12,
                mem_total=40 * GIB,
                mem_used=3 * GIB,
                temperature=41,
                slowdown_temperature=92,
                power_mw=90_500,
                power_limit_mw=400_000,
                sm_clock=1410,
                sm_clock_max=1410,
                clock_reasons=pynvml.nvmlClocksEventReasonGpuIdle,
            ),
        ],
        clock,
    )


#: Calls device 1 answers in the ``gpu_lost`` scenario before it falls off the
#: bus: name and UUID at open, three static reads and utilisation in the first
#: tick; the memory read that follows is the first to raise GpuIsLost.
GPU_LOST_AFTER_CALLS = 6


def _gpu_lost(clock: FakeClock) -> FakeNvml:
    fake = _two_gpus(clock)
    fake.gpus[1].lost_after_calls = GPU_LOST_AFTER_CALLS
    return fake


def _processes(clock: FakeClock) -> FakeNvml:
    """The target (and a child) training on GPU 0 next to someone else's job and Xorg."""
    gpu = FakeGpu(0, uuid="GPU-dddddddd-0000-0000-0000-000000000000")
    gpu.compute = [
        FakeProc(TARGET_PID, 50 * GIB),
        FakeProc(TARGET_CHILD_PID, 1 * GIB),
        FakeProc(OTHER_PID, 8 * GIB),
    ]
    # A "C+G" target process is listed in both lists with the same memory.
    gpu.graphics = [FakeProc(XORG_PID, 40 * MIB), FakeProc(TARGET_PID, 50 * GIB)]
    gpu.sm_util = {TARGET_PID: 80, TARGET_CHILD_PID: 3, OTHER_PID: 12}
    return FakeNvml([gpu], clock)


#: MB/s the target's GPU memory grows in the ``leaking`` scenario: 120 MB/min.
LEAK_MB_S = 2.0


def _leaking(clock: FakeClock) -> FakeNvml:
    """The target alone on an 80 GB GPU, its memory growing by LEAK_MB_S."""
    gpu = FakeGpu(0, uuid="GPU-eeeeeeee-0000-0000-0000-000000000000", mem_used=21 * GIB)
    gpu.compute = [FakeProc(TARGET_PID, 20 * GIB, growth_bps=LEAK_MB_S * 1e6, since=clock.now)]
    gpu.sm_util = {TARGET_PID: 90}
    return FakeNvml([gpu], clock)


def _shared(clock: FakeClock) -> FakeNvml:
    """The target's GPU 98 % busy: 45 % of its SMs the target's, 50 % another job's."""
    gpu = FakeGpu(0, uuid="GPU-ffffffff-0000-0000-0000-000000000000", util_gpu=98)
    gpu.compute = [FakeProc(TARGET_PID, 30 * GIB), FakeProc(OTHER_PID, 20 * GIB)]
    gpu.sm_util = {TARGET_PID: 45, OTHER_PID: 50}
    return FakeNvml([gpu], clock)


_BUILDERS: dict[str, Callable[[FakeClock], FakeNvml]] = {
    "healthy": _healthy,
    "no_driver": _no_driver,
    "not_supported": _not_supported,
    "gpu_lost": _gpu_lost,
    "two_gpus": _two_gpus,
    "processes": _processes,
    "leaking": _leaking,
    "shared": _shared,
}


def make_fake(scenario: str = "healthy", clock: FakeClock | None = None) -> FakeNvml:
    """Build the named scenario (see :data:`SCENARIOS`) on ``clock``."""
    try:
        builder = _BUILDERS[scenario]
    except KeyError:
        raise ValueError(f"unknown fake NVML scenario {scenario!r}; try {SCENARIOS}") from None
    return builder(clock or FakeClock())
