"""Azure Blob and HTTPS sources end to end: the real webhook service admits or refuses the PVC
and the azure-credential Secret, the controller starts the loader Job, and the loader (from the
project's image where it runs here) copies from Azurite or from an HTTPS server behind a private
CA that `dataset.trusted_ca_config_map` makes it trust."""

from __future__ import annotations

import base64
import hashlib
import urllib.parse
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from controllers.dataset import DatasetController
from tests.e2e.datasets import eventually, make_config, wait_phase
from tests.world.harness import AdmissionCluster
from tests.world.kubelet.node import FakeKubelet
from tests.world.stand_ins.azurite import ACCOUNT, KEY, Azurite, azurite_or_skip
from tests.world.stand_ins.flaky_proxy import flaky_proxy
from tests.world.stand_ins.objectstores import dataset_files, tree
from tests.world.stand_ins.web_files import WebFiles, web_files

NS = "ml"
PREFIX = "gpu-admission.io/"
FILES = dataset_files(files=20, large_bytes=256 * 1024)
WEIGHTS = hashlib.sha512(b"model").digest() * 2048
WEIGHTS_SHA256 = hashlib.sha256(WEIGHTS).hexdigest()


@pytest.fixture(scope="module")
def az() -> Iterator[Azurite]:
    with azurite_or_skip() as store:
        store.put("models", FILES, prefix="llama/")
        yield store


@pytest.fixture(scope="module")
def web() -> Iterator[WebFiles]:
    with web_files() as server:
        server.put({"model.safetensors": WEIGHTS}, prefix="v1/")
        server.put(FILES, prefix="sets/coco/")
        yield server


@pytest.fixture
async def controller(
    cluster: AdmissionCluster, az: Azurite, web: WebFiles
) -> AsyncIterator[DatasetController]:
    core = cluster.core
    bundle = {"metadata": {"name": "trust-bundle"}, "data": {"ca.crt": web.ca_path.read_text()}}
    core.create_namespaced_config_map(NS, bundle)
    config = make_config(trusted_ca_config_map="trust-bundle", backoff_limit=1)
    config.dataset.loader_env["RCLONE_AZUREBLOB_ENDPOINT"] = az.endpoint
    config.dataset.loader_env["RCLONE_RETRIES_SLEEP"] = "0.1s"
    started = DatasetController(cluster.api, config, identity="sources")
    await started.start()
    yield started
    await started.stop()


def create_secret(core: client.CoreV1Api, name: str, data: dict[str, str]) -> None:
    core.create_namespaced_secret(
        NS,
        {
            "metadata": {"name": name},
            "type": "azure-credential",
            "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
        },
    )


