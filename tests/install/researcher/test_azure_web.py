"""Azure Blob and HTTPS sources on a real node, through the installed product: the webhooks admit
or refuse the PVC and the azure-credential Secret, the installed controller starts the loader
Job, and the loader copies from Azurite, or from an HTTPS server behind a private CA that
`dataset.trusted_ca_config_map` makes it trust; a busy or failing store fails a loader pod, and
the real Job controller retries it."""

from __future__ import annotations

import base64
import hashlib
import subprocess
from typing import Any

import pytest

from tests.install.cluster import InstallCluster, wait_for
from tests.install.journeys import (
    NS,
    PREFIX,
    consumers_of_a_failed_dataset_are_warned,
    consumers_of_a_loaded_dataset_run,
    encoded,
    failed_attempts,
    jobs_of,
    load_finished,
    loading_message,
    pvc_annotations,
    volume_of,
)
from tests.install.researcher.conftest import Stores
from tests.world.stand_ins.azurite import ACCOUNT, KEY, Azurite
from tests.world.stand_ins.objectstores import dataset_files, tree
from tests.world.stand_ins.web_files import WebFiles

FILES = dataset_files(files=20, large_bytes=256 * 1024)
WEIGHTS = hashlib.sha512(b"model").digest() * 2048
WEIGHTS_SHA256 = hashlib.sha256(WEIGHTS).hexdigest()
PHASE = f"{PREFIX}data-load-phase"


@pytest.fixture(scope="module")
def azure(stores: Stores) -> Azurite:
    if stores.azure is None:
        pytest.skip(stores.azure_missing)
    stores.azure.put("models", FILES, prefix="llama/")
    return stores.azure


@pytest.fixture(scope="module")
def web(stores: Stores) -> WebFiles:
    stores.web.put({"model.safetensors": WEIGHTS}, prefix="v1/")
    stores.web.put(FILES, prefix="sets/coco/")
    return stores.web


def azure_secret(
    cluster: InstallCluster, name: str, data: dict[str, str], check: bool = True
) -> subprocess.CompletedProcess[str]:
    secret = {
        "apiVersion": "v1",
        "kind": "Secret",
        "type": "azure-credential",
        "metadata": {"name": name, "namespace": NS},
        "data": encoded(data),
    }
    return cluster.apply([secret], check=check)


def dataset(
    cluster: InstallCluster, name: str, check: bool = True, **annotations: str
) -> subprocess.CompletedProcess[str]:
    claim: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "namespace": NS,
            "annotations": {PREFIX + k.replace("_", "-"): v for k, v in annotations.items()},
        },
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    return cluster.apply([claim], check=check)


