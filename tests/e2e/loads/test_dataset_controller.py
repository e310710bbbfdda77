"""The dataset controller's load limit on the real control plane (kube-apiserver, the real
scheduler and Job controller), with a setting of the controller's own that the test chooses
(`dataset.max_concurrent_loads`), so the controller runs in-process. There is no node: the
loader pods stay Pending, so the loads that started stay running while the test looks. The loads
themselves run on the real node, through the installed product: tests/install/researcher/.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client

from controllers.dataset import DatasetController
from tests.e2e.datasets import (
    PREFIX,
    create_pvc,
    eventually,
    jobs,
    make_config,
    read_pvc,
    start,
)
from tests.world.stand_ins.objectstores import (
    S3Store,
)


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
