"""AdmissionReview v1: strict request models and response construction.

Requests are parsed from raw bytes with pydantic (fast, and every error names the field). Unknown
fields are ignored so a newer API server does not break the service; the fields used are strict.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictStr, ValidationError

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
MAX_WARNING_LENGTH = 120


class _Strict(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class GroupVersionKind(_Strict):
    group: StrictStr
    version: StrictStr
    kind: StrictStr


class GroupVersionResource(_Strict):
    group: StrictStr
    version: StrictStr
    resource: StrictStr


class UserInfo(_Strict):
    username: StrictStr = ""
    uid: StrictStr = ""
    groups: list[StrictStr] = Field(default_factory=list)


class AdmissionRequestModel(_Strict):
    uid: StrictStr = Field(min_length=1)
    kind: GroupVersionKind
    resource: GroupVersionResource
    subResource: StrictStr = ""
    name: StrictStr = ""
    namespace: StrictStr = ""
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    userInfo: UserInfo = UserInfo()
    object: dict[str, Any] | None = None
    oldObject: dict[str, Any] | None = None
    dryRun: StrictBool = False


class AdmissionReviewModel(_Strict):
    apiVersion: StrictStr
    kind: StrictStr
    request: AdmissionRequestModel


class ReviewError(Exception):
    """The body is not a usable AdmissionReview; the message says what is wrong (HTTP 400)."""


@dataclass(slots=True)
class AdmissionRequest:
    """What a policy sees. For mutating policies `object` is the working copy: it already carries
    the changes of the policies that ran before."""

    uid: str
    kind: str
    resource: str
    sub_resource: str
    operation: str
    namespace: str
    name: str
    object: dict[str, Any]
    old_object: dict[str, Any] | None
    dry_run: bool
    username: str = ""

    @property
    def annotations(self) -> dict[str, str]:
        return (self.object.get("metadata") or {}).get("annotations") or {}


def _describe(error: ValidationError) -> str:
    parts = []
    for item in error.errors()[:5]:
        where = ".".join(str(p) for p in item["loc"]) or "body"
        parts.append(f"{where}: {item['msg']}")
    return "; ".join(parts)


def parse_review(body: bytes, expected_kind: str) -> AdmissionRequest:
    """Parse and check an AdmissionReview body; raise ReviewError saying what is wrong."""
    try:
        review = AdmissionReviewModel.model_validate_json(body)
    except ValidationError as exc:
        if any(e["type"] == "json_invalid" for e in exc.errors()):
            raise ReviewError("request body is not valid JSON") from exc
        if any(e["type"] == "model_type" and not e["loc"] for e in exc.errors()):
            raise ReviewError("request body is not an AdmissionReview object") from exc
        raise ReviewError(f"not a valid AdmissionReview: {_describe(exc)}") from exc
    if review.kind != KIND:
        raise ReviewError(f"kind must be {KIND!r}, got {review.kind!r}")
    if review.apiVersion != API_VERSION:
        raise ReviewError(
            f"apiVersion must be {API_VERSION!r}, got {review.apiVersion!r}; "
            "set admissionReviewVersions: [v1] in the webhook configuration"
        )
    request = review.request
    obj = request.object
    if obj is None and request.operation != "DELETE":
        raise ReviewError("request.object is missing; this webhook needs the object under review")
    if request.kind.kind != expected_kind:
        raise ReviewError(
            f"this endpoint reviews {expected_kind} objects, got {request.kind.kind}; "
            "check the webhook configuration's rules and path"
        )
    if obj is not None and obj.get("kind") not in (None, expected_kind):
        raise ReviewError(f"request.object is a {obj.get('kind')}, expected {expected_kind}")
    return AdmissionRequest(
        uid=request.uid,
        kind=request.kind.kind,
        resource=request.resource.resource,
        sub_resource=request.subResource,
        operation=request.operation,
        # Controller-created objects may lack metadata.namespace; the request always has it.
        namespace=request.namespace or ((obj or {}).get("metadata") or {}).get("namespace", ""),
        name=request.name or ((obj or {}).get("metadata") or {}).get("name", ""),
        object=obj if obj is not None else (request.oldObject or {}),
        old_object=request.oldObject,
        dry_run=request.dryRun,
        username=request.userInfo.username,
    )


def clip_warning(text: str) -> str:
    """The API server wants short warnings; keep each within 120 characters."""
    text = " ".join(text.split())
    return text if len(text) <= MAX_WARNING_LENGTH else text[: MAX_WARNING_LENGTH - 3] + "..."


@dataclass(frozen=True, slots=True)
class Verdict:
    """A validating policy's answer (or a mutating policy's refusal)."""

    allowed: bool
    message: str = ""
    code: int = 403
    warnings: tuple[str, ...] = ()

    @classmethod
    def allow(cls, *warnings: str) -> Verdict:
        return cls(True, warnings=tuple(warnings))

    @classmethod
    def deny(cls, message: str, code: int = 403) -> Verdict:
        return cls(False, message=message, code=code)


ALLOW = Verdict(True)


def build_response(
    uid: str,
    allowed: bool,
    *,
    patch: list[dict[str, Any]] | None = None,
    warnings: list[str] | tuple[str, ...] = (),
    message: str = "",
    code: int = 403,
) -> dict[str, Any]:
    """The AdmissionReview response; a patch only when there are operations."""
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        response["status"] = {"code": code, "message": message}
    elif patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
    if warnings:
        response["warnings"] = [clip_warning(w) for w in warnings]
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}
