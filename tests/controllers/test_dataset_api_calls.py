"""What the dataset controller asks of the API server: the fewest calls per PVC, no reads before
writes, and work for a namespace being deleted dropped instead of retried."""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path

import pytest
from kubernetes import client

from controllers.dataset import DatasetController
from controllers.dataset.reconciler import PVC
from tests.e2e.datasets import NS, PREFIX, create_pvc, eventually, jobs, make_config, start
from tests.e2e.real_node import node_agent
from tests.world.namespaces import namespace_ready
from tests.world.stand_ins.objectstores import S3Store, dataset_files, s3_store

pytestmark = pytest.mark.e2e  # its loads run real loaders (from the image where it runs)

PVCS = r"/namespaces/ml/persistentvolumeclaims"


def event_reasons(core: client.CoreV1Api, name: str) -> list[str]:
    """The reasons of the controller's events about object `name` (read after the counting)."""
    listed = core.list_namespaced_event(NS, field_selector=f"involvedObject.name={name}").items
    return sorted(e.reason for e in listed if e.reporting_component == "gpu-admission")


@pytest.fixture
def core(kube_client: client.ApiClient) -> client.CoreV1Api:
    for name in (NS, "gpu-admission", "doomed"):
        namespace_ready(kube_client, name)
    return client.CoreV1Api(kube_client)


@pytest.fixture(scope="module")
def s3() -> S3Store:
    with s3_store() as store:
        yield store


@pytest.fixture
async def controllers(kube_client: client.ApiClient):
    started: list[DatasetController] = []
    yield started
    for controller in started:
        await controller.stop()


