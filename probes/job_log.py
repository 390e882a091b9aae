"""Steps from the job's own log: the step number it prints (and what else it says:
threads that died, dynamo recompiling).

Most training scripts print their step: ``iter 120: loss 2.31`` (nanoGPT-style
loops at module level, whose counter is a global that py-spy's locals do not
show), ``| epoch 1 |  200/ 2983 batches |`` (pytorch/examples'
word_language_model, whose loop local ``i`` steps by the sequence length), a
progress bar's ``450/1000 [00:30<00:37, 14.8it/s]``. Where the job's stdout or
stderr is a regular file (``nohup``, Slurm, ``> train.log``), aitop reads what
the job appends; where it is a pipe (``| tee train.log``, ``| ts > train.log``),
aitop reads the file the pipe's reader writes (``probes.pipes``), never the
pipe; where it is neither (a terminal), the regular files the job itself holds
open for writing (a ``logging.FileHandler``'s) are candidates. Among the
candidates, the first whose lines show a step count is kept. aitop finds the
integer that counts steps, and stamps each reading with the file's modification
time: the moment the newest line was written, however rarely aitop looks.
Output the job buffers arrives in blocks (Python buffers a redirected or piped
stdout unless ``-u``/``PYTHONUNBUFFERED`` or ``flush=True``); each block's last
line is still stamped when it was written.

Which integer counts steps is read from the lines themselves, never guessed from
one line: lines are grouped by their shape (the text with its numbers taken
out), and within a shape an integer is a step count when it is labelled as one
(``step``, ``iter``, ``batch``..., or an ``n/N`` progress) and rises from line
to line. Times (``00:30``), percentages, decimals and durations (``12ms``) are
never candidates; labels that count something else per step (``tokens``,
``samples``, ``epoch``) are refused.
"""

from __future__ import annotations

import itertools
import os
import re
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .kernel.process_files import of_fd, read_bounded
from .kernel.procfs import PROC, fd_is_regular_file, read_link
from .pipes import describe_fd, follow_pipe, written_files
from .redact import redact_text
from .samples import LogEvent, StepCounterSample

#: The line Python's ``threading.excepthook`` prints before a thread's traceback.
_THREAD_DIED = re.compile(r"^Exception in thread (?P<name>.+?)(?: \(.*\))?:\s*$")
#: Lines inside a traceback block: its header, the frames (indented), the
#: chaining sentences, blank lines.
_TRACEBACK_BODY = re.compile(
    r"^(?:Traceback \(most recent call last\):|\s|During handling|The above exception|$)")
#: Characters kept of an exception's line.
MAX_EVENT_CHARS = 200
#: What a reading from the log is marked as (``StepCounterSample.source``).
LOG_SOURCE = "log"
#: Bytes of the log read back at attach, to learn its lines' shapes.
TAIL_BYTES = 64 << 10
#: At most this many new bytes are read per call (the rest is skipped to).
MAX_READ_BYTES = 1 << 20
#: Shapes remembered, and lines kept per shape (bounds memory on any log).
MAX_SHAPES = 64
LINES_PER_SHAPE = 32
#: A shape needs this many lines, and its count this many rises, to be read.
MIN_LINES = 3
MIN_RISES = 2

STEP_WORDS = frozenset({
    "step", "steps", "iter", "iters", "iteration", "iterations", "it", "batch", "batches",
    "global_step", "update", "updates", "train_step",
    # A server's count of the requests it answered: its steps are requests.
    "served", "requests", "request", "reqs", "queries",
})
#: Labels of integers that rise with the steps but are not a count of them.
NOT_STEPS = frozenset({
    "epoch", "epochs", "tokens", "token", "samples", "sample", "examples", "seen", "images",
    "sequences", "bytes", "mb", "gb", "kb", "ms", "s", "sec", "seconds", "time", "memory", "mem",
})

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
#: A progress bar's bar: the text between two pipes with no letters in it.
_BAR = re.compile(r"\|[^|A-Za-z]*\|")
#: An integer standing alone: not part of a decimal, a word, a time or a percentage.
_INT = re.compile(r"(?<![\w.])(?<!\d:)(\d+)(?!\.\d)(?![\w%])(?!:\d)")
_DIGITS = re.compile(r"\d+")
_WORD = re.compile(r"[A-Za-z_]+")
#: Words of a line's prefix that change from line to line or day to day.
_VARYING = re.compile(
    r"\b(?:Mon|Tue|Wed|Thu|Fri|Sat|Sun|Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec"
    r"|AM|PM|DEBUG|INFO|WARN|WARNING|ERROR|CRITICAL|FATAL|TRACE|NOTICE)\b")
