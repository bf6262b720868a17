"""The deployment files describe what the services need."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
K8S = ROOT / "docker" / "k8s"


def documents(name: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((K8S / name).read_text()) if d]


def test_kustomization_lists_every_manifest() -> None:
    listed = yaml.safe_load((K8S / "kustomization.yaml").read_text())["resources"]
    on_disk = sorted(p.name for p in K8S.glob("*.yaml") if p.name != "kustomization.yaml")
    assert sorted(listed) == on_disk


def test_deployments_probe_grpc_health_on_the_service_port_as_non_root() -> None:
    for name, port in (("state.yaml", 50051), ("recall.yaml", 50052)):
        deployment = next(d for d in documents(name) if d["kind"] == "Deployment")
        spec = deployment["spec"]["template"]["spec"]
        container = spec["containers"][0]
        assert container["readinessProbe"]["grpc"] == {"port": port}
        assert container["livenessProbe"]["grpc"] == {"port": port}
        assert set(container["resources"]) == {"requests", "limits"}
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert deployment["spec"]["replicas"] >= 2


def test_each_deployment_has_a_disruption_budget() -> None:
    selectors = {
        d["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"]
        for d in documents("pdb.yaml")
    }
    assert selectors == {"cairn-state", "cairn-recall"}


def test_compose_builds_both_services_from_their_dockerfiles() -> None:
    compose = yaml.safe_load((ROOT / "docker" / "compose.yaml").read_text())
    services = compose["services"]
    assert set(services) == {"postgres", "qdrant", "state", "recall"}
    for name in ("state", "recall"):
        dockerfile = ROOT / services[name]["build"]["dockerfile"]
        assert dockerfile.exists()
        text = dockerfile.read_text()
        assert text.count("FROM ") == 2
        assert "USER 10001:10001" in text
        assert "HEALTHCHECK" in text
    assert services["state"]["environment"]["CAIRN_RECALL_ADDR"] == "recall:50052"
