"""The knowledge base must encode both documents faithfully and completely.

The expected content below is written out independently of documents.yaml, from
the documents themselves, so that deleting or altering an entry in the YAML fails
a test here instead of silently removing advice from aitop.
"""

from __future__ import annotations

import ast
import dataclasses
import importlib
import inspect
import re
from pathlib import Path
from typing import Any

import pytest
from aitop.knowledge.base import documents as kdoc
from aitop.knowledge.base.documents import KnowledgeDocuments
from aitop.knowledge.base.findings import CATEGORIES
from aitop.knowledge.base.passages import (
    find_passage,
    headings,
    normalize,
    sections_containing,
    source_text,
    verify_sources,
)
from aitop.knowledge.reading.documents_reader import read_documents
from aitop.knowledge.reading.loader import load_knowledge_base
from aitop.knowledge.reading.yamlio import KnowledgeError

RULES = load_knowledge_base().rules


@pytest.fixture(scope="module")
def kd() -> KnowledgeDocuments:
    return load_knowledge_base().documents


def _doc(kd: KnowledgeDocuments, document: str) -> str:
    return normalize(source_text(document, kd))


# ---------------------------------------------------------------------------------
# Documents and their headings
# ---------------------------------------------------------------------------------

EXPECTED_HEADINGS = {
    "diagnose": [
        "Overview",
        "How Do I Identify the Core Performance Bottleneck in My AI Studio?",
        "Performance Bottleneck Diagnosis Checklist",
        "How Can I Fix Low GPU Utilization in My AI Training?",
        "Why Is My GPU Memory Filling Up and How Do I Manage It?",
        "How Do I Optimize for AI Inference Latency in a Studio?",
        "Frequently Asked Questions",
        "How often should I re-optimize my AI server environment?",
        "Can I use multiple GPUs to speed up my AI studio workload?",
        "Does the host CPU matter if the GPU does all the compute?",
        "How does network latency affect my GPU server's performance?",
        "What is the single most impactful software optimization for GPU performance?",
        "Conclusion",
    ],
    "optimize": [
        "Overview",
        "What Makes AI Server Optimization Different from General Server Tuning",
        "GPU and Compute Optimization",
        "Enable Mixed-Precision Computation",
        "Compile Models for Operator Fusion",
        "Tune Batch Size and GPU Utilization",
        "Memory Management Optimization",
        "Gradient Checkpointing",
        "Memory-Efficient Attention Mechanisms",
        "Quantization for Inference",
        "Data Pipeline Optimization",
        "Asynchronous Data Loading",
        "Data Format and Caching",
        "Overlap Preprocessing with Compute",
        "Storage and I/O Optimization",
        "RAID Configuration for Throughput",
        "Checkpoint Optimization",
        "NVMe Configuration",
        "Network and Multi-GPU Optimization",
        "NCCL Configuration",
        "Gradient Compression and Communication Optimization",
        "Continuous Monitoring and Benchmarking",
        "Key Metrics to Track",
        "Profiling for Targeted Improvement",
        "Optimization Priority Framework",
        "FAQ",
        "How do I know which optimization to apply first?",
        "Does mixed-precision training reduce model quality?",
        "How much faster does model compilation make inference?",
        "Can software optimization compensate for inadequate hardware?",
        "How often should I re-evaluate my server optimization settings?",
        "Conclusion",
    ],
}


def test_both_documents_are_listed_with_their_files(kd: KnowledgeDocuments) -> None:
    assert [(d.id, d.file) for d in kd.documents] == [
        ("diagnose", "diagnose-bottleneck.txt"),
        ("optimize", "optimize-server.txt"),
    ]
    assert kd.document("diagnose").title == (
        "How Do I Identify the Core Performance Bottleneck in My AI Studio?"
    )
    assert kd.document("optimize").title


@pytest.mark.parametrize("document", ["diagnose", "optimize"])
def test_source_text_is_the_document(kd: KnowledgeDocuments, document: str) -> None:
    text = source_text(document, kd)
    assert text.startswith("Overview")
    assert "Conclusion" in text
    assert len(text) > 5000


def test_source_text_of_unknown_document(kd: KnowledgeDocuments) -> None:
    with pytest.raises(KeyError):
        source_text("nope", kd)


@pytest.mark.parametrize("document", ["diagnose", "optimize"])
def test_headings_are_recognised(kd: KnowledgeDocuments, document: str) -> None:
    assert list(headings(document, kd)) == EXPECTED_HEADINGS[document]


# ---------------------------------------------------------------------------------
# Symptoms (diagnosis checklist)
# ---------------------------------------------------------------------------------

