"""What AdmissionReview bodies are accepted and how they are refused, down to the message: a
faster JSON decoder on this path must keep both."""

from __future__ import annotations

import json
from typing import Any

import pytest
from pydantic import ValidationError

from webhooks.review import (
    REVIEW,
    ReviewError,
    parse_review,
)

from .server_helpers import fixture

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


@pytest.mark.parametrize("text", ['"\\ud800"', '"caf\\u00e9"', '"\\u2603 snow"'])
def test_unusual_strings_are_treated_as_the_validators_parser_treats_them(text: str):
    body = _body(_review()).replace(b'"namespace": "ml"', b'"namespace": ' + text.encode(), 1)
    try:
        expected = REVIEW.validate_json(body)["request"]["namespace"]
    except ValidationError:
        with pytest.raises(ReviewError, match="not valid JSON"):
            parse_review(body, "Pod")
        return
    assert parse_review(body, "Pod").namespace == expected


FIELD_ERRORS = {
    "uid not a string": (
        lambda r: r["request"].update(uid=5),
        "not a valid AdmissionReview: request.uid: Input should be a valid string",
    ),
    "dryRun not a bool": (
        lambda r: r["request"].update(dryRun="yes"),
        "not a valid AdmissionReview: request.dryRun: Input should be a valid boolean",
    ),
    "object not a mapping": (
        lambda r: r["request"].update(object=[1]),
        "not a valid AdmissionReview: request.object: Input should be an object",
    ),
    "groups not strings": (
        lambda r: r["request"]["userInfo"].update(groups=[1]),
        "not a valid AdmissionReview: request.userInfo.groups.0: Input should be a valid string",
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
