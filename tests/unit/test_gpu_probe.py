"""GPU probe against the fake NVML (tests/fake_nvml.py) and the real pynvml.

Probes get an empty temporary ``proc_root`` unless a test builds one, so the
machine's own /proc cannot change PID mapping or process names under a test.
"""

from __future__ import annotations

import ctypes
import dataclasses
import inspect
from pathlib import Path

import pynvml
import pytest
from aitop.probes.gpu import (
    INIT_RETRY_S,
    SM_SAMPLE_MAX_AGE_S,
    STATIC_REFRESH_S,
    CounterRate,
    GpuProbe,
    decode_clock_event_reasons,
    merge_running_processes,
    nspid_depth,
    nspid_pid_map,
)
from aitop.probes.kernel.procfs import parse_nspid
from aitop.probes.samples import GpuDevice, GpuSample
from support.fake_nvml import (
    GIB,
    IMPLEMENTED,
    MIB,
    OTHER_PID,
    SCENARIOS,
    TARGET_CHILD_PID,
    TARGET_PID,
    XORG_PID,
    FakeClock,
    FakeNvml,
    FakeProc,
    FakeUtilSample,
    make_fake,
    nvml_error,
)

#: Every per-tick value field of GpuDevice (what "filled" means in these tests).
VALUE_FIELDS = (
    "util_percent",
    "mem_util_percent",
    "mem_used_bytes",
    "mem_total_bytes",
    "temperature_c",
    "temperature_slowdown_c",
    "power_w",
    "power_limit_w",
    "sm_clock_mhz",
    "sm_clock_max_mhz",
    "pcie_tx_bps",
    "pcie_rx_bps",
)


def setup(scenario: str, proc_root: Path) -> tuple[FakeNvml, GpuProbe, FakeClock]:
    clock = FakeClock()
    fake = make_fake(scenario, clock)
    return fake, GpuProbe(fake, proc_root=proc_root, clock=clock), clock


def two_ticks(probe: GpuProbe, clock: FakeClock, targets: set[int] | None = None) -> GpuSample:
    """Sample, wait a second, sample again (the second has counter rates)."""
    probe.sample(targets or set())
    clock.advance(1.0)
    return probe.sample(targets or set())


def blank_fields(dev: GpuDevice) -> set[str]:
    return {name for name in VALUE_FIELDS if getattr(dev, name) is None}


# ------------------------------------------------------------ the fake itself


def test_fake_has_every_scenario() -> None:
    for name in SCENARIOS:
        assert isinstance(make_fake(name), FakeNvml)
    with pytest.raises(ValueError, match="unknown fake NVML scenario"):
        make_fake("nope")


@pytest.mark.parametrize("fn_name", IMPLEMENTED)
def test_fake_signatures_match_pynvml(fn_name: str) -> None:
    fake = make_fake()
    real = inspect.signature(getattr(pynvml, fn_name))
    ours = inspect.signature(getattr(fake, fn_name))
    assert [(p.name, p.default) for p in ours.parameters.values()] == [
        (p.name, p.default) for p in real.parameters.values()
    ]


def test_fake_raises_real_pynvml_errors() -> None:
    fake = make_fake()
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        fake.nvmlDeviceGetCount()
    assert fake.NVMLError_NotSupported is pynvml.NVMLError_NotSupported
    assert type(nvml_error(pynvml.NVML_ERROR_GPU_IS_LOST)) is pynvml.NVMLError_GpuIsLost


# ------------------------------------------------------------- no driver


def test_real_pynvml_on_this_machine_never_raises(tmp_path: Path) -> None:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        has_library = False
    else:
        has_library = True
    probe = GpuProbe(proc_root=tmp_path)
    sample = probe.sample({12345})
    probe.close()
    if has_library:
        assert sample.available or sample.reason
    else:
        assert sample.available is False
        assert sample.reason is not None
        assert sample.reason.startswith("no NVIDIA driver: ")
        assert sample.devices == ()


