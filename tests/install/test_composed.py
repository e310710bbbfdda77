"""The overlays users apply instead of the base, on the real node: each with the CRDs of the
project it feeds (from ../shared/crds, the projects' own YAML), rolled out through its own probes,
doing what it adds, and uninstalled without leaving a webhook or policy behind."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from tests import ROOT
from tests.install.cluster import IMAGE, InstallCluster, wait_for
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


TENANTS = "team-gpu"
A10G = 24146608128  # bytes, as NVML gives an A10G's memory
GFD_LABELS = {  # what gpu-feature-discovery writes on a node time-slicing an A10G 4 ways
    "nvidia.com/gpu.present": "true",
    "nvidia.com/gpu.replicas": "4",
    "nvidia.com/gpu.memory": "23028",
    "nvidia.com/gpu.sharing-strategy": "time-slicing",
}


@pytest.fixture
def shared_gpu_node(install_cluster: InstallCluster) -> Iterator[str]:
    """The real node as gpu-feature-discovery labels it and the device plugin advertises it
    (through the API, as those two write it: neither runs here); put back afterwards."""
    name = install_cluster.node.name
    core = install_cluster.core
    core.patch_node(name, {"metadata": {"labels": GFD_LABELS}})
    core.patch_node_status(name, {"status": {"capacity": {"nvidia.com/gpu.shared": "4"}}})
    try:
        yield name
    finally:
        core.patch_node(name, {"metadata": {"labels": dict.fromkeys(GFD_LABELS)}})
        core.patch_node_status(name, {"status": {"capacity": {"nvidia.com/gpu.shared": None}}})


def _tenant(name: str, marker: str) -> dict[str, Any]:
    """A researcher's pod on one time-sliced replica; its process carries `marker`."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": TENANTS},
        "spec": {
            "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {
                    "name": "main",
                    "image": IMAGE,
                    "imagePullPolicy": "Never",
                    "command": ["python3", "-c", "import time; time.sleep(3600)", marker],
                    "resources": {"limits": {"nvidia.com/gpu.shared": "1"}},
                }
            ],
        },
    }


def _nvml_in_pod(install_cluster: InstallCluster) -> None:
    """The agent's NVML played: the binding's stand-in, and what the GPU holds by marker."""
    state = {
        "gpus": [
            {
                "uuid": "GPU-5d1c0e6a-install",
                "name": "NVIDIA A10G",
                "total": A10G,
                "markers": {"gpu-tenant-train": 8 * 1024**3, "gpu-tenant-serve": 2 * 1024**3},
            }
        ]
    }
    files = {
        "pynvml.py": (ROOT / "tests" / "gpu_usage" / "nvml_shim" / "pynvml.py").read_text(),
        "fake_nvml.py": (ROOT / "tests" / "gpu_usage" / "fake_nvml.py").read_text(),
        "state.json": json.dumps(state),
    }
    install_cluster.apply(
        [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "metadata": {"name": "nvml-played", "namespace": "gpu-admission"},
                "data": files,
            }
        ]
    )
    patch = {
        "spec": {
            "template": {
                "spec": {
                    "volumes": [{"name": "nvml", "configMap": {"name": "nvml-played"}}],
                    "containers": [
                        {
                            "name": "gpu-usage",
                            "env": [
                                {"name": "PYTHONPATH", "value": "/opt/nvml-played"},
                                {
                                    "name": "GPU_USAGE_FAKE_NVML",
                                    "value": "/opt/nvml-played/state.json",
                                },
                            ],
                            "volumeMounts": [{"name": "nvml", "mountPath": "/opt/nvml-played"}],
                        }
                    ],
                }
            }
        }
    }
    install_cluster.kubectl(
        "-n",
        "gpu-admission",
        "patch",
        "daemonset",
        AGENT,
        "--type=strategic",
        "-p",
        json.dumps(patch),
    )


AGENT = "gpu-admission-gpu-usage"


def _agent_pod(install_cluster: InstallCluster) -> str:
    done = install_cluster.kubectl(
        "-n",
        "gpu-admission",
        "rollout",
        "status",
        f"daemonset/{AGENT}",
        "--timeout=180s",
        check=False,
    )
    assert done.returncode == 0, done.stdout + install_cluster.diagnosis()
    pods = install_cluster.core.list_namespaced_pod(
        "gpu-admission", label_selector=f"app.kubernetes.io/name={AGENT}"
    ).items
    [pod] = [p for p in pods if not p.metadata.deletion_timestamp]
    return str(pod.metadata.name)


