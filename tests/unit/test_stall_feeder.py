"""What became of the threads that worked beside a stalled loop (knowledge/metrics/stall_feeder.py).

Sessions are built from the real sample dataclasses: a training thread standing
in ``Queue.get`` window after window, and a thread that worked beside it for
the first seconds, then exited, idled, or kept working.
"""

from __future__ import annotations

from aitop.knowledge.base.expressions import MAX_WORD_CHARS
from aitop.knowledge.metrics.stall_feeder import stall_feeder
from aitop.knowledge.metrics.words import compute_words
from aitop.probes.samples import (
    HotFrame,
    LogEvent,
    ProcessInfo,
    ProcessTreeSample,
    StackWindow,
    ThreadActivity,
    ThreadInfo,
)
from aitop.probes.session import Session

T0 = 1_700_000_000.0
PID = 4242
FEEDER = PID + 7


def stuck_session(*, works_until: int, alive_until: int, feeder_cpu: float = 0.0,
                  name: str = "feeder", seconds: int = 30) -> Session:
    """One window and one /proc reading a second; the feeder works until ``works_until``."""
    session = Session(PID)
    for i in range(1, seconds + 1):
        working = i <= works_until
        session.add(StackWindow(
            t_start=T0 + i - 1, t_end=T0 + i, thread_name="MainThread", thread_id=str(PID),
            total_samples=100, phase_counts={"data_wait": 100},
            hot_frames=(HotFrame("data_wait", "Condition.wait", "threading.py:327", 100,
                                 "/job/train.py:42"),),
            other_threads=(ThreadActivity(str(FEEDER), name, 100, 90 if working else 0,
                                          "conv2d (torch/nn/functional.py:100)"),)
            if i <= alive_until else (),
        ))
        threads = [ThreadInfo(PID, "python", 1.0)]
        if i <= alive_until:
            threads.append(ThreadInfo(FEEDER, name[:15], 90.0 if working else feeder_cpu))
        session.add(ProcessTreeSample(t=T0 + i, target_pid=PID, alive=True, processes=(
            ProcessInfo(pid=PID, ppid=1, role="main", name="python", cmdline=("python",),
                        status="sleeping", cpu_percent=1.0, rss_bytes=10**9, num_threads=2,
                        read_bps=0.0, write_bps=0.0, threads=tuple(threads)),)))
    return session


def test_a_feeder_that_exited_is_named_with_when_it_last_worked() -> None:
    session = stuck_session(works_until=5, alive_until=5)
    said = stall_feeder(session, T0 + 30, stalled_s=28.0)
    assert said == "Its thread 'feeder', last seen working 25 s ago, has exited.", said


def test_a_feeder_alive_but_idle_waits_itself() -> None:
    session = stuck_session(works_until=5, alive_until=30)
    said = stall_feeder(session, T0 + 30, stalled_s=28.0)
    assert said == ("Its thread 'feeder', last seen working 25 s ago, is alive but idle: "
                    "it waits itself.")


def test_a_feeder_still_working_or_using_a_core_is_not_called_idle() -> None:
    assert stall_feeder(stuck_session(works_until=30, alive_until=30), T0 + 30, 28.0) == ""
    # Not seen in a Python frame, yet on a core (native code): not idle.
    assert stall_feeder(stuck_session(works_until=5, alive_until=30, feeder_cpu=60.0),
                        T0 + 30, 28.0) == ""


def test_the_pin_memory_thread_and_long_gone_threads_are_not_feeders() -> None:
    pin = stuck_session(works_until=5, alive_until=5, name="pt_pin_memory")
    assert stall_feeder(pin, T0 + 30, 28.0) == ""
    # Work that ended more than a minute before the stall began is not beside it.
    old = stuck_session(works_until=5, alive_until=5, seconds=130)
    assert stall_feeder(old, T0 + 130, stalled_s=60.0) == ""


def test_a_thread_that_has_exited_is_no_producer() -> None:
    """The loop waits on a queue its feeder left: no advice for a thread that is gone."""
    gone = stuck_session(works_until=5, alive_until=5, seconds=12)
    assert "producer" not in compute_words(gone, T0 + 12, 20.0)
    alive = stuck_session(works_until=12, alive_until=12, seconds=12)
    assert compute_words(alive, T0 + 12, 20.0)["producer"] == "thread 'feeder'"


def test_a_thread_the_jobs_log_says_died_is_named_with_its_exception() -> None:
    """Attached after the producer died: the stacks show only the wait, the log why."""
    session = stuck_session(works_until=0, alive_until=0)
    session.add(LogEvent(T0 + 2, "thread_died", "batch-producer",
                         "RuntimeError: shard 42 truncated"))
    said = stall_feeder(session, T0 + 30, stalled_s=28.0)
    assert said == ("Its thread 'batch-producer' died on an exception (its log: "
                    "RuntimeError: shard 42 truncated)."), said
    # A long exception is cut so the sentence closes within a word's length.
    session.add(LogEvent(T0 + 3, "thread_died", "batch-producer",
                         "RuntimeError: simulated shard read failure: " + "/data/x" * 30))
    said = stall_feeder(session, T0 + 30, stalled_s=28.0)
    assert len(said) <= MAX_WORD_CHARS and said.endswith("…)."), said
