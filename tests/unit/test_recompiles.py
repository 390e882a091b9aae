"""Warming up happens once, before the first steps; compilation after them is
recompilation: counted, timed, named by dynamo's own frames and log, and bounded.

The dump below is excerpted from ``py-spy dump --locals --json`` of a torch
2.13 job recompiling a model for a new sequence length (the frames and the
locals dynamo's convert_frame.py holds); the log lines are torch 2.13's own,
from a job that hit the recompile limit and from one run with
``TORCH_LOGS=recompiles``.
"""

from __future__ import annotations

import pytest
from aitop.knowledge.base.rules import GainSpec
from aitop.knowledge.judging.diagnosis import Diagnoser, Facts
from aitop.knowledge.judging.gains import estimate_gain, fewest_expected
from aitop.probes.compile_frames import compile_number, compile_sightings, compiled_function
from aitop.probes.job_log import DynamoLines
from aitop.probes.samples import LogEvent, StackWindow, StepCounterSample
from aitop.probes.session import Session
from aitop.probes.warmup import WarmupTracker
from support.knowledge import PACKAGED
from support.synthetic import T0, Job, metrics_at, mix, run

RULESET = PACKAGED.rules

SITE = "/venv/lib/python3.11/site-packages/"


def frame(function: str, path: str, **locals_: str) -> dict[str, object]:
    return {"name": function, "filename": path,
            "locals": [{"name": k, "repr": v} for k, v in locals_.items()]}


#: The training thread inside a recompilation (innermost first, as py-spy dumps).
RECOMPILING_DUMP = [{
    "os_thread_id": 9830, "thread_name": "MainThread",
    "frames": [
        frame("GraphModule.__init__", SITE + "torch/fx/graph_module.py",
              class_name='"GraphModule"'),
        frame("compile_fx", SITE + "torch/_inductor/compile_fx.py"),
        frame("OutputGraph.compile_and_call_fx_graph", SITE + "torch/_dynamo/output_graph.py",
              name='"__compiled_fn_39_2177896c"'),
        frame("trace_frame", SITE + "torch/_dynamo/convert_frame.py",
              code="<code at 0x7faf3b202d90>", frame_state='{"_id": 0}'),
        frame("_compile.<locals>.compile_inner", SITE + "torch/_dynamo/convert_frame.py",
              code="<code at 0x7faf3b202d90>"),
        frame("_compile", SITE + "torch/_dynamo/convert_frame.py", skip="3",
              recompile_reason='"0/18: tensor \\"x\\" size mismatch at index 1. '
                               'expected 34, actual 35"'),
        frame("ConvertFrameAssert.__call__", SITE + "torch/_dynamo/convert_frame.py",
              skip="2", total_count="19", frame_id="0", info='"forward /job/model.py:12"'),
        frame("CatchErrorsWrapper.__call__", SITE + "torch/_dynamo/convert_frame.py"),
        frame("OptimizedModule.__call__", SITE + "torch/_dynamo/eval_frame.py"),
        frame("train", "/job/train.py", step="150"),
    ],
}, {"os_thread_id": 9831, "thread_name": "pt_autograd_0", "frames": []}]


def test_a_recompilation_is_read_from_dynamos_frames_with_its_frame_and_guard() -> None:
    events = compile_sightings(RECOMPILING_DUMP, 5.0)
    assert events == [LogEvent(5.0, "recompile", "forward (model.py:12)",
                               "0/18: tensor \"x\" size mismatch at index 1. expected 34, "
                               "actual 35")]
    assert compile_number(events[0].text) == (0, 18)
    # Only the training thread's, when named.
    assert compile_sightings(RECOMPILING_DUMP, 5.0, thread_id="9831") == []
    # A frame's first compilation has no reason: a "compile" event.
    first = [{**RECOMPILING_DUMP[0], "frames": [
        {**f, "locals": [v for v in f["locals"] if v["name"] != "recompile_reason"]}  # type: ignore[index, union-attr]
        for f in RECOMPILING_DUMP[0]["frames"]]}]  # type: ignore[union-attr]
    assert compile_sightings(first, 5.0) == [LogEvent(5.0, "compile", "forward (model.py:12)", "")]
    # A thread that is not compiling leaves nothing.
    steps = [{"os_thread_id": 1, "frames": [frame("train", "/job/train.py", step="3")]}]
    assert compile_sightings(steps, 5.0) == []
    assert compiled_function("not dynamo's shape") is None


