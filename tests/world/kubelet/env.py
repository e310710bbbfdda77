"""A container's environment as the kubelet builds it, and ``$(VAR)`` expansion.

Pure functions: Secrets and ConfigMaps come in through a ``Sources`` object that the caller
backs with the API. Order and expansion follow the kubelet: ``envFrom`` first (not expanded),
then ``env`` in order, each value expanded against the variables defined before it; command and
args are expanded against the final environment.
"""

from __future__ import annotations

import base64
import math
import re
from collections.abc import Mapping
from typing import Any, Protocol

from webhooks.policies.quantity import parse_quantity


class ConfigError(Exception):
    """The container cannot be configured (kubelet's ``CreateContainerConfigError``)."""


class Sources(Protocol):
    def secret(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def config_map(self, namespace: str, name: str) -> dict[str, Any] | None: ...

    def token(self, pod: Mapping[str, Any], audience: str | None, seconds: int) -> str:
        """A token of the pod's ServiceAccount bound to the pod (TokenRequest)."""
        ...


def expand(text: str, env: Mapping[str, str]) -> str:
    """Kubernetes ``$(VAR)`` expansion: ``$$`` is a literal ``$``; unknown references stay."""
    out: list[str] = []
    i = 0
    while i < len(text):
        ch = text[i]
        if ch != "$" or i + 1 >= len(text):
            out.append(ch)
            i += 1
            continue
        nxt = text[i + 1]
        if nxt == "$":
            out.append("$")
            i += 2
        elif nxt == "(":
            end = text.find(")", i + 2)
            if end == -1:
                out.append(text[i:])
                break
            name = text[i + 2 : end]
            out.append(env.get(name, f"$({name})"))
            i = end + 1
        else:
            out.append(ch)
            i += 1
    return "".join(out)


def secret_data(secret: Mapping[str, Any]) -> dict[str, str]:
    """A Secret's values, base64-decoded (``stringData`` is already merged by the API)."""
    return {
        key: base64.b64decode(value).decode(errors="replace")
        for key, value in (secret.get("data") or {}).items()
    }


def config_map_data(config_map: Mapping[str, Any]) -> dict[str, str]:
    return dict(config_map.get("data") or {})


_LABEL_FIELD = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def field_value(pod: Mapping[str, Any], field_path: str) -> str:
    """The downward API value of ``fieldRef.fieldPath``."""
    metadata = pod.get("metadata") or {}
    match = _LABEL_FIELD.match(field_path)
    if match:
        return str((metadata.get(match.group(1)) or {}).get(match.group(2), ""))
    simple = {
        "metadata.name": metadata.get("name"),
        "metadata.namespace": metadata.get("namespace"),
        "metadata.uid": metadata.get("uid"),
        "spec.nodeName": (pod.get("spec") or {}).get("nodeName"),
        "spec.serviceAccountName": (pod.get("spec") or {}).get("serviceAccountName"),
        "status.podIP": (pod.get("status") or {}).get("podIP"),
        "status.hostIP": (pod.get("status") or {}).get("hostIP"),
    }
    if field_path not in simple:
        raise ConfigError(f'unsupported fieldPath "{field_path}"')
    return str(simple[field_path] or "")


_RESOURCES = ("cpu", "memory", "ephemeral-storage")


def resource_value(
    pod: Mapping[str, Any], container: Mapping[str, Any], ref: Mapping[str, Any]
) -> str:
    """The downward API value of ``resourceFieldRef``, as the kubelet's
    ``ExtractContainerResourceValue`` gives it: the container's quantity divided by the divisor
    (none, or 0, is 1), rounded up. A request the container does not set is 0; a limit it does
    not set is the node's allocatable, which this kubelet does not know: said as a config
    error."""
    spec = pod.get("spec") or {}
    wanted = ref.get("containerName")
    containers = [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]
    target = next((c for c in containers if c.get("name") == wanted), None)
    if not wanted:  # the kubelet's containerResourceRuntimeValue: this container
        target = container
    if target is None:
        raise ConfigError(f'resourceFieldRef: no container "{wanted}" in the pod')
    field = str(ref.get("resource", ""))
    kind, _, resource = field.partition(".")
    if kind not in ("limits", "requests") or resource not in _RESOURCES:
        raise ConfigError(f'unsupported resourceFieldRef resource "{field}"')
    raw = ((target.get("resources") or {}).get(kind) or {}).get(resource)
    if raw is None and kind == "requests":
        return "0"
    value = parse_quantity(raw)
    if value is None:
        unknown = "the node's allocatable (what the kubelet gives then) is not known here"
        raise ConfigError(f"resourceFieldRef {field}: the container sets none, and {unknown}")
    # The API server stores an unset divisor as "0"; the kubelet reads a zero divisor as 1.
    divisor = parse_quantity(ref.get("divisor") or "0")
    if divisor is None:
        raise ConfigError(f"resourceFieldRef {field}: bad divisor {ref.get('divisor')!r}")
    return str(math.ceil(value / (divisor or 1)))


def _key_ref(ref: Mapping[str, Any], namespace: str, sources: Sources, kind: str) -> str | None:
    name = ref.get("name", "")
    obj = (
        sources.secret(namespace, name) if kind == "Secret" else sources.config_map(namespace, name)
    )
    optional = bool(ref.get("optional"))
    if obj is None:
        if optional:
            return None
        resource = "secret" if kind == "Secret" else "configmap"
        raise ConfigError(f'{resource} "{name}" not found')
    data = secret_data(obj) if kind == "Secret" else config_map_data(obj)
    key = ref.get("key", "")
    if key not in data:
        if optional:
            return None
        raise ConfigError(f"couldn't find key {key} in {kind} {namespace}/{name}")
    return data[key]


def build_env(
    pod: Mapping[str, Any], container: Mapping[str, Any], sources: Sources
) -> dict[str, str]:
    namespace = (pod.get("metadata") or {}).get("namespace", "")
    env: dict[str, str] = {}
    for env_from in container.get("envFrom") or []:
        prefix = env_from.get("prefix", "")
        if "secretRef" in env_from:
            ref, kind = env_from["secretRef"], "Secret"
            obj = sources.secret(namespace, ref.get("name", ""))
        else:
            ref, kind = env_from.get("configMapRef") or {}, "ConfigMap"
            obj = sources.config_map(namespace, ref.get("name", ""))
        if obj is None:
            if ref.get("optional"):
                continue
            resource = "secret" if kind == "Secret" else "configmap"
            raise ConfigError(f'{resource} "{ref.get("name", "")}" not found')
        data = secret_data(obj) if kind == "Secret" else config_map_data(obj)
        for key, value in data.items():
            env[prefix + key] = value
    for var in container.get("env") or []:
        name = var["name"]
        if "valueFrom" not in var:
            env[name] = expand(str(var.get("value", "")), env)
            continue
        source = var["valueFrom"]
        if "fieldRef" in source:
            env[name] = field_value(pod, source["fieldRef"].get("fieldPath", ""))
        elif "resourceFieldRef" in source:
            env[name] = resource_value(pod, container, source["resourceFieldRef"])
        elif "secretKeyRef" in source or "configMapKeyRef" in source:
            kind = "Secret" if "secretKeyRef" in source else "ConfigMap"
            ref = source.get("secretKeyRef") or source.get("configMapKeyRef") or {}
            found = _key_ref(ref, namespace, sources, kind)
            if found is not None:  # an optional reference to nothing sets nothing
                env[name] = found
        else:
            raise ConfigError(f"env {name}: unsupported valueFrom {sorted(source)}")
    return env


def command_line(container: Mapping[str, Any], env: Mapping[str, str]) -> list[str]:
    """``command`` + ``args``, expanded; without a command there is no image to fall back on."""
    command = [expand(str(part), env) for part in container.get("command") or []]
    args = [expand(str(part), env) for part in container.get("args") or []]
    if not command:
        raise ConfigError(
            f'container "{container.get("name")}" has no command; images are not run here, '
            "so give the command explicitly"
        )
    return command + args
