"""A transient failure end to end, on the real control plane (tests/e2e/real_node.py): the object
store briefly unreachable (a loopback port nothing listens on, then a proxy to the store on it)
recovers by itself through the loader Job's own retries. A permanent failure, which waits for
`data-load-retry`, runs on the real node: tests/install/loads/test_s3_loads.py."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from controllers.dataset import DatasetController
from tests.e2e.datasets import (
    NS,
    PREFIX,
    create_pvc,
    eventually,
    jobs,
    make_config,
    read_pvc,
    start,
    wait_phase,
)
from tests.support.ports import free_port
from tests.world.stand_ins.holding_proxy import HoldingProxy
from tests.world.stand_ins.objectstores import S3Store, dataset_files, tree

FILES = dataset_files(files=30, large_bytes=0)
# rclone gives up on a refused connection at once instead of retrying it for seconds.
FAST_FAILING = {"RCLONE_RETRIES": "1", "RCLONE_LOW_LEVEL_RETRIES": "1"}


def condition_message(core: client.CoreV1Api, name: str) -> str:
    conditions = read_pvc(core, name)["status"].get("conditions") or [{}]
    return str(conditions[0].get("message", ""))


def failed_pods(core: client.CoreV1Api) -> int:
    pods = core.list_namespaced_pod(NS, label_selector=f"{PREFIX}data-load=true").items
    return sum(1 for p in pods if p.status.phase == "Failed")


async def test_a_briefly_unreachable_store_recovers_by_itself(
    kube_client: client.ApiClient,
    core: client.CoreV1Api,
    kubelet: Any,
    s3: S3Store,
    controllers: list[DatasetController],
) -> None:
    s3.put("comes-back", FILES, public=True)
    port = free_port()  # nothing listens there yet: connections are refused
    config = make_config(f"http://127.0.0.1:{port}", backoff_limit=20)
    env = {**config.dataset.loader_env, **FAST_FAILING}
    config = config.model_copy(
        update={"dataset": config.dataset.model_copy(update={"loader_env": env})}
    )
    await start(controllers, kube_client, config)
    create_pvc(core, "flaky-store", "s3://comes-back")
    await eventually(lambda: failed_pods(core) >= 1, what="a first attempt to fail")
    retrying = await eventually(
        lambda: (
            "transient failure" in condition_message(core, "flaky-store")
            and read_pvc(core, "flaky-store")
        ),
        what="the PVC to say it is retrying",
    )
    assert retrying["metadata"]["annotations"][f"{PREFIX}data-load-phase"] == "Loading"
    proxy = HoldingProxy(s3.endpoint)  # the store comes back on the same address
    await proxy.start(port)
    try:
        await wait_phase(core, "flaky-store", "Succeeded")
    finally:
        await proxy.stop()
    assert tree(kubelet.pvc_dir(NS, "flaky-store")) == FILES
    [job] = jobs(kube_client)  # one load: the Job itself retried
    assert job["status"]["failed"] >= 1 and job["status"]["succeeded"] == 1
