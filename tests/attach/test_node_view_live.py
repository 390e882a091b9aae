"""The node view on real jobs: they appear, are judged, open and leave while it runs.

A real fleet (``engine.fleet.model``: /proc scanned, py-spy attached) under the
real node view, driven by Pilot: a single-process training loop and a 2-rank
torchrun (gloo) job start while it runs, their rows appear and are judged,
Enter opens a job's full view and Escape returns, and each job that ends leaves
(the machine then reads as empty, with how to start the demo). Then users:
another user's job as root sees it (and names its user), and aitop run as
``nobody`` lists root's job as not watched, with the reason and what to do, in
the headless node report, which validates against the shipped schema.

``match`` (``--match``) keeps each fleet to this test's own jobs (their command
lines carry the test's directory): the suite runs other tests' jobs beside it.
No GPU here: the GPU columns stay blank (the fake NVML is for the GPU tests).
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import psutil
import pytest
from aitop.engine.fleet.model import Fleet
from aitop.engine.live.attach import AttachOptions
from aitop.engine.live.node import NO_JOBS
from aitop.probes.discovery import other_user
from aitop.tui.node_app import NodeApp
from aitop.tui.screens.main import MainScreen
from aitop.tui.screens.node import NodeScreen
from aitop.tui.widgets.grouped_table import GroupedTable
from support.jobs import run_aitop
from support.knowledge import PACKAGED
from support.processes import free_port, start_logged, stop_tree
from support.report_schema import errors_of
from support.tui_pilot import screen_text, wait_for
from textual.pilot import Pilot

from benchmarks.jobs import LIGHT_JOB

pytestmark = pytest.mark.attach


def torchrun(port: int, marker: Path) -> list[str]:
    """2 ranks on gloo; rank 1 makes its batches in its training thread."""
    return [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
            f"--master_port={port}", f"--rdzv-id=node-view-{port}", "-m", "aitop.demo.ddp",
            "--duration", "120", "--slow-rank", "1", "--slow-ms", "30",
            "--truth", str(marker / "ddp-truth")]


def rows(app: NodeApp) -> dict[int, object]:
    """The node's job rows by root PID, as last drawn."""
    table = app.node_table
    return {r.pid: r for r in table.rows} if table is not None else {}


def row_keys(app: NodeApp) -> list[str]:
    return [str(r.key.value) for r in app.screen.query_one(GroupedTable).ordered_rows]


async def move_to(pilot: Pilot[None], app: NodeApp, key: str) -> None:
    """Put the table's cursor on the row ``key``."""
    table = app.screen.query_one(GroupedTable)
    table.move_cursor(row=table.get_row_index(key))
    await pilot.pause()