#: The word they become in a shape.
_VARIES = "~"


@dataclass(frozen=True, slots=True)
class LogFile:
    """A file that may hold the job's output: what aitop opens, and its name."""

    #: ``/proc/PID/fd/N`` of the process writing it: opens the file that process
    #: writes, in its own mount namespace, even when renamed or deleted since.
    link: Path
    name: str
    #: The pipe's reader that writes it (``tee (PID 812)``), if not the job.
    via: str | None = None


@dataclass(frozen=True, slots=True)
class LogSearch:
    """The files that may hold the job's output, best first, and why there are none."""

    files: list[LogFile]
    reason: str | None = None


def find_logs(pid: int, proc_root: str = PROC) -> LogSearch:
    """Where the job's stdout and stderr end up: a regular file they are, the files
    the reader of a pipe they are writes, else the files the job writes itself."""
    files: list[LogFile] = []
    notes: list[str] = []
    followed: set[str] = set()
    for fd, stream in ((1, "stdout"), (2, "stderr")):
        name = read_link(pid, "fd", str(fd), proc_root=proc_root)
        if name is not None and fd_is_regular_file(pid, fd, proc_root):
            files.append(LogFile(Path(of_fd(pid, fd, proc_root)), name))
        elif name is not None and name.startswith("pipe:"):
            if name in followed:
                continue
            followed.add(name)
            found = follow_pipe(pid, fd, proc_root, exclude=(os.getpid(),))
            via = ", ".join(found.readers) or None
            files += [LogFile(Path(of_fd(f.pid, f.fd, proc_root)), f.name, via)
                      for f in found.files]
            if not found.files:
                notes.append(f"{stream} is a pipe read by {via}, which writes no file" if via
                             else f"{stream} is a pipe whose reader aitop cannot see")
        else:
            notes.append(f"{stream} is {describe_fd(pid, fd, proc_root)}")
    if not files:
        files = [LogFile(Path(of_fd(pid, f.fd, proc_root)), f.name)
                 for f in written_files(pid, proc_root)]
        if not files:
            notes.append("the job writes no other file")
    unique = list({f.name: f for f in reversed(files)}.values())[::-1]
    return LogSearch(unique, None if unique else "; ".join(notes))


def find_log(pid: int, proc_root: str = PROC) -> tuple[Path, str] | None:
    """The first file that may hold the job's output: its ``/proc`` link and name."""
    found = find_logs(pid, proc_root).files
    return (found[0].link, found[0].name) if found else None


def normalise(line: str) -> str:
    """A log line without colour codes, non-ASCII (bar blocks) or a bar's fill."""
    line = _ANSI.sub("", line)
    line = line.encode("ascii", errors="ignore").decode("ascii")
    line = _BAR.sub("|bar|", line)
    return " ".join(line.split())


def shape_of(line: str) -> tuple[str, list[int]]:
    """The line with its standalone integers as ``#`` (other digits as ``9``), and them."""
    values: list[int] = []
    parts: list[str] = []
    last = 0
    for match in _INT.finditer(line):
        parts.append(_text_shape(line[last:match.start()]))
        parts.append("#")
        values.append(int(match.group(1)))
        last = match.end()
    parts.append(_text_shape(line[last:]))
    return "".join(parts), values


