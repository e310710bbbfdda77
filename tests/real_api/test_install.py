"""What users apply, applied to a real kube-apiserver 1.36: every kustomization under manifests/
and every composition of the base with its components (server-side dry run, with the CRDs the
components need installed from the projects' own YAML), the base for real, and the policy
`gpu-admission admission-policy` prints for the default and for a custom configuration."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.dynamic import DynamicClient
from kubernetes.dynamic.exceptions import DynamicApiError

from commands.admission_policy import write_admission_policy
from tests import ROOT
from tests.manifests.compositions import compositions, render_composition
from tests.real_api.conftest import Kubectl, apply_base
from webhooks.apiserver_policies.pod_checks import BINDING_NAME, POLICY_NAME

KUSTOMIZATIONS = sorted(
    path.parent
    for path in (ROOT / "manifests").rglob("kustomization.yaml")
    if yaml.safe_load(path.read_text())["kind"] == "Kustomization"  # not a Component
)


@pytest.fixture(scope="module")
def namespace(kubectl: Kubectl, crds: None) -> None:
    # A server-side dry run creates nothing, so the namespaced objects need theirs to exist.
    kubectl("apply", "-f", str(ROOT / "manifests" / "base" / "namespace.yaml"))


def test_there_are_eight_kustomizations() -> None:
    names = {str(path.relative_to(ROOT)) for path in KUSTOMIZATIONS}
    older = {"manifests/overlays/webhook-pod-mutations", "manifests/overlays/webhook-pod-checks"}
    assert {"manifests", "manifests/base", "manifests/overlays/gpu-usage", *older} <= names
    assert len(names) == 8, names


@pytest.mark.parametrize(
    "folder", KUSTOMIZATIONS, ids=[str(p.relative_to(ROOT)) for p in KUSTOMIZATIONS]
)
def test_every_kustomization_is_accepted(kubectl: Kubectl, namespace: None, folder: Path) -> None:
    done = kubectl("apply", "-k", str(folder), "--dry-run=server", check=False)
    assert done.returncode == 0, done.stderr
    assert "(server dry run)" in done.stdout


def test_every_composition_is_accepted(api: client.ApiClient, namespace: None) -> None:
    """Each component alone, every pair, and each layout with every feature component, as a
    server-side dry run of each distinct object (the server judges each object on its own: an
    object shared by several compositions is sent once), created, or put in place of one a test
    made for real."""
    distinct: dict[str, tuple[dict, list[str]]] = {}
    for components in compositions():
        for obj in render_composition(components):
            key = yaml.safe_dump(obj, sort_keys=True)
            distinct.setdefault(key, (obj, []))[1].append("+".join(components))
    dynamic = DynamicClient(api)
    refused = []
    for obj, where in distinct.values():
        resource = dynamic.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])
        namespace = obj["metadata"].get("namespace")
        try:
            try:
                dynamic.create(resource, body=obj, namespace=namespace, dry_run="All")
            except DynamicApiError as error:
                if error.status != 409:
                    raise
                # Another test made it for real: the object in its place, as an update.
                live = dynamic.get(resource, obj["metadata"]["name"], namespace=namespace)
                body = {**obj, "metadata": {**obj["metadata"]}}
                body["metadata"]["resourceVersion"] = live.metadata.resourceVersion
                dynamic.replace(resource, body=body, namespace=namespace, dry_run="All")
        except DynamicApiError as error:
            name = f"{obj['kind']} {obj['metadata']['name']}"
            refused.append(f"{name} (in {', '.join(where[:3])}): {error.summary()}")
    assert refused == []
    assert len(distinct) > 50  # every kind of every composition was sent


def test_the_base_applies_for_real(kubectl: Kubectl, api: client.ApiClient) -> None:
    apply_base(kubectl)
    admission = client.AdmissionregistrationV1Api(api)
    policy = admission.read_validating_admission_policy(POLICY_NAME)
    binding = admission.read_validating_admission_policy_binding(BINDING_NAME)
    assert binding.spec.policy_name == policy.metadata.name
    assert binding.spec.validation_actions == ["Deny"]
    apps = client.AppsV1Api(api)
    assert apps.read_namespaced_deployment("gpu-admission", "gpu-admission")
    assert apps.read_namespaced_deployment("gpu-admission-controller", "gpu-admission")


def _generated(tmp_path: Path, config: dict | None) -> str:
    path = None
    if config is not None:
        path = tmp_path / "config.yaml"
        path.write_text(yaml.safe_dump(config))
    out = io.StringIO()
    write_admission_policy(path, out)
    return out.getvalue()


@pytest.mark.parametrize(
    "config",
    [
        None,
        {
            "gpu": {
                "resource_patterns": ["amd.com/gpu*", "example.com/accel-?g.[ab]*"],
                "shared_suffixes": [".shared", "-shared"],
                "guarded_env": ["ROCR_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES"],
            }
        },
    ],
    ids=["default", "other-resource-names"],
)
def test_the_printed_policy_is_accepted(
    kubectl: Kubectl, tmp_path: Path, config: dict | None
) -> None:
    # Under a name of its own, so that the server compiles it as a new policy whatever the base
    # already installed.
    # Pods' policy and binding, workloads', GPU visibility's, the schedulers' ConfigMaps' guard,
    # then the two routing guards'.
    objects = list(yaml.safe_load_all(_generated(tmp_path, config)))
    validating = ["ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"]
    mutating = ["MutatingAdmissionPolicy", "MutatingAdmissionPolicyBinding"]
    assert [o["kind"] for o in objects] == validating * 2 + mutating + validating * 3
    base = f"printed-{tmp_path.name.lower().replace('_', '-')[-36:]}"
    names = []
    for index, (policy, binding) in enumerate(zip(objects[::2], objects[1::2], strict=True)):
        name = f"{base}-{index}"
        names.append((policy["kind"].lower(), name))
        policy["metadata"]["name"] = binding["metadata"]["name"] = name
        binding["spec"]["policyName"] = name
    text = yaml.safe_dump_all(objects)
    done = kubectl("create", "--dry-run=server", "-f", "-", stdin=text, check=False)
    assert done.returncode == 0, done.stderr
    for kind, name in names:
        assert f"{kind}.admissionregistration.k8s.io/{name}" in done.stdout
