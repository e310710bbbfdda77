"""Dynamic Resource Allocation records: DeviceClasses, ResourceClaims and ResourceClaimTemplates,
reduced to what the GPU policies read (which device classes a claim's requests draw from).

In resource.k8s.io/v1 (GA since Kubernetes 1.34) a claim's `spec.devices.requests[]` each has a
`name` and either `exactly` (one `deviceClassName`) or `firstAvailable` (sub-requests, each with
its own `name` and `deviceClassName`, tried in order). A ResourceClaimTemplate carries the same
spec under `spec.spec`. A container names a claim by the pod's `spec.resourceClaims[].name`, and
may narrow it to one request (`request: gpu`, or `gpu/<sub-request>` for a `firstAvailable` one).
A DeviceClass selects devices with CEL; the drivers it requires are read from its
`device.driver == "..."` (or `device.driver in [...]`) comparisons.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

ClaimKind = Literal["ResourceClaim", "ResourceClaimTemplate"]

# `device.driver == "x"`, `"x" == device.driver`, `device.driver in ["x", "y"]`; either quote.
_DRIVER_EQUALS = re.compile(
    r"""device\.driver\s*==\s*(?P<q1>['"])(?P<a>[^'"]+)(?P=q1)"""
    r"""|(?P<q2>['"])(?P<b>[^'"]+)(?P=q2)\s*==\s*device\.driver"""
)
_DRIVER_IN = re.compile(r"device\.driver\s+in\s*\[(?P<items>[^\]]*)\]")
_QUOTED = re.compile(r"""(['"])([^'"]+)\1""")


@dataclass(frozen=True, slots=True)
class DeviceRequestInfo:
    """One request of a claim: its name and the (sub-request name, device class) pairs it may be
    served from; the sub-request name is "" for an `exactly` request."""

    name: str
    classes: tuple[tuple[str, str], ...]


@dataclass(frozen=True, slots=True)
class ClaimInfo:
    """A ResourceClaim or a ResourceClaimTemplate, as far as device classes go."""

    kind: ClaimKind
    namespace: str
    name: str
    requests: tuple[DeviceRequestInfo, ...] = ()

    def device_classes(self, request: str = "") -> tuple[str, ...] | None:
        """The classes a container gets devices from: every request's for `request` "", one
        request's for `name`, one sub-request's for `name/sub`; None when no such request."""
        if not request:
            return tuple(cls for r in self.requests for _, cls in r.classes)
        name, _, sub = request.partition("/")
        for candidate in self.requests:
            if candidate.name != name:
                continue
            chosen = [cls for sub_name, cls in candidate.classes if not sub or sub_name == sub]
            return tuple(chosen) if chosen else None
        return None


@dataclass(frozen=True, slots=True)
class DeviceClassInfo:
    name: str
    drivers: frozenset[str] = frozenset()  # drivers its selectors require


def _meta(obj: Mapping[str, Any]) -> Mapping[str, Any]:
    return obj.get("metadata") or {}


def _requests(devices: Mapping[str, Any] | None) -> tuple[DeviceRequestInfo, ...]:
    requests = []
    for request in (devices or {}).get("requests") or []:
        if not isinstance(request, dict):
            continue
        exactly = request.get("exactly")
        if isinstance(exactly, dict):
            classes = (("", str(exactly.get("deviceClassName") or "")),)
        else:
            classes = tuple(
                (str(sub.get("name") or ""), str(sub.get("deviceClassName") or ""))
                for sub in request.get("firstAvailable") or []
                if isinstance(sub, dict)
            )
        requests.append(DeviceRequestInfo(str(request.get("name") or ""), classes))
    return tuple(requests)


def resource_claim_info(obj: Mapping[str, Any]) -> ClaimInfo:
    meta = _meta(obj)
    return ClaimInfo(
        "ResourceClaim",
        meta.get("namespace", ""),
        meta.get("name", ""),
        _requests((obj.get("spec") or {}).get("devices")),
    )


def resource_claim_template_info(obj: Mapping[str, Any]) -> ClaimInfo:
    meta = _meta(obj)
    claim_spec = (obj.get("spec") or {}).get("spec") or {}
    return ClaimInfo(
        "ResourceClaimTemplate",
        meta.get("namespace", ""),
        meta.get("name", ""),
        _requests(claim_spec.get("devices")),
    )


def selector_drivers(expression: str) -> frozenset[str]:
    """The driver names a CEL device selector compares `device.driver` with."""
    drivers = {m.group("a") or m.group("b") for m in _DRIVER_EQUALS.finditer(expression)}
    for match in _DRIVER_IN.finditer(expression):
        drivers.update(quoted[1] for quoted in _QUOTED.findall(match.group("items")))
    return frozenset(drivers)


def device_class_info(obj: Mapping[str, Any]) -> DeviceClassInfo:
    spec = obj.get("spec") or {}
    drivers: set[str] = set()
    for selector in spec.get("selectors") or []:
        expression = ((selector or {}).get("cel") or {}).get("expression")
        if isinstance(expression, str):
            drivers |= selector_drivers(expression)
    return DeviceClassInfo(_meta(obj).get("name", ""), frozenset(drivers))
