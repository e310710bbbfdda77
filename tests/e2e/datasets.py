"""Helpers for the dataset journeys: the controller's test config, PVCs, pods and Jobs through the
official client, and waits on conditions (never sleeps as synchronisation).

Loader pods run from the project's image, as a cluster runs them, wherever it can be built and
run here (`loader_images`); otherwise the fake kubelet runs this interpreter's
`gpu-admission load` and real rclone as host processes, and the run's summary says so.
`GPU_ADMISSION_TEST_LOADERS=process` chooses the host processes."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubernetes import client

from controllers.dataset import DatasetController
from gpu_admission.config.model import Config
from tests.world.containers.engine import IMAGE, Unavailable, engine
from tests.world.kubelet.image_run import Images
from tests.world.kubelet.node import HOST_PATH

NS = "ml"
TIMEOUT = 60.0
VENV_BIN = str(Path(sys.executable).parent)
PREFIX = "gpu-admission.io/"
GATE = {"name": f"{PREFIX}data-load"}


@functools.cache
def loader_images() -> Images | Unavailable:
    """The image the fake kubelet runs loader pods from, or why the host processes run them."""
    if os.environ.get("GPU_ADMISSION_TEST_LOADERS") == "process":
        return Unavailable("GPU_ADMISSION_TEST_LOADERS=process")
    found = engine()
    if isinstance(found, Unavailable):
        if os.environ.get("CI"):
            raise RuntimeError(f"CI must run loader pods from the image: {found.reason}")
        return found
    return Images(found, IMAGE)


def kubelet_images() -> Images | None:
    images = loader_images()
    return images if isinstance(images, Images) else None


def loader() -> list[str]:
    """The command that starts the loader in a loader pod, as the pod runs it."""
    if kubelet_images() is not None:
        return ["gpu-admission", "load"]  # the image's, found on its PATH
    return [sys.executable, "-m", "commands", "load"]


def make_config(s3_endpoint: str = "", gcs_endpoint: str = "", **dataset: Any) -> Config:
    images = kubelet_images()
    # From the image, the loader's PATH is the image's; as host processes, this venv's.
    env = {} if images else {"PATH": f"{VENV_BIN}:{HOST_PATH}"}
    if s3_endpoint:
        env["RCLONE_S3_ENDPOINT"] = s3_endpoint
    if gcs_endpoint:
        env["RCLONE_GCS_ENDPOINT"] = gcs_endpoint
    where = {"loader_image": IMAGE} if images else {"loader_command": loader()}
    return Config.model_validate(
        {
            "dataset": {
                "loader_env": env,
                **where,
                "requeue_base_seconds": 0.05,
                "capacity_requeue_seconds": 0.2,
                "backoff_limit": 1,
                **dataset,
            },
            "leader_election": {
                "namespace": "gpu-admission",
                "lease_duration_seconds": 2,
                "renew_deadline_seconds": 1.5,
                "retry_period_seconds": 0.2,
            },
        }
    )


async def eventually(check: Callable[[], Any], timeout: float = TIMEOUT, what: str = "") -> Any:
    """Call `check` (in a thread: it may use the API) until it returns a truthy value."""
    deadline = time.monotonic() + timeout
    while True:
        value = await asyncio.to_thread(check)
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or check}")
        await asyncio.sleep(0.05)


async def start(
    started: list[DatasetController], api: client.ApiClient, config: Config, name: str = "a"
) -> DatasetController:
    controller = DatasetController(api, config, identity=name)
    await controller.start()
    started.append(controller)
    return controller


def create_pvc(
    core: client.CoreV1Api,
    name: str,
    source: str,
    credentials: str | None = None,
    namespace: str = NS,
) -> dict[str, Any]:
    annotations = {f"{PREFIX}data-source": source}
    if credentials:
        annotations[f"{PREFIX}data-credentials"] = credentials
    body = {
        "metadata": {
            "name": name,
            "annotations": annotations,
            "labels": {f"{PREFIX}data-load": "true"},
        },
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }
    response = core.create_namespaced_persistent_volume_claim(
        namespace, body, _preload_content=False
    )
    return json.loads(response.data)


def read_pvc(core: client.CoreV1Api, name: str) -> dict[str, Any]:
    response = core.read_namespaced_persistent_volume_claim(name, NS, _preload_content=False)
    return json.loads(response.data)


def phase_of(core: client.CoreV1Api, name: str) -> str | None:
    return (read_pvc(core, name)["metadata"].get("annotations") or {}).get(
        f"{PREFIX}data-load-phase"
    )


def jobs(kube_client: client.ApiClient) -> list[dict[str, Any]]:
    response = client.BatchV1Api(kube_client).list_namespaced_job(NS, _preload_content=False)
    return json.loads(response.data)["items"]


def events_for(core: client.CoreV1Api, name: str) -> list[dict[str, Any]]:
    response = core.list_namespaced_event(NS, _preload_content=False)
    items = json.loads(response.data)["items"]
    return [e for e in items if e["involvedObject"]["name"] == name]


def create_gated_pod(core: client.CoreV1Api, name: str, claim: str) -> None:
    body = {
        "metadata": {"name": name, "labels": {f"{PREFIX}data-wait": "true"}},
        "spec": {
            "schedulingGates": [GATE],
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "command": ["true"],
                    "volumeMounts": [{"name": "data", "mountPath": "/data", "readOnly": True}],
                }
            ],
            "volumes": [
                {"name": "data", "persistentVolumeClaim": {"claimName": claim, "readOnly": True}}
            ],
        },
    }
    core.create_namespaced_pod(NS, body, _preload_content=False)


def read_pod(core: client.CoreV1Api, name: str) -> dict[str, Any]:
    return json.loads(core.read_namespaced_pod(name, NS, _preload_content=False).data)


async def wait_phase(core: client.CoreV1Api, name: str, phase: str) -> dict[str, Any]:
    def done() -> dict[str, Any] | None:
        pvc = read_pvc(core, name)
        now = (pvc["metadata"].get("annotations") or {}).get(f"{PREFIX}data-load-phase")
        if now == phase:
            return pvc
        last.update(pvc)
        if now in ("Succeeded", "Failed"):
            raise AssertionError(f"PVC {name} ended {now}, expected {phase}: {pvc['status']}")
        return None

    last: dict[str, Any] = {}
    try:
        return await eventually(done, what=f"PVC {name} {phase}")
    except AssertionError as exc:
        seen = f"{last.get('metadata')} {last.get('status')}"
        raise AssertionError(f"{exc}; last seen: {seen}") from exc
