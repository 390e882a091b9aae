"""Benchmarks of aitop against its performance targets: ``python -m benchmarks.run``.

Everything here measures aitop from the outside, the way a user runs it: the real
CLI (headless) or the real TUI (in a detached tmux session, or driven by Textual's
Pilot for key latency), attached to the bundled demo training jobs, whose own
timers (``--truth``) are the ground truth. See docs/benchmarks.md for the method
behind each figure and the latest results.
"""
