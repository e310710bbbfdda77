"""The chain: several policies' operations compose into ONE patch that applies to the object as
sent; reinvocation on the patched object records nothing; failures follow the failure mode."""

from __future__ import annotations

import copy
import json
import logging
from collections.abc import Iterable
from typing import Any

import jsonpatch

from gpu_admission.cluster.view import (
    ClusterView,
    ObjectRef,
    ServiceAccountInfo,
    StaticClusterView,
)
from gpu_admission.config.model import FailureMode
from tests.webhooks.policy_helpers import mutate_twice
from tests.webhooks.server_helpers import annotate, env_everywhere, fixture_bytes
from webhooks.core.patch import Patch
from webhooks.core.review import AdmissionRequest, Verdict, parse_review
from webhooks.dispatch import chain
from webhooks.policies.interface import MutatingPolicy, Scope, ValidatingPolicy

VIEW = StaticClusterView()
POD_REVIEW = fixture_bytes("pod-gpu.mutating.json")


def pod_request() -> AdmissionRequest:
    return parse_review(POD_REVIEW, "Pod")


def fresh_object() -> dict[str, Any]:
    return json.loads(POD_REVIEW)["request"]["object"]


def reads_annotation(key: str) -> MutatingPolicy:
    """Copies an annotation an earlier policy wrote into a label: it must see earlier changes."""

    def mutate(request: AdmissionRequest, patch: Patch, view: ClusterView) -> None:
        value = request.annotations.get(key)
        if value is not None:
            patch.set_label("copied", value)

    return MutatingPolicy("copy", Scope("Pod"), mutate)


def gate() -> MutatingPolicy:
    def mutate(request: AdmissionRequest, patch: Patch, view: ClusterView) -> None:
        gates = request.object["spec"].get("schedulingGates") or []
        if {"name": "test.example/gate"} not in gates:
            patch.append("/spec/schedulingGates", {"name": "test.example/gate"})

    return MutatingPolicy("gate", Scope("Pod"), mutate)


def exploding(after_patching: bool = False) -> MutatingPolicy:
    def mutate(request: AdmissionRequest, patch: Patch, view: ClusterView) -> None:
        if after_patching:
            patch.set_annotation("half-done", "true")
        raise KeyError("spec")

    return MutatingPolicy("exploding", Scope("Pod"), mutate)


POLICIES = (
    annotate("test.example/a", "1"),
    env_everywhere("TEST_FLAG", "on"),
    reads_annotation("test.example/a"),
    gate(),
)


def test_policies_compose_into_one_patch_that_applies_to_the_sent_object():
    request = pod_request()
    outcome = chain.run_mutating(request, POLICIES, VIEW, FailureMode.DENY, fresh_object)
    assert outcome.allowed and outcome.failed_policies == []
    patched = jsonpatch.apply_patch(fresh_object(), outcome.ops)
    assert patched == request.object
    assert patched["metadata"]["labels"]["copied"] == "1"
    assert all(
        {"name": "TEST_FLAG", "value": "on"} in c["env"]
        for c in patched["spec"]["containers"] + patched["spec"]["initContainers"]
    )
    assert patched["spec"]["schedulingGates"] == [{"name": "test.example/gate"}]


def test_reinvocation_on_the_patched_object_records_nothing():
    request = pod_request()
    first = chain.run_mutating(request, POLICIES, VIEW, FailureMode.DENY, fresh_object)
    again = pod_request()
    again.object = jsonpatch.apply_patch(fresh_object(), first.ops)
    second = chain.run_mutating(again, POLICIES, VIEW, FailureMode.DENY, fresh_object)
    assert second.allowed and second.ops == []


def test_policy_helper_agrees_with_the_chain():
    ops, warnings, verdict, patched = mutate_twice(POLICIES, fresh_object(), VIEW)
    assert verdict is None and warnings == []
    request = pod_request()
    outcome = chain.run_mutating(request, POLICIES, VIEW, FailureMode.DENY, fresh_object)
    assert ops == outcome.ops and patched == request.object


def test_policies_out_of_scope_do_not_run():
    update_only = MutatingPolicy(
        "update only",
        Scope("Pod", operations=frozenset({"UPDATE"})),
        annotate("x", "y").mutate,
    )
    subresource = MutatingPolicy(
        "ephemeral",
        Scope("Pod", frozenset({"CREATE"}), frozenset({"ephemeralcontainers"})),
        annotate("x", "y").mutate,
    )
    outcome = chain.run_mutating(
        pod_request(), (update_only, subresource), VIEW, FailureMode.DENY, fresh_object
    )
    assert outcome.ops == []


def test_mutating_denial_stops_the_chain():
    def refuse(request: AdmissionRequest, patch: Patch, view: ClusterView) -> Verdict:
        patch.warn("looked at it")
        return Verdict.deny("no GPUs for you today; ask for a quota", code=422)

    policies = (MutatingPolicy("refuse", Scope("Pod"), refuse), annotate("after", "1"))
    outcome = chain.run_mutating(pod_request(), policies, VIEW, FailureMode.DENY, fresh_object)
    assert not outcome.allowed
    assert (outcome.code, outcome.message) == (422, "no GPUs for you today; ask for a quota")
    assert outcome.warnings == ["looked at it"]


