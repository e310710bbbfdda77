"""A core/v1 Event as the project's processes write it (the dataset controller on PVCs and
Deployments, the node agent on pods), and the time in the API server's format."""

from __future__ import annotations

import time
from typing import Any

MESSAGE_LIMIT = 1024  # the API server refuses longer Event messages

_STAMP_CACHE: tuple[int, str] = (-1, "")


def now_rfc3339() -> str:
    """The time in whole seconds, as the API server writes it; formatted once a second (a
    burst of loads asks for it several times per PVC)."""
    global _STAMP_CACHE
    second = int(time.time())
    if _STAMP_CACHE[0] != second:
        _STAMP_CACHE = (second, time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(second)))
    return _STAMP_CACHE[1]


def event_body(
    involved: dict[str, str],
    event_type: str,
    reason: str,
    message: str,
    component: str,
    instance: str,
    *,
    name: str | None = None,
    host: str | None = None,
) -> dict[str, Any]:
    """The Event on `involved` (an object reference with its namespace and name), named `name`
    or generated from the object's name; `host` is the node it was seen on, if any."""
    now = now_rfc3339()
    naming = {"name": name} if name is not None else {"generateName": f"{involved['name']}."}
    source = {"component": component, **({"host": host} if host is not None else {})}
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {**naming, "namespace": involved["namespace"]},
        "involvedObject": involved,
        "reason": reason,
        "message": message[:MESSAGE_LIMIT],
        "type": event_type,
        "source": source,
        "reportingComponent": component,
        "reportingInstance": instance,
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
