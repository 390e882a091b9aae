"""Communication between ranks, and the rank that holds the others back.

A rank waits for the others in two places. Where Python can see it (a
``dist.all_reduce``/``barrier`` the job calls, DDP's buffer broadcast, FSDP's
all-gathers), its stacks say so: phase ``comm``. DDP's gradient all-reduce runs
in C++ inside ``backward()``: the Python stack reads "backward" whether the
rank computes or waits. On a CPU rank the difference is the training thread's
own CPU clock: time inside forward/backward/optimizer that the thread spent
neither running nor queued for a CPU is time blocked on the other ranks
(``comm_hidden``). On a GPU rank the thread idles in backward while the device
works, so that reading would be wrong; there the wait surfaces at the next host
sync, and only the visible part is counted.

Across ranks, DDP steps in lockstep: every rank runs at the straggler's pace,
and the straggler is the rank that waits least. Its score follows NVIDIA's
straggler detector (the fastest rank's step time over this rank's), with each
rank's own work (step time less its waits) standing for its step time:
``score = min own work / this rank's own work``. Where the cut lies is the
knowledge base's named condition ``holds_back_job`` (rules.yaml), the same one
the rules use, so the panel and the findings can never disagree about it.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ..base.expressions import Condition
from ..base.findings import Diagnosis, Finding
from ..reading.loader import KnowledgeBase

Metrics = Mapping[str, "float | None"]

#: The named condition (rules.yaml ``conditions:``) under which the straggler
#: holds the job back.
HOLDS_BACK = "holds_back_job"


def holds_back_condition(knowledge: KnowledgeBase) -> Condition | None:
    """The knowledge base's cut under which the straggler holds the job back."""
    return knowledge.rules.conditions.get(HOLDS_BACK)


#: Categories that say "this rank waits for the others": not a rank's own cause.
WAITING_CATEGORIES = frozenset({"communication"})
#: The category of a rank that does not move (rules.yaml ``job_stalled``).
STALLED = "stalled"


#: Metrics only the rank judging a whole job knows (None for every other session).
JOB_METRICS = ("ranks_watched", "job_comm_share", "straggler_score", "straggler_rank_comm",
               "job_wait_share", "straggler_excess", "straggler_stalled")


def comm_metrics(metrics: Metrics) -> dict[str, float | None]:
    """``comm_hidden`` and ``comm_share`` from the phases and the training thread's clock.

    ``metrics``: the phase, thread and process metrics of the window. The
    job-level metrics start unknown; the evaluator of a multi-rank job's lead
    rank fills them.
    """
    values: dict[str, float | None] = dict.fromkeys(JOB_METRICS)
    values["ranks_watched"] = 1.0  # this rank alone, until a job is judged
    values["waits_for_straggler"] = 0.0  # no straggler known, until the job's judgement
    visible = metrics.get("phase_comm")
    hidden = hidden_comm(metrics)
    values["comm_hidden"] = hidden
    values["comm_share"] = None if visible is None else visible + (hidden or 0.0)
    values["comm_bound"] = comm_bound(metrics, values["comm_share"], hidden)
    return values


def comm_bound(metrics: Metrics, share: float | None, hidden: float | None) -> float | None:
    """The most of a rank's wall time that communicating may cost it.

    Its wait (``comm_share``) is not all: on a CPU rank the exchange's own work
    (gloo's threads summing and copying, DDP's bucket copies on the training
    thread) takes cores the step computes on, and shows only as backward
    running longer. A backward pass computes at least as much as its forward
    (every layer's weight gradient is a product as large as its forward), so
    backward's time beyond forward's bounds what the exchange inside it costs.
    On GPU ranks, where the wait inside backward is not read, the visible share.
    """
    if share is None or hidden is None:
        return share
    excess = (metrics.get("phase_backward") or 0.0) - (metrics.get("phase_forward") or 0.0)
    return max(share, min(excess, 1.0))


def hidden_comm(metrics: Metrics) -> float | None:
    """Share of wall time a CPU rank's training thread was blocked inside compute phases.

    ``on_cpu`` is the training thread's CPU plus its time queued for a CPU; the
    phases outside forward/backward/optimizer where the thread works (its own
    Python, evaluation, checkpoints, loading in the training process) take their
    share of that first; what compute phases then lack is waiting.
    """
    # Ranks on other machines are waited for just the same (older recordings lack
    # job_ranks: their local ranks were all the job aitop knew).
    ranks = metrics.get("job_ranks") or metrics.get("local_ranks") or 1.0
    compute = metrics.get("phase_compute")
    thread = metrics.get("training_thread_cpu")
    if ranks < 2 or metrics.get("has_gpu") == 1.0 or compute is None or thread is None:
        return None
    queued = metrics.get("main_cpu_wait_mean") or 0.0
    on_cpu = min(1.0, (thread + queued) / 100.0)
    busy_elsewhere = sum(metrics.get(f"phase_{p}") or 0.0 for p in ("other", "eval", "checkpoint"))
    if loads_in_training_thread(metrics):
        busy_elsewhere += metrics.get("phase_data_wait") or 0.0
    computing = max(0.0, on_cpu - busy_elsewhere)
    return max(0.0, min(compute, compute - computing))


