"""resource.k8s.io/v1 (Dynamic Resource Allocation) as kube-apiserver 1.36 serves it: defaulting and
built-in validation of DeviceClasses, ResourceClaims and ResourceClaimTemplates, and the checks a
Pod's `spec.resourceClaims` and its containers' `resources.claims` get.

Follows k8s.io/kubernetes pkg/apis/resource/validation (validateDeviceRequest,
validateExactDeviceRequest, validateDeviceSubRequest, validateDeviceAllocationMode) and
pkg/apis/core/validation (validatePodResourceClaim, validateResourceClaimNames), with the v1
field paths (`exactly.deviceClassName`) the server reports. CEL expressions are not compiled.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from typing import Any

from .errors import cause

Causes = list[dict[str, str]]

ALLOCATION_MODES = ("All", "ExactCount")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")
_DNS_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
LABEL_MESSAGE = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', and "
    "must start and end with an alphanumeric character (e.g. 'my-name',  or '123-abc', regex "
    "used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
)
SUBDOMAIN_MESSAGE = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' or "
    "'.', and must start and end with an alphanumeric character (e.g. 'example.com', regex used "
    "for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?(\\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*')"
)
REQUEST_UNION = "exactly one of `exactly` or `firstAvailable` is required"


def _shown(value: Any) -> str:
    """A bad value as field.Invalid prints it: Go's %v of JSON scalars."""
    if value is None:
        return "null"
    if isinstance(value, str):
        return json.dumps(value)
    return str(value)


# ---------------------------------------------------------------------------------- defaults


def _default_selection(selection: dict[str, Any]) -> None:
    """SetDefaults_ExactDeviceRequest / SetDefaults_DeviceSubRequest."""
    selection.setdefault("allocationMode", "ExactCount")
    if selection["allocationMode"] == "ExactCount" and not selection.get("count"):
        selection["count"] = 1


def default_devices(devices: dict[str, Any] | None) -> None:
    for request in (devices or {}).get("requests") or []:
        if isinstance(request.get("exactly"), dict):
            _default_selection(request["exactly"])
        for sub in request.get("firstAvailable") or []:
            if isinstance(sub, dict):
                _default_selection(sub)


def apply_defaults(kind: str, obj: dict[str, Any]) -> None:
    if kind == "ResourceClaim":
        default_devices((obj.get("spec") or {}).get("devices"))
    elif kind == "ResourceClaimTemplate":
        default_devices(((obj.get("spec") or {}).get("spec") or {}).get("devices"))


# -------------------------------------------------------------------------------- validation


def _name_causes(value: Any, path: str, pattern: re.Pattern[str], message: str) -> Causes:
    if not value:
        return [cause("FieldValueRequired", path, "Required value")]
    if not isinstance(value, str) or not pattern.fullmatch(value) or len(value) > 253:
        return [cause("FieldValueInvalid", path, f"Invalid value: {_shown(value)}: {message}")]
    return []


def _selection_causes(selection: dict[str, Any], path: str) -> Causes:
    causes = _name_causes(
        selection.get("deviceClassName"),
        f"{path}.deviceClassName",
        _DNS_SUBDOMAIN,
        SUBDOMAIN_MESSAGE,
    )
    for index, selector in enumerate(selection.get("selectors") or []):
        if not isinstance(selector, dict) or not selector.get("cel"):
            causes.append(
                cause("FieldValueRequired", f"{path}.selectors[{index}].cel", "Required value")
            )
    mode, count = selection.get("allocationMode"), selection.get("count") or 0
    if mode == "All" and count:
        causes.append(
            cause(
                "FieldValueInvalid",
                f"{path}.count",
                f"Invalid value: {count}: must not be specified when allocationMode is 'All'",
            )
        )
    elif mode == "ExactCount" and (not isinstance(count, int) or count <= 0):
        causes.append(
            cause(
                "FieldValueInvalid",
                f"{path}.count",
                f"Invalid value: {_shown(count)}: must be greater than zero",
            )
        )
    elif mode not in ALLOCATION_MODES:
        supported = ", ".join(f'"{m}"' for m in ALLOCATION_MODES)
        causes.append(
            cause(
                "FieldValueNotSupported",
                f"{path}.allocationMode",
                f"Unsupported value: {_shown(mode)}: supported values: {supported}",
            )
        )
    return causes


def _unique(names: Iterable[tuple[int, Any]], path: Callable[[int], str]) -> Causes:
    seen: set[Any] = set()
    causes = []
    for index, name in names:
        if name and name in seen:
            causes.append(
                cause("FieldValueDuplicate", path(index), f"Duplicate value: {_shown(name)}")
            )
        seen.add(name)
    return causes


