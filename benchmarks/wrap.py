"""Run a command and report, after it ends, the CPU time of it and all it started.

Usage: ``python -m benchmarks.wrap --out FILE -- COMMAND...``

Why a wrapper: ``getrusage(RUSAGE_CHILDREN)`` of a parent that has waited for
its child includes every descendant the child waited for (aitop's reaped py-spy
runs). This process also makes itself a *child subreaper*, so a py-spy that aitop
left behind is re-parented here instead of to init, and is waited for and counted
too: nothing aitop starts escapes the total. The wrapper's own (tiny) CPU time is
not included. It writes ``FILE.pid`` with the command's PID as soon as it has
started it (so the benchmark can sample the live tree) and ``FILE`` as JSON at the end.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import resource
import subprocess
import time
from pathlib import Path

PR_SET_CHILD_SUBREAPER = 36


def become_subreaper() -> bool:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    subreaper = become_subreaper()
    started = time.time()
    child = subprocess.Popen(command)
    tmp = args.out.with_suffix(".pid.tmp")
    tmp.write_text(f"{child.pid} {started}\n")
    tmp.replace(args.out.with_suffix(".pid"))
    returncode = child.wait()
    ended = time.time()
    # Reap whatever the command left behind (re-parented to us as subreaper).
    orphans = 0
    while True:
        try:
            os.wait()
            orphans += 1
        except ChildProcessError:
            break
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = {
        "pid": child.pid,
        "returncode": returncode,
        "started": started,
        "ended": ended,
        "cpu_user_s": usage.ru_utime,
        "cpu_system_s": usage.ru_stime,
        "cpu_s": usage.ru_utime + usage.ru_stime,
        "orphans_reaped": orphans,
        "subreaper": subreaper,
    }
    tmp = args.out.with_suffix(".tmp")
    tmp.write_text(json.dumps(result))
    tmp.replace(args.out)
    return returncode


if __name__ == "__main__":
    raise SystemExit(main())