# (id, symptom, culprit, category, thresholds, [(action text, technique ids)])
EXPECTED_SYMPTOMS = [
    (
        "low_volatile_gpu_util",
        "GPU utilization is low and volatile (<70%)",
        "Slow data loading or preprocessing on the CPU.",
        "data_loading",
        [("gpu_utilization", "<", 70.0)],
        [
            ("Profile the data loader", ("profile_data_pipeline",)),
            ("increase worker threads", ("increase_num_workers",)),
            ("ensure data is on fast local NVMe storage", ("local_nvme",)),
        ],
    ),
    (
        "high_util_low_throughput",
        "GPU utilization is high (>85%), but throughput is low",
        "Computational inefficiency or a memory bandwidth wall.",
        "compute",
        [("gpu_utilization", ">", 85.0)],
        [
            ("Profile for kernel time", ("profiling", "nsight_systems")),
            ("implement mixed-precision (FP16/BF16)", ("mixed_precision",)),
            ("optimize model code or use torch.compile", ("optimize_model_code", "torch_compile")),
        ],
    ),
    (
        "oom_or_small_batch",
        'Frequent "Out of Memory" errors or forced small batch sizes',
        "Insufficient GPU VRAM for the model and batch size.",
        "memory",
        [],
        [
            ("Reduce batch size", ("batch_size_reduction",)),
            ("enable gradient checkpointing", ("gradient_checkpointing",)),
            ("consider a GPU with more VRAM", ("vram_upgrade",)),
        ],
    ),
    (
        "long_epoch_short_step",
        "Long epoch times, but per-step GPU time is short",
        "I/O bound operation, often during data saving/loading or checkpointing.",
        "io",
        [],
        [
            ("Benchmark storage read/write speeds", ("benchmark_storage",)),
            ("use asynchronous I/O where possible", ("async_checkpoint", "async_data_loading")),
        ],
    ),
]


def test_all_four_symptoms_in_order(kd: KnowledgeDocuments) -> None:
    assert [s.id for s in kd.symptoms] == [e[0] for e in EXPECTED_SYMPTOMS]


@pytest.mark.parametrize("expected", EXPECTED_SYMPTOMS, ids=[e[0] for e in EXPECTED_SYMPTOMS])
def test_symptom(kd: KnowledgeDocuments, expected: tuple[Any, ...]) -> None:
    sid, symptom, culprit, category, thresholds, actions = expected
    s = next(s for s in kd.symptoms if s.id == sid)
    assert s.symptom == symptom
    assert s.culprit == culprit
    assert s.category == category
    assert [(t.metric, t.op, t.value) for t in s.thresholds] == thresholds
    assert [(a.text, a.techniques) for a in s.actions] == actions
    text = _doc(kd, "diagnose")
    assert f"Symptom: {symptom}" in text
    assert f"Likely Culprit: {culprit}" in text
    assert "Action: " + "; ".join(a for a, _ in actions) + "." in text


def test_symptom_thresholds_evaluate(kd: KnowledgeDocuments) -> None:
    low = kd.symptoms[0].thresholds[0]
    high = kd.symptoms[1].thresholds[0]
    assert low.holds(69.9) and not low.holds(70)
    assert high.holds(85.1) and not high.holds(85)


# ---------------------------------------------------------------------------------
# Bottleneck-location table
# ---------------------------------------------------------------------------------

# (location, primary symptom, key fix cell, category, technique ids of the fixes)
EXPECTED_BOTTLENECKS = [
    (
        "Data Loading (CPU/Disk)",
        "Low & volatile GPU utilization",
        "Increase num_workers, use NVMe, pin_memory",
        "data_loading",
        ["increase_num_workers", "local_nvme", "pin_memory"],
    ),
    (
        "GPU Computation",
        "High GPU utilization, low throughput",
        "Mixed precision, kernel fusion, model pruning",
        "compute",
        ["mixed_precision", "torch_compile", "model_pruning"],
    ),
    (
        "GPU Memory",
        "Out-of-memory errors, small batch sizes",
        "Gradient checkpointing, VRAM upgrade",
        "memory",
        ["gradient_checkpointing", "vram_upgrade"],
    ),
    (
        "System RAM/CPU",
        "High system memory usage, CPU wait states",
        "Increase system RAM, optimize preprocessing threads",
        "host",
        ["increase_system_ram", "optimize_preprocessing_threads"],
    ),
]


def test_bottleneck_table(kd: KnowledgeDocuments) -> None:
    got = [
        (
            b.location,
            b.primary_symptom,
            b.key_fix,
            b.category,
            [t for a in b.key_fixes for t in a.techniques],
        )
        for b in kd.bottlenecks
    ]
    assert got == EXPECTED_BOTTLENECKS


def test_bottleneck_rows_are_the_table_rows(kd: KnowledgeDocuments) -> None:
    text = _doc(kd, "diagnose")
    for b in kd.bottlenecks:
        assert f"{b.location} {b.primary_symptom} {b.key_fix}" in text
        # The fix fragments are the cell, split at its commas.
        assert ", ".join(a.text for a in b.key_fixes) == b.key_fix


# ---------------------------------------------------------------------------------
# Priority framework
# ---------------------------------------------------------------------------------

