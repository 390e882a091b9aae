"""``deploy/kubernetes``, checked offline against the schemas a cluster would use.

* The core objects (Namespace, ServiceAccount, DaemonSet, Service) against
  Kubernetes' own OpenAPI schemas as JSON Schema, strict (an unknown field is an
  error), from the ``kubernetes-validate`` package, for each pinned version.
* The Prometheus Operator's objects (ServiceMonitor, PrometheusRule) against
  its CRDs' schemas (v0.80.1) as the pydantic models
  ``cloudcoil-models-prometheus-operator`` generates from them: types, enums and
  patterns checked by validation, unknown fields by comparing the object with
  the model's dump of it (pydantic drops what the schema does not name).
* The PrometheusRule is exactly ``aitop rules --format prometheus-operator``'s
  output, and ``promtool check rules`` accepts its ``spec``.
* The pieces fit: the kustomization names every manifest, the Service selects
  the DaemonSet's pods and the ServiceMonitor the Service, the port is the one
  ``--serve`` binds, the probes read /metrics, AITOP_CGROUP_ROOT is where the
  node's cgroup tree is mounted, and the agent holds only the capabilities the
  README's security notes name.
"""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from cloudcoil.models.prometheus_operator import v1 as operator
from pydantic import ValidationError
from support.jobs import run_aitop
from support.prometheus import tool

ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = ROOT / "deploy" / "kubernetes"
#: The Kubernetes versions the core objects are validated against: the oldest
#: the manifests promise (their fields are all older) and the newest the pinned
#: kubernetes-validate 1.37.0 ships.
KUBERNETES_VERSIONS = ("1.30.0", "1.37.0")
#: The capabilities the agent holds (README, "Security"): nothing else.
CAPABILITIES = ["SYS_PTRACE", "DAC_READ_SEARCH"]
OPERATOR_MODELS = {"ServiceMonitor": operator.ServiceMonitor,
                   "PrometheusRule": operator.PrometheusRule}


def documents() -> dict[str, dict[str, Any]]:
    """Every object the kustomization lists, by kind."""
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    out: dict[str, dict[str, Any]] = {}
    for name in kustomization["resources"]:
        for doc in yaml.safe_load_all((MANIFESTS / name).read_text()):
            assert doc["kind"] not in out, f"two {doc['kind']} objects"
            out[doc["kind"]] = doc
    return out


def dropped(given: Any, kept: Any, at: str = "") -> list[str]:
    """Where ``given`` has a key that ``kept`` (the model's dump of it) lost."""
    out: list[str] = []
    if isinstance(given, dict) and isinstance(kept, dict):
        for key, value in given.items():
            where = f"{at}.{key}"
            out += [where] if key not in kept else dropped(value, kept[key], where)
    elif isinstance(given, list) and isinstance(kept, list):
        for i, (g, k) in enumerate(zip(given, kept, strict=False)):
            out += dropped(g, k, f"{at}[{i}]")
    return out


def check_operator_object(doc: dict[str, Any]) -> None:
    """Valid under the CRD's model, with no field the CRD does not name."""
    model = OPERATOR_MODELS[doc["kind"]].model_validate(doc)
    kept = model.model_dump(by_alias=True, exclude_unset=True, mode="json")
    unknown = dropped(doc, kept)
    assert not unknown, f"{doc['kind']}: fields the CRD does not have: {unknown}"


def test_the_kustomization_lists_every_manifest() -> None:
    kustomization = yaml.safe_load((MANIFESTS / "kustomization.yaml").read_text())
    files = {p.name for p in MANIFESTS.glob("*.yaml")} - {"kustomization.yaml"}
    assert sorted(kustomization["resources"]) == sorted(files)
    assert set(documents()) == {"Namespace", "ServiceAccount", "DaemonSet", "Service",
                                "ServiceMonitor", "PrometheusRule"}
    assert kustomization["namespace"] == documents()["Namespace"]["metadata"]["name"]
    image = documents()["DaemonSet"]["spec"]["template"]["spec"]["containers"][0]["image"]
    assert [i["name"] for i in kustomization["images"]] == [image.split(":")[0]]


