"""Queries against Prometheus's HTTP API (`/api/v1/query`, `/api/v1/query_range`), for
`gpu-admission usage` and the controller's idle-GPU check.

Only vectors (instant) and matrices (range) are read. A Prometheus that cannot be reached, answers
with an error or with something else is `PrometheusError`, with what to check.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping

TIMEOUT_SECONDS = 60.0
CLI_SETTING = "--prometheus"  # what an error tells the user to check: the flag, or a setting


class PrometheusError(Exception):
    pass


def _get(
    base_url: str,
    endpoint: str,
    params: Mapping[str, str],
    promql: str,
    timeout: float,
    setting: str,
) -> Mapping:
    """The `data` of a successful answer; PrometheusError with what to check otherwise."""
    url = f"{base_url.rstrip('/')}/api/v1/{endpoint}?{urllib.parse.urlencode(params)}"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            body = json.loads(answer.read())
    except urllib.error.HTTPError as error:
        try:
            said = json.loads(error.read()).get("error", "")
        except (ValueError, OSError):
            said = ""
        raise PrometheusError(
            f"Prometheus at {base_url} answered {error.code} to {promql!r}: {said or error.reason}"
        ) from error
    except (urllib.error.URLError, OSError, ValueError) as error:
        raise PrometheusError(
            f"cannot query Prometheus at {base_url}: {error}; check {setting} (e.g. "
            "http://prometheus-operated.monitoring:9090, or a `kubectl port-forward` to it)"
        ) from error
    if body.get("status") != "success":
        raise PrometheusError(f"Prometheus at {base_url} did not answer {promql!r}: {body}")
    return body.get("data") or {}


def query(
    base_url: str, promql: str, timeout: float = TIMEOUT_SECONDS, setting: str = CLI_SETTING
) -> list[tuple[Mapping[str, str], float]]:
    data = _get(base_url, "query", {"query": promql}, promql, timeout, setting)
    if data.get("resultType") != "vector":
        raise PrometheusError(f"Prometheus at {base_url} gave no vector for {promql!r}: {data}")
    out = []
    for sample in data.get("result") or []:
        value = float(sample["value"][1])
        if not math.isnan(value):
            out.append((sample.get("metric") or {}, value))
    return out


Matrix = list[tuple[Mapping[str, str], list[tuple[float, float]]]]


def query_range(
    base_url: str,
    promql: str,
    start: float,
    end: float,
    step: int,
    timeout: float = TIMEOUT_SECONDS,
    setting: str = CLI_SETTING,
) -> Matrix:
    """`/api/v1/query_range`: each series' (unix time, value) points from `start` to `end`, one
    every `step` seconds where the series has one."""
    params = {"query": promql, "start": f"{start:.3f}", "end": f"{end:.3f}", "step": str(step)}
    data = _get(base_url, "query_range", params, promql, timeout, setting)
    if data.get("resultType") != "matrix":
        raise PrometheusError(f"Prometheus at {base_url} gave no matrix for {promql!r}: {data}")
    out: Matrix = []
    for series in data.get("result") or []:
        points = [(float(t), float(v)) for t, v in series.get("values") or []]
        out.append((series.get("metric") or {}, [(t, v) for t, v in points if not math.isnan(v)]))
    return out


def rule_groups(
    base_url: str, timeout: float = TIMEOUT_SECONDS, setting: str = CLI_SETTING
) -> set[str]:
    """`/api/v1/rules`: the names of the rule groups Prometheus has loaded."""
    data = _get(base_url, "rules", {"type": "record"}, "/api/v1/rules", timeout, setting)
    return {str(group.get("name", "")) for group in data.get("groups") or []}