def _over_share_event(install_cluster: InstallCluster, pod: str) -> Any:
    events = install_cluster.core.list_namespaced_event(
        TENANTS, field_selector=f"involvedObject.name={pod},reason=GPUMemoryOverShare"
    ).items
    return events[0] if events else None


def test_the_gpu_usage_agent_names_each_gpu_process_and_warns_a_pod_over_its_share(
    install_cluster: InstallCluster, overlay: list[str], shared_gpu_node: str
) -> None:
    """The agent's DaemonSet from the image, on the real node with hostPID, as a non-root user:
    NVML (played) names the PIDs of two researchers' real containers; the agent finds their
    containers from /proc, their pods from the API server, the share the memory-share webhook
    gave them, and warns the one past it."""
    overlay.append("manifests/overlays/gpu-usage")
    install_cluster.install(overlay[-1])
    install_cluster.namespace(TENANTS)
    try:
        _nvml_in_pod(install_cluster)
        install_cluster.apply(
            [_tenant("train", "gpu-tenant-train"), _tenant("serve", "gpu-tenant-serve")]
        )
        for name in ("train", "serve"):
            wait_for(
                lambda n=name: (
                    install_cluster.core.read_namespaced_pod(n, TENANTS).status.phase == "Running"
                ),
                f"pod {name} to run",
                diagnosis=lambda: install_cluster.diagnosis(TENANTS),
            )
        agent = _agent_pod(install_cluster)
        # 8 GiB against the share the webhook gives one of four replicas of 23028 MiB, and one
        # context's 1 GiB.
        event = wait_for(
            lambda: _over_share_event(install_cluster, "train"),
            "the GPUMemoryOverShare Event on pod train",
            diagnosis=install_cluster.diagnosis,
        )
        assert event.type == "Warning"
        train = install_cluster.core.read_namespaced_pod("train", TENANTS)
        assert event.involved_object.uid == train.metadata.uid
        assert "uses 8,192 MiB of GPU 0 (NVIDIA A10G" in event.message
        # The share the memory-share webhook wrote into the pod (the node's 23028 MiB over 4
        # replicas, less its headroom) is the share the agent judges against.
        given = {e.name: e.value for e in train.spec.containers[0].env or []}
        share = int(given["GPU_MEMORY_LIMIT_MIB"])
        assert 4096 < share < 23028 // 4
        assert f"over its share of {share:,} MiB" in event.message
        assert "team-gpu/serve" in event.message
        metrics = install_cluster.kubectl(
            "get", "--raw", f"/api/v1/namespaces/gpu-admission/pods/{agent}:9090/proxy/metrics"
        ).stdout
        for pod_name, size in (("train", "8.589934592e+09"), ("serve", "2.147483648e+09")):
            assert (
                'container_accelerator_memory_used_bytes{container="main",gpu_model="NVIDIA A10G",'
                f'gpu_uuid="GPU-5d1c0e6a-install",namespace="{TENANTS}",pod="{pod_name}",'
                f'preallocated="false",workload="{pod_name}",workload_kind="Pod"}} {size}'
            ) in metrics
        over = [
            line
            for line in metrics.splitlines()
            if line.startswith("gpu_admission_container_gpu_memory_over_share_bytes{")
        ]
        assert len(over) == 1 and 'pod="train"' in over[0]
        assert _over_share_event(install_cluster, "serve") is None  # within its share
        # The node's table, as an operator gets it.
        table = install_cluster.kubectl(
            "-n", "gpu-admission", "exec", agent, "--", "gpu-admission", "gpu-usage", "--once"
        ).stdout
        rows = {line.split()[2]: line.split() for line in table.splitlines()[1:] if line.strip()}
        assert rows["train"][1] == TENANTS and rows["train"][3] == "main"
        assert rows["serve"][1] == TENANTS
    finally:
        install_cluster.kubectl(
            "delete", "namespace", TENANTS, "--ignore-not-found", "--wait=false"
        )
        install_cluster.kubectl(
            "-n", "gpu-admission", "delete", "configmap", "nvml-played", "--ignore-not-found"
        )
