"""Audit mode on the real node, as docs/adoption.md installs it (the base with the
policy-reports and audit-mode components): nothing is refused and nothing is changed; a pod the
policies would refuse is admitted with a warning to whoever created it, one they would change is
admitted as written, and both are in their namespace's report; the install's self-check expects
audit mode. Then enforce, as the page says: the audit-mode line dropped, the one object audit mode
alone held named by the self-check and deleted with the command it gives."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from tests import ROOT
from tests.install.cluster import IMAGE, InstallCluster, wait_for
from tests.install.journeys import install_crds, object_states
from tests.support.markdown import block_starting

ADOPTION = ROOT / "docs" / "adoption.md"
NS = "audited"
HOLD = [{"name": "test.gpu-admission.io/hold"}]  # the node has no GPU: the pods never run
VISIBILITY_AUDIT = ("ValidatingAdmissionPolicy", "gpu-admission-gpu-visibility")


def _kustomization(folder: Path, audit_mode: bool = True) -> Path:
    """adoption.md's kustomization beside this repository, its image re-pointed at the one the
    tier imported; with the background audit every 20 s (a settings.yaml of the test's own: the
    page's 10 minutes are too long to wait for), and without the audit-mode line to enforce."""
    document = yaml.safe_load(
        block_starting(
            ADOPTION.read_text(), "yaml", "# my-install/kustomization.yaml, in audit mode"
        )
    )
    name, _, tag = IMAGE.partition(":")
    document["images"] = [{"name": document["images"][0]["name"], "newName": name, "newTag": tag}]
    if not audit_mode:
        document["components"] = [c for c in document["components"] if "audit-mode" not in c]
    document["configMapGenerator"] = [
        {
            "name": "gpu-admission-config",
            "namespace": "gpu-admission",
            "behavior": "merge",
            "files": ["settings.yaml"],
        }
    ]
    if not (folder / "gpu-admission").exists():
        (folder / "gpu-admission").symlink_to(ROOT)
    mine = folder / "my-install"
    mine.mkdir(exist_ok=True)
    (mine / "kustomization.yaml").write_text(yaml.safe_dump(document, sort_keys=False))
    (mine / "settings.yaml").write_text("audit:\n  interval: 20s\n")
    return mine


@pytest.fixture(scope="module")
def audit_install(
    install_cluster: InstallCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Path]:
    install_crds(
        install_cluster,
        "wgpolicyk8s.io_policyreports.yaml",
        "wgpolicyk8s.io_clusterpolicyreports.yaml",
    )
    folder = tmp_path_factory.mktemp("audit-mode")
    mine = _kustomization(folder)
    install_cluster.install(str(mine))
    install_cluster.namespace(NS)
    try:
        yield folder
    finally:
        install_cluster.kubectl("delete", "namespace", NS, "--ignore-not-found", "--wait=false")
        install_cluster.uninstall(str(mine))


def _pod(name: str, container: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NS},
        "spec": {
            "schedulingGates": HOLD,
            "containers": [{"image": "registry.k8s.io/pause:3.10", **container}],
        },
    }


