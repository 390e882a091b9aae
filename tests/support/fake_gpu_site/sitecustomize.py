"""A GPU for an aitop started as a process on a machine without one.

Python imports ``sitecustomize`` at start-up from any folder on its path: a test
that puts this folder (and ``tests/``) on ``PYTHONPATH`` and names a scenario of
the fake NVML in ``AITOP_TEST_FAKE_NVML`` gets an aitop whose GPU probe reads that
scenario instead of the real driver (the only fake the suite allows).
"""

from __future__ import annotations

import os

_SCENARIO = os.environ.get("AITOP_TEST_FAKE_NVML")
if _SCENARIO:
    import aitop.probes.gpu as _gpu
    from support.fake_nvml import make_fake

    _gpu.pynvml = make_fake(_SCENARIO)  # type: ignore[assignment]
