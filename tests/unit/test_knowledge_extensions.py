"""What an expert extends lives in the YAML, and a ``--rules`` file reaches it.

A new loader library's files, a new way to park a thread, a helper thread, the
order of the priority framework's rows, aitop's own targets, the straggler cut:
each is added in a rule file here and seen where it is used (the probes get the
stack reading as a value inside the classifier; they never import knowledge).
"""

from __future__ import annotations

from pathlib import Path

from aitop.knowledge.base import catalogue
from aitop.knowledge.base.facts import Facts
from aitop.knowledge.judging.diagnosis import Diagnoser
from aitop.knowledge.metrics import window as metrics
from aitop.knowledge.metrics.series import series_values
from aitop.knowledge.metrics.straggler import RankView, judge_ranks
from aitop.knowledge.reading.loader import KnowledgeBase, load_knowledge_base
from aitop.probes.phases import PhaseClassifier, StackReading, parse_raw
from aitop.probes.samples import StackWindow
from aitop.probes.stack_window import summarize_window
from support.knowledge import HELPER_THREADS, HOLDS_BACK
from support.synthetic import T0, WINDOW_S, make_session

SITE = "/venv/lib/python3.11/site-packages"


def _kb(tmp_path: Path, text: str) -> KnowledgeBase:
    path = tmp_path / "mine.yaml"
    path.write_text(text, encoding="utf-8")
    return load_knowledge_base([path])


def _window(classifier: PhaseClassifier, wait_frames: str, other_leaf: str) -> StackWindow:
    """A loop that waits in ``wait_frames`` while a second thread sits in ``other_leaf``."""
    loop = "train (/job/train.py:6)"
    text = "\n".join([
        f"thread (1): MainThread;{loop};{wait_frames} 60",
        f"thread (1): MainThread;{loop};Tensor.backward ({SITE}/torch/_tensor.py:623) 40",
        f"thread (2): helper;Thread.run (threading.py:982);{other_leaf} 50",
    ])
    return summarize_window(parse_raw(text), classifier, pid=1, t_start=0, t_end=1)


LOADER_WAIT = f"Loader.__next__ ({SITE}/torch/utils/data/dataloader.py:700)"
NEWLIB_WAIT = (f"Batches.__next__ ({SITE}/newlib/loader.py:10);"
               f"Pipe.take ({SITE}/newlib/pipe.py:20)")


def test_the_packaged_stack_reading_comes_from_phases_yaml() -> None:
    reading = load_knowledge_base().phases.reading
    assert {"wait", "get", "sleep"} <= reading.idle_functions
    assert [r.source for r in reading.data_sources] == ["dataloader", "process queue",
                                                        "thread queue"]
    # The probes hold no list of their own: an empty reading reads nothing.
    assert StackReading() == StackReading(frozenset(), ())


def test_a_new_loader_library_and_idle_function_reach_the_stack_probe(tmp_path: Path) -> None:
    signature = ("phases:\n  - phase: data_wait\n    rank: 30\n"
                 "    signatures: [{function: '*', file: 'newlib/*'}]\n")
    waits = _window(_kb(tmp_path, signature).phases.classifier(), NEWLIB_WAIT,
                    "Pipe.park (newlib/pipe.py:5)")
    assert waits.phase_counts["data_wait"] == 60
    assert waits.data_source == "own code", "a wait in files no data source names"
    assert waits.other_threads[0].busy_samples == 50
    kb = _kb(tmp_path, signature + "data_sources:\n  - {source: dataloader, files: ['newlib/*']}\n"
                                   "idle_frames: [park]\n")
    taught = _window(kb.phases.classifier(), NEWLIB_WAIT, "Pipe.park (newlib/pipe.py:5)")
    assert taught.data_source == "dataloader"
    assert taught.other_threads[0].busy_samples == 0, "park is now a parked thread"
    # The packaged sources are still there, in their order.
    assert _window(kb.phases.classifier(), LOADER_WAIT, "x (a.py:1)").data_source == "dataloader"


