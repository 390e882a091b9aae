"""``aitop.report/2``, declared once: the structs the headless report is built as.

The report is a public interface (scripts and CI parse it), so its shape lives
in one place: ``build_report`` fills these structs, ``--json`` prints them,
``aitop diff`` and the gates decode files back into them, and the JSON Schema
shipped beside this module (``aitop.report-2.schema.json``) is generated from
them. A field renamed or retyped here changes writer, readers and schema
together, and the staleness test fails until the schema file is regenerated::

    python -m aitop.engine.reports.schema          # rewrite the shipped schema
    python -m aitop.engine.reports.schema --check  # exit 1 if it is stale

Fields are only ever added; a change of meaning bumps the version. A field's
default is what a reader assumes when a file leaves it out (``aitop.report/1``
files, reports of an older /2 aitop, trimmed hand-written ones); aitop itself
writes every field. The published schema therefore requires every field except
those added after /2 was first released (``ADDED_WITHIN_2``), so that reports
of any /2 aitop validate.

/2 (from /1): ``bottleneck.category`` names what limits the job whenever it can
be judged: a saturated accelerator is ``compute`` (with
``bottleneck.hardware_well_used`` saying the hardware is well used), and
``collecting`` / ``unknown`` (with ``bottleneck.judged: false``) replace the
``none`` that used to mean "cannot judge yet"; ``none`` now only means "judged,
nothing limits". ``phases`` gains ``eval``; gains may be ``predicted`` ranges
with their Amdahl ``gain_ceiling`` beside them.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Final, Literal, get_args

import msgspec
from aitop.knowledge.base.findings import Gain
from aitop.probes.status import ProbeState

SCHEMA: Final = "aitop.report/2"
#: The versions this declaration reads: /2 only added fields and categories to /1.
ReportVersion = Literal["aitop.report/1", "aitop.report/2"]
READS: tuple[str, ...] = get_args(ReportVersion)

#: knowledge.model.SEVERITIES, mildest first.
Severity = Literal["info", "low", "medium", "high", "critical"]
#: knowledge.model.CATEGORIES: what a finding (and a judged verdict) blames.
Category = Literal[
    "data_loading", "compute", "memory", "io", "host", "sync", "communication", "evaluation",
    "warming_up", "stalled", "none",
]
#: A verdict's category: a Category, or not judged (yet): ``collecting`` / ``unknown``.
#: ``warming_up`` and ``stalled`` are job states (compiling before the first steps;
#: no progress), not bottlenecks.
BottleneckCategory = Literal[
    "data_loading", "compute", "memory", "io", "host", "sync", "communication", "evaluation",
    "warming_up", "stalled", "none", "collecting", "unknown",
]
#: An evidence value against its target range (knowledge/base/targets.py).
EvidenceStatus = Literal["within", "near", "outside", "unknown"]
#: How a gain was worked out: a range for this machine, an Amdahl ceiling, the
#: documents' figure, or no speed figure at all.
GainMethod = Literal["predicted", "amdahl", "document", "none"]
ComputeDevice = Literal["gpu", "cpu"]
#: How the ranks of the job were found (probes/ranks.py).
JobKind = Literal["env", "lightning", "spawn", "single"]

#: The schema file shipped as package data, beside this module.
SCHEMA_FILE = Path(__file__).with_name("aitop.report-2.schema.json")


class Target(msgspec.Struct, kw_only=True):
    """The process aitop was pointed at."""

    #: Unset only in a file that leaves it out (never in one aitop writes).
    pid: int | msgspec.UnsetType = msgspec.UNSET
    #: Its command line, secrets redacted.
    cmdline: list[str] = []
    alive: bool = True
    exited_after_s: float | None = None
    exit_status: int | None = None


class JobRank(msgspec.Struct, kw_only=True):
    """One rank of the job as its environment names it."""

    pid: int
    rank: int | None = None
    local_rank: int | None = None
    world_size: int | None = None
    group_rank: int | None = None


class Job(msgspec.Struct, kw_only=True):
    """The job around the target: its launcher and ranks."""

    given_pid: int
    launcher_pid: int | None = None
    kind: JobKind = "single"
    ranks: list[JobRank] = []


class Rank(msgspec.Struct, kw_only=True):
    """One rank of a multi-rank job as the report judges it (engine/live/job.py)."""

    label: str
    pid: int
    #: ``watched``, ``exited``, or why the rank could not be watched.
    status: str = "watched"
    phases: dict[str, float] | None = None
    comm_share: float | None = None
    steps_per_s: float | None = None
    cpu_percent: float | None = None
    gpu_mem_percent: float | None = None
    gpu_util_percent: float | None = None
    #: The GPUs the rank's processes hold memory on, ``"0,1"``.
    gpus: str | None = None
    straggler_score: float | None = None
    straggler: bool = False
    lead_finding: str | None = None
    cause: str | None = None


class JobVerdict(msgspec.Struct, kw_only=True):
    """The job-level judgement: the straggler (or none) and how long the others wait."""

    ranks_watched: int = 0
    straggler: str | None = None
    straggler_pid: int | None = None
    straggler_score: float | None = None
    straggler_cause: str | None = None
    others_wait_share: float | None = None
    comm_share: float | None = None


class StepsSource(msgspec.Struct, kw_only=True):
    """Where steps/s comes from: the count read, its frame, its newest readings, and
    what every other source said (``probes.step_sources``)."""

    counter: str | None = None
    frame: str | None = None
    error: str | None = None
    #: Why the loop's counter was set aside for the step the job prints or the
    #: cycles the stacks count, when it was.
    rejected: str | None = None
    #: ``[epoch s, counter name, value]``, the newest last.
    readings: list[tuple[float, str | None, int]] = []
    #: The source of the readings: ``loop``, ``log``, ``workers`` or ``stacks``
    #: (None: no source gave a rate).
    source: str | None = None
    #: ``"<source>: <why it did not serve>"`` for each other source tried; with no
    #: rate, every source, so that an unknown steps/s says why.
    tried: list[str] = []


class Evidence(msgspec.Struct, kw_only=True):
    """One metric value behind a finding, against its target range."""

    value: float | None = None
    display: str = ""
    target: str | None = None
    status: EvidenceStatus = "unknown"


class Bottleneck(msgspec.Struct, kw_only=True):
    """The verdict: what limits the job, and whether the hardware is well used."""

    category: BottleneckCategory = "none"
    #: False while the category is ``collecting`` or ``unknown``.
    judged: bool = True
    summary: str = ""
    lead_finding: str | None = None
    evidence: dict[str, Evidence] = {}
    hardware_well_used: bool | None = None
    hardware: str = ""


class State(msgspec.Struct, kw_only=True):
    """A row of the optimization priority framework that matches the job."""

    id: str
    #: Empty in a file that leaves it out: readers name the state by its id then.
    name: str = ""
    priorities: list[str] = []


class Finding(msgspec.Struct, kw_only=True):
    """A firing rule with its evidence, actions, estimated gain and source."""

    id: str
    severity: Severity
    category: Category
    title: str
    why: str = ""
    evidence: dict[str, Evidence] = {}
    actions: list[str] = []
    snippet: str | None = None
    est_speedup: float | None = None
    est_speedup_range: tuple[float | None, float | None] = (None, None)
    gain_method: GainMethod = "none"
    #: The Amdahl ceiling beside a ``predicted`` range.
    gain_ceiling: float | None = None
    gain_explanation: str = ""
    #: Titles of the symptoms this culprit explains.
    explains: list[str] = []
    #: ``document, § section``.
    source: str = ""
    #: The rule's expression.
    rule: str = ""
    fired_after_s: float | None = None

    @property
    def gain(self) -> Gain:
        """The estimated gain as the knowledge base states one (to word it)."""
        low, high = self.est_speedup_range
        return Gain(self.est_speedup, low, high, self.gain_method, self.gain_explanation,
                    self.gain_ceiling)


class Change(msgspec.Struct, kw_only=True):
    """A change of bottleneck category during the run."""

    after_s: float | None = None
    category: BottleneckCategory = "none"
    summary: str = ""


class Environment(msgspec.Struct, kw_only=True):
    """The target's environment as the probes saw it (secrets redacted)."""

    python: str | None = None
    torch: str | None = None
    num_workers: int | None = None
    pin_memory_thread: bool | None = None
    cpus_allowed: float | None = None
    hostname: str | None = None
    #: The variables that shape a training job's performance (CUDA_, NCCL_, ...).
    env: dict[str, str] = {}


