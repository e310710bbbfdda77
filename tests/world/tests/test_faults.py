"""Fault injection and request accounting."""

from __future__ import annotations

import pytest
import urllib3
from kubernetes import client, config, watch
from kubernetes.client import ApiException


def _core_without_retries(kubeapi) -> client.CoreV1Api:
    configuration = client.Configuration()
    config.load_kube_config(str(kubeapi.kubeconfig_path), client_configuration=configuration)
    configuration.retries = 0  # see each injected answer, not the client's own retries
    return client.CoreV1Api(client.ApiClient(configuration))


def test_injected_errors_then_recovery(kubeapi) -> None:
    core = _core_without_retries(kubeapi)
    kubeapi.faults.fail("GET", r"/configmaps$", code=500, times=1)
    kubeapi.faults.fail("GET", r"/configmaps$", code=429, times=1, retry_after=3)
    with pytest.raises(ApiException) as first:
        core.list_namespaced_config_map("default")
    assert first.value.status == 500
    with pytest.raises(ApiException) as second:
        core.list_namespaced_config_map("default")
    assert second.value.status == 429 and second.value.headers["Retry-After"] == "3"
    assert core.list_namespaced_config_map("default").items is not None
    assert kubeapi.faults.request_count("GET", r"/configmaps$") == 3


def test_request_counts(kubeapi, kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    kubeapi.faults.reset_counts()
    core.list_namespaced_pod("default")
    core.list_namespaced_pod("default")
    core.read_namespace("default")
    assert kubeapi.faults.request_count("GET", r"/pods$") == 2
    assert kubeapi.faults.request_count() == 3
    assert kubeapi.faults.request_count("POST") == 0


def test_dropped_watch_ends_stream(kubeapi, kube_client: client.ApiClient) -> None:
    core = client.CoreV1Api(kube_client)
    core.create_namespaced_config_map("default", {"metadata": {"name": "x"}})
    seen = []
    for event in watch.Watch().stream(
        core.list_namespaced_config_map, "default", timeout_seconds=30
    ):
        seen.append(event["type"])
        if len(seen) == 2:  # x and kube-root-ca.crt: now the server drops the stream
            kubeapi.faults.drop_watches()
    assert seen == ["ADDED", "ADDED"]


def test_latency_is_added(kubeapi) -> None:
    kubeapi.faults.delay("GET", r"/api/v1/namespaces/default$", 2.0, times=1)
    core = _core_without_retries(kubeapi)
    with pytest.raises(urllib3.exceptions.HTTPError):
        core.read_namespace("default", _request_timeout=0.5)
    assert core.read_namespace("default").metadata.name == "default"


def test_an_outage_refuses_connections_cuts_watches_and_keeps_the_objects(kubeapi) -> None:
    core = _core_without_retries(kubeapi)
    core.create_namespaced_config_map("default", {"metadata": {"name": "kept"}})
    version = core.list_namespaced_config_map("default").metadata.resource_version
    stream = core.list_namespaced_config_map(
        "default", watch=True, resource_version=version, _preload_content=False
    )
    kubeapi.go_offline()
    with pytest.raises(urllib3.exceptions.ProtocolError):
        stream.read()  # the open watch is cut, as a server going away cuts it
    with pytest.raises(urllib3.exceptions.MaxRetryError) as refused:
        core.list_namespaced_config_map("default")
    assert isinstance(refused.value.reason, urllib3.exceptions.NewConnectionError)
    kubeapi.come_back()
    again = core.list_namespaced_config_map("default")
    assert "kept" in [c.metadata.name for c in again.items]
    assert int(again.metadata.resource_version) >= int(version)
