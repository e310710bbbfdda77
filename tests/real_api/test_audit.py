"""`gpu-admission audit` on a real kube-apiserver 1.36 holding objects made before gpu-admission
was installed (the namespace was exempt while they were made): it finds the violators of every
policy that judges existing Pods, credential Secrets and dataset PVCs, and nothing else."""

from __future__ import annotations

import argparse
import base64
import io
import json
from typing import Any

import pytest
import yaml
from kubernetes import client

from commands.audit import EXIT_CLEAN, EXIT_FINDINGS, audit_command
from gpu_admission.datasets.load import DatasetContent
from tests.real_api.conftest import Kubectl, apply_base, namespace_ready
from tests.real_api.nodes import renamed_shared_node
from tests.world.control_plane import ControlPlane

NS = "audit-seeded"
EXEMPT = "gpu-admission.io/exempt"


def container(name: str = "app", gpus: dict[str, str] | None = None, **env: str) -> dict:
    made: dict[str, Any] = {"name": name, "image": "nvidia/cuda:12.4.1-base"}
    if gpus:
        made["resources"] = {"limits": gpus}
    if env:
        made["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return made


HIDDEN = {"NVIDIA_VISIBLE_DEVICES": "none"}


def pod(name: str, *containers: dict, annotations: dict | None = None, **spec: Any) -> dict:
    meta: dict[str, Any] = {"name": name}
    if annotations:
        meta["annotations"] = annotations
    return {"metadata": meta, "spec": {"containers": list(containers), **spec}}


def secret(name: str, kind: str, **data: str) -> dict:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return {"metadata": {"name": name}, "type": kind, "data": encoded}


def pvc(name: str, source: str) -> dict:
    return {
        "metadata": {"name": name, "annotations": {"gpu-admission.io/data-source": source}},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


SHARED_NODE = renamed_shared_node("audit-a10g")


def cached_snapshot(source: str) -> dict:
    """A dataset snapshot as the controller labels it, from a PVC of class `standard`."""
    return {
        "apiVersion": "snapshot.storage.k8s.io/v1",
        "kind": "VolumeSnapshot",
        "metadata": {
            "name": "coco-snap",
            "labels": {
                "gpu-admission.io/dataset-cache": "true",
                "gpu-admission.io/dataset-key": DatasetContent(source).cache_key,
            },
            "annotations": {"gpu-admission.io/data-storage-class": "standard"},
        },
        "spec": {"source": {"persistentVolumeClaimName": "coco-loaded"}},
    }


def make_ready(api: client.ApiClient, name: str) -> None:
    """What the CSI snapshotter writes once the snapshot is cut (played through the API)."""
    client.CustomObjectsApi(api).patch_namespaced_custom_object_status(
        "snapshot.storage.k8s.io",
        "v1",
        NS,
        "volumesnapshots",
        name,
        {"status": {"readyToUse": True, "restoreSize": "1Gi"}},
    )


@pytest.fixture(scope="module")
def seeded(real_cluster: ControlPlane, api: client.ApiClient, crds: None) -> ControlPlane:
    core = client.CoreV1Api(api)
    namespace_ready(api, NS, labels={EXEMPT: "true"})  # made before the install: unchecked
    core.create_node(SHARED_NODE)
    client.CustomObjectsApi(api).create_namespaced_custom_object(
        "snapshot.storage.k8s.io",
        "v1",
        NS,
        "volumesnapshots",
        cached_snapshot("s3://datasets/coco"),
    )
    make_ready(api, "coco-snap")
    for body in (
        secret(
            "s3-reader",
            "aws-credential",
            AWS_ACCESS_KEY_ID="AKIAIOSFODNN7EXAMPLE",
            AWS_SECRET_ACCESS_KEY="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ),
        secret(
            "s3-typo",
            "aws-credential",
            AWS_ACCESS_KEY_ID="AKIAIOSFODNN7EXAMPLE",
            AWS_SECRET_KEY="wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
        ),
    ):
        core.create_namespaced_secret(NS, body)
    again = pvc("coco-again", "s3://datasets/coco")
    again["spec"]["storageClassName"] = "standard"
    for body in (pvc("coco", "s3://datasets/coco"), pvc("bad-source", "s3://Bad_Bucket/x"), again):
        core.create_namespaced_persistent_volume_claim(NS, body)
    shared = {"nvidia.com/gpu.shared": "1"}
    for body in (
        pod("cpu-sees-gpus", container()),
        pod("clean-cpu", container(**HIDDEN)),
        pod("shared-no-share", container(gpus=shared)),
        pod("env-tamper", container(gpus={"nvidia.com/gpu": "1"}, NVIDIA_VISIBLE_DEVICES="all")),
        pod("over-ask", container(gpus={"nvidia.com/gpu.shared": "2"})),
        pod(
            "wants-creds",
            container(**HIDDEN),
            annotations={"gpu-admission.io/cloud-credentials": "s3-reader"},
        ),
        pod(
            "waits-data",
            {**container(**HIDDEN), "volumeMounts": [{"name": "d", "mountPath": "/data"}]},
            volumes=[{"name": "d", "persistentVolumeClaim": {"claimName": "coco"}}],
        ),
    ):
        core.create_namespaced_pod(NS, body)
    custom = client.CustomObjectsApi(api)
    for group, version, plural, body in WORKLOADS:
        kind = {"deployments": "Deployment", "cronjobs": "CronJob", "jobs": "Job"}.get(plural)
        made = {"apiVersion": f"{group}/{version}", "kind": kind or "JobSet", **body}
        custom.create_namespaced_custom_object(group, version, NS, plural, made)
    core.patch_namespace(NS, {"metadata": {"labels": {EXEMPT: None}}})  # installed: checked now
    return real_cluster


def _template(*containers: dict, annotations: dict | None = None, restart: str = "Never") -> dict:
    made = pod("", *containers, annotations=annotations, restartPolicy=restart)
    made["metadata"].pop("name")
    made["metadata"]["labels"] = {"app": "w"}
    return made


# Workloads that make no pod here (no replicas, suspended, no JobSet controller): what is
# audited is their templates.
WORKLOADS = [
    (
        "apps",
        "v1",
        "deployments",
        {
            "metadata": {"name": "over-ask-deploy"},
            "spec": {
                "replicas": 0,
                "selector": {"matchLabels": {"app": "w"}},
                "template": _template(
                    container(gpus={"nvidia.com/gpu.shared": "2"}), restart="Always"
                ),
            },
        },
    ),
    (
        "batch",
        "v1",
        "cronjobs",
        {
            "metadata": {"name": "nightly"},
            "spec": {
                "schedule": "0 3 * * *",
                "suspend": True,
                "jobTemplate": {
                    "spec": {
                        "template": _template(
                            container(**HIDDEN),
                            annotations={"gpu-admission.io/cloud-credentials": "gone"},
                        )
                    }
                },
            },
        },
    ),
    (
        "batch",
        "v1",
        "jobs",
        {
            "metadata": {"name": "clean-job"},
            "spec": {"suspend": True, "template": _template(container(**HIDDEN))},
        },
    ),
    (
        "jobset.x-k8s.io",
        "v1alpha2",
        "jobsets",
        {
            "metadata": {"name": "tamper-set"},
            "spec": {
                "replicatedJobs": [
                    {
                        "name": "workers",
                        "template": {
                            "spec": {
                                "template": _template(
                                    container(
                                        gpus={"nvidia.com/gpu": "1"}, NVIDIA_VISIBLE_DEVICES="all"
                                    )
                                )
                            }
                        },
                    }
                ]
            },
        },
    ),
]


def run(plane: ControlPlane, output: str, namespace: str | None = None) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    args = argparse.Namespace(
        kubeconfig=plane.kubeconfig, config=None, output=output, namespace=namespace, sources=False
    )
    return audit_command(args, out, err), out.getvalue(), err.getvalue()


def test_the_audit_finds_every_policys_violators_and_nothing_else(seeded: ControlPlane) -> None:
    status, out, err = run(seeded, "json")
    assert status == EXIT_FINDINGS, err
    report = json.loads(out)
    found = {
        (f["policy"], f["kind"], f["name"], f["result"])
        for f in report["findings"]
        if f["namespace"] == NS
    }
    assert found == {
        ("gpu-visibility", "Pod", "cpu-sees-gpus", "would change"),
        ("gpu-memory-share", "Pod", "shared-no-share", "would change"),
        ("gpu-memory-share", "Pod", "over-ask", "would change"),
        ("gpu-env-guard", "Pod", "env-tamper", "would refuse"),
        ("shared-gpu-limit", "Pod", "over-ask", "would refuse"),
        ("cloud-credentials", "Pod", "wants-creds", "would change"),
        ("dataset-gate", "Pod", "waits-data", "would change"),
        ("credential-secrets", "Secret", "s3-typo", "would refuse"),
        ("dataset-pvc-label", "PersistentVolumeClaim", "coco", "would change"),
        ("dataset-pvc-label", "PersistentVolumeClaim", "bad-source", "would change"),
        ("dataset-pvc", "PersistentVolumeClaim", "bad-source", "would refuse"),
        ("dataset-pvc-label", "PersistentVolumeClaim", "coco-again", "would change"),
        ("dataset-pvc-cache", "PersistentVolumeClaim", "coco-again", "would change"),
        # Workloads, through their templates: refusals only (their pods get the changes).
        ("shared-gpu-limit", "Deployment", "over-ask-deploy", "would refuse"),
        ("cloud-credentials", "CronJob", "nightly", "would refuse"),
        ("gpu-env-guard", "JobSet", "tamper-set", "would refuse"),
    }
    nightly = next(f for f in report["findings"] if f["name"] == "nightly")
    assert nightly["message"].startswith("its pods would be refused: ")
    assert 'Secret "gone"' in nightly["message"]
    tamper = next(f for f in report["findings"] if f["name"] == "tamper-set")
    assert tamper["message"].startswith("its pods would be refused (spec.replicatedJobs[workers]):")
    # The lines users look for first, first; paginated lists, not a request per object.
    assert report["findings"][0]["policy"] == "gpu-visibility"
    visibility = next(f for f in report["findings"] if f["name"] == "cpu-sees-gpus")
    assert visibility["message"].startswith("may see GPUs it was not given: add container")
    assert "NVIDIA_VISIBLE_DEVICES=none" in visibility["message"]
    # One list per kind: pods, four Secret types, PVCs and the eight workload kinds.
    assert report["summary"]["listRequests"] <= 14
    # No Secret value is ever echoed.
    assert "wJalrXUtnFEMI" not in out and "AKIAIOSFODNN7EXAMPLE" not in out


def test_the_table_and_yaml_say_the_same(seeded: ControlPlane) -> None:
    status, table, err = run(seeded, "table")
    assert status == EXIT_FINDINGS
    assert "gpu-visibility: " in table and f"Pod {NS}/cpu-sees-gpus: may see GPUs" in table
    assert err.strip().endswith("finding(s)")
    status, text, _ = run(seeded, "yaml")
    assert status == EXIT_FINDINGS
    assert {f["name"] for f in yaml.safe_load(text)["findings"]} >= {"s3-typo", "over-ask"}


def test_a_clean_namespace_exits_zero(
    seeded: ControlPlane, api: client.ApiClient, kubectl: Kubectl
) -> None:
    apply_base(kubectl)  # exit 0 needs GPU isolation enforced: the base's visibility policy
    namespace_ready(api, "audit-clean")
    client.CoreV1Api(api).create_namespaced_pod("audit-clean", pod("ok", container(**HIDDEN)))
    status, out, _ = run(seeded, "json", namespace="audit-clean")
    assert status == EXIT_CLEAN, out
    report = json.loads(out)
    assert report["findings"] == [] and report["summary"]["objects"] == {"Pod": 1}
    # One namespace: only its objects are read.
    status, out, _ = run(seeded, "json", namespace=NS)
    assert {f["namespace"] for f in json.loads(out)["findings"]} == {NS}


def test_a_binding_its_namespace_does_not_route_is_found(
    real_cluster: ControlPlane, api: client.ApiClient, kubectl: Kubectl
) -> None:
    """Where the pods webhook routes ServiceAccount-bound credentials by namespace label (the
    base's entry for labelled namespaces), a ServiceAccount bound where the label is not "true"
    (written before the label was needed, or the label set to "false") is a finding: its pods
    start without their credentials."""
    label = "gpu-admission.io/serviceaccount-credentials"
    namespace_ready(api, "audit-bindings", labels={label: "true"})
    core = client.CoreV1Api(api)
    account = {
        "metadata": {
            "name": "trainer",
            "annotations": {"gpu-admission.io/cloud-credentials": "s3-keys"},
        }
    }
    core.create_namespaced_service_account("audit-bindings", account)
    core.patch_namespace("audit-bindings", {"metadata": {"labels": {label: "false"}}})
    apply_base(kubectl)  # GPU isolation enforced: else the audit exits 1 whatever it finds
    registration = client.AdmissionregistrationV1Api(api)
    entry = {
        "name": "serviceaccount-pods.mutate.gpu-admission.io",
        "clientConfig": {"url": "https://127.0.0.1:9/mutate/pods"},
        "rules": [  # nothing this test does is sent to it
            {
                "operations": ["CREATE"],
                "apiGroups": ["batch"],
                "apiVersions": ["v1"],
                "resources": ["cronjobs"],
            }
        ],
        "failurePolicy": "Ignore",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
    }
    made = False
    try:
        try:
            registration.create_mutating_webhook_configuration(
                {"metadata": {"name": "gpu-admission"}, "webhooks": [entry]}
            )
            made = True
        except client.ApiException as error:
            assert error.status == 409, error.body  # the base's, which has the entry
        status, out, _ = run(real_cluster, "json", namespace="audit-bindings")
        assert status == EXIT_FINDINGS, out
        (finding,) = json.loads(out)["findings"]
        assert (finding["policy"], finding["kind"], finding["name"]) == (
            "cloud-credentials",
            "ServiceAccount",
            "trainer",
        )
        assert 'namespace "audit-bindings" is not labelled' in finding["message"]
        core.patch_namespace("audit-bindings", {"metadata": {"labels": {label: "true"}}})
        status, out, _ = run(real_cluster, "json", namespace="audit-bindings")
        assert status == EXIT_CLEAN, out
    finally:
        if made:
            registration.delete_mutating_webhook_configuration("gpu-admission")
