"""GPU visibility: containers without a GPU request get NVIDIA_VISIBLE_DEVICES=none."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from gpu_admission.cluster.view import StaticClusterView
from gpu_admission.config.model import Config, GpuConfig
from tests.webhooks.policy_helpers import FIXTURES, load_fixture, mutate_twice
from webhooks.core.review import parse_review
from webhooks.policies import gpu_visibility

VIEW = StaticClusterView()
POLICIES = gpu_visibility.policies(Config())
NONE = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"}


def fixture_request(name: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The fixture's object and the request fields the policies look at."""
    request = parse_review((FIXTURES / name).read_bytes(), "Pod")
    fields = {
        "operation": request.operation,
        "sub_resource": request.sub_resource,
        "old_object": request.old_object,
    }
    return request.object, fields


def visible_devices(container: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in container.get("env") or [] if e.get("name") == "NVIDIA_VISIBLE_DEVICES"]


def pod(*containers: dict[str, Any], **spec: Any) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "p", "namespace": "ml"},
        "spec": {"containers": list(containers), **spec},
    }


def gpu_container(
    name: str = "gpu", resource: str = "nvidia.com/gpu", **extra: Any
) -> dict[str, Any]:
    return {"name": name, "image": "cuda", "resources": {"limits": {resource: "1"}}, **extra}


def test_cuda_image_cpu_only_pod_gets_none() -> None:
    obj, fields = fixture_request("pod-cpu-cuda-image.mutating.json")
    ops, warnings, verdict, _ = mutate_twice(POLICIES, obj, VIEW, **fields)
    assert ops == [{"op": "add", "path": "/spec/containers/0/env", "value": [NONE]}]
    assert warnings == [] and verdict is None


def test_mixed_pod_hides_gpus_from_init_and_sidecar_only() -> None:
    obj, fields = fixture_request("pod-gpu.mutating.json")
    ops, _, _, patched = mutate_twice(POLICIES, obj, VIEW, **fields)
    spec = patched["spec"]
    assert visible_devices(spec["initContainers"][0]) == [NONE]  # fetch-config
    assert spec["containers"][0]["name"] == "trainer"
    assert visible_devices(spec["containers"][0]) == []  # left to the device plugin
    assert visible_devices(spec["containers"][1]) == [NONE]  # metrics-sidecar
    assert {op["path"] for op in ops} == {"/spec/initContainers/0/env", "/spec/containers/1/env"}


def test_ephemeral_container_update_touches_only_the_new_ephemeral_container() -> None:
    obj, fields = fixture_request("ephemeral-container.mutating.json")
    assert fields["sub_resource"] == "ephemeralcontainers" and fields["operation"] == "UPDATE"
    # The regular container predates the webhook: it has no env, and must not be changed here.
    assert visible_devices(obj["spec"]["containers"][0]) == []
    ops, *_ = mutate_twice(POLICIES, obj, VIEW, **fields)
    assert ops == [{"op": "add", "path": "/spec/ephemeralContainers/0/env", "value": [NONE]}]


def test_ephemeral_update_leaves_existing_ephemeral_containers_alone() -> None:
    obj, fields = fixture_request("ephemeral-container.mutating.json")
    old_debugger = {"name": "old-debug", "image": "busybox"}
    obj["spec"]["ephemeralContainers"].insert(0, old_debugger)
    fields["old_object"] = copy.deepcopy(obj)
    fields["old_object"]["spec"]["ephemeralContainers"] = [old_debugger]
    ops, _, _, patched = mutate_twice(POLICIES, obj, VIEW, **fields)
    assert ops == [{"op": "add", "path": "/spec/ephemeralContainers/1/env", "value": [NONE]}]
    assert "env" not in patched["spec"]["ephemeralContainers"][0]


@pytest.mark.parametrize(
    ("operation", "sub_resource"),
    [("UPDATE", ""), ("UPDATE", "status"), ("CREATE", "ephemeralcontainers")],
)
def test_other_requests_are_out_of_scope(operation: str, sub_resource: str) -> None:
    obj = pod({"name": "cpu", "image": "cuda"})
    ops, *_ = mutate_twice(POLICIES, obj, VIEW, operation=operation, sub_resource=sub_resource)
    assert ops == []


