"""The UI's start-up objects, set aside from the garbage collector's full passes.

Textual's rendering leaves cyclic garbage all the time (strips and their caches),
so Python's full collections come every few seconds, and each walks every object
the process holds: with the 80,000 that importing Textual and building the
knowledge base, the probes and the first frame leave, 70-95 ms with the UI's
thread stopped, which a key pressed then waits out (docs/benchmarks.md, keys).
Those objects live as long as the process: moved to the permanent generation
(``gc.freeze``) once the first frame is up, full passes no longer walk them.
"""

from __future__ import annotations

import gc


def freeze_start_up_objects() -> int:
    """Collect once, then freeze what is left; returns how many objects were frozen."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
