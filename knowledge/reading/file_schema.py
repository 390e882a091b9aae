"""Reading a knowledge-base file against its schema: every problem, each at its line.

One reader serves every knowledge file (rules, phases, documents), so a mistake
reads the same wherever it is made: ``file:line: what: problem``, with ``what``
naming the item (``rule 'x' gain``, ``symptoms[2]``) and the line that of the
offending key, list item or mapping.

The reader never stops at the first problem. A field that is wrong is reported
and read as a neutral stand-in (empty text, zero, no items) so that the rest of
the file is still checked; :meth:`Reader.done` then raises one
:class:`KnowledgeError` listing them all, before any stand-in can be used. Checks
that compare items with each other (dangling ids, duplicates) skip stand-ins, so
one mistake is one problem, not a cascade.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Collection, Iterable

from .yamlio import MAX_PROBLEMS, KnowledgeError, Located, LocatedList, Problem, one_line

_DURATION_RE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h)?\s*$")
_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0, None: 1.0}
_ID = re.compile(r"^[a-z][a-z0-9_]*$")


def _said(what: str, problem: str) -> str:
    """``what: problem``, or the problem alone for a file's top level."""
    return f"{what}: {problem}" if what else problem


def kind_of(value: object) -> str:
    """What a YAML value is, in the words a rule author would use (not LocatedList)."""
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    return f"{type(value).__name__} {value!r}"


