"""Why a loader pod has not started, from its status and Events, in words with what to do."""

from __future__ import annotations

from typing import Any

from controllers.dataset.blocked import blockage
from controllers.dataset.records import LoaderPod, loader_pod

CREDENTIALS = "gpu-admission.io/data-credentials"


def pod(
    status: dict[str, Any], image: str = "registry.example.com/gpu-admission:0.1.0"
) -> LoaderPod:
    record = loader_pod(
        {
            "metadata": {
                "name": "dl-x-0",
                "namespace": "ml",
                "creationTimestamp": "2026-11-25T10:00:00Z",
                "labels": {"batch.kubernetes.io/job-name": "dl-x"},
            },
            "spec": {"containers": [{"name": "load", "image": image}]},
            "status": status,
        }
    )
    assert record is not None
    return record


def waiting(reason: str, message: str = "") -> dict[str, Any]:
    return {
        "phase": "Pending",
        "containerStatuses": [
            {"name": "load", "state": {"waiting": {"reason": reason, "message": message}}}
        ],
    }


CREATING = waiting("ContainerCreating")


def test_a_missing_configmap_is_named_from_the_kubelets_event() -> None:
    events = [
        ("Scheduled", "Successfully assigned ml/dl-x-0 to node-1"),
        (
            "FailedMount",
            'MountVolume.SetUp failed for volume "trusted-ca" : configmap "trust-bundle" not found',
        ),
    ]
    found = blockage(pod(CREATING), events, 5.0, CREDENTIALS)
    assert found is not None and found.cause == "config-map"
    assert found.message == (
        'loader pod dl-x-0 cannot start: ConfigMap "trust-bundle" is missing in namespace ml; '
        "create it (dataset.trusted_ca_config_map names it) or ask the cluster's administrators"
    )
    # Without the Event, a young pod is not blamed yet.
    assert blockage(pod(CREATING), [], 5.0, CREDENTIALS) is None


def test_a_missing_secret_is_named_from_the_container_status() -> None:
    found = blockage(
        pod(waiting("CreateContainerConfigError", 'secret "s3-reader" not found')),
        [],
        1.0,
        CREDENTIALS,
    )
    assert found is not None and found.cause == "secret"
    assert found.message == (
        'loader pod dl-x-0 cannot start: Secret "s3-reader" is missing in namespace ml; create '
        f"it, or point {CREDENTIALS} at a Secret that exists"
    )


def test_an_image_that_cannot_be_pulled_is_named() -> None:
    status = waiting(
        "ImagePullBackOff", 'Back-off pulling image "registry.example.com/gpu-admission:0.1.0"'
    )
    found = blockage(pod(status), [], 1.0, CREDENTIALS)
    assert found is not None and found.cause == "image"
    assert (
        "its image registry.example.com/gpu-admission:0.1.0 cannot be pulled (ImagePullBackOff"
        in found.message
    )
    assert "dataset.loader_image" in found.message


def test_an_unschedulable_pod_quotes_the_scheduler() -> None:
    status = {
        "phase": "Pending",
        "conditions": [
            {
                "type": "PodScheduled",
                "status": "False",
                "reason": "Unschedulable",
                "message": "0/3 nodes are available: 3 Insufficient memory.",
            }
        ],
    }
    found = blockage(pod(status), [], 1.0, CREDENTIALS)
    assert found is not None and found.cause == "unschedulable"
    assert found.message.startswith(
        "loader pod dl-x-0 cannot be scheduled: 0/3 nodes are available: 3 Insufficient memory.;"
    )


def test_a_pod_not_started_within_a_minute_is_named_whatever_the_cause() -> None:
    assert blockage(pod(CREATING), [], 59.0, CREDENTIALS) is None
    found = blockage(pod(CREATING), [], 125.0, CREDENTIALS)
    assert found is not None and found.cause == "not-started"
    assert found.message == (
        "loader pod dl-x-0 has not started after 2m (ContainerCreating); "
        "`kubectl -n ml describe pod dl-x-0` shows why"
    )


def test_a_started_or_finished_pod_is_never_blocked() -> None:
    running = {
        "phase": "Running",
        "containerStatuses": [{"name": "load", "state": {"running": {}}}],
    }
    assert blockage(pod(running), [], 600.0, CREDENTIALS) is None
    done = {
        "phase": "Failed",
        "containerStatuses": [{"name": "load", "state": {"terminated": {"exitCode": 1}}}],
    }
    assert blockage(pod(done), [], 600.0, CREDENTIALS) is None
