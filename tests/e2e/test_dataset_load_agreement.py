"""The webhook and the controller agree on a dataset PVC's current load, at every step of its
life: generated PVCs of every source scheme, with or without a digest, file patterns, a retry
value, shards and credentials, loaded, failed, edited after a load, with the controller's status
writes arriving late.

Each side reads the PVC as it does in a cluster: the webhook from its informer's record
(`gpu_admission.cluster.view.pvc_record`, which keeps only the prefixed annotations) and the
dataset gate's policy over a consumer pod; the controller from its informer's record
(`controllers.dataset.records.pvc_record`) and its gate keeper (`WaitingPods`), which releases or
warns a waiting pod. The controller's writes are its own: `controllers.dataset.status`.
"""

from __future__ import annotations

import asyncio
import copy
from dataclasses import dataclass, field
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from controllers.dataset.gates import WaitingPods
from controllers.dataset.records import PvcRecord, WaitingPod
from controllers.dataset.records import pvc_record as controller_record
from controllers.dataset.status import annotations as status_annotations
from gpu_admission.cluster.view import StaticClusterView
from gpu_admission.cluster.view import pvc_record as webhook_record
from gpu_admission.config.model import Config
from gpu_admission.names import PHASE_FAILED, PHASE_LOADING, PHASE_PENDING, PHASE_SUCCEEDED
from tests.webhooks.policy_helpers import make_request
from webhooks.core.patch import Patch
from webhooks.policies.dataset_gate import gate_for_datasets, load_of

CONFIG = Config()
NAMES = CONFIG.names
NS = "ml"
SOURCES = [
    "s3://ml-datasets/imagenet/train",
    "gs://coco-public/2017",
    "az://corpus/shards",
    "https://files.example.org/v1/model.safetensors",
    "https://files.example.org/sets/coco/",
    "hf://acme/tiny-llm",
    "hf://acme/tiny-llm@" + "a" * 40,
    "hf://datasets/acme/web-text@main",
]
DIGESTS = [None, "ab" * 32, "AB" * 32, " " + "cd" * 32]
PATTERNS = [None, "*.json", "data/*, *.md", " ", "a,b,a"]
RETRIES = [None, "1", "2026-11-27", " 1 "]
CREDENTIALS = [None, "team-keys", " team-keys "]
SHARDS = [None, "1", "4", "x"]


def pvc_object(name: str, uid: str, annotations: dict[str, str]) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {
            "name": name,
            "namespace": NS,
            "uid": uid,
            "labels": {NAMES.data_load_label: "true"},
            "annotations": dict(annotations),
        },
        "spec": {"accessModes": ["ReadWriteMany"], "resources": {"requests": {"storage": "1Gi"}}},
    }


def set_annotation(obj: dict[str, Any], key: str, value: str | None) -> None:
    annotations = obj["metadata"]["annotations"]
    if value is None:
        annotations.pop(key, None)
    else:
        annotations[key] = value


# -- what each side concludes ------------------------------------------------------------------


def consumer(claim: str, pinned: bool) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "python:3.12"}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}],
    }
    if pinned:
        spec["nodeName"] = "gpu-7"
    return {"metadata": {"name": "reader", "namespace": NS}, "spec": spec}


@dataclass(frozen=True)
class WebhookSays:
    gated: bool
    warned: bool
    pinned_refused: bool


def webhook_says(obj: dict[str, Any]) -> tuple[Any, WebhookSays]:
    info = webhook_record(NAMES.prefix)(copy.deepcopy(obj))
    view = StaticClusterView(pvcs=[info])
    claim = info.name

    def admit(pinned: bool) -> tuple[Patch, Any]:
        request = make_request(consumer(claim, pinned), namespace=NS)
        patch = Patch(request.object)
        return patch, gate_for_datasets(request, patch, view, NAMES)

    patch, verdict = admit(pinned=False)
    assert verdict is None
    gated = bool(patch.obj["spec"].get("schedulingGates"))
    _, pinned = admit(pinned=True)
    says = WebhookSays(gated, bool(patch.warnings), pinned is not None and not pinned.allowed)
    return load_of(info, NAMES), says


