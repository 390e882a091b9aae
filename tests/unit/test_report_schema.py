"""``aitop.report/2`` has one declaration (engine/reports/schema.py): writer, readers
and the shipped JSON Schema follow it.

Real reports of the command validate too: a replay's in
``cli/test_report_schema_cli.py``, a live run's in ``attach/test_report_schema_live.py``.
"""

from __future__ import annotations

import inspect
import json
import re
from pathlib import Path
from typing import Any, get_args

import msgspec
import pytest
from aitop.engine.compare.gates import findings_gate
from aitop.engine.compare.runs import RunError, run_of_report
from aitop.engine.errors import EXIT_GATE
from aitop.engine.headless.source_report import report_of
from aitop.engine.live.job import Rank
from aitop.engine.reports import schema
from aitop.engine.reports.build import RunFacts, build_report
from aitop.knowledge.base.findings import (
    CATEGORIES,
    COLLECTING,
    SEVERITIES,
    UNKNOWN,
    GainMethod,
)
from aitop.knowledge.judging import gains
from aitop.knowledge.metrics.straggler import RankView, judge_ranks
from aitop.probes import ranks as probe_ranks
from aitop.probes.status import PROBE_STATES
from support.knowledge import HOLDS_BACK
from support.report_schema import errors_of, shipped_schema
from support.tui_session import replay_source

FIXTURES = Path(__file__).resolve().parents[1] / "support" / "selftest_data"


def fixture_report() -> schema.Report:
    source = replay_source()
    history = source.history()
    started = source.session.started_at or 0.0
    now = source.session.latest_time() or started
    assert history
    return report_of(source, now, source.at(now), RunFacts(now - started, 1.5, 30_000_000), started)


# ------------------------------------------------------------ the shipped file


def test_the_shipped_schema_is_generated_from_the_declaration() -> None:
    """Fails when a struct changed and the file was not regenerated
    (``python -m aitop.engine.reports.schema``)."""
    assert schema.SCHEMA_FILE.read_text(encoding="utf-8") == schema.schema_text()
    assert schema.main(["--check"]) == 0


def test_check_says_when_a_schema_file_is_stale(tmp_path: Path) -> None:
    stale = tmp_path / "old.json"
    stale.write_text("{}\n")
    assert schema.main(["--check", "--output", str(stale)]) == 1
    assert schema.main(["--output", str(stale)]) == 0
    assert schema.main(["--check", "--output", str(stale)]) == 0


def test_the_schema_pins_the_version_and_requires_what_every_report_2_has() -> None:
    defs = shipped_schema()["$defs"]
    assert defs["Report"]["properties"]["schema"] == {"const": "aitop.report/2"}
    required = set(defs["Report"]["required"])
    assert {"findings", "bottleneck", "phases", "step_windows", "target"} <= required
    assert not {"job", "ranks", "job_verdict"} & required  # added within /2
    assert set(defs["Finding"]["required"]) == set(defs["Finding"]["properties"]) - {
        "last_held_after_s"}  # added within /2
    assert defs["Finding"]["properties"]["severity"] == {"enum": sorted(SEVERITIES)}


# ------------------------------------------------------ Literal types vs the code


def test_the_fixed_value_sets_are_the_ones_the_code_emits() -> None:
    """The schema restates no vocabulary: its enums are the rooms' own ``Literal``
    types, and the values the code writes are among them."""
    defs = shipped_schema()["$defs"]
    assert defs["Finding"]["properties"]["category"] == {"enum": sorted(CATEGORIES)}
    assert defs["Bottleneck"]["properties"]["category"] == {
        "enum": sorted((*CATEGORIES, COLLECTING, UNKNOWN))}
    assert defs["Change"]["properties"]["category"] == defs["Bottleneck"]["properties"]["category"]
    assert defs["Job"]["properties"]["kind"] == {"enum": sorted(get_args(probe_ranks.JobKind))}
    assert defs["ProbeReading"]["properties"]["state"] == {"enum": sorted(PROBE_STATES)}
    made = set(re.findall(r'method="(\w+)"', inspect.getsource(gains)))
    assert made and made <= set(get_args(GainMethod)), made
    kinds = set(re.findall(r'Job\(pid, \w+, "(\w+)"', inspect.getsource(probe_ranks)))
    assert kinds == set(get_args(probe_ranks.JobKind)), kinds


