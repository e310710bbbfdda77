"""Each policy in each mode, through a real kube-apiserver 1.36 calling the webhook service and
running the generated ValidatingAdmissionPolicies, with its audit log on:

- enforce: refused (validating) or changed (mutating);
- warn: admitted, with a `Warning:` that carries the refusal, and recorded in the audit event;
- audit: admitted silently and unchanged, recorded in the audit event (webhooks'
  auditAnnotations under `<webhook name>/<policy>`; the policy's under
  `validation.policy.admission.k8s.io/validation_failure`). GPU visibility, made by a
  MutatingAdmissionPolicy when enforced, is recorded by a ValidatingAdmissionPolicy of the same
  name bound `[Audit]` in its stead.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client

from gpu_admission.config.model import Config
from gpu_admission.config.policy_modes import MUTATING_POLICIES, VALIDATING_POLICIES
from tests.real_api.admission_answers import Answer, audit_annotations, create
from tests.real_api.conftest import namespace_ready
from tests.real_api.nodes import renamed_shared_node
from tests.real_api.service import served
from tests.support.waits import while_running
from tests.world.control_plane import ControlPlane
from tests.world.harness import create_policies, delete_policy
from webhooks.apiserver_policies.bindings import admission_policy_objects

pytestmark = pytest.mark.e2e

NS = "modes"
VAP_FAILURE = "validation.policy.admission.k8s.io/validation_failure"
CUDA = "nvidia/cuda:12.4.1-base-ubuntu22.04"


def _pod(name: str, limits: dict[str, str] | None = None, **env: str) -> dict[str, Any]:
    container: dict[str, Any] = {"name": "app", "image": CUDA}
    if limits:
        container["resources"] = {"limits": limits}
    if env:
        container["env"] = [{"name": k, "value": v} for k, v in env.items()]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {"containers": [container]},
    }


def env_guard_pod(name: str) -> dict[str, Any]:
    return _pod(name, {"nvidia.com/gpu": "1"}, NVIDIA_VISIBLE_DEVICES="all")


def shared_pod(name: str) -> dict[str, Any]:
    return _pod(name, {"nvidia.com/gpu.shared": "2"}, NVIDIA_VISIBLE_DEVICES="void")


def cpu_pod(name: str) -> dict[str, Any]:
    return _pod(name)


def bad_secret(name: str) -> dict[str, Any]:
    data = {"AWS_ACCESS_KEY_ID": "AKIAIOSFODNN7EXAMPLE", "AWS_SECRET_KEY": "x" * 40}
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name},
        "type": "aws-credential",
        "data": encoded,
    }


def bad_pvc(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "annotations": {"gpu-admission.io/data-source": "s3://Bad_Bucket/x"},
        },
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def modes(validating: str, mutating: str = "enforce") -> dict[str, Any]:
    chosen = {name: {"mode": validating} for name in VALIDATING_POLICIES}
    chosen.update({name: {"mode": mutating} for name in MUTATING_POLICIES})
    return {"policies": chosen}


def install_policies(api: client.ApiClient, config: Config) -> None:
    """The admission policies and bindings for `config` (`gpu-admission admission-policy`), in
    place of any earlier ones: the checks split into two when their modes differ."""
    admission = client.AdmissionregistrationV1Api(api)
    # Left by another split of the checks than this config's: the API server runs every one.
    for name in ("gpu-admission-pods", "gpu-admission-workloads"):
        delete_policy(admission, name)
        for check in ("gpu-env-guard", "shared-gpu-limit"):
            delete_policy(admission, f"{name.removesuffix('-pods')}-{check}")
    create_policies(api, admission_policy_objects(config))


@pytest.fixture(scope="module")
def cluster(real_cluster: ControlPlane, api: client.ApiClient) -> Iterator[ControlPlane]:
    namespace_ready(api, NS)
    yield real_cluster
    install_policies(api, Config())  # as the base installs them, for the modules after this
    # What the module made goes with it: its dataset PVC would be loaded by the next test that
    # runs a controller, and its pods run by the next test that brings a node.
    core = client.CoreV1Api(api)
    core.delete_collection_namespaced_pod(NS, grace_period_seconds=0)
    core.delete_collection_namespaced_persistent_volume_claim(NS)


def in_force(
    plane: ControlPlane,
    api: client.ApiClient,
    make: Callable[[str], dict],
    check: Callable[[Answer, dict[str, str]], bool],
) -> None:
    """Wait until the API server answers a dry run as `check` expects: it picks up new policies
    and webhook configurations from its own informers, a moment after they are created."""

    def answered() -> bool:
        answer = create(api, NS, make("probe"), dry_run=True)
        return check(answer, audit_annotations(plane, answer.audit_id) if answer.audit_id else {})

    while_running(answered, "the configuration to be in force", {}, 60)


def test_enforce_refuses_and_changes(cluster: ControlPlane, api: client.ApiClient) -> None:
    config = Config.model_validate(modes("enforce"))
    install_policies(api, config)
    with served(cluster, modes("enforce")):
        in_force(cluster, api, env_guard_pod, lambda a, _: not a.allowed)
        in_force(cluster, api, bad_secret, lambda a, _: not a.allowed)
        answer = create(api, NS, env_guard_pod("env-enforce"))
        assert not answer.allowed
        assert answer.message.startswith(
            "pods \"env-enforce\" is forbidden: ValidatingAdmissionPolicy 'gpu-admission-pods' "
            "with binding 'gpu-admission-pods' denied request: container \"app\" requests a GPU "
            "and sets NVIDIA_VISIBLE_DEVICES (by value)"
        )
        answer = create(api, NS, shared_pod("shared-enforce"))
        assert not answer.allowed and "asks for 2 of nvidia.com/gpu.shared" in answer.message
        answer = create(api, NS, bad_secret("secret-enforce"))
        assert not answer.allowed
        assert answer.message.startswith(
            'admission webhook "secrets.validate.gpu-admission.io" denied the request: '
        )
        answer = create(api, NS, bad_pvc("pvc-enforce"))
        assert not answer.allowed
        assert 'admission webhook "pvcs.validate.gpu-admission.io" denied' in answer.message
        answer = create(api, NS, cpu_pod("cpu-enforce"))
        assert answer.allowed
        assert answer.stored["spec"]["containers"][0]["env"] == [
            {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}
        ]
        assert not any(
            k.endswith("/gpu-visibility") for k in audit_annotations(cluster, answer.audit_id)
        )


def test_warn_admits_with_the_refusal_as_a_warning_and_records_it(
    cluster: ControlPlane, api: client.ApiClient
) -> None:
    install_policies(api, Config.model_validate(modes("warn")))
    with served(cluster, modes("warn")):
        in_force(
            cluster,
            api,
            env_guard_pod,
            lambda a, _: a.allowed and any("ValidatingAdmissionPolicy" in w for w in a.warnings),
        )
        in_force(cluster, api, bad_secret, lambda a, _: a.allowed and bool(a.warnings))
        for make, name in ((env_guard_pod, "env-warn"), (shared_pod, "shared-warn")):
            answer = create(api, NS, make(name))
            assert answer.allowed, answer.message
            (warning,) = [w for w in answer.warnings if "ValidatingAdmissionPolicy" in w]
            assert warning.startswith(
                "Validation failed for ValidatingAdmissionPolicy 'gpu-admission-pods' with binding "
                "'gpu-admission-pods': container \"app\""
            )
            failures = json.loads(audit_annotations(cluster, answer.audit_id)[VAP_FAILURE])
            assert failures[0]["binding"] == "gpu-admission-pods"
            assert failures[0]["validationActions"] == ["Warn", "Audit"]
        for make, name, webhook, policy in (
            (bad_secret, "secret-warn", "secrets.validate.gpu-admission.io", "credential-secrets"),
            (bad_pvc, "pvc-warn", "pvcs.validate.gpu-admission.io", "dataset-pvc"),
        ):
            answer = create(api, NS, make(name))
            assert answer.allowed, answer.message
            assert any(
                w.startswith(f"{policy} (warn mode) would refuse this once enforced: ")
                for w in answer.warnings
            ), answer.warnings
            recorded = audit_annotations(cluster, answer.audit_id)[f"{webhook}/{policy}"]
            assert recorded.startswith("would refuse: ")
        assert "x" * 40 not in cluster.audit_log.read_text()  # no Secret value is recorded


def test_audit_admits_silently_and_unchanged_and_records_it(
    cluster: ControlPlane, api: client.ApiClient
) -> None:
    install_policies(api, Config.model_validate(modes("audit", "audit")))

    def recorded_by_policy(answer: Answer, annotations: dict[str, str]) -> bool:
        return answer.allowed and not answer.warnings and VAP_FAILURE in annotations

    with served(cluster, modes("audit", "audit")):
        in_force(cluster, api, env_guard_pod, recorded_by_policy)
        in_force(
            cluster,
            api,
            bad_secret,
            lambda a, notes: (
                a.allowed and "secrets.validate.gpu-admission.io/credential-secrets" in notes
            ),
        )
        in_force(
            cluster,
            api,
            cpu_pod,
            lambda a, notes: (
                a.allowed and "gpu-admission-gpu-visibility" in notes.get(VAP_FAILURE, "")
            ),
        )
        for make, name in ((env_guard_pod, "env-audit"), (shared_pod, "shared-audit")):
            answer = create(api, NS, make(name))
            assert answer.allowed and answer.warnings == [], answer
            failures = json.loads(audit_annotations(cluster, answer.audit_id)[VAP_FAILURE])
            assert failures[0]["validationActions"] == ["Audit"]
        for make, name, key in (
            (bad_secret, "secret-audit", "secrets.validate.gpu-admission.io/credential-secrets"),
            (bad_pvc, "pvc-audit", "pvcs.validate.gpu-admission.io/dataset-pvc"),
        ):
            answer = create(api, NS, make(name))
            assert answer.allowed and answer.warnings == [], answer
            assert audit_annotations(cluster, answer.audit_id)[key].startswith("would refuse: ")
        answer = create(api, NS, cpu_pod("cpu-audit"))
        assert answer.allowed and answer.warnings == []
        assert "env" not in answer.stored["spec"]["containers"][0]  # unchanged
        notes = audit_annotations(cluster, answer.audit_id)
        assert (
            "pods.mutate.gpu-admission.io/gpu-visibility" not in notes
        )  # the webhook never saw it
        (recorded,) = json.loads(notes[VAP_FAILURE])
        assert recorded["binding"] == "gpu-admission-gpu-visibility"
        assert recorded["validationActions"] == ["Audit"]
        assert recorded["message"] == (
            'would change: add container "app" env (NVIDIA_VISIBLE_DEVICES=none)'
        )


def test_checks_in_different_modes_get_a_policy_each(
    cluster: ControlPlane, api: client.ApiClient
) -> None:
    """gpu-env-guard warns while shared-gpu-limit enforces: a pod breaking both is refused by
    the one and warned about by the other, in one answer."""
    chosen = {"policies": {"gpu-env-guard": {"mode": "warn"}}}
    install_policies(api, Config.model_validate(chosen))
    both = _pod("both", {"nvidia.com/gpu.shared": "2"}, NVIDIA_VISIBLE_DEVICES="all")
    in_force(
        cluster,
        api,
        lambda name: {**both, "metadata": {"name": name}},
        lambda a, _: not a.allowed and bool(a.warnings),
    )
    answer = create(api, NS, both)
    assert not answer.allowed
    assert (
        "ValidatingAdmissionPolicy 'gpu-admission-shared-gpu-limit' with binding " in answer.message
    )
    assert "NVIDIA_VISIBLE_DEVICES" not in answer.message
    (warning,) = answer.warnings
    assert warning.startswith(
        "Validation failed for ValidatingAdmissionPolicy 'gpu-admission-gpu-env-guard' with "
        "binding 'gpu-admission-gpu-env-guard': container \"app\" requests a GPU and sets "
        "NVIDIA_VISIBLE_DEVICES"
    )


SHARED_NODE = renamed_shared_node("modes-a10g")


def test_every_mutating_policy_in_audit_mode_records_instead_of_changing(
    cluster: ControlPlane, api: client.ApiClient
) -> None:
    core = client.CoreV1Api(api)
    core.create_node(SHARED_NODE)
    dataset = {
        **bad_pvc("weights"),
        "metadata": {
            "name": "weights",
            "annotations": {"gpu-admission.io/data-source": "s3://models/llama"},
        },
    }
    install_policies(api, Config.model_validate(modes("enforce", "audit")))
    try:
        with served(cluster, modes("enforce", "audit")):
            core.create_namespaced_persistent_volume_claim(NS, dataset)  # never loaded here
            shared = _pod("share-audit", {"nvidia.com/gpu.shared": "1"})
            creds = _pod("creds-audit", NVIDIA_VISIBLE_DEVICES="none")
            creds["metadata"]["annotations"] = {"gpu-admission.io/cloud-credentials": "nowhere"}
            reader = _pod("reader-audit", NVIDIA_VISIBLE_DEVICES="none")
            reader["spec"]["containers"][0]["volumeMounts"] = [{"name": "w", "mountPath": "/w"}]
            reader["spec"]["volumes"] = [
                {"name": "w", "persistentVolumeClaim": {"claimName": "weights"}}
            ]
            key = "pods.mutate.gpu-admission.io/"
            in_force(
                cluster,
                api,
                lambda name: {**creds, "metadata": {**creds["metadata"], "name": name}},
                lambda a, notes: a.allowed and f"{key}cloud-credentials" in notes,
            )
            for body, policy, starts in (
                (
                    shared,
                    "gpu-memory-share",
                    'would change: add container "app" env (GPU_MEMORY_FRACTION=',
                ),
                (creds, "cloud-credentials", "would refuse: cloud credentials cannot be added: "),
                (reader, "dataset-gate", "would change: "),
            ):
                answer = create(api, NS, body)
                assert answer.allowed and answer.warnings == [], answer
                assert "schedulingGates" not in answer.stored["spec"]
                assert "GPU_MEMORY_FRACTION" not in json.dumps(answer.stored)
                recorded = audit_annotations(cluster, answer.audit_id)[f"{key}{policy}"]
                assert recorded.startswith(starts), recorded
    finally:
        core.delete_node(SHARED_NODE["metadata"]["name"])
