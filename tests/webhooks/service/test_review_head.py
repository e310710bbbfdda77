"""The head path: a webhook path whose policies all name the object types they apply to answers
requests for other types from the review's head alone, with the same checks and answers as the
full path."""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable
from typing import Any

import aiohttp
import msgspec
import pytest

from certs.issue import CertBundle
from gpu_admission.cluster.view import ClusterView, StaticClusterView
from gpu_admission.config.model import Config
from tests.webhooks.server_helpers import (
    client_context,
    fixture,
    fixture_bytes,
    issue_localhost_bundle,
    post_review,
    server_context,
    serving,
)
from webhooks.core.review import (
    AdmissionRequest,
    ReviewError,
    ScopeKey,
    Verdict,
    allowed_response_body,
    build_response,
    parse_review,
    parse_review_head,
    response_body,
    response_tail,
)
from webhooks.dispatch.registry import build_policy_set
from webhooks.policies.interface import PolicySet, Scope, ValidatingPolicy, typed_scope_keys
from webhooks.service import server as server_module
from webhooks.service.server import create_app

OPAQUE = "secret-denied.validating.json"  # an Opaque Secret
AWS = "secret-aws-data.validating.json"
GCP = "secret-gcp-stringdata.validating.json"


def _changed(name: str, change: Callable[[dict[str, Any]], Any]) -> bytes:
    review = fixture(name)
    change(review)
    return json.dumps(review).encode()


def scope_key(request: AdmissionRequest) -> ScopeKey:
    """What `Scope.matches` looks at, for a fully parsed request."""
    object_type = request.object.get("type")
    return (
        request.kind,
        request.operation,
        request.sub_resource,
        object_type if isinstance(object_type, str) else None,
    )


# -- parsing ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", [OPAQUE, AWS, GCP, "secret-update.validating.json"])
def test_head_carries_what_the_full_parse_gives(name: str):
    full = parse_review(fixture_bytes(name), "Secret")
    head = parse_review_head(fixture_bytes(name), "Secret")
    assert head.uid == full.uid
    assert head.operation == full.operation
    assert head.scope_key == scope_key(full)


def test_head_of_a_delete_takes_the_type_of_the_old_object():
    def delete(review: dict[str, Any]) -> None:
        request = review["request"]
        request.update(operation="DELETE", oldObject=request["object"], object=None)

    body = _changed(AWS, delete)
    assert parse_review_head(body, "Secret").scope_key == scope_key(parse_review(body, "Secret"))
    assert parse_review_head(body, "Secret").scope_key[3] == "aws-credential"


