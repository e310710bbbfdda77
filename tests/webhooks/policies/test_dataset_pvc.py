"""Dataset PVC admission: the source and credentials checks, and the label the controller uses."""

from __future__ import annotations

import copy
import json

from gpu_admission.cluster.view import ObjectRef, SecretInfo, StaticClusterView
from gpu_admission.config.model import Config
from tests.webhooks.policy_helpers import FIXTURES, load_fixture, mutate_twice
from webhooks.core.review import AdmissionRequest, parse_review
from webhooks.policies.dataset_pvc import policies
from webhooks.policies.interface import MutatingPolicy, ValidatingPolicy

CONFIG = Config()
NAMES = CONFIG.names
MUTATING = [p for p in policies(CONFIG) if isinstance(p, MutatingPolicy)]
VALIDATING = next(p for p in policies(CONFIG) if isinstance(p, ValidatingPolicy))
S3_READER = SecretInfo("ml", "s3-reader", "aws-credential", frozenset({"AWS_ACCESS_KEY_ID"}))
GCS_READER = SecretInfo("ml", "gcs-reader", "gcp-credential", frozenset({"key.json"}))
VIEW = StaticClusterView(secrets=[S3_READER, GCS_READER])


def fixture_request(name: str) -> AdmissionRequest:
    return parse_review((FIXTURES / name).read_bytes(), "PersistentVolumeClaim")


def with_annotations(request: AdmissionRequest, **changes: str | None) -> AdmissionRequest:
    annotations = request.object["metadata"].setdefault("annotations", {})
    for key, value in changes.items():
        full = NAMES.prefix + key.replace("_", "-")
        if value is None:
            annotations.pop(full, None)
        else:
            annotations[full] = value
    return request


def validate(request: AdmissionRequest, view: StaticClusterView = VIEW):
    assert VALIDATING.scope.matches(request)
    return VALIDATING.validate(request, view)


def test_fixture_pvc_with_existing_aws_secret_is_allowed() -> None:
    request = fixture_request("pvc-dataset.validating.json")
    assert request.object["status"] == {}
    assert validate(request).allowed


def test_unparsable_source_is_denied_with_the_reason() -> None:
    request = with_annotations(
        fixture_request("pvc-dataset.validating.json"), data_source="s3://ML_Datasets/imagenet"
    )
    verdict = validate(request)
    assert not verdict.allowed
    assert "gpu-admission.io/data-source" in verdict.message
    assert "lowercase letters, digits, dots and hyphens" in verdict.message


def test_missing_secret_is_denied_naming_secret_namespace_and_type() -> None:
    verdict = validate(fixture_request("pvc-dataset.validating.json"), StaticClusterView())
    assert not verdict.allowed
    assert "'s3-reader' was not found in namespace 'ml'" in verdict.message
    assert "aws-credential" in verdict.message


def test_wrong_secret_type_for_the_scheme_is_denied() -> None:
    request = with_annotations(
        fixture_request("pvc-dataset.validating.json"), data_source="gs://ml-public/coco"
    )
    verdict = validate(request)
    assert not verdict.allowed
    assert "type 'aws-credential'" in verdict.message
    assert "needs a Secret of type 'gcp-credential'" in verdict.message
    request = with_annotations(request, data_credentials="gcs-reader")
    assert validate(request).allowed


def test_opaque_secret_is_the_wrong_type() -> None:
    view = StaticClusterView(secrets=[SecretInfo("ml", "s3-reader", "Opaque")])
    verdict = validate(fixture_request("pvc-dataset.validating.json"), view)
    assert not verdict.allowed and "type 'Opaque'" in verdict.message


def test_no_credentials_means_anonymous_and_is_allowed() -> None:
    request = with_annotations(
        fixture_request("pvc-dataset.validating.json"), data_credentials=None
    )
    assert validate(request, StaticClusterView()).allowed


def test_pvc_without_a_source_is_not_a_dataset() -> None:
    request = with_annotations(
        fixture_request("pvc-dataset.validating.json"), data_source=None, data_credentials=None
    )
    verdict = validate(request, StaticClusterView())
    assert verdict.allowed and not verdict.warnings
    request = with_annotations(request, data_credentials="s3-reader")
    verdict = validate(request, StaticClusterView())
    assert verdict.allowed and "has no effect" in verdict.warnings[0]