# (state text, [(technique id, priority text)] in order 1, 2, 3)
EXPECTED_FRAMEWORK = [
    (
        "GPU utilization below 70%",
        [
            ("data_pipeline_optimization", "Data pipeline optimization"),
            ("batch_size_tuning", "Batch size tuning"),
            ("memory_efficient_models", "Memory-efficient models"),
        ],
    ),
    (
        "GPU utilization 70-85%",
        [
            ("mixed_precision", "Mixed-precision training"),
            ("torch_compile", "Model compilation"),
            ("storage_optimization", "Storage optimization"),
        ],
    ),
    (
        "GPU utilization above 85%",
        [
            ("gradient_checkpointing", "Gradient checkpointing"),
            ("quantization", "Quantization for inference"),
            ("network_tuning", "Network tuning"),
        ],
    ),
    (
        "Running out of VRAM",
        [
            ("quantization", "Quantization"),
            ("gradient_checkpointing", "Gradient checkpointing"),
            ("batch_size_reduction", "Batch size reduction"),
        ],
    ),
    (
        "High data loading latency",
        [
            ("async_data_loading", "Asynchronous workers"),
            ("data_format_conversion", "Data format conversion"),
            ("nvme_configuration", "NVMe configuration"),
        ],
    ),
    (
        "Poor multi-GPU scaling",
        [
            ("nccl_tuning", "NCCL tuning"),
            ("gradient_compression", "Gradient compression"),
            ("nvlink_placement", "NVLink verification"),
        ],
    ),
]


def test_priority_framework_all_cells_in_order(kd: KnowledgeDocuments) -> None:
    got = [(s.state, [(p.technique, p.text) for p in s.priorities]) for s in kd.priority_framework]
    assert got == EXPECTED_FRAMEWORK


def test_priority_framework_rows_are_the_table_rows(kd: KnowledgeDocuments) -> None:
    text = _doc(kd, "optimize")
    assert (
        "Current State Priority 1 (Highest Impact) Priority 2 Priority 3 "
        + " ".join(
            f"{s.state} " + " ".join(p.text for p in s.priorities) for s in kd.priority_framework
        )
    ) in text


def test_priorities_name_existing_techniques(kd: KnowledgeDocuments) -> None:
    ids = {t.id for t in kd.techniques}
    for state in kd.priority_framework:
        assert len(state.technique_ids) == 3
        for tid in state.technique_ids:
            assert tid in ids, (state.id, tid)


def test_utilization_states_have_their_bands(kd: KnowledgeDocuments) -> None:
    bands = {s.id: [(c.metric, c.op, c.value) for c in s.conditions] for s in kd.priority_framework}
    assert bands["gpu_util_below_70"] == [("gpu_utilization", "<", 70.0)]
    assert bands["gpu_util_70_85"] == [
        ("gpu_utilization", ">=", 70.0),
        ("gpu_utilization", "<=", 85.0),
    ]
    assert bands["gpu_util_above_85"] == [("gpu_utilization", ">", 85.0)]
    # Every utilization value falls in exactly one of the three bands.
    for u in (0.0, 69.9, 70.0, 77.0, 85.0, 85.1, 100.0):
        matching = [
            sid
            for sid in ("gpu_util_below_70", "gpu_util_70_85", "gpu_util_above_85")
            if all(c.holds(u) for c in kd.state(sid).conditions)
        ]
        assert len(matching) == 1, (u, matching)


# ---------------------------------------------------------------------------------
# Key metrics
# ---------------------------------------------------------------------------------

# id: (metric, tool, target, tells, bounds fields)
EXPECTED_METRICS: dict[str, tuple[str, str, str, str, dict[str, Any]]] = {
    "gpu_utilization": (
        "GPU utilization",
        "nvidia-smi, DCGM",
        "80-95% during training",
        "Whether GPU compute is saturated",
        {"kind": "range", "low": 80.0, "high": 95.0, "unit": "percent", "during": "training"},
    ),
    "gpu_memory_usage": (
        "GPU memory usage",
        "nvidia-smi, DCGM",
        "70-90% of capacity",
        "Headroom for batch size increases",
        {"kind": "range", "low": 70.0, "high": 90.0, "unit": "percent", "of": "capacity"},
    ),
    "data_loading_time": (
        "Data loading time",
        "PyTorch profiler",
        "Less than 5% of total step time",
        "Whether pipeline is keeping up",
        {"kind": "range", "low": None, "high": 5.0, "unit": "percent", "of": "step_time"},
    ),
    "training_step_time": (
        "Training step time",
        "Framework logs, W&B",
        "Consistent or decreasing",
        "Overall throughput trend",
        {"kind": "trend", "trend": "stable_or_decreasing", "low": None, "high": None},
    ),
    "gpu_temperature": (
        "GPU temperature",
        "nvidia-smi",
        "Below 83 degrees C",
        "Whether thermal throttling is active",
        {
            "kind": "range",
            "low": None,
            "high": 83.0,
            "unit": "celsius",
            "prefer": "gpu_slowdown_temperature",
        },
    ),
    "interconnect_bandwidth": (
        "PCIe/NVLink bandwidth",
        "nvidia-smi -q",
        "Near rated bandwidth",
        "Inter-device communication health",
        {"kind": "near", "of": "rated_bandwidth", "low": None, "high": None},
    ),
}


