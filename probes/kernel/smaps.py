"""A process's memory by kind, from ``/proc/PID/smaps_rollup`` (Linux 4.14+).

RSS counts every page a process has resident, shared ones in full: forked
DataLoader workers share their parent's pages until they write to them, so
their RSS adds up to far more than the machine holds. ``smaps_rollup`` splits
it: PSS shares each shared page among the processes that map it (PSS adds up
across processes), USS is what the process alone holds (its private clean and
dirty pages: what exiting would free), and swap is what was pushed out. The
file is summed over all mappings by the kernel in one read; reading it needs
the same rights as ptrace-reading the process. A reader only: judging is
``knowledge/``'s.
"""

from __future__ import annotations

from dataclasses import dataclass

from .procfs import PROC, Pid, read_file


@dataclass(frozen=True, slots=True)
class SmapsRollup:
    """One process's memory by kind, in bytes; a field the kernel omits is ``None``."""

    rss_bytes: int | None
    pss_bytes: int | None
    #: Unique set size: ``Private_Clean + Private_Dirty``.
    uss_bytes: int | None
    shared_clean_bytes: int | None
    shared_dirty_bytes: int | None
    swap_bytes: int | None


def parse_smaps_rollup(text: str) -> SmapsRollup:
    """``smaps_rollup`` text (``Key:   N kB`` lines after a header) -> bytes by kind."""
    kb: dict[str, int] = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        fields = value.split()
        if sep and len(fields) == 2 and fields[1] == "kB" and fields[0].isdigit():
            kb[key] = int(fields[0]) * 1024

    private = [kb.get("Private_Clean"), kb.get("Private_Dirty")]
    return SmapsRollup(
        rss_bytes=kb.get("Rss"),
        pss_bytes=kb.get("Pss"),
        uss_bytes=None if None in private else sum(x for x in private if x is not None),
        shared_clean_bytes=kb.get("Shared_Clean"),
        shared_dirty_bytes=kb.get("Shared_Dirty"),
        swap_bytes=kb.get("Swap"),
    )


def read_smaps_rollup(pid: Pid, proc_root: str = PROC) -> SmapsRollup | None:
    """``pid``'s memory by kind, ``None`` when the file cannot be read (gone, another
    user's process, a kernel before 4.14)."""
    text = read_file(pid, "smaps_rollup", proc_root=proc_root)
    return None if not text else parse_smaps_rollup(text)
