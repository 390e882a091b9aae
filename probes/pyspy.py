"""Running py-spy: finding the binary, building argument lists, explaining failures.

py-spy has no Python API, so aitop runs it as a subprocess. It is always run
``--nonblocking``: blocking mode pauses the target for every sample and has
slowed PyTorch jobs 5-15x (py-spy issue #872). Arguments are always passed as a
list (never a shell string), and py-spy's Rust backtraces are turned off so that
its first ``Error:`` line can be shown to the user as it is.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from .kernel.cgroups import read_cgroup_lines
from .kernel.procfs import PROC, process_uid, read_sysctl


def _in_container(proc_root: str = PROC) -> bool:
    """Whether we run inside a container (Docker/Podman markers or a container cgroup)."""
    if Path("/.dockerenv").exists() or Path("/run/.containerenv").exists():
        return True
    groups = " ".join(line.path for line in read_cgroup_lines(1, proc_root))
    return any(word in groups for word in ("docker", "kubepods", "containerd", "lxc"))


def ptrace_hint(pid: int) -> str:
    """What would let us attach, for this machine and this target.

    Across users only root helps (Yama or not); for the same user, Yama's
    ``ptrace_scope`` is the usual obstacle, and only where Yama exists; inside a
    container the capability ``SYS_PTRACE`` is needed as well.
    """
    hints: list[str] = []
    uid = process_uid(pid)
    if uid is not None and uid != os.geteuid():
        hints.append(f"the job runs as another user (uid {uid}): run aitop as that user or as root")
    else:
        hints.append("run aitop as root (sudo)")
        if read_sysctl("kernel/yama/ptrace_scope") is not None:
            hints.append("or allow ptrace with `sudo sysctl kernel.yama.ptrace_scope=0`")
    if _in_container():
        hints.append("and start the container with `--cap-add SYS_PTRACE`")
    return ", ".join(hints)


class PySpyError(Exception):
    """py-spy could not sample the target; the message says what to do."""

    #: ``missing``, ``permission``, ``not_python``, ``gone`` or ``failed``.
    kind: str = "failed"

    def __init__(self, message: str, kind: str = "failed") -> None:
        super().__init__(message)
        self.kind = kind


def find_pyspy() -> str | None:
    """The py-spy executable: $AITOP_PY_SPY, beside our interpreter (a venv), then PATH."""
    chosen = os.environ.get("AITOP_PY_SPY")
    if chosen is not None:
        return chosen if os.path.isfile(chosen) and os.access(chosen, os.X_OK) else None
    beside = Path(sys.executable).with_name("py-spy")
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    return shutil.which("py-spy")


def missing_pyspy_reason() -> str:
    """Why no py-spy was found, naming $AITOP_PY_SPY when that is what points nowhere."""
    chosen = os.environ.get("AITOP_PY_SPY")
    if chosen is not None:
        return (f"AITOP_PY_SPY={chosen} is not an executable file: fix or unset AITOP_PY_SPY "
                "(or `pip install py-spy`)")
    return "py-spy is not installed: `pip install py-spy` (aitop needs it for stacks)"


def require_pyspy() -> str:
    """Like :func:`find_pyspy`, but raise a PySpyError saying how to install it."""
    path = find_pyspy()
    if path is None:
        raise PySpyError(missing_pyspy_reason(), kind="missing")
    return path


def pyspy_env() -> dict[str, str]:
    """The environment for py-spy: ours, without Rust backtraces in its errors."""
    env = dict(os.environ)
    env["RUST_BACKTRACE"] = "0"
    return env


def classify_failure(pid: int, stderr: str) -> PySpyError:
    """Turn py-spy's stderr into one actionable line."""
    first = next(
        (ln.strip() for ln in stderr.splitlines() if ln.strip().startswith("Error:")),
        stderr.strip().splitlines()[0].strip() if stderr.strip() else "py-spy failed",
    )
    text = stderr.lower()
    if "permission denied" in text or "operation not permitted" in text:
        return PySpyError(
            f"cannot attach to PID {pid}: permission denied; {ptrace_hint(pid)}",
            kind="permission",
        )
    if "failed to find python version" in text or "not a python" in text:
        return PySpyError(
            f"PID {pid} does not look like a Python process (py-spy: "
            f"{first.removeprefix('Error: ')}); the Python processes here: pgrep -af python",
            kind="not_python",
        )
    if "no such file" in text or "no such process" in text or "check that the process" in text:
        return PySpyError(f"PID {pid} is gone (py-spy: {first})", kind="gone")
    return PySpyError(f"py-spy failed on PID {pid}: {first}", kind="failed")


def dump_args(binary: str, pid: int, *, locals_: bool) -> list[str]:
    """Arguments for one ``py-spy dump --json`` of the target."""
    args = [binary, "dump", "--pid", str(pid), "--nonblocking", "--json"]
    if locals_:
        args.append("--locals")
    return args


def record_args(binary: str, pid: int, *, rate: int, duration: int, output: str) -> list[str]:
    """Arguments for one ``py-spy record`` window in speedscope format.

    Speedscope keeps each thread's samples in the order they were taken (the
    collapsed format sums them): the step-cycle count (``probes.step_cycles``)
    and the step's anatomy (``probes.step_anatomy``) read that order, the phase
    shares read the sums. ``--idle`` keeps samples of threads that wait (a
    training thread blocked on the DataLoader queue is idle, and that wait is
    exactly what we measure); ``--threads``
    roots each stack in a frame naming its thread so we can pick the
    training thread; ``--full-filenames`` lets aitop read the job's own source
    lines (the names are shortened again when parsed).
    """
    return [
        binary,
        "record",
        "--pid",
        str(pid),
        "--nonblocking",
        "--idle",
        "--threads",
        "--full-filenames",
        "--format",
        "speedscope",
        "--rate",
        str(rate),
        "--duration",
        str(duration),
        "--output",
        output,
    ]


def run_dump(binary: str, pid: int, *, locals_: bool, timeout_s: float = 5.0) -> str:
    """Run one dump and return its JSON text, or raise a PySpyError."""
    try:
        proc = subprocess.run(
            dump_args(binary, pid, locals_=locals_),
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=pyspy_env(),
            check=False,
        )
    except subprocess.TimeoutExpired as exc:
        raise PySpyError(f"py-spy dump of PID {pid} took over {timeout_s:.0f} s") from exc
    except OSError as exc:
        raise PySpyError(f"cannot run py-spy: {exc}", kind="missing") from exc
    if proc.returncode != 0:
        raise classify_failure(pid, proc.stderr)
    return proc.stdout
