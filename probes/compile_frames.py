"""What torch.compile is compiling, read from dynamo's own frames in a locals dump.

While dynamo compiles a frame, the training thread's stack holds
``torch/_dynamo/convert_frame.py``'s ``ConvertFrameAssert.__call__`` (its local
``info`` names the function being compiled: ``"forward /job/model.py:12"``) and
``_compile`` (its local ``recompile_reason`` is ``None`` on a frame's first
compilation, and on a recompilation the guard that failed, prefixed with the
compile id: ``"0/18: tensor 'x' size mismatch at index 1. expected 34, actual
35"``, the 19th compilation of frame 0). The step probe's ``py-spy dump
--locals`` already holds them: a recompilation is seen without ``TORCH_LOGS``,
with the frame it recompiles and why. A release whose frames lack these
locals gives "a frame" and no reason; the stacks' compile phase still counts
the time.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from .phases import shorten_path
from .redact import redact_text
from .samples import LogEvent

#: The file whose frames carry the locals.
CONVERT_FRAME = "torch/_dynamo/convert_frame.py"
#: ``LogEvent.kind`` of a sighting: a frame's first compilation, or a recompilation.
COMPILE_EVENT = "compile"
RECOMPILE_EVENT = "recompile"
#: Characters kept of a failed guard.
MAX_REASON_CHARS = 200
#: ``"0/18: reason"``: frame 0's compilation number 18 (0 is the first).
_COMPILE_ID = re.compile(r"^\s*(\d+)/(\d+)(?:_\d+)?:\s*")
#: ``info``: ``"<function> <file>:<line>"``.
_INFO = re.compile(r"^(?P<function>\S+) (?P<file>.+):(?P<line>\d+)$")


def _unquote(text: str | None) -> str | None:
    """A str local as py-spy shows it (its repr, in quotes), without the quotes."""
    if not text or text[0] not in "'\"" or text[-1] != text[0]:
        return None
    body = text[1:-1]
    return body.replace('\\"', '"').replace("\\'", "'").replace("\\\\", "\\")


def _local(frame: dict[str, Any], name: str) -> str | None:
    for local in frame.get("locals") or []:
        if local.get("name") == name:
            value = local.get("repr")
            return value if isinstance(value, str) else None
    return None


def compiled_function(info: str | None) -> str | None:
    """``"forward /job/model.py:12"`` -> ``"forward (model.py:12)"``."""
    found = _INFO.match(info or "")
    if found is None:
        return None
    where = shorten_path(found["file"]).rsplit("/", 1)[-1]
    return f"{found['function']} ({where}:{found['line']})"


def compile_number(reason: str) -> tuple[int, int] | None:
    """The frame id and the compilation's number from a reason's ``"0/18: "`` prefix."""
    found = _COMPILE_ID.match(reason)
    return (int(found[1]), int(found[2])) if found else None


def compile_sightings(dump: Sequence[dict[str, Any]], t: float,
                      thread_id: str | None = None) -> list[LogEvent]:
    """A ``compile`` or ``recompile`` event per thread compiling in ``dump``.

    ``subject`` is the function being compiled (or "a frame" where ``info`` is
    not shown); a recompilation's ``text`` is its compile id and failed guard
    (``"0/18: tensor 'x' size mismatch ..."``), a first compilation's is empty.
    Only ``thread_id``'s thread when given.
    """
    events: list[LogEvent] = []
    for thread in dump:
        if thread_id is not None and str(thread.get("os_thread_id")) != thread_id:
            continue
        info: str | None = None
        reason: str | None = None
        compiling = False
        for frame in thread.get("frames") or []:
            if not str(frame.get("filename") or "").endswith(CONVERT_FRAME):
                continue
            name = str(frame.get("name") or "")
            if name.endswith("ConvertFrameAssert.__call__") and info is None:
                info = _unquote(_local(frame, "info"))
                compiling = True
            elif name == "_compile" and reason is None:
                reason = _unquote(_local(frame, "recompile_reason"))
                compiling = True
        if not compiling:
            continue
        subject = redact_text(compiled_function(info) or "a frame")
        if reason:
            events.append(LogEvent(t, RECOMPILE_EVENT, subject,
                                   redact_text(reason)[:MAX_REASON_CHARS]))
        else:
            events.append(LogEvent(t, COMPILE_EVENT, subject, ""))
    return events