def test_all_six_metrics_in_table_order(kd: KnowledgeDocuments) -> None:
    assert [m.id for m in kd.metrics] == list(EXPECTED_METRICS)


@pytest.mark.parametrize("metric_id", list(EXPECTED_METRICS))
def test_metric_row_and_bounds(kd: KnowledgeDocuments, metric_id: str) -> None:
    metric, tool, target, tells, bounds = EXPECTED_METRICS[metric_id]
    m = kd.metric(metric_id)
    assert (m.metric, m.tool, m.target, m.tells) == (metric, tool, target, tells)
    assert m.tools == tuple(t.strip() for t in tool.split(","))
    for field, value in bounds.items():
        assert getattr(m.bounds, field) == value, field
    assert f"{metric} {tool} {target} {tells}" in _doc(kd, "optimize")


def test_metric_bounds_evaluate(kd: KnowledgeDocuments) -> None:
    util = kd.metric("gpu_utilization").bounds
    assert util.contains(80) and util.contains(95) and not util.contains(79.9)
    assert not util.contains(95.1)
    assert kd.metric("data_loading_time").bounds.contains(4.9) is True
    assert kd.metric("data_loading_time").bounds.contains(5.1) is False
    assert kd.metric("gpu_temperature").bounds.contains(84) is False
    assert kd.metric("training_step_time").bounds.contains(1.0) is None


# ---------------------------------------------------------------------------------
# Techniques
# ---------------------------------------------------------------------------------

def test_technique_ids_are_unique_and_every_reference_resolves(kd: KnowledgeDocuments) -> None:
    """Rules, the priority framework and the facts name techniques by id: each exists."""
    ids = [t.id for t in kd.techniques]
    assert len(ids) == len(set(ids))
    named = {t for rule in RULES.rules for t in rule.techniques}
    named |= {p.technique for s in kd.priority_framework for p in s.priorities}
    assert named, "nothing refers to a technique: the check would be empty"
    assert named - set(ids) == set()


#: Numbers the documents write as words ("halves", "double", "two to eight
#: times", "quadratic to linear" for the exponent of sequence length).
NUMBER_WORDS: dict[float, tuple[str, ...]] = {
    1: ("one", "single", "linear"),
    2: ("two", "double", "twice", "halves", "half", "quadratic"),
    3: ("three",), 4: ("four",), 8: ("eight",),
}


def _figures(value: float) -> set[str]:
    """How a number can be written in prose: 30, 0.5, .5, or a word."""
    text = f"{value:g}"
    return {text, text.removeprefix("0"), *NUMBER_WORDS.get(value, ())}


def test_every_claimed_figure_is_in_its_quote(kd: KnowledgeDocuments) -> None:
    """A technique's numbers come from its passage, not from memory.

    Each effect's ``low``/``high`` (and the ``before`` range of a change from one
    value to another) must be written in the verbatim quote it cites; the quotes
    themselves are checked against the documents above.
    """
    checked = 0
    for technique in kd.techniques:
        for effect in technique.effects:
            quote = effect.source.quote
            numbers = [effect.low, effect.high]
            if effect.before is not None:
                numbers += [effect.before.low, effect.before.high]
            for number in numbers:
                if number is None:
                    continue
                assert any(f in quote for f in _figures(number)), (
                    f"{technique.id}: {effect.quantity} {number:g} is not in {quote!r}"
                )
                checked += 1
    assert checked >= 30


def test_step_speed_claims_convert_to_the_documents_figures(kd: KnowledgeDocuments) -> None:
    """The figures gains are shown with: AMP's +30-50 % throughput, compile's -20-50 %."""
    facts = load_knowledge_base().facts
    amp = facts.techniques["mixed_precision"]
    assert (amp.speedup_low, amp.speedup_high) == pytest.approx((1.3, 1.5))
    compiled = facts.techniques["torch_compile"]
    assert (compiled.speedup_low, compiled.speedup_high) == pytest.approx((1.25, 2.0))
    checkpointing = facts.techniques["gradient_checkpointing"]
    assert checkpointing.speedup_high is not None and checkpointing.speedup_high < 1.0


