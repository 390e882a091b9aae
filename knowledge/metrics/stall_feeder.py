"""What became of the threads that worked beside a stalled training thread.

A loop that stands still on a queue or a lock waits for another thread to fill
or release it. The stack windows say which of the job's threads were working
(outside a wait) before and during the stall; ``/proc/PID/task`` says which of
them still exist. A thread that worked and has since exited is the usual cause
(a producer that died on an exception, or returned early); one that is alive
but no longer works waits itself. Either is said by its name, with when it was
last seen working, so the user looks there first instead of at the frame the
training thread stands in. Where the job's log holds the thread's traceback
(Python prints ``Exception in thread NAME:``), that is said first, with the
exception: it names the cause even when aitop attached after the thread died.
"""

from __future__ import annotations

from aitop.probes.samples import LogEvent, ThreadActivity, ThreadInfo
from aitop.probes.session import Session

from ..base.expressions import MAX_WORD_CHARS, clip

#: How long before a stall began a thread's work still counts as beside the loop.
FEEDER_LOOKBACK_S = 60.0
#: A live thread not seen working for this long, and using under IDLE_CPU_PERCENT
#: of a core now, is idle.
IDLE_FOR_S = 10.0
IDLE_CPU_PERCENT = 5.0
#: Characters of a thread's name a sentence keeps (each sentence is one word,
#: at most ``MAX_WORD_CHARS`` long).
NAME_CHARS = 32


def stall_feeder(session: Session, now: float, stalled_s: float) -> str:
    """One sentence on the threads that worked beside the stalled loop, or ""."""
    died = _died_in_log(session, now)
    if died is not None:
        # The exception is cut, not the sentence: it closes within a word's length.
        name, tail = clip(died.subject, NAME_CHARS), ")."
        head = f"Its thread '{name}' died on an exception (its log: "
        return head + clip(died.text, MAX_WORD_CHARS - len(head) - len(tail)) + tail
    since = now - stalled_s
    last_busy: dict[str, tuple[float, ThreadActivity]] = {}
    for w in session.stacks.window(since - FEEDER_LOOKBACK_S, now):
        if w.error is not None:
            continue
        for t in w.other_threads:
            if t.busy_samples > 0 and t.thread_id != w.thread_id and not t.is_pin_memory:
                last_busy[t.thread_id] = (w.t_end, t)
    alive = live_threads(session)
    if not last_busy or alive is None:
        return ""
    gone = [(t_end, t) for t_end, t in last_busy.values() if is_gone(t, alive)]
    if gone:
        t_end, thread = max(gone, key=lambda g: g[0])
        return (f"Its thread '{clip(_name(thread), NAME_CHARS)}', last seen working "
                f"{_ago(now, t_end)}, has exited.")
    idle = [(t_end, t) for tid, (t_end, t) in last_busy.items()
            if tid in alive and t_end <= now - IDLE_FOR_S
            and (alive[tid].cpu_percent or 0.0) < IDLE_CPU_PERCENT]
    if idle:
        t_end, thread = max(idle, key=lambda g: g[0])
        return (f"Its thread '{clip(_name(thread), NAME_CHARS)}', last seen working "
                f"{_ago(now, t_end)}, is alive but idle: it waits itself.")
    return ""


def _died_in_log(session: Session, now: float) -> LogEvent | None:
    """The newest thread the job's log says died on an exception, up to ``now``.

    Said whether or not aitop saw the thread at work: attached after it died,
    the stacks show only the wait, the log its traceback.
    """
    deaths = [e for e in session.events.window(float("-inf"), now) if e.kind == "thread_died"]
    return deaths[-1] if deaths else None


def live_threads(session: Session) -> dict[str, ThreadInfo] | None:
    """The target's threads by id at the newest /proc reading, or None where unread."""
    tree = session.processes.last()
    if tree is None or tree.main is None or not tree.main.threads:
        return None
    return {str(th.tid): th for th in tree.main.threads}


def is_gone(thread: ThreadActivity, alive: dict[str, ThreadInfo] | None) -> bool:
    """Whether a thread py-spy saw has exited (its id is no longer in /proc/PID/task)."""
    return alive is not None and thread.thread_id.isdigit() and thread.thread_id not in alive


def _name(thread: ThreadActivity) -> str:
    return thread.name or f"TID {thread.thread_id}"


def _ago(now: float, t: float) -> str:
    return f"{max(0.0, now - t):.0f} s ago"
