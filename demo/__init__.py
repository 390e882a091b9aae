"""Bundled demo training jobs (they import torch; aitop itself never does)."""

#: The demo scenarios, each with one well-known bottleneck (see workload.py).
SCENARIOS: tuple[str, ...] = ("data", "compute", "checkpoint", "healthy")
