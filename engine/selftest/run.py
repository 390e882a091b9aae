"""``aitop selftest --gpu``: prove aitop's GPU paths on the machine it runs on.

aitop's GPU code is unit-tested against a fake NVML; this command checks it
against the real thing, in a few minutes, with references aitop does not
control:

1. every NVML field aitop reads, through its own probe, beside ``nvidia-smi``
   read at the same moment (:mod:`.selftest_nvml`);
2. small real CUDA training jobs (``python -m aitop.demo.gpu_jobs``) that time
   their own phases, with aitop attached to each exactly as a user attaches
   (``aitop --pid P --headless --json``): the bottleneck it names, its phases
   and steps/s against the jobs' timers, and what attaching costs the job
   (:mod:`.selftest_jobs`);
3. NVML's GPM metrics beside plain utilisation, where the GPU has them
   (:mod:`.selftest_gpm`);
4. PCIe counters against bytes a job copied.

It writes ``selftest.json`` and ``selftest.md`` (and the raw outputs behind
them) under ``--out`` and exits 1 when a check fails. Without a GPU it runs
what can run (the NVML-absent path, py-spy, the jobs module, the headless
CLI), says so in one line and exits 0, so CI runs it too.
"""

from __future__ import annotations

import json
import os
import platform
import time
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from datetime import datetime
from importlib import metadata
from pathlib import Path
from subprocess import Popen
from types import ModuleType
from typing import Any, TextIO

from aitop.engine.selftest.gpm import judge_gpm, read_gpm
from aitop.engine.selftest.jobs import SPECS, judge_job, judge_overhead, judge_pcie
from aitop.engine.selftest.model import FAIL, SKIP, Check, finite, verdict
from aitop.engine.selftest.nvml import (
    SmiReference,
    compare_fields,
    compare_process_memory,
    nvml_absent_check,
)
from aitop.engine.selftest.procs import (
    ProcError,
    RunningJob,
    attach_headless,
    run_module,
    start_job,
    start_sleeper,
    stop,
    wait_ready,
)
from aitop.engine.selftest.smi import SmiError, SmiGpu, SmiRun
from aitop.engine.selftest.truth import read_truth, truth_between
from aitop.engine.selftest.write import SelftestResult, write_reports
from aitop.probes.gpu import GpuProbe
from aitop.probes.own_version import aitop_version
from aitop.probes.pyspy import PySpyError, find_pyspy, run_dump
from aitop.probes.samples import GpuDevice, GpuSample

#: The jobs that aitop attaches to, in the order they run.
ATTACHED_JOBS = ("matmul", "data", "item", "memory")


@dataclass(frozen=True)
class Plan:
    """How long each part runs: a full run is about 3 minutes, --quick about 2."""

    quick: bool = False
    attach_s: float = 20.0
    #: Seconds the GPU-bound job trains without aitop before it attaches.
    baseline_s: float = 8.0
    pcie_s: float = 4.0

    @classmethod
    def make(cls, quick: bool) -> Plan:
        return cls(True, attach_s=14.0, baseline_s=5.0, pcie_s=3.0) if quick else cls()

    @property
    def job_s(self) -> float:
        """Upper bound on a job's life (it is stopped sooner; this caps an orphan)."""
        return self.baseline_s * 2 + self.attach_s + 240.0


def new_out_dir(base: Path | None = None) -> Path:
    """A directory that does not exist yet: ./aitop-selftest-YYYYmmdd-HHMMSS[-N]."""
    parent = base if base is not None else Path.cwd()
    stem = "aitop-selftest-" + datetime.now().strftime("%Y%m%d-%H%M%S")
    candidate, n = parent / stem, 1
    while candidate.exists():
        n += 1
        candidate = parent / f"{stem}-{n}"
    return candidate


