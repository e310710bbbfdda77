"""What a real kube-apiserver answers a create, as a user's client sees it: allowed or the
refusal's message, the `Warning:` headers (kubectl prints them), the object as stored, and the
audit annotations its audit event carries (found by the answer's Audit-Id)."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client

from tests.support.waits import while_running
from tests.world.control_plane import ControlPlane

_WARNING = re.compile(r'^\d{3} \S+ "((?:[^"\\]|\\.)*)"')


@dataclass
class Answer:
    allowed: bool
    message: str = ""
    warnings: list[str] = field(default_factory=list)
    audit_id: str = ""
    stored: dict[str, Any] = field(default_factory=dict)


def _warnings(headers: Any) -> list[str]:
    found = []
    for value in headers.getlist("Warning") if headers is not None else []:
        match = _WARNING.match(value)
        if match:
            found.append(re.sub(r"\\(.)", r"\1", match.group(1)))
    return found


CREATE = {
    "Pod": "create_namespaced_pod",
    "Secret": "create_namespaced_secret",
    "PersistentVolumeClaim": "create_namespaced_persistent_volume_claim",
}


def create(
    api: client.ApiClient, namespace: str, body: dict[str, Any], dry_run: bool = False
) -> Answer:
    call = getattr(client.CoreV1Api(api), CREATE[body["kind"]])
    extra = {"dry_run": "All"} if dry_run else {}
    try:
        response = call(namespace, body, _preload_content=False, **extra)
    except client.ApiException as error:
        return Answer(
            False,
            json.loads(error.body)["message"],
            _warnings(error.headers),
            (error.headers or {}).get("Audit-Id", ""),
        )
    return Answer(
        True,
        warnings=_warnings(response.headers),
        audit_id=response.headers.get("Audit-Id", ""),
        stored=json.loads(response.data),
    )


def audit_annotations(plane: ControlPlane, audit_id: str) -> dict[str, str]:
    """The annotations of the request's audit event, once the API server has written it."""

    def event() -> dict[str, Any] | None:
        if not plane.audit_log.exists():
            return None
        for line in plane.audit_log.read_text().splitlines():
            if audit_id in line:
                entry = json.loads(line)
                if entry.get("auditID") == audit_id and entry.get("stage") == "ResponseComplete":
                    return entry
        return None

    found = while_running(event, f"the audit event {audit_id}", {}, 30)
    return dict(found.get("annotations") or {})
