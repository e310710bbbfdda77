"""Leader election through a Lease in the real kube-apiserver: one leader; a clean stop hands
over."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
import time

import pytest
from kubernetes import client

from controllers.dataset import DatasetController
from controllers.leader import LeaderElector
from gpu_admission.config.model import Config
from tests.world.namespaces import namespace_ready

pytestmark = pytest.mark.e2e  # runs real processes or waits on real time: not in the fast tier

LEASE_SECONDS = 2.0


def elector(api: client.ApiClient, identity: str, log: list[str]) -> LeaderElector:
    async def started() -> None:
        log.append(f"{identity} started")

    async def stopped() -> None:
        log.append(f"{identity} stopped")

    return LeaderElector(
        api,
        namespace="gpu-admission",
        name="gpu-admission-controller",
        identity=identity,
        lease_duration=LEASE_SECONDS,
        renew_deadline=1.5,
        retry_period=0.1,
        on_started_leading=started,
        on_stopped_leading=stopped,
    )


async def wait_until(check, timeout: float) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.02)


def lease_spec(api: client.ApiClient) -> dict:  # type: ignore[type-arg]
    response = client.CoordinationV1Api(api).read_namespaced_lease(
        "gpu-admission-controller", "gpu-admission", _preload_content=False
    )
    return json.loads(response.data)["spec"]


def holder(api: client.ApiClient) -> str:
    return lease_spec(api).get("holderIdentity") or ""


def renewed_at(api: client.ApiClient) -> float:
    """The Lease's renewTime, as seconds since the epoch (the leader's clock: this machine's)."""
    stamp = lease_spec(api)["renewTime"]
    return dt.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(tzinfo=dt.UTC).timestamp()


async def leader_renews_for(api: client.ApiClient, seconds: float) -> None:
    """Until the leader has renewed its Lease for `seconds` more, from now: a contender that
    started before this was refused the Lease all that while (a standby acquires only a Lease
    whose renewals stopped for a lease's duration)."""
    since = await asyncio.to_thread(renewed_at, api)
    deadline = time.monotonic() + seconds * 3
    while await asyncio.to_thread(renewed_at, api) < since + seconds:
        assert time.monotonic() < deadline, "the leader stopped renewing its Lease"
        await asyncio.sleep(0.02)


async def test_one_leader_and_handover_on_stop(kube_client: client.ApiClient) -> None:
    namespace_ready(kube_client, "gpu-admission")
    log: list[str] = []
    a, b = elector(kube_client, "a", log), elector(kube_client, "b", log)
    a.start()
    await wait_until(lambda: a.is_leader, 5)
    b.start()
    # b keeps trying for longer than a lease but never leads while a renews.
    await leader_renews_for(kube_client, LEASE_SECONDS * 1.5)
    assert not b.is_leader and log == ["a started"]
    assert await asyncio.to_thread(holder, kube_client) == "a"
    stopped_at = time.monotonic()
    await a.stop()
    assert log[-1] == "a stopped"
    await wait_until(lambda: b.is_leader, LEASE_SECONDS)
    assert time.monotonic() - stopped_at < LEASE_SECONDS
    assert await asyncio.to_thread(holder, kube_client) == "b"
    await b.stop()
    assert await asyncio.to_thread(holder, kube_client) == ""


async def test_standby_takes_over_after_the_lease_expires_when_the_leader_dies(
    kube_client: client.ApiClient,
) -> None:
    namespace_ready(kube_client, "gpu-admission")
    log: list[str] = []
    a, b = elector(kube_client, "a", log), elector(kube_client, "b", log)
    a.start()
    await wait_until(lambda: a.is_leader, 5)
    b.start()
    assert a._task is not None
    a._task.cancel()  # dies: no renewal, no release
    died_at = time.monotonic()
    await wait_until(lambda: b.is_leader, LEASE_SECONDS * 3)
    assert time.monotonic() - died_at >= LEASE_SECONDS * 0.9
    await b.stop()


async def test_two_controllers_one_leads_then_hands_over(kube_client: client.ApiClient) -> None:
    namespace_ready(kube_client, "gpu-admission")
    config = Config.model_validate(
        {
            "leader_election": {
                "namespace": "gpu-admission",
                "lease_duration_seconds": LEASE_SECONDS,
                "renew_deadline_seconds": 1.5,
                "retry_period_seconds": 0.1,
            }
        }
    )
    first = DatasetController(kube_client, config, identity="first")
    second = DatasetController(kube_client, config, identity="second")
    await first.start()
    await asyncio.wait_for(first.leading.wait(), 10)
    await second.start()
    await leader_renews_for(kube_client, LEASE_SECONDS)  # second tries a whole lease long
    assert not second.leading.is_set()
    await first.stop()
    await asyncio.wait_for(second.leading.wait(), LEASE_SECONDS)
    await second.stop()


def test_a_replica_is_not_ready_before_its_lease_was_ever_read() -> None:
    elector = LeaderElector(
        client.ApiClient(),
        namespace="gpu-admission",
        name="gpu-admission-controller",
        identity="a",
        lease_duration=15,
        renew_deadline=10,
        retry_period=2,
        on_started_leading=_nothing,
        on_stopped_leading=_nothing,
    )
    assert elector.trouble() == ["lease gpu-admission/gpu-admission-controller: not read yet"]


async def _nothing() -> None:
    return None
