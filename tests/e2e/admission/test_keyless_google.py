"""Keyless credentials through the real HTTPS service: a loader Job reads fake-gcs-server with a
workload identity federation file and its projected token, exchanged at a Google STS stand-in
that verifies it; and pods asking for keyless AWS and Google credentials get, from the webhook
and the kubelet, exactly the tokens their SDKs read."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from controllers.dataset import DatasetController
from tests.e2e.datasets import eventually, make_config, wait_phase
from tests.world.harness import AdmissionCluster
from tests.world.kubelet.node import FakeKubelet
from tests.world.stand_ins.google_sts import GoogleSts
from tests.world.stand_ins.jwt_check import fetch_jwks, verify
from tests.world.stand_ins.objectstores import GcsStore, dataset_files, gcs_store, tree

NS = "ml"
PREFIX = "gpu-admission.io/"
PROVIDER = (
    "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/k8s/providers/ml"
)
TOKEN_PATH = "/var/run/secrets/tokens/gcp-ksa/token"
ROLE = "arn:aws:iam::123456789012:role/dataset-reader"
FILES = dataset_files(files=15, large_bytes=0)


@pytest.fixture(scope="module")
def gcs() -> Iterator[GcsStore]:
    with gcs_store() as store:
        yield store


@pytest.fixture
def sts(cluster: AdmissionCluster, tmp_path: Path, public_discovery: None) -> Iterator[GoogleSts]:
    context = ssl.create_default_context(cafile=str(cluster.kube_api.ca_path))
    started = GoogleSts(cluster.kube_api.issuer, context, tmp_path)
    yield started
    started.stop()


@pytest.fixture
async def controller(
    cluster: AdmissionCluster, gcs: GcsStore, sts: GoogleSts
) -> AsyncIterator[DatasetController]:
    # The loader trusts the STS stand-in's CA as an install behind a private CA would: a
    # ConfigMap in the PVC's namespace that dataset.trusted_ca_config_map names.
    core = client.CoreV1Api(cluster.api)
    bundle = {"metadata": {"name": "trust-bundle"}, "data": {"ca.crt": sts.ca_path.read_text()}}
    core.create_namespaced_config_map(NS, bundle)
    config = make_config(gcs_endpoint=gcs.endpoint, trusted_ca_config_map="trust-bundle")
    started = DatasetController(cluster.api, config, identity="keyless")
    yield started
    await started.stop()


def create_secret(core: client.CoreV1Api, name: str, kind: str, data: dict[str, str]) -> None:
    core.create_namespaced_secret(
        NS,
        {
            "metadata": {"name": name},
            "type": kind,
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
        },
    )


def federation_file(token_url: str) -> str:
    return json.dumps(
        {
            "type": "external_account",
            "audience": PROVIDER,
            "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
            "token_url": token_url,
            "credential_source": {"file": TOKEN_PATH, "format": {"type": "text"}},
        }
    )


async def test_a_loader_reads_gcs_with_a_federated_token(
    cluster: AdmissionCluster,
    kubelet: FakeKubelet,
    gcs: GcsStore,
    sts: GoogleSts,
    controller: DatasetController,
) -> None:
    core = cluster.core
    gcs.put("keyless-gcs", FILES)
    create_secret(core, "gcs-wif", "gcp-credential", {"key.json": federation_file(sts.token_url)})
    await eventually(lambda: cluster.view.secret(NS, "gcs-wif"), what="the Secret in the view")
    await controller.start()
    body = {
        "metadata": {
            "name": "federated",
            "annotations": {
                f"{PREFIX}data-source": "gs://keyless-gcs",
                f"{PREFIX}data-credentials": "gcs-wif",
            },
        },
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    created = core.create_namespaced_persistent_volume_claim(NS, body)
    # The webhook records what the loader needs: not secret, and the controller reads no Secret.
    assert created.metadata.annotations[f"{PREFIX}data-token-path"] == TOKEN_PATH
    assert created.metadata.annotations[f"{PREFIX}data-token-audience"] == "https:" + PROVIDER
    await wait_phase(core, "federated", "Succeeded")
    assert tree(kubelet.pvc_dir(NS, "federated")) == FILES
    # Once for the size check's listing and once for the copy (an rclone process each).
    exchange = {
        "provider": PROVIDER,
        "sub": f"system:serviceaccount:{NS}:default",
        "aud": ["https:" + PROVIDER],
    }
    assert sts.exchanges == [exchange, exchange]


async def test_pods_get_the_tokens_their_sdks_read(
    cluster: AdmissionCluster, kubelet: FakeKubelet, sts: GoogleSts
) -> None:
    core = cluster.core
    create_secret(core, "gcs-wif", "gcp-credential", {"key.json": federation_file(sts.token_url)})
    create_secret(core, "s3-role", "aws-credential", {"AWS_ROLE_ARN": ROLE})
    await eventually(
        lambda: cluster.view.secret(NS, "gcs-wif") and cluster.view.secret(NS, "s3-role"),
        what="the Secrets in the view",
    )
    script = (
        'cp "$AWS_WEB_IDENTITY_TOKEN_FILE" /out/aws && cp ' + TOKEN_PATH + " /out/gcp && "
        'echo "$AWS_ROLE_ARN" > /out/role && cp "$GOOGLE_APPLICATION_CREDENTIALS" /out/key.json'
    )
    pod: dict[str, Any] = {
        "metadata": {
            "name": "trainer",
            "annotations": {f"{PREFIX}cloud-credentials": "s3-role, gcs-wif"},
        },
        "spec": {
            "restartPolicy": "Never",
            "automountServiceAccountToken": False,
            "containers": [
                {
                    "name": "main",
                    "image": "python",
                    "command": ["sh", "-c", script],
                    "volumeMounts": [{"name": "out", "mountPath": "/out"}],
                }
            ],
            "volumes": [{"name": "out", "persistentVolumeClaim": {"claimName": "out"}}],
        },
    }
    # Where the pod leaves what it read (kube-scheduler holds a pod whose claim is missing).
    out_claim = {
        "metadata": {"name": "out"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}},
    }
    core.create_namespaced_persistent_volume_claim(NS, out_claim)
    core.create_namespaced_pod(NS, pod)

    def done() -> bool:
        return core.read_namespaced_pod("trainer", NS).status.phase in ("Succeeded", "Failed")

    await eventually(done, what="the pod to finish")
    assert core.read_namespaced_pod("trainer", NS).status.phase == "Succeeded"
    out = kubelet.pvc_dir(NS, "out")
    jwks = fetch_jwks(
        cluster.kube_api.issuer, ssl.create_default_context(cafile=str(cluster.kube_api.ca_path))
    )
    aws = verify((out / "aws").read_text(), jwks, cluster.kube_api.issuer, "sts.amazonaws.com")
    gcp = verify((out / "gcp").read_text(), jwks, cluster.kube_api.issuer, "https:" + PROVIDER)
    assert aws["kubernetes.io"]["pod"]["name"] == "trainer" == gcp["kubernetes.io"]["pod"]["name"]
    assert (out / "role").read_text().strip() == ROLE
    assert json.loads((out / "key.json").read_text())["credential_source"]["file"] == TOKEN_PATH
