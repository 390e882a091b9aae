"""``aitop rules --format prometheus``: checked by the real promtool.

* the packaged rules (and a ``--rules`` file) become a file ``promtool check
  rules`` accepts, with ``for``, ``keep_firing_for``, severity/category labels
  and title/actions/source annotations;
* a rule without a PromQL form is listed with its reason (stderr and the file);
* ``--format prometheus-operator`` wraps the same groups as a ``PrometheusRule``;
* the translation means what aitop means: ``promtool test rules`` evaluates
  every translated rule on many metric assignments near the rules' thresholds
  (some metrics unknown) and must fire exactly where aitop's own evaluator
  says the rule fires (a symptom silenced while a culprit that explains it
  fires, as aitop folds it into the culprit; a steady-state finding silenced
  while a job state fires, as aitop's verdict is then the state alone).

The alerts on live demo jobs, through a running Prometheus, are in
``test_exporter.py``.
"""

from __future__ import annotations

import ast
import random
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from aitop.engine.prometheus.alerts import alert_name, duration
from aitop.engine.prometheus.names import base_value, exported_metrics
from aitop.knowledge.base.rules import Rule
from aitop.knowledge.reading.loader import load_knowledge_base
from support.jobs import run_aitop
from support.prometheus import tool

#: Scenarios (instances) in the equivalence test; each sets every metric the rules read.
SCENARIOS = 60


def generate(tmp_path: Path, *extra: str) -> tuple[Path, subprocess.CompletedProcess[str]]:
    out = tmp_path / "aitop-rules.yml"
    result = run_aitop("rules", "--format", "prometheus", "-o", str(out), *extra, timeout=60)
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    return out, result