def test_a_rank_row_is_written_as_the_report_rank_rounded() -> None:
    """One declaration: the row the Ranks panel draws is the report's rank, rounded
    like every other number, and a report with ranks and a verdict validates."""
    row = Rank(label="rank 0", pid=1, phases={"forward": 0.123456, "comm": 0.876544},
               comm_share=0.876544, steps_per_s=2.00004, cpu_percent=90.12345, gpus=None,
               straggler_score=float("nan"))
    source = replay_source()
    now = source.session.latest_time() or 0.0
    started = source.session.started_at or now
    diagnosis = source.at(now).diagnosis
    judgement = judge_ranks([RankView("rank 0", 1, 0.123456, 2.0, None, None),
                             RankView("rank 1", 2, 0.6, 2.0, None, "data wait 47%")],
                            HOLDS_BACK)
    report = build_report(source.session, diagnosis, source.history(),
                          RunFacts(now - started, None, None), started, ranks=[row],
                          judgement=judgement)
    assert report.ranks == [Rank(label="rank 0", pid=1, phases={"forward": 0.1235,
                                                                  "comm": 0.8765},
                                 comm_share=0.8765, steps_per_s=2.0, cpu_percent=90.1235)]
    verdict = report.job_verdict
    assert verdict is not None and verdict.ranks_watched == 2
    assert verdict.others_wait_share is not None and verdict.comm_share == round(
        (0.123456 + 0.6) / 2, 4)
    doc = json.loads(schema.report_json(report))
    assert errors_of(doc) == []
    assert schema.decode_report(doc).ranks == report.ranks


# ------------------------------------------------------------- the writer


def test_the_json_keeps_its_keys_and_their_order() -> None:
    """The order of the file (and of every object) is the structs' field order."""
    doc = json.loads(schema.report_json(fixture_report()))
    assert list(doc) == [
        "schema", "aitop_version", "target", "job", "ranks", "job_verdict", "duration_s",
        "attached_at", "evaluated_at", "window_s", "compute_device", "phases", "phase_span",
        "phase_windows",
        "steps_per_s", "steps_span", "steps_source", "step_windows", "bottleneck", "state",
        "state_priorities", "states", "findings", "timeline", "metrics", "environment",
        "probes", "probe_states", "waiting_for", "pending", "aitop", "warnings",
        "interrupted",
    ]
    assert list(doc["bottleneck"]) == ["category", "judged", "summary", "lead_finding",
                                       "evidence", "hardware_well_used", "hardware"]
    assert list(doc["findings"][0]) == [
        "id", "severity", "category", "title", "why", "evidence", "actions", "snippet",
        "est_speedup", "est_speedup_range", "gain_method", "gain_ceiling",
        "gain_explanation", "explains", "source", "rule", "fired_after_s", "last_held_after_s",
    ]
    assert doc["job"] is None and doc["ranks"] == [] and doc["target"]["exit_status"] is None


def test_a_built_report_validates_and_round_trips() -> None:
    report = fixture_report()
    text = schema.report_json(report)
    assert errors_of(json.loads(text)) == []
    assert schema.decode_report(json.loads(text)) == report


def test_the_schema_rejects_what_no_aitop_writes() -> None:
    doc = json.loads(schema.report_json(fixture_report()))
    doc["findings"][0]["severity"] = "urgent"
    del doc["metrics"]
    doc["bottleneck"]["category"] = "slow"
    errors = errors_of(doc)
    assert any(e.startswith("findings/0/severity") for e in errors), errors
    assert any("'metrics' is a required property" in e for e in errors), errors
    assert any(e.startswith("bottleneck/category") for e in errors), errors


