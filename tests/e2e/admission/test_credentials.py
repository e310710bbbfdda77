"""Cloud credentials end to end: kubectl, the real kube-apiserver calling the real HTTPS webhook
service with its informer-fed view, and the played kubelet running the pod's command.

Secrets are created with kubectl as a user would (accepted, or denied with the webhook's words);
then a pod whose ServiceAccount is bound to the gcp-credential Secret and which names the
aws-credential Secret itself runs, and prints what it received.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from kubernetes import client, watch

from tests.support.keys import new_rsa_pem
from tests.world.harness import AdmissionCluster, KubectlResult
from tests.world.kubelet.node import FakeKubelet

NS = "ml"
WAIT_SECONDS = 30
CLIENT_EMAIL = "loader@ml-platform-demo.iam.gserviceaccount.com"
KEY_ID = "AKIAIOSFODNN7EXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


def create_secret(cluster: AdmissionCluster, *args: str) -> KubectlResult:
    """`kubectl create secret generic ARGS`, as the documentation shows."""
    return cluster.kubectl("create", "secret", "generic", *args)


def _key_file(path: Path) -> Path:
    pem = new_rsa_pem()
    document = {
        "type": "service_account",
        "project_id": "ml-platform-demo",
        "private_key_id": "3f1c2a9b7e6d5c4b3a2918f7e6d5c4b3a2918f7e",
        "private_key": pem,
        "client_email": CLIENT_EMAIL,
        "client_id": "104729384756102938475",
        "token_uri": "https://oauth2.googleapis.com/token",
    }
    path.write_text(json.dumps(document))
    return path


def test_kubectl_sees_credential_secrets_accepted_and_denied(
    cluster: AdmissionCluster, tmp_path: Path
) -> None:
    key_file = _key_file(tmp_path / "key.json")
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


def test_pod_receives_credentials_from_its_annotation_and_service_account(
    cluster: AdmissionCluster, kubelet: FakeKubelet, tmp_path: Path
) -> None:
    key_file = _key_file(tmp_path / "key.json")
    for args in (
        [f"--from-file=key.json={key_file}", "--type=gcp-credential", "gcs-reader"],
        [
            "--type=aws-credential",
            f"--from-literal=AWS_ACCESS_KEY_ID={KEY_ID}",
            f"--from-literal=AWS_SECRET_ACCESS_KEY={SECRET_KEY}",
            "--from-literal=AWS_REGION=us-west-2",
            "s3-writer",
        ],
    ):
        code, _, err = create_secret(cluster, *args)
        assert code == 0, err
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": "trainer",
            "annotations": {"gpu-admission.io/cloud-credentials": "gcs-reader"},
        },
    }
    code, _, err = cluster.kubectl("create", "-f", "-", stdin=json.dumps(account))
    assert code == 0, err

    # The service edge resolves cache misses for the objects the policy names up front: the
    # ServiceAccount and the pod's own Secrets. A Secret named only by the ServiceAccount must
    # already be in the informer cache, so wait for it as a cluster would have by then.
    gcp_informer = cluster.view.secret_informers[0]  # type=gcp-credential
    cluster.wait_until(
        lambda: gcp_informer.get(f"{NS}/gcs-reader") is not None, "the Secret in the cache"
    )

    script = (
        "import json, os\n"
        "path = os.environ['GOOGLE_APPLICATION_CREDENTIALS']\n"
        "print(path)\n"
        "print(json.load(open(path))['client_email'])\n"
        "for name in sorted(n for n in os.environ if n.startswith('AWS_')):\n"
        "    print(name + '=' + os.environ[name])\n"
    )
    pod = {
        "metadata": {
            "name": "data-prep",
            "annotations": {"gpu-admission.io/cloud-credentials": "s3-writer"},
        },
        "spec": {
            "serviceAccountName": "trainer",
            "restartPolicy": "Never",
            "containers": [
                {
                    "name": "prep",
                    "image": "python:3.12-slim",
                    "command": [sys.executable, "-c", script],
                }
            ],
        },
    }
    cluster.core.create_namespaced_pod(NS, pod)
    finished = _wait_finished(cluster.core, "data-prep")
    log = kubelet.logs(NS, "data-prep", "prep")
    assert finished.status.phase == "Succeeded", log
    assert log.splitlines() == [
        "/var/run/secrets/gcp/gcs-reader/key.json",
        CLIENT_EMAIL,
        f"AWS_ACCESS_KEY_ID={KEY_ID}",
        "AWS_DEFAULT_REGION=us-west-2",
        "AWS_REGION=us-west-2",
        f"AWS_SECRET_ACCESS_KEY={SECRET_KEY}",
    ]
    # The stored pod holds references only, never a value.
    stored = json.dumps(cluster.api.sanitize_for_serialization(finished.spec))
    assert SECRET_KEY not in stored and KEY_ID not in stored and "PRIVATE KEY" not in stored


def _wait_finished(core: client.CoreV1Api, name: str) -> client.V1Pod:
    stream = watch.Watch()
    for event in stream.stream(
        core.list_namespaced_pod,
        NS,
        field_selector=f"metadata.name={name}",
        timeout_seconds=WAIT_SECONDS,
    ):
        pod = event["object"]
        if pod.status and pod.status.phase in ("Succeeded", "Failed"):
            stream.stop()
            return pod
    raise AssertionError(f"pod {name} did not finish within {WAIT_SECONDS} s")


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
