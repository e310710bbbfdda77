"""What the idle check does about one workload, and what it says (controllers/idle/decide.py,
targets.py): pure, each rule of docs/idle-gpus.md."""

from __future__ import annotations

from typing import Any

import pytest

from controllers.idle.decide import (
    IdleWorkload,
    Seen,
    Step,
    announcement,
    decide,
    dry_run_message,
    gpu_hours_returned,
    returned_message,
    why_kept,
)
from controllers.idle.targets import (
    KINDS,
    NOTEBOOK,
    already_given_back,
    give_back_patch,
    managed_elsewhere,
    notebook_of,
    restore_command,
)
from gpu_admission.config.idle import IdleConfig
from gpu_admission.names import KUBEFLOW_STOP_ANNOTATION, Names

NAMES = Names()
OPTED_IN = {"gpu-admission.io/return-idle-gpus": "true"}
NOW = 1_800_000_000.0
CONFIG = IdleConfig(prometheus_url="http://prometheus:9090", grace="30m")


def _obj(kind: str, name: str = "nb", **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": "ml", "resourceVersion": "42", "uid": "u1"}
    meta.update(extra.pop("metadata", {}))
    return {"kind": kind, "metadata": meta, "spec": extra.pop("spec", {}), **extra}


def _seen(kind: str, obj: dict[str, Any] | None = None, ns: dict[str, str] = OPTED_IN) -> Seen:
    found = obj if obj is not None else _obj(kind, spec={"replicas": 2})
    return Seen(KINDS.get(kind), found, found, ns)


DEPLOYMENT = IdleWorkload("ml", "Deployment", "nb", 1.0)


def test_first_sight_is_announced_whatever_the_namespace() -> None:
    for ns in (OPTED_IN, {}):
        assert decide(None, _seen("Deployment", ns=ns), NOW, CONFIG, NAMES).step is Step.ANNOUNCE


def test_one_given_back_whose_pods_are_still_ending_is_not_announced_again() -> None:
    for seen in (
        _seen("Deployment", _obj("Deployment", spec={"replicas": 0})),
        _seen("Job", _obj("Job", spec={"suspend": True}), ns={}),
    ):
        assert decide(None, seen, NOW, CONFIG, NAMES).step is Step.KEEP


def test_an_announced_workload_waits_out_its_grace_then_is_given_back() -> None:
    seen = _seen("Deployment")
    waiting = decide(NOW - 1799, seen, NOW, CONFIG, NAMES)
    assert (waiting.step, waiting.due) == (Step.WAIT, NOW + 1)
    assert decide(NOW - 1800, seen, NOW, CONFIG, NAMES).step is Step.GIVE_BACK


@pytest.mark.parametrize(
    ("seen", "reason"),
    [
        (_seen("Deployment", ns={}), "not labelled gpu-admission.io/return-idle-gpus=true"),
        (
            _seen("Deployment", ns={"gpu-admission.io/return-idle-gpus": "yes"}),
            "not labelled gpu-admission.io/return-idle-gpus=true",
        ),
        (
            _seen(
                "Deployment",
                _obj(
                    "Deployment", metadata={"labels": {"gpu-admission.io/keep-idle-gpus": "true"}}
                ),
            ),
            "labelled gpu-admission.io/keep-idle-gpus=true",
        ),
        (_seen("Pod"), "only Deployments, StatefulSets, Jobs, JobSets and Kubeflow Notebooks"),
        (Seen(None, None, None, OPTED_IN), "only Deployments"),
        (Seen(KINDS["JobSet"], None, None, OPTED_IN), "could not be read"),
        (
            _seen(
                "Deployment",
                _obj(
                    "Deployment",
                    spec={"replicas": 1},
                    metadata={
                        "ownerReferences": [
                            {"kind": "InferenceService", "name": "llm", "controller": True}
                        ]
                    },
                ),
            ),
            "InferenceService/llm manages it",
        ),
        (_seen("Deployment", _obj("Deployment", spec={"replicas": 0})), "already scaled to zero"),
        (_seen("Job", _obj("Job", spec={"suspend": True})), "already suspended"),
    ],
)
def test_what_is_never_given_back(seen: Seen, reason: str) -> None:
    decision = decide(NOW - 7200, seen, NOW, CONFIG, NAMES)
    assert decision.step is Step.KEEP
    assert reason in decision.reason


def test_the_label_on_the_statefulset_under_a_notebook_keeps_the_notebook() -> None:
    stateful_set = _obj(
        "StatefulSet", metadata={"labels": {"gpu-admission.io/keep-idle-gpus": "true"}}
    )
    seen = Seen(NOTEBOOK, _obj("Notebook"), stateful_set, OPTED_IN)
    assert why_kept(seen, NAMES) == "it is labelled gpu-admission.io/keep-idle-gpus=true"


def test_a_cronjobs_job_is_suspended_an_operators_is_not() -> None:
    owned = {"ownerReferences": [{"kind": "CronJob", "name": "nightly", "controller": True}]}
    assert managed_elsewhere(KINDS["Job"], _obj("Job", metadata=owned)) is None
    raised = {"ownerReferences": [{"kind": "RayJob", "name": "r", "controller": True}]}
    assert managed_elsewhere(KINDS["Job"], _obj("Job", metadata=raised)) == "RayJob/r"


def test_dry_run_says_once_and_changes_nothing() -> None:
    dry = IdleConfig(prometheus_url="http://p:9090", grace=0, dry_run=True)
    seen = _seen("Deployment")
    assert decide(NOW, seen, NOW, dry, NAMES).step is Step.SAY_DRY_RUN
    assert decide(NOW, seen, NOW, dry, NAMES, said_dry_run=True).step is Step.KEEP


def test_the_announcement_says_what_will_happen_and_when() -> None:
    opted = announcement(DEPLOYMENT, _seen("Deployment"), NOW, CONFIG, NAMES)
    assert opted.startswith("Deployment nb holds 1 GPU it has not used for an hour")
    assert "it will be scaled to zero at 2027-01-15 08:30 UTC" in opted
    assert "label it gpu-admission.io/keep-idle-gpus=true" in opted
    plain = announcement(DEPLOYMENT, _seen("Deployment", ns={}), NOW, CONFIG, NAMES)
    assert "will be" not in plain and "Stop it or scale it down when done" in plain
    dry = IdleConfig(prometheus_url="http://p:9090", dry_run=True)
    said = announcement(DEPLOYMENT, _seen("Deployment"), NOW, dry, NAMES)
    assert "it would be scaled to zero at" in said and "dry run" in said
    shares = IdleWorkload("ml", "Pod", "p", 0.25)
    assert "holds 0.25 GPUs" in announcement(shares, _seen("Pod"), NOW, CONFIG, NAMES)
    assert "would be suspended now" in dry_run_message(DEPLOYMENT, KINDS["Job"]).lower()


def test_give_back_patches_by_kind() -> None:
    deployment = _obj("Deployment", spec={"replicas": 3})
    patch = give_back_patch(KINDS["Deployment"], deployment, "2027-01-15T08:00:00Z", NAMES)
    assert patch == {
        "metadata": {
            "resourceVersion": "42",
            "annotations": {
                "gpu-admission.io/idle-gpus-announced": None,
                "gpu-admission.io/replicas-before-idle": "3",
            },
        },
        "spec": {"replicas": 0},
    }
    job = give_back_patch(KINDS["JobSet"], _obj("JobSet"), "t", NAMES)
    assert job["spec"] == {"suspend": True}
    notebook = give_back_patch(NOTEBOOK, _obj("Notebook"), "2027-01-15T08:00:00Z", NAMES)
    assert notebook["metadata"]["annotations"][KUBEFLOW_STOP_ANNOTATION] == "2027-01-15T08:00:00Z"
    assert "spec" not in notebook
    assert already_given_back(
        NOTEBOOK, _obj("Notebook", metadata={"annotations": notebook["metadata"]["annotations"]})
    )


def test_each_kind_comes_back_with_one_command() -> None:
    scaled = _obj("StatefulSet", spec={"replicas": 2})
    assert restore_command(KINDS["StatefulSet"], "ml", "db", scaled) == (
        "kubectl -n ml scale statefulset/db --replicas=2"
    )
    assert restore_command(KINDS["Job"], "ml", "sweep", _obj("Job")) == (
        """kubectl -n ml patch job/sweep --type=merge -p '{"spec":{"suspend":false}}'"""
    )
    assert restore_command(NOTEBOOK, "ml", "nb", _obj("Notebook")) == (
        "kubectl -n ml annotate notebook/nb kubeflow-resource-stopped-"
    )
    message = returned_message(DEPLOYMENT, KINDS["Deployment"], NOW, "kubectl -n ml scale x")
    assert message.startswith("Scaled to zero: it held 1 GPU unused since about 2027-01-15 07:00")
    assert message.endswith("Bring it back with: kubectl -n ml scale x")


def test_a_notebooks_statefulset_leads_to_the_notebook() -> None:
    ref = {"apiVersion": "kubeflow.org/v1", "kind": "Notebook", "name": "nb", "controller": True}
    assert notebook_of(_obj("StatefulSet", metadata={"ownerReferences": [ref]})) == "nb"
    other = {**ref, "apiVersion": "example.com/v1"}
    assert notebook_of(_obj("StatefulSet", metadata={"ownerReferences": [other]})) is None
    assert notebook_of(_obj("StatefulSet")) is None


def test_gpu_hours_returned_count_the_window_before_the_announcement() -> None:
    # Half a GPU, announced 30 minutes ago after the rule's hour: 0.5 x 1.5 h.
    assert gpu_hours_returned(IdleWorkload("ml", "Pod", "p", 0.5), NOW - 1800, NOW) == 0.75
