"""Pod volumes as host directories, and each container's mounts into them.

secret and configMap volumes are written as files (``items`` and modes honoured), emptyDir is a
per-pod directory, and every PersistentVolumeClaim is one host directory per claim that outlives
the pod (``pvc_dir``). Projected volumes are written from their sources: a
``serviceAccountToken`` is requested from the API (TokenRequest for the pod's ServiceAccount,
bound to the pod, with the source's audience and expirationSeconds, as the kubelet does; it is
not refreshed, pods here live minutes), secrets and configMaps as above (a missing configMap
source is skipped, as an optional one), downwardAPI fieldRefs. Other
volume types (hostPath, ...) are not provided and their mounts are skipped. subPath is not
supported.
"""

from __future__ import annotations

import base64
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tests.world.kubelet.env import ConfigError, Sources, field_value
from tests.world.kubelet.run import Mount

DEFAULT_MODE = 0o644
DEFAULT_TOKEN_SECONDS = 3600


def _write_items(
    directory: Path, data: Mapping[str, bytes], volume: Mapping[str, Any], kind: str, name: str
) -> None:
    mode = volume.get("defaultMode", DEFAULT_MODE)
    items = volume.get("items")
    chosen = items if items else [{"key": key, "path": key} for key in data]
    for item in chosen:
        key = item["key"]
        if key not in data:
            if volume.get("optional"):
                continue
            raise ConfigError(f"couldn't find key {key} in {kind} {name}")
        target = directory / item.get("path", key)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data[key])
        target.chmod(item.get("mode", mode))


def _secret_bytes(
    sources: Sources, namespace: str, name: str, spec: Mapping[str, Any]
) -> dict[str, bytes]:
    """A Secret's decoded data; a missing one is an error unless `spec` says optional."""
    secret = sources.secret(namespace, name)
    if secret is None and not spec.get("optional"):
        raise ConfigError(f'secret "{name}" not found')
    return {k: base64.b64decode(v) for k, v in ((secret or {}).get("data") or {}).items()}


def prepare_volumes(
    pod: Mapping[str, Any],
    pod_dir: Path,
    pvc_dir: Callable[[str, str], Path],
    sources: Sources,
) -> dict[str, tuple[Path, bool]]:
    """Volume name -> (host directory, volume-level read-only)."""
    namespace = (pod.get("metadata") or {}).get("namespace", "")
    prepared: dict[str, tuple[Path, bool]] = {}
    for volume in (pod.get("spec") or {}).get("volumes") or []:
        name = volume["name"]
        directory = pod_dir / "volumes" / name
        if "persistentVolumeClaim" in volume:
            claim = volume["persistentVolumeClaim"]
            prepared[name] = (pvc_dir(namespace, claim["claimName"]), bool(claim.get("readOnly")))
        elif "emptyDir" in volume:
            directory.mkdir(parents=True, exist_ok=True)
            prepared[name] = (directory, False)
        elif "secret" in volume:
            spec = volume["secret"]
            data = _secret_bytes(sources, namespace, spec.get("secretName", ""), spec)
            directory.mkdir(parents=True, exist_ok=True)
            _write_items(directory, data, spec, "Secret", spec.get("secretName", ""))
            prepared[name] = (directory, True)  # secret volumes are always read-only
        elif "projected" in volume:
            directory.mkdir(parents=True, exist_ok=True)
            _write_projected(pod, directory, volume["projected"], sources)
            prepared[name] = (directory, True)
        elif "configMap" in volume:
            spec = volume["configMap"]
            config_map = sources.config_map(namespace, spec.get("name", ""))
            if config_map is None and not spec.get("optional"):
                raise ConfigError(f'configmap "{spec.get("name", "")}" not found')
            data = {k: v.encode() for k, v in ((config_map or {}).get("data") or {}).items()}
            directory.mkdir(parents=True, exist_ok=True)
            _write_items(directory, data, spec, "ConfigMap", spec.get("name", ""))
            prepared[name] = (directory, True)
    return prepared


def _write_projected(
    pod: Mapping[str, Any], directory: Path, spec: Mapping[str, Any], sources: Sources
) -> None:
    namespace = (pod.get("metadata") or {}).get("namespace", "")
    mode = spec.get("defaultMode", DEFAULT_MODE)
    for source in spec.get("sources") or []:
        if "serviceAccountToken" in source:
            token = source["serviceAccountToken"]
            seconds = token.get("expirationSeconds", DEFAULT_TOKEN_SECONDS)
            value = sources.token(pod, token.get("audience"), seconds)
            target = directory / token.get("path", "token")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(value)
            target.chmod(mode)
        elif "secret" in source:
            item = source["secret"]
            data = _secret_bytes(sources, namespace, item.get("name", ""), item)
            _write_items(directory, data, {"defaultMode": mode, **item}, "Secret", item["name"])
        elif "configMap" in source:
            item = source["configMap"]
            config_map = sources.config_map(namespace, item.get("name", ""))
            if config_map is None:
                continue
            data = {k: v.encode() for k, v in (config_map.get("data") or {}).items()}
            _write_items(directory, data, {"defaultMode": mode, **item}, "ConfigMap", item["name"])
        elif "downwardAPI" in source:
            for field in source["downwardAPI"].get("items") or []:
                if "fieldRef" not in field:
                    continue
                target = directory / field["path"]
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_text(field_value(pod, field["fieldRef"].get("fieldPath", "")))


def container_mounts(
    container: Mapping[str, Any], volumes: Mapping[str, tuple[Path, bool]]
) -> list[Mount]:
    mounts = []
    for mount in container.get("volumeMounts") or []:
        if mount["name"] not in volumes:
            continue
        directory, volume_read_only = volumes[mount["name"]]
        read_only = volume_read_only or bool(mount.get("readOnly"))
        mounts.append(Mount(directory, mount["mountPath"], read_only))
    return mounts


def apply_fs_group(volumes: Mapping[str, tuple[Path, bool]], fs_group: int) -> None:
    """The kubelet's volume ownership management for a pod with `fsGroup`: every file of its
    volumes gets that group, directories the setgid bit, and group permissions follow the
    owner's (read, and write on writable volumes), so a non-root container can use them."""
    for directory, read_only in volumes.values():
        for path in [directory, *directory.rglob("*")]:
            os.chown(path, -1, fs_group, follow_symlinks=False)
            if path.is_symlink():
                continue
            mode = path.stat().st_mode
            group = (mode & 0o700) >> 3
            if read_only:
                group &= 0o050
            path.chmod((mode & ~0o070) | group | (0o2000 if path.is_dir() else 0))