def test_a_helper_thread_prefix_is_not_counted_as_compute(tmp_path: Path) -> None:
    session = make_session(busy_threads=2, busy_thread_names=("python", "myhelper_0"))
    now = T0 + 30
    packaged = metrics.compute_metrics(session, now, WINDOW_S, HELPER_THREADS)
    assert packaged["main_busy_threads_mean"] == 2.0
    kb = _kb(tmp_path, "helper_threads: [myhelper]\n")
    assert kb.phases.helper_threads[-1] == "pt_data_pin", "the pin-memory thread always is"
    taught = metrics.compute_metrics(session, now, WINDOW_S, kb.phases.helper_threads)
    assert taught["main_busy_threads_mean"] == 1.0


def test_a_state_can_lead_for_another_category_and_keeps_what_it_does_not_say(
    tmp_path: Path,
) -> None:
    metrics_ = {"has_gpu": 1.0, "accel_util": 90.0, "gpu_util_mean": 90.0,
                "phase_data_wait": 0.2}
    packaged = Diagnoser(load_knowledge_base().rules, Facts()).states(metrics_, "compute")
    assert [s.id for s in packaged] == ["high_data_loading_latency", "gpu_util_above_85"]
    kb = _kb(tmp_path, "states:\n  - id: gpu_util_above_85\n    leads_for: [compute]\n")
    taught = Diagnoser(kb.rules, Facts()).states(metrics_, "compute")
    assert [s.id for s in taught] == ["gpu_util_above_85", "high_data_loading_latency"]
    spec = next(s for s in kb.rules.states if s.id == "gpu_util_above_85")
    assert spec.gpu_only and spec.well_used and spec.condition.expr == "accel_util > 85"


def test_a_rule_file_adds_targets(tmp_path: Path) -> None:
    kb = _kb(tmp_path, "targets:\n  - {metric: phase_eval, high: 0.2, text: '< 20 %'}\n")
    assert kb.facts.targets["phase_eval"].high == 0.2
    assert kb.facts.targets["phase_eval"].source == "aitop default"
    assert "phase_eval" not in load_knowledge_base().facts.targets


def test_a_rule_files_target_replaces_the_documents_own(tmp_path: Path) -> None:
    """The documents' data-loading target (under 5 %) wins over aitop's own
    targets, not over the user's: the findings' evidence and every panel move."""
    packaged = load_knowledge_base().facts.targets["phase_data_wait"]
    assert (packaged.high, packaged.source) == (0.05, "optimize")
    kb = _kb(tmp_path, "targets:\n  - {metric: phase_data_wait, high: 0.2, text: '< 20 %'}\n")
    assert kb.facts.targets["phase_data_wait"].high == 0.2
    assert kb.facts.targets["gpu_util"] == load_knowledge_base().facts.targets["gpu_util"]


def test_the_straggler_cut_is_the_knowledge_bases_condition(tmp_path: Path) -> None:
    ranks = [RankView("rank 0", 1, 0.40, None, None, None),
             RankView("rank 1", 2, 0.10, None, None, None)]  # score 0.60 / 0.90 = 0.67
    assert judge_ranks(ranks, HOLDS_BACK).flagged, "below the packaged cut"
    kb = _kb(tmp_path, "conditions:\n  holds_back_job: straggler_score < 0.5\n")
    assert not judge_ranks(ranks, kb.rules.conditions["holds_back_job"]).flagged
    straggler = next(r for r in kb.rules.rules if r.id == "straggler_holds_back_job")
    assert "straggler_score < 0.5" in straggler.condition.expr


def test_every_catalogued_series_is_computed_and_nothing_else() -> None:
    # By name: a catalogue entry without a value function, or a value function
    # for a name the catalogue lacks, fails here (not a metric read as another).
    computed = set(series_values(()))
    catalogued = {name for name, *_ in catalogue.SERIES}
    assert not catalogued - computed, "catalogue series without a value function"
    assert not computed - catalogued, "value functions for names the catalogue lacks"
    assert len(catalogue.SERIES) == len(catalogued), "a series catalogued twice"
