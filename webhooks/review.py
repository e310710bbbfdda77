"""AdmissionReview v1: strict request models and response construction.

Requests are parsed from raw bytes with pydantic (fast, and every error names the field). Unknown
fields are ignored so a newer API server does not break the service; the fields used are strict.
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from typing import Annotated, Any, Literal, NamedTuple

from pydantic import ConfigDict, Field, TypeAdapter, ValidationError, with_config
from typing_extensions import TypedDict

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
MAX_WARNING_LENGTH = 120


_STRICT = ConfigDict(extra="ignore", strict=True)

# TypedDicts rather than models: pydantic validates them straight from the JSON into plain
# dicts, about twice as fast as building model instances, and this runs on every request.


@with_config(_STRICT)
class GroupVersionKind(TypedDict):
    group: str
    version: str
    kind: str


@with_config(_STRICT)
class GroupVersionResource(TypedDict):
    group: str
    version: str
    resource: str


@with_config(_STRICT)
class UserInfo(TypedDict, total=False):
    username: str
    uid: str
    groups: list[str]


@with_config(_STRICT)
class ObjectHead(TypedDict, total=False):
    """The fields of an object that scopes are matched on; the rest is not materialised."""

    kind: Any
    type: str


@with_config(_STRICT)
class _RequestFields(TypedDict):
    uid: Annotated[str, Field(min_length=1)]
    kind: GroupVersionKind
    resource: GroupVersionResource
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]


@with_config(_STRICT)
class _OptionalRequestFields(_RequestFields, total=False):
    subResource: str
    name: str
    namespace: str
    userInfo: UserInfo
    dryRun: bool


@with_config(_STRICT)
class RequestModel(_OptionalRequestFields, total=False):
    object: dict[str, Any] | None
    oldObject: dict[str, Any] | None


@with_config(_STRICT)
class RequestHeadModel(_OptionalRequestFields, total=False):
    object: ObjectHead | None
    oldObject: ObjectHead | None


@with_config(_STRICT)
class ReviewModel(TypedDict):
    apiVersion: str
    kind: str
    request: RequestModel


@with_config(_STRICT)
class ReviewHeadModel(TypedDict):
    apiVersion: str
    kind: str
    request: RequestHeadModel


REVIEW = TypeAdapter(ReviewModel)
REVIEW_HEAD = TypeAdapter(ReviewHeadModel)


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


def _validate(adapter: TypeAdapter[Any], body: bytes) -> dict[str, Any]:
    try:
        # The adapter's own validator, without the adapter's per-call option handling.
        return adapter.validator.validate_json(body)  # type: ignore[no-any-return]
    except ValidationError as exc:
        errors = exc.errors()
        if any(e["type"] == "json_invalid" for e in errors):
            raise ReviewError("request body is not valid JSON") from exc
        if any(e["type"] == "dict_type" and not e["loc"] for e in errors):
            raise ReviewError("request body is not an AdmissionReview object") from exc
        raise ReviewError(f"not a valid AdmissionReview: {_describe(exc)}") from exc


def _checked(
    review: dict[str, Any], expected_kind: str
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The checks pydantic cannot express; returns the request and its object."""
    if review["kind"] != KIND:
        raise ReviewError(f"kind must be {KIND!r}, got {review['kind']!r}")
    if review["apiVersion"] != API_VERSION:
        raise ReviewError(
            f"apiVersion must be {API_VERSION!r}, got {review['apiVersion']!r}; "
            "set admissionReviewVersions: [v1] in the webhook configuration"
        )
    request = review["request"]
    obj = request.get("object")
    if obj is None and request["operation"] != "DELETE":
        raise ReviewError("request.object is missing; this webhook needs the object under review")
    kind = request["kind"]["kind"]
    if kind != expected_kind:
        raise ReviewError(
            f"this endpoint reviews {expected_kind} objects, got {kind}; "
            "check the webhook configuration's rules and path"
        )
    if obj is not None and obj.get("kind") not in (None, expected_kind):
        raise ReviewError(f"request.object is a {obj.get('kind')}, expected {expected_kind}")
    return request, obj


def parse_review(body: bytes, expected_kind: str) -> AdmissionRequest:
    """Parse and check an AdmissionReview body; raise ReviewError saying what is wrong."""
    request, obj = _checked(_validate(REVIEW, body), expected_kind)
    get = request.get
    old = get("oldObject")
    metadata = (obj.get("metadata") or {}) if obj is not None else {}
    user = get("userInfo")
    return AdmissionRequest(
        uid=request["uid"],
        kind=request["kind"]["kind"],
        resource=request["resource"]["resource"],
        sub_resource=get("subResource", ""),
        operation=request["operation"],
        # Controller-created objects may lack metadata.namespace; the request always has it.
        namespace=get("namespace") or metadata.get("namespace", ""),
        name=get("name") or metadata.get("name", ""),
        object=obj if obj is not None else (old or {}),
        old_object=old,
        dry_run=get("dryRun", False),
        username=user.get("username", "") if user else "",
    )


ScopeKey = tuple[str, str, str, str | None]
"""A request's (kind, operation, subresource, object `type`): what policy scopes match on."""


class ReviewHead(NamedTuple):
    uid: str
    operation: str
    scope_key: ScopeKey


def parse_review_head(body: bytes, expected_kind: str) -> ReviewHead:
    """Parse and check a review like `parse_review`, with every check, but materialise only
    what scopes are matched on (`ObjectHead`): a request no policy applies to is answered from
    this alone."""
    request, obj = _checked(_validate(REVIEW_HEAD, body), expected_kind)
    if obj is None:
        obj = request.get("oldObject") or {}
    operation = request["operation"]
    return ReviewHead(
        request["uid"],
        operation,
        (expected_kind, operation, request.get("subResource", ""), obj.get("type")),
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


_ALLOWED_PREFIX = b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":'
_ALLOWED_SUFFIX = b',"allowed":true}}'


def allowed_response_body(uid: str) -> bytes:
    """`build_response(uid, True)` encoded compactly, without building the dict: the most common
    answer, made on every request no policy changes or warns about."""
    # The encoder json.dumps uses for a str, called directly.
    return _ALLOWED_PREFIX + encode_basestring_ascii(uid).encode() + _ALLOWED_SUFFIX


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