# (technique, setting name, low, high, per, values, document)
EXPECTED_SETTINGS = [
    ("increase_num_workers", "num_workers", 2, 4, "cpu_core", (), "diagnose"),
    ("increase_num_workers", "num_workers", 2, 4, "gpu", (), "optimize"),
    ("prefetch_factor", "prefetch_factor", 2, 4, None, (), "optimize"),
    ("batch_size_tuning", "target_gpu_utilization", 85, 90, None, (), "optimize"),
    ("nvme_configuration", "queue_depth", 32, 128, "drive", (), "optimize"),
    ("nvme_configuration", "io_scheduler", None, None, None, ("none", "mq-deadline"), "optimize"),
    ("nvme_configuration", "aspm", None, None, None, ("disabled",), "optimize"),
    ("nccl_tuning", "NCCL_IB_DISABLE", None, None, None, ("1",), "optimize"),
    ("nccl_tuning", "NCCL_DEBUG", None, None, None, ("INFO",), "optimize"),
    ("nccl_tuning", "NCCL_SOCKET_IFNAME", None, None, None, ("<network interface>",), "optimize"),
    ("raid0", "drives", 4, 4, None, (), "optimize"),
    ("raid_redundancy", "level", None, None, None, ("RAID 1", "RAID 10"), "optimize"),
    ("gradient_compression", "method", None, None, None, ("Top-K", "Random-K"), "optimize"),
    ("quantization", "precision", None, None, None, ("INT8", "INT4"), "optimize"),
    ("quantization", "precision", None, None, None, ("INT8", "FP16"), "diagnose"),
    ("quantization", "method", None, None, None, ("GPTQ", "AWQ"), "optimize"),
    ("data_format_conversion", "format", None, None, None, ("LMDB", "WebDataset"), "optimize"),
    ("profiling", "steps", 100, 200, None, (), "optimize"),
    ("mixed_precision", "dtype", None, None, None, ("FP16", "BF16"), "diagnose"),
]


@pytest.mark.parametrize(
    "expected", EXPECTED_SETTINGS, ids=[f"{e[0]}-{e[1]}-{e[6]}" for e in EXPECTED_SETTINGS]
)
def test_recommended_setting(kd: KnowledgeDocuments, expected: tuple[Any, ...]) -> None:
    tid, name, low, high, per, values, document = expected
    got = [
        (s.name, s.low, s.high, s.per, s.values, s.source.document)
        for s in kd.technique(tid).settings
    ]
    assert (name, low, high, per, values, document) in got


def test_num_workers_disagreement_is_recorded_with_both_sources(
    kd: KnowledgeDocuments,
) -> None:
    settings = [s for s in kd.technique("increase_num_workers").settings if s.name == "num_workers"]
    by_doc = {s.source.document: s for s in settings}
    assert set(by_doc) == {"diagnose", "optimize"}
    assert "CPU cores" in by_doc["diagnose"].source.quote
    assert "number of GPUs" in by_doc["optimize"].source.quote


def test_technique_fields(kd: KnowledgeDocuments) -> None:
    ids = {t.id for t in kd.techniques}
    for t in kd.techniques:
        assert t.category in CATEGORIES, t.id
        assert t.applies_to and set(t.applies_to) <= {"training", "inference"}, t.id
        assert t.summary.strip() and t.how.strip(), t.id
        assert "\n" not in t.summary, t.id
        assert set(t.includes) <= ids, t.id
        if t.kind == "group":
            assert t.includes, t.id


def test_expected_categories_and_scope(kd: KnowledgeDocuments) -> None:
    expected = {
        "mixed_precision": ("compute", {"training", "inference"}),
        "gradient_checkpointing": ("memory", {"training"}),
        "quantization": ("memory", {"inference"}),
        "tensorrt": ("compute", {"inference"}),
        "increase_num_workers": ("data_loading", {"training"}),
        "async_checkpoint": ("io", {"training"}),
        "increase_system_ram": ("host", {"training", "inference"}),
        "dynamic_batching": ("compute", {"inference"}),
        "prewarm_gpu": ("compute", {"inference"}),
    }
    for tid, (category, scope) in expected.items():
        t = kd.technique(tid)
        assert (t.category, set(t.applies_to)) == (category, scope), tid


# The concrete changes shown to users must use current PyTorch spellings.
EXPECTED_SNIPPET_TEXT = {
    "mixed_precision": [
        'torch.autocast(device_type="cuda", dtype=torch.bfloat16)',
        'torch.amp.GradScaler("cuda")',
    ],
    "torch_compile": ["torch.compile(model)"],
    "gradient_checkpointing": ["checkpoint(block, x, use_reentrant=False)"],
    "async_checkpoint": ["import torch.distributed.checkpoint as dcp", "dcp.async_save("],
    "async_data_loading": [
        "num_workers=",
        "pin_memory=True",
        "persistent_workers=True",
        "prefetch_factor=4",
    ],
    "memory_summary": ["torch.cuda.memory_summary("],
    "flash_attention": ["scaled_dot_product_attention"],
}


@pytest.mark.parametrize("tid", list(EXPECTED_SNIPPET_TEXT))
def test_snippet_contains_the_change(kd: KnowledgeDocuments, tid: str) -> None:
    snippet = kd.technique(tid).snippet
    assert snippet is not None
    for needle in EXPECTED_SNIPPET_TEXT[tid]:
        assert needle in snippet, (tid, needle)


def test_python_snippets_parse_and_avoid_deprecated_amp(kd: KnowledgeDocuments) -> None:
    python = [t for t in kd.techniques if t.snippet_lang == "python"]
    assert len(python) >= 20
    for t in python:
        assert t.snippet is not None
        ast.parse(t.snippet, filename=t.id)
        assert "torch.cuda.amp" not in t.snippet, t.id


def _torch_names(snippet: str) -> set[str]:
    return set(re.findall(r"(?<![\w.])torch(?:\.[A-Za-z_]\w*)+", snippet))


