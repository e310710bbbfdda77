"""The dataset controller end to end on the real control plane (kube-apiserver, the real
scheduler, Job controller, garbage collector and PV controller), the played kubelet as a node
agent running the loader Job's command (real `gpu-admission load` and real rclone), a played
provisioner giving each claim its volume, and moto / fake-gcs-server as the clouds.

PVCs are created already labelled, as the PVC mutating webhook leaves them; consumer pods are
created with the gate already set, as the pod webhook leaves them. A controller restarted
mid-load and a PVC deleted mid-load run on the real node, through the installed product:
tests/install/loads/test_s3_loads.py.
"""

from __future__ import annotations

import base64
import json
from typing import Any

from kubernetes import client

from controllers.dataset import DatasetController
from gpu_admission.datasource import loader_job_name
from tests.e2e.datasets import (
    GATE,
    NS,
    PREFIX,
    create_gated_pod,
    create_pvc,
    events_for,
    eventually,
    jobs,
    make_config,
    read_pod,
    read_pvc,
    start,
    wait_phase,
)
from tests.world.kubelet.node import FakeKubelet
from tests.world.stand_ins.objectstores import (
    GcsStore,
    S3Store,
    dataset_files,
    s3_store,
    tree,
)


async def test_s3_and_gcs_loads_succeed_and_release_gated_pods(
    kube_client: client.ApiClient,
    core: client.CoreV1Api,
    kubelet: FakeKubelet,
    s3: S3Store,
    gcs: GcsStore,
    controllers: list[DatasetController],
) -> None:
    files = dataset_files(files=300, large_bytes=20 * 1024 * 1024)
    s3.put("imagenet-public", files, prefix="train/", public=True)
    gcs.put("coco-public", files, prefix="2017/")
    create_gated_pod(core, "early-reader", "imagenet")
    await start(controllers, kube_client, make_config(s3.endpoint, gcs.endpoint))
    imagenet = create_pvc(core, "imagenet", "s3://imagenet-public/train")
    create_pvc(core, "coco", "gs://coco-public/2017")

    pvc = await wait_phase(core, "imagenet", "Succeeded")
    await wait_phase(core, "coco", "Succeeded")
    assert tree(kubelet.pvc_dir(NS, "imagenet")) == files
    assert tree(kubelet.pvc_dir(NS, "coco")) == files

    annotations = pvc["metadata"]["annotations"]
    assert annotations[f"{PREFIX}data-load-files"] == str(len(files))
    assert annotations[f"{PREFIX}data-load-bytes"] == str(sum(map(len, files.values())))
    assert float(annotations[f"{PREFIX}data-load-duration-seconds"]) > 0
    job_name = loader_job_name(
        "imagenet", imagenet["metadata"]["uid"], "s3://imagenet-public/train"
    )
    assert annotations[f"{PREFIX}data-load-job"] == job_name
    [condition] = [c for c in pvc["status"]["conditions"] if c["type"] == "Loading"]
    assert condition["status"] == "False" and condition["reason"] == "Succeeded"
    assert condition["lastTransitionTime"]
    assert sorted(j["metadata"]["name"] for j in jobs(kube_client)) == sorted(
        [
            job_name,
            loader_job_name(
                "coco", read_pvc(core, "coco")["metadata"]["uid"], "gs://coco-public/2017"
            ),
        ]
    )
    reasons = await eventually(  # the Event follows the status write
        lambda: (
            (r := [e["reason"] for e in events_for(core, "imagenet")])
            and "LoadSucceeded" in r
            and r
        ),
        what="the LoadSucceeded event",
    )
    assert reasons.count("LoadStarted") == 1 and reasons.count("LoadSucceeded") == 1
    # On a real cluster other components speak of the PVC too (the PV controller); ours say who
    # they are.
    ours = [e for e in events_for(core, "imagenet") if e["reason"].startswith("Load")]
    assert ours and all(e["source"]["component"] == "gpu-admission" for e in ours), [
        (e["reason"], e["source"]) for e in events_for(core, "imagenet")
    ]

    def released() -> bool:
        pod = read_pod(core, "early-reader")
        return not pod["spec"].get("schedulingGates") and f"{PREFIX}data-wait" not in (
            pod["metadata"].get("labels") or {}
        )

    await eventually(released, what="the gate to be removed")