def test_failure_under_deny_refuses_with_500_and_logs(caplog):
    caplog.set_level(logging.ERROR)
    policies = (annotate("a", "1"), exploding())
    outcome = chain.run_mutating(pod_request(), policies, VIEW, FailureMode.DENY, fresh_object)
    assert not outcome.allowed
    assert outcome.code == chain.INTERNAL_ERROR_CODE
    assert outcome.failed_policies == ["exploding"]
    assert "exploding" in outcome.message and "retry" in outcome.message
    assert any("policy exploding raised" in r.getMessage() for r in caplog.records)


def test_failure_under_allow_starts_again_without_the_failed_policy():
    calls: list[str] = []

    def counting_fresh() -> dict[str, Any]:
        calls.append("fresh")
        return fresh_object()

    policies = (annotate("a", "1"), exploding(after_patching=True), env_everywhere("F", "1"))
    request = pod_request()
    outcome = chain.run_mutating(request, policies, VIEW, FailureMode.ALLOW, counting_fresh)
    assert outcome.allowed
    assert calls == ["fresh"]
    assert outcome.failed_policies == ["exploding"]
    assert any("exploding was skipped" in w for w in outcome.warnings)
    patched = jsonpatch.apply_patch(fresh_object(), outcome.ops)
    assert patched == request.object
    assert "half-done" not in patched["metadata"].get("annotations", {})
    assert patched["metadata"]["annotations"]["a"] == "1"


def validating(name: str, verdict: Verdict) -> ValidatingPolicy:
    return ValidatingPolicy(name, Scope("Pod"), lambda request, view: verdict)


def test_validating_reports_every_denial_at_once_with_the_first_code():
    policies = (
        validating("ok", Verdict.allow("a warning")),
        validating("first", Verdict.deny("fix the first thing", code=422)),
        validating("second", Verdict.deny("fix the second thing")),
    )
    outcome = chain.run_validating(pod_request(), policies, VIEW, FailureMode.DENY)
    assert not outcome.allowed
    assert outcome.code == 422
    assert outcome.message == "fix the first thing; fix the second thing"
    assert outcome.warnings == ["a warning"]


def test_validating_failure_follows_the_failure_mode():
    def boom(request: AdmissionRequest, view: ClusterView) -> Verdict:
        raise ValueError("bad state")

    policies = (ValidatingPolicy("boom", Scope("Pod"), boom), validating("ok", Verdict.allow()))
    denied = chain.run_validating(pod_request(), policies, VIEW, FailureMode.DENY)
    assert not denied.allowed and denied.code == 500 and denied.failed_policies == ["boom"]
    allowed = chain.run_validating(pod_request(), policies, VIEW, FailureMode.ALLOW)
    assert allowed.allowed and allowed.failed_policies == ["boom"]
    assert allowed.warnings == ["boom was skipped after an internal error; ask your platform team"]


def test_references_come_from_applicable_policies_and_a_failing_one_is_skipped(caplog):
    wanted = ObjectRef("Secret", "ml", "gcs-reader")

    def broken(request: AdmissionRequest, view: object) -> list[ObjectRef]:
        raise AttributeError("no")

    noop = annotate("x", "y").mutate
    policies = (
        MutatingPolicy("refs", Scope("Pod"), noop, references=lambda r, v: [wanted]),
        MutatingPolicy("broken", Scope("Pod"), noop, references=broken),
        MutatingPolicy(
            "pvc", Scope("PersistentVolumeClaim"), noop, references=lambda r, v: [wanted]
        ),
    )
    caplog.set_level(logging.ERROR)
    assert chain.references(pod_request(), policies) == [wanted]
    assert any("policy broken raised" in r.getMessage() for r in caplog.records)


class AccountsView(StaticClusterView):
    """A view whose ServiceAccounts arrive while the request waits, as a resolver fills them."""

    def __init__(self) -> None:
        super().__init__()
        self.accounts: dict[tuple[str, str], ServiceAccountInfo] = {}

    def service_account(self, namespace: str, name: str) -> ServiceAccountInfo | None:
        return self.accounts.get((namespace, name))


class RecordingResolver:
    """Records what it was asked, and makes the ServiceAccount it is asked for arrive."""

    def __init__(self, view: AccountsView, arriving: dict[ObjectRef, ServiceAccountInfo]) -> None:
        self.view, self.arriving = view, arriving
        self.asked: list[list[ObjectRef]] = []

    async def resolve(self, refs: Iterable[ObjectRef]) -> None:
        self.asked.append(list(refs))
        for ref in self.asked[-1]:
            if ref in self.arriving:
                self.view.accounts[(ref.namespace, ref.name)] = self.arriving[ref]


async def test_resolution_asks_again_for_objects_named_by_freshly_fetched_ones():
    account = ObjectRef("ServiceAccount", "ml", "trainer")
    secret = ObjectRef("Secret", "ml", "gcs-reader")

    def refs(request, view):
        found = view.service_account("ml", "trainer") if view is not None else None
        return [account, *([secret] if found else [])]

    noop = annotate("x", "y").mutate
    policies = (MutatingPolicy("refs", Scope("Pod"), noop, references=refs),)
    view = AccountsView()
    arriving = {account: ServiceAccountInfo("ml", "trainer", {})}
    resolver = RecordingResolver(view, arriving)
    await chain.resolve_references(pod_request(), policies, view, resolver)
    assert resolver.asked == [[account], [secret]]


def test_the_working_object_is_the_parsed_one_without_copies():
    # The chain changes request.object in place: no per-request deepcopy on the hot path.
    request = pod_request()
    original = request.object
    snapshot = copy.deepcopy(original)
    chain.run_mutating(request, POLICIES, VIEW, FailureMode.DENY, fresh_object)
    assert request.object is original and original != snapshot