@dataclass
class Selftest:
    """One run: collects checks stage by stage, never lets one stage stop the rest."""

    out_dir: Path
    plan: Plan
    err: TextIO
    checks: list[Check] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    machine: dict[str, Any] = field(default_factory=dict)
    children: list[Popen[bytes]] = field(default_factory=list)
    verbose: bool = False
    #: The NVML module for aitop's probe and GPM (``None``: the real ``pynvml``).
    nvml: ModuleType | None = None
    mode: str = "cpu"
    no_gpu_reason: str | None = None
    started_at: float = field(default_factory=time.time)

    @property
    def raw(self) -> Path:
        return self.out_dir / "raw"

    def say(self, message: str) -> None:
        if self.verbose:
            print(f"selftest: {message}", file=self.err, flush=True)

    @contextmanager
    def stage(self, name: str, check_id: str, group: str) -> Iterator[None]:
        """Time a stage; an error in it becomes one failed check, not a traceback."""
        started = time.time()
        try:
            yield
        except (ProcError, SmiError, PySpyError) as exc:
            self.checks.append(Check(check_id, group, f"{name} ran", FAIL, detail=str(exc)))
        except Exception as exc:  # the report must still be written
            with (self.raw / "errors.txt").open("a") as fh:
                fh.write(f"--- {name}\n{traceback.format_exc()}\n")
            self.checks.append(Check(check_id, group, f"{name} ran", FAIL,
                                     detail=f"{type(exc).__name__}: {exc} (see raw/errors.txt)"))
        finally:
            self.timings[name] = time.time() - started
            # Reports after every stage: a run cut short (a timeout, device time
            # running out) still leaves what it established.
            write_reports(self.result(), self.out_dir)

    # ------------------------------------------------------------------ run

    def run(self) -> SelftestResult:
        self.started_at = time.time()
        self.machine = machine_facts()
        probe = GpuProbe(self.nvml)
        try:
            sample = probe.sample(set())
        finally:
            probe.close()
        if sample.available and sample.devices:
            self.mode = "gpu"
        else:
            self.no_gpu_reason = sample.reason or "no GPU visible to NVML"
        try:
            if self.mode == "gpu":
                self.verbose = True
                self.machine.update(gpu_facts(sample))
                self.gpu_path()
            else:
                self.cpu_path(sample)
        finally:
            for child in self.children:
                stop(child)
        return self.result()

    def result(self) -> SelftestResult:
        """What the run has established so far."""
        return SelftestResult(
            mode=self.mode, quick=self.plan.quick, started_at=self.started_at,
            duration_s=time.time() - self.started_at, machine=self.machine,
            checks=list(self.checks), no_gpu_reason=self.no_gpu_reason,
            timings=dict(self.timings),
            job_titles={name: spec.title for name, spec in SPECS.items()},
        )

    # ------------------------------------------------------------- no GPU

    def cpu_path(self, sample: GpuSample) -> None:
        """What runs without a GPU; the GPU checks are listed as skipped, with why."""
        self.checks.append(nvml_absent_check(sample.available, sample.reason, None))
        with self.stage("py-spy", "pyspy.run", "pyspy"):
            self.pyspy_check(fail_on_permission=False)
        with self.stage("jobs module", "jobs.run", "jobs"):
            self.jobs_module_checks()
        with self.stage("headless CLI", "cli.run", "cli"):
            self.headless_cli_check()
        why = f"no NVIDIA GPU: {sample.reason or 'none visible to NVML'}"
        for check_id, group, title in (
            ("nvml.compare", "nvml", "NVML fields vs nvidia-smi"),
            ("gpm.available", "gpm", "GPM metrics"),
            *((f"{j}.run", f"job:{j}", SPECS[j].title) for j in ATTACHED_JOBS),
            ("matmul.overhead", "job:matmul", "steps/s lost while aitop is attached"),
            ("pcie.rx", "pcie", "PCIe RX vs bytes copied"),
        ):
            self.checks.append(Check(check_id, group, title, SKIP, detail=why))

    def pyspy_check(self, fail_on_permission: bool) -> None:
        """py-spy dumps a plain Python process (a sandbox may forbid reading its memory)."""
        title = "py-spy dump of a plain Python process"
        binary = find_pyspy()
        if binary is None:
            self.checks.append(Check("pyspy.attach", "pyspy", title,
                                     FAIL if fail_on_permission else SKIP,
                                     detail="py-spy is not installed"))
            return
        sleeper = start_sleeper()
        self.children.append(sleeper)
        started = time.time()
        try:
            threads = self._dump(binary, sleeper.pid)
        except PySpyError as exc:
            blocked = exc.kind in ("permission", "missing") and not fail_on_permission
            self.checks.append(Check("pyspy.attach", "pyspy", title, SKIP if blocked else FAIL,
                                     expected="a stack", detail=str(exc)))
            return
        finally:
            stop(sleeper)
        ok = isinstance(threads, list) and bool(threads)
        self.checks.append(Check("pyspy.attach", "pyspy", title, verdict(ok),
                                 expected="a stack", seen=f"{len(threads)} thread(s) in "
                                 f"{time.time() - started:.1f} s"))

    @staticmethod
    def _dump(binary: str, pid: int, tries: int = 5) -> Any:
        """One py-spy dump, retried while the interpreter is still starting up."""
        for attempt in range(tries):
            time.sleep(0.3)
            try:
                return json.loads(run_dump(binary, pid, locals_=False, timeout_s=10))
            except PySpyError as exc:
                if exc.kind in ("permission", "missing", "gone") or attempt == tries - 1:
                    raise
        raise AssertionError("unreachable")

    def jobs_module_checks(self) -> None:
        """``gpu_jobs --help`` works; a job without CUDA ends in one line, status 3."""
        helped = run_module(["--help"], timeout_s=60)
        self.checks.append(Check("jobs.help", "jobs", "python -m aitop.demo.gpu_jobs --help",
                                 verdict(helped.returncode == 0 and "--job" in helped.stdout),
                                 expected="exit 0 with usage", seen=f"exit {helped.returncode}"))
        refused = run_module(["--job", "matmul", "--duration", "1"], timeout_s=120)
        lines = [ln for ln in refused.stderr.splitlines() if ln.strip()]
        ok = refused.returncode == 3 and len(lines) == 1 and (
            "CUDA" in lines[0] or "PyTorch" in lines[0])
        self.checks.append(Check("jobs.no_cuda", "jobs", "a GPU job without CUDA",
                                 verdict(ok), expected="exit 3, one line naming CUDA",
                                 seen={"exit": refused.returncode, "stderr": lines[:3]}))

    def headless_cli_check(self) -> None:
        """``aitop --pid P --headless --json`` without a GPU: a report saying so."""
        sleeper = start_sleeper()
        self.children.append(sleeper)
        try:
            report = attach_headless(sleeper.pid, 3.0, self.raw, "no-gpu")
        finally:
            stop(sleeper)
        gpu_state = (report.get("probe_states") or {}).get("gpu", {}).get("state")
        ok = gpu_state == "unavailable" and report.get("compute_device") in ("cpu", None)
        self.checks.append(Check("cli.headless_no_gpu", "cli",
                                 "aitop --headless --json without a GPU", verdict(ok),
                                 expected="gpu probe unavailable, compute on the CPU",
                                 seen={"gpu": gpu_state,
                                       "compute_device": report.get("compute_device")}))

    # ---------------------------------------------------------------- GPU

    def gpu_path(self) -> None:
        with self.stage("torch facts", "jobs.info", "jobs"):
            self.torch_facts()
        with self.stage("py-spy", "pyspy.run", "pyspy"):
            self.say("py-spy on a plain Python process (can it read another process here?)")
            self.pyspy_check(fail_on_permission=True)
        if not self.machine.get("CUDA available to torch"):
            self.checks.append(Check("jobs.cuda", "jobs", "PyTorch with CUDA", FAIL,
                                     expected=True, seen=False,
                                     detail="the GPU jobs need PyTorch built with CUDA"))
            with self.stage("NVML vs nvidia-smi (idle GPU)", "nvml.run", "nvml"):
                self.nvml_checks(None)
            return
        with self.stage("job matmul", "matmul.run", "job:matmul"):
            self.matmul_stage()
        for name in ATTACHED_JOBS[1:]:
            with self.stage(f"job {name}", f"{name}.run", f"job:{name}"):
                self.attached_stage(name)
        with self.stage("job pcie", "pcie.run", "pcie"):
            self.pcie_stage()

    def torch_facts(self) -> None:
        result = run_module(["--info"], timeout_s=120)
        if result.returncode != 0:
            raise ProcError(f"gpu_jobs --info failed: {result.stderr.strip()[-300:]}")
        facts = json.loads(result.stdout)
        self.machine["torch"] = facts.get("torch")
        self.machine["CUDA (torch build)"] = facts.get("cuda_build")
        self.machine["CUDA available to torch"] = facts.get("cuda_available")
        for dev in facts.get("devices", []):
            self.machine[f"CUDA device {dev.get('index')}"] = (
                f"{dev.get('name')}, compute capability {dev.get('capability')}")

    def start(self, name: str) -> tuple[RunningJob, list[dict[str, Any]]]:
        self.say(f"starting the {name} job")
        job = start_job(name, self.raw, self.plan.job_s)
        self.children.append(job.popen)
        return job, wait_ready(job)

    def matmul_stage(self) -> None:
        job, _ = self.start("matmul")
        try:
            ready_at = time.time()
            self.say("NVML vs nvidia-smi, and GPM, while the GPU-bound job runs")
            device: GpuDevice | None = None
            with self.stage("NVML vs nvidia-smi", "nvml.run", "nvml"):
                device = self.nvml_checks(job.pid)
            with self.stage("GPM", "gpm.run", "gpm"):
                if device is not None:
                    reading = read_gpm(device.index, nvml=self.nvml)
                    self.checks += judge_gpm(reading, device.util_percent)
            time.sleep(max(0.0, ready_at + self.plan.baseline_s - time.time()))
            report, attached = self.attach(job)
            after_start = time.time()
            time.sleep(max(3.0, self.plan.baseline_s / 2))
            records = read_truth(job.truth)
        finally:
            stop(job.popen)
        self.checks += judge_job(SPECS["matmul"], report, records, pid=job.pid)
        self.checks.append(judge_overhead(
            records, without=[(ready_at + 1.0, attached[0]), (after_start, time.time())],
            attached=attached))

    def attach(self, job: RunningJob) -> tuple[dict[str, Any], tuple[float, float]]:
        self.say(f"attaching aitop to the {job.name} job for {self.plan.attach_s:g} s")
        t0 = time.time()
        report = attach_headless(job.pid, self.plan.attach_s, self.raw, job.name)
        start = finite(report.get("attached_at")) or t0
        length = finite(report.get("duration_s")) or self.plan.attach_s
        return report, (start, start + length)

    def attached_stage(self, name: str) -> None:
        job, _ = self.start(name)
        try:
            report, _span = self.attach(job)
            records = read_truth(job.truth)
        finally:
            stop(job.popen)  # before the next job starts, whatever happened
        self.checks += judge_job(SPECS[name], report, records, pid=job.pid)

    def pcie_stage(self) -> None:
        job, _ = self.start("pcie")
        self.say(f"PCIe counters for {self.plan.pcie_s:g} s of host-to-GPU copies")
        probe = GpuProbe(self.nvml)
        rx: list[float | None] = []
        tx: list[float | None] = []
        unsupported: tuple[str, ...] = ()
        dmon: tuple[float | None, float | None] = (None, None)
        smi = SmiRun.find()
        try:
            probe.sample({job.pid})
            first = time.time()
            index = None
            while time.time() < first + self.plan.pcie_s:
                time.sleep(0.5)
                device = job_device(probe.sample({job.pid}), job.pid)
                if device is not None:
                    index, unsupported = device.index, device.unsupported
                    rx.append(device.pcie_rx_bps)
                    tx.append(device.pcie_tx_bps)
            last = time.time()
            if smi is not None and index is not None:
                dmon = smi.pcie_dmon(index)
                save_raw(self.raw, smi)
            records = read_truth(job.truth)
        finally:
            probe.close()
            stop(job.popen)
        self.checks += judge_pcie(rx, tx, truth_between(records, first, last), dmon,
                                  unsupported)

    def nvml_checks(self, pid: int | None) -> GpuDevice | None:
        """aitop's probe around one nvidia-smi run; the device the job uses."""
        smi = SmiRun.find()
        probe = GpuProbe(self.nvml)
        targets = {pid} if pid is not None else set()
        try:
            probe.sample(targets)  # opens handles, reads static facts, starts counters
            time.sleep(1.0)
            before = probe.sample(targets)
            rows = smi.query_gpus() if smi is not None else []
            after = probe.sample(targets)
        finally:
            probe.close()
        device = job_device(after, pid) if pid is not None else None
        device = device or (after.devices[0] if after.devices else None)
        if device is None:
            raise ProcError("aitop's probe lost the GPU between two readings")
        previous = next((d for d in before.devices if d.index == device.index), device)
        if smi is None:
            self.checks.append(Check("nvml.compare", "nvml", "NVML fields vs nvidia-smi", SKIP,
                                     detail="nvidia-smi is not on PATH: nothing to compare with"))
            return device
        row = match_row(rows, device)
        if row is None:
            raise ProcError(f"nvidia-smi lists no GPU with UUID {device.uuid}")
        apps: dict[int, float | None] | None
        try:
            apps = smi.compute_apps()
        except SmiError:
            apps = None
        slowdown, source = smi.slowdown_temperature(row.index)
        ref = SmiReference(asdict(row), slowdown, source, apps)
        self.checks += compare_fields(previous, device, ref)
        if pid is not None:
            self.checks.append(compare_process_memory(previous, device, pid, apps))
        self.checks.append(Check(
            "nvml.driver_version", "nvml", "driver version",
            verdict(after.driver_version == row.driver_version),
            expected=row.driver_version, seen=after.driver_version))
        save_raw(self.raw, smi)
        return device


