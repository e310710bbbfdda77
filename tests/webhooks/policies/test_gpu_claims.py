"""Containers that get their GPU through Dynamic Resource Allocation: every pod policy sees them."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpu_admission.cluster.dra import (
    ClaimInfo,
    DeviceClassInfo,
    device_class_info,
    resource_claim_info,
    resource_claim_template_info,
    selector_drivers,
)
from gpu_admission.cluster.view import ObjectRef, StaticClusterView
from gpu_admission.config.model import Config, DraConfig, GpuConfig
from tests.webhooks.policy_helpers import make_request, mutate_twice
from webhooks.core.patch import Patch
from webhooks.policies import gpu_env_guard, gpu_visibility, memory_share
from webhooks.policies.gpu_claims import GpuDetector

NONE = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}
VISIBILITY = gpu_visibility.policies(Config())
GUARD = gpu_env_guard.policies(Config())[0]
NVIDIA_SELECTOR = (
    "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].type == 'gpu'"
)


def template(name: str, *requests: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "namespace": "ml"},
        "spec": {"spec": {"devices": {"requests": list(requests)}}},
    }


def exactly(name: str, device_class: str) -> dict[str, Any]:
    return {"name": name, "exactly": {"deviceClassName": device_class}}


def device_class(name: str, expression: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": expression}}]},
    }


VIEW = StaticClusterView(
    claims=[
        resource_claim_template_info(template("one-gpu", exactly("gpu", "gpu.nvidia.com"))),
        resource_claim_template_info(template("one-nic", exactly("nic", "nic.example.com"))),
        resource_claim_template_info(
            template("gpu-and-nic", exactly("gpu", "mig.nvidia.com"), exactly("nic", "nic.x.io"))
        ),
        resource_claim_template_info(template("a100", exactly("gpu", "a100"))),
        resource_claim_template_info(template("ghost-class", exactly("gpu", "ghost"))),
        resource_claim_template_info(
            template(
                "prefer-big",
                {
                    "name": "acc",
                    "firstAvailable": [
                        {"name": "fpga", "deviceClassName": "fpga.example.com"},
                        {"name": "gpu", "deviceClassName": "gpu.nvidia.com"},
                    ],
                },
            )
        ),
        resource_claim_info(
            {
                "metadata": {"name": "shared-gpu", "namespace": "ml"},
                "spec": {"devices": {"requests": [exactly("gpu", "gpu.nvidia.com")]}},
            }
        ),
    ],
    device_classes=[
        device_class_info(device_class("a100", NVIDIA_SELECTOR + " && productName == 'A100'")),
        device_class_info(device_class("nic.example.com", "device.driver == 'nic.example.com'")),
        device_class_info(device_class("nic.x.io", "device.driver == 'nic.x.io'")),
        device_class_info(device_class("fpga.example.com", "device.driver == 'fpga.example.com'")),
    ],
)


def container(name: str, *claims: dict[str, Any], **extra: Any) -> dict[str, Any]:
    resources = {"claims": list(claims)} if claims else {}
    return {"name": name, "image": "nvidia/cuda:12.4.1-base", "resources": resources, **extra}


def dra_pod(*containers: dict[str, Any], **sources: str) -> dict[str, Any]:
    """sources: claim name -> `template:<name>` or `claim:<name>`."""
    claims = []
    for name, source in sources.items():
        kind, _, target = source.partition(":")
        key = "resourceClaimTemplateName" if kind == "template" else "resourceClaimName"
        claims.append({"name": name, key: target})
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {"containers": list(containers), "resourceClaims": claims},
    }


def hidden(patched: dict[str, Any]) -> list[str]:
    return [c["name"] for c in patched["spec"]["containers"] if NONE in (c.get("env") or [])]


def test_a_dra_gpu_container_keeps_its_gpu_while_its_sidecar_is_hidden() -> None:
    obj = dra_pod(
        container("trainer", {"name": "gpu"}), container("sidecar"), gpu="template:one-gpu"
    )
    _, warnings, _, patched = mutate_twice(VISIBILITY, obj, VIEW)
    assert hidden(patched) == ["sidecar"]
    assert warnings == []


def test_a_claim_of_another_drivers_class_is_not_a_gpu() -> None:
    obj = dra_pod(container("net", {"name": "nic"}), nic="template:one-nic")
    _, _, _, patched = mutate_twice(VISIBILITY, obj, VIEW)
    assert hidden(patched) == ["net"]


@pytest.mark.parametrize(
    ("claim", "source", "is_gpu"),
    [
        ({"name": "acc"}, "template:a100", True),  # a platform's own class over NVIDIA's driver
        ({"name": "acc"}, "template:prefer-big", True),  # a GPU among the alternatives
        ({"name": "acc", "request": "acc/fpga"}, "template:prefer-big", False),
        ({"name": "acc", "request": "acc/gpu"}, "template:prefer-big", True),
        ({"name": "acc", "request": "nic"}, "template:gpu-and-nic", False),
        ({"name": "acc", "request": "gpu"}, "template:gpu-and-nic", True),
        ({"name": "acc"}, "template:gpu-and-nic", True),
        ({"name": "acc"}, "claim:shared-gpu", True),
    ],
)
def test_which_requests_count(claim: dict[str, Any], source: str, is_gpu: bool) -> None:
    obj = dra_pod(container("app", claim), acc=source)
    _, warnings, _, patched = mutate_twice(VISIBILITY, obj, VIEW)
    assert hidden(patched) == ([] if is_gpu else ["app"])
    assert warnings == []


@pytest.mark.parametrize(
    ("source", "claim", "reason"),
    [
        ("template:later", {"name": "gpu"}, 'ResourceClaimTemplate "later" was not found'),
        ("claim:absent", {"name": "gpu"}, 'ResourceClaim "absent" was not found in namespace ml'),
        ("template:ghost-class", {"name": "gpu"}, 'DeviceClass "ghost" was not found'),
        ("template:one-gpu", {"name": "gpu", "request": "nope"}, 'has no request "nope"'),
    ],
)
def test_an_unresolvable_claim_keeps_its_gpus_with_a_warning_and_a_notice(
    source: str, claim: dict[str, Any], reason: str
) -> None:
    obj = dra_pod(container("trainer", claim), container("sidecar"), gpu=source)
    request = make_request(copy.deepcopy(obj))
    patch = Patch(request.object)
    VISIBILITY[0].mutate(request, patch, VIEW)
    assert hidden(request.object) == ["sidecar"]
    assert len(patch.warnings) == 1 and reason in patch.warnings[0]
    assert patch.warnings[0].startswith('container "trainer": ')
    assert patch.warnings[0].endswith("counted as a GPU container (GPUs not hidden)")
    assert patch.notices == {"unresolved_gpu_claim": 1}


def test_the_env_guard_covers_dra_gpu_containers() -> None:
    obj = dra_pod(
        container(
            "trainer", {"name": "gpu"}, env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}]
        ),
        container("sidecar", env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}]),
        gpu="template:one-gpu",
    )
    verdict = GUARD.validate(make_request(obj), VIEW)
    assert not verdict.allowed
    assert verdict.message.startswith(
        'container "trainer" requests a GPU and sets NVIDIA_VISIBLE_DEVICES (by value)'
    )
    assert "sidecar" not in verdict.message


def test_extended_resources_still_count_without_any_claim() -> None:
    # DRA-backed extended resources (KEP-5004) reach the pod as plain `nvidia.com/gpu`.
    obj = dra_pod(container("gpu", resources={}))
    obj["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "1"}}
    _, _, _, patched = mutate_twice(VISIBILITY, obj, VIEW)
    assert hidden(patched) == []


def test_device_classes_are_configuration() -> None:
    config = Config(gpu=GpuConfig(dra=DraConfig(device_classes=["nic.example.com"], drivers=[])))
    obj = dra_pod(container("app", {"name": "c"}), c="template:one-nic")
    _, _, _, patched = mutate_twice(gpu_visibility.policies(config), obj, VIEW)
    assert hidden(patched) == []
    obj = dra_pod(container("app", {"name": "c"}), c="template:a100")  # no driver rule now
    _, _, _, patched = mutate_twice(gpu_visibility.policies(config), obj, VIEW)
    assert hidden(patched) == ["app"]


def test_memory_share_says_a_claim_gpu_gets_no_share() -> None:
    obj = dra_pod(container("trainer", {"name": "gpu"}), gpu="template:one-gpu")
    obj["metadata"]["annotations"] = {"gpu-admission.io/gpu-app": "pytorch"}
    ops, warnings, _, _ = mutate_twice(memory_share.policies(Config()), obj, VIEW)
    assert ops == []
    assert warnings == [
        'container "trainer" gets its GPU from a ResourceClaim: gpu-admission.io/gpu-app sets no '
        "share for it"
    ]


def test_references_name_claims_then_the_classes_they_draw_from() -> None:
    detector = GpuDetector.from_config(Config())
    obj = dra_pod(
        container("a", {"name": "x"}),
        container("b", {"name": "y"}),
        x="template:a100",
        y="claim:shared-gpu",
        unused="template:one-nic",
    )
    assert list(detector.references(obj, "ml", None)) == [
        ObjectRef("ResourceClaimTemplate", "ml", "a100"),
        ObjectRef("ResourceClaim", "ml", "shared-gpu"),
    ]
    # Once fetched, the classes not named by the configuration are asked for too.
    assert list(detector.references(obj, "ml", VIEW)) == [
        ObjectRef("ResourceClaimTemplate", "ml", "a100"),
        ObjectRef("DeviceClass", "", "a100"),
        ObjectRef("ResourceClaim", "ml", "shared-gpu"),
    ]
    assert list(detector.references(dra_pod(container("c")), "ml", VIEW)) == []


@pytest.mark.parametrize(
    ("expression", "drivers"),
    [
        (NVIDIA_SELECTOR, {"gpu.nvidia.com"}),
        ('"gpu.nvidia.com" == device.driver', {"gpu.nvidia.com"}),
        ("device.driver in ['a.io', \"b.io\"]", {"a.io", "b.io"}),
        ("device.driver != 'gpu.nvidia.com'", set()),
        ("device.attributes['gpu.nvidia.com'].type == 'gpu'", set()),
    ],
)
def test_drivers_are_read_from_cel_selectors(expression: str, drivers: set[str]) -> None:
    assert selector_drivers(expression) == frozenset(drivers)


def test_claim_records_keep_request_and_sub_request_classes() -> None:
    info = resource_claim_template_info(
        template(
            "t",
            exactly("a", "gpu.nvidia.com"),
            {"name": "b", "firstAvailable": [{"name": "x", "deviceClassName": "mig.nvidia.com"}]},
        )
    )
    assert info == ClaimInfo(
        "ResourceClaimTemplate",
        "ml",
        "t",
        info.requests,
    )
    assert info.device_classes() == ("gpu.nvidia.com", "mig.nvidia.com")
    assert info.device_classes("b/x") == ("mig.nvidia.com",)
    assert info.device_classes("b/y") is None and info.device_classes("c") is None
    assert device_class_info(device_class("k", "true")) == DeviceClassInfo("k", frozenset())
