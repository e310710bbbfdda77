"""The answers to pods of one template, computed once: what every pod of a Deployment or Job
repeats.

The pods a ReplicaSet or a Job creates reach the mutating webhook identical but for what the API
server makes up for each: the request's uid, the random suffix of the ServiceAccount token volume
(`kube-api-access-xxxxx`), the managedFields' timestamps. The pod mutations read the object's
metadata and spec, the namespace and the cluster view, and nothing else: no uid, no timestamp,
not the request's user (their scopes take Pod CREATE, and with no subresource there is no old
object). So the answer to one such pod is the answer to the next, as long as no record in the
view has changed.

`probe` decodes a body once, typed: the envelope checked in full (it carries the uid to answer
with), the object's spec and the metadata policies read kept as raw bytes, everything else
skipped. On a miss the request is made from that same decode (`probed_request`): only the raw
parts are decoded then, once each, so no byte of a review is decoded twice. The key is the
view's generation (it moves on any change of any cached record, and on every object fetched on a
miss), the envelope fields that select the policies, and those bytes with the token volume's
suffix blanked. Only allowed answers are kept, when every policy ran and the view was complete,
and when none of their operations or warnings names a token volume: that one differs for the
next pod.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from typing import Any, NamedTuple, TypedDict

import msgspec

from gpu_admission.cluster.view import ClusterView
from webhooks.core.review import AdmissionRequest, RequestEnvelope, request_of
from webhooks.dispatch.chain import Outcome

TOKEN_VOLUME_PREFIX = b"kube-api-access-"
# Keys the controllers put on each pod of a set with that pod's own identity (k8s.io/api
# batch/v1 JobCompletionIndexAnnotation, also a label; apps/v1 StatefulSetPodNameLabel and
# PodIndexLabel). A pod carrying one is never the same as another, so the memo neither probes
# nor keeps it: a 1,000-pod Indexed Job would otherwise cost a probe each and push every
# Deployment's template out. Matched as quoted JSON keys: managedFields spell them `f:...`.
PER_POD_KEYS = (
    b'"batch.kubernetes.io/job-completion-index"',
    b'"statefulset.kubernetes.io/pod-name"',
    b'"apps.kubernetes.io/pod-index"',
)
TOKEN_SUFFIX_LENGTH = 5  # k8s.io/apiserver's names.SimpleNameGenerator: 5 random characters


class _KeyMetadata(TypedDict, total=False):
    name: str
    generateName: str
    namespace: str
    labels: msgspec.Raw
    annotations: msgspec.Raw
    ownerReferences: msgspec.Raw
    finalizers: msgspec.Raw


class _KeyObject(TypedDict, total=False):
    apiVersion: str
    kind: str
    metadata: _KeyMetadata
    spec: msgspec.Raw


_KeyRequest = RequestEnvelope[_KeyObject, msgspec.Raw]


class _KeyReview(TypedDict):
    apiVersion: str
    kind: str
    request: _KeyRequest


_KEY_DECODER = msgspec.json.Decoder(_KeyReview)
_ENCODER = msgspec.json.Encoder()


class Probe(NamedTuple):
    key: Hashable
    uid: str
    operation: str
    review: dict[str, Any]  # as decoded: the raw parts still raw


def _decoded(value: Any) -> Any:
    return msgspec.json.decode(bytes(value)) if isinstance(value, msgspec.Raw) else value


def probed_request(probe: Probe, expected_kind: str) -> AdmissionRequest:
    """The request of a probed review (`parse_review`'s checks included; ReviewError says what
    is wrong): its object holds what the mutating policies read, the fields the key is made of,
    its raw parts decoded now."""
    review = probe.review
    request = dict(review["request"])
    obj = request.get("object")
    if obj is not None:
        obj = {k: _decoded(v) for k, v in obj.items()}
        if isinstance(obj.get("metadata"), dict):
            obj["metadata"] = {k: _decoded(v) for k, v in obj["metadata"].items()}
        request["object"] = obj
    request["oldObject"] = _decoded(request.get("oldObject"))
    return request_of({**review, "request": request}, expected_kind)


def _blank_token_suffix(raw: bytes) -> bytes:
    """The spec with the token volume's random suffix blanked (it is the same in every place
    the spec names it)."""
    at = raw.find(TOKEN_VOLUME_PREFIX)
    if at == -1:
        return raw
    start = at + len(TOKEN_VOLUME_PREFIX)
    name = raw[at : start + TOKEN_SUFFIX_LENGTH]
    return raw.replace(name, TOKEN_VOLUME_PREFIX + b"*")


def _raw(value: Any) -> bytes:
    return bytes(value) if isinstance(value, msgspec.Raw) else b""


class MutationMemo:
    """Allowed outcomes of Pod CREATE reviews by `probe`'s key, kept for the last
    `max_entries` templates."""

    def __init__(self, max_entries: int = 256) -> None:
        self._max = max_entries
        self._entries: OrderedDict[Hashable, tuple[Outcome, bytes]] = OrderedDict()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def applies(request: AdmissionRequest) -> bool:
        return request.kind == "Pod" and request.operation == "CREATE" and not request.sub_resource

    @staticmethod
    def never_repeats(body: bytes) -> bool:
        """True when the body names a per-pod identity (`PER_POD_KEYS`): no answer to keep."""
        return any(key in body for key in PER_POD_KEYS)

    @staticmethod
    def probe(body: bytes, view: ClusterView) -> Probe | None:
        """The body's key, uid and operation; None when the body does not decode as a review
        (the full parse then says what is wrong)."""
        try:
            review = _KEY_DECODER.decode(body)
        except msgspec.DecodeError:  # ValidationError included
            return None
        request = review["request"]
        obj = request.get("object") or {}
        meta = obj.get("metadata") or {}
        key = (
            view.generation(),
            review["apiVersion"],
            review["kind"],
            request["kind"]["kind"],
            request["operation"],
            request.get("subResource", ""),
            request.get("namespace", ""),
            obj.get("apiVersion"),
            obj.get("kind"),
            meta.get("name"),
            meta.get("generateName"),
            meta.get("namespace"),
            _raw(meta.get("labels")),
            _raw(meta.get("annotations")),
            _raw(meta.get("ownerReferences")),
            _raw(meta.get("finalizers")),
            _blank_token_suffix(_raw(obj.get("spec"))),
        )
        return Probe(key, request["uid"], request["operation"], review)

    def get(self, key: Hashable) -> tuple[Outcome, bytes] | None:
        """The outcome and its encoded answer (`response_tail`), when known. Both are shared:
        callers must not change them."""
        found = self._entries.get(key)
        if found is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return found

    def put(self, key: Hashable, outcome: Outcome, tail: bytes) -> None:
        if outcome.failed_policies or not outcome.allowed:
            return  # a failure is not an answer to repeat; a denial is logged with its request
        said = _ENCODER.encode((outcome.ops, outcome.warnings, outcome.message))
        if TOKEN_VOLUME_PREFIX in said:
            return  # names what differs from pod to pod
        self._entries[key] = (outcome, tail)
        while len(self._entries) > self._max:
            self._entries.popitem(last=False)

    def __len__(self) -> int:
        return len(self._entries)