def loads_in_training_thread(metrics: Metrics) -> bool:
    """Whether the training thread makes its own batches (no workers, no producer)."""
    if metrics.get("data_in_own_code") == 1.0:
        return True
    return metrics.get("num_workers") == 0.0 and metrics.get("data_from_queue") == 0.0


@dataclass(frozen=True, slots=True)
class RankView:
    """One rank as the job-level judgement sees it."""

    label: str
    pid: int
    comm_share: float | None
    steps_per_s: float | None
    #: The rank's own lead finding that is not itself a wait for the others.
    cause: Finding | None
    #: Its largest kind of own work, for a rank with no finding ("data wait 47%").
    top_phase: str | None
    #: Shares of its time in each kind of its own work (``own_phases``; empty
    #: before its phases are known).
    own: Mapping[str, float] = dataclasses.field(default_factory=dict)

    @property
    def own_work(self) -> float | None:
        """Share of its time the rank spends on its own work, not waiting for others."""
        return None if self.comm_share is None else max(1.0 - self.comm_share, 1e-3)


def rank_view(label: str, pid: int, diagnosis: Diagnosis | None) -> RankView:
    """A rank's view from its newest diagnosis (or an empty one before it has any)."""
    if diagnosis is None:
        return RankView(label, pid, None, None, None, None)
    m = diagnosis.metrics
    cause = next((f for f in diagnosis.findings if f.category not in WAITING_CATEGORIES), None)
    own = own_phases(m)
    return RankView(label, pid, m.get("comm_share"), m.get("steps_per_s"), cause,
                    _top_phase(own), own)


def own_phases(metrics: Metrics) -> dict[str, float]:
    """Shares of a rank's wall time in its own work, by kind: the phases that are
    not waiting for the others, its compute less the wait hidden inside it.
    Empty while its phases are unknown (no stack window read yet)."""
    read = {p: metrics.get(f"phase_{p}") for p in ("data_wait", "eval", "checkpoint", "sync",
                                                    "other")}
    compute = metrics.get("phase_compute")
    if compute is None and all(v is None for v in read.values()):
        return {}
    shares = {p: v or 0.0 for p, v in read.items()}
    if compute is not None:
        shares["compute"] = max(0.0, compute - (metrics.get("comm_hidden") or 0.0))
    return shares


def _top_phase(own: Mapping[str, float]) -> str | None:
    if not own:
        return None
    phase, share = max(own.items(), key=lambda kv: kv[1])
    if share <= 0.0:
        return None
    return f"{phase.replace('_', ' ')} {share:.0%}"


#: The kinds of own work in a sentence (the phase bar's labels say "other").
KIND_WORDS: Mapping[str, str] = {
    "data_wait": "data wait", "eval": "evaluation", "checkpoint": "checkpointing",
    "sync": "host syncs", "other": "own code outside the step's phases (other)",
    "compute": "compute",
}


#: A share of its time a straggler spends on one kind of work beyond the other
#: ranks' mean for it, below which that difference is not named as the cause.
MIN_EXCESS = 0.05

#: What to change in a straggler whose extra time is of this kind, and no
#: finding of its own says more. ``{rank}``, ``{pid}``: the straggler's. Each
#: fits a word's length (``MAX_WORD_CHARS``) with a long rank label.
EXCESS_ACTIONS: Mapping[str, str] = {
    "data_wait": "give {rank} the loading the other ranks have (num_workers, its own shard), "
                 "or more DataLoader workers",
    "eval": "evaluate less often, or on every rank with each its own shard, not on {rank} "
            "alone",
    "checkpoint": "save from {rank} less often or asynchronously "
                  "(torch.distributed.checkpoint.async_save)",
    "sync": "take {rank}'s host syncs (.item(), .cpu(), printed tensors) out of the step",
    "other": "move what {rank} does beyond the others (logging, metrics) out of "
             "the step; `aitop --pid {pid}` shows where",
    "compute": "give {rank} no more compute than each other rank: equal shards and batch "
               "sizes, cores of its own",
}


def excess_work(straggler: RankView, others: Sequence[RankView]) -> tuple[str, float, float] | None:
    """The kind of work whose share of the straggler's time most exceeds the other
    ranks' mean share, with both; None where none exceeds it by ``MIN_EXCESS``.
    The ranks step in lockstep, so shares of their wall time compare as times per
    step: what one rank does beyond the others is what makes it slower, whatever
    its largest phase is. Ranks whose phases or wait are unknown are left out."""
    rivals = [r.own for r in others if r.own and r.comm_share is not None]
    if not straggler.own or not rivals:
        return None
    excess = {p: (share, sum(r.get(p, 0.0) for r in rivals) / len(rivals))
              for p, share in straggler.own.items()}
    phase, (share, theirs) = max(excess.items(), key=lambda kv: kv[1][0] - kv[1][1])
    if share - theirs < MIN_EXCESS:
        return None
    return phase, share, theirs


