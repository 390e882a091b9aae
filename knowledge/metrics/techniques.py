"""Techniques the job uses, from its stacks and its own files."""

from __future__ import annotations

from aitop.probes.session import Session

from .units import Values, flag


def technique_metrics(session: Session, now: float, window_s: float) -> Values:
    """Techniques seen in the job's stacks (compile, AMP, activation checkpointing,
    the trainers; unknown without stacks), and whether its source asks for AMP."""
    windows = session.stacks.window(now - window_s, now)
    seen = {t for w in windows for t in w.techniques_seen}

    def in_stacks(technique: str) -> float | None:
        return flag(technique in seen) if windows else None

    # The job's own files, where autocast (entered in microseconds) rarely
    # shows in a stack: 0 also when nothing could be read (amp_source_read says).
    env = session.environment
    in_source = env.mixed_precision_in_source if env is not None else None
    return {
        "uses_compile": in_stacks("torch_compile"),
        "uses_amp": in_stacks("mixed_precision"),
        "amp_in_source": 1.0 if in_source else 0.0,
        "amp_source_read": 0.0 if in_source is None else 1.0,
        "uses_grad_checkpointing": in_stacks("gradient_checkpointing"),
        "uses_lightning": in_stacks("lightning"),
        "uses_hf_trainer": in_stacks("hf_trainer"),
        "uses_accelerate": in_stacks("accelerate"),
    }
