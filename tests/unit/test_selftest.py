"""``aitop selftest --gpu``: the CPU path end to end, and every comparison it makes.

No GPU here, so the comparisons are tested on what the real run compares:
aitop's GPU probe on the fake NVML (``tests/support/fake_nvml.py``) beside a fake
``nvidia-smi``, a tiny script on PATH that prints recorded text from
``tests/support/selftest_data/smi-*`` (in nvidia-smi's formats, old and new
drivers), and aitop's real ``--json`` reports recorded on this machine
(``report-*.json``), turned into GPU-shaped ones by the edits each test names,
against ground truth written the way ``aitop.demo.gpu_jobs`` writes it.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any, ClassVar

import pynvml
import pytest
from aitop.engine.selftest.gpm import GPM_METRICS, GpmReading, judge_gpm, read_gpm
from aitop.engine.selftest.jobs import (
    SPECS,
    judge_job,
    judge_overhead,
    judge_pcie,
    phase_tolerance,
)
from aitop.engine.selftest.model import FAIL, INFO, PASS, SKIP, Check, compare_numbers
from aitop.engine.selftest.nvml import (
    SmiReference,
    compare_fields,
    compare_process_memory,
    compare_reasons,
    nvml_absent_check,
)
from aitop.engine.selftest.run import Plan, job_device, match_row, new_out_dir
from aitop.engine.selftest.smi import (
    GPU_FIELDS,
    SmiRun,
    parse_compute_apps,
    parse_dmon_pcie,
    parse_gpu_csv,
    parse_slowdown_temperature,
)
from aitop.engine.selftest.truth import read_truth, truth_between
from aitop.engine.selftest.write import SelftestResult, render_markdown, write_reports
from aitop.probes.gpu import GpuProbe
from aitop.probes.samples import GpuDevice
from support.fake_nvml import TARGET_PID, FakeClock, FakeNvml, FakeProc, make_fake
from support.selftest import FIXTURES, by_id, fake_smi

ROOT = Path(__file__).resolve().parents[2]

# ------------------------------------------------------------------ helpers

def probe_readings(
    scenario: str, tmp_path: Path, targets: set[int] | None = None, **changes: Any
) -> tuple[FakeNvml, GpuDevice, GpuDevice]:
    """aitop's probe on the fake NVML: (fake, reading before, reading after) as the
    self-test takes them, a second apart around the nvidia-smi call."""
    clock = FakeClock()
    fake = make_fake(scenario, clock)
    for name, value in changes.items():
        setattr(fake.gpus[0], name, value)
    proc_root = tmp_path / "proc"
    proc_root.mkdir(parents=True, exist_ok=True)
    probe = GpuProbe(fake, proc_root=proc_root, clock=clock)
    probe.sample(targets or set())
    clock.advance(1.0)
    before = probe.sample(targets or set()).devices[0]
    clock.advance(0.3)
    after = probe.sample(targets or set()).devices[0]
    probe.close()
    return fake, before, after


def reference(smi: SmiRun, index: int = 0) -> SmiReference:
    (row,) = smi.query_gpus()
    slowdown, source = smi.slowdown_temperature(index)
    return SmiReference(vars(row), slowdown, source, smi.compute_apps())


def recorded(name: str) -> dict[str, Any]:
    """A real ``aitop --headless --json`` report recorded on this (GPU-less) machine."""
    data: dict[str, Any] = json.loads((FIXTURES / f"report-{name}.json").read_text())
    return data


def on_gpu(report: dict[str, Any], *, category: str, phases: dict[str, float],
           util: float, mem_used: float = 60.0, pid: int = 4242) -> dict[str, Any]:
    """The recorded report as it would read on a GPU: these fields edited, the rest real."""
    out = copy.deepcopy(report)
    out["target"]["pid"] = pid
    out["compute_device"] = "gpu"
    out["probe_states"]["gpu"] = {"state": "ok", "detail": "every 2 s"}
    out["bottleneck"]["category"] = category
    out["phases"] = {**dict.fromkeys(out["phases"], 0.0), **phases}
    out["metrics"]["gpu_util_mean"] = util
    out["metrics"]["gpu_mem_used_mean"] = mem_used
    return out


def truth(
    path: Path, t0: float, t1: float, *, host: dict[str, float], dev_busy: float,
    steps_per_s: float, mem_used_frac: float = 0.4, h2d_bytes_per_s: float = 0.0,
    pid: int = 4242,
) -> Path:
    """Ground truth as ``aitop.demo.gpu_jobs`` writes it: cumulative counters every 0.5 s."""
    lines, t, n = [], t0, 0
    while t <= t1 + 1e-9:
        e = t - t0
        record: dict[str, Any] = {
            "t": t, "elapsed": e, "steps": int(steps_per_s * e),
            **{f"host_{k}": v * e for k, v in host.items()},
            "dev_busy": dev_busy * e, "h2d_bytes": h2d_bytes_per_s * e,
            "mem_used_frac": mem_used_frac,
        }
        if n == 0:
            record["info"] = {"job": "x", "pid": pid}
        lines.append(json.dumps(record))
        n += 1
        t = t0 + n * 0.5
    lines.append('{"t": 1, "half-writ')  # a line cut short by the job's death is skipped
    path.write_text("\n".join(lines))
    return path


def around(report: dict[str, Any]) -> tuple[float, float]:
    """A truth span covering everything the report measured, with a margin."""
    return report["attached_at"] - 10.0, report["evaluated_at"] + 10.0


# --------------------------------------------------------- the CPU path (CI)








def test_default_out_dir_is_new(tmp_path: Path) -> None:
    first = new_out_dir(tmp_path)
    first.mkdir()
    second = new_out_dir(tmp_path)
    assert second != first and not second.exists()
    assert first.name.startswith("aitop-selftest-")


def test_plan_quick_is_shorter() -> None:
    full, quick = Plan.make(False), Plan.make(True)
    assert quick.attach_s < full.attach_s and quick.baseline_s < full.baseline_s
    assert quick.attach_s >= 14  # long enough for a 5 s rule after the 3 s and 6 s windows






# ------------------------------------------------- NVML vs nvidia-smi (fakes)


def test_nvml_absent_check_on_the_fake_and_the_real_library(tmp_path: Path) -> None:
    sample = GpuProbe(make_fake("no_driver"), proc_root=tmp_path).sample(set())
    assert nvml_absent_check(sample.available, sample.reason, None).status == PASS
    real = GpuProbe(proc_root=tmp_path).sample(set())  # this machine has no driver
    assert nvml_absent_check(real.available, real.reason, None).status == PASS
    assert nvml_absent_check(False, None, None).status == FAIL
    assert nvml_absent_check(False, None, "ValueError: x").status == FAIL


def test_agreeing_nvidia_smi_passes_every_field(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    smi = fake_smi(tmp_path, monkeypatch, "smi-healthy")
    _, before, after = probe_readings("healthy", tmp_path)
    checks = by_id(compare_fields(before, after, reference(smi)))
    assert {c.status for c in checks.values()} == {PASS}, [
        c for c in checks.values() if c.status != PASS]
    assert checks["nvml.power_w"].expected == 611.84  # nvidia-smi's; aitop read 612
    assert checks["nvml.mem_used_mib"].seen == [62464.0, 62464.0]
    slowdown = checks["nvml.temperature_slowdown_c"]
    assert slowdown.expected == 90.0 and "T.Limit" in slowdown.detail  # a newer driver's text
    assert set(smi.raw) == {"query-gpu", "temperature-0", "compute-apps"}


def test_disagreeing_nvidia_smi_fails_exactly_the_fields_that_differ(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    smi = fake_smi(tmp_path, monkeypatch, "smi-disagree")
    _, before, after = probe_readings("healthy", tmp_path)
    checks = by_id(compare_fields(before, after, reference(smi)))
    failed = {i for i, c in checks.items() if c.status == FAIL}
    assert failed == {
        "nvml.util_percent",  # 40 vs 97
        "nvml.mem_used_mib",  # 30 GiB vs 61 GiB
        "nvml.power_w",  # 300 W vs 612 W
        "nvml.sm_clock_mhz",  # 1980 vs 1755
        "nvml.temperature_slowdown_c",  # 87 (old driver's absolute line) vs 90
        "nvml.clock_event_reasons",  # sw_power_cap that aitop never saw
    }
    util = checks["nvml.util_percent"]
    assert (util.expected, util.seen, util.tolerance) == (40.0, [97.0, 97.0], "±10%")
    assert util.detail == "off by 57%, allowed 10%"
    assert "['sw_power_cap']" in checks["nvml.clock_event_reasons"].detail
    assert checks["nvml.mem_total_mib"].status == PASS


def test_a_value_moving_between_the_two_readings_is_judged_against_both() -> None:
    check = compare_numbers("x", "g", "t", expected=80.0, seen=[60.0, 95.0], abs_tol=1)
    assert check.status == PASS
    assert compare_numbers("x", "g", "t", expected=97.0, seen=[60.0, 95.0],
                           abs_tol=1).status == FAIL
    assert compare_numbers("x", "g", "t", expected=None, seen=[None]).status == SKIP
    assert compare_numbers("x", "g", "t", expected=5.0, seen=[None, None]).status == FAIL
    assert compare_numbers("x", "g", "t", expected=None, seen=[5.0]).status == SKIP


def test_fields_aitop_cannot_read_fail_only_where_nvidia_smi_can(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The not_supported scenario: NVML refuses power; nvidia-smi prints it (a real
    gap in aitop) or prints [N/A] (nothing to compare)."""
    smi = fake_smi(tmp_path, monkeypatch, "smi-healthy")
    _, before, after = probe_readings("not_supported", tmp_path,
                                      uuid="GPU-aaaaaaaa-0000-0000-0000-000000000000")
    ref = reference(smi)
    checks = by_id(compare_fields(before, after, ref))
    assert checks["nvml.power_w"].status == FAIL
    assert "power_w" in checks["nvml.power_w"].detail  # names what aitop marked unsupported
    blank = SmiReference({**ref.values, "power_w": None, "power_limit_w": None})
    checks = by_id(compare_fields(before, after, blank))
    assert checks["nvml.power_w"].status == SKIP
    assert checks["nvml.power_limit_w"].status == SKIP
    assert checks["nvml.temperature_slowdown_c"].status == SKIP  # no nvidia-smi text given


