"""kubectl's protobuf request bodies reach the emulator as kube-apiserver reads them: the real
kubectl creates namespaces, Secrets from files, ConfigMaps and ServiceAccounts."""

from __future__ import annotations

import base64
import subprocess
from pathlib import Path

import pytest
from kubernetes import client

from tests.world.harness import KUBECTL
from tests.world.kubeapi.errors import StatusError
from tests.world.kubeapi.protobuf import read_body


def kubectl(kubeapi, *args: str) -> subprocess.CompletedProcess[str]:
    assert KUBECTL
    command = [KUBECTL, "--kubeconfig", str(kubeapi.kubeconfig_path), *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)


def test_kubectl_creates_what_it_sends_as_protobuf(kubeapi, kube_client, tmp_path: Path):
    core = client.CoreV1Api(kube_client)
    assert kubectl(kubeapi, "create", "namespace", "ml").returncode == 0
    key = tmp_path / "key.json"
    key.write_bytes(b'{"type": "external_account"}\n')
    done = kubectl(
        kubeapi, "create", "secret", "generic", "gcs", "-n", "ml",
        "--type=gcp-credential", f"--from-file=key.json={key}",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    secret = core.read_namespaced_secret("gcs", "ml")
    assert secret.type == "gcp-credential"
    assert base64.b64decode(secret.data["key.json"]) == key.read_bytes()
    done = kubectl(
        kubeapi, "create", "secret", "generic", "s3", "-n", "ml", "--type=aws-credential",
        "--from-literal=AWS_ROLE_ARN=arn:aws:iam::123456789012:role/r",
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert core.read_namespaced_secret("s3", "ml").type == "aws-credential"
    assert (
        kubectl(kubeapi, "create", "configmap", "c", "-n", "ml", "--from-literal=a=b").returncode
        == 0
    )
    assert core.read_namespaced_config_map("c", "ml").data == {"a": "b"}
    assert kubectl(kubeapi, "create", "serviceaccount", "loader", "-n", "ml").returncode == 0
    assert core.read_namespaced_service_account("loader", "ml").metadata.name == "loader"


def test_a_body_it_cannot_read_is_a_415():
    with pytest.raises(StatusError) as caught:
        read_body("application/vnd.kubernetes.protobuf", b"k8s\x00\x0a\x0c\x0a\x02v1\x12\x06Widget")
    assert caught.value.code == 415
    assert "the body of the request was in an unknown format" in str(caught.value.message)
