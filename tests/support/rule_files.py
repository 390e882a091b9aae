"""Rule files for the hostile-input tests: a valid rule to vary, and YAML bombs."""

from __future__ import annotations

from pathlib import Path

RULE_HEAD = (
    "rules:\n"
    "  - name: hostile\n"
    "    severity: low\n"
    "    category: data_loading\n"
)


def write_rule_file(tmp_path: Path, content: str | bytes) -> Path:
    path = tmp_path / "my.yaml"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content, encoding="utf-8")
    return path


def rule_text(**fields: str) -> str:
    """A valid rule with ``fields`` replaced, as YAML text."""
    base = {
        "expr": "phase_data_wait > 0.5",
        "title": "t",
        "source": "{document: diagnose}",
        **fields,
    }
    return RULE_HEAD + "".join(f"    {key}: {value}\n" for key, value in base.items())


def alias_bomb(levels: int = 9, width: int = 10) -> str:
    """Billion laughs inside ``source:``: each level lists the previous one ``width`` times."""
    lines = [f"        - &l0 [{', '.join(['lol'] * width)}]"]
    lines += [
        f"        - &l{n} [{', '.join([f'*l{n - 1}'] * width)}]" for n in range(1, levels)
    ]
    section = "      document: diagnose\n      section:\n"
    return rule_text(source="") + section + "\n".join(lines) + "\n"


#: One rule with three independent mistakes, each on its own line.
THREE_MISTAKES = (
    "rules:\n"
    "  - name: mine\n"
    "    expr: phase_data_wiat > 0.5 and enough_samples\n"  # line 3: unknown metric
    "    severity: urgent\n"  # line 4: unknown severity
    "    category: data_loading\n"
    "    title: t\n"
    "    for: soon\n"  # line 7: not a duration
    "    source: {document: diagnose}\n"
)


#: A team's own bands and straggler cut, and a rule of its own: every reader of a
#: run judges with them once they are given with ``--rules`` (the panels' colours,
#: the key-metrics table, a replay's straggler flag, ``aitop diff``'s advice).
MOVED_TARGETS = """\
targets:
  - {metric: gpu_util, low: 10.0, high: 100.0, text: "10-100 % (this team's band)"}
  - {metric: phase_data_wait, high: 0.5, text: "< 50 % of step time"}
conditions:
  holds_back_job: straggler_score < 0.3
rules:
  - name: slow_logging
    expr: phase_other >= 0.2 and enough_samples
    severity: medium
    category: host
    title: "Logging takes {phase_other:.0%} of the loop"
    techniques: [mixed_precision]
    source: {document: optimize, section: "Optimization Priority Framework"}
"""
