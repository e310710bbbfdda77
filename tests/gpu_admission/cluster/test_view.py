"""The informer-fed ClusterView and its miss resolver, against the real kube-apiserver (through
the fault proxy, which counts the requests)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
from kubernetes import client

from gpu_admission.cluster.live_view import ClusterLookupError, LiveClusterView
from gpu_admission.cluster.view import NodeInfo, ObjectRef, PVCInfo, SecretInfo
from gpu_admission.config.model import Config
from gpu_admission.names import AWS_CREDENTIAL_TYPE, GCP_CREDENTIAL_TYPE, Names
from tests.gpu_admission.cluster.informer_helpers import FAST_BACKOFF, WAIT, eventually
from tests.world.namespaces import namespace_ready

NAMES = Names()
SECRET_VALUE = "TOP-SECRET-VALUE-do-not-keep"
SECRETS_WATCH = r"^/api/v1/secrets$"


def b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def make_secret(core: client.CoreV1Api, name: str, secret_type: str, *keys: str) -> None:
    body = {
        "metadata": {"name": name},
        "type": secret_type,
        "data": {key: b64(f"{SECRET_VALUE}-{key}") for key in keys},
    }
    core.create_namespaced_secret("default", body)


def make_pvc(core: client.CoreV1Api, name: str, dataset: bool) -> None:
    labels = {NAMES.data_load_label: "true"} if dataset else {}
    body = {
        "metadata": {
            "name": name,
            "labels": labels,
            "annotations": {NAMES.data_source: "s3://bucket/prefix", "team": "vision"},
        },
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    core.create_namespaced_persistent_volume_claim("default", body)


def make_node(core: client.CoreV1Api, name: str) -> None:
    core.create_node({"metadata": {"name": name, "labels": {"nvidia.com/gpu.replicas": "4"}}})
    core.patch_node_status(name, {"status": {"allocatable": {"nvidia.com/gpu.shared": "4"}}})


SA_NAMESPACE = "view-bound"


def view_for(kube_client: client.ApiClient, **kwargs: Any) -> LiveClusterView:
    return LiveClusterView(kube_client, Config(), backoff=FAST_BACKOFF, **kwargs)


@pytest.fixture
def core(kube_client: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube_client)


@pytest.fixture
def populated(core: client.CoreV1Api) -> client.CoreV1Api:
    make_node(core, "gpu-1")
    make_secret(core, "gcp", GCP_CREDENTIAL_TYPE, "key.json")
    make_secret(core, "aws", AWS_CREDENTIAL_TYPE, "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")
    make_secret(core, "opaque", "Opaque", "password")
    # Bound to credentials where bindings belong (a namespace labelled for them: the base's
    # guard refuses one elsewhere, where another test has installed it on this server).
    namespace_ready(
        core.api_client, SA_NAMESPACE, labels={NAMES.serviceaccount_credentials_label: "true"}
    )
    core.create_namespaced_service_account(
        SA_NAMESPACE,
        {
            "metadata": {
                "name": "trainer",
                "annotations": {NAMES.cloud_credentials: "gcp", "big/other": "x" * 1000},
            }
        },
    )
    make_pvc(core, "dataset", dataset=True)
    make_pvc(core, "scratch", dataset=False)
    return core


def start_view(view: LiveClusterView) -> None:
    view.start()
    eventually(lambda: view.ready() == [])


@pytest.fixture
def stopping() -> Iterator[list[LiveClusterView]]:
    views: list[LiveClusterView] = []
    yield views
    for view in views:
        view.stop()
    for view in views:
        assert view.join(WAIT)


@pytest.fixture
async def view(
    kube_client: client.ApiClient, populated: client.CoreV1Api
) -> AsyncIterator[LiveClusterView]:
    started = view_for(kube_client)
    await asyncio.to_thread(start_view, started)
    yield started
    started.stop()
    assert await asyncio.to_thread(started.join, WAIT)


def test_not_ready_until_every_informer_has_listed(kube_client, kube_api, stopping):
    view = view_for(kube_client)
    assert (
        len(view.ready()) == 11
    )  # nothing started yet (nodes, 4 secret kinds, SAs, PVCs, 3 DRA kinds, snapshots)
    kube_api.faults.fail("GET", r"^/api/v1/serviceaccounts$", code=500, times=None)
    stopping.append(view)
    view.start()
    eventually(
        lambda: (
            view.ready()
            == [
                "informer serviceaccounts (HTTP 500 Internal Server Error: "
                "Internal error occurred: injected fault)"
            ]
        )
    )
    kube_api.faults.clear()
    eventually(lambda: view.ready() == [])


async def test_view_serves_records_from_the_informers(view):
    assert list(view.nodes()) == [
        NodeInfo("gpu-1", {"nvidia.com/gpu.replicas": "4"}, {"nvidia.com/gpu.shared": "4"})
    ]
    assert view.node("gpu-1") is not None and view.node("missing") is None
    assert view.secret("default", "gcp") == SecretInfo(
        "default", "gcp", GCP_CREDENTIAL_TYPE, frozenset({"key.json"})
    )
    assert view.secret("default", "aws").keys == {"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"}
    # Only credential types are watched: another type is unknown until a miss fetches it.
    assert view.secret("default", "opaque") is None
    # Annotations outside the prefix are not kept.
    assert view.service_account(SA_NAMESPACE, "trainer").annotations == {
        NAMES.cloud_credentials: "gcp"
    }
    assert view.service_account("default", "default") is not None
    assert view.pvc("default", "dataset").annotations == {NAMES.data_source: "s3://bucket/prefix"}
    assert view.pvc("default", "dataset").labels == {NAMES.data_load_label: "true"}
    # Every PVC is watched (an ordinary PVC must not cost a miss); prefixed annotations only.
    assert view.pvc("default", "scratch").annotations == {NAMES.data_source: "s3://bucket/prefix"}
    assert view.pvc("default", "scratch").labels == {}


async def test_view_keeps_no_secret_values(view):
    await view.resolve([ObjectRef("Secret", "default", "opaque")])  # the GET path too
    stored = [v for informer in view.secret_informers for v in informer.values()]
    stored.append(view.secret("default", "opaque"))
    assert {s.name for s in stored} == {"gcp", "aws", "opaque"}
    for record in stored:
        assert isinstance(record, SecretInfo)
        assert set(vars(record) if hasattr(record, "__dict__") else record.__slots__) == {
            "namespace",
            "name",
            "type",
            "keys",
            "token",  # a keyless Google file's token path and audience: none here
        }
        assert record.token is None
        assert SECRET_VALUE not in repr(record)
        assert b64(SECRET_VALUE)[:12] not in repr(record)


async def test_changes_reach_the_view(view, core):
    await asyncio.to_thread(make_secret, core, "gcp-2", GCP_CREDENTIAL_TYPE, "key.json")
    await asyncio.to_thread(core.delete_namespaced_secret, "aws", "default")
    await asyncio.to_thread(
        eventually,
        lambda: (
            view.secret("default", "gcp-2") is not None and view.secret("default", "aws") is None
        ),
    )


async def test_resolve_waits_for_the_informer_when_the_object_was_just_created(
    view, core, kube_api
):
    kube_api.faults.reset_counts()
    await asyncio.to_thread(make_secret, core, "fresh", GCP_CREDENTIAL_TYPE, "key.json")
    await asyncio.to_thread(
        core.create_namespaced_service_account, "default", {"metadata": {"name": "fresh-sa"}}
    )
    await view.resolve(
        [
            ObjectRef("Secret", "default", "fresh"),
            ObjectRef("ServiceAccount", "default", "fresh-sa"),
        ]
    )
    assert view.secret("default", "fresh").type == GCP_CREDENTIAL_TYPE
    assert view.service_account("default", "fresh-sa") is not None
    assert kube_api.faults.request_count("GET", r"/fresh") == 0


async def test_resolve_falls_back_to_one_get_when_the_informer_lags(view, core, kube_api):
    # Hold the credential Secret informers off: their watches drop and cannot reconnect.
    kube_api.faults.fail("GET", SECRETS_WATCH, code=500, times=None)
    kube_api.faults.drop_watches()
    await asyncio.to_thread(make_secret, core, "lagging", AWS_CREDENTIAL_TYPE, "AWS_ACCESS_KEY_ID")
    kube_api.faults.reset_counts()

    await view.resolve([ObjectRef("Secret", "default", "lagging")])

    found = view.secret("default", "lagging")
    assert found == SecretInfo(
        "default", "lagging", AWS_CREDENTIAL_TYPE, frozenset({"AWS_ACCESS_KEY_ID"})
    )
    assert kube_api.faults.request_count("GET", r"/namespaces/default/secrets/lagging$") == 1


async def test_a_secret_of_another_type_is_fetched_once_and_remembered(view, kube_api):
    kube_api.faults.reset_counts()
    ref = ObjectRef("Secret", "default", "opaque")
    await view.resolve([ref])
    await view.resolve([ref])
    assert view.secret("default", "opaque") == SecretInfo(
        "default", "opaque", "Opaque", frozenset({"password"})
    )
    assert kube_api.faults.request_count("GET", r"/secrets/opaque$") == 1


async def test_a_pvc_without_the_dataset_label_is_cached_so_it_costs_no_get(view, kube_api):
    kube_api.faults.reset_counts()
    await view.resolve([ObjectRef("PersistentVolumeClaim", "default", "scratch")])
    assert view.pvc("default", "scratch") == PVCInfo(
        "default",
        "scratch",
        uid=view.pvc("default", "scratch").uid,
        annotations={NAMES.data_source: "s3://bucket/prefix"},
        labels={},
    )
    assert kube_api.faults.request_count("GET", r"/persistentvolumeclaims/scratch$") == 0


async def test_a_missing_object_is_decided_missing(view, kube_api):
    kube_api.faults.reset_counts()
    await view.resolve([ObjectRef("Secret", "default", "nope")])
    assert view.secret("default", "nope") is None
    assert kube_api.faults.request_count("GET", r"/secrets/nope$") == 1


async def test_concurrent_misses_of_one_object_share_one_get(view, kube_api):
    kube_api.faults.reset_counts()
    kube_api.faults.delay("GET", r"/secrets/opaque$", 0.3)
    ref = ObjectRef("Secret", "default", "opaque")
    await asyncio.gather(*(view.resolve([ref]) for _ in range(10)))
    assert view.secret("default", "opaque") is not None
    assert kube_api.faults.request_count("GET", r"/secrets/opaque$") == 1


async def test_a_failed_get_is_an_error_not_a_missing_object(view, kube_api):
    kube_api.faults.fail("GET", r"/secrets/opaque$", code=500, times=None)
    with pytest.raises(ClusterLookupError) as caught:
        await view.resolve([ObjectRef("Secret", "default", "opaque")])
    message = str(caught.value)
    assert "Secret default/opaque" in message and "HTTP 500" in message and "retry" in message


async def test_lookups_of_cached_objects_make_no_api_calls(view, kube_api):
    refs = [
        ObjectRef("Secret", "default", "gcp"),
        ObjectRef("Secret", "default", "aws"),
        ObjectRef("ServiceAccount", SA_NAMESPACE, "trainer"),
        ObjectRef("PersistentVolumeClaim", "default", "dataset"),
    ]
    kube_api.faults.reset_counts()
    for i in range(1000):
        assert view.node("gpu-1") is not None
        assert len(list(view.nodes())) == 1
        assert view.secret("default", "gcp" if i % 2 else "aws") is not None
        assert view.service_account(SA_NAMESPACE, "trainer") is not None
        assert view.pvc("default", "dataset") is not None
        await view.resolve(refs)
    # A lookup that missed the cache would GET the object by name. (The informers' own watches
    # may still be opening on a busy machine; those are collection paths.)
    named = r"/(nodes|secrets|serviceaccounts|persistentvolumeclaims)/[^/]+$"
    assert kube_api.faults.request_count("GET", named) == 0
    assert kube_api.faults.request_count() == kube_api.faults.request_count("GET")


async def test_the_generation_moves_on_any_change_and_on_a_fetched_miss(view, core):
    before = view.generation()
    await asyncio.to_thread(make_secret, core, "new-one", AWS_CREDENTIAL_TYPE, "AWS_ROLE_ARN")
    await asyncio.to_thread(eventually, lambda: view.generation() != before)
    settled = view.generation()
    await asyncio.to_thread(make_pvc, core, "fresh", False)
    await asyncio.to_thread(eventually, lambda: view.generation() != settled)
    quiet = view.generation()
    # Resolving an object the informers do not hold (a Secret of another type) fetches it.
    await asyncio.to_thread(
        core.create_namespaced_secret, "default", {"metadata": {"name": "plain"}, "type": "Opaque"}
    )
    await view.resolve([ObjectRef("Secret", "default", "plain")])
    assert view.generation() != quiet
