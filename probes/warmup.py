"""The first compilation, and the proof that a job trains: warming up happens once.

A job warms up before its first steps: torch.compile compiling the model for
its first call, CUDA graphs being captured. Once it has taken steps it never
warms up again: compilation seen later is recompilation, a cost of the steps.
What proves steps (``trained_at``), whichever comes first:

* backward in the training thread's stacks, ``STEP_EVIDENCE_SAMPLES`` samples
  in all (only a step runs backward; compilation outranks it, so these are
  backward passes running, not being compiled);
* a step counter that changed between two readings (the loop's own, the
  step the job prints; not the DataLoader workers' batch index, which moves
  while the workers fill their prefetch queues before the first step);
* dynamo recompiling a frame (``probes.compile_frames``): a recompilation
  follows a run of the compiled code whose guards then failed.

The first compilation (``CompileWarmup``) is the first run of stack windows
mostly compiling (``COMPILING_SHARE``) before any proof; it ends with the
first window that is not (its tail included when that window still compiles
``COMPILE_TAIL_SHARE``), or with the first proof of steps. A window that
proves steps itself starts no warm-up; neither does anything after the proof.
A compilation aitop was attached in the middle of may be the first or a
recompilation. It is taken for the first (``certain``) when aitop saw the job
before it began, or when dynamo's frames show a frame's first compilation
under way; it is dropped when they show a recompilation. Left uncertain when
steps are proven, it is neither: no warm-up to speak of, and no recompilation
to count (``knowledge/metrics/compiling.py`` leaves its windows out of both).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from .samples import LogEvent, StackWindow, StepCounterSample
from .steps import WORKER_COUNTER

#: Samples, in all, of a phase only a step runs that prove steps.
STEP_EVIDENCE_SAMPLES = 3
#: Phases only a step runs and compilation never shows as: backward (a backward
#: pass being compiled reads as compile; building an optimizer reads as
#: "optimizer", so that is no proof).
TRAINING_PHASES: tuple[str, ...] = ("backward",)
#: A stack window this much in torch.compile is compiling; the window after the
#: first compilation's last such one holds its tail when it has this much.
COMPILING_SHARE = 0.5
COMPILE_TAIL_SHARE = 0.05
#: The events dynamo's frames leave (``probes.compile_frames``): a frame's first
#: compilation, a recompilation.
COMPILE_EVENT = "compile"
RECOMPILE_EVENT = "recompile"


@dataclass(frozen=True, slots=True)
class CompileWarmup:
    """The first compilation seen: its first stack window's start, and the end of
    its last (its tail included); ``end`` is None while it goes on. ``certain``:
    known to be the job's first compilation (see the module's docstring)."""

    start: float
    end: float | None = None
    certain: bool = True


class WarmupTracker:
    """Follows the samples, in time order, for the first compilation and the first
    proof of steps (the session feeds it every sample it stores)."""

    def __init__(self) -> None:
        self.warmup: CompileWarmup | None = None
        #: When steps were first proven (see the module's docstring).
        self.trained_at: float | None = None
        #: What proved them: "backward", "counter" or "recompile".
        self.proof: str | None = None
        self._training_samples = 0
        self._first_window_start: float | None = None
        self._last_compiling: StackWindow | None = None
        self._last_window_end: float | None = None
        self._counters: dict[tuple[str, str | None], int] = {}

    @property
    def compiling_first(self) -> bool:
        """Whether the first compilation goes on: begun, not ended, no step proven."""
        return (self.warmup is not None and self.warmup.end is None
                and self.trained_at is None)

    def add(self, sample: object) -> None:
        if isinstance(sample, StackWindow):
            self._window(sample)
        elif isinstance(sample, StepCounterSample):
            self._counter(sample)
        elif isinstance(sample, LogEvent) and sample.kind == RECOMPILE_EVENT:
            self._recompiled(sample.t)
        elif isinstance(sample, LogEvent) and sample.kind == COMPILE_EVENT:
            self._first_compilation()

    def _first_compilation(self) -> None:
        """Dynamo compiles a frame for the first time: an open warm-up is one."""
        warmup = self.warmup
        if warmup is not None and warmup.end is None and self.trained_at is None:
            self.warmup = dataclasses.replace(warmup, certain=True)

    def _proven(self, t: float, proof: str) -> None:
        if self.trained_at is not None:
            return
        self.trained_at, self.proof = t, proof
        warmup = self.warmup
        if warmup is not None and warmup.end is None and not warmup.certain:
            # Never told apart from a recompilation: it ends with the windows
            # seen so far, and what follows is judged as steps.
            end = self._last_window_end if self._last_window_end is not None else warmup.start
            self.warmup = dataclasses.replace(warmup, end=end)

    def _counter(self, sample: StepCounterSample) -> None:
        if sample.value is None or sample.name == WORKER_COUNTER:
            return
        key = (sample.source, sample.name)
        before = self._counters.get(key)
        self._counters[key] = sample.value
        if before is not None and before != sample.value:
            self._proven(sample.t, "counter")

    def _recompiled(self, t: float) -> None:
        warmup = self.warmup
        if (self.trained_at is None and warmup is not None and warmup.end is None
                and warmup.start == self._first_window_start):
            # Attached during this recompilation: there was no warm-up to see.
            self.warmup = None
        self._proven(t, RECOMPILE_EVENT)

    def _window(self, window: StackWindow) -> None:
        if window.error is not None or window.total_samples <= 0:
            return
        if self._first_window_start is None:
            self._first_window_start = window.t_start
        share = window.phase_counts.get("compile", 0) / window.total_samples
        proven_before = self.trained_at is not None
        self._training_samples += sum(window.phase_counts.get(p, 0) for p in TRAINING_PHASES)
        if self._training_samples >= STEP_EVIDENCE_SAMPLES:
            self._proven(window.t_end, "backward")
        self._last_window_end = window.t_end
        warmup = self.warmup
        if warmup is None:
            if not proven_before and self.trained_at is None and share >= COMPILING_SHARE:
                # Certain when aitop saw the job before it began compiling.
                self.warmup = CompileWarmup(
                    window.t_start, certain=window.t_start != self._first_window_start)
                self._last_compiling = window
            return
        if warmup.end is not None:
            return
        if share >= COMPILING_SHARE and self.trained_at is None:
            self._last_compiling = window
            return
        # Over: this window is mostly steps, or steps were proven by its end.
        last = self._last_compiling
        end = window.t_end if share >= COMPILE_TAIL_SHARE or last is None else last.t_end
        self.warmup = dataclasses.replace(warmup, end=end)