@pytest.mark.parametrize(
    ("env", "expected_ops"),
    [
        # Absent env, null env, empty env.
        (None, [{"op": "add", "path": "/spec/containers/0/env", "value": [NONE]}]),
        ("null", [{"op": "replace", "path": "/spec/containers/0/env", "value": [NONE]}]),
        ([], [{"op": "add", "path": "/spec/containers/0/env/-", "value": NONE}]),
        # The user's value is replaced, wherever it is.
        (
            [{"name": "A", "value": "1"}, {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}],
            [{"op": "replace", "path": "/spec/containers/0/env/1", "value": NONE}],
        ),
        # valueFrom is replaced by a plain value.
        (
            [
                {
                    "name": "NVIDIA_VISIBLE_DEVICES",
                    "valueFrom": {"configMapKeyRef": {"name": "gpus", "key": "devices"}},
                }
            ],
            [{"op": "replace", "path": "/spec/containers/0/env/0", "value": NONE}],
        ),
        # Duplicates collapse to one entry (Kubernetes would use the last).
        (
            [
                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "none"},
                {"name": "B", "value": "2"},
                {"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"},
            ],
            [
                {"op": "remove", "path": "/spec/containers/0/env/2"},
                {"op": "replace", "path": "/spec/containers/0/env/0", "value": NONE},
            ],
        ),
        # Already so: nothing to do.
        ([NONE], []),
    ],
)
def test_env_overrides(env: Any, expected_ops: list[dict[str, Any]]) -> None:
    container: dict[str, Any] = {"name": "cpu", "image": "cuda"}
    if env == "null":
        container["env"] = None
    elif env is not None:
        container["env"] = env
    ops, _, _, patched = mutate_twice(POLICIES, pod(container), VIEW)
    assert ops == expected_ops
    assert visible_devices(patched["spec"]["containers"][0]) == [NONE]


def test_env_from_is_overridden_by_an_explicit_entry() -> None:
    container = {"name": "cpu", "image": "cuda", "envFrom": [{"configMapRef": {"name": "gpu-env"}}]}
    _, _, _, patched = mutate_twice(POLICIES, pod(container), VIEW)
    assert visible_devices(patched["spec"]["containers"][0]) == [NONE]
    assert patched["spec"]["containers"][0]["envFrom"] == container["envFrom"]


@pytest.mark.parametrize(
    ("resources", "is_gpu"),
    [
        ({"limits": {"nvidia.com/gpu": "1"}}, True),
        ({"requests": {"nvidia.com/gpu": "1"}}, True),
        ({"limits": {"nvidia.com/gpu.shared": "1"}}, True),
        ({"limits": {"nvidia.com/mig-1g.10gb": "1"}}, True),
        ({"limits": {"nvidia.com/mig-1g.10gb.shared": "1"}}, True),
        ({"limits": {"nvidia.com/gpus": "1"}}, False),
        ({"limits": {"cpu": "1", "memory": "1Gi"}}, False),
        ({"limits": None, "requests": None}, False),
        ({}, False),
    ],
)
def test_which_containers_count_as_gpu_containers(resources: dict[str, Any], is_gpu: bool) -> None:
    container = {"name": "c", "image": "cuda", "resources": resources}
    ops, *_ = mutate_twice(POLICIES, pod(container), VIEW)
    assert (ops == []) is is_gpu


def test_configured_patterns_decide_what_is_a_gpu() -> None:
    config = Config(gpu=GpuConfig(resource_patterns=["amd.com/gpu"]))
    policies = gpu_visibility.policies(config)
    amd = gpu_container("amd", "amd.com/gpu")
    nvidia = gpu_container("nvidia", "nvidia.com/gpu")
    _, _, _, patched = mutate_twice(policies, pod(amd, nvidia), VIEW)
    assert visible_devices(patched["spec"]["containers"][0]) == []
    assert visible_devices(patched["spec"]["containers"][1]) == [NONE]


def test_gpu_container_keeps_its_env_untouched() -> None:
    gpu = gpu_container(env=[{"name": "NVIDIA_VISIBLE_DEVICES", "value": "all"}])
    ops, *_ = mutate_twice(POLICIES, pod(gpu), VIEW)
    assert ops == []  # denied by the env guard instead: the device plugin owns the variable


