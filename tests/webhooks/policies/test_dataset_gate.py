"""Pods that mount dataset PVCs: the scheduling gate, pinned pods, and read-only mounts."""

from __future__ import annotations

import copy

import pytest

from gpu_admission.cluster.view import ObjectRef, PVCInfo, StaticClusterView
from gpu_admission.config.model import Config
from gpu_admission.datasets.load import DatasetContent, DatasetLoad
from tests.webhooks.policy_helpers import FIXTURES, load_fixture, make_request, mutate_twice
from webhooks.core.review import parse_review
from webhooks.policies.dataset_gate import load_of, policies

CONFIG = Config()
NAMES = CONFIG.names
POLICIES = policies(CONFIG)
GATE = {"name": "gpu-admission.io/data-load"}
SOURCE = "s3://ml-datasets/imagenet/train"


def dataset_pvc(
    name: str, phase: str | None, *, source: str = SOURCE, stale: bool = False
) -> PVCInfo:
    annotations = {NAMES.data_source: source}
    if phase is not None:
        annotations[NAMES.data_load_phase] = phase
        loaded = "s3://ml-datasets/old" if stale else source
        annotations[NAMES.data_load_job] = DatasetLoad(
            name, f"uid-{name}", DatasetContent(loaded)
        ).job
    return PVCInfo("ml", name, f"uid-{name}", annotations, {NAMES.data_load_label: "true"})


def phase_of(pvc: PVCInfo) -> str:
    load = load_of(pvc, NAMES)
    assert load is not None
    return load.phase


def fixture_pod(name: str = "pod-with-pvc.mutating.json") -> dict:
    return load_fixture(name)["request"]["object"]


def writable_pod() -> dict:
    """The fixture pod without its own readOnly settings."""
    pod = fixture_pod()
    del pod["spec"]["volumes"][0]["persistentVolumeClaim"]["readOnly"]
    del pod["spec"]["containers"][0]["volumeMounts"][0]["readOnly"]
    return pod


@pytest.mark.parametrize("phase", [None, "Pending", "Loading", "Failed"])
def test_pod_of_unloaded_dataset_gets_gate_and_label(phase: str | None) -> None:
    view = StaticClusterView(pvcs=[dataset_pvc("imagenet", phase)])
    _ops, warnings, verdict, pod = mutate_twice(POLICIES, fixture_pod(), view)
    assert verdict is None
    assert pod["spec"]["schedulingGates"] == [GATE]
    assert pod["metadata"]["labels"][NAMES.data_wait_label] == "true"
    assert bool(warnings) == (phase == "Failed")
    if phase == "Failed":
        assert "imagenet failed to load" in warnings[0]


def test_loaded_dataset_adds_no_gate() -> None:
    view = StaticClusterView(pvcs=[dataset_pvc("imagenet", "Succeeded")])
    ops, warnings, _verdict, pod = mutate_twice(POLICIES, fixture_pod(), view)
    assert ops == [] and warnings == []
    assert "schedulingGates" not in pod["spec"]


def test_success_for_an_older_source_still_gates() -> None:
    pvc = dataset_pvc("imagenet", "Succeeded", stale=True)
    assert phase_of(pvc) == "Pending"
    _, _, _, pod = mutate_twice(POLICIES, fixture_pod(), StaticClusterView(pvcs=[pvc]))
    assert pod["spec"]["schedulingGates"] == [GATE]


def test_existing_gates_are_kept_and_ours_appended_once() -> None:
    pod = fixture_pod()
    pod["spec"]["schedulingGates"] = [{"name": "gpu-admission.io/quota"}]
    view = StaticClusterView(pvcs=[dataset_pvc("imagenet", "Loading")])
    ops, _, _, patched = mutate_twice(POLICIES, pod, view)
    assert patched["spec"]["schedulingGates"] == [{"name": "gpu-admission.io/quota"}, GATE]
    assert {"op": "add", "path": "/spec/schedulingGates/-", "value": GATE} in ops


def test_pvc_that_is_not_a_dataset_is_ignored() -> None:
    plain = PVCInfo("ml", "imagenet", "uid", {}, {})
    ops, *_ = mutate_twice(POLICIES, writable_pod(), StaticClusterView(pvcs=[plain]))
    assert ops == []
    ops, *_ = mutate_twice(POLICIES, writable_pod(), StaticClusterView())
    assert ops == []


def test_pinned_pod_is_denied_while_loading_with_the_reason() -> None:
    body = load_fixture("pod-nodename-and-gates-rejected.mutating.json")
    pod = body["request"]["object"]
    pod["spec"]["volumes"].append({"name": "coco", "persistentVolumeClaim": {"claimName": "coco"}})
    view = StaticClusterView(pvcs=[dataset_pvc("coco", "Loading")])
    _, _, verdict, _ = mutate_twice(POLICIES, pod, view)
    assert verdict is not None and not verdict.allowed
    assert "pinned to node 'gpu-node-1'" in verdict.message
    assert "PVC 'coco' (Loading)" in verdict.message
    assert "remove spec.nodeName" in verdict.message
    # Once loaded, the pinned pod is admitted (mounts made read-only).
    view = StaticClusterView(pvcs=[dataset_pvc("coco", "Succeeded")])
    _ops, _, verdict, patched = mutate_twice(POLICIES, pod, view)
    assert verdict is None and patched["spec"]["schedulingGates"] == [
        {"name": "gpu-admission.io/quota"}
    ]


