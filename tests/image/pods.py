"""A pod of the rendered manifests, run from the image as a kubelet would run it: its volumes
prepared as host directories (the test world's kubelet code), fsGroup ownership applied, its
env resolved, user, groups and read-only root from its securityContext. Nothing restated."""

from __future__ import annotations

import base64
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tests.world.containers.engine import BindMount, ContainerRun
from tests.world.harness import manifest_objects, rendered_manifests
from tests.world.kubelet.env import build_env
from tests.world.kubelet.image_run import security
from tests.world.kubelet.volumes import apply_fs_group, container_mounts, prepare_volumes

SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"


def deployment_pod(name: str) -> dict[str, Any]:
    """The pod a Deployment of the base would create (its template, with a name)."""
    [deployment] = [d for d in manifest_objects("Deployment") if d["metadata"]["name"] == name]
    template = deployment["spec"]["template"]
    metadata = {**template["metadata"], "name": f"{name}-0", "namespace": "gpu-admission"}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": template["spec"]}


class ManifestSources:
    """What the pod's volumes and env read, from the rendered manifests (ConfigMaps) and the
    test (Secrets); no API server is needed to start the pod."""

    def __init__(self, secrets: Mapping[str, Mapping[str, bytes]] | None = None) -> None:
        self._secrets = secrets or {}

    def secret(self, namespace: str, name: str) -> dict[str, Any] | None:
        data = self._secrets.get(name)
        if data is None:
            return None
        return {"data": {k: base64.b64encode(v).decode() for k, v in data.items()}}

    def config_map(self, namespace: str, name: str) -> dict[str, Any] | None:
        for doc in rendered_manifests():
            if doc["kind"] == "ConfigMap" and doc["metadata"]["name"] == name:
                return doc
        return None

    def token(self, pod: Mapping[str, Any], audience: str | None, seconds: int) -> str:
        raise AssertionError("these pods project no ServiceAccount token")


def container_run(
    image: str,
    pod: dict[str, Any],
    workdir: Path,
    *,
    env: Mapping[str, str] | None = None,
    service_account: Path | None = None,
) -> ContainerRun:
    """The pod's first container as a ContainerRun. `env` adds variables (the test's ports);
    `service_account` is a directory mounted where the API server's ServiceAccount admission
    mounts the pod's token, as kube-api-access does."""
    container = pod["spec"]["containers"][0]
    sources = ManifestSources()
    volumes = prepare_volumes(pod, workdir, lambda ns, claim: workdir / "pvcs" / claim, sources)
    fs_group = (pod["spec"].get("securityContext") or {}).get("fsGroup")
    if fs_group is not None:
        apply_fs_group(volumes, fs_group)
    mounts = [
        BindMount(m.source, m.target, m.read_only) for m in container_mounts(container, volumes)
    ]
    if service_account is not None:
        mounts.append(BindMount(service_account, SERVICE_ACCOUNT_DIR, read_only=True))
    return ContainerRun(
        image,
        command=container.get("command"),
        args=container.get("args"),
        env={**build_env(pod, container, sources), **(env or {})},
        mounts=mounts,
        hostname=pod["metadata"]["name"],
        **security(pod, container),
    )
