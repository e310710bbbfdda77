"""The overlays users apply instead of the base, on the real node: each with the CRDs of the
project it feeds (from ../shared/crds, the projects' own YAML), rolled out through its own probes,
doing what it adds, and uninstalled without leaving a webhook or policy behind."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests import ROOT
from tests.install.cluster import InstallCluster, wait_for
from tests.world.crds import wait_established

CRDS = ROOT.parent / "shared" / "crds"
VIOLATORS = "team-a"


def install_crds(cluster: InstallCluster, *names: str) -> None:
    for name in names:
        path = CRDS / name
        if not path.is_file():
            pytest.fail(f"the CRD {name} is not in {CRDS}")
        cluster.kubectl("apply", "--server-side", "-f", str(path))
    wait_established(cluster.api)


def left_behind(cluster: InstallCluster) -> list[str]:
    registration = client.AdmissionregistrationV1Api(cluster.api)
    listed = [
        *registration.list_mutating_webhook_configuration().items,
        *registration.list_validating_webhook_configuration().items,
        *registration.list_validating_admission_policy().items,
        *registration.list_validating_admission_policy_binding().items,
    ]
    return [i.metadata.name for i in listed if i.metadata.name.startswith("gpu-admission")]


@pytest.fixture
def overlay(install_cluster: InstallCluster) -> Iterator[list[str]]:
    """The overlays a test installs; each is uninstalled after it, and must leave nothing."""
    installed: list[str] = []
    yield installed
    for path in installed:
        install_cluster.uninstall(path)
    assert left_behind(install_cluster) == []


def _violator() -> dict[str, Any]:
    """A GPU pod that sets NVIDIA_VISIBLE_DEVICES itself: refused once gpu-admission runs, so it
    can only predate the install. Held back from the node (which has no GPU)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "train", "namespace": VIOLATORS},
        "spec": {
            "schedulingGates": [{"name": "test.gpu-admission.io/hold"}],
            "containers": [
                {
                    "name": "trainer",
                    "image": "registry.k8s.io/pause:3.10",
                    "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0,1"}],
                    "resources": {"limits": {"nvidia.com/gpu": "1"}},
                }
            ],
        },
    }


def test_policy_reports_name_a_pod_that_predates_the_install(
    install_cluster: InstallCluster, overlay: list[str]
) -> None:
    install_crds(
        install_cluster,
        "wgpolicyk8s.io_policyreports.yaml",
        "wgpolicyk8s.io_clusterpolicyreports.yaml",
    )
    install_cluster.namespace(VIOLATORS)
    install_cluster.apply([_violator()])
    overlay.append("manifests/overlays/policy-reports")
    install_cluster.install(overlay[-1])
    reports = client.CustomObjectsApi(install_cluster.api)

    def report_on_train() -> list[dict[str, Any]]:
        try:
            report = reports.get_namespaced_custom_object(
                "wgpolicyk8s.io", "v1alpha2", VIOLATORS, "policyreports", "gpu-admission"
            )
        except client.ApiException as error:
            if error.status == 404:
                return []
            raise
        return [
            r
            for r in report.get("results") or []
            if any(res.get("name") == "train" for res in r.get("resources") or [])
        ]

    results = wait_for(
        report_on_train,
        "the PolicyReport to name pod train",
        timeout=120,
        diagnosis=install_cluster.diagnosis,
    )
    guard = [r for r in results if r["policy"] == "gpu-env-guard"]
    assert guard and guard[0]["result"] == "fail"
    assert 'container "trainer"' in guard[0]["message"]
    install_cluster.kubectl("delete", "namespace", VIOLATORS, "--wait=false")


def test_the_monitoring_overlay_installs_its_monitors_rules_and_dashboard(
    install_cluster: InstallCluster, overlay: list[str]
) -> None:
    install_crds(
        install_cluster,
        "monitoring.coreos.com_servicemonitors.yaml",
        "monitoring.coreos.com_podmonitors.yaml",
        "monitoring.coreos.com_prometheusrules.yaml",
    )
    overlay.append("manifests/overlays/monitoring")
    install_cluster.install(overlay[-1])
    custom = client.CustomObjectsApi(install_cluster.api)
    for plural in ("servicemonitors", "podmonitors", "prometheusrules"):
        listed = custom.list_namespaced_custom_object(
            "monitoring.coreos.com", "v1", "gpu-admission", plural
        )
        assert listed["items"], f"no {plural} installed"
    dashboard = install_cluster.core.read_namespaced_config_map(
        "gpu-admission-dashboard", "gpu-admission"
    )
    assert dashboard.metadata.labels["grafana_dashboard"] == "1"
    # What a ServiceMonitor points Prometheus at: the metrics port of a ready webhook pod.
    pods = install_cluster.core.list_namespaced_pod(
        "gpu-admission", label_selector="app.kubernetes.io/name=gpu-admission"
    ).items
    address = pods[0].status.pod_ip
    metrics = install_cluster.kubectl(
        "get",
        "--raw",
        f"/api/v1/namespaces/gpu-admission/pods/{pods[0].metadata.name}:9090/proxy/metrics",
    ).stdout
    assert "gpu_admission_" in metrics, address