def _text_shape(text: str) -> str:
    """Text between a line's integers as its shape holds it: digits as ``9``, the
    words that vary in a prefix (``_VARYING``) as one word."""
    return _VARYING.sub(_VARIES, _DIGITS.sub("9", text))


def _label(shape: str, slot: int) -> tuple[str, bool]:
    """The word that names integer ``slot`` of a shape, and whether it is ``n/N``."""
    pieces = shape.split("#")
    before, after = pieces[slot], pieces[slot + 1]
    progress = after.lstrip().startswith("/") and slot + 1 < len(pieces) - 1
    words = _WORD.findall(before)
    label = words[-1].lower() if words else ""
    if progress and label not in STEP_WORDS:
        # "200/ 2983 batches", "450/1000 [..., 14.8it/s]": the word after the
        # total names what is counted, when it names steps.
        following = _WORD.findall(pieces[slot + 2]) if slot + 2 < len(pieces) else []
        label = following[0].lower() if following and following[0].lower() in STEP_WORDS \
            else "progress"
    return label, progress


@dataclass
class _Shape:
    lines: list[list[int]] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class StepLine:
    """Where a log's step count is: the shape, which integer, and its label.

    ``lap``: for an ``n/N`` progress that starts again each epoch, the slot of
    the epoch the same line prints (``Epoch 3:  45%|...| 72/160``); the count is
    then ``epoch * N + n``, which carries on across epochs: a bar read at 160/160
    and again at the next epoch's 160/160 is a whole epoch on, not none.
    """

    shape: str
    slot: int
    label: str
    lap: int | None = None

    @property
    def name(self) -> str:
        """What its readings are called."""
        return (f"epoch x N + {self.label} (job log)" if self.lap is not None
                else f"{self.label} (job log)")


class StepLineFinder:
    """Learns a log's line shapes and says which integer counts steps."""

    def __init__(self) -> None:
        self._shapes: OrderedDict[str, _Shape] = OrderedDict()
        self._newest: dict[str, int] = {}

    def feed(self, lines: Sequence[str]) -> set[str]:
        """Learn from these lines; the shapes they hold."""
        fed: set[str] = set()
        for raw in lines:
            line = normalise(raw)
            if not line:
                continue
            shape, values = shape_of(line)
            if not values:
                continue
            entry = self._shapes.pop(shape, None) or _Shape()
            entry.lines = [*entry.lines[-(LINES_PER_SHAPE - 1):], values]
            self._shapes[shape] = entry
            fed.add(shape)
            while len(self._shapes) > MAX_SHAPES:
                self._shapes.popitem(last=False)
        return fed

    def step_line(self) -> StepLine | None:
        """The best-labelled rising integer over every shape seen, if any; among
        equals, the one in the shape written last (a log that changed format)."""
        best: tuple[tuple[int, bool, int], StepLine] | None = None
        for recency, (shape, entry) in enumerate(self._shapes.items()):
            if len(entry.lines) < MIN_LINES:
                continue
            for slot in range(len(entry.lines[0])):
                rises = _rises([v[slot] for v in entry.lines])
                if rises is None or rises < MIN_RISES:
                    continue
                label, progress = _label(shape, slot)
                if label in NOT_STEPS:
                    continue
                score = 2 if label in STEP_WORDS else 1 if progress else 0
                if score == 0:
                    continue
                lap = _epoch_slot(shape, slot) if progress else None
                key = (score, lap is not None, recency)
                if best is None or key > best[0]:
                    best = (key, StepLine(shape, slot, label or "step", lap))
        return best[1] if best else None

    def newest(self, where: StepLine) -> int | None:
        entry = self._shapes.get(where.shape)
        if not entry or not entry.lines:
            return None
        values = entry.lines[-1]
        if where.lap is None:
            return values[where.slot]
        return values[where.lap] * values[where.slot + 1] + values[where.slot]


def _epoch_slot(shape: str, slot: int) -> int | None:
    """The slot of an integer labelled ``epoch`` before ``slot`` in ``shape``, if any."""
    return next((k for k in range(slot) if _label(shape, k)[0] in ("epoch", "epochs")), None)