def test_no_driver_reports_reason_and_does_not_retry_every_tick(tmp_path: Path) -> None:
    fake, probe, clock = setup("no_driver", tmp_path)
    first = probe.sample(set())
    assert first.available is False
    assert first.reason == "no NVIDIA driver: NVML Shared Library Not Found"
    for _ in range(5):
        clock.advance(1.0)
        later = probe.sample(set())
        assert later.reason == first.reason
        assert later.t == clock.now
    assert fake.count("nvmlInit") == 1
    clock.advance(INIT_RETRY_S)
    probe.sample(set())
    assert fake.count("nvmlInit") == 2


def test_driver_that_appears_later_is_picked_up_on_retry(tmp_path: Path) -> None:
    fake, probe, clock = setup("no_driver", tmp_path)
    assert probe.sample(set()).available is False
    fake.init_error = None
    fake.gpus.extend(make_fake("healthy").gpus)
    clock.advance(INIT_RETRY_S + 1)
    sample = probe.sample(set())
    assert sample.available is True
    assert len(sample.devices) == 1


def test_other_init_failures_say_what_failed(tmp_path: Path) -> None:
    fake, probe, _ = setup("no_driver", tmp_path)
    fake.init_error = pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH
    sample = probe.sample(set())
    assert sample.available is False
    assert sample.reason == "NVML init failed: RM has detected an NVML/RM version mismatch."


def test_zero_gpus_is_unavailable_with_reason(tmp_path: Path) -> None:
    fake, probe, _ = setup("healthy", tmp_path)
    fake.gpus.clear()
    sample = probe.sample(set())
    assert sample.available is False
    assert sample.reason == "no NVIDIA GPU visible to NVML"
    assert fake.initialised == 0  # the init was balanced by a shutdown


# --------------------------------------------------------------- healthy


def test_healthy_gpu_fills_every_field(tmp_path: Path) -> None:
    _, probe, clock = setup("healthy", tmp_path)
    sample = two_ticks(probe, clock)
    assert sample.available is True
    assert sample.reason is None
    assert sample.driver_version == "570.86.15"
    (dev,) = sample.devices
    assert blank_fields(dev) == set()
    assert dev.unsupported == ()
    assert dev.lost is False
    assert dev.index == 0
    assert dev.name == "NVIDIA H100 80GB HBM3"
    assert dev.uuid == "GPU-aaaaaaaa-0000-0000-0000-000000000000"
    assert dev.util_percent == 97.0
    assert dev.mem_util_percent == 41.0
    assert dev.mem_used_bytes == 61 * GIB
    assert dev.mem_total_bytes == 80 * GIB
    assert dev.temperature_c == 64.0
    assert dev.temperature_slowdown_c == 90.0  # from the driver, not a fixed 83
    assert dev.power_w == 612.0
    assert dev.power_limit_w == 700.0
    assert dev.sm_clock_mhz == 1755.0
    assert dev.sm_clock_max_mhz == 1980.0
    assert dev.clock_event_reasons == ()
    assert dev.processes == ()


def test_init_is_lazy_and_close_shuts_down_once(tmp_path: Path) -> None:
    fake, probe, _ = setup("healthy", tmp_path)
    assert fake.count("nvmlInit") == 0
    probe.sample(set())
    probe.sample(set())
    assert fake.count("nvmlInit") == 1
    assert fake.initialised == 1
    probe.close()
    probe.close()
    assert fake.count("nvmlShutdown") == 1
    assert fake.initialised == 0


def test_sample_after_close_initialises_again(tmp_path: Path) -> None:
    fake, probe, clock = setup("healthy", tmp_path)
    probe.sample(set())
    probe.close()
    clock.advance(1.0)
    sample = probe.sample(set())
    assert sample.available is True
    assert sample.devices[0].util_percent == 97.0
    assert fake.count("nvmlInit") == 2
    assert fake.initialised == 1


def test_static_facts_are_cached_and_refreshed_slowly(tmp_path: Path) -> None:
    fake, probe, clock = setup("healthy", tmp_path)
    probe.sample(set())
    fake.gpus[0].power_limit_mw = 450_000
    clock.advance(STATIC_REFRESH_S / 2)
    assert probe.sample(set()).devices[0].power_limit_w == 700.0
    clock.advance(STATIC_REFRESH_S)
    assert probe.sample(set()).devices[0].power_limit_w == 450.0
    assert fake.count("nvmlDeviceGetMaxClockInfo") == 2
    assert fake.count("nvmlDeviceGetName") == 1
    assert fake.count("nvmlDeviceGetHandleByIndex") == 1
    assert fake.count("nvmlDeviceGetPowerUsage") == 3