class Cached:
    """An informer's cache, as WaitingPods reads it."""

    def __init__(self, records: dict[str, Any]) -> None:
        self.records = records

    def get(self, key: str) -> Any:
        return self.records.get(key)

    def values(self) -> list[Any]:
        return list(self.records.values())


@dataclass
class ApiCalls:
    events: list[str] = field(default_factory=list)
    released: list[str] = field(default_factory=list)

    async def event(self, ref: dict[str, Any], kind: str, reason: str, message: str) -> None:
        self.events.append(reason)

    async def patch_pod(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> None:
        self.released.append(name)


@dataclass(frozen=True)
class ControllerSays:
    released: bool
    warned: bool


def controller_says(obj: dict[str, Any]) -> tuple[PvcRecord, ControllerSays]:
    record = controller_record(copy.deepcopy(obj), NAMES, 1, 8)
    assert record is not None
    pod = WaitingPod(NS, "reader", "pod-uid", (record.name,), (NAMES.data_load_gate,))
    api = ApiCalls()
    pvcs = Cached({record.key: record})
    keeper = WaitingPods(Cached({pod.key: pod}), pvcs, api, NAMES)  # type: ignore[arg-type]
    asyncio.run(keeper.reconcile(pod.key))
    return record, ControllerSays(bool(api.released), "DatasetLoadFailed" in api.events)


def assert_agreement(obj: dict[str, Any]) -> None:
    webhook_load, webhook = webhook_says(obj)
    record, controller = controller_says(obj)
    assert webhook_load == record.load, "the two sides read another load from the same PVC"
    loaded = record.loaded
    assert webhook.gated == (not loaded) == (not controller.released)
    assert webhook.pinned_refused == (not loaded)
    assert webhook.warned == controller.warned == record.load.failed


# -- the life of a PVC ------------------------------------------------------------------------

annotation_values = {
    NAMES.data_source: st.sampled_from(SOURCES),
    NAMES.data_sha256: st.sampled_from(DIGESTS),
    NAMES.data_include: st.sampled_from(PATTERNS),
    NAMES.data_load_retry: st.sampled_from(RETRIES),
    NAMES.data_credentials: st.sampled_from(CREDENTIALS),
    NAMES.data_load_parallelism: st.sampled_from(SHARDS),
}
edit = st.one_of(
    *(st.tuples(st.just(key), values) for key, values in annotation_values.items())
).map(lambda change: ("edit", *change))
controller_write = st.tuples(
    st.just("write"),
    st.sampled_from([PHASE_PENDING, PHASE_LOADING, PHASE_SUCCEEDED, PHASE_FAILED]),
    st.booleans(),  # held back: it lands after the next edit, naming the Job it was made for
)
steps = st.lists(st.one_of(edit, controller_write), min_size=1, max_size=12)


@st.composite
def new_pvc(draw: st.DrawFn) -> dict[str, Any]:
    name = draw(st.sampled_from(["weights", "data.set.v1", "x" * 70]))
    annotations = {NAMES.data_source: draw(annotation_values[NAMES.data_source])}
    for key, values in annotation_values.items():
        if key != NAMES.data_source and (value := draw(values)) is not None:
            annotations[key] = value
    return pvc_object(name, draw(st.sampled_from(["uid-1", "uid-2"])), annotations)


@settings(max_examples=300, deadline=None)
@given(pvc=new_pvc(), life=steps)
def test_the_webhook_and_the_controller_agree_on_the_current_load(
    pvc: dict[str, Any], life: list[tuple[Any, ...]]
) -> None:
    assert_agreement(pvc)
    held: list[dict[str, str | None]] = []
    for step in life:
        if step[0] == "edit":
            _, key, value = step
            set_annotation(pvc, key, value)
            for late in held:  # a write made before the edit lands after it
                for name, written in late.items():
                    set_annotation(pvc, name, written)
            held.clear()
        else:
            _, phase, late = step
            record = controller_record(copy.deepcopy(pvc), NAMES, 1, 8)
            assert record is not None
            summary = {"files": 3, "bytes": 10} if phase == PHASE_SUCCEEDED else None
            written = status_annotations(NAMES, phase, record.current_job, summary)
            if late:
                held.append(written)
            else:
                for name, value in written.items():
                    set_annotation(pvc, name, value)
        assert_agreement(pvc)
