"""The packaged rules, the rule engine's hysteresis, the Diagnoser and rule files.

Every rule is driven through the real path: a synthetic Session of real sample
dataclasses (tests/synthetic.py) -> ``compute_metrics`` -> ``RuleEngine`` or
``Diagnoser``, tick by tick with explicit ``now`` times. Each packaged rule has
a case where it fires and a near miss on its threshold where it does not; a rule
without cases fails ``test_every_packaged_rule_has_cases``.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest
from aitop.engine.reports.gain import gain_text
from aitop.knowledge.base.catalogue import CATALOGUE
from aitop.knowledge.base.rules import GainSpec, Rule, RuleEngine, RuleSet, reads_stacks
from aitop.knowledge.judging.diagnosis import Diagnoser, Facts, estimate_gain, held_text
from aitop.knowledge.judging.gains import MAX_WIDTH
from aitop.knowledge.metrics.anatomy import FOR_LOOP, FUSABLE, FUSED, RECOMPUTE
from aitop.knowledge.metrics.growth import memory_growth
from aitop.knowledge.reading.loader import load_knowledge_base, rules_in_document
from aitop.knowledge.reading.yamlio import KnowledgeError, load_yaml_file
from aitop.probes.gpu import GpuProbe
from aitop.probes.samples import GpuSample, StepShape
from aitop.probes.session import aggregate
from support.fake_nvml import GIB, LEAK_MB_S, OTHER_PID, FakeClock, make_fake
from support.synthetic import (
    PID,
    T0,
    WINDOW_S,
    WORD_LM_RSS_SWING,
    Job,
    diagnose_job,
    extend,
    make_session,
    metrics_at,
    mix,
    run,
)

RULESET = load_knowledge_base().rules
RULES: dict[str, Rule] = {r.id: r for r in RULESET.rules}

#: Evaluation starts once the 20 s window is full and runs to tick LAST, which
#: leaves room for the longest ``for:`` (10 s) plus a margin.
FIRST = int(WINDOW_S)
LAST = 40
#: A /proc with no processes: the GPU probe maps no PIDs through namespaces.
EMPTY_PROC = "/nonexistent-proc"

Knobs = Mapping[str, object]


@dataclass(frozen=True)
class Cases:
    """Jobs on which a rule must fire, and near misses on which it must not."""

    fires: tuple[Knobs, ...]
    misses: tuple[Knobs, ...]


def k(**knobs: object) -> Knobs:
    return knobs


CPU_ONLY = k(gpu=False)
#: No GPU, and the loop's thread never waited for a core (its compute phases ran).
CPU_ONLY_RAN = {**CPU_ONLY, **k(main_cpu_wait=0.0)}

#: One 20-sample (or 19-sample) stack window per 20 s window: phase_samples 20 / 19.
SAMPLES_20 = k(samples_per_window=20, stack_period_s=20)
SAMPLES_19 = k(samples_per_window=19, stack_period_s=20)
#: A training thread standing in one frame (a queue's get) window after window.
STUCK = k(phases=mix(other=1.0), other_frame=("Queue.get", "queue.py:171", "/job/train.py:42"),
          stack_period_s=5, samples_per_window=50, gpu=False, steps_per_s=0.0, read_mb_s=0.0)
#: A training thread that has taken no step yet (building an optimizer reads as one).
LOADING = k(phases=mix(other=1.0), workers=0, steps_per_s=0.0, gpu=False)
#: A loop that fetches its first batches and runs no backward: no step proven
#: (with ``steps_per_s=0``: its counter stands still).
LOADING_PHASES = mix(data_wait=0.2, other=0.8, backward=0.0)
#: A CPU rank of a 2-rank job blocked half its time inside backward (gloo's
#: all-reduce): it waits for the other rank.
WAITING_PEER = k(local_ranks=2, gpu=False, cpu_count=2, busy_threads=1, main_cpu=48.0,
                 host_cpu=75.0, workers=0, phases=mix(data_wait=0.0, other=0.01))
#: A server building its inputs 90 % of its time, 8 % in the model.
SERVING_PREPROCESS = mix(other=0.9, forward=0.08, data_wait=0.02, backward=0.0, optimizer=0.0)
#: Dynamo's warning in the job's log at tick 2: it gave up on forward.
LIMIT_HIT = ((2, "recompile_limit", "forward (model.py:12)",
              "recompile_limit (8); last reason: 0/7: tensor 'x' size mismatch at index 1. "
              "expected 23, actual 24"),)
#: Dynamo seen compiling forward for the first time at tick 2.
FIRST_COMPILE = ((2, "compile", "forward (model.py:12)", ""),)
#: Dynamo seen recompiling at tick 2 (its frames' compile id and failed guard).
RECOMPILING = ((2, "recompile", "forward (model.py:12)",
                "0/4: tensor 'x' size mismatch at index 1. expected 34, actual 35"),)


def first_compile(share: float, **others: float) -> dict[str, float]:
    """A window of a first compilation: ``share`` compiling and no backward pass
    (none runs before the model is compiled); the rest is 'other'."""
    return mix(compile=share, backward=0.0, **others)


#: A rank of a 2-rank CPU job whose training thread computes 48 % of a core while
#: its stacks say compute 99 %: it waits for the other rank (comm_hidden 0.52).
#: Its counter ticks once an optimizer step of 24 samples (a synthetic window's
#: 1000 samples span one second).
DDP_RANK_WAITING = k(local_ranks=2, gpu=False, cpu_count=2, busy_threads=1, main_cpu=48.0,
                     host_cpu=75.0, workers=0, phases=mix(data_wait=0.0, other=0.01),
                     steps_per_s=1000 / 24)
#: Four backward passes per optimizer step, each as long as the others (each
#: all-reduces), or the last one far longer (it alone all-reduces).
EVERY_PASS_SYNCS = (StepShape(24, (4, 5, 4, 4)),)
LAST_PASS_SYNCS = (StepShape(24, (2, 2, 2, 9)),)

#: A CPU job sized to a 2-core machine (2 torch threads, 2 workers) in a 1-CPU
#: quota: throttled in nearly every period, a core's worth held back a second.
QUOTA_BOUND = k(gpu=False, cpu_count=2, cpu_quota=1.0, throttled_share=0.98,
                throttled_cores=1.0, main_cpu=30.0, busy_threads=2, workers=2,
                worker_cpu=37.0, host_cpu=55.0, phases=mix(data_wait=0.9))

RULE_CASES: dict[str, Cases] = {
    # GPU memory that grows 60 MB/min or more, held 20 s; none without a GPU.
    "gpu_memory_grows": Cases(
        fires=(k(gpu_mem_growth_mb_s=1.0), k(gpu_mem_growth_mb_s=50.0)),
        misses=(k(gpu_mem_growth_mb_s=0.99), k(gpu_mem_growth_mb_s=0.0),
                k(gpu_mem_growth_mb_s=50.0, gpu=False)),
    ),
    # Forward passes only, busy with requests: 60 % computing, under 20 % waiting.
    "serving_unbatched": Cases(
        fires=(k(phases=mix(forward=0.9, data_wait=0.05, backward=0.0, optimizer=0.0)),
               k(phases=mix(forward=0.6, data_wait=0.099, backward=0.0, optimizer=0.0))),
        # A server that waits a tenth of its time for requests is not swamped: an
        # unseen server already batching up to 32 waited 17 % (25 % by its timer).
        misses=(k(phases=mix(forward=0.6, data_wait=0.1, backward=0.0, optimizer=0.0)),
                k(phases=mix(forward=0.6, backward=0.2, data_wait=0.05))),  # it trains
    ),
    # A server taking requests from a queue another thread fills, waiting there
    # 10 % or more: traffic, not loading (an unseen one was told to add a worker).
    "serving_waits_for_requests": Cases(
        fires=(k(data_source="thread queue",
                 phases=mix(forward=0.6, data_wait=0.4, backward=0.0, optimizer=0.0)),
               k(data_source="thread queue",
                 phases=mix(forward=0.9, data_wait=0.1, backward=0.0, optimizer=0.0))),
        misses=(k(data_source="thread queue",
                  phases=mix(forward=0.9, data_wait=0.099, backward=0.0, optimizer=0.0)),
                # Offline inference over a DataLoader: its waits are loading.
                k(phases=mix(forward=0.6, data_wait=0.4, backward=0.0, optimizer=0.0)),
                # A training loop fed from a queue: a producer to speed up.
                k(data_source="thread queue", phases=mix(data_wait=0.4))),
    ),
    # Every sample in one frame for 15 s with the tree near idle: stalled.
    "job_stalled": Cases(
        fires=(k(**STUCK, main_cpu=2.0, workers=0),
               k(**STUCK, main_cpu=9.0, workers=0),
               # The workers' batch index read first, then the loop's own counter:
               # two counters that differ, not a step (an unseen hung job read 25, 24).
               k(**{**STUCK, "early_reading": ("worker batch index", 25, 10)},
                 main_cpu=2.0, workers=0)),
        misses=(k(**STUCK, main_cpu=10.0, workers=0),  # the job still computes
                k(**{**STUCK, "read_mb_s": 1.0}, main_cpu=2.0, workers=0),  # it reads
                k(**{**STUCK, "steps_per_s": 0.5}, main_cpu=2.0, workers=0),  # it steps
                k(**{**STUCK, "phases": mix(other=0.94)}, main_cpu=2.0, workers=0)),
    ),
    # A neighbour holding 0.9 of 2 cores: the job would have them without it, and
    # would use them: it keeps most of a core busy or (where the kernel says)
    # queues for a CPU.
    "cores_taken_by_other_processes": Cases(
        fires=(k(cpu_count=2, host_cpu=100.0, neighbour_cores=0.9, main_cpu=60.0,
                 workers=1, worker_cpu=50.0, phases=mix(data_wait=0.3)),
               k(cpu_count=2, host_cpu=100.0, neighbour_cores=0.5, main_cpu=60.0,
                 workers=1, worker_cpu=50.0, phases=mix(data_wait=0.3)),
               k(cpu_count=2, host_cpu=100.0, neighbour_cores=0.9, main_cpu=30.0,
                 main_cpu_wait=4.0, workers=1, worker_cpu=40.0, worker_cpu_wait=6.0,
                 phases=mix(data_wait=0.3))),
        misses=(k(cpu_count=2, host_cpu=100.0, neighbour_cores=0.49, main_cpu=60.0,
                  workers=1, worker_cpu=50.0, phases=mix(data_wait=0.3)),
                k(cpu_count=2, host_cpu=70.0, neighbour_cores=0.9, main_cpu=60.0,
                  workers=1, worker_cpu=50.0, phases=mix(data_wait=0.3)),
                # Under a core, and run whenever ready: the neighbour costs it nothing.
                k(cpu_count=2, host_cpu=100.0, neighbour_cores=0.9, main_cpu=30.0,
                  main_cpu_wait=4.0, workers=1, worker_cpu=40.0, worker_cpu_wait=5.9,
                  phases=mix(data_wait=0.3))),
    ),
    # Another process's kernels hold a fifth of the SMs of a busy GPU the job waits on.
    "gpu_taken_by_other_processes": Cases(
        fires=(k(gpu_util=98.0, gpu_neighbour_sm=50.0, phases=mix(data_wait=0.02)),
               k(gpu_util=90.0, gpu_neighbour_sm=20.0, phases=mix(data_wait=0.02))),
        misses=(k(gpu_util=98.0, gpu_neighbour_sm=19.0, phases=mix(data_wait=0.02)),
                k(gpu_util=80.0, gpu_neighbour_sm=50.0, phases=mix(data_wait=0.02)),
                k(gpu_util=98.0, gpu_neighbour_sm=50.0, phases=mix(data_wait=0.75))),
    ),
    # 1 MB/s (60 MB/min) sustained over the window is the line, and a rise past
    # the memory's own swings.
    # On a sawtooth (400-MB teeth every 5 s) the floor's rise is the growth;
    # workers re-created every 5 s, each taking 20 MB/s through its epoch, make a
    # sawtooth whose floor holds.
    "host_memory_grows": Cases(
        fires=(k(rss_growth_mb_s=1.0), k(rss_growth_mb_s=110.0),
               k(rss_growth_mb_s=20.0, rss_swing_mb=WORD_LM_RSS_SWING),
               k(rss_tooth_mb=400.0, rss_period_s=5, rss_growth_mb_s=5.0)),
        misses=(k(rss_growth_mb_s=0.99), k(rss_growth_mb_s=0.0),
                k(rss_swing_mb=WORD_LM_RSS_SWING),
                k(rss_tooth_mb=400.0, rss_period_s=5),
                k(rss_tooth_mb=400.0, rss_period_s=5, rss_growth_mb_s=0.99),
                k(workers=2, worker_epoch_s=5, worker_rss_growth_mb_s=20.0,
                  worker_uss_growth_mb_s=20.0)),
    ),
    # The workers' private memory grows 60 MB/min summed, at least half of it
    # not in their RSS, while the training process's own memory holds.
    "dataloader_copy_on_read": Cases(
        fires=(k(workers=2, worker_uss_growth_mb_s=0.5),
               k(workers=4, worker_uss_growth_mb_s=3.0, worker_rss_growth_mb_s=1.5)),
        misses=(k(workers=2, worker_uss_growth_mb_s=0.49),
                # A cache of their own: their RSS grows with it.
                k(workers=4, worker_uss_growth_mb_s=3.0, worker_rss_growth_mb_s=1.6),
                # The training process leaks too: a leak, not copying.
                k(workers=2, worker_uss_growth_mb_s=3.0, rss_growth_mb_s=1.0),
                k(workers=0, worker_uss_growth_mb_s=3.0)),
    ),
    # /dev/shm 90 % full (Docker's default 64 MB) while DataLoader workers pass
    # batches through it, or the job maps segments there.
    "shm_nearly_full": Cases(
        fires=(k(shm_size_mb=64.0, shm_used_mb=57.6),
               k(shm_size_mb=64.0, shm_used_mb=64.0, workers=0, shm_mapped_mb=8.0)),
        misses=(k(shm_size_mb=64.0, shm_used_mb=57.5),
                k(shm_size_mb=64.0, shm_used_mb=64.0, workers=0, shm_mapped_mb=0.0),
                k()),
    ),
    # Compiling before the first steps: 50 % of the window is the line, and of
    # the newest stack window (the compilation goes on now). Only before the
    # first steps: a job that has run backward passes, or that dynamo is seen
    # recompiling, is compiling again, not warming up.
    "warming_up_compiling": Cases(
        fires=(k(phases=first_compile(0.9)), k(phases=first_compile(0.5)),
               k(phases=first_compile(1.0), later_phases=(19, first_compile(0.5))),
               k(phases=LOADING_PHASES, later_phases=(10, first_compile(0.9)),
                 steps_per_s=0.0)),
        misses=(k(phases=first_compile(0.49)), k(phases=first_compile(0.9), **SAMPLES_19),
                k(phases=first_compile(1.0), later_phases=(19, first_compile(0.49))),
                # Steps, then compiling: a recompilation.
                k(phases=mix(data_wait=0.2), later_phases=(10, first_compile(0.9))),
                # Attached during a recompilation, which dynamo's frames say.
                k(phases=first_compile(0.9), events=RECOMPILING)),
    ),
    # The first compilation is over (the newest window is mostly steps, or steps
    # were proven) but its windows are still in the window the shares are read
    # over.
    "warming_up_compiled": Cases(
        fires=(k(phases=first_compile(1.0), later_phases=(19, mix()), events=FIRST_COMPILE),
               k(phases=first_compile(1.0), later_phases=(19, mix(compile=0.49)),
                 events=FIRST_COMPILE),
               k(phases=first_compile(1.0), later_phases=(14, mix()), events=FIRST_COMPILE),
               # Its steps compile again at once: the first compilation is over.
               k(phases=first_compile(1.0), later_phases=(19, mix(compile=0.5)),
                 events=FIRST_COMPILE)),
        misses=(k(phases=first_compile(1.0), later_phases=(19, first_compile(0.5)),
                  events=FIRST_COMPILE),
                # 10 s of steps after it: they are judged on their own.
                k(phases=first_compile(1.0), later_phases=(10, mix()), events=FIRST_COMPILE),
                k(phases=first_compile(0.9)), k(phases=mix(data_wait=0.9)),
                k(phases=first_compile(0.49)),
                # Compiling after steps: no first compilation in the window.
                k(phases=mix(data_wait=0.2), later_phases=(10, mix(compile=0.9))),
                # Attached while it compiled, never told whether it was the first.
                k(phases=first_compile(1.0), later_phases=(19, mix()))),
    ),
    # No step since attach while the job works (CPU or reads): loading, setting up.
    "warming_up_loading": Cases(
        fires=(k(**LOADING, main_cpu=100.0),
               k(**{**LOADING, "phases": mix(other=0.8, optimizer=0.2)}, main_cpu=20.0,
                 read_mb_s=0.0),
               k(**LOADING, main_cpu=5.0, read_mb_s=1.0)),
        misses=(k(**LOADING, main_cpu=19.0, read_mb_s=0.0),
                k(**{**LOADING, "phases": mix(other=0.9, forward=0.1)}, main_cpu=100.0),
                k(**{**LOADING, "phases": mix(other=0.5, compile=0.5)}, main_cpu=100.0),
                k(**LOADING, main_cpu=100.0, **SAMPLES_19)),
    ),
    # Compiling again once steps run: 5 % of the windows after the first compilation.
    "compile_recurs": Cases(
        fires=(k(phases=mix(compile=0.05)), k(phases=mix(compile=0.49)),
               k(phases=mix(compile=1.0), later_phases=(19, mix(compile=0.1)))),
        misses=(k(phases=mix(compile=0.049)),
                # The first compilation draining out of the window.
                k(phases=mix(compile=1.0), later_phases=(19, mix())),
                k(phases=mix(compile=1.0), later_phases=(19, mix(compile=0.049)))),
    ),
    # New workers every epoch (two restarts in the window) while the loop waits
    # a tenth of its time for data.
    "workers_restart_each_epoch": Cases(
        fires=(k(worker_epoch_s=4, phases=mix(data_wait=0.5)),
               k(worker_epoch_s=9, phases=mix(data_wait=0.1))),
        misses=(k(worker_epoch_s=4, phases=mix(data_wait=0.099)),
                k(worker_epoch_s=0, phases=mix(data_wait=0.5)),  # persistent workers
                k(worker_epoch_s=21, phases=mix(data_wait=0.5))),  # one restart a window
    ),
    # A server whose serving thread computes its inputs 60 % of its time or more.
    "serving_bound_by_preprocessing": Cases(
        fires=(k(phases=SERVING_PREPROCESS, thread_cpu=(100.0,), busy_threads=1, **CPU_ONLY_RAN),
               k(phases=mix(other=0.6, forward=0.38, data_wait=0.02, backward=0.0,
                            optimizer=0.0), thread_cpu=(100.0,), busy_threads=1, **CPU_ONLY_RAN)),
        misses=(k(phases=mix(other=0.59, forward=0.39, data_wait=0.02, backward=0.0,
                         optimizer=0.0), thread_cpu=(100.0,), busy_threads=1, **CPU_ONLY_RAN),
                # Waiting there, not computing: loop_waits_in_own_code's.
                k(phases=SERVING_PREPROCESS, thread_cpu=(30.0,), busy_threads=1,
                  **CPU_ONLY_RAN),
                # A training loop: python_overhead's.
                k(phases=mix(other=0.9), thread_cpu=(100.0,), busy_threads=1, **CPU_ONLY_RAN)),
    ),
    # The job's log says dynamo gave up on a function: said unless recompiling leads.
    "recompile_limit_hit": Cases(
        fires=(k(events=LIMIT_HIT), k(phases=mix(compile=0.049), events=LIMIT_HIT)),
        misses=(k(), k(events=RECOMPILING), k(phases=mix(compile=0.05), events=LIMIT_HIT)),
    ),
    "data_wait_dominant": Cases(
        fires=(
            k(phases=mix(data_wait=0.30)),
            k(phases=mix(data_wait=0.5), **SAMPLES_20),
        ),
        misses=(
            k(phases=mix(data_wait=0.299)),
            # Too few samples to trust the fraction.
            k(phases=mix(data_wait=0.5), **SAMPLES_19),
        ),
    ),
    "data_wait_elevated": Cases(
        fires=(
            k(phases=mix(data_wait=0.05)),
            k(phases=mix(data_wait=0.299)),
            k(phases=mix(data_wait=0.1), **SAMPLES_20),
        ),
        misses=(
            k(phases=mix(data_wait=0.049)),
            k(phases=mix(data_wait=0.30)),
            k(phases=mix(data_wait=0.1), **SAMPLES_19),
        ),
    ),
    "loading_in_training_process": Cases(
        fires=(
            k(workers=0, phases=mix(data_wait=0.10)),
            # A generator doing the work in the training thread: the same culprit.
            k(workers=0, data_source="own code", phases=mix(data_wait=0.5)),
        ),
        misses=(
            k(workers=0, phases=mix(data_wait=0.099)),
            k(workers=1, phases=mix(data_wait=0.5)),
            # No core free (16 cores x 3 % idle = 0.48): workers would have nowhere to run.
            k(workers=0, host_cpu=97.0, phases=mix(data_wait=0.5)),
            # Batches come from a queue another thread fills: a producer, not this.
            k(workers=0, data_source="thread queue", phases=mix(data_wait=0.5)),
        ),
    ),
    # An unseen job's shape: a generator loading 60 % of the time on 2 cores, the
    # intra-op pool's second thread busy whenever the step computes.
    "loading_beside_compute_threads": Cases(
        fires=(
            k(workers=0, cpu_count=2, host_cpu=72.0, main_cpu=139.0, busy_threads=2,
              thread_cpu=(99.0, 40.0), data_source="own code", phases=mix(data_wait=0.6),
              **CPU_ONLY),
            k(workers=0, cpu_count=2, host_cpu=95.0, main_cpu=187.0, busy_threads=2,
              thread_cpu=(99.0, 88.0), phases=mix(data_wait=0.10), **CPU_ONLY),
        ),
        misses=(
            k(workers=0, cpu_count=2, host_cpu=95.0, main_cpu=187.0, busy_threads=2,
              thread_cpu=(99.0, 88.0), phases=mix(data_wait=0.099), **CPU_ONLY),
            # One thread computes: the cores free on average are free then too.
            k(workers=0, cpu_count=2, host_cpu=52.0, main_cpu=99.0, busy_threads=1,
              thread_cpu=(99.0,), phases=mix(data_wait=0.6), **CPU_ONLY),
            k(workers=1, cpu_count=2, host_cpu=72.0, main_cpu=139.0, busy_threads=2,
              thread_cpu=(99.0, 40.0), phases=mix(data_wait=0.6), **CPU_ONLY),
        ),
    ),
    "workers_cpu_bound": Cases(
        fires=(
            k(workers=4, worker_cpu=80.0, phases=mix(data_wait=0.10)),
            k(workers=1, worker_cpu=70.0, phases=mix(data_wait=0.10)),
            # A 2-core box 76 % busy: under half a core free, beside one worker
            # of 0.86 core, is half as many batches again (an HF Trainer job
            # with one slow worker; a second gave x1.3-1.5).
            k(workers=1, worker_cpu=86.0, main_cpu=60.0, cpu_count=2, host_cpu=76.0,
              phases=mix(data_wait=0.55)),
        ),
        misses=(
            k(workers=4, worker_cpu=69.9, phases=mix(data_wait=0.10)),
            k(workers=4, worker_cpu=80.0, phases=mix(data_wait=0.099)),
            k(workers=0, main_cpu=100.0, phases=mix(data_wait=0.5)),
            # Every core busy: more workers cannot help (host_cpu_saturated says so).
            k(workers=4, worker_cpu=95.0, host_cpu=97.0, phases=mix(data_wait=0.5)),
        ),
    ),
    "producer_bound": Cases(
        fires=(
            k(workers=0, data_source="thread queue", producer_busy=0.95,
              phases=mix(data_wait=0.10)),
            k(workers=0, data_source="process queue", phases=mix(data_wait=0.6)),
        ),
        misses=(
            k(workers=0, data_source="thread queue", phases=mix(data_wait=0.099)),
            k(workers=2, data_source="dataloader", phases=mix(data_wait=0.6)),
        ),
    ),
    # The producer is the main process's second thread: its CPU is its busyness.
    "producer_waits_on_input": Cases(
        fires=(k(workers=0, data_source="thread queue", producer_busy=0.05, busy_threads=1,
                 phases=mix(data_wait=0.6)),),
        misses=(
            k(workers=0, data_source="thread queue", producer_busy=0.95, busy_threads=2,
              main_cpu=190.0, phases=mix(data_wait=0.6)),
            k(workers=0, data_source="thread queue", producer_busy=0.05, busy_threads=1,
              phases=mix(data_wait=0.05)),
            k(workers=2, data_source="dataloader", producer_busy=0.05,
              phases=mix(data_wait=0.6)),
        ),
    ),
    # Rank 0 of two on two cores: its thread computes for 48 % of a core while
    # in backward 99 % of the time: blocked on the other rank (comm_hidden 0.52).
    "ranks_wait_for_each_other": Cases(
        fires=(k(local_ranks=2, gpu=False, cpu_count=2, busy_threads=1, main_cpu=48.0,
                 host_cpu=75.0, workers=0, phases=mix(data_wait=0.0, other=0.01)),),
        misses=(
            k(local_ranks=1, gpu=False, cpu_count=2, busy_threads=1, main_cpu=48.0,
              host_cpu=75.0, workers=0, phases=mix(data_wait=0.0, other=0.01)),
            # Computing 80 % of a core: 0.99 - 0.80 + 0.01 = 0.2 short of the wait.
            k(local_ranks=2, gpu=False, cpu_count=2, busy_threads=1, main_cpu=80.0,
              host_cpu=75.0, workers=0, phases=mix(data_wait=0.0, other=0.01)),
            # A GPU rank's thread idles in backward while the device works.
            k(local_ranks=2, cpu_count=2, busy_threads=1, main_cpu=48.0,
              host_cpu=75.0, workers=0, phases=mix(data_wait=0.0, other=0.01)),
        ),
    ),
    # The lead rank waits 52 % of its time; the other waits 10 %: score 0.53.
    # The other rank stands still and this one waits for it (CPU rank, its
    # training thread off the CPU inside backward): the stuck rank is named.
    "rank_stuck_others_wait": Cases(
        fires=(k(local_ranks=2, gpu=False, cpu_count=2, busy_threads=1, main_cpu=2.0,
                 workers=0, phases=mix(backward=0.99, other=0.01), peer_comm=(0.0,),
                 peers_stalled=True),),
        misses=(
            # The same wait for a peer that moves: a straggler, not a stuck rank.
            k(local_ranks=2, gpu=False, cpu_count=2, busy_threads=1, main_cpu=2.0,
              workers=0, phases=mix(backward=0.99, other=0.01), peer_comm=(0.0,)),
            # A stuck peer that nobody waits for (this rank waits under half its time).
            k(local_ranks=2, gpu=False, cpu_count=2, busy_threads=1, main_cpu=60.0,
              workers=0, phases=mix(backward=0.99, other=0.01), peer_comm=(0.0,),
              peers_stalled=True),
        ),
    ),
    "straggler_holds_back_job": Cases(
        fires=(k(local_ranks=2, gpu=False, cpu_count=2, busy_threads=1, main_cpu=48.0,
                 workers=0, phases=mix(data_wait=0.0, other=0.01), peer_comm=(0.10,)),),
        misses=(
            # The other rank waits 40 %: score 0.48/0.60 = 0.80, no straggler.
            k(local_ranks=2, gpu=False, cpu_count=2, busy_threads=1, main_cpu=48.0,
              workers=0, phases=mix(data_wait=0.0, other=0.01), peer_comm=(0.40,)),
            # Nobody waits much: 12 % vs 2 % is a score of 0.90.
            k(local_ranks=2, gpu=False, cpu_count=2, busy_threads=1, main_cpu=88.0,
              workers=0, phases=mix(data_wait=0.0, other=0.01), peer_comm=(0.02,)),
        ),
    ),
    # A peer rank waiting 51 % of its time hears that rank 0 (its own checkpoints,
    # 2 % of waiting) holds the job back: score 0.49/0.98 = 0.5.
    "rank_waits_for_straggler": Cases(
        fires=(k(**WAITING_PEER, hears_rank0_comm=0.02),),
        misses=(k(**WAITING_PEER),  # nothing heard: the job is not judged
                # Rank 0 waits 40 % too: 0.49/0.60 = 0.82, no straggler.
                k(**WAITING_PEER, hears_rank0_comm=0.40),
                # This rank hardly waits: rank 0 is not holding it back.
                k(**{**WAITING_PEER, "main_cpu": 88.0}, hears_rank0_comm=0.02)),
    ),
    # Both ranks wait about half their time: the exchange itself is the limit.
    "communication_dominates": Cases(
        fires=(k(local_ranks=2, gpu=False, cpu_count=2, busy_threads=1, main_cpu=48.0,
                 workers=0, phases=mix(data_wait=0.0, other=0.01), peer_comm=(0.45,)),),
        misses=(
            # A straggler (score 0.53) explains the waits instead.
            k(local_ranks=2, gpu=False, cpu_count=2, busy_threads=1, main_cpu=48.0,
              workers=0, phases=mix(data_wait=0.0, other=0.01), peer_comm=(0.10,)),
            # 20 % each: under the 30 % line.
            k(local_ranks=2, gpu=False, cpu_count=2, busy_threads=1, main_cpu=80.0,
              workers=0, phases=mix(data_wait=0.0, other=0.01), peer_comm=(0.20,)),
        ),
    ),
    "gil_contention": Cases(
        # The training thread and a busy other Python thread, 60 % of a core each.
        fires=(k(producer_busy=0.9, busy_threads=2, main_cpu=120.0, **CPU_ONLY),),
        misses=(
            k(producer_busy=0.9, busy_threads=2, main_cpu=98.0, **CPU_ONLY),
            k(producer_busy=0.9, busy_threads=2, main_cpu=160.0, **CPU_ONLY),
            k(producer_busy=0.9, busy_threads=2, main_cpu=120.0, data_source="thread queue",
              phases=mix(data_wait=0.02), **CPU_ONLY),
        ),
    ),
    "pin_memory_off": Cases(
        fires=(
            k(pin_memory=False, phases=mix(data_wait=0.02)),
            k(pin_memory=False, workers=1, phases=mix(data_wait=0.02)),
        ),
        misses=(
            k(pin_memory=False, phases=mix(data_wait=0.019)),
            k(pin_memory=True, phases=mix(data_wait=0.5)),
            k(pin_memory=False, workers=0, phases=mix(data_wait=0.5)),
            k(pin_memory=False, phases=mix(data_wait=0.5), **CPU_ONLY),
        ),
    ),
    "data_on_network_filesystem": Cases(
        fires=(k(network_fs=True, scheduler=None, phases=mix(data_wait=0.05)),),
        misses=(
            k(network_fs=True, scheduler=None, phases=mix(data_wait=0.049)),
            k(network_fs=False, phases=mix(data_wait=0.5)),
        ),
    ),
    "storage_bound_reads": Cases(
        fires=(
            k(iowait=10.0, disk_busy=10.0, phases=mix(data_wait=0.10)),
            # A network filesystem has no disk busy time: iowait alone decides.
            k(iowait=10.0, disk_busy=None, phases=mix(data_wait=0.10)),
        ),
        misses=(
            k(iowait=9.9, disk_busy=100.0, phases=mix(data_wait=0.10)),
            k(iowait=10.0, disk_busy=80.0, phases=mix(data_wait=0.099)),
            # CPU-bound workers: the iowait is someone else's, preprocessing limits.
            k(iowait=30.0, worker_cpu=70.0, phases=mix(data_wait=0.5)),
        ),
    ),
    "workers_wait_on_reads": Cases(
        # Workers asleep 72.5 % of the time (100 - CPU - run-queue wait) while reading.
        fires=(
            k(workers=2, worker_cpu=20.0, worker_cpu_wait=10.0, phases=mix(data_wait=0.10)),
            # Busy cores do not hide it: reads still take the workers' time.
            k(workers=2, worker_cpu=40.0, worker_cpu_wait=25.0, host_cpu=100.0,
              phases=mix(data_wait=0.6)),
        ),
        misses=(
            k(workers=2, worker_cpu=20.0, worker_cpu_wait=10.0, phases=mix(data_wait=0.099)),
            # Mostly computing: CPU-bound workers, not storage.
            k(workers=2, worker_cpu=60.0, worker_cpu_wait=10.0, phases=mix(data_wait=0.5)),
            # Mostly waiting for a CPU: contention, not storage.
            k(workers=2, worker_cpu=20.0, worker_cpu_wait=50.0, phases=mix(data_wait=0.5)),
        ),
    ),
    # Workers asleep (not running, not waiting for a CPU) while the job reads
    # nothing from disk: they wait on input from elsewhere.
    "workers_wait_on_input": Cases(
        fires=(
            k(workers=1, worker_cpu=10.0, worker_cpu_wait=5.0, read_mb_s=0.0, disk_read_mb=0.0,
              phases=mix(data_wait=0.5)),
            # Busy cores do not make more workers useless: they hardly need one.
            k(workers=2, worker_cpu=30.0, worker_cpu_wait=20.0, read_mb_s=0.5,
              disk_read_mb=0.0, host_cpu=100.0, phases=mix(data_wait=0.10)),
        ),
        misses=(
            k(workers=1, worker_cpu=10.0, worker_cpu_wait=5.0, read_mb_s=0.0, disk_read_mb=0.0,
              phases=mix(data_wait=0.099)),
            # Reading from disk: storage (workers_wait_on_reads).
            k(workers=1, worker_cpu=10.0, worker_cpu_wait=5.0, read_mb_s=0.0,
              disk_read_mb=1.0, phases=mix(data_wait=0.5)),
            # Computing more than sleeping: CPU-bound.
            k(workers=1, worker_cpu=50.0, worker_cpu_wait=5.0, read_mb_s=0.0, disk_read_mb=0.0,
              phases=mix(data_wait=0.5)),
            # Waiting for a CPU more than sleeping: contention.
            k(workers=1, worker_cpu=10.0, worker_cpu_wait=50.0, read_mb_s=0.0,
              disk_read_mb=0.0, phases=mix(data_wait=0.5)),
        ),
    ),
    "disk_saturated_reads": Cases(
        fires=(k(iowait=1.0, disk_busy=80.0, phases=mix(data_wait=0.10)),),
        misses=(
            k(iowait=50.0, disk_busy=79.9, phases=mix(data_wait=0.10)),
            k(iowait=10.0, disk_busy=80.0, phases=mix(data_wait=0.099)),
            k(disk_busy=100.0, worker_cpu=70.0, phases=mix(data_wait=0.5)),
        ),
    ),
    # The job's CPU quota throttles it in a quarter of its periods or more, holding
    # back a third of a core's time a second or more.
    "cpu_quota_throttles": Cases(
        fires=(
            k(**QUOTA_BOUND),
            k(**{**QUOTA_BOUND, "throttled_share": 0.25, "throttled_cores": 0.3}),
        ),
        misses=(
            k(**{**QUOTA_BOUND, "throttled_share": 0.24}),
            k(**{**QUOTA_BOUND, "throttled_cores": 0.29}),
            # The same counters without a quota (no group's quota binds): nothing to raise.
            k(**{**QUOTA_BOUND, "cpu_quota": None}),
        ),
    ),
    "checkpoint_stalls": Cases(
        fires=(
            k(phases=mix(checkpoint=0.05), writing=("/ckpt/step_1000.pt",)),
            k(phases=mix(checkpoint=0.5), **SAMPLES_20),
            k(phases=mix(checkpoint=0.2), phase_blocks=(("checkpoint", 2),), **SAMPLES_20),
        ),
        misses=(
            k(phases=mix(checkpoint=0.049), writing=("/ckpt/step_1000.pt",)),
            k(phases=mix(checkpoint=0.5), **SAMPLES_19),
            # One save in the look, running on through its windows: known only
            # to within itself.
            k(phases=mix(checkpoint=0.2), phase_blocks=(("checkpoint", 1),),
              phase_ends=("checkpoint", "checkpoint"), **SAMPLES_20),
        ),
    ),
    "io_scheduler_not_for_nvme": Cases(
        fires=(
            k(scheduler="bfq", phases=mix(data_wait=0.05)),
            k(scheduler="bfq", phases=mix(checkpoint=0.05)),
        ),
        misses=(
            k(scheduler="bfq", phases=mix(data_wait=0.049, checkpoint=0.049)),
            k(scheduler="mq-deadline", phases=mix(data_wait=0.5, checkpoint=0.3)),
        ),
    ),
    # The documents' "above 85%": at exactly 85.0 the GPU is in "70-85%", not yet
    # well used (documents.yaml's priority framework, as the states read it).
    "gpu_compute_bound": Cases(
        fires=(
            k(gpu_util=85.1, phases=mix(data_wait=0.02, other=0.38)),
            # Host-device sync on a busy GPU is device time, not overhead.
            k(gpu_util=95.0, phases=mix(sync=0.35, other=0.15, forward=0.3, backward=0.2)),
        ),
        misses=(
            k(gpu_util=85.0, phases=mix(data_wait=0.02, other=0.38)),
            k(gpu_util=99.0, phases=mix(data_wait=0.02, other=0.381)),
            k(gpu_util=99.0, phases=mix(other=0.1), **CPU_ONLY),
            k(gpu_util=99.0, techniques=("mixed_precision",)),
        ),
    ),
    "gpu_compute_bound_amp": Cases(
        fires=(k(gpu_util=85.1, techniques=("mixed_precision",)),),
        misses=(
            k(gpu_util=85.0, techniques=("mixed_precision",)),
            k(gpu_util=99.0, techniques=()),
        ),
    ),
    "cpu_compute_bound": Cases(
        fires=(
            # Two cores, both busy with this job's compute: the CPU is the accelerator.
            k(cpu_count=2, busy_threads=2, main_cpu=190.0, host_cpu=99.0, workers=0,
              phases=mix(other=0.4), **CPU_ONLY),
            k(cpu_count=2, busy_threads=2, main_cpu=190.0, host_cpu=99.0, workers=0,
              phases=mix(other=0.3), **CPU_ONLY),
            k(cpu_count=4, busy_threads=4, main_cpu=320.0, host_cpu=80.0, workers=0,
              phases=mix(other=0.4), **CPU_ONLY),
        ),
        misses=(
            # Two busy threads thrashing on the one core the job gets: not "well used".
            k(cpu_count=2, busy_threads=2, main_cpu=100.0, host_cpu=99.0, workers=0,
              phases=mix(other=0.3), **CPU_ONLY),
            k(cpu_count=2, busy_threads=2, main_cpu=190.0, host_cpu=99.0, workers=0,
              phases=mix(other=0.401), **CPU_ONLY),
            k(cpu_count=4, busy_threads=3, main_cpu=300.0, host_cpu=60.0, workers=0,
              phases=mix(other=0.4), **CPU_ONLY),
            k(gpu_util=99.0, busy_threads=16, main_cpu=1600.0, host_cpu=100.0),
        ),
    ),
    "cpu_threads_oversubscribed": Cases(
        # Two busy intra-op threads on the one core the job really gets.
        fires=(k(cpu_count=2, busy_threads=2, main_cpu=100.0, host_cpu=99.0, workers=0,
                 phases=mix(other=0.5), **CPU_ONLY),),
        misses=(
            k(cpu_count=2, busy_threads=1, main_cpu=100.0, host_cpu=99.0, workers=0,
              phases=mix(other=0.5), **CPU_ONLY),
            k(cpu_count=2, busy_threads=2, main_cpu=100.0, host_cpu=70.0, workers=0,
              phases=mix(other=0.5), **CPU_ONLY),
            k(cpu_count=2, busy_threads=2, main_cpu=100.0, host_cpu=99.0, workers=0,
              phases=mix(other=0.501), **CPU_ONLY),
        ),
    ),
    "cpu_compute_contended": Cases(
        # One busy thread of 2 cores, the other core held by other processes.
        fires=(k(cpu_count=2, busy_threads=1, main_cpu=100.0, host_cpu=99.0, workers=0,
                 phases=mix(other=0.4), **CPU_ONLY),),
        misses=(
            k(cpu_count=2, busy_threads=1, main_cpu=100.0, host_cpu=70.0, workers=0,
              phases=mix(other=0.4), **CPU_ONLY),
            k(cpu_count=2, busy_threads=2, main_cpu=190.0, host_cpu=99.0, workers=0,
              phases=mix(other=0.4), **CPU_ONLY),
        ),
    ),
    "try_torch_compile": Cases(
        fires=(k(techniques=(), gpu_util=70.0, phases=mix(other=0.5)),),
        misses=(
            k(techniques=(), gpu_util=69.9, phases=mix(other=0.5)),
            k(techniques=(), gpu_util=99.0, phases=mix(other=0.501)),
            k(techniques=("torch_compile",), gpu_util=99.0, phases=mix(other=0.1)),
            # Not on a CPU-only job: the documents' figure is for GPUs.
            k(techniques=(), phases=mix(other=0.1), **CPU_ONLY),
        ),
    ),
    "cpu_compute_underthreaded": Cases(
        # One busy thread on a multi-core machine, whatever else loads the host
        # (busy threads, not CPU %, so other processes cannot hide or fake it).
        fires=(
            k(cpu_count=8, busy_threads=1, main_cpu=100.0, host_cpu=90.0,
              phases=mix(other=0.4), **CPU_ONLY),
            k(cpu_count=2, busy_threads=1, main_cpu=40.0, host_cpu=50.0, workers=0,
              phases=mix(other=0.4), **CPU_ONLY),
        ),
        misses=(
            k(cpu_count=8, busy_threads=2, main_cpu=200.0, host_cpu=40.0,
              phases=mix(other=0.4), **CPU_ONLY),
            k(cpu_count=2, busy_threads=2, main_cpu=60.0, host_cpu=100.0,
              phases=mix(other=0.4), **CPU_ONLY),
            k(cpu_count=8, busy_threads=1, main_cpu=100.0, host_cpu=40.0,
              phases=mix(other=0.401), **CPU_ONLY),
            k(cpu_count=1, busy_threads=1, main_cpu=50.0, host_cpu=40.0,
              phases=mix(other=0.2), **CPU_ONLY),
            k(gpu=True, cpu_count=8, busy_threads=1, main_cpu=100.0, phases=mix(other=0.2)),
            # Other processes hold every core: wider compute would have nowhere to go.
            k(cpu_count=8, busy_threads=1, main_cpu=100.0, host_cpu=100.0,
              phases=mix(other=0.4), **CPU_ONLY),
        ),
    ),
    # Outside the phases and off the CPU (a sleep in the loop): at least 30 % of
    # the time, and at least half of the 'other' share.
    # Without a GPU the thread's CPU beyond its compute phases is 'other' work:
    # 60 % other (40 % compute) on 69 % of a core leaves 31 % idle there.
    "loop_waits_in_own_code": Cases(
        fires=(k(phases=mix(other=0.6), thread_cpu=(69.0,), busy_threads=1, **CPU_ONLY_RAN),
               k(phases=mix(other=0.35), thread_cpu=(70.0,), busy_threads=1, **CPU_ONLY_RAN),
               k(gpu_util=85.0, phases=mix(other=0.9), thread_cpu=(2.0,), busy_threads=1)),
        misses=(k(phases=mix(other=0.6), thread_cpu=(71.0,), busy_threads=1, **CPU_ONLY_RAN),
                k(phases=mix(other=0.35), thread_cpu=(71.0,), busy_threads=1, **CPU_ONLY_RAN),
                k(gpu_util=85.1, phases=mix(other=0.9), thread_cpu=(2.0,), busy_threads=1),
                k(phases=mix(other=0.9), thread_cpu=(2.0,), busy_threads=1, **SAMPLES_19,
                  **CPU_ONLY)),
    ),
    "python_overhead": Cases(
        fires=(
            k(gpu_util=85.0, phases=mix(other=0.30)),
            k(phases=mix(other=0.30), thread_cpu=(100.0,), busy_threads=1, **CPU_ONLY_RAN),
            k(phases=mix(other=0.5), thread_cpu=(100.0,), busy_threads=1, **SAMPLES_20,
              **CPU_ONLY_RAN),
            # The thread's CPU beyond its 40 % of compute covers half its 'other'
            # time: that much is work.
            k(phases=mix(other=0.6), thread_cpu=(71.0,), busy_threads=1, **CPU_ONLY_RAN),
        ),
        misses=(
            k(gpu_util=84.0, phases=mix(other=0.299)),
            k(gpu_util=85.1, phases=mix(other=0.5)),
            k(phases=mix(other=0.5), **SAMPLES_19, **CPU_ONLY),
            # It waits there: 60 % outside the phases on 29 % of a core beyond compute.
            k(phases=mix(other=0.6), thread_cpu=(69.0,), busy_threads=1, **CPU_ONLY_RAN),
        ),
    ),
    "explicit_sync_in_loop": Cases(
        fires=(
            k(phases=mix(sync=0.10), **CPU_ONLY),
            k(phases=mix(sync=0.5), **SAMPLES_20, **CPU_ONLY),
        ),
        misses=(
            k(phases=mix(sync=0.099), **CPU_ONLY),
            k(phases=mix(sync=0.5), **SAMPLES_19, **CPU_ONLY),
            k(phases=mix(sync=0.5)),
        ),
    ),
    "host_sync_stalls": Cases(
        fires=(k(gpu_util=69.9, phases=mix(sync=0.15)),),
        misses=(
            k(gpu_util=70.0, phases=mix(sync=0.5)),
            k(gpu_util=40.0, phases=mix(sync=0.149)),
            k(phases=mix(sync=0.5), **CPU_ONLY),
        ),
    ),
    "evaluation_dominates": Cases(
        fires=(k(phases=mix(eval=0.25)), k(phases=mix(eval=0.6), **CPU_ONLY),
               # Six passes in the look: each is a tenth of it, 0.6 - 0.1 clears.
               k(phases=mix(eval=0.6), phase_blocks=(("eval", 6),), **SAMPLES_20)),
        misses=(k(phases=mix(eval=0.249)), k(phases=mix(eval=0.6), **SAMPLES_19),
                # One pass in the look, running on through its windows: the
                # share is known only to within itself.
                k(phases=mix(eval=0.6), phase_blocks=(("eval", 1),), phase_ends=("eval", "eval"),
                  **SAMPLES_20)),
    ),
    "gpu_thermal_throttling": Cases(
        fires=(
            k(throttle_thermal=0.20),
            k(temperature_c=83.0, temperature_slowdown_c=83.0),
            # Without the driver's threshold the documents' 83 °C applies.
            k(temperature_c=83.0, temperature_slowdown_c=None),
        ),
        misses=(
            # One throttled tick fewer in the 20-tick window, 0.1 °C below the threshold.
            k(throttle_thermal=0.15, temperature_c=82.9),
            k(temperature_c=86.0, temperature_slowdown_c=87.0),
            k(throttle_power=1.0),
            k(throttle_thermal=1.0, temperature_c=90.0, **CPU_ONLY),
        ),
    ),
    "gpu_power_capped": Cases(
        fires=(k(throttle_power=0.50, gpu_util=85.1),),
        misses=(
            k(throttle_power=0.45, gpu_util=85.1),
            k(throttle_power=1.0, gpu_util=85.0),
        ),
    ),
    "gpu_underused_small_batch": Cases(
        fires=(k(gpu_util=79.9, gpu_mem_used=69.9, phases=mix(data_wait=0.049)),),
        misses=(
            k(gpu_util=80.0, gpu_mem_used=69.0, phases=mix(data_wait=0.04)),
            k(gpu_util=79.0, gpu_mem_used=70.0, phases=mix(data_wait=0.04)),
            k(gpu_util=79.0, gpu_mem_used=69.0, phases=mix(data_wait=0.05)),
        ),
    ),
    "gpu_memory_near_full": Cases(
        fires=(k(gpu_mem_used=97.0),),
        misses=(k(gpu_mem_used=96.9), k(gpu_mem_used=99.0, **CPU_ONLY)),
    ),
    "host_ram_pressure": Cases(
        fires=(k(ram_used=90.0), k(swap_used=10.0)),
        misses=(k(ram_used=89.9, swap_used=9.9),),
    ),
    "host_cpu_saturated": Cases(
        # 16 cores at 98 % leave 0.32 idle beside 4 workers of half a core each:
        # more loading could make 1.16x the batches, under a quarter more; at
        # 96 % (0.64 idle) 1.32x, room for more workers.
        fires=(
            k(host_cpu=98.0, worker_cpu=50.0, phases=mix(data_wait=0.10)),
            k(host_cpu=100.0, workers=0, phases=mix(data_wait=0.5)),
        ),
        misses=(
            k(host_cpu=96.0, worker_cpu=50.0, phases=mix(data_wait=0.10)),
            k(host_cpu=100.0, worker_cpu=50.0, phases=mix(data_wait=0.099)),
            k(host_cpu=100.0, worker_cpu=95.0, phases=mix(data_wait=0.5, other=0.0),
              data_source="process queue"),
            k(host_cpu=100.0, workers=0, data_source="thread queue", phases=mix(data_wait=0.5)),
        ),
    ),
    "host_iowait": Cases(
        fires=(k(iowait=20.0),),
        misses=(k(iowait=19.9),),
    ),
    # A third of the time or more in AdamW's per-tensor for-loop; not once the
    # update is fused, nor under 15 %.
    "optimizer_for_loop": Cases(
        fires=(k(technique_shares={FOR_LOOP: 0.44, FUSABLE: 0.44}, phases=mix(optimizer=0.5),
                 **CPU_ONLY),
               k(technique_shares={FOR_LOOP: 0.15}, phases=mix(optimizer=0.2))),
        misses=(k(technique_shares={FOR_LOOP: 0.149}, phases=mix(optimizer=0.2)),
                k(technique_shares={FOR_LOOP: 0.3, FUSED: 0.01}, phases=mix(optimizer=0.4)),
                k(technique_shares={FUSED: 0.3}, phases=mix(optimizer=0.4))),
    ),
    # Activation checkpointing's second forward a tenth of the time or more, with
    # memory to spare: RAM free beyond what the job holds, or half a GPU's.
    "activation_recompute": Cases(
        fires=(k(technique_shares={RECOMPUTE: 0.19}, phases=mix(backward=0.6, forward=0.2),
                 **CPU_ONLY),
               k(technique_shares={RECOMPUTE: 0.10}, phases=mix(backward=0.5),
                 gpu_mem_used=50.0)),
        misses=(k(technique_shares={RECOMPUTE: 0.099}, phases=mix(backward=0.5), **CPU_ONLY),
                # The GPU's memory over half used: the memory it saves is needed.
                k(technique_shares={RECOMPUTE: 0.3}, phases=mix(backward=0.6),
                  gpu_mem_used=51.0),
                # RAM nearly full: less free than the job holds.
                k(technique_shares={RECOMPUTE: 0.3}, phases=mix(backward=0.6),
                  ram_used=97.0, **CPU_ONLY)),
    ),
    # Rank 0 of two on two cores, waiting 52 % of its time, four backward passes
    # of about the same length per optimizer step.
    "accumulation_without_no_sync": Cases(
        fires=(k(**DDP_RANK_WAITING, step_shapes=EVERY_PASS_SYNCS),),
        misses=(
            # The first three passes inside no_sync(): the last one waits.
            k(**DDP_RANK_WAITING, step_shapes=LAST_PASS_SYNCS),
            # One backward pass per step: no accumulation.
            k(**DDP_RANK_WAITING, step_shapes=(StepShape(24, (20,)),)),
            # A single process accumulating: nothing to all-reduce.
            k(**{**DDP_RANK_WAITING, "local_ranks": 1}, step_shapes=EVERY_PASS_SYNCS),
            # Computing 80 % of a core: a wait of 0.2 short of rank_waits.
            k(**{**DDP_RANK_WAITING, "main_cpu": 80.0}, step_shapes=EVERY_PASS_SYNCS),
        ),
    ),
}

#: Rows of the priority framework: jobs that match each, and near misses.
STATE_CASES: dict[str, Cases] = {
    "running_out_of_vram": Cases(
        fires=(k(gpu_mem_used=97.0),),
        misses=(k(gpu_mem_used=96.9), k(gpu_mem_used=99.0, gpu=False)),
    ),
    "high_data_loading_latency": Cases(
        fires=(k(phases=mix(data_wait=0.05)),), misses=(k(phases=mix(data_wait=0.049)),)
    ),
    "poor_multi_gpu_scaling": Cases(
        fires=(k(gpu_utils=(90.0, 70.0)),),
        misses=(k(gpu_utils=(90.0, 71.0)), k(gpu_utils=(90.0,))),
    ),
    "gpu_util_below_70": Cases(
        fires=(k(gpu_util=69.9),),
        # No GPU, no GPU-utilisation row (the compute share does not stand in for it).
        misses=(k(gpu_util=70.0), k(phases=mix(other=0.5), gpu=False)),
    ),
    # The documents' bands: "70-85%" holds 85 itself, "above 85%" starts past it.
    "gpu_util_70_85": Cases(
        fires=(k(gpu_util=70.0), k(gpu_util=85.0)),
        misses=(k(gpu_util=69.9), k(gpu_util=85.1)),
    ),
    "gpu_util_above_85": Cases(
        fires=(k(gpu_util=85.1),),
        misses=(k(gpu_util=85.0), k(phases=mix(other=0.05), gpu=False)),
    ),
}


def _params(table: dict[str, Cases], which: str) -> list[object]:
    return [
        pytest.param(name, knobs, id=f"{name}-{i}")
        for name, cases in table.items()
        for i, knobs in enumerate(getattr(cases, which))
    ]


# --------------------------------------------------------------- coverage


def test_every_packaged_rule_has_cases() -> None:
    packaged = {r.id for r in RULESET.rules}
    assert set(RULE_CASES) == packaged, (
        f"rules without cases: {sorted(packaged - set(RULE_CASES))}; "
        f"cases for no rule: {sorted(set(RULE_CASES) - packaged)}"
    )
    for name, cases in RULE_CASES.items():
        assert cases.fires and cases.misses, f"{name} needs both a firing case and a near miss"


def test_every_packaged_state_has_cases() -> None:
    packaged = {s.id for s in RULESET.states}
    assert set(STATE_CASES) == packaged
    for name, cases in STATE_CASES.items():
        assert cases.fires and cases.misses, name


# ----------------------------------------------------------- rules, both ways


def fires_at(rule: Rule, knobs: Knobs) -> int:
    """The tick a case's rule fires at: where its hold ends, or, for a rule over
    the phase shares, where the first stack window after the one it first held on
    ends, if later (the case's windows end every ``stack_period_s`` ticks)."""
    end = FIRST + int(rule.for_s)
    if rule.for_s > 0 and reads_stacks(rule):
        period = int(knobs.get("stack_period_s", 1))  # type: ignore[call-overload]
        end = max(end, FIRST + period)
    return end


def held(end: int) -> set[int]:
    """The ticks a rule's case is judged at: the first, the two either side of the
    tick it fires at (``end``), and two after, with one halfway through a long
    hold. Every tick between plays the same steady job; a hold broken by a false
    tick is ``test_false_tick_while_pending_restarts_for``'s (each evaluation costs
    a ``compute_metrics``: every tick of the ~300 cases made most of the unit
    layer's time)."""
    return {FIRST, (FIRST + end) // 2, end - 1, end, end + 2}


@pytest.mark.parametrize(("rule_id", "knobs"), _params(RULE_CASES, "fires"))
def test_packaged_rule_fires(rule_id: str, knobs: Knobs) -> None:
    rule = RULES[rule_id]
    engine = RuleEngine(RULESET)
    end = fires_at(rule, knobs)
    fired_at = T0 + end
    _session, result = run(engine, (Job(**knobs), end + 2),  # type: ignore[arg-type]
                           only_at=held(end))
    assert result[-1].now > fired_at
    for tick in result:
        assert engine.state[rule_id].last_value is True, (
            f"{rule.condition.expr} not true at +{tick.now - T0:.0f}s: "
            + ", ".join(f"{n}={tick.metrics.get(n)}" for n in sorted(rule.condition.names))
        )
        if tick.now < fired_at:
            assert rule_id not in tick.firing, f"fired before for: {rule.for_s}s"
        else:
            assert tick.firing.get(rule_id) == fired_at


@pytest.mark.parametrize(("rule_id", "knobs"), _params(RULE_CASES, "misses"))
def test_packaged_rule_near_miss(rule_id: str, knobs: Knobs) -> None:
    rule = RULES[rule_id]
    engine = RuleEngine(RULESET)
    end = fires_at(rule, knobs)
    _session, result = run(engine, (Job(**knobs), end + 2),  # type: ignore[arg-type]
                           only_at=held(end))
    for tick in result:
        assert rule_id not in tick.firing
        # Evaluated and false, not merely unknown: the near miss is a real "no".
        assert engine.state[rule_id].last_value is False, (
            f"{rule.condition.expr} is {engine.state[rule_id].last_value}: "
            + ", ".join(f"{n}={tick.metrics.get(n)}" for n in sorted(rule.condition.names))
        )


@pytest.mark.parametrize(("state_id", "knobs"), _params(STATE_CASES, "fires"))
def test_packaged_state_matches(state_id: str, knobs: Knobs) -> None:
    diagnosis = diagnose_job(RULESET, FIRST, **knobs)
    assert state_id in [s.id for s in diagnosis.states]


@pytest.mark.parametrize(("state_id", "knobs"), _params(STATE_CASES, "misses"))
def test_packaged_state_near_miss(state_id: str, knobs: Knobs) -> None:
    diagnosis = diagnose_job(RULESET, FIRST, **knobs)
    assert state_id not in [s.id for s in diagnosis.states]


def test_synthetic_job_builds_the_metrics_it_claims() -> None:
    """The helper itself: a guard against cases passing for the wrong reason."""
    session = make_session(
        LAST,
        gpu_utils=(90.0, 60.0),
        gpu_mem_used=95.0,
        throttle_thermal=0.25,
        throttle_power=0.5,
        workers=3,
        worker_cpu=90.0,
        main_cpu=200.0,
        busy_threads=2,
        cpu_count=8,
        network_fs=True,
        scheduler="bfq",
        writing=("/ckpt/a.pt",),
        phases=mix(data_wait=0.4, checkpoint=0.1),
        swap_used=50.0,
        techniques=("mixed_precision",),
    )
    m = metrics_at(session, LAST)
    assert m["gpu_util_mean"] == 75.0
    assert m["gpu_util_spread"] == 30.0
    assert m["gpu_target_devices"] == 2.0
    assert m["gpu_mem_used_max"] == 95.0
    assert m["gpu_throttle_thermal"] == 0.25
    assert m["gpu_throttle_power"] == 0.5
    assert m["num_workers"] == 3.0
    assert m["worker_cpu_max_mean"] == 90.0
    assert m["workers_cpu_mean"] == 90.0 + 85.0 + 80.0
    assert m["main_busy_threads_mean"] == 2.0
    assert m["cpu_headroom"] == 4.0  # 8 CPUs / 2 busy threads
    assert m["network_fs"] == 1.0
    assert m["scheduler_ok"] == 0.0
    assert m["checkpoint_writing"] == 1.0
    assert m["phase_data_wait"] == 0.4
    assert m["phase_checkpoint"] == 0.1
    assert m["phase_samples"] == 20_000.0
    assert m["host_swap_used_mean"] == 50.0
    assert m["uses_amp"] == 1.0
    assert m["uses_compile"] == 0.0
    assert m["steps_per_s"] == pytest.approx(5.0)


# --------------------------------------------------------------- hysteresis

DWD = RULES["data_wait_dominant"]  # for: 3s, keep_firing_for: 10s


def _engine(rule: Rule) -> RuleEngine:
    return RuleEngine(RuleSet((rule,)))


def _dw(value: float | None) -> dict[str, float | None]:
    return {"phase_data_wait": value, "phase_samples": 500.0}


def _firing(engine: RuleEngine, metrics: Mapping[str, float | None], now: float) -> float | None:
    """When the only rule fired, or None when it is not firing at ``now``."""
    fired = engine.step(metrics, now)
    return fired[0][1] if fired else None


def test_packaged_durations_are_what_these_tests_assume() -> None:
    assert (DWD.for_s, DWD.keep_firing_for_s) == (3.0, 10.0)
    assert max(r.for_s for r in RULESET.rules) + FIRST < LAST


def test_rule_does_not_fire_before_for_elapses() -> None:
    engine = _engine(DWD)
    for now in (100.0, 101.0, 102.0, 102.999):
        assert _firing(engine, _dw(0.5), now) is None
    assert _firing(engine, _dw(0.5), 103.0) == 103.0
    assert _firing(engine, _dw(0.5), 150.0) == 103.0  # fired_at stays


def test_false_tick_while_pending_restarts_for() -> None:
    engine = _engine(DWD)
    for now in (0.0, 1.0, 2.0):
        assert _firing(engine, _dw(0.5), now) is None
    assert _firing(engine, _dw(0.1), 2.5) is None
    for now in (3.0, 4.0, 5.0, 5.5):
        assert _firing(engine, _dw(0.5), now) is None
    assert _firing(engine, _dw(0.5), 6.0) == 6.0


def test_a_hold_over_the_phase_shares_is_confirmed_by_the_next_stack_window() -> None:
    """The first stack window stands about 6 s, longer than most holds: a hold it
    alone met fired on one window's reading (nanoGPT's 5 % optimizer read 17 % in
    a 14-s report). The next window must agree before the rule fires."""
    def at(engine: RuleEngine, now: float, window_end: float, share: float) -> float | None:
        return _firing(engine, {**_dw(share), "stacks_age_s": now - window_end}, now)

    confirmed, refuted = _engine(DWD), _engine(DWD)
    for now in (0.0, 1.0, 3.0, 5.0):
        assert at(confirmed, now, 0.0, 0.5) is None  # held 5 s of 3, on one window
        assert at(refuted, now, 0.0, 0.5) is None
    assert "the next stack window confirms it" in held_text(5.0, DWD.for_s)
    assert at(confirmed, 6.0, 6.0, 0.5) == 6.0
    assert at(refuted, 6.0, 6.0, 0.2) is None and at(refuted, 9.0, 6.0, 0.2) is None
    # A job that exited sends no next window: its hold stands on what was read.
    ended = _engine(DWD)
    gone = {**_dw(0.5), "stacks_age_s": 0.0, "target_alive": 0.0}
    assert [_firing(ended, {**gone, "stacks_age_s": t}, t) for t in (0.0, 3.0)] == [None, 3.0]
    # A rule that reads no phase share holds on time alone.
    ram = _engine(RULES["host_ram_pressure"])
    pressure = {"host_ram_used_mean": 99.0, "host_swap_used_mean": 0.0, "stacks_age_s": 60.0}
    fired = [_firing(ram, pressure, float(t)) for t in range(8)]
    assert fired[-1] == RULES["host_ram_pressure"].for_s


def test_single_false_tick_does_not_clear_within_keep_firing_for() -> None:
    engine = _engine(DWD)
    for now in range(4):
        _firing(engine, _dw(0.5), float(now))
    assert _firing(engine, _dw(0.5), 3.0) == 3.0
    assert _firing(engine, _dw(0.0), 4.0) == 3.0  # one false tick: still firing
    assert _firing(engine, _dw(0.5), 5.0) == 3.0  # back: same finding, same fired_at


def test_rule_clears_once_false_for_keep_firing_for() -> None:
    engine = _engine(DWD)
    for now in range(4):
        _firing(engine, _dw(0.5), float(now))  # last true at 3
    for later in (4.0, 8.0, 12.0, 12.999):
        assert _firing(engine, _dw(0.1), later) == 3.0
    assert _firing(engine, _dw(0.1), 13.0) is None
    # A new episode needs the whole for: again.
    assert _firing(engine, _dw(0.5), 14.0) is None
    assert _firing(engine, _dw(0.5), 16.999) is None
    assert _firing(engine, _dw(0.5), 17.0) == 17.0


def test_unknown_metric_never_fires() -> None:
    engine = _engine(DWD)
    for now in range(100):
        assert _firing(engine, _dw(None), float(now)) is None
    assert engine.state[DWD.id].last_value is None
    assert engine.waiting(_dw(None)) == ["data_wait_dominant: needs phase_data_wait"]
    _firing(engine, _dw(0.1), 100.0)
    assert engine.state[DWD.id].last_value is False
    assert engine.waiting(_dw(0.1)) == []


def test_unknown_metric_does_not_clear_a_firing_rule() -> None:
    engine = _engine(DWD)
    for now in range(4):
        _firing(engine, _dw(0.5), float(now))
    for now in range(4, 200):
        assert _firing(engine, _dw(None), float(now)) == 3.0
    # A real "false" long after the last true clears it at once.
    assert _firing(engine, _dw(0.0), 200.0) is None


def test_hysteresis_through_a_session() -> None:
    """Starved for data for 40 s, then healthy: fires once, clears once, no flapping."""
    engine = RuleEngine(RULESET)
    _session, result = run(engine, (Job(phases=mix(data_wait=0.6)), 40), (Job(), 80))
    on = [t.now - T0 for t in result if "data_wait_dominant" in t.firing]
    assert on[0] == FIRST + DWD.for_s
    assert on == list(range(int(on[0]), int(on[-1]) + 1)), "flapped"
    # The window's data wait falls below 30 % as healthy seconds replace starved
    # ones: at +50 (10 starved of 20: (0.6 * 10 + 0.02 * 10) / 20 = 31 %) it is
    # still true, at +51 (28 %) false; the rule then stays for keep_firing_for.
    last_true = max(t.now - T0 for t in result if (t.metrics["phase_data_wait"] or 0) >= 0.30)
    assert last_true == 50
    assert on[-1] == last_true + DWD.keep_firing_for_s - 1


def test_unknown_equality_operand_keeps_rule_firing() -> None:
    rule = RULES["loading_in_training_process"]
    engine = _engine(rule)
    known = {"num_workers": 0.0, "phase_data_wait": 0.5, "phase_samples": 100,
             "data_from_queue": 0.0, "free_cores_in_compute": 1.0}
    for now in range(10):
        engine.step(known, float(now))
    for now in range(10, 70):
        fired = engine.step({**known, "num_workers": None}, float(now))
        assert fired and fired[0][1] == 3.0, f"cleared at {now} on unknown data"


def test_host_ram_pressure_clears_on_a_host_without_swap() -> None:
    """No swap configured: swap use is 0 %, so the ``or`` becomes false and the rule clears."""
    engine = RuleEngine(RULESET)
    no_swap = {"swap_total": 0, "swap_used": 0.0}
    _session, result = run(
        engine, (Job(ram_used=95.0, **no_swap), 40), (Job(ram_used=40.0, **no_swap), 80)  # type: ignore[arg-type]
    )
    by_tick = {int(t.now - T0): t for t in result}
    assert by_tick[40].metrics["host_swap_used_mean"] == 0.0
    assert by_tick[25].firing.get("host_ram_pressure") == T0 + 25  # for: 5s
    # RAM mean under 90 % from +42 ((95 * 18 + 40 * 2) / 20 = 89.5); last true at +41.
    assert engine.state["host_ram_pressure"].last_true == T0 + 41
    assert "host_ram_pressure" in by_tick[70].firing  # keep_firing_for: 30s
    assert "host_ram_pressure" not in by_tick[71].firing
    assert engine.state["host_ram_pressure"].last_value is False


def test_metrics_at_an_earlier_now_use_that_window_for_the_process_tree() -> None:
    session = make_session(60, workers=3)
    m = metrics_at(session, 30)
    assert m["workers_cpu_mean"] is not None  # the series metrics see the window
    assert (m["num_workers"], m["pin_memory"], m["target_alive"]) == (3.0, 1.0, 1.0)


def test_storage_flags_come_from_the_window() -> None:
    session = make_session(30)
    extend(session, Job(writing=("/ckpt/step_9.pt",)), 31, 31)
    assert metrics_at(session, 31)["checkpoint_writing"] == 1.0
    assert metrics_at(session, 30)["checkpoint_writing"] == 0.0


# ---------------------------------------------------------------- diagnoser


def test_data_starvation_is_data_loading_with_amdahl_gain() -> None:
    d = diagnose_job(
        RULESET, gpu_util=30.0, workers=2, worker_cpu=60.0, phases=mix(data_wait=0.64)
    )
    assert d.category == "data_loading"
    assert d.compute_device == "gpu"
    assert d.top is not None and d.top.id == "data_wait_dominant"
    assert d.summary == "The loop waits for data 64% of the time"
    gain = d.top.gain
    assert gain.method == "amdahl"
    # 1 / (1 - 0.64) = 1 / 0.36 = 2.777...
    assert gain.speedup == pytest.approx(2.7777777, rel=1e-6)
    assert round(gain.speedup or 0, 2) == 2.78
    assert gain.low == gain.high == gain.speedup  # removable 1.0: one figure
    assert "64%" in gain.explanation and "x2.8" in gain.explanation
    assert [s.id for s in d.states][:1] == ["high_data_loading_latency"]
    assert "gpu_util_below_70" in [s.id for s in d.states]
    assert d.phases is not None and d.phases["data_wait"] == pytest.approx(0.64)


def test_checkpoint_stalls_are_io() -> None:
    d = diagnose_job(
        RULESET, phases=mix(checkpoint=0.2), writing=("/ckpt/step_5000.pt",), disk_write_mb=900.0
    )
    assert d.category == "io"
    assert d.top is not None and d.top.id == "checkpoint_stalls"
    # Checkpointing 4x less often leaves 5 % of the 20 %: 1 / (0.8 + 0.2 / 4); the
    # low end lets each save grow by a fifth and the share be read 3 points too
    # high (PHASE_ERROR): 1 / (0.83 + 1.2 * 0.17 / 4); the high end reads it 3
    # points too low, 0.23, and lets the rest run 1.4x faster (the rule's
    # rest_speedup), 1 / (0.77 / 1.4 + 0.23 / 4) = 1.65, but never past the ceiling
    # of removing the phase, 1 / 0.77 = 1.30.
    assert d.top.gain.method == "predicted"
    assert d.top.gain.high == pytest.approx(1 / 0.77)
    assert d.top.gain.low == pytest.approx(1 / (0.83 + 1.2 * 0.17 / 4))
    assert d.top.gain.ceiling == pytest.approx(1 / 0.77)
    assert d.top.actions[0].startswith("Checkpoint 4x less often")
    evidence = {e.metric: e for e in d.top.evidence}
    assert evidence["phase_checkpoint_long"].display == "20%"
    assert evidence["phase_checkpoint"].display == "20%"


def test_checkpoint_gain_lets_the_rest_of_the_step_speed_up_below_the_ceiling() -> None:
    """The demo's writes slowed the steps between them: the high end allows 1.4x."""
    d = diagnose_job(RULESET, phases=mix(checkpoint=0.66), writing=("/ckpt/s.pt",),
                     disk_write_mb=900.0)
    assert d.top is not None and d.top.id == "checkpoint_stalls"
    # The low end reads the share 3 points lower (PHASE_ERROR): 0.63; the high end
    # 3 points higher: 0.69.
    assert d.top.gain.low == pytest.approx(1 / (0.37 + 1.2 * 0.63 / 4))
    assert d.top.gain.high == pytest.approx(1 / (0.31 / 1.4 + 0.69 / 4))
    assert d.top.gain.high / d.top.gain.low < 1.5  # the issue's widest allowed range
    assert "rest of the step up to 1.4x faster" in d.top.gain.explanation


def checkpoint_rule(rest_speedup: str) -> str:
    """A rule file whose one rule is valid but for its ``rest_speedup``."""
    return (
        "rules:\n  - name: r\n    expr: phase_checkpoint > 0.1\n    severity: medium\n"
        "    category: io\n    title: t\n    why: w\n    actions: [a]\n"
        "    evidence: [phase_checkpoint]\n    source: {document: optimize, section: s}\n"
        "    gain: {method: fewer, metric: phase_checkpoint, times: 4, "
        f"rest_speedup: {rest_speedup}}}\n"
    )


@pytest.mark.parametrize("bad", ["0.5", "3", "'fast'"])
def test_rest_speedup_out_of_range_is_a_rule_error(bad: str, tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text(checkpoint_rule("1.4"))
    assert [r.gain.rest_speedup for r in _load_user_file(rules).rules] == [1.4]
    rules.write_text(checkpoint_rule(bad))
    with pytest.raises(KnowledgeError) as caught:
        _load_user_file(rules)
    problems = str(caught.value).strip().splitlines()
    assert len(problems) == 1 and "rest_speedup" in problems[0], problems


def test_full_gpu_memory_is_a_finding_but_compute_bound_names_the_bottleneck() -> None:
    d = diagnose_job(RULESET, gpu_util=95.0, gpu_mem_used=98.0)
    ids = [f.id for f in d.findings]
    assert "gpu_compute_bound" in ids and "gpu_memory_near_full" in ids
    # Full memory is advice, not a bottleneck: NVML counts the caching
    # allocator's reserve as used. Its row of the priority framework comes after
    # the bottleneck's own (no "Priority 1: quantization" for a compute-bound job).
    assert d.category == "compute"
    assert d.hardware_well_used is True
    states = [s.id for s in d.states]
    assert states == ["gpu_util_above_85", "running_out_of_vram"]


def test_a_rare_checkpoint_does_not_look_like_a_stall() -> None:
    """A 2 s save once in five minutes fills 10 % of a 20 s window, not of the job."""
    quiet = k(phases=mix(forward=0.5, backward=0.5))
    engine = RuleEngine(RULESET)
    # Judged over the last 30 s only: the hold of any rule fits in it.
    _session, result = run(
        engine, (Job(**quiet), 280), (Job(phases=mix(checkpoint=0.10)), 300),  # type: ignore[arg-type]
        only_at=range(270, 301),
    )
    last = result[-1]
    assert last.metrics["phase_checkpoint"] == pytest.approx(0.10, abs=0.01)
    assert last.metrics["phase_checkpoint_long"] < 0.05
    assert "checkpoint_stalls" not in last.firing


def test_host_ram_pressure_is_host() -> None:
    d = diagnose_job(RULESET, ram_used=93.0)
    assert d.category == "host"
    assert [f.id for f in d.findings] == ["host_ram_pressure"]
    assert d.top is not None and d.top.gain.speedup is None


def test_compute_bound_gpu_is_compute() -> None:
    d = diagnose_job(RULESET, gpu_util=92.0)
    assert d.category == "compute"
    assert [f.id for f in d.findings] == ["gpu_compute_bound"]
    assert [s.id for s in d.states] == ["gpu_util_above_85"]


def test_underthreaded_cpu_only_compute_is_compute_with_a_ceiling_on_more_threads() -> None:
    d = diagnose_job(
        RULESET, gpu=False, cpu_count=8, busy_threads=1, main_cpu=100.0, host_cpu=12.5,
        workers=0, phases=mix(data_wait=0.02, other=0.18),
    )
    assert d.compute_device == "cpu"
    assert d.category == "compute"
    assert d.top is not None and d.top.id == "cpu_compute_underthreaded"
    # compute 80 %, 8x wider (7 of 8 cores free): at most 1 / (0.2 + 0.8 / 8) = 1 / 0.3.
    # A ceiling, no range: one -> two threads gave x1.6-1.9 on one model and
    # x1.2-1.3 on a narrower one (docs/predictions-check.md).
    assert d.top.gain.method == "amdahl"
    assert d.top.gain.high == d.top.gain.low == d.top.gain.ceiling == pytest.approx(10 / 3)
    assert "a ceiling, not a prediction" in d.top.gain.explanation
    assert "size of its operations" in d.top.gain.explanation
    assert d.metrics["accel_util"] == pytest.approx(80.0)
    assert d.states == (), "no GPU-utilisation row for a CPU-only job"
    assert d.hardware_well_used is False


def test_loading_beside_compute_threads_offers_a_ceiling_not_a_range() -> None:
    """Loading 60 % of the time beside 2 compute threads: one thread fewer makes the
    step max(0.6, 0.4 x 2) = 0.8 where compute scaled perfectly (x1.25), 0.6 where it
    did not (x1.67). Jobs of this shape measured x0.75 to x1.49: only the bound holds."""
    d = diagnose_job(RULESET, workers=0, cpu_count=2, host_cpu=72.0, main_cpu=139.0,
                     busy_threads=2, thread_cpu=(99.0, 40.0), data_source="own code",
                     phases=mix(data_wait=0.6), **CPU_ONLY)
    lead = d.top
    assert lead is not None and lead.id == "loading_beside_compute_threads"
    assert lead.gain.method == "amdahl"
    assert lead.gain.high == lead.gain.ceiling == lead.gain.speedup == pytest.approx(1 / 0.6)
    assert lead.gain.low == pytest.approx(1 / 0.8)
    assert "from x1.2 where the compute scaled perfectly" in lead.gain.explanation
    assert "a ceiling, not a prediction" in lead.gain.explanation


def test_loading_longer_than_compute_either_way_gives_one_bound() -> None:
    """Loading 70 % beside 2 compute threads: max(0.7, 0.3 x 2) = 0.7 however the
    compute scales, so the two ends meet (x1.43). An unseen job of this shape
    (docs/diagnosis.md) measured x1.27: the bound held, and the hand-over is what
    it leaves out."""
    d = diagnose_job(RULESET, workers=0, cpu_count=2, host_cpu=72.0, main_cpu=139.0,
                     busy_threads=2, thread_cpu=(99.0, 40.0), data_source="own code",
                     phases=mix(data_wait=0.7), **CPU_ONLY)
    lead = d.top
    assert lead is not None and lead.id == "loading_beside_compute_threads"
    assert lead.gain.low == lead.gain.high == pytest.approx(1 / 0.7)
    assert "loading is the longer either way: at most x1.4, less what handing" \
        in lead.gain.explanation
    assert "scaled perfectly" not in lead.gain.explanation


def test_a_worker_beside_compute_that_outweighs_loading_may_slow_the_job_and_says_so(
) -> None:
    """Loading 37 % beside 2 compute threads (a job with numpy augmentation in its
    Dataset measured x0.75 with one worker and one thread): where compute scales,
    0.63 x 2 = 1.26 of the step: x0.79. The ceiling stays the bound, and its words
    carry the low end."""
    d = diagnose_job(RULESET, workers=0, cpu_count=2, host_cpu=95.0, main_cpu=190.0,
                     busy_threads=2, thread_cpu=(99.0, 90.0), data_source="own code",
                     phases=mix(data_wait=0.37), **CPU_ONLY)
    finding = next(f for f in d.findings if f.id == "loading_beside_compute_threads")
    assert finding.gain.high == pytest.approx(1 / 0.63)
    assert finding.gain.low == pytest.approx(1 / 1.26)
    assert gain_text(finding.gain).endswith("×0.79 where its compute scales over threads")


def test_a_few_forward_samples_without_backward_are_no_server_yet() -> None:
    """A loop fed by a thread, waiting 90 % of the time, one forward sample a second
    and its backward unsampled: not a server until 8 forward samples stand alone
    (CI read a producer-fed training loop computing 3 % as "Serving: waits for
    requests" on 1 such sample). Once a backward pass is sampled it trains."""
    base = k(data_source="thread queue", producer_busy=0.1, workers=0, samples_per_window=10,
             stack_period_s=1, phases=mix(forward=0.1, data_wait=0.9, backward=0.0,
                                          optimizer=0.0))
    server = Job(**base)  # type: ignore[arg-type]
    _session, ticks = run(Diagnoser(RULESET, Facts()), (server, 30), evaluate_from=2)
    by_second = {int(t.now - T0): t for t in ticks}
    for second in range(2, 8):
        tick = by_second[second]
        assert tick.metrics["forward_only"] is None, second
        assert tick.diagnosis is not None
        assert "serving_waits_for_requests" not in {f.id for f in tick.diagnosis.findings}
    assert all(by_second[s].metrics["forward_only"] == 1.0 for s in range(8, 31))
    last = by_second[30].diagnosis
    assert last is not None and last.findings[0].id == "serving_waits_for_requests", last.summary
    # The same loop whose backward is sampled at second 5: a training loop.
    trains = Job(**{**base, "later_phases": (5, mix(forward=0.1, backward=0.1, data_wait=0.8))})
    _session, ticks = run(Diagnoser(RULESET, Facts()), (trains, 30), evaluate_from=2)
    assert all(t.metrics["forward_only"] == 0.0 for t in ticks if t.now >= T0 + 5)
    last = ticks[-1].diagnosis
    assert last is not None and last.findings[0].id in (
        "producer_bound", "producer_waits_on_input", "data_wait_dominant"), last.summary


def test_a_server_waiting_for_requests_is_told_so_not_to_load_faster() -> None:
    d = diagnose_job(RULESET, data_source="thread queue", producer_busy=0.1, workers=0,
                     phases=mix(forward=0.6, data_wait=0.4, backward=0.0, optimizer=0.0))
    ids = [f.id for f in d.findings]
    assert ids[0] == "serving_waits_for_requests", ids
    assert d.summary.startswith("Serving: waits for requests 40% of the time"), d.summary
    loading = {"data_wait_dominant", "producer_bound", "producer_waits_on_input"}
    assert not loading & set(ids), ids
    assert d.top is not None and d.top.gain.speedup is None
    # Requests queueing (a 7 % wait): batch them; the two never both fire.
    busy = diagnose_job(RULESET, data_source="thread queue", producer_busy=0.1, workers=0,
                        phases=mix(forward=0.93, data_wait=0.07, backward=0.0, optimizer=0.0))
    assert [f.id for f in busy.findings] == ["serving_unbatched"], busy.summary


def test_cores_held_by_the_jobs_own_worker_are_not_blamed_on_other_work() -> None:
    """An unseen job after its fix: one compute thread, its DataLoader worker on half
    of the other core, nothing else running. It was told "other work holds the rest
    ... find what else runs on this machine"."""
    d = diagnose_job(RULESET, cpu_count=2, busy_threads=1, main_cpu=100.0, host_cpu=99.0,
                     workers=1, worker_cpu=53.0, phases=mix(other=0.4), **CPU_ONLY)
    f = next(f for f in d.findings if f.id == "cpu_compute_contended")
    assert "other work" not in f.title
    assert "153% of a core the job's own" in f.why and "0.0 cores other processes'" in f.why
    assert f.actions[0].startswith("Its own DataLoader workers hold 53% of a core")
    assert not any("find what else runs" in a for a in f.actions)
    # Another process on the core: that is what to look for.
    shared = diagnose_job(RULESET, cpu_count=2, busy_threads=1, main_cpu=100.0, host_cpu=99.0,
                          workers=1, worker_cpu=10.0, neighbour_cores=0.9,
                          phases=mix(other=0.4), **CPU_ONLY)
    held = [f for f in shared.findings if f.id == "cpu_compute_contended"]
    assert not held or held[0].actions[0].startswith("Free the cores")


def test_healthy_job_has_no_bottleneck() -> None:
    d = diagnose_job(RULESET)
    assert d.category == "none"
    assert d.findings == ()
    assert d.summary == "No bottleneck: every measured signal is within its target"
    assert d.waiting_for == ()


def test_no_stack_samples_yet_is_collecting() -> None:
    empty = make_session(30, phases=mix(), samples_per_window=0)
    metrics = metrics_at(empty, 30)
    assert metrics["phase_samples"] == 0.0
    assert metrics["phase_data_wait"] is None
    d = Diagnoser(RULESET, Facts()).diagnose(metrics, T0 + 30)
    assert d.category == "collecting", "cannot judge yet: not a verdict"
    assert d.summary == "Collecting: no stack samples yet"
    assert d.phases is None
    assert "data_wait_dominant: needs phase_data_wait" in d.waiting_for


def test_too_few_stack_samples_is_collecting_not_no_bottleneck() -> None:
    """A 2-s attach to a job waiting 95 % for data: no rule can fire yet, so no verdict."""
    brief = make_session(8, phases=mix(data_wait=0.95, other=0.05), samples_per_window=1)
    metrics = metrics_at(brief, 8)
    assert 0 < (metrics["phase_samples"] or 0) < 20
    assert (metrics["phase_data_wait"] or 0) > 0.9
    d = Diagnoser(RULESET, Facts()).diagnose(metrics, T0 + 8)
    assert d.category == "collecting", d.summary
    assert d.summary.startswith(f"Collecting: {metrics['phase_samples']:.0f} stack samples")
    assert "phase_samples >= 20" in d.summary
    assert not d.findings


def test_a_finding_whose_mechanism_another_rules_out_shows_no_gain_and_does_not_lead() -> None:
    """The training thread gets 2 % of the GIL: more compute threads cannot help it."""
    gil = k(producer_busy=0.95, thread_cpu=(2.0, 97.0), main_cpu=99.0, cpu_count=8,
            host_cpu=30.0, workers=0, phases=mix(other=0.2), **CPU_ONLY)
    d = diagnose_job(RULESET, **gil)
    ids = [f.id for f in d.findings]
    assert ids[0] == "gil_contention" and d.category == "host", ids
    threads = next(f for f in d.findings if f.id == "cpu_compute_underthreaded")
    assert threads.gain.speedup is None and threads.gain.low is None
    assert threads.gain.explanation.startswith("no figure while this holds: Another Python")
    # Without ruled_out_by the thread rule would promise a speed-up beside it.
    unruled = dataclasses.replace(RULESET, rules=tuple(
        dataclasses.replace(r, ruled_out_by=()) for r in RULESET.rules))
    plain = diagnose_job(unruled, **gil)
    promised = next(f for f in plain.findings if f.id == "cpu_compute_underthreaded")
    assert promised.gain.speedup is not None and promised.gain.method == "amdahl"
    # Nor can it name the bottleneck: with the GIL rule taken out of the
    # ranking, the diagnosis still does not call compute the limit.
    milder = dataclasses.replace(RULESET, rules=tuple(
        dataclasses.replace(r, severity="low") if r.id == "gil_contention" else r
        for r in RULESET.rules))
    assert diagnose_job(milder, **gil).category == "host"


def test_ruled_out_by_an_unknown_rule_is_a_problem_with_its_line(tmp_path: Path) -> None:
    path = tmp_path / "rules.yaml"
    path.write_text(
        "rules:\n"
        "  - name: mine\n"
        "    expr: phase_compute > 0.5\n"
        "    ruled_out_by: [no_such_rule]\n"
        "    severity: low\n    category: compute\n    title: t\n    why: w\n"
        "    actions: [a]\n    evidence: [phase_compute]\n"
        "    gain: {method: none, note: n}\n"
        "    source: {document: diagnose, section: x}\n")
    with pytest.raises(KnowledgeError) as caught:
        load_knowledge_base([path])
    assert "rule 'mine' is ruled out by unknown rule 'no_such_rule'" in str(caught.value)
    assert f"{path}:2" in str(caught.value)


def test_the_snippet_says_the_number_its_action_says() -> None:
    d = diagnose_job(RULESET, workers=1, worker_cpu=90.0, cpu_count=4, host_cpu=40.0,
                     phases=mix(data_wait=0.4), **CPU_ONLY)
    lead = next(f for f in d.findings if f.id == "workers_cpu_bound")
    suggested = d.metrics["suggested_workers"]
    assert suggested is not None and suggested != 4, "a case where a constant 4 would be wrong"
    assert lead.actions[0].startswith(f"Raise num_workers from 1 to {suggested:.0f}")
    assert lead.snippet is not None and f"num_workers={suggested:.0f}," in lead.snippet
    # Braces that are code (a dict literal) stay as written.
    checkpoint = RULES["checkpoint_stalls"]
    assert checkpoint.snippet is not None and '{"model"' in checkpoint.snippet
    built = diagnose_job(RULESET, phases=mix(checkpoint=0.3), disk_write_mb=400.0)
    saved = next((f for f in built.findings if f.id == "checkpoint_stalls"), None)
    assert saved is None or saved.snippet == checkpoint.snippet


def test_a_job_that_has_taken_no_step_yet_is_warming_up_where_its_thread_is() -> None:
    """Loading before the first step: the verdict says so, and where the time goes."""
    knobs = k(phases=mix(other=1.0), main_cpu=100.0, workers=0, cpu_count=2, host_cpu=50.0,
              steps_per_s=0.0,
              other_frame=("_load", "torch/serialization.py:1900", "/job/train.py:12"),
              **CPU_ONLY)
    d = diagnose_job(RULESET, **knobs)
    assert d.category == "warming_up", d.summary
    assert [f.id for f in d.findings] == ["warming_up_loading"]
    assert re.fullmatch(r"Warming up: no training step since aitop attached, the training "
                        r"thread in _load \(serialization\.py:1900\), called from train\.py:12 "
                        r"\(at least \d+ s so far\); judging starts with the first steps",
                        d.summary), d.summary
    # The same thread in its steps (a forward pass in every window) is judged as usual.
    steady = diagnose_job(RULESET, **{**knobs, "phases": mix(other=0.6)})
    assert "warming_up_loading" not in {f.id for f in steady.findings}, steady.summary


def test_warming_up_is_the_verdict_and_holds_back_steady_state_findings() -> None:
    """torch.compile's first compilation on a CPU job that is also data-starved."""
    knobs = k(phases=first_compile(0.8, data_wait=0.15), cpu_count=8, busy_threads=1,
              main_cpu=100.0, host_cpu=20.0, **CPU_ONLY)
    d = diagnose_job(RULESET, **knobs)
    assert d.category == "warming_up", d.summary
    assert [f.id for f in d.findings] == ["warming_up_compiling"]
    assert re.fullmatch(r"Warming up: torch\.compile is compiling the model "
                        r"\(at least \d+ s so far\); "
                        r"judging starts with the first steps", d.summary), d.summary
    assert d.states == (), "no priority-framework row for a job that takes no steps"
    # Compiling from the middle of the watch on, before any step: its time
    # counts from where it began.
    later = diagnose_job(RULESET, 60, **{**knobs, "phases": LOADING_PHASES, "steps_per_s": 0.0,
                                         "later_phases": (30, knobs["phases"])})
    assert re.match(r"Warming up: torch\.compile is compiling the model \(\d+ s so far\)",
                    later.summary), later.summary
    # After steps the same compilation is no warm-up: the job is judged.
    again = diagnose_job(RULESET, 60, **{**knobs, "phases": mix(data_wait=0.15),
                                         "later_phases": (30, knobs["phases"])})
    assert again.category != "warming_up", again.summary
    # The same job without its compilation is judged as usual.
    steady = diagnose_job(RULESET, **{**knobs, "phases": mix(data_wait=0.15)})
    assert steady.category not in ("warming_up", "collecting") and steady.findings
    # Without job_state the warm-up would be one finding among rivals with gains.
    plain = dataclasses.replace(RULESET, rules=tuple(
        dataclasses.replace(r, job_state=False) for r in RULESET.rules))
    mixed = diagnose_job(plain, **knobs)
    assert len(mixed.findings) > 1


def test_capturing_cuda_graphs_is_warming_up_and_says_so() -> None:
    """A capture (make_graphed_callables, mode="reduce-overhead") is named as
    such, not as a torch.compile the job may not call."""
    knobs = k(phases=first_compile(0.8, forward=0.1), cpu_count=8, busy_threads=1,
              main_cpu=100.0, host_cpu=20.0, techniques=("cuda_graph_capture",), **CPU_ONLY)
    d = diagnose_job(RULESET, **knobs)
    assert [f.id for f in d.findings] == ["warming_up_compiling"], d.summary
    assert re.fullmatch(r"Warming up: CUDA graphs are being captured \(at least \d+ s so far\); "
                        r"judging starts with the first steps", d.summary), d.summary


def test_a_first_compilation_that_ends_is_said_so_and_then_the_steps_are_judged() -> None:
    """Compiling for 25 s, then data-starved steps: compiling, compiled, then the steps.

    Until the steps after it fill 10 s, the 20-s window holds the compilation;
    the verdict says so instead of "is compiling" or a judgement of shares
    that are mostly the compilation's. Then the window starts after it, and the
    compilation draining out of the window is no recompilation.
    """
    knobs = k(phases=first_compile(0.95, data_wait=0.05), cpu_count=8, busy_threads=1,
              main_cpu=100.0, host_cpu=20.0, **CPU_ONLY)
    compiling = Job(**knobs, events=FIRST_COMPILE)  # type: ignore[arg-type]
    stepping = Job(**{**knobs, "phases": mix(data_wait=0.9)})  # type: ignore[arg-type]
    _session, ticks = run(Diagnoser(RULESET, Facts()), (compiling, 25), (stepping, 75))
    verdicts = {int(t.now - T0): t.diagnosis for t in ticks if t.diagnosis is not None}
    assert verdicts[24].summary.startswith("Warming up: torch.compile is compiling the model")
    for second in range(27, 35):
        compiled = verdicts[second]
        assert [f.id for f in compiled.findings] == ["warming_up_compiled"], compiled.summary
        assert re.fullmatch(r"Warming up: torch\.compile has finished compiling \(\d+% of the "
                            r"last 20 s\); judging starts with the steps after it",
                            compiled.summary), compiled.summary
        assert compiled.findings[0].gain.speedup is None
    for second in range(27, 76):
        assert "compile_recurs" not in {f.id for f in verdicts[second].findings}, second
    # Judged on the steps after it within seconds, not once it has left 20 s.
    for second in range(42, 76):
        d = verdicts[second]
        assert d.category == "data_loading", (second, d.summary)


def test_loading_gives_way_to_compiling_as_soon_as_a_window_shows_it() -> None:
    """Building the model for 12 s (seen as loading), then its first compilation,
    in 6-s stack windows (a report's second window): the verdict names the
    compilation from the first window mostly in it, with nothing stale beside it.

    CI saw "the training thread in kaiming_uniform_" (loading, held by its
    keep_firing_for) at the end of a watch whose newest window was compiling."""
    base = k(**LOADING, main_cpu=100.0, cpu_count=2, busy_threads=1, stack_period_s=6,
             samples_per_window=60)
    loading = Job(**base)  # type: ignore[arg-type]
    compiling = Job(**{**base, "phases": first_compile(1.0)})  # type: ignore[arg-type]
    _session, ticks = run(Diagnoser(RULESET, Facts()), (loading, 12), (compiling, 30),
                          evaluate_from=6)
    verdicts = {int(t.now - T0): t.diagnosis for t in ticks if t.diagnosis is not None}
    assert [f.id for f in verdicts[12].findings] == ["warming_up_loading"], verdicts[12].summary
    # The window 12-18 s arrives at 18: compiling, and loading no more.
    for second in range(13, 18):
        assert [f.id for f in verdicts[second].findings] == ["warming_up_loading"], second
    for second in range(18, 31):
        d = verdicts[second]
        assert [f.id for f in d.findings] == ["warming_up_compiling"], (second, d.summary)
        assert d.summary.startswith("Warming up: torch.compile is compiling the model"), d.summary


def test_long_recompilations_after_the_first_compilation_are_recompilation() -> None:
    """10-s stack windows (the UI's): a first compilation, then a 6-s recompilation
    every 30 s. Each fills 60 % of its window; none is taken for the warm-up."""
    base = k(cpu_count=8, busy_threads=1, main_cpu=100.0, host_cpu=20.0, stack_period_s=10,
             samples_per_window=100, **CPU_ONLY)
    compiling = Job(**{**base, "phases": mix(compile=1.0)})  # type: ignore[arg-type]
    stepping = Job(**{**base, "phases": mix(data_wait=0.9)})  # type: ignore[arg-type]
    again = Job(**{**base, "phases": mix(compile=0.6, data_wait=0.3)})  # type: ignore[arg-type]
    session, ticks = run(Diagnoser(RULESET, Facts()),
                         (compiling, 20), (stepping, 50), (again, 60), (stepping, 90),
                         (again, 100), (stepping, 130))
    assert session.compile_warmup is not None
    assert (session.compile_warmup.start, session.compile_warmup.end) == (T0, T0 + 20)
    by_second = {int(t.now - T0): t for t in ticks}
    for second in range(45, 131):
        d = by_second[second].diagnosis
        assert d is not None and d.category != "warming_up", (second, d.summary)
    fired = [s for s, t in by_second.items() if "compile_recurs" in t.firing]
    assert fired and min(fired) <= 76, fired
    d = by_second[76].diagnosis
    assert d is not None
    recurs = next(f for f in d.findings if f.id == "compile_recurs")
    assert recurs.title.startswith("torch.compile keeps recompiling the model: 30% of the time")


def test_memory_that_grows_leads_and_says_when_ram_runs_out() -> None:
    """110 MB/s on a CPU job: the memory finding comes first, with its runway."""
    d = diagnose_job(RULESET, 40, rss_growth_mb_s=110.0, ram_used=50.0, cpu_count=8,
                     busy_threads=1, main_cpu=100.0, host_cpu=20.0, workers=0,
                     phases=mix(other=0.1), **CPU_ONLY)
    lead = d.findings[0]
    assert lead.id == "host_memory_grows" and d.category == "memory", [f.id for f in d.findings]
    free, growth = d.metrics["host_ram_free_mb"], d.metrics["proc_rss_growth"]
    assert growth == pytest.approx(110.0 * 60, rel=0.01)
    assert free is not None and d.metrics["ram_minutes_left"] == pytest.approx(free / growth)
    assert lead.title == (f"Host memory grows {growth:.0f} MB/min: at this rate RAM is used up "
                          f"in {free / growth:.0f} min")
    assert lead.actions[0].startswith("Keep numbers, not tensors, across steps: accumulate "
                                      "loss.item()")


@pytest.mark.parametrize(("cgroup", "limited"), [
    ((2048.0, 1500.0), True),      # 548 MB under the pod's limit: far less than free RAM
    ((10**8, 1500.0), False),      # a limit above the machine's RAM limits nothing
])
def test_a_leaks_runway_is_its_cgroups_limit_when_that_is_tighter(
        cgroup: tuple[float, float], limited: bool) -> None:
    d = diagnose_job(RULESET, 40, rss_growth_mb_s=2.0, ram_used=50.0, cpu_count=8,
                     busy_threads=1, main_cpu=100.0, host_cpu=20.0, workers=0,
                     phases=mix(other=0.1), cgroup_memory_mb=cgroup, **CPU_ONLY)
    lead = d.findings[0]
    assert lead.id == "host_memory_grows", [f.id for f in d.findings]
    growth, ram_free = d.metrics["proc_rss_growth"], d.metrics["host_ram_free_mb"]
    assert growth is not None and ram_free is not None
    headroom = cgroup[0] - cgroup[1] if limited else ram_free
    assert d.metrics["mem_free_mb"] == pytest.approx(headroom, abs=1)
    assert d.metrics["ram_minutes_left"] == pytest.approx(headroom / growth, rel=0.01)
    limit = ("its cgroup's 2048 MB limit (pod7)" if limited else "RAM")
    assert lead.title == (f"Host memory grows {growth:.0f} MB/min: at this rate {limit} is "
                          f"used up in {headroom / growth:.0f} min")


def test_a_gpu_shared_with_another_job_names_it_before_calling_the_gpu_well_used(
        tmp_path: Path) -> None:
    """The fake NVML's ``shared`` scenario, read by the real GPU probe each tick."""
    (tmp_path / str(OTHER_PID)).mkdir()
    (tmp_path / str(OTHER_PID) / "comm").write_text("python3\n")
    clock = FakeClock(T0)
    probe = GpuProbe(make_fake("shared", clock), proc_root=str(tmp_path), clock=clock)

    def gpu_at(i: int) -> GpuSample:
        clock.now = T0 + i
        return probe.sample({PID})

    d = diagnose_job(RULESET, 40, gpu_source=gpu_at, phases=mix(data_wait=0.02))
    ids = [f.id for f in d.findings]
    lead = d.findings[0]
    assert lead.id == "gpu_taken_by_other_processes", ids
    assert "gpu_compute_bound" not in ids, "explained by the neighbour, not its rival"
    assert d.metrics["gpu_other_sm_mean"] == pytest.approx(50)
    assert d.metrics["gpu_job_sm_mean"] == pytest.approx(45)
    assert lead.title == ("The GPU is busy, 50% of its SMs with other processes "
                          f"(PID {OTHER_PID} python3 on GPU 0 (50% SM, 21.5 GB))")
    assert lead.gain.speedup is None
    # The same GPU as busy with the job's kernels alone: well used, no neighbour.
    alone = diagnose_job(RULESET, 40, gpu_util=98.0, phases=mix(data_wait=0.02))
    alone_ids = [f.id for f in alone.findings]
    assert "gpu_taken_by_other_processes" not in alone_ids, alone_ids
    assert alone.findings[0].id == "gpu_compute_bound", alone_ids


def test_gpu_memory_that_grows_is_read_through_the_gpu_probe_and_leads() -> None:
    """The fake NVML's ``leaking`` scenario, read by the real GPU probe each tick."""
    clock = FakeClock(T0)
    probe = GpuProbe(make_fake("leaking", clock), proc_root=EMPTY_PROC, clock=clock)

    def gpu_at(i: int) -> GpuSample:
        clock.now = T0 + i
        return probe.sample({PID})

    d = diagnose_job(RULESET, 40, gpu_source=gpu_at, phases=mix(data_wait=0.05))
    lead = d.findings[0]
    assert lead.id == "gpu_memory_grows", [f.id for f in d.findings]
    growth, free = d.metrics["gpu_mem_growth"], d.metrics["gpu_mem_free_mb"]
    assert growth == pytest.approx(LEAK_MB_S * 60, rel=0.01)
    # 80 GiB less the 21 GiB in use at the start and what the leak added since.
    assert free == pytest.approx((80 * GIB - 21 * GIB) / 1e6 - LEAK_MB_S * 40, rel=0.001)
    assert lead.title == (f"GPU memory grows {growth:.0f} MB/min: at this rate the GPU runs "
                          f"out of memory in {free / growth:.0f} min")
    assert lead.gain.speedup is None
    # A GPU whose memory stays put has no such finding.
    steady = diagnose_job(RULESET, 40, phases=mix(data_wait=0.05))
    assert "gpu_memory_grows" not in {f.id for f in steady.findings}


def test_cores_a_neighbour_holds_are_named_and_kept_apart_from_the_jobs() -> None:
    d = diagnose_job(RULESET, cpu_count=2, host_cpu=100.0, neighbour_cores=0.9,
                     main_cpu=60.0, main_cpu_wait=15.0, busy_threads=1, workers=1,
                     worker_cpu=70.0, worker_cpu_wait=25.0, phases=mix(data_wait=0.4),
                     **CPU_ONLY)
    lead = d.findings[0]
    ids = [f.id for f in d.findings]
    assert lead.id == "cores_taken_by_other_processes", ids
    assert "host_cpu_saturated" not in ids, "explained by the neighbour, not its rival"
    assert lead.title == ("The cores are busy, 0.9 of them with other processes "
                          "(PID 4242 python build.py (0.9 core))")
    assert d.metrics["free_cores"] == 0.0
    assert d.metrics["free_cores_without_others"] == pytest.approx(2 - 1.3)
    # What the neighbour costs the job: its processes' wait for a CPU, summed.
    assert d.metrics["proc_cpu_wait_mean"] == pytest.approx(40.0)
    assert "wait 40% of one for a CPU while ready to run" in lead.why


def test_a_neighbour_that_has_left_is_named_for_the_cores_it_took() -> None:
    """The window's mean says a neighbour held cores; the newest scan finds it gone (a
    build that ended): the finding still names it, for its mean over the window."""
    busy = Job(cpu_count=2, host_cpu=100.0, neighbour_cores=0.9, main_cpu=60.0,
               main_cpu_wait=15.0, busy_threads=1, workers=1, worker_cpu=70.0,
               worker_cpu_wait=25.0, phases=mix(data_wait=0.4), **CPU_ONLY)
    left = dataclasses.replace(busy, neighbour_cores=0.0, host_cpu=65.0)
    _session, ticks = run(Diagnoser(RULESET, Facts()), (busy, 30), (left, 33))
    last = ticks[-1].diagnosis
    assert last is not None
    # Scans that read the same count as often as they stood: 3 s of 20 without it.
    assert last.metrics["other_procs_cpu"] == pytest.approx(0.9 * 17 / 20)
    lead = last.findings[0]
    assert lead.id == "cores_taken_by_other_processes", [f.id for f in last.findings]
    assert "(PID 4242 python build.py (0.8 core))" in lead.title, lead.title


def test_a_stalled_job_says_so_first_with_its_frame_and_nothing_else() -> None:
    d = diagnose_job(RULESET, 40, **STUCK, main_cpu=2.0, workers=0)
    assert d.category == "stalled" and [f.id for f in d.findings] == ["job_stalled"]
    # Stalled since aitop attached: the stall began before it.
    assert re.fullmatch(r"Stalled: no progress for at least \d+ s, the training thread "
                        r"standing in Queue\.get \(queue\.py:171\), called from train\.py:42",
                        d.summary), d.summary
    assert (d.metrics["stalled_s"] or 0) >= 15
    # Moving at first, then stuck: the stall is timed from where it began.
    later = diagnose_job(RULESET, 60, **{**STUCK, "phases": mix(other=0.5),
                                         "later_phases": (25, mix(other=1.0))},
                         main_cpu=2.0, workers=0)
    assert later.category == "stalled", later.summary
    assert re.match(r"Stalled: no progress for \d+ s, ", later.summary), later.summary
    # The same job moving between frames each window is not stalled.
    moving = diagnose_job(RULESET, 40, **{**STUCK, "phases": mix(other=0.5)}, main_cpu=2.0,
                          workers=0)
    assert moving.category != "stalled" and moving.metrics["stalled_s"] == 0.0


def test_a_stall_is_judged_on_its_last_seconds_not_the_whole_window() -> None:
    """A feeder that worked as the loop began to wait, then quit: the window's mean
    CPU still holds its work, the stall's last seconds do not."""
    diagnoser = Diagnoser(RULESET, Facts())
    stuck = {k: v for k, v in STUCK.items() if k != "phases"}
    feeding = Job(**stuck, phases=mix(other=1.0), main_cpu=95.0, workers=0)
    quit_ = Job(**stuck, phases=mix(other=1.0), main_cpu=2.0, workers=0)
    _session, ticks = run(diagnoser, (feeding, 26), (quit_, 40))
    last = ticks[-1]
    assert last.metrics["proc_cpu_mean"] is not None and last.metrics["proc_cpu_mean"] > 10
    assert last.metrics["stall_cpu"] == pytest.approx(2.0)
    assert last.diagnosis is not None and last.diagnosis.category == "stalled", (
        last.diagnosis and last.diagnosis.summary)
    # Still feeding at the end: a loop waiting on a working producer is not stalled.
    _session, ticks = run(Diagnoser(RULESET, Facts()), (quit_, 26), (feeding, 40))
    assert ticks[-1].metrics["stall_cpu"] == pytest.approx(95.0)
    assert "job_stalled" not in ticks[-1].firing


def test_a_documents_figure_is_shown_only_where_its_context_holds() -> None:
    """torch.compile's 20-50 % is transformer *inference latency*: not a training step's."""
    facts = load_knowledge_base().facts
    training = diagnose_job(RULESET, facts=facts, techniques=(), gpu_util=95.0,
                            phases=mix(data_wait=0.02))
    compile_tip = next(f for f in training.findings if f.id == "try_torch_compile")
    assert compile_tip.gain.speedup is None and compile_tip.gain.method == "document"
    assert "is for inference latency, transformer-based models" in compile_tip.gain.explanation
    serving = diagnose_job(RULESET, facts=facts, techniques=(), gpu_util=95.0, phases=mix(
        forward=0.95, data_wait=0.02, backward=0.0, optimizer=0.0))
    tip = next(f for f in serving.findings if f.id == "try_torch_compile")
    assert tip.gain.speedup is not None
    assert "(for inference latency, transformer-based models)" in tip.gain.explanation


def test_findings_ranked_by_estimated_gain() -> None:
    d = diagnose_job(
        RULESET, gpu_util=60.0, pin_memory=False,
        phases=mix(other=0.30, checkpoint=0.10, data_wait=0.05),
    )
    ids = [f.id for f in d.findings]
    # Culprits first by severity (checkpoint stalls is high), then by how
    # well-founded and large the gain is: python_overhead's ceiling
    # 1/(1-0.3) = 1.43 > data wait 1/(1-0.05) = 1.05; advice last.
    assert ids == ["checkpoint_stalls", "python_overhead", "data_wait_elevated", "pin_memory_off"]
    gains = [f.gain.speedup for f in d.findings]
    assert gains[1:3] == pytest.approx([1 / 0.7, 1 / 0.95])
    assert gains[3] is None
    assert d.category == "io"
    assert d.summary.startswith("Saving checkpoints stalls training 10%")


def test_the_culprit_leads_and_carries_the_symptom() -> None:
    d = diagnose_job(
        RULESET, gpu_util=30.0, workers=4, worker_cpu=95.0, phases=mix(data_wait=0.40)
    )
    ids = [f.id for f in d.findings]
    # Workers busy, cores free: the culprit leads; the symptom is not a rival.
    assert ids[0] == "workers_cpu_bound"
    assert "data_wait_dominant" not in ids
    assert d.top is not None
    assert d.top.explains == ("The loop waits for data 40% of the time",)
    assert d.category == "data_loading"


@pytest.mark.parametrize(
    ("p", "removable", "low", "high"),
    [
        (0.64, (1.0, 1.0), 1 / 0.36, 1 / 0.36),
        (0.5, (0.5, 1.0), 1 / 0.75, 2.0),
        (0.0, (1.0, 1.0), 1.0, 1.0),
        (1.0, (1.0, 1.0), 100.0, 100.0),  # clamped at 0.99: never infinite
    ],
)
def test_amdahl_arithmetic(
    p: float, removable: tuple[float, float], low: float, high: float
) -> None:
    spec = GainSpec("amdahl", metric="phase_data_wait", removable=removable)
    gain = estimate_gain(spec, {"phase_data_wait": p}, Facts())
    assert gain.low == pytest.approx(low)
    assert gain.high == pytest.approx(high)
    assert gain.speedup == pytest.approx(high)
    assert math.isfinite(gain.speedup or math.inf)


def test_amdahl_adds_the_kernel_time_the_action_also_removes() -> None:
    """Workers kept alive also end the parent's forks and page copies: the share
    of wall time the kernel spent on the training process joins the phase's."""
    plain = GainSpec("amdahl", metric="phase_data_wait", samples="phase_samples")
    spec = GainSpec("amdahl", metric="phase_data_wait", samples="phase_samples",
                    also_removes=("main_kernel_mean",))
    metrics = {"phase_data_wait": 0.8, "phase_samples": 300.0, "main_kernel_mean": 6.0}
    without, with_kernel = (estimate_gain(s, metrics, Facts()) for s in (plain, spec))
    assert without.ceiling is not None and with_kernel.ceiling is not None
    assert 1 / with_kernel.ceiling == pytest.approx(1 / without.ceiling - 0.06)
    assert "besides it, 6.0% of the time (CPU the kernel spent" in with_kernel.explanation
    unknown = estimate_gain(spec, {**metrics, "main_kernel_mean": None}, Facts())
    assert unknown.ceiling == without.ceiling
    nothing_left = estimate_gain(spec, {**metrics, "main_kernel_mean": 30.0}, Facts())
    assert nothing_left.speedup is None and "no ceiling" in nothing_left.explanation
    assert "also removes 30.0% of the time besides it" in nothing_left.explanation


def test_amdahl_adds_every_share_the_action_also_removes() -> None:
    """Workers kept alive also end the run-queue wait their start-up caused the
    training thread: each named share joins the phase's, each is said, and one
    not known yet is left out rather than read as zero in the text."""
    spec = GainSpec("amdahl", metric="phase_data_wait", samples="phase_samples",
                    also_removes=("main_kernel_mean", "main_cpu_wait_mean"))
    kernel_only = GainSpec("amdahl", metric="phase_data_wait", samples="phase_samples",
                           also_removes=("main_kernel_mean",))
    metrics = {"phase_data_wait": 0.8, "phase_samples": 300.0, "main_kernel_mean": 6.0,
               "main_cpu_wait_mean": 4.0}
    both, kernel = (estimate_gain(s, metrics, Facts()) for s in (spec, kernel_only))
    assert both.ceiling is not None and kernel.ceiling is not None
    assert 1 / both.ceiling == pytest.approx(1 / kernel.ceiling - 0.04)
    assert "6.0% of the time (CPU the kernel spent" in both.explanation
    assert "4.0% of the time (time the main process's main thread was runnable" in (
        both.explanation)
    no_wait = estimate_gain(spec, {**metrics, "main_cpu_wait_mean": None}, Facts())
    assert no_wait.ceiling == kernel.ceiling
    assert "runnable" not in no_wait.explanation


def test_a_rule_may_name_several_shares_its_action_also_removes(tmp_path: Path) -> None:
    text = "rules:\n" + _rule("fine_rule", gain=(
        "{method: amdahl, metric: phase_data_wait, samples: phase_samples, "
        "also_removes: [main_kernel_mean, main_cpu_wait_mean]}"))
    rule = _load_user_file(_write(tmp_path, text)).rules[0]
    assert rule.gain.also_removes == ("main_kernel_mean", "main_cpu_wait_mean")


def test_amdahl_with_unknown_phase_has_no_figure() -> None:
    spec = GainSpec("amdahl", metric="phase_data_wait")
    gain = estimate_gain(spec, {"phase_data_wait": None}, Facts())
    assert gain.speedup is None
    assert "not known" in gain.explanation


# --------------------------------------------------------------- rule files


def _rule(name: str, **fields: str) -> str:
    values = {
        "expr": "phase_data_wait >= 0.5",
        "for": "5s",
        "severity": "medium",
        "category": "data_loading",
        "title": '"A test rule"',
        "source": "{document: diagnose, section: test}",
    }
    values.update(fields)
    lines = [f"  - name: {name}"] + [f"    {key}: {value}" for key, value in values.items()]
    return "\n".join(lines) + "\n"


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "my_rules.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def _load_user_file(path: Path) -> RuleSet:
    """What ``load_knowledge_base([path])`` does with the user's file, without re-reading ours.

    Reading the packaged files takes most of a ``load_knowledge_base`` call; the
    error cases below are about the user's file, so they read only that (a few go
    through ``load_knowledge_base`` itself to show the errors surface there unchanged).
    """
    return rules_in_document(load_yaml_file(path), load_knowledge_base())


def _line_of(text: str, needle: str) -> int:
    return next(i for i, line in enumerate(text.splitlines(), 1) if needle in line)


def test_user_file_adds_and_replaces_rules(tmp_path: Path) -> None:
    text = "rules:\n" + _rule("my_slow_optimizer", expr="phase_optimizer >= 0.4") + _rule(
        "data_wait_dominant", expr="phase_data_wait >= 0.9", severity="critical"
    )
    path = _write(tmp_path, text)
    ruleset = load_knowledge_base([path]).rules
    ids = [r.id for r in ruleset.rules]
    assert len(ids) == len(RULESET.rules) + 1
    assert len(set(ids)) == len(ids)
    by_id = {r.id: r for r in ruleset.rules}
    assert by_id["data_wait_dominant"].condition.expr == "phase_data_wait >= 0.9"
    assert by_id["data_wait_dominant"].severity == "critical"
    assert by_id["data_wait_dominant"].file == str(path)
    assert by_id["data_wait_dominant"].line == _line_of(text, "name: data_wait_dominant")
    assert by_id["my_slow_optimizer"].for_s == 5.0
    assert ruleset.files == ("rules.yaml", str(path))
    # The replaced rule really behaves as the user's: 64 % data wait no longer fires it.
    d = diagnose_job(ruleset, phases=mix(data_wait=0.64))
    assert "data_wait_dominant" not in [f.id for f in d.findings]


def test_user_file_adds_states(tmp_path: Path) -> None:
    path = _write(tmp_path, "states:\n  - id: gpu_util_below_70\n    expr: accel_util < 50\n")
    ruleset = load_knowledge_base([path]).rules
    states = {s.id: s for s in ruleset.states}
    assert len(states) == len(RULESET.states)
    assert states["gpu_util_below_70"].condition.expr == "accel_util < 50"
    assert states["gpu_util_below_70"].line == 2


BAD_FIELDS: dict[str, tuple[dict[str, str], str]] = {
    "unknown metric in expr": (
        {"expr": "phase_data_wiat >= 0.5"},
        "unknown metric phase_data_wiat",
    ),
    "syntax error in expr": ({"expr": "phase_data_wait >= >= 0.5"}, "syntax error"),
    "unknown function": ({"expr": "sqrt(phase_data_wait) > 0.5"}, "unknown function sqrt"),
    "attribute access": ({"expr": "phase_data_wait.__class__ == 1"}, "only metric names"),
    "dunder name": ({"expr": "__import__ == 1"}, "unknown metric __import__"),
    "unknown severity": ({"severity": "urgent"}, "unknown severity 'urgent'"),
    "unknown category": ({"category": "network"}, "unknown category 'network'"),
    "bad duration": ({"for": "5 minutes"}, "'for' must be a duration"),
    "bad keep_firing_for": ({"keep_firing_for": "soon"}, "'keep_firing_for' must be a duration"),
    "boolean duration": ({"for": "true"}, "'for' must be a duration"),
    "template attribute": ({"title": '"{phase_data_wait.__class__}"'}, "phase_data_wait.__class__"),
    "template index": ({"why": '"{phase_data_wait[0]}"'}, "phase_data_wait[0]"),
    "unknown metric in title": ({"title": '"{nope:.0%}"'}, "unknown metric nope"),
    "unknown metric in evidence": ({"evidence": "[phase_data_wait, nope]"}, "nope in evidence"),
    "no source": ({"source": "{}"}, "'source' must name the document"),
}


@pytest.mark.parametrize("case", list(BAD_FIELDS))
def test_rule_file_errors_carry_file_and_line(tmp_path: Path, case: str) -> None:
    fields, message = BAD_FIELDS[case]
    text = "rules:\n" + _rule("fine_rule") + _rule("broken_rule", **fields)
    path = _write(tmp_path, text)
    with pytest.raises(KnowledgeError) as info:
        _load_user_file(path)
    # At the line of the field that is wrong, in the broken rule (from line 9 on).
    (key,) = fields
    line = next(i for i, ln in enumerate(text.splitlines(), 1) if i > 9 and f"    {key}:" in ln)
    assert len(info.value.problems) == 1, str(info.value)
    assert info.value.file == str(path)
    assert info.value.line == line
    assert str(info.value).startswith(f"{path}:{line}: ")
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("gain", "message"),
    [
        ("{method: amdahl, metric: phase_nothing}", "unknown metric phase_nothing in gain"),
        ("{method: amdahl, metric: phase_other, removable: 1.5}", "'removable' must lie in"),
        ("{method: parallel, metric: phase_compute, factor: cores}", "unknown metric cores"),
        ("{method: amdahl, metric: phase_data_wait, also_removes: kernel}",
         "unknown metric kernel in gain"),
        ("{method: amdahl, metric: phase_data_wait, also_removes: [main_kernel_mean, wait]}",
         "unknown metric wait in gain"),
        ("{method: magic}", "unknown gain method 'magic'"),
    ],
)
def test_gain_errors_point_at_the_gain_mapping(tmp_path: Path, gain: str, message: str) -> None:
    text = "rules:\n" + _rule("fine_rule") + _rule("broken_rule", gain=gain)
    path = _write(tmp_path, text)
    with pytest.raises(KnowledgeError, match=message) as info:
        _load_user_file(path)
    assert info.value.line == _line_of(text, "gain:") == 16


def test_the_loader_reports_user_file_errors_with_file_and_line(tmp_path: Path) -> None:
    text = "rules:\n" + _rule("fine_rule") + _rule("broken_rule", expr="nope > 1")
    path = _write(tmp_path, text)
    with pytest.raises(KnowledgeError, match="unknown metric nope") as info:
        load_knowledge_base([path])
    assert str(info.value).startswith(f"{path}:10: ")  # the broken rule's expr


def test_duplicate_rule_in_one_file(tmp_path: Path) -> None:
    text = "rules:\n" + _rule("twice") + _rule("twice")
    path = _write(tmp_path, text)
    with pytest.raises(KnowledgeError, match="duplicate rule name 'twice'") as info:
        _load_user_file(path)
    assert info.value.line == 9


def test_yaml_syntax_error_carries_line(tmp_path: Path) -> None:
    text = "rules:\n" + _rule("fine_rule") + _rule("broken_rule", title="a: b")
    path = _write(tmp_path, text)
    with pytest.raises(KnowledgeError, match="not valid YAML") as info:
        _load_user_file(path)
    assert info.value.line == _line_of(text, "title: a: b") == 14
    assert str(info.value).startswith(f"{path}:14: ")


def test_python_tags_are_rejected_by_safe_loading(tmp_path: Path) -> None:
    marker = tmp_path / "pwned"
    text = "rules:\n" + _rule("fine_rule") + _rule(
        "broken_rule",
        title=f"!!python/object/apply:pathlib.Path.touch [!!python/object/apply:pathlib.Path "
        f"['{marker}']]",
    )
    path = _write(tmp_path, text)
    with pytest.raises(KnowledgeError, match="could not determine a constructor") as info:
        load_knowledge_base([path])
    assert info.value.line == 14
    assert not marker.exists()
    other = _write(tmp_path, "rules:\n  - name: x\n    title: !!python/object:os.system {}\n")
    with pytest.raises(KnowledgeError, match=r"python/object:os\.system") as info:
        _load_user_file(other)
    assert info.value.line == 3


def test_file_without_rules_is_rejected(tmp_path: Path) -> None:
    path = _write(tmp_path, "rulez:\n  - name: x\n")
    with pytest.raises(KnowledgeError, match="expected top-level 'rules:'") as info:
        load_knowledge_base([path])
    assert info.value.file == str(path)


def test_missing_file_is_a_knowledge_error(tmp_path: Path) -> None:
    with pytest.raises(KnowledgeError, match="cannot read") as info:
        load_knowledge_base([tmp_path / "nope.yaml"])
    assert info.value.file == str(tmp_path / "nope.yaml")


def test_rules_given_as_a_mapping_error_carries_file_and_line(tmp_path: Path) -> None:
    path = _write(tmp_path, "rules:\n  name: x\n  expr: phase_data_wait > 0.5\n")
    with pytest.raises(KnowledgeError) as info:
        _load_user_file(path)
    assert info.value.file == str(path) and info.value.line == 2


def test_negative_duration_is_rejected(tmp_path: Path) -> None:
    text = "rules:\n" + _rule("fine_rule") + _rule("broken_rule", **{"for": "-5"})
    with pytest.raises(KnowledgeError, match="'for' must not be negative") as info:
        _load_user_file(_write(tmp_path, text))
    assert info.value.line == _line_of(text, "for: -5") == 11


def test_every_packaged_metric_reference_is_in_the_catalogue() -> None:
    for rule in RULESET.rules:
        assert rule.condition.names <= CATALOGUE.keys(), rule.id
        assert set(rule.evidence) <= CATALOGUE.keys(), rule.id
        assert rule.file == "rules.yaml" and rule.line > 0


@pytest.mark.parametrize(
    ("field", "value", "where", "message"),
    [
        ("keep_firng_for", "30s", "keep_firng_for:",
         "rule 'broken_rule': unknown key 'keep_firng_for' (did you mean 'keep_firing_for'?)"),
        ("gain", "{method: amdahl, metric: phase_data_wait, removeable: 0.5}", "gain:",
         "gain: unknown key 'removeable' (did you mean 'removable'?)"),
        ("source", "{document: diagnose, sektion: x}", "source: {document: diagnose, sektion",
         "source: unknown key 'sektion' (did you mean 'section'?)"),
    ],
)
def test_unknown_keys_are_rejected_at_their_line(
    tmp_path: Path, field: str, value: str, where: str, message: str
) -> None:
    """A misspelt key is an error, not a silently ignored setting (as in Prometheus)."""
    text = "rules:\n" + _rule("fine_rule") + _rule("broken_rule", **{field: value})
    path = _write(tmp_path, text)
    with pytest.raises(KnowledgeError) as info:
        load_knowledge_base([path])
    assert message in str(info.value)
    assert info.value.line == _line_of(text, where)
    assert str(info.value).startswith(f"{path}:{info.value.line}: ")


def test_unknown_top_level_and_phase_keys_are_rejected(tmp_path: Path) -> None:
    path = _write(tmp_path, "rules: []\nstate:\n  - id: x\n")
    with pytest.raises(KnowledgeError, match=r"unknown key 'state' \(did you mean") as info:
        load_knowledge_base([path])
    assert info.value.line == 2
    path = _write(tmp_path, "phases:\n  - phase: forward\n    rank: 5\n    signature: []\n")
    with pytest.raises(KnowledgeError, match="phase: unknown key 'signature'") as info:
        load_knowledge_base([path])
    assert info.value.line == 4


def test_a_user_file_is_read_once_for_rules_and_phases(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import aitop.knowledge.reading.loader as loader

    path = _write(tmp_path, "rules:\n" + _rule("mine") + "phases:\n  - phase: forward\n"
                  "    rank: 50\n    signatures: [{function: my_forward}]\n")
    reads: list[Path] = []
    real = loader.load_yaml_file

    def counting(p: Path) -> object:
        reads.append(p)
        return real(p)

    monkeypatch.setattr(loader, "load_yaml_file", counting)
    knowledge = load_knowledge_base([path])
    assert reads == [path]
    assert "mine" in {r.id for r in knowledge.rules.rules}
    assert any(r.rank == 50 for r in knowledge.phases.rules)


def test_a_finding_held_by_keep_firing_for_is_told_with_the_numbers_that_made_it_fire() -> None:
    """Once the data wait falls below 30 %, data_wait_dominant fires on for 10 s: its
    title must keep the share that fired it, not claim "waits 24 %" as dominant."""
    diagnoser = Diagnoser(RULESET, Facts())
    _session, ticks = run(diagnoser, (Job(phases=mix(data_wait=0.5)), 40),
                          (Job(phases=mix(data_wait=0.02)), 60))
    held = [t for t in ticks
            if "data_wait_dominant" in t.firing
            and (t.metrics["phase_data_wait"] or 0.0) < 0.30]
    assert held, "the rule should be held by keep_firing_for after the drop"
    holding = [t for t in ticks if "data_wait_dominant" in t.firing and t not in held]
    last_true = max(t.now for t in holding)
    for tick in held:
        assert tick.diagnosis is not None
        finding = next(f for f in tick.diagnosis.findings if f.id == "data_wait_dominant")
        shown = int(finding.title.split("waits for data ")[1].split("%")[0])
        assert shown >= 30, (finding.title, tick.metrics["phase_data_wait"])
        # And it says whose numbers those are: the last moment its condition held.
        assert finding.last_held_at == last_true, (finding.last_held_at, last_true)
    for tick in holding:
        assert tick.diagnosis is not None
        finding = next(f for f in tick.diagnosis.findings if f.id == "data_wait_dominant")
        assert finding.last_held_at is None


def test_memory_that_swings_is_no_growth_however_its_slope_reads() -> None:
    """Every stretch of word_language_model's memory, read each second or each 2 s
    (the UI's and the report's cadence), 10 s to a minute long: slopes of 90-150
    MB/min up and down, never a growth; the same swings on a leak are one."""
    points = [(float(t), float(mb)) for t, mb in enumerate(WORD_LM_RSS_SWING)]
    slopes: list[float] = []
    growths: list[tuple[int, float | None]] = []
    for span in (10, 12, 15, 20, 30, 40, 60):
        for step in (1, 2):
            for start in range(len(points) - span):
                window = points[start:start + span + 1:step]
                agg = aggregate(window)
                assert agg is not None
                slopes.append(agg.trend)
                growths.append((span, memory_growth(window)))
    assert max(slopes) >= 60, "the slope alone would read growth"
    assert not [g for _span, g in growths if g], "a growth read in swings"
    # From 15 s on, read (as 0); under it, unread unless the slope is clear.
    settled = [g for span, g in growths if span >= 15]
    assert sum(g is not None for g in settled) > 0.8 * len(settled)
    # 8 MB/s (480 MB/min) on the same swings stands out within 20 s at 1 s a
    # point and 30 s at 2 s; a slower leak takes longer to tell from them.
    leak = [(t, mb + 8.0 * t) for t, mb in points]
    for span, step in ((20, 1), (30, 2), (60, 2)):
        for start in range(len(leak) - span):
            growth = memory_growth(leak[start:start + span + 1:step])
            assert growth is not None and growth == pytest.approx(480, rel=0.35), (span, growth)
    assert memory_growth(points[:10]) is None  # under 10 s: not yet read
    # A leak of 80 MB/s (an unseen job kept every step's loss with its graph) on
    # the same swings is read within 10 s at the report's 2 s a point.
    fast = [(t, mb + 80.0 * t) for t, mb in points]
    for start in range(len(fast) - 10):
        growth = memory_growth(fast[start:start + 11:2])
        assert growth is not None and growth == pytest.approx(4800, rel=0.2), growth


def test_a_job_whose_other_rank_is_stuck_names_that_rank_first() -> None:
    """Every rank of a hung DDP job stands still; the one the others wait for is named."""
    d = diagnose_job(RULESET, 40, local_ranks=2, gpu=False, cpu_count=2, busy_threads=1,
                     main_cpu=2.0, workers=0, phases=mix(backward=0.99, other=0.01),
                     peer_comm=(0.0,), peers_stalled=True, stack_period_s=5,
                     samples_per_window=50, steps_per_s=0.0, read_mb_s=0.0)
    lead = d.findings[0]
    assert lead.id == "rank_stuck_others_wait", [f.id for f in d.findings]
    assert d.category == "stalled" and d.summary == lead.title
    assert lead.title.startswith(f"rank 1 (PID {PID + 1000}) is stuck, and the other ranks "
                                 "wait for it: Stalled: no progress for 30 s"), lead.title
    # This rank's own stall (in backward, waiting) is carried, not listed beside it,
    # and no steady-state finding (the straggler's gain) is judged meanwhile.
    assert "job_stalled" not in [f.id for f in d.findings]
    assert all(f.gain.speedup is None for f in d.findings)


def test_a_fused_update_of_a_large_optimizer_phase_predicts_no_wider_than_the_limit() -> None:
    """The optimizer at 63 % of the step: the range from the share's error and the
    fused update's spread would be x1.72-2.70, wider than any prediction may be."""
    spec = next(r.gain for r in RULESET.rules if r.id == "optimizer_for_loop")
    assert spec.method == "shrink"
    gain = estimate_gain(spec, {"phase_optimizer_loop": 0.63}, Facts())
    assert gain.low is not None and gain.high is not None
    assert round(gain.high, 3) / round(gain.low, 3) <= MAX_WIDTH
    narrow = estimate_gain(spec, {"phase_optimizer_loop": 0.2}, Facts())
    assert narrow.low is not None and narrow.high is not None
    assert narrow.high / narrow.low < MAX_WIDTH / 1.001  # a narrow range is left alone
