"""Keyless Google on a real node, through the installed product: a loader Job reads
fake-gcs-server with a workload identity federation file and the token the real kubelet
projects, exchanged at a Google STS stand-in on the pod network that verifies it against the
real server's discovery; and a pod asking for keyless AWS and Google credentials gets, from the
webhook and the real kubelet, exactly the tokens their SDKs read."""

from __future__ import annotations

import json
import ssl
from collections.abc import Iterator

import pytest

from tests.install.cluster import InstallCluster
from tests.install.journeys import (
    NS,
    PREFIX,
    credential_secret,
    dataset_pvc,
    finished,
    load_finished,
    loading_message,
    pod,
    volume_of,
)
from tests.install.researcher.conftest import Stores
from tests.world.real_cluster import publicly_discoverable
from tests.world.stand_ins.google_sts import GoogleSts
from tests.world.stand_ins.jwt_check import fetch_jwks, verify
from tests.world.stand_ins.objectstores import dataset_files, tree

PROVIDER = (
    "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/k8s/providers/ml"
)
TOKEN_PATH = "/var/run/secrets/tokens/gcp-ksa/token"
ROLE = "arn:aws:iam::123456789012:role/dataset-reader"
FILES = dataset_files(files=15, large_bytes=0)


@pytest.fixture(scope="module")
def sts(installed: InstallCluster, stores: Stores) -> Iterator[GoogleSts]:
    with publicly_discoverable(installed.api):
        yield stores.google_sts


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


def test_a_loader_reads_gcs_with_a_federated_token(
    installed: InstallCluster, stores: Stores, sts: GoogleSts
) -> None:
    stores.gcs.put("keyless-gcs", FILES)
    credential_secret(
        installed, "gcs-wif", "gcp-credential", {"key.json": federation_file(sts.token_url)}
    )
    claim = dataset_pvc("federated", "gs://keyless-gcs", "gcs-wif")
    created = installed.core.create_namespaced_persistent_volume_claim(NS, claim)
    # The webhook records what the loader needs: not secret, and the controller reads no Secret.
    assert created.metadata.annotations[f"{PREFIX}data-token-path"] == TOKEN_PATH
    assert created.metadata.annotations[f"{PREFIX}data-token-audience"] == "https:" + PROVIDER
    loaded = load_finished(installed, "federated")
    assert loaded[f"{PREFIX}data-load-phase"] == "Succeeded", loading_message(
        installed, "federated"
    )
    assert tree(volume_of(installed, "federated")) == FILES
    # Once for the size check's listing and once for the copy (an rclone process each).
    exchange = {
        "provider": PROVIDER,
        "sub": f"system:serviceaccount:{NS}:default",
        "aud": ["https:" + PROVIDER],
    }
    assert sts.exchanges == [exchange, exchange]


def test_a_pod_gets_the_tokens_its_sdks_read(installed: InstallCluster, sts: GoogleSts) -> None:
    credential_secret(
        installed, "gcs-wif-pod", "gcp-credential", {"key.json": federation_file(sts.token_url)}
    )
    credential_secret(installed, "s3-role-pod", "aws-credential", {"AWS_ROLE_ARN": ROLE})
    # Where the pod leaves what it read.
    out_claim = {
        "metadata": {"name": "token-out"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}},
    }
    installed.core.create_namespaced_persistent_volume_claim(NS, out_claim)
    script = (
        'cp "$AWS_WEB_IDENTITY_TOKEN_FILE" /out/aws && cp ' + TOKEN_PATH + " /out/gcp && "
        'echo "$AWS_ROLE_ARN" > /out/role && cp "$GOOGLE_APPLICATION_CREDENTIALS" /out/key.json'
    )
    trainer = pod(
        "token-reader",
        script,
        automountServiceAccountToken=False,
        container={"volumeMounts": [{"name": "out", "mountPath": "/out"}]},
        volumes=[{"name": "out", "persistentVolumeClaim": {"claimName": "token-out"}}],
    )
    trainer["metadata"]["annotations"] = {f"{PREFIX}cloud-credentials": "s3-role-pod, gcs-wif-pod"}
    installed.apply([trainer])
    finished(installed, "token-reader")
    out = volume_of(installed, "token-out")
    plane = installed.plane
    jwks = fetch_jwks(plane.url, ssl.create_default_context(cafile=str(plane.ca_path)))
    aws = verify((out / "aws").read_text(), jwks, plane.url, "sts.amazonaws.com")
    gcp = verify((out / "gcp").read_text(), jwks, plane.url, "https:" + PROVIDER)
    assert (
        aws["kubernetes.io"]["pod"]["name"] == "token-reader" == gcp["kubernetes.io"]["pod"]["name"]
    )
    assert (out / "role").read_text().strip() == ROLE
    assert json.loads((out / "key.json").read_text())["credential_source"]["file"] == TOKEN_PATH