BAD = {
    "not json": b"{not json",
    "not an object": b"[1]",
    "v1beta1": _changed(OPAQUE, lambda r: r.update(apiVersion="admission.k8s.io/v1beta1")),
    "wrong review kind": _changed(OPAQUE, lambda r: r.update(kind="AdmissionResponse")),
    "no uid": _changed(OPAQUE, lambda r: r["request"].pop("uid")),
    "empty uid": _changed(OPAQUE, lambda r: r["request"].update(uid="")),
    "bad operation": _changed(OPAQUE, lambda r: r["request"].update(operation="PATCH")),
    "no object": _changed(OPAQUE, lambda r: r["request"].pop("object")),
    "object not a mapping": _changed(OPAQUE, lambda r: r["request"].update(object=[1])),
    "groups not strings": _changed(OPAQUE, lambda r: r["request"]["userInfo"].update(groups=[1])),
    "dryRun not a bool": _changed(OPAQUE, lambda r: r["request"].update(dryRun="yes")),
    "no resource": _changed(OPAQUE, lambda r: r["request"].pop("resource")),
    "other kind": fixture_bytes("pod-gpu.validating.json"),
    "object of another kind": _changed(
        OPAQUE, lambda r: r["request"]["object"].update(kind="ConfigMap")
    ),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_head_refuses_every_review_the_full_parse_refuses_with_the_same_words(case: str):
    with pytest.raises(ReviewError) as full:
        parse_review(BAD[case], "Secret")
    with pytest.raises(ReviewError) as head:
        parse_review_head(BAD[case], "Secret")
    assert str(head.value) == str(full.value)


def test_a_type_that_is_not_a_string_is_refused_on_the_head_path():
    body = _changed(OPAQUE, lambda r: r["request"]["object"].update(type=["gcp-credential"]))
    with pytest.raises(ReviewError, match=r"request\.object\.type: expected a string"):
        parse_review_head(body, "Secret")


# -- scope keys ---------------------------------------------------------------------------------


def _request(kind: str, operation: str, sub_resource: str, secret_type: Any) -> AdmissionRequest:
    obj = {} if secret_type is None else {"type": secret_type}
    return AdmissionRequest(
        "u", kind, "secrets", sub_resource, operation, "ns", "n", obj, None, False
    )


def test_scope_keys_match_exactly_what_the_scopes_match():
    def policy(scope: Scope) -> ValidatingPolicy:
        return ValidatingPolicy("p", scope, lambda request, view: Verdict.allow())

    policies = [
        policy(Scope("Secret", frozenset({"CREATE", "UPDATE"}), object_types=frozenset({"a"}))),
        policy(Scope("Secret", frozenset({"DELETE"}), frozenset({"", "s"}), frozenset({"b"}))),
    ]
    keys = typed_scope_keys(policies)
    assert keys is not None
    for combo in itertools.product(
        ["Secret", "Pod"],
        ["CREATE", "UPDATE", "DELETE", "CONNECT"],
        ["", "s", "status"],
        ["a", "b", "c", None, 5],
    ):
        request = _request(*combo)
        expected = any(p.scope.matches(request) for p in policies)
        assert (scope_key(request) in keys) is expected, combo


def test_a_scope_without_object_types_means_no_head_path():
    untyped = ValidatingPolicy("p", Scope("Secret"), lambda request, view: Verdict.allow())
    typed = ValidatingPolicy(
        "q", Scope("Secret", object_types=frozenset({"a"})), lambda request, view: Verdict.allow()
    )
    assert typed_scope_keys([typed, untyped]) is None
    assert typed_scope_keys([]) == frozenset()


# -- the allowed answer -------------------------------------------------------------------------


UIDS = ["705ab4f5-6393-11e8-b7cc-42010a800002", 'quote"back\\slash', "é☃\n"]


@pytest.mark.parametrize("uid", UIDS)
def test_the_prebuilt_allowed_answer_is_the_built_one_encoded(uid: str):
    built = json.dumps(build_response(uid, True), separators=(",", ":")).encode()
    assert allowed_response_body(uid) == built


# -- over HTTPS ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def bundle() -> CertBundle:
    return issue_localhost_bundle()


async def _answers(
    bundle: CertBundle, policy_set: PolicySet, bodies: list[bytes], view: ClusterView
) -> list[tuple[int, dict[str, Any]]]:
    app = create_app(Config(), policy_set, view, None, list)
    connector = aiohttp.TCPConnector(ssl=client_context(bundle))
    async with (
        serving(app, server_context(bundle)) as running,
        aiohttp.ClientSession(connector=connector) as session,
    ):
        return [
            await post_review(session, f"{running.url}/validate/secrets", body) for body in bodies
        ]


async def test_secrets_of_other_types_never_have_their_object_parsed(bundle, monkeypatch):
    def no_full_parse(body: bytes, expected_kind: str) -> AdmissionRequest:
        raise AssertionError("the full parse ran")

    monkeypatch.setattr(server_module, "parse_review", no_full_parse)
    policy_set = build_policy_set(Config())
    [(status, answer)] = await _answers(
        bundle, policy_set, [fixture_bytes(OPAQUE)], StaticClusterView()
    )
    assert status == 200
    assert answer["response"] == {"uid": fixture(OPAQUE)["request"]["uid"], "allowed": True}


async def test_credential_secrets_still_get_the_full_review(bundle):
    bad_aws = _changed(
        AWS,
        lambda r: r["request"]["object"]["data"].update(AWS_SECRET_KEY="eA=="),
    )
    answers = await _answers(
        bundle,
        build_policy_set(Config()),
        [fixture_bytes(AWS), bad_aws, fixture_bytes(OPAQUE)],
        StaticClusterView(),
    )
    [(ok_status, ok), (bad_status, bad), (opaque_status, opaque)] = answers
    assert ok_status == bad_status == opaque_status == 200
    assert ok["response"]["allowed"] is True
    assert bad["response"]["allowed"] is False
    assert "AWS_SECRET_KEY" in bad["response"]["status"]["message"]
    assert opaque["response"]["allowed"] is True


async def test_malformed_reviews_on_the_head_path_get_400_with_the_reason(bundle):
    answers = await _answers(
        bundle,
        build_policy_set(Config()),
        [BAD["groups not strings"], BAD["object of another kind"]],
        StaticClusterView(),
    )
    [(status1, answer1), (status2, answer2)] = answers
    assert status1 == status2 == 400
    assert "request.userInfo.groups[0]: expected a string" in answer1["error"]
    assert "request.object is a ConfigMap, expected Secret" in answer2["error"]


@pytest.mark.parametrize(
    "answer",
    [
        {"allowed": True},
        {"allowed": True, "patch": [{"op": "add", "path": "/x", "value": 1}], "warnings": ["w"]},
        {"allowed": False, "message": 'no "quotes" or ünicode lost', "code": 422},
    ],
)
def test_a_response_is_its_uid_and_a_tail_shared_by_equal_answers(answer):
    uid = 'uid-"1"'
    built = msgspec.json.encode(build_response(uid, **answer))
    assert response_body(uid, response_tail(**answer)) == built
