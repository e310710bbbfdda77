"""AdmissionReview v1 bodies as kube-apiserver sends them, and its checks on the answers.

Mirrors ``webhook/request/admissionreview.go`` (request shape, ``VerifyAdmissionResponse``) and
``webhook/errors/statuserror.go`` (how a denial becomes the API error the client sees).
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from dataclasses import dataclass, field
from typing import Any

from tests.world.kubeapi.admission_types import AdmissionAttributes
from tests.world.kubeapi.errors import StatusError

REVIEW_API_VERSION = "admission.k8s.io/v1"
OPTIONS_KIND = {"CREATE": "CreateOptions", "UPDATE": "UpdateOptions", "DELETE": "DeleteOptions"}


class InvalidResponse(Exception):
    """The webhook answered, but not with something kube-apiserver accepts (a call failure)."""


@dataclass
class ReviewResponse:
    allowed: bool
    status: dict[str, Any] | None
    patch: bytes
    warnings: list[str] = field(default_factory=list)


def _options(attrs: AdmissionAttributes) -> dict[str, Any]:
    options = {k: v for k, v in (attrs.options or {}).items() if k not in ("kind", "apiVersion")}
    kind = (attrs.options or {}).get("kind") or OPTIONS_KIND.get(attrs.operation, "CreateOptions")
    return {"kind": kind, "apiVersion": "meta.k8s.io/v1", **options}


def build_request(attrs: AdmissionAttributes, uid: str | None = None) -> dict[str, Any]:
    """The AdmissionReview a webhook receives, keys in kube-apiserver's order.

    ``subResource``/``requestSubResource`` appear only for subresource requests, ``name`` only
    when the object has one, ``namespace`` only for namespaced requests; ``oldObject`` is JSON
    null on CREATE rather than absent.
    """
    kind = {"group": attrs.kind_group, "version": attrs.kind_version, "kind": attrs.kind}
    resource = {"group": attrs.group, "version": attrs.version, "resource": attrs.resource}
    request: dict[str, Any] = {"uid": uid or str(uuid.uuid4()), "kind": kind, "resource": resource}
    if attrs.subresource:
        request["subResource"] = attrs.subresource
    request["requestKind"] = dict(kind)
    request["requestResource"] = dict(resource)
    if attrs.subresource:
        request["requestSubResource"] = attrs.subresource
    if attrs.name:
        request["name"] = attrs.name
    if attrs.namespace:
        request["namespace"] = attrs.namespace
    request["operation"] = attrs.operation
    request["userInfo"] = _user_info(attrs.user_info)
    request["object"] = attrs.object
    request["oldObject"] = attrs.old_object
    request["dryRun"] = bool(attrs.dry_run)
    request["options"] = _options(attrs)
    return {"kind": "AdmissionReview", "apiVersion": REVIEW_API_VERSION, "request": request}


def _user_info(user_info: dict[str, Any]) -> dict[str, Any]:
    # authenticationv1.UserInfo marshals empty fields away; keep its field order.
    ordered: dict[str, Any] = {}
    for key in ("username", "uid", "groups", "extra"):
        if user_info.get(key):
            ordered[key] = user_info[key]
    return ordered


_BASE64_CHARS = re.compile(rb"[^A-Za-z0-9+/=]")


def _decode_patch_field(value: Any) -> bytes:
    """``response.patch`` is a Go ``[]byte``: base64 in JSON, decoded while reading the body."""
    if value is None:
        return b""
    if not isinstance(value, str):
        raise InvalidResponse(
            "json: cannot unmarshal " + type(value).__name__ + " into Go struct field "
            "AdmissionResponse.response.patch of type []uint8"
        )
    raw = value.encode()
    try:
        return base64.b64decode(raw, validate=True)
    except binascii.Error:
        bad = _BASE64_CHARS.search(raw)
        position = bad.start() if bad else len(raw) - len(raw) % 4
        raise InvalidResponse(f"illegal base64 data at input byte {position}") from None


def parse_response(body: bytes, uid: str, mutating: bool) -> ReviewResponse:
    """Decode and verify an answer; InvalidResponse carries kube-apiserver's reason text."""
    try:
        review = json.loads(body)
    except ValueError as error:
        raise InvalidResponse(f"failed to decode webhook response: {error}") from None
    if not isinstance(review, dict):
        raise InvalidResponse("failed to decode webhook response: not a JSON object")
    response = review.get("response")
    patch = _decode_patch_field(response.get("patch")) if isinstance(response, dict) else b""
    return verify_response(review, uid, mutating, patch)


def verify_response(
    review: dict[str, Any], uid: str, mutating: bool, patch: bytes
) -> ReviewResponse:
    response = review.get("response")
    if not isinstance(response, dict):
        raise InvalidResponse("webhook response was absent")
    if response.get("uid", "") != uid:
        raise InvalidResponse(f'expected response.uid="{uid}", got "{response.get("uid", "")}"')
    got = f"{review.get('apiVersion', '')}, Kind={review.get('kind', '')}"
    if review.get("apiVersion") != REVIEW_API_VERSION or review.get("kind") != "AdmissionReview":
        if review.get("apiVersion", "") == "":
            got = f"/, Kind={review.get('kind', '')}"
        raise InvalidResponse(
            f"expected webhook response of {REVIEW_API_VERSION}, Kind=AdmissionReview, got {got}"
        )
    patch_type = response.get("patchType") or ""
    if patch_type and patch_type != "JSONPatch":
        raise InvalidResponse(f'webhook returned invalid response.patchType of "{patch_type}"')
    if not mutating and patch:
        raise InvalidResponse("validating webhook may not return response.patch")
    if not mutating and patch_type:
        raise InvalidResponse("validating webhook may not return response.patchType")
    if mutating and patch and not patch_type:
        raise InvalidResponse("webhook returned response.patch but not response.patchType")
    warnings = response.get("warnings") or []
    return ReviewResponse(
        allowed=bool(response.get("allowed")),
        status=response.get("status") if isinstance(response.get("status"), dict) else None,
        patch=patch,
        warnings=[w for w in warnings if isinstance(w, str)],
    )


def denial_error(webhook_name: str, status: dict[str, Any] | None) -> StatusError:
    """``ToStatusErr``: the webhook's own status, its message prefixed with who denied it.

    A code below 400 (or none) becomes 400, as kube-apiserver never returns a success code with
    a rejection. Reason and details pass through unchanged (absent when the webhook sent none).
    """
    status = dict(status or {})
    code = status.get("code")
    code = code if isinstance(code, int) and code >= 400 else 400
    denied_by = f'admission webhook "{webhook_name}" denied the request'
    if status.get("message"):
        message = f"{denied_by}: {status['message']}"
    elif status.get("reason"):
        message = f"{denied_by}: {status['reason']}"
    else:
        message = f"{denied_by} without explanation"
    details = status.get("details") if isinstance(status.get("details"), dict) else None
    return StatusError(code, status.get("reason") or "", message, details)


def internal_error(message: str) -> StatusError:
    """``apierrors.NewInternalError``: 500, the cause repeated in details."""
    return StatusError(
        500,
        "InternalError",
        f"Internal error occurred: {message}",
        {"causes": [{"message": message}]},
    )


def dry_run_unsupported(webhook_name: str) -> StatusError:
    return StatusError(
        400, "BadRequest", f'admission webhook "{webhook_name}" does not support dry run'
    )
