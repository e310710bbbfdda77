"""Each mode's answer in the chain: enforce refuses or changes, warn admits with a warning,
audit admits unchanged and records what it would have done."""

from __future__ import annotations

import json
from typing import Any

from gpu_admission.cluster.view import ClusterView, StaticClusterView
from gpu_admission.config.model import FailureMode
from gpu_admission.config.policy_modes import PolicyMode
from tests.webhooks.server_helpers import env_everywhere, fixture_bytes
from webhooks.core.patch import Patch
from webhooks.core.review import AdmissionRequest, Verdict, parse_review
from webhooks.dispatch import chain
from webhooks.policies.interface import MutatingPolicy, Scope, ValidatingPolicy

VIEW = StaticClusterView()
POD_REVIEW = fixture_bytes("pod-gpu.mutating.json")
AUDIT, WARN = PolicyMode.AUDIT, PolicyMode.WARN


def pod_request() -> AdmissionRequest:
    return parse_review(POD_REVIEW, "Pod")


def fresh_object() -> dict[str, Any]:
    return json.loads(POD_REVIEW)["request"]["object"]


def refusing(name: str, message: str) -> ValidatingPolicy:
    return ValidatingPolicy(name, Scope("Pod"), lambda request, view: Verdict.deny(message))


def raising_validator(name: str) -> ValidatingPolicy:
    def validate(request: AdmissionRequest, view: ClusterView) -> Verdict:
        raise KeyError("spec")

    return ValidatingPolicy(name, Scope("Pod"), validate)


def test_enforce_refuses_and_counts_the_denial():
    outcome = chain.run_validating(
        pod_request(), [refusing("p", "no GPUs here")], VIEW, FailureMode.DENY
    )
    assert not outcome.allowed
    assert outcome.message == "no GPUs here"
    assert outcome.decisions == [("p", "enforce", "denied")]
    assert outcome.audit_annotations == {}


def test_warn_admits_with_a_warning_that_carries_the_refusal():
    outcome = chain.run_validating(
        pod_request(), [refusing("p", "no GPUs here")], VIEW, FailureMode.DENY, {"p": WARN}
    )
    assert outcome.allowed
    assert outcome.warnings == ["p (warn mode) would refuse this once enforced: no GPUs here"]
    assert outcome.audit_annotations == {"p": "would refuse: no GPUs here"}
    assert outcome.decisions == [("p", "warn", "warned")]


def test_audit_admits_silently_and_records():
    outcome = chain.run_validating(
        pod_request(), [refusing("p", "no GPUs here")], VIEW, FailureMode.DENY, {"p": AUDIT}
    )
    assert outcome.allowed
    assert outcome.warnings == []
    assert outcome.audit_annotations == {"p": "would refuse: no GPUs here"}
    assert outcome.decisions == [("p", "audit", "recorded")]


def test_an_enforcing_policy_still_refuses_beside_a_relaxed_one():
    policies = [refusing("watched", "first"), refusing("enforced", "second")]
    outcome = chain.run_validating(
        pod_request(), policies, VIEW, FailureMode.DENY, {"watched": AUDIT}
    )
    assert not outcome.allowed
    assert outcome.message == "second"
    assert outcome.audit_annotations == {"watched": "would refuse: first"}


def test_a_failing_policy_that_does_not_enforce_never_refuses(caplog):
    for mode in (WARN, AUDIT):
        outcome = chain.run_validating(
            pod_request(), [raising_validator("p")], VIEW, FailureMode.DENY, {"p": mode}
        )
        assert outcome.allowed
        assert outcome.failed_policies == ["p"]
        assert bool(outcome.warnings) is (mode is WARN)


def test_audit_mode_mutation_changes_nothing_and_records_what_it_would_change():
    request = pod_request()
    policy = env_everywhere("NVIDIA_VISIBLE_DEVICES", "none")
    outcome = chain.run_mutating(
        request, [policy], VIEW, FailureMode.DENY, fresh_object, {policy.name: AUDIT}
    )
    assert outcome.allowed
    assert outcome.ops == []
    assert request.object == fresh_object()
    would = outcome.audit_annotations[policy.name]
    assert would.startswith('would change: add init container "fetch-config" env')
    assert "NVIDIA_VISIBLE_DEVICES=none" in would
    assert outcome.decisions == [(policy.name, "audit", "recorded")]


def test_enforced_mutations_after_an_audited_one_still_apply():
    audited = env_everywhere("AUDITED", "1")
    enforced = env_everywhere("ENFORCED", "1")
    outcome = chain.run_mutating(
        pod_request(),
        [audited, enforced],
        VIEW,
        FailureMode.DENY,
        fresh_object,
        {audited.name: AUDIT},
    )
    assert outcome.ops and all("ENFORCED" in json.dumps(op) for op in outcome.ops)
    assert outcome.decisions == [
        (audited.name, "audit", "recorded"),
        (enforced.name, "enforce", "changed"),
    ]


def test_audit_mode_mutating_refusal_is_recorded_not_enforced():
    def mutate(request: AdmissionRequest, patch: Patch, view: ClusterView) -> Verdict:
        return Verdict.deny("no replica count on any node")

    policy = MutatingPolicy("share", Scope("Pod"), mutate)
    outcome = chain.run_mutating(
        pod_request(), [policy], VIEW, FailureMode.DENY, fresh_object, {"share": AUDIT}
    )
    assert outcome.allowed
    assert outcome.audit_annotations == {"share": "would refuse: no replica count on any node"}


def test_audit_mode_mutating_failure_is_reported_and_refuses_nothing(caplog):
    def mutate(request: AdmissionRequest, patch: Patch, view: ClusterView) -> None:
        raise KeyError("spec")

    policy = MutatingPolicy("boom", Scope("Pod"), mutate)
    outcome = chain.run_mutating(
        pod_request(), [policy], VIEW, FailureMode.DENY, fresh_object, {"boom": AUDIT}
    )
    assert outcome.allowed
    assert outcome.failed_policies == ["boom"]
    assert outcome.warnings == []


def test_a_long_record_is_cut_to_the_annotation_limit():
    outcome = chain.run_validating(
        pod_request(), [refusing("p", "x " * 2000)], VIEW, FailureMode.DENY, {"p": AUDIT}
    )
    assert len(outcome.audit_annotations["p"]) == chain.MAX_AUDIT_ANNOTATION