def test_snippets_name_real_torch_apis(kd: KnowledgeDocuments) -> None:
    torch = pytest.importorskip("torch")
    checked = 0
    for t in kd.techniques:
        if t.snippet_lang != "python" or t.snippet is None:
            continue
        for dotted in _torch_names(t.snippet):
            parts = dotted.split(".")
            obj = torch
            for i, part in enumerate(parts[1:], start=1):
                if not hasattr(obj, part):
                    # A submodule that is not imported by ``import torch``.
                    obj = importlib.import_module(".".join(parts[: i + 1]))
                else:
                    obj = getattr(obj, part)
            checked += 1
    assert checked >= 10


def _is_torch(module: str) -> bool:
    return module == "torch" or module.startswith("torch.")


def test_snippet_torch_imports_resolve(kd: KnowledgeDocuments) -> None:
    pytest.importorskip("torch")
    resolved = 0
    for t in kd.techniques:
        if t.snippet_lang != "python" or t.snippet is None:
            continue
        for node in ast.walk(ast.parse(t.snippet)):
            if isinstance(node, ast.ImportFrom) and _is_torch(node.module or ""):
                module = importlib.import_module(node.module or "")
                for alias in node.names:
                    assert hasattr(module, alias.name), (t.id, node.module, alias.name)
                    resolved += 1
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if _is_torch(alias.name):
                        importlib.import_module(alias.name)
                        resolved += 1
    assert resolved >= 8


def _cpu_namespace() -> dict[str, Any]:
    """What the snippets assume exists in the user's training script, on the CPU."""
    torch = pytest.importorskip("torch")
    from torch.utils.data import DataLoader, TensorDataset

    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    blocks = [torch.nn.Linear(4, 4), torch.nn.Linear(4, 4)]
    return {
        "torch": torch,
        "DataLoader": DataLoader,
        "dataset": TensorDataset(torch.randn(16, 4), torch.randint(0, 2, (16,))),
        "batch_size": 4,
        "model": model,
        "optimizer": torch.optim.SGD(model.parameters(), lr=0.1),
        "loss_fn": torch.nn.CrossEntropyLoss(),
        "x": torch.randn(4, 4),
        "y": torch.randint(0, 2, (4,)),
        "self": type("Model", (), {"blocks": blocks})(),
        "loss": torch.tensor(1.0),
        "running_loss": torch.tensor(0.0),
        "step": 100,
        "ckpt_every": 50,
        "pending": None,
    }


# Snippets that can really run on a CPU-only machine (CUDA-only ones are excluded).
CPU_RUNNABLE = [
    "mixed_precision",
    "torch_compile",
    "gradient_checkpointing",
    "async_checkpoint",
    "weights_only_checkpoint",
    "incremental_checkpoint",
    "optimize_model_code",
    "persistent_workers",
    "prefetch_factor",
    "increase_num_workers",
    "optimize_preprocessing_threads",
    "batch_size_reduction",
]


@pytest.mark.filterwarnings("ignore")
@pytest.mark.parametrize("tid", CPU_RUNNABLE)
def test_snippet_runs_on_cpu(
    kd: KnowledgeDocuments, tid: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    namespace = _cpu_namespace()
    monkeypatch.chdir(tmp_path)
    (tmp_path / "checkpoints").mkdir()
    snippet = kd.technique(tid).snippet
    assert snippet is not None
    exec(compile(snippet, tid, "exec"), namespace)
    if tid == "async_checkpoint":
        namespace["pending"].result()
        assert (tmp_path / "checkpoints" / "step_100" / ".metadata").exists()
    if tid in ("weights_only_checkpoint", "incremental_checkpoint"):
        assert any((tmp_path / "checkpoints").iterdir())


def test_snippet_dataloader_arguments_exist(kd: KnowledgeDocuments) -> None:
    data = pytest.importorskip("torch.utils.data")
    allowed = set(inspect.signature(data.DataLoader).parameters)
    seen = 0
    for t in kd.techniques:
        if t.snippet_lang != "python" or t.snippet is None:
            continue
        for node in ast.walk(ast.parse(t.snippet)):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Name)
                and node.func.id == "DataLoader"
            ):
                names = {k.arg for k in node.keywords if k.arg}
                assert names <= allowed, (t.id, names - allowed)
                seen += 1
    assert seen >= 5


# ---------------------------------------------------------------------------------
# Principles
# ---------------------------------------------------------------------------------

EXPECTED_PRINCIPLE_QUOTES = {
    "low_util_means_upstream": "A GPU utilization below 70-80% during training strongly "
    "suggests the bottleneck lies upstream in the data pipeline.",
    "utilization_definition": "nvidia-smi shows utilization as the percentage of time the GPU "
    "had at least one active kernel.",
    "priority_one_then_measure": "Start with Priority 1 for your current state, measure the "
    "impact, then move to Priority 2.",
    "single_gpu_first": "Start by fully optimizing a single-GPU setup first, as scaling is "
    "rarely linear.",
    "reevaluate_after_changes": "Re-evaluate performance after any significant change",
    "dataloader_time_confirms": "(enumerate(DataLoader)), this confirms the diagnosis.",
    "stage_time_ratio": "analyzing the ratio of time spent in different stages of your "
    "workload pipeline",
    "cpu_matters": "A weak CPU or one with insufficient cores can create a severe bottleneck",
}


