"""LoadRecorder: one status write per change, even when the informer lags behind the write."""

from __future__ import annotations

import asyncio
from dataclasses import replace
from typing import Any, cast

from controllers.dataset import recorder as recorder_module
from controllers.dataset.decide import Plan
from controllers.dataset.metrics import DatasetMetrics
from controllers.dataset.recorder import LoadRecorder
from controllers.dataset.records import Condition, LoaderPod
from controllers.writes.dataset import ApiWriter
from gpu_admission.cluster.informer import Informer
from gpu_admission.config.model import Config
from gpu_admission.process.metrics import Metrics
from tests.controllers.pvc_records import changed, dataset_pvc

PVC = dataset_pvc(resource_version="1")
LOADING = Plan(phase="Loading", reason="JobCreated", message="loading with Job x")
SUCCEEDED = Plan(phase="Succeeded", reason="Loaded", message="loaded")


class RecordingWriter:
    """Answers each status write with the next resourceVersion, as the API server does."""

    def __init__(self) -> None:
        self.patches: list[dict[str, Any]] = []
        self.events: list[str] = []
        self.version = 1

    async def patch_pvc_status(self, namespace: str, name: str, patch: dict[str, Any]) -> str:
        self.patches.append(patch)
        self.version += 1
        return str(self.version)

    async def event(self, ref: Any, kind: str, reason: str, message: str) -> None:
        self.events.append(reason)


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
    other = changed(
        PVC, condition=Condition("False", "Edited", "by hand", "T0"), resource_version="9"
    )
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


def test_an_earlier_writes_late_echo_neither_writes_nor_announces_the_end_again() -> None:
    """A progress write's echo that reaches the informer after the final write still shows the
    load running: it is our own past, not a change, so the end is written and announced once."""
    recorder, writer = make_recorder()
    loading = changed(PVC, phase="Loading", job=PVC.current_job)
    progressed = replace(LOADING, reason="Loading", message="copying")
    asyncio.run(recorder.record(loading, progressed))  # the progress write: version 2
    asyncio.run(recorder.record(loading, SUCCEEDED))  # the end, on the view before it: version 3
    echo = changed(loading, progress_label="50pct", resource_version="2")
    asyncio.run(recorder.record(echo, SUCCEEDED))  # the progress write's echo
    assert len(writer.patches) == 2
    assert writer.events == ["LoadSucceeded"]
    # The final write's own echo shows the end: announced already, not again.
    done = changed(loading, phase="Succeeded", resource_version="3")
    asyncio.run(recorder.record(done, SUCCEEDED))
    assert writer.events == ["LoadSucceeded"]


def test_a_write_answered_without_a_version_is_not_taken_for_lag() -> None:
    recorder, writer = make_recorder()
    writer.version = -(10**9)  # answers carry versions the cache will never hold
    unversioned = changed(PVC, resource_version="")
    asyncio.run(recorder.record(unversioned, LOADING))
    asyncio.run(recorder.record(unversioned, LOADING))
    assert len(writer.patches) == 2  # written again rather than trusting a guess
