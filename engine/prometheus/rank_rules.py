"""The job judged across its ranks in Prometheus, wherever each rank runs.

One aitop sees the ranks of its own machine; a job spread over nodes is seen
whole only where every node's series meet. Each rank's series carry the job's
``job_id`` and the rank's placement (``rank``, ``node_rank``, ``hostname``), so
recording rules can do what aitop's own straggler judgement
(``knowledge.straggler``) does for the ranks of one machine:

* ``aitop:rank_own_work_ratio``: the share of its time a rank works rather than
  waits for the others, ``max(1 - comm_share, 0.001)`` as aitop computes it;
* ``aitop:rank_straggler_score``: the fastest rank's own work over this rank's,
  within its ``job_id`` (DDP ranks step in lockstep, so shares compare as work
  per step), for jobs with two ranks or more;
* ``aitop:job_steps_per_second``: the job's steps per second, one series per
  ``job_id`` from whichever of its ranks' aitops read a rate (DDP ranks step in
  lockstep, so each rank's rate is the job's; the lowest reading, as a counter
  misread upwards would otherwise lead);
* the alert ``AitopStragglerRank`` where the knowledge base's named condition
  ``holds_back_job`` holds for a rank's score (its cut is said once, in
  rules.yaml), naming the rank, its node and its own bottleneck.
"""

from __future__ import annotations

from typing import Any

from aitop.engine.prometheus.promql import Translator, Untranslatable
from aitop.knowledge.base.rules import RuleSet

GROUP = "aitop-ranks"
OWN_WORK = "aitop:rank_own_work_ratio"
SCORE = "aitop:rank_straggler_score"
JOB_STEPS = "aitop:job_steps_per_second"
ALERT = "AitopStragglerRank"
#: The named condition (rules.yaml) whose cut flags a straggler.
HOLDS_BACK = "holds_back_job"
#: The rule of aitop's own whose finding the alert stands for across nodes.
RULE = "straggler_holds_back_job"
#: The catalogue metric the named condition judges, as exported.
SCORE_METRIC = "aitop_straggler_score"


def rank_group(ruleset: RuleSet, translator: Translator | None = None) -> dict[str, Any] | None:
    """The group of recording rules and the straggler alert; None without the condition."""
    condition = ruleset.conditions.get(HOLDS_BACK)
    if condition is None:
        return None
    try:
        held_back = (translator or Translator()).condition(condition.expr)
    except Untranslatable:
        return None
    if SCORE_METRIC not in held_back:
        return None  # a --rules file redefined it over other metrics: no cross-node form
    own = ("clamp_min(1 - max without (instance, job) (aitop_comm_share_ratio), 0.001)")
    score = (f"(min by (job_id) ({OWN_WORK}) / on (job_id) group_right {OWN_WORK}) "
             f"and on (job_id) (count by (job_id) ({OWN_WORK}) >= 2)")
    rule = next((r for r in ruleset.rules if r.id == RULE), None)
    alert: dict[str, Any] = {"alert": ALERT, "expr": held_back.replace(SCORE_METRIC, SCORE)}
    if rule is not None and rule.for_s > 0:
        alert["for"] = f"{rule.for_s:g}s"
    alert["labels"] = {"severity": rule.severity if rule else "high",
                       "category": "communication", "rule": RULE}
    # Its own lead: a firing finding of the rank that is not a wait for the others.
    cause = ('{{ with printf `aitop_finding_info{job_id="%s",rank="%s",category!="communication"}`'
             ' $labels.job_id $labels.rank | query }}{{ . | first | label "title" }}'
             '{{ else }}not known yet{{ end }}')
    alert["annotations"] = {
        "title": ("rank {{ $labels.rank }} (node {{ $labels.node_rank }}, {{ $labels.hostname }})"
                  " holds job {{ $labels.job_id }} back: straggler score "
                  "{{ $value | printf \"%.2f\" }}; its own bottleneck: " + cause),
        "description": ("Every rank waits for the slowest at each gradient exchange. This "
                        "rank's own work per step is 1/score times the fastest rank's, read "
                        "from every node's aitop; fix its own bottleneck and the others stop "
                        "waiting."),
        "source": rule.source.get("document", "") if rule else "",
    }
    return {"name": GROUP, "rules": [
        {"record": OWN_WORK, "expr": own},
        {"record": SCORE, "expr": score},
        {"record": JOB_STEPS, "expr": "min by (job_id) (aitop_steps_per_second)"},
        alert,
    ]}