async def test_private_bucket_with_keys_succeeds_and_wrong_keys_fail_without_endless_retries(
    kube_client: client.ApiClient,
    core: client.CoreV1Api,
    kubelet: FakeKubelet,
    controllers: list[DatasetController],
) -> None:
    with s3_store() as store:
        store.put("private-data", {"a/b.txt": b"private bytes", "c.txt": b"more"})
        keys = store.valid_keys()
        store.require_authentication()
        for name, secret in (("good-keys", keys[1]), ("bad-keys", "not-the-secret")):
            data = {
                "AWS_ACCESS_KEY_ID": keys[0],
                "AWS_SECRET_ACCESS_KEY": secret,
                "AWS_REGION": "us-east-1",
            }
            core.create_namespaced_secret(
                NS,
                {
                    "metadata": {"name": name},
                    "type": "aws-credential",
                    "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
                },
                _preload_content=False,
            )
        await start(controllers, kube_client, make_config(store.endpoint))
        create_pvc(core, "private", "s3://private-data", credentials="good-keys")
        create_pvc(core, "wrong", "s3://private-data", credentials="bad-keys")
        create_gated_pod(core, "waits-for-wrong", "wrong")

        await wait_phase(core, "private", "Succeeded")
        assert tree(kubelet.pvc_dir(NS, "private")) == {
            "a/b.txt": b"private bytes",
            "c.txt": b"more",
        }
        pvc = await wait_phase(core, "wrong", "Failed")
        [condition] = [c for c in pvc["status"]["conditions"] if c["type"] == "Loading"]
        assert condition["reason"] == "Failed"
        assert "rejected the credentials" in condition["message"]
        assert "not-the-secret" not in json.dumps(pvc)
        # The Event follows the status write that the phase came with.
        failed = await eventually(
            lambda: [e for e in events_for(core, "wrong") if e["reason"] == "LoadFailed"],
            what="the LoadFailed event",
        )
        assert len(failed) == 1 and failed[0]["type"] == "Warning"

        # Rejected credentials are permanent: one attempt (the podFailurePolicy fails the Job
        # at once, whatever the backoffLimit), no new Job, and the message says so.
        [job] = [
            j for j in jobs(kube_client) if j["metadata"]["ownerReferences"][0]["name"] == "wrong"
        ]
        assert job["status"]["failed"] == 1
        assert next(c for c in job["status"]["conditions"] if c["type"] == "Failed")["reason"] == (
            "PodFailurePolicy"
        )
        assert "so it was not retried" in condition["message"]
        assert (
            "kubectl annotate pvc wrong gpu-admission.io/data-load-retry=" in (condition["message"])
        )
        pod_events = await eventually(
            lambda: [e for e in events_for(core, "waits-for-wrong") if e["type"] == "Warning"],
            what="a warning on the waiting pod",
        )
        assert pod_events[0]["reason"] == "DatasetLoadFailed"
        assert read_pod(core, "waits-for-wrong")["spec"]["schedulingGates"] == [GATE]


async def test_missing_bucket_fails_with_a_useful_message(
    kube_client: client.ApiClient,
    core: client.CoreV1Api,
    kubelet: FakeKubelet,
    s3: S3Store,
    controllers: list[DatasetController],
) -> None:
    await start(controllers, kube_client, make_config(s3.endpoint, backoff_limit=0))
    create_pvc(core, "nothing", "s3://no-such-bucket/x")
    pvc = await wait_phase(core, "nothing", "Failed")
    [condition] = [c for c in pvc["status"]["conditions"] if c["type"] == "Loading"]
    assert "the source was not found" in condition["message"]
    assert len(jobs(kube_client)) == 1


async def test_concurrent_load_limit_keeps_extra_pvcs_pending(
    kube_client: client.ApiClient,
    core: client.CoreV1Api,
    s3: S3Store,
    controllers: list[DatasetController],
) -> None:
    await start(controllers, kube_client, make_config(s3.endpoint, max_concurrent_loads=2))
    for i in range(4):
        create_pvc(core, f"queued-{i}", f"s3://bucket-{i}")
    await eventually(lambda: len(jobs(kube_client)) == 2, what="two Jobs")

    def waiting() -> list[dict[str, Any]] | None:
        found = [
            p
            for i in range(4)
            if (p := read_pvc(core, f"queued-{i}"))["status"].get("conditions")
            and p["status"]["conditions"][0]["reason"] == "WaitingForCapacity"
            # The phase annotation is a separate write after the condition: wait for both.
            and (p["metadata"].get("annotations") or {}).get(f"{PREFIX}data-load-phase")
        ]
        # Both extra PVCs, not just the first the controller got to.
        return found if len(found) == 2 else None

    pending = await eventually(waiting, what="two PVCs waiting for capacity")
    assert all(
        p["metadata"]["annotations"][f"{PREFIX}data-load-phase"] == "Pending" for p in pending
    )
    assert len(jobs(kube_client)) == 2
