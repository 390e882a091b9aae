"""Which frame a rule names for the training thread's 'other' time
(``other_frame``, knowledge/metrics/words.py), from real sample dataclasses."""

from __future__ import annotations

from aitop.knowledge.metrics.words import compute_words
from aitop.probes.samples import HotFrame, StackWindow
from aitop.probes.session import Session

T0 = 1_700_000_000.0
PID = 4242
CALLER = "/srv/serve.py:131"


def session_of(*frames: tuple[str, str, int]) -> Session:
    """Three windows whose 'other' samples had these (function, location, count) innermost."""
    session = Session(PID)
    total = sum(n for *_rest, n in frames)
    for i in range(3):
        session.add(StackWindow(
            t_start=T0 + 2 * i, t_end=T0 + 2 * i + 2, thread_name="MainThread",
            thread_id=str(PID), total_samples=total, phase_counts={"other": total},
            hot_frames=tuple(HotFrame("other", f, loc, n, CALLER) for f, loc, n in frames)))
    return session


def test_a_function_whose_time_spreads_over_its_lines_is_named_over_its_callers_one_line() -> None:
    """A hand-written tokenizer's time spreads over its loop's lines; the batch
    function's one line converting the rows (in C, no Python frame below it) holds
    more samples than any one of them, and less than all of them together."""
    session = session_of(("encode", "/srv/serve.py:55", 30), ("encode", "/srv/serve.py:57", 25),
                         ("encode", "/srv/serve.py:58", 20),
                         ("encode_batch", "/srv/serve.py:67", 40))
    words = compute_words(session, T0 + 6, 6)
    assert words["other_frame"] == "encode (serve.py:55), called from serve.py:131"


def test_the_hottest_function_is_named_at_its_hottest_line() -> None:
    session = session_of(("log_metrics", "/job/train.py:9", 10),
                         ("log_metrics", "/job/train.py:12", 50),
                         ("encode", "/job/train.py:30", 45))
    words = compute_words(session, T0 + 6, 6)
    assert words["other_frame"] == "log_metrics (train.py:12), called from serve.py:131"


def test_the_loop_line_that_leads_to_most_of_it_is_named_before_the_function() -> None:
    """An environment stepped from one loop line spends its time in its own lines
    and in NumPy's; the loop's loss lines (loose tensor ops, no frame below) each
    hold their own. Summed per function the loop's would win (37 against the
    environment's 25); the environment's line leads to 40, and is named."""
    loop = env = "/job/rl.py"
    numpy = "numpy/core/fromnumeric.py"
    frames = [("FieldEnv.step", f"{env}:30", 10, f"{loop}:61"),
              ("FieldEnv.step", f"{env}:31", 8, f"{loop}:61"),
              ("FieldEnv.step", f"{env}:33", 7, f"{loop}:61"),
              ("clip", f"{numpy}:2169", 9, f"{loop}:61"),
              ("sum", f"{numpy}:2313", 6, f"{loop}:61"),
              ("train", f"{loop}:88", 12, f"{loop}:88"),
              ("train", f"{loop}:90", 11, f"{loop}:90"),
              ("train", f"{loop}:92", 14, f"{loop}:92")]
    session = Session(PID)
    total = sum(n for _f, _loc, n, _c in frames)
    for i in range(3):
        session.add(StackWindow(
            t_start=T0 + 2 * i, t_end=T0 + 2 * i + 2, thread_name="MainThread",
            thread_id=str(PID), total_samples=total, phase_counts={"other": total},
            hot_frames=tuple(HotFrame("other", f, loc, n, c) for f, loc, n, c in frames)))
    words = compute_words(session, T0 + 6, 6)
    assert words["other_frame"] == "FieldEnv.step (rl.py:30), called from rl.py:61"

