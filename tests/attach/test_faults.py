"""What a job or a user can do to aitop, and what aitop promises then (README table).

Each test runs the real CLI against real processes and asserts the message, the
exit code, bounded time, that nothing recorded is lost and that the target keeps
running. Rule files, replays and export sets have their own files
(test_hostile_rule_files.py, test_replay_and_export_faults.py).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest
from aitop.knowledge.base.findings import NOT_YET_CONFIRMED
from aitop.probes.stacks import WORKDIR_PREFIX
from support.jobs import run_aitop, start_job, stop_job
from support.knowledge import PACKAGED
from support.processes import start_sleeper as sleeper

AITOP = [sys.executable, "-m", "aitop.tui"]


def kill(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.kill()
    proc.wait()


def workdirs_of(pid: int) -> list[Path]:
    return list(Path(tempfile.gettempdir()).glob(f"{WORKDIR_PREFIX}{pid}-*"))


def one_line_usage_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


# --------------------------------------------------------------- target exits


@pytest.mark.attach
def test_the_last_live_verdict_survives_the_target_exiting(tmp_path: Path) -> None:
    """A job with a worker ends by itself; its workers stop first. The report keeps
    the verdict made while it trained, not "num_workers=0" or "waits ? of the time"."""
    job = start_job("data", tmp_path / "truth.jsonl", duration_s=14.0)
    try:
        started = time.time()
        result = run_aitop("--pid", str(job.pid), "--headless", "--json", "--duration", "40")
        took = time.time() - started
    finally:
        stop_job(job)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["target"]["alive"] is False
    assert report["target"]["exited_after_s"] is not None
    assert took < 30, "aitop should stop soon after its target exits, not run out the clock"
    # The data wait, or (when tests beside this one run busy jobs of their own,
    # which starve the job's loader worker) the cores those neighbours hold.
    lead = report["bottleneck"]
    kept = ("host" if lead["lead_finding"] == "cores_taken_by_other_processes"
            else "data_loading")
    assert lead["category"] == kept, lead
    ids = [f["id"] for f in report["findings"]]
    assert "loading_in_training_process" not in ids, ids
    text = json.dumps(report["findings"]) + report["bottleneck"]["summary"]
    assert "(now 0)" not in text and "? of the time" not in text
    assert report["phases"] is not None and report["phases"]["data_wait"] > 0.5
    # The exported history ends with that verdict too.
    assert report["timeline"][-1]["category"] == kept


# ------------------------------------------------------- py-spy fails, recovers


def failing_pyspy(tmp_path: Path) -> tuple[Path, Path, Path]:
    """A py-spy that fails with an unexpected error while ``flag`` exists, then works.

    Every launch is logged, so the test can count relaunches.
    """
    real = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    flag, log, stub = tmp_path / "fail", tmp_path / "launches", tmp_path / "py-spy"
    stub.write_text(
        "#!/bin/sh\n"
        f"echo \"$1\" >> {log}\n"
        f"if [ -e {flag} ]; then echo 'Error: injected failure (disk on fire)' >&2; exit 3; fi\n"
        f"exec {real} \"$@\"\n"
    )
    stub.chmod(0o755)
    flag.touch()
    return stub, flag, log


@pytest.mark.attach
def test_a_failing_py_spy_backs_off_says_why_and_recovers(tmp_path: Path) -> None:
    stub, flag, log = failing_pyspy(tmp_path)
    target = sleeper()
    env = {**os.environ, "AITOP_PY_SPY": str(stub)}
    try:
        aitop = subprocess.Popen(
            [*AITOP, "--pid", str(target.pid), "--headless", "--json", "--duration", "13"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
        )
        # Failing launches at about 0, 1, 3 s; the one at 7 s finds py-spy working.
        time.sleep(6)
        launches_while_failing = log.read_text().count("\n")
        flag.unlink()  # py-spy works again
        out, err = aitop.communicate(timeout=60)
    finally:
        kill(target)
    assert aitop.returncode == 0, err
    # Before: 3,770 launches in 10 s. Now a doubling back-off from 1 s.
    assert launches_while_failing <= 15, launches_while_failing
    report = json.loads(out)
    assert report["aitop"]["cpu_percent_of_one_core"] < 15
    # It recovered: stacks sampled again once py-spy worked.
    assert report["probe_states"]["stacks"]["state"] == "ok", report["probes"]
    assert report["phases"] is not None


@pytest.mark.attach
def test_a_failing_py_spy_is_shown_with_its_message(tmp_path: Path) -> None:
    stub, _flag, _log = failing_pyspy(tmp_path)
    target = sleeper()
    env = {**os.environ, "AITOP_PY_SPY": str(stub)}
    started = time.monotonic()
    try:
        result = run_aitop("--pid", str(target.pid), "--headless", "--json", "--duration", "6",
                           env=env)
    finally:
        kill(target)
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 20  # start-up no longer waits 5 s on retries
    report = json.loads(result.stdout)
    stacks = report["probe_states"]["stacks"]
    assert stacks["state"] == "error", stacks
    assert "injected failure (disk on fire)" in stacks["detail"]
    assert "retrying in" in stacks["detail"]
    assert any("injected failure" in w for w in report["warnings"])


# ------------------------------------------------------------- signals, leftovers


@pytest.mark.attach
@pytest.mark.parametrize("sig", [signal.SIGHUP, signal.SIGTERM, signal.SIGINT])
def test_a_signalled_headless_run_reports_and_leaves_nothing(sig: int) -> None:
    target = sleeper()
    try:
        aitop = subprocess.Popen(
            [*AITOP, "--pid", str(target.pid), "--headless", "--json", "--duration", "60"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        deadline = time.monotonic() + 20
        while not workdirs_of(aitop.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        # Past the first window, a py-spy window is running: waited for, not slept
        # for, as on a loaded box the next window may start a moment after the last.
        time.sleep(4)
        children: list[int] = []
        while not children and time.monotonic() < deadline + 10:
            children = [c.pid for c in psutil.Process(aitop.pid).children(recursive=True)]
            time.sleep(0 if children else 0.1)
        assert children, "py-spy should be running under aitop"
        aitop.send_signal(sig)
        started = time.monotonic()
        out, err = aitop.communicate(timeout=20)
        took = time.monotonic() - started
        alive = [pid for pid in children if psutil.pid_exists(pid)
                 and psutil.Process(pid).status() != psutil.STATUS_ZOMBIE]
        assert target.poll() is None  # the job keeps running
    finally:
        kill(target)
    assert aitop.returncode == 0, err
    assert took < 10
    report = json.loads(out)
    assert report["interrupted"] is True
    assert report["phase_span"] is not None  # what was sampled is in the report
    assert alive == [], f"children left running: {alive}"
    assert workdirs_of(aitop.pid) == []


@pytest.mark.attach
def test_stale_stack_directories_of_a_killed_run_are_cleared_at_start() -> None:
    target = sleeper()
    try:
        first = subprocess.Popen(
            [*AITOP, "--pid", str(target.pid), "--headless", "--duration", "60"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 20
        while not workdirs_of(first.pid) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert workdirs_of(first.pid), "the first run never made its stack directory"
        first.kill()  # SIGKILL: nothing can clean up
        first.wait()
        assert workdirs_of(first.pid)
        result = run_aitop("--pid", str(target.pid), "--headless", "--duration", "3")
    finally:
        kill(target)
    assert result.returncode == 0, result.stderr
    assert workdirs_of(first.pid) == []


def runs_pyspy(pid: int) -> bool:
    """Whether a py-spy runs under ``pid`` (a dump's may end while it is looked at)."""
    for child in psutil.Process(pid).children(recursive=True):
        with contextlib.suppress(psutil.Error):
            if "py-spy" in child.name():
                return True
    return False


@pytest.mark.attach
def test_demo_stopped_by_sigterm_leaves_no_checkpoints_or_log() -> None:
    tmp = Path(tempfile.gettempdir())
    before = set(tmp.glob("aitop-demo-*"))
    demo = subprocess.Popen(
        [*AITOP, "demo", "--scenario", "checkpoint", "--headless", "--json", "--duration", "120"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not any(
        p.name.startswith("aitop-demo-ckpt-") for p in set(tmp.glob("aitop-demo-*")) - before
    ):
        time.sleep(0.5)
    # aitop watching (its py-spy runs), not still starting: a SIGTERM before the
    # headless run has its handler ends aitop as Ctrl-C does (130), which a
    # loaded box made this test see twice.
    while time.monotonic() < deadline and not runs_pyspy(demo.pid):
        time.sleep(0.5)
    time.sleep(4)  # training, checkpoints being written, aitop sampling
    job_pids = [c.pid for c in psutil.Process(demo.pid).children(recursive=True)]
    demo.send_signal(signal.SIGTERM)
    out, err = demo.communicate(timeout=40)
    assert demo.returncode == 0, err
    assert json.loads(out)["interrupted"] is True
    time.sleep(1)
    left = set(tmp.glob("aitop-demo-*")) - before
    assert left == set(), f"left behind: {sorted(map(str, left))}"
    assert not [p for p in job_pids if psutil.pid_exists(p)
                and psutil.Process(p).status() != psutil.STATUS_ZOMBIE]


# ------------------------------------------------------------------ small things


@pytest.mark.parametrize("option", ["--duration", "--window"])
@pytest.mark.parametrize("value", ["nan", "inf", "-1", "0"])
def test_durations_must_be_finite_and_positive(option: str, value: str) -> None:
    result = run_aitop("--pid", "1", "--headless", option, value)
    assert result.returncode == 2
    assert "must be a number of seconds > 0" in result.stderr
    assert "Traceback" not in result.stderr


def test_export_path_is_checked_before_sampling(tmp_path: Path) -> None:
    target = sleeper()
    started = time.monotonic()
    try:
        result = run_aitop("--pid", str(target.pid), "--headless", "--duration", "30",
                           "--export", str(tmp_path / "no-such-dir" / "run.json"))
    finally:
        kill(target)
    one_line_usage_error(result, "does not exist")
    assert time.monotonic() - started < 15  # refused at start, not after 30 s


@pytest.mark.parametrize("term", ["dumb", ""])
def test_a_dumb_terminal_gets_a_hint_not_escape_codes(term: str) -> None:
    target = sleeper()
    env = {**os.environ, "TERM": term}
    try:
        result = run_aitop("--pid", str(target.pid), env=env)
    finally:
        kill(target)
    one_line_usage_error(result, "--headless")
    assert "\x1b[" not in result.stdout + result.stderr


def test_output_that_is_not_a_terminal_gets_a_hint() -> None:
    target = sleeper()
    env = {**os.environ, "TERM": "xterm-256color"}
    try:
        result = run_aitop("--pid", str(target.pid), env=env)
    finally:
        kill(target)
    one_line_usage_error(result, "not a terminal", "--headless")


@pytest.mark.attach
def test_interrupted_before_for_says_not_yet_confirmed(tmp_path: Path) -> None:
    """Stopped before a rule's for: elapses, the report says what is pending."""
    job = start_job("data", tmp_path / "truth.jsonl")
    try:
        result = run_aitop("--pid", str(job.pid), "--headless", "--json", "--duration", "4.5")
    finally:
        stop_job(job)
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    # The first stack window lands after 3 s; data_wait_dominant needs 3 s more (for: 3s).
    # Not a verdict yet (schema /2): "collecting", judged false, never "none".
    assert report["bottleneck"]["category"] == "collecting", report["bottleneck"]
    assert report["bottleneck"]["judged"] is False
    assert report["bottleneck"]["summary"].startswith(NOT_YET_CONFIRMED), report["bottleneck"]
    assert any("held" in p for p in report["pending"]), report["pending"]


# --------------------------------------------------------------- full disk, NO_COLOR


@pytest.fixture
def tiny_disk(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A 64 KiB tmpfs: a real full disk (needs root to mount)."""
    if os.geteuid() != 0 or shutil.which("mount") is None:
        pytest.skip("needs root to mount a tiny tmpfs")
    mountpoint = tmp_path / "tiny"
    mountpoint.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mountpoint)],
                   check=True)
    try:
        yield mountpoint
    finally:
        subprocess.run(["umount", "-l", str(mountpoint)], check=False)


def test_a_full_disk_loses_nothing_and_leaves_no_half_export(
    tiny_disk: Path, tmp_path: Path
) -> None:
    from aitop.engine.headless.export import write_snapshot
    from support.tui_session import replay_source

    recording = tmp_path / "rec.json"
    write_snapshot(recording, replay_source())  # ~MBs: cannot fit in 64 KiB
    target = tiny_disk / "copy.json"
    from aitop.engine.records.snapshot import SnapshotError, load_snapshot

    with pytest.raises(SnapshotError) as info:
        write_snapshot(target, load_snapshot(recording, PACKAGED))
    message = str(info.value)
    assert "\n" not in message
    assert "No space left on device" in message
    assert "nothing was written" in message
    assert list(tiny_disk.iterdir()) == []  # no half-written JSON, .md or temporaries
    assert load_snapshot(recording, PACKAGED).history()  # the session is intact


def test_no_color_means_no_colour_in_a_real_terminal(tmp_path: Path) -> None:
    if shutil.which("tmux") is None:
        pytest.skip("tmux is not installed (apt-get install tmux)")
    from aitop.engine.headless.export import write_snapshot
    from support.tui_session import replay_source

    recording = tmp_path / "rec.json"
    write_snapshot(recording, replay_source())
    session = "aitop-nocolor"
    command = " ".join([f"cd {Path.cwd()} &&", "NO_COLOR=1", *AITOP, "replay", str(recording)])
    subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
    subprocess.run(["tmux", "new-session", "-d", "-s", session, "-x", "120", "-y", "40",
                    command], check=True)
    try:
        deadline = time.monotonic() + 30
        screen = ""
        while "REPLAY" not in screen and time.monotonic() < deadline:
            time.sleep(0.5)
            screen = subprocess.run(["tmux", "capture-pane", "-e", "-p", "-t", session],
                                    capture_output=True, text=True).stdout
        assert "REPLAY" in screen
        # No foreground or background colour of any kind: only bold, dim, reverse.
        for code in ("[38;5;", "[48;5;", "[38;2;", "[48;2;", "[31m", "[32m", "[33m"):
            assert code not in screen, f"colour {code!r} drawn under NO_COLOR"
        assert "✗" in screen  # the status symbols carry the meaning alone
    finally:
        subprocess.run(["tmux", "kill-session", "-t", session], capture_output=True)
