"""Reading the job's own source lines, to tell what a line of its loop does.

A stack sample says *where* the training thread is, not what that line does.
Two questions matter and the line's text answers both, for any loop shape:

* Is the loop frame at the statement that fetches the next batch (``for x, y in
  batches():``, ``batch = next(it)``, ``x, y = get_batch("train")``)? Then
  whatever runs beneath it (a DataLoader, a generator around one, a queue fed
  by a producer thread, the job's own function slicing a dataset) is the loop
  waiting for data.
* Is the thread, in the job's own code, at a call that makes the host wait for
  the GPU (``.item()``, ``.cpu()``, ``.tolist()``, ``torch.cuda.synchronize()``)?
  Then the time is the device finishing queued work, not Python overhead.
* Is it, in the function that called ``torch.save``, at the flush, fsync or
  rename that makes the checkpoint durable? Then that is checkpoint time too.

Files are read through ``/proc/PID/root`` so a job in a container is read from
its own filesystem. Only regular files under a size cap are read, once each,
and a bounded number are kept.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable

from .kernel.process_files import in_root, read_bounded
from .kernel.procfs import PROC

#: Reads line ``n`` (1-based) of a file in the target, or None (``SourceLines.line``).
SourceReader = Callable[[str, int], "str | None"]
#: Larger files are not read (a generated module, not a training script).
MAX_FILE_BYTES = 2_000_000
#: Files whose lines are kept in memory at once.
MAX_FILES = 128

_FETCH = re.compile(r"^\s*(?:async\s+)?for\b.+\bin\b.+:|\bnext\s*\(|\b__next__\s*\(")
#: A call named for producing a batch, assigned from: ``x, y = get_batch("train")``
#: (nanoGPT, pytorch/examples' word_language_model), ``batch = load_batch(i)``.
#: The verb names what the call does; ``train_batch(...)`` or ``eval_batch(...)``
#: run the step on one and are no fetch, nor are ``generate_``/``sample_batch``,
#: which in a GAN or a diffusion model run the model itself.
_BATCH_CALL = re.compile(
    r"^[^#=]*[\w\])]\s*=\s*(?:[\w.]+\.)?_?"
    r"(?:get|next|load|fetch|make|build|read|draw|prepare|create)"
    r"_(?:\w+_)?batch(?:es)?\s*\("
)
_HOST_SYNC = re.compile(
    r"\.(?:item|cpu|tolist|numpy)\s*\(\s*\)"
    r"|\bsynchronize\s*\("
    r"|\.to\(\s*(?:device\s*=\s*)?['\"]cpu['\"]"
)


def without_comment(text: str) -> str:
    """A source line's code, its ``#`` comment cut off."""
    return text.split("#", 1)[0]


def is_fetch_line(text: str) -> bool:
    """A ``for ... in ...:`` header, an explicit ``next(...)`` or an assignment from
    a call named for producing a batch (``get_batch(...)``): the next batch."""
    code = without_comment(text)
    return bool(_FETCH.search(code) or _BATCH_CALL.search(code))


def is_host_sync_line(text: str) -> bool:
    """A call that copies a device value to the host or waits for the device."""
    code = without_comment(text)
    return bool(_HOST_SYNC.search(code))


#: Calls that make a just-written file durable or put it in place.
_DURABLE_WRITE = re.compile(
    r"\bos\.(?:fsync|fdatasync|replace|rename)\s*\("
    r"|\.flush\s*\(\s*\)"
    r"|\bshutil\.(?:move|copy\w*)\s*\("
)


def is_durable_write_line(text: str) -> bool:
    """``os.fsync(f.fileno())``, ``f.flush()``, ``os.replace(tmp, path)``...: the
    part of saving a file that runs after the serializer has returned."""
    code = without_comment(text)
    return bool(_DURABLE_WRITE.search(code))


class SourceLines:
    """Lines of the target's source files, read lazily and cached."""

    def __init__(self, pid: int, proc_root: str = PROC) -> None:
        self.pid = pid
        self.proc_root = proc_root
        self._files: OrderedDict[str, tuple[str, ...] | None] = OrderedDict()

    def line(self, path: str, lineno: int) -> str | None:
        """Line ``lineno`` (1-based) of an absolute ``path`` in the target, or None."""
        if not path.startswith("/") or lineno < 1:
            return None
        lines = self._lines(path)
        if lines is None or lineno > len(lines):
            return None
        return lines[lineno - 1]

    def _lines(self, path: str) -> tuple[str, ...] | None:
        if path in self._files:
            self._files.move_to_end(path)
            return self._files[path]
        lines = read_lines(in_root(self.pid, path, self.proc_root))
        self._files[path] = lines
        if len(self._files) > MAX_FILES:
            self._files.popitem(last=False)
        return lines


def read_lines(full: str, max_bytes: int = MAX_FILE_BYTES) -> tuple[str, ...] | None:
    """The lines of a regular file of at most ``max_bytes``, else None (read through
    ``process_files.read_bounded``: a FIFO or device a job names never stalls it)."""
    found = read_bounded(full, max_bytes, whole=True)
    return None if found is None else tuple(
        found.data.decode("utf-8", errors="replace").splitlines())
