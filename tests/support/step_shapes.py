"""Training loops of the shapes whose steps/s aitop must read without
instrumentation, started the way people start them, with their own truth.

Each shape is a real PyTorch loop under ``tests/support/workloads/`` that times
its own steps to a truth file (``aitop.demo.truth``): a loop without a counter,
``while True:``, slow steps, short epochs, a quiet server, and a printing
script whose output goes to a file, through ``tee``, through a timestamper.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from support.processes import keep_log, new_log, stop_tree

WORKLOADS = Path(__file__).resolve().parent / "workloads"


@dataclass
class Running:
    """A started shape: the job aitop attaches to, and every process around it."""

    job: subprocess.Popen[bytes]
    truth: Path
    log: Path
    others: list[subprocess.Popen[bytes]] = field(default_factory=list)

    def stop(self) -> None:
        """The job with its DataLoader workers, then its readers and clients."""
        for proc in (self.job, *self.others):
            stop_tree(proc)


@dataclass(frozen=True)
class Shape:
    """One loop: its script and arguments, and where its output goes."""

    name: str
    script: str
    args: tuple[str, ...] = ()
    #: ``file`` (stdout is a regular file), ``tee`` (``| tee LOG``), ``ts`` (``| ts > LOG``),
    #: ``stamper`` (``| python -u timestamper.py LOG``), ``null`` (``> /dev/null``, stderr
    #: to a log the test keeps: it holds no step).
    output: str = "null"
    #: Started with ``python -u`` (unbuffered, as people pipe training output).
    unbuffered: bool = False
    #: A client process sending requests (the server shape).
    client: bool = False


def _python(shape: Shape) -> list[str]:
    return [sys.executable, *(["-u"] if shape.unbuffered else []), str(WORKLOADS / shape.script)]


def start(shape: Shape, workdir: Path, duration_s: float = 90.0) -> Running:
    """Start a shape and wait until its truth file shows it stepping."""
    truth = workdir / f"{shape.name}.jsonl"
    log = workdir / f"{shape.name}.log"
    argv = [*_python(shape), "--truth", str(truth), "--duration", str(duration_s), *shape.args]
    others: list[subprocess.Popen[bytes]] = []
    if shape.client:
        argv += ["--port-file", str(workdir / "port")]
    if shape.output == "file":
        keep_log(log)
        with log.open("wb") as out:
            job = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL)
    elif shape.output in ("tee", "ts", "stamper"):
        keep_log(log)
        job = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                               stdin=subprocess.DEVNULL)
        assert job.stdout is not None
        if shape.output == "tee":
            reader = subprocess.Popen(["tee", str(log)], stdin=job.stdout,
                                      stdout=subprocess.DEVNULL)
        elif shape.output == "ts":
            with log.open("wb") as out:
                reader = subprocess.Popen(["ts", "%Y-%m-%d %H:%M:%.S"], stdin=job.stdout,
                                          stdout=out)
        else:
            reader = subprocess.Popen(
                [sys.executable, "-u", str(WORKLOADS / "timestamper.py"), str(log)],
                stdin=job.stdout, stdout=subprocess.DEVNULL)
        job.stdout.close()  # the reader holds the pipe's read end, as a shell leaves it
        others.append(reader)
    else:
        with keep_log(new_log(shape.name)).open("wb") as err:
            job = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err,
                                   stdin=subprocess.DEVNULL)
    running = Running(job, truth, log, others)
    try:
        _wait_stepping(running, workdir, shape)
    except BaseException:
        running.stop()
        raise
    return running


def _wait_stepping(running: Running, workdir: Path, shape: Shape) -> None:
    deadline = time.time() + 60
    client_started = False
    while time.time() < deadline:
        if running.job.poll() is not None:
            raise AssertionError(f"{shape.name} exited with {running.job.returncode}")
        if shape.client and not client_started and (workdir / "port").exists():
            port = (workdir / "port").read_text().strip()
            if port:
                with keep_log(new_log("client")).open("wb") as out:
                    running.others.append(subprocess.Popen(
                        [sys.executable, str(WORKLOADS / "server_client.py"), port],
                        stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
                client_started = True
        if len(read_truth(running.truth)) >= 2:
            return
        time.sleep(0.2)
    raise AssertionError(f"{shape.name} did not start stepping within 60 s")


def read_truth(truth: Path) -> list[dict[str, float]]:
    if not truth.exists():
        return []
    out = []
    for line in truth.read_text().splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a line being written
    return out


def true_rate(truth: Path, t0: float, t1: float) -> float:
    """Steps per second the job recorded between its first and last record in
    ``[t0, t1]``: the inverse of its mean step time there (a slow loop records
    each step's end, so the span runs from one step's end to another's)."""
    records = [r for r in read_truth(truth) if t0 <= r["t"] <= t1]
    assert len(records) >= 2, f"the truth holds {len(records)} record(s) in the span"
    first, last = records[0], records[-1]
    assert last["t"] - first["t"] > 1.0, "the truth covers less than a second"
    return (last["steps"] - first["steps"]) / (last["t"] - first["t"])