# ------------------------------------------------------------------ PCIe


def test_pcie_rate_is_computed_from_two_counter_readings(tmp_path: Path) -> None:
    fake, probe, clock = setup("healthy", tmp_path)
    first = probe.sample(set()).devices[0]
    assert first.pcie_tx_bps is None  # one reading is not a rate
    assert first.pcie_rx_bps is None
    clock.advance(0.5)
    second = probe.sample(set()).devices[0]
    assert second.pcie_tx_bps == pytest.approx(2.0e9)
    assert second.pcie_rx_bps == pytest.approx(12.0e9)
    fake.gpus[0].pcie_base += 3 * 10**9  # 3 GB more on top of the steady rate
    clock.advance(2.0)
    third = probe.sample(set()).devices[0]
    assert third.pcie_tx_bps == pytest.approx(2.0e9 + 1.5e9)
    assert fake.args_of("nvmlDeviceGetFieldValues")[0] == (
        (pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES, pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES),
    )
    assert fake.count("nvmlDeviceGetPcieThroughput") == 0


def test_counter_rate_handles_cached_and_reset_readings() -> None:
    rate = CounterRate()
    assert rate.update(1_000, 1_000_000) is None
    assert rate.update(3_000, 2_000_000) == pytest.approx(2_000.0)
    assert rate.update(3_000, 2_000_000) == pytest.approx(2_000.0)  # cached reading
    assert rate.update(10, 3_000_000) is None  # counter went backwards
    assert rate.update(510, 3_500_000) == pytest.approx(1_000.0)


# -------------------------------------------------------- not supported


def test_not_supported_blanks_exactly_those_fields(tmp_path: Path) -> None:
    _, probe, clock = setup("not_supported", tmp_path)
    (dev,) = two_ticks(probe, clock).devices
    blanked = {"power_w", "power_limit_w", "pcie_tx_bps", "pcie_rx_bps"}
    assert blank_fields(dev) == blanked
    assert set(dev.unsupported) == blanked
    assert dev.name == "NVIDIA GeForce RTX 3060"
    assert dev.util_percent == 97.0
    assert dev.lost is False


def test_unsupported_functions_are_not_called_again(tmp_path: Path) -> None:
    fake, probe, clock = setup("not_supported", tmp_path)
    for _ in range(3):
        probe.sample(set())
        clock.advance(STATIC_REFRESH_S + 1)
    assert fake.count("nvmlDeviceGetPowerUsage") == 1
    assert fake.count("nvmlDeviceGetEnforcedPowerLimit") == 1
    assert fake.count("nvmlDeviceGetFieldValues") == 1
    assert fake.count("nvmlDeviceGetMaxClockInfo") == 3  # supported: still refreshed
    assert fake.count("nvmlDeviceGetUtilizationRates") == 3


def test_field_values_call_not_supported_blanks_both_pcie_fields(tmp_path: Path) -> None:
    fake, probe, clock = setup("healthy", tmp_path)
    fake.gpus[0].not_supported = {"nvmlDeviceGetFieldValues"}
    (dev,) = two_ticks(probe, clock).devices
    assert blank_fields(dev) == {"pcie_tx_bps", "pcie_rx_bps"}
    assert dev.unsupported == ("pcie_tx_bps", "pcie_rx_bps")
    assert fake.count("nvmlDeviceGetFieldValues") == 1


def test_one_unsupported_pcie_field_keeps_the_other(tmp_path: Path) -> None:
    fake, probe, clock = setup("healthy", tmp_path)
    fake.gpus[0].fields_not_supported = {pynvml.NVML_FI_DEV_PCIE_COUNT_RX_BYTES}
    probe.sample(set())
    clock.advance(1.0)
    probe.sample(set())
    clock.advance(1.0)
    (dev,) = probe.sample(set()).devices
    assert dev.pcie_rx_bps is None
    assert dev.pcie_tx_bps == pytest.approx(2.0e9)
    assert dev.unsupported == ("pcie_rx_bps",)
    assert fake.args_of("nvmlDeviceGetFieldValues")[-1] == (
        (pynvml.NVML_FI_DEV_PCIE_COUNT_TX_BYTES,),
    )