def _rises(values: Sequence[int]) -> int | None:
    """Rises from line to line; None if it ever falls other than by a reset (to half)."""
    rises = 0
    for a, b in itertools.pairwise(values):
        if b > a:
            rises += 1
        elif b < a and b > a // 2:
            return None
    return rises


class ThreadDeaths:
    """Threads the job's log says died on an exception, as Python prints them.

    ``Exception in thread NAME:``, its traceback, then the exception's line: a
    producer thread that raised leaves its loop waiting on a queue nothing
    fills, and this line says why (a stack sampler that attached later sees
    only the wait). Lines arrive in pieces across reads; the state carries over.
    """

    def __init__(self) -> None:
        self._thread: str | None = None

    def feed(self, lines: Sequence[str], t: float) -> list[LogEvent]:
        found: list[LogEvent] = []
        for raw in lines:
            line = _ANSI.sub("", raw).rstrip()
            started = _THREAD_DIED.match(line)
            if started:
                self._thread = started["name"]
                continue
            if self._thread is None or _TRACEBACK_BODY.match(line):
                continue
            found.append(LogEvent(t, "thread_died", redact_text(self._thread),
                                  redact_text(line.strip())[:MAX_EVENT_CHARS]))
            self._thread = None
        return found


#: Dynamo's lines (``torch/_dynamo``'s logger: a glog-style header, then the
#: message): ``TORCH_LOGS=recompiles``' "Recompiling function forward in
#: /job/model.py:12" with the failed guards on the lines after it (the newest
#: first), and the warning "torch._dynamo hit config.recompile_limit (8)" with
#: the function and the last reason on the next two lines (``cache_size_limit``
#: before torch 2.6).
_RECOMPILING = re.compile(
    r"Recompiling function (?P<function>\S+) in (?P<file>.+):(?P<line>\d+)\s*$")
_GUARD_FAILED = re.compile(r"\]\s+- (?P<reason>\d+/\d+: .*)$")
_LIMIT_HIT = re.compile(r"torch\._dynamo hit config\.(?P<limit>\w+) \((?P<value>\d+)\)")
_LIMIT_FUNCTION = re.compile(r"function: '(?P<function>[^']+)' \((?P<file>.+):(?P<line>\d+)\)")
_LIMIT_REASON = re.compile(r"last reason: (?P<reason>.*)$")


def _where(found: re.Match[str]) -> str:
    """``forward (model.py:12)`` from a match with function, file and line."""
    return f"{found['function']} ({found['file'].rsplit('/', 1)[-1]}:{found['line']})"


class DynamoLines:
    """Recompilations and the recompile limit as dynamo's logger prints them.

    A ``recompile`` event per "Recompiling function" (its text the newest failed
    guard, ``"0/2: tensor 'x' size mismatch ..."``, as dynamo's frames give it:
    ``probes.compile_frames``), a ``recompile_limit`` event per limit warning
    (dynamo then runs the function eagerly: compiled no more).
    """

    def __init__(self) -> None:
        self._recompiling: str | None = None
        self._limit: tuple[str, str | None] | None = None

    def feed(self, lines: Sequence[str], t: float) -> list[LogEvent]:
        found: list[LogEvent] = []
        for raw in lines:
            line = _ANSI.sub("", raw).rstrip()
            if (started := _RECOMPILING.search(line)) is not None:
                self._recompiling = _where(started)
                continue
            if self._recompiling is not None and (guard := _GUARD_FAILED.search(line)):
                found.append(LogEvent(t, "recompile", redact_text(self._recompiling),
                                      redact_text(guard["reason"])[:MAX_EVENT_CHARS]))
                self._recompiling = None
                continue
            if (hit := _LIMIT_HIT.search(line)) is not None:
                self._limit = (f"{hit['limit']} ({hit['value']})", None)
                continue
            if self._limit is None:
                continue
            if (function := _LIMIT_FUNCTION.search(line)) is not None:
                self._limit = (self._limit[0], _where(function))
            elif (reason := _LIMIT_REASON.search(line)) is not None:
                limit, where = self._limit
                found.append(LogEvent(
                    t, "recompile_limit", redact_text(where or "a function"),
                    redact_text(f"{limit}; last reason: {reason['reason']}")[:MAX_EVENT_CHARS]))
                self._limit = None
        return found


