"""The idle figures the controller acts on, read from Prometheus: the workloads the idle rule
names now, and whether one has stayed idle since its announcement. Figures that are missing or
old name nothing idle: an agent that stopped reporting, or rules no longer evaluated, never make
a workload idle (gpu_admission/gpus/idle_series.py)."""

from __future__ import annotations

from collections.abc import Mapping

from gpu_admission.gpus.idle_series import (
    FRESH_SECONDS,
    IDLE_RULE_GROUP,
    IDLE_SERIES,
    idle_throughout,
    range_step,
    workload_selector,
)
from gpu_admission.process.prometheus_api import (
    PrometheusError,
    query,
    query_range,
    rule_groups,
)

SETTING = "idle.prometheus_url"
TIMEOUT_SECONDS = 30.0


def _key(labels: Mapping[str, str]) -> tuple[str, str, str]:
    get = labels.get
    return (get("namespace", ""), get("workload_kind", ""), get("workload", ""))


def idle_now(url: str) -> dict[tuple[str, str, str], float]:
    """(namespace, workload kind, workload) -> GPUs held, for each workload idle now whose
    figure is fresh; PrometheusError when Prometheus cannot say, or has not loaded the rules
    (then nothing would ever be named, without a word)."""
    if IDLE_RULE_GROUP not in rule_groups(url, TIMEOUT_SECONDS, SETTING):
        raise PrometheusError(
            f"Prometheus at {url} has not loaded the rule group {IDLE_RULE_GROUP}: install the "
            "monitoring component (its PrometheusRule), and check that this Prometheus selects it"
        )
    held = {
        _key(labels): gpus for labels, gpus in query(url, IDLE_SERIES, TIMEOUT_SECONDS, SETTING)
    }
    age = query(url, f"time() - timestamp({IDLE_SERIES})", TIMEOUT_SECONDS, SETTING)
    fresh = {_key(labels) for labels, seconds in age if seconds <= FRESH_SECONDS}
    return {key: gpus for key, gpus in held.items() if key in fresh and gpus > 0}


def idle_since(url: str, key: tuple[str, str, str], since: float, now: float) -> bool:
    """Whether the workload has been idle without a break from `since` to `now`."""
    if now <= since:
        return True
    step = range_step(now - since, finest=1)
    matrix = query_range(url, workload_selector(*key), since, now, step, TIMEOUT_SECONDS, SETTING)
    points = [point for _, series in matrix for point in series]
    return idle_throughout(points, since, now, step)
