"""``aitop.report/2``, declared once: the structs the headless report is built as.

The report is a public interface (scripts and CI parse it), so its shape lives
in one place: ``build_report`` fills these structs, ``--json`` prints them,
``aitop diff`` and the gates decode files back into them, and the JSON Schema
shipped beside this module (``aitop.report-2.schema.json``) is generated from
them. A field renamed or retyped here changes writer, readers and schema
together, and the staleness test fails until the schema file is regenerated::

    python -m aitop.engine.reports.schema          # rewrite the shipped schema
    python -m aitop.engine.reports.schema --check  # exit 1 if it is stale

The fixed sets of values (severities, categories, evidence statuses, gain
methods, compute devices, job kinds, probe states) are not restated here: they
are the ``Literal`` types of the rooms that make the values
(``knowledge/base/findings.py``, ``probes/ranks.py``, ``probes/status.py``), so
the schema accepts exactly what the code can write.

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
from aitop.engine.live.job import Rank
from aitop.knowledge.base.findings import (
    BottleneckCategory,
    Category,
    ComputeDevice,
    Gain,
    GainMethod,
    Severity,
)
from aitop.knowledge.base.findings import Status as EvidenceStatus
from aitop.probes.ranks import JobKind
from aitop.probes.status import ProbeState

SCHEMA: Final = "aitop.report/2"
#: The versions this declaration reads: /2 only added fields and categories to /1.
ReportVersion = Literal["aitop.report/1", "aitop.report/2"]
READS: tuple[str, ...] = get_args(ReportVersion)

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
    #: Seconds after the start when its condition last held, where it no longer
    #: does: the rule keeps it firing a while (``keep_firing_for``), told with
    #: that moment's numbers. None while the condition holds.
    last_held_after_s: float | None = None

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
    #: ``[start, end, samples]`` of each stack window behind ``phases`` (pooled by
    #: their samples): a job's own timers compared over these alone skip the gaps
    #: between windows, where a phase that comes in blocks (a save) may fall.
    phase_windows: list[tuple[float, float, float]] = []
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


#: What a job is doing (knowledge.base.findings.JOB_STATES).
JobState = Literal["collecting", "warming_up", "stalled", "serving", "evaluating", "training"]
#: How aitop watches a job of the node (engine.live.node.WatchStatus).
WatchStatus = Literal["watched", "attaching", "waiting", "not_watched"]
#: The node report's version: a wrapper around one ``aitop.report/2`` per job.
NODE_SCHEMA: Final = "aitop.node-report/1"


class NodeJob(msgspec.Struct, kw_only=True):
    """One job of the machine, and its report as ``--pid ROOT --headless --json`` writes it."""

    #: The job's identity: torchrun's run id, Slurm's job, or a digest of its command.
    job_id: str
    #: The job root: the training process, or its launcher.
    pid: int
    user: str
    #: The root's command line, secrets redacted.
    command: list[str]
    #: When the root process started (epoch seconds).
    started_at: float | None
    #: ``watched``, or ``attaching`` / ``waiting`` (a launcher before its ranks).
    status: WatchStatus
    state: JobState
    #: None until the job is attached.
    report: Report | None


class NotWatched(msgspec.Struct, kw_only=True):
    """A job (or a Python process that may be one) aitop may not watch, and why."""

    job_id: str
    pid: int
    user: str
    command: list[str]
    #: Why, then what to do ("owned by root (uid 0), ...: run aitop as root (sudo aitop)").
    reason: str


class NodeReport(msgspec.Struct, kw_only=True):
    """``aitop --headless --json`` without ``--pid``: every PyTorch job of the machine."""

    schema: Literal["aitop.node-report/1"]
    aitop_version: str
    hostname: str
    #: When the report was made (epoch seconds), and how long aitop watched the node.
    generated_at: float
    duration_s: float | None
    jobs: list[NodeJob]
    not_watched: list[NotWatched]
    #: Said when no PyTorch job runs here: how to start one.
    note: str | None
    #: How many times slower than its own cadence each job was watched.
    pace: float | None
    aitop: AitopCost
    warnings: list[str]


#: Fields added after /2 was first released: older /2 reports lack them, so the
#: published schema does not require them.
ADDED_WITHIN_2: Mapping[str, frozenset[str]] = {
    "Report": frozenset({"job", "ranks", "job_verdict", "phase_windows"}),
    "Rank": frozenset({"gpus"}),
    "StepsSource": frozenset({"rejected", "source", "tried"}),
    "Finding": frozenset({"last_held_after_s"}),
}


def decode_node_report(doc: Mapping[str, Any]) -> NodeReport:
    """A parsed node report; ``msgspec.ValidationError`` says where it is not one."""
    return msgspec.convert(doc, NodeReport)


def decode_report(doc: Mapping[str, Any]) -> Report:
    """A parsed JSON document as a report; ``msgspec.ValidationError`` says where not."""
    return msgspec.convert(doc, Report)


def report_json(report: Report | NodeReport) -> str:
    """The report as ``--json`` prints it: indented, keys in declaration order."""
    return json.dumps(msgspec.to_builtins(report), indent=2)


def json_schema() -> dict[str, Any]:
    """The JSON Schema (2020-12) of ``aitop.report/2``, generated from ``Report``.

    On top of what msgspec derives: the version is pinned to /2, every field
    aitop has written since /2 began is required, and the defaults (a reader's
    assumptions, not the format's) are left out.
    """
    (report, node), defs = msgspec.json.schema_components(
        [Report, NodeReport], ref_template="#/$defs/{name}")
    for name, definition in defs.items():
        properties: dict[str, dict[str, Any]] = definition.get("properties", {})
        for prop in properties.values():
            prop.pop("default", None)
        optional = ADDED_WITHIN_2.get(name, frozenset())
        definition["required"] = [p for p in properties if p not in optional]
    defs["Report"]["properties"]["schema"] = {"const": SCHEMA}
    defs["NodeReport"]["properties"]["schema"] = {"const": NODE_SCHEMA}
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": SCHEMA,
        "description": "The report printed by `aitop --pid PID --headless --json` and "
                       "`aitop replay FILE --headless --json`; without --pid (or of a node "
                       f"recording), {NODE_SCHEMA}: one {SCHEMA} report per job of the "
                       "machine.",
        # The node report names itself; anything else is read as a job's report.
        "if": {"properties": {"schema": {"const": NODE_SCHEMA}}, "required": ["schema"]},
        "then": node,
        "else": report,
        "$defs": defs,
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