def test_references_name_the_credentials_secret() -> None:
    request = fixture_request("pvc-dataset.mutating.json")
    assert list(VALIDATING.references(request)) == [ObjectRef("Secret", "ml", "s3-reader")]
    request = with_annotations(request, data_credentials=None)
    assert list(VALIDATING.references(request)) == []


def _update(old: dict, new: dict) -> AdmissionRequest:
    body = load_fixture("pvc-dataset.validating.json")
    body["request"].update(operation="UPDATE", object=new, oldObject=old)
    return parse_review(json.dumps(body).encode(), "PersistentVolumeClaim")


def test_update_rechecks_only_when_source_or_credentials_change() -> None:
    stored = load_fixture("pvc-dataset.validating.json")["request"]["object"]
    controller_write = copy.deepcopy(stored)
    controller_write["metadata"]["annotations"][NAMES.data_load_phase] = "Failed"
    # The Secret was deleted after admission: the controller must still be able to write state.
    assert validate(_update(stored, controller_write), StaticClusterView()).allowed
    edited = copy.deepcopy(stored)
    edited["metadata"]["annotations"][NAMES.data_source] = "s3://ml-datasets/imagenet/val"
    verdict = validate(_update(stored, edited), StaticClusterView())
    assert not verdict.allowed and "not found" in verdict.message
    edited["metadata"]["annotations"][NAMES.data_source] = "s3://-bad"
    assert not validate(_update(stored, edited)).allowed


def test_status_subresource_is_out_of_scope() -> None:
    request = fixture_request("pvc-status-update.mutating.json")
    assert request.sub_resource == "status"
    assert not VALIDATING.scope.matches(request)
    assert not any(p.scope.matches(request) for p in MUTATING)


def test_label_added_on_create() -> None:
    pvc = load_fixture("pvc-dataset.mutating.json")["request"]["object"]
    ops, _warnings, _verdict, patched = mutate_twice(
        MUTATING, pvc, VIEW, kind="PersistentVolumeClaim"
    )
    assert patched["metadata"]["labels"] == {"gpu-admission.io/data-load": "true"}
    assert ops == [
        {"op": "add", "path": "/metadata/labels", "value": {}},
        {"op": "add", "path": "/metadata/labels/gpu-admission.io~1data-load", "value": "true"},
    ]


def test_label_put_back_when_a_user_removes_it_on_update() -> None:
    pvc = load_fixture("pvc-dataset.mutating.json")["request"]["object"]
    pvc["metadata"]["labels"] = {"team": "vision"}
    old = copy.deepcopy(pvc)
    old["metadata"]["labels"][NAMES.data_load_label] = "true"
    _, _, _, patched = mutate_twice(
        MUTATING, pvc, VIEW, kind="PersistentVolumeClaim", operation="UPDATE", old_object=old
    )
    assert patched["metadata"]["labels"] == {"team": "vision", NAMES.data_load_label: "true"}
    pvc["metadata"]["labels"][NAMES.data_load_label] = "false"
    ops, _, _, patched = mutate_twice(
        MUTATING, pvc, VIEW, kind="PersistentVolumeClaim", operation="UPDATE", old_object=old
    )
    assert (
        ops[0]["op"] == "replace" and patched["metadata"]["labels"][NAMES.data_load_label] == "true"
    )


def test_label_removed_with_the_source() -> None:
    pvc = load_fixture("pvc-dataset.mutating.json")["request"]["object"]
    pvc["metadata"]["annotations"] = {}
    pvc["metadata"]["labels"] = {NAMES.data_load_label: "true", "team": "vision"}
    _, _, _, patched = mutate_twice(MUTATING, pvc, VIEW, kind="PersistentVolumeClaim")
    assert patched["metadata"]["labels"] == {"team": "vision"}
    plain = {"kind": "PersistentVolumeClaim", "metadata": {"name": "x", "namespace": "ml"}}
    ops, *_ = mutate_twice(MUTATING, plain, VIEW, kind="PersistentVolumeClaim")
    assert ops == []
