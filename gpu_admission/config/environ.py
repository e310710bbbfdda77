"""Configuration from the environment: `GPU_ADMISSION_*` variables, and only the project's own;
and the namespace the program runs in, which the project's own namespaced settings follow.

A cluster puts variables of its own into every container. The kubelet adds, for each Service in
the pod's namespace (`enableServiceLinks`, on by default), `<NAME>_SERVICE_HOST`,
`<NAME>_SERVICE_PORT`, `<NAME>_PORT` and more, with `<NAME>` the Service's name in capitals and
`-` as `_` (`pkg/kubelet/envvars/envvars.go`). The Service `gpu-admission`, and any Service named
`gpu-admission-*`, therefore yields `GPU_ADMISSION_...` variables that are not settings. They are
passed over when both their name and their value have the kubelet's shape. Any other variable
with the prefix must name a setting: a misspelt one stops start-up, naming the variable, instead
of being ignored and leaving the setting at its default.
"""

from __future__ import annotations

import difflib
import ipaddress
import re
from collections.abc import Collection, Mapping
from typing import Any

import yaml

ENV_PREFIX = "GPU_ADMISSION_"
# The pod's namespace, from the downward API (`fieldRef: metadata.namespace`): set in both
# Deployments, so a kustomization's `namespace:` is the one place the namespace is chosen.
POD_NAMESPACE = "POD_NAMESPACE"

# The kubelet's service-link variables, after the Service's prefix, and their value's shape.
_PORT_NUMBER = r"[0-9]{1,5}"
_PROTOCOL = r"(TCP|UDP|SCTP)"
_LINK_SUFFIXES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"SERVICE_HOST"), "address"),
    (re.compile(r"SERVICE_PORT(_[A-Z0-9_]+)?"), "port"),
    (re.compile(r"PORT"), "url"),
    (re.compile(rf"PORT_{_PORT_NUMBER}_{_PROTOCOL}"), "url"),
    (re.compile(rf"PORT_{_PORT_NUMBER}_{_PROTOCOL}_PROTO"), "protocol"),
    (re.compile(rf"PORT_{_PORT_NUMBER}_{_PROTOCOL}_PORT"), "port"),
    (re.compile(rf"PORT_{_PORT_NUMBER}_{_PROTOCOL}_ADDR"), "address"),
)
_URL_VALUE = re.compile(r"(tcp|udp|sctp)://(?P<host>\[[0-9a-fA-F:.]+\]|[0-9.]+):[0-9]{1,5}")


class UnknownSetting(Exception):
    """A `GPU_ADMISSION_*` variable that names no setting; the message says which and why."""


def _is_address(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return False
    return True


def _value_fits(kind: str, value: str) -> bool:
    if kind == "address":
        return _is_address(value)
    if kind == "port":
        return value.isdigit() and 0 < int(value) < 65536
    if kind == "protocol":
        return value in ("tcp", "udp", "sctp")
    match = _URL_VALUE.fullmatch(value)
    return match is not None and _is_address(match["host"].strip("[]"))


def is_service_link(name: str, value: str) -> bool:
    """Whether `name=value` has the shape of a variable the kubelet makes from a Service."""
    # The Service's name is `gpu-admission` or longer: cut after the prefix's last `_` or later.
    cuts = [m.end() for m in re.finditer("_", name) if m.end() >= len(ENV_PREFIX)]
    return any(
        pattern.fullmatch(name[cut:]) and _value_fits(kind, value)
        for cut in cuts
        for pattern, kind in _LINK_SUFFIXES
    )


def _suggestion(key: str, known: Collection[str]) -> str:
    close = difflib.get_close_matches(key, list(known), n=1)
    if close:
        return f"did you mean {close[0]}? (docs/configuration.md lists every variable)"
    return "the settings are " + ", ".join(sorted(known)) + " (docs/configuration.md)"


def read_environ(environ: Mapping[str, str], known: Collection[str]) -> dict[str, Any]:
    """The settings that `GPU_ADMISSION_<FIELD>[__<FIELD>...]` variables give, as nested
    mappings; values parsed as YAML. `known` holds the top-level setting names. Raises
    UnknownSetting for a variable with the prefix that is neither a setting nor a service
    link. Values are never echoed: a variable may hold a token."""
    values: dict[str, Any] = {}
    unknown: list[str] = []
    for name, raw in sorted(environ.items()):
        if not name.startswith(ENV_PREFIX):
            continue
        path = [part.lower() for part in name[len(ENV_PREFIX) :].split("__")]
        if path[0] not in known:
            if not is_service_link(name, raw):
                unknown.append(f"  {name}: no setting '{path[0]}'; {_suggestion(path[0], known)}")
            continue
        target = values
        for key in path[:-1]:
            target = target.setdefault(key, {})
            if not isinstance(target, dict):
                unknown.append(f"  {name}: '{key}' is a value, not a section")
                break
        else:
            try:
                target[path[-1]] = yaml.safe_load(raw) if raw else raw
            except yaml.YAMLError:
                # PyYAML's message quotes the value: say where, never what.
                unknown.append(f"  {name}: not a YAML value (lists as [a, b], maps as {{k: v}})")
    if unknown:
        raise UnknownSetting("\n".join(unknown))
    return values


def own_namespace_defaults(environ: Mapping[str, str]) -> dict[str, Any]:
    """The settings that name the project's own namespace, set to the namespace the program runs
    in (`POD_NAMESPACE`), as a layer below every file: the Service's namespace (webhook
    clientConfig, the serving certificate's names, cert-manager's `inject-ca-from`) and the
    Lease's. Empty outside a pod, where the models' defaults (`gpu-admission`) stand."""
    namespace = environ.get(POD_NAMESPACE, "").strip()
    if not namespace:
        return {}
    return {"certs": {"namespace": namespace}, "leader_election": {"namespace": namespace}}
