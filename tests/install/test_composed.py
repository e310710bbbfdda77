"""The install as users write it, on the real node: docs/install.md's own kustomization and
settings.yaml (the base with the monitoring, gpu-usage and policy-reports components, their image
by `images:`, one setting of their own), with the CRDs of the projects the components feed (from
../shared/crds). Each part shows its effect; the install's self-check finds every admission
object as this composition implies; the operators' audit runs in the service's pod with its own
ServiceAccount; and `kubectl delete -k` with the documented command for what the programs made
in users' namespaces leaves nothing of the project behind."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client
from kubernetes.dynamic import DynamicClient

from gpu_admission.names import MANAGED_BY, MANAGED_BY_LABEL
from tests import ROOT
from tests.install.cluster import (
    CONTROLLER,
    IMAGE,
    IMPORTED_AS,
    NEXT_IMAGE,
    ROLLOUT_SECONDS,
    InstallCluster,
    wait_for,
)
from tests.install.journeys import install_crds, object_states
from tests.support.markdown import block_starting, code_blocks
from tests.world.harness import KUBECTL

INSTALL_DOC = ROOT / "docs" / "install.md"
VIOLATORS = "team-a"
COMPONENTS = ("monitoring", "gpu-usage", "policy-reports")


def docs_install(folder: Path) -> Path:
    """docs/install.md's my-install/ beside this repository, as the page lays them out; only
    the image is re-pointed, at the release the tier imported under a tag of its own."""
    text = INSTALL_DOC.read_text()
    kustomization = yaml.safe_load(block_starting(text, "yaml", "# my-install/kustomization.yaml"))
    settings = block_starting(text, "yaml", "# my-install/settings.yaml")
    name, _, tag = NEXT_IMAGE.partition(":")
    [image] = kustomization["images"]
    kustomization["images"] = [{"name": image["name"], "newName": name, "newTag": tag}]
    (folder / "gpu-admission").symlink_to(ROOT)
    mine = folder / "my-install"
    mine.mkdir()
    (mine / "kustomization.yaml").write_text(yaml.safe_dump(kustomization, sort_keys=False))
    (mine / "settings.yaml").write_text(settings)
    return mine


@pytest.fixture(scope="module")
def composed(install_cluster: InstallCluster, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Installed once for the module; its last test uninstalls it."""
    install_crds(
        install_cluster,
        "wgpolicyk8s.io_policyreports.yaml",
        "wgpolicyk8s.io_clusterpolicyreports.yaml",
        "monitoring.coreos.com_servicemonitors.yaml",
        "monitoring.coreos.com_podmonitors.yaml",
        "monitoring.coreos.com_prometheusrules.yaml",
    )
    install_cluster.namespace(VIOLATORS)
    install_cluster.apply([_violator()])  # it predates the install
    folder = docs_install(tmp_path_factory.mktemp("composed"))
    install_cluster.install(str(folder))
    return folder


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


def test_the_users_image_runs_every_program(
    install_cluster: InstallCluster, composed: Path
) -> None:
    """`images:` in the user's kustomization re-points both Deployments, the agent's DaemonSet
    and, through the controller's own image, the loader Jobs."""
    pods = install_cluster.core.list_namespaced_pod("gpu-admission").items
    running = {
        p.metadata.labels.get("app.kubernetes.io/name"): p.spec.containers[0].image
        for p in pods
        if not p.metadata.deletion_timestamp
    }
    assert set(running.values()) == {NEXT_IMAGE}, running
    assert {"gpu-admission", "gpu-admission-controller"} <= set(running)
    # The agent runs on GPU nodes only (this one is labelled so for its own test, below).
    agent = client.AppsV1Api(install_cluster.api).read_namespaced_daemon_set(
        "gpu-admission-gpu-usage", "gpu-admission"
    )
    assert agent.spec.template.spec.containers[0].image == NEXT_IMAGE
    lease = client.CoordinationV1Api(install_cluster.api).read_namespaced_lease(
        "gpu-admission-controller", "gpu-admission"
    )
    leader = (lease.spec.holder_identity or "").rpartition("_")[0]
    logs = install_cluster.kubectl("-n", "gpu-admission", "logs", leader).stdout
    assert f"loader Jobs run image {NEXT_IMAGE}" in logs  # read from its own pod
    assert IMAGE not in running.values() and IMPORTED_AS  # the base's own tag is not used


def test_policy_reports_name_a_pod_that_predates_the_install(
    install_cluster: InstallCluster, composed: Path
) -> None:
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


