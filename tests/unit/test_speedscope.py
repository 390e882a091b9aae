"""Reading py-spy's speedscope windows: the raw format's stacks, and each thread's order.

The files here are shaped as py-spy 0.4 writes them with ``--threads --idle
--full-filenames`` (one profile a thread, frames shared, samples root first,
the thread's own root frame first); a real py-spy window of a real job is read in
tests/unit/test_step_anatomy.py.
"""

from __future__ import annotations

import json

import pytest
from aitop.probes.phases import Frame, parse_raw
from aitop.probes.speedscope import parse_speedscope

SITE = "/venv/lib/python3.11/site-packages"
FRAMES = [
    {"name": "thread (101): MainThread", "file": "", "line": 0, "col": None},
    {"name": "train", "file": "/job/train.py", "line": 42, "col": None},
    {"name": "Module._call_impl", "file": f"{SITE}/torch/nn/modules/module.py", "line": 1786,
     "col": None},
    {"name": "_engine_run_backward", "file": f"{SITE}/torch/autograd/graph.py", "line": 841,
     "col": None},
    {"name": "thread (102): pt_data_pin", "file": "", "line": 0, "col": None},
    {"name": "Condition.wait", "file": "/usr/lib/python3.11/threading.py", "line": 327,
     "col": None},
]
FORWARD, BACKWARD, PARKED = [0, 1, 2], [0, 1, 3], [4, 5]


def speedscope(*threads: list[list[int]]) -> str:
    profiles = [{"type": "sampled", "name": f"Thread {i}", "unit": "seconds", "startValue": 0,
                 "endValue": 1, "samples": samples, "weights": [0.1] * len(samples)}
                for i, samples in enumerate(threads)]
    return json.dumps({"$schema": "https://www.speedscope.app/file-format-schema.json",
                       "profiles": profiles, "shared": {"frames": FRAMES},
                       "activeProfileIndex": 0, "exporter": "py-spy@0.4.3", "name": "py-spy"})


def test_the_same_stacks_as_the_raw_format_and_each_threads_order() -> None:
    paths: dict[str, str] = {}
    profile = parse_speedscope(speedscope([FORWARD, BACKWARD, BACKWARD, FORWARD, BACKWARD],
                                          [PARKED, PARKED]), paths)
    raw = parse_raw(
        f"thread (101): MainThread;train (/job/train.py:42);Module._call_impl "
        f"({SITE}/torch/nn/modules/module.py:1786) 2\n"
        f"thread (101): MainThread;train (/job/train.py:42);_engine_run_backward "
        f"({SITE}/torch/autograd/graph.py:841) 3\n"
        "thread (102): pt_data_pin;Condition.wait (/usr/lib/python3.11/threading.py:327) 2\n")
    assert sorted(profile.stacks, key=repr) == sorted(raw, key=repr)
    forward, backward = (next(i for i, s in enumerate(profile.stacks)
                              if s.frames[-1].function == name)
                         for name in ("Module._call_impl", "_engine_run_backward"))
    assert profile.order["101"] == [forward, backward, backward, forward, backward]
    assert len(profile.order["102"]) == 2
    # Library files are shortened as py-spy shortens them; the job's keep their path.
    assert profile.stacks[forward].frames == (
        Frame("train", "/job/train.py", 42),
        Frame("Module._call_impl", "torch/nn/modules/module.py", 1786))
    assert paths["torch/nn/modules/module.py"] == f"{SITE}/torch/nn/modules/module.py"


def test_what_is_not_a_speedscope_window_is_refused_and_a_bad_sample_skipped() -> None:
    """The stack probe says an unreadable window is one (py-spy wrote something
    else); a sample naming frames the table lacks is dropped, the rest kept."""
    for text in ("not json", "[]", json.dumps({"profiles": [], "other": {}})):
        with pytest.raises(ValueError):
            parse_speedscope(text)
    profile = parse_speedscope(speedscope([[0, 99], FORWARD]))
    assert [s.frames[-1].function for s in profile.stacks] == ["Module._call_impl"]
    assert dict(profile.order) == {"101": [0]}
