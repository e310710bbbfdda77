"""AdmissionReview v1: strict parsing into typed shapes, and response construction.

Requests are decoded from raw bytes with msgspec (a C decoder and validator) and checked against
TypedDicts: the envelope, and the shape of every field the policies read of the object
(`webhooks.core.review_shapes`). Unknown fields are ignored so a newer API server does not break the
service; the fields used are strict. An error names the JSON path of the first field at fault and
what it should be (`request.object.spec.containers[0].env: expected a list`), so a malformed body is
a 400, never an internal error inside a policy.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from dataclasses import dataclass
from json.encoder import encode_basestring_ascii
from typing import Annotated, Any, Generic, Literal, NamedTuple, NotRequired, TypedDict, TypeVar

import msgspec

from webhooks.core.review_shapes import SHAPES

API_VERSION = "admission.k8s.io/v1"
KIND = "AdmissionReview"
# kube-apiserver keeps each warning whole until the warnings of one request pass 4096 runes, and
# then still the first 256 runes of each (endpoints/filters/warning.go: truncateItemRunes), so a
# warning of at most 256 characters always reaches the user whole. A warn-mode policy's warning
# carries the whole refusal it stands for.
MAX_WARNING_LENGTH = 256
OPERATIONS = ("CREATE", "UPDATE", "DELETE", "CONNECT")
# The endpoint that reviews workloads of several kinds (Deployment, Job, JobSet, ...) through
# their pod templates: its requests carry this as their kind, and the kind named as `object_kind`.
WORKLOAD = "Workload"


class GroupVersionKind(TypedDict):
    group: str
    version: str
    kind: str


class GroupVersionResource(TypedDict):
    group: str
    version: str
    resource: str


class UserInfo(TypedDict, total=False):
    username: str
    uid: str
    groups: list[str]


class ObjectHead(TypedDict, total=False):
    """The fields of an object that scopes are matched on; the rest is not materialised."""

    kind: Any
    type: str


ObjectT = TypeVar("ObjectT")
OldObjectT = TypeVar("OldObjectT")


class RequestEnvelope(TypedDict, Generic[ObjectT, OldObjectT]):
    """AdmissionRequest's envelope; each decoder picks how much of the objects it decodes."""

    uid: Annotated[str, msgspec.Meta(min_length=1)]
    kind: GroupVersionKind
    resource: GroupVersionResource
    operation: Literal["CREATE", "UPDATE", "DELETE", "CONNECT"]
    subResource: NotRequired[str]
    name: NotRequired[str]
    namespace: NotRequired[str]
    userInfo: NotRequired[UserInfo]
    dryRun: NotRequired[bool]
    object: NotRequired[ObjectT | None]
    oldObject: NotRequired[OldObjectT | None]


_Request = RequestEnvelope[dict[str, Any], dict[str, Any]]
_RequestHead = RequestEnvelope[ObjectHead, ObjectHead]


class Review(TypedDict):
    apiVersion: str
    kind: str
    request: _Request


class ReviewHeadShape(TypedDict):
    apiVersion: str
    kind: str
    request: _RequestHead


# One pass each: the envelope typed and checked, the object as plain dicts and lists (every field
# kept) or, for the head, skipped over.
_DECODER = msgspec.json.Decoder(Review)
# Answers are encoded compactly in C (json.dumps cost several times as much per review);
# non-ASCII text stays UTF-8, which JSON and the API server's decoder take as it is.
_ENCODER = msgspec.json.Encoder()
_HEAD_DECODER = msgspec.json.Decoder(ReviewHeadShape)


class ReviewError(Exception):
    """The body is not a usable AdmissionReview; the message says what is wrong (HTTP 400)."""


_EXPECTED = re.compile(r"Expected `(?P<want>[^`]+)`(?:, got `(?P<got>[^`]+)`)?")
_WHERE = re.compile(r" - at `\$(?P<path>[^`]*)`$")
_NAMES = {
    "array": "a list",
    "object": "an object",
    "str": "a string",
    "bool": "true or false",
    "int": "an integer",
    "float": "a number",
}


def _what(want: str) -> str:
    kinds = [k for k in want.split(" | ") if k != "null"]
    if set(kinds) == {"int", "float", "str"}:
        return "expected a quantity"  # shapes.Quantity
    return "expected " + " or ".join(_NAMES.get(k, k) for k in kinds)


def describe_shape_error(error: msgspec.ValidationError, prefix: str = "") -> str:
    """msgspec's `Expected `array | null`, got `str` - at `$.a.b[0]`` as `a.b[0]: expected a
    list`, with `prefix` before the path (the object's place in the review)."""
    text = str(error)
    where = _WHERE.search(text)
    path = prefix + (where.group("path") if where else "")
    message = text[: where.start()] if where else text
    if path.endswith("[...]"):  # a value of a map: msgspec does not name the key
        path = path[: -len("[...]")]
        every = True
    else:
        every = False
    path = path.lstrip(".") or "body"
    missing = re.match(r"Object missing required field `(?P<field>[^`]+)`", message)
    if missing:
        return f"{path}.{missing.group('field')}: is required"
    expected = _EXPECTED.match(message)
    if expected and "of length" in message:
        return f"{path}: must not be empty"
    if expected:
        what = _what(expected.group("want"))
        return f"{path}: {'every value ' + what.replace('expected', 'must be') if every else what}"
    if message.startswith("Invalid enum value"):
        return f"{path}: must be one of {', '.join(OPERATIONS)}"
    return f"{path}: {message}"