def test_the_monitoring_component_installs_its_monitors_rules_and_dashboard(
    install_cluster: InstallCluster, composed: Path
) -> None:
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
    install_cluster: InstallCluster, composed: Path, shared_gpu_node: str
) -> None:
    """The agent's DaemonSet from the image, on the real node with hostPID, as a non-root user:
    NVML (played) names the PIDs of two researchers' real containers; the agent finds their
    containers from /proc, their pods from the API server, the share the memory-share webhook
    gave them (by the user's settings.yaml: headroom 0.9), and warns the one past it."""
    install_cluster.namespace(TENANTS)
    try:
        _nvml_in_pod(install_cluster)
        # The service learns the node's sharing labels from its informer, a moment after the
        # patch: a dry run shows when its memory share is given.
        wait_for(
            lambda: (
                "GPU_MEMORY_LIMIT_MIB"
                in install_cluster.apply(
                    [_tenant("probe", "gpu-tenant-probe")], "--dry-run=server", "-o", "json"
                ).stdout
            ),
            "the service to see the node's GPU sharing",
            diagnosis=install_cluster.diagnosis,
        )
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
        # The share the memory-share webhook wrote into the pod is the share the agent judges
        # against: the node's 23028 MiB, 0.9 of it (the user's settings.yaml, over the default
        # 0.95: 5457 MiB) split 4 ways, 0.225 of the GPU.
        given = {e.name: e.value for e in train.spec.containers[0].env or []}
        share = int(given["GPU_MEMORY_LIMIT_MIB"])
        assert share == 5181
        assert f"over its share of {share:,} MiB" in event.message
        assert "team-gpu/serve" in event.message
        metrics = install_cluster.kubectl(
            "get", "--raw", f"/api/v1/namespaces/gpu-admission/pods/{agent}:9090/proxy/metrics"
        ).stdout
        for pod_name, size in (("train", "8.589934592e+09"), ("serve", "2.147483648e+09")):
            assert (
                'container_accelerator_memory_used_bytes{acc_id="GPU-5d1c0e6a-install",'
                'container="main",gpu_model="NVIDIA A10G",gpu_uuid="GPU-5d1c0e6a-install",'
                f'make="nvidia",model="NVIDIA A10G",namespace="{TENANTS}",pod="{pod_name}",'
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


def _service_pods(cluster: InstallCluster) -> dict[str, client.V1Pod]:
    return {
        p.metadata.name: p
        for p in cluster.core.list_namespaced_pod(
            "gpu-admission", label_selector="app.kubernetes.io/name=gpu-admission"
        ).items
        if p.metadata.name.startswith("gpu-admission-")
        and not p.metadata.name.startswith("gpu-admission-controller-")
        and not p.metadata.deletion_timestamp
    }


def _ready(pod: client.V1Pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def _said_at_start(pod: client.V1Pod) -> str:
    """What a container that stopped at start left in the pod's status (its termination
    message: the last log lines, FallbackToLogsOnError)."""
    said = []
    for status in pod.status.container_statuses or []:
        for state in (status.state, status.last_state):
            if state is not None and state.terminated is not None:
                said.append(state.terminated.message or "")
    return "\n".join(said)


def test_a_settings_change_rolls_out_by_itself_and_a_bad_one_stops_at_the_new_pods(
    install_cluster: InstallCluster, composed: Path
) -> None:
    """The ConfigMap's name carries a hash of the settings: `kubectl apply -k` alone rolls the
    programs. A bad value stops the rollout at the new pods, which say which key in which file;
    the old replicas keep serving."""
    settings = composed / "settings.yaml"
    good = settings.read_text()
    before = _service_pods(install_cluster)
    assert len(before) == 2 and all(_ready(p) for p in before.values())
    settings.write_text(good + "policies:\n  gpu-env-guard: {mode: wrn}\n")
    try:
        install_cluster.kubectl("apply", "-k", str(composed))
        told = wait_for(
            lambda: next(
                (
                    said
                    for name, pod in _service_pods(install_cluster).items()
                    if name not in before and "gpu-env-guard" in (said := _said_at_start(pod))
                ),
                None,
            ),
            "a new replica to say why it cannot start",
            timeout=ROLLOUT_SECONDS,
            diagnosis=install_cluster.diagnosis,
        )
        assert "settings.yaml" in told and "policies.gpu-env-guard.mode" in told, told
        now = _service_pods(install_cluster)
        assert set(before) <= set(now) and all(_ready(now[n]) for n in before), now
    finally:
        settings.write_text(good.replace("headroom: 0.9", "headroom: 0.85"))
        install_cluster.kubectl("apply", "-k", str(composed))
    install_cluster.rolled_out("gpu-admission")
    install_cluster.rolled_out(CONTROLLER)
    after = _service_pods(install_cluster)
    assert not set(after) & set(before), (before, after)  # replaced, with no restart asked
    mounted = {
        v.config_map.name for p in after.values() for v in p.spec.volumes if v.name == "config"
    }
    [config] = mounted
    data = install_cluster.core.read_namespaced_config_map(config, "gpu-admission").data
    assert "headroom: 0.85" in data["settings.yaml"]


SETTINGS_FOR_ADMISSION = """\
gpu:
  resource_patterns: [nvidia.com/gpu, nvidia.com/gpu.shared, "nvidia.com/mig-*", amd.com/gpu]
policies:
  shared-gpu-limit: {mode: warn}
"""


def _dry_run(cluster: InstallCluster, name: str, limits: dict[str, str]) -> tuple[Any, str]:
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": VIOLATORS},
        "spec": {
            "schedulingGates": [{"name": "test.gpu-admission.io/hold"}],
            "containers": [
                {"name": "main", "image": "registry.k8s.io/pause:3.10",
                 "resources": {"limits": limits}}
            ],
        },
    }  # fmt: skip
    done = cluster.apply([pod], "--dry-run=server", "-o", "json", check=False)
    return (json.loads(done.stdout) if done.returncode == 0 else None), done.stderr


def _visible(made: Any) -> list[str]:
    env = (made or {}).get("spec", {}).get("containers", [{}])[0].get("env") or []
    return [e.get("value") for e in env if e["name"] == "NVIDIA_VISIBLE_DEVICES"]


def test_settings_that_change_the_admission_objects_take_effect_by_apply_alone(
    install_cluster: InstallCluster, composed: Path
) -> None:
    """A settings.yaml that adds a GPU resource name and puts one policy in warn mode: `kubectl
    apply -k` alone, and the API server runs what they imply (the pods policy split in two, one
    warning; a container asking for the new resource is a GPU container, not hidden). A second
    apply, as a GitOps re-sync, changes nothing back."""
    settings = composed / "settings.yaml"
    kept = settings.read_text()
    assert _visible(_dry_run(install_cluster, "amd", {"amd.com/gpu": "1"})[0]) == ["none"]
    settings.write_text(kept + SETTINGS_FOR_ADMISSION)
    try:
        started = time.monotonic()
        install_cluster.kubectl("apply", "-k", str(composed))
        install_cluster.rolled_out(CONTROLLER)
        wait_for(
            lambda: (
                "ValidatingAdmissionPolicyBinding gpu-admission-shared-gpu-limit"
                in (held := install_cluster.admission_objects())
                and "ValidatingAdmissionPolicy gpu-admission-pods" not in held
            ),
            "the controller to write the split policies",
            diagnosis=install_cluster.diagnosis,
        )
        reached = time.monotonic() - started
        # The API server's own informers apply the new binding and drop the old policy a moment
        # apart: until both, a dry run may still be refused by the deleted policy.
        _, said = wait_for(
            lambda: (
                (answer := _dry_run(install_cluster, "two", {"nvidia.com/gpu.shared": "2"}))[0]
                is not None
                and "gpu-admission-shared-gpu-limit" in answer[1]
                and answer
            ),
            "a pod over the shared limit admitted with the split policy's warning",
        )
        assert "Warning: Validation failed" in said, said
        wait_for(
            lambda: _visible(_dry_run(install_cluster, "amd", {"amd.com/gpu": "1"})[0]) == [],
            "a container asking for amd.com/gpu left its GPUs",
        )
        install_cluster.rolled_out("gpu-admission")
        install_cluster.wait_written()
        print(f"\nsettings change: the admission objects followed {reached:.0f} s after apply")
        # A GitOps re-sync: the same kustomization applied again changes nothing.
        before = install_cluster.admission_objects()
        generations = {
            d.metadata.name: d.metadata.generation
            for d in client.AppsV1Api(install_cluster.api)
            .list_namespaced_deployment("gpu-admission")
            .items
        }
        again = install_cluster.kubectl("apply", "-k", str(composed))
        assert all(
            line.endswith((" unchanged", " configured")) for line in again.stdout.splitlines()
        ), again.stdout
        assert {
            d.metadata.name: d.metadata.generation
            for d in client.AppsV1Api(install_cluster.api)
            .list_namespaced_deployment("gpu-admission")
            .items
        } == generations
        assert install_cluster.admission_objects() == before
    finally:
        settings.write_text(kept)
        install_cluster.kubectl("apply", "-k", str(composed))
        install_cluster.rolled_out("gpu-admission")
        install_cluster.rolled_out(CONTROLLER)
        install_cluster.wait_written()


def test_the_install_checks_itself_and_finds_this_composition(
    install_cluster: InstallCluster, composed: Path
) -> None:
    """The leading controller expects what the components imply (it reads them from their
    layers of the configuration): every admission object ok, no Warning on the Deployment; and
    an operator's `gpu-admission audit`, in the service's pod with its own ServiceAccount, says
    the same and names the pod that predates the install."""
    states = wait_for(
        lambda: object_states(install_cluster) or None,
        "the self-check's gauge",
        diagnosis=install_cluster.diagnosis,
    )
    assert set(states) == {"ok"} and states["ok"] >= 10, states
    events = install_cluster.core.list_namespaced_event(
        "gpu-admission", field_selector="involvedObject.name=gpu-admission,type=Warning"
    ).items
    assert [e.reason for e in events if e.reason.startswith("AdmissionObject")] == []
    done = install_cluster.kubectl(
        *("-n", "gpu-admission", "exec", "deploy/gpu-admission", "--"),
        *("gpu-admission", "audit", "--config", "/etc/gpu-admission", "-o", "json"),
        check=False,
    )
    assert done.returncode == 1, done.stderr  # findings: the pod that predates the install
    report = json.loads(done.stdout)
    installed = report["installedAdmissionObjects"]
    assert installed["layout"] == "manifests/ with components monitoring, gpu-usage, policy-reports"
    assert {o["state"] for o in installed["objects"]} == {"ok"}
    assert any(f["name"] == "train" and f["namespace"] == VIOLATORS for f in report["findings"])


def _project_objects(cluster: InstallCluster) -> list[str]:
    """Every object of every kind the API server serves (Events aside) that is the project's:
    named gpu-admission*, labelled as the base labels its objects, or as the programs label what
    they make in users' namespaces."""
    dynamic = DynamicClient(cluster.api)
    found = []
    for resource in dynamic.resources.search():
        if (
            "list" not in (resource.verbs or [])
            or "/" in resource.name
            or resource.kind in ("Event", "Lease", "Endpoints", "EndpointSlice")
            or resource.group in ("events.k8s.io", "authorization.k8s.io")
            or not resource.preferred
        ):
            continue
        for item in dynamic.get(resource).items:
            meta = item.metadata
            labels = dict(meta.labels or {})
            if (
                str(meta.name).startswith("gpu-admission")
                or labels.get("app.kubernetes.io/name", "").startswith("gpu-admission")
                or labels.get(MANAGED_BY_LABEL) == MANAGED_BY
            ):
                where = f"{meta.namespace}/" if meta.namespace else ""
                found.append(f"{resource.kind} {where}{meta.name}")
    return found


def test_uninstall_leaves_nothing_of_the_project(
    install_cluster: InstallCluster, composed: Path
) -> None:
    """docs/install.md's uninstall, as written: the webhook configurations, `kubectl delete -k`
    of the kustomization (cluster-scoped objects included), then the one command for what the
    programs made in users' namespaces (here the report in team-a)."""
    reports = client.CustomObjectsApi(install_cluster.api).list_namespaced_custom_object(
        "wgpolicyk8s.io", "v1alpha2", VIOLATORS, "policyreports"
    )
    assert reports["items"], "the report the cleanup must remove"
    uninstall = next(
        b
        for b in code_blocks(INSTALL_DOC.read_text(), "sh")
        if "kubectl delete -k my-install/" in b
    )
    leftovers = next(b for b in code_blocks(INSTALL_DOC.read_text(), "sh") if "api-resources" in b)
    for script in (uninstall, leftovers):
        done = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", script],
            cwd=composed.parent,
            env={
                **os.environ,
                "KUBECONFIG": str(install_cluster.plane.kubeconfig),
                "PATH": f"{Path(str(KUBECTL)).parent}:{os.environ['PATH']}",
            },
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, f"{script}\n{done.stdout}\n{done.stderr}"
    install_cluster.kubectl("delete", "namespace", VIOLATORS, "--wait=true")
    # What the controller wrote goes with its ClusterRole: the garbage collector's, in seconds.
    wait_for(
        lambda: _project_objects(install_cluster) == [],
        "nothing of the project left",
        diagnosis=lambda: "\n".join(_project_objects(install_cluster)),
    )
