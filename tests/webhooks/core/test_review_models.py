"""AdmissionReview v1 parsing against every body kube-apiserver really sent, the errors for bodies
it would never send, and the response shape it expects."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from tests import ROOT
from tests.webhooks.server_helpers import FIXTURES, fixture, fixture_bytes
from webhooks.core.review import (
    MAX_WARNING_LENGTH,
    ReviewError,
    build_response,
    parse_review,
)

KIND_BY_PREFIX = {
    "pod": "Pod",
    "ephemeral": "Pod",
    "pvc": "PersistentVolumeClaim",
    "secret": "Secret",
    "serviceaccount": "ServiceAccount",
}
V1BETA1 = "admission.k8s.io/v1beta1"
CAPTURED = sorted(p.name for p in FIXTURES.glob("*.json"))


def kind_of(name: str) -> str:
    return KIND_BY_PREFIX[name.split("-")[0]]


def test_every_capture_is_here():
    assert len(CAPTURED) >= 48


@pytest.mark.parametrize("name", CAPTURED)
def test_every_captured_review_parses_to_what_was_sent(name: str):
    sent = fixture(name)["request"]
    request = parse_review(fixture_bytes(name), kind_of(name))
    assert request.uid == sent["uid"]
    assert request.kind == kind_of(name)
    assert request.operation == sent["operation"]
    assert request.resource == sent["resource"]["resource"]
    assert request.sub_resource == sent.get("subResource", "")
    assert request.namespace == sent["namespace"]
    assert request.object == sent["object"]
    assert request.old_object == sent["oldObject"]
    assert request.dry_run is sent["dryRun"]
    assert request.username == sent["userInfo"]["username"]


def test_generated_name_pod_has_no_name_but_has_its_namespace():
    request = parse_review(fixture_bytes("pod-from-deployment.mutating.json"), "Pod")
    assert request.name == ""
    assert request.namespace == "ml"
    assert request.username == "system:serviceaccount:kube-system:replicaset-controller"


def test_create_has_null_old_object_and_update_has_the_stored_one():
    create = parse_review(fixture_bytes("secret-aws-data.validating.json"), "Secret")
    update = parse_review(fixture_bytes("secret-update.mutating.json"), "Secret")
    assert create.old_object is None
    assert update.old_object is not None
    assert update.old_object["data"]["AWS_REGION"] != update.object["data"]["AWS_REGION"]


def test_status_subresource_with_null_condition_timestamps():
    request = parse_review(
        fixture_bytes("pvc-status-update.mutating.json"), "PersistentVolumeClaim"
    )
    assert request.sub_resource == "status"
    assert request.object["status"]["conditions"][0]["lastTransitionTime"] is None


def test_dry_run_is_reported():
    assert parse_review(fixture_bytes("pod-dry-run.mutating.json"), "Pod").dry_run is True


def test_annotations_property_reads_the_object():
    request = parse_review(fixture_bytes("pod-node-selector-affinity.mutating.json"), "Pod")
    assert request.annotations["gpu-admission.io/gpu-app"] == "pytorch"


def test_delete_without_object_reviews_the_old_object():
    review = fixture("secret-update.mutating.json")
    review["request"].update(operation="DELETE", object=None)
    request = parse_review(json.dumps(review).encode(), "Secret")
    assert request.object == review["request"]["oldObject"]


def test_unknown_fields_are_ignored():
    review = fixture("pod-gpu.mutating.json")
    review["request"]["futureField"] = {"x": 1}
    review["somethingNew"] = True
    assert parse_review(json.dumps(review).encode(), "Pod").name == "train-resnet"


def _changed(name: str, change: Any) -> bytes:
    review = fixture(name)
    change(review)
    return json.dumps(review).encode()


ERRORS = {
    "not json": (b"\x00\x01", "request body is not valid JSON"),
    "empty": (b"", "request body is not valid JSON"),
    "array": (b"[]", "request body is not an AdmissionReview object"),
    "wrong kind": (
        _changed("pod-gpu.mutating.json", lambda r: r.update(kind="AdmissionResponse")),
        "kind must be 'AdmissionReview'",
    ),
    "v1beta1": (
        _changed("pod-gpu.mutating.json", lambda r: r.update(apiVersion=V1BETA1)),
        "set admissionReviewVersions: [v1]",
    ),
    "no uid": (_changed("pod-gpu.mutating.json", lambda r: r["request"].pop("uid")), "uid"),
    "empty uid": (
        _changed("pod-gpu.mutating.json", lambda r: r["request"].update(uid="")),
        "request.uid",
    ),
    "no object": (
        _changed("pod-gpu.mutating.json", lambda r: r["request"].pop("object")),
        "request.object is missing",
    ),
    "bad operation": (
        _changed("pod-gpu.mutating.json", lambda r: r["request"].update(operation="PATCH")),
        "request.operation",
    ),
    "object kind mismatch": (
        _changed("pod-gpu.mutating.json", lambda r: r["request"]["object"].update(kind="Secret")),
        "request.object is a Secret, expected Pod",
    ),
}


@pytest.mark.parametrize("case", ERRORS, ids=list(ERRORS))
def test_bodies_the_api_server_never_sends_are_refused_with_a_reason(case: str):
    body, expected = ERRORS[case]
    with pytest.raises(ReviewError) as raised:
        parse_review(body, "Pod")
    assert expected in str(raised.value)


def test_review_for_another_kind_names_both():
    with pytest.raises(ReviewError, match="reviews Pod objects, got Secret"):
        parse_review(fixture_bytes("secret-aws-data.mutating.json"), "Pod")


def test_response_without_changes_has_no_patch_fields():
    assert build_response("u1", True) == {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "response": {"uid": "u1", "allowed": True},
    }
    assert "patchType" not in build_response("u1", True, patch=[])["response"]


def test_response_with_operations_carries_a_base64_json_patch():
    ops = [{"op": "add", "path": "/metadata/labels", "value": {"a": "b"}}]
    response = build_response("u2", True, patch=ops)["response"]
    assert response["patchType"] == "JSONPatch"
    assert json.loads(base64.b64decode(response["patch"])) == ops


def test_denial_has_status_and_never_a_patch():
    ops = [{"op": "add", "path": "/x", "value": 1}]
    response = build_response("u3", False, patch=ops, message="fix it", code=422)["response"]
    assert response == {"uid": "u3", "allowed": False, "status": {"code": 422, "message": "fix it"}}


def test_warnings_are_kept_short_for_the_api_server():
    long = "word " * 80
    response = build_response("u4", True, warnings=["short", long])["response"]
    assert response["warnings"][0] == "short"
    assert len(response["warnings"][1]) == MAX_WARNING_LENGTH
    assert response["warnings"][1].endswith("...")


def test_fixture_directory_is_the_tests_own_copy():
    assert Path(FIXTURES).is_relative_to(ROOT / "tests")
