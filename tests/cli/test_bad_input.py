"""Expected failures: one clear line, a non-zero exit, never a traceback.

Each case runs the real CLI in a subprocess against real processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from aitop.engine.headless.export import write_snapshot
from support.jobs import run_aitop
from support.report_schema import errors_of
from support.rule_files import THREE_MISTAKES
from support.tui_session import live_source


def assert_one_line_error(result: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, f"expected one line, got: {result.stderr!r}"
    for needle in needles:
        assert needle in lines[0], f"{needle!r} not in {lines[0]!r}"


def test_pid_that_does_not_exist() -> None:
    result = run_aitop("--pid", "999999", "--headless", "--duration", "2")
    assert_one_line_error(result, "no process with PID 999999", "pgrep")


def test_a_second_pid_that_does_not_exist() -> None:
    """``--pid A --pid B`` (one job's launchers): a B that is gone is one line, before
    anything is attached to A."""
    result = run_aitop("--pid", str(os.getpid()), "--pid", "999999", "--headless",
                       "--duration", "2")
    assert_one_line_error(result, "no process with PID 999999", "pgrep")


def test_no_pid_and_no_job_is_a_node_report_saying_how_to_start_one(tmp_path: Path) -> None:
    """Without --pid aitop watches the whole machine; with no PyTorch job there (none
    matches this test's own directory) the report says so, and how to start the demo."""
    result = run_aitop("--headless", "--json", "--duration", "1", "--match", str(tmp_path))
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["schema"] == "aitop.node-report/1"
    assert report["jobs"] == [] and report["not_watched"] == []
    assert "No PyTorch job runs on this machine" in report["note"]
    assert "`aitop demo`" in report["note"]
    assert errors_of(report) == []
    text = run_aitop("--headless", "--duration", "1", "--match", str(tmp_path))
    assert text.returncode == 0 and "try the demo: `aitop demo`" in text.stdout, text.stdout


def test_not_a_number_pid() -> None:
    result = run_aitop("--pid", "abc")
    assert result.returncode == 2 and "invalid int value" in result.stderr


@pytest.mark.parametrize("args,code,words", [
    (("--pid", "1", "--budget", "5"), 2, "--budget is for every job of the machine: drop --pid"),
    (("--fail-on", "high", "--headless"), 2, "--fail-on judges one job: give --pid"),
    (("--pid", "1", "--serve", "0", "--match", "train"), 2, "--match is for the node agent"),
    (("--serve", "0", "--export", "run.json"), 2, "--export is for one job: give --pid"),
    (("--serve", "0", "--fail-on", "high"), 2, "--fail-on is not for --serve"),
    (("--serve", "0", "--budget", "-1"), 2, "must be a number of seconds > 0"),
])
def test_node_agent_options_out_of_place_are_one_line(args: tuple[str, ...], code: int,
                                                      words: str) -> None:
    result = run_aitop(*args, timeout=30)
    assert result.returncode == code, result.stderr
    assert words in result.stderr and "Traceback" not in result.stderr, result.stderr


def test_the_node_agent_on_a_port_in_use_is_one_line() -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_aitop("--serve", f"127.0.0.1:{port}", timeout=30)
    assert_one_line_error(result, "cannot serve metrics", "pick another port")
    assert result.returncode == 1


@pytest.mark.attach
def test_non_python_target_runs_without_stacks() -> None:
    sleeper = subprocess.Popen(["sleep", "60"])
    try:
        result = run_aitop("--pid", str(sleeper.pid), "--headless", "--json", "--duration", "3")
    finally:
        sleeper.kill()
        sleeper.wait()
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["probes"]["stacks"].startswith("unavailable")
    assert "does not look like a Python process" in report["probes"]["stacks"]
    summary = report["bottleneck"]["summary"]
    assert summary.startswith(
        f"No step phases: PID {sleeper.pid} does not look like a Python process (py-spy: ")
    assert summary.endswith("; the Python processes here: pgrep -af python. GPU, CPU, memory "
                            "and I/O are still watched"), summary
    assert report["phases"] is None
    assert any("Python" in w for w in report["warnings"])
    # The other probes kept working.
    assert report["metrics"]["host_cpu_mean"] is not None
    assert report["probes"]["process"].startswith("every")


#: A Python loop that keeps its thread busy, as a wrapper's job.
BUSY = "while True: sum(range(10000))"


def wrapper(tmp_path: Path, *commands: str) -> subprocess.Popen[bytes]:
    """``bash run.sh`` running ``commands`` in the background and waiting for them, as
    a job script does; started once each of them runs."""
    script = tmp_path / "run.sh"
    lines = [f"{sys.executable} -c '{c}' &" for c in commands]
    script.write_text("#!/bin/bash\n" + "\n".join(lines) + "\nwait\n")
    shell = subprocess.Popen(["bash", str(script)], start_new_session=True)
    deadline = time.time() + 20
    while len(subprocess.run(["pgrep", "-P", str(shell.pid)], capture_output=True,
                             text=True).stdout.split()) < len(commands):
        assert time.time() < deadline, "the script started no Python processes"
        time.sleep(0.1)
    return shell


def stop_group(shell: subprocess.Popen[bytes]) -> None:
    os.killpg(shell.pid, 9)
    shell.wait()


@pytest.mark.attach
def test_a_shell_script_is_followed_to_the_python_job_it_runs(tmp_path: Path) -> None:
    """``aitop --pid`` of ``bash run.sh`` (what ``pgrep -f run`` finds, what a job
    scheduler shows) watches the one Python process beneath it and says so."""
    shell = wrapper(tmp_path, BUSY)
    try:
        result = run_aitop("--pid", str(shell.pid), "--headless", "--json", "--duration", "3")
        child = subprocess.run(["pgrep", "-P", str(shell.pid)], capture_output=True,
                               text=True).stdout.split()
    finally:
        stop_group(shell)
    assert result.returncode == 0, result.stderr
    assert f"aitop: PID {shell.pid} (bash /" in result.stderr
    assert f") is not Python: watching the Python process it runs, PID {child[0]} (" \
        in result.stderr
    report = json.loads(result.stdout)
    assert report["probe_states"]["stacks"]["state"] == "ok", report["probe_states"]
    assert report["phases"] is not None
    assert any(f"watching the Python process it runs, PID {child[0]}" in w
               for w in report["warnings"]), report["warnings"]


@pytest.mark.attach
def test_a_shell_script_running_two_python_jobs_is_one_line_naming_them(
        tmp_path: Path) -> None:
    shell = wrapper(tmp_path, BUSY, BUSY)
    rules = tmp_path / "bad.yaml"
    rules.write_text(THREE_MISTAKES, encoding="utf-8")
    try:
        result = run_aitop("--pid", str(shell.pid), "--headless", "--duration", "3")
        # A bad rule file is still the error said first.
        with_rules = run_aitop("--pid", str(shell.pid), "--headless", "--rules", str(rules))
    finally:
        stop_group(shell)
    assert_one_line_error(result, f"PID {shell.pid}", "runs 2 Python processes",
                          "give one of them with --pid")
    assert with_rules.returncode == 2, with_rules.stderr
    assert with_rules.stderr.startswith(f"aitop: bad rule file: {rules}:3: ")


@pytest.mark.attach
def test_permission_denied_is_a_degraded_mode_with_the_fitting_hint(tmp_path: Path) -> None:
    """Without ptrace rights the other probes still run; the reason says what helps."""
    if os.geteuid() != 0:
        pytest.skip("needs root: to run aitop as another user who may not trace the target")
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        time.sleep(0.5)
        result = run_aitop("--pid", str(target.pid), "--headless", "--json", "--duration", "3",
                           user="65534")
    finally:
        target.kill()
        target.wait()
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    report = json.loads(result.stdout)
    stacks = report["probe_states"]["stacks"]
    assert stacks["state"] == "unavailable"
    # Across users only root or the job's own user helps (not ptrace_scope).
    assert "permission denied" in stacks["detail"]
    assert "another user (uid 0)" in stacks["detail"] and "root" in stacks["detail"]
    assert "ptrace_scope" not in stacks["detail"]
    assert report["phases"] is None
    assert report["bottleneck"]["summary"].startswith("No step phases: cannot attach to PID")
    assert report["metrics"]["host_cpu_mean"] is not None  # the rest kept working


def test_py_spy_missing_is_a_degraded_mode_naming_the_variable(tmp_path: Path) -> None:
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    missing = tmp_path / "no-such-py-spy"
    env = {**os.environ, "AITOP_PY_SPY": str(missing)}
    try:
        result = run_aitop("--pid", str(target.pid), "--headless", "--json", "--duration", "3",
                           env=env)
    finally:
        target.kill()
        target.wait()
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    stacks = report["probe_states"]["stacks"]
    assert stacks["state"] == "unavailable"
    assert f"AITOP_PY_SPY={missing} is not an executable file" in stacks["detail"]
    assert report["phases"] is None
    assert report["metrics"]["host_cpu_mean"] is not None


def _machine_has_nvidia_driver() -> bool:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return False
    pynvml.nvmlShutdown()
    return True


@pytest.mark.attach
def test_gpu_probe_reports_this_machine_as_it_is() -> None:
    """No driver is not an error (CPU machines); a driver is used (GPU machines).

    Runs the real CLI and asserts what is true of the machine it runs on, so the
    suite passes, and checks something real, on both kinds.
    """
    target = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        result = run_aitop("--pid", str(target.pid), "--headless", "--json", "--duration", "2")
    finally:
        target.kill()
        target.wait()
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    if _machine_has_nvidia_driver():
        assert report["probe_states"]["gpu"]["state"] == "ok", report["probes"]["gpu"]
        assert report["metrics"]["has_gpu"] == 1
        assert report["compute_device"] == "gpu"
    else:
        assert report["probe_states"]["gpu"] == {
            "state": "unavailable", "detail": report["probe_states"]["gpu"]["detail"]}
        assert report["probes"]["gpu"].startswith("unavailable: no NVIDIA driver")
        assert report["compute_device"] == "cpu"
        assert report["metrics"]["has_gpu"] == 0


def _rule_file(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "my-rules.yaml"
    path.write_text(text)
    return path


def test_rule_file_that_does_not_parse(tmp_path: Path) -> None:
    path = _rule_file(tmp_path, "rules:\n  - name: x\n    expr: [unclosed\n")
    result = run_aitop("--pid", str(os.getpid()), "--headless", "--rules", str(path))
    assert_one_line_error(result, "bad rule file", f"{path}:")
    assert result.returncode == 2


def test_rule_file_with_unknown_metric_names_file_and_line(tmp_path: Path) -> None:
    path = _rule_file(
        tmp_path,
        "rules:\n"
        "  - name: mine\n"
        "    expr: gpu_utilisation_mean < 50\n"
        "    severity: low\n"
        "    category: compute\n"
        "    title: t\n"
        "    source: {document: mine}\n",
    )
    result = run_aitop("--pid", str(os.getpid()), "--headless", "--rules", str(path))
    assert_one_line_error(result, f"{path}:3:", "unknown metric gpu_utilisation_mean")
    assert result.returncode == 2


def test_rule_file_missing(tmp_path: Path) -> None:
    result = run_aitop("--pid", "1", "--headless", "--rules", str(tmp_path / "nope.yaml"))
    assert_one_line_error(result, "rule file not found")


def test_replay_of_a_file_that_is_not_a_snapshot(tmp_path: Path) -> None:
    path = tmp_path / "notes.json"
    path.write_text('{"hello": 1}')
    result = run_aitop("replay", str(path), "--headless")
    assert_one_line_error(result)
    missing = run_aitop("replay", str(tmp_path / "absent.json"), "--headless")
    assert_one_line_error(missing)


def test_output_whose_reader_left_ends_quietly() -> None:
    """``aitop rules | head -1``: the reader gone before aitop writes is a quiet exit 1,
    neither a traceback nor "Exception ignored" at the flush on exit."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # nobody will read: every write to the pipe fails
    try:
        result = subprocess.run([sys.executable, "-m", "aitop.tui", "rules"], stdout=write_end,
                                stderr=subprocess.PIPE, text=True, timeout=60,
                                stdin=subprocess.DEVNULL)
    finally:
        os.close(write_end)
    assert result.returncode == 1
    assert result.stderr == "", result.stderr


def test_report_html_refuses_what_would_lose_the_recording(tmp_path: Path) -> None:
    """``aitop report``: a non-snapshot, --output without --html, or the page over the
    snapshot itself are one line each, and the snapshot is left as it was."""
    notes = tmp_path / "notes.json"
    notes.write_text('{"hello": 1}')
    assert_one_line_error(run_aitop("report", str(notes), "--html"))
    assert not (tmp_path / "notes.html").exists()
    result = run_aitop("report", str(notes), "-o", str(tmp_path / "x.html"))
    assert result.returncode == 2
    assert_one_line_error(result, "--output is for --html")
    snapshot = tmp_path / "run.json"
    write_snapshot(snapshot, live_source())
    before = snapshot.read_bytes()
    result = run_aitop("report", str(snapshot), "--html", "-o", str(snapshot))
    assert result.returncode == 2
    assert_one_line_error(result, "is the snapshot itself")
    assert snapshot.read_bytes() == before


@pytest.mark.parametrize(
    "command",
    [("--pid", "1", "--headless"), ("rules",)],
    ids=["attach", "rules-export"],
)
def test_the_cli_prints_every_problem_with_file_and_line(
    tmp_path: Path, command: tuple[str, ...]
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text(THREE_MISTAKES, encoding="utf-8")
    result = run_aitop(*command, "--rules", str(path), timeout=60)
    assert result.returncode == 2, result.stderr
    assert "Traceback" not in result.stderr
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert len(lines) == 3, result.stderr
    assert lines[0].startswith(f"aitop: bad rule file: {path}:3: ")
    assert lines[1].startswith(f"{path}:4: ") and lines[2].startswith(f"{path}:7: ")
