"""The audit's reading of existing workloads: refusals of their templates' pods, one finding per
policy on the workload itself; changes left to the pods; owned workloads left to their owner."""

from __future__ import annotations

from gpu_admission.admission.findings import WOULD_REFUSE
from gpu_admission.cluster.view import StaticClusterView
from gpu_admission.config.model import Config
from webhooks.audit.workloads import audit_workload, owned_by_workload
from webhooks.core.workload_kinds import BUILT_IN, kind_index
from webhooks.dispatch.registry import build_policy_set

KINDS = {k.kind: k for k in BUILT_IN}
POLICIES = build_policy_set(Config())


def statefulset(containers: list[dict], annotations: dict | None = None) -> dict:
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": "ml", "uid": "u-1"},
        "spec": {
            "template": {
                "metadata": {"annotations": annotations or {}},
                "spec": {"containers": containers},
            }
        },
    }


def test_a_refused_template_is_a_finding_on_the_workload() -> None:
    obj = statefulset(
        [{"name": "a", "image": "x", "resources": {"limits": {"nvidia.com/gpu.shared": "3"}}}],
        {"gpu-admission.io/cloud-credentials": "gone"},
    )
    findings = {
        f.policy: f
        for f in audit_workload(obj, KINDS["StatefulSet"], POLICIES, StaticClusterView())
    }
    assert set(findings) == {"shared-gpu-limit", "cloud-credentials"}
    shared = findings["shared-gpu-limit"]
    assert (shared.kind, shared.name, shared.uid, shared.api_version) == (
        "StatefulSet",
        "db",
        "u-1",
        "apps/v1",
    )
    assert shared.result == WOULD_REFUSE
    assert shared.message.startswith('its pods would be refused: container "a" asks for 3')


def test_changes_are_left_to_the_pods() -> None:
    # A CPU-only container would get NVIDIA_VISIBLE_DEVICES=none: its pods say so, not the set.
    obj = statefulset([{"name": "cpu", "image": "python"}])
    assert audit_workload(obj, KINDS["StatefulSet"], POLICIES, StaticClusterView()) == []


def test_a_workload_another_one_controls_is_left_to_its_owner() -> None:
    kinds = kind_index(Config())
    owned = {
        "metadata": {
            "ownerReferences": [
                {"apiVersion": "apps/v1", "kind": "Deployment", "name": "d", "controller": True}
            ]
        }
    }
    assert owned_by_workload(owned, kinds)
    by_other = {
        "metadata": {
            "ownerReferences": [
                {
                    "apiVersion": "kubeflow.org/v1",
                    "kind": "TrainJob",
                    "name": "t",
                    "controller": True,
                }
            ]
        }
    }
    assert not owned_by_workload(by_other, kinds)
