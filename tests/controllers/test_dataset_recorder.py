"""LoadRecorder: one status write per change, even when the informer lags behind the write."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any, cast

from controllers.dataset import recorder as recorder_module
from controllers.dataset.decide import Plan
from controllers.dataset.metrics import DatasetMetrics
from controllers.dataset.recorder import LoadRecorder
from controllers.dataset.records import Condition, LoaderPod, PvcRecord
from controllers.dataset.writes import ApiWriter
from gpu_admission.cluster.informer import Informer
from gpu_admission.config import Config
from gpu_admission.metrics import Metrics

PVC = PvcRecord("ml", "imagenet", "uid-1", "s3://data-1/x", None, False, None, None)
LOADING = Plan(phase="Loading", reason="JobCreated", message="loading with Job x")


class RecordingWriter:
    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []

    async def patch_pvc_status(self, namespace: str, name: str, patch: dict[str, Any]) -> bool:
        self.patches.append(patch)
        return True

    async def event(self, *args: Any) -> None:
        pass


def make_recorder() -> tuple[LoadRecorder, RecordingWriter]:
    writer = RecordingWriter()
    recorder = LoadRecorder(
        cast(ApiWriter, writer),
        Config().names,
        DatasetMetrics(Metrics(process_metrics=False)),
        cast(Informer[LoaderPod], None),
        3600,
        lambda pvc, delay: None,
    )
    return recorder, writer


def test_a_reconcile_before_the_informer_catches_up_writes_nothing_again() -> None:
    recorder, writer = make_recorder()
    asyncio.run(recorder.record(PVC, LOADING))
    asyncio.run(recorder.record(PVC, LOADING))  # the Job's event came before the PVC's
    assert len(writer.patches) == 1


def test_a_new_change_or_a_changed_pvc_is_written() -> None:
    recorder, writer = make_recorder()
    asyncio.run(recorder.record(PVC, LOADING))
    asyncio.run(recorder.record(PVC, replace(LOADING, reason="Loading")))
    assert len(writer.patches) == 2
    # Someone else changed the PVC (here: took the condition away) after our write: write again.
    other = replace(PVC, condition=Condition("False", "Edited", "by hand", "T0"))
    asyncio.run(recorder.record(other, LOADING))
    assert len(writer.patches) == 3


def test_an_old_write_is_not_trusted(monkeypatch: Any) -> None:
    recorder, writer = make_recorder()
    asyncio.run(recorder.record(PVC, LOADING))
    monkeypatch.setattr(recorder_module, "ECHO_SECONDS", -1.0)
    asyncio.run(recorder.record(PVC, LOADING))
    assert len(writer.patches) == 2


def test_a_deleted_pvc_is_forgotten() -> None:
    recorder, writer = make_recorder()
    asyncio.run(recorder.record(PVC, LOADING))
    recorder.forget(PVC.key)
    asyncio.run(recorder.record(PVC, LOADING))
    assert len(writer.patches) == 2
