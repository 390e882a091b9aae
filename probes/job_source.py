"""What the job's own files say it does, where its stacks cannot show it.

Mixed precision is the case in point: ``torch.autocast`` is a context manager,
entered once per step in a few microseconds, so stack samples almost never
catch it; a job in ``autocast(dtype=torch.bfloat16)`` samples like one without.
Advice to "enable mixed precision" needs a better look: the script the job
runs, the config files its command line names, and the command line itself
(``--bf16``, ``precision=16-mixed``). Files are read through
``/proc/PID/root`` (a job in a container is read from its own filesystem),
relative paths from its working directory, each a regular file under a size
cap (``source_lines.read_lines``: a FIFO named on a command line never blocks).
"""

from __future__ import annotations

import os
import re

from .kernel.process_files import in_root
from .kernel.procfs import PROC, read_link
from .source_lines import read_lines

#: Larger files are not read (a generated module, a data file).
MAX_FILE_BYTES = 1_000_000
#: File names on a command line that may hold the job's settings.
SETTINGS_SUFFIXES = (".py", ".yaml", ".yml", ".json", ".toml", ".cfg", ".ini")

MIXED_PRECISION = re.compile(
    r"\bautocast\b|\bGradScaler\b|torch\.(?:bfloat16|float16|half)\b|\.half\(\)"
    r"|\bbf16\b\s*[=:]\s*(?:True|true|1)|\bfp16\b\s*[=:]\s*(?:True|true|1)"
    r"|\bprecision\b\s*[=:]\s*[\"']?(?:16|bf16|b?f16-mixed|16-mixed|bf16-true)"
    r"|\bmixed_precision\b\s*[=:]\s*[\"']?(?:fp16|bf16|fp8)"
    r"|--(?:bf16|fp16|amp)\b|--mixed[_-]precision[= ]+(?:fp16|bf16|fp8)"
)


def uses_mixed_precision(text: str) -> bool:
    """Whether a script, config or command line asks for mixed precision."""
    return bool(MIXED_PRECISION.search(text))


def settings_files(cmdline: tuple[str, ...], cwd: str | None) -> list[str]:
    """Absolute paths of the script and settings files a command line names."""
    out = []
    for arg in cmdline[1:]:
        value = arg.split("=", 1)[-1]
        if value.endswith(SETTINGS_SUFFIXES):
            if not value.startswith("/"):
                if cwd is None:
                    continue
                value = os.path.join(cwd, value)
            out.append(value)
    return out


def mixed_precision_in_source(pid: int, cmdline: tuple[str, ...],
                              proc_root: str = PROC) -> bool | None:
    """Whether the job's command line or the files it names ask for mixed precision.

    None when there was nothing to read (no script on the command line, files
    not readable): the advice then says "if the job does not already use it".
    """
    if uses_mixed_precision(" ".join(cmdline)):
        return True
    cwd = read_link(pid, "cwd", proc_root=proc_root)
    read_any = False
    for path in settings_files(cmdline, cwd):
        lines = read_lines(in_root(pid, path, proc_root), MAX_FILE_BYTES)
        if lines is None:
            continue
        read_any = True
        if uses_mixed_precision("\n".join(lines)):
            return True
    return False if read_any else None