#: The glog-style header torch's loggers put before each line.
WARN = "W1204 23:56:45.664000 15065 torch/_dynamo/convert_frame.py:1994] [0/8] "
VERBOSE = "V1204 23:58:51.816000 17374 torch/_dynamo/guards.py:5396] [0/2] [__recompiles] "
#: torch 2.13's warning when a function hits the recompile limit, as its log has it.
LIMIT_LOG = [WARN + line for line in (
    "torch._dynamo hit config.recompile_limit (8)",
    "   function: 'forward' (/tmp/rc/rc8.py:12)",
    "   last reason: 0/7: tensor 'x' size mismatch at index 1. expected 23, actual 24",
    'To log all recompilation reasons, use TORCH_LOGS="recompiles".')]
#: TORCH_LOGS=recompiles: each recompilation with its failed guards, newest first.
RECOMPILES_LOG = [*(VERBOSE + line for line in (
    "Recompiling function forward in /tmp/rc/rc9.py:12",
    "    triggered by the following guard failure(s):",
    "    - 0/1: tensor 'x' size mismatch at index 1. expected 17, actual 18",
    "    - 0/0: tensor 'x' size mismatch at index 1. expected 16, actual 18")),
    "step 12 loss 2.3"]


def test_dynamos_log_lines_become_events_split_across_reads() -> None:
    lines = DynamoLines()
    assert lines.feed(LIMIT_LOG[:2], 1.0) == []
    assert lines.feed(LIMIT_LOG[2:], 2.0) == [LogEvent(
        2.0, "recompile_limit", "forward (rc8.py:12)",
        "recompile_limit (8); last reason: 0/7: tensor 'x' size mismatch at index 1. "
        "expected 23, actual 24")]
    assert DynamoLines().feed(RECOMPILES_LOG, 3.0) == [LogEvent(
        3.0, "recompile", "forward (rc9.py:12)",
        "0/1: tensor 'x' size mismatch at index 1. expected 17, actual 18")]


def window(t_end: float, compile_share: float, backward: int = 0,
           length: float = 3.0) -> StackWindow:
    total = 100
    compiling = round(compile_share * total)
    return StackWindow(t_end - length, t_end, "MainThread", "1", total, {
        "compile": compiling, "backward": backward, "other": total - compiling - backward})


def test_a_first_compilation_ends_with_the_first_proof_of_steps() -> None:
    # Mostly compiling, then the counter moves (a step is done): its next window,
    # still mostly compiling (the steps compile again), closes it.
    tracker = WarmupTracker()
    tracker.add(window(3, 0.0))  # seen before it began: the first compilation
    tracker.add(window(6, 1.0))
    tracker.add(StepCounterSample(6.5, "step", 0))
    tracker.add(window(9, 1.0))
    assert tracker.compiling_first
    tracker.add(StepCounterSample(10.0, "step", 2))
    assert not tracker.compiling_first and tracker.proof == "counter"
    tracker.add(window(12, 0.9))
    assert tracker.warmup is not None and (tracker.warmup.start, tracker.warmup.end) == (3, 12)
    # Never again, however much it compiles.
    tracker.add(window(30, 1.0))
    tracker.add(window(33, 1.0))
    assert (tracker.warmup.start, tracker.warmup.end) == (3, 12)


def test_the_workers_batch_index_is_no_proof_of_steps() -> None:
    """Workers fill their prefetch queues before the first step: their index moves
    while the model still compiles for its first call."""
    tracker = WarmupTracker()
    tracker.add(window(3, 1.0))
    tracker.add(StepCounterSample(3.5, "worker batch index", 1))
    tracker.add(StepCounterSample(5.5, "worker batch index", 3))
    assert tracker.compiling_first and tracker.trained_at is None