async def test_a_load_costs_one_job_status_writes_and_two_events_and_no_reads(
    kube_api, kube_client, core, s3, tmp_path: Path, controllers
) -> None:
    s3.put("counted", dataset_files(files=5, large_bytes=0), public=True)
    controller = await start(controllers, kube_client, make_config(s3.endpoint))
    listed: list[str] = []
    real_list = controller.api.list_job_pods

    async def list_job_pods(namespace: str, job: str, label: str) -> list:
        listed.append(job)
        return await real_list(namespace, job, label)

    controller.api.list_job_pods = list_job_pods  # type: ignore[method-assign]
    with node_agent(kube_client, tmp_path / "pvcs"):
        kube_api.faults.reset_counts()
        began = time.monotonic()
        create_pvc(core, "counted", "s3://counted")
        # Watched through the controller's own cache: the test makes no reads of its own.
        await asyncio.wait_for(controller.leading.wait(), 30)
        assert controller.reconciler is not None
        pvcs = controller.reconciler.pvcs
        await eventually(
            lambda: (pvc := pvcs.get(f"{NS}/counted")) and pvc.phase == "Succeeded",
            what="the load to succeed",
        )
        elapsed = time.monotonic() - began
        events = await eventually(
            lambda: "LoadSucceeded" in event_reasons(core, "counted"),
            what="the LoadSucceeded event",
        )
        assert events
    count = kube_api.faults.request_count
    assert count("POST", r"/namespaces/ml/jobs$") == 1
    # Pending, Loading, Succeeded: each one status write with condition and annotations; and a
    # load that outlasts the loader's first stats tick gets at most one progress write per
    # progress interval (the controller's contract), however slow the machine.
    interval = controller.config.dataset.progress_interval_seconds
    progress_writes = 1 + int(elapsed // interval)
    writes = count("PATCH", rf"{PVCS}/counted/status$")
    assert 1 <= writes <= 3 + progress_writes, f"{writes} status writes in {elapsed:.1f} s"
    assert count("PATCH", rf"{PVCS}/counted$") == 0  # no separate annotation write
    assert count("GET", rf"{PVCS}/counted$") == 0  # nothing read before writing
    # Events about this PVC alone: the shared API server may hold other tests' objects, which
    # this controller also reconciles (and may record events about) when it starts.
    assert event_reasons(core, "counted") == ["LoadStarted", "LoadSucceeded"]
    assert count("POST", r"/namespaces/ml/events$") >= 2  # sent as they happened, not batched
    # The summary came from the loader pod informer, not from a LIST per finished load.
    assert listed == []


async def test_a_terminating_namespace_is_dropped_and_does_not_hold_up_others(
    kube_api, kube_client, core, s3, controllers, caplog
) -> None:
    caplog.set_level(logging.INFO, logger="controllers.dataset.reconciler")
    # The namespace controller waits five seconds before it deletes anything: the PVCs stay.
    for i in range(30):
        create_pvc(core, f"d{i}", f"s3://doomed-{i}", namespace="doomed")
    core.delete_namespace("doomed")  # terminating: nothing new may be created in it
    create_pvc(core, "wanted", "s3://wanted-data")
    kube_api.faults.reset_counts()
    controller = await start(
        controllers, kube_client, make_config(s3.endpoint, max_concurrent_loads=100)
    )
    await eventually(
        lambda: any(j["metadata"]["name"].startswith("dl-wanted-") for j in jobs(kube_client)),
        what="the other namespace's Job",
    )
    # Every doomed PVC handled for good: none waiting, in a reconcile, or due for a retry (a
    # retry is on its timer before its reconcile ends, so none can be missed in between).
    await asyncio.wait_for(controller.leading.wait(), 30)
    term = controller.reconciler
    assert term is not None
    await eventually(
        lambda: not any(term.queue.pending((PVC, f"doomed/d{i}")) for i in range(30)),
        what="the doomed namespace's PVCs to be dropped",
    )
    attempts = kube_api.faults.request_count("POST", r"/namespaces/doomed/jobs$")
    assert attempts <= 30  # each tried at most once, never retried
    said = [r for r in caplog.records if "namespace doomed is being deleted" in r.getMessage()]
    assert len(said) == 1


async def test_a_slow_status_write_does_not_hold_up_the_next_pvcs_job(
    kube_api, kube_client, core, s3, controllers
) -> None:
    # One worker; the first PVC's "Job created" status write reaches the server 10 s late.
    kube_api.faults.delay("PATCH", rf"{PVCS}/held-first/status$", 10.0, times=1)
    controller = await start(
        controllers, kube_client, make_config(s3.endpoint, reconcile_workers=1)
    )
    await asyncio.wait_for(controller.leading.wait(), 30)

    def job_of(pvc: str) -> bool:
        return any(j["metadata"]["name"].startswith(f"dl-{pvc}-") for j in jobs(kube_client))

    create_pvc(core, "held-first", "s3://held-first")
    await eventually(lambda: job_of("held-first"), what="the first PVC's Job")
    create_pvc(core, "held-second", "s3://held-second")
    await eventually(lambda: job_of("held-second"), what="the second PVC's Job")
    # The second Job was made while the first PVC's status write was still on its way.
    first = core.read_namespaced_persistent_volume_claim("held-first", NS)
    assert f"{PREFIX}data-load-phase" not in (first.metadata.annotations or {})

    # The held write lands, and only then does the PVC move on (its loader pod has no node to
    # run on): the late "Job created" never overwrites what came after it.
    def phase_and_message() -> tuple[str, str]:
        pvc = core.read_namespaced_persistent_volume_claim("held-first", NS)
        loading = [c for c in pvc.status.conditions or [] if c.type == "Loading"]
        phase = (pvc.metadata.annotations or {}).get(f"{PREFIX}data-load-phase", "")
        return phase, (loading[0].message if loading else "")

    await eventually(
        lambda: "cannot be scheduled" in phase_and_message()[1],
        what="the first PVC to say its loader pod cannot be scheduled",
    )
    assert kube_api.faults.request_count("PATCH", rf"{PVCS}/held-first/status$") == 2
    assert phase_and_message()[0] == "Loading"
