"""The blocks that enclose a line of the job's source: its loops, and whether
gradients are off there.

A stack sample gives a frame's line, not the statements around it. Reading the
lines above it, each one indented less than the last is a header of a block
that holds it: ``for``/``while`` loops, ``with torch.no_grad():`` and the
``def`` it stands in (with the decorators above it, ``@torch.no_grad()``).
That is enough to tell an evaluation pass written inline from the step it
sits beside (``evaluation_lines``): forward passes repeated in a loop of their
own over data (``for x, y in val_loader``, not ``for t in range(num_steps)``,
which is how rollouts and token-by-token generation loop), which runs no
backward, with gradients off.

Only the lines are read, through the same reader as every other source line
(``source_lines.SourceLines``), and the scan stops at the enclosing ``def`` or
``class``, at module level, or after ``MAX_SCAN_LINES``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from .source_lines import SourceReader, without_comment

#: Lines above a frame's line that are read at most (a long module-level script
#: still finds its loop; a generated file is not read to its top).
MAX_SCAN_LINES = 400
#: Frames of a comprehension or generator expression: a loop of their own.
COMPREHENSIONS = frozenset({"<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>"})

_LOOP = re.compile(r"^(?:async\s+)?(?:for|while)\b")
_WITH = re.compile(r"^(?:async\s+)?with\b")
_NO_GRAD = re.compile(r"\b(?:no_grad|inference_mode)\s*\(")
_DEF = re.compile(r"^(?:async\s+)?def\b")
_CLASS = re.compile(r"^class\b")
_FOR_CLAUSE = re.compile(r"\bfor\b.+?\bin\b(.*?)(?=\bfor\b|\bif\b|$)")
_COUNTER = re.compile(r"\b(?:range|trange|count)\s*\(")
_COMPOUND = re.compile(
    r"^(?:async\s+)?(?:for|while|with|def|class|if|elif|else|try|except|finally|match|case)\b")


@dataclass(frozen=True, slots=True)
class Blocks:
    """What encloses one line within its function (or module).

    ``loops``: the line numbers of the loop headers that hold it, innermost
    first; the line itself comes first when it is a loop header.
    ``data_loops``: those of them whose ``for`` takes its items from anything
    but ``range``/``count`` (``while`` loops count nothing).
    ``gradients_off``: a ``with torch.no_grad()`` / ``torch.inference_mode()``
    block holds it, or its function is decorated with one.
    """

    loops: tuple[int, ...]
    data_loops: frozenset[int]
    gradients_off: bool


def iterates_over_data(code: str) -> bool:
    """Whether a ``for`` statement or comprehension takes its items from data:
    ``for a, b in val``, ``enumerate(loader)``, not ``range(n)`` or ``count()``."""
    return any(not _COUNTER.search(iterable) for iterable in _FOR_CLAUSE.findall(code))


def _indent(text: str) -> int:
    return len(text) - len(text.lstrip(" \t"))


def _decorated_without_gradients(read: SourceReader, file: str, def_line: int) -> bool:
    """Whether the decorators right above a ``def`` turn gradients off."""
    n = def_line - 1
    while n >= 1:
        text = read(file, n)
        if text is None:
            return False
        code = without_comment(text).strip()
        if not code.startswith("@"):
            return False
        if _NO_GRAD.search(code):
            return True
        n -= 1
    return False


def enclosing_blocks(read: SourceReader, file: str, line: int) -> Blocks | None:
    """The loops and gradient mode around ``line`` of ``file``; None if unreadable."""
    text = read(file, line)
    if text is None:
        return None
    own = without_comment(text).strip()
    loops: list[int] = [line] if _LOOP.match(own) else []
    data_loops = {line} if loops and iterates_over_data(own) else set()
    gradients_off = bool(_WITH.match(own) and _NO_GRAD.search(own))
    indent = _indent(text)
    n = line - 1
    while n >= 1 and indent > 0 and line - n <= MAX_SCAN_LINES:
        above = read(file, n)
        if above is None:
            break
        code = without_comment(above).strip()
        if code and _indent(above) < indent and _COMPOUND.match(code):
            indent = _indent(above)
            if _LOOP.match(code):
                loops.append(n)
                if iterates_over_data(code):
                    data_loops.add(n)
            elif _WITH.match(code) and _NO_GRAD.search(code):
                gradients_off = True
            elif _DEF.match(code):
                gradients_off = gradients_off or _decorated_without_gradients(read, file, n)
                break
            elif _CLASS.match(code):
                break
        n -= 1
    return Blocks(tuple(loops), frozenset(data_loops), gradients_off)


class BlockReader:
    """``enclosing_blocks`` with each (file, line) read once per window."""

    def __init__(self, read: SourceReader) -> None:
        self._read = read
        self._seen: dict[tuple[str, int], Blocks | None] = {}

    def text(self, file: str, line: int) -> str | None:
        """Line ``line`` of ``file`` itself, through the same reader."""
        return self._read(file, line)

    def __call__(self, file: str, line: int) -> Blocks | None:
        key = (file, line)
        if key not in self._seen:
            self._seen[key] = enclosing_blocks(self._read, file, line)
        return self._seen[key]