def test_no_permission_on_process_list_blanks_only_processes(tmp_path: Path) -> None:
    fake, probe, clock = setup("processes", tmp_path)
    fake.gpus[0].errors["nvmlDeviceGetComputeRunningProcesses_v3"] = nvml_error(
        pynvml.NVML_ERROR_NO_PERMISSION
    )
    (dev,) = two_ticks(probe, clock, {TARGET_PID}).devices
    assert "processes" in dev.unsupported
    assert blank_fields(dev) == set()
    assert {p.pid for p in dev.processes} == {TARGET_PID, TARGET_CHILD_PID, OTHER_PID, XORG_PID}
    assert next(p for p in dev.processes if p.pid == OTHER_PID).used_memory_bytes is None
    assert fake.count("nvmlDeviceGetComputeRunningProcesses_v3") == 1


def test_transient_error_blanks_one_tick_only(tmp_path: Path) -> None:
    fake, probe, _ = setup("healthy", tmp_path)
    fake.gpus[0].errors["nvmlDeviceGetTemperature"] = nvml_error(pynvml.NVML_ERROR_TIMEOUT)
    (dev,) = probe.sample(set()).devices
    assert dev.temperature_c is None
    assert dev.unsupported == ()
    del fake.gpus[0].errors["nvmlDeviceGetTemperature"]
    assert probe.sample(set()).devices[0].temperature_c == 64.0


# ---------------------------------------------------------- clock reasons


def test_decode_clock_event_reasons() -> None:
    assert decode_clock_event_reasons(0) == ()
    assert decode_clock_event_reasons(0x1) == ("gpu_idle",)
    assert decode_clock_event_reasons(0x4 | 0x40) == ("sw_power_cap", "hw_thermal_slowdown")
    assert decode_clock_event_reasons(0x2 | 0x8 | 0x10 | 0x20 | 0x80 | 0x100) == (
        "applications_clocks_setting",
        "hw_slowdown",
        "sync_boost",
        "sw_thermal_slowdown",
        "hw_power_brake_slowdown",
        "display_clock_setting",
    )
    assert decode_clock_event_reasons(0x4 | 0x800) == ("sw_power_cap", "0x800")


def test_probe_decodes_clock_event_reasons(tmp_path: Path) -> None:
    fake, probe, _ = setup("healthy", tmp_path)
    fake.gpus[0].clock_reasons = (
        pynvml.nvmlClocksEventReasonSwPowerCap | pynvml.nvmlClocksEventReasonHwThermalSlowdown
    )
    (dev,) = probe.sample(set()).devices
    assert dev.clock_event_reasons == ("sw_power_cap", "hw_thermal_slowdown")
    assert fake.count("nvmlDeviceGetCurrentClocksThrottleReasons") == 0


@pytest.mark.parametrize("how", ["absent_from_binding", "absent_from_driver"])
def test_clock_reasons_fall_back_to_throttle_reasons(tmp_path: Path, how: str) -> None:
    fake, probe, _ = setup("healthy", tmp_path)
    if how == "absent_from_binding":
        fake.absent.add("nvmlDeviceGetCurrentClocksEventReasons")
    else:
        fake.function_not_found.add("nvmlDeviceGetCurrentClocksEventReasons")
    fake.gpus[0].clock_reasons = pynvml.nvmlClocksThrottleReasonSwThermalSlowdown
    for _ in range(3):
        (dev,) = probe.sample(set()).devices
        assert dev.clock_event_reasons == ("sw_thermal_slowdown",)
    assert dev.unsupported == ()
    assert fake.count("nvmlDeviceGetCurrentClocksThrottleReasons") == 3
    assert fake.count("nvmlDeviceGetCurrentClocksEventReasons") <= 1


def test_running_processes_fall_back_to_v2_on_older_driver(tmp_path: Path) -> None:
    fake, probe, _ = setup("processes", tmp_path)
    fake.function_not_found.add("nvmlDeviceGetComputeRunningProcesses_v3")
    probe.sample(set())
    (dev,) = probe.sample({TARGET_PID}).devices
    assert dev.target_mem_bytes == 50 * GIB
    assert "processes" not in dev.unsupported
    assert fake.count("nvmlDeviceGetComputeRunningProcesses_v2") == 2
    assert fake.count("nvmlDeviceGetComputeRunningProcesses_v3") == 1