def test_recorded_reports_of_both_versions_decode_and_the_2_one_validates() -> None:
    for path in sorted(FIXTURES.glob("report-*.json")):
        doc = json.loads(path.read_text())
        report = schema.decode_report(doc)
        assert report.schema == doc["schema"]
        assert [f.id for f in report.findings] == [f["id"] for f in doc["findings"]]
        if doc["schema"] == schema.SCHEMA:  # an older /2 aitop: no job or ranks yet
            assert errors_of(doc) == [], path






# ------------------------------------------------------------- the readers


def minimal_report(**fields: Any) -> dict[str, Any]:
    """What tests/test_diff.py gives ``aitop diff``: a hand-trimmed report/1."""
    return {"schema": "aitop.report/1", "target": {"pid": 1, "cmdline": ["python"]},
            "phases": None, "steps_per_s": None, "bottleneck": {"category": "none"},
            "findings": [], **fields}


def test_a_trimmed_report_1_still_reads_with_the_old_assumptions() -> None:
    run = run_of_report(minimal_report(states=[{"id": "s1"}]), "old.json")
    assert (run.pid, run.command, run.category, run.summary) == (1, "python", "none", "")
    assert run.phases is None and run.steps.estimate is None and run.phase_samples == 0.0
    assert run.states == (("s1", "s1"),)
    assert run_of_report(minimal_report(target={}), "x").pid is None


@pytest.mark.parametrize(("fields", "where"), [
    ({"findings": 5}, "$.findings"),
    ({"findings": [{"id": "a"}]}, "$.findings[0]"),
    ({"step_windows": [[1, 2]]}, "$.step_windows[0]"),
    ({"bottleneck": {"category": "slow"}}, "$.bottleneck.category"),
])
def test_a_damaged_report_is_one_line_saying_where(fields: dict[str, Any], where: str) -> None:
    with pytest.raises(RunError) as caught:
        run_of_report(minimal_report(**fields), "bad.json")
    message = str(caught.value)
    assert message.startswith("bad.json is a damaged aitop report (ValidationError: ")
    assert where in message and message.endswith("write it again with --headless --json")
    assert "\n" not in message


def test_the_findings_gate_reads_the_struct(capsys: pytest.CaptureFixture[str]) -> None:
    report = fixture_report()
    severities = [f.severity for f in report.findings]
    assert "high" in severities and "critical" not in severities
    assert findings_gate(report, "critical") == 0
    assert findings_gate(report, "high") == EXIT_GATE
    line = capsys.readouterr().err.strip()
    hits = [f for f in report.findings if f.severity == "high"]
    assert line == (f"aitop: --fail-on high: {len(hits)} finding(s) at high or worse fire: "
                    + ", ".join(f"{f.id} [high]" for f in hits))


def test_the_struct_is_what_both_readers_see() -> None:
    """``aitop diff FILE`` (decoded) and ``--baseline`` (the struct itself) agree."""
    report = fixture_report()
    from_file = run_of_report(msgspec.to_builtins(report), "r")
    assert from_file == run_of_report(report, "r")
    assert [f.id for f in from_file.findings] == [f.id for f in report.findings]
    assert from_file.steps.estimate is not None and from_file.steps.windows > 2


def test_a_held_finding_carries_when_its_condition_last_held() -> None:
    import dataclasses

    from aitop.engine.reports.build import finding_of
    from support.synthetic import RANK0_CHECKPOINT

    started = RANK0_CHECKPOINT.fired_at - 10.0
    assert finding_of(RANK0_CHECKPOINT, started).last_held_after_s is None
    held = dataclasses.replace(RANK0_CHECKPOINT, last_held_at=started + 42.5)
    assert finding_of(held, started).last_held_after_s == 42.5