@pytest.mark.parametrize("pid", list(EXPECTED_PRINCIPLE_QUOTES))
def test_principle_present(kd: KnowledgeDocuments, pid: str) -> None:
    principle = next((p for p in kd.principles if p.id == pid), None)
    assert principle is not None, pid
    assert EXPECTED_PRINCIPLE_QUOTES[pid] in principle.source.quote


def test_low_util_principle_keeps_the_fuzzy_range(kd: KnowledgeDocuments) -> None:
    p = next(p for p in kd.principles if p.id == "low_util_means_upstream")
    assert [(t.value, t.value_high) for t in p.thresholds] == [(70.0, 80.0)]
    assert p.thresholds[0].holds(75, lenient=True) and not p.thresholds[0].holds(75)


def test_reevaluation_is_sourced_from_both_documents(kd: KnowledgeDocuments) -> None:
    p = next(p for p in kd.principles if p.id == "reevaluate_after_changes")
    assert {p.source.document, *(r.document for r in p.also_in)} == {"diagnose", "optimize"}


# ---------------------------------------------------------------------------------
# Citations
# ---------------------------------------------------------------------------------


def test_every_quote_is_verbatim_under_its_heading(kd: KnowledgeDocuments) -> None:
    refs = list(kd.source_refs())
    assert len(refs) > 150
    texts = {d.id: _doc(kd, d.id) for d in kd.documents}
    for where, ref in refs:
        assert normalize(ref.quote) in texts[ref.document], where
        assert ref.section in EXPECTED_HEADINGS[ref.document], where
        assert ref.section in sections_containing(ref.document, ref.quote, kd), where
    assert verify_sources(kd) == []


def test_verify_sources_catches_bad_quotes_and_sections(kd: KnowledgeDocuments) -> None:
    t = kd.techniques[0]
    invented = dataclasses.replace(
        t,
        source=dataclasses.replace(t.source, quote="Mixed precision makes everything 10x faster."),
    )
    misplaced = dataclasses.replace(
        kd.techniques[1], source=dataclasses.replace(kd.techniques[1].source, section="FAQ")
    )
    broken = dataclasses.replace(kd, techniques=(invented, misplaced, *kd.techniques[2:]))
    problems = verify_sources(broken)
    assert len(problems) == 2
    assert "not verbatim" in problems[0] and t.id in problems[0]
    assert "not 'FAQ'" in problems[1]


def test_find_passage(kd: KnowledgeDocuments) -> None:
    assert find_passage("Below 83 degrees C", kd) == ("optimize", "Key Metrics to Track")
    # Whitespace differences (the tables use tabs) do not matter.
    assert find_passage("GPU Memory   Out-of-memory errors,\nsmall batch sizes", kd) == (
        "diagnose",
        "How Can I Fix Low GPU Utilization in My AI Training?",
    )
    assert find_passage("scaling is rarely linear", kd) == (
        "diagnose",
        "Can I use multiple GPUs to speed up my AI studio workload?",
    )
    assert find_passage("this sentence is in neither document", kd) is None


def test_source_refs_convert_to_model_sources(kd: KnowledgeDocuments) -> None:
    ref = kd.technique("mixed_precision").source
    src = ref.as_source()
    assert (src.document, src.section, src.quote) == (ref.document, ref.section, ref.quote)


def test_loaded_data_is_immutable(kd: KnowledgeDocuments) -> None:
    with pytest.raises(dataclasses.FrozenInstanceError):
        kd.techniques[0].summary = "changed"
    assert isinstance(kd.techniques, tuple)
    assert load_knowledge_base().documents is kd  # the packaged file is parsed once


# ---------------------------------------------------------------------------------
# Loader errors carry file and line
# ---------------------------------------------------------------------------------


def _packaged_text() -> str:
    path = Path(kdoc.__file__).parents[1] / "data" / "documents.yaml"
    return path.read_text(encoding="utf-8")


def _mutated(tmp_path: Path, old: str, new: str, *, after: str = "") -> tuple[Path, int]:
    """Write the packaged YAML with the first ``old`` (after ``after``) replaced.

    Returns the file and the 1-based line number where the replacement starts.
    """
    text = _packaged_text()
    start = text.index(after) if after else 0
    at = text.index(old, start)
    path = tmp_path / "broken-documents.yaml"
    path.write_text(text[:at] + new + text[at + len(old) :], encoding="utf-8")
    return path, text.count("\n", 0, at) + 1


def _error(path: Path) -> KnowledgeError:
    with pytest.raises(KnowledgeError) as info:
        read_documents(path)
    return info.value


