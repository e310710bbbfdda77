"""What the controller does about one idle workload at one check, and what it says (pure).

Once per idle stretch the workload is announced: a Warning Event `GPUIdle` on it, and the time in
its `idle-gpus-announced` annotation (so a restarted or new leader announces it no second time).
In a namespace labelled `return-idle-gpus: "true"`, a workload that is still idle `grace` after its
announcement is given back (targets.py says how, by kind), unless it is labelled
`keep-idle-gpus: "true"`, is of a kind that is only named, or is managed by another controller.
With `dry_run`, what would be given back is said once, and nothing changes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any

from controllers.idle.targets import (
    Action,
    Kind,
    already_given_back,
    labels,
    managed_elsewhere,
)
from gpu_admission.config.idle import IdleConfig
from gpu_admission.gpus.idle_series import IDLE_WINDOW_SECONDS
from gpu_admission.names import Names


@dataclass(frozen=True)
class IdleWorkload:
    """A workload the idle rule names now, as its labels name it."""

    namespace: str
    kind: str  # the agent's workload_kind
    name: str
    gpus: float

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.namespace, self.kind, self.name)


class Step(StrEnum):
    ANNOUNCE = "announce"
    WAIT = "wait"  # announced; its grace runs
    GIVE_BACK = "give back"
    SAY_DRY_RUN = "say what would be given back"
    KEEP = "keep"  # announced, and not given back (the reason says why)


@dataclass(frozen=True)
class Decision:
    step: Step
    reason: str = ""  # why it is kept; for KEEP
    due: float | None = None  # when it is given back, if it will be


@dataclass(frozen=True)
class Seen:
    """What the check found of the workload's object and namespace."""

    kind: Kind | None  # None: a kind the controller does not know
    obj: Mapping[str, Any] | None  # the object acted on (a Notebook for its StatefulSet)
    named: Mapping[str, Any] | None  # the object the agent named (the StatefulSet), or obj
    namespace_labels: Mapping[str, str]


def why_kept(seen: Seen, names: Names) -> str | None:
    """Why the workload is not given back, or None if it will be (its grace permitting)."""
    if seen.namespace_labels.get(names.return_idle_gpus_label) != "true":
        return f"its namespace is not labelled {names.return_idle_gpus_label}=true"
    for obj in (seen.obj, seen.named):
        if labels(obj).get(names.keep_idle_gpus_label) == "true":
            return f"it is labelled {names.keep_idle_gpus_label}=true"
    if seen.kind is None or seen.kind.action is None:
        return "only Deployments, StatefulSets, Jobs, JobSets and Kubeflow Notebooks are given back"
    if seen.obj is None:
        return f"its {seen.kind.kind} could not be read (gone, or the kind is not served)"
    other = managed_elsewhere(seen.kind, seen.obj)
    if other is not None:
        return f"{other} manages it and would undo a change"
    if already_given_back(seen.kind, seen.obj):
        return f"it is already {seen.kind.action}"
    return None


def decide(
    announced_at: float | None,
    seen: Seen,
    now: float,
    config: IdleConfig,
    names: Names,
    said_dry_run: bool = False,
) -> Decision:
    """`announced_at`: this stretch's announcement, None if it has had none."""
    if seen.kind is not None and seen.obj is not None and already_given_back(seen.kind, seen.obj):
        # Scaled to zero, suspended or stopped, its pods still ending: nothing to ask of it.
        return Decision(Step.KEEP, f"it is already {seen.kind.action}")
    if announced_at is None:
        return Decision(Step.ANNOUNCE)
    kept = why_kept(seen, names)
    if kept is not None:
        return Decision(Step.KEEP, kept)
    due = announced_at + config.grace
    if now < due:
        return Decision(Step.WAIT, due=due)
    if config.dry_run:
        return Decision(Step.KEEP, "dry run") if said_dry_run else Decision(Step.SAY_DRY_RUN)
    return Decision(Step.GIVE_BACK, due=due)


def clock(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%d %H:%M UTC")


def rfc3339(seconds: float) -> str:
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _gpus(value: float) -> str:
    count = f"{value:g}"
    return f"{count} GPU" if value == 1 else f"{count} GPUs"


def _window() -> str:
    hours = IDLE_WINDOW_SECONDS / 3600
    return "an hour" if hours == 1 else f"{hours:g} hours"


def announcement(
    workload: IdleWorkload, seen: Seen, now: float, config: IdleConfig, names: Names
) -> str:
    """The GPUIdle Event's message: what was seen, and what will happen."""
    said = (
        f"{workload.kind} {workload.name} holds {_gpus(workload.gpus)} it has not used for "
        f"{_window()}: no kernel kept one busy 1 % of any two minutes, and its GPU memory did not "
        "change. "
    )
    kept = why_kept(seen, names)
    if kept is None and seen.kind is not None and seen.kind.action is not None:
        action = _action_words(seen.kind)
        when = clock(now + config.grace)
        if config.dry_run:
            return said + (
                f"Its namespace returns idle GPUs: it would be {action} at {when} (dry run: "
                "nothing will be changed)."
            )
        return said + (
            f"Its namespace returns idle GPUs: unless it uses them, it will be {action} at "
            f"{when}. To keep it, label it {names.keep_idle_gpus_label}=true."
        )
    return said + (
        "Stop it or scale it down when done, so that waiting work can have them "
        "(`gpu-admission usage --idle` lists idle workloads)."
    )


def _action_words(kind: Kind) -> str:
    if kind.action is Action.STOP:
        return "stopped (as Kubeflow stops an idle notebook)"
    return str(kind.action)


def returned_message(workload: IdleWorkload, kind: Kind, announced_at: float, restore: str) -> str:
    return (
        f"{str(kind.action).capitalize()}: it held {_gpus(workload.gpus)} unused since about "
        f"{clock(announced_at - IDLE_WINDOW_SECONDS)}, and did not use them in the grace period "
        f"announced at {clock(announced_at)}. Bring it back with: {restore}"
    )


def dry_run_message(workload: IdleWorkload, kind: Kind) -> str:
    return (
        f"Would be {_action_words(kind)} now: it still holds {_gpus(workload.gpus)} unused "
        "(dry run: nothing was changed)."
    )


def gpu_hours_returned(workload: IdleWorkload, announced_at: float, now: float) -> float:
    """What a give-back adds to gpu_admission_gpu_hours_returned_total: the GPUs it frees times
    the hours they had been held idle (the rule's window before the announcement, and since)."""
    return workload.gpus * (now - announced_at + IDLE_WINDOW_SECONDS) / 3600