def test_fixture_pinned_pod_without_datasets_is_untouched() -> None:
    request = parse_review(
        (FIXTURES / "pod-nodename-and-gates-rejected.mutating.json").read_bytes(), "Pod"
    )
    view = StaticClusterView(pvcs=[dataset_pvc("coco", "Loading")])
    ops, _, verdict, _ = mutate_twice(POLICIES, request.object, view)
    assert ops == [] and verdict is None


def test_dataset_mounts_become_read_only_in_every_container_kind() -> None:
    pod = writable_pod()
    mount = {"name": "imagenet", "mountPath": "/in", "readOnly": False}
    pod["spec"]["initContainers"] = [{"name": "prep", "image": "x", "volumeMounts": [mount]}]
    pod["spec"]["containers"][0]["volumeMounts"].append({"name": "imagenet", "mountPath": "/b"})
    view = StaticClusterView(pvcs=[dataset_pvc("imagenet", "Succeeded")])
    ops, _, _, patched = mutate_twice(POLICIES, pod, view)
    spec = patched["spec"]
    assert spec["volumes"][0]["persistentVolumeClaim"]["readOnly"] is True
    assert spec["initContainers"][0]["volumeMounts"][0]["readOnly"] is True
    mounts = [m for m in spec["containers"][0]["volumeMounts"] if m["name"] == "imagenet"]
    assert [m["readOnly"] for m in mounts] == [True, True]
    # The service-account mount is not a dataset and is left alone.
    assert not any("1/readOnly" in op["path"] and "containers/0" in op["path"] for op in ops)


def test_fixture_already_read_only_records_nothing_for_mounts() -> None:
    view = StaticClusterView(pvcs=[dataset_pvc("imagenet", "Succeeded")])
    ops, *_ = mutate_twice(POLICIES, fixture_pod(), view)
    assert ops == []


def test_writable_opt_out_keeps_mounts_but_still_gates() -> None:
    pod = writable_pod()
    pod["metadata"]["annotations"] = {NAMES.dataset_writable: "true"}
    view = StaticClusterView(pvcs=[dataset_pvc("imagenet", "Loading")])
    _, _, _, patched = mutate_twice(POLICIES, pod, view)
    assert "readOnly" not in patched["spec"]["volumes"][0]["persistentVolumeClaim"]
    assert "readOnly" not in patched["spec"]["containers"][0]["volumeMounts"][0]
    assert patched["spec"]["schedulingGates"] == [GATE]


def test_ephemeral_container_mount_made_read_only_without_touching_the_rest() -> None:
    pod = writable_pod()
    pod["spec"]["ephemeralContainers"] = [
        {
            "name": "debug",
            "image": "busybox",
            "volumeMounts": [{"name": "imagenet", "mountPath": "/d"}],
        }
    ]
    view = StaticClusterView(pvcs=[dataset_pvc("imagenet", "Loading")])
    ops, _, _, patched = mutate_twice(
        POLICIES, pod, view, operation="UPDATE", sub_resource="ephemeralcontainers"
    )
    assert ops == [
        {"op": "add", "path": "/spec/ephemeralContainers/0/volumeMounts/0/readOnly", "value": True}
    ]
    assert "schedulingGates" not in patched["spec"]


def test_references_name_every_claim() -> None:
    pod = fixture_pod()
    pod["spec"]["volumes"].append({"name": "b", "persistentVolumeClaim": {"claimName": "coco"}})
    request = make_request(copy.deepcopy(pod))
    refs = [r for p in POLICIES if p.scope.matches(request) for r in p.references(request)]
    assert refs == [
        ObjectRef("PersistentVolumeClaim", "ml", "imagenet"),
        ObjectRef("PersistentVolumeClaim", "ml", "coco"),
    ]


def test_several_datasets_gate_until_all_have_loaded() -> None:
    pod = writable_pod()
    pod["spec"]["volumes"].append({"name": "b", "persistentVolumeClaim": {"claimName": "coco"}})
    loaded = dataset_pvc("imagenet", "Succeeded")
    view = StaticClusterView(pvcs=[loaded, dataset_pvc("coco", "Loading")])
    _, _, _, patched = mutate_twice(POLICIES, pod, view)
    assert patched["spec"]["schedulingGates"] == [GATE]
    view = StaticClusterView(pvcs=[loaded, dataset_pvc("coco", "Succeeded")])
    _, _, _, patched = mutate_twice(POLICIES, pod, view)
    assert "schedulingGates" not in patched["spec"]


def test_loader_pod_is_neither_gated_nor_made_read_only() -> None:
    pod = writable_pod()
    pod["metadata"]["labels"][NAMES.data_load_label] = "true"
    view = StaticClusterView(pvcs=[dataset_pvc("imagenet", "Loading")])
    ops, *_ = mutate_twice(POLICIES, pod, view)
    assert ops == []


def test_a_retry_asked_for_counts_as_a_load_not_yet_done() -> None:
    failed = dataset_pvc("imagenet", "Failed")
    retried = PVCInfo(
        "ml", "imagenet", failed.uid, {**failed.annotations, NAMES.data_load_retry: "1"}
    )
    assert phase_of(failed) == "Failed"
    assert phase_of(retried) == "Pending"  # the new load has not been recorded yet
