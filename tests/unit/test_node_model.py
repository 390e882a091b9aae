"""The node's model without a process: its rows, its recording and its report.

A recorded node (tests/support/node_session.py: four jobs over the fixture's
samples) is drawn as rows, written as a node recording and read back, and
reported as ``aitop.node-report/1``, each job's report validated against the
shipped schema like any ``--pid`` report.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import get_args

import msgspec
import pytest
from aitop.engine.fleet.rows import command_line, first_sentence, node_table
from aitop.engine.headless.export import write_snapshot
from aitop.engine.headless.node_export import write_node_snapshot
from aitop.engine.headless.node_report import node_report, render_node_text
from aitop.engine.headless.source_report import report_of
from aitop.engine.live.node import NO_JOBS, NodeReplay
from aitop.engine.live.source import ReplaySource
from aitop.engine.records.node import NODE_SCHEMA, load_recording
from aitop.engine.records.snapshot import SnapshotError, load_snapshot
from aitop.engine.reports import schema
from aitop.engine.reports.build import RunFacts
from aitop.knowledge.base.findings import JOB_STATES, Diagnosis
from aitop.knowledge.judging.job_state import job_state
from support.knowledge import PACKAGED
from support.node_session import HOST, NOW, T0, node_replay
from support.report_schema import errors_of
from support.tui_session import build_diagnoses, replay_source


def diagnosis(**changes: object) -> Diagnosis:
    return dataclasses.replace(build_diagnoses()[-1], **changes)  # type: ignore[arg-type]


def test_a_job_state_is_what_the_job_does_by_its_diagnosis() -> None:
    assert job_state(None) == "collecting"
    assert job_state(diagnosis(category="collecting")) == "collecting"
    assert job_state(diagnosis(category="unknown")) == "collecting"
    assert job_state(diagnosis(category="warming_up")) == "warming_up"
    assert job_state(diagnosis(category="stalled")) == "stalled"
    assert job_state(diagnosis()) == "training"
    serving = diagnosis(category="compute", metrics={"forward_only": 1.0, "watched_s": 75.0})
    assert job_state(serving) == "serving"
    # Its first seconds may not have sampled a backward pass yet: not called serving.
    assert job_state(diagnosis(metrics={"forward_only": 1.0, "watched_s": 12.0})) == "training"
    evaluating = diagnosis(category="evaluation",
                           phases={"eval": 0.6, "forward": 0.2, "other": 0.2})
    assert job_state(evaluating) == "evaluating"
    assert get_args(schema.JobState) == JOB_STATES  # the report names the same states


def test_each_job_is_a_row_judged_and_its_ranks_beneath_it() -> None:
    table = node_table(node_replay(), NOW)
    assert table.hostname == HOST and not table.live and not table.empty
    rows = {r.job_id: r for r in table.rows}
    assert set(rows) == {"imagenet-resnet50", "bert-large-7", "c0ffee12"}
    data = rows["imagenet-resnet50"]
    assert (data.user, data.status, data.state, data.category) == (
        "alice", "watched", "training", "data_loading")
    assert data.verdict == "Training waits on the DataLoader 42% of the time"
    assert data.age_s == pytest.approx(NOW - (T0 - 600))
    # Its processes now: the main process and four workers, on the GPU they use.
    assert data.cpu_cores is not None and 4.0 < data.cpu_cores < 6.0
    assert data.rss_bytes is not None and data.rss_bytes > 10e9
    assert data.gpu_util_percent is not None and data.gpu_mem_bytes == 51 * 1024**3
    assert data.gain is not None and data.gain.speedup == pytest.approx(1.55)
    assert "--token ***" in data.command and data.ranks == ()
    ddp = rows["bert-large-7"]
    assert [r.label for r in ddp.ranks] == ["rank 0", "rank 1"]
    assert ddp.category == "communication" and ddp.gain is not None
    # Both ranks' processes count: twice the single job's cores.
    assert ddp.cpu_cores == pytest.approx(2 * data.cpu_cores)
    assert rows["c0ffee12"].state == "warming_up" and rows["c0ffee12"].gain is None
    [refused] = table.not_watched
    assert refused.pid == 7100 and "run aitop as root (sudo aitop)" in refused.reason


def test_a_recording_shows_the_jobs_that_ran_at_the_cursor() -> None:
    node = node_replay()
    span = node.timeline()
    assert span is not None and (span.start, span.end) == (T0, NOW)
    # The compiling job was found 22 s into the recording.
    early = {r.job_id for r in node_table(node, T0 + 10).rows}
    assert early == {"imagenet-resnet50", "bert-large-7"}
    ended = NodeReplay(HOST, [dataclasses.replace(j, ended_at=T0 + 30)
                              for j in node.recorded()], PACKAGED, written_at=NOW)
    assert node_table(ended, T0 + 40).empty and not node_table(ended, T0 + 29).empty


def test_a_command_reads_as_one_line_by_its_programs_name() -> None:
    assert command_line(("/opt/venv/bin/python3", "-c", "import torch\nwhile 1:\n  pass")) == (
        "python3 -c import torch while 1: pass")
    assert command_line(()) == ""


def test_the_first_sentence_ends_at_its_full_stop() -> None:
    assert first_sentence("Stalled: no progress for 20 s. Every sample stood still.") == (
        "Stalled: no progress for 20 s.")
    assert first_sentence("One sentence, no stop") == "One sentence, no stop"
    assert first_sentence("torch 2.4.1 is here") == "torch 2.4.1 is here"


def test_a_node_recording_reads_back_as_the_node_it_was(tmp_path: Path) -> None:
    node = node_replay()
    path = tmp_path / "node.json"
    written = write_node_snapshot(path, node, screenshot_svg="<svg/>")
    assert written == [path, path.with_suffix(".md"), path.with_suffix(".svg")]
    assert json.loads(path.read_text())["schema"] == NODE_SCHEMA
    back = load_recording(path, PACKAGED)
    assert isinstance(back, NodeReplay) and back.hostname == HOST
    assert back.timeline() == node.timeline()
    assert node_table(back, NOW) == node_table(node, NOW)
    assert node_table(back, T0 + 10) == node_table(node, T0 + 10)
    markdown = path.with_suffix(".md").read_text()
    assert "# aitop node report: gpu-node-07" in markdown
    assert "| bert-large-7 | 5100 | bob | training |" in markdown
    assert "## Job imagenet-resnet50" in markdown and "not watched" in markdown


def test_a_job_snapshot_still_reads_and_a_node_one_is_refused_where_one_job_is_wanted(
        tmp_path: Path) -> None:
    job = tmp_path / "job.json"
    write_snapshot(job, replay_source())
    assert isinstance(load_recording(job, PACKAGED), ReplaySource)
    node = tmp_path / "node.json"
    write_node_snapshot(node, node_replay())
    with pytest.raises(SnapshotError) as caught:
        load_snapshot(node, PACKAGED)
    message = str(caught.value)
    assert "is a node recording" in message and f"aitop replay {node}" in message
    assert "\n" not in message


def test_a_damaged_node_recording_is_one_line(tmp_path: Path) -> None:
    path = tmp_path / "node.json"
    path.write_text(json.dumps({"schema": NODE_SCHEMA, "jobs": 3}))
    with pytest.raises(SnapshotError) as caught:
        load_recording(path, PACKAGED)
    assert "damaged or incompatible aitop.node-snapshot/1" in str(caught.value)
    assert "\n" not in str(caught.value)


def test_the_node_report_holds_each_jobs_own_report_and_validates(tmp_path: Path) -> None:
    node = node_replay()
    report = node_report(node, NOW, duration_s=180.0)
    doc = json.loads(schema.report_json(report))
    assert errors_of(doc) == []
    assert doc["schema"] == "aitop.node-report/1" and doc["hostname"] == HOST
    assert [j["job_id"] for j in doc["jobs"]] == [
        "imagenet-resnet50", "bert-large-7", "c0ffee12"]
    assert [j["state"] for j in doc["jobs"]] == ["training", "training", "warming_up"]
    assert doc["not_watched"][0]["pid"] == 7100 and doc["note"] is None
    # Each job's report is exactly what --pid --headless --json writes of it.
    [data] = [j for j in node.recorded() if j.job_id == "imagenet-resnet50"]
    assert data.source is not None
    attached = data.source.session.started_at or NOW
    alone = report_of(data.source, NOW, data.source.at(NOW),
                      RunFacts(NOW - attached, None, None), attached)
    assert doc["jobs"][0]["report"] == json.loads(schema.report_json(alone))
    for job in doc["jobs"]:
        assert errors_of(job["report"]) == [], job["job_id"]
    assert schema.decode_node_report(doc) == report
    # A damaged node report is rejected at the place it is wrong.
    doc["jobs"][1]["state"] = "sleeping"
    del doc["jobs"][0]["report"]["bottleneck"]
    errors = errors_of(doc)
    assert any(e.startswith("jobs/1/state") for e in errors), errors
    assert any(e.startswith("jobs/0/report") and "bottleneck" in e for e in errors), errors
    with pytest.raises(msgspec.ValidationError):
        schema.decode_node_report({**doc, "jobs": 5})
    text = render_node_text(report)
    assert "node gpu-node-07 - 3 PyTorch job(s) watched for 180.0 s" in text
    assert "== job bert-large-7: PID 5100, user bob, training (watched)" in text
    assert "Not watched:\n  PID 7100" in text


def test_a_node_without_jobs_says_how_to_start_one() -> None:
    empty = NodeReplay(HOST, [], PACKAGED, written_at=NOW)
    report = node_report(empty, NOW)
    assert report.note == NO_JOBS and "`aitop demo`" in NO_JOBS
    assert errors_of(json.loads(schema.report_json(report))) == []
    assert NO_JOBS in render_node_text(report)
    assert node_table(empty, NOW).empty
