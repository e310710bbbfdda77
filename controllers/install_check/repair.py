"""The leading controller owns the project's admission objects: what the install's check finds
missing or stale, it writes as the configuration implies it (`InstallExpectation.objects`).

Why the controller and not the kustomization: the objects follow settings (GPU resource names,
policy modes, the schedulers, the layout the API server needs) that only the project's own code
turns into CEL and routing. Shipped in the kustomization they would hold the defaults, and every
`kubectl apply -k` or GitOps sync would put the defaults back over a configuration of one's own
(docs/DESIGN.md, "Who writes the admission objects").

How: server-side apply under the field manager `gpu-admission-controller`, forced (the objects
are the project's: a hand edit is drift and goes), labelled app.kubernetes.io/managed-by and owned
by the ClusterRole `gpu-admission-controller`, so that `kubectl delete -k`, which deletes that
ClusterRole, has the garbage collector delete them too. A stale object is replaced whole instead
(an apply leaves other managers' fields, such as a webhook entry kubectl applied, in place).
`caBundle` is never the controller's: the service or cert-manager's CA injector own it, an apply
leaves it alone and a replacement carries it over. A policy or binding of ours the configuration
no longer implies (OWN_PREFIX) is deleted.
"""

from __future__ import annotations

import asyncio
import copy
import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from typing import Any
from urllib.parse import urlencode

from kubernetes.client import AdmissionregistrationV1Api, ApiClient, RbacAuthorizationV1Api
from kubernetes.client.exceptions import ApiException

from controllers.writes.raw import RawWriter
from gpu_admission.admission.installed import (
    ADMISSION_KINDS,
    InstallReport,
    ObjectState,
    owned_by,
)
from gpu_admission.cluster.informer import describe_error
from gpu_admission.names import CONTROLLER_CLUSTER_ROLE, MANAGED_BY, MANAGED_BY_LABEL

log = logging.getLogger(__name__)

FIELD_MANAGER = "gpu-admission-controller"
APPLY = "application/apply-patch+yaml"  # JSON is YAML: the body is sent as JSON
GROUP_PATH = "/apis/admissionregistration.k8s.io/v1"
PLURALS = {k.kind: k.plural for k in ADMISSION_KINDS}
OWNER = ("ClusterRole", CONTROLLER_CLUSTER_ROLE)


class Action(StrEnum):
    APPLY = "applied"
    DELETE = "deleted"


# What an object was before the controller wrote it: an ObjectState, or this (as implied, but
# written by someone else: kubectl, an earlier release's kustomization).
NOT_OWNED = "not yet owned by the controller"


@dataclass(frozen=True)
class Write:
    action: Action
    kind: str
    name: str
    obj: dict[str, Any] | None = None  # what is applied (None: deleted)
    was: str = ObjectState.MISSING


def writes(
    report: InstallReport,
    implied: Mapping[tuple[str, str], dict[str, Any]],
    live: Mapping[tuple[str, str], Mapping[str, Any]],
) -> list[Write]:
    """What puts the report right: each missing or stale object the configuration implies,
    applied; each leftover of ours (stale, not implied), deleted; and each object that is as
    implied but not owned by the controller's ClusterRole, applied too, so that it is taken over
    (an install of an earlier release, whose kustomization applied it) and goes at uninstall."""
    planned = []
    for finding in report.objects:
        key = (finding.kind, finding.name)
        obj = implied.get(key)
        if finding.state is ObjectState.OK:
            held = live.get(key)
            if obj is not None and held is not None and not owned_by(held, *OWNER):
                planned.append(Write(Action.APPLY, finding.kind, finding.name, obj, NOT_OWNED))
            continue
        action = Action.DELETE if obj is None else Action.APPLY
        planned.append(Write(action, finding.kind, finding.name, obj, finding.state))
    return planned


