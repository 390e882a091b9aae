"""The UI's own cuts: what a panel judges where the knowledge base has no target.

Every other colour a panel gives a value comes from the knowledge base's targets
(``aitop.knowledge.judging.verdicts``), as a finding's evidence does. These two
judge readings no rule reads and no document gives a number for; they are said
here once, and tests/unit/test_knowledge_said_once.py fails on a number a
widget compares with that is neither here nor visual.
"""

from __future__ import annotations

#: An SM clock below this share of its maximum, held there for a reason other
#: than idling, is held down (shown near): boost clocks wander a few percent.
SLOW_CLOCK_SHARE = 0.95
#: One core at this % or more is saturated (shown near in the per-core cells):
#: a thread there cannot go faster.
SATURATED_CORE_PERCENT = 95.0
