"""LoadSlots: loader Job creates overlap, and a create in flight holds its slot."""

from __future__ import annotations

import asyncio
from typing import Any, cast

import pytest

from controllers.dataset.decide import REASON_WAITING_FOR_CAPACITY, Plan
from controllers.dataset.metrics import DatasetMetrics
from controllers.dataset.records import JobRecord, PvcRecord
from controllers.dataset.slots import LoadSlots
from controllers.writes.dataset import ApiWriter
from gpu_admission.cluster.informer import Informer
from gpu_admission.config.model import Config
from gpu_admission.process.metrics import Metrics
from tests.controllers.pvc_records import dataset_pvc

PLAN = Plan(phase="Pending", reason="JobCreated", message="loading", create_job=True)


def pvc(name: str) -> PvcRecord:
    return dataset_pvc(name, f"s3://data/{name}")


class HeldCreates:
    """Job creates that stay in flight until the test lets them answer."""

    def __init__(self) -> None:
        self.in_flight = 0
        self.most_in_flight = 0
        self.release = asyncio.Event()
        self.fail = False

    async def create_job(self, namespace: str, body: dict[str, Any]) -> bool:
        self.in_flight += 1
        self.most_in_flight = max(self.most_in_flight, self.in_flight)
        try:
            await self.release.wait()
            if self.fail:
                raise RuntimeError("the API server went away")
            return True
        finally:
            self.in_flight -= 1


def slots_with(api: HeldCreates, max_loads: int) -> LoadSlots:
    config = Config.model_validate({"dataset": {"max_concurrent_loads": max_loads}})
    metrics = DatasetMetrics(Metrics(process_metrics=False))
    no_jobs = cast(Informer[JobRecord], {})  # the informer has seen no Job yet
    slots = LoadSlots(cast(ApiWriter, api), config, metrics, no_jobs)
    return slots


async def until(condition: Any, turns: int = 1000) -> None:
    """Yield to the launches until `condition` holds (no time passes in these tests)."""
    for _ in range(turns):
        if condition():
            return
        await asyncio.sleep(0)
    raise AssertionError("the launches never got there")


def test_creates_for_different_pvcs_overlap() -> None:
    async def run() -> None:
        api = HeldCreates()
        slots = slots_with(api, max_loads=10)
        launches = [asyncio.create_task(slots.launch(pvc(n), PLAN)) for n in "abc"]
        await until(lambda: api.in_flight == 3)  # all three sent before any answered
        api.release.set()
        assert [created for _, created in await asyncio.gather(*launches)] == [True] * 3
        assert slots.running() == 3  # counted until the informer shows them

    asyncio.run(run())


def test_a_create_in_flight_holds_its_slot() -> None:
    async def run() -> None:
        api = HeldCreates()
        slots = slots_with(api, max_loads=1)
        first = asyncio.create_task(slots.launch(pvc("a"), PLAN))
        await until(lambda: api.in_flight == 1)
        plan, created = await slots.launch(pvc("b"), PLAN)
        assert not created and plan.reason == REASON_WAITING_FOR_CAPACITY
        api.release.set()
        assert (await first)[1] is True

    asyncio.run(run())


def test_a_failed_create_gives_its_slot_back() -> None:
    async def run() -> None:
        api = HeldCreates()
        api.fail = True
        api.release.set()
        slots = slots_with(api, max_loads=1)
        with pytest.raises(RuntimeError):
            await slots.launch(pvc("a"), PLAN)
        assert slots.running() == 0
        api.fail = False
        assert (await slots.launch(pvc("b"), PLAN))[1] is True

    asyncio.run(run())
