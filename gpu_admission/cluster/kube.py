"""Build a `kubernetes` ApiClient from a kubeconfig file or the pod's in-cluster ServiceAccount.

No fallback to ~/.kube/config: a service that silently picked up a developer's default context
would talk to the wrong cluster. Without either source there is no cluster, and `serve` runs
offline (see `has_cluster_config`).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

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
TOKEN_REFRESH_CHECK_SECONDS = 1.0


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
    hook = configuration.refresh_api_key_hook
    if hook is not None:
        configuration.refresh_api_key_hook = throttled_refresh(hook)
    return client.ApiClient(configuration)


def throttled_refresh(
    hook: Callable[[Any], None],
    every_seconds: float = TOKEN_REFRESH_CHECK_SECONDS,
    clock: Callable[[], float] = time.monotonic,
) -> Callable[[Any], None]:
    """The client's token refresh hook, run at most once per `every_seconds`.

    The kubernetes client runs it before every request, and both its loaders then set the whole
    configuration again, whose `host` setter reads every proxy variable of the environment:
    about 0.3 ms a request (`python -m bench.controller burst --profile`). The tokens it refreshes
    live far longer: the in-cluster loader rereads the ServiceAccount token once a minute, a
    kubeconfig's exec or OIDC token when it has expired. Checking once a second refreshes
    them at most a second late. Both loaders install their hook again each time it runs: the new
    one is kept, and this one put back in its place."""
    last = -float("inf")

    def refresh(configuration: Any) -> None:
        nonlocal last, hook
        now = clock()
        if now - last < every_seconds:
            return
        last = now
        hook(configuration)
        installed = configuration.refresh_api_key_hook
        if installed is not None and installed is not refresh:
            hook = installed
        configuration.refresh_api_key_hook = refresh

    return refresh