def test_mirror_pods_are_skipped() -> None:
    obj = pod({"name": "cpu", "image": "cuda"})
    obj["metadata"]["annotations"] = {"kubernetes.io/config.mirror": "abc123"}
    ops, *_ = mutate_twice(POLICIES, obj, VIEW)
    assert ops == []


def test_all_container_kinds_are_covered_on_create() -> None:
    obj = pod(
        {"name": "main", "image": "cuda"},
        initContainers=[{"name": "init", "image": "cuda"}],
        ephemeralContainers=[{"name": "debug", "image": "cuda"}],
    )
    ops, *_ = mutate_twice(POLICIES, obj, VIEW)
    assert sorted(op["path"] for op in ops) == [
        "/spec/containers/0/env",
        "/spec/ephemeralContainers/0/env",
        "/spec/initContainers/0/env",
    ]


def test_fixture_loader_agrees_with_raw_fixture() -> None:
    # The fixture is the real API server body: one container, no env, no resources.
    raw = load_fixture("pod-cpu-cuda-image.mutating.json")["request"]["object"]["spec"][
        "containers"
    ]
    assert raw[0]["resources"] == {} and "env" not in raw[0]


def test_with_the_policy_left_to_the_nodes_nothing_is_hidden() -> None:
    """`gpu.visibility_policy: false` (the without-gpu-visibility component): the webhook, the
    API server's policy as `review` runs it, and the objects generated for the API server all
    leave CPU-only containers as written."""
    from webhooks.apiserver_policies.bindings import visibility_objects
    from webhooks.apiserver_policies.visibility_mutation import changes

    off = Config.model_validate({"gpu": {"visibility_policy": False}})
    obj, _fields = fixture_request("pod-cpu-cuda-image.mutating.json")
    assert gpu_visibility.policies(off) == []
    assert changes(copy.deepcopy(obj), None, off)[1] == []
    assert visibility_objects(off) == []
    assert changes(copy.deepcopy(obj), None, Config())[1] != []  # on by default


VOID = {"name": "NVIDIA_VISIBLE_DEVICES", "value": "void"}


def test_a_container_that_says_void_or_none_keeps_it() -> None:
    """Both give no GPU; `void` also keeps NVIDIA's runtime from injecting the driver."""
    obj = pod(
        {"name": "a", "image": "x", "env": [VOID]},
        {"name": "b", "image": "x", "env": [NONE]},
        {"name": "c", "image": "x", "env": [VOID, NONE]},  # twice: collapsed to one
    )
    ops, _, _, patched = mutate_twice(POLICIES, obj, VIEW, operation="CREATE")
    containers = patched["spec"]["containers"]
    assert [visible_devices(c) for c in containers] == [[VOID], [NONE], [NONE]]
    assert {op["path"].rsplit("/env", 1)[0] for op in ops} == {"/spec/containers/2"}


def test_the_value_written_is_the_setting() -> None:
    config = Config(gpu=GpuConfig(hidden_value="void"))
    obj = pod({"name": "a", "image": "x"}, {"name": "b", "image": "x", "env": [NONE]})
    _, _, _, patched = mutate_twice(gpu_visibility.policies(config), obj, VIEW, operation="CREATE")
    assert [visible_devices(c) for c in patched["spec"]["containers"]] == [[VOID], [NONE]]


@pytest.mark.parametrize(
    "resource", ["nvidia.com/gpumem", "nvidia.com/gpumem-percentage", "nvidia.com/gpucores"]
)
def test_hamis_memory_and_cores_ask_for_a_gpu(resource: str) -> None:
    """HAMi's webhook adds `nvidia.com/gpu` to such a container after the policy ran."""
    obj = pod(gpu_container("share", resource=resource), {"name": "sidecar", "image": "x"})
    _, _, _, patched = mutate_twice(POLICIES, obj, VIEW, operation="CREATE")
    assert [visible_devices(c) for c in patched["spec"]["containers"]] == [[], [NONE]]
    none = Config(gpu=GpuConfig(companion_resources=[]))
    _, _, _, hidden = mutate_twice(gpu_visibility.policies(none), obj, VIEW, operation="CREATE")
    assert visible_devices(hidden["spec"]["containers"][0]) == [NONE]