class JobLog:
    """Reads the steps the job prints to its log file, one reading per new write."""

    def __init__(self, link: Path, name: str) -> None:
        self.link = link
        self.link_name = name
        #: The file's name as shown (a secret in a path is redacted like any other).
        self.name = redact_text(name)
        self.finder = StepLineFinder()
        self.deaths = ThreadDeaths()
        self.dynamo = DynamoLines()
        #: Events found by the newest read, until taken (``take_events``).
        self._events: list[LogEvent] = []
        self._offset: int | None = None
        self._partial = ""
        self._stamped: float | None = None

    def read(self) -> StepCounterSample | None:
        """The newest step the log shows, stamped with its write; None if nothing new."""
        found = read_bounded(str(self.link), TAIL_BYTES if self._offset is None
                             else MAX_READ_BYTES, offset=self._offset)
        if found is None:
            return None
        if self._offset is not None and found.start < self._offset:
            self._partial = ""  # cut short (rotated, truncated): read again from its start
        self._offset = found.start + len(found.data)
        mtime = found.mtime
        text = self._partial + found.data.decode("utf-8", errors="replace")
        lines = re.split(r"[\r\n]", text)
        self._partial = lines.pop()
        self._events.extend(self.deaths.feed(lines, mtime))
        self._events.extend(self.dynamo.feed(lines, mtime))
        fed = self.finder.feed(lines)
        where = self.finder.step_line()
        # Only a step line in what was just read is as new as the file's mtime.
        if where is None or where.shape not in fed or mtime == self._stamped:
            return None
        value = self.finder.newest(where)
        if value is None:
            return None
        self._stamped = mtime
        return StepCounterSample(mtime, where.name, value, frame=self.name, source=LOG_SOURCE)

    def take_events(self) -> list[LogEvent]:
        """The events the reads since the last call found, oldest first."""
        events, self._events = self._events, []
        return events


class JobLogs:
    """The files that may hold the job's output (``find_logs``), each read until one
    shows a step count; from then on that one alone."""

    def __init__(self, search: LogSearch) -> None:
        self.logs = [JobLog(f.link, f.name) for f in search.files]
        self._via = {f.name: f.via for f in search.files}
        #: Why there is no file to read, when there is none.
        self.reason = search.reason
        self.chosen: JobLog | None = None

    @classmethod
    def of(cls, pid: int, proc_root: str = PROC) -> JobLogs:
        return cls(find_logs(pid, proc_root))

    @property
    def name(self) -> str | None:
        """The file read for steps (the first candidate until one shows them)."""
        log = self.chosen or (self.logs[0] if self.logs else None)
        return log.name if log else None

    @property
    def via(self) -> str | None:
        """The pipe's reader that writes the file read, if not the job itself."""
        log = self.chosen or (self.logs[0] if self.logs else None)
        via = self._via.get(log.link_name) if log else None
        return redact_text(via) if via else None

    def read(self) -> StepCounterSample | None:
        """The newest step since the last call, from the chosen file (or the first
        candidate that shows one, which becomes the chosen one)."""
        if self.chosen is not None:
            return self.chosen.read()
        for log in self.logs:
            reading = log.read()
            if reading is not None:
                self.chosen = log
                return reading
        return None

    def take_events(self) -> list[LogEvent]:
        return [e for log in ([self.chosen] if self.chosen else self.logs)
                for e in log.take_events()]

    def status(self) -> str:
        """Why no step has been read from a file yet (the reason, or the files read)."""
        if not self.logs:
            return self.reason or "no file holds the job's output"
        names = ", ".join(log.name for log in self.logs)
        return f"no rising step count in the lines of {names} yet"
