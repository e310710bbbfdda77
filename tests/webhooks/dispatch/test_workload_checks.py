"""Workloads judged through their pod templates by the workloads webhook: certain refusals where
the webhook carries the stateless checks, warnings for what depends on cluster state, nothing
for an UPDATE that keeps the templates, modes followed, templates never changed."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpu_admission.cluster.view import SecretInfo, StaticClusterView
from gpu_admission.config.model import Config, FailureMode
from webhooks.apiserver_policies.workload_templates import workload_denial
from webhooks.core.review import WORKLOAD, AdmissionRequest
from webhooks.core.workload_kinds import BUILT_IN
from webhooks.dispatch import chain
from webhooks.dispatch.registry import build_policy_set
from webhooks.dispatch.workload_checks import STATE_DEPENDENT

NS = "ml"
KINDS = {k.kind: k for k in BUILT_IN}
TWO_SHARED = {
    "name": "nb",
    "image": "cuda",
    "resources": {"limits": {"nvidia.com/gpu.shared": "2"}},
}
CREDS = "gpu-admission.io/cloud-credentials"
IN_WEBHOOK = {"workloads": {"pod_checks": "webhook"}}


def deployment(containers: list[dict[str, Any]], annotations: dict[str, str] | None = None) -> dict:
    template: dict[str, Any] = {
        "metadata": {"labels": {"app": "nb"}},
        "spec": {"containers": containers},
    }
    if annotations:
        template["metadata"]["annotations"] = annotations
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "notebook", "namespace": NS},
        "spec": {"replicas": 1, "template": template},
    }


def jobset(*workers: list[dict[str, Any]]) -> dict:
    return {
        "apiVersion": "jobset.x-k8s.io/v1alpha2",
        "kind": "JobSet",
        "metadata": {"name": "train", "namespace": NS},
        "spec": {
            "replicatedJobs": [
                {
                    "name": f"group{i}",
                    "template": {"spec": {"template": {"spec": {"containers": c}}}},
                }
                for i, c in enumerate(workers)
            ]
        },
    }


def request(obj: dict, operation: str = "CREATE", old: dict | None = None) -> AdmissionRequest:
    group = obj["apiVersion"].rpartition("/")[0]
    return AdmissionRequest(
        uid="u",
        kind=WORKLOAD,
        resource="",
        sub_resource="",
        operation=operation,
        namespace=NS,
        name=obj["metadata"]["name"],
        object=obj,
        old_object=old,
        dry_run=False,
        group=group,
        object_kind=obj["kind"],
    )


def review(
    obj: dict,
    settings: dict | None = None,
    view: StaticClusterView | None = None,
    operation: str = "CREATE",
    old: dict | None = None,
) -> chain.Outcome:
    config = Config.model_validate(settings or {})
    policies = build_policy_set(config).validating_for(WORKLOAD)
    return chain.run_validating(
        request(obj, operation, old),
        policies,
        view or StaticClusterView(),
        FailureMode.DENY,
        config.relaxed_modes(),
    )


def test_where_the_webhook_carries_the_checks_it_refuses_in_the_policys_words() -> None:
    obj = deployment([TWO_SHARED])
    outcome = review(obj, IN_WEBHOOK)
    assert not outcome.allowed
    assert outcome.message == workload_denial(obj, KINDS["Deployment"], Config())
    assert outcome.message.startswith(
        'Deployment "notebook": container "nb" asks for 2 of nvidia.com/gpu.shared in limits '
        "and requests"
    )


def test_beside_the_policy_it_leaves_the_stateless_refusal_to_it() -> None:
    outcome = review(deployment([TWO_SHARED]))
    assert outcome.allowed and outcome.warnings == []


def test_a_missing_secret_is_a_warning_naming_it() -> None:
    obj = deployment([{"name": "nb", "image": "cuda"}], {CREDS: "s3-creds"})
    outcome = review(obj)
    assert outcome.allowed
    [warning] = outcome.warnings
    assert warning.startswith(f'Deployment "notebook": {STATE_DEPENDENT}: ')
    assert 'Secret "s3-creds"' in warning and "does not exist" in warning
    # Once the Secret is there, nothing to say.
    present = SecretInfo(
        NS, "s3-creds", "aws-credential", frozenset({"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"})
    )
    assert review(obj, view=StaticClusterView(secrets=[present])).warnings == []


def test_an_audit_mode_policy_records_instead_of_warning() -> None:
    obj = deployment([{"name": "nb", "image": "cuda"}], {CREDS: "s3-creds"})
    outcome = review(obj, {"policies": {"cloud-credentials": {"mode": "audit"}}})
    assert outcome.allowed and outcome.warnings == []
    assert 'Secret "s3-creds"' in outcome.audit_annotations["cloud-credentials"]


def test_a_warn_mode_check_warns_where_it_would_refuse() -> None:
    settings = {**IN_WEBHOOK, "policies": {"shared-gpu-limit": {"mode": "warn"}}}
    outcome = review(deployment([TWO_SHARED]), settings)
    assert outcome.allowed
    [warning] = outcome.warnings
    assert warning.startswith("shared-gpu-limit (warn mode) would refuse this once enforced: ")


def test_an_update_that_keeps_the_template_is_never_judged() -> None:
    old = deployment([TWO_SHARED], {CREDS: "gone"})
    scaled = copy.deepcopy(old)
    scaled["spec"]["replicas"] = 5
    scaled["metadata"]["labels"] = {"team": "vision"}
    outcome = review(scaled, IN_WEBHOOK, operation="UPDATE", old=old)
    assert outcome.allowed and outcome.warnings == []


def test_an_update_to_a_refused_template_is_refused() -> None:
    old = deployment([{"name": "nb", "image": "cuda"}])
    changed = deployment([TWO_SHARED])
    outcome = review(changed, IN_WEBHOOK, operation="UPDATE", old=old)
    assert not outcome.allowed and "asks for 2" in outcome.message


def test_a_jobset_is_judged_by_each_replicated_job() -> None:
    obj = jobset([{"name": "ok", "image": "x"}], [TWO_SHARED])
    outcome = review(obj, IN_WEBHOOK)
    assert not outcome.allowed
    assert outcome.message == workload_denial(obj, KINDS["JobSet"], Config())
    # A warning says which template it is about.
    gated = jobset([{"name": "ok", "image": "x"}], [{"name": "w", "image": "x"}])
    workers = gated["spec"]["replicatedJobs"][1]["template"]["spec"]["template"]
    workers["metadata"] = {"annotations": {CREDS: "s3-creds"}}
    [warning] = review(gated).warnings
    assert warning.startswith(f'JobSet "train" (spec.replicatedJobs[group1]): {STATE_DEPENDENT}')


def test_templates_are_never_changed() -> None:
    obj = deployment([{"name": "cpu", "image": "python"}], {CREDS: "s3-creds"})
    before = copy.deepcopy(obj)
    review(obj)
    assert obj == before


def test_an_unknown_kind_is_let_through() -> None:
    obj = deployment([TWO_SHARED])
    obj["kind"] = "Rollout"
    obj["apiVersion"] = "argoproj.io/v1alpha1"
    assert review(obj, IN_WEBHOOK).allowed


def test_a_configured_kind_is_judged_through_its_paths() -> None:
    settings = {
        **IN_WEBHOOK,
        "workloads": {
            "pod_checks": "webhook",
            "extra_kinds": [
                {
                    "group": "kubeflow.org",
                    "versions": ["v1"],
                    "kind": "PyTorchJob",
                    "resource": "pytorchjobs",
                    "template_paths": ["spec.pytorchReplicaSpecs.*.template"],
                }
            ],
        },
    }
    obj = {
        "apiVersion": "kubeflow.org/v1",
        "kind": "PyTorchJob",
        "metadata": {"name": "ddp", "namespace": NS},
        "spec": {
            "pytorchReplicaSpecs": {
                "Master": {"template": {"spec": {"containers": [{"name": "m", "image": "x"}]}}},
                "Worker": {"template": {"spec": {"containers": [TWO_SHARED]}}},
            }
        },
    }
    outcome = review(obj, settings)
    assert not outcome.allowed
    assert outcome.message.startswith('PyTorchJob "ddp": container "nb" asks for 2')


@pytest.mark.parametrize(
    "path",
    ["spec..template", "spec.template[]x", "spec/template", "", "spec.[].x"],
)
def test_a_malformed_template_path_is_refused_naming_it(path: str) -> None:
    with pytest.raises(ValueError, match="is not a template path"):
        Config.model_validate(
            {
                "workloads": {
                    "extra_kinds": [
                        {
                            "group": "ray.io",
                            "versions": ["v1"],
                            "kind": "RayCluster",
                            "resource": "rayclusters",
                            "template_paths": [path],
                        }
                    ]
                }
            }
        )


def test_a_dataset_not_loaded_yet_is_a_warning_for_a_pinned_template() -> None:
    from gpu_admission.cluster.view import PVCInfo

    loading = PVCInfo(
        NS,
        "imagenet",
        "uid-imagenet",
        {
            "gpu-admission.io/data-source": "s3://datasets/imagenet",
            "gpu-admission.io/data-load-phase": "Loading",
        },
        {"gpu-admission.io/data-load": "true"},
    )
    obj = deployment(
        [{"name": "train", "image": "x", "volumeMounts": [{"name": "d", "mountPath": "/d"}]}]
    )
    spec = obj["spec"]["template"]["spec"]
    spec["nodeName"] = "gpu-1"
    spec["volumes"] = [{"name": "d", "persistentVolumeClaim": {"claimName": "imagenet"}}]
    outcome = review(obj, view=StaticClusterView(pvcs=[loading]))
    assert outcome.allowed
    [warning] = outcome.warnings
    assert warning.startswith(f'Deployment "notebook": {STATE_DEPENDENT}: this pod is pinned')
    assert "has not finished loading" in warning
