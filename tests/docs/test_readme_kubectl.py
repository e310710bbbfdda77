"""The `kubectl create secret` commands of the README and the docs, run as written with the real
kubectl against the real kube-apiserver (kubectl sends them as protobuf), in a directory holding the
files they name; the Secrets they make are what the credential webhook accepts."""

from __future__ import annotations

import base64
import json
import shlex
import subprocess
from pathlib import Path

from kubernetes import client

from tests.docs.test_readme import EVERYTHING, code_blocks
from tests.support.keys import new_rsa_pem
from tests.world.harness import KUBECTL
from tests.world.namespaces import namespace_ready
from webhooks.credentials.aws import validate_aws
from webhooks.credentials.gcp import validate_gcp

PROVIDER = (
    "//iam.googleapis.com/projects/123/locations/global/workloadIdentityPools/k8s/providers/ml"
)


def readme_commands() -> list[list[str]]:
    """Every `kubectl create secret` of the shell blocks, continuations joined."""
    commands = []
    for block in code_blocks(EVERYTHING, "sh"):
        for line in block.replace("\\\n", " ").splitlines():
            words = shlex.split(line, comments=True)
            if words[:3] == ["kubectl", "create", "secret"] and words not in commands:
                commands.append(words)  # a command quoted in two documents runs once
    return commands


def write_named_files(directory: Path) -> None:
    pem = new_rsa_pem()
    (directory / "loader-key.json").write_text(
        json.dumps(
            {
                "type": "service_account",
                "project_id": "ml-research-1",
                "private_key_id": "0" * 40,
                "private_key": pem,
                "client_email": "loader@ml-research-1.iam.gserviceaccount.com",
                "client_id": "1" * 21,
                "token_uri": "https://oauth2.googleapis.com/token",
            }
        )
    )
    (directory / "federation.json").write_text(
        json.dumps(
            {
                "type": "external_account",
                "audience": PROVIDER,
                "subject_token_type": "urn:ietf:params:oauth:token-type:jwt",
                "token_url": "https://sts.googleapis.com/v1/token",
                "credential_source": {
                    "file": "/var/run/secrets/tokens/gcp-workload-identity/token",
                    "format": {"type": "text"},
                },
            }
        )
    )


def test_the_readmes_secret_commands_run_as_written(kube_api, kube_client, tmp_path: Path):
    core = client.CoreV1Api(kube_client)
    namespace_ready(core.api_client, "ml")
    write_named_files(tmp_path)
    commands = readme_commands()
    names = [c[4] for c in commands]
    assert {"s3-role", "gcs-federated", "gcs-reader", "s3-writer"} <= set(names)
    assert KUBECTL
    for command in commands:
        done = subprocess.run(
            [KUBECTL, "--kubeconfig", str(kube_api.kubeconfig_path), *command[1:]],
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert done.returncode == 0, (command, done.stderr)
    for name in ("s3-role", "gcs-federated"):
        secret = core.read_namespaced_secret(name, "ml")
        data = {k: base64.b64decode(v) for k, v in secret.data.items()}
        problems = validate_aws(data) if secret.type == "aws-credential" else validate_gcp(data)
        assert problems == [], (name, problems)
    assert "AWS_ROLE_ARN" in core.read_namespaced_secret("s3-role", "ml").data
