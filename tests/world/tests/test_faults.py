"""The fault proxy in front of the real kube-apiserver: injected answers, request accounting,
cut watches and added latency; and a real outage (kube-apiserver killed and started again)."""

from __future__ import annotations

import pytest
import urllib3
from kubernetes import client, config, watch
from kubernetes.client import ApiException


def _core_without_retries(kube_api, kubeconfig=None) -> client.CoreV1Api:
    configuration = client.Configuration()
    path = kubeconfig or kube_api.kubeconfig_path
    config.load_kube_config(str(path), client_configuration=configuration)
    configuration.retries = 0  # see each injected answer, not the client's own retries
    return client.CoreV1Api(client.ApiClient(configuration))


def test_injected_errors_then_recovery(kube_api) -> None:
    core = _core_without_retries(kube_api)
    kube_api.faults.fail("GET", r"/configmaps$", code=500, times=1)
    kube_api.faults.fail("GET", r"/configmaps$", code=429, times=1, retry_after=3)
    with pytest.raises(ApiException) as first:
        core.list_namespaced_config_map("default")
    assert first.value.status == 500
    with pytest.raises(ApiException) as second:
        core.list_namespaced_config_map("default")
    assert second.value.status == 429 and second.value.headers["Retry-After"] == "3"
    assert core.list_namespaced_config_map("default").items is not None
    assert kube_api.faults.request_count("GET", r"/configmaps$") == 3


def test_request_counts(kube_api, kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    kube_api.faults.reset_counts()
    core.list_namespaced_pod("default")
    core.list_namespaced_pod("default")
    core.read_namespace("default")
    assert kube_api.faults.request_count("GET", r"/pods$") == 2
    assert kube_api.faults.request_count() == 3
    assert kube_api.faults.request_count("POST") == 0


def test_dropped_watch_ends_stream(kube_api, kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_config_map("default", {"metadata": {"name": "x"}})
    seen = []
    # Cut as a lost connection is: the client sees the stream end mid-response.
    with pytest.raises(urllib3.exceptions.ProtocolError):
        for event in watch.Watch().stream(
            core.list_namespaced_config_map,
            "default",
            field_selector="metadata.name=x",
            timeout_seconds=30,
        ):
            seen.append(event["type"])
            kube_api.faults.drop_watches()
    assert seen == ["ADDED"]


def test_latency_is_added(kube_api) -> None:
    kube_api.faults.delay("GET", r"/api/v1/namespaces/default$", 2.0, times=1)
    core = _core_without_retries(kube_api)
    with pytest.raises(urllib3.exceptions.HTTPError):
        core.read_namespace("default", _request_timeout=0.5)
    assert core.read_namespace("default").metadata.name == "default"


def test_an_outage_refuses_connections_cuts_watches_and_keeps_the_objects(kube_api) -> None:
    core = _core_without_retries(kube_api, kube_api.plane.kubeconfig)  # not through the proxy
    core.create_namespaced_config_map("default", {"metadata": {"name": "kept"}})
    version = core.list_namespaced_config_map("default").metadata.resource_version
    stream = core.list_namespaced_config_map(
        "default", watch=True, resource_version=version, _preload_content=False
    )
    kube_api.go_offline()
    with pytest.raises(urllib3.exceptions.ProtocolError):
        stream.read()  # the open watch is cut, as a server going away cuts it
    with pytest.raises(urllib3.exceptions.MaxRetryError) as refused:
        core.list_namespaced_config_map("default")
    assert isinstance(refused.value.reason, urllib3.exceptions.NewConnectionError)
    kube_api.come_back()
    again = core.list_namespaced_config_map("default")
    assert "kept" in [c.metadata.name for c in again.items]
    assert int(again.metadata.resource_version) >= int(version)
