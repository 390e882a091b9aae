"""Where a job's output goes when it is a pipe: the file the pipe's reader writes.

Real processes joined by real pipes, as a shell joins ``python train.py | tee
LOG``: the job prints, ``tee`` (or ``cat | tee``) writes the file, and aitop
finds that file through /proc without ever reading the pipe.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import psutil
from aitop.probes.job_log import JobLogs, find_logs
from aitop.probes.pipes import follow_pipe, written_files

#: A job that prints a step line every 50 ms, flushed, until killed.
PRINTS = ("import time\nfor i in range(100000):\n"
          "    print(f'step {i} | loss 0.5', flush=True)\n    time.sleep(0.05)\n")


@contextmanager
def pipeline(*readers: Sequence[str], job: str = PRINTS,
             last_out: Path | None = None) -> Iterator[subprocess.Popen[bytes]]:
    """``python -c JOB | reader | reader ...``: the job's process, all stopped after."""
    procs: list[subprocess.Popen[bytes]] = []
    first = subprocess.Popen([sys.executable, "-c", job], stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    procs.append(first)
    upstream = first.stdout
    try:
        for i, argv in enumerate(readers):
            last = i == len(readers) - 1
            out = (last_out.open("wb") if last and last_out else
                   subprocess.DEVNULL if last else subprocess.PIPE)
            proc = subprocess.Popen(list(argv), stdin=upstream, stdout=out)
            if last and last_out:
                out.close()  # type: ignore[union-attr]
            assert upstream is not None
            upstream.close()  # the reader holds the read end, as a shell leaves it
            upstream = proc.stdout
            procs.append(proc)
        # Ready once the job's first lines reached the files the readers write (a
        # step count needs a few to rise), or, where none does, once the job wrote.
        files = [Path(a) for argv in readers if argv[0] == "tee" for a in argv[1:]]
        files += [last_out] if last_out else []
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and not _written(first.pid, files):
            time.sleep(0.02)
        yield first
    finally:
        for proc in procs:
            proc.kill()
            proc.wait()


#: Lines in a reader's file before a test reads it.
LINES_READY = 4


def _written(pid: int, files: Sequence[Path]) -> bool:
    if files:
        return all(f.exists() and f.read_bytes().count(b"\n") >= LINES_READY for f in files)
    return psutil.Process(pid).io_counters().write_chars > 0


def test_the_file_tee_writes_is_the_jobs_log(tmp_path: Path) -> None:
    log = tmp_path / "train.log"
    with pipeline(["tee", str(log)]) as job:
        found = find_logs(job.pid)
        assert [f.name for f in found.files] == [str(log)], found
        assert found.files[0].via is not None and found.files[0].via.startswith("tee (PID ")
        logs = JobLogs(found)
        first = logs.read()
        time.sleep(0.3)
        second = logs.read()
    assert first is not None and second is not None, logs.status()
    assert first.name == "step (job log)" and second.value > first.value  # type: ignore[operator]
    # aitop never took a line from the pipe: tee wrote every one, in order.
    lines = log.read_text().splitlines()
    assert lines[:3] == ["step 0 | loss 0.5", "step 1 | loss 0.5", "step 2 | loss 0.5"]
    assert [int(x.split()[1]) for x in lines] == list(range(len(lines)))


def test_a_reader_whose_output_is_a_pipe_again_is_followed(tmp_path: Path) -> None:
    """``job | cat | tee LOG``: cat writes no file; tee, reading cat, does."""
    log = tmp_path / "train.log"
    with pipeline(["cat"], ["tee", str(log)]) as job:
        followed = follow_pipe(job.pid, 1)
    assert [f.name for f in followed.files] == [str(log)]
    assert [r.split(" ")[0] for r in followed.readers] == ["cat", "tee"]


def test_a_reader_redirected_to_a_file_writes_it_on_its_stdout(tmp_path: Path) -> None:
    """``job | cat > LOG`` (a timestamper writing to its stdout): the file is the
    reader's stdout."""
    log = tmp_path / "train.log"
    with pipeline(["cat"], last_out=log) as job:
        found = find_logs(job.pid)
    assert [f.name for f in found.files] == [str(log)]


def test_a_pipe_whose_reader_writes_no_file_says_so() -> None:
    with pipeline(["cat"]) as job:  # cat > /dev/null
        found = find_logs(job.pid)
    assert found.files == []
    assert found.reason is not None and "stdout is a pipe read by cat (PID " in found.reason
    assert "which writes no file" in found.reason


def test_output_to_nowhere_falls_back_to_the_files_the_job_writes(tmp_path: Path) -> None:
    own = tmp_path / "own.log"
    code = f"import time\nf = open({str(own)!r}, 'a')\ntime.sleep(30)\n"
    with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.DEVNULL,
                          stderr=subprocess.DEVNULL) as job:
        try:
            for _ in range(100):
                if written_files(job.pid):
                    break
                time.sleep(0.05)
            found = find_logs(job.pid)
        finally:
            job.kill()
    assert [f.name for f in found.files] == [str(own)]
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as quiet:
        try:
            nothing = find_logs(quiet.pid)
        finally:
            quiet.kill()
    assert nothing.files == []
    assert nothing.reason == ("stdout is /dev/null; stderr is /dev/null; "
                              "the job writes no other file")
