"""NVML's GPU Performance Monitoring (GPM) metrics, beside plain utilisation.

Plain NVML utilisation says only that *some* kernel ran during a sample period:
one tiny kernel at a time reads 100 %. GPM (Hopper and newer, driver 520+)
measures how much of the chip worked: the share of SMs busy, warp occupancy
and tensor-core activity. The self-test reads them for the GPU-bound job to
show how far "100 % utilised" is from "the chip is full", and to find out
whether GPM answers on a given machine (VMs and sandboxes may refuse it) before
aitop's probe relies on it.

All access goes through the module passed in (``pynvml`` by default); a binding
or driver without GPM, or a GPU that does not support it, gives a reading that
says so instead of raising.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import pynvml
from aitop.engine.selftest.model import FAIL, INFO, PASS, SKIP, Check

GROUP = "gpm"

#: Our name → NVML GPM metric id (the ABI values, as in nvml.h).
GPM_METRICS: tuple[tuple[str, int], ...] = (
    ("sm_util_percent", 2),  # NVML_GPM_METRIC_SM_UTIL
    ("sm_occupancy_percent", 3),  # NVML_GPM_METRIC_SM_OCCUPANCY
    ("tensor_active_percent", 5),  # NVML_GPM_METRIC_ANY_TENSOR_UTIL
    ("dram_bw_util_percent", 10),  # NVML_GPM_METRIC_DRAM_BW_UTIL
)

_NEEDED = ("nvmlGpmQueryDeviceSupport", "nvmlGpmSampleAlloc", "nvmlGpmSampleGet",
           "nvmlGpmSampleFree", "nvmlGpmMetricsGet", "c_nvmlGpmMetricsGet_t")

#: Errors that mean "GPM cannot be had here" rather than "GPM failed".
_REFUSED: tuple[type[BaseException], ...] = (
    pynvml.NVMLError_NotSupported,
    pynvml.NVMLError_NoPermission,
    pynvml.NVMLError_FunctionNotFound,
)


@dataclass(frozen=True)
class GpmReading:
    """GPM metrics over one interval, or why there are none."""

    supported: bool
    reason: str | None = None
    values: dict[str, float | None] = field(default_factory=dict)
    interval_s: float = 0.0


def read_gpm(
    index: int,
    *,
    nvml: ModuleType | None = None,
    interval_s: float = 1.0,
    sleep: Callable[[float], None] = time.sleep,
) -> GpmReading:
    """Two GPM samples ``interval_s`` apart on GPU ``index``, and the metrics between."""
    lib: Any = nvml if nvml is not None else pynvml
    missing = [name for name in _NEEDED if getattr(lib, name, None) is None]
    if missing:
        return GpmReading(False, f"this nvidia-ml-py has no {missing[0]} (too old for GPM)")
    try:
        lib.nvmlInit()
    except pynvml.NVMLError as exc:
        return GpmReading(False, f"NVML init failed: {exc}")
    try:
        handle = lib.nvmlDeviceGetHandleByIndex(index)
        if not lib.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice:
            return GpmReading(False, "this GPU does not support GPM (Hopper or newer needed)")
        return _sample_pair(lib, handle, interval_s, sleep)
    except _REFUSED as exc:
        return GpmReading(False, f"GPM refused: {exc}")
    except pynvml.NVMLError as exc:
        return GpmReading(False, f"GPM failed: {exc}")
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            lib.nvmlShutdown()


def _sample_pair(
    lib: Any, handle: Any, interval_s: float, sleep: Callable[[float], None]
) -> GpmReading:
    first, second = lib.nvmlGpmSampleAlloc(), lib.nvmlGpmSampleAlloc()
    try:
        lib.nvmlGpmSampleGet(handle, first)
        sleep(interval_s)
        lib.nvmlGpmSampleGet(handle, second)
        request = lib.c_nvmlGpmMetricsGet_t()
        request.version = getattr(lib, "NVML_GPM_METRICS_GET_VERSION", 1)
        request.numMetrics = len(GPM_METRICS)
        request.sample1, request.sample2 = first, second
        for slot, (_, metric_id) in enumerate(GPM_METRICS):
            request.metrics[slot].metricId = metric_id
        lib.nvmlGpmMetricsGet(request)
        values: dict[str, float | None] = {}
        for slot, (name, _) in enumerate(GPM_METRICS):
            metric = request.metrics[slot]
            ok = int(metric.nvmlReturn) == pynvml.NVML_SUCCESS
            values[name] = round(float(metric.value), 2) if ok else None
        return GpmReading(True, None, values, interval_s)
    finally:
        for sample in (first, second):
            with contextlib.suppress(pynvml.NVMLError):
                lib.nvmlGpmSampleFree(sample)


#: Tensor-core activity a large bf16 matmul job must show (it runs on tensor cores).
MIN_TENSOR_ACTIVE = 5.0


def judge_gpm(reading: GpmReading, util_percent: float | None) -> list[Check]:
    """GPM beside plain utilisation for the GPU-bound job.

    Values must lie in 0-100 and tensor cores must be active for a bf16 matmul
    job; SM utilisation and occupancy are shown, not judged (how full a matmul
    keeps the chip is the point of showing them, not a property of aitop).
    """
    if not reading.supported:
        return [Check("gpm.available", GROUP, "GPM metrics (SM util, occupancy, tensor)", SKIP,
                      expected="readable on Hopper or newer", seen=None,
                      detail=reading.reason or "not supported")]
    values = reading.values
    out_of_range = [k for k, v in values.items() if v is not None and not 0 <= v <= 100.5]
    checks = [Check(
        "gpm.available", GROUP, "GPM metrics (SM util, occupancy, tensor)",
        FAIL if out_of_range else PASS, expected="values in 0-100 %",
        seen=values, detail=f"out of range: {out_of_range}" if out_of_range else "",
    )]
    checks.append(Check("gpm.beside_util", GROUP, "plain NVML utilisation vs GPM SM utilisation",
                        INFO, expected=util_percent, seen=values.get("sm_util_percent"),
                        detail="utilisation counts time with any kernel; GPM counts busy SMs"))
    tensor = values.get("tensor_active_percent")
    if tensor is None:
        checks.append(Check("gpm.tensor_active", GROUP, "tensor-core activity, bf16 job (%)",
                            SKIP, detail="the driver gave no tensor activity"))
    else:
        ok = tensor >= MIN_TENSOR_ACTIVE
        checks.append(Check("gpm.tensor_active", GROUP, "tensor-core activity, bf16 job (%)",
                            PASS if ok else FAIL, expected=f">= {MIN_TENSOR_ACTIVE:g}",
                            seen=tensor,
                            detail="" if ok else "bf16 matmuls should use tensor cores"))
    return checks