class ProbeReading(msgspec.Struct, kw_only=True):
    """A probe's state and the human reason beside it."""

    state: ProbeState
    detail: str = ""


class AitopCost(msgspec.Struct, kw_only=True):
    """What watching cost: aitop's own CPU (py-spy included) and memory."""

    cpu_percent_of_one_core: float | None = None
    rss_mb: float | None = None


class Report(msgspec.Struct, kw_only=True):
    """One headless run's report, ``aitop.report/2``; the field order is the file's."""

    schema: ReportVersion
    aitop_version: str = "unknown"
    target: Target = msgspec.field(default_factory=Target)
    #: The job around the target (None: a single process, or not looked for).
    job: Job | None = None
    ranks: list[Rank] = []
    job_verdict: JobVerdict | None = None
    duration_s: float | None = None
    attached_at: float | None = None
    evaluated_at: float | None = None
    window_s: float | None = None
    compute_device: ComputeDevice | None = None
    #: Share of the training thread's time per phase, summing to 1 (None: no stacks).
    phases: dict[str, float] | None = None
    #: ``[start, end]`` epoch seconds of the stack samples behind ``phases``.
    phase_span: tuple[float, float] | None = None
    steps_per_s: float | None = None
    #: ``[first, last]`` epoch seconds of the counter readings behind ``steps_per_s``.
    steps_span: tuple[float, float] | None = None
    steps_source: StepsSource | None = None
    #: ``[start, end, steps]`` between consecutive counter readings of the whole run.
    step_windows: list[tuple[float, float, float]] = []
    bottleneck: Bottleneck = msgspec.field(default_factory=Bottleneck)
    #: The name of the most relevant matching state, and its priorities.
    state: str | None = None
    state_priorities: list[str] = []
    states: list[State] = []
    #: The culprit first, then by estimated gain.
    findings: list[Finding] = []
    timeline: list[Change] = []
    metrics: dict[str, float | None] = {}
    environment: Environment | None = None
    #: Each probe's status as one line of text; ``probe_states`` has it typed.
    probes: dict[str, str] = {}
    probe_states: dict[str, ProbeReading] = {}
    #: Rules that could not be evaluated for lack of data.
    waiting_for: list[str] = []
    #: Bottleneck rules whose condition holds but whose ``for:`` has not elapsed.
    pending: list[str] = []
    aitop: AitopCost = msgspec.field(default_factory=AitopCost)
    warnings: list[str] = []
    interrupted: bool = False


