"""Building the ApiClient: from a kubeconfig, from the in-cluster ServiceAccount, or an error."""

from __future__ import annotations

from pathlib import Path
from urllib.parse import urlsplit

import pytest
from kubernetes import client

from gpu_admission.cluster.kube import (
    CONNECTION_POOL_SIZE,
    ClusterConfigError,
    api_client,
    has_cluster_config,
    throttled_refresh,
)


def namespaces(api: client.ApiClient) -> set[str]:
    return {ns.metadata.name for ns in client.CoreV1Api(api).list_namespace().items}


def test_kubeconfig_file_reaches_the_cluster(kube_api):
    api = api_client(kube_api.kubeconfig_path)
    try:
        assert "default" in namespaces(api)
        assert api.configuration.connection_pool_maxsize >= CONNECTION_POOL_SIZE
    finally:
        api.close()
    assert has_cluster_config(kube_api.kubeconfig_path, environ={})


def test_in_cluster_service_account_reaches_the_cluster(kube_api, kube_client, tmp_path):
    # A real token of the `default` ServiceAccount, as the kubelet projects it into a pod.
    issued = client.CoreV1Api(kube_client).create_namespaced_service_account_token(
        "default", "default", {"spec": {"expirationSeconds": 600}}
    )
    token = tmp_path / "token"
    token.write_text(issued.status.token)
    address = urlsplit(kube_api.url)
    environ = {
        "KUBERNETES_SERVICE_HOST": address.hostname,
        "KUBERNETES_SERVICE_PORT": str(address.port),
    }
    assert has_cluster_config(None, environ=environ, token_file=str(token))
    api = api_client(None, environ=environ, token_file=str(token), cert_file=str(kube_api.ca_path))
    try:
        assert api.configuration.host == kube_api.url
        hook = api.configuration.refresh_api_key_hook
        for _ in range(3):  # each request runs the hook, which installs the loader's again
            review = client.AuthenticationV1Api(api).create_self_subject_review({})
            assert review.status.user_info.username == "system:serviceaccount:default:default"
        assert api.configuration.refresh_api_key_hook is hook  # still the throttled one
    finally:
        api.close()


def test_without_any_configuration_there_is_no_cluster(tmp_path):
    missing_token = str(tmp_path / "token")
    assert not has_cluster_config(None, environ={}, token_file=missing_token)
    with pytest.raises(ClusterConfigError, match="pass --kubeconfig FILE"):
        api_client(None, environ={}, token_file=missing_token)


def test_service_host_without_a_token_is_not_in_cluster(tmp_path):
    environ = {"KUBERNETES_SERVICE_HOST": "10.0.0.1", "KUBERNETES_SERVICE_PORT": "443"}
    assert not has_cluster_config(None, environ=environ, token_file=str(tmp_path / "token"))


def test_a_missing_kubeconfig_is_an_error_not_offline_mode(tmp_path):
    path = tmp_path / "nope.yaml"
    assert has_cluster_config(path, environ={})  # named explicitly: never silently offline
    with pytest.raises(ClusterConfigError, match=r"nope\.yaml does not exist"):
        api_client(path)


def test_an_unusable_kubeconfig_says_what_to_check(tmp_path):
    path: Path = tmp_path / "broken.yaml"
    path.write_text("apiVersion: v1\nkind: Config\nclusters: []\ncontexts: []\n")
    with pytest.raises(ClusterConfigError, match=r"cannot be used.*current-context"):
        api_client(path)


def test_the_token_refresh_hook_runs_at_most_once_a_second():
    now = [0.0]
    runs: list[float] = []

    class Configuration:
        refresh_api_key_hook: object = None

    def loader_hook(configuration: Configuration) -> None:
        runs.append(now[0])
        configuration.refresh_api_key_hook = loader_hook  # as both loaders do, each time

    configuration = Configuration()
    configuration.refresh_api_key_hook = throttled_refresh(loader_hook, 1.0, lambda: now[0])
    for now[0] in (0.0, 0.2, 0.9, 1.0, 1.5, 2.5):
        configuration.refresh_api_key_hook(configuration)  # type: ignore[operator]
    assert runs == [0.0, 1.0, 2.5]