class Reader:
    """Collects the problems of one file; each reading method reports and goes on."""

    def __init__(self, file: str) -> None:
        self.file = file
        self.problems: list[Problem] = []

    # -- reporting ----------------------------------------------------------------
    def report(self, at: object, message: str) -> None:
        """Note a problem at ``at``: a line number, a located mapping or list, or None."""
        if len(self.problems) > MAX_PROBLEMS:
            return  # enough to act on; KnowledgeError.of says how many more
        file, line = self.file, None
        if isinstance(at, bool):
            pass
        elif isinstance(at, int):
            line = at or None
        elif isinstance(at, (Located, LocatedList)):
            file, line = at.file or self.file, at.line or None
        self.problems.append(Problem(one_line(message), file, line))

    def done(self) -> None:
        """Raise every problem noted so far as one KnowledgeError, in the file's order."""
        if self.problems:
            raise KnowledgeError.of(in_order(self.problems))

    @property
    def ok(self) -> bool:
        return not self.problems

    # -- where --------------------------------------------------------------------
    @staticmethod
    def line(m: object, key: str) -> int:
        """Line of ``key``'s value in a mapping (where a wrong value is), else the mapping's."""
        if isinstance(m, Located):
            return m.lines.get(key, m.line)
        return 0

    @staticmethod
    def key_line(m: Located, key: str) -> int:
        """Line of ``key`` itself (where a misspelt key is)."""
        return m.key_lines.get(key, m.line)

    # -- structure ----------------------------------------------------------------
    def mapping(self, value: object, at: object, what: str) -> Located | None:
        if isinstance(value, Located):
            return value
        self.report(at, f"{what}: expected a mapping, not {kind_of(value)}")
        return None

    def keys(
        self, m: Located, what: str, required: Iterable[str] = (), optional: Iterable[str] = ()
    ) -> bool:
        """Report missing and unknown keys (with a did-you-mean); False if one is missing.

        As Prometheus' rule parser does: a misspelt ``keep_firing_for`` must not be
        silently ignored, or the rule runs without the hysteresis its author wrote.
        """
        needed = list(required)
        known = [*needed, *optional]
        missing = [k for k in needed if k not in m]
        for key in m:
            if key in known:
                continue
            close = difflib.get_close_matches(str(key), known, n=1)
            hint = f" (did you mean '{close[0]}'?)" if close else f" (expected {', '.join(known)})"
            self.report(self.key_line(m, key), f"{what}: unknown key '{key}'{hint}")
            if close and close[0] in missing:
                missing.remove(close[0])  # one misspelling, one problem
        for key in missing:
            self.report(m, f"{what}: missing key '{key}'")
        return not [k for k in needed if k not in m]

    def items(self, m: Located, key: str, what: str) -> list[tuple[Located, str]]:
        """``m[key]``: a list of mappings (absent: none), each with its label for messages."""
        value = m.get(key)
        if value is None or value == []:
            return []
        if not isinstance(value, LocatedList):
            self.report(self.line(m, key), _said(
                what, f"'{key}' must be a list of mappings (each item starts with '- ')"))
            return []
        out = []
        for index, (item, line) in enumerate(zip(value, value.lines, strict=True)):
            label = f"{key}[{index}]" if what == "" else f"{what}.{key}[{index}]"
            if isinstance(item, Located):
                out.append((item, label))
            else:
                self.report(line, f"{label}: each item of '{key}' must be a mapping, "
                                  f"not {type(item).__name__}")
        return out

    def sequence(self, m: Located, key: str, what: str) -> LocatedList | None:
        value = m.get(key)
        if value is None:
            return None
        if isinstance(value, LocatedList):
            return value
        self.report(self.line(m, key), f"{what}: '{key}' must be a list, not {kind_of(value)}")
        return None

    # -- scalars --------------------------------------------------------------------
    def text(self, m: Located, key: str, what: str, *, empty: bool = False) -> str:
        """Required text (present: ``keys`` reports it missing); "" when it is not."""
        value = m.get(key)
        if key not in m:
            return ""
        if not isinstance(value, str):
            self.report(self.line(m, key), f"{what}: '{key}' must be text, not {kind_of(value)}")
            return ""
        if not empty and not value.strip():
            self.report(self.line(m, key), f"{what}: '{key}' must not be empty")
        return value

    def opt_text(self, m: Located, key: str, what: str, *, empty: bool = False) -> str | None:
        if m.get(key) is None:
            return None
        return self.text(m, key, what, empty=empty)

    def text_list(self, m: Located, key: str, what: str, noun: str = "text") -> tuple[str, ...]:
        """A list of text (a single text counts as a list of one); absent: empty."""
        value = m.get(key)
        if value is None or value == "":
            return ()
        if isinstance(value, str):
            return (value,)
        if not isinstance(value, LocatedList):
            self.report(self.line(m, key), f"{what}: '{key}' must be a list of {noun}")
            return ()
        out = []
        for item, line in zip(value, value.lines, strict=True):
            if isinstance(item, str):
                out.append(item)
            elif not isinstance(item, bool) and isinstance(item, (int, float)):
                out.append(str(item))
            else:
                self.report(line, f"{what}: '{key}' must be a list of {noun}, "
                                  f"not one with {kind_of(item)}")
        return tuple(out)

    def number(self, m: Located, key: str, what: str) -> float:
        """A required finite number, not a bool and not text ("70%"); 0.0 when it is not."""
        value = m.get(key)
        if key not in m:
            return 0.0
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            self.report(self.line(m, key), f"{what}: malformed number {value!r} in '{key}' "
                                           "(write a bare number, e.g. 70)")
            return 0.0
        if not math.isfinite(value):
            self.report(self.line(m, key),
                        f"{what}: malformed number {value!r} in '{key}' (must be finite)")
            return 0.0
        return float(value)

    def opt_number(self, m: Located, key: str, what: str) -> float | None:
        if m.get(key) is None:
            return None
        return self.number(m, key, what)

    def choice(self, m: Located, key: str, allowed: Collection[str], what: str) -> str:
        """One of ``allowed``; "" when it is not (and reported)."""
        value = m.get(key)
        if key not in m:
            return ""
        if not isinstance(value, str) or value not in allowed:
            self.report(self.line(m, key), f"{what}: unknown {key} {value!r} "
                                           f"(one of {', '.join(allowed)})")
            return ""
        return value

    def ident(self, m: Located, key: str, what: str) -> str:
        """A snake_case id: how items refer to each other."""
        value = self.text(m, key, what)
        if value and not _ID.match(value):
            self.report(self.line(m, key), f"{what}: '{key}' {value!r} is not a snake_case id")
            return ""
        return value

    def flag(self, m: Located, key: str, what: str, default: bool) -> bool:
        """A true/false field; ``"no"`` in quotes would otherwise count as true."""
        value = m.get(key, default)
        if not isinstance(value, bool):
            self.report(self.line(m, key),
                        f"{what}: '{key}' must be true or false, not {kind_of(value)}")
            return default
        return value

    def integer(self, m: Located, key: str, what: str) -> int:
        value = m.get(key)
        if key not in m:
            return 0
        if isinstance(value, bool) or not isinstance(value, int):
            self.report(self.line(m, key), f"{what}: '{key}' must be a whole number, "
                                           f"not {kind_of(value)}")
            return 0
        return value

    def duration(self, m: Located, key: str, what: str) -> float:
        """``'30s'``, ``'2m'``, ``5`` -> seconds (absent: 0)."""
        value = m.get(key, 0)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            if value < 0:
                self.report(self.line(m, key), f"{what}: '{key}' must not be negative, "
                                               f"not {value!r}")
                return 0.0
            return float(value)
        if isinstance(value, str):
            match = _DURATION_RE.match(value)
            if match:
                return float(match[1]) * _UNITS[match[2]]
        self.report(self.line(m, key),
                    f"{what}: '{key}' must be a duration like 5s or 2m, not {value!r}")
        return 0.0

    def low_high(self, m: Located, what: str) -> tuple[float | None, float | None]:
        low = self.opt_number(m, "low", what)
        high = self.opt_number(m, "high", what)
        if low is not None and high is not None and low > high:
            self.report(self.line(m, "low"), f"{what}: low {low:g} > high {high:g}")
        return low, high


def in_order(problems: Iterable[Problem]) -> list[Problem]:
    """Problems by file (as first met) and line, as an editor lists them."""
    files: dict[str | None, int] = {}
    listed = list(problems)
    for p in listed:
        files.setdefault(p.file, len(files))
    return sorted(listed, key=lambda p: (files[p.file], p.line or 0))


def unique(reader: Reader, items: Iterable[tuple[str, int]], what: str) -> None:
    """Report every id met before (stand-in ids, "", are skipped)."""
    seen: dict[str, int] = {}
    for name, line in items:
        if not name:
            continue
        if name in seen:
            reader.report(line, f"{what}: duplicate id '{name}' (first on line {seen[name]})")
        else:
            seen[name] = line


__all__ = ["KnowledgeError", "Located", "LocatedList", "Reader", "kind_of", "unique"]