def devices_causes(devices: dict[str, Any] | None, path: str) -> Causes:
    """validateDeviceClaim for the requests (constraints and config are not checked here)."""
    causes: Causes = []
    requests = (devices or {}).get("requests") or []
    for index, request in enumerate(requests):
        at = f"{path}.requests[{index}]"
        causes += _name_causes(request.get("name"), f"{at}.name", _DNS_LABEL, LABEL_MESSAGE)
        exactly, first = request.get("exactly"), request.get("firstAvailable") or []
        if exactly is None and not first:
            causes.append(cause("FieldValueRequired", at, f"Required value: {REQUEST_UNION}"))
        elif exactly is not None and first:
            causes.append(
                cause(
                    "FieldValueInvalid",
                    at,
                    f"Invalid value: null: {REQUEST_UNION}, but multiple fields are set",
                )
            )
        elif exactly is not None:
            causes += _selection_causes(exactly, f"{at}.exactly")
        else:
            for sub_index, sub in enumerate(first):
                sub_at = f"{at}.firstAvailable[{sub_index}]"
                causes += _name_causes(sub.get("name"), f"{sub_at}.name", _DNS_LABEL, LABEL_MESSAGE)
                causes += _selection_causes(sub, sub_at)
            causes += _unique(
                ((i, s.get("name")) for i, s in enumerate(first)),
                lambda i, at=at: f"{at}.firstAvailable[{i}].name",
            )
    causes += _unique(
        ((i, r.get("name")) for i, r in enumerate(requests)),
        lambda i: f"{path}.requests[{i}].name",
    )
    return causes


def _device_class_causes(obj: dict[str, Any]) -> Causes:
    causes: Causes = []
    spec = obj.get("spec") or {}
    for index, selector in enumerate(spec.get("selectors") or []):
        if not isinstance(selector, dict) or not selector.get("cel"):
            causes.append(
                cause("FieldValueRequired", f"spec.selectors[{index}].cel", "Required value")
            )
    return causes


def validate_create(kind: str, obj: dict[str, Any]) -> Causes:
    if kind == "ResourceClaim":
        return devices_causes((obj.get("spec") or {}).get("devices"), "spec.devices")
    if kind == "ResourceClaimTemplate":
        spec = (obj.get("spec") or {}).get("spec") or {}
        return devices_causes(spec.get("devices"), "spec.spec.devices")
    if kind == "DeviceClass":
        return _device_class_causes(obj)
    return []


def validate_update(
    kind: str, subresource: str, new: dict[str, Any], old: dict[str, Any]
) -> Causes:
    """A claim's and a template's spec are immutable; a DeviceClass is validated anew."""
    if kind in ("ResourceClaim", "ResourceClaimTemplate") and subresource == "":
        if new.get("spec") != old.get("spec"):
            return [
                cause("FieldValueInvalid", "spec", 'Invalid value: "object": field is immutable')
            ]
        return []
    if kind == "DeviceClass":
        return _device_class_causes(new)
    return []


# ------------------------------------------------------------------------------------- pods


def _go_pod_resource_claim(claim: dict[str, Any]) -> str:
    def pointer(value: Any) -> str:
        return "(*string)(nil)" if value is None else f"(*string)({json.dumps(value)})"

    return (
        f"core.PodResourceClaim{{Name:{json.dumps(claim.get('name', ''))}, "
        f"ResourceClaimName:{pointer(claim.get('resourceClaimName'))}, "
        f"ResourceClaimTemplateName:{pointer(claim.get('resourceClaimTemplateName'))}}}"
    )


def pod_claim_causes(spec: dict[str, Any]) -> Causes:
    """spec.resourceClaims and every container's resources.claims."""
    causes: Causes = []
    names: list[str] = []
    for index, claim in enumerate(spec.get("resourceClaims") or []):
        at = f"spec.resourceClaims[{index}]"
        name = claim.get("name")
        if not name:
            causes.append(cause("FieldValueRequired", f"{at}.name", "Required value"))
        elif name in names:
            causes.append(
                cause("FieldValueDuplicate", f"{at}.name", f"Duplicate value: {_shown(name)}")
            )
        else:
            causes += _name_causes(name, f"{at}.name", _DNS_LABEL, LABEL_MESSAGE)
            names.append(name)
        sources = [k for k in ("resourceClaimName", "resourceClaimTemplateName") if claim.get(k)]
        if len(sources) != 1:
            causes.append(
                cause(
                    "FieldValueInvalid",
                    at,
                    f"Invalid value: {_go_pod_resource_claim(claim)}: must specify one of: "
                    "`resourceClaimName`, `resourceClaimTemplateName`",
                )
            )
    known = ", ".join(sorted(names))
    for list_name in ("initContainers", "containers", "ephemeralContainers"):
        for c_index, container in enumerate(spec.get(list_name) or []):
            claims = ((container.get("resources") or {}).get("claims")) or []
            seen: set[tuple[str, str]] = set()
            for index, entry in enumerate(claims):
                at = f"spec.{list_name}[{c_index}].resources.claims[{index}]"
                name = entry.get("name") or ""
                if not name:
                    causes.append(cause("FieldValueRequired", at, "Required value"))
                    continue
                key = (name, entry.get("request") or "")
                if key in seen:
                    causes.append(
                        cause("FieldValueDuplicate", at, f"Duplicate value: {_shown(name)}")
                    )
                seen.add(key)
                if name not in names:
                    detail = f": {known}" if names else " which is empty"
                    causes.append(
                        cause(
                            "FieldValueNotFound",
                            at,
                            f"Not found: {_shown(name)}: must be one of the names in "
                            f"pod.spec.resourceClaims{detail}",
                        )
                    )
    return causes
