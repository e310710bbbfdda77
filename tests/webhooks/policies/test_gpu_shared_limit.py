"""Shared-GPU limit: at most 1 of a time-sliced GPU resource per container."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_admission.cluster.view import StaticClusterView
from gpu_admission.config.model import Config, GpuConfig
from tests.webhooks.policy_helpers import FIXTURES, make_request
from webhooks.core.review import Verdict, parse_review
from webhooks.policies import shared_gpu_limit

VIEW = StaticClusterView()


def validate(obj: dict[str, Any], config: Config | None = None) -> Verdict:
    request = make_request(obj)
    (policy,) = shared_gpu_limit.policies(config or Config())
    assert policy.scope.matches(request)
    return policy.validate(request, VIEW)


def pod_with(
    resources: dict[str, Any], list_name: str = "containers", name: str = "nb"
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": [{"name": "main", "image": "x"}]}
    spec.setdefault(list_name, []).append({"name": name, "image": "x", "resources": resources})
    return {"kind": "Pod", "metadata": {"name": "p", "namespace": "ml"}, "spec": spec}


def fixture(name: str) -> dict[str, Any]:
    return parse_review((FIXTURES / name).read_bytes(), "Pod").object


def test_real_shared_one_is_allowed() -> None:
    assert validate(fixture("pod-shared-gpu-1.validating.json")).allowed


def test_real_shared_two_is_denied_with_the_reason() -> None:
    verdict = validate(fixture("pod-shared-gpu-2.validating.json"))
    assert not verdict.allowed
    container = fixture("pod-shared-gpu-2.validating.json")["spec"]["containers"][0]["name"]
    assert verdict.message.startswith(
        f'container "{container}" asks for 2 of nvidia.com/gpu.shared'
    )
    # Limits were copied into requests by the API server: one line, not two.
    assert verdict.message.count("asks for") == 1
    assert "no proportional compute" in verdict.message
    assert "request 1 nvidia.com/gpu.shared, or a whole GPU with nvidia.com/gpu" in verdict.message


R = "nvidia.com/gpu.shared"
MIG = "nvidia.com/mig-1g.10gb.shared"


@pytest.mark.parametrize(
    ("resources", "expected"),
    [
        ({"limits": {R: "1"}}, None),
        ({"limits": {R: 1}}, None),
        ({"limits": {R: "1000m"}}, None),
        ({"limits": {R: "0"}}, None),
        ({"limits": {R: "2"}}, "asks for 2 of nvidia.com/gpu.shared in limits and requests"),
        (
            {"limits": {R: 2}, "requests": {R: 2}},
            "asks for 2 of nvidia.com/gpu.shared in limits and requests",
        ),
        # Shown as the API holds it (kube-apiserver writes "2000m" as "2").
        (
            {"limits": {R: "2000m"}},
            "asks for 2000m of nvidia.com/gpu.shared in limits and requests",
        ),
        ({"requests": {R: "3"}}, "asks for 3 of nvidia.com/gpu.shared in requests"),
        ({"limits": {R: "1"}, "requests": {R: "2"}}, "in requests:"),
        (
            {"limits": {R: "500m"}},
            'asks for "500m" of nvidia.com/gpu.shared in limits and requests, which is not a whole',
        ),
        ({"limits": {R: "1.5"}}, "asks for 1.5 of nvidia.com/gpu.shared"),  # more than one first
        ({"limits": {R: "0.5"}}, "not a whole number"),
        (
            {"limits": {R: "lots"}},
            'nvidia.com/gpu.shared: "lots" in limits and requests, which is not a quantity',
        ),
        (
            {"limits": {MIG: "2"}},
            "request 1 nvidia.com/mig-1g.10gb.shared, or a whole GPU with nvidia.com/mig-1g.10gb",
        ),
        ({"limits": {MIG: "1"}}, None),
        ({"limits": {"nvidia.com/gpu": "4"}}, None),  # whole GPUs: any count
        ({"limits": {"nvidia.com/mig-1g.10gb": "2"}}, None),
        ({"limits": None, "requests": None}, None),
    ],
)
def test_counts(resources: dict[str, Any], expected: str | None) -> None:
    # Mirror the API server's defaulting of extended-resource requests from limits.
    if resources.get("limits") and "requests" not in resources:
        resources = {**resources, "requests": dict(resources["limits"])}
    verdict = validate(pod_with(resources))
    if expected is None:
        assert verdict.allowed, verdict.message
    else:
        assert not verdict.allowed
        assert expected in verdict.message
        assert 'container "nb"' in verdict.message


def test_init_containers_are_checked() -> None:
    verdict = validate(pod_with({"limits": {R: "2"}}, list_name="initContainers", name="warm"))
    assert not verdict.allowed and 'init container "warm" asks for 2' in verdict.message


def test_every_offender_is_reported_at_once() -> None:
    obj = pod_with({"limits": {R: "2"}})
    obj["spec"]["containers"].append(
        {"name": "b", "image": "x", "resources": {"limits": {MIG: "3"}}}
    )
    verdict = validate(obj)
    assert 'container "nb"' in verdict.message and 'container "b" asks for 3' in verdict.message


def test_shared_suffixes_are_configurable() -> None:
    config = Config(
        gpu=GpuConfig(resource_patterns=["nvidia.com/gpu*"], shared_suffixes=[".timesliced"])
    )
    assert not validate(pod_with({"limits": {"nvidia.com/gpu.timesliced": "2"}}), config).allowed
    assert validate(pod_with({"limits": {R: "2"}}), config).allowed
