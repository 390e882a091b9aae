"""Classifying one stack sample of the training thread into a step phase.

The frame signatures are data (they live in the knowledge base YAML and are
passed in), so users can teach aitop Lightning, the Hugging Face Trainer or their
own loop without touching code. This module only knows how to match them.

Matching: every frame that matches some phase's signature is a candidate; the
candidate with the highest ``rank`` wins, and among equal ranks the innermost.
Ranks encode nesting that is known to happen: a DataLoader's transforms may be
``nn.Module`` calls (still data loading, so data_wait outranks forward), and
``optimizer.step(closure)`` runs forward and backward inside the optimizer (so
optimizer ranks below them).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from fnmatch import fnmatchcase

OTHER = "other"


def in_job_code(file: str) -> bool:
    """A file of the job's own: they keep their absolute path (``shorten_path``)."""
    return file.startswith("/")


@dataclass(frozen=True, slots=True)
class Frame:
    """One Python frame as py-spy reports it (short filename, as py-spy prints it)."""

    function: str
    file: str
    line: int

    @property
    def location(self) -> str:
        return f"{self.file}:{self.line}"

    @property
    def in_job_code(self) -> bool:
        return in_job_code(self.file)

    @property
    def short_function(self) -> str:
        """``Queue.get`` -> ``get``: py-spy 0.4 class-qualifies names on Python 3.11+."""
        return self.function.rsplit(".", 1)[-1]


@dataclass(frozen=True, slots=True)
class FrameSignature:
    """A glob on the function name and one on the file path.

    The function glob is tried on the qualified name (``Queue.get``) and on the
    bare name (``get``), so one signature serves Python 3.10 and 3.11+. The file
    glob is tried on the whole path and on any path suffix after a ``/``.
    """

    function: str = "*"
    file: str = "*"

    def matches(self, frame: Frame) -> bool:
        if not (
            fnmatchcase(frame.function, self.function)
            or fnmatchcase(frame.short_function, self.function)
        ):
            return False
        if self.file == "*":
            return True
        return fnmatchcase(frame.file, self.file) or fnmatchcase(frame.file, "*/" + self.file)


@dataclass(frozen=True, slots=True)
class PhaseRule:
    phase: str
    rank: int
    signatures: tuple[FrameSignature, ...]


@dataclass(frozen=True, slots=True)
class TechniqueRule:
    """Frames whose presence shows a technique is already in use (e.g. torch.compile)."""

    technique: str
    signatures: tuple[FrameSignature, ...]


#: What a data wait can be spent in, besides the job's own code (``own code``):
#: the metrics read these words, so a knowledge base may add files, not words.
DATA_SOURCES = ("dataloader", "process queue", "thread queue")


@dataclass(frozen=True, slots=True)
class DataSourceRule:
    """Frames in any of these files, beneath the loop, mean a data wait went to ``source``."""

    source: str
    files: tuple[str, ...]

    def matches(self, file: str) -> bool:
        return any(fnmatchcase(file, g) or fnmatchcase(file, "*/" + g) for g in self.files)


@dataclass(frozen=True, slots=True)
class StackReading:
    """How the other threads and a data wait are read, as the knowledge base says.

    Passed in with the signatures (phases.yaml) rather than kept here, so that a
    user's rule file can teach aitop a new loader library or a new way to park a
    thread without touching code.
    """

    #: Innermost functions (bare names) of a thread that is parked, not working.
    idle_functions: frozenset[str] = frozenset()
    #: In order: the first rule with a frame beneath the loop names the source.
    data_sources: tuple[DataSourceRule, ...] = ()


@dataclass(frozen=True, slots=True)
class Classification:
    phase: str
    #: Index (root = 0) of the frame that decided the phase, or -1 for ``other``.
    frame_index: int
    #: Index of the outermost phase frame of any kind (the loop calls into it).
    outermost_index: int


