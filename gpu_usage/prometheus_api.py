"""Instant queries against Prometheus's HTTP API (`/api/v1/query`), for `gpu-admission usage`.

Only vectors are read. A Prometheus that cannot be reached, answers with an error or with
something else than a vector is `PrometheusError`, with what to check.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping

TIMEOUT_SECONDS = 60.0


class PrometheusError(Exception):
    pass


def query(
    base_url: str, promql: str, timeout: float = TIMEOUT_SECONDS
) -> list[tuple[Mapping[str, str], float]]:
    url = f"{base_url.rstrip('/')}/api/v1/query?{urllib.parse.urlencode({'query': promql})}"
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
            f"cannot query Prometheus at {base_url}: {error}; check --prometheus (e.g. "
            "http://prometheus-operated.monitoring:9090, or a `kubectl port-forward` to it)"
        ) from error
    data = body.get("data") or {}
    if body.get("status") != "success" or data.get("resultType") != "vector":
        raise PrometheusError(f"Prometheus at {base_url} gave no vector for {promql!r}: {body}")
    out = []
    for sample in data.get("result") or []:
        value = float(sample["value"][1])
        if not math.isnan(value):
            out.append((sample.get("metric") or {}, value))
    return out
