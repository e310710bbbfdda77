"""Bad dataset PVCs refused by the real webhooks, as kube-apiserver and kubectl show them (a
source that cannot be, a Secret that is not there, shards on a volume only one node mounts). The
journeys of datasets with pods (consumers gated mid-load, then given the data read-only; a
failed load warning its consumers; a source edited mid-load) run on the real node, through the
installed product: tests/install/researcher/."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.world.harness import AdmissionCluster

NS = "ml"
PREFIX = "gpu-admission.io/"


def dataset_pvc(name: str, source: str, credentials: str | None = None) -> dict[str, Any]:
    # No label: the PVC webhook adds it.
    annotations = {f"{PREFIX}data-source": source}
    if credentials:
        annotations[f"{PREFIX}data-credentials"] = credentials
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "annotations": annotations},
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def create(core: client.CoreV1Api, kind: str, body: dict[str, Any]) -> dict[str, Any]:
    create_call = getattr(core, f"create_namespaced_{kind}")
    return json.loads(create_call(NS, body, _preload_content=False).data)


def kubectl_create(cluster: AdmissionCluster, manifest: dict[str, Any]) -> str:
    """kubectl's error output for a refused create (it must be refused)."""
    result = cluster.kubectl("create", "-f", "-", stdin=json.dumps(manifest))
    assert result.returncode != 0, result.stdout
    return result.stderr


async def test_a_bad_dataset_pvc_is_refused_with_what_to_fix(cluster: AdmissionCluster) -> None:
    with pytest.raises(ApiException) as refused:
        await asyncio.to_thread(
            create,
            cluster.core,
            "persistent_volume_claim",
            dataset_pvc("broken", "s3://Not_A_Bucket/x"),
        )
    message = json.loads(refused.value.body)["message"]
    assert message.startswith('admission webhook "pvcs.validate.gpu-admission.io" denied')
    assert "Not_A_Bucket" in message and "lowercase" in message

    # What a researcher sees from kubectl when the credential Secret does not exist.
    shown = await asyncio.to_thread(
        kubectl_create, cluster, dataset_pvc("private", "s3://data", credentials="no-such-keys")
    )
    # No reason in the webhook's Status, so kubectl shows none (as with kube-apiserver).
    assert shown.startswith(
        'Error from server: error when creating "STDIN": admission webhook '
        '"pvcs.validate.gpu-admission.io" denied the request: gpu-admission.io/data-credentials: '
        "Secret 'no-such-keys' was not found in namespace 'ml'"
    ), shown
    assert "create it (type aws-credential) before the PVC" in shown
    with pytest.raises(ApiException) as absent:
        await asyncio.to_thread(cluster.core.read_namespaced_persistent_volume_claim, "private", NS)
    assert absent.value.status == 404


async def test_a_read_write_once_pvc_asking_for_shards_is_refused(
    cluster: AdmissionCluster,
) -> None:
    claim = dataset_pvc("rwo", "s3://some-bucket/x")
    claim["metadata"]["annotations"][f"{PREFIX}data-load-parallelism"] = "4"
    claim["spec"]["accessModes"] = ["ReadWriteOnce"]
    shown = await asyncio.to_thread(kubectl_create, cluster, claim)
    assert "denied the request" in shown
    assert "4 loader shards" in shown and "ReadWriteMany" in shown
