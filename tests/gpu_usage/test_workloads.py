"""A pod's workload from what the pod tells (its controller, its labels), and the GPUs each
container holds as GPU-hours count them."""

from __future__ import annotations

from typing import Any

import pytest

from gpu_admission.config.model import GpuConfig
from gpu_admission.config.schedulers import KAI_SCHEDULER
from gpu_admission.gpus.scheduler_gpus import is_reservation_pod
from gpu_usage.workloads import gpus_held, mig_slices, workload_of


def _pod(owner: tuple[str, str] | None, labels: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": "p-0", "labels": labels or {}}
    if owner:
        meta["ownerReferences"] = [
            {"kind": "Node", "name": "not-the-controller"},
            {"kind": owner[0], "name": owner[1], "controller": True},
        ]
    return {"metadata": meta}


@pytest.mark.parametrize(
    ("pod", "workload"),
    [
        (_pod(("ReplicaSet", "web-5d8c7"), {"pod-template-hash": "5d8c7"}), ("Deployment", "web")),
        (_pod(("ReplicaSet", "hand-made")), ("ReplicaSet", "hand-made")),  # not a Deployment's
        (
            _pod(("Job", "train-workers-0"), {"jobset.sigs.k8s.io/jobset-name": "train"}),
            ("JobSet", "train"),
        ),
        (_pod(("Job", "nightly-28391040")), ("Job", "nightly-28391040")),
        (_pod(("StatefulSet", "db")), ("StatefulSet", "db")),
        (_pod(("RayCluster", "ray")), ("RayCluster", "ray")),
        (_pod(None), ("Pod", "p-0")),
    ],
)
def test_the_workload_is_followed_as_far_as_the_pod_tells(pod: dict, workload: tuple) -> None:
    assert workload_of(pod) == workload


@pytest.mark.parametrize(
    ("limits", "env", "held"),
    [
        ({"nvidia.com/gpu": "2"}, {}, 2.0),
        ({"nvidia.com/gpu.shared": "1"}, {"GPU_SHARED_REPLICAS": "4"}, 0.25),
        ({"nvidia.com/gpu.shared": "1"}, {}, 1.0),  # replicas unknown: what it may use
        ({"nvidia.com/mig-1g.10gb": "1"}, {}, 1 / 7),
        ({"nvidia.com/mig-3g.40gb": "2"}, {}, 6 / 7),
        ({"cpu": "4", "memory": "1Gi"}, {}, 0.0),
    ],
)
def test_gpus_held(limits: dict, env: dict, held: float) -> None:
    container = {"name": "main", "resources": {"limits": limits}}
    assert gpus_held(container, env, GpuConfig()) == pytest.approx(held)


def test_a_mig_slice_is_its_share_of_its_gpus_compute_slices() -> None:
    """An A30 has four compute slices, not seven (the GPU Operator's `all-1g.6gb: 4`)."""
    container = {"name": "main", "resources": {"limits": {"nvidia.com/mig-1g.6gb": "1"}}}
    slices = mig_slices(["NVIDIA A30 MIG 1g.6gb"])
    assert slices == 4 and mig_slices(["NVIDIA H100 80GB HBM3"]) == 7
    assert gpus_held(container, {}, GpuConfig(), slices) == pytest.approx(0.25)


def test_the_configured_gpu_resource_names_count() -> None:
    from gpu_usage.pod_index import PodIndex

    pod = {
        "metadata": {"namespace": "team-a", "name": "p", "uid": "u"},
        "spec": {"containers": [{"name": "main", "resources": {"limits": {"amd.com/gpu": "1"}}}]},
        "status": {"phase": "Running"},
    }
    assert PodIndex([pod]).holdings == []  # not a GPU by the default names
    [held] = PodIndex([pod], GpuConfig(resource_patterns=["amd.com/gpu"])).holdings
    assert (held.pod, held.gpus) == ("p", 1.0)


NODE = "gpu-node-1"


def _kai_pod(
    annotations: dict[str, str],
    scheduler: str = "kai-scheduler",
    name: str = "train",
    group: str = "",
) -> dict:
    """A running KAI fraction pod as KAI's webhook and binder leave it (no GPU resource; on its
    node, as the agent lists it; in the GPU group of its reservation pod, when given)."""
    maps = f"{name}-x7k2p9q-shared-gpu"
    env = [
        {
            "name": "NVIDIA_VISIBLE_DEVICES",
            "valueFrom": {
                "configMapKeyRef": {"name": f"{maps}-0", "key": "NVIDIA_VISIBLE_DEVICES"}
            },
        }
    ]
    return {
        "metadata": {
            "namespace": "team-a",
            "name": name,
            "uid": f"u-{name}",
            "labels": {"runai-gpu-group": group} if group else {},
            "annotations": {"runai/shared-gpu-configmap": maps, **annotations},
        },
        "spec": {
            "schedulerName": scheduler,
            "nodeName": NODE,
            "containers": [{"name": "main", "env": env}, {"name": "sidecar"}],
        },
        "status": {"phase": "Running"},
    }


def _kai_reservation_pod(group: str) -> dict:
    """The pod KAI's binder makes to hold the GPU a group of fractions share, as its source
    makes it (pkg/binder/binding/resourcereservation/resource_reservation.go): a whole
    nvidia.com/gpu, placed on the node by hand, in KAI's reservation namespace."""
    gpu = {"nvidia.com/gpu": "1"}
    return {
        "metadata": {
            "namespace": "kai-resource-reservation",
            "name": "gpu-reservation-3f9a1c2e7b5d4a60",
            "uid": "u-reservation",
            "labels": {"app": "kai-resource-reservation", "runai-gpu-group": group},
        },
        "spec": {
            "nodeName": NODE,
            "containers": [
                {
                    "name": "resource-reservation",
                    "resources": {"limits": gpu, "requests": gpu},
                }
            ],
        },
        "status": {"phase": "Running"},
    }


@pytest.mark.parametrize(
    ("annotations", "scheduler", "held"),
    [
        ({"gpu-fraction": "0.5"}, "kai-scheduler", 0.5),
        ({"gpu-fraction": "0.25", "gpu-fraction-num-devices": "2"}, "kai-scheduler", 0.5),
        ({"gpu-memory": "4096"}, "kai-scheduler", None),  # MiB: the share is not in the pod
        ({"gpu-fraction": "0.5"}, "default-scheduler", None),  # not KAI's: nothing held
        ({"gpu-fraction": "2"}, "kai-scheduler", None),  # not a fraction
    ],
)
def test_a_kai_fraction_holds_its_share(annotations: dict, scheduler: str, held: float) -> None:
    from gpu_usage.pod_index import PodIndex

    holdings = PodIndex([_kai_pod(annotations, scheduler)]).holdings
    if held is None:
        assert holdings == []
    else:
        [holding] = holdings
        assert (holding.container, holding.gpus) == ("main", pytest.approx(held))


def _kai_node() -> list[dict]:
    """One GPU KAI shares in halves: its reservation pod and the two fractions it holds it for."""
    group = "8c1d0e4b-5f6a-4b7c-9d2e-1f3a5b7c9d0e"
    return [
        _kai_reservation_pod(group),
        _kai_pod({"gpu-fraction": "0.5"}, name="train-a", group=group),
        _kai_pod({"gpu-fraction": "0.5"}, name="train-b", group=group),
    ]


def test_a_kai_gpu_shared_in_fractions_is_held_once() -> None:
    """The reservation pod's whole GPU is the fractions', which hold their halves: 1 GPU."""
    from gpu_usage.pod_index import PodIndex

    holdings = PodIndex(_kai_node()).holdings
    assert sum(h.gpus for h in holdings) == pytest.approx(1.0)
    assert {(h.namespace, h.pod, h.gpus) for h in holdings} == {
        ("team-a", "train-a", 0.5),
        ("team-a", "train-b", 0.5),
    }


def test_without_a_reservation_namespace_the_reservation_pod_holds_its_gpu() -> None:
    from gpu_usage.pod_index import PodIndex

    kai = KAI_SCHEDULER.model_copy(update={"reservation_namespace": None})
    holdings = PodIndex(_kai_node(), GpuConfig(schedulers=[kai])).holdings
    assert sum(h.gpus for h in holdings) == pytest.approx(2.0)  # the GPU and both halves
    assert ("kai-resource-reservation", 1.0) in {(h.namespace, h.gpus) for h in holdings}


def test_a_reservation_pod_is_known_by_its_schedulers_namespace() -> None:
    [reservation, fraction, _] = _kai_node()
    assert is_reservation_pod(reservation, GpuConfig())
    assert not is_reservation_pod(fraction, GpuConfig())
    assert not is_reservation_pod(reservation, GpuConfig(schedulers=[]))
