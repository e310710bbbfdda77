"""The benchmark's other forms of the admission objects change what they say and nothing else."""

from __future__ import annotations

from bench.pod_create import project_objects
from bench.policy_forms import (
    MARK_LABEL,
    MARKED_POLICY,
    coarse_pod_policy,
    marked_pods,
    marked_pods_unguarded,
    without_pod_checks_webhook,
)
from gpu_admission.config.model import Config
from webhooks.apiserver_policies.pod_checks import POLICY_NAME, refusable_condition
from webhooks.apiserver_policies.visibility_mutation import POLICY_NAME as VISIBILITY_POLICY
from webhooks.apiserver_policies.webhook_configurations import POD_CHECKS_WEBHOOK
from webhooks.apiserver_policies.webhook_routing import POD_MUTATIONS

CONFIG = Config()


def _objects() -> list[dict]:
    return project_objects(8443, "Q0E=")


def test_the_coarse_form_matches_every_pod_the_checks_may_refuse() -> None:
    shipped, coarse = _objects(), coarse_pod_policy(_objects(), CONFIG)
    changed = [(a, b) for a, b in zip(shipped, coarse, strict=True) if a != b]
    ((before, after),) = changed
    assert (after["kind"], after["metadata"]["name"]) == ("ValidatingAdmissionPolicy", POLICY_NAME)
    assert after["spec"]["matchConditions"] == [
        {"name": "may-be-refused", "expression": refusable_condition(CONFIG)}
    ]
    assert before["spec"]["matchConditions"] != after["spec"]["matchConditions"]


def test_without_the_pods_validating_webhook_only_that_entry_goes() -> None:
    shipped, without = _objects(), without_pod_checks_webhook(_objects(), CONFIG)
    names = {d["kind"]: [w["name"] for w in d["webhooks"]] for d in shipped if "webhooks" in d}
    left = {d["kind"]: [w["name"] for w in d["webhooks"]] for d in without if "webhooks" in d}
    assert POD_CHECKS_WEBHOOK in names["ValidatingWebhookConfiguration"]
    assert left["ValidatingWebhookConfiguration"] == [
        n for n in names["ValidatingWebhookConfiguration"] if n != POD_CHECKS_WEBHOOK
    ]
    assert left["MutatingWebhookConfiguration"] == names["MutatingWebhookConfiguration"]


def _by_name(objects: list[dict]) -> dict[tuple[str, str], dict]:
    return {(o["kind"], o["metadata"]["name"]): o for o in objects}


def test_the_marked_form_leaves_marked_pods_to_the_webhook_and_refuses_a_marked_pod_unhidden() -> (
    None
):
    shipped, marked = _by_name(_objects()), _by_name(marked_pods(_objects(), CONFIG))
    visibility = marked[("MutatingAdmissionPolicy", VISIBILITY_POLICY)]
    assert visibility["spec"]["matchConstraints"]["objectSelector"] == {
        "matchExpressions": [{"key": MARK_LABEL, "operator": "DoesNotExist"}]
    }
    webhooks = marked[("MutatingWebhookConfiguration", "gpu-admission")]["webhooks"]
    (entry,) = [w for w in webhooks if w["name"] == POD_MUTATIONS]
    condition = entry["matchConditions"][-1]["expression"]
    assert condition.startswith(f"(has(object.metadata.labels) && '{MARK_LABEL}' in ")
    guard = marked[("ValidatingAdmissionPolicy", MARKED_POLICY)]
    assert guard["spec"]["matchConstraints"]["objectSelector"] == {
        "matchExpressions": [{"key": MARK_LABEL, "operator": "Exists"}]
    }
    assert ("ValidatingAdmissionPolicyBinding", MARKED_POLICY) in marked
    assert set(marked) - set(shipped) == {
        ("ValidatingAdmissionPolicy", MARKED_POLICY),
        ("ValidatingAdmissionPolicyBinding", MARKED_POLICY),
    }
    unguarded = _by_name(marked_pods_unguarded(_objects(), CONFIG))
    assert set(unguarded) == set(shipped)