def promtool(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([tool("promtool"), *args], capture_output=True, text=True, timeout=120)


def test_packaged_rules_pass_promtool_check(tmp_path: Path) -> None:
    path, _result = generate(tmp_path)
    checked = promtool("check", "rules", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    doc = yaml.safe_load(path.read_text())
    alerts = {a["alert"]: a for a in doc["groups"][0]["rules"]}
    rules = load_knowledge_base().rules.rules
    assert set(alerts) == {alert_name(r.id) for r in rules}, "every packaged rule translates"
    for rule in rules:
        alert = alerts[alert_name(rule.id)]
        assert alert["labels"] == {"severity": rule.severity, "category": rule.category,
                                   "rule": rule.id}
        assert alert.get("for") == (duration(rule.for_s) if rule.for_s else None)
        assert alert.get("keep_firing_for") == (
            duration(rule.keep_firing_for_s) if rule.keep_firing_for_s else None
        )
        notes = alert["annotations"]
        assert notes["title"] and notes["source"].startswith(rule.source["document"])
        assert ("actions" in notes) == bool(rule.actions)
        # Every metric the condition reads is read from its exported series.
        for name in rule.condition.names:
            assert exported_metrics()[name].selector() in alert["expr"], (name, alert["expr"])
    print(f"{len(alerts)} rules translated; promtool: {checked.stdout.strip()}")


def test_rules_file_is_included_and_untranslatable_rules_are_listed(tmp_path: Path) -> None:
    mine = tmp_path / "mine.yaml"
    mine.write_text(yaml.safe_dump({"rules": [
        {"name": "odd_steps", "expr": "steps_per_s % 2 > 1", "severity": "low",
         "category": "host", "title": "odd", "source": {"document": "team-wiki"}},
        {"name": "truth_as_number", "expr": "(num_workers > 1) == (has_gpu > 0)",
         "severity": "low", "category": "host", "title": "t", "source": {"document": "w"}},
        {"name": "slow_logging", "expr": "phase_other >= 0.2 and steps_per_s < 5",
         "for": "10s", "keep_firing_for": "30s", "severity": "medium", "category": "host",
         "title": "Logging takes {phase_other:.0%} of the loop", "actions": ["Log less"],
         "source": {"document": "team-wiki", "section": "Logging"}},
    ]}))
    path, result = generate(tmp_path, "--rules", str(mine))
    text = path.read_text()
    for rule in ("odd_steps", "truth_as_number"):
        assert f"rule {rule} ({mine}:" in result.stderr, result.stderr
        assert f"#   {rule} ({mine}:" in text
    assert "Not translated (2)" in text
    doc = yaml.safe_load(text)
    alerts = {a["alert"]: a for a in doc["groups"][0]["rules"]}
    assert "AitopOddSteps" not in alerts
    slow = alerts["AitopSlowLogging"]
    # A rule of the steady state, silent while a job state fires (as in aitop's verdict).
    states = "|".join(sorted(r.id for r in load_knowledge_base().rules.rules if r.job_state))
    assert slow["expr"] == ('(max without (phase) (aitop_phase_ratio{phase="other"}) >= 0.2 '
                            "and aitop_steps_per_second < 5) unless ignoring (alertname, "
                            "alertstate, severity, category, rule) "
                            f'ALERTS{{alertstate="firing",rule=~"{states}"}}')
    assert "warming_up_compiling" in states
    assert (slow["for"], slow["keep_firing_for"]) == ("10s", "30s")
    assert slow["annotations"]["source"] == "team-wiki, \u00a7 Logging"
    checked = promtool("check", "rules", str(path))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_prometheus_operator_format_wraps_the_same_groups(tmp_path: Path) -> None:
    """``--format prometheus-operator``: one ``PrometheusRule`` object whose ``spec``
    holds exactly the groups of the plain rules file, and promtool accepts that spec."""
    plain, _ = generate(tmp_path)
    wrapped = tmp_path / "prometheusrule.yaml"
    result = run_aitop("rules", "--format", "prometheus-operator", "-o", str(wrapped),
                       timeout=60)
    assert result.returncode == 0 and "Traceback" not in result.stderr, result.stderr
    text = wrapped.read_text()
    assert text.startswith("# Prometheus alerting rules generated by "
                           "`aitop rules --format prometheus-operator`")
    rule = yaml.safe_load(text)
    assert (rule["apiVersion"], rule["kind"]) == ("monitoring.coreos.com/v1", "PrometheusRule")
    assert rule["metadata"]["name"] == "aitop"
    assert set(rule) == {"apiVersion", "kind", "metadata", "spec"}
    assert rule["spec"] == yaml.safe_load(plain.read_text()), "the same groups, wrapped"
    spec = tmp_path / "spec.yml"
    spec.write_text(yaml.safe_dump(rule["spec"]))
    checked = promtool("check", "rules", str(spec))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    unknown = run_aitop("rules", "--format", "operator", timeout=60)
    assert unknown.returncode == 2 and "prometheus-operator" in unknown.stderr


def test_bad_rules_file_is_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({"rules": [
        {"name": "x", "expr": "no_such_metric > 1", "severity": "low", "category": "host",
         "title": "t", "source": {"document": "w"}},
    ]}))
    result = run_aitop("rules", "--format", "prometheus", "--rules", str(bad), timeout=60)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1
    assert "no_such_metric" in result.stderr


# ---------------------------------------------------------------- equivalence


def thresholds(rules: list[Rule]) -> dict[str, set[float]]:
    """Every number each metric is compared with in the rules (where to probe)."""
    out: dict[str, set[float]] = {}
    for rule in rules:
        for node in ast.walk(ast.parse(rule.condition.expr, mode="eval")):
            if isinstance(node, ast.Compare):
                sides = [node.left, *node.comparators]
                names = [s.id for s in sides if isinstance(s, ast.Name)]
                numbers = [s.value for s in sides if isinstance(s, ast.Constant)
                           and isinstance(s.value, (int, float))]
                for name in names:
                    out.setdefault(name, set()).update(float(n) for n in numbers)
        for name in rule.condition.names:
            out.setdefault(name, set())
    return out


def assignment(rng: random.Random, probes: dict[str, set[float]]) -> dict[str, float | None]:
    """A value for every metric: at, just below or above a threshold, or unknown."""
    values: dict[str, float | None] = {}
    for name, points in probes.items():
        if rng.random() < 0.12:
            values[name] = None
            continue
        base = rng.choice(sorted(points)) if points else rng.choice([1.0, 2.0, 4.0, 8.0])
        step = max(abs(base) * 0.1, 0.01)
        values[name] = round(rng.choice([base, base - step, base + step, 0.0]), 4)
    return values


def aitop_fires(rules: list[Rule], values: dict[str, float | None]) -> set[str]:
    """What aitop lists as firing, all ``for:`` elapsed: condition true and not
    explained by a culprit whose condition is true too; while a job state fires,
    the states alone (knowledge/judging/diagnosis.py)."""
    true = {r.id for r in rules if r.condition.evaluate(values) is True}
    explained = {s for r in rules if r.id in true for s in r.explains if s in true}
    listed = true - explained
    states = {r.id for r in rules if r.job_state} & listed
    return states or listed


def series_lines(instance: str, values: dict[str, float | None]) -> list[dict[str, str]]:
    exported = exported_metrics()
    out = []
    for name, value in values.items():
        if value is None:
            continue
        spec = exported[name]
        labels = {**dict(spec.labels), "instance": instance, "job": "aitop"}
        selector = ",".join(f'{k}="{v}"' for k, v in labels.items())
        out.append({"series": f"{spec.name}{{{selector}}}",
                    "values": f"{base_value(value, spec.scale)!r}+0x180"})
    out.append({"series": f'aitop_up{{instance="{instance}",job="aitop"}}', "values": "1+0x180"})
    return out


def test_translation_fires_where_aitop_fires(tmp_path: Path) -> None:
    """promtool evaluates the generated rules on many assignments; aitop's evaluator
    gives the expected alerts. Annotations are checked by `check rules` and the
    live server; here only which alerts fire matters, so they are left out."""
    path, _ = generate(tmp_path)
    doc = yaml.safe_load(path.read_text())
    for alert in doc["groups"][0]["rules"]:
        alert.pop("annotations", None)
    bare = tmp_path / "bare-rules.yml"
    bare.write_text(yaml.safe_dump(doc, sort_keys=False))
    rules = list(load_knowledge_base().rules.rules)
    probes = thresholds(rules)
    rng = random.Random(20240611)
    series: list[dict[str, str]] = []
    expected: dict[str, list[dict[str, Any]]] = {alert_name(r.id): [] for r in rules}
    fired_total = gave_way = 0
    states = {r.id for r in rules if r.job_state}
    for i in range(SCENARIOS):
        instance = f"scenario-{i}"
        values = assignment(rng, probes)
        true = {r.id for r in rules if r.condition.evaluate(values) is True}
        gave_way += bool(true & states and true - states)
        series += series_lines(instance, values)
        for rule_id in sorted(aitop_fires(rules, values)):
            rule = next(r for r in rules if r.id == rule_id)
            expected[alert_name(rule_id)].append({"exp_labels": {
                "severity": rule.severity, "category": rule.category, "rule": rule.id,
                "instance": instance, "job": "aitop",
            }})
            fired_total += 1
    tests = {
        "rule_files": [str(bare)],
        "evaluation_interval": "1s",
        "tests": [{
            "interval": "1s",
            "input_series": series,
            "alert_rule_test": [
                {"eval_time": "150s", "alertname": name, "exp_alerts": alerts}
                for name, alerts in expected.items()
            ],
        }],
    }
    test_file = tmp_path / "equivalence-test.yml"
    test_file.write_text(yaml.safe_dump(tests, sort_keys=False))
    result = promtool("test", "rules", str(test_file))
    print(f"{SCENARIOS} scenarios, {fired_total} expected firings over {len(rules)} rules, "
          f"{gave_way} scenarios with a job state and a steady-state rule true")
    assert fired_total >= SCENARIOS // 2, "the scenarios should make rules fire"
    # The give-way is exercised: some scenario holds a state and a rule it silences.
    assert gave_way >= 3, gave_way
    assert result.returncode == 0, (result.stdout + result.stderr)[-6000:]


@pytest.mark.parametrize("expr", ["phase_data_wait > 0.3", "not (phase_data_wait > 0.3)",
                                  "num_workers == 0 or phase_data_wait >= 0.1"])
def test_unknown_metrics_do_not_fire(expr: str, tmp_path: Path) -> None:
    """A metric aitop cannot know (no series) makes the rule wait, in PromQL too."""
    mine = tmp_path / "unknown.yaml"
    mine.write_text(yaml.safe_dump({"rules": [
        {"name": "probe_rule", "expr": expr, "severity": "low", "category": "host",
         "title": "t", "source": {"document": "w"}},
    ]}))
    path, _ = generate(tmp_path, "--rules", str(mine))
    doc = yaml.safe_load(path.read_text())
    doc["groups"][0]["rules"] = [a for a in doc["groups"][0]["rules"]
                                 if a["alert"] == "AitopProbeRule"]
    bare = tmp_path / "one.yml"
    bare.write_text(yaml.safe_dump(doc))
    tests = {"rule_files": [str(bare)], "evaluation_interval": "1s", "tests": [{
        "interval": "1s",
        # aitop_up only: the job is attached but none of the rule's metrics is known.
        "input_series": [{"series": 'aitop_up{instance="a",job="aitop"}', "values": "1+0x60"}],
        "alert_rule_test": [{"eval_time": "30s", "alertname": "AitopProbeRule",
                             "exp_alerts": []}],
    }]}
    test_file = tmp_path / "unknown-test.yml"
    test_file.write_text(yaml.safe_dump(tests))
    result = promtool("test", "rules", str(test_file))
    assert result.returncode == 0, result.stdout + result.stderr
