"""The packaged knowledge base, as a run without ``--rules`` loads it, for the tests.

The product loads its knowledge base once where a command starts and hands it
on; a test that builds a source, computes metrics or judges ranks by hand hands
on this one.
"""

from __future__ import annotations

from aitop.knowledge.metrics.straggler import holds_back_condition
from aitop.knowledge.reading.loader import load_knowledge_base

PACKAGED = load_knowledge_base()
#: The packaged helper-thread prefixes (``compute_metrics``' last argument).
HELPER_THREADS = PACKAGED.phases.helper_threads
#: The packaged straggler cut (``judge_ranks``' second argument).
HOLDS_BACK = holds_back_condition(PACKAGED)