def _decode(decoder: msgspec.json.Decoder[Any], body: bytes) -> dict[str, Any]:
    try:
        review = decoder.decode(body)
    except msgspec.ValidationError as exc:  # a DecodeError too: this one first
        if str(exc).startswith("Expected `object`, got") and "- at" not in str(exc):
            raise ReviewError("request body is not an AdmissionReview object") from exc
        if str(exc).startswith("Number out of range"):
            raise ReviewError("request body is not valid JSON") from exc
        raise ReviewError(f"not a valid AdmissionReview: {describe_shape_error(exc)}") from exc
    except msgspec.DecodeError as exc:
        raise ReviewError("request body is not valid JSON") from exc
    if not isinstance(review, dict):
        raise ReviewError("request body is not an AdmissionReview object")
    return review  # type: ignore[no-any-return]


def _shaped(request: dict[str, Any], expected_kind: str) -> None:
    """The object's (and the old object's) fields that policies read have their Kubernetes
    shape (`webhooks.core.review_shapes`)."""
    shape = SHAPES.get(expected_kind)
    if shape is None:
        return
    for field in ("object", "oldObject"):
        obj = request.get(field)
        if obj is None:
            continue
        try:
            msgspec.convert(obj, shape)
        except msgspec.ValidationError as exc:
            where = describe_shape_error(exc, f"request.{field}")
            raise ReviewError(f"not a valid AdmissionReview: {where}") from exc


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
    # The group and kind the request names: for the workloads endpoint, whose `kind` is WORKLOAD.
    group: str = ""
    object_kind: str = ""

    @property
    def annotations(self) -> dict[str, str]:
        return (self.object.get("metadata") or {}).get("annotations") or {}


def _checked(
    review: dict[str, Any], expected_kind: str
) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """The checks a type cannot express; returns the request and its object."""
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
    if expected_kind == WORKLOAD:
        return request, obj
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
    return request_of(_decode(_DECODER, body), expected_kind)


def request_of(review: dict[str, Any], expected_kind: str) -> AdmissionRequest:
    """A review already decoded (its envelope typed and checked by the decoder: `parse_review`,
    or the pod memo's probe, `webhooks.service.memo`) checked as a whole and made a request."""
    request, obj = _checked(review, expected_kind)
    _shaped(request, expected_kind)
    get = request.get
    old = get("oldObject")
    metadata = (obj.get("metadata") or {}) if obj is not None else {}
    user = get("userInfo")
    named = request["kind"]
    return AdmissionRequest(
        uid=request["uid"],
        kind=expected_kind if expected_kind == WORKLOAD else named["kind"],
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
        group=named["group"],
        object_kind=named["kind"],
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
    request, obj = _checked(_decode(_HEAD_DECODER, body), expected_kind)
    if obj is None:
        obj = request.get("oldObject") or {}
    operation = request["operation"]
    return ReviewHead(
        request["uid"],
        operation,
        (expected_kind, operation, request.get("subResource", ""), obj.get("type")),
    )


def clip_warning(text: str) -> str:
    """Keep each warning within what the API server always passes on whole."""
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


# An encoded response is this prefix, the uid, and a tail that depends on the answer alone.
_RESPONSE_PREFIX = (
    b'{"apiVersion":"admission.k8s.io/v1","kind":"AdmissionReview","response":{"uid":'
)
ALLOWED_TAIL = b',"allowed":true}}'


def response_body(uid: str, tail: bytes) -> bytes:
    """The encoded response for `uid` whose answer is `tail` (`response_tail`)."""
    # The encoder json.dumps uses for a str, called directly.
    return _RESPONSE_PREFIX + encode_basestring_ascii(uid).encode() + tail


def allowed_response_body(uid: str) -> bytes:
    """`build_response(uid, True)` encoded compactly, without building the dict: the most common
    answer, made on every request no policy changes or warns about."""
    return response_body(uid, ALLOWED_TAIL)


def response_tail(
    allowed: bool,
    *,
    patch: list[dict[str, Any]] | None = None,
    warnings: list[str] | tuple[str, ...] = (),
    message: str = "",
    code: int = 403,
    audit_annotations: Mapping[str, str] | None = None,
) -> bytes:
    """`build_response` encoded compactly, less the part before and including the uid: what
    reviews with the same answer share."""
    if allowed and not patch and not warnings and not audit_annotations:
        return ALLOWED_TAIL
    payload = build_response(
        "",
        allowed,
        patch=patch,
        warnings=warnings,
        message=message,
        code=code,
        audit_annotations=audit_annotations,
    )
    encoded = _ENCODER.encode(payload)
    return encoded[len(_RESPONSE_PREFIX) + len(b'""') :]


def build_response(
    uid: str,
    allowed: bool,
    *,
    patch: list[dict[str, Any]] | None = None,
    warnings: list[str] | tuple[str, ...] = (),
    message: str = "",
    code: int = 403,
    audit_annotations: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The AdmissionReview response; a patch only when there are operations."""
    response: dict[str, Any] = {"uid": uid, "allowed": allowed}
    if not allowed:
        response["status"] = {"code": code, "message": message}
    elif patch:
        response["patchType"] = "JSONPatch"
        response["patch"] = base64.b64encode(_ENCODER.encode(patch)).decode()
    if warnings:
        response["warnings"] = [clip_warning(w) for w in warnings]
    if audit_annotations:
        response["auditAnnotations"] = dict(audit_annotations)
    return {"apiVersion": API_VERSION, "kind": KIND, "response": response}
