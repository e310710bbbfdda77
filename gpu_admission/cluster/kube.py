"""Build a `kubernetes` ApiClient from a kubeconfig file or the pod's in-cluster ServiceAccount.

No fallback to ~/.kube/config: a service that silently picked up a developer's default context
would talk to the wrong cluster. Without either source there is no cluster, and `serve` runs
offline (see `has_cluster_config`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from kubernetes import client, config
from kubernetes.config.config_exception import ConfigException
from kubernetes.config.incluster_config import (
    SERVICE_CERT_FILENAME,
    SERVICE_HOST_ENV_NAME,
    SERVICE_PORT_ENV_NAME,
    SERVICE_TOKEN_FILENAME,
    InClusterConfigLoader,
)

# Informers hold one connection each for their watch, admission-time GETs and the controller
# need more: the client's default pool (5 per CPU) would discard and reopen connections.
CONNECTION_POOL_SIZE = 32


class ClusterConfigError(Exception):
    """No usable cluster configuration; the message says what to do."""


def in_cluster(
    environ: Mapping[str, str] | None = None, token_file: str = SERVICE_TOKEN_FILENAME
) -> bool:
    """True when running in a pod with a ServiceAccount token and the API server's address."""
    env = os.environ if environ is None else environ
    return bool(env.get(SERVICE_HOST_ENV_NAME) and env.get(SERVICE_PORT_ENV_NAME)) and (
        Path(token_file).is_file()
    )


def has_cluster_config(
    kubeconfig: Path | None,
    environ: Mapping[str, str] | None = None,
    token_file: str = SERVICE_TOKEN_FILENAME,
) -> bool:
    """Whether `api_client(kubeconfig)` has something to load (a named kubeconfig always counts,
    so a wrong path is reported as an error rather than silently running offline)."""
    return kubeconfig is not None or in_cluster(environ, token_file)


def api_client(
    kubeconfig: Path | None,
    *,
    environ: Mapping[str, str] | None = None,
    token_file: str = SERVICE_TOKEN_FILENAME,
    cert_file: str = SERVICE_CERT_FILENAME,
) -> client.ApiClient:
    """An ApiClient for `kubeconfig` (its current context), else for the in-cluster config."""
    configuration = client.Configuration()
    if kubeconfig is not None:
        path = Path(kubeconfig)
        if not path.is_file():
            raise ClusterConfigError(
                f"kubeconfig {path} does not exist or is not a file; pass --kubeconfig with the "
                "path of a readable kubeconfig, or leave it out when running inside the cluster"
            )
        try:
            config.load_kube_config(
                config_file=str(path), client_configuration=configuration, persist_config=False
            )
        except (ConfigException, OSError, ValueError, TypeError) as exc:
            raise ClusterConfigError(
                f"kubeconfig {path} cannot be used: {exc}; check its current-context, cluster "
                "server and credentials (kubectl --kubeconfig FILE get nodes should work)"
            ) from exc
    elif in_cluster(environ, token_file):
        try:
            InClusterConfigLoader(
                token_filename=token_file,
                cert_filename=cert_file,
                environ=os.environ if environ is None else environ,
            ).load_and_set(configuration)
        except ConfigException as exc:
            raise ClusterConfigError(
                f"in-cluster configuration cannot be used: {exc}; check the pod's "
                "ServiceAccount token mount"
            ) from exc
    else:
        raise ClusterConfigError(
            "no cluster configuration: pass --kubeconfig FILE, or run in a pod whose "
            "ServiceAccount token is mounted (KUBERNETES_SERVICE_HOST/PORT set)"
        )
    configuration.connection_pool_maxsize = max(
        configuration.connection_pool_maxsize or 0, CONNECTION_POOL_SIZE
    )
    return client.ApiClient(configuration)