# --------------------------------------------------------------- GPU lost


def test_gpu_lost_marks_only_that_device(tmp_path: Path) -> None:
    fake, probe, clock = setup("gpu_lost", tmp_path)
    sample = probe.sample(set())
    assert sample.available is True
    good, lost = sample.devices
    assert good.lost is False
    assert blank_fields(good) == {"pcie_tx_bps", "pcie_rx_bps"}  # first tick: no rate yet
    assert lost.lost is True
    assert lost.index == 1
    assert lost.name == "NVIDIA A100-SXM4-40GB"  # kept from before the loss
    assert lost.uuid == "GPU-bbbbbbbb-0000-0000-0000-000000000000"
    assert blank_fields(lost) == set(VALUE_FIELDS)
    calls_on_lost = fake.gpus[1].calls
    clock.advance(1.0)
    good, lost = probe.sample(set()).devices
    assert lost.lost is True
    assert good.lost is False
    assert blank_fields(good) == set()
    assert fake.gpus[1].calls == calls_on_lost  # a lost GPU is not asked again


def test_unknown_error_means_lost_only_after_the_device_worked(tmp_path: Path) -> None:
    fake, probe, _ = setup("two_gpus", tmp_path)
    probe.sample(set())
    fake.gpus[1].errors["nvmlDeviceGetTemperature"] = nvml_error(pynvml.NVML_ERROR_UNKNOWN)
    dev0, dev1 = probe.sample(set()).devices
    assert dev1.lost is True
    assert dev0.lost is False

    fresh, probe2, _ = setup("healthy", tmp_path)
    fresh.gpus[0].errors["nvmlDeviceGetName"] = nvml_error(pynvml.NVML_ERROR_UNKNOWN)
    (dev,) = probe2.sample(set()).devices
    assert dev.lost is False  # never answered before: just a blank name
    assert dev.name is None
    assert dev.util_percent == 97.0


def test_lost_at_handle_time_marks_that_device(tmp_path: Path) -> None:
    fake, probe, _ = setup("two_gpus", tmp_path)
    fake.gpus[0].lost_after_calls = 0
    dev0, dev1 = probe.sample(set()).devices
    assert dev0.lost is True
    assert dev0.name is None
    assert dev1.lost is False
    assert dev1.util_percent == 12.0


def test_refused_handle_blanks_that_device_and_is_not_asked_again(tmp_path: Path) -> None:
    fake, probe, _ = setup("two_gpus", tmp_path)
    fake.gpus[0].errors["nvmlDeviceGetHandleByIndex"] = nvml_error(pynvml.NVML_ERROR_NO_PERMISSION)
    for _ in range(3):
        dev0, dev1 = probe.sample(set()).devices
    assert dev0.lost is False
    assert dev0.unsupported == ("handle",)
    assert (dev0.name, dev0.uuid) == (None, None)
    assert blank_fields(dev0) == set(VALUE_FIELDS)
    assert dev1.util_percent == 12.0
    assert fake.args_of("nvmlDeviceGetHandleByIndex") == [(0,), (1,)]


def test_transient_handle_failure_is_retried(tmp_path: Path) -> None:
    fake, probe, _ = setup("healthy", tmp_path)
    fake.gpus[0].errors["nvmlDeviceGetHandleByIndex"] = nvml_error(pynvml.NVML_ERROR_TIMEOUT)
    (dev,) = probe.sample(set()).devices
    assert dev.util_percent is None
    assert dev.unsupported == ()
    del fake.gpus[0].errors["nvmlDeviceGetHandleByIndex"]
    (dev,) = probe.sample(set()).devices
    assert dev.name == "NVIDIA H100 80GB HBM3"
    assert dev.util_percent == 97.0


# ---------------------------------------------------------------- two GPUs


