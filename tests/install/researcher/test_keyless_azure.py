"""Keyless Azure Blob on a real node, through the installed product: an azure-credential Secret
with a client and tenant id only; the real kubelet projects the loader pod's ServiceAccount token
(audience api://AzureADTokenExchange), and rclone's azidentity trades it at an Entra ID stand-in
on the pod network that checks it as a federated identity credential does, then reads Azurite
over HTTPS with the bearer token; an identity with no federated credential fails for good."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.install.cluster import InstallCluster
from tests.install.journeys import (
    NS,
    PREFIX,
    credential_secret,
    dataset_pvc,
    load_finished,
    loading_message,
    volume_of,
)
from tests.install.researcher.conftest import Stores
from tests.world.real_cluster import publicly_discoverable
from tests.world.stand_ins.azurite import ACCOUNT
from tests.world.stand_ins.entra_id import EntraId
from tests.world.stand_ins.objectstores import dataset_files, tree

TENANT = "72f988bf-86f1-41af-91ab-2d7cd011db47"
CLIENT = "8d2e7c1a-5b3f-4c9e-a1d2-3e4f5a6b7c8d"
STRANGER = "0b1c2d3e-4f50-4617-8293-a4b5c6d7e8f9"  # an identity with no federated credential
SUBJECT = f"system:serviceaccount:{NS}:default"
FILES = dataset_files(files=12, large_bytes=0)
PHASE = f"{PREFIX}data-load-phase"


@pytest.fixture(scope="module")
def entra(installed: InstallCluster, stores: Stores) -> Iterator[EntraId]:
    if stores.keyless_azure is None:
        pytest.skip(stores.azure_missing)
    stores.keyless_azure.put("keyless-models", FILES, prefix="llama/")
    stores.entra.federated[CLIENT] = SUBJECT
    with publicly_discoverable(installed.api):
        yield stores.entra


def keyless_secret(cluster: InstallCluster, name: str, client_id: str) -> None:
    keys = {
        "AZURE_STORAGE_ACCOUNT": ACCOUNT,
        "AZURE_CLIENT_ID": client_id,
        "AZURE_TENANT_ID": TENANT,
    }
    credential_secret(cluster, name, "azure-credential", keys)


def test_a_loader_reads_blob_storage_with_a_federated_token(
    installed: InstallCluster, entra: EntraId
) -> None:
    keyless_secret(installed, "blob-wi", CLIENT)
    keyless_secret(installed, "blob-stranger", STRANGER)
    installed.apply([dataset_pvc("blob-federated", "az://keyless-models/llama", "blob-wi")])
    loaded = load_finished(installed, "blob-federated")
    assert loaded[PHASE] == "Succeeded", loading_message(installed, "blob-federated")
    assert tree(volume_of(installed, "blob-federated")) == FILES
    granted = [e for e in entra.exchanges if e.get("client") == CLIENT]
    assert granted and granted[0] == {
        "client": CLIENT,
        "tenant": TENANT,
        "sub": SUBJECT,
        "aud": ["api://AzureADTokenExchange"],
    }
    # An identity without a federated credential for this ServiceAccount fails for good.
    installed.apply([dataset_pvc("blob-stranger", "az://keyless-models/llama", "blob-stranger")])
    failed = load_finished(installed, "blob-stranger")
    assert failed[PHASE] == "Failed", failed
    message = loading_message(installed, "blob-stranger")
    assert "Azure workload identity got no token" in message and "so it was not retried" in message
    assert "AADSTS700213" in message and SUBJECT in message
