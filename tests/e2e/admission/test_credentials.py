"""Credential Secrets end to end: kubectl, the real kube-apiserver calling the real HTTPS webhook
service with its informer-fed view. Secrets are created with kubectl as a user would (accepted,
or denied with the webhook's words); a pod naming a Secret that is not there is refused. A pod
given its credentials and running runs on the real node, through the installed product:
tests/install/researcher/test_pod_credentials.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from kubernetes import client

from tests.support.keys import service_account_key_file
from tests.world.harness import AdmissionCluster, KubectlResult

NS = "ml"
WAIT_SECONDS = 30
CLIENT_EMAIL = "loader@ml-platform-demo.iam.gserviceaccount.com"
KEY_ID = "AKIAIOSFODNN7EXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def create_secret(cluster: AdmissionCluster, *args: str) -> KubectlResult:
    """`kubectl create secret generic ARGS`, as the documentation shows."""
    return cluster.kubectl("create", "secret", "generic", *args)


def test_kubectl_sees_credential_secrets_accepted_and_denied(
    cluster: AdmissionCluster, tmp_path: Path
) -> None:
    key_file = service_account_key_file(tmp_path / "key.json", CLIENT_EMAIL)
    code, out, err = create_secret(
        cluster,
        "gcs-reader",
        "--type=gcp-credential",
        f"--from-file=key.json={key_file}",
    )
    assert (code, out.strip()) == (0, "secret/gcs-reader created"), err

    code, out, err = create_secret(
        cluster,
        "s3-typo",
        "--type=aws-credential",
        f"--from-literal=AWS_ACCESS_KEY_ID={KEY_ID}",
        f"--from-literal=AWS_SECRET_KEY={SECRET_KEY}",
    )
    assert code == 1
    # kubectl's own words for a create it made itself.
    assert err.startswith(
        'error: failed to create secret admission webhook "secrets.validate.gpu-admission.io" '
        'denied the request: Secret "s3-typo" is not a valid aws-credential: '
    ), err
    assert 'key "AWS_SECRET_KEY": is not an aws-credential key; did you mean ' in err
    assert "AWS_SECRET_ACCESS_KEY" in err
    assert SECRET_KEY not in err

    broken = tmp_path / "broken.json"
    broken.write_text(key_file.read_text()[:900])
    code, _, err = create_secret(
        cluster,
        "gcs-broken",
        "--type=gcp-credential",
        f"--from-file=key.json={broken}",
    )
    assert code == 1
    assert 'key "key.json": is not valid JSON' in err

    code, out, err = cluster.kubectl("get", "secrets", "-o", "name")
    assert out.split() == ["secret/gcs-reader"], err


def test_pod_naming_a_missing_secret_is_refused(cluster: AdmissionCluster) -> None:
    pod = {
        "metadata": {
            "name": "orphan",
            "annotations": {"gpu-admission.io/cloud-credentials": "nowhere"},
        },
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }
    with pytest.raises(client.ApiException) as refused:
        cluster.core.create_namespaced_pod(NS, pod)
    status = json.loads(refused.value.body)
    assert status["code"] == 403
    assert status["message"].startswith(
        'admission webhook "pods.mutate.gpu-admission.io" denied the request: '
        'cloud credentials cannot be added: Secret "nowhere"'
    )