@pytest.mark.parametrize("version", KUBERNETES_VERSIONS)
def test_core_objects_pass_kubernetes_own_schemas(version: str) -> None:
    core = {k: d for k, d in documents().items() if k not in OPERATOR_MODELS}
    for kind, doc in core.items():
        used = kubernetes_validate.validate(doc, version, strict=True)
        assert version.startswith(used), (kind, used)
    print(f"{sorted(core)} valid against Kubernetes {version} "
          f"(kubernetes-validate {kubernetes_validate.__version__}, strict)")
    # The check has teeth: a misspelt field and a wrong type are refused.
    typo = copy.deepcopy(core["DaemonSet"])
    typo["spec"]["template"]["spec"]["hostPid"] = True
    wrong = copy.deepcopy(core["Service"])
    wrong["spec"]["ports"][0]["port"] = "9400"
    for bad in (typo, wrong):
        with pytest.raises(kubernetes_validate.ValidationError):
            kubernetes_validate.validate(bad, version, strict=True)


def test_operator_objects_pass_the_prometheus_operator_crds() -> None:
    docs = documents()
    for kind in OPERATOR_MODELS:
        check_operator_object(docs[kind])
    monitor = docs["ServiceMonitor"]
    typo = copy.deepcopy(monitor)
    typo["spec"]["endpoints"][0]["intervall"] = "5s"
    with pytest.raises(AssertionError, match="intervall"):
        check_operator_object(typo)
    bad_interval = copy.deepcopy(monitor)
    bad_interval["spec"]["endpoints"][0]["interval"] = "5 seconds"
    with pytest.raises(ValidationError):
        check_operator_object(bad_interval)


def test_the_prometheusrule_is_the_generated_one_and_promtool_accepts_it(
        tmp_path: Path) -> None:
    made = run_aitop("rules", "--format", "prometheus-operator", timeout=60)
    assert made.returncode == 0, made.stderr
    committed = (MANIFESTS / "prometheusrule.yaml").read_text()
    assert made.stdout == committed, (
        "deploy/kubernetes/prometheusrule.yaml drifted from the knowledge base: run "
        "aitop rules --format prometheus-operator -o deploy/kubernetes/prometheusrule.yaml")
    spec = tmp_path / "rules.yml"
    spec.write_text(yaml.safe_dump(yaml.safe_load(committed)["spec"]))
    checked = subprocess.run([tool("promtool"), "check", "rules", str(spec)],
                             capture_output=True, text=True, timeout=120)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    version = subprocess.run([tool("promtool"), "--version"], capture_output=True,
                             text=True, timeout=30).stdout.splitlines()[0]
    print(f"{version}: {checked.stdout.strip()}")


def test_the_pieces_fit() -> None:
    docs = documents()
    pod = docs["DaemonSet"]["spec"]["template"]
    labels = pod["metadata"]["labels"]
    assert docs["DaemonSet"]["spec"]["selector"]["matchLabels"].items() <= labels.items()
    service = docs["Service"]
    assert service["spec"]["selector"].items() <= labels.items()
    monitor = docs["ServiceMonitor"]["spec"]
    assert monitor["selector"]["matchLabels"].items() <= service["metadata"]["labels"].items()
    [port] = service["spec"]["ports"]
    assert [e["port"] for e in monitor["endpoints"]] == [port["name"]] == ["metrics"]
    spec = pod["spec"]
    [container] = spec["containers"]
    assert container["command"] == ["aitop", "--serve", "0.0.0.0:9400"]
    assert [(p["name"], p["containerPort"]) for p in container["ports"]] == [
        (port["targetPort"], port["port"])]
    for probe in ("readinessProbe", "livenessProbe"):
        assert container[probe]["httpGet"] == {"path": "/metrics", "port": "metrics"}
    # The node's process table and cgroup tree, read-only, and aitop told where.
    assert spec["hostPID"] is True and not spec.get("hostNetwork")
    env = {e["name"]: e for e in container["env"]}
    mounts = {m["name"]: m for m in container["volumeMounts"]}
    volumes = {v["name"]: v for v in spec["volumes"]}
    cgroup = next(n for n, v in volumes.items() if v.get("hostPath", {}).get("path")
                  == "/sys/fs/cgroup")
    assert mounts[cgroup]["readOnly"] is True
    assert env["AITOP_CGROUP_ROOT"]["value"] == mounts[cgroup]["mountPath"]
    assert env["AITOP_NODE_NAME"]["valueFrom"] == {"fieldRef": {"fieldPath": "spec.nodeName"}}
    assert all(m.get("readOnly") for n, m in mounts.items() if "hostPath" in volumes[n])
    # Root with two capabilities and nothing else; no token for an API it never calls.
    security = container["securityContext"]
    assert security["capabilities"] == {"drop": ["ALL"], "add": CAPABILITIES}
    assert security["privileged"] is False and security["allowPrivilegeEscalation"] is False
    assert security["readOnlyRootFilesystem"] is True
    assert spec["automountServiceAccountToken"] is False
    assert "resources" in container and set(container["resources"]) == {"requests", "limits"}