#: Fields added after /2 was first released: older /2 reports lack them, so the
#: published schema does not require them.
ADDED_WITHIN_2: Mapping[str, frozenset[str]] = {
    "Report": frozenset({"job", "ranks", "job_verdict"}),
    "Rank": frozenset({"gpus"}),
    "StepsSource": frozenset({"rejected", "source", "tried"}),
}


def decode_report(doc: Mapping[str, Any]) -> Report:
    """A parsed JSON document as a report; ``msgspec.ValidationError`` says where not."""
    return msgspec.convert(doc, Report)


def report_json(report: Report) -> str:
    """The report as ``--json`` prints it: indented, keys in declaration order."""
    return json.dumps(msgspec.to_builtins(report), indent=2)


def json_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of ``aitop.report/2``, generated from ``Report``.

    On top of what msgspec derives: the version is pinned to /2, every field
    aitop has written since /2 began is required, and the defaults (a reader's
    assumptions, not the format's) are left out.
    """
    generated = msgspec.json.schema(Report)
    defs: dict[str, dict[str, Any]] = generated["$defs"]
    for name, definition in defs.items():
        properties: dict[str, dict[str, Any]] = definition.get("properties", {})
        for prop in properties.values():
            prop.pop("default", None)
        optional = ADDED_WITHIN_2.get(name, frozenset())
        definition["required"] = [p for p in properties if p not in optional]
    defs["Report"]["properties"]["schema"] = {"const": SCHEMA}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": SCHEMA,
        "description": "The report printed by `aitop --headless --json` and "
                       "`aitop replay FILE --headless --json`.",
        **generated,
    }


def schema_text() -> str:
    """The shipped schema file's exact text."""
    return json.dumps(json_schema(), indent=2, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    """Rewrite the shipped schema file, or with ``--check`` say whether it is stale."""
    parser = argparse.ArgumentParser(prog="python -m aitop.engine.reports.schema",
                                     description="Regenerate aitop.report-2.schema.json.")
    parser.add_argument("--check", action="store_true",
                        help="exit 1 if the shipped file differs from the declaration")
    parser.add_argument("--output", type=Path, default=SCHEMA_FILE, help="where to write")
    args = parser.parse_args(argv)
    text = schema_text()
    current = args.output.read_text(encoding="utf-8") if args.output.exists() else None
    if args.check:
        if current != text:
            print(f"{args.output} is stale: run python -m aitop.engine.reports.schema",
                  file=sys.stderr)
            return 1
        return 0
    if current != text:
        args.output.write_text(text, encoding="utf-8")
        print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