REFUSED = _pod(
    "train",
    {
        "name": "trainer",
        "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "0,1"}],
        "resources": {"limits": {"nvidia.com/gpu": "1"}},
    },
)
CHANGED = _pod(
    "prep", {"name": "main", "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]}
)


def _report(cluster: InstallCluster) -> dict[str, Any] | None:
    try:
        return client.CustomObjectsApi(cluster.api).get_namespaced_custom_object(
            "wgpolicyk8s.io", "v1alpha2", NS, "policyreports", "gpu-admission"
        )
    except client.ApiException as error:
        if error.status == 404:
            return None
        raise


def _results_on(cluster: InstallCluster, pod: str) -> dict[str, dict[str, Any]]:
    report = _report(cluster) or {}
    return {
        r["policy"]: r
        for r in report.get("results") or []
        if any(res.get("name") == pod for res in r.get("resources") or [])
    }


def test_nothing_is_refused_or_changed_and_everything_is_said(
    install_cluster: InstallCluster, audit_install: Path
) -> None:
    created = install_cluster.kubectl("create", "-f", "-", stdin=json.dumps(REFUSED))
    assert "Warning: Validation failed for ValidatingAdmissionPolicy 'gpu-admission-pods'" in (
        created.stderr
    )
    assert 'container "trainer" requests a GPU and sets NVIDIA_VISIBLE_DEVICES' in created.stderr
    install_cluster.kubectl("create", "-f", "-", stdin=json.dumps(CHANGED))
    prep = install_cluster.core.read_namespaced_pod("prep", NS)
    visible = [e.value for e in prep.spec.containers[0].env if e.name == "NVIDIA_VISIBLE_DEVICES"]
    assert visible == ["all"]  # as written
    results = wait_for(
        lambda: (
            (train := _results_on(install_cluster, "train")).get("gpu-env-guard")
            and (changed := _results_on(install_cluster, "prep")).get("gpu-visibility")
            and (train, changed)
        ),
        "the namespace's report to name both pods",
        timeout=120,
        diagnosis=install_cluster.diagnosis,
    )
    train, changed = results
    assert train["gpu-env-guard"]["result"] == "warn"
    assert train["gpu-env-guard"]["properties"]["mode"] == "warn"
    assert changed["gpu-visibility"]["properties"]["mode"] == "audit"
    assert "NVIDIA_VISIBLE_DEVICES=none" in changed["gpu-visibility"]["message"]
    # The self-check expects audit mode: every object ok, the recording policy among them.
    states = wait_for(
        lambda: object_states(install_cluster) or None,
        "the self-check's gauge",
        diagnosis=install_cluster.diagnosis,
    )
    assert set(states) == {"ok"}, states
    events = install_cluster.core.list_namespaced_event(
        "gpu-admission", field_selector="involvedObject.name=gpu-admission,type=Warning"
    ).items
    assert [e.reason for e in events if e.reason.startswith("AdmissionObject")] == []


def _service_pods(cluster: InstallCluster) -> list[str]:
    """The pods of the service's Deployment (its ReplicaSets' pods), terminating ones too."""
    sets = {
        r.metadata.name
        for r in client.AppsV1Api(cluster.api).list_namespaced_replica_set("gpu-admission").items
        if any(o.name == "gpu-admission" for o in r.metadata.owner_references or [])
    }
    return [
        p.metadata.name
        for p in cluster.core.list_namespaced_pod("gpu-admission").items
        if any(o.name in sets for o in p.metadata.owner_references or [])
    ]


def test_nothing_is_refused_while_the_service_is_down(
    install_cluster: InstallCluster, audit_install: Path
) -> None:
    scale = ("-n", "gpu-admission", "scale", "deployment/gpu-admission")
    install_cluster.kubectl(*scale, "--replicas=0")
    try:
        wait_for(lambda: not _service_pods(install_cluster), "the service's pods to be gone")
        # Each needs the service: the pods webhook (credentials named), the Secrets webhook.
        needs_credentials = _pod("fetch", {"name": "main"})
        needs_credentials["metadata"]["annotations"] = {
            "gpu-admission.io/cloud-credentials": "aws-creds"
        }
        secret = {
            "apiVersion": "v1",
            "kind": "Secret",
            "metadata": {"name": "aws-creds", "namespace": NS},
            "type": "aws-credential",
            "stringData": {"AWS_ACCESS_KEY_ID": "AKIA", "AWS_SECRET_ACCESS_KEY": "x"},
        }
        for document in (secret, needs_credentials):
            created = install_cluster.kubectl(
                "create", "-f", "-", stdin=json.dumps(document), check=False
            )
            assert created.returncode == 0, created.stderr
    finally:
        install_cluster.kubectl(*scale, "--replicas=2")
        install_cluster.rolled_out("gpu-admission")


def _hidden(cluster: InstallCluster) -> bool:
    made = cluster.kubectl(
        "create", "--dry-run=server", "-o", "json", "-f", "-",
        stdin=json.dumps({**CHANGED, "metadata": {"name": "after", "namespace": NS}}),
    )  # fmt: skip
    env = json.loads(made.stdout)["spec"]["containers"][0].get("env") or []
    return {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"} in env


def test_enforce_is_the_line_dropped(install_cluster: InstallCluster, audit_install: Path) -> None:
    """Going to enforce is dropping the audit-mode line and applying: the programs roll to the
    new settings by themselves, and the controller replaces the policy that recorded GPU
    visibility with the one that makes it (deleting what audit mode alone held), and says so."""
    mine = _kustomization(audit_install, audit_mode=False)
    install_cluster.kubectl("apply", "-k", str(mine))  # the programs roll by themselves
    for deployment in ("gpu-admission", "gpu-admission-controller"):
        install_cluster.rolled_out(deployment)
    said = "ValidatingAdmissionPolicy gpu-admission-gpu-visibility deleted (it was stale)"
    wait_for(
        lambda: install_cluster.told_on_service(said),
        "the controller to say it deleted the recording policy",
        diagnosis=install_cluster.diagnosis,
    )
    install_cluster.wait_written()
    held = install_cluster.admission_objects()
    assert "ValidatingAdmissionPolicy gpu-admission-gpu-visibility" not in held
    assert "MutatingAdmissionPolicy gpu-admission-gpu-visibility" in held
    wait_for(lambda: _hidden(install_cluster), "CPU-only pods hidden again")