def test_backward_passes_prove_steps_and_no_warm_up_follows() -> None:
    tracker = WarmupTracker()
    tracker.add(window(3, 0.8, backward=2))  # two samples are not yet proof
    tracker.add(LogEvent(3.5, "compile", "forward (model.py:12)", ""))  # the first
    assert tracker.compiling_first
    tracker.add(window(6, 0.8, backward=1))
    assert tracker.trained_at == 6 and tracker.proof == "backward"
    assert tracker.warmup is not None and tracker.warmup.end == 6  # with its tail
    # A job found training (backward in its first window) never warms up.
    found = WarmupTracker()
    found.add(window(3, 0.8, backward=5))
    found.add(window(6, 1.0))
    assert found.warmup is None and found.trained_at == 3


def test_attached_during_a_recompilation_the_warm_up_is_dropped() -> None:
    tracker = WarmupTracker()
    tracker.add(window(3, 1.0))
    assert tracker.compiling_first
    tracker.add(LogEvent(3.5, "recompile", "forward (model.py:12)", "0/18: guard"))
    assert tracker.warmup is None and tracker.trained_at == 3.5
    # Watched from before it, the first compilation stays one.
    seen = WarmupTracker()
    seen.add(window(3, 0.0))
    seen.add(window(6, 1.0))
    seen.add(LogEvent(6.5, "recompile", "forward (model.py:12)", "0/1: guard"))
    seen.add(window(9, 1.0))
    assert seen.warmup is not None and (seen.warmup.start, seen.warmup.end) == (3, 9)
    assert seen.warmup.certain


def test_a_compilation_found_under_way_is_the_first_only_when_dynamo_says_so() -> None:
    """Attached while compiling: a frame's first compilation under way makes it the
    warm-up; steps proven without that word leave it uncertain: neither a
    warm-up to report nor a recompilation to count."""
    told = WarmupTracker()
    told.add(window(3, 1.0))
    told.add(LogEvent(3.5, "compile", "forward (model.py:12)", ""))
    told.add(window(6, 0.0, backward=5))
    assert told.warmup is not None and told.warmup.certain and told.warmup.end == 3
    unknown = WarmupTracker()
    unknown.add(window(3, 1.0))
    unknown.add(StepCounterSample(3.5, "step", 60))
    unknown.add(StepCounterSample(5.5, "step", 90))
    unknown.add(window(6, 0.9))
    # It ends with the windows seen before the proof; the next is judged as steps.
    assert unknown.warmup is not None and not unknown.warmup.certain
    assert unknown.warmup.end == 3
    session = Session(1)
    for sample in (window(T0 + 3, 1.0), StepCounterSample(T0 + 3.5, "step", 60),
                   StepCounterSample(T0 + 5.5, "step", 90), window(T0 + 6, 0.5)):
        session.add(sample)
    m = metrics_at(session, 6)
    assert m["compile_warmup_share"] == 0.0, "no warm-up to report"
    assert m["phase_compile_steady"] == pytest.approx(0.5), "nor its windows as recompiling"


def test_the_session_counts_recompilations_and_their_rate_from_compile_ids() -> None:
    session = Session(1)
    session.add(window(T0 + 3, 0.9, backward=5))
    session.add(LogEvent(T0 + 4, "recompile", "forward (model.py:12)", "0/18: guard a"))
    session.add(LogEvent(T0 + 14, "recompile", "forward (model.py:12)", "0/20: guard b"))
    session.add(window(T0 + 15, 0.9, backward=5))
    m = metrics_at(session, 15)
    assert m["recompiles_seen"] == 21  # the one under way is forward's 21st recompilation
    assert m["recompile_every_s"] == pytest.approx(5.0)
    assert m["steps_proven"] == 1.0 and m["compile_first_going_on"] == 0.0
    assert m["compile_warmup_share"] == 0.0 and m["phase_compile_steady"] == pytest.approx(0.9)