@dataclass(frozen=True, slots=True)
class JobJudgement:
    """Which rank holds the job back, by how much, and the numbers for the rules."""

    ranks: tuple[RankView, ...]
    straggler: RankView | None
    #: Each rank's straggler score (None until its comm share is known).
    scores: Mapping[int, float]
    #: Whether the straggler holds the others back (its score is below the cut).
    flagged: bool = False

    def metrics(self) -> dict[str, float | None]:
        known = [r for r in self.ranks if r.comm_share is not None]
        out: dict[str, float | None] = {
            "ranks_watched": float(len(known)),
            "job_comm_share": (sum(r.comm_share or 0.0 for r in known) / len(known)
                               if known else None),
            "straggler_score": None, "straggler_rank_comm": None,
            "job_wait_share": None, "straggler_excess": None, "straggler_stalled": None,
        }
        s = self.straggler
        if s is None or s.comm_share is None or len(known) < 2:
            return out
        others = [r.comm_share or 0.0 for r in known if r.pid != s.pid]
        wait = sum(others) / len(others)
        out.update({
            "straggler_score": self.scores.get(s.pid),
            "straggler_rank_comm": s.comm_share,
            "job_wait_share": wait,
            # What the others wait beyond what the straggler waits itself: the
            # part of their step that exists only because it is slower.
            "straggler_excess": max(0.0, wait - s.comm_share),
            # A rank that stands still while the others wait is the hung one.
            "straggler_stalled": float(s.cause is not None and s.cause.category == STALLED),
        })
        return out

    def seen_from(self, pid: int) -> dict[str, float | None]:
        """What rank ``pid`` learns of the job: whether it waits for a straggler
        that holds the job back and is not itself, and what the ranks lose to
        it (``straggler_excess``). Every rank hears it, so that a rank's own
        view of its wait names what it waits for."""
        s = self.straggler
        waits = self.flagged and s is not None and s.pid != pid
        # The straggler itself keeps it too: judging the job, its ceiling is what
        # the others would get back.
        excess = self.metrics()["straggler_excess"] if self.flagged else None
        return {"waits_for_straggler": float(waits), "straggler_excess": excess}

    def excess(self) -> tuple[str, float, float] | None:
        """What the straggler does beyond the other ranks (``excess_work``)."""
        s = self.straggler
        return None if s is None else excess_work(s, [r for r in self.ranks if r.pid != s.pid])

    def excess_row(self) -> str | None:
        """The straggler's excess as a ranks-table cell: "other 16% (others 1%)"."""
        extra = self.excess()
        if extra is None:
            return None
        phase, share, theirs = extra
        return f"{phase.replace('_', ' ')} {share:.0%} (others {theirs:.0%})"

    def words(self) -> dict[str, str]:
        s = self.straggler
        if s is None:
            return {}
        extra = self.excess()
        if s.cause is not None:
            cause = s.cause.title
            action = s.cause.actions[0] if s.cause.actions else "see its findings"
        elif extra is not None:
            phase, share, theirs = extra
            cause = (f"its {KIND_WORDS[phase]} {share:.0%} of its time, against "
                     f"{theirs:.0%} on the other ranks")
            action = EXCESS_ACTIONS[phase].format(rank=s.label, pid=s.pid)
        else:
            cause = f"its own {s.top_phase}" if s.top_phase else "not yet known"
            action = f"watch it alone (`aitop --pid {s.pid}`) for its own bottleneck"
        return {"straggler": f"{s.label} (PID {s.pid})", "straggler_cause": cause,
                "straggler_action": action}


def judge_ranks(ranks: Sequence[RankView], holds_back: Condition | None) -> JobJudgement:
    """Straggler scores, and the rank that waits least when others wait for it.

    ``holds_back`` is the run's knowledge base's ``holds_back_job`` condition
    (:func:`holds_back_condition`), evaluated on the judgement's own metrics; a
    knowledge base without one flags no straggler.
    """
    known = [r for r in ranks if r.own_work is not None]
    if len(known) < 2:
        return JobJudgement(tuple(ranks), None, {})
    fastest = min(r.own_work or 1.0 for r in known)
    scores = {r.pid: fastest / (r.own_work or 1.0) for r in known}
    straggler = min(known, key=lambda r: scores[r.pid])
    judgement = JobJudgement(tuple(ranks), straggler, scores)
    flagged = holds_back is not None and holds_back.evaluate(judgement.metrics()) is True
    return dataclasses.replace(judgement, flagged=flagged)
