"""GPU visibility as the API server makes it: the webhook's change, operation for operation, so the
webhook finds nothing more to do when it sees the pod too. (The CEL's agreement with this Python,
decided by the real kube-apiserver: tests/real_api/test_stateless_admission.py.)"""

from __future__ import annotations

import copy
from typing import Any

import jsonpatch
from hypothesis import HealthCheck, given, settings

from gpu_admission.cluster.view import StaticClusterView
from gpu_admission.config.model import Config
from tests.webhooks.pod_strategies import DEBUGGERS, admission_pods
from tests.webhooks.policy_helpers import make_request
from webhooks.apiserver_policies.visibility_mutation import changes, hidden_containers, would_change
from webhooks.core.change_words import describe_changes
from webhooks.core.patch import Patch
from webhooks.dispatch import chain
from webhooks.policies import gpu_visibility
from webhooks.policies.containers import iter_containers

CONFIG = Config()
POLICIES = gpu_visibility.policies(CONFIG)
GENERATED = settings(
    max_examples=200, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


def webhook_ops(pod: dict[str, Any], old: dict[str, Any] | None = None) -> list[dict[str, Any]]:
    """What the webhook's gpu-visibility policy does to the pod (no claim resolves: no view)."""
    fields: dict[str, Any] = {}
    if old is not None:
        fields = {"operation": "UPDATE", "sub_resource": "ephemeralcontainers", "old_object": old}
    request = make_request(copy.deepcopy(pod), namespace="ml", **fields)
    patch = Patch(request.object)
    for policy in POLICIES:
        if policy.scope.matches(request):
            policy.mutate(request, patch, StaticClusterView())
    return patch.ops


def claimed(pod: dict[str, Any]) -> set[str]:
    return {
        ref.path
        for ref in iter_containers(pod)
        if (ref.container.get("resources") or {}).get("claims")
    }


@GENERATED
@given(pod=admission_pods())
def test_the_policy_makes_the_webhooks_change_and_leaves_it_nothing_more(pod: dict) -> None:
    changed, ops = changes(pod, None, CONFIG)
    assert jsonpatch.apply_patch(copy.deepcopy(pod), ops) == changed
    if not claimed(pod):  # every container is the policy's: it is the webhook's change
        assert ops == webhook_ops(pod)
    # The webhook after it: nothing more for a container the policy took.
    taken = {ref.path for ref in hidden_containers(pod, None, CONFIG)}
    again = webhook_ops(changed)
    assert not [op for op in again if any(op["path"].startswith(p + "/") for p in taken)]
    assert changes(changed, None, CONFIG)[1] == []  # and the policy's own second pass


@GENERATED
@given(pod=admission_pods(), added=DEBUGGERS)
def test_debug_containers_are_hidden_as_the_webhook_hides_them(pod: dict, added: list) -> None:
    old = copy.deepcopy(pod)
    pod = copy.deepcopy(pod)
    pod["spec"]["ephemeralContainers"] = copy.deepcopy(added)
    changed, ops = changes(pod, old, CONFIG)
    assert ops == webhook_ops(pod, old)
    assert all(op["path"].startswith("/spec/ephemeralContainers/") for op in ops)
    # A debug container added earlier is left as it is (the API server allows no change to it).
    later = copy.deepcopy(changed)
    later["spec"]["ephemeralContainers"].append({"name": "debug-z", "image": "busybox"})
    _, ops = changes(later, changed, CONFIG)
    assert [op["path"] for op in ops] == [f"/spec/ephemeralContainers/{len(added)}/env"]


def test_claims_and_gpus_are_left_to_the_webhook_and_mirror_pods_alone() -> None:
    pod = {
        "metadata": {"name": "p"},
        "spec": {
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            "containers": [
                {"name": "trainer", "resources": {"limits": {"nvidia.com/gpu": "1"}}},
                {"name": "claimer", "resources": {"claims": [{"name": "gpu"}]}},
                {"name": "sidecar"},
            ],
        },
    }
    changed, ops = changes(pod, None, CONFIG)
    assert ops == [
        {
            "op": "add",
            "path": "/spec/containers/2/env",
            "value": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}],
        }
    ]
    assert "env" not in changed["spec"]["containers"][1]  # the claim decides: the webhook's
    mirror = {**pod, "metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}}}
    assert changes(mirror, None, CONFIG)[1] == []


def test_audit_mode_says_what_would_change_in_the_webhooks_words() -> None:
    pod = {
        "metadata": {"name": "p"},
        "spec": {
            "initContainers": [{"name": "setup"}],
            "containers": [
                {
                    "name": "app",
                    "env": [
                        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
                        {"name": "NVIDIA_VISIBLE_DEVICES", "value": "0"},
                    ],
                }
            ],
        },
    }
    said = would_change(pod, None, CONFIG)
    assert said == (
        'would change: add init container "setup" env (NVIDIA_VISIBLE_DEVICES=none); '
        'remove container "app" env; replace container "app" env (NVIDIA_VISIBLE_DEVICES=none)'
    )
    # The webhook's own audit record of the same pod, word for word.
    request = make_request(copy.deepcopy(pod), namespace="ml")
    modes = {p.name: p for p in POLICIES}
    outcome = chain.run_mutating(
        request,
        POLICIES,
        StaticClusterView(),
        CONFIG.failure_mode("/mutate/pods"),
        lambda: copy.deepcopy(pod),
        {name: CONFIG.mode_of(name).__class__("audit") for name in modes},
    )
    assert outcome.audit_annotations["gpu-visibility"] == said
    assert describe_changes(changes(pod, None, CONFIG)[1], pod) == said.removeprefix(
        "would change: "
    )
    assert would_change(changes(pod, None, CONFIG)[0], None, CONFIG) == ""
