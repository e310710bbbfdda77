"""Helpers for policy tests: run mutating policies the way the service does, check that the
recorded JSON Patch reproduces the working object, and that a second run records nothing."""

from __future__ import annotations

import copy
import json
from collections.abc import Sequence
from typing import Any

import jsonpatch

from gpu_admission.cluster.view import ClusterView
from tests import REVIEW_FIXTURES
from webhooks.core.patch import Patch
from webhooks.core.review import AdmissionRequest, Verdict
from webhooks.policies.interface import MutatingPolicy

FIXTURES = REVIEW_FIXTURES


def load_fixture(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name).read_text())


def make_request(obj: dict[str, Any], **fields: Any) -> AdmissionRequest:
    meta = obj.get("metadata") or {}
    values: dict[str, Any] = {
        "uid": "test-uid",
        "kind": obj.get("kind", "Pod"),
        "resource": "",
        "sub_resource": "",
        "operation": "CREATE",
        "namespace": meta.get("namespace", "default"),
        "name": meta.get("name", ""),
        "object": obj,
        "old_object": None,
        "dry_run": False,
    }
    values.update(fields)
    return AdmissionRequest(**values)


def _run_once(
    policies: Sequence[MutatingPolicy], obj: dict[str, Any], view: ClusterView, fields: dict
) -> tuple[list[dict[str, Any]], list[str], Verdict | None, dict[str, Any]]:
    working = copy.deepcopy(obj)
    request = make_request(working, **fields)
    patch = Patch(working)
    verdict = None
    for policy in policies:
        if not policy.scope.matches(request):
            continue
        verdict = policy.mutate(request, patch, view)
        if verdict is not None and not verdict.allowed:
            break
    return patch.ops, patch.warnings, verdict, working


def mutate_twice(
    policies: Sequence[MutatingPolicy], obj: dict[str, Any], view: ClusterView, **fields: Any
) -> tuple[list[dict[str, Any]], list[str], Verdict | None, dict[str, Any]]:
    """Run the policies; assert the patch applied to the original equals the working object and
    that running again on the result records no operation. Returns (ops, warnings, verdict,
    patched object)."""
    ops, warnings, verdict, patched = _run_once(policies, obj, view, fields)
    if verdict is not None and not verdict.allowed:
        return ops, warnings, verdict, patched
    applied = jsonpatch.apply_patch(copy.deepcopy(obj), ops)
    assert applied == patched, "the recorded patch does not reproduce the working object"
    again, _, second_verdict, _ = _run_once(policies, patched, view, fields)
    assert again == [], f"not reinvocation-safe: a second run recorded {again}"
    assert second_verdict is None or second_verdict.allowed
    return ops, warnings, verdict, patched