def pvc(name: str, **annotations: str) -> dict[str, Any]:
    return {
        "metadata": {
            "name": name,
            "annotations": {PREFIX + k.replace("_", "-"): v for k, v in annotations.items()},
        },
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def refusal(call: Any) -> str:
    with pytest.raises(ApiException) as info:
        call()
    assert info.value.status in (400, 403, 422)
    return str(info.value.body)


def condition_message(core: client.CoreV1Api, name: str) -> str:
    obj = core.read_namespaced_persistent_volume_claim(name, NS)
    (condition,) = [c for c in obj.status.conditions if c.type == "Loading"]
    return str(condition.message)


async def test_az_loads_with_a_key_and_with_a_sas_token_in_shards(
    cluster: AdmissionCluster, kubelet: FakeKubelet, az: Azurite, controller: DatasetController
) -> None:
    core = cluster.core
    create_secret(core, "blob-key", {"AZURE_STORAGE_ACCOUNT": ACCOUNT, "AZURE_STORAGE_KEY": KEY})
    sas = az.sas_token("models")
    create_secret(
        core, "blob-sas", {"AZURE_STORAGE_ACCOUNT": ACCOUNT, "AZURE_STORAGE_SAS_TOKEN": sas}
    )
    await eventually(
        lambda: cluster.view.secret(NS, "blob-key") and cluster.view.secret(NS, "blob-sas"),
        what="the Secrets in the view",
    )
    core.create_namespaced_persistent_volume_claim(
        NS, pvc("by-key", data_source="az://models/llama", data_credentials="blob-key")
    )
    core.create_namespaced_persistent_volume_claim(
        NS,
        pvc(
            "by-sas",
            data_source="az://models/llama",
            data_credentials="blob-sas",
            data_load_parallelism="3",
        ),
    )
    await wait_phase(core, "by-key", "Succeeded")
    await wait_phase(core, "by-sas", "Succeeded")
    assert tree(kubelet.pvc_dir(NS, "by-key")) == FILES
    assert tree(kubelet.pvc_dir(NS, "by-sas")) == FILES
    jobs = client.BatchV1Api(cluster.api).list_namespaced_job(NS).items
    sharded = next(j for j in jobs if j.metadata.owner_references[0].name == "by-sas")
    assert sharded.spec.completions == 3 and sharded.spec.completion_mode == "Indexed"


async def test_az_refusals_and_a_wrong_key_that_fails_for_good(
    cluster: AdmissionCluster, kubelet: FakeKubelet, controller: DatasetController
) -> None:
    core = cluster.core
    # The Secret itself: two ways in, and a key that is not base64, each said without the value.
    body = refusal(
        lambda: create_secret(
            core,
            "mixed",
            {
                "AZURE_STORAGE_ACCOUNT": ACCOUNT,
                "AZURE_STORAGE_KEY": "secret-not-base64!",
                "AZURE_STORAGE_SAS_TOKEN": "sv=2024&sp=r",
            },
        )
    )
    assert "more than one way in" in body and "must be base64" in body
    assert "secret-not-base64" not in body
    # The PVC: a container name Azure refuses, and a Secret of the wrong type.
    body = refusal(
        lambda: core.create_namespaced_persistent_volume_claim(
            NS, pvc("bad", data_source="az://Models_1")
        )
    )
    assert "container name 'Models_1'" in body
    wrong = base64.b64encode(b"w" * 64).decode()
    create_secret(
        core, "blob-wrong", {"AZURE_STORAGE_ACCOUNT": ACCOUNT, "AZURE_STORAGE_KEY": wrong}
    )
    await eventually(lambda: cluster.view.secret(NS, "blob-wrong"), what="the Secret")
    core.create_namespaced_persistent_volume_claim(
        NS, pvc("denied", data_source="az://models/llama", data_credentials="blob-wrong")
    )
    await wait_phase(core, "denied", "Failed")
    message = condition_message(core, "denied")
    assert "rejected the credentials" in message and "so it was not retried" in message
    assert wrong not in message


async def test_https_file_with_its_digest_a_directory_and_the_failures(
    cluster: AdmissionCluster, kubelet: FakeKubelet, web: WebFiles, controller: DatasetController
) -> None:
    core = cluster.core
    core.create_namespaced_persistent_volume_claim(
        NS, pvc("weights", data_source=web.url("v1/model.safetensors"), data_sha256=WEIGHTS_SHA256)
    )
    core.create_namespaced_persistent_volume_claim(
        NS, pvc("coco", data_source=web.url("sets/coco/"))
    )
    core.create_namespaced_persistent_volume_claim(
        NS, pvc("tampered", data_source=web.url("v1/model.safetensors"), data_sha256="ab" * 32)
    )
    await wait_phase(core, "weights", "Succeeded")
    await wait_phase(core, "coco", "Succeeded")
    assert tree(kubelet.pvc_dir(NS, "weights")) == {"model.safetensors": WEIGHTS}
    assert tree(kubelet.pvc_dir(NS, "coco")) == FILES
    await wait_phase(core, "tampered", "Failed")
    message = condition_message(core, "tampered")
    assert WEIGHTS_SHA256 in message and "ab" * 32 in message
    assert tree(kubelet.pvc_dir(NS, "tampered")) == {}
    # Refused at admission: plain http, credentials on a web source, a digest on a directory.
    for extra, said in (
        ({"data_source": "http://127.0.0.1:9/f"}, "plain http:// is not allowed here"),
        (
            {"data_source": web.url("v1/model.safetensors"), "data_credentials": "x"},
            "read without credentials",
        ),
        ({"data_source": web.url("sets/"), "data_sha256": WEIGHTS_SHA256}, "only for one file"),
    ):
        body = refusal(
            lambda a=extra: core.create_namespaced_persistent_volume_claim(NS, pvc("no", **a))
        )
        assert said in body


async def test_an_https_outage_is_retried_by_the_job_and_then_loads(
    cluster: AdmissionCluster, kubelet: FakeKubelet, web: WebFiles, controller: DatasetController
) -> None:
    core = cluster.core
    web.put({"f.bin": b"flaky bytes"}, prefix="flaky/")
    web.fail("/flaky/", 503)  # until the first loader pod has failed
    core.create_namespaced_persistent_volume_claim(
        NS, pvc("flaky", data_source=web.url("flaky/f.bin"))
    )
    batch = client.BatchV1Api(cluster.api)

    def first_pod_failed() -> bool:
        return any(
            (j.status.failed or 0) >= 1
            for j in batch.list_namespaced_job(NS).items
            if j.metadata.owner_references[0].name == "flaky"
        )

    await eventually(first_pod_failed, what="the first loader pod to fail")
    assert (
        core.read_namespaced_persistent_volume_claim("flaky", NS).metadata.annotations or {}
    ).get(PREFIX + "data-load-phase") != "Failed"  # a transient failure does not end the load
    web.faults.clear()
    await wait_phase(core, "flaky", "Succeeded")
    assert tree(kubelet.pvc_dir(NS, "flaky")) == {"f.bin": b"flaky bytes"}
    (job,) = [
        j
        for j in client.BatchV1Api(cluster.api).list_namespaced_job(NS).items
        if j.metadata.owner_references[0].name == "flaky"
    ]
    assert job.status.failed == 1  # the transient failure used one retry, not the whole Job


async def test_a_busy_blob_service_is_retried_by_the_job_and_then_loads(
    cluster: AdmissionCluster, kubelet: FakeKubelet, az: Azurite
) -> None:
    core = cluster.core
    with flaky_proxy(az.endpoint) as proxy:
        proxy.failing.set()  # ServerBusy until the first loader pod has failed
        config = make_config(backoff_limit=1)
        account_path = urllib.parse.urlsplit(az.endpoint).path
        config.dataset.loader_env["RCLONE_AZUREBLOB_ENDPOINT"] = proxy.base + account_path
        config.dataset.loader_env["RCLONE_LOW_LEVEL_RETRIES"] = "1"
        config.dataset.loader_env["RCLONE_RETRIES"] = "1"
        controller = DatasetController(cluster.api, config, identity="busy")
        await controller.start()
        try:
            create_secret(
                core, "blob-busy", {"AZURE_STORAGE_ACCOUNT": ACCOUNT, "AZURE_STORAGE_KEY": KEY}
            )
            await eventually(lambda: cluster.view.secret(NS, "blob-busy"), what="the Secret")
            core.create_namespaced_persistent_volume_claim(
                NS, pvc("busy", data_source="az://models/llama", data_credentials="blob-busy")
            )
            batch = client.BatchV1Api(cluster.api)

            def first_pod_failed() -> bool:
                return any((j.status.failed or 0) >= 1 for j in batch.list_namespaced_job(NS).items)

            await eventually(first_pod_failed, what="the first loader pod to fail")
            assert proxy.refused > 0
            proxy.failing.clear()
            await wait_phase(core, "busy", "Succeeded")
            assert tree(kubelet.pvc_dir(NS, "busy")) == FILES
        finally:
            await controller.stop()
