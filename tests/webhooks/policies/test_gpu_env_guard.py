"""GPU env tampering: a GPU container may not set NVIDIA_VISIBLE_DEVICES itself."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_admission.cluster.view import StaticClusterView
from gpu_admission.config.model import Config, GpuConfig
from tests.webhooks.policy_helpers import FIXTURES, make_request
from webhooks.core.review import Verdict, parse_review
from webhooks.policies import gpu_env_guard

VIEW = StaticClusterView()


def validate(obj: dict[str, Any], config: Config | None = None, **fields: Any) -> Verdict:
    request = make_request(obj, **fields)
    verdicts = [
        p.validate(request, VIEW)
        for p in gpu_env_guard.policies(config or Config())
        if p.scope.matches(request)
    ]
    assert len(verdicts) <= 1
    return verdicts[0] if verdicts else Verdict.allow()


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {"containers": list(containers), **spec},
    }


def container(
    name: str, gpu: str | None = "nvidia.com/gpu", env: list[Any] | None = None
) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name, "image": "cuda"}
    if gpu:
        c["resources"] = {"limits": {gpu: "1"}}
    if env is not None:
        c["env"] = env
    return c


ALL = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}
FROM_CONFIGMAP = {
    "name": "NVIDIA_VISIBLE_DEVICES",
    "valueFrom": {"configMapKeyRef": {"name": "x", "key": "y"}},
}


@pytest.mark.parametrize(
    ("containers", "denied_text"),
    [
        (
            [container("trainer", env=[ALL])],
            'container "trainer" requests a GPU and sets NVIDIA_VISIBLE_DEVICES (by value)',
        ),
        ([container("trainer", env=[FROM_CONFIGMAP])], "NVIDIA_VISIBLE_DEVICES (from valueFrom)"),
        ([container("t", "nvidia.com/gpu.shared", env=[ALL])], 'container "t"'),
        ([container("t", "nvidia.com/mig-1g.10gb", env=[ALL])], 'container "t"'),
        (
            [container("t", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}])],
            'container "t"',
        ),
        ([container("ok"), container("bad", env=[ALL])], 'container "bad"'),
        ([container("cpu", gpu=None, env=[ALL])], None),  # handled by the visibility mutation
        ([container("trainer", env=[{"name": "CUDA_VISIBLE_DEVICES", "value": "0"}])], None),
        ([container("trainer", env=None)], None),
        ([container("trainer", env=[])], None),
    ],
)
def test_gpu_containers_may_not_set_visible_devices(
    containers: list[dict[str, Any]], denied_text: str | None
) -> None:
    verdict = validate(pod(*containers))
    if denied_text is None:
        assert verdict.allowed
    else:
        assert not verdict.allowed
        assert denied_text in verdict.message
        assert "Remove it from the container's env" in verdict.message


def test_message_never_echoes_the_value() -> None:
    secretish = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "GPU-8f2c-do-not-print"}
    verdict = validate(pod(container("trainer", env=[secretish])))
    assert not verdict.allowed and "do-not-print" not in verdict.message


def test_init_containers_are_checked_and_every_offender_is_named() -> None:
    obj = pod(container("a", env=[ALL]), initContainers=[container("warmup", env=[FROM_CONFIGMAP])])
    verdict = validate(obj)
    assert 'init container "warmup"' in verdict.message and 'container "a"' in verdict.message


def test_guarded_names_are_configurable() -> None:
    config = Config(gpu=GpuConfig(guarded_env=["NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"]))
    cuda = {"name": "CUDA_VISIBLE_DEVICES", "value": "0,1"}
    assert not validate(pod(container("t", env=[cuda])), config).allowed
    assert validate(pod(container("t", env=[cuda]))).allowed


def test_real_mixed_gpu_pod_is_allowed() -> None:
    request = parse_review((FIXTURES / "pod-gpu.validating.json").read_bytes(), "Pod")
    assert validate(request.object).allowed


def test_new_ephemeral_containers_are_checked_on_their_update() -> None:
    request = parse_review((FIXTURES / "ephemeral-container.validating.json").read_bytes(), "Pod")
    fields = {
        "operation": "UPDATE",
        "sub_resource": "ephemeralcontainers",
        "old_object": request.old_object,
    }
    assert validate(request.object, **fields).allowed
    # Ephemeral containers cannot ask for resources today; the check holds if that changes.
    request.object["spec"]["ephemeralContainers"][0].update(container("debugger", env=[ALL]))
    verdict = validate(request.object, **fields)
    assert not verdict.allowed and 'ephemeral container "debugger"' in verdict.message


def test_plain_updates_are_out_of_scope() -> None:
    assert validate(pod(container("t", env=[ALL])), operation="UPDATE").allowed


KAI_ENV = {
    "name": "NVIDIA_VISIBLE_DEVICES",
    "valueFrom": {
        "configMapKeyRef": {"name": "f-abc-shared-gpu-0", "key": "NVIDIA_VISIBLE_DEVICES"}
    },
}


def kai_pod(**spec: Any) -> dict[str, Any]:
    obj = pod(container("main", gpu=None, env=[KAI_ENV]), schedulerName="kai-scheduler", **spec)
    obj["metadata"]["annotations"] = {
        "gpu-fraction": "0.5",
        "runai/shared-gpu-configmap": "f-abc-shared-gpu",
    }
    return obj


def test_a_fraction_its_scheduler_gave_is_allowed() -> None:
    assert validate(kai_pod()).allowed


def test_a_fraction_placed_by_hand_is_refused_with_what_to_do() -> None:
    verdict = validate(kai_pod(nodeName="gpu-1"))
    assert not verdict.allowed
    assert verdict.message.startswith(
        'container "main" asks for no GPU and sets NVIDIA_VISIBLE_DEVICES (from valueFrom), '
        "which kai-scheduler did not give it. A GPU-sharing scheduler gives"
    )
    assert "remove spec.nodeName" in verdict.message


def test_a_configmap_the_pod_does_not_name_is_refused() -> None:
    obj = kai_pod()
    obj["metadata"]["annotations"]["runai/shared-gpu-configmap"] = "other"
    assert not validate(obj).allowed
    # A hidden value is never refused, nor is any env outside the schedulers' pods.
    obj["spec"]["containers"][0]["env"] = [{"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}]
    assert validate(obj).allowed
    assert validate(pod(container("main", gpu=None, env=[FROM_CONFIGMAP]))).allowed
    no_schedulers = Config.model_validate({"gpu": {"schedulers": []}})
    assert validate(kai_pod(nodeName="gpu-1"), no_schedulers).allowed


def test_a_hami_memory_only_container_is_a_gpu_container() -> None:
    verdict = validate(pod(container("share", gpu="nvidia.com/gpumem", env=[ALL])))
    assert not verdict.allowed
    assert 'container "share" requests a GPU and sets NVIDIA_VISIBLE_DEVICES' in verdict.message
