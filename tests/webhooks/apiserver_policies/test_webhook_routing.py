"""Which pods the mutating webhook is asked about: only those whose admission needs cluster state.
A pod it is not asked about must lose nothing by it: whatever the cluster holds, the webhook would
have changed, warned, recorded and refused nothing the API server does not do itself. (The CEL's
agreement with this Python, decided by the real kube-apiserver: tests/real_api.)"""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpu_admission.cluster.view import (
    NodeInfo,
    PVCInfo,
    SecretInfo,
    ServiceAccountInfo,
    StaticClusterView,
)
from gpu_admission.config.model import Config
from tests.webhooks.pod_strategies import NAMES, admission_pods
from tests.webhooks.policy_helpers import make_request
from tests.world.harness import installed_render
from webhooks.apiserver_policies.visibility_mutation import changes
from webhooks.apiserver_policies.webhook_routing import (
    mutating_pod_webhooks,
    mutating_webhook_sees,
    needs_state,
)
from webhooks.core.pod_defaults import default_pod
from webhooks.dispatch import chain
from webhooks.dispatch.registry import build_policy_set

CONFIG = Config()
POLICIES = build_policy_set(CONFIG).mutating_for("Pod")
GENERATED = settings(
    max_examples=300, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow]
)


@st.composite
def clusters(draw: Any) -> StaticClusterView:
    """What the cluster may hold of what the pods name: nodes that share their GPU or not, the
    PVCs as datasets (loaded or not) or plain, the Secrets, an unbound ServiceAccount (the pods'
    namespace is not labelled, so none there is bound)."""
    shared = draw(st.booleans())
    nodes = [
        NodeInfo(
            "gpu-1",
            {
                "nvidia.com/gpu.replicas": "4",
                "nvidia.com/gpu.memory": "81559",
                **({"nvidia.com/gpu.sharing-strategy": "time-slicing"} if shared else {}),
            },
            {"nvidia.com/gpu": "4", "nvidia.com/gpu.shared": "4"},
        )
    ]
    pvcs = []
    for claim in ("weights", "cache"):
        if draw(st.booleans()):
            dataset = draw(st.booleans())
            annotations = {NAMES.data_source: "s3://models/x"} if dataset else {}
            pvcs.append(PVCInfo("ml", claim, f"uid-{claim}", annotations))
    secrets = [
        SecretInfo("ml", name, kind, frozenset(keys))
        for name, kind, keys in (
            ("s3-keys", "aws-credential", ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY")),
            ("hf-token", "huggingface-credential", ("HF_TOKEN",)),
        )
        if draw(st.booleans())
    ]
    accounts = [ServiceAccountInfo("ml", "default", {"team": "x"})]
    return StaticClusterView(nodes, secrets, accounts, pvcs)


@GENERATED
@given(pod=admission_pods(), view=clusters())
def test_a_pod_the_webhook_is_not_asked_about_loses_nothing(
    pod: dict, view: StaticClusterView
) -> None:
    pod = default_pod(pod)  # as the API server holds it before admission
    if needs_state(pod, "CREATE", CONFIG):
        assert mutating_webhook_sees(pod, "CREATE", False, CONFIG) in (True, False)
        return
    assert not mutating_webhook_sees(pod, "CREATE", False, CONFIG)
    admitted, _ = changes(pod, None, CONFIG)  # what the API server makes of it alone
    request = make_request(copy.deepcopy(admitted), namespace="ml")
    outcome = chain.run_mutating(
        request,
        POLICIES,
        view,
        CONFIG.failure_mode("/mutate/pods"),
        lambda: copy.deepcopy(admitted),
    )
    assert outcome.allowed, outcome.message
    assert outcome.ops == [] and outcome.warnings == [] and not outcome.audit_annotations


def test_the_pods_that_need_state_and_those_that_do_not() -> None:
    def pod(**spec: Any) -> dict[str, Any]:
        meta = spec.pop("metadata", {"name": "p"})
        return {"metadata": meta, "spec": {"containers": [{"name": "c"}], **spec}}

    credentials = {"name": "p", "annotations": {NAMES.cloud_credentials: "s3-keys"}}
    blank = {"name": "p", "annotations": {NAMES.cloud_credentials: " , "}}
    volume = [{"name": "d", "persistentVolumeClaim": {"claimName": "weights"}}]
    loader = {"name": "p", "labels": {NAMES.data_load_label: "true"}}
    gpu = [{"name": "c", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]
    two_shared = [{"name": "c", "resources": {"limits": {"nvidia.com/gpu.shared": "2"}}}]
    claims = [{"name": "gpu", "resourceClaimTemplateName": "t"}]
    seen = {
        "cpu only": (pod(), False),
        "credentials named": (pod(metadata=credentials), True),
        "an annotation that names nothing": (pod(metadata=blank), False),
        "a PVC": (pod(volumes=volume), True),
        "a loader's own pod": (pod(metadata=loader, volumes=volume), False),
        "a GPU": (pod(containers=gpu), True),
        "claims": (pod(resourceClaims=claims), True),
        # The policy refuses it without state: in its words, even while the service is down.
        "two shared GPUs": (pod(containers=two_shared), False),
        "a mirror pod": (
            pod(metadata={"annotations": {"kubernetes.io/config.mirror": "x"}}),
            False,
        ),
    }
    for what, (it, expected) in seen.items():
        assert mutating_webhook_sees(default_pod(it), "CREATE", False, CONFIG) is expected, what
    # In a namespace labelled for ServiceAccount-bound credentials: every pod, but those the
    # policy refuses and mirror pods.
    assert mutating_webhook_sees(pod(), "CREATE", True, CONFIG)
    assert not mutating_webhook_sees(
        default_pod(pod(containers=two_shared)), "CREATE", True, CONFIG
    )
    # A debug container added to a pod: only where a PVC may be a dataset (mounted read-only).
    assert mutating_webhook_sees(pod(volumes=volume), "UPDATE", False, CONFIG)
    assert not mutating_webhook_sees(pod(containers=gpu), "UPDATE", False, CONFIG)
    # A check in audit or warn mode refuses nothing: such a pod goes to the webhook as before.
    relaxed = Config.model_validate({"policies": {"shared-gpu-limit": {"mode": "warn"}}})
    assert mutating_webhook_sees(default_pod(pod(containers=two_shared)), "CREATE", False, relaxed)


def test_the_manifests_route_as_the_configuration_says() -> None:
    webhooks = installed_render("manifests")  # what the base's controller writes
    mutating = next(d for d in webhooks if d["kind"] == "MutatingWebhookConfiguration")
    entries = [
        w for w in mutating["webhooks"] if w["clientConfig"]["service"]["path"] == "/mutate/pods"
    ]
    shown = [{k: w[k] for k in ("name", "namespaceSelector", "matchConditions")} for w in entries]
    assert shown == mutating_pod_webhooks(CONFIG)
    for entry in entries:
        assert entry["failurePolicy"] == "Fail" and entry["reinvocationPolicy"] == "IfNeeded"