def test_two_gpus_are_read_independently(tmp_path: Path) -> None:
    _, probe, clock = setup("two_gpus", tmp_path)
    dev0, dev1 = two_ticks(probe, clock).devices
    assert (dev0.index, dev1.index) == (0, 1)
    assert dev0.uuid != dev1.uuid
    assert dev0.util_percent == 97.0
    assert dev1.util_percent == 12.0
    assert dev1.mem_total_bytes == 40 * GIB
    assert dev1.temperature_slowdown_c == 92.0
    assert dev1.power_w == 90.5
    assert dev1.clock_event_reasons == ("gpu_idle",)
    assert dev0.clock_event_reasons == ()
    assert blank_fields(dev0) == blank_fields(dev1) == set()


# --------------------------------------------------------------- processes


def write_comm(proc_root: Path, pid: int, name: str) -> None:
    (proc_root / str(pid)).mkdir(parents=True, exist_ok=True)
    (proc_root / str(pid) / "comm").write_text(name + "\n")


def test_processes_in_target_and_others(tmp_path: Path) -> None:
    write_comm(tmp_path, TARGET_PID, "python")
    write_comm(tmp_path, XORG_PID, "Xorg")
    _, probe, clock = setup("processes", tmp_path)
    (dev,) = two_ticks(probe, clock, {TARGET_PID, TARGET_CHILD_PID}).devices
    by_pid = {p.pid: p for p in dev.processes}
    assert set(by_pid) == {TARGET_PID, TARGET_CHILD_PID, OTHER_PID, XORG_PID}
    assert by_pid[TARGET_PID].in_target and by_pid[TARGET_CHILD_PID].in_target
    assert not by_pid[OTHER_PID].in_target and not by_pid[XORG_PID].in_target
    assert by_pid[TARGET_PID].used_memory_bytes == 50 * GIB  # C+G: not counted twice
    assert by_pid[XORG_PID].used_memory_bytes == 40 * MIB
    assert by_pid[TARGET_PID].sm_percent == 80.0
    assert by_pid[OTHER_PID].sm_percent == 12.0
    assert by_pid[XORG_PID].sm_percent is None
    assert by_pid[TARGET_PID].name == "python"
    assert by_pid[XORG_PID].name == "Xorg"
    assert by_pid[OTHER_PID].name is None
    assert dev.target_mem_bytes == 51 * GIB
    assert dev.target_sm_percent == 83.0
    assert [p.pid for p in dev.processes][:2] == [TARGET_PID, TARGET_CHILD_PID]


def test_process_utilization_passes_last_seen_timestamp(tmp_path: Path) -> None:
    fake, probe, clock = setup("processes", tmp_path)
    first_tick_us = clock.us
    probe.sample(set())
    clock.advance(1.0)
    probe.sample(set())
    clock.advance(1.0)
    probe.sample(set())
    stamps = [a[0] for a in fake.args_of("nvmlDeviceGetProcessUtilization")]
    assert stamps == [0, first_tick_us, first_tick_us + 1_000_000]


def test_newest_process_sample_wins(tmp_path: Path) -> None:
    fake, probe, clock = setup("processes", tmp_path)
    fake.gpus[0].sm_util = {}
    fake.gpus[0].util_history = [
        FakeUtilSample(TARGET_PID, clock.us - 200_000, sm=60),
        FakeUtilSample(TARGET_PID, clock.us - 100_000, sm=70),
        FakeUtilSample(TARGET_PID, clock.us - 300_000, sm=10),
    ]
    (dev,) = probe.sample({TARGET_PID}).devices
    assert dev.target_sm_percent == 70.0


def test_process_sm_goes_unknown_when_samples_stop(tmp_path: Path) -> None:
    fake, probe, clock = setup("processes", tmp_path)
    probe.sample({TARGET_PID})
    fake.gpus[0].sm_util = {}  # the driver stops producing samples: NotFound
    clock.advance(1.0)
    (dev,) = probe.sample({TARGET_PID}).devices
    assert dev.target_sm_percent == 80.0  # last sample still recent
    assert "processes.sm_percent" not in dev.unsupported
    clock.advance(SM_SAMPLE_MAX_AGE_S)
    (dev,) = probe.sample({TARGET_PID}).devices
    assert dev.target_sm_percent is None
    assert dev.target_mem_bytes == 50 * GIB
    assert fake.count("nvmlDeviceGetProcessUtilization") == 3


