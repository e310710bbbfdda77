"""Keyless Azure Blob end to end: an azure-credential Secret with a client and tenant id only;
the loader pod gets a projected ServiceAccount token (audience api://AzureADTokenExchange), and
rclone's azidentity trades it at an Entra ID stand-in that checks it as a federated identity
credential does, then reads Azurite over HTTPS with the bearer token."""

from __future__ import annotations

import base64
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
from tests.world.stand_ins.azurite import ACCOUNT, Azurite, azurite_or_skip
from tests.world.stand_ins.entra_id import EntraId
from tests.world.stand_ins.objectstores import dataset_files, tree

NS = "ml"
PREFIX = "gpu-admission.io/"
TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
CLIENT = "8d2e7c1a-5b3f-4c9e-a1d2-3e4f5a6b7c8d"
STRANGER = "0b1c2d3e-4f50-4617-8293-a4b5c6d7e8f9"  # an identity with no federated credential
FILES = dataset_files(files=12, large_bytes=0)


@pytest.fixture
def az() -> Iterator[Azurite]:
    with azurite_or_skip(oauth=True) as store:
        store.put("models", FILES, prefix="llama/")
        yield store


@pytest.fixture
def entra(cluster: AdmissionCluster, tmp_path: Path, public_discovery: None) -> Iterator[EntraId]:
    context = ssl.create_default_context(cafile=str(cluster.kube_api.ca_path))
    started = EntraId(cluster.kube_api.issuer, context, tmp_path)
    started.federated[CLIENT] = f"system:serviceaccount:{NS}:default"
    yield started
    started.stop()


@pytest.fixture
async def controller(
    cluster: AdmissionCluster, az: Azurite, entra: EntraId
) -> AsyncIterator[DatasetController]:
    assert az.ca_path is not None
    trusted = az.ca_path.read_text() + entra.ca_path.read_text()
    bundle = {"metadata": {"name": "trust-bundle"}, "data": {"ca.crt": trusted}}
    cluster.core.create_namespaced_config_map(NS, bundle)
    config = make_config(trusted_ca_config_map="trust-bundle", backoff_limit=1)
    # A private cloud's settings: its blob endpoint and Entra authority (instance discovery
    # asks login.microsoftonline.com, which only knows Azure's public authorities).
    config.dataset.loader_env.update(
        {
            "RCLONE_AZUREBLOB_ENDPOINT": az.endpoint,
            "AZURE_AUTHORITY_HOST": entra.authority_host,
            "RCLONE_AZUREBLOB_DISABLE_INSTANCE_DISCOVERY": "true",
        }
    )
    started = DatasetController(cluster.api, config, identity="keyless-azure")
    await started.start()
    yield started
    await started.stop()


def keyless_secret(core: client.CoreV1Api, name: str, client_id: str) -> None:
    data = {
        "AZURE_STORAGE_ACCOUNT": ACCOUNT,
        "AZURE_CLIENT_ID": client_id,
        "AZURE_TENANT_ID": TENANT,
    }
    core.create_namespaced_secret(
        NS,
        {
            "metadata": {"name": name},
            "type": "azure-credential",
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
        },
    )


def pvc(name: str, secret: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "annotations": {
                f"{PREFIX}data-source": "az://models/llama",
                f"{PREFIX}data-credentials": secret,
            },
        },
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }


async def test_a_loader_reads_blob_storage_with_a_federated_token(
    cluster: AdmissionCluster,
    kubelet: FakeKubelet,
    entra: EntraId,
    controller: DatasetController,
) -> None:
    core = cluster.core
    keyless_secret(core, "blob-wi", CLIENT)
    keyless_secret(core, "blob-stranger", STRANGER)
    await eventually(
        lambda: cluster.view.secret(NS, "blob-wi") and cluster.view.secret(NS, "blob-stranger"),
        what="the Secrets in the view",
    )
    core.create_namespaced_persistent_volume_claim(NS, pvc("federated", "blob-wi"))
    await wait_phase(core, "federated", "Succeeded")
    assert tree(kubelet.pvc_dir(NS, "federated")) == FILES
    granted = [e for e in entra.exchanges if e.get("client") == CLIENT]
    assert granted and granted[0] == {
        "client": CLIENT,
        "tenant": TENANT,
        "sub": f"system:serviceaccount:{NS}:default",
        "aud": ["api://AzureADTokenExchange"],
    }
    # An identity without a federated credential for this ServiceAccount fails for good.
    core.create_namespaced_persistent_volume_claim(NS, pvc("stranger", "blob-stranger"))
    failed = await wait_phase(core, "stranger", "Failed")
    message = failed["status"]["conditions"][0]["message"]
    assert "Azure workload identity got no token" in message and "so it was not retried" in message
    assert "AADSTS700213" in message and f"system:serviceaccount:{NS}:default" in message
