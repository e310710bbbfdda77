"""What AdmissionReview bodies are accepted and how they are refused, down to the message: a
faster JSON decoder on this path must keep both."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.webhooks.server_helpers import fixture
from webhooks.core.review import ReviewError, parse_review

BIG = 2**70  # valid JSON beyond 64 bits, which some fast decoders refuse


def _review(change: Any = None) -> dict[str, Any]:
    review = fixture("pod-gpu.mutating.json")
    if change is not None:
        change(review)
    return review


def _body(review: dict[str, Any]) -> bytes:
    return json.dumps(review).encode()


def test_an_integer_beyond_64_bits_in_the_object_is_kept():
    review = _review(lambda r: r["request"]["object"]["metadata"].update(generation=BIG))
    request = parse_review(_body(review), "Pod")
    assert request.object["metadata"]["generation"] == BIG
    assert request.object == review["request"]["object"]


@pytest.mark.parametrize("text", ['"caf\\u00e9"', '"\\u2603 snow"'])
def test_escaped_characters_are_decoded(text: str):
    body = _body(_review()).replace(b'"namespace": "ml"', b'"namespace": ' + text.encode(), 1)
    assert parse_review(body, "Pod").namespace == json.loads(text)


def test_a_lone_surrogate_is_not_json():
    # Go's encoder never writes one (the API server replaces invalid UTF-8), so it can only come
    # from another caller.
    body = _body(_review()).replace(b'"namespace": "ml"', b'"namespace": "\\ud800"', 1)
    with pytest.raises(ReviewError, match="not valid JSON"):
        parse_review(body, "Pod")


def _container(review: dict[str, Any]) -> dict[str, Any]:
    return review["request"]["object"]["spec"]["containers"][0]


FIELD_ERRORS = {
    "uid not a string": (
        lambda r: r["request"].update(uid=5),
        "not a valid AdmissionReview: request.uid: expected a string",
    ),
    "uid empty": (
        lambda r: r["request"].update(uid=""),
        "not a valid AdmissionReview: request.uid: must not be empty",
    ),
    "uid missing": (
        lambda r: r["request"].pop("uid"),
        "not a valid AdmissionReview: request.uid: is required",
    ),
    "operation unknown": (
        lambda r: r["request"].update(operation="PATCH"),
        "not a valid AdmissionReview: request.operation: must be one of CREATE, UPDATE, "
        "DELETE, CONNECT",
    ),
    "dryRun not a bool": (
        lambda r: r["request"].update(dryRun="yes"),
        "not a valid AdmissionReview: request.dryRun: expected true or false",
    ),
    "object not a mapping": (
        lambda r: r["request"].update(object=[1]),
        "not a valid AdmissionReview: request.object: expected an object",
    ),
    "groups not strings": (
        lambda r: r["request"]["userInfo"].update(groups=[1]),
        "not a valid AdmissionReview: request.userInfo.groups[0]: expected a string",
    ),
    # Objects a real API server never sends, but a direct caller can: refused by path, never
    # left to fail inside a policy.
    "env a string": (
        lambda r: _container(r).update(env="PATH=/bin"),
        "not a valid AdmissionReview: request.object.spec.containers[0].env: expected a list",
    ),
    "containers an object": (
        lambda r: r["request"]["object"]["spec"].update(containers={"name": "x"}),
        "not a valid AdmissionReview: request.object.spec.containers: expected a list",
    ),
    "env entry without a name": (
        lambda r: _container(r).update(env=[{"name": 5}]),
        "not a valid AdmissionReview: request.object.spec.containers[0].env[0].name: "
        "expected a string",
    ),
    "annotation not a string": (
        lambda r: r["request"]["object"]["metadata"].update(annotations={"a": 1}),
        "not a valid AdmissionReview: request.object.metadata.annotations: every value must be "
        "a string",
    ),
    "resource limit not a quantity": (
        lambda r: _container(r)["resources"].update(limits={"nvidia.com/gpu": [1]}),
        "not a valid AdmissionReview: request.object.spec.containers[0].resources.limits: "
        "every value must be a quantity",
    ),
    "old object's volumes not a list": (
        lambda r: r["request"].update(oldObject={"spec": {"volumes": "data"}}),
        "not a valid AdmissionReview: request.oldObject.spec.volumes: expected a list",
    ),
}


@pytest.mark.parametrize("case", FIELD_ERRORS, ids=list(FIELD_ERRORS))
def test_field_errors_name_the_field_and_what_it_should_be(case: str):
    change, expected = FIELD_ERRORS[case]
    with pytest.raises(ReviewError) as raised:
        parse_review(_body(_review(change)), "Pod")
    assert str(raised.value) == expected


@pytest.mark.parametrize("body", [b"null", b"1", b'"text"'])
def test_json_that_is_not_an_object_is_not_an_admission_review(body: bytes):
    with pytest.raises(ReviewError, match="request body is not an AdmissionReview object"):
        parse_review(body, "Pod")


def test_a_truncated_body_is_not_json():
    with pytest.raises(ReviewError, match="request body is not valid JSON"):
        parse_review(_body(_review())[:-10], "Pod")