def owned(obj: dict[str, Any], owner: dict[str, str] | None) -> dict[str, Any]:
    """`obj` as applied: labelled as the project's, and owned by `owner` (when known)."""
    made = copy.deepcopy(obj)
    metadata = made.setdefault("metadata", {})
    metadata.setdefault("labels", {})[MANAGED_BY_LABEL] = MANAGED_BY
    if owner is not None:
        metadata["ownerReferences"] = [owner]
    return made


def path_of(kind: str, name: str) -> str:
    return f"{GROUP_PATH}/{PLURALS[kind]}/{name}"


class AdmissionObjectWriter:
    """Writes the planned `Write`s on the controller's raw writer (the event loop)."""

    def __init__(self, api: ApiClient, raw: RawWriter) -> None:
        self._api = api
        self._raw = raw
        self._owner: dict[str, str] | None = None

    def read_owner(self) -> dict[str, str] | None:
        """The ownerReference to the controller's ClusterRole (a thread's call). Without it
        (RBAC of an older release, the role renamed) the objects are written unowned and said
        to outlive an uninstall."""
        if self._owner is not None:
            return self._owner
        try:
            role = RbacAuthorizationV1Api(self._api).read_cluster_role(CONTROLLER_CLUSTER_ROLE)
        except (ApiException, OSError) as error:
            log.warning(
                "install check: cannot read the ClusterRole %s to own the admission objects by "
                "(%s): they are written unowned, and `kubectl delete -k` leaves them",
                CONTROLLER_CLUSTER_ROLE,
                describe_error(error),
            )
            return None
        self._owner = {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "ClusterRole",
            "name": CONTROLLER_CLUSTER_ROLE,
            "uid": str(role.metadata.uid),
        }
        return self._owner

    async def write(self, planned: Write, owner: dict[str, str] | None) -> None:
        """One write; ApiException when the API server refuses it (a 404 on delete is done).

        A stale object is replaced whole (PUT, at the resourceVersion read): an apply would
        leave the fields another manager set (kubectl's, a hand edit's: a webhook entry or a
        condition the configuration no longer has) where they are. What the service or
        cert-manager's injector wrote of `caBundle` is carried over. Anything else is applied."""
        path = path_of(planned.kind, planned.name)
        if planned.action is Action.DELETE:
            try:
                await self._raw.request("DELETE", path, {})
            except ApiException as error:
                if error.status != 404:
                    raise
            return
        assert planned.obj is not None
        body = owned(planned.obj, owner)
        if planned.was == ObjectState.STALE:
            live = await asyncio.to_thread(self._read, planned.kind, planned.name)
            if live is not None:
                replaced = replacement(body, live)
                query = urlencode({"fieldManager": FIELD_MANAGER})
                await self._raw.request("PUT", f"{path}?{query}", replaced)
                return
        query = urlencode({"fieldManager": FIELD_MANAGER, "force": "true"})
        await self._raw.request("PATCH", f"{path}?{query}", body, APPLY)

    def _read(self, kind: str, name: str) -> dict[str, Any] | None:
        """The live object as the API server holds it (a thread's call); None when gone."""
        snake = re.sub(r"(?<!^)(?=[A-Z])", "_", kind).lower()
        read = getattr(AdmissionregistrationV1Api(self._api), f"read_{snake}")
        try:
            answer = read(name, _preload_content=False)
        except ApiException as error:
            if error.status == 404:
                return None
            raise
        return dict(json.loads(answer.data))


def replacement(body: dict[str, Any], live: Mapping[str, Any]) -> dict[str, Any]:
    """`body` as a PUT over `live`: at its resourceVersion (a write in between is a conflict,
    retried at the next comparison), with the caBundle each webhook of the same name holds."""
    made = copy.deepcopy(body)
    made["metadata"]["resourceVersion"] = (live.get("metadata") or {}).get("resourceVersion")
    bundles = {
        w.get("name"): (w.get("clientConfig") or {}).get("caBundle")
        for w in live.get("webhooks") or []
    }
    for webhook in made.get("webhooks") or []:
        if bundles.get(webhook["name"]):
            webhook.setdefault("clientConfig", {})["caBundle"] = bundles[webhook["name"]]
    return made