def test_clock_event_reasons_rules() -> None:
    def dev(*reasons: str) -> GpuDevice:
        return GpuDevice(0, "gpu", "uuid", clock_event_reasons=reasons)

    cap, idle = pynvml.nvmlClocksEventReasonSwPowerCap, pynvml.nvmlClocksEventReasonGpuIdle
    assert compare_reasons(dev(), dev(), 0).status == PASS
    assert compare_reasons(dev("sw_power_cap"), dev("sw_power_cap"), cap).status == PASS
    # The cap came on between the readings: nvidia-smi may or may not have seen it.
    assert compare_reasons(dev(), dev("sw_power_cap"), cap).status == PASS
    assert compare_reasons(dev(), dev("sw_power_cap"), 0).status == PASS
    # Steady in aitop, absent in nvidia-smi; or shown by nvidia-smi, never seen by aitop.
    assert compare_reasons(dev("sw_power_cap"), dev("sw_power_cap"), 0).status == FAIL
    assert compare_reasons(dev(), dev(), idle).status == FAIL
    assert compare_reasons(dev(), dev(), None).status == SKIP


def test_process_memory_of_the_started_pid(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    uuid = {"uuid": "GPU-aaaaaaaa-0000-0000-0000-000000000000"}
    _, before, after = probe_readings("processes", tmp_path, {TARGET_PID}, **uuid)
    healthy = reference(fake_smi(tmp_path / "a", monkeypatch, "smi-healthy"))
    check = compare_process_memory(before, after, TARGET_PID, healthy.apps)
    assert (check.status, check.expected, check.seen) == (PASS, 51200.0, [51200.0, 51200.0])
    disagree = reference(fake_smi(tmp_path / "b", monkeypatch, "smi-disagree"))
    assert compare_process_memory(before, after, TARGET_PID, disagree.apps).status == FAIL
    assert compare_process_memory(before, after, 1, healthy.apps).status == SKIP  # nobody's
    _, lone_before, lone_after = probe_readings("healthy", tmp_path / "c")
    missing = compare_process_memory(lone_before, lone_after, TARGET_PID, healthy.apps)
    assert missing.status == FAIL and "aitop's probe has no memory" in missing.detail


def test_older_driver_field_names_are_tried_when_newer_are_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    smi = fake_smi(tmp_path, monkeypatch, "smi-healthy")
    (tmp_path / "smi-healthy" / "refused-fields.txt").write_text(
        "clocks_event_reasons.active enforced.power.limit")
    (row,) = smi.query_gpus()
    assert smi.refused == {"clocks_event_reasons.active", "enforced.power.limit"}
    assert row.clock_event_reasons == 0 and row.power_limit_w == 700.0
    smi.query_gpus()  # the refused names are not asked again
    assert "not a valid field" not in smi.raw["query-gpu"]


def test_nvidia_smi_text_parsers() -> None:
    names = [ours for ours, _ in GPU_FIELDS]
    row = ("1, GPU-x, NVIDIA A100-SXM4-40GB, 535.129.03, [N/A], 3, 1024, 40960, 41, "
           "[Not Supported], 400.00, 1410, 1410, 0x0000000000000001")
    (gpu,) = parse_gpu_csv(row + "\n\nnot, a, row\n", names)
    assert gpu.index == 1 and gpu.util_percent is None and gpu.power_w is None
    assert gpu.clock_event_reasons == 1 and gpu.name == "NVIDIA A100-SXM4-40GB"
    assert parse_compute_apps("7, 100\n7, 50\n8, [N/A]\n") == {7: 150.0, 8: None}
    dmon = (FIXTURES / "smi-healthy" / "dmon.txt").read_text()
    assert parse_dmon_pcie(dmon) == (11950.0, 2010.0)
    assert parse_dmon_pcie("") == (None, None)
    assert parse_slowdown_temperature("nothing")[0] is None


def test_the_job_device_and_nvidia_smi_row_are_matched_by_pid_and_uuid(tmp_path: Path) -> None:
    clock = FakeClock()
    fake = make_fake("two_gpus", clock)
    fake.gpus[1].compute = [FakeProc(77, 1 << 30)]
    sample = GpuProbe(fake, proc_root=tmp_path, clock=clock).sample({77})
    device = job_device(sample, 77)
    assert device is not None and device.index == 1
    assert job_device(sample, 5) is sample.devices[0]
    rows = parse_gpu_csv("0, GPU-bbbbbbbb-0000-0000-0000-000000000000\n"
                         "1, GPU-aaaaaaaa-0000-0000-0000-000000000000\n", ["index", "uuid"])
    matched = match_row(rows, device)
    assert matched is not None and matched.index == 0  # by UUID: the orders differ


# ----------------------------------------------------------------------- GPM


class GpmFakeNvml(FakeNvml):
    """The fake NVML plus the GPM entry points, answering fixed metric values."""

    c_nvmlGpmMetricsGet_t = pynvml.c_nvmlGpmMetricsGet_t
    NVML_GPM_METRICS_GET_VERSION = 1
    VALUES: ClassVar[dict[int, float]] = {2: 88.5, 3: 41.0, 5: 63.2, 10: 30.0}

    def __init__(self, supported: bool = True) -> None:
        super().__init__(make_fake("healthy").gpus)
        self.supported = supported
        self.freed = 0

    def nvmlGpmQueryDeviceSupport(self, device: Any) -> Any:
        return pynvml.c_nvmlGpmSupport_t(version=1, isSupportedDevice=int(self.supported))

    def nvmlGpmSampleAlloc(self) -> Any:
        return pynvml.c_nvmlGpmSample_t()

    def nvmlGpmSampleGet(self, device: Any, gpmSample: Any) -> Any:
        return gpmSample

    def nvmlGpmSampleFree(self, gpmSample: Any) -> None:
        self.freed += 1

    def nvmlGpmMetricsGet(self, metricsGet: Any) -> Any:
        for slot in range(metricsGet.numMetrics):
            metric = metricsGet.metrics[slot]
            metric.value = self.VALUES[metric.metricId]
            metric.nvmlReturn = pynvml.NVML_SUCCESS
        return metricsGet


def test_gpm_read_and_judged_beside_plain_utilisation() -> None:
    fake = GpmFakeNvml()
    reading = read_gpm(0, nvml=fake, sleep=lambda s: None)
    assert reading.supported and fake.freed == 2 and fake.initialised == 0
    assert reading.values == {"sm_util_percent": 88.5, "sm_occupancy_percent": 41.0,
                              "tensor_active_percent": 63.2, "dram_bw_util_percent": 30.0}
    checks = by_id(judge_gpm(reading, 97.0))
    assert checks["gpm.available"].status == PASS
    assert (checks["gpm.beside_util"].status, checks["gpm.beside_util"].expected) == (INFO, 97.0)
    assert checks["gpm.tensor_active"].status == PASS
    idle = judge_gpm(GpmReading(True, None, {"tensor_active_percent": 0.0}), 97.0)
    assert by_id(idle)["gpm.tensor_active"].status == FAIL
    wild = judge_gpm(GpmReading(True, None, {"sm_util_percent": 250.0}), 97.0)
    assert by_id(wild)["gpm.available"].status == FAIL
    assert len(GPM_METRICS) == 4


def test_gpm_not_supported_is_a_skip_with_the_reason(tmp_path: Path) -> None:
    older = read_gpm(0, nvml=GpmFakeNvml(supported=False), sleep=lambda s: None)
    assert not older.supported and "Hopper or newer" in (older.reason or "")
    (check,) = judge_gpm(older, 50.0)
    assert check.status == SKIP and "Hopper" in check.detail
    binding = read_gpm(0, nvml=make_fake("healthy"), sleep=lambda s: None)
    assert not binding.supported and "nvmlGpm" in (binding.reason or "")
    real = read_gpm(0, sleep=lambda s: None)  # no driver here: NVML init fails
    assert not real.supported and real.reason


# ------------------------------------------- jobs: recorded reports vs truth


def test_gpu_bound_job_report_agreeing_with_its_truth_passes(tmp_path: Path) -> None:
    base = recorded("compute")
    phases = {"forward": 0.30, "backward": 0.52, "optimizer": 0.15, "other": 0.03}
    report = on_gpu(base, category="compute", phases=phases, util=97.0)
    path = truth(tmp_path / "t.jsonl", *around(report), dev_busy=0.97,
                 steps_per_s=base["steps_per_s"],
                 host={"forward": 0.31, "backward": 0.50, "optimizer": 0.16, "sync": 0.0})
    checks = by_id(judge_job(SPECS["matmul"], report, read_truth(path), pid=4242))
    bad = [c for c in checks.values() if c.status not in (PASS, INFO)]
    assert bad == [], bad
    assert checks["matmul.phase.compute"].expected == pytest.approx(0.97, abs=1e-3)
    assert checks["matmul.steps_per_s"].seen == round(base["steps_per_s"], 2)
    assert checks["matmul.util_vs_events"].expected == pytest.approx(97.0, abs=0.1)


@pytest.mark.parametrize("name", ["compute", "compute-v2"])
def test_reports_of_schema_1_and_2_are_read_the_same(tmp_path: Path, name: str) -> None:
    """report-compute is aitop.report/1, report-compute-v2 aitop.report/2 (both real)."""
    base = recorded(name)
    report = on_gpu(base, category="compute", util=97.0,
                    phases={"forward": 0.3, "backward": 0.5, "optimizer": 0.2})
    path = truth(tmp_path / "t.jsonl", *around(report), dev_busy=0.97,
                 steps_per_s=base["steps_per_s"],
                 host={"forward": 0.3, "backward": 0.5, "optimizer": 0.2})
    checks = by_id(judge_job(SPECS["matmul"], report, read_truth(path)))
    assert checks["matmul.schema"].seen == base["schema"]
    bad = [c for c in checks.values() if c.status not in (PASS, INFO)]
    assert bad == [], bad
    report["schema"] = "aitop.report/9"
    assert by_id(judge_job(SPECS["matmul"], report, read_truth(path)))[
        "matmul.schema"].status == INFO


def test_wrong_category_and_phases_fail_with_what_aitop_said(tmp_path: Path) -> None:
    report = on_gpu(recorded("compute"), category="host", util=60.0,
                    phases={"forward": 0.05, "other": 0.95})
    report["bottleneck"]["summary"] = "95% of the loop is spent outside ..."
    path = truth(tmp_path / "t.jsonl", *around(report), dev_busy=0.97, steps_per_s=5.3,
                 host={"forward": 0.3, "backward": 0.5, "optimizer": 0.2})
    checks = by_id(judge_job(SPECS["matmul"], report, read_truth(path), pid=1))
    assert checks["matmul.category"].status == FAIL
    assert checks["matmul.category"].detail == "aitop said: 95% of the loop is spent outside ..."
    assert checks["matmul.target"].status == FAIL  # the report is about PID 4242
    assert checks["matmul.gpu_util"].status == FAIL  # 60 < 85
    assert checks["matmul.util_vs_events"].status == FAIL  # 60 vs 97
    assert checks["matmul.phase.other"].status == FAIL
    assert "aitop 95% vs the job's 0%" in checks["matmul.phase.other"].detail


def test_data_starved_job_on_the_recorded_data_report(tmp_path: Path) -> None:
    base = recorded("data")
    report = on_gpu(base, category=base["bottleneck"]["category"], phases=base["phases"],
                    util=6.0)
    path = truth(tmp_path / "t.jsonl", *around(report), dev_busy=0.05, steps_per_s=4.0,
                 host={"data_wait": 0.95, "forward": 0.01, "backward": 0.01,
                       "optimizer": 0.01})
    checks = by_id(judge_job(SPECS["data"], report, read_truth(path)))
    assert checks["data.category"].status == PASS  # the real report said data_loading
    assert checks["data.phase.data_wait"].status == PASS
    assert checks["data.gpu_util"].status == PASS
    # That short recording has no steps/s: aitop found no counter in time.
    assert base["steps_per_s"] is None
    assert checks["data.steps_per_s"].status == FAIL
    assert "no step counter" in checks["data.steps_per_s"].detail


def test_item_job_sync_must_not_read_as_python_overhead(tmp_path: Path) -> None:
    base = recorded("compute")
    host = {"forward": 0.03, "backward": 0.03, "optimizer": 0.02, "sync": 0.90}
    as_sync = on_gpu(base, category="none", util=95.0,
                     phases={"forward": 0.04, "backward": 0.03, "optimizer": 0.02, "sync": 0.89,
                             "other": 0.02})
    path = truth(tmp_path / "t.jsonl", *around(as_sync), dev_busy=0.95, steps_per_s=5.3,
                 host=host)
    checks = by_id(judge_job(SPECS["item"], as_sync, read_truth(path)))
    assert checks["item.sync_not_other"].status == PASS
    assert checks["item.category"].status == PASS  # anything but host
    as_other = on_gpu(base, category="host", util=95.0,
                      phases={"forward": 0.04, "backward": 0.03, "optimizer": 0.02,
                              "other": 0.91})
    checks = by_id(judge_job(SPECS["item"], as_other, read_truth(path)))
    assert checks["item.sync_not_other"].status == FAIL
    assert checks["item.phase.sync"].status == FAIL
    assert checks["item.category"].status == FAIL
    as_sync["bottleneck"]["category"] = "collecting"  # schema 2: not judged after 20 s
    assert by_id(judge_job(SPECS["item"], as_sync, read_truth(path)))[
        "item.category"].status == FAIL


def test_memory_job_compares_nvml_memory_with_the_jobs_own(tmp_path: Path) -> None:
    report = on_gpu(recorded("compute"), category="memory", util=40.0, mem_used=98.6,
                    phases={"forward": 0.4, "backward": 0.4, "optimizer": 0.2})
    path = truth(tmp_path / "t.jsonl", *around(report), dev_busy=0.4, steps_per_s=5.3,
                 mem_used_frac=0.987, host={"forward": 0.4, "backward": 0.4, "optimizer": 0.2})
    checks = by_id(judge_job(SPECS["memory"], report, read_truth(path)))
    assert checks["memory.category"].status == PASS
    assert checks["memory.mem_used"].status == PASS
    assert checks["memory.gpu_util"].status == INFO  # no expectation for this job
    assert checks["memory.util_vs_events"].status == INFO  # launch-bound: events overstate
    report["metrics"]["gpu_mem_used_mean"] = 90.0
    assert by_id(judge_job(SPECS["memory"], report, read_truth(path)))[
        "memory.mem_used"].status == FAIL


def test_stacks_off_fails_attach_and_phases(tmp_path: Path) -> None:
    report = on_gpu(recorded("compute"), category="none", util=97.0, phases={})
    report["phases"] = None
    report["probe_states"]["stacks"] = {"state": "error", "detail": "permission denied"}
    path = truth(tmp_path / "t.jsonl", *around(report), dev_busy=0.97, steps_per_s=5.3,
                 host={"forward": 1.0})
    checks = by_id(judge_job(SPECS["matmul"], report, read_truth(path)))
    assert checks["matmul.stacks_probe"].status == FAIL
    assert checks["matmul.stacks_probe"].detail == "permission denied"
    assert checks["matmul.phases"].status == FAIL
    assert "stacks were off" in checks["matmul.phases"].detail


def test_phase_tolerance_widens_with_few_samples() -> None:
    assert phase_tolerance(0.5, None) == 0.10
    assert phase_tolerance(0.5, 1000) == 0.10
    assert phase_tolerance(0.5, 20) == pytest.approx(2.6 * (0.25 / 20) ** 0.5)


def test_overhead_averages_the_spans_without_aitop(tmp_path: Path) -> None:
    lines, t, steps = [], 1000.0, 0.0
    while t <= 1040.0:
        rate = 40.0 if t < 1010 or t >= 1030 else 39.0  # attached in [1010, 1030)
        lines.append(json.dumps({"t": t, "elapsed": t - 1000, "steps": steps}))
        steps += rate * 0.5
        t += 0.5
    path = tmp_path / "t.jsonl"
    path.write_text("\n".join(lines))
    records = read_truth(path)
    check = judge_overhead(records, [(1001, 1010), (1030, 1040)], (1010, 1030))
    assert check.status == PASS and check.seen["loss"] == pytest.approx(0.025, abs=0.002)
    strict = judge_overhead(records, [(1001, 1010)], (1010, 1030), max_loss=0.01)
    assert strict.status == FAIL and "slower with aitop attached" in strict.detail
    assert judge_overhead(records, [(2000, 2010)], (1010, 1030)).status == SKIP


def test_pcie_rates_against_bytes_copied(tmp_path: Path) -> None:
    path = truth(tmp_path / "t.jsonl", 0.0, 10.0, host={}, dev_busy=0.0, steps_per_s=40.0,
                 h2d_bytes_per_s=20e9)
    window = truth_between(read_truth(path), 2.0, 8.0)
    assert window is not None and window.h2d_bytes_per_s == pytest.approx(20e9)
    ok = by_id(judge_pcie([None, 22e9, 23e9], [0.5e9, 0.6e9], window, (21000.0, 500.0)))
    assert ok["pcie.rx"].status == PASS and ok["pcie.tx"].status == PASS
    assert ok["pcie.dmon"].status == INFO
    swapped = by_id(judge_pcie([0.5e9], [22e9], window))
    assert swapped["pcie.rx"].status == FAIL and swapped["pcie.rx"].detail == (
        "RX and TX look swapped")
    assert by_id(judge_pcie([None], [None], window))["pcie.rx"].status == FAIL
    refused = judge_pcie([None], [None], window, unsupported=("pcie_rx_bps", "pcie_tx_bps"))
    assert by_id(refused)["pcie.rx"].status == SKIP
    assert judge_pcie([1e9], [1e9], None)[0].status == SKIP


def test_truth_is_interpolated_and_short_spans_refused(tmp_path: Path) -> None:
    path = truth(tmp_path / "t.jsonl", 100.0, 110.0, host={"data_wait": 0.6}, dev_busy=0.1,
                 steps_per_s=10.0)
    records = read_truth(path)
    assert len(records) == 21  # the half-written line is skipped
    window = truth_between(records, 101.25, 108.75)
    assert window is not None
    assert window.phases["data_wait"] == pytest.approx(0.6)
    assert window.phases["other"] == pytest.approx(0.4)
    assert window.device_busy == pytest.approx(0.1)
    assert truth_between(records, 105.0, 105.5) is None
    assert truth_between([], 0, 10) is None


# ------------------------------------------------------------------- reports


def test_reports_show_expected_seen_and_verdict(tmp_path: Path) -> None:
    checks = [
        Check("nvml.util_percent", "nvml", "GPU utilisation (%)", FAIL, 40.0, [97.0, 97.0],
              "±10%", "off by 57%"),
        Check("matmul.category", "job:matmul", "bottleneck category", PASS, "compute",
              "compute"),
        Check("gpm.available", "gpm", "GPM", SKIP, detail="this GPU does not support GPM"),
    ]
    result = SelftestResult(mode="gpu", quick=True, started_at=1.0, duration_s=150.0,
                            machine={"GPU": "NVIDIA H200", "torch": "2.11.0+cu130"},
                            checks=checks, timings={"job matmul": 40.0},
                            job_titles={"matmul": SPECS["matmul"].title})
    json_path, md_path = write_reports(result, tmp_path / "r")
    data = json.loads(json_path.read_text())
    assert data["ok"] is False and data["summary"] == {"pass": 1, "fail": 1, "skip": 1,
                                                        "info": 0}
    assert data["checks"][0]["expected"] == 40.0 and data["machine"]["GPU"] == "NVIDIA H200"
    md = md_path.read_text()
    assert md == render_markdown(result)
    assert "**FAIL**: 1 passed, 1 failed, 1 skipped" in md and "(--quick)" in md
    assert "| GPU utilisation (%) | **FAIL** | 40 | [97, 97] | ±10% | off by 57% |" in md
    assert "## Job `matmul`: GPU-bound job (large bf16 matmuls)" in md
    assert "| job matmul | 40.0 |" in md


def test_the_readme_documents_the_command() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "aitop selftest --gpu" in readme
    assert (ROOT / "docs" / "gpu-selftest.md").is_file()