class PhaseClassifier:
    """Assigns stacks to phases; remembers per-frame answers since frames repeat."""

    def __init__(
        self,
        rules: Iterable[PhaseRule],
        techniques: Iterable[TechniqueRule] = (),
        loop_frames: Iterable[FrameSignature] = (),
        reading: StackReading = StackReading(),
    ) -> None:
        self.rules = tuple(rules)
        self.techniques = tuple(techniques)
        #: Frames known to drive a training step (a framework's epoch loop).
        self.loop_frames = tuple(loop_frames)
        self.reading = reading
        self._frame_cache: dict[Frame, tuple[str, int] | None] = {}
        self._technique_cache: dict[Frame, tuple[str, ...]] = {}

    def is_loop_frame(self, frame: Frame) -> bool:
        """Whether a frame is one a framework drives its training steps from."""
        return any(sig.matches(frame) for sig in self.loop_frames)

    def rank_of(self, phase: str) -> int:
        """A phase's rank (``other`` ranks below every phase)."""
        ranks = [r.rank for r in self.rules if r.phase == phase]
        return max(ranks) if ranks else -(10**9)

    @property
    def phases(self) -> tuple[str, ...]:
        names = [r.phase for r in self.rules]
        return (*dict.fromkeys(names), OTHER)

    def frame_phase(self, frame: Frame) -> tuple[str, int] | None:
        """The (phase, rank) a single frame signals, or None."""
        if frame in self._frame_cache:
            return self._frame_cache[frame]
        best: tuple[str, int] | None = None
        for rule in self.rules:
            if any(sig.matches(frame) for sig in rule.signatures) and (
                best is None or rule.rank > best[1]
            ):
                best = (rule.phase, rule.rank)
        if len(self._frame_cache) < 50_000:
            self._frame_cache[frame] = best
        return best

    def classify(self, frames: Sequence[Frame], exclude: str | None = None) -> Classification:
        """Frames are ordered root first, as in py-spy's collapsed output.

        ``exclude`` names a phase whose frames are ignored (a frame named like
        evaluation that turned out to train).
        """
        best_phase, best_rank, best_index, outermost = OTHER, -(10**9), -1, -1
        for index, frame in enumerate(frames):
            hit = self.frame_phase(frame)
            if hit is None or hit[0] == exclude:
                continue
            if outermost < 0:
                outermost = index
            phase, rank = hit
            if rank >= best_rank:  # >= : innermost wins among equal ranks
                best_phase, best_rank, best_index = phase, rank, index
        return Classification(best_phase, best_index, outermost)

    def techniques_in(self, frames: Sequence[Frame]) -> set[str]:
        """Techniques whose signature frames appear in this stack."""
        return set(self.technique_hits(frames))

    def technique_hits(self, frames: Sequence[Frame]) -> dict[str, Frame]:
        """Techniques whose signature frames appear in this stack, each with the
        innermost frame that shows it."""
        found: dict[str, Frame] = {}
        for frame in frames:
            cached = self._technique_cache.get(frame)
            if cached is None:
                cached = tuple(
                    t.technique
                    for t in self.techniques
                    if any(sig.matches(frame) for sig in t.signatures)
                )
                if len(self._technique_cache) < 50_000:
                    self._technique_cache[frame] = cached
            for technique in cached:
                found[technique] = frame
        return found


# ------------------------------------------------------------- raw parsing

_FRAME_RE = re.compile(r"^(?P<function>.*) \((?P<file>.*):(?P<line>\d+)\)$")
_THREAD_RE = re.compile(r"^thread \((?P<tid>[^)]*)\)(?::\s*(?P<name>.*))?$")


@dataclass(frozen=True, slots=True)
class RawStack:
    """One distinct stack of a window and how often it was sampled (a line of py-spy's raw
    format, or the speedscope samples of one stack, ``speedscope.py``)."""

    thread_id: str | None
    thread_name: str | None
    frames: tuple[Frame, ...]
    count: int


#: Where installed code lives: everything up to here is dropped from a path.
_LIBRARY_ROOT = re.compile(r"^.*/(?:site-packages|dist-packages|lib/python3\.\d+)/")


def shorten_path(path: str) -> str:
    """``/venv/lib/python3.11/site-packages/torch/_tensor.py`` -> ``torch/_tensor.py``.

    aitop asks py-spy for full file names so that it can read the job's own
    source lines (a ``for`` statement that fetches batches, a ``.item()`` that
    waits for the GPU), then shortens library and standard-library paths the way
    py-spy would. The job's own files keep their absolute path: that is how the
    rest of aitop tells the user's code (``/...``) from libraries (``torch/...``).
    """
    return _LIBRARY_ROOT.sub("", path, count=1)


#: Full paths remembered per shortened name (bounds a long session's memory).
MAX_PATHS = 4096


def parse_frame(text: str, paths: dict[str, str] | None = None) -> Frame:
    """One ``function (file:line)`` frame; ``paths`` learns short name -> full path."""
    match = _FRAME_RE.match(text)
    if match is None:  # e.g. "<native>" or a frame without a location
        return Frame(text, "", 0)
    full = match["file"]
    short = shorten_path(full)
    if paths is not None and short != full and short not in paths and len(paths) < MAX_PATHS:
        paths[short] = full
    return Frame(match["function"], short, int(match["line"]))


def parse_thread_label(text: str) -> tuple[str, str | None] | None:
    """``thread (123): MainThread`` -> ("123", "MainThread"); None if it is no thread label."""
    match = _THREAD_RE.match(text)
    return (match["tid"], match["name"] or None) if match else None


def parse_raw_line(line: str, paths: dict[str, str] | None = None) -> RawStack | None:
    """Parse ``thread (123): MainThread;f (a.py:1);g (b.py:2) 7``; None if malformed."""
    line = line.rstrip("\n")
    stack_text, sep, count_text = line.rpartition(" ")
    if not sep or not count_text.isdigit():
        return None
    parts = stack_text.split(";")
    thread_id: str | None = None
    thread_name: str | None = None
    if parts and parts[0].startswith("thread ("):
        label = parse_thread_label(parts[0])
        if label:
            thread_id, thread_name = label
        parts = parts[1:]
    # py-spy may add a "process NNN:" root when sampling subprocesses.
    if parts and parts[0].startswith("process "):
        parts = parts[1:]
    frames = tuple(parse_frame(p, paths) for p in parts if p)
    return RawStack(thread_id, thread_name, frames, int(count_text))


def parse_raw(text: str, paths: dict[str, str] | None = None) -> list[RawStack]:
    stacks = []
    for line in text.splitlines():
        if line.strip():
            parsed = parse_raw_line(line, paths)
            if parsed is not None:
                stacks.append(parsed)
    return stacks