async def test_jobs_come_are_judged_open_and_leave_in_the_node_view(tmp_path: Path) -> None:
    fleet = Fleet(AttachOptions(knowledge=PACKAGED), match=(str(tmp_path),), say=lambda line: None,
                  keep_ended=8)
    app = NodeApp(fleet.start(), refresh_s=0.5)
    single = launcher = None
    try:
        async with app.run_test(size=(200, 50)) as pilot:
            await wait_for(pilot, lambda: app.node_table is not None, timeout=10)
            single = start_logged([sys.executable, "-c", LIGHT_JOB, str(tmp_path)])
            born = psutil.Process(single.pid).create_time()
            await wait_for(pilot, lambda: single.pid in rows(app), timeout=30)
            launcher = start_logged(torchrun(free_port(), tmp_path))
            # Keys are answered while the new job is found and attached off this thread.
            await pilot.press("n")
            assert app.screen.query_one(GroupedTable).sort_column == "job"

            # The single job's row shows a judged state (what it does, not "collecting").
            def judged() -> bool:
                row = rows(app).get(single.pid)
                return row is not None and getattr(row, "state", "") not in ("collecting",)

            await wait_for(pilot, judged, timeout=90)
            print(f"seconds from the single job's start to its judged row: "
                  f"{time.time() - born:.1f}")
            state = rows(app)[single.pid].state
            assert state in ("training", "warming_up"), state

            # The torchrun job is one row under its launcher, its two ranks beneath it.
            def ddp_watched() -> bool:
                row = rows(app).get(launcher.pid)
                return row is not None and len(getattr(row, "ranks", ())) == 2

            await wait_for(pilot, ddp_watched, timeout=90)
            ddp = rows(app)[launcher.pid]
            assert ddp.job_id.startswith("node-view-")
            assert set(rows(app)) == {single.pid, launcher.pid}
            [ddp_key] = [k for k in row_keys(app) if k.startswith(f"{launcher.pid}-")]
            await move_to(pilot, app, ddp_key)
            await pilot.press("r")
            await wait_for(pilot, lambda: f"{ddp_key}/" in " ".join(row_keys(app)))
            assert "rank 1" in screen_text(app)

            # Enter: the job's full view, what aitop --pid LAUNCHER shows; Escape back.
            await move_to(pilot, app, ddp_key)
            await pilot.press("enter")
            await wait_for(pilot, lambda: isinstance(app.screen, MainScreen), timeout=10)
            await wait_for(pilot, lambda: "rank 0 of 2" in screen_text(app), timeout=10)
            assert "Ranks" in screen_text(app) and app.job_key == ddp_key
            await pilot.press("escape")
            await wait_for(pilot, lambda: isinstance(app.screen, NodeScreen), timeout=10)

            # A job that ends leaves; the last one gone, the machine reads as empty.
            stop_tree(launcher)
            await wait_for(pilot, lambda: launcher.pid not in rows(app), timeout=30)
            assert single.pid in rows(app)
            stop_tree(single)
            await wait_for(pilot, lambda: not rows(app), timeout=30)
            await wait_for(pilot, lambda: "No PyTorch job runs" in screen_text(app))
            assert " ".join(NO_JOBS.split())[:60] in " ".join(screen_text(app).split())
            # The ended jobs are kept for the session's recording.
            assert {j.pid for j in fleet.recorded()} >= {single.pid, launcher.pid}
    finally:
        for job in (launcher, single):
            if job is not None:
                stop_tree(job)
        fleet.close()


def test_root_watches_another_users_job_and_names_its_user(tmp_path: Path) -> None:
    """As root aitop may read every user's job (CAP_SYS_PTRACE): nobody's job is
    watched, reported as a job's own report, and the node report validates."""
    job = start_logged(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                        sys.executable, "-c", LIGHT_JOB, str(tmp_path)])
    try:
        time.sleep(2)  # its import torch
        result = run_aitop("--headless", "--json", "--duration", "10", "--match",
                           str(tmp_path), "--export", str(tmp_path / "node.json"), timeout=120)
    finally:
        stop_tree(job)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert errors_of(report) == []
    [entry] = report["jobs"]
    assert entry["user"] == "nobody" and entry["status"] == "watched", entry
    assert entry["report"]["target"]["pid"] == entry["pid"]
    assert entry["report"]["schema"] == "aitop.report/2" and not report["not_watched"]
    # The recording replays as the same node, its report valid too.
    replayed = run_aitop("replay", str(tmp_path / "node.json"), "--headless", "--json")
    assert replayed.returncode == 0, replayed.stderr
    again = json.loads(replayed.stdout)
    assert errors_of(again) == []
    assert [(j["job_id"], j["user"]) for j in again["jobs"]] == [(entry["job_id"], "nobody")]


def test_aitop_as_nobody_lists_roots_job_as_not_watched_with_what_to_do(
        tmp_path: Path) -> None:
    job = start_logged([sys.executable, "-c", LIGHT_JOB, str(tmp_path)])
    try:
        time.sleep(2)
        result = run_aitop("--headless", "--json", "--duration", "4", "--match",
                           str(tmp_path), user="65534", timeout=60)
    finally:
        stop_tree(job)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert errors_of(report) == []
    assert report["jobs"] == []
    [refused] = report["not_watched"]
    assert refused["pid"] == job.pid and refused["user"] == "root"
    assert refused["reason"] == other_user(0, 65534)
    assert "run aitop as root (sudo aitop)" in refused["reason"]