def refused(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode != 0, result.stdout
    return str(result.stderr)


def test_az_loads_with_a_key_and_with_a_sas_token_in_shards(
    installed: InstallCluster, azure: Azurite
) -> None:
    azure_secret(
        installed, "blob-key", {"AZURE_STORAGE_ACCOUNT": ACCOUNT, "AZURE_STORAGE_KEY": KEY}
    )
    sas = azure.sas_token("models")
    azure_secret(
        installed, "blob-sas", {"AZURE_STORAGE_ACCOUNT": ACCOUNT, "AZURE_STORAGE_SAS_TOKEN": sas}
    )
    dataset(installed, "by-key", data_source="az://models/llama", data_credentials="blob-key")
    dataset(
        installed,
        "by-sas",
        data_source="az://models/llama",
        data_credentials="blob-sas",
        data_load_parallelism="3",
    )
    for name in ("by-key", "by-sas"):
        loaded = load_finished(installed, name)
        assert loaded[PHASE] == "Succeeded", loaded
        assert tree(volume_of(installed, name)) == FILES
    [sharded] = jobs_of(installed, "by-sas")
    assert sharded.spec.completions == 3 and sharded.spec.completion_mode == "Indexed"


def test_az_refusals_and_a_wrong_key_that_fails_for_good(
    installed: InstallCluster, azure: Azurite
) -> None:
    # The Secret itself: two ways in, and a key that is not base64, each said without the value.
    said = refused(
        azure_secret(
            installed,
            "mixed",
            {
                "AZURE_STORAGE_ACCOUNT": ACCOUNT,
                "AZURE_STORAGE_KEY": "secret-not-base64!",
                "AZURE_STORAGE_SAS_TOKEN": "sv=2024&sp=r",
            },
            check=False,
        )
    )
    assert "more than one way in" in said and "must be base64" in said
    assert "secret-not-base64" not in said
    # The PVC: a container name Azure refuses.
    said = refused(dataset(installed, "bad", check=False, data_source="az://Models_1"))
    assert "container name 'Models_1'" in said
    wrong = base64.b64encode(b"w" * 64).decode()
    azure_secret(
        installed, "blob-wrong", {"AZURE_STORAGE_ACCOUNT": ACCOUNT, "AZURE_STORAGE_KEY": wrong}
    )
    dataset(installed, "denied", data_source="az://models/llama", data_credentials="blob-wrong")
    failed = load_finished(installed, "denied")
    assert failed[PHASE] == "Failed", failed
    message = loading_message(installed, "denied")
    assert "rejected the credentials" in message and "so it was not retried" in message
    assert wrong not in message


def test_a_busy_blob_service_is_retried_by_the_job_and_then_loads(
    installed: InstallCluster, azure: Azurite, stores: Stores
) -> None:
    busy = stores.busy_azure
    assert busy is not None
    azure.put("busy", FILES)
    azure_secret(
        installed, "blob-busy", {"AZURE_STORAGE_ACCOUNT": ACCOUNT, "AZURE_STORAGE_KEY": KEY}
    )
    busy.failing.set()  # ServerBusy until the first loader pod has failed
    try:
        dataset(installed, "busy", data_source="az://busy", data_credentials="blob-busy")
        wait_for(lambda: failed_attempts(installed, "busy") >= 1, "the first loader pod to fail")
        assert busy.refused > 0
    finally:
        busy.failing.clear()
    loaded = load_finished(installed, "busy")
    assert loaded[PHASE] == "Succeeded", loaded
    assert tree(volume_of(installed, "busy")) == FILES


def test_https_file_with_its_digest_a_directory_and_the_failures(
    installed: InstallCluster, web: WebFiles
) -> None:
    files = web
    dataset(
        installed,
        "weights",
        data_source=files.url("v1/model.safetensors"),
        data_sha256=WEIGHTS_SHA256,
    )
    dataset(installed, "coco", data_source=files.url("sets/coco/"))
    dataset(
        installed, "tampered", data_source=files.url("v1/model.safetensors"), data_sha256="ab" * 32
    )
    for name in ("weights", "coco"):
        loaded = load_finished(installed, name)
        assert loaded[PHASE] == "Succeeded", loaded
    assert tree(volume_of(installed, "weights")) == {"model.safetensors": WEIGHTS}
    assert tree(volume_of(installed, "coco")) == FILES
    failed = load_finished(installed, "tampered")
    assert failed[PHASE] == "Failed", failed
    message = loading_message(installed, "tampered")
    assert WEIGHTS_SHA256 in message and "ab" * 32 in message
    assert tree(volume_of(installed, "tampered")) == {}
    # Its pods: the webhook and the controller agree on what a digest-checked file's load is.
    consumers_of_a_loaded_dataset_run(installed, "weights")
    consumers_of_a_failed_dataset_are_warned(installed, "tampered")
    # Refused at admission: plain http, credentials on a web source, a digest on a directory.
    for extra, reason in (
        ({"data_source": "http://127.0.0.1:9/f"}, "plain http:// is not allowed here"),
        (
            {"data_source": files.url("v1/model.safetensors"), "data_credentials": "x"},
            "read without credentials",
        ),
        ({"data_source": files.url("sets/"), "data_sha256": WEIGHTS_SHA256}, "only for one file"),
    ):
        assert reason in refused(dataset(installed, "no", check=False, **extra))


def test_an_https_outage_is_retried_by_the_job_and_then_loads(
    installed: InstallCluster, web: WebFiles
) -> None:
    files = web
    files.put({"f.bin": b"flaky bytes"}, prefix="flaky/")
    files.fail("/flaky/", 503)  # until the first loader pod has failed
    try:
        dataset(installed, "flaky-web", data_source=files.url("flaky/f.bin"))
        wait_for(lambda: failed_attempts(installed, "flaky-web") >= 1, "the first pod to fail")
        # A transient failure does not end the load.
        assert pvc_annotations(installed, "flaky-web").get(PHASE) != "Failed"
    finally:
        files.faults.clear()
    loaded = load_finished(installed, "flaky-web")
    assert loaded[PHASE] == "Succeeded", loaded
    assert tree(volume_of(installed, "flaky-web")) == {"f.bin": b"flaky bytes"}
    [job] = jobs_of(installed, "flaky-web")
    assert job.status.failed == 1  # the transient failure used one retry, not the whole Job