def test_the_compile_ceiling_takes_the_shares_sampling_error() -> None:
    spec = GainSpec("amdahl", metric="phase_compile_steady", samples="compile_steady_samples")
    facts = Facts()
    # 3 of 300 samples outside compiling: p = 0.99, yet x100 would not be a bound.
    gain = estimate_gain(spec, {"phase_compile_steady": 0.99, "compile_steady_samples": 300.0},
                         facts)
    assert gain.method == "amdahl" and gain.speedup is not None
    assert gain.speedup == pytest.approx(300 / fewest_expected(3)) and gain.speedup > 200
    # None outside it: no finite ceiling, and none shown.
    none = estimate_gain(spec, {"phase_compile_steady": 1.0, "compile_steady_samples": 300.0},
                         facts)
    assert none.speedup is None and "no ceiling" in none.explanation
    # Many samples outside: close to plain Amdahl, a little above.
    many = estimate_gain(spec, {"phase_compile_steady": 0.5, "compile_steady_samples": 2000.0},
                         facts)
    assert many.speedup is not None and 2.0 < many.speedup < 2.2
    # The Poisson bound: 5 seen is at least 1.97 expected (95 %, one-sided).
    assert fewest_expected(5) == pytest.approx(1.97, abs=0.02)
    assert fewest_expected(0) == 0.0


def test_recompiling_after_steps_is_named_with_its_frame_count_rate_and_guard() -> None:
    """A job found training, then recompiling for a new shape every few seconds:
    never warming up; compile_recurs leads, naming what dynamo's frames said."""
    base = dict(cpu_count=8, busy_threads=1, main_cpu=100.0, host_cpu=20.0, gpu=False,
                stack_period_s=3, samples_per_window=100)
    guard = "tensor 'x' size mismatch at index 1. expected 34, actual 35"
    training = Job(**base, phases=mix(data_wait=0.1))  # type: ignore[arg-type]
    recompiling = Job(**base, phases=mix(compile=0.8), events=(  # type: ignore[arg-type]
        (12, "recompile", "forward (model.py:12)", f"0/3: {guard}"),
        (30, "recompile", "forward (model.py:12)", f"0/6: {guard}")))
    _session, ticks = run(Diagnoser(RULESET, Facts()), (training, 9), (recompiling, 45))
    for tick in ticks:
        assert tick.diagnosis is not None and tick.diagnosis.category != "warming_up", (
            tick.now - T0, tick.diagnosis.summary if tick.diagnosis else None)
    lead = ticks[-1].diagnosis.findings[0]  # type: ignore[union-attr]
    assert lead.id == "compile_recurs", ticks[-1].diagnosis.summary  # type: ignore[union-attr]
    assert lead.title.startswith("torch.compile keeps recompiling forward (model.py:12): 80% ")
    assert ("Dynamo was seen recompiling forward (model.py:12): 7 recompilations of it since "
            f"the job started, one every 6 s. The guard that failed last: {guard}.") in lead.why
    # A bound that holds: p read over the counted samples, as high as they allow.
    assert lead.gain.method == "amdahl" and lead.gain.speedup is not None
    assert lead.gain.speedup > 1 / (1 - 0.8)


def test_without_dynamos_words_the_loops_line_says_where_it_compiles() -> None:
    """A dump inside a backward's compilation (AOTAutograd, outside dynamo's
    frames) names nothing: the loop's line the compiling samples pass through does."""
    from aitop.knowledge.metrics.compiling import compile_words
    from aitop.probes.samples import HotFrame

    compiling = StackWindow(T0, T0 + 3, "MainThread", "1", 100, {"compile": 80, "backward": 20},
                            hot_frames=(HotFrame("compile", "compile_fx", "torch/_inductor/"
                                                 "compile_fx.py:2782", 80, "/job/train.py:42"),))
    session = Session(1)
    session.add(compiling)
    assert compile_words(session, T0 + 3, [compiling])["recompile_frame"] == (
        "the model called at train.py:42")
    assert compile_words(session, T0 + 3)["recompile_frame"] == "the model"
    session.add(LogEvent(T0 + 3, "recompile", "forward (model.py:12)", "0/2: guard"))
    assert compile_words(session, T0 + 3, [compiling])["recompile_frame"] == (
        "forward (model.py:12)")
