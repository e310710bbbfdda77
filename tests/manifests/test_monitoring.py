"""The monitoring overlay: monitors that select what the base deploys, alerts that say what they
are about and link their runbook, a dashboard the Grafana sidecar picks up, and alert rules
proven with promtool's own rule tests."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from tests import ROOT
from tests.manifests.monitoring_queries import (
    alerts,
    dashboard,
    dashboard_queries,
    of_kind,
    rule_spec,
)
from tests.support.prometheus_tools import prometheus_binary

RULE_TESTS = Path(__file__).parent / "monitoring" / "rules_test.yaml"
RUNBOOK = ROOT / "docs" / "runbook.md"


def anchors(markdown: str) -> set[str]:
    """Heading anchors as GitHub renders them (lower case, punctuation dropped, spaces to -)."""
    headings = re.findall(r"^#+ (.+)$", markdown, re.M)
    return {re.sub(r"[^a-z0-9 _-]", "", h.strip().lower()).replace(" ", "-") for h in headings}


def labels_match(selector: dict[str, str], labels: dict[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def test_the_service_monitor_selects_the_webhook_service_and_its_metrics_port() -> None:
    [monitor] = of_kind("ServiceMonitor")
    [service] = [s for s in of_kind("Service") if s["metadata"]["name"] == "gpu-admission"]
    assert labels_match(monitor["spec"]["selector"]["matchLabels"], service["metadata"]["labels"])
    ports = {port["name"] for port in service["spec"]["ports"]}
    assert {endpoint["port"] for endpoint in monitor["spec"]["endpoints"]} <= ports
    assert _looks_in(monitor) == service["metadata"]["namespace"]


def _looks_in(monitor: dict) -> str:
    """The namespace a monitor discovers targets in: its own, without a namespaceSelector (the
    Prometheus Operator's CRDs: "By default, the services are discovered in the same namespace
    as the `ServiceMonitor` object"), so a kustomization's `namespace:` moves both together."""
    assert "namespaceSelector" not in monitor["spec"], monitor["spec"]
    return str(monitor["metadata"]["namespace"])


def _pod_monitor(name: str) -> dict:
    return next(m for m in of_kind("PodMonitor") if m["metadata"]["name"] == name)


def test_the_pod_monitor_selects_the_controller_pods_and_keeps_pvc_namespaces() -> None:
    monitor = _pod_monitor("gpu-admission-controller")
    deployments = {d["metadata"]["name"]: d for d in of_kind("Deployment")}
    template = deployments["gpu-admission-controller"]["spec"]["template"]
    selector = monitor["spec"]["selector"]["matchLabels"]
    assert labels_match(selector, template["metadata"]["labels"])
    webhook_pods = deployments["gpu-admission"]["spec"]["template"]["metadata"]["labels"]
    assert not labels_match(selector, webhook_pods)  # the webhooks come through the Service
    assert _looks_in(monitor) == deployments["gpu-admission-controller"]["metadata"]["namespace"]
    ports = {p["name"] for c in template["spec"]["containers"] for p in c.get("ports", [])}
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in ports
    assert endpoint["honorLabels"] is True  # the per-PVC series carry the PVC's namespace


def test_the_agents_pod_monitor_selects_its_pods_and_keeps_the_workloads_labels() -> None:
    from tests.world.harness import render

    monitor = _pod_monitor("gpu-admission-gpu-usage")
    agent = next(d for d in render("manifests/overlays/gpu-usage") if d["kind"] == "DaemonSet")
    template = agent["spec"]["template"]
    assert labels_match(monitor["spec"]["selector"]["matchLabels"], template["metadata"]["labels"])
    assert _looks_in(monitor) == agent["metadata"]["namespace"]
    ports = {p["name"] for c in template["spec"]["containers"] for p in c.get("ports", [])}
    [endpoint] = monitor["spec"]["podMetricsEndpoints"]
    assert endpoint["port"] in ports
    # container_accelerator_* keep the workload's namespace/pod/container, not the agent's.
    assert endpoint["honorLabels"] is True


def test_every_alert_has_a_severity_a_summary_naming_its_object_and_a_runbook() -> None:
    runbook = anchors(RUNBOOK.read_text())
    names = [alert["alert"] for alert in alerts()]
    assert len(names) == len(set(names)) >= 9
    for alert in alerts():
        assert alert["labels"]["severity"] in ("warning", "critical"), alert["alert"]
        annotations = alert["annotations"]
        assert annotations["summary"] and annotations["description"], alert["alert"]
        url, _, anchor = annotations["runbook_url"].partition("#")
        assert url.endswith("/docs/runbook.md"), alert["alert"]
        assert anchor == alert["alert"].lower() and anchor in runbook, alert["alert"]


def test_the_dashboard_is_labelled_for_the_grafana_sidecar_and_every_panel_queries() -> None:
    [config_map] = [
        c for c in of_kind("ConfigMap") if c["metadata"]["name"] == "gpu-admission-dashboard"
    ]
    assert config_map["metadata"]["labels"]["grafana_dashboard"] == "1"
    board = dashboard()
    assert board["uid"] == "gpu-admission"
    for panel in board["panels"]:
        assert panel["targets"] and all(t["expr"] for t in panel["targets"]), panel["title"]
    wanted = (
        "admission_requests",
        "admission_duration",
        "notices",
        "certificate_expiry",
        "loading_since",
        "throughput",
        "shard_bytes",
        "queue_depth",
        "leader",
        "audit_violations",
        "workload_gpus_idle",
    )
    text = "\n".join(dashboard_queries())
    assert all(what in text for what in wanted)


@pytest.fixture
def promtool() -> str:
    return prometheus_binary("promtool")


def test_alert_rules_pass_promtool_rule_tests(promtool: str, tmp_path: Path) -> None:
    # The rule file is the PrometheusRule's spec exactly as kustomize renders it.
    (tmp_path / "rules.yaml").write_text(yaml.safe_dump(rule_spec(), sort_keys=False))
    shutil.copy(RULE_TESTS, tmp_path / RULE_TESTS.name)
    for command in (["check", "rules", "rules.yaml"], ["test", "rules", RULE_TESTS.name]):
        result = subprocess.run(
            [promtool, *command], cwd=tmp_path, capture_output=True, text=True, check=False
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_every_alert_is_tested_firing_and_quiet() -> None:
    cases = yaml.safe_load(RULE_TESTS.read_text())["tests"]
    fired: set[str] = set()
    quiet: set[str] = set()
    for case in cases:
        for check in case.get("alert_rule_test", []):
            (fired if check["exp_alerts"] else quiet).add(check["alertname"])
    names = {alert["alert"] for alert in alerts()}
    assert names <= fired, names - fired
    assert names <= quiet, names - quiet