def test_packaged_copy_loads_from_an_explicit_path(tmp_path: Path) -> None:
    path, _ = _mutated(tmp_path, "version: 1", "version: 1")
    packaged = load_knowledge_base().documents
    assert dataclasses.replace(read_documents(path), path=packaged.path) == packaged


def test_error_unknown_category(tmp_path: Path) -> None:
    path, line = _mutated(tmp_path, "category: data_loading", "category: gpu_starved")
    err = _error(path)
    assert path.name in str(err) and f":{line}:" in str(err)
    assert "unknown category 'gpu_starved'" in str(err)
    assert err.line == line


def test_error_priority_names_unknown_technique(tmp_path: Path) -> None:
    path, line = _mutated(
        tmp_path,
        "{technique: batch_size_tuning,",
        "{technique: batch_size_tunning,",
        after="priority_framework:",
    )
    err = _error(path)
    assert f"{path.name}:{line}:" in str(err)
    assert "unknown technique 'batch_size_tunning'" in str(err)


def test_error_action_names_unknown_technique(tmp_path: Path) -> None:
    path, line = _mutated(tmp_path, "techniques: [local_nvme]}", "techniques: [nvme_disk]}")
    err = _error(path)
    assert f"{path.name}:{line}:" in str(err) and "nvme_disk" in str(err)


def test_error_missing_key_points_at_the_item(tmp_path: Path) -> None:
    text = _packaged_text()
    item_line = text.count("\n", 0, text.index("  - id: low_volatile_gpu_util")) + 1
    path, _ = _mutated(
        tmp_path, '    culprit: "Slow data loading or preprocessing on the CPU."\n', ""
    )
    err = _error(path)
    assert f"{path.name}:{item_line}:" in str(err)
    assert "missing key 'culprit'" in str(err)


def test_error_malformed_number(tmp_path: Path) -> None:
    path, line = _mutated(tmp_path, 'op: "<", value: 70,', 'op: "<", value: "70%",')
    err = _error(path)
    assert f"{path.name}:{line}:" in str(err)
    assert "malformed number '70%'" in str(err)


def test_error_malformed_effect_number(tmp_path: Path) -> None:
    path, line = _mutated(tmp_path, "low: 30\n", "low: thirty\n", after="id: mixed_precision")
    err = _error(path)
    assert f"{path.name}:{line}:" in str(err) and "malformed number 'thirty'" in str(err)


def test_error_low_above_high(tmp_path: Path) -> None:
    path, line = _mutated(tmp_path, "low: 30\n", "low: 60\n", after="id: mixed_precision")
    err = _error(path)
    assert f"{path.name}:{line}:" in str(err) and "low 60 > high 50" in str(err)


def test_error_unknown_key(tmp_path: Path) -> None:
    path, line = _mutated(tmp_path, "    culprit:", "    culprt: typo\n    culprit:")
    err = _error(path)
    assert f"{path.name}:{line}:" in str(err) and "unknown key 'culprt'" in str(err)


def test_error_duplicate_key(tmp_path: Path) -> None:
    path, line = _mutated(
        tmp_path, "    category: compute\n", "    category: compute\n    category: memory\n"
    )
    err = _error(path)
    assert f"{path.name}:{line + 1}:" in str(err) and "duplicate key 'category'" in str(err)


def test_error_duplicate_technique_id(tmp_path: Path) -> None:
    path, line = _mutated(tmp_path, "  - id: tensorrt\n", "  - id: torch_compile\n")
    err = _error(path)
    assert f"{path.name}:{line}:" in str(err) and "duplicate id 'torch_compile'" in str(err)


def test_error_unknown_source_document(tmp_path: Path) -> None:
    path, line = _mutated(tmp_path, "document: optimize", "document: blogpost", after="metrics:")
    err = _error(path)
    assert f"{path.name}:{line}:" in str(err) and "unknown document 'blogpost'" in str(err)


def test_error_threshold_on_unknown_metric(tmp_path: Path) -> None:
    path, line = _mutated(tmp_path, "{metric: gpu_utilization,", "{metric: gpu_util,")
    err = _error(path)
    assert f"{path.name}:{line}:" in str(err) and "unknown metric 'gpu_util'" in str(err)


def test_error_yaml_syntax(tmp_path: Path) -> None:
    path, line = _mutated(tmp_path, "symptoms:\n", "symptoms:\n  - [unclosed\n")
    err = _error(path)
    assert path.name in str(err)
    assert err.line >= line + 1


def test_python_tags_are_rejected(tmp_path: Path) -> None:
    marker = tmp_path / "executed"
    payload = f'    extra: !!python/object/apply:os.system ["touch {marker}"]\n'
    path, line = _mutated(tmp_path, "    culprit:", payload + "    culprit:")
    err = _error(path)
    assert f"{path.name}:{line}:" in str(err)
    assert "python/object/apply:os.system" in str(err)
    assert not marker.exists()


def test_unreadable_file(tmp_path: Path) -> None:
    missing = tmp_path / "nothing-here.yaml"
    err = _error(missing)
    assert "nothing-here.yaml" in str(err)
