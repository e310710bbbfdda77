"""The idle check's memory across leaders and its failures (controllers/idle/checker.py): the
requests are recorded by a stand-in for the API, the figures set by the test (the journey on the
real API server and Prometheus is tests/real_api/test_idle_gpus.py)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Mapping
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from controllers.idle import checker as checker_module
from controllers.idle.checker import IdleChecker, IdleMetrics
from controllers.idle.targets import Kind
from gpu_admission.config.model import Config
from gpu_admission.process.metrics import Metrics
from gpu_admission.process.prometheus_api import PrometheusError

NOW = 1_800_000_000.0
KEY = ("ml", "Deployment", "nb")
ANNOUNCED = "gpu-admission.io/idle-gpus-announced"


class RecordedApi:
    """What the checker asked of the API server; a Deployment `ml/nb` with 2 replicas."""

    def __init__(self, annotations: dict[str, str] | None = None, refuse: int = 0) -> None:
        self.obj: dict[str, Any] = {
            "kind": "Deployment",
            "metadata": {
                "name": "nb",
                "namespace": "ml",
                "uid": "u1",
                "resourceVersion": "7",
                "annotations": dict(annotations or {}),
            },
            "spec": {"replicas": 2},
        }
        self.refuse = refuse  # a status the API server answers to a give-back
        self.patches: list[Mapping[str, Any]] = []
        self.events: list[tuple[str, str, str]] = []

    def read(self, kind: Kind, namespace: str, name: str) -> dict[str, Any] | None:
        return self.obj

    def namespace_labels(self, namespace: str) -> dict[str, str]:
        return {"gpu-admission.io/return-idle-gpus": "true"}

    def patch(self, kind: Kind, namespace: str, name: str, patch: Mapping[str, Any]) -> dict:
        if self.refuse and "spec" in patch:
            raise ApiException(status=self.refuse, reason="Forbidden")
        self.patches.append(patch)
        for key, value in (patch.get("metadata") or {}).get("annotations", {}).items():
            if value is None:
                self.obj["metadata"]["annotations"].pop(key, None)
            else:
                self.obj["metadata"]["annotations"][key] = value
        self.obj["spec"].update(patch.get("spec") or {})
        return self.obj

    def event(
        self, involved: Mapping[str, str], event_type: str, reason: str, message: str
    ) -> None:
        self.events.append((event_type, reason, message))


def _checker(
    monkeypatch: pytest.MonkeyPatch, api: RecordedApi, idle_all_along: bool = True
) -> IdleChecker:
    config = Config.model_validate({"idle": {"prometheus_url": "http://p:9090", "grace": "30m"}})
    leading = asyncio.Event()
    leading.set()
    made = IdleChecker(None, config, IdleMetrics(Metrics(process_metrics=False)), leading, "t")  # type: ignore[arg-type]
    made.api = api  # type: ignore[assignment]
    monkeypatch.setattr(checker_module.figures, "idle_now", lambda url: {KEY: 1.0})
    monkeypatch.setattr(
        checker_module.figures, "idle_since", lambda url, key, since, now: idle_all_along
    )
    return made


def test_a_new_leader_keeps_an_announcement_of_this_stretch(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = RecordedApi({ANNOUNCED: "2027-01-15T07:40:00Z"})  # 20 minutes before NOW
    checker = _checker(monkeypatch, api)
    checker.check(NOW)
    assert api.events == [] and api.patches == []  # announced already; its grace runs
    checker.check(NOW + 600)  # 30 minutes after the announcement
    (given,) = [p for p in api.patches if "spec" in p]
    assert given["spec"] == {"replicas": 0}
    assert [reason for _, reason, _ in api.events] == ["GPUsReturned"]


def test_an_announcement_left_by_an_earlier_stretch_is_made_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = RecordedApi({ANNOUNCED: "2027-01-14T07:00:00Z"})  # a day old; busy since
    checker = _checker(monkeypatch, api, idle_all_along=False)
    checker.check(NOW)
    assert [reason for _, reason, _ in api.events] == ["GPUIdle"]
    assert api.obj["metadata"]["annotations"][ANNOUNCED] == "2027-01-15T08:00:00Z"
    assert api.obj["spec"]["replicas"] == 2  # a new grace period, not an old one spent


def test_a_refused_give_back_is_said_once_and_fails_the_check(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = RecordedApi({ANNOUNCED: "2027-01-15T07:00:00Z"}, refuse=403)
    checker = _checker(monkeypatch, api)
    for _ in range(2):
        with pytest.raises(checker_module.IdleCheckIncomplete, match="answered 403"):
            checker.check(NOW)
    failed = [message for _, reason, message in api.events if reason == "GPUReturnFailed"]
    assert len(failed) == 1
    assert "Could not be scaled to zero: the API server answered 403" in failed[0]
    assert "manifests/components/idle-gpus" in failed[0]


async def test_without_prometheus_the_check_fails_and_nothing_changes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    api = RecordedApi()
    checker = _checker(monkeypatch, api)

    def unreachable(url: str) -> dict:
        raise PrometheusError("cannot query Prometheus at http://p:9090: refused")

    monkeypatch.setattr(checker_module.figures, "idle_now", unreachable)
    assert await checker.run_once() is False
    assert api.events == [] and api.patches == []
    assert checker.checks_done == 0


def test_a_stretch_that_ends_takes_its_announcement_away(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="gpu_admission.audit.idle")
    api = RecordedApi()
    checker = _checker(monkeypatch, api)
    checker.check(NOW)
    assert ANNOUNCED in api.obj["metadata"]["annotations"]
    monkeypatch.setattr(checker_module.figures, "idle_now", lambda url: {})  # it used its GPU
    checker.check(NOW + 60)
    assert ANNOUNCED not in api.obj["metadata"]["annotations"]
    assert checker.memory.announced == {}
    actions = [r.action for r in caplog.records if r.name == "gpu_admission.audit.idle"]  # type: ignore[attr-defined]
    assert actions == ["announced", "stretch ended"]


def test_a_prometheus_without_the_idle_rules_fails_the_check_saying_so(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the monitoring component's rules nothing would ever be named, without a word."""
    monkeypatch.setattr(checker_module.figures, "rule_groups", lambda url, timeout, setting: set())
    with pytest.raises(
        PrometheusError, match=r"has not loaded the rule group gpu-admission\.gpu-idle"
    ):
        checker_module.figures.idle_now("http://p:9090")


def test_the_idle_rule_group_is_the_one_the_monitoring_component_ships() -> None:
    from gpu_admission.gpus.idle_series import IDLE_RULE_GROUP, IDLE_SERIES
    from tests.manifests.monitoring_queries import rule_spec

    (group,) = [g for g in rule_spec()["groups"] if g["name"] == IDLE_RULE_GROUP]
    assert IDLE_SERIES in [rule.get("record") for rule in group["rules"]]
