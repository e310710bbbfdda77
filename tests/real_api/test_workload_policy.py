"""Workloads as a real kube-apiserver 1.36 judges them: the base's policy
`gpu-admission-workloads` refuses each kind (JobSet on its real CRD) whose pod template every pod
would be refused for, in the pod's words after the workload's name, leaves nothing behind, never
refuses an UPDATE that keeps the template, and agrees with `review`'s Python reading over
generated templates.

The base is applied for real but for its webhook configurations (`apply_base`): what is under
test here is the policy alone; `test_workload_webhook.py` adds the webhook.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from kubernetes import client, dynamic

from gpu_admission.config.model import Config
from tests.real_api.conftest import Kubectl, apply_base, namespace_ready
from tests.real_api.test_pod_checks import pods
from tests.support.waits import while_running
from webhooks.apiserver_policies.pod_checks import denial_text
from webhooks.apiserver_policies.workload_templates import WORKLOAD_POLICY_NAME, workload_denial
from webhooks.core.workload_kinds import BUILT_IN, TemplateKind

NAMESPACE = "ml-workloads"
EXEMPT = "exempt-workloads"
KINDS = {k.kind: k for k in BUILT_IN}
TWO_SHARED = {
    "name": "nb",
    "image": "cuda",
    "resources": {"limits": {"nvidia.com/gpu.shared": "2"}},
}
SETS_DEVICES = {
    "name": "trainer",
    "image": "cuda",
    "env": [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
    "resources": {"limits": {"nvidia.com/gpu": "1"}},
}


def pod_template(containers: list[dict[str, Any]], job: bool = False) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers}
    if job:
        spec["restartPolicy"] = "Never"
    return {"metadata": {"labels": {"app": "w"}}, "spec": spec}


def workload(kind: str, name: str, containers: list[dict[str, Any]]) -> dict[str, Any]:
    """A valid `kind` whose pods come from one template of `containers` (a JobSet: two)."""
    selector = {"matchLabels": {"app": "w"}}
    template = pod_template(containers)
    job_template = pod_template(containers, job=True)
    specs: dict[str, dict[str, Any]] = {
        "Deployment": {"selector": selector, "template": template},
        "ReplicaSet": {"selector": selector, "template": template},
        "StatefulSet": {"selector": selector, "serviceName": name, "template": template},
        "DaemonSet": {"selector": selector, "template": template},
        "ReplicationController": {"selector": {"app": "w"}, "template": template},
        "Job": {"template": job_template},
        "CronJob": {"schedule": "0 3 * * *", "jobTemplate": {"spec": {"template": job_template}}},
        "JobSet": {
            "replicatedJobs": [
                {"name": "driver", "template": {"spec": {"template": pod_template([], True)}}},
                {"name": "workers", "template": {"spec": {"template": job_template}}},
            ]
        },
    }
    if kind == "JobSet":
        driver = specs["JobSet"]["replicatedJobs"][0]["template"]["spec"]["template"]["spec"]
        driver["containers"] = [{"name": "driver", "image": "python"}]
    kind_of = KINDS[kind]
    version = kind_of.versions[0]
    return {
        "apiVersion": f"{kind_of.group}/{version}" if kind_of.group else version,
        "kind": kind,
        "metadata": {"name": name},
        "spec": specs[kind],
    }


@pytest.fixture(scope="module")
def resources(kubectl: Kubectl, api: client.ApiClient, crds: None) -> dynamic.DynamicClient:
    apply_base(kubectl)
    namespace_ready(api, NAMESPACE)
    namespace_ready(api, EXEMPT, labels={Config().exempt_label: "true"})
    dyn = dynamic.DynamicClient(api)
    probe = workload("Deployment", "policy-probe", [TWO_SHARED])
    while_running(
        lambda: WORKLOAD_POLICY_NAME in (server_denial(dyn, probe) or ""),
        "kube-apiserver to apply the base's workload policy",
        {},
        60,
    )
    return dyn


def _resource(dyn: dynamic.DynamicClient, obj: dict[str, Any]) -> Any:
    return dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])


def server_denial(
    dyn: dynamic.DynamicClient, obj: dict[str, Any], dry_run: bool = True
) -> str | None:
    try:
        _resource(dyn, obj).create(
            body=obj, namespace=NAMESPACE, **({"dry_run": "All"} if dry_run else {})
        )
    except client.ApiException as error:
        return str(json.loads(error.body)["message"])
    return None


def stored(dyn: dynamic.DynamicClient, obj: dict[str, Any]) -> dict[str, Any]:
    """`obj` as the server holds it once decoded and defaulted (a dry run where no policy
    applies)."""
    created = _resource(dyn, obj).create(body=obj, namespace=EXEMPT, dry_run="All")
    return dict(created.to_dict())


def expected(obj: dict[str, Any], kind: TemplateKind) -> str | None:
    message = workload_denial(obj, kind, Config())
    if message is None:
        return None
    resource = f"{kind.resource}.{kind.group}" if kind.group else kind.resource
    name = obj["metadata"]["name"]
    return f'{resource} "{name}" is forbidden: {denial_text(message, WORKLOAD_POLICY_NAME)}'


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_each_kind_is_refused_in_the_pods_words_and_leaves_nothing(
    resources: dynamic.DynamicClient, kind: str
) -> None:
    name = f"refused-{kind.lower()}"
    obj = workload(kind, name, [TWO_SHARED, SETS_DEVICES])
    denied = server_denial(resources, obj, dry_run=False)
    assert denied == expected(obj, KINDS[kind])
    assert denied is not None
    assert (
        f'{kind} "{name}": container "nb" asks for 2 of nvidia.com/gpu.shared in limits and '
        "requests" in denied
    )
    assert (
        f'{kind} "{name}": container "trainer" requests a GPU and sets '
        "NVIDIA_VISIBLE_DEVICES (by value)" in denied
    )
    with pytest.raises(client.ApiException) as gone:
        _resource(resources, obj).get(name=name, namespace=NAMESPACE)
    assert gone.value.status == 404


def test_a_good_workload_is_admitted(resources: dynamic.DynamicClient) -> None:
    obj = workload(
        "Deployment",
        "good",
        [{**TWO_SHARED, "resources": {"limits": {"nvidia.com/gpu.shared": "1"}}}],
    )
    assert server_denial(resources, obj) is None


def test_the_exempt_namespace_is_untouched(resources: dynamic.DynamicClient) -> None:
    stored(resources, workload("Job", "exempt", [TWO_SHARED]))


def test_an_existing_violator_keeps_working_until_its_template_changes(
    resources: dynamic.DynamicClient, kubectl: Kubectl
) -> None:
    """A Deployment made before the install (here: before the binding) can be scaled,
    relabelled and deleted; a new template that is still refused is refused."""
    obj = workload("Deployment", "before-install", [TWO_SHARED])
    kubectl("delete", "validatingadmissionpolicybinding", WORKLOAD_POLICY_NAME)
    try:
        while_running(
            lambda: server_denial(resources, obj) is None,
            "kube-apiserver to drop the workload binding",
            {},
            60,
        )
        _resource(resources, obj).create(body=obj, namespace=NAMESPACE)
    finally:
        apply_base(kubectl)
    while_running(
        lambda: (
            WORKLOAD_POLICY_NAME
            in (server_denial(resources, {**obj, "metadata": {"name": "probe-again"}}) or "")
        ),
        "kube-apiserver to apply the workload binding again",
        {},
        60,
    )
    deployments = _resource(resources, obj)
    kubectl("scale", "deployment/before-install", "-n", NAMESPACE, "--replicas=3")
    deployments.patch(
        name="before-install",
        namespace=NAMESPACE,
        body={"spec": {"replicas": 2}, "metadata": {"labels": {"team": "vision"}}},
        content_type="application/merge-patch+json",
    )
    changed = copy.deepcopy(obj["spec"]["template"])
    changed["metadata"]["annotations"] = {"rev": "2"}
    with pytest.raises(client.ApiException) as refused:
        deployments.patch(
            name="before-install",
            namespace=NAMESPACE,
            body={"spec": {"template": changed}},
            content_type="application/merge-patch+json",
        )
    assert "asks for 2 of nvidia.com/gpu.shared" in json.loads(refused.value.body)["message"]
    deployments.delete(name="before-install", namespace=NAMESPACE)


# -- agreement over generated templates --------------------------------------------------------


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(pod=pods(), kind=st.sampled_from(["Deployment", "CronJob", "JobSet"]))
def test_the_real_server_and_review_agree(
    resources: dynamic.DynamicClient, pod: dict, kind: str
) -> None:
    obj = workload(kind, "generated", pod["spec"]["containers"])
    if kind != "JobSet" and "initContainers" in pod["spec"]:
        holder = obj["spec"].get("template") or obj["spec"]["jobTemplate"]["spec"]["template"]
        holder["spec"]["initContainers"] = pod["spec"]["initContainers"]
    try:
        as_stored = stored(resources, obj)
    except client.ApiException:
        # The kind's own validation refuses it before any policy (a JobSet's env is a map by
        # name: no name twice).
        assume(False)
    assert server_denial(resources, obj) == expected(as_stored, KINDS[kind])


@pytest.mark.parametrize("value", ["1000m", "1", "500m", "0.5", "2000m"])
def test_a_custom_resources_quantities_are_read_as_written(
    resources: dynamic.DynamicClient, value: str
) -> None:
    """A JobSet keeps `1000m` as written (a Deployment's becomes `1`): it is 1, and its pods
    are admitted, so the JobSet is; `500m` is refused as not whole."""
    shared = {
        "name": "c",
        "image": "cuda",
        "resources": {"limits": {"nvidia.com/gpu.shared": value}},
    }
    obj = workload("JobSet", f"as-written-{value.replace('.', '-')}", [shared])
    as_stored = stored(resources, obj)
    assert server_denial(resources, obj) == expected(as_stored, KINDS["JobSet"])
    refused = server_denial(resources, obj) is not None
    assert refused is (value in ("500m", "0.5", "2000m"))


# -- a configured kind, on a CRD of its own ------------------------------------------------------

EXTRA = {
    "group": "training.example.org",
    "versions": ["v1"],
    "kind": "ReplicaJob",
    "resource": "replicajobs",
    "template_paths": ["spec.replicaSpecs.*.template"],
}
# A Kubeflow-shaped kind: one template per replica type, in a map (`*` in the path).
REPLICA_JOBS_CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "replicajobs.training.example.org"},
    "spec": {
        "group": "training.example.org",
        "names": {"kind": "ReplicaJob", "plural": "replicajobs", "singular": "replicajob"},
        "scope": "Namespaced",
        "versions": [
            {
                "name": "v1",
                "served": True,
                "storage": True,
                "schema": {
                    "openAPIV3Schema": {
                        "type": "object",
                        "properties": {
                            "spec": {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
                        },
                    }
                },
            }
        ],
    },
}


def test_a_configured_kind_is_refused_through_its_map_of_templates(
    resources: dynamic.DynamicClient, api: client.ApiClient
) -> None:
    from webhooks.apiserver_policies.bindings import admission_policy_objects

    extensions = client.ApiextensionsV1Api(api)
    extensions.create_custom_resource_definition(REPLICA_JOBS_CRD)
    config = Config.model_validate({"workloads": {"extra_kinds": [EXTRA]}})
    admission = client.AdmissionregistrationV1Api(api)
    name = "gpu-admission-workloads-extra"
    policy, binding = admission_policy_objects(config)[2:4]
    policy["metadata"]["name"] = binding["metadata"]["name"] = binding["spec"]["policyName"] = name
    admission.create_validating_admission_policy(policy)
    admission.create_validating_admission_policy_binding(binding)
    obj = {
        "apiVersion": "training.example.org/v1",
        "kind": "ReplicaJob",
        "metadata": {"name": "ddp"},
        "spec": {
            "replicaSpecs": {
                "Master": {"template": pod_template([{"name": "m", "image": "x"}], True)},
                "Worker": {"template": pod_template([TWO_SHARED], True)},
            }
        },
    }
    kind = TemplateKind(
        EXTRA["group"], ("v1",), EXTRA["kind"], EXTRA["resource"], tuple(EXTRA["template_paths"])
    )
    message = workload_denial(obj, kind, config)
    assert message is not None and message.startswith('ReplicaJob "ddp": container "nb"')
    wanted = f'replicajobs.training.example.org "ddp" is forbidden: {denial_text(message, name)}'
    custom = client.CustomObjectsApi(api)

    def answer() -> str | None:
        try:
            custom.create_namespaced_custom_object(
                EXTRA["group"], "v1", NAMESPACE, EXTRA["resource"], obj, dry_run="All"
            )
        except client.ApiException as error:
            return str(json.loads(error.body)["message"])
        return None

    try:
        while_running(
            lambda: answer() == wanted, "kube-apiserver to refuse the configured kind", {}, 60
        )
    finally:
        admission.delete_validating_admission_policy_binding(name)
        admission.delete_validating_admission_policy(name)
        extensions.delete_custom_resource_definition(REPLICA_JOBS_CRD["metadata"]["name"])