def job_device(sample: GpuSample, pid: int | None) -> GpuDevice | None:
    """The GPU on which NVML lists ``pid`` (the first GPU when it lists it nowhere)."""
    for device in sample.devices:
        if any(p.pid == pid for p in device.processes):
            return device
    return sample.devices[0] if sample.devices else None


def match_row(rows: list[SmiGpu], device: GpuDevice) -> SmiGpu | None:
    """nvidia-smi's row for aitop's device: by UUID, else by index."""
    for row in rows:
        if row.uuid is not None and row.uuid == device.uuid:
            return row
    return next((r for r in rows if r.index == device.index), None)


def save_raw(raw: Path, smi: SmiRun) -> None:
    for key, text in smi.raw.items():
        (raw / f"nvidia-smi-{key}.txt").write_text(text)


def machine_facts() -> dict[str, Any]:
    """What the report says about the machine (torch by its metadata: never imported)."""
    try:
        torch_version: str | None = metadata.version("torch")
    except metadata.PackageNotFoundError:
        torch_version = None
    return {
        "host": platform.node(),
        "OS": platform.platform(),
        "Python": platform.python_version(),
        "CPUs": os.cpu_count(),
        "aitop": aitop_version() or "unknown",
        "torch": torch_version or "not installed",
        "py-spy": find_pyspy() or "not found",
    }


def gpu_facts(sample: GpuSample) -> dict[str, Any]:
    names = [d.name or "?" for d in sample.devices]
    return {
        "NVIDIA driver": sample.driver_version,
        "GPU": names[0] if len(set(names)) == 1 else ", ".join(names),
        "GPUs": len(names),
    }