def test_merge_running_processes() -> None:
    def procs(*pairs: tuple[int, int | None]) -> list[FakeProc]:
        return [FakeProc(pid, used) for pid, used in pairs]

    compute = [_Info(p.pid, p.used_memory) for p in procs((1, 100), (1, 50), (2, None))]
    graphics = [_Info(p.pid, p.used_memory) for p in procs((1, 120), (3, 7), (2, 9))]
    assert merge_running_processes(compute, graphics) == {1: 150, 2: 9, 3: 7}
    assert merge_running_processes(None, None) == {}
    assert merge_running_processes(compute, None) == {1: 150, 2: None}


@dataclasses.dataclass
class _Info:
    """Same attribute names as pynvml's process info objects."""

    pid: int
    usedGpuMemory: int | None


# ------------------------------------------------------------ PID namespaces


def write_status(proc_root: Path, entry: str, nspid: str | None) -> None:
    (proc_root / entry).mkdir(parents=True, exist_ok=True)
    lines = ["Name:\tpython", "State:\tS (sleeping)"]
    if nspid is not None:
        lines.append(f"NSpid:\t{nspid}")
    lines.append("VmRSS:\t1000 kB")
    (proc_root / entry / "status").write_text("\n".join(lines) + "\n")


def test_parse_nspid() -> None:
    assert parse_nspid("Name:\tx\nNSpid:\t4242\t7\n") == (4242, 7)
    assert parse_nspid("Name:\tx\nNSpid:\t12\n") == (12,)
    assert parse_nspid("Name:\tx\n") is None
    assert parse_nspid("NSpid:\tgarbage\n") is None


def test_nspid_map_from_an_outer_proc_view(tmp_path: Path) -> None:
    write_status(tmp_path, "self", "5000\t1")  # we are PID 1 one level down
    write_status(tmp_path, "5000", "5000\t1")
    write_status(tmp_path, "4242", "4242\t7")
    write_status(tmp_path, "6000", "6000\t9\t1")  # nested deeper: our PID is 9
    write_status(tmp_path, "300", "300")  # host-only process: no PID of ours
    write_status(tmp_path, "301", None)  # old kernel, no NSpid
    (tmp_path / "302").mkdir()  # vanished between listing and reading
    write_status(tmp_path, "sys", "1\t2")  # not a PID directory
    assert nspid_depth(tmp_path) == 2
    assert nspid_pid_map(tmp_path) == {5000: 1, 4242: 7, 6000: 9}


def test_nspid_map_is_empty_when_proc_is_our_own(tmp_path: Path) -> None:
    write_status(tmp_path, "self", "1")
    write_status(tmp_path, "4242", "4242\t7")  # a child namespace below us
    assert nspid_depth(tmp_path) == 1
    assert nspid_pid_map(tmp_path) == {}
    assert nspid_pid_map(tmp_path / "missing") == {}
    assert nspid_depth(tmp_path / "missing") == 1


def test_probe_maps_host_pids_into_our_namespace(tmp_path: Path) -> None:
    write_status(tmp_path, "self", "5000\t1")
    write_status(tmp_path, str(TARGET_PID), f"{TARGET_PID}\t7")
    write_status(tmp_path, str(TARGET_CHILD_PID), f"{TARGET_CHILD_PID}\t8")
    _, probe, clock = setup("processes", tmp_path)
    (dev,) = two_ticks(probe, clock, {7, 8}).devices
    by_pid = {p.pid: p for p in dev.processes}
    assert by_pid[7].in_target and by_pid[8].in_target
    assert by_pid[7].used_memory_bytes == 50 * GIB
    assert TARGET_PID not in by_pid
    assert not by_pid[OTHER_PID].in_target  # unmapped: kept as NVML reported it
    assert dev.target_sm_percent == 83.0


# ---------------------------------------------------------- never raises


def test_unexpected_exception_becomes_a_reason(tmp_path: Path) -> None:
    fake, probe, _ = setup("healthy", tmp_path)
    fake.gpus[0].errors["nvmlDeviceGetPowerUsage"] = RuntimeError("driver returned garbage")
    sample = probe.sample(set())
    assert sample.available is False
    assert sample.reason == "GPU probe error: RuntimeError: driver returned garbage"
    del fake.gpus[0].errors["nvmlDeviceGetPowerUsage"]
    assert probe.sample(set()).available is True
